"""What a failed S3 request means: whether repeating it may help (``transient_kind``), and the
``StoreUnavailableError`` that reports it (``unavailable``), in words that name no credentials
or message content.
"""

from __future__ import annotations

import botocore.exceptions
import urllib3

from .._errors import StoreUnavailableError

#: Error codes of a key (or bucket) that is not there.
MISSING = frozenset({"NoSuchKey", "404", "NotFound"})
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


def as_botocore_error(raw: urllib3.exceptions.HTTPError) -> botocore.exceptions.HTTPClientError:
    """botocore's error for a transport failure that came out of botocore as urllib3's own: it
    reads the body of an error answer outside its mapping of urllib3's errors (its
    ``convert_to_response_dict``), so a 404's or a 500's body that times out or is cut off there
    reaches the caller raw. As botocore's, it is retried and reported as any other."""
    if isinstance(raw, urllib3.exceptions.ReadTimeoutError):
        return botocore.exceptions.ReadTimeoutError(endpoint_url=str(raw.url or ""), error=raw)
    return botocore.exceptions.ResponseStreamingError(error=raw)


def error_code(exc: botocore.exceptions.ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def http_status(exc: botocore.exceptions.ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def transient_kind(exc: Exception, *, conditional: bool) -> str | None:
    """Why a failed attempt may succeed if repeated (``"throttled"``, ``"conflict"``, ``"error"``),
    or None when repeating it cannot help (404, 412, 403, a bad request, no credentials)."""
    if isinstance(exc, botocore.exceptions.ClientError):
        status, code = http_status(exc), error_code(exc)
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


def reason(exc: Exception, *, read_timeout: float, connect_timeout: float) -> str:
    """What went wrong, in words, without credentials or message content."""
    if isinstance(exc, botocore.exceptions.ClientError):
        return f"{error_code(exc) or 'error'} (HTTP {http_status(exc)})"
    if isinstance(exc, botocore.exceptions.ReadTimeoutError):
        return f"no answer within the {read_timeout:g} s read timeout"
    if isinstance(exc, botocore.exceptions.ConnectTimeoutError):
        return f"no connection within the {connect_timeout:g} s connect timeout"
    if isinstance(exc, botocore.exceptions.EndpointConnectionError):
        return "could not connect"
    if isinstance(exc, botocore.exceptions.ConnectionClosedError):
        return "the connection closed without an answer"
    return type(exc).__name__


def unavailable(
    action: str, key: str, exc: Exception, *, bucket: str, location: str, why: str, attempts: int = 1, elapsed: float = 0.0
) -> StoreUnavailableError:
    """The error that reports ``action`` on ``key`` of ``bucket`` (at ``location``) failing with
    ``exc`` (``why``: its ``reason``), after ``attempts`` in ``elapsed`` seconds."""
    tries = f" after {attempts} attempts in {elapsed:.1f} s" if attempts > 1 else ""
    if isinstance(exc, botocore.exceptions.ClientError):
        code = error_code(exc)
        if code == "NoSuchBucket":
            return StoreUnavailableError(f"bucket {bucket!r} does not exist ({location})")
        if code in _DENIED:
            return StoreUnavailableError(f"{action} {key!r} refused: access denied ({code}); check the credentials")
        return StoreUnavailableError(f"{action} {key!r} failed: {why}{tries} ({location})")
    if isinstance(exc, botocore.exceptions.NoCredentialsError | botocore.exceptions.PartialCredentialsError):
        return StoreUnavailableError(
            f"no AWS credentials for {location}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE"
        )
    if isinstance(exc, botocore.exceptions.NoRegionError):
        return StoreUnavailableError(f"no AWS region for {location}: set AWS_DEFAULT_REGION")
    hint = ""
    if transient_kind(exc, conditional=False) is not None:
        hint = "; EVSTORE_READ_TIMEOUT, EVSTORE_CONNECT_TIMEOUT and EVSTORE_MAX_ATTEMPTS set the bounds"
    return StoreUnavailableError(f"{action} {key!r} failed: {why}{tries} ({location}){hint}")
