"""Backends for benchmarks/scale.py: a fast in-memory store for bulk setup, and a recorder.

``FastMemory`` keeps MemoryStore's semantics (conditional create and replace,
MD5 ETags, S3's start-after and delimiter rules) with a sorted key index, so
that one LIST page costs O(page) whatever the store holds: a benchmark fake
for building and reading sessions of 300,000 events or stores of 1,000,000
sessions quickly. Its speed is not a figure; the requests through it are.

``Recorder`` wraps any backend, optionally sleeps a fixed delay per request
(so requests sent together overlap in time and can be told apart from
requests that waited on each other), and records every request: its kind,
start and end, and the bytes moved. Only the ``ObjectStore`` interface is
used, so the figures do not depend on evstore's internals.
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from evstore import ObjectStore
from evstore._backends import (
    IncompleteUpload,
    LifecycleRule,
    ListPage,
    ObjectExists,
    ObjectInfo,
    ObjectMissing,
    ObjectRefused,
    PreconditionFailed,
    StoredObject,
)

#: Estimated bytes of a LIST response: S3's ListObjectsV2 XML spends about this much per key
#: (Key, LastModified, ETag, Size, StorageClass), plus an envelope (Name, Prefix, KeyCount, ...).
LIST_BYTES_PER_KEY = 250
LIST_ENVELOPE_BYTES = 300

KINDS = ("PUT", "GET", "HEAD", "LIST", "DELETE")


def _etag(data: bytes) -> str:
    return '"' + hashlib.md5(data, usedforsecurity=False).hexdigest() + '"'


@dataclass
class _Entry:
    data: bytes
    etag: str
    modified: datetime
    metadata: dict[str, str]
    tags: dict[str, str]


class _SortedKeys:
    """Keys in order, in blocks of at most ``2 * LOAD``: insert, remove and seek cost O(log n + LOAD)."""

    LOAD = 1000

    def __init__(self, keys: Iterable[str] = ()) -> None:
        ordered = sorted(keys)
        self.blocks = [ordered[i : i + self.LOAD] for i in range(0, len(ordered), self.LOAD)]
        self.firsts = [block[0] for block in self.blocks]

    def add(self, key: str) -> None:
        if not self.blocks:
            self.blocks, self.firsts = [[key]], [key]
            return
        b = max(0, bisect.bisect_right(self.firsts, key) - 1)
        block = self.blocks[b]
        bisect.insort(block, key)
        self.firsts[b] = block[0]
        if len(block) > 2 * self.LOAD:
            self.blocks[b : b + 1] = [block[: self.LOAD], block[self.LOAD :]]
            self.firsts[b : b + 1] = [block[0], block[self.LOAD]]

    def remove(self, key: str) -> None:
        b = bisect.bisect_right(self.firsts, key) - 1
        if b < 0:
            return
        block = self.blocks[b]
        j = bisect.bisect_left(block, key)
        if j < len(block) and block[j] == key:
            del block[j]
            if block:
                self.firsts[b] = block[0]
            else:
                del self.blocks[b], self.firsts[b]

    def seek(self, key: str, *, after: bool = False) -> tuple[int, int]:
        """The position (block, index) of the first key >= ``key`` (> ``key`` with ``after``)."""
        if not self.blocks:
            return 0, 0
        b = max(0, bisect.bisect_right(self.firsts, key) - 1)
        block = self.blocks[b]
        j = (bisect.bisect_right if after else bisect.bisect_left)(block, key)
        return (b + 1, 0) if j == len(block) else (b, j)

    def walk(self, b: int, j: int) -> Iterator[tuple[int, int, str]]:
        """(block, index, key) from position (b, j) on."""
        while b < len(self.blocks):
            block = self.blocks[b]
            while j < len(block):
                yield b, j, block[j]
                j += 1
            b, j = b + 1, 0


class FastMemory(ObjectStore):
    """An in-memory bucket with a sorted key index. Thread-safe. Every creation and deletion is
    logged, so that ``first(n)`` can rebuild the bucket as it was after its first ``n`` objects
    were created (``created``: how many have been so far)."""

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        self._objects: dict[str, _Entry] = {}
        self._keys = _SortedKeys()
        self._rules: list[LifecycleRule] = []
        self._lock = threading.Lock()
        self._clock = clock or (lambda: datetime.now(UTC))
        self.replaced = 0  # replace() calls: a copy by creation order is exact only without them
        self.location = "fastmemory://"
        self._created: list[tuple[str, _Entry]] = []  # every creation, in order
        self._deleted: dict[str, list[int]] = {}  # key -> how many had been created when it was deleted, each time

    def __len__(self) -> int:
        return len(self._objects)

    # ---- bulk setup (not requests) ---------------------------------------------

    @property
    def created(self) -> int:
        return len(self._created)

    def first(self, count: int) -> FastMemory:
        """A new bucket holding what this one held once its first ``count`` objects were created
        (same bytes): those created by then and not deleted by then."""
        copy = FastMemory(self._clock)
        with self._lock:
            for index, (key, entry) in enumerate(itertools.islice(self._created, count)):
                if not any(index < when <= count for when in self._deleted.get(key, ())):
                    copy._objects[key] = entry
            copy._created = list(itertools.islice(self._created, count))
        copy._keys = _SortedKeys(copy._objects)
        return copy

    def copy(self) -> FastMemory:
        return self.first(self.created)

    def put_entries(self, entries: Iterable[tuple[str, bytes, str, datetime, Mapping[str, str]]]) -> None:
        """Store objects as given, (key, data, etag, modified, metadata) each: byte-for-byte copies
        of another bucket's objects, replacing any there. The index is rebuilt once, at the end."""
        with self._lock:
            for key, data, etag, modified, metadata in entries:
                self._objects[key] = _Entry(data, etag, modified, dict(metadata), {})
                self._created.append((key, self._objects[key]))
            self._keys = _SortedKeys(self._objects)

    def entries(self, prefix: str = "") -> list[tuple[str, bytes, str, datetime, dict[str, str]]]:
        """(key, data, etag, modified, metadata) of every object under ``prefix``, in key order."""
        found = []
        with self._lock:
            for _, _, key in self._keys.walk(*self._keys.seek(prefix)):
                if not key.startswith(prefix):
                    break
                e = self._objects[key]
                found.append((key, e.data, e.etag, e.modified, e.metadata))
        return found

    # ---- the ObjectStore interface ---------------------------------------------

    def create(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None
    ) -> str:
        entry = _Entry(bytes(data), _etag(data), self._clock(), dict(metadata or {}), dict(tags or {}))
        with self._lock:
            if key in self._objects:
                raise ObjectExists(key)
            self._objects[key] = entry
            self._keys.add(key)
            self._created.append((key, entry))
        return entry.etag

    def replace(
        self,
        key: str,
        data: bytes,
        *,
        etag: str,
        metadata: Mapping[str, str] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> str:
        entry = _Entry(bytes(data), _etag(data), self._clock(), dict(metadata or {}), dict(tags or {}))
        with self._lock:
            current = self._objects.get(key)
            if current is None or current.etag != etag:
                raise PreconditionFailed(key)
            self._objects[key] = entry
            self.replaced += 1
        return entry.etag

    def _entry(self, key: str) -> _Entry:
        with self._lock:
            entry = self._objects.get(key)
        if entry is None:
            raise ObjectMissing(key)
        return entry

    def get(self, key: str, *, max_bytes: int | None = None) -> StoredObject:
        e = self._entry(key)
        if max_bytes is not None and len(e.data) > max_bytes:
            raise ObjectRefused(key, f"the object is {len(e.data)} bytes, over the read limit of {max_bytes} bytes")
        return StoredObject(key, e.data, e.etag, e.modified, dict(e.metadata))

    def head(self, key: str) -> ObjectInfo:
        e = self._entry(key)
        return ObjectInfo(key, len(e.data), e.etag, e.modified, dict(e.metadata))

    def list_page(self, prefix: str, *, start_after: str = "", max_keys: int = 1000, delimiter: str = "") -> ListPage:
        objects: list[ObjectInfo] = []
        prefixes: list[str] = []
        last = start_after
        truncated = False
        with self._lock:
            index = self._keys
            b, j = index.seek(start_after, after=True) if start_after >= prefix else index.seek(prefix)
            while b < len(index.blocks):
                key = index.blocks[b][j]
                if not key.startswith(prefix):
                    break
                cut = key.find(delimiter, len(prefix)) if delimiter else -1
                if cut >= 0:
                    common = key[: cut + len(delimiter)]
                    if common > start_after:
                        if len(objects) + len(prefixes) >= max_keys:
                            truncated = True
                            break
                        prefixes.append(common)
                        last = common
                    # every key under ``common`` sorts before this bound: skip them in one seek
                    b, j = index.seek(common[:-1] + chr(ord(common[-1]) + 1))
                    continue
                if len(objects) + len(prefixes) >= max_keys:
                    truncated = True
                    break
                entry = self._objects[key]
                objects.append(ObjectInfo(key, len(entry.data), entry.etag, entry.modified))
                last = key
                j += 1
                if j == len(index.blocks[b]):
                    b, j = b + 1, 0
        return ListPage(objects, prefixes, truncated, last)

    def delete_many(self, keys: Iterable[str]) -> int:
        batch = list(keys)
        with self._lock:
            for key in batch:
                if self._objects.pop(key, None) is not None:
                    self._keys.remove(key)
                    self._deleted.setdefault(key, []).append(len(self._created))
        return (len(batch) + 999) // 1000

    def get_tags(self, key: str) -> dict[str, str]:
        return dict(self._entry(key).tags)

    def get_lifecycle(self) -> list[LifecycleRule]:
        with self._lock:
            return [dict(rule) for rule in self._rules]

    def put_lifecycle(self, rules: list[LifecycleRule]) -> None:
        with self._lock:
            self._rules = [dict(rule) for rule in rules]

    def list_incomplete_uploads(self, prefix: str) -> Iterator[IncompleteUpload]:
        return iter(())

    def abort_upload(self, key: str, upload_id: str) -> None:
        raise ObjectMissing(key)


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
