"""The object-store interface: the only place evstore makes requests.

Contracts every backend keeps (the conformance suite checks them):

* ``create`` stores the object only if the key is absent (``If-None-Match: *``);
  otherwise raises ``ObjectExists`` and changes nothing.
* ``replace`` stores the object only if the current ETag equals ``etag``
  (``If-Match``); otherwise raises ``PreconditionFailed``.
* ``get``/``head`` raise ``ObjectMissing`` for an absent key.
* ``get(key, max_bytes=N)`` refuses an object larger than ``N`` bytes with
  ``ObjectRefused`` (an ``IntegrityError``, exit 5) before reading its body:
  a reader's memory stays bounded whatever the bucket holds.
* ``list_page`` returns keys under ``prefix`` in lexical order, strictly after
  ``start_after``; with a ``delimiter`` it groups keys into common prefixes.
* ``delete_many`` deletes up to any number of keys (batches of 1,000);
  absent keys are not an error.
* Transient failures are retried inside the backend, bounded; what still fails
  raises ``StoreUnavailableError``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

import msgspec

from .._errors import EvstoreError, IntegrityError


class ObjectExists(Exception):
    """``create`` found the key already taken."""


class PreconditionFailed(Exception):
    """``replace`` found another ETag (or no object)."""


class ObjectMissing(Exception):
    """No object at the key."""


class ObjectRefused(IntegrityError):
    """A backend refused to read an object: larger than the reader's ``max_bytes``, not a
    regular file, or (local store) reached through a symlink. Names the key, never content."""

    def __init__(self, key: str, detail: str, *, size: int | None = None, limit: int | None = None) -> None:
        EvstoreError.__init__(self, f"integrity failure at object {key!r:.300}: {detail}")
        parts = key.split("/")
        # the session the key belongs to, when it is one (``.../sessions/<id>/...``)
        where = parts.index("sessions") if "sessions" in parts else -1
        self.session_id = parts[where + 1] if 0 <= where < len(parts) - 2 else ""
        self.seq: int | None = None
        self.key = key
        self.size = size
        self.limit = limit


def too_large(key: str, size: int, limit: int) -> ObjectRefused:
    return ObjectRefused(key, f"the object is {size} bytes, over the read limit of {limit} bytes", size=size, limit=limit)


class ObjectInfo(msgspec.Struct, frozen=True):
    key: str
    size: int
    etag: str
    last_modified: datetime
    metadata: Mapping[str, str] = msgspec.field(default_factory=dict)


class StoredObject(msgspec.Struct, frozen=True):
    key: str
    data: bytes
    etag: str
    last_modified: datetime
    metadata: Mapping[str, str] = msgspec.field(default_factory=dict)


class ListPage(msgspec.Struct, frozen=True):
    objects: list[ObjectInfo]
    prefixes: list[str]
    truncated: bool
    next_start_after: str


class KeysPage(msgspec.Struct, frozen=True):
    """One LIST page's keys and their ETags, in key order (``ObjectStore.list_etags``)."""

    keys: list[str]
    etags: list[str]
    truncated: bool

    @classmethod
    def of(cls, objects: list[ObjectInfo], truncated: bool) -> KeysPage:
        return cls([info.key for info in objects], [info.etag for info in objects], truncated)


class IncompleteUpload(msgspec.Struct, frozen=True):
    key: str
    upload_id: str
    initiated: datetime


LifecycleRule = dict[str, Any]


class ObjectStore(ABC):
    """A bucket (or directory, or dict) of immutable-by-convention objects."""

    #: A short description for messages, without credentials.
    location: str = ""

    @abstractmethod
    def create(
        self,
        key: str,
        data: bytes,
        *,
        metadata: Mapping[str, str] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> str:
        """Create ``key`` if absent and return its ETag."""

    @abstractmethod
    def replace(
        self,
        key: str,
        data: bytes,
        *,
        etag: str,
        metadata: Mapping[str, str] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> str:
        """Replace ``key`` if its ETag is ``etag`` and return the new ETag."""

    @abstractmethod
    def get(self, key: str, *, max_bytes: int | None = None) -> StoredObject:
        """The object at ``key``. With ``max_bytes``, an object larger than that is refused with
        ``ObjectRefused`` before its body is read (memory stays within ``max_bytes``)."""

    @abstractmethod
    def head(self, key: str) -> ObjectInfo: ...

    @abstractmethod
    def list_page(self, prefix: str, *, start_after: str = "", max_keys: int = 1000, delimiter: str = "") -> ListPage: ...

    @abstractmethod
    def delete_many(self, keys: Iterable[str]) -> int:
        """Delete the keys; return how many delete requests were made."""

    @abstractmethod
    def get_tags(self, key: str) -> dict[str, str]: ...

    @abstractmethod
    def get_lifecycle(self) -> list[LifecycleRule]: ...

    @abstractmethod
    def put_lifecycle(self, rules: list[LifecycleRule]) -> None: ...

    @abstractmethod
    def list_incomplete_uploads(self, prefix: str) -> Iterator[IncompleteUpload]: ...

    @abstractmethod
    def abort_upload(self, key: str, upload_id: str) -> None: ...

    def list_etags(self, prefix: str, *, start_after: str = "", max_keys: int = 1000) -> KeysPage:
        """``list_page``'s keys and ETags alone (one LIST), which a backend may read faster than
        whole ``ObjectInfo``s: a long session's read lists a page per 1,000 events for the ETags
        that vouch for its segments. A backend that overrides ``list_page`` overrides this to
        match, or keeps this one, which calls it (``Forwarding`` does: a wrapper's listing is
        the one read)."""
        page = self.list_page(prefix, start_after=start_after, max_keys=max_keys)
        return KeysPage.of(page.objects, page.truncated)

    def list(self, prefix: str, *, start_after: str = "", page_size: int = 1000) -> Iterator[ObjectInfo]:
        """Every object under ``prefix`` after ``start_after``, page by page, in key order."""
        while True:
            page = self.list_page(prefix, start_after=start_after, max_keys=page_size)
            yield from page.objects
            if not page.truncated:
                return
            start_after = page.next_start_after

    def close(self) -> None:  # noqa: B027 - optional hook, most backends hold nothing
        """Release connections; the store is not used afterwards."""


class Forwarding(ObjectStore):
    """A backend that sends every request on to ``inner``: the base of wrappers that count or
    refuse requests. ``_request(kind, key, times)`` is called as each request is sent (a batch
    delete's once it has answered, with the requests it took); ``kind`` is one of PUT, GET,
    HEAD, LIST, DELETE. ``close`` does not close ``inner``: it outlives the wrapper."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.location = inner.location

    def _request(self, kind: str, key: str, times: int = 1) -> None:
        """Called for each request sent (see the class)."""

    def create(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None
    ) -> str:
        self._request("PUT", key)
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
        self._request("PUT", key)
        return self.inner.replace(key, data, etag=etag, metadata=metadata, tags=tags)

    def get(self, key: str, *, max_bytes: int | None = None) -> StoredObject:
        self._request("GET", key)
        return self.inner.get(key, max_bytes=max_bytes)

    def head(self, key: str) -> ObjectInfo:
        self._request("HEAD", key)
        return self.inner.head(key)

    def list_page(self, prefix: str, *, start_after: str = "", max_keys: int = 1000, delimiter: str = "") -> ListPage:
        self._request("LIST", prefix)
        return self.inner.list_page(prefix, start_after=start_after, max_keys=max_keys, delimiter=delimiter)

    def delete_many(self, keys: Iterable[str]) -> int:
        batch = list(keys)
        requests = self.inner.delete_many(batch)
        self._request("DELETE", batch[0] if batch else "", requests)
        return requests

    def get_tags(self, key: str) -> dict[str, str]:
        self._request("GET", key)
        return self.inner.get_tags(key)

    def get_lifecycle(self) -> list[LifecycleRule]:
        self._request("GET", "?lifecycle")
        return self.inner.get_lifecycle()

    def put_lifecycle(self, rules: list[LifecycleRule]) -> None:
        self._request("PUT", "?lifecycle")
        self.inner.put_lifecycle(rules)

    def list_incomplete_uploads(self, prefix: str) -> Iterator[IncompleteUpload]:
        self._request("LIST", "?uploads")  # one per 1,000 uploads on S3: counted as one
        return self.inner.list_incomplete_uploads(prefix)

    def abort_upload(self, key: str, upload_id: str) -> None:
        self._request("DELETE", key)
        self.inner.abort_upload(key, upload_id)
