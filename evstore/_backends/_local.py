"""A local directory as an object store: ``file:///path``, and the default store.

Objects live at ``<dir>/objects/<key>``; their metadata and tags in a sidecar
at ``<dir>/meta/<key>``. ``create`` writes a temporary file in ``<dir>/tmp``,
fsyncs it and links it into place, so an object appears whole or not at all
and never replaces another (``link`` fails if the name exists). ``replace``
and deletes take an exclusive lock on ``<dir>/lock``; ``create`` takes it
shared, so a delete that prunes empty directories never races a create into
a directory it removes. A key may not be both an object and the prefix of
another key (``a`` and ``a/b``); evstore's layout never does that.

Nothing outside ``<dir>`` is read, written, listed or deleted: every path is walked from
descriptors without following a symlink (``_local_files``, whose docstring says how). Listings
of large directories bisect an index of their names (``_local_listing``).

A temporary file is removed whatever becomes of the write; one that a killed
process left behind is swept when the store is next opened.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from .._errors import StoreUnavailableError
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
)
from ._local_files import (
    READ_CHUNK,
    SMALL_FILE_BYTES,
    NotADirectory,
    StoreDirectory,
    close_quietly,
    is_directory,
    lstat_of,
)
from ._local_listing import SETTLE_SECONDS, DirectoryListing
from ._memory import etag_of

#: ``SETTLE_SECONDS`` is ``_local_listing``'s, named here as benchmarks/scale.py imports it.
__all__ = ["SETTLE_SECONDS", "LocalStore"]

#: A temporary file older than this was left by a process that died mid-write.
STALE_TMP_SECONDS = 3600
#: How many names ``LocalStore.list`` takes per read of a directory.
LIST_CHUNK = 5000


class _Sidecar(msgspec.Struct):
    metadata: dict[str, str] = {}
    tags: dict[str, str] = {}


class LocalStore(ObjectStore):
    def __init__(self, directory: str | os.PathLike[str], *, create: bool = True) -> None:
        """The store in ``directory``, made there when missing. With ``create=False`` (a caller
        that must not make one where a path may be mistyped) a directory that does not exist, or
        holds files but no store (no ``objects`` directory), is ``StoreUnavailableError`` and
        nothing is made; an empty directory is an empty store, as an empty bucket is."""
        self.base = Path(directory)
        self.location = f"file://{self.base}"
        self._dir = StoreDirectory(self.base)
        if not create:
            self._check_exists()
        try:
            self.base.mkdir(parents=True, exist_ok=True)
            for name in ("objects", "meta", "tmp"):
                fd = self._dir.open_dirs([name], create=True)
                close_quietly(fd)
        except NotADirectory:
            raise StoreUnavailableError(
                f"cannot use directory {str(self.base)!r}: objects, meta and tmp must be directories, not links"
            ) from None
        except OSError as exc:
            raise StoreUnavailableError(f"cannot use directory {str(self.base)!r}: {exc.strerror}") from None
        self._claim_base_files()
        self._listing = DirectoryListing(self._dir)
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
            fd = self._dir.open_dirs(["tmp"])
        except (NotADirectory, OSError):
            return
        try:
            with os.scandir(fd) as entries:
                found = [(e.name, lstat_of(e)) for e in entries if e.name.startswith("t-")]
            for name, info in found:
                if info is not None and info.st_mtime < cutoff:
                    with suppress(OSError):
                        os.unlink(name, dir_fd=fd)
        except OSError:
            return  # a sweep is best effort
        finally:
            os.close(fd)

    # ---- writing -------------------------------------------------------------------------

    def _write_sidecar(self, key: str, metadata: Mapping[str, str] | None, tags: Mapping[str, str] | None) -> None:
        data = msgspec.json.encode(_Sidecar(dict(metadata or {}), dict(tags or {})))
        with self._dir.parent("meta", key, create=True) as (dir_fd, name), self._dir.temp(data) as (tmp_fd, tmp, _):
            try:
                os.replace(tmp, name, src_dir_fd=tmp_fd, dst_dir_fd=dir_fd)
            except OSError as exc:
                raise self._dir.unavailable(key, exc) from None

    def create(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None
    ) -> str:
        self._dir.parts(key)
        with self._dir.locked(fcntl.LOCK_SH):
            with (
                self._dir.parent("objects", key, create=True) as (dir_fd, name),
                self._dir.temp(data, named=False) as (tmp_fd, tmp, fd),
            ):
                try:
                    self._dir.link(key, fd, tmp_fd, tmp, dir_fd, name)
                    os.fsync(dir_fd)
                except FileExistsError:
                    if is_directory(dir_fd, name):  # planted: no object is there, and none can be
                        raise ObjectRefused(key, "a directory stands where the object goes") from None
                    raise ObjectExists(key) from None
                except OSError as exc:
                    raise self._dir.unavailable(key, exc) from None
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
        with self._dir.locked():
            try:
                current = self._dir.read(key, None)[0]
            except ObjectMissing:
                raise PreconditionFailed(key) from None
            if etag_of(current) != etag:
                raise PreconditionFailed(key)
            self._write_sidecar(key, metadata, tags)
            with self._dir.parent("objects", key) as (dir_fd, name), self._dir.temp(data) as (tmp_fd, tmp, _):
                try:
                    os.replace(tmp, name, src_dir_fd=tmp_fd, dst_dir_fd=dir_fd)
                    os.fsync(dir_fd)
                except OSError as exc:
                    raise self._dir.unavailable(key, exc) from None
        return etag_of(data)

    # ---- reading -------------------------------------------------------------------------

    def _read_sidecar(self, key: str) -> _Sidecar:
        try:
            data = self._dir.read(key, SMALL_FILE_BYTES, root="meta")[0]
            return msgspec.json.decode(data, type=_Sidecar)
        except (ObjectMissing, ObjectRefused, StoreUnavailableError, msgspec.DecodeError, msgspec.ValidationError):
            return _Sidecar()

    def get(self, key: str, *, max_bytes: int | None = None) -> StoredObject:
        data, info = self._dir.read(key, max_bytes)
        modified = datetime.fromtimestamp(info.st_mtime, UTC)
        return StoredObject(key, data, etag_of(data), modified, self._read_sidecar(key).metadata)

    def head(self, key: str) -> ObjectInfo:
        """Size, ETag (the MD5 of the content, hashed in chunks: memory stays small) and metadata."""
        with self._dir.open_regular("objects", key) as (fd, info):
            digest = hashlib.md5(usedforsecurity=False)
            size = 0
            try:
                while chunk := os.read(fd, READ_CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
            except OSError as exc:
                raise self._dir.unavailable(key, exc) from None
        modified = datetime.fromtimestamp(info.st_mtime, UTC)
        return ObjectInfo(key, size, f'"{digest.hexdigest()}"', modified, self._read_sidecar(key).metadata)

    # ---- listing -------------------------------------------------------------------------

    def list_page(self, prefix: str, *, start_after: str = "", max_keys: int = 1000, delimiter: str = "") -> ListPage:
        return self._listing.page(prefix, start_after=start_after, max_keys=max_keys, delimiter=delimiter)

    # ---- deleting ------------------------------------------------------------------------

    def delete_many(self, keys: Iterable[str]) -> int:
        """Unlink each key's object and sidecar (a link itself, never its target) and prune the
        directories left empty. A key whose path passes through a symlink is refused."""
        count = 0
        with self._dir.locked():
            for key in keys:
                count += 1
                parts = self._dir.parts(key)
                for root in ("objects", "meta"):
                    try:
                        with self._dir.parent(root, key) as (dir_fd, name):
                            os.unlink(name, dir_fd=dir_fd)
                    except (ObjectMissing, FileNotFoundError, IsADirectoryError):
                        continue
                    except OSError as exc:
                        raise self._dir.unavailable(key, exc) from None
                    self._prune(root, parts[:-1])
        return (count + 999) // 1000

    def _prune(self, root: str, names: list[str]) -> None:
        """Remove the now-empty directories ``names`` (deepest first) below ``root``; ``rmdir``
        never follows a link, and a non-empty directory stops the walk."""
        while names:
            try:
                parent = self._dir.open_dirs([root, *names[:-1]])
            except (NotADirectory, OSError):
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
        with self._dir.open_regular("objects", key):
            pass
        return dict(self._read_sidecar(key).tags)

    def get_lifecycle(self) -> list[LifecycleRule]:
        try:
            with self._dir.open_base_file("lifecycle.json") as fd:
                data = os.read(fd, SMALL_FILE_BYTES + 1)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise self._dir.unavailable("lifecycle.json", exc) from None
        where = f"local store {str(self.base)!r}: lifecycle.json"
        try:
            rules = msgspec.json.decode(data, type=list[dict[str, Any]])
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            raise StoreUnavailableError(f"{where} is damaged: not a list of rules") from None
        return checked_rules(rules, where)

    def put_lifecycle(self, rules: list[LifecycleRule]) -> None:
        with self._dir.temp(msgspec.json.encode(rules)) as (tmp_fd, tmp, _):
            base = os.open(self.base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.replace(tmp, "lifecycle.json", src_dir_fd=tmp_fd, dst_dir_fd=base)
            except OSError as exc:
                raise self._dir.unavailable("lifecycle.json", exc) from None
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
