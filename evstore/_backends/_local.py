"""A local directory as an object store: ``file:///path``, and the default store.

Objects live at ``<dir>/objects/<key>``; their metadata and tags in a sidecar
at ``<dir>/meta/<key>``. ``create`` writes a temporary file, fsyncs it and
links it into place, so an object appears whole or not at all and never
replaces another (``link`` fails if the name exists). ``replace`` and deletes
take an exclusive lock on ``<dir>/lock``. A key may not be both an object and
the prefix of another key (``a`` and ``a/b``); evstore's layout never does that.
"""

from __future__ import annotations

import bisect
import fcntl
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from .._errors import InvalidInputError, StoreUnavailableError
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
)
from ._memory import etag_of, page_of


class _Sidecar(msgspec.Struct):
    metadata: dict[str, str] = {}
    tags: dict[str, str] = {}


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalStore(ObjectStore):
    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.base = Path(directory)
        self.location = f"file://{self.base}"
        self._objects = self.base / "objects"
        self._meta = self.base / "meta"
        self._tmp = self.base / "tmp"
        try:
            for path in (self._objects, self._meta, self._tmp):
                path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreUnavailableError(f"cannot use directory {str(self.base)!r}: {exc.strerror}") from None

    def _path(self, root: Path, key: str) -> Path:
        parts = key.split("/")
        if not key or any(p in ("", ".", "..") for p in parts):
            raise InvalidInputError(f"key {key!r:.100} cannot be stored in a directory")
        return root.joinpath(*parts)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.base / "lock", "a+b") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _write_temp(self, data: bytes) -> Path:
        fd, name = tempfile.mkstemp(dir=self._tmp)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        return Path(name)

    def _write_sidecar(self, key: str, metadata: Mapping[str, str] | None, tags: Mapping[str, str] | None) -> None:
        path = self._path(self._meta, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._write_temp(msgspec.json.encode(_Sidecar(dict(metadata or {}), dict(tags or {}))))
        os.replace(tmp, path)

    def _read_sidecar(self, key: str) -> _Sidecar:
        try:
            return msgspec.json.decode(self._path(self._meta, key).read_bytes(), type=_Sidecar)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError):
            return _Sidecar()

    def create(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None
    ) -> str:
        path = self._path(self._objects, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._write_temp(data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise ObjectExists(key) from None
        finally:
            tmp.unlink()
        _fsync_dir(path.parent)
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
        path = self._path(self._objects, key)
        with self._locked():
            try:
                current = path.read_bytes()
            except FileNotFoundError:
                raise PreconditionFailed(key) from None
            if etag_of(current) != etag:
                raise PreconditionFailed(key)
            self._write_sidecar(key, metadata, tags)
            os.replace(self._write_temp(data), path)
            _fsync_dir(path.parent)
        return etag_of(data)

    def get(self, key: str) -> StoredObject:
        path = self._path(self._objects, key)
        try:
            data = path.read_bytes()
            modified = datetime.fromtimestamp(path.stat().st_mtime, UTC)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise ObjectMissing(key) from None
        return StoredObject(key, data, etag_of(data), modified, self._read_sidecar(key).metadata)

    def head(self, key: str) -> ObjectInfo:
        stored = self.get(key)
        return ObjectInfo(key, len(stored.data), stored.etag, stored.last_modified, stored.metadata)

    def _keys_under(self, prefix: str, delimiter: str) -> list[str]:
        directory, _, _ = prefix.rpartition("/")
        start = self._objects.joinpath(*directory.split("/")) if directory else self._objects
        keys: list[str] = []
        if delimiter == "/":
            try:
                entries = list(os.scandir(start))
            except (FileNotFoundError, NotADirectoryError):
                return []
            for entry in entries:
                name = f"{directory}/{entry.name}" if directory else entry.name
                keys.append(name + "/" if entry.is_dir() else name)
            return sorted(keys)
        for dirpath, _, filenames in os.walk(start):
            rel = os.path.relpath(dirpath, self._objects).replace(os.sep, "/")
            for filename in filenames:
                keys.append(filename if rel == "." else f"{rel}/{filename}")
        return sorted(keys)

    def _info(self, key: str) -> ObjectInfo:
        path = self._path(self._objects, key)
        try:
            stat = path.stat()
        except FileNotFoundError:
            return ObjectInfo(key, 0, "", datetime.fromtimestamp(0, UTC))
        return ObjectInfo(key, stat.st_size, "", datetime.fromtimestamp(stat.st_mtime, UTC))

    def list_page(self, prefix: str, *, start_after: str = "", max_keys: int = 1000, delimiter: str = "") -> ListPage:
        # with delimiter "/", directories come back as "name/" and fold into prefixes
        keys = self._keys_under(prefix, delimiter)
        return page_of(keys, self._info, prefix, start_after, max_keys, delimiter)

    def delete_many(self, keys: Iterable[str]) -> int:
        count = 0
        with self._locked():
            for key in keys:
                count += 1
                for root in (self._objects, self._meta):
                    path = self._path(root, key)
                    try:
                        path.unlink()
                    except FileNotFoundError:
                        continue
                    self._prune(path.parent, root)
        return (count + 999) // 1000

    def _prune(self, directory: Path, root: Path) -> None:
        while directory != root:
            try:
                directory.rmdir()
            except OSError:
                return
            directory = directory.parent

    def get_tags(self, key: str) -> dict[str, str]:
        self.head(key)
        return dict(self._read_sidecar(key).tags)

    def get_lifecycle(self) -> list[LifecycleRule]:
        try:
            rules: list[LifecycleRule] = msgspec.json.decode((self.base / "lifecycle.json").read_bytes())
        except FileNotFoundError:
            return []
        return rules

    def put_lifecycle(self, rules: list[LifecycleRule]) -> None:
        os.replace(self._write_temp(msgspec.json.encode(rules)), self.base / "lifecycle.json")

    def list_incomplete_uploads(self, prefix: str) -> Iterator[IncompleteUpload]:
        return iter(())

    def abort_upload(self, key: str, upload_id: str) -> None:
        raise ObjectMissing(key)

    def list(self, prefix: str, *, start_after: str = "", page_size: int = 1000) -> Iterator[ObjectInfo]:
        """Like the paged listing, but the directory is read and sorted once, not once per page:
        a session of N events lists in O(N log N), holding its N names (not their contents)."""
        keys = self._keys_under(prefix, "")
        for key in keys[bisect.bisect_right(keys, start_after) :]:
            if key.startswith(prefix):
                yield self._info(key)
