"""Backends for benchmarks/scale.py: a fast in-memory store for bulk setup, a recorder, and a
wrapper that copies GET bodies (``Copying``, for peaks of memory).

``FastMemory`` is evstore's ``MemoryStore`` (a LIST page costs O(page) there
too) that logs creations and deletions, for building sessions of 300,000
events once and reading them at every smaller length, and for filling stores
of 1,000,000 sessions in bulk. Its speed is not a figure; the requests through
it are.

``Recorder`` wraps any backend, optionally sleeps a fixed delay per request
(so requests sent together overlap in time and can be told apart from
requests that waited on each other), and records every request: its kind,
start and end, and the bytes moved. Only the ``ObjectStore`` interface is
used, so the figures do not depend on evstore's internals.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec

from evstore import MemoryStore, ObjectStore
from evstore._backends import (
    IncompleteUpload,
    LifecycleRule,
    ListPage,
    ObjectInfo,
    StoredObject,
)
from evstore._backends._base import Forwarding
from evstore._backends._memory import SortedKeys, _Entry

#: Estimated bytes of a LIST response: S3's ListObjectsV2 XML spends about this much per key
#: (Key, LastModified, ETag, Size, StorageClass), plus an envelope (Name, Prefix, KeyCount, ...).
LIST_BYTES_PER_KEY = 250
LIST_ENVELOPE_BYTES = 300

KINDS = ("PUT", "GET", "HEAD", "LIST", "DELETE")


class FastMemory(MemoryStore):
    """evstore's ``MemoryStore``, logging every creation and deletion, so that ``first(n)`` can
    rebuild the bucket as it was after its first ``n`` objects were created (``created``: how
    many have been so far), and ``put_entries`` can fill it in bulk."""

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        super().__init__(clock)
        self.location = "fastmemory://"
        self.replaced = 0  # replace() calls: a copy by creation order is exact only without them
        self._created: list[tuple[str, _Entry]] = []  # every creation, in order
        self._deleted: dict[str, list[int]] = {}  # key -> how many had been created when it was deleted, each time

    def __len__(self) -> int:
        return len(self._objects)

    @property
    def created(self) -> int:
        return len(self._created)

    def first(self, count: int) -> FastMemory:
        """A new bucket holding what this one held once its first ``count`` objects were created
        (same bytes): those created by then and not deleted by then."""
        copy = FastMemory(self._clock)
        with self._lock:
            copy._created = list(itertools.islice(self._created, count))
            for index, (key, entry) in enumerate(copy._created):
                if not any(index < when <= count for when in self._deleted.get(key, ())):
                    copy._objects[key] = entry
        copy._sorted = SortedKeys(copy._objects)
        return copy

    def copy(self) -> FastMemory:
        return self.first(self.created)

    def put_entries(self, entries: Iterable[tuple[str, bytes, str, datetime, Mapping[str, str]]]) -> None:
        """Store objects as given, (key, data, etag, modified, metadata) each: byte-for-byte copies
        of another bucket's objects, replacing any there. The index is sorted once, at the end."""
        with self._lock:
            for key, data, etag, modified, metadata in entries:
                self._objects[key] = _Entry(data, etag, modified, dict(metadata), {})
                self._created.append((key, self._objects[key]))
            self._sorted = SortedKeys(self._objects)

    def entries(self, prefix: str = "") -> list[tuple[str, bytes, str, datetime, dict[str, str]]]:
        """(key, data, etag, modified, metadata) of every object under ``prefix``, in key order."""
        with self._lock:
            walk = (key for _, _, key in self._sorted.walk(*self._sorted.seek(prefix)))
            keys = list(itertools.takewhile(lambda key: key.startswith(prefix), walk))
            found = [(key, self._objects[key]) for key in keys]
        return [(key, e.data, e.etag, e.modified, dict(e.metadata)) for key, e in found]

    def create(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None
    ) -> str:
        etag = super().create(key, data, metadata=metadata, tags=tags)
        with self._lock:
            self._created.append((key, self._objects[key]))
        return etag

    def replace(self, key: str, data: bytes, *, etag: str, **kwargs: Any) -> str:
        new = super().replace(key, data, etag=etag, **kwargs)
        self.replaced += 1
        return new

    def delete_many(self, keys: Iterable[str]) -> int:
        batch = list(keys)
        with self._lock:
            gone = [key for key in batch if key in self._objects]
        requests = super().delete_many(batch)
        with self._lock:
            for key in gone:
                self._deleted.setdefault(key, []).append(len(self._created))
        return requests


class Copying(Forwarding):
    """Forwards every request to ``inner``, and hands out a copy of each GET's body, as a read
    from the network allocates one: over a ``MemoryStore`` a read would otherwise hold the
    stored bytes themselves, and a peak of Python allocations would not count the bodies a
    read keeps in flight."""

    def get(self, key: str, *, max_bytes: int | None = None) -> StoredObject:
        found = self.inner.get(key, max_bytes=max_bytes)
        return msgspec.structs.replace(found, data=bytes(bytearray(found.data)))


@dataclass
class Counts:
    """What a stretch of requests cost. ``down``: GET bodies plus LIST responses estimated at
    ``LIST_BYTES_PER_KEY`` per key listed and ``LIST_ENVELOPE_BYTES`` per page; ``up``: PUT bodies."""

    kinds: Counter[str] = field(default_factory=Counter)
    chain: int = 0
    down: int = 0
    get_bytes: int = 0
    up: int = 0
    listed_keys: int = 0

    @property
    def total(self) -> int:
        return sum(self.kinds.values())

    def by_kind(self) -> str:
        """``PUT/GET/HEAD/LIST/DELETE`` counts, e.g. ``1/26/0/12/0``."""
        return "/".join(str(self.kinds[k]) for k in KINDS)

    def as_json(self) -> dict[str, object]:
        return {
            "requests": self.total,
            **{k: self.kinds[k] for k in KINDS},
            "round_trips": self.chain,
            "bytes_down": self.down,
            "get_bytes": self.get_bytes,
            "bytes_up": self.up,
            "listed_keys": self.listed_keys,
        }


@dataclass
class _Request:
    kind: str
    start: int
    end: int
    down: int = 0
    up: int = 0
    keys: int = 0


def longest_chain(spans: Iterable[tuple[int, int]]) -> int:
    """The longest chain of requests each of which started after the one before it had ended
    (O(n log n): by start, with a heap of the ends not yet passed)."""
    pending: list[tuple[int, int]] = []  # (end, depth) of requests that have not ended by the current start
    best_ended = 0  # the deepest chain among requests that have ended
    longest = 0
    for start, end in sorted(spans):
        while pending and pending[0][0] <= start:
            best_ended = max(best_ended, heapq.heappop(pending)[1])
        depth = best_ended + 1
        heapq.heappush(pending, (end, depth))
        longest = max(longest, depth)
    return longest


class Recorder(ObjectStore):
    """Forwards every request to ``inner`` after ``delay`` seconds and records it (see the module)."""

    def __init__(self, inner: ObjectStore, delay: float = 0.0) -> None:
        self.inner = inner
        self.location = inner.location
        self.delay = delay
        self._log: list[_Request] = []
        self._lock = threading.Lock()

    def reset(self) -> None:
        with self._lock:
            self._log = []

    def counts(self) -> Counts:
        """The requests since the last ``reset``."""
        with self._lock:
            log = list(self._log)
        counts = Counts(Counter(r.kind for r in log), longest_chain((r.start, r.end) for r in log))
        for r in log:
            counts.down += r.down + (LIST_ENVELOPE_BYTES + LIST_BYTES_PER_KEY * r.keys if r.kind == "LIST" else 0)
            counts.get_bytes += r.down
            counts.up += r.up
            counts.listed_keys += r.keys
        return counts

    def _begin(self) -> int:
        start = time.perf_counter_ns()
        if self.delay:
            time.sleep(self.delay)
        return start

    def _end(self, kind: str, start: int, *, down: int = 0, up: int = 0, keys: int = 0, times: int = 1) -> None:
        end = time.perf_counter_ns()
        with self._lock:
            for _ in range(times):
                self._log.append(_Request(kind, start, end, down, up, keys))

    def create(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None
    ) -> str:
        start = self._begin()
        try:
            return self.inner.create(key, data, metadata=metadata, tags=tags)
        finally:
            self._end("PUT", start, up=len(data))

    def replace(
        self,
        key: str,
        data: bytes,
        *,
        etag: str,
        metadata: Mapping[str, str] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> str:
        start = self._begin()
        try:
            return self.inner.replace(key, data, etag=etag, metadata=metadata, tags=tags)
        finally:
            self._end("PUT", start, up=len(data))

    def get(self, key: str, *, max_bytes: int | None = None) -> StoredObject:
        start = self._begin()
        size = 0
        try:
            found = self.inner.get(key, max_bytes=max_bytes)
            size = len(found.data)
            return found
        finally:
            self._end("GET", start, down=size)

    def head(self, key: str) -> ObjectInfo:
        start = self._begin()
        try:
            return self.inner.head(key)
        finally:
            self._end("HEAD", start)

    def list_page(self, prefix: str, *, start_after: str = "", max_keys: int = 1000, delimiter: str = "") -> ListPage:
        start = self._begin()
        keys = 0
        try:
            page = self.inner.list_page(prefix, start_after=start_after, max_keys=max_keys, delimiter=delimiter)
            keys = len(page.objects) + len(page.prefixes)
            return page
        finally:
            self._end("LIST", start, keys=keys)

    def delete_many(self, keys: Iterable[str]) -> int:
        start = self._begin()
        requests = 0
        try:
            requests = self.inner.delete_many(list(keys))
            return requests
        finally:
            self._end("DELETE", start, times=requests)

    def get_tags(self, key: str) -> dict[str, str]:
        start = self._begin()
        try:
            return self.inner.get_tags(key)
        finally:
            self._end("GET", start)

    def get_lifecycle(self) -> list[LifecycleRule]:
        start = self._begin()
        try:
            return self.inner.get_lifecycle()
        finally:
            self._end("GET", start)

    def put_lifecycle(self, rules: list[LifecycleRule]) -> None:
        start = self._begin()
        try:
            self.inner.put_lifecycle(rules)
        finally:
            self._end("PUT", start)

    def list_incomplete_uploads(self, prefix: str) -> Iterator[IncompleteUpload]:
        start = self._begin()
        try:
            uploads = list(self.inner.list_incomplete_uploads(prefix))
        finally:
            self._end("LIST", start)
        return iter(uploads)

    def abort_upload(self, key: str, upload_id: str) -> None:
        start = self._begin()
        try:
            self.inner.abort_upload(key, upload_id)
        finally:
            self._end("DELETE", start)

    def close(self) -> None:
        self.inner.close()
