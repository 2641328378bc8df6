"""GETs, LISTs and conditional creates sent straight through urllib3, signed here, for ``S3Store``.

botocore spends about 1 to 2 ms of CPU on a small GetObject or PutObject (its event hooks,
endpoint rules, header dicts, response parsing); the same request signed here and sent on a
urllib3 pool spends a third of that (``benchmarks/direct_requests.py``). A resume is a handful
to a few hundred reads and an append is one create, all on one core's worth of GIL, so that
difference is most of a short session's resume CPU and most of an append's.

What makes it safe to do beside botocore:

* **Nothing is guessed.** ``DirectRequests`` stays off until botocore itself has sent one GET or
  LIST of the store's own client over the wire (``observe_sent`` and ``observe_answered``,
  called from botocore's ``before-send`` and ``after-call`` events): the URL it used (path or
  virtual-hosted style, whatever endpoint rules chose) and the region and service its SigV4
  signature was scoped to are taken from that request. A request that a mock answered (moto's
  in-process mock, botocore's ``Stubber``) never reached urllib3, so it teaches nothing and
  every request keeps going through botocore.
* **Only the plain answers are taken here.** A GET's 200 (a body of the announced length) and
  404 ``NoSuchKey``, a LIST's 200 with a body ``parse_list_body`` reads whole, a create's 200
  (its ETag) and 412 (the key is taken); anything else (another status, a transport error, a
  body cut short) is an ``Unanswered``, and ``S3Store`` sends the request through botocore, whose
  answer, errors and retries are the store's as before. That is safe because every request
  here is safe to repeat: reads change nothing, and a create is conditional (``If-None-Match:
  *``), so one whose answer was lost after the server stored it meets 412 when botocore sends
  it again, and the caller reads the key back, as after any retried create (the module
  docstring of ``_s3``). A direct attempt that failed transiently is the first of the request's
  ``max_attempts``, botocore's its retry. It costs a request only where the direct one failed. An answer that
  says the server refuses the request as sent (400, 403, a redirect), a TLS failure, or three
  transport failures in a row stop direct requests for the store's lifetime, so that a failure
  that would repeat never costs two requests each.
* **Same credentials, same checks.** Each request is signed (SigV4, ``AWS4-HMAC-SHA256``) with
  the credentials botocore resolved for the client, frozen per request, so refreshed role
  credentials and session tokens are used as botocore uses them. A create sends its
  ``Content-MD5`` and signs its payload's SHA-256, so the server refuses bytes changed on the
  way, and its head and body go out in one write, as botocore's do (``_OneWriteConnection``).
  HTTPS verifies certificates with botocore's CA bundle (or ``AWS_CA_BUNDLE``). Where botocore
  would go through a proxy (any ``*_proxy`` variable set) or the client is not the store's own,
  direct requests stay off.

Replacing an object (``If-Match``), HEAD, deletes, tags and lifecycle always go through botocore.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import re
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import msgspec
import urllib3
import urllib3.connection

from ._base import KeysPage, ObjectExists, ObjectMissing, StoredObject, too_large
from ._s3_listing import ListedPage, parse_etags_body, parse_list_body

#: SHA-256 of an empty payload (a GET's, a LIST's).
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
#: What a SigV4 ``Authorization`` header botocore sent states: key id, date, region, service.
_SCOPE = re.compile(r"AWS4-HMAC-SHA256 Credential=[^/,]+/[0-9]{8}/([^/,]+)/([^/,]+)/aws4_request,")
_NO_SUCH_KEY = b"<Code>NoSuchKey</Code>"
#: A header name or value sent as it is: printable ASCII, no leading or trailing space.
_PLAIN_HEADER = re.compile(r"[!-~](?:[ -~]*[!-~])?")
#: Statuses after which direct requests stop (``DirectRequests._unanswered``): bad request,
#: access denied (a signature, a clock, a policy), and redirects (another region or endpoint).
_REFUSED = frozenset({301, 302, 307, 308, 400, 403})
#: Transport failures in a row (connection refused or reset, a timeout) after which direct
#: requests stop: one is a blip that botocore's retry absorbs, several mean this pool cannot
#: reach the server the way botocore does.
_FAILURES_TO_STOP = 3
#: What a LIST body is read into (``DirectRequests._list``).
P = TypeVar("P")


class Unanswered(msgspec.Struct, frozen=True):
    """Why a direct request gives no answer to take, so that botocore sends it. ``transient``: it
    went out and failed in a way a retry may fix (a transport failure, a 5xx, 409 or 429, a body
    cut short), so it counts as the request's first attempt; else botocore's own attempts and
    reading of the answer are wanted (nothing went out, another status, a body this module does
    not read)."""

    transient: bool


#: It failed in a way a retry may fix: the first of the request's attempts.
FAILED = Unanswered(transient=True)
#: botocore's to send and to answer, with attempts of its own.
ASK_BOTOCORE = Unanswered(transient=False)


class Target(msgspec.Struct, frozen=True):
    """Where and how botocore sent the client's object requests: scheme, host (as signed), the
    path every object key is appended to (ending in ``/``), and the signature's region and
    service."""

    scheme: str
    host: str
    path: str
    region: str
    service: str

    def bucket_path(self) -> str:
        """The path a LIST of the bucket is sent to: the object path without its last ``/``
        (``/bucket`` in path style, ``/`` for a virtual-hosted bucket)."""
        return self.path.rstrip("/") or "/"


def quote_key(key: str) -> str:
    """An object key as botocore puts it in a URL path (UTF-8, ``/`` and ``~`` kept)."""
    return urllib.parse.quote(key, safe="/~")


def learn_target(url: str, key: str | None, authorization: str) -> Target | None:
    """The ``Target`` of a request botocore sent to ``url`` with ``authorization``: a GET of
    ``key``, or with ``key`` None a LIST of the bucket (whose path, ``/`` added, is where
    object keys go). None when it is not one this module can repeat (no SigV4 header, a
    service other than ``s3`` such as S3 Express's session auth, a URL that does not end in
    the key). Pure."""
    scope = _SCOPE.match(authorization)
    parts = urllib.parse.urlsplit(url)
    if scope is None or scope[2] != "s3" or parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    if key is None:
        path = parts.path if parts.path.endswith("/") else f"{parts.path}/"
    else:
        quoted = quote_key(key)
        path = parts.path[: len(parts.path) - len(quoted)]
        if not parts.path.endswith(quoted) or not path.endswith("/"):
            return None
    return Target(parts.scheme, parts.netloc, path, scope[1], scope[2])


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def canonical_query(params: Mapping[str, str]) -> str:
    """A query string in SigV4's canonical form (sorted, RFC 3986 encoded), which is also the
    form sent: the server signs what it receives. Pure."""
    return "&".join(
        f"{urllib.parse.quote(name, safe='-_.~')}={urllib.parse.quote(value, safe='-_.~')}"
        for name, value in sorted(params.items())
    )


def sign_v4(
    method: str,
    path: str,
    query: str,
    headers: dict[str, str],
    *,
    access_key: str,
    secret_key: str,
    region: str,
    service: str,
    amz_date: str,
    payload_sha256: str = EMPTY_SHA256,
) -> str:
    """The ``Authorization`` header of AWS Signature Version 4 for a request of ``method`` to
    ``path`` (as sent, already URL-encoded: S3 signs it unnormalized) and canonical ``query``,
    signing every header in ``headers`` (lowercase names; ``host`` and ``x-amz-date`` among
    them). Pure."""
    names = sorted(headers)
    signed = ";".join(names)
    canonical = "\n".join(
        [method, path, query, *(f"{name}:{' '.join(headers[name].split())}" for name in names), "", signed, payload_sha256]
    )
    day = amz_date[:8]
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    key = _hmac(_hmac(_hmac(_hmac(f"AWS4{secret_key}".encode(), day), region), service), "aws4_request")
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    return f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, SignedHeaders={signed}, Signature={signature}"


class _OneWriteConnection(urllib3.connection.HTTPConnection):
    """Sends a request's head and its bytes body in one write, as botocore's connection does
    (urllib3's sends them in two). A writer killed between two writes leaves the server a head
    whose body never comes: S3 and moto's server refuse what came, but a proxy that passes on
    the part it got, before a server that checks no ``Content-MD5`` (moto), stores the part."""

    _body: bytes | None = None  # the body to send with the request's head, the next write

    def request(self, method: str, url: str, body: Any = None, headers: Any = None, **kwargs: Any) -> None:
        if isinstance(body, bytes) and body:
            # urllib3 is given no body (so it sends none after the head), its length as a header
            self._body, body = body, None
            headers = {**(headers or {}), "content-length": str(len(self._body))}
        try:
            super().request(method, url, body=body, headers=headers, **kwargs)
        finally:
            self._body = None

    def send(self, data: Any) -> None:
        if self._body is not None:  # the head: http.client sends it whole in one call
            data, self._body = bytes(data) + self._body, None
        super().send(data)


class _OneWriteTLSConnection(_OneWriteConnection, urllib3.connection.HTTPSConnection):
    pass


class _Pool(urllib3.HTTPConnectionPool):
    ConnectionCls = _OneWriteConnection


class _TLSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _OneWriteTLSConnection


class DirectRequests:
    """The direct GET, LIST and create of one ``S3Store``. Each method answers what it can take
    here and returns an ``Unanswered`` for everything else (the caller then asks botocore):
    see the module's docstring. ``count`` is called with the operation's name for each request sent."""

    def __init__(
        self,
        credentials: Callable[[], Any],
        *,
        connect_timeout: float,
        read_timeout: float,
        max_connections: int,
        ca_bundle: str | None,
        parse_timestamp: Callable[[str], datetime.datetime],
        count: Callable[[str], None],
    ) -> None:
        self._credentials = credentials
        self._pool = urllib3.PoolManager(
            num_pools=4,
            maxsize=max_connections,
            timeout=urllib3.Timeout(connect=connect_timeout, read=read_timeout),
            retries=False,
            ca_certs=ca_bundle,
        )
        self._pool.pool_classes_by_scheme = {"http": _Pool, "https": _TLSPool}
        self._parse_timestamp = parse_timestamp
        self._count = count
        self._target: Target | None = None
        self._refused = False  # direct requests stopped (``_stop``): botocore's from then on
        self._failures = 0  # transport failures in a row
        self._sent = threading.local()  # the URL and key botocore is sending on this thread

    @property
    def target(self) -> Target | None:
        """Where direct requests go, once learned; None until then."""
        return self._target

    def close(self) -> None:
        """Close the pool's connections (a request after this opens new ones)."""
        self._pool.clear()

    # ---- learning from botocore ---------------------------------------------------

    def learning(self, key: str | None) -> bool:
        """Whether direct requests still wait for a request to learn from; if so, botocore's
        next request on this thread is a GET of ``key`` (None: a LIST of the bucket), which
        ``observe_sent`` pairs with it."""
        if self._target is not None:
            return False
        if not self._refused:
            self._sent.waiting, self._sent.key = True, key
        return True

    def observe_sent(self, request: Any) -> None:
        """botocore's ``before-send``: it is about to send ``request`` on this thread."""
        if self._target is None and getattr(self._sent, "waiting", False):
            authorization = request.headers.get("Authorization", "")
            if isinstance(authorization, bytes):
                authorization = authorization.decode("ascii", "replace")
            self._sent.seen = (str(request.url), self._sent.key, str(authorization))

    def observe_answered(self, http_response: Any) -> None:
        """botocore's ``after-call``: the request on this thread was answered; learn from it if
        urllib3 carried it (a mock's answer teaches nothing)."""
        seen = getattr(self._sent, "seen", None)
        self._sent.seen, self._sent.waiting = None, False
        over_the_wire = isinstance(getattr(http_response, "raw", None), urllib3.HTTPResponse)
        if self._target is None and seen is not None and over_the_wire and http_response.status_code in (200, 404):
            self._target = learn_target(*seen)

    # ---- requests ----------------------------------------------------------------

    def _send(
        self,
        target: Target,
        path: str,
        query: str = "",
        *,
        method: str = "GET",
        body: bytes = b"",
        extra: Mapping[str, str] | None = None,
        preload: bool = True,
    ) -> urllib3.BaseHTTPResponse | Unanswered:
        """Sign and send one request: its answer, ``ASK_BOTOCORE`` when there are no credentials to
        sign with or TLS failed, ``FAILED`` when it failed on the way otherwise (counted toward
        ``_FAILURES_TO_STOP``).
        ``extra`` headers are signed too."""
        frozen = self._credentials()
        if frozen is None or not frozen.access_key or not frozen.secret_key:
            return ASK_BOTOCORE
        amz_date = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
        payload = hashlib.sha256(body).hexdigest() if body else EMPTY_SHA256
        headers = {"host": target.host, "x-amz-content-sha256": payload, "x-amz-date": amz_date, **(extra or {})}
        if frozen.token:
            headers["x-amz-security-token"] = frozen.token
        headers["authorization"] = sign_v4(
            method,
            path,
            query,
            headers,
            access_key=frozen.access_key,
            secret_key=frozen.secret_key,
            region=target.region,
            service=target.service,
            amz_date=amz_date,
            payload_sha256=payload,
        )
        url = f"{target.scheme}://{target.host}{path}" + (f"?{query}" if query else "")
        try:
            response = self._pool.request(
                method,
                url,
                body=body if method == "PUT" else None,
                headers=headers,
                preload_content=preload,
                decode_content=False,
                redirect=False,
            )
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            # a TLS failure would repeat (a certificate this pool does not trust, a client certificate
            # botocore sends): stop at once; other transport failures after a few in a row
            self._failures += 1
            if isinstance(exc, urllib3.exceptions.SSLError):
                self._stop()
                return ASK_BOTOCORE  # botocore's TLS fails too, or works: either way its answer is wanted
            if self._failures >= _FAILURES_TO_STOP:
                self._stop()
            return FAILED
        self._failures = 0
        return response

    def _unanswered(self, status: int) -> Unanswered:
        """What an answer of ``status`` that is not taken here leaves to botocore. After one that
        says the request was not one the server takes as sent (a signature or a request it
        refuses, a redirect elsewhere) direct requests stop, so that a failure that would repeat
        never costs two requests each."""
        if status in _REFUSED:
            self._stop()
        return FAILED if status >= 500 or status in (409, 429) else ASK_BOTOCORE

    def _stop(self) -> None:
        """Direct requests end for this store: botocore's from now on."""
        self._refused = True
        self._target = None

    def get(self, key: str, max_bytes: int | None) -> StoredObject | Unanswered:
        """The object, or why botocore should answer. Raises ``ObjectMissing`` on a 404
        ``NoSuchKey`` and the ``too_large`` error on a larger ``Content-Length``."""
        target = self._target
        if target is None:
            return ASK_BOTOCORE
        response = self._send(target, target.path + quote_key(key), preload=False)
        if isinstance(response, Unanswered):
            return response
        self._count("GetObject")
        keep = True  # the connection goes back to the pool once the rest of the answer is read
        try:
            headers = response.headers
            if response.status == 404:
                if _NO_SUCH_KEY in response.read():
                    raise ObjectMissing(key)
                return ASK_BOTOCORE
            if response.status != 200:
                return self._unanswered(response.status)
            size = int(headers.get("content-length", "-1"))
            if max_bytes is not None and size > max_bytes:  # refused by its header, the body unread
                keep = False
                raise too_large(key, size, max_bytes)
            data = response.read()
            if size != len(data):
                return FAILED  # cut short
            if "etag" not in headers or "last-modified" not in headers:
                return ASK_BOTOCORE
            metadata = {name[11:]: value for name, value in headers.items() if name.lower().startswith("x-amz-meta-")}
            return StoredObject(key, data, headers["etag"], self._parse_timestamp(headers["last-modified"]), metadata)
        except (urllib3.exceptions.HTTPError, OSError):
            keep = False
            return FAILED  # the body was cut off or timed out
        except ValueError:
            return ASK_BOTOCORE  # a Content-Length or Last-Modified this module does not read
        finally:
            if keep:
                response.drain_conn()
                response.release_conn()
            else:
                response.close()

    def list_page(self, params: Mapping[str, str]) -> ListedPage | Unanswered:
        """One ListObjectsV2 page of ``params`` (``prefix``, ``max-keys``, ...; ``list-type`` and
        ``encoding-type`` are added), or why botocore should answer."""
        return self._list(params, parse_list_body)

    def list_etags(self, params: Mapping[str, str]) -> KeysPage | Unanswered:
        """``list_page``'s keys and ETags alone (``parse_etags_body``)."""
        return self._list(params, parse_etags_body)

    def _list(
        self, params: Mapping[str, str], parse: Callable[[bytes, Callable[[str], datetime.datetime]], P | None]
    ) -> P | Unanswered:
        """One ListObjectsV2 page, its body read by ``parse`` (None: botocore should read it)."""
        target = self._target
        if target is None:
            return ASK_BOTOCORE
        query = canonical_query({**params, "list-type": "2", "encoding-type": "url"})
        response = self._send(target, target.bucket_path(), query)
        if isinstance(response, Unanswered):
            return response
        self._count("ListObjectsV2")
        if response.status != 200:
            return self._unanswered(response.status)
        page = parse(response.data, self._parse_timestamp)
        return ASK_BOTOCORE if page is None else page

    def create(
        self, key: str, data: bytes, metadata: Mapping[str, str] | None, tags: Mapping[str, str] | None
    ) -> str | Unanswered:
        """``PUT`` with ``If-None-Match: *``: the new object's ETag; ``ObjectExists`` on a 412 (the
        key is taken); or why botocore should send it (including a failure after which the
        object may or may not be stored: botocore's PUT then meets 412 and the caller reads the
        key back, as after any retried create). ``Content-MD5`` rides along, so the server
        refuses bytes changed on the way. Metadata and tags that are not plain printable ASCII
        are left to botocore."""
        target = self._target
        if target is None:
            return ASK_BOTOCORE
        md5 = base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()
        extra = {"if-none-match": "*", "content-md5": md5}
        for name, value in (metadata or {}).items():
            extra[f"x-amz-meta-{name.lower()}"] = value
        if tags:
            extra["x-amz-tagging"] = urllib.parse.urlencode(dict(tags))
        if not all(_PLAIN_HEADER.fullmatch(text) for text in (*extra, *extra.values())):
            return ASK_BOTOCORE
        response = self._send(target, target.path + quote_key(key), method="PUT", body=data, extra=extra)
        if isinstance(response, Unanswered):
            return response
        self._count("PutObject")
        if response.status == 412:
            raise ObjectExists(key)
        etag = response.headers.get("etag")
        if response.status == 200 and etag:
            return str(etag)
        return self._unanswered(response.status)  # a 200 without an ETag too: botocore's to read
