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
can serve. Stdlib only. Only loopback addresses are used. The relay is ``_proxy_relay.py``'s;
this module keeps the counts, the depth and the pool of upstream connections, and is the
``RelayedProxy`` the relay reports to (the relay never imports this module).

    with LatencyProxy("http://127.0.0.1:9000", delay=0.015) as proxy:
        client = boto3.client("s3", endpoint_url=proxy.endpoint)
        proxy.reset()
        ...
        stats = proxy.snapshot()  # stats.requests, stats.depth, stats.by_kind
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field
from types import TracebackType

from benchmarks._proxy_relay import Handler, Server, Upstream

__all__ = ["LatencyProxy", "ProxyStats", "Record"]

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
        self._idle: list[Upstream] = []  # upstream connections between requests, shared by all client connections
        self._closed = False
        self._server = Server(("127.0.0.1", 0), Handler)
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

    def _take_upstream(self) -> tuple[Upstream, bool]:
        """An idle upstream connection from the pool (True: reused), else a new one."""
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        return Upstream(self.upstream_port, self.timeout), False

    def _put_upstream(self, upstream: Upstream) -> None:
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
