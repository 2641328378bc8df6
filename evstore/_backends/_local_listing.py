"""Listing a local store's objects: the ``list_page`` of ``LocalStore`` (``DirectoryListing``).

A LIST with delimiter "/" (the sessions, or one session's names) of a directory of
``INDEX_FROM`` names or more bisects an index of its sorted names, kept while the directory's
stamp (mtime, ctime, size, inode) stays the same and made only once its timestamps have stood
still ``SETTLE_SECONDS``: O(page) per page, not O(names in the directory). Other listings read
the directory whole for each page, in O(page) memory. Each object is listed with its own
``lstat`` and the ETag its write recorded (``ETAG_XATTR``) while the file is as written.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import suppress
from datetime import UTC, datetime

import msgspec

from ._base import ListPage, ObjectInfo
from ._local_files import DIR_FLAGS, ETAG_XATTR, READ_FLAGS, XATTRS, NotADirectory, StoreDirectory, lstat_of
from ._memory import page_of

#: A directory listed with delimiter "/" (the ``sessions/`` directory, one session's) that holds at
#: least this many names is indexed: its names are kept sorted, so a page bisects them and reads
#: only its own entries. A smaller directory is read whole for each page (at most two pages' worth).
INDEX_FROM = 2000
#: The names the indexes hold together, at most (about 80 MB): the least recently used index goes
#: first, and a directory with more names than this is read whole for each page (memory O(page)).
INDEX_NAMES = 1 << 20
#: How long a directory's timestamps must have stood still before an index of it is trusted. A
#: directory's mtime and ctime change with every name created or removed in it, but two changes
#: within one tick of the filesystem's clock (a few ms; 1-2 s on some filesystems) leave the same
#: timestamps: a listing that began within that tick of the last change could miss a name the
#: timestamps then would not show. Either rule below rules that out: the timestamps are older than
#: this by the wall clock (a filesystem that stamps with this host's clock: a local one), or a stat
#: showed the same timestamps this long (by this process's clock) before the listing began.
SETTLE_SECONDS = 2.0
_wall_ns = time.time_ns
_monotonic = time.monotonic


class _Index(msgspec.Struct, frozen=True):
    """What a store knows of one directory: the stamp (device, inode, mtime, ctime, size, links) a
    stat gave, when (``_monotonic``, just after that stat), and, once trusted, its names sorted as
    their keys sort (a directory's name with "/" after it), else None."""

    stamp: tuple[int, ...]
    seen: float
    names: list[str] | None = None


def _stamp(info: os.stat_result) -> tuple[int, ...]:
    return (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_ctime_ns, info.st_size, info.st_nlink)


def _from_index(
    fd: int, base: str, names: list[str], partial: str, start_after: str, limit: int | None
) -> list[tuple[str, os.stat_result | None]]:
    """``_scan`` without recursion, from the sorted ``names`` of the directory ``fd``: a bisection
    and then only the entries the page returns (each file's own ``lstat``)."""
    if start_after.startswith(base):
        after = start_after[len(base) :]
    elif base > start_after:
        after = ""
    else:
        return []
    chosen: list[tuple[str, os.stat_result | None]] = []
    for index in range(max(bisect_right(names, after), bisect_left(names, partial)), len(names)):
        name = names[index]
        if not name.startswith(partial):
            break  # the names that start with it are contiguous, and passed
        if name.endswith("/"):
            chosen.append((base + name, None))
        else:
            try:
                info: os.stat_result | None = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                info = None  # removed since it was indexed
            chosen.append((base + name, info))
        if limit is not None and len(chosen) >= limit:
            break
    return chosen


def _first(item: tuple[str, os.stat_result | None]) -> str:
    return item[0]


class _Smallest:
    """Keeps the ``limit`` smallest (key, lstat) items offered (all when ``limit`` is None) in
    O(limit) memory: once ``2 * limit`` are held they are sorted and cut to ``limit``, and the
    largest kept becomes a bound that a later key must sort below to be offered at all."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.items: list[tuple[str, os.stat_result | None]] = []
        self.bound: str | None = None

    def wants(self, key: str) -> bool:
        """Whether ``key`` (for a directory "name/": any key in it) may still be among the smallest."""
        return self.bound is None or key < self.bound

    def offer(self, key: str, info: os.stat_result | None) -> None:
        self.items.append((key, info))
        if self.limit is not None and len(self.items) >= 2 * self.limit:
            self._cut(self.limit)

    def _cut(self, limit: int) -> None:
        self.items.sort(key=_first)
        del self.items[limit:]
        if self.items and len(self.items) == limit:
            self.bound = self.items[-1][0]

    def result(self) -> list[tuple[str, os.stat_result | None]]:
        self._cut(len(self.items) if self.limit is None else self.limit)
        return self.items


def _scan(fd: int, base: str, partial: str, start_after: str, pick: _Smallest, *, recursive: bool) -> None:
    """Offer ``pick`` the keys ``base + name`` of the directory ``fd`` whose names start with
    ``partial`` and that sort after ``start_after``: directories as ``base + name + "/"``, or,
    when ``recursive``, entered (``O_NOFOLLOW``: never through a symlink) after the directory's
    own names, smallest first, unless every key in them sorts after those ``pick`` keeps. Depth
    first, on a stack of its own: a tree planted thousands of levels deep costs no recursion."""
    stack: list[tuple[int, str, Iterator[str]]] = [(fd, base, iter(_scan_names(fd, base, partial, start_after, pick, recursive)))]
    try:
        while stack:
            parent_fd, parent, names = stack[-1]
            name = next(names, None)
            if name is None or not pick.wants(sub := f"{parent}{name}/"):
                # done with it; or its keys, and those of every later directory in it, sort after the ones kept
                stack.pop()
                if parent_fd != fd:
                    os.close(parent_fd)
                continue
            try:
                child = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
            except OSError:
                continue  # removed, or replaced by a link, since it was read
            try:
                subdirs = _scan_names(child, sub, "", start_after, pick, True)
            except BaseException:
                os.close(child)
                raise
            stack.append((child, sub, iter(subdirs)))
    finally:
        for held, _, _ in stack:
            if held != fd:
                os.close(held)


def _scan_names(fd: int, base: str, partial: str, start_after: str, pick: _Smallest, recursive: bool) -> list[str]:
    """``_scan``'s work in one directory: offer its keys to ``pick``; return the names of the
    subdirectories to enter (``recursive``), sorted."""
    if start_after.startswith(base):
        after = start_after[len(base) :]  # a key here sorts after start_after iff its name sorts after this
    elif base > start_after:
        after = ""
    else:
        return []  # every key here sorts before start_after
    subdirs: list[str] = []
    with os.scandir(fd) as entries:
        for entry in entries:
            name = entry.name
            # a name at or before ``after`` is a key at or before start_after, unless it names
            # a directory that start_after lies in (the name is a prefix of ``after``)
            if (name <= after and not after.startswith(name)) or not name.startswith(partial):
                continue
            if entry.is_dir(follow_symlinks=False):
                if recursive:
                    subdirs.append(name)
                elif (key := f"{base}{name}/") > start_after and pick.wants(key):
                    pick.offer(key, None)
            elif name > after and pick.wants(key := base + name):
                pick.offer(key, lstat_of(entry))
    return sorted(subdirs)


def _etag_if_unchanged(recorded: str, info: os.stat_result) -> str:
    """The ETag a write recorded in ``ETAG_XATTR`` ("etag size mtime_ns"), while the file is as
    the write left it: once its size or mtime differ from those recorded (written to in place
    since), none, so that readers read the object itself instead of trusting a segment on its
    word. A bare ETag (recorded before the size and mtime were) is taken as it is."""
    etag, *stamp = recorded.split(" ")
    if stamp and stamp != [str(info.st_size), str(info.st_mtime_ns)]:
        return ""
    return etag


def _listed(key: str, info: os.stat_result | None, etag: str = "") -> ObjectInfo:
    if info is None:
        return ObjectInfo(key, 0, "", datetime.fromtimestamp(0, UTC))
    return ObjectInfo(key, info.st_size, etag, datetime.fromtimestamp(info.st_mtime, UTC))


class DirectoryListing:
    """Pages of the objects of a local store's directory (``page``), and the indexes of its
    largest directories (``indexes``: by directory, the least recently used first). Safe to
    share between threads."""

    def __init__(self, directory: StoreDirectory) -> None:
        self._dir = directory
        self.indexes: OrderedDict[str, _Index] = OrderedDict()
        self._indexed = 0  # names held by the indexes
        self._index_lock = threading.Lock()

    def _select(
        self, prefix: str, start_after: str, limit: int | None, delimiter: str
    ) -> list[tuple[str, os.stat_result | None]]:
        """The ``limit`` smallest keys under ``prefix`` that sort after ``start_after`` (all of
        them when ``limit`` is None), in order, each with its own ``lstat`` (a link's, not its
        target's; None for a directory, or a name removed since it was read).

        With delimiter "/" only the directory ``prefix`` falls in is read, and its directories
        come back as "name/"; otherwise every non-directory below it is a key, and a symlinked
        directory is never entered. With delimiter "/" a directory of ``INDEX_FROM`` names or more
        is read from its index (``_sorted_names``): a stat of it, a bisection, and a stat per
        file listed, O(page) whatever it holds (the index holds its names). Otherwise memory is O(limit) whatever the
        directory holds: names are compared as they are read and at most ``2 * limit`` kept
        (``_Smallest``); the directory is read whole each time (O(N) names read per page).
        """
        directory, _, partial = prefix.rpartition("/")
        names = directory.split("/") if directory else []
        if any(p in ("", ".", "..") for p in names):
            return []  # no key has such a component
        try:
            fd = self._dir.open_dirs(["objects", *names])
        except NotADirectory as exc:
            if exc.symlink:
                raise self._dir.refused_path(prefix) from None
            return []
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise self._dir.unavailable(prefix, exc) from None
        base = f"{directory}/" if directory else ""
        pick = _Smallest(limit)
        try:
            if delimiter == "/" and (sorted_names := self._sorted_names(fd, base)) is not None:
                return _from_index(fd, base, sorted_names, partial, start_after, limit)
            _scan(fd, base, partial, start_after, pick, recursive=delimiter != "/")
        except OSError as exc:
            raise self._dir.unavailable(prefix, exc) from None
        finally:
            os.close(fd)
        return pick.result()

    def _sorted_names(self, fd: int, base: str) -> list[str] | None:
        """The sorted names of the directory ``fd`` (``base``) from its index, made or remade here
        when its stamp changed and its timestamps have stood still ``SETTLE_SECONDS`` (read whole,
        and kept when it holds ``INDEX_FROM`` names or more); None when they have not yet, or it
        holds more than ``INDEX_NAMES`` (then the caller reads it as before, in O(page) memory)."""
        wall, began = _wall_ns(), _monotonic()  # before the stat: the names read below are all those
        info = os.fstat(fd)  # ...created by then, and a change after it changes the stamp
        stamp = _stamp(info)
        with self._index_lock:
            known = self.indexes.get(base)
            if known is not None and known.stamp == stamp and known.names is not None:
                self.indexes.move_to_end(base)
                return known.names
        settled = max(info.st_mtime_ns, info.st_ctime_ns) <= wall - int(SETTLE_SECONDS * 1e9) or (
            known is not None and known.stamp == stamp and began - known.seen >= SETTLE_SECONDS
        )
        names: list[str] | None = None
        if settled:
            names = []
            with os.scandir(fd) as entries:
                for entry in entries:
                    names.append(entry.name + "/" if entry.is_dir(follow_symlinks=False) else entry.name)
                    if len(names) > INDEX_NAMES:
                        names = None
                        break
            if names is not None:
                names.sort()
        kept = names if names is not None and len(names) >= INDEX_FROM else None  # a small one: read again
        seen = known.seen if known is not None and known.stamp == stamp else _monotonic()
        with self._index_lock:
            old = self.indexes.pop(base, None)
            self._indexed -= len(old.names) if old is not None and old.names is not None else 0
            self.indexes[base] = _Index(stamp, seen, kept)
            self._indexed += len(kept) if kept is not None else 0
            while self._indexed > INDEX_NAMES or len(self.indexes) > 4096:
                _, evicted = self.indexes.popitem(last=False)
                self._indexed -= len(evicted.names) if evicted.names is not None else 0
        return names

    def page(self, prefix: str, *, start_after: str = "", max_keys: int = 1000, delimiter: str = "") -> ListPage:
        """``ObjectStore.list_page`` of the store's objects."""
        # With delimiter "" or "/" each key read is one entry of the page (a directory is one
        # common prefix, "name/"), so the max_keys + 1 smallest decide the page and whether it is
        # truncated; another delimiter may fold many keys into one prefix: it reads them all.
        limit = max_keys + 1 if delimiter in ("", "/") else None
        chosen = self._select(prefix, start_after, limit, delimiter)
        etags = self._listed_etags(chosen[:max_keys])
        infos = {key: _listed(key, info, etags.get(key, "")) for key, info in chosen if not key.endswith("/")}
        return page_of([key for key, _ in chosen], infos.__getitem__, prefix, start_after, max_keys, delimiter)

    def _listed_etags(self, chosen: list[tuple[str, os.stat_result | None]]) -> dict[str, str]:
        """The ETag that each regular file of ``chosen`` carries in ``ETAG_XATTR`` (none where it
        carries none): a descriptor per directory, walked as every read walks it, then for each file
        an open that never follows a symlink, a read of the attribute and a close."""
        etags: dict[str, str] = {}
        if not XATTRS:
            return etags
        by_directory: dict[str, list[tuple[str, os.stat_result]]] = {}
        for key, info in chosen:
            if info is not None and stat.S_ISREG(info.st_mode):
                directory, _, name = key.rpartition("/")
                by_directory.setdefault(directory, []).append((name, info))
        for directory, names in by_directory.items():
            try:
                dir_fd = self._dir.open_dirs(["objects", *directory.split("/")] if directory else ["objects"])
            except (OSError, NotADirectory):
                continue  # removed, or replaced by a link, since it was read: listed without ETags
            try:
                for name, info in names:
                    with suppress(OSError):
                        fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
                        try:
                            recorded = os.getxattr(fd, ETAG_XATTR).decode("ascii", "replace")
                        finally:
                            os.close(fd)
                        etags[f"{directory}/{name}" if directory else name] = _etag_if_unchanged(recorded, info)
            finally:
                os.close(dir_fd)
        return etags
