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

A store that makes its own client parses the ISO 8601 UTC timestamps of LIST bodies with
``datetime.fromisoformat`` (``_parse_timestamp``) instead of botocore's dateutil parser:
about 45 ms of CPU less per LIST of 400 keys; and it reads LIST bodies itself
(``_s3_listing``): a third of botocore's CPU for a page. A client passed in is left as it is.

Once botocore has sent one GET or LIST over the wire, the store's GETs, LISTs and conditional
creates go out through ``_s3_direct`` (signed there, on a urllib3 pool of their own: about a
third of botocore's CPU for a GET or a create), botocore answering what they do not; see that module.

Ceph RGW 16 compares ``If-Match`` with the unquoted stored ETag and so refuses
the correct, quoted one. ``replace`` detects that (412 although HEAD shows the
expected ETag), retries unquoted, and keeps unquoted for the store's lifetime.
"""

from __future__ import annotations

import datetime
import os
import re
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

import boto3
import botocore.exceptions
import botocore.handlers
import botocore.httpsession
import botocore.utils
import urllib3
from botocore.config import Config

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
from ._s3_direct import ASK_BOTOCORE, DirectRequests, Unanswered
from ._s3_listing import ListedPage, parse_list_body

#: Connections botocore's pool keeps per endpoint. At least the threads that make requests at
#: once: ``AsyncStore``'s workers (256 by default) and the ``Store``'s own pool for reads
#: (2 x ``concurrency``, 64 by default), rounded up so that a raised concurrency fits too. urllib3
#: opens connections on demand, so an unused bound costs nothing; a request beyond the bound opens
#: a connection of its own and drops it after (a TCP and TLS handshake per request).
DEFAULT_MAX_POOL_CONNECTIONS = 512
_MISSING = frozenset({"NoSuchKey", "404", "NotFound"})
#: Error codes botocore's standard mode treats as throttling or transient (besides any 5xx).
_THROTTLING = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestThrottled",
        "SlowDown",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "LimitExceededException",
    }
)
_TRANSIENT_CODES = frozenset({"RequestTimeout", "RequestTimeoutException", "PriorRequestNotComplete", "InternalError"})
_DENIED = frozenset({"AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"})
T = TypeVar("T")


#: ISO 8601 in UTC as S3 writes it in LIST bodies (``2026-12-01T23:00:00.000Z``): ASCII digits,
#: at most 9 fractional digits, ``Z`` or ``+00:00``.
_ISO_UTC = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?(?:Z|\+00:00)")


#: RFC 1123 in GMT as S3 writes it in ``Last-Modified`` headers (``Tue, 01 Dec 2026 23:00:00 GMT``).
_RFC1123_GMT = re.compile(
    r"(Mon|Tue|Wed|Thu|Fri|Sat|Sun), ([0-9]{2}) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) "
    r"([0-9]{4}) ([0-9]{2}):([0-9]{2}):([0-9]{2}) GMT"
)
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _parse_timestamp(value: Any) -> datetime.datetime:
    """botocore's ``parse_timestamp``, fast for ISO 8601 in UTC (LIST bodies) and for RFC 1123
    in GMT whose weekday is its date's (``Last-Modified`` headers): the same instant, an aware
    datetime at offset zero (``datetime.UTC``; botocore's own tzinfo object depends on the
    machine's zone), fractional seconds truncated to microseconds as botocore's. Any other
    value (other offsets, epoch seconds, what fromisoformat or ``datetime`` refuses, RFC 1123
    with a year before 1000 or a weekday that is not its date's) goes to botocore's parser, so
    its answer and its errors are botocore's."""
    if isinstance(value, str):
        if _ISO_UTC.fullmatch(value):
            try:
                return datetime.datetime.fromisoformat(value)
            except ValueError:
                pass  # hour 24, a leap second, day 31 of a short month: botocore decides
        elif (found := _RFC1123_GMT.fullmatch(value)) and found[4] >= "1000":  # dateutil reads 0099 as 1999
            weekday, day, month, year, hour, minute, second = found.groups()
            try:
                moment = datetime.datetime(
                    int(year), _MONTHS.index(month) + 1, int(day), int(hour), int(minute), int(second), tzinfo=datetime.UTC
                )
            except ValueError:
                pass  # day 31 of a short month, hour 24, a leap second: botocore decides
            else:
                if _DAYS[moment.weekday()] == weekday:
                    return moment
    parsed: datetime.datetime = botocore.utils.parse_timestamp(value)
    return parsed


#: Where ``_read_list_body`` leaves the page it read, in the response botocore returns.
_LISTED = "EvstoreListedPage"
#: ``_listing.active`` is set while ``S3Store.list_page`` calls ListObjectsV2 in this thread: only
#: those calls are read by ``_read_list_body``, so other uses of the client get botocore's answer.
_listing = threading.local()


def _read_list_body(response_dict: dict[str, Any], customized_response_dict: dict[str, Any], **_: Any) -> bool:
    """botocore's ``before-parse`` hook for ListObjectsV2 on a client of the store's own: during
    ``list_page``, a page that ``parse_list_body`` reads is handed over whole under ``_LISTED`` and
    botocore is left an empty body to parse; any other response (another caller's, an error, a
    body it does not read) goes to botocore as sent. Whether it took the page."""
    if not getattr(_listing, "active", False):
        return False
    if response_dict.get("status_code") != 200 or not isinstance(body := response_dict.get("body"), bytes):
        return False
    page = parse_list_body(body, _parse_timestamp)
    if page is None:
        return False
    customized_response_dict[_LISTED] = page
    response_dict["body"] = b""
    return True


#: botocore's check of every S3 answer of 200 for an error in its body (S3 can answer 200 with an
#: ``Error`` document): it parses the whole body with ElementTree, a LIST page of 1,000 keys
#: included, which ``parse_list_body`` then reads again. Where botocore has it (a private name),
#: the store's own client runs it through ``_before_parse``; else it stays as botocore set it.
_CHECK_200 = getattr(botocore.handlers, "_handle_200_error", None)


def _before_parse(
    response_dict: dict[str, Any], customized_response_dict: dict[str, Any], operation_model: Any, **kwargs: Any
) -> None:
    """In place of botocore's ``_CHECK_200`` on the store's own client: a LIST page that
    ``_read_list_body`` takes is a ``ListBucketResult`` that parsed whole, so no error document;
    every other answer is checked by botocore as before."""
    if getattr(operation_model, "name", "") == "ListObjectsV2" and _read_list_body(response_dict, customized_response_dict):
        return
    assert _CHECK_200 is not None
    _CHECK_200(
        response_dict=response_dict,
        customized_response_dict=customized_response_dict,
        operation_model=operation_model,
        **kwargs,
    )


def _as_botocore_error(raw: urllib3.exceptions.HTTPError) -> botocore.exceptions.HTTPClientError:
    """botocore's error for a transport failure that came out of botocore as urllib3's own: it
    reads the body of an error answer outside its mapping of urllib3's errors (its
    ``convert_to_response_dict``), so a 404's or a 500's body that times out or is cut off there
    reaches the caller raw. As botocore's, it is retried and reported as any other."""
    if isinstance(raw, urllib3.exceptions.ReadTimeoutError):
        return botocore.exceptions.ReadTimeoutError(endpoint_url=str(raw.url or ""), error=raw)
    return botocore.exceptions.ResponseStreamingError(error=raw)


def _direct_requests_wanted(asked: bool | None) -> bool:
    """Whether a store that makes its own client sends requests directly (``_s3_direct``):
    as asked, else unless ``EVSTORE_DIRECT_REQUESTS=0``; never where botocore would use a proxy
    (any ``*_proxy`` variable but ``no_proxy``), which direct requests do not."""
    wanted = os.environ.get("EVSTORE_DIRECT_REQUESTS", "1").strip() != "0" if asked is None else asked
    return wanted and not any(scheme != "no" for scheme in urllib.request.getproxies())


def _query_of(args: Mapping[str, Any]) -> dict[str, str]:
    """The query parameters of ``list_objects_v2(**args)``, as ``DirectRequests.list_page`` takes them."""
    names = {"Prefix": "prefix", "MaxKeys": "max-keys", "StartAfter": "start-after", "Delimiter": "delimiter"}
    return {names[name]: str(value) for name, value in args.items() if name in names}


def _code(exc: botocore.exceptions.ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _status(exc: botocore.exceptions.ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def transient_kind(exc: Exception, *, conditional: bool) -> str | None:
    """Why a failed attempt may succeed if repeated (``"throttled"``, ``"conflict"``, ``"error"``),
    or None when repeating it cannot help (404, 412, 403, a bad request, no credentials)."""
    if isinstance(exc, botocore.exceptions.ClientError):
        status, code = _status(exc), _code(exc)
        if code in _THROTTLING or status == 429:
            return "throttled"
        if status == 409 and conditional:
            # AWS's ConditionalRequestConflict; the retry meets the winner's object (412) or wins
            return "conflict"
        if status >= 500 or code in _TRANSIENT_CODES:
            # 500 on a conditional PUT is also RGW 16's answer to a racing If-Match (ECANCELED)
            return "error"
        return None
    if isinstance(exc, botocore.exceptions.SSLError):
        return None  # a certificate problem does not go away by asking again
    if isinstance(
        exc,
        botocore.exceptions.ConnectionError  # refused, connect timeout, proxy
        | botocore.exceptions.HTTPClientError  # closed, reset, read timeout, cut-off body
        | botocore.exceptions.IncompleteReadError,
    ):
        return "error"
    return None


class S3Store(ObjectStore):
    """``max_attempts`` counts every attempt of a request, the first included; no retry
    starts later than ``retry_deadline`` seconds after the first attempt. A ``client``
    passed in keeps its own botocore retry configuration (evstore retries on top) and its
    own timestamp parser; the client made here parses timestamps with ``_parse_timestamp``.
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
            session = boto3.session.Session()
            # botocore makes one attempt (no shared retry quota to drain); its mode still applies,
            # so AWS_RETRY_MODE=adaptive keeps botocore's client-side rate limiting
            mode = retry_mode or session._session.get_config_variable("retry_mode") or "standard"
            config = Config(
                retries={"mode": mode, "total_max_attempts": 1},
                connect_timeout=connect_timeout,
                read_timeout=read_timeout,
                max_pool_connections=max_pool_connections,
                s3={"addressing_style": "path"} if endpoint_url else {},
            )
            # on this session only (its own parser factory): a client made elsewhere keeps botocore's
            session._session.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=_parse_timestamp)
            client = session.client("s3", endpoint_url=endpoint_url, config=config)
            if _CHECK_200 is not None:
                client.meta.events.unregister("before-parse.s3.*", _CHECK_200)
                client.meta.events.register_first("before-parse.s3.*", _before_parse)
            else:
                client.meta.events.register("before-parse.s3.ListObjectsV2", _read_list_body)
            if _direct_requests_wanted(direct_requests):
                self._direct = self._make_direct(session, client, connect_timeout, read_timeout, max_pool_connections)
        self.client = client
        #: Requests sent on the wire, by operation name (retries included).
        self.requests: Counter[str] = Counter()
        #: Retries evstore made, by kind of failure ("error", "throttled", "conflict").
        self.retries: Counter[str] = Counter()
        self.client.meta.events.register("before-send.s3", self._count)
        self._unquoted_if_match = False

    def _make_direct(
        self, session: Any, client: Any, connect_timeout: float, read_timeout: float, max_connections: int
    ) -> DirectRequests:
        signer = client._request_signer

        def credentials() -> Any:
            found = signer._credentials
            return None if found is None else found.get_frozen_credentials()

        def count(operation: str) -> None:
            self.requests[operation] += 1

        direct = DirectRequests(
            credentials,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            max_connections=max_connections,
            ca_bundle=session._session.get_config_variable("ca_bundle") or botocore.httpsession.get_cert_path(True),
            parse_timestamp=_parse_timestamp,
            count=count,
        )
        for operation in ("GetObject", "ListObjectsV2"):
            client.meta.events.register(f"before-send.s3.{operation}", lambda request, **_: direct.observe_sent(request))
            client.meta.events.register(
                f"after-call.s3.{operation}", lambda http_response, **_: direct.observe_answered(http_response)
            )
        return direct

    def _after_direct(self, unanswered: Unanswered) -> int:
        """The attempt botocore's request is, after a direct one that ``unanswered`` says did not
        answer: the second when the direct one was an attempt that failed transiently (so that
        ``max_attempts`` counts both), else the first; always at least one of botocore's."""
        return 2 if unanswered.transient and self.max_attempts >= 2 else 1

    def _count(self, **kwargs: Any) -> None:
        event = str(kwargs.get("event_name", ""))
        self.requests[event.rsplit(".", 1)[-1]] += 1

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
                    raise _as_botocore_error(raw) from raw
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
        """What went wrong, in words, without credentials or message content."""
        if isinstance(exc, botocore.exceptions.ClientError):
            return f"{_code(exc) or 'error'} (HTTP {_status(exc)})"
        if isinstance(exc, botocore.exceptions.ReadTimeoutError):
            return f"no answer within the {self.read_timeout:g} s read timeout"
        if isinstance(exc, botocore.exceptions.ConnectTimeoutError):
            return f"no connection within the {self.connect_timeout:g} s connect timeout"
        if isinstance(exc, botocore.exceptions.EndpointConnectionError):
            return "could not connect"
        if isinstance(exc, botocore.exceptions.ConnectionClosedError):
            return "the connection closed without an answer"
        return type(exc).__name__

    def _fail(
        self, action: str, key: str, exc: Exception, *, attempts: int = 1, elapsed: float = 0.0
    ) -> StoreUnavailableError:
        tries = f" after {attempts} attempts in {elapsed:.1f} s" if attempts > 1 else ""
        if isinstance(exc, botocore.exceptions.ClientError):
            code = _code(exc)
            if code == "NoSuchBucket":
                return StoreUnavailableError(f"bucket {self.bucket!r} does not exist ({self.location})")
            if code in _DENIED:
                return StoreUnavailableError(f"{action} {key!r} refused: access denied ({code}); check the credentials")
            return StoreUnavailableError(f"{action} {key!r} failed: {self._reason(exc)}{tries} ({self.location})")
        if isinstance(exc, botocore.exceptions.NoCredentialsError | botocore.exceptions.PartialCredentialsError):
            return StoreUnavailableError(
                f"no AWS credentials for {self.location}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE"
            )
        if isinstance(exc, botocore.exceptions.NoRegionError):
            return StoreUnavailableError(f"no AWS region for {self.location}: set AWS_DEFAULT_REGION")
        hint = ""
        if transient_kind(exc, conditional=False) is not None:
            hint = "; EVSTORE_READ_TIMEOUT, EVSTORE_CONNECT_TIMEOUT and EVSTORE_MAX_ATTEMPTS set the bounds"
        return StoreUnavailableError(f"{action} {key!r} failed: {self._reason(exc)}{tries} ({self.location}){hint}")

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
            if _status(exc) == 412 or _code(exc) == "PreconditionFailed":
                raise PreconditionFailed(key) from None
            if "IfMatch" in condition and _code(exc) in _MISSING:
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
            if _code(exc) in _MISSING:
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
            _listing.active = True
            response = self._retrying("list", prefix, lambda: self.client.list_objects_v2(**args), first_attempt=first_attempt)
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
            raise self._fail("list", prefix, exc) from None
        finally:
            _listing.active = False
        listed = response.get(_LISTED)
        if isinstance(listed, ListedPage):
            return listed
        return ListedPage(
            [
                ObjectInfo(item["Key"], int(item["Size"]), str(item.get("ETag", "")), item["LastModified"])
                for item in response.get("Contents", [])
            ],
            [str(item["Prefix"]) for item in response.get("CommonPrefixes", [])],
            bool(response.get("IsTruncated")),
        )

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
            if _code(exc) == "NoSuchLifecycleConfiguration":
                return []
            raise self._fail("get lifecycle of", self.bucket, exc) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self._fail("get lifecycle of", self.bucket, exc) from None
        return checked_rules([dict(rule) for rule in response.get("Rules", [])], f"bucket {self.bucket!r}")

    def put_lifecycle(self, rules: list[LifecycleRule]) -> None:
        def request() -> object:
            if rules:
                return self.client.put_bucket_lifecycle_configuration(
                    Bucket=self.bucket, LifecycleConfiguration={"Rules": rules}
                )
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
            if _code(exc) == "NoSuchUpload":
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
            return _code(exc) or f"HTTP {_status(exc)}"
        except botocore.exceptions.BotoCoreError as exc:
            raise self._fail("list", prefix, exc) from None
        return None

    def close(self) -> None:
        self.client.close()
        if self._direct is not None:
            self._direct.close()
