"""A local store's directory, reached only below its root: the file-system primitives of
``LocalStore`` (``StoreDirectory``).

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
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from .._errors import InvalidInputError, StoreUnavailableError
from ._base import ObjectMissing, ObjectRefused, too_large
from ._memory import etag_of

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: The longest a write waits for the store's lock (``<dir>/lock``): the longest a delete of a
#: page of objects holds it is far less.
LOCK_WAIT_SECONDS = 60.0
#: Sidecars and the lifecycle file are small; a larger one is treated as damaged.
SMALL_FILE_BYTES = 1 << 20
READ_CHUNK = 1 << 20


def lstat_of(entry: os.DirEntry[str]) -> os.stat_result | None:
    try:
        return entry.stat(follow_symlinks=False)
    except OSError:
        return None  # removed since it was listed


#: The extended attribute in which a write records its object's ETag (the MD5 of its bytes, as
#: S3 gives it) with the file's size and mtime, so that a listing can give each object's ETag
#: without reading it, for as long as the file is as written (``_local_listing``). Where the
#: filesystem keeps no user attributes, or for an object written before, a listing gives "".
ETAG_XATTR = "user.evstore.etag"
XATTRS = hasattr(os, "setxattr")


class NotADirectory(Exception):
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


def is_directory(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def close_quietly(fd: int) -> None:
    with suppress(OSError):
        os.close(fd)


class StoreDirectory:
    """The directory ``base`` of a local store, reached only as the module docstring says:
    paths walked from descriptors, the lock, temporary files linked into place, regular files
    read. A failure of the system (a full disk, a permission) is ``StoreUnavailableError``."""

    def __init__(self, base: Path) -> None:
        self.base = base

    def parts(self, key: str) -> list[str]:
        parts = key.split("/")
        if not key or any(p in ("", ".", "..") for p in parts) or "\x00" in key:
            raise InvalidInputError(f"key {key!r:.100} cannot be stored in a directory")
        return parts

    def open_dirs(self, names: list[str], *, create: bool = False) -> int:
        """A descriptor of ``<dir>/<names...>``, walked with ``O_NOFOLLOW`` one component at a time
        (created when ``create``). Raises ``NotADirectory`` for a link or file in the way, and
        ``FileNotFoundError`` for a missing component."""
        fd = os.open(self.base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for name in names:
                if create:
                    with suppress(FileExistsError):
                        os.mkdir(name, 0o777, dir_fd=fd)
                try:
                    child = os.open(name, DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                        raise NotADirectory(stat.S_ISLNK(info.st_mode)) from None
                    raise
                os.close(fd)
                fd = child
        except BaseException:
            close_quietly(fd)
            raise
        return fd

    def refused_path(self, key: str) -> ObjectRefused:
        return ObjectRefused(key, "its path in the local store passes through a symlink: refused, never followed")

    @contextmanager
    def parent(self, root: str, key: str, *, create: bool = False) -> Iterator[tuple[int, str]]:
        """(descriptor of the key's directory, the key's last component). A missing directory
        raises ``ObjectMissing``; a symlink on the way ``ObjectRefused``; a file on the way
        ``ObjectMissing`` (or, when creating, ``ObjectRefused``)."""
        parts = self.parts(key)
        try:
            fd = self.open_dirs([root, *parts[:-1]], create=create)
        except NotADirectory as exc:
            if exc.symlink:
                raise self.refused_path(key) from None
            if create:
                raise ObjectRefused(key, "a file stands where a directory must be") from None
            raise ObjectMissing(key) from None
        except FileNotFoundError:
            raise ObjectMissing(key) from None
        except OSError as exc:
            raise self.unavailable(key, exc) from None
        try:
            yield fd, parts[-1]
        finally:
            close_quietly(fd)

    def unavailable(self, key: str, exc: OSError) -> StoreUnavailableError:
        return StoreUnavailableError(f"local store {str(self.base)!r}: {key!r:.200}: {exc.strerror or type(exc).__name__}")

    @contextmanager
    def locked(self, mode: int = fcntl.LOCK_EX) -> Iterator[None]:
        """``flock`` on ``<dir>/lock`` (opened ``O_NOFOLLOW``: a planted link is refused)."""
        try:
            base = os.open(self.base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                fd = os.open("lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=base)
            finally:
                os.close(base)
        except OSError as exc:
            raise self.unavailable("lock", exc) from None
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
                raise self.unavailable("lock", exc) from None

    @contextmanager
    def temp(self, data: bytes, *, named: bool = True) -> Iterator[tuple[int, str, int]]:
        """A fsynced temporary file in ``<dir>/tmp`` holding ``data``: (tmp directory descriptor,
        its name, the file's own descriptor, still open). Without ``named``, where the system can
        (``O_TMPFILE``, and ``/proc`` to link it by), the file has no name at all (""): no one
        reads a write's bytes (its write id) or swaps the file before it lands. A named one is
        mode 0600 and removed on the way out, whatever happens (a copy linked elsewhere stays)."""
        try:
            tmp_fd = self.open_dirs(["tmp"], create=True)
        except NotADirectory:
            raise ObjectRefused("tmp", "the local store's tmp directory is a link or a file") from None
        except OSError as exc:
            raise self.unavailable("tmp", exc) from None
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
                if XATTRS:
                    written = os.fstat(fd)
                    recorded = f"{etag_of(data)} {written.st_size} {written.st_mtime_ns}"
                    with suppress(OSError):  # a filesystem without user attributes: listed without an ETag
                        os.setxattr(fd, ETAG_XATTR, recorded.encode("ascii"))
                os.fsync(fd)
            except OSError as exc:
                raise self.unavailable("tmp", exc) from None
            yield tmp_fd, name, fd
        finally:
            if fd >= 0:
                close_quietly(fd)
            if name:
                with suppress(OSError):
                    os.unlink(name, dir_fd=tmp_fd)
            close_quietly(tmp_fd)

    def link(self, key: str, fd: int, tmp_fd: int, tmp: str, dir_fd: int, name: str) -> None:
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

    @contextmanager
    def open_regular(self, root: str, key: str) -> Iterator[tuple[int, os.stat_result]]:
        """An open descriptor of the regular file at ``key`` and its ``fstat``. A directory or a
        missing name is ``ObjectMissing``; a symlink, FIFO, device or socket ``ObjectRefused``."""
        with self.parent(root, key) as (dir_fd, name):
            try:
                fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
            except FileNotFoundError:
                raise ObjectMissing(key) from None
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise ObjectRefused(key, "the object is a symlink: refused, never followed") from None
                if exc.errno in (errno.ENXIO, errno.EISDIR):  # a FIFO or socket without a peer; a directory
                    raise ObjectRefused(key, "the object is not a regular file") from None
                raise self.unavailable(key, exc) from None
            try:
                info = os.fstat(fd)
                if stat.S_ISDIR(info.st_mode):
                    raise ObjectMissing(key)  # a prefix of other keys, not an object
                if not stat.S_ISREG(info.st_mode):
                    raise ObjectRefused(key, "the object is not a regular file")
                yield fd, info
            finally:
                os.close(fd)

    def read(self, key: str, max_bytes: int | None, root: str = "objects") -> tuple[bytes, os.stat_result]:
        with self.open_regular(root, key) as (fd, info):
            if max_bytes is not None and info.st_size > max_bytes:
                raise too_large(key, info.st_size, max_bytes)
            chunks: list[bytes] = []
            total = 0
            try:
                while True:
                    # no larger than the file (+1 to see it end or grow): ``os.read(fd, n)`` allocates n bytes
                    # first, and a pool reading small events must not hold 1 MiB per thread
                    chunk = os.read(fd, max(1, min(READ_CHUNK, info.st_size - total + 1)))
                    if not chunk:
                        break
                    chunks.append(chunk)
                    total += len(chunk)
                    if max_bytes is not None and total > max_bytes:  # grew while being read
                        raise too_large(key, total, max_bytes)
            except OSError as exc:
                raise self.unavailable(key, exc) from None
            return b"".join(chunks), info

    @contextmanager
    def open_base_file(self, name: str) -> Iterator[int]:
        base = os.open(self.base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fd = os.open(name, READ_FLAGS, dir_fd=base)
        finally:
            os.close(base)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file")
            yield fd
        finally:
            os.close(fd)
