"""Where an export's complete part files go: a local folder, or an S3 prefix through a private
temporary folder. Either must be empty, and no reader ever sees half a file."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import TYPE_CHECKING

from ..._errors import InvalidInputError, StoreUnavailableError

if TYPE_CHECKING:
    from ..._backends import ObjectStore


class Sink:
    """Where complete part files go. ``begin`` gives a local path to write a part to, ``commit``
    makes it visible under its name, ``discard`` drops one that will never be complete."""

    location: str

    def begin(self, name: str) -> str:
        raise NotImplementedError

    def commit(self, name: str, path: str) -> None:
        raise NotImplementedError

    def discard(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def close(self) -> None:
        pass


class LocalSink(Sink):
    def __init__(self, directory: str) -> None:
        self.location = self.directory = directory
        parent = os.path.dirname(os.path.abspath(directory))
        if not os.path.isdir(parent):
            raise InvalidInputError(f"cannot export to {directory!r}: the folder {parent!r} does not exist (create it first)")
        if os.path.lexists(directory) and not os.path.isdir(directory):
            raise InvalidInputError(f"cannot export to {directory!r}: it is not a folder")
        if os.path.isdir(directory) and os.listdir(directory):
            raise InvalidInputError(f"cannot export to {directory!r}: it is not empty (name a new folder)")
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise InvalidInputError(f"cannot export to {directory!r}: {exc.strerror or exc}") from None

    def begin(self, name: str) -> str:
        folder, base = os.path.split(os.path.join(self.directory, name))
        os.makedirs(folder, mode=0o700, exist_ok=True)
        return os.path.join(folder, f".{base}.inprogress")

    def commit(self, name: str, path: str) -> None:
        try:
            os.replace(path, os.path.join(self.directory, name))
        except OSError:
            self.discard(path)
            raise


class S3Sink(Sink):
    def __init__(self, url: str, endpoint_url: str | None) -> None:
        from ..._url import check_credentials, open_backend, redact_url

        self.location = redact_url(url, limit=300)
        backend, root = open_backend(url, endpoint_url=endpoint_url)
        check_credentials(backend)  # none at all: say what to set, before any request
        self.backend: ObjectStore = backend
        self.prefix = f"{root}/" if root else ""
        try:
            if backend.list_page(self.prefix, max_keys=1).objects:
                raise InvalidInputError(f"cannot export to {self.location!r}: it already holds objects (name a new prefix)")
        except BaseException:
            backend.close()
            raise
        self.spool = tempfile.mkdtemp(prefix="evstore-parquet-")  # mode 0700: rows hold decrypted messages

    def begin(self, name: str) -> str:
        return os.path.join(self.spool, name.replace("/", "_"))

    def commit(self, name: str, path: str) -> None:
        key = self.prefix + name
        try:
            self.backend.client.upload_file(path, self.backend.bucket, key)  # type: ignore[attr-defined]
        except Exception as exc:  # boto3's transfer errors share no base class worth naming
            raise StoreUnavailableError(f"cannot upload {key!r} to {self.location}: {str(exc)[:200]}") from None
        finally:
            self.discard(path)

    def close(self) -> None:
        shutil.rmtree(self.spool, ignore_errors=True)
        self.backend.close()


def open_sink(destination: str | os.PathLike[str], endpoint_url: str | None) -> Sink:
    destination = os.fspath(destination)
    if not isinstance(destination, str) or not destination:
        raise InvalidInputError("name the destination: a folder or s3://bucket[/prefix]")
    if destination.lower().startswith("s3://"):
        return S3Sink(destination, endpoint_url)
    if "://" in destination:
        raise InvalidInputError(f"cannot export to {destination[:100]!r}: name a folder or s3://bucket[/prefix]")
    return LocalSink(destination)
