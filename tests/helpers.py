"""Test helpers: a request-counting wrapper for any backend, and small builders."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from evstore import ObjectStore, StoreUnavailableError
from evstore._backends import IncompleteUpload, LifecycleRule, ListPage, ObjectInfo, StoredObject
from evstore._ids import parse_segment


class CountingStore(ObjectStore):
    """Forwards to another backend and counts requests by kind (PUT, GET, HEAD, LIST, DELETE)."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.location = inner.location
        self.counts: Counter[str] = Counter()
        self.keys: list[tuple[str, str]] = []

    def _note(self, kind: str, key: str) -> None:
        self.counts[kind] += 1
        self.keys.append((kind, key))

    def reset(self) -> None:
        self.counts.clear()
        self.keys.clear()

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def create(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None
    ) -> str:
        self._note("PUT", key)
        return self.inner.create(key, data, metadata=metadata, tags=tags)

    def replace(
        self,
        key: str,
        data: bytes,
        *,
        etag: str,
        metadata: Mapping[str, str] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> str:
        self._note("PUT", key)
        return self.inner.replace(key, data, etag=etag, metadata=metadata, tags=tags)

    def get(self, key: str, *, max_bytes: int | None = None) -> StoredObject:
        self._note("GET", key)
        return self.inner.get(key, max_bytes=max_bytes)

    def head(self, key: str) -> ObjectInfo:
        self._note("HEAD", key)
        return self.inner.head(key)

    def list_page(self, prefix: str, *, start_after: str = "", max_keys: int = 1000, delimiter: str = "") -> ListPage:
        self._note("LIST", prefix)
        return self.inner.list_page(prefix, start_after=start_after, max_keys=max_keys, delimiter=delimiter)

    def delete_many(self, keys: Iterable[str]) -> int:
        batch = list(keys)
        requests = self.inner.delete_many(batch)
        for _ in range(requests):
            self._note("DELETE", batch[0] if batch else "")
        return requests

    def get_tags(self, key: str) -> dict[str, str]:
        self._note("GET", key)
        return self.inner.get_tags(key)

    def get_lifecycle(self) -> list[LifecycleRule]:
        self._note("GET", "?lifecycle")
        return self.inner.get_lifecycle()

    def put_lifecycle(self, rules: list[LifecycleRule]) -> None:
        self._note("PUT", "?lifecycle")
        self.inner.put_lifecycle(rules)

    def list_incomplete_uploads(self, prefix: str) -> Iterator[IncompleteUpload]:
        self._note("LIST", "?uploads")
        return self.inner.list_incomplete_uploads(prefix)

    def abort_upload(self, key: str, upload_id: str) -> None:
        self._note("DELETE", key)
        self.inner.abort_upload(key, upload_id)


class NoDeletes(CountingStore):
    """A backend as the writer role of ``infra/iam`` sees it: every DELETE is refused (S3
    answers a DeleteObjects it denies with an error per key)."""

    def delete_many(self, keys: Iterable[str]) -> int:
        self._note("DELETE", next(iter(keys), ""))
        raise StoreUnavailableError("delete refused: access denied (AccessDenied)")


def msg(text: str, role: str = "user", **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": text, **extra}


T0 = datetime(2026, 3, 1, 10, 30, tzinfo=UTC)


class Clock:
    """A store clock that tests move by hand (``Store(clock=...)``, ``MemoryStore(clock=...)``)."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


def segment_sizes(backend: ObjectStore, prefix: str) -> dict[str, set[int]]:
    """The sizes (events) of the segments under a session's ``prefix``, by kind of name ("segments", "young")."""
    sizes: dict[str, set[int]] = {"segments": set(), "young": set()}
    for info in backend.list(prefix):
        name = info.key[len(prefix) :]
        if (segment := parse_segment(name)) is not None:
            sizes[name.split("/")[0]].add(segment[1] - segment[0] + 1)
    return sizes
