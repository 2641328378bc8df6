"""A local directory as an object store: ``file:///path``, and the default store.

Objects live at ``<dir>/objects/<key>``; their metadata and tags in a sidecar
at ``<dir>/meta/<key>``. ``create`` writes a temporary file in ``<dir>/tmp``,
fsyncs it and links it into place, so an object appears whole or not at all
and never replaces another (``link`` fails if the name exists). ``replace``
and deletes take an exclusive lock on ``<dir>/lock``; ``create`` takes it
shared, so a delete that prunes empty directories never races a create into
a directory it removes. A key may not be both an object and the prefix of
another key (``a`` and ``a/b``); evstore's layout never does that.

Containment (nothing is read, written, listed or deleted outside ``<dir>``):

* Every path below ``<dir>`` is walked one component at a time from a
  directory descriptor, each opened with ``O_NOFOLLOW``: a symlink anywhere
  under the root (a session directory replaced by a link, say) makes the
  operation fail with ``ObjectRefused`` (exit 5); it is never followed.
* Only regular files are read: an object that is a symlink, FIFO, device or
  socket is refused at once (opened ``O_NONBLOCK``, so a FIFO cannot hang),
  and ``get(max_bytes=N)`` refuses a larger file by its size before reading.
* Listings never descend into symlinked directories; a symlink (or other
  non-directory) under the root is listed as an object with its own
  ``lstat`` size, and deleting it removes the link, not its target.
* ``<dir>`` itself is trusted as given (it may be reached through symlinks).

Listing: a LIST with delimiter "/" (the sessions, or one session's names) of a directory of
``INDEX_FROM`` names or more bisects an index of its sorted names, kept while the directory's
stamp (mtime, ctime, size, inode) stays the same and made only once its timestamps have stood
still ``SETTLE_SECONDS``: O(page) per page, not O(names in the directory). Other listings read
the directory whole for each page, in O(page) memory.

A temporary file is removed whatever becomes of the write; one that a killed
process left behind is swept when the store is next opened.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import secrets
import stat
import threading
import time
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from .._errors import InvalidInputError, StoreUnavailableError
from .._lifecycle import checked_rules
from ._base import (
    IncompleteUpload,
    LifecycleRule,
    ListPage,
    ObjectExists,
    ObjectInfo,
    ObjectMissing,
    ObjectRefused,
    ObjectStore,
    PreconditionFailed,
    StoredObject,
    too_large,
)
from ._memory import etag_of, page_of

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: A temporary file older than this was left by a process that died mid-write.
STALE_TMP_SECONDS = 3600
#: The longest a write waits for the store's lock (``<dir>/lock``): the longest a delete of a
#: page of objects holds it is far less.
LOCK_WAIT_SECONDS = 60.0
#: Sidecars and the lifecycle file are small; a larger one is treated as damaged.
_SMALL_FILE_BYTES = 1 << 20
_CHUNK = 1 << 20


class _Sidecar(msgspec.Struct):
    metadata: dict[str, str] = {}
    tags: dict[str, str] = {}


def _lstat(entry: os.DirEntry[str]) -> os.stat_result | None:
    try:
        return entry.stat(follow_symlinks=False)
    except OSError:
        return None  # removed since it was listed


#: The extended attribute in which a write records its object's ETag (the MD5 of its bytes, as
#: S3 gives it) with the file's size and mtime, so that a listing can give each object's ETag
#: without reading it, for as long as the file is as written (``_etag_if_unchanged``). Where the
#: filesystem keeps no user attributes, or for an object written before, a listing gives "".
_ETAG_XATTR = "user.evstore.etag"
_XATTRS = hasattr(os, "setxattr")


def _etag_if_unchanged(recorded: str, info: os.stat_result) -> str:
    """The ETag a write recorded in ``_ETAG_XATTR`` ("etag size mtime_ns"), while the file is as
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


class _NotADirectory(Exception):
    """A path component below the root exists but is not a directory (``symlink`` says if it is a link)."""

    def __init__(self, symlink: bool) -> None:
        self.symlink = symlink


#: Where this process's open files can be named from (Linux), which lets ``create`` land a file
#: that never had a name (``O_TMPFILE``).
_PROC_SELF_FD = "/proc/self/fd"


def _anonymous_file(dir_fd: int) -> int:
    """An open file without a name (``O_TMPFILE``, mode 0600) in the directory ``dir_fd``, or -1
    where the system or the filesystem makes none, or ``_PROC_SELF_FD`` is not there to link it by."""
    if not hasattr(os, "O_TMPFILE") or not os.path.isdir(_PROC_SELF_FD):
        return -1
    try:
        return os.open(".", os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    except OSError:
        return -1


def _is_directory(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _close(fd: int) -> None:
    with suppress(OSError):
        os.close(fd)


#: How many names ``LocalStore.list`` takes per read of a directory.
LIST_CHUNK = 5000


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
                child = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
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
                pick.offer(key, _lstat(entry))
    return sorted(subdirs)


class LocalStore(ObjectStore):
    def __init__(self, directory: str | os.PathLike[str], *, create: bool = True) -> None:
        """The store in ``directory``, made there when missing. With ``create=False`` (a caller
        that must not make one where a path may be mistyped) a directory that does not exist, or
        holds files but no store (no ``objects`` directory), is ``StoreUnavailableError`` and
        nothing is made; an empty directory is an empty store, as an empty bucket is."""
        self.base = Path(directory)
        self.location = f"file://{self.base}"
        if not create:
            self._check_exists()
        try:
            self.base.mkdir(parents=True, exist_ok=True)
            for name in ("objects", "meta", "tmp"):
                fd = self._open_dirs([name], create=True)
                _close(fd)
        except _NotADirectory:
            raise StoreUnavailableError(
                f"cannot use directory {str(self.base)!r}: objects, meta and tmp must be directories, not links"
            ) from None
        except OSError as exc:
            raise StoreUnavailableError(f"cannot use directory {str(self.base)!r}: {exc.strerror}") from None
        self._claim_base_files()
        self._indexes: OrderedDict[str, _Index] = OrderedDict()
        self._indexed = 0  # names held by the indexes
        self._index_lock = threading.Lock()
        self._sweep_tmp()

    def _check_exists(self) -> None:
        """``StoreUnavailableError`` unless the directory holds a store or nothing at all (one
        directory entry read, not the whole listing of a large directory that is no store)."""
        if (self.base / "objects").is_dir():
            return
        try:
            with os.scandir(self.base) as entries:
                empty = next(entries, None) is None
        except FileNotFoundError:
            raise StoreUnavailableError(f"no store in directory {str(self.base)!r}: it does not exist") from None
        except OSError as exc:
            raise StoreUnavailableError(f"cannot use directory {str(self.base)!r}: {exc.strerror}") from None
        if not empty:
            raise StoreUnavailableError(f"no store in directory {str(self.base)!r}: it holds other files, and no evstore objects")

    def _claim_base_files(self) -> None:
        """Create ``lock`` (0600) and ``lifecycle.json`` (no rules) where they are missing, so that
        one who may create files in the directory cannot be first to: a lock file of theirs they
        could hold (every write would wait on it), a rules file of theirs ``gc --apply-lifecycle``
        would obey. Best effort: a read-only store is used as it is."""
        for name, data, mode in (("lock", b"", 0o600), ("lifecycle.json", b"[]", 0o644)):
            try:
                base = os.open(self.base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=base)
                finally:
                    os.close(base)
            except OSError:
                continue  # there already (or not ours to create)
            try:
                os.write(fd, data)
            except OSError:
                pass
            finally:
                os.close(fd)

    def _sweep_tmp(self) -> None:
        """Remove temporary files a killed process left in ``<dir>/tmp`` (older than
        ``STALE_TMP_SECONDS``: a write in progress is never that old)."""
        cutoff = time.time() - STALE_TMP_SECONDS
        try:
            fd = self._open_dirs(["tmp"])
        except (_NotADirectory, OSError):
            return
        try:
            with os.scandir(fd) as entries:
                found = [(e.name, _lstat(e)) for e in entries if e.name.startswith("t-")]
            for name, info in found:
                if info is not None and info.st_mtime < cutoff:
                    with suppress(OSError):
                        os.unlink(name, dir_fd=fd)
        except OSError:
            return  # a sweep is best effort
        finally:
            os.close(fd)

    # ---- paths ---------------------------------------------------------------------------

    def _parts(self, key: str) -> list[str]:
        parts = key.split("/")
        if not key or any(p in ("", ".", "..") for p in parts) or "\x00" in key:
            raise InvalidInputError(f"key {key!r:.100} cannot be stored in a directory")
        return parts

    def _open_dirs(self, names: list[str], *, create: bool = False) -> int:
        """A descriptor of ``<dir>/<names...>``, walked with ``O_NOFOLLOW`` one component at a time
        (created when ``create``). Raises ``_NotADirectory`` for a link or file in the way, and
        ``FileNotFoundError`` for a missing component."""
        fd = os.open(self.base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for name in names:
                if create:
                    with suppress(FileExistsError):
                        os.mkdir(name, 0o777, dir_fd=fd)
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                        raise _NotADirectory(stat.S_ISLNK(info.st_mode)) from None
                    raise
                os.close(fd)
                fd = child
        except BaseException:
            _close(fd)
            raise
        return fd

    def _refused_path(self, key: str) -> ObjectRefused:
        return ObjectRefused(key, "its path in the local store passes through a symlink: refused, never followed")

    @contextmanager
    def _parent(self, root: str, key: str, *, create: bool = False) -> Iterator[tuple[int, str]]:
        """(descriptor of the key's directory, the key's last component). A missing directory
        raises ``ObjectMissing``; a symlink on the way ``ObjectRefused``; a file on the way
        ``ObjectMissing`` (or, when creating, ``ObjectRefused``)."""
        parts = self._parts(key)
        try:
            fd = self._open_dirs([root, *parts[:-1]], create=create)
        except _NotADirectory as exc:
            if exc.symlink:
                raise self._refused_path(key) from None
            if create:
                raise ObjectRefused(key, "a file stands where a directory must be") from None
            raise ObjectMissing(key) from None
        except FileNotFoundError:
            raise ObjectMissing(key) from None
        except OSError as exc:
            raise self._unavailable(key, exc) from None
        try:
            yield fd, parts[-1]
        finally:
            _close(fd)

    def _unavailable(self, key: str, exc: OSError) -> StoreUnavailableError:
        return StoreUnavailableError(f"local store {str(self.base)!r}: {key!r:.200}: {exc.strerror or type(exc).__name__}")

    @contextmanager
    def _locked(self, mode: int = fcntl.LOCK_EX) -> Iterator[None]:
        """``flock`` on ``<dir>/lock`` (opened ``O_NOFOLLOW``: a planted link is refused)."""
        try:
            base = os.open(self.base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                fd = os.open("lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=base)
            finally:
                os.close(base)
        except OSError as exc:
            raise self._unavailable("lock", exc) from None
        try:
            self._wait_for_lock(fd, mode)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _wait_for_lock(self, fd: int, mode: int) -> None:
        """Take the lock, polling for at most ``LOCK_WAIT_SECONDS``: a lock that another process
        holds that long (a stranger's, planted and held) is ``StoreUnavailableError``, not a hang."""
        deadline = time.monotonic() + LOCK_WAIT_SECONDS
        pause = 0.001
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise StoreUnavailableError(
                        f"local store {str(self.base)!r}: its lock is held by another process"
                        f" for more than {LOCK_WAIT_SECONDS:.0f} s"
                    ) from None
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
            except OSError as exc:
                raise self._unavailable("lock", exc) from None

    # ---- writing -------------------------------------------------------------------------

    @contextmanager
    def _temp(self, data: bytes, *, named: bool = True) -> Iterator[tuple[int, str, int]]:
        """A fsynced temporary file in ``<dir>/tmp`` holding ``data``: (tmp directory descriptor,
        its name, the file's own descriptor, still open). Without ``named``, where the system can
        (``O_TMPFILE``, and ``/proc`` to link it by), the file has no name at all (""): no one
        reads a write's bytes (its write id) or swaps the file before it lands. A named one is
        mode 0600 and removed on the way out, whatever happens (a copy linked elsewhere stays)."""
        try:
            tmp_fd = self._open_dirs(["tmp"], create=True)
        except _NotADirectory:
            raise ObjectRefused("tmp", "the local store's tmp directory is a link or a file") from None
        except OSError as exc:
            raise self._unavailable("tmp", exc) from None
        name = ""
        fd = -1 if named else _anonymous_file(tmp_fd)
        try:
            try:
                if fd < 0:
                    name = f"t-{secrets.token_hex(12)}"
                    fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=tmp_fd)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                if _XATTRS:
                    written = os.fstat(fd)
                    recorded = f"{etag_of(data)} {written.st_size} {written.st_mtime_ns}"
                    with suppress(OSError):  # a filesystem without user attributes: listed without an ETag
                        os.setxattr(fd, _ETAG_XATTR, recorded.encode("ascii"))
                os.fsync(fd)
            except OSError as exc:
                raise self._unavailable("tmp", exc) from None
            yield tmp_fd, name, fd
        finally:
            if fd >= 0:
                _close(fd)
            if name:
                with suppress(OSError):
                    os.unlink(name, dir_fd=tmp_fd)
            _close(tmp_fd)

    def _link(self, key: str, fd: int, tmp_fd: int, tmp: str, dir_fd: int, name: str) -> None:
        """Give the temporary file ``_temp`` made (open as ``fd``) the name ``name`` in ``dir_fd``;
        ``FileExistsError`` if the name is taken. One without a name is linked by its descriptor.
        A named one is linked by its name and the linked inode checked against the open file's:
        a file swapped in under that name (one who may create files in ``tmp`` can rename over
        it) is unlinked again and refused, never landed as ours."""
        if not tmp:
            os.link(f"{_PROC_SELF_FD}/{fd}", name, dst_dir_fd=dir_fd, follow_symlinks=True)
            return
        os.link(tmp, name, src_dir_fd=tmp_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        ours = os.fstat(fd)
        linked = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if (linked.st_dev, linked.st_ino) != (ours.st_dev, ours.st_ino):
            with suppress(OSError):
                os.unlink(name, dir_fd=dir_fd)
            raise ObjectRefused(key, "its temporary file was replaced before it was linked: refused")

    def _write_sidecar(self, key: str, metadata: Mapping[str, str] | None, tags: Mapping[str, str] | None) -> None:
        data = msgspec.json.encode(_Sidecar(dict(metadata or {}), dict(tags or {})))
        with self._parent("meta", key, create=True) as (dir_fd, name), self._temp(data) as (tmp_fd, tmp, _):
            try:
                os.replace(tmp, name, src_dir_fd=tmp_fd, dst_dir_fd=dir_fd)
            except OSError as exc:
                raise self._unavailable(key, exc) from None

    def create(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None
    ) -> str:
        self._parts(key)
        with self._locked(fcntl.LOCK_SH):
            with self._parent("objects", key, create=True) as (dir_fd, name), self._temp(data, named=False) as (tmp_fd, tmp, fd):
                try:
                    self._link(key, fd, tmp_fd, tmp, dir_fd, name)
                    os.fsync(dir_fd)
                except FileExistsError:
                    if _is_directory(dir_fd, name):  # planted: no object is there, and none can be
                        raise ObjectRefused(key, "a directory stands where the object goes") from None
                    raise ObjectExists(key) from None
                except OSError as exc:
                    raise self._unavailable(key, exc) from None
            # the object is in place: the create succeeded, whatever becomes of its sidecar. One that
            # cannot be written (a directory planted at its path, a full disk) leaves the object
            # without metadata and tags (no lifecycle rule expires it), never a failed create that a
            # retry would make twice
            with suppress(StoreUnavailableError, ObjectRefused):
                self._write_sidecar(key, metadata, tags)
        return etag_of(data)

    def replace(
        self,
        key: str,
        data: bytes,
        *,
        etag: str,
        metadata: Mapping[str, str] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> str:
        with self._locked():
            try:
                current = self._read(key, None)[0]
            except ObjectMissing:
                raise PreconditionFailed(key) from None
            if etag_of(current) != etag:
                raise PreconditionFailed(key)
            self._write_sidecar(key, metadata, tags)
            with self._parent("objects", key) as (dir_fd, name), self._temp(data) as (tmp_fd, tmp, _):
                try:
                    os.replace(tmp, name, src_dir_fd=tmp_fd, dst_dir_fd=dir_fd)
                    os.fsync(dir_fd)
                except OSError as exc:
                    raise self._unavailable(key, exc) from None
        return etag_of(data)

    # ---- reading -------------------------------------------------------------------------

    @contextmanager
    def _open_regular(self, root: str, key: str) -> Iterator[tuple[int, os.stat_result]]:
        """An open descriptor of the regular file at ``key`` and its ``fstat``. A directory or a
        missing name is ``ObjectMissing``; a symlink, FIFO, device or socket ``ObjectRefused``."""
        with self._parent(root, key) as (dir_fd, name):
            try:
                fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
            except FileNotFoundError:
                raise ObjectMissing(key) from None
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise ObjectRefused(key, "the object is a symlink: refused, never followed") from None
                if exc.errno in (errno.ENXIO, errno.EISDIR):  # a FIFO or socket without a peer; a directory
                    raise ObjectRefused(key, "the object is not a regular file") from None
                raise self._unavailable(key, exc) from None
            try:
                info = os.fstat(fd)
                if stat.S_ISDIR(info.st_mode):
                    raise ObjectMissing(key)  # a prefix of other keys, not an object
                if not stat.S_ISREG(info.st_mode):
                    raise ObjectRefused(key, "the object is not a regular file")
                yield fd, info
            finally:
                os.close(fd)

    def _read(self, key: str, max_bytes: int | None, root: str = "objects") -> tuple[bytes, os.stat_result]:
        with self._open_regular(root, key) as (fd, info):
            if max_bytes is not None and info.st_size > max_bytes:
                raise too_large(key, info.st_size, max_bytes)
            chunks: list[bytes] = []
            total = 0
            try:
                while True:
                    # no larger than the file (+1 to see it end or grow): ``os.read(fd, n)`` allocates n bytes
                    # first, and a pool reading small events must not hold 1 MiB per thread
                    chunk = os.read(fd, max(1, min(_CHUNK, info.st_size - total + 1)))
                    if not chunk:
                        break
                    chunks.append(chunk)
                    total += len(chunk)
                    if max_bytes is not None and total > max_bytes:  # grew while being read
                        raise too_large(key, total, max_bytes)
            except OSError as exc:
                raise self._unavailable(key, exc) from None
            return b"".join(chunks), info

    def _read_sidecar(self, key: str) -> _Sidecar:
        try:
            data = self._read(key, _SMALL_FILE_BYTES, root="meta")[0]
            return msgspec.json.decode(data, type=_Sidecar)
        except (ObjectMissing, ObjectRefused, StoreUnavailableError, msgspec.DecodeError, msgspec.ValidationError):
            return _Sidecar()

    def get(self, key: str, *, max_bytes: int | None = None) -> StoredObject:
        data, info = self._read(key, max_bytes)
        modified = datetime.fromtimestamp(info.st_mtime, UTC)
        return StoredObject(key, data, etag_of(data), modified, self._read_sidecar(key).metadata)

    def head(self, key: str) -> ObjectInfo:
        """Size, ETag (the MD5 of the content, hashed in chunks: memory stays small) and metadata."""
        with self._open_regular("objects", key) as (fd, info):
            digest = hashlib.md5(usedforsecurity=False)
            size = 0
            try:
                while chunk := os.read(fd, _CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
            except OSError as exc:
                raise self._unavailable(key, exc) from None
        modified = datetime.fromtimestamp(info.st_mtime, UTC)
        return ObjectInfo(key, size, f'"{digest.hexdigest()}"', modified, self._read_sidecar(key).metadata)

    # ---- listing -------------------------------------------------------------------------

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
            fd = self._open_dirs(["objects", *names])
        except _NotADirectory as exc:
            if exc.symlink:
                raise self._refused_path(prefix) from None
            return []
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise self._unavailable(prefix, exc) from None
        base = f"{directory}/" if directory else ""
        pick = _Smallest(limit)
        try:
            if delimiter == "/" and (sorted_names := self._sorted_names(fd, base)) is not None:
                return _from_index(fd, base, sorted_names, partial, start_after, limit)
            _scan(fd, base, partial, start_after, pick, recursive=delimiter != "/")
        except OSError as exc:
            raise self._unavailable(prefix, exc) from None
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
            known = self._indexes.get(base)
            if known is not None and known.stamp == stamp and known.names is not None:
                self._indexes.move_to_end(base)
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
            old = self._indexes.pop(base, None)
            self._indexed -= len(old.names) if old is not None and old.names is not None else 0
            self._indexes[base] = _Index(stamp, seen, kept)
            self._indexed += len(kept) if kept is not None else 0
            while self._indexed > INDEX_NAMES or len(self._indexes) > 4096:
                _, evicted = self._indexes.popitem(last=False)
                self._indexed -= len(evicted.names) if evicted.names is not None else 0
        return names

    def list_page(self, prefix: str, *, start_after: str = "", max_keys: int = 1000, delimiter: str = "") -> ListPage:
        # With delimiter "" or "/" each key read is one entry of the page (a directory is one
        # common prefix, "name/"), so the max_keys + 1 smallest decide the page and whether it is
        # truncated; another delimiter may fold many keys into one prefix: it reads them all.
        limit = max_keys + 1 if delimiter in ("", "/") else None
        chosen = self._select(prefix, start_after, limit, delimiter)
        etags = self._listed_etags(chosen[:max_keys])
        infos = {key: _listed(key, info, etags.get(key, "")) for key, info in chosen if not key.endswith("/")}
        return page_of([key for key, _ in chosen], infos.__getitem__, prefix, start_after, max_keys, delimiter)

    def _listed_etags(self, chosen: list[tuple[str, os.stat_result | None]]) -> dict[str, str]:
        """The ETag that each regular file of ``chosen`` carries in ``_ETAG_XATTR`` (none where it
        carries none): a descriptor per directory, walked as every read walks it, then for each file
        an open that never follows a symlink, a read of the attribute and a close."""
        etags: dict[str, str] = {}
        if not _XATTRS:
            return etags
        by_directory: dict[str, list[tuple[str, os.stat_result]]] = {}
        for key, info in chosen:
            if info is not None and stat.S_ISREG(info.st_mode):
                directory, _, name = key.rpartition("/")
                by_directory.setdefault(directory, []).append((name, info))
        for directory, names in by_directory.items():
            try:
                dir_fd = self._open_dirs(["objects", *directory.split("/")] if directory else ["objects"])
            except (OSError, _NotADirectory):
                continue  # removed, or replaced by a link, since it was read: listed without ETags
            try:
                for name, info in names:
                    with suppress(OSError):
                        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
                        try:
                            recorded = os.getxattr(fd, _ETAG_XATTR).decode("ascii", "replace")
                        finally:
                            os.close(fd)
                        etags[f"{directory}/{name}" if directory else name] = _etag_if_unchanged(recorded, info)
            finally:
                os.close(dir_fd)
        return etags

    # ---- deleting ------------------------------------------------------------------------

    def delete_many(self, keys: Iterable[str]) -> int:
        """Unlink each key's object and sidecar (a link itself, never its target) and prune the
        directories left empty. A key whose path passes through a symlink is refused."""
        count = 0
        with self._locked():
            for key in keys:
                count += 1
                parts = self._parts(key)
                for root in ("objects", "meta"):
                    try:
                        with self._parent(root, key) as (dir_fd, name):
                            os.unlink(name, dir_fd=dir_fd)
                    except (ObjectMissing, FileNotFoundError, IsADirectoryError):
                        continue
                    except OSError as exc:
                        raise self._unavailable(key, exc) from None
                    self._prune(root, parts[:-1])
        return (count + 999) // 1000

    def _prune(self, root: str, names: list[str]) -> None:
        """Remove the now-empty directories ``names`` (deepest first) below ``root``; ``rmdir``
        never follows a link, and a non-empty directory stops the walk."""
        while names:
            try:
                parent = self._open_dirs([root, *names[:-1]])
            except (_NotADirectory, OSError):
                return
            try:
                os.rmdir(names[-1], dir_fd=parent)
            except OSError:
                return
            finally:
                os.close(parent)
            names = names[:-1]

    # ---- tags, lifecycle, uploads --------------------------------------------------------

    def get_tags(self, key: str) -> dict[str, str]:
        with self._open_regular("objects", key):
            pass
        return dict(self._read_sidecar(key).tags)

    def get_lifecycle(self) -> list[LifecycleRule]:
        try:
            with self._open_base_file("lifecycle.json") as fd:
                data = os.read(fd, _SMALL_FILE_BYTES + 1)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise self._unavailable("lifecycle.json", exc) from None
        where = f"local store {str(self.base)!r}: lifecycle.json"
        try:
            rules = msgspec.json.decode(data, type=list[dict[str, Any]])
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            raise StoreUnavailableError(f"{where} is damaged: not a list of rules") from None
        return checked_rules(rules, where)

    @contextmanager
    def _open_base_file(self, name: str) -> Iterator[int]:
        base = os.open(self.base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=base)
        finally:
            os.close(base)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file")
            yield fd
        finally:
            os.close(fd)

    def put_lifecycle(self, rules: list[LifecycleRule]) -> None:
        with self._temp(msgspec.json.encode(rules)) as (tmp_fd, tmp, _):
            base = os.open(self.base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.replace(tmp, "lifecycle.json", src_dir_fd=tmp_fd, dst_dir_fd=base)
            except OSError as exc:
                raise self._unavailable("lifecycle.json", exc) from None
            finally:
                os.close(base)

    def list_incomplete_uploads(self, prefix: str) -> Iterator[IncompleteUpload]:
        return iter(())

    def abort_upload(self, key: str, upload_id: str) -> None:
        raise ObjectMissing(key)

    def list(self, prefix: str, *, start_after: str = "", page_size: int = 1000) -> Iterator[ObjectInfo]:
        """Every object under ``prefix`` after ``start_after``, in key order, ``LIST_CHUNK`` names
        per read of the directory: memory stays O(chunk) at any size, and a listing of N objects
        reads the directory ceil(N / chunk) times."""
        while True:
            page = self.list_page(prefix, start_after=start_after, max_keys=max(page_size, LIST_CHUNK))
            yield from page.objects
            if not page.truncated:
                return
            start_after = page.next_start_after
