"""GETs and LISTs sent straight through urllib3, signed here, for ``S3Store``'s reads.

botocore spends about 1.8 ms of CPU on a small GetObject on this kind of machine (its event
hooks, endpoint rules, header dicts, response parsing); the same request signed here and sent
on a urllib3 pool spends about 0.8 ms. A resume is a handful to a few hundred such reads, all
on one core's worth of GIL, so that difference is most of a short session's resume CPU.

What makes it safe to do beside botocore:

* **Nothing is guessed.** ``DirectReads`` stays off until botocore itself has sent one GET or
  LIST of the store's own client over the wire (``observe_sent`` and ``observe_answered``,
  called from botocore's ``before-send`` and ``after-call`` events): the URL it used (path or
  virtual-hosted style, whatever endpoint rules chose) and the region and service its SigV4
  signature was scoped to are taken from that request. A request that a mock answered (moto's
  in-process mock, botocore's ``Stubber``) never reached urllib3, so it teaches nothing and
  every read keeps going through botocore.
* **Only the plain answers are read here.** A 200 (a GET's body, a LIST body that
  ``parse_list_body`` reads whole) and a GET's 404 ``NoSuchKey`` are answered from here;
  anything else (another status, a transport error, a body cut short, an unreadable page) is
  ``None``, and ``S3Store`` sends the request again through botocore, whose answer, errors and
  retries are the store's as before. Reads change nothing, so sending one twice is harmless; it
  costs a request only where the direct one failed. An answer that says the server refuses the
  request as sent (400, 403, a redirect) stops direct reads for the store's lifetime, so that
  a failure that would repeat never costs two requests a read.
* **Same credentials, same checks.** Each request is signed (SigV4, ``AWS4-HMAC-SHA256``) with
  the credentials botocore resolved for the client, frozen per request, so refreshed role
  credentials and session tokens are used as botocore uses them. HTTPS verifies certificates
  with botocore's CA bundle (or ``AWS_CA_BUNDLE``). Where botocore would go through a proxy
  (any ``*_proxy`` variable set) or the client is not the store's own, direct reads stay off.

Writes always go through botocore: only reads, which are safe to repeat, take this path.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import re
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

import msgspec
import urllib3

from ._base import ObjectMissing, StoredObject, too_large
from ._s3_listing import ListedPage, parse_list_body

#: SHA-256 of an empty payload: every request sent here has no body.
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
#: What a SigV4 ``Authorization`` header botocore sent states: key id, date, region, service.
_SCOPE = re.compile(r"AWS4-HMAC-SHA256 Credential=[^/,]+/[0-9]{8}/([^/,]+)/([^/,]+)/aws4_request,")
_NO_SUCH_KEY = b"<Code>NoSuchKey</Code>"
#: Statuses after which direct reads stop (``DirectReads._check_refused``): bad request, access
#: denied (a signature, a clock, a policy), and redirects (another region or endpoint).
_REFUSED = frozenset({301, 302, 307, 308, 400, 403})


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


class DirectReads:
    """The direct GET and LIST of one ``S3Store``. Each method answers what it can read here
    and returns None for everything else (the caller then asks botocore): see the module's
    docstring. ``count`` is called with the operation's name for each request sent."""

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
        self._parse_timestamp = parse_timestamp
        self._count = count
        self._target: Target | None = None
        self._refused = False  # the server refused a direct read as sent: botocore's from then on
        self._sent = threading.local()  # the URL and key botocore is sending on this thread

    @property
    def target(self) -> Target | None:
        """Where direct reads go, once learned; None until then."""
        return self._target

    # ---- learning from botocore ---------------------------------------------------

    def learning(self, key: str | None) -> bool:
        """Whether the direct reads still wait for a request to learn from; if so, botocore's
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

    def _send(self, target: Target, path: str, query: str, *, preload: bool) -> urllib3.BaseHTTPResponse | None:
        frozen = self._credentials()
        if frozen is None or not frozen.access_key or not frozen.secret_key:
            return None
        amz_date = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
        headers = {"host": target.host, "x-amz-content-sha256": EMPTY_SHA256, "x-amz-date": amz_date}
        if frozen.token:
            headers["x-amz-security-token"] = frozen.token
        headers["authorization"] = sign_v4(
            "GET",
            path,
            query,
            headers,
            access_key=frozen.access_key,
            secret_key=frozen.secret_key,
            region=target.region,
            service=target.service,
            amz_date=amz_date,
        )
        url = f"{target.scheme}://{target.host}{path}" + (f"?{query}" if query else "")
        try:
            return self._pool.request(
                "GET", url, headers=headers, preload_content=preload, decode_content=False, redirect=False
            )
        except (urllib3.exceptions.HTTPError, OSError):
            return None

    def _check_refused(self, status: int) -> None:
        """After an answer that says the request was not one the server takes as sent (a
        signature or a request it refuses, a redirect elsewhere), every read goes through
        botocore: a failure that would repeat must not cost two requests a read."""
        if status in _REFUSED:
            self._refused = True
            self._target = None

    def get(self, key: str, max_bytes: int | None) -> StoredObject | None:
        """The object, or None where botocore should answer. Raises ``ObjectMissing`` on a
        404 ``NoSuchKey`` and the ``too_large`` error on a larger ``Content-Length``."""
        target = self._target
        if target is None:
            return None
        response = self._send(target, target.path + quote_key(key), "", preload=False)
        if response is None:
            return None
        self._count("GetObject")
        self._check_refused(response.status)
        keep = True  # the connection goes back to the pool once the rest of the answer is read
        try:
            headers = response.headers
            if response.status == 404:
                if _NO_SUCH_KEY in response.read():
                    raise ObjectMissing(key)
                return None
            if response.status != 200:
                return None
            size = int(headers.get("content-length", "-1"))
            if max_bytes is not None and size > max_bytes:  # refused by its header, the body unread
                keep = False
                raise too_large(key, size, max_bytes)
            data = response.read()
            if size != len(data) or "etag" not in headers or "last-modified" not in headers:
                return None
            metadata = {name[11:]: value for name, value in headers.items() if name.lower().startswith("x-amz-meta-")}
            return StoredObject(key, data, headers["etag"], self._parse_timestamp(headers["last-modified"]), metadata)
        except (urllib3.exceptions.HTTPError, OSError, ValueError):
            keep = False
            return None
        finally:
            if keep:
                response.drain_conn()
                response.release_conn()
            else:
                response.close()

    def list_page(self, params: Mapping[str, str]) -> ListedPage | None:
        """One ListObjectsV2 page of ``params`` (``prefix``, ``max-keys``, ...; ``list-type`` and
        ``encoding-type`` are added), or None where botocore should answer."""
        target = self._target
        if target is None:
            return None
        query = canonical_query({**params, "list-type": "2", "encoding-type": "url"})
        response = self._send(target, target.bucket_path(), query, preload=True)
        if response is None:
            return None
        self._count("ListObjectsV2")
        self._check_refused(response.status)
        if response.status != 200:
            return None
        try:
            return parse_list_body(response.data, self._parse_timestamp)
        except ValueError:
            return None
