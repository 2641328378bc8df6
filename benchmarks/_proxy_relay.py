"""The latency proxy's HTTP/1.1 relay (``latency_proxy.py``): the server that accepts client
connections, a handler per connection, the pooled upstream connections, and the hand-made parsing
of heads and bodies.

Not a public interface. The handler reports each request to the proxy it serves (``_begin``,
``_finished`` just before an answer's last write, ``_end``) and takes and returns upstream
connections through it; the proxy owns the counting, the depth and the pool. The relay knows that
proxy only as ``RelayedProxy``, what it asks of it: imports go one way, ``latency_proxy`` on top.
Heads are parsed only as far as the relay needs (framing and keep-alive headers); the others pass
through as they came.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import socketserver
import time
from collections.abc import Callable
from typing import Any, BinaryIO, Protocol, TypeVar

# Headers that describe one hop, not the message: never passed on as they came. The proxy frames
# each body itself (Content-Length, or chunked when upstream gave no length).
HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"transfer-encoding", b"upgrade", b"expect"}
    | {b"content-length"}
)
CHUNK = 1024 * 1024  # the most one relay step passes on (``readinto1``: what has arrived, up to this)
SMALL = 64 * 1024  # a head and an answer's body up to this go in one write
MAX_LINE = 64 * 1024
#: The headers the relay reads (framing and keep-alive); all others pass through unread.
READ_FIELDS = frozenset({b"content-length", b"transfer-encoding", b"connection", b"expect"})


Ticket = TypeVar("Ticket")


class RelayedProxy(Protocol[Ticket]):
    """What the relay asks of the proxy it serves (``latency_proxy.LatencyProxy``): its delay and
    timeout, and a call at each step of a request. ``Ticket`` is the proxy's own record of one
    request: the relay only hands back what ``_begin`` gave it."""

    delay: float  # seconds each request waits before it is passed on; read per request
    timeout: float  # of every socket, client's and upstream's

    def _begin(self, method: str, path: str) -> Ticket:
        """A request's head has arrived."""
        ...

    def _finished(self, ticket: Ticket, up: int, down: int, failed: bool) -> None:
        """The answer is complete but for its last write; called again when the request ends (a no-op then
        unless the answer never got that far)."""
        ...

    def _end(self, ticket: Ticket) -> None:
        """The request is over: its answer is written, or it failed."""
        ...

    def _take_upstream(self) -> tuple[Upstream, bool]:
        """An upstream connection to send on, and whether it was pooled (reused)."""
        ...

    def _put_upstream(self, upstream: Upstream) -> None:
        """A connection that can serve another request, back to the pool."""
        ...

    def _track(self, sock: socket.socket, add: bool) -> None:
        """A client connection opened (add) or closed."""
        ...


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256  # boto3 opens up to max_pool_connections at once: no SYN may wait for a retry
    proxy: RelayedProxy[Any]

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that went away mid-answer: nothing to report


class Upstream:
    """One kept-alive connection to the upstream server, with a buffered reader of its answers."""

    def __init__(self, port: int, timeout: float) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = self.sock.makefile("rb")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.reader.close()
            self.sock.close()


class Head:
    """A request or status line and its header lines, parsed only as far as the relay needs."""

    def __init__(self, reader: BinaryIO) -> None:
        self.start = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.fields: dict[bytes, bytes] = {}  # lower-cased name -> value, of the headers the relay reads
        line = reader.readline(MAX_LINE)
        while line in (b"\r\n", b"\n"):  # stray blank lines between messages are allowed
            line = reader.readline(MAX_LINE)
        if not line:
            return  # the other side closed the connection: no message (``start`` is empty)
        self.start = line.rstrip(b"\r\n")
        while True:
            line = reader.readline(MAX_LINE)
            if not line.endswith(b"\n"):
                raise http.client.IncompleteRead(line)
            if line in (b"\r\n", b"\n"):
                return
            name, _, value = line.partition(b":")
            name, value = name.strip(), value.strip()
            self.headers.append((name, value))
            lower = name.lower()
            if lower in READ_FIELDS:
                self.fields[lower] = value

    def passed_on(self) -> bytes:
        """The header lines that describe the message (hop-by-hop ones left out), as they came."""
        return b"".join(b"%s: %s\r\n" % (n, v) for n, v in self.headers if n.lower() not in HOP_BY_HOP)

    def chunked(self) -> bool:
        return b"chunked" in self.fields.get(b"transfer-encoding", b"").lower()

    def length(self) -> int | None:
        value = self.fields.get(b"content-length")
        return int(value) if value is not None else None

    def wants_close(self, version: bytes) -> bool:
        connection = self.fields.get(b"connection", b"").lower()
        return b"close" in connection or (version == b"HTTP/1.0" and b"keep-alive" not in connection)


def read_body(reader: BinaryIO, head: Head) -> bytes:
    """A whole body (a request's, or a chunked answer's): by its length, or de-chunked (trailers dropped)."""
    if head.chunked():
        parts: list[bytes] = []
        while True:
            size = int(reader.readline(MAX_LINE).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while reader.readline(MAX_LINE) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            parts.append(reader.read(size))
            reader.readline(MAX_LINE)
    return reader.read(head.length() or 0)


class Handler(socketserver.BaseRequestHandler):
    """Serves one client connection: its requests one after another (keep-alive), each on an upstream
    connection from the proxy's pool. Heads are parsed by hand and bodies relayed through one buffer, so
    that the proxy spends little CPU per request on the cores it shares with the client and server."""

    server: Server
    request: socket.socket

    def setup(self) -> None:
        self.request.settimeout(self.server.proxy.timeout)  # an idle keep-alive connection ends after this
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # small answers must not wait for an ACK
        self.reader = self.request.makefile("rb")
        self._buffer = memoryview(bytearray(CHUNK))  # each relay step reads into it: no allocation per step
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
        head = Head(self.reader)
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
            body = read_body(self.reader, head)
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

    def _send_upstream(self, request: bytes, body: bytes) -> tuple[Upstream, Head]:
        """Send on an upstream connection (a pooled one, else a new one) and read the answer's head;
        when a pooled one turns out closed, on the next (a new one's failure is the answer's)."""
        proxy = self.server.proxy
        while True:
            upstream, reused = proxy._take_upstream()
            try:
                if len(body) <= SMALL:
                    upstream.sock.sendall(request + body)  # one write
                else:
                    upstream.sock.sendall(request)
                    upstream.sock.sendall(body)
                answer = Head(upstream.reader)
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

    def _relay(self, method: bytes, upstream: Upstream, answer: Head, finished_with: Callable[[int, bool], None]) -> None:
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
                got = upstream.reader.readinto1(buffer[: min(CHUNK, remaining)])
                if not got:
                    raise http.client.IncompleteRead(b"", remaining)
                remaining -= got
                if remaining == 0:
                    finished(length)
                if head and got <= SMALL:
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
                body = read_body(upstream.reader, answer)
                sent = len(body)
                if body:
                    send(b"%x\r\n%s\r\n" % (len(body), body))
            else:  # upstream ends the connection to end the body
                while piece := upstream.reader.read1(CHUNK):
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
