"""The backend one operation's requests go through: it forwards each to the store's backend and
tallies it (requests by kind, bytes, dependent round trips) for the operation's span and metrics."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping

from ..._backends import (
    Forwarding,
    IncompleteUpload,
    KeysPage,
    LifecycleRule,
    ListPage,
    ObjectInfo,
    ObjectStore,
    StoredObject,
)
from ._names import DELETE, GET, HEAD, KINDS, LIST, PUT


class OperationBackend(Forwarding):
    """The backend one operation sees: forwards every request to the store's and tallies it.

    Thread-safe (an operation's reads run on the store's pool). ``round_trips`` is the longest
    chain of requests each sent after the previous one answered, kept online: a request sent
    when the deepest answered chain is d is at depth d + 1, and when it answers, the deepest
    answered chain becomes at least that. A request that failed (missing key, taken key, a
    failure the backend gave up on) was still sent, and counts."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.requests = [0] * len(KINDS)
        self.bytes_up = 0
        self.bytes_down = 0
        self.round_trips = 0
        self._lock = threading.Lock()

    def _sent(self) -> int:
        """The depth of a request being sent now (one read of an int, whole under any thread: no lock)."""
        return self.round_trips + 1

    def _answered(self, kind: int, depth: int, *, times: int = 1, up: int = 0, down: int = 0) -> None:
        """A request sent at ``depth`` answered (``times``: the requests of a batch, one after another)."""
        with self._lock:
            self.requests[kind] += times
            self.bytes_up += up
            self.bytes_down += down
            if times:
                self.round_trips = max(self.round_trips, depth + times - 1)

    def create(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None
    ) -> str:
        depth = self._sent()
        try:
            return self.inner.create(key, data, metadata=metadata, tags=tags)
        finally:
            self._answered(PUT, depth, up=len(data))

    def replace(
        self,
        key: str,
        data: bytes,
        *,
        etag: str,
        metadata: Mapping[str, str] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> str:
        depth = self._sent()
        try:
            return self.inner.replace(key, data, etag=etag, metadata=metadata, tags=tags)
        finally:
            self._answered(PUT, depth, up=len(data))

    def get(self, key: str, *, max_bytes: int | None = None) -> StoredObject:
        depth = self._sent()
        size = 0
        try:
            found = self.inner.get(key, max_bytes=max_bytes)
            size = len(found.data)
            return found
        finally:
            self._answered(GET, depth, down=size)

    def head(self, key: str) -> ObjectInfo:
        depth = self._sent()
        try:
            return self.inner.head(key)
        finally:
            self._answered(HEAD, depth)

    def list_page(self, prefix: str, *, start_after: str = "", max_keys: int = 1000, delimiter: str = "") -> ListPage:
        depth = self._sent()
        try:
            return self.inner.list_page(prefix, start_after=start_after, max_keys=max_keys, delimiter=delimiter)
        finally:
            self._answered(LIST, depth)

    def list_etags(self, prefix: str, *, start_after: str = "", max_keys: int = 1000) -> KeysPage:
        depth = self._sent()
        try:
            return self.inner.list_etags(prefix, start_after=start_after, max_keys=max_keys)
        finally:
            self._answered(LIST, depth)

    def delete_many(self, keys: Iterable[str]) -> int:
        depth = self._sent()
        requests = 1  # a failed batch delete sent at least one request
        try:
            requests = self.inner.delete_many(keys)
            return requests
        finally:
            self._answered(DELETE, depth, times=requests)

    def get_tags(self, key: str) -> dict[str, str]:
        depth = self._sent()
        try:
            return self.inner.get_tags(key)
        finally:
            self._answered(GET, depth)

    def get_lifecycle(self) -> list[LifecycleRule]:
        depth = self._sent()
        try:
            return self.inner.get_lifecycle()
        finally:
            self._answered(GET, depth)

    def put_lifecycle(self, rules: list[LifecycleRule]) -> None:
        depth = self._sent()
        try:
            self.inner.put_lifecycle(rules)
        finally:
            self._answered(PUT, depth)

    def list_incomplete_uploads(self, prefix: str) -> Iterator[IncompleteUpload]:
        depth = self._sent()
        try:
            uploads = list(self.inner.list_incomplete_uploads(prefix))  # read now, so the request is timed
        finally:
            self._answered(LIST, depth)  # one per 1,000 uploads on S3: counted as one, as Forwarding does
        return iter(uploads)

    def abort_upload(self, key: str, upload_id: str) -> None:
        depth = self._sent()
        try:
            self.inner.abort_upload(key, upload_id)
        finally:
            self._answered(DELETE, depth)
