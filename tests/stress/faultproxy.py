"""A fault-injecting HTTP/1.1 proxy on 127.0.0.1, in front of an S3 server (moto).

evstore talks to the proxy as if it were the S3 endpoint (path-style
addressing, so the bucket is in the path and the Host header can stay as the
client sent it). For each request a *plan* picks one ``Fault``:

* ``FORWARD``          pass the request on and the response back;
* ``LOSE_RESPONSE``    pass it on (the server stores the object), then close the
                       client connection without answering (FIN);
* ``RESET_AFTER``      pass it on, then reset the client connection (RST);
* ``RESET_BEFORE``     reset the client connection; the server never sees the request;
* ``ERROR_500``        answer 500 InternalError without passing it on;
* ``SLOWDOWN_503``     answer 503 SlowDown without passing it on;
* ``CONFLICT_409``     answer 409 ConditionalRequestConflict without passing it on;
* ``SLOW_RESPONSE``    pass it on, then hold the response past the client's read timeout;
* ``LATE_FORWARD``     hold the request past the client's read timeout, then pass it on
                       (the client has retried meanwhile: the late original lands second);
* ``TRUNCATE_BODY``    pass it on, then send the response headers and half the body.

A request whose body never fully arrives (the client was killed mid-request)
is dropped, never passed on cut short: what any HTTP server or proxy does, and
moto, which does not check Content-MD5, would otherwise store the part.

Every request is recorded (``ProxyLog``), with the fault it got and the status
the server gave when it was passed on, so tests count attempts and injected
faults from what actually crossed the wire. Only loopback addresses are used.
"""

from __future__ import annotations

import enum
import http.client
import random
import re
import socket
import struct
import threading
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

__all__ = [
    "EVENT_KEY",
    "Fault",
    "FaultProxy",
    "Plan",
    "ProxyLog",
    "Request",
    "every_nth",
    "persistent",
    "random_faults",
]


class Fault(enum.Enum):
    FORWARD = "forward"
    LOSE_RESPONSE = "lose_response"
    RESET_AFTER = "reset_after"
    RESET_BEFORE = "reset_before"
    ERROR_500 = "error_500"
    SLOWDOWN_503 = "slowdown_503"
    CONFLICT_409 = "conflict_409"
    SLOW_RESPONSE = "slow_response"
    LATE_FORWARD = "late_forward"
    TRUNCATE_BODY = "truncate_body"


#: Faults after which the server has processed the request although the client never learns its answer.
AMBIGUOUS = frozenset({Fault.LOSE_RESPONSE, Fault.RESET_AFTER, Fault.SLOW_RESPONSE, Fault.LATE_FORWARD})
_CANNED = {
    Fault.ERROR_500: (500, "InternalError", "We encountered an internal error. Please try again."),
    Fault.SLOWDOWN_503: (503, "SlowDown", "Please reduce your request rate."),
    Fault.CONFLICT_409: (
        409,
        "ConditionalRequestConflict",
        "A conflicting conditional operation is currently in progress against this resource.",
    ),
}
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "expect", "content-length"}
)

#: Path of an event object (``.../sessions/<sid>/<20-digit seq>``), the target of an append's PUT.
EVENT_KEY = re.compile(r"/sessions/[^/]+/\d{20}$")


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # percent-decoded, without the query string
    query: str
    headers: Mapping[str, str]

    @property
    def is_event_put(self) -> bool:
        return self.method == "PUT" and not self.query and EVENT_KEY.search(self.path) is not None


#: A plan maps each request to the fault it gets; it is called from the proxy's threads.
Plan = Callable[[Request], Fault]


def _forward_all(request: Request) -> Fault:
    return Fault.FORWARD


def persistent(fault: Fault, match: Callable[[Request], bool] = lambda r: True) -> Plan:
    """Every matching request gets ``fault``."""
    return lambda request: fault if match(request) else Fault.FORWARD


def every_nth(fault: Fault, n: int, match: Callable[[Request], bool] = lambda r: r.is_event_put) -> Plan:
    """The n-th, 2n-th, ... matching request gets ``fault``; the retry that follows it is forwarded."""
    counter = 0
    lock = threading.Lock()

    def plan(request: Request) -> Fault:
        nonlocal counter
        if not match(request):
            return Fault.FORWARD
        with lock:
            counter += 1
            return fault if counter % n == 0 else Fault.FORWARD

    return plan


def random_faults(rates: Mapping[Fault, float], *, seed: int, limit: int) -> Plan:
    """Each request independently gets a fault with the given probabilities (seeded), at most ``limit`` faults."""
    rng = random.Random(seed)
    lock = threading.Lock()
    injected = 0
    choices = list(rates.items())

    def plan(request: Request) -> Fault:
        nonlocal injected
        with lock:
            if injected >= limit:
                return Fault.FORWARD
            draw = rng.random()
            for fault, rate in choices:
                if draw < rate:
                    injected += 1
                    return fault
                draw -= rate
            return Fault.FORWARD

    return plan


@dataclass
class ProxyLog:
    """What crossed the proxy. Safe to read while the proxy runs (take ``lock`` for a consistent view)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    #: (method, path, query, fault, upstream status or 0 when not passed on)
    entries: list[tuple[str, str, str, Fault, int]] = field(default_factory=list)

    def add(self, request: Request, fault: Fault, status: int) -> None:
        with self.lock:
            self.entries.append((request.method, request.path, request.query, fault, status))

    def faults(self) -> Counter[Fault]:
        with self.lock:
            return Counter(e[3] for e in self.entries if e[3] is not Fault.FORWARD)

    def injected(self) -> int:
        return sum(self.faults().values())

    def upstream_statuses(self, method: str | None = None) -> Counter[int]:
        with self.lock:
            return Counter(e[4] for e in self.entries if e[4] and (method is None or e[0] == method))

    def requests_for(self, path_suffix: str, method: str | None = None) -> int:
        with self.lock:
            return sum(1 for e in self.entries if e[1].endswith(path_suffix) and (method is None or e[0] == method))

    def __len__(self) -> int:
        with self.lock:
            return len(self.entries)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:  # quiet: the log is ProxyLog
        pass

    def do_GET(self) -> None:
        self._serve()

    do_PUT = do_POST = do_DELETE = do_HEAD = do_GET

    def _read_body(self) -> bytes | None:
        """The request's body, or None when the client went away before sending all of it (a
        writer killed mid-request): like any HTTP server or proxy, this one never takes the
        part that came for the whole."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts: list[bytes] = []
            while True:
                line = self.rfile.readline()
                if not line.endswith(b"\n"):
                    return None
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while (trailer := self.rfile.readline()) not in (b"\r\n", b"\n"):
                        if not trailer:
                            return None
                    return b"".join(parts)
                part = self.rfile.read(size)
                if len(part) < size or not self.rfile.readline().endswith(b"\n"):
                    return None
                parts.append(part)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        return body if len(body) == length else None

    def _serve(self) -> None:
        proxy = self.server.proxy
        body = self._read_body()
        if body is None:
            self.close_connection = True
            return
        split = urllib.parse.urlsplit(self.path)
        request = Request(
            self.command, urllib.parse.unquote(split.path), split.query, {k.lower(): v for k, v in self.headers.items()}
        )
        fault = proxy.plan(request)
        if fault is Fault.RESET_BEFORE:
            proxy.log.add(request, fault, 0)
            self._reset()
            return
        if fault in _CANNED:
            proxy.log.add(request, fault, 0)
            self._send_error(*_CANNED[fault])
            return
        if fault is Fault.LATE_FORWARD:
            proxy.stopping.wait(proxy.delay)
        status, headers, payload = self._forward(body)
        proxy.log.add(request, fault, status)
        if fault is Fault.FORWARD:
            self._send(status, headers, payload)
        elif fault is Fault.LOSE_RESPONSE or fault is Fault.LATE_FORWARD:
            self.close_connection = True  # the client gets FIN and no answer
        elif fault is Fault.RESET_AFTER:
            self._reset()
        elif fault is Fault.SLOW_RESPONSE:
            proxy.stopping.wait(proxy.delay)  # the client times out meanwhile
            self.close_connection = True
        elif fault is Fault.TRUNCATE_BODY:
            self._send(status, headers, payload, truncate=True)
            self.close_connection = True

    def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        proxy = self.server.proxy
        upstream = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=60)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
            headers["Content-Length"] = str(len(body))
            upstream.request(self.command, self.path, body=body, headers=headers)
            response = upstream.getresponse()
            payload = response.read()
            return response.status, response.getheaders(), payload
        finally:
            upstream.close()

    def _send(self, status: int, headers: Iterable[tuple[str, str]], payload: bytes, *, truncate: bool = False) -> None:
        self.send_response_only(status)
        length = None
        for name, value in headers:
            lower = name.lower()
            if lower == "content-length" and self.command == "HEAD":
                length = value
            if lower not in _HOP_BY_HOP and lower not in ("date", "server"):
                self.send_header(name, value)
        if self.command == "HEAD":
            self.send_header("Content-Length", length or "0")
            payload = b""
        else:
            self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload[: len(payload) // 2] if truncate else payload)

    def _send_error(self, status: int, code: str, message: str) -> None:
        payload = (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message>'
            f"<RequestId>faultproxy</RequestId></Error>"
        ).encode()
        self.send_response_only(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", "0" if self.command == "HEAD" else str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _reset(self) -> None:
        """Close the client connection with RST (SO_LINGER 0), not FIN."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    proxy: FaultProxy

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that gave up (read timeout) or a socket we reset ourselves: expected here


class FaultProxy:
    """``with FaultProxy(upstream) as proxy: S3Store(bucket, endpoint_url=proxy.url, ...)``.

    ``plan`` may be replaced at any time; ``delay`` is how long slow faults hold
    (keep it above the client's read timeout).
    """

    def __init__(self, upstream: str, *, plan: Plan = _forward_all, delay: float = 1.0) -> None:
        parsed = urllib.parse.urlsplit(upstream)
        if parsed.hostname not in ("127.0.0.1", "localhost") or parsed.port is None:
            raise ValueError("the fault proxy only fronts a server on 127.0.0.1")
        self.upstream_host, self.upstream_port = "127.0.0.1", parsed.port
        self.plan: Plan = plan
        self.delay = delay
        self.log = ProxyLog()
        self.stopping = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.proxy = self
        self._thread = threading.Thread(target=self._server.serve_forever, name="faultproxy", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
