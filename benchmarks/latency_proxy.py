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

Bodies stream through in both directions' responses (read from upstream and
written to the client in pieces); a request body is read whole before it is
passed on (it is at most one object). Keep-alive works on both sides: each
client connection has its own upstream connection, reused across its requests
(boto3 pools connections). Stdlib only. Only loopback addresses are used.

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
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

__all__ = ["LatencyProxy", "ProxyStats", "Record"]

# Headers that describe one hop, not the message: never passed on as they came. The proxy frames
# each body itself (Content-Length, or chunked when upstream gave no length).
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "expect", "content-length"}
)
_CHUNK = 64 * 1024
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
            open_now = list(self._connections)
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

    def _track(self, sock: socket.socket, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(sock)
            else:
                self._connections.discard(sock)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256  # boto3 opens up to max_pool_connections at once: no SYN may wait for a retry
    proxy: LatencyProxy

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that went away mid-answer: nothing to report


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    disable_nagle_algorithm = True  # small answers must not wait for a delayed ACK
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.proxy.timeout)  # an idle keep-alive connection ends after this
        self._upstream: http.client.HTTPConnection | None = None
        self.server.proxy._track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.proxy._track(self.connection, False)
            if self._upstream is not None:
                self._upstream.close()

    def log_message(self, format: str, *args: object) -> None:
        pass  # quiet: the counts are the log

    def do_GET(self) -> None:
        self._serve()

    do_PUT = do_POST = do_DELETE = do_HEAD = do_OPTIONS = do_PATCH = do_GET

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _serve(self) -> None:
        proxy = self.server.proxy
        ticket = proxy._begin(self.command, self.path)
        up = 0
        try:
            body = self._read_body()
            up = len(body)
            if proxy.delay > 0:
                time.sleep(proxy.delay)  # this request's round trip, in its own thread
            try:
                response = self._send_upstream(body)
            except (OSError, http.client.HTTPException) as exc:
                self._bad_gateway(exc, lambda down: proxy._finished(ticket, up, down, True))
                return
            self._relay(response, lambda down: proxy._finished(ticket, up, down, False))
        except (OSError, http.client.HTTPException):
            self.close_connection = True  # the client went away, or upstream broke mid-body: this connection is done
            self._drop_upstream()
        finally:
            proxy._finished(ticket, up, 0, True)  # a no-op when the answer got as far as its last write
            proxy._end(ticket)

    def _connection(self) -> http.client.HTTPConnection:
        if self._upstream is None:
            conn = http.client.HTTPConnection("127.0.0.1", self.server.proxy.upstream_port, timeout=self.server.proxy.timeout)
            conn.connect()
            assert conn.sock is not None
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._upstream = conn
        return self._upstream

    def _drop_upstream(self) -> None:
        if self._upstream is not None:
            self._upstream.close()
            self._upstream = None

    def _send_upstream(self, body: bytes) -> http.client.HTTPResponse:
        """Send on this connection's upstream connection; once more on a fresh one if a reused one was stale."""
        for attempt in (1, 2):
            reused = self._upstream is not None
            conn = self._connection()
            try:
                conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for name, value in self.headers.items():
                    if name.lower() not in _HOP_BY_HOP:
                        conn.putheader(name, value)
                if body or self.command in ("PUT", "POST", "PATCH"):
                    conn.putheader("Content-Length", str(len(body)))
                conn.endheaders(body or None)
                return conn.getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self._drop_upstream()
                if not reused or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _relay(self, response: http.client.HTTPResponse, finished: Callable[[int], None]) -> None:
        """Pass the answer on as it arrives; call ``finished(body bytes)`` just before the last write."""
        self.send_response_only(response.status, response.reason)
        length = response.getheader("Content-Length")
        bodiless = self.command == "HEAD" or response.status in (204, 304) or 100 <= response.status < 200
        for name, value in response.getheaders():
            if name.lower() not in _HOP_BY_HOP:
                self.send_header(name, value)
        if bodiless:
            if length is not None:
                self.send_header("Content-Length", length)
            finished(0)
            self.end_headers()
        elif length is not None:
            self.send_header("Content-Length", length)
            remaining = int(length)
            if remaining == 0:
                finished(0)
            self.end_headers()
            while remaining > 0:
                piece = response.read(min(_CHUNK, remaining))
                if not piece:
                    raise http.client.IncompleteRead(b"", remaining)
                remaining -= len(piece)
                if remaining == 0:
                    finished(int(length))
                self.wfile.write(piece)
        else:  # no length upstream (chunked or until close): chunked here
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            sent = 0
            while piece := response.read(_CHUNK):
                sent += len(piece)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            finished(sent)
            self.wfile.write(b"0\r\n\r\n")
        response.close()
        if response.will_close:
            self._drop_upstream()  # upstream ends its connection: the next request opens a new one

    def _bad_gateway(self, exc: BaseException, finished: Callable[[int], None]) -> None:
        payload = f"latency proxy: upstream failed: {type(exc).__name__}: {exc}".encode()
        self._drop_upstream()
        self.close_connection = True
        self.send_response_only(502)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", "0" if self.command == "HEAD" else str(len(payload)))
        self.send_header("Connection", "close")
        if self.command == "HEAD":
            finished(0)
            self.end_headers()
        else:
            self.end_headers()
            finished(len(payload))
            self.wfile.write(payload)
