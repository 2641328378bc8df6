"""S3 through boto3: AWS, MinIO, Ceph RGW, moto; any endpoint.

Conditional writes use ``IfNoneMatch='*'`` (create) and ``IfMatch`` (replace).

Retries are evstore's own, not botocore's: botocore makes one attempt per call
(its standard and adaptive modes share a retry quota that drains under
sustained faults and then stop retrying, although every request this module
makes is safe to repeat). ``_retrying`` repeats a request that failed
transiently (connection errors, timeouts, a cut-off body, 5xx, throttling,
409 ConditionalRequestConflict on a conditional PUT) with jittered exponential
backoff, bounded by ``max_attempts`` and ``retry_deadline``; what still fails
raises ``StoreUnavailableError`` naming the attempts made.

Why each request is safe to repeat: GET, HEAD, LIST, tagging and lifecycle
reads change nothing; deletes and lifecycle writes are idempotent; a create
is conditional (``If-None-Match: *``): a retry after a lost response finds
the key taken (412), ``create`` reports ``ObjectExists``, and the caller
resolves it by reading the key back (an event's write id, or the bytes); a
replace is conditional on the ETag: a retry after a lost response comes back
412 and the caller re-reads, as after any other ETag race.

A store that makes its own client tunes it (its timestamp parser, its reading of LIST bodies)
and, once botocore has shown how, sends its GETs, LISTs and conditional creates directly
(``_s3_direct``): see ``_s3_client``. What a failure means and how it is reported: ``_s3_errors``.

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

import botocore.exceptions
import urllib3

from .._errors import StoreUnavailableError
from .._lifecycle import checked_rules
from ._base import (
    IncompleteUpload,
    KeysPage,
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
from ._retry import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_RETRY_BACKOFF,
    DEFAULT_RETRY_DEADLINE,
    RetryNote,
    backoff_delay,
)
from ._s3_client import DEFAULT_MAX_POOL_CONNECTIONS, listed_page, own_client, reading_list_bodies
from ._s3_direct import ASK_BOTOCORE, DirectRequests, Unanswered
from ._s3_errors import MISSING, as_botocore_error, error_code, http_status, reason, transient_kind, unavailable
from ._s3_listing import ListedPage

T = TypeVar("T")


def _query_of(args: Mapping[str, Any]) -> dict[str, str]:
    """The query parameters of ``list_objects_v2(**args)``, as ``DirectRequests.list_page`` takes them."""
    names = {"Prefix": "prefix", "MaxKeys": "max-keys", "StartAfter": "start-after", "Delimiter": "delimiter"}
    return {names[name]: str(value) for name, value in args.items() if name in names}


class S3Store(ObjectStore):
    """``max_attempts`` counts every attempt of a request, the first included; no retry
    starts later than ``retry_deadline`` seconds after the first attempt. A ``client``
    passed in keeps its own botocore retry configuration (evstore retries on top) and its
    own timestamp parser; the client made here is ``_s3_client.own_client``.
    ``direct_requests`` (default: on, unless ``EVSTORE_DIRECT_REQUESTS=0``) sends the GETs, LISTs
    and creates of a store that makes its own client through ``_s3_direct`` once botocore has
    shown how."""

    def __init__(
        self,
        bucket: str,
        *,
        endpoint_url: str | None = None,
        client: Any = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        retry_deadline: float = DEFAULT_RETRY_DEADLINE,
        retry_backoff: float = DEFAULT_RETRY_BACKOFF,
        retry_mode: str | None = None,
        on_retry: RetryNote | None = None,
        max_pool_connections: int = DEFAULT_MAX_POOL_CONNECTIONS,
        direct_requests: bool | None = None,
    ) -> None:
        self.bucket = bucket
        self.endpoint_url = endpoint_url
        self.location = f"s3://{bucket}" + (f" at {endpoint_url}" if endpoint_url else "")
        self.max_attempts = max_attempts
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.retry_deadline = retry_deadline
        self.retry_backoff = retry_backoff
        self.on_retry = on_retry
        #: GETs, LISTs and creates sent by ``_s3_direct`` once botocore has shown how (None: all botocore's).
        self._direct: DirectRequests | None = None
        if client is None:
            client, self._direct = own_client(
                endpoint_url,
                retry_mode=retry_mode,
                connect_timeout=connect_timeout,
                read_timeout=read_timeout,
                max_pool_connections=max_pool_connections,
                direct_requests=direct_requests,
                count=self._count_direct,
            )
        self.client = client
        #: Requests sent on the wire, by operation name (retries included).
        self.requests: Counter[str] = Counter()
        #: Retries evstore made, by kind of failure ("error", "throttled", "conflict").
        self.retries: Counter[str] = Counter()
        self.client.meta.events.register("before-send.s3", self._count)
        self._unquoted_if_match = False

    def _after_direct(self, unanswered: Unanswered) -> int:
        """The attempt botocore's request is, after a direct one that ``unanswered`` says did not
        answer: the second when the direct one was an attempt that failed transiently (so that
        ``max_attempts`` counts both), else the first; always at least one of botocore's."""
        return 2 if unanswered.transient and self.max_attempts >= 2 else 1

    def _count(self, **kwargs: Any) -> None:
        event = str(kwargs.get("event_name", ""))
        self.requests[event.rsplit(".", 1)[-1]] += 1

    def _count_direct(self, operation: str) -> None:
        self.requests[operation] += 1

    def _retrying(
        self, action: str, key: str, request: Callable[[], T], *, conditional: bool = False, first_attempt: int = 1
    ) -> T:
        """Run ``request``, repeating it while it fails transiently, within the attempts and the
        deadline. A failure that repeating cannot fix is raised as it is (the caller maps it);
        a transient one that outlasts the bounds raises ``StoreUnavailableError``.
        ``first_attempt`` 2: the request's first attempt was a direct one that failed
        transiently (``_after_direct``), so this is its retry, after the backoff a retry waits."""
        started = time.monotonic()
        attempt = first_attempt
        if attempt > 1:
            delay = backoff_delay(attempt - 1, base=self.retry_backoff, throttled=False)
            self.retries["error"] += 1
            if self.on_retry is not None:
                self.on_retry(
                    f"{action} {key!r}: the direct request failed; retrying through botocore in {delay:.1f} s "
                    f"(attempt {attempt} of {self.max_attempts})"
                )
            time.sleep(delay)
        while True:
            try:
                try:
                    return request()
                except urllib3.exceptions.HTTPError as raw:
                    raise as_botocore_error(raw) from raw
            except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
                kind = transient_kind(exc, conditional=conditional)
                if kind is None:
                    raise
                delay = backoff_delay(attempt, base=self.retry_backoff, throttled=kind == "throttled")
                elapsed = time.monotonic() - started
                if attempt >= self.max_attempts or elapsed + delay > self.retry_deadline:
                    raise self._fail(action, key, exc, attempts=attempt, elapsed=elapsed) from None
                self.retries[kind] += 1
                if self.on_retry is not None:
                    self.on_retry(
                        f"{action} {key!r}: {self._reason(exc)}; retrying in {delay:.1f} s "
                        f"(attempt {attempt + 1} of {self.max_attempts})"
                    )
                time.sleep(delay)
                attempt += 1

    def _reason(self, exc: Exception) -> str:
        return reason(exc, read_timeout=self.read_timeout, connect_timeout=self.connect_timeout)

    def _fail(self, action: str, key: str, exc: Exception, *, attempts: int = 1, elapsed: float = 0.0) -> StoreUnavailableError:
        why = self._reason(exc)
        return unavailable(
            action, key, exc, bucket=self.bucket, location=self.location, why=why, attempts=attempts, elapsed=elapsed
        )

    def _put(
        self,
        key: str,
        data: bytes,
        metadata: Mapping[str, str] | None,
        tags: Mapping[str, str] | None,
        *,
        first_attempt: int = 1,
        **condition: str,
    ) -> str:
        args: dict[str, Any] = {"Bucket": self.bucket, "Key": key, "Body": data, **condition}
        if metadata:
            args["Metadata"] = dict(metadata)
        if tags:
            args["Tagging"] = urllib.parse.urlencode(dict(tags))
        try:
            put = self._retrying(
                "put", key, lambda: self.client.put_object(**args), conditional=bool(condition), first_attempt=first_attempt
            )
            return str(put["ETag"])
        except botocore.exceptions.ClientError as exc:
            if http_status(exc) == 412 or error_code(exc) == "PreconditionFailed":
                raise PreconditionFailed(key) from None
            if "IfMatch" in condition and error_code(exc) in MISSING:
                raise PreconditionFailed(key) from None  # If-Match on an absent key: 404
            raise self._fail("put", key, exc) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self._fail("put", key, exc) from None

    def create(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None
    ) -> str:
        first_attempt = 1
        if self._direct is not None:
            made = self._direct.create(key, data, metadata, tags)
            if not isinstance(made, Unanswered):
                return made
            first_attempt = self._after_direct(made)
        try:
            return self._put(key, data, metadata, tags, first_attempt=first_attempt, IfNoneMatch="*")
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

    def _call(self, action: str, key: str, request: Callable[[], T], *, first_attempt: int = 1) -> T:
        """Run one request (retried while transient); a missing key raises ``ObjectMissing``,
        any other failure ``StoreUnavailableError``."""
        try:
            return self._retrying(action, key, request, first_attempt=first_attempt)
        except botocore.exceptions.ClientError as exc:
            if error_code(exc) in MISSING:
                raise ObjectMissing(key) from None
            raise self._fail(action, key, exc) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self._fail(action, key, exc) from None

    def get(self, key: str, *, max_bytes: int | None = None) -> StoredObject:
        first_attempt = 1
        if self._direct is not None and not self._direct.learning(key):
            found = self._direct.get(key, max_bytes)
            if not isinstance(found, Unanswered):
                return found
            first_attempt = self._after_direct(found)

        def request() -> tuple[dict[str, Any], bytes]:
            # one attempt is the request and its body: a body cut off mid-stream is asked for again
            response = self.client.get_object(Bucket=self.bucket, Key=key)
            size = int(response.get("ContentLength", 0))
            if max_bytes is not None and size > max_bytes:  # refused by its header, the body unread
                response["Body"].close()
                raise too_large(key, size, max_bytes)
            return response, response["Body"].read()

        response, data = self._call("get", key, request, first_attempt=first_attempt)
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
        args = self._list_args(prefix, start_after, max_keys, delimiter)
        direct = self._direct
        listed = ASK_BOTOCORE if direct is None or direct.learning(None) else direct.list_page(_query_of(args))
        if isinstance(listed, Unanswered):
            listed = self._botocore_list(prefix, args, first_attempt=self._after_direct(listed))
        objects, prefixes = listed.objects, listed.prefixes
        last_key = objects[-1].key if objects else ""
        # StartAfter a common prefix would list its keys again: skip past all of them
        last_prefix = prefixes[-1] + "\U0010ffff" if prefixes else ""
        return ListPage(objects, prefixes, listed.truncated, max(last_key, last_prefix, start_after))

    def list_etags(self, prefix: str, *, start_after: str = "", max_keys: int = 1000) -> KeysPage:
        args = self._list_args(prefix, start_after, max_keys)
        direct = self._direct
        listed = ASK_BOTOCORE if direct is None or direct.learning(None) else direct.list_etags(_query_of(args))
        if isinstance(listed, KeysPage):
            return listed
        page = self._botocore_list(prefix, args, first_attempt=self._after_direct(listed))
        return KeysPage.of(page.objects, page.truncated)

    def _list_args(self, prefix: str, start_after: str, max_keys: int, delimiter: str = "") -> dict[str, Any]:
        """``list_objects_v2``'s arguments for one page (``_query_of`` makes a direct request's query)."""
        args: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "MaxKeys": max_keys}
        if start_after:
            args["StartAfter"] = start_after
        if delimiter:
            args["Delimiter"] = delimiter
        return args

    def _botocore_list(self, prefix: str, args: dict[str, Any], *, first_attempt: int = 1) -> ListedPage:
        try:
            with reading_list_bodies():
                response = self._retrying(
                    "list", prefix, lambda: self.client.list_objects_v2(**args), first_attempt=first_attempt
                )
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
            raise self._fail("list", prefix, exc) from None
        return listed_page(response)

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
            response = self._retrying(
                "delete",
                keys[0],
                lambda: self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True}
                ),
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
            response = self._retrying(
                "get lifecycle of", self.bucket, lambda: self.client.get_bucket_lifecycle_configuration(Bucket=self.bucket)
            )
        except botocore.exceptions.ClientError as exc:
            if error_code(exc) == "NoSuchLifecycleConfiguration":
                return []
            raise self._fail("get lifecycle of", self.bucket, exc) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self._fail("get lifecycle of", self.bucket, exc) from None
        return checked_rules([dict(rule) for rule in response.get("Rules", [])], f"bucket {self.bucket!r}")

    def put_lifecycle(self, rules: list[LifecycleRule]) -> None:
        def request() -> object:
            if rules:
                return self.client.put_bucket_lifecycle_configuration(Bucket=self.bucket, LifecycleConfiguration={"Rules": rules})
            return self.client.delete_bucket_lifecycle(Bucket=self.bucket)

        try:
            self._retrying("put lifecycle of", self.bucket, request)
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
            raise self._fail("put lifecycle of", self.bucket, exc) from None

    def list_incomplete_uploads(self, prefix: str) -> Iterator[IncompleteUpload]:
        args: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        while True:
            try:
                response = self._retrying("list uploads under", prefix, lambda: self.client.list_multipart_uploads(**args))
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
            self._retrying(
                "abort upload of",
                key,
                lambda: self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id),
            )
        except botocore.exceptions.ClientError as exc:
            if error_code(exc) == "NoSuchUpload":
                return  # aborted already (by us, if a retried abort lost its first answer)
            raise self._fail("abort upload of", key, exc) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self._fail("abort upload of", key, exc) from None

    def credentials_method(self) -> str | None:
        """Where botocore found credentials (``env``, ``shared-credentials-file``, ``iam-role``, ...),
        or None when it found none (every request would fail). Makes no request."""
        credentials = getattr(getattr(self.client, "_request_signer", None), "_credentials", None)
        if credentials is None:
            return None
        return str(getattr(credentials, "method", "") or "configured")

    def probe_bucket(self, prefix: str) -> str | None:
        """One LIST of at most one key under ``prefix`` (retried while transient): None when the
        bucket exists and these credentials may list it, else the server's error code
        (``NoSuchBucket``, ``AccessDenied``, ``InvalidAccessKeyId``, ...). A server that does
        not answer raises ``StoreUnavailableError``."""
        try:
            self._retrying("list", prefix, lambda: self.client.list_objects_v2(Bucket=self.bucket, Prefix=prefix, MaxKeys=1))
        except botocore.exceptions.ClientError as exc:
            return error_code(exc) or f"HTTP {http_status(exc)}"
        except botocore.exceptions.BotoCoreError as exc:
            raise self._fail("list", prefix, exc) from None
        return None

    def close(self) -> None:
        self.client.close()
        if self._direct is not None:
            self._direct.close()
