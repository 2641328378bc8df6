"""benchmarks/latency_proxy.py: counting, the dependency depth, the delay, and bodies passing through;
and a smoke run of benchmarks/resume.py.

A tiny HTTP server on 127.0.0.1 stands upstream; one test goes through to moto's server with boto3.
Timing is asserted only as lower bounds (a delay can only add time), never as upper bounds.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from benchmarks.latency_proxy import LatencyProxy, request_kind

from .conftest import free_port

REPO = Path(__file__).resolve().parent.parent
BIG = bytes(range(256)) * 1200  # 300 KiB: several pieces of the proxy's relay loop


class _Upstream(ThreadingHTTPServer):
    daemon_threads = True
    barrier: threading.Barrier
    peers: set[int]
    lock: threading.Lock


class _UpstreamHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Upstream

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _reply(self, body: bytes, *, status: int = 200, length: bool = True) -> None:
        self.send_response(status)
        if length:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:
        with self.server.lock:
            self.server.peers.add(self.client_address[1])
        if self.path.startswith("/b/barrier"):
            # answers only once two requests are here at the same time: proves they overlapped in the proxy
            try:
                self.server.barrier.wait()
            except threading.BrokenBarrierError:
                self._reply(b"no overlap", status=500)
                return
            self._reply(b"together")
        elif self.path == "/b/big":
            self._reply(BIG)
        elif self.path == "/b/close":
            # answers, then ends its connection: the proxy must not hand that connection to another request
            self.send_response(200)
            self.send_header("Content-Length", "6")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"closed")
            self.close_connection = True
        elif self.path == "/b/chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for piece in (b"alpha-", b"beta-", b"gamma" * 5000):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
        else:
            self._reply(f"path={self.path} host={self.headers.get('Host')}".encode())

    do_HEAD = do_GET

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._reply(b"got " + body[::-1])


@pytest.fixture
def upstream() -> Iterator[_Upstream]:
    server = _Upstream(("127.0.0.1", 0), _UpstreamHandler)
    server.barrier = threading.Barrier(2, timeout=10)
    server.peers = set()
    server.lock = threading.Lock()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def proxy_for(upstream: _Upstream, delay: float = 0.0, record: bool = False) -> LatencyProxy:
    return LatencyProxy(f"http://127.0.0.1:{upstream.server_address[1]}", delay=delay, record=record).start()


def get(conn: http.client.HTTPConnection, path: str, method: str = "GET", body: bytes | None = None) -> tuple[int, bytes]:
    conn.request(method, path, body=body)
    response = conn.getresponse()
    return response.status, response.read()


def connect(proxy: LatencyProxy) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=20)


def concurrent_pair(proxy: LatencyProxy) -> list[tuple[int, bytes]]:
    """Two requests on two connections at once; each upstream answer waits for the other request to arrive."""
    results: list[tuple[int, bytes]] = []
    lock = threading.Lock()

    def one() -> None:
        got = get(connect(proxy), "/b/barrier")
        with lock:
            results.append(got)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def test_two_concurrent_requests_have_depth_1(upstream: _Upstream) -> None:
    with proxy_for(upstream, delay=0.05) as proxy:  # delayed: the delay must not serialize them
        proxy.reset()
        assert concurrent_pair(proxy) == [(200, b"together")] * 2
        assert proxy.wait_idle()
        stats = proxy.snapshot()
    assert (stats.requests, stats.depth, stats.in_flight) == (2, 1, 0)


def test_two_sequential_requests_have_depth_2(upstream: _Upstream) -> None:
    with proxy_for(upstream) as proxy:
        proxy.reset()
        conn = connect(proxy)
        assert get(conn, "/b/a")[0] == 200
        assert get(conn, "/b/b")[0] == 200
        stats = proxy.snapshot()
        # the next one on another connection (another proxy thread), sent as soon as the answer was read
        assert get(connect(proxy), "/b/c")[0] == 200
        after = proxy.snapshot()
    assert (stats.requests, stats.depth) == (2, 2)
    assert (after.requests, after.depth) == (3, 3)


def test_the_depth_is_the_longest_chain(upstream: _Upstream) -> None:
    """a, then b and c together (both depend on a only), then d: the longest chain is a-b-d."""
    with proxy_for(upstream, record=True) as proxy:
        proxy.reset()
        conn = connect(proxy)
        get(conn, "/b/a")
        assert concurrent_pair(proxy) == [(200, b"together")] * 2
        assert proxy.snapshot().depth == 2
        get(conn, "/b/d")
        stats = proxy.snapshot()
        records = proxy.records()
    assert (stats.requests, stats.depth) == (4, 3)
    assert [(r.path, r.depth) for r in records] == [("/b/a", 1), ("/b/barrier", 2), ("/b/barrier", 2), ("/b/d", 3)]
    a, b, c, d = records
    assert a.finished <= b.started and a.finished <= c.started  # after a
    assert b.started < c.finished and c.started < b.finished  # together
    assert max(b.finished, c.finished) <= d.started


def test_reset_opens_a_new_window(upstream: _Upstream) -> None:
    with proxy_for(upstream) as proxy:
        conn = connect(proxy)
        for path in ("/b/1", "/b/2", "/b/3"):
            get(conn, path)
        assert (proxy.snapshot().requests, proxy.snapshot().depth) == (3, 3)
        proxy.reset()
        assert (proxy.snapshot().requests, proxy.snapshot().depth) == (0, 0)
        get(conn, "/b/4")  # same keep-alive connection, new window
        stats = proxy.snapshot()
    assert (stats.requests, stats.depth, stats.by_kind) == (1, 1, {"GET": 1})


def test_each_request_pays_the_delay(upstream: _Upstream) -> None:
    delay = 0.05
    with proxy_for(upstream, delay=delay) as proxy:
        conn = connect(proxy)
        get(conn, "/b/warm")  # the connection exists: what follows is requests only
        started = time.perf_counter()
        for path in ("/b/1", "/b/2", "/b/3"):
            get(conn, path)
        elapsed = time.perf_counter() - started
        proxy.delay = 0.0
        get(conn, "/b/after")  # the delay can change between requests
    assert elapsed >= 3 * delay


def test_bodies_pass_through_on_one_kept_alive_connection(upstream: _Upstream) -> None:
    with proxy_for(upstream) as proxy:
        proxy.reset()
        conn = connect(proxy)
        assert get(conn, "/b/big") == (200, BIG)
        assert get(conn, "/b/chunked") == (200, b"alpha-beta-" + b"gamma" * 5000)  # no length upstream: re-chunked
        conn.request("HEAD", "/b/big")
        head = conn.getresponse()
        assert (head.status, head.getheader("Content-Length"), head.read()) == (200, str(len(BIG)), b"")
        assert get(conn, "/b/put", "PUT", b"payload") == (200, b"got daolyap")
        # the Host header is passed on as the client sent it (SigV4 signs it)
        assert get(conn, "/b/host")[1] == f"path=/b/host host=127.0.0.1:{proxy.port}".encode()
        stats = proxy.snapshot()
    assert stats.requests == 5
    assert stats.by_kind == {"GET": 3, "HEAD": 1, "PUT": 1}
    assert stats.bytes_up == len(b"payload")
    assert stats.bytes_down >= len(BIG) * 1 + len(b"alpha-beta-" + b"gamma" * 5000)
    with upstream.lock:
        assert len(upstream.peers) == 1  # one upstream connection served every request of the client connection


def test_upstream_connections_are_pooled_across_client_connections(upstream: _Upstream) -> None:
    with proxy_for(upstream) as proxy:
        for path in ("/b/1", "/b/2", "/b/3"):
            assert get(connect(proxy), path)[0] == 200  # a new client connection each time, one after another
        with upstream.lock:
            assert len(upstream.peers) == 1  # all served on one upstream connection
        assert concurrent_pair(proxy) == [(200, b"together")] * 2
        with upstream.lock:
            assert len(upstream.peers) == 2  # two at once: the pool's one and a new one


def test_an_upstream_connection_that_ends_is_not_reused(upstream: _Upstream) -> None:
    with proxy_for(upstream) as proxy:
        conn = connect(proxy)
        assert get(conn, "/b/close") == (200, b"closed")
        assert get(conn, "/b/after") == (200, f"path=/b/after host=127.0.0.1:{proxy.port}".encode())
        proxy.reset()
        assert get(connect(proxy), "/b/again")[0] == 200
        stats = proxy.snapshot()
    assert (stats.requests, stats.upstream_errors) == (1, 0)


def test_a_put_that_expects_100_continue_passes(upstream: _Upstream) -> None:
    with proxy_for(upstream) as proxy:
        conn = connect(proxy)
        conn.putrequest("PUT", "/b/put")
        conn.putheader("Content-Length", "7")
        conn.putheader("Expect", "100-continue")
        conn.endheaders()
        conn.send(b"payload")
        response = conn.getresponse()  # skips the interim 100 Continue
        assert (response.status, response.read()) == (200, b"got daolyap")
        assert get(conn, "/b/next")[0] == 200  # the connection is still in step


def test_an_unreachable_upstream_answers_502_and_counts(upstream: _Upstream) -> None:
    with LatencyProxy(f"http://127.0.0.1:{free_port()}") as proxy:
        proxy.reset()
        status, body = get(connect(proxy), "/b/x")
        stats = proxy.snapshot()
    assert status == 502 and b"upstream failed" in body
    assert (stats.requests, stats.depth, stats.upstream_errors) == (1, 1, 1)


def test_only_loopback_upstreams() -> None:
    for bad in ("http://192.0.2.1:80", "https://127.0.0.1:9000", "http://127.0.0.1"):
        with pytest.raises(ValueError):
            LatencyProxy(bad)


def test_request_kinds() -> None:
    assert request_kind("GET", "/bucket?list-type=2&prefix=a%2F") == "LIST"
    assert request_kind("GET", "/bucket/") == "LIST"
    assert request_kind("GET", "/bucket/sessions/a/1") == "GET"
    assert request_kind("PUT", "/bucket/k") == "PUT"
    assert request_kind("POST", "/bucket?delete") == "POST"


def test_boto3_through_the_proxy_to_moto(moto_endpoint: str) -> None:
    import boto3
    from botocore.config import Config

    with LatencyProxy(moto_endpoint, delay=0.01) as proxy:
        client = boto3.client("s3", endpoint_url=proxy.endpoint, config=Config(s3={"addressing_style": "path"}))
        sent: Counter[str] = Counter()

        def count(**kwargs: Any) -> None:
            sent[str(kwargs.get("event_name", "")).rsplit(".", 1)[-1]] += 1

        client.meta.events.register("before-send.s3", count)
        bucket = f"lp-{uuid.uuid4().hex[:10]}"
        client.create_bucket(Bucket=bucket)
        proxy.reset()
        sent.clear()
        for i in range(3):
            client.put_object(Bucket=bucket, Key=f"k/{i}", Body=BIG[: 1000 * (i + 1)], IfNoneMatch="*")
        listed = client.list_objects_v2(Bucket=bucket, Prefix="k/")
        assert [o["Key"] for o in listed["Contents"]] == ["k/0", "k/1", "k/2"]
        assert client.get_object(Bucket=bucket, Key="k/2")["Body"].read() == BIG[:3000]
        assert client.head_object(Bucket=bucket, Key="k/1")["ContentLength"] == 2000
        stats = proxy.snapshot()
    assert stats.requests == sum(sent.values()) == 6
    assert stats.by_kind == {"PUT": 3, "LIST": 1, "GET": 1, "HEAD": 1}
    assert stats.depth == 6  # one after another


# ---- benchmarks/resume.py ------------------------------------------------------------


def test_unpack_resume_finds_the_writer_and_the_context() -> None:
    from benchmarks.studies.resume.child import unpack_resume

    class Writer:
        def append(self, message: object) -> int:
            return 1

    class Resumed:
        def __init__(self, session: Writer, context: list[str]) -> None:
            self.session, self.context = session, context

    writer, context = Writer(), ["m1", "m2"]
    assert unpack_resume((writer, context)) == (writer, context)
    assert unpack_resume((tuple(context), writer)) == (writer, context)
    assert unpack_resume(Resumed(writer, context)) == (writer, context)
    with pytest.raises(TypeError):
        unpack_resume(object())


@pytest.mark.slow
def test_the_resume_benchmark_runs_end_to_end(tmp_path: Path) -> None:
    """The smallest run of benchmarks/resume.py (moto, 20 messages, 1 ms): every variant resumes through the proxy,
    and the proxy's counts are the clients' own."""
    pytest.importorskip("strands")
    figures = tmp_path / "figures.json"
    command = [sys.executable, str(REPO / "benchmarks" / "resume.py"), "--quick", "--sizes", "20", "--delays", "1"]
    command += ["--server", "moto", "--append-rounds", "2", "--json", str(figures)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "server: moto" in done.stdout
    resumed = {row["variant"]: row["samples"][0] for row in json.loads(figures.read_text())["resume"]}
    assert set(resumed) == {"evstore-defaults", "evstore-compacted", "evstore-uncompacted", "strands-s3", "strands-snapshot"}
    for variant, sample in resumed.items():
        assert sample["context"] >= 20, variant
        assert sample["requests"] == sample["client_requests"] > 0, variant
        assert 1 <= sample["depth"] <= sample["requests"], variant
    assert (resumed["strands-snapshot"]["requests"], resumed["strands-snapshot"]["depth"]) == (2, 2)  # one GET, one PUT
    assert resumed["evstore-compacted"]["requests"] < resumed["evstore-uncompacted"]["requests"]
    assert "| 20 | Strands `SnapshotSessionManager` | 2 | 2 |" in done.stdout
    assert "| 1 ms | 20 |" in done.stdout  # the append table
    # the tables can be printed again from the saved figures, identically
    again = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "resume.py"), "--report-from", str(figures)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.strip().startswith("### Resume") and again.stdout.strip() in done.stdout
