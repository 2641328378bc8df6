"""The local store's listing with delimiter "/": a large directory is indexed, so a page costs
O(page) whatever the directory holds, and the index never hides a name created before a LIST."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from evstore import LocalStore, MemoryStore, Store
from evstore._backends import _local_listing


class Work:
    """Counts what the local store reads: entries yielded by ``os.scandir`` and ``os.stat`` calls."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entries = 0
        self.stats = 0
        real_scandir, real_stat = os.scandir, os.stat
        work = self

        class Counted:
            def __init__(self, target: int) -> None:
                self.inner = real_scandir(target)

            def __enter__(self) -> Iterator[os.DirEntry[str]]:
                return self._entries()

            def _entries(self) -> Iterator[os.DirEntry[str]]:
                for entry in self.inner:
                    work.entries += 1
                    yield entry

            def __exit__(self, *args: object) -> None:
                self.inner.close()

        def stat(*args: object, **kwargs: object) -> os.stat_result:
            work.stats += 1
            return real_stat(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "scandir", Counted)
        monkeypatch.setattr(os, "stat", stat)

    @property
    def total(self) -> int:
        return self.entries + self.stats


def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if the directories had stood still for a minute: the wall clock runs a minute ahead."""
    real = time.time_ns
    monkeypatch.setattr(_local_listing, "_wall_ns", lambda: real() + 60 * 10**9)


def sessions_on_disk(base: Path, count: int) -> LocalStore:
    """A local store with ``count`` sessions (a manifest each), written straight to its directory."""
    store = LocalStore(base)
    for i in range(count):
        directory = base / "objects" / "sessions" / f"s{i:06d}"
        directory.mkdir(parents=True)
        (directory / "manifest").write_bytes(b"{}")
    return store


def work_per_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int) -> list[int]:
    """Entries read and stats made by each page of 100 of a listing of ``count`` sessions, after its first."""
    store = sessions_on_disk(tmp_path / str(count), count)
    settled(monkeypatch)
    work = Work(monkeypatch)
    pages, per_page, start = [], [], ""
    while True:
        before = work.total
        page = store.list_page("sessions/", start_after=start, max_keys=100, delimiter="/")
        per_page.append(work.total - before)
        pages += page.prefixes
        if not page.truncated:
            break
        start = page.next_start_after
    assert pages == [f"sessions/s{i:06d}/" for i in range(count)]
    monkeypatch.undo()
    return per_page[1:]


@pytest.mark.slow
def test_a_page_of_the_sessions_directory_reads_its_own_entries_at_any_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = work_per_page(tmp_path, monkeypatch, 1000)  # under INDEX_FROM: read whole, 1,000 names a page
    large = work_per_page(tmp_path, monkeypatch, 10_000)  # indexed: read once, then a bisection a page
    assert max(small) <= 1000 + 100
    assert max(large) <= 100  # a stat per entry listed, no directory entry read; O(N) per page was 10,000
    assert max(large) <= max(small)


def test_a_name_created_after_the_index_was_made_is_listed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = sessions_on_disk(tmp_path, 3000)
    settled(monkeypatch)
    first = store.list_page("sessions/", max_keys=100, delimiter="/")
    assert first.prefixes[-1] == "sessions/s000099/"
    store.create("sessions/s000099x/manifest", b"{}")  # the directory's stamp changes: the index is remade
    second = store.list_page("sessions/", start_after=first.next_start_after, max_keys=2, delimiter="/")
    assert second.prefixes == ["sessions/s000099x/", "sessions/s000100/"]
    store.delete_many(["sessions/s000100/manifest"])
    third = store.list_page("sessions/", start_after="sessions/s000099x/", max_keys=1, delimiter="/")
    assert third.prefixes == ["sessions/s000101/"]


def test_a_directory_whose_timestamps_may_not_show_a_change_is_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two changes within one tick of the filesystem's clock leave the same stamp: while a
    directory's timestamps are younger than SETTLE_SECONDS it is not indexed, but read."""
    store = sessions_on_disk(tmp_path, 3000)
    frozen = os.fstat(os.open(tmp_path / "objects" / "sessions", os.O_RDONLY | os.O_DIRECTORY))
    real_fstat = os.fstat

    def fstat(fd: int) -> os.stat_result:
        info = real_fstat(fd)
        return frozen if (info.st_dev, info.st_ino) == (frozen.st_dev, frozen.st_ino) else info

    monkeypatch.setattr(os, "fstat", fstat)  # every change below keeps the stamp, as within one tick
    assert len(store.list_page("sessions/", max_keys=10, delimiter="/").prefixes) == 10
    store.create("sessions/s000000x/manifest", b"{}")
    assert store.list_page("sessions/", max_keys=2, delimiter="/").prefixes == ["sessions/s000000/", "sessions/s000000x/"]
    # once the stamp has stood still SETTLE_SECONDS, by this process's clock, the index is made
    real_monotonic = time.monotonic
    monkeypatch.setattr(_local_listing, "_monotonic", lambda: real_monotonic() + _local_listing.SETTLE_SECONDS)
    assert store.list_page("sessions/", max_keys=2, delimiter="/").prefixes == ["sessions/s000000/", "sessions/s000000x/"]
    assert store._listing.indexes["sessions/"].names is not None


NAMES = (
    [f"f{i:04d}" for i in range(2100)]
    + [f"d{i:03d}/x" for i in range(40)]
    + [f"d{i:03d}/y/z" for i in range(0, 40, 3)]
    + ["a", "a-b/1", "a.c", "ab/1", "ab-", "b/1", "b0", "zz", "\u00e9", "~"]
)


@pytest.mark.slow
@pytest.mark.parametrize("indexed", [True, False])
def test_the_indexed_listing_lists_as_s3_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, indexed: bool) -> None:
    local = LocalStore(tmp_path)
    memory = MemoryStore()
    for name in NAMES:
        path = tmp_path / "objects" / "p" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
        memory.create(f"p/{name}", b"x")
    if indexed:
        settled(monkeypatch)
    else:
        monkeypatch.setattr(_local_listing, "INDEX_FROM", 10**9)
    cases = [("p/", ""), ("p/", "p/a"), ("p/", "p/a-b/1"), ("p/", "p/ab/"), ("p/a", ""), ("p/a", "p/a-b/"), ("p/d0", "p/d001/x")]
    cases += [("p/", "p/d010/y/z"), ("p/f1", "p/f1500"), ("p/", "p/zz"), ("p/", "p/\u00e9"), ("p/", "p/b/0"), ("p/q", "")]
    for prefix, start in cases:
        for max_keys in (1, 7, 1000, 5000):
            got, want = (s.list_page(prefix, start_after=start, max_keys=max_keys, delimiter="/") for s in (local, memory))
            assert ([o.key for o in got.objects], got.prefixes, got.truncated) == (
                [o.key for o in want.objects],
                want.prefixes,
                want.truncated,
            ), (prefix, start, max_keys)
            assert all(o.size == 1 for o in got.objects)
    assert ("p/" in local._listing.indexes and local._listing.indexes["p/"].names is not None) == indexed


def test_list_sessions_over_an_indexed_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    local = sessions_on_disk(tmp_path, 2500)
    settled(monkeypatch)
    assert list(Store(local).list_sessions()) == [f"s{i:06d}" for i in range(2500)]
    assert list(Store(local).list_sessions("s0012", start_after="s001205")) == [f"s{i:06d}" for i in range(1206, 1300)]
