"""S3 through boto3: AWS, MinIO, Ceph RGW, moto; any endpoint.

Conditional writes use ``IfNoneMatch='*'`` (create) and ``IfMatch`` (replace).
botocore retries connection errors, throttling and 5xx (standard mode,
bounded by ``max_attempts``); this module retries 409
ConditionalRequestConflict itself, bounded too. A PUT retried after its first
response was lost may come back 412: ``create`` reports that as
``ObjectExists`` and the caller resolves it by reading the key back.

Ceph RGW 16 compares ``If-Match`` with the unquoted stored ETag and so refuses
the correct, quoted one. ``replace`` detects that (412 although HEAD shows the
expected ETag), retries unquoted, and keeps unquoted for the store's lifetime.
"""

from __future__ import annotations

import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

import boto3
import botocore.exceptions
from botocore.config import Config

from .._errors import StoreUnavailableError
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

_MISSING = frozenset({"NoSuchKey", "404", "NotFound"})
_CONFLICT_RETRIES = 6
T = TypeVar("T")


def _code(exc: botocore.exceptions.ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _status(exc: botocore.exceptions.ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


class S3Store(ObjectStore):
    def __init__(
        self,
        bucket: str,
        *,
        endpoint_url: str | None = None,
        client: Any = None,
        max_attempts: int = 5,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
        max_pool_connections: int = 32,
    ) -> None:
        self.bucket = bucket
        self.location = f"s3://{bucket}" + (f" at {endpoint_url}" if endpoint_url else "")
        if client is None:
            config = Config(
                retries={"mode": "standard", "total_max_attempts": max_attempts},
                connect_timeout=connect_timeout,
                read_timeout=read_timeout,
                max_pool_connections=max_pool_connections,
                s3={"addressing_style": "path"} if endpoint_url else {},
            )
            client = boto3.session.Session().client("s3", endpoint_url=endpoint_url, config=config)
        self.client = client
        #: Requests sent on the wire, by operation name (retries included).
        self.requests: Counter[str] = Counter()
        self.client.meta.events.register("before-send.s3", self._count)
        self._unquoted_if_match = False

    def _count(self, **kwargs: Any) -> None:
        event = str(kwargs.get("event_name", ""))
        self.requests[event.rsplit(".", 1)[-1]] += 1

    def _fail(self, action: str, key: str, exc: Exception) -> StoreUnavailableError:
        if isinstance(exc, botocore.exceptions.ClientError):
            code = _code(exc)
            if code == "NoSuchBucket":
                return StoreUnavailableError(f"bucket {self.bucket!r} does not exist ({self.location})")
            if code in ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
                return StoreUnavailableError(f"{action} {key!r} refused: access denied ({code})")
            return StoreUnavailableError(f"{action} {key!r} failed: {code or 'error'} (HTTP {_status(exc)})")
        name = type(exc).__name__
        return StoreUnavailableError(f"{action} {key!r} failed: {name} talking to {self.location}")

    def _put(
        self, key: str, data: bytes, metadata: Mapping[str, str] | None, tags: Mapping[str, str] | None, **condition: str
    ) -> str:
        args: dict[str, Any] = {"Bucket": self.bucket, "Key": key, "Body": data, **condition}
        if metadata:
            args["Metadata"] = dict(metadata)
        if tags:
            args["Tagging"] = urllib.parse.urlencode(dict(tags))
        for attempt in range(_CONFLICT_RETRIES):
            try:
                return str(self.client.put_object(**args)["ETag"])
            except botocore.exceptions.ClientError as exc:
                if _status(exc) == 412 or _code(exc) == "PreconditionFailed":
                    raise PreconditionFailed(key) from None
                if "IfMatch" in condition and _code(exc) in _MISSING:
                    raise PreconditionFailed(key) from None  # If-Match on an absent key: 404
                # 409: AWS's ConditionalRequestConflict. 500 on a conditional PUT: RGW 16's answer to a
                # racing If-Match (ECANCELED), which botocore stops retrying once its retry quota is spent.
                retryable = _status(exc) == 409 or (_status(exc) == 500 and bool(condition))
                if retryable and attempt + 1 < _CONFLICT_RETRIES:
                    time.sleep(0.05 * 2**attempt)
                    continue
                raise self._fail("put", key, exc) from None
            except botocore.exceptions.BotoCoreError as exc:
                raise self._fail("put", key, exc) from None
        raise AssertionError("unreachable")

    def create(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None
    ) -> str:
        try:
            return self._put(key, data, metadata, tags, IfNoneMatch="*")
        except PreconditionFailed:
            raise ObjectExists(key) from None

    def replace(
        self,
        key: str,
        data: bytes,
        *,
        etag: str,
        metadata: Mapping[str, str] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> str:
        quoted = '"' + etag.strip('"') + '"'
        if self._unquoted_if_match:
            return self._put(key, data, metadata, tags, IfMatch=quoted.strip('"'))
        try:
            return self._put(key, data, metadata, tags, IfMatch=quoted)
        except PreconditionFailed:
            try:
                current = self.head(key).etag
            except ObjectMissing:
                raise PreconditionFailed(key) from None
            if current.strip('"') != quoted.strip('"'):
                raise
        # the server refused a matching quoted ETag: it compares unquoted (RGW 16)
        self._unquoted_if_match = True
        return self._put(key, data, metadata, tags, IfMatch=quoted.strip('"'))

    def _call(self, action: str, key: str, request: Callable[[], T]) -> T:
        """Run one request; a missing key raises ``ObjectMissing``, any other failure
        (after botocore's bounded retries) ``StoreUnavailableError``."""
        try:
            return request()
        except botocore.exceptions.ClientError as exc:
            if _code(exc) in _MISSING:
                raise ObjectMissing(key) from None
            raise self._fail(action, key, exc) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self._fail(action, key, exc) from None

    def get(self, key: str, *, max_bytes: int | None = None) -> StoredObject:
        def request() -> tuple[dict[str, Any], bytes]:
            # botocore retries the request, not the body: a body cut off mid-stream is read again
            for attempt in range(3):
                response = self.client.get_object(Bucket=self.bucket, Key=key)
                size = int(response.get("ContentLength", 0))
                if max_bytes is not None and size > max_bytes:  # refused by its header, the body unread
                    response["Body"].close()
                    raise too_large(key, size, max_bytes)
                try:
                    return response, response["Body"].read()
                except botocore.exceptions.ResponseStreamingError:
                    if attempt == 2:
                        raise
            raise AssertionError("unreachable")

        response, data = self._call("get", key, request)
        return StoredObject(key, data, str(response["ETag"]), response["LastModified"], dict(response.get("Metadata", {})))

    def head(self, key: str) -> ObjectInfo:
        response = self._call("head", key, lambda: self.client.head_object(Bucket=self.bucket, Key=key))
        return ObjectInfo(
            key,
            int(response["ContentLength"]),
            str(response["ETag"]),
            response["LastModified"],
            dict(response.get("Metadata", {})),
        )

    def list_page(self, prefix: str, *, start_after: str = "", max_keys: int = 1000, delimiter: str = "") -> ListPage:
        args: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "MaxKeys": max_keys}
        if start_after:
            args["StartAfter"] = start_after
        if delimiter:
            args["Delimiter"] = delimiter
        try:
            response = self.client.list_objects_v2(**args)
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
            raise self._fail("list", prefix, exc) from None
        objects = [
            ObjectInfo(item["Key"], int(item["Size"]), str(item.get("ETag", "")), item["LastModified"])
            for item in response.get("Contents", [])
        ]
        prefixes = [str(item["Prefix"]) for item in response.get("CommonPrefixes", [])]
        last_key = objects[-1].key if objects else ""
        # StartAfter a common prefix would list its keys again: skip past all of them
        last_prefix = prefixes[-1] + "\U0010ffff" if prefixes else ""
        return ListPage(objects, prefixes, bool(response.get("IsTruncated")), max(last_key, last_prefix, start_after))

    def delete_many(self, keys: Iterable[str]) -> int:
        requests = 0
        batch: list[str] = []
        for key in keys:
            batch.append(key)
            if len(batch) == 1000:
                self._delete_batch(batch)
                requests += 1
                batch = []
        if batch:
            self._delete_batch(batch)
            requests += 1
        return requests

    def _delete_batch(self, keys: list[str]) -> None:
        try:
            response = self.client.delete_objects(
                Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True}
            )
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
            raise self._fail("delete", keys[0], exc) from None
        errors = response.get("Errors", [])
        if errors:
            first = errors[0]
            raise StoreUnavailableError(
                f"delete {first.get('Key')!r} failed: {first.get('Code')} ({len(errors)} keys not deleted)"
            )

    def get_tags(self, key: str) -> dict[str, str]:
        response = self._call("get tags of", key, lambda: self.client.get_object_tagging(Bucket=self.bucket, Key=key))
        return {str(t["Key"]): str(t["Value"]) for t in response.get("TagSet", [])}

    def get_lifecycle(self) -> list[LifecycleRule]:
        try:
            response = self.client.get_bucket_lifecycle_configuration(Bucket=self.bucket)
        except botocore.exceptions.ClientError as exc:
            if _code(exc) == "NoSuchLifecycleConfiguration":
                return []
            raise self._fail("get lifecycle of", self.bucket, exc) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self._fail("get lifecycle of", self.bucket, exc) from None
        return [dict(rule) for rule in response.get("Rules", [])]

    def put_lifecycle(self, rules: list[LifecycleRule]) -> None:
        try:
            if rules:
                self.client.put_bucket_lifecycle_configuration(Bucket=self.bucket, LifecycleConfiguration={"Rules": rules})
            else:
                self.client.delete_bucket_lifecycle(Bucket=self.bucket)
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
            raise self._fail("put lifecycle of", self.bucket, exc) from None

    def list_incomplete_uploads(self, prefix: str) -> Iterator[IncompleteUpload]:
        args: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        while True:
            try:
                response = self.client.list_multipart_uploads(**args)
            except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
                raise self._fail("list uploads under", prefix, exc) from None
            for upload in response.get("Uploads", []):
                yield IncompleteUpload(str(upload["Key"]), str(upload["UploadId"]), upload["Initiated"])
            if not response.get("IsTruncated"):
                return
            args["KeyMarker"] = response.get("NextKeyMarker", "")
            args["UploadIdMarker"] = response.get("NextUploadIdMarker", "")

    def abort_upload(self, key: str, upload_id: str) -> None:
        try:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
            raise self._fail("abort upload of", key, exc) from None

    def close(self) -> None:
        self.client.close()
