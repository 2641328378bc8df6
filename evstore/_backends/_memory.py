"""An in-memory object store: the test fake, and ``memory://``."""

from __future__ import annotations

import bisect
import hashlib
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime

import msgspec

from .._lifecycle import checked_rules
from ._base import (
    IncompleteUpload,
    LifecycleRule,
    ListPage,
    ObjectExists,
    ObjectInfo,
    ObjectMissing,
    ObjectStore,
    PreconditionFailed,
    StoredObject,
    too_large,
)


def etag_of(data: bytes) -> str:
    return '"' + hashlib.md5(data, usedforsecurity=False).hexdigest() + '"'


def page_of(
    keys: Iterable[str], infos: Callable[[str], ObjectInfo], prefix: str, start_after: str, max_keys: int, delimiter: str
) -> ListPage:
    """One LIST page over sorted ``keys`` (read only as far as the page goes), with S3's
    semantics for start-after and delimiter."""
    objects: list[ObjectInfo] = []
    prefixes: list[str] = []
    last = start_after
    truncated = False
    for key in keys:
        if not key.startswith(prefix) or key <= start_after:
            continue
        if delimiter:
            cut = key.find(delimiter, len(prefix))
            if cut >= 0:
                common = key[: cut + len(delimiter)]
                if (prefixes and prefixes[-1] == common) or common <= start_after:
                    continue
                if len(objects) + len(prefixes) >= max_keys:
                    truncated = True
                    break
                prefixes.append(common)
                last = common
                continue
        if len(objects) + len(prefixes) >= max_keys:
            truncated = True
            break
        objects.append(infos(key))
        last = key
    return ListPage(objects, prefixes, truncated, last)


class SortedKeys:
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


class _Entry(msgspec.Struct):
    data: bytes
    etag: str
    modified: datetime
    metadata: dict[str, str]
    tags: dict[str, str]


class MemoryStore(ObjectStore):
    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        self._objects: dict[str, _Entry] = {}
        self._sorted = SortedKeys()  # the keys of ``_objects`` in order: a page is found by bisection
        self._lifecycle: list[LifecycleRule] = []
        self._lock = threading.Lock()
        self._clock = clock or (lambda: datetime.now(UTC))
        self.location = "memory://"

    def _entry(self, data: bytes, metadata: Mapping[str, str] | None, tags: Mapping[str, str] | None) -> _Entry:
        return _Entry(bytes(data), etag_of(data), self._clock(), dict(metadata or {}), dict(tags or {}))

    def create(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None
    ) -> str:
        entry = self._entry(data, metadata, tags)
        with self._lock:
            if key in self._objects:
                raise ObjectExists(key)
            self._objects[key] = entry
            self._sorted.add(key)
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
        entry = self._entry(data, metadata, tags)
        with self._lock:
            current = self._objects.get(key)
            if current is None or current.etag != etag:
                raise PreconditionFailed(key)
            self._objects[key] = entry
        return entry.etag

    def _get_entry(self, key: str) -> _Entry:
        with self._lock:
            entry = self._objects.get(key)
        if entry is None:
            raise ObjectMissing(key)
        return entry

    def get(self, key: str, *, max_bytes: int | None = None) -> StoredObject:
        e = self._get_entry(key)
        if max_bytes is not None and len(e.data) > max_bytes:
            raise too_large(key, len(e.data), max_bytes)
        return StoredObject(key, e.data, e.etag, e.modified, dict(e.metadata))

    def head(self, key: str) -> ObjectInfo:
        e = self._get_entry(key)
        return ObjectInfo(key, len(e.data), e.etag, e.modified, dict(e.metadata))

    def list_page(self, prefix: str, *, start_after: str = "", max_keys: int = 1000, delimiter: str = "") -> ListPage:
        def info(key: str) -> ObjectInfo:
            e = self._objects[key]
            return ObjectInfo(key, len(e.data), e.etag, e.modified)

        with self._lock:  # O(log N + the keys the page passes over)
            keys = self._sorted
            first = keys.seek(start_after, after=True) if start_after >= prefix else keys.seek(prefix)
            under = itertools.takewhile(lambda key: key.startswith(prefix), (key for _, _, key in keys.walk(*first)))
            return page_of(under, info, prefix, start_after, max_keys, delimiter)

    def delete_many(self, keys: Iterable[str]) -> int:
        batch = list(keys)
        with self._lock:
            for key in batch:
                if self._objects.pop(key, None) is not None:
                    self._sorted.remove(key)
        return (len(batch) + 999) // 1000

    def get_tags(self, key: str) -> dict[str, str]:
        return dict(self._get_entry(key).tags)

    def get_lifecycle(self) -> list[LifecycleRule]:
        with self._lock:
            rules = [dict(rule) for rule in self._lifecycle]
        return checked_rules(rules, "memory store")

    def put_lifecycle(self, rules: list[LifecycleRule]) -> None:
        with self._lock:
            self._lifecycle = [dict(rule) for rule in rules]

    def list_incomplete_uploads(self, prefix: str) -> Iterator[IncompleteUpload]:
        return iter(())

    def abort_upload(self, key: str, upload_id: str) -> None:
        raise ObjectMissing(key)
