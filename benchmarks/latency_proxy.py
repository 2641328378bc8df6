"""A latency-injecting HTTP/1.1 proxy on 127.0.0.1, in front of an S3 endpoint on loopback.

Clients talk to the proxy as if it were the S3 endpoint (path-style addressing,
so the bucket is in the path; the Host header is passed on as the client sent
it, so SigV4 signatures still match). For every request the proxy:

* waits ``delay`` seconds before passing the request on: a fixed round trip,
  paid by each request in its own thread, so requests that overlap on the
  client overlap here too (as on S3: the delay is not a global lock);
* counts it (by kind: GET, PUT, HEAD, DELETE, POST, and LIST for a GET of a
  bucket);
* gives it a *depth*: 1 + the greatest depth of the requests whose answer
  had finished before this one arrived. A request that starts after another's
  answer finished may depend on it; one that overlaps it cannot. The greatest
  depth over a window is the longest chain of dependent requests, the
  critical path: the number of round trips the client could not have avoided
  waiting for, given the order it sent its requests in. An answer counts as
  finished just before the proxy writes its last piece, so a request sent
  after the client read a whole answer can never be taken for one that
  overlapped it, even when it arrives on another connection (another thread).

``reset()`` opens a new measuring window (requests still in flight from the
previous window count in neither); ``snapshot()`` reads it.

Answers stream through as they arrive (``readinto1``: whatever has arrived, up
to 1 MiB a step); a request body is read whole before it is passed on (it is at
most one object). Keep-alive works on both sides: a client connection serves
its requests one after another (boto3 pools connections), each on an idle
upstream connection from a pool the proxy keeps (a new one only when none is
idle). The proxy stands for the network, which costs the client's machine no
CPU; it shares this machine's cores with the client and the server, so it
parses heads by hand (only the framing and keep-alive headers are read; the
others pass through as they came) and opens no upstream connection a pooled one
can serve. Stdlib only. Only loopback addresses are used.

    with LatencyProxy("http://127.0.0.1:9000", delay=0.015) as proxy:
        client = boto3.client("s3", endpoint_url=proxy.endpoint)
        proxy.reset()
        ...
        stats = proxy.snapshot()  # stats.requests, stats.depth, stats.by_kind
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import socketserver
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import BinaryIO

__all__ = ["LatencyProxy", "ProxyStats", "Record"]

# Headers that describe one hop, not the message: never passed on as they came. The proxy frames
# each body itself (Content-Length, or chunked when upstream gave no length).
_HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"transfer-encoding", b"upgrade", b"expect"}
    | {b"content-length"}
)
_CHUNK = 1024 * 1024  # the most one relay step passes on (``readinto1``: what has arrived, up to this)
_SMALL = 64 * 1024  # a head and an answer's body up to this go in one write
_MAX_LINE = 64 * 1024
#: The headers the relay reads (framing and keep-alive); all others pass through unread.
_READ_FIELDS = frozenset({b"content-length", b"transfer-encoding", b"connection", b"expect"})
_LOOPBACK = ("127.0.0.1", "localhost")


@dataclass(frozen=True)
class ProxyStats:
    """One measuring window: ``requests`` that arrived in it, the longest chain of dependent ones among those
    that finished (``depth``), counts by kind, and how many were still in flight when it was read."""

    requests: int = 0
    depth: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    in_flight: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    upstream_errors: int = 0


@dataclass
class _Ticket:
    window: int
    depth: int
    kind: str
    path: str
    started: float
    finished: bool = False


@dataclass(frozen=True)
class Record:
    """One request of the window, when the proxy records them: when it arrived and when its answer finished
    (``time.perf_counter()``), its depth and the bytes it moved."""

    kind: str
    path: str
    depth: int
    started: float
    finished: float
    bytes_up: int
    bytes_down: int


def request_kind(method: str, path: str) -> str:
    """GET, PUT, ... and LIST for a GET of a bucket itself (path-style: ``/bucket`` with a query only)."""
    target = urllib.parse.urlsplit(path).path.strip("/")
    if method == "GET" and "/" not in target:
        return "LIST"
    return method


class LatencyProxy:
    """A delaying, counting, dependency-tracking proxy; see the module docstring.

    ``delay`` may be changed at any time; it applies to requests that arrive after.
    """

    def __init__(self, upstream: str, *, delay: float = 0.0, timeout: float = 120.0, record: bool = False) -> None:
        parsed = urllib.parse.urlsplit(upstream)
        if parsed.scheme != "http" or parsed.hostname not in _LOOPBACK or parsed.port is None:
            raise ValueError(f"the latency proxy only fronts an http:// server on 127.0.0.1 with a port, not {upstream!r}")
        if delay < 0:
            raise ValueError("delay must be >= 0")
        self.upstream_port: int = parsed.port
        self.delay = delay
        self.timeout = timeout
        self._lock = threading.Lock()
        self._window = 0
        self._requests = 0
        self._by_kind: Counter[str] = Counter()
        self._in_flight = 0
        self._done_depth = 0  # the greatest depth among this window's finished requests
        self._bytes_up = 0
        self._bytes_down = 0
        self._errors = 0
        #: keep a Record of every request of the window (for finding where a client's time goes)
        self.record = record
        self._records: list[Record] = []
        self._connections: set[socket.socket] = set()
        self._idle: list[_Upstream] = []  # upstream connections between requests, shared by all client connections
        self._closed = False
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.proxy = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="latency-proxy", daemon=True
        )
        self._started = False

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LatencyProxy:
        if not self._started:
            self._started = True
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop accepting, and end open client connections (their handler threads then finish)."""
        if self._started:
            self._server.shutdown()
            self._thread.join(timeout=10)
        self._server.server_close()
        with self._lock:
            self._closed = True
            open_now = list(self._connections)
            idle, self._idle = self._idle, []
        for upstream in idle:
            upstream.close()
        for sock in open_now:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> LatencyProxy:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # ---- the measuring window ------------------------------------------------

    def reset(self) -> None:
        """Open a new window: counts and depth start from zero; requests in flight now count in no window."""
        with self._lock:
            self._window += 1
            self._requests = 0
            self._by_kind = Counter()
            self._in_flight = 0
            self._done_depth = 0
            self._bytes_up = 0
            self._bytes_down = 0
            self._errors = 0
            self._records = []

    def records(self) -> list[Record]:
        """This window's finished requests, in the order they finished (empty unless ``record`` is set)."""
        with self._lock:
            return list(self._records)

    def snapshot(self) -> ProxyStats:
        with self._lock:
            return ProxyStats(
                requests=self._requests,
                depth=self._done_depth,
                by_kind=dict(self._by_kind),
                in_flight=self._in_flight,
                bytes_up=self._bytes_up,
                bytes_down=self._bytes_down,
                upstream_errors=self._errors,
            )

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until no request of this window is in flight (a client can exit before the proxy has
        finished writing the last bytes it read). True when idle."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self._in_flight == 0:
                    return True
            time.sleep(0.002)
        return False

    # ---- called from the handler threads ---------------------------------------

    def _begin(self, method: str, path: str) -> _Ticket:
        kind = request_kind(method, path)
        with self._lock:
            self._requests += 1
            self._by_kind[kind] += 1
            self._in_flight += 1
            return _Ticket(self._window, self._done_depth + 1, kind, path, time.perf_counter())

    def _finished(self, ticket: _Ticket, up: int, down: int, failed: bool) -> None:
        """The answer is complete but for its last write: called just *before* that write, so that a
        request the client sends after reading the whole answer always finds this one finished."""
        with self._lock:
            if ticket.finished or ticket.window != self._window:
                ticket.finished = True
                return  # already counted, or started before a reset: counts in no window
            ticket.finished = True
            self._done_depth = max(self._done_depth, ticket.depth)
            self._bytes_up += up
            self._bytes_down += down
            self._errors += failed
            if self.record:
                record = Record(ticket.kind, ticket.path, ticket.depth, ticket.started, time.perf_counter(), up, down)
                self._records.append(record)

    def _end(self, ticket: _Ticket) -> None:
        with self._lock:
            if ticket.window == self._window:
                self._in_flight -= 1

    def _take_upstream(self) -> tuple[_Upstream, bool]:
        """An idle upstream connection from the pool (True: reused), else a new one."""
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        return _Upstream(self.upstream_port, self.timeout), False

    def _put_upstream(self, upstream: _Upstream) -> None:
        with self._lock:
            if not self._closed:
                self._idle.append(upstream)
                return
        upstream.close()

    def _track(self, sock: socket.socket, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(sock)
            else:
                self._connections.discard(sock)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256  # boto3 opens up to max_pool_connections at once: no SYN may wait for a retry
    proxy: LatencyProxy

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that went away mid-answer: nothing to report


class _Upstream:
    """One kept-alive connection to the upstream server, with a buffered reader of its answers."""

    def __init__(self, port: int, timeout: float) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = self.sock.makefile("rb")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.reader.close()
            self.sock.close()


class _Head:
    """A request or status line and its header lines, parsed only as far as the relay needs."""

    def __init__(self, reader: BinaryIO) -> None:
        self.start = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.fields: dict[bytes, bytes] = {}  # lower-cased name -> value, of the headers the relay reads
        line = reader.readline(_MAX_LINE)
        while line in (b"\r\n", b"\n"):  # stray blank lines between messages are allowed
            line = reader.readline(_MAX_LINE)
        if not line:
            return  # the other side closed the connection: no message (``start`` is empty)
        self.start = line.rstrip(b"\r\n")
        while True:
            line = reader.readline(_MAX_LINE)
            if not line.endswith(b"\n"):
                raise http.client.IncompleteRead(line)
            if line in (b"\r\n", b"\n"):
                return
            name, _, value = line.partition(b":")
            name, value = name.strip(), value.strip()
            self.headers.append((name, value))
            lower = name.lower()
            if lower in _READ_FIELDS:
                self.fields[lower] = value

    def passed_on(self) -> bytes:
        """The header lines that describe the message (hop-by-hop ones left out), as they came."""
        return b"".join(b"%s: %s\r\n" % (n, v) for n, v in self.headers if n.lower() not in _HOP_BY_HOP)

    def chunked(self) -> bool:
        return b"chunked" in self.fields.get(b"transfer-encoding", b"").lower()

    def length(self) -> int | None:
        value = self.fields.get(b"content-length")
        return int(value) if value is not None else None

    def wants_close(self, version: bytes) -> bool:
        connection = self.fields.get(b"connection", b"").lower()
        return b"close" in connection or (version == b"HTTP/1.0" and b"keep-alive" not in connection)


def _read_body(reader: BinaryIO, head: _Head) -> bytes:
    """A whole body (a request's, or a chunked answer's): by its length, or de-chunked (trailers dropped)."""
    if head.chunked():
        parts: list[bytes] = []
        while True:
            size = int(reader.readline(_MAX_LINE).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while reader.readline(_MAX_LINE) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            parts.append(reader.read(size))
            reader.readline(_MAX_LINE)
    return reader.read(head.length() or 0)


class _Handler(socketserver.BaseRequestHandler):
    """Serves one client connection: its requests one after another (keep-alive), each on an upstream
    connection from the proxy's pool. Heads are parsed by hand and bodies relayed through one buffer, so
    that the proxy spends little CPU per request on the cores it shares with the client and server."""

    server: _Server
    request: socket.socket

    def setup(self) -> None:
        self.request.settimeout(self.server.proxy.timeout)  # an idle keep-alive connection ends after this
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # small answers must not wait for an ACK
        self.reader = self.request.makefile("rb")
        self._buffer = memoryview(bytearray(_CHUNK))  # each relay step reads into it: no allocation per step
        self.server.proxy._track(self.request, True)

    def finish(self) -> None:
        self.server.proxy._track(self.request, False)
        with contextlib.suppress(OSError):
            self.reader.close()

    def handle(self) -> None:
        with contextlib.suppress(OSError, ValueError, http.client.HTTPException):
            while self._serve():
                pass

    def _serve(self) -> bool:
        """One request: False when the connection is done."""
        proxy = self.server.proxy
        head = _Head(self.reader)
        parts = head.start.split()
        if len(parts) != 3:
            return False  # the client closed the connection (or sent no request line)
        method, target, version = parts
        if head.fields.get(b"expect", b"").lower() == b"100-continue":
            self.request.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        ticket = proxy._begin(method.decode("ascii", "replace"), target.decode("latin-1"))
        up = 0
        keep = not head.wants_close(version)
        try:
            body = _read_body(self.reader, head)
            up = len(body)
            if proxy.delay > 0:
                time.sleep(proxy.delay)  # this request's round trip, in its own thread
            framing = b"Content-Length: %d\r\n" % len(body) if body or method in (b"PUT", b"POST", b"PATCH") else b""
            request = b"%s %s HTTP/1.1\r\n%s%s\r\n" % (method, target, head.passed_on(), framing)
            try:
                upstream, answer = self._send_upstream(request, body)
            except (OSError, http.client.HTTPException) as exc:
                self._bad_gateway(method, exc, lambda down: proxy._finished(ticket, up, down, True))
                return False
            pooled = False

            def finished(down: int, reusable: bool) -> None:
                # the answer is all read: a reusable upstream connection goes back to the pool before the
                # client has the last byte, so the client's next request always finds it there
                nonlocal pooled
                if reusable:
                    proxy._put_upstream(upstream)
                    pooled = True
                proxy._finished(ticket, up, down, False)

            try:
                self._relay(method, upstream, answer, finished)
            finally:
                if not pooled:
                    upstream.close()
            return keep
        finally:
            proxy._finished(ticket, up, 0, True)  # a no-op when the answer got as far as its last write
            proxy._end(ticket)

    def _send_upstream(self, request: bytes, body: bytes) -> tuple[_Upstream, _Head]:
        """Send on an upstream connection (a pooled one, else a new one) and read the answer's head;
        when a pooled one turns out closed, on the next (a new one's failure is the answer's)."""
        proxy = self.server.proxy
        while True:
            upstream, reused = proxy._take_upstream()
            try:
                if len(body) <= _SMALL:
                    upstream.sock.sendall(request + body)  # one write
                else:
                    upstream.sock.sendall(request)
                    upstream.sock.sendall(body)
                answer = _Head(upstream.reader)
                if not answer.start:
                    raise http.client.RemoteDisconnected("upstream closed the connection")
                return upstream, answer
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                upstream.close()
                if not reused:
                    raise
            except BaseException:
                upstream.close()
                raise

    def _relay(
        self, method: bytes, upstream: _Upstream, answer: _Head, finished_with: Callable[[int, bool], None]
    ) -> None:
        """Pass the answer on as it arrives; call ``finished(body bytes, reusable)`` once the whole answer
        is read from upstream, just before the last write (reusable: the upstream connection can serve
        another request)."""
        status = answer.start.split(b" ", 2)
        code = int(status[1]) if len(status) > 1 and status[1].isdigit() else 502
        length = answer.length()
        bodiless = method == b"HEAD" or code in (204, 304) or 100 <= code < 200
        head = answer.start + b"\r\n" + answer.passed_on()
        send = self.request.sendall
        reusable = not answer.wants_close(status[0])

        def finished(down: int) -> None:
            finished_with(down, reusable)

        if bodiless:
            finished(0)
            send(head + (b"Content-Length: %d\r\n" % length if length is not None else b"") + b"\r\n")
        elif length is not None and not answer.chunked():
            head += b"Content-Length: %d\r\n\r\n" % length
            if length == 0:
                finished(0)
                send(head)
            remaining = length
            buffer = self._buffer
            while remaining > 0:
                got = upstream.reader.readinto1(buffer[: min(_CHUNK, remaining)])
                if not got:
                    raise http.client.IncompleteRead(b"", remaining)
                remaining -= got
                if remaining == 0:
                    finished(length)
                if head and got <= _SMALL:
                    send(head + buffer[:got])  # a small answer in one write
                else:
                    if head:
                        send(head)
                    send(buffer[:got])
                head = b""
        else:  # chunked upstream, or no length (until close): chunked here
            send(head + b"Transfer-Encoding: chunked\r\n\r\n")
            sent = 0
            if answer.chunked():
                body = _read_body(upstream.reader, answer)
                sent = len(body)
                if body:
                    send(b"%x\r\n%s\r\n" % (len(body), body))
            else:  # upstream ends the connection to end the body
                while piece := upstream.reader.read1(_CHUNK):
                    sent += len(piece)
                    send(b"%x\r\n%s\r\n" % (len(piece), piece))
                reusable = False
            finished(sent)
            send(b"0\r\n\r\n")

    def _bad_gateway(self, method: bytes, exc: BaseException, finished: Callable[[int], None]) -> None:
        payload = f"latency proxy: upstream failed: {type(exc).__name__}: {exc}".encode()
        head = b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nConnection: close\r\n"
        if method == b"HEAD":
            finished(0)
            self.request.sendall(head + b"Content-Length: 0\r\n\r\n")
        else:
            finished(len(payload))
            self.request.sendall(head + b"Content-Length: %d\r\n\r\n" % len(payload) + payload)
