"""evstore benchmarks: every figure of BENCHMARKS.md, from one command.

    python benchmarks/run.py [--quick] [--only NAME ...] [--json FILE]

Sections (``--only``): append, growth, open, replay, fork, gc, crypto, import, autocompact, memory.

Runs against a moto S3 server that this script starts on 127.0.0.1 (in a
process of its own, so that client and server do not share one GIL;
``--moto-in-process`` runs it in this process instead), over loopback HTTP, or against the endpoint named by
``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_S3``. Absolute times are moto's (a
Python server sharing the machine with the client); the figures that carry
over to real S3 are the request counts and the ratios, which are measured side
by side: the compared variants run interleaved, in rounds whose order
alternates, and each figure is the median over rounds.

Bulk setup (sessions of thousands of events that are not themselves being
timed) is written by evstore into a MemoryStore and then copied byte for byte
into the bucket: straight into moto's backend when this script owns the
server (through the server process's setup channel, see _moto_server.py),
else by parallel PUTs. The objects are exactly what appends would
have written; only the setup is faster.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks._data import message, strands_message  # noqa: E402

SECTIONS = ["append", "growth", "open", "replay", "fork", "gc", "crypto", "import", "autocompact", "memory"]
CHILD = str(REPO / "benchmarks" / "_child.py")


# ---- configuration ---------------------------------------------------------


@dataclass(frozen=True)
class Config:
    quick: bool
    append_rounds: int
    append_batch: int
    growth_to: int
    growth_window: int
    open_sizes: tuple[int, ...]
    open_rounds: int
    replay_sizes: tuple[int, ...]
    replay_rounds: int
    fork_rounds: int
    gc_sessions: int
    gc_objects_per_session: int
    crypto_rounds: int
    crypto_replay: int
    import_runs: int
    memory_sizes: tuple[int, ...]
    segment_size: int
    autocompact_appends: int


FULL = Config(
    quick=False,
    append_rounds=300,
    append_batch=1,
    growth_to=10_000,
    growth_window=30,
    open_sizes=(10, 1_000, 10_000),
    open_rounds=5,
    replay_sizes=(1_000, 10_000),
    replay_rounds=3,
    fork_rounds=5,
    gc_sessions=1_000,
    gc_objects_per_session=100,
    crypto_rounds=10,
    crypto_replay=500,
    import_runs=9,
    memory_sizes=(10_000, 100_000),
    segment_size=1000,
    autocompact_appends=10_000,
)
QUICK = Config(
    quick=True,
    append_rounds=40,
    append_batch=1,
    growth_to=1_500,
    growth_window=10,
    open_sizes=(10, 2_500),
    open_rounds=2,
    replay_sizes=(300,),
    replay_rounds=2,
    fork_rounds=2,
    gc_sessions=20,
    gc_objects_per_session=100,
    crypto_rounds=4,
    crypto_replay=100,
    import_runs=3,
    memory_sizes=(1_000, 3_000),
    segment_size=100,
    autocompact_appends=1_000,
)


# ---- small helpers ---------------------------------------------------------


def median(values: Iterable[float]) -> float:
    return float(statistics.median(list(values)))


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms" if seconds < 10 else f"{seconds:.1f} s"


def ratio(a: float, b: float) -> float:
    return a / b if b else float("inf")


def attach_counter(client: Any, counter: Counter[str] | None = None) -> Counter[str]:
    """Count HTTP requests a boto3 client sends (retries included), as S3Store.requests does."""
    counter = Counter() if counter is None else counter

    def count(**kwargs: Any) -> None:
        counter[str(kwargs.get("event_name", "")).rsplit(".", 1)[-1]] += 1

    client.meta.events.register("before-send.s3", count)
    client._bench_keepalive = count  # the event system holds handlers weakly
    return counter


def total(counter: Mapping[str, int]) -> int:
    return sum(counter.values())


def describe(counter: Mapping[str, int]) -> str:
    names = {"PutObject": "PUT", "GetObject": "GET", "HeadObject": "HEAD", "ListObjectsV2": "LIST", "DeleteObjects": "DEL"}
    return " ".join(f"{v} {names.get(k, k)}" for k, v in sorted(counter.items()) if v) or "0"


@dataclass
class Variant:
    """One contender in a side-by-side measurement: ``run`` is timed, ``counter`` diffed around it."""

    name: str
    run: Callable[[], object]
    counter: Counter[str]
    times: list[float] = field(default_factory=list)
    requests: list[Counter[str]] = field(default_factory=list)

    @property
    def median(self) -> float:
        return median(self.times)

    @property
    def typical_requests(self) -> Counter[str]:
        """The per-run request count of the median-total run (they are normally all equal)."""
        ordered = sorted(self.requests, key=total)
        return ordered[len(ordered) // 2]

    def raw(self) -> dict[str, Any]:
        return {"seconds": self.times, "requests": [dict(r) for r in self.requests]}


def interleave(variants: list[Variant], rounds: int) -> None:
    """Run every variant once per round; the order alternates so none always goes first."""
    for r in range(rounds):
        order = variants if r % 2 == 0 else variants[::-1]
        for variant in order:
            before = Counter(variant.counter)
            started = time.perf_counter()
            variant.run()
            variant.times.append(time.perf_counter() - started)
            variant.requests.append(Counter(variant.counter) - before)


class Table:
    def __init__(self, title: str, columns: list[str]) -> None:
        self.title = title
        self.columns = columns
        self.rows: list[list[str]] = []

    def add(self, *cells: object) -> None:
        self.rows.append([c if isinstance(c, str) else f"{c:.2f}" if isinstance(c, float) else str(c) for c in cells])

    def show(self) -> None:
        widths = [
            max(len(self.columns[i]), *(len(r[i]) for r in self.rows)) if self.rows else len(self.columns[i])
            for i in range(len(self.columns))
        ]
        print(f"\n## {self.title}")
        print("  ".join(c.ljust(w) for c, w in zip(self.columns, widths, strict=True)))
        print("  ".join("-" * w for w in widths))
        for row in self.rows:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
        sys.stdout.flush()


@dataclass
class Target:
    section: str
    name: str
    figure: str
    target: str
    met: bool


# ---- the S3 environment ----------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Env:
    """The endpoint (our own moto server unless AWS_ENDPOINT_URL names one), buckets, bulk setup, fixtures."""

    def __init__(self, config: Config, *, stock_list: bool = False, in_process: bool = False) -> None:
        self.config = config
        self.fast_list = False
        self.endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or ""
        #: "process" (moto in a process of its own), "thread" (moto in this process) or "" (an external endpoint)
        self.server_mode = ""
        self.server: Any = None
        self._server_process: subprocess.Popen[str] | None = None
        self._bulk_dir = ""
        if not self.endpoint:
            # our own server: dummy credentials, never the user's
            os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
            if in_process:
                self._start_thread_server(stock_list)
            else:
                self._start_process_server(stock_list)
        os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
        import boto3
        from botocore.config import Config as BotoConfig

        self.setup = boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint,
            config=BotoConfig(
                max_pool_connections=32, retries={"mode": "standard", "max_attempts": 5}, s3={"addressing_style": "path"}
            ),
        )
        self._fixtures: dict[tuple[str, int, str], str] = {}
        #: the event bytes of each fixture, back to back (for the single-object bound)
        self.joined: dict[tuple[str, int, str], bytes] = {}
        self._shared_bucket = ""
        if self.fast_list and self.server_mode == "thread":
            from benchmarks import _moto_fastlist

            _moto_fastlist.check(self.moto_backend(), self.new_bucket("listcheck"))

    def _start_thread_server(self, stock_list: bool) -> None:
        import logging

        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        port = free_port()
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        self.server.start()
        self.endpoint = f"http://127.0.0.1:{port}"
        self.server_mode = "thread"
        if not stock_list:
            from benchmarks import _moto_fastlist

            _moto_fastlist.install()
            self.fast_list = True

    def _start_process_server(self, stock_list: bool) -> None:
        command = [sys.executable, str(REPO / "benchmarks" / "_moto_server.py")] + (["--stock-list"] if stock_list else [])
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)
        self._server_process = proc
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the fast-list check runs first: a mismatch ends the server (and the run)
        if not line:
            raise RuntimeError(f"the moto server process exited with {proc.wait()} before listening")
        hello = json.loads(line)
        self.endpoint = f"http://127.0.0.1:{hello['port']}"
        self.fast_list = bool(hello["fast_list"])
        self.server_mode = "process"
        self._bulk_dir = tempfile.mkdtemp(prefix="evstore-bench-bulk-")

    def _server_command(self, command: Mapping[str, Any]) -> dict[str, Any]:
        proc = self._server_process
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(command) + "\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the moto server process exited with {proc.wait()}")
        return dict(json.loads(line))

    def moto_backend(self) -> Any:
        from moto.core import DEFAULT_ACCOUNT_ID  # type: ignore[attr-defined]
        from moto.s3.models import s3_backends

        return s3_backends[DEFAULT_ACCOUNT_ID]["aws"]

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
        if self._server_process is not None:
            assert self._server_process.stdin is not None
            self._server_process.stdin.close()  # EOF: the server stops
            try:
                self._server_process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._server_process.kill()
                self._server_process.wait()
        if self._bulk_dir:
            import shutil

            shutil.rmtree(self._bulk_dir, ignore_errors=True)

    def new_bucket(self, tag: str) -> str:
        name = f"evb-{tag}-{uuid.uuid4().hex[:8]}"
        self.setup.create_bucket(Bucket=name)
        return name

    def s3store(self, bucket: str) -> Any:
        from evstore._backends._s3 import S3Store

        return S3Store(bucket, endpoint_url=self.endpoint)

    def bulk_put(self, bucket: str, items: Iterable[tuple[str, bytes, Mapping[str, str]]]) -> int:
        """Setup only: store objects as they are (into moto's backend directly when the server is ours)."""
        count = 0
        if self.server_mode == "thread":
            backend = self.moto_backend()
            for key, data, metadata in items:
                stored = backend.put_object(bucket, key, data)
                if metadata:
                    stored.set_metadata({f"x-amz-meta-{k}": v for k, v in metadata.items()})
                count += 1
            return count
        if self.server_mode == "process":
            import pickle

            # in batches, through a file the server process loads into its backend
            path = Path(self._bulk_dir) / "batch.pickle"
            batch = 0
            stream = path.open("wb")
            try:
                for key, data, metadata in items:
                    pickle.dump((key, data, dict(metadata)), stream, protocol=pickle.HIGHEST_PROTOCOL)
                    batch += 1
                    if batch == 5_000:
                        stream.close()
                        count += int(self._server_command({"op": "bulk", "bucket": bucket, "file": str(path)})["stored"])
                        stream, batch = path.open("wb"), 0
            finally:
                stream.close()
            if batch:
                count += int(self._server_command({"op": "bulk", "bucket": bucket, "file": str(path)})["stored"])
            return count

        def put(item: tuple[str, bytes, Mapping[str, str]]) -> None:
            key, data, metadata = item
            self.setup.put_object(Bucket=bucket, Key=key, Body=data, Metadata=dict(metadata))

        with ThreadPoolExecutor(16) as pool:
            for _ in pool.map(put, items):
                count += 1
        return count

    @property
    def shared_bucket(self) -> str:
        if not self._shared_bucket:
            self._shared_bucket = self.new_bucket("main")
        return self._shared_bucket

    def fixture(self, events: int, kind: str = "loose", keyring: Any = None, bucket: str | None = None) -> str:
        """A session of ``events`` 1 KiB messages in the shared bucket (``kind``: loose or compacted)."""
        bucket = bucket or self.shared_bucket
        cache = (bucket, events, kind)
        if cache in self._fixtures:
            return self._fixtures[cache]
        sid = f"{kind}-{events}-{uuid.uuid4().hex[:6]}"
        segment = self.config.segment_size
        memory, _ = build_in_memory(sid, events, keyring=keyring, compact=segment if kind == "compacted" else None)
        self.bulk_put(bucket, memory_objects(memory))
        self._fixtures[cache] = sid
        self.joined[cache] = b"".join(event_bytes(memory, sid))
        return sid


def build_in_memory(
    sid: str, events: int, *, keyring: Any = None, compact: int | None = None, size: int = 1024
) -> tuple[Any, Any]:
    from evstore import MemoryStore, Store

    memory = MemoryStore()
    store = Store(memory, keyring=keyring)
    session = store.create(sid)
    for i in range(events):
        session.append(message(i, size))
    if compact:
        store.compact(sid, segment_size=compact)
    return memory, session


def memory_objects(memory: Any, prefix: str = "") -> Iterable[tuple[str, bytes, Mapping[str, str]]]:
    for info in memory.list(prefix):
        stored = memory.get(info.key)
        yield stored.key, stored.data, stored.metadata


def event_bytes(memory: Any, sid: str) -> list[bytes]:
    prefix = f"sessions/{sid}/"
    return [memory.get(i.key).data for i in memory.list(prefix) if i.key[len(prefix) :].isdigit()]


# ---- sections --------------------------------------------------------------

Results = dict[str, Any]


def bench_append(env: Env, cfg: Config, targets: list[Target]) -> Results:
    from evstore import Store

    backend = env.s3store(env.new_bucket("append"))
    store = Store(backend)
    client = backend.client  # the raw baseline uses the very same client (same config, same pool)
    wire = backend.requests  # every request on that client, and the store's direct reads
    session = store.create("append")
    session.append(message(0))
    sample = backend.get(store.layout.event_key("append", 1)).data  # an event's bytes, as evstore writes them
    counter = iter(range(10**9))
    texts = iter(range(1, 10**9))

    def evstore_batch() -> None:
        for _ in range(cfg.append_batch):
            session.append(message(next(texts)))

    def raw_batch() -> None:
        for _ in range(cfg.append_batch):
            client.put_object(
                Bucket=backend.bucket,
                Key=f"raw/{next(counter):020d}",
                Body=sample,
                IfNoneMatch="*",
                Metadata={"evstore-write-id": uuid.uuid4().hex},
            )

    def raw_plain_batch() -> None:
        for _ in range(cfg.append_batch):
            client.put_object(Bucket=backend.bucket, Key=f"plain/{next(counter):020d}", Body=sample)

    variants = [
        Variant("evstore append", evstore_batch, wire),
        Variant("boto3 put_object, same bytes + If-None-Match + metadata", raw_batch, wire),
        Variant("boto3 put_object, same bytes, unconditional", raw_plain_batch, wire),
    ]
    interleave([Variant("warm-up", evstore_batch, wire), Variant("warm-up raw", raw_batch, wire)], 1)
    interleave(variants, cfg.append_rounds)
    n = cfg.append_batch
    base = variants[1].median
    paired = median(e / b for e, b in zip(variants[0].times, variants[1].times, strict=True))
    table = Table(
        f"append: {cfg.append_rounds} rounds of {n} append(s) of a {len(sample)} B event each, alternating, same client",
        ["variant", "median / append", "ratio vs boto3 (conditional)", "requests / append"],
    )
    for v in variants:
        table.add(
            v.name,
            ms(v.median / n),
            f"{ratio(v.median, base):.3f}x",
            f"{total(v.typical_requests) / n:g} ({describe(v.typical_requests)})",
        )
    table.show()
    print(f"median of the per-round ratios evstore / boto3 conditional: {paired:.3f}x")
    evs = variants[0]
    per_append = total(evs.typical_requests) / n
    r = ratio(evs.median, base)
    targets.append(Target("append", "requests per append", f"{per_append:g}", "exactly 1", per_append == 1))
    targets.append(Target("append", "time vs boto3 put_object (same bytes, same client)", f"{r:.3f}x", "<= 1.15x", r <= 1.15))
    cpu = append_cpu_cost()
    print(f"evstore's own CPU per append (MemoryStore, no I/O): {cpu * 1e6:.0f} us")
    return {
        "event_bytes": len(sample),
        "batch": n,
        "variants": {v.name: v.raw() for v in variants},
        "ratio_vs_conditional_put": r,
        "paired_ratio_vs_conditional_put": paired,
        "ratio_vs_plain_put": ratio(evs.median, variants[2].median),
        "requests_per_append": per_append,
        "memorystore_cpu_seconds_per_append": cpu,
    }


def append_cpu_cost() -> float:
    from evstore import MemoryStore, Store

    session = Store(MemoryStore()).create("cpu")
    started = time.perf_counter()
    for i in range(2000):
        session.append(message(i))
    return (time.perf_counter() - started) / 2000


def bench_growth(env: Env, cfg: Config, targets: list[Target]) -> Results:
    from evstore import MemoryStore, Store

    bucket = env.new_bucket("growth")
    backend = env.s3store(bucket)
    store = Store(backend)
    sid = "growth"
    w = cfg.growth_window
    session = store.create(sid)

    def timed_append(s: Any, i: int) -> tuple[float, int]:
        before = total(backend.requests)
        started = time.perf_counter()
        s.append(message(i))
        return time.perf_counter() - started, total(backend.requests) - before

    early = [timed_append(session, i) for i in range(w)]  # seqs 1..w, through S3
    # seqs w+1 .. N-w: the same session continued by an evstore writer on a MemoryStore holding
    # these very objects, then copied into the bucket (setup speed; the bytes are the same)
    memory = MemoryStore()
    for key, data, metadata in memory_objects(backend, f"sessions/{sid}/"):
        memory.create(key, data, metadata=metadata)
    twin = Store(memory).open(sid)
    for i in range(w, cfg.growth_to - w):
        twin.append(message(i))
    env.bulk_put(bucket, ((k, d, m) for k, d, m in memory_objects(memory) if _seq_of(k) > w))
    late_session = store.open(sid)
    assert late_session.head == cfg.growth_to - w, late_session.head
    # the interleaved check: each round, one append to a session at seq ~10 and one at seq ~N
    smalls = []
    for j in range(w):
        small_sid = f"small-{j}"
        small_memory, _ = build_in_memory(small_sid, 10)
        env.bulk_put(bucket, memory_objects(small_memory))
        smalls.append(store.open(small_sid))
    late: list[tuple[float, int]] = []
    early_il: list[tuple[float, int]] = []
    # control: raw PUTs of the same size under each session's prefix, in the same rounds, to tell
    # evstore's cost from the server's (non-event names: evstore ignores them)
    raw_late: list[float] = []
    raw_small: list[float] = []
    client = backend.client
    size = len(backend.get(store.layout.event_key(sid, 1)).data)

    def raw_put(sink: list[float], prefix: str, j: int) -> None:
        started = time.perf_counter()
        client.put_object(Bucket=bucket, Key=f"{prefix}x-control-{j}", Body=b"x" * size, IfNoneMatch="*")
        sink.append(time.perf_counter() - started)

    for j in range(w):
        steps: list[Callable[[], None]] = [
            functools.partial(lambda j: late.append(timed_append(late_session, cfg.growth_to - w + j)), j),
            functools.partial(lambda j: early_il.append(timed_append(smalls[j], 10 + j)), j),
            functools.partial(raw_put, raw_late, store.layout.session_prefix(sid), j),
            functools.partial(raw_put, raw_small, store.layout.session_prefix(f"small-{j}"), j),
        ]
        for step in steps if j % 2 == 0 else steps[::-1]:
            step()
    e_t, l_t, il_t = (median(t for t, _ in xs) for xs in (early, late, early_il))
    e_r, l_r, il_r = (median(r for _, r in xs) for xs in (early, late, early_il))
    table = Table(
        f"cost growth: one session grown to {cfg.growth_to:,} events", ["appends", "median time", "requests / append", "ratio"]
    )
    table.add(f"seq 1..{w} (same session, written first)", ms(e_t), f"{e_r:g}", "1.00x")
    table.add(f"seq {cfg.growth_to - w + 1:,}..{cfg.growth_to:,} (same session)", ms(l_t), f"{l_r:g}", f"{ratio(l_t, e_t):.2f}x")
    table.add(
        f"seq 11 of {w} sessions of 10, interleaved with the row above",
        ms(il_t),
        f"{il_r:g}",
        f"{ratio(l_t, il_t):.2f}x (late / this)",
    )
    table.add(
        f"control: raw PUT under the {cfg.growth_to:,}-event session's prefix / under a 10-event one's",
        f"{ms(median(raw_late))} / {ms(median(raw_small))}",
        "1",
        f"{ratio(median(raw_late), median(raw_small)):.2f}x",
    )
    table.show()
    growth = ratio(l_t, e_t)
    targets.append(
        Target(
            "growth",
            f"append at seq ~{cfg.growth_to:,} vs ~10 (same session)",
            f"{growth:.2f}x time, {l_r:g} vs {e_r:g} requests",
            "<= 1.2x",
            growth <= 1.2 and l_r == e_r,
        )
    )
    return {
        "early": early,
        "late": late,
        "early_interleaved": early_il,
        "ratio_same_session": growth,
        "ratio_interleaved": ratio(l_t, il_t),
        "raw_put_control": {"late_prefix": raw_late, "small_prefix": raw_small},
    }


def _seq_of(key: str) -> int:
    name = key.rsplit("/", 1)[-1]
    return int(name) if name.isdigit() else 0


def run_child(command: str, args: dict[str, Any], timeout: float = 900) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, CHILD, command, json.dumps(args)], capture_output=True, text=True, timeout=timeout, cwd=REPO, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"child {command} failed: {done.stderr.strip()[-2000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def bench_open(env: Env, cfg: Config, targets: list[Target]) -> Results:
    cases = [(n, kind, env.fixture(n, kind)) for n in cfg.open_sizes for kind in ("loose", "compacted")]
    samples: dict[tuple[int, str], list[dict[str, Any]]] = {(n, k): [] for n, k, _ in cases}
    for r in range(cfg.open_rounds):
        for n, kind, sid in cases if r % 2 == 0 else cases[::-1]:
            result = run_child("open", {"endpoint": env.endpoint, "bucket": env.shared_bucket, "sid": sid})
            assert result["head"] == n, result
            samples[(n, kind)].append(result)
    base = median(s["seconds"] for s in samples[(cfg.open_sizes[0], "loose")])
    table = Table(
        f"cold open for append: store.open(sid) in a fresh process, median of {cfg.open_rounds}",
        ["events", "layout", "requests", "median time", "ratio vs 10 loose"],
    )
    out: Results = {}
    for n, kind, _ in cases:
        got = samples[(n, kind)]
        t = median(s["seconds"] for s in got)
        req = Counter(got[0]["requests"])
        table.add(
            f"{n:,}",
            kind if kind == "loose" else "after compact(sid)",
            f"{total(req)} ({describe(req)})",
            ms(t),
            f"{ratio(t, base):.2f}x",
        )
        out[f"{n}-{kind}"] = got
    table.show()
    worst = max(total(Counter(s[0]["requests"])) for s in samples.values())
    largest = cfg.open_sizes[-1]
    targets.append(
        Target(
            "open",
            f"cold open of {largest:,} events",
            f"{total(Counter(samples[(largest, 'loose')][0]['requests']))} requests loose, "
            f"{total(Counter(samples[(largest, 'compacted')][0]['requests']))} compacted",
            "O(1)/O(log N), not O(N/1000) LISTs",
            worst <= 20,
        )
    )
    return out


def bench_replay(env: Env, cfg: Config, targets: list[Target]) -> Results:
    import shutil

    from evstore import Store

    backend = env.s3store(env.shared_bucket)
    store = Store(backend)
    wire = backend.requests  # every request on its client, and its direct reads
    workdir = Path(tempfile.mkdtemp(prefix="evstore-bench-"))
    try:
        return {str(n): _replay_one(env, cfg, store, wire, n, workdir, targets) for n in cfg.replay_sizes}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _replay_one(env: Env, cfg: Config, store: Any, wire: Counter[str], n: int, workdir: Path, targets: list[Target]) -> Results:
    from strands.session.s3_session_manager import S3SessionManager
    from strands.types.session import SessionAgent, SessionMessage

    bucket = env.shared_bucket
    backend = store.backend
    client = backend.client
    loose = env.fixture(n, "loose")
    compacted = env.fixture(n, "compacted")
    # Strands: written through its own S3SessionManager (its SessionRepository API), same server
    ssid = f"strands-{n}-{uuid.uuid4().hex[:6]}"
    writer = S3SessionManager(ssid, bucket, endpoint_url=env.endpoint)
    writer.create_agent(
        ssid,
        SessionAgent(
            agent_id="main",
            state={},
            conversation_manager_state={
                "__name__": "SlidingWindowConversationManager",
                "removed_message_count": 0,
                "model_call_count": 0,
            },
        ),
    )
    with ThreadPoolExecutor(8) as pool:  # setup only: Strands' own create_message, in parallel
        list(
            pool.map(
                lambda i: writer.create_message(ssid, "main", SessionMessage.from_message(strands_message(i), i)),  # type: ignore[arg-type]
                range(n),
            )
        )
    reader = S3SessionManager(ssid, bucket, endpoint_url=env.endpoint)  # default config, as an agent gets it
    strands_wire = attach_counter(reader.client)

    def strands_restore() -> int:
        # RepositorySessionManager's restore path: read_session, read_agent, list_messages(offset=0)
        reader.read_session(ssid)
        reader.read_agent(ssid, "main")
        messages = [m.to_message() for m in reader.list_messages(ssid, "main", offset=0)]
        assert len(messages) == n
        return len(messages)

    # the whole-file approach and the physical bound, on the same client as evstore
    msgs = [message(i) for i in range(n)]
    whole_key = f"whole/{ssid}.json"
    client.put_object(Bucket=bucket, Key=whole_key, Body=json.dumps({"messages": msgs}).encode())
    single_key = f"single/{loose}"
    joined = env.joined[(bucket, n, "loose")]  # the session's event bytes, as stored, back to back
    client.put_object(Bucket=bucket, Key=single_key, Body=joined)
    jsonl = workdir / f"{n}.jsonl"
    jsonl.write_text("".join(json.dumps(m) + "\n" for m in msgs))

    def evstore_context(sid: str) -> Callable[[], int]:
        def run() -> int:
            got = store.context(sid)
            assert len(got) == n
            return len(got)

        return run

    def whole_file() -> int:
        return len(json.loads(client.get_object(Bucket=bucket, Key=whole_key)["Body"].read())["messages"])

    def single_get() -> int:
        return len(client.get_object(Bucket=bucket, Key=single_key)["Body"].read())

    def local_jsonl() -> int:
        with jsonl.open() as f:
            return len([json.loads(line) for line in f])

    variants = [
        Variant("evstore context(), loose events", evstore_context(loose), wire),
        Variant(f"evstore context(), after compact(sid, {cfg.segment_size})", evstore_context(compacted), wire),
        Variant("Strands S3SessionManager restore", strands_restore, strands_wire),
        Variant("whole file: 1 GET + json decode", whole_file, wire),
        Variant("JSONL on local disk: read + decode", local_jsonl, wire),
        Variant(f"bound: 1 GET of all {len(joined):,} bytes", single_get, wire),
    ]
    interleave(variants, cfg.replay_rounds)
    by = {v.name: v for v in variants}
    strands_t = by["Strands S3SessionManager restore"].median
    bound = variants[-1].median
    table = Table(
        f"replay of {n:,} events of ~1 KiB, median of {cfg.replay_rounds} interleaved rounds",
        ["variant", "requests", "median time", "Strands / this", "this / 1-GET bound"],
    )
    for v in variants:
        table.add(
            v.name,
            f"{total(v.typical_requests)} ({describe(v.typical_requests)})",
            ms(v.median),
            f"{ratio(strands_t, v.median):.1f}x",
            f"{ratio(v.median, bound):.2f}x",
        )
    table.show()
    # append at N: evstore (1 PUT) against rewriting the whole file (GET + PUT of N messages)
    writer_session = store.open(loose)

    def evstore_append() -> None:
        writer_session.append(message(n + 1))

    def whole_append() -> None:
        doc = json.loads(client.get_object(Bucket=bucket, Key=whole_key)["Body"].read())
        doc["messages"].append(message(n + 1))
        client.put_object(Bucket=bucket, Key=whole_key, Body=json.dumps(doc).encode())

    appends = [
        Variant(f"evstore append at {n:,}", evstore_append, wire),
        Variant(f"whole-file append at {n:,} (GET+PUT)", whole_append, wire),
    ]
    interleave(appends, max(5, cfg.replay_rounds * 2))
    at = Table(
        f"append at {n:,}: the whole-file approach pays O(N) per turn",
        ["variant", "requests", "median time", "ratio vs evstore"],
    )
    for v in appends:
        at.add(
            v.name,
            f"{total(v.typical_requests)} ({describe(v.typical_requests)})",
            ms(v.median),
            f"{ratio(v.median, appends[0].median):.1f}x",
        )
    at.show()
    out = {
        "variants": {v.name: v.raw() for v in variants},
        "appends": {v.name: v.raw() for v in appends},
        "single_object_bytes": len(joined),
    }
    if n == max(cfg.replay_sizes):
        loose_x = ratio(strands_t, by["evstore context(), loose events"].median)
        comp_x = ratio(strands_t, by[f"evstore context(), after compact(sid, {cfg.segment_size})"].median)
        comp_bound = ratio(by[f"evstore context(), after compact(sid, {cfg.segment_size})"].median, bound)
        targets.append(Target("replay", f"{n:,} events, compacted vs Strands", f"{comp_x:.1f}x faster", ">= 10x", comp_x >= 10))
        targets.append(Target("replay", f"{n:,} events, loose vs Strands", f"{loose_x:.1f}x faster", ">= 10x", loose_x >= 10))
        targets.append(
            Target("replay", f"{n:,} events, compacted vs 1-GET bound", f"{comp_bound:.2f}x", "<= 2x", comp_bound <= 2)
        )
    return out


def bench_fork(env: Env, cfg: Config, targets: list[Target]) -> Results:
    from evstore import Store

    backend = env.s3store(env.shared_bucket)
    store = Store(backend)
    parents = {n: env.fixture(n, "loose") for n in cfg.open_sizes}
    made = iter(range(10**9))

    def forker(sid: str, at: int | None) -> Callable[[], object]:
        return lambda: store.fork(sid, f"fork-{sid}-{next(made)}", at=at)

    # at a given seq (the caller knows it: the head it appended, a turn it wants to branch from),
    # and at the head (the library finds it first: the cost of a cold open)
    variants = [
        Variant(f"fork at seq {n:,} of a parent of {n:,}", forker(sid, n), backend.requests) for n, sid in parents.items()
    ]
    variants += [
        Variant(f"fork at the head of a parent of {n:,}", forker(sid, None), backend.requests) for n, sid in parents.items()
    ]
    # from a writer, which knows its head: Session.fork (opening the writer is not timed)
    writers = {n: store.open(sid) for n, sid in parents.items()}

    def writer_forker(n: int) -> Callable[[], object]:
        return lambda: writers[n].fork(f"wfork-{parents[n]}-{next(made)}")

    variants += [Variant(f"Session.fork from a writer at the head of {n:,}", writer_forker(n), backend.requests) for n in parents]
    interleave(variants, cfg.fork_rounds)
    base = variants[0].median
    table = Table(f"fork, median of {cfg.fork_rounds}", ["fork", "requests", "median time", "ratio vs the first row"])
    for v in variants:
        table.add(
            v.name, f"{total(v.typical_requests)} ({describe(v.typical_requests)})", ms(v.median), f"{ratio(v.median, base):.2f}x"
        )
    table.show()
    at_seq = variants[: len(parents)]
    counts = {total(r) for v in at_seq for r in v.requests}
    sizes = " / ".join(f"{n:,}" for n in parents)
    targets.append(
        Target(
            "fork",
            f"fork at a seq: requests for parents of {sizes}",
            " / ".join(str(total(v.typical_requests)) for v in at_seq),
            "equal",
            len(counts) == 1,
        )
    )
    from_writer = variants[2 * len(parents) :]
    targets.append(
        Target(
            "fork",
            f"Session.fork from a writer: requests for parents of {sizes}",
            " / ".join(str(total(v.typical_requests)) for v in from_writer),
            "equal",
            len({total(r) for v in from_writer for r in v.requests}) == 1,
        )
    )
    return {v.name: v.raw() for v in variants}


def bench_gc(env: Env, cfg: Config, targets: list[Target]) -> Results:
    from evstore import Store
    from evstore._codec import Tombstone, encode_json, format_ts

    if not hasattr(Store, "gc"):
        print("\n## gc\nskipped: this evstore has no Store.gc yet")
        return {"skipped": "Store has no gc"}
    bucket = env.new_bucket("gc")
    sessions = cfg.gc_sessions
    per = cfg.gc_objects_per_session  # the manifest + (per - 1) events
    started = time.perf_counter()
    expected_removed = 0
    for j in range(sessions):
        sid = f"s{j:05d}"
        memory, session = build_in_memory(sid, per - 1, size=200)
        objects = list(memory_objects(memory))
        fate = j % 4  # 0, 1: live; 2: deleted (tombstone, objects left behind); 3: expired (manifest gone)
        if fate == 2:
            tomb = Tombstone(sid, session.manifest.uid, format_ts(datetime.now(UTC) - timedelta(days=3)))
            objects.append((f"sessions/{sid}/tombstone", encode_json(tomb), {}))
            expected_removed += len(objects)
        elif fate == 3:
            objects = [o for o in objects if not o[0].endswith("/manifest")]
            expected_removed += len(objects)
        env.bulk_put(bucket, objects)
    n_objects = sum(1 for _ in iter_keys(env, bucket))
    print(f"\n(gc setup: {n_objects:,} objects in {sessions:,} sessions in {time.perf_counter() - started:.0f} s)")
    args = {"endpoint": env.endpoint, "bucket": bucket, "days_ahead": 2}
    dry = run_child("gc", {**args, "dry_run": True}, timeout=1800)
    real = run_child("gc", {**args, "dry_run": False}, timeout=1800)
    left = sum(1 for _ in iter_keys(env, bucket))
    table = Table(
        f"gc over {n_objects:,} objects in {sessions:,} sessions (half of them deleted or expired), moto over HTTP",
        ["run", "requests on the wire", "objects scanned", "removed", "objects / s", "peak RSS over start"],
    )
    for name, res in (("dry run", dry), ("gc", real)):
        rep = res["report"]
        scanned = rep.get("objects_scanned", 0)
        table.add(
            name,
            f"{total(res['wire_requests'])} ({describe(res['wire_requests'])})",
            f"{scanned:,}",
            f"{rep.get('objects_removed', 0):,}",
            f"{scanned / res['seconds']:,.0f}",
            f"{(res['maxrss_after_kib'] - res['maxrss_before_kib']) / 1024:.1f} MiB"
            f" (peak {res['maxrss_after_kib'] / 1024:.0f} MiB)",
        )
    table.show()
    print(
        f"objects left: {left:,} (expected {n_objects - expected_removed:,}); report: {real['report']} reasons {real['reasons']}"
    )
    targets.append(
        Target(
            "gc",
            f"removes exactly the dead half of {n_objects:,} objects",
            f"{real['report'].get('objects_removed', 0):,} removed, {left:,} left",
            f"{expected_removed:,} removed",
            real["report"].get("objects_removed") == expected_removed and left == n_objects - expected_removed,
        )
    )
    return {
        "objects": n_objects,
        "sessions": sessions,
        "expected_removed": expected_removed,
        "left": left,
        "dry_run": dry,
        "gc": real,
    }


def iter_keys(env: Env, bucket: str) -> Iterable[str]:
    for page in env.setup.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            yield str(item["Key"])


def bench_crypto(env: Env, cfg: Config, targets: list[Target]) -> Results:
    from evstore import Keyring, Store, generate_key

    bucket = env.new_bucket("crypto")
    backend = env.s3store(bucket)
    keyring = Keyring.from_key(generate_key())
    plain = Store(backend)
    sealed = Store(backend, keyring=keyring)
    p_session = plain.create("plain-append")
    s_session = sealed.create("sealed-append")
    texts = iter(range(10**9))
    batch = 10

    def appender(session: Any) -> Callable[[], None]:
        def run() -> None:
            for _ in range(batch):
                session.append(message(next(texts)))

        return run

    appends = [
        Variant("plaintext append", appender(p_session), backend.requests),
        Variant("encrypted append", appender(s_session), backend.requests),
    ]
    interleave(appends, cfg.crypto_rounds)
    n = cfg.crypto_replay
    p_sid = env.fixture(n, "loose", bucket=bucket)
    s_sid = env.fixture(n, "sealed", keyring=keyring, bucket=bucket)
    replays = [
        Variant(f"plaintext context() of {n:,}", lambda: plain.context(p_sid), backend.requests),
        Variant(f"encrypted context() of {n:,}", lambda: sealed.context(s_sid), backend.requests),
    ]
    interleave(replays, max(3, cfg.crypto_rounds // 3))
    # the CPU side alone, without moto: MemoryStore
    mp, _ = build_in_memory("cpu", 2000)
    ms_, _ = build_in_memory("cpu", 2000, keyring=keyring)
    cpu = [
        Variant("plaintext context() of 2,000, MemoryStore", lambda: Store(mp).context("cpu"), Counter()),
        Variant("encrypted context() of 2,000, MemoryStore", lambda: Store(ms_, keyring=keyring).context("cpu"), Counter()),
        Variant("plaintext 200 appends, MemoryStore", lambda: _mem_appends(None), Counter()),
        Variant("encrypted 200 appends, MemoryStore", lambda: _mem_appends(keyring), Counter()),
    ]
    interleave(cpu, 5)
    table = Table(
        "encryption cost: AES-256-GCM per event, 1 KiB messages", ["variant", "requests", "median time", "encrypted / plaintext"]
    )
    for pair in (appends, replays, cpu[:2], cpu[2:]):
        for v in pair:
            per = f" ({ms(v.median / batch)} each)" if v in appends else ""
            table.add(
                v.name,
                f"{total(v.typical_requests)}" if v.counter is backend.requests else "-",
                ms(v.median) + per,
                f"{ratio(v.median, pair[0].median):.3f}x",
            )
    table.show()
    a = ratio(appends[1].median, appends[0].median)
    r = ratio(replays[1].median, replays[0].median)
    targets.append(Target("crypto", "encrypted / plaintext append (moto)", f"{a:.3f}x", "report", True))
    targets.append(Target("crypto", "encrypted / plaintext replay (moto)", f"{r:.3f}x", "report", True))
    return {
        "appends": {v.name: v.raw() for v in appends},
        "replays": {v.name: v.raw() for v in replays},
        "cpu": {v.name: v.raw() for v in cpu},
    }


def _mem_appends(keyring: Any) -> None:
    from evstore import MemoryStore, Store

    session = Store(MemoryStore(), keyring=keyring).create("x")
    for i in range(200):
        session.append(message(i))


def importtime(statement: str, module: str) -> float:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", statement],
        capture_output=True,
        text=True,
        check=True,
        cwd=tempfile.gettempdir(),
    )
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[2].strip() == module and not parts[2].startswith("  "):
            return int(parts[1]) / 1e6
    raise RuntimeError(f"no importtime line for {module}")


def bench_import(env: Env, cfg: Config, targets: list[Target]) -> Results:
    samples: dict[str, list[float]] = {
        k: [] for k in ("import evstore", "import boto3", "evstore + open_store(s3://)", "boto3 + client('s3')")
    }
    boto3_loaded: list[bool] = []
    for r in range(cfg.import_runs):
        steps: list[tuple[str, Callable[[], float]]] = [
            ("import evstore", lambda: importtime("import evstore", "evstore")),
            ("import boto3", lambda: importtime("import boto3", "boto3")),
            ("evstore + open_store(s3://)", lambda: _wall("evstore", boto3_loaded)),
            ("boto3 + client('s3')", lambda: _wall("boto3", [])),
        ]
        for name, fn in steps if r % 2 == 0 else steps[::-1]:
            samples[name].append(fn())
    med = {k: median(v) for k, v in samples.items()}
    r1 = ratio(med["import evstore"], med["import boto3"])
    r2 = ratio(med["evstore + open_store(s3://)"], med["boto3 + client('s3')"])
    table = Table(
        f"import time, fresh interpreter, median of {cfg.import_runs} (-X importtime cumulative; wall for the open rows)",
        ["what", "median", "ratio"],
    )
    table.add(
        "import evstore", ms(med["import evstore"]), f"{ratio(med['import evstore'], med['import boto3']):.2f}x of import boto3"
    )
    table.add("import boto3", ms(med["import boto3"]), "1.00x")
    table.add(
        "import evstore; open_store('s3://b')",
        ms(med["evstore + open_store(s3://)"]),
        f"{r2:.2f}x of the boto3 row",
    )
    table.add("import boto3; boto3.client('s3')", ms(med["boto3 + client('s3')"]), "1.00x")
    table.show()
    targets.append(Target("import", "import evstore vs import boto3", f"{r1:.2f}x", "<= 1.15x", r1 <= 1.15))
    targets.append(Target("import", "evstore + open_store(s3) vs boto3 + client", f"{r2:.2f}x", "<= 1.15x", r2 <= 1.15))
    return {"samples": samples, "ratio_import": r1, "ratio_open": r2, "open_store_loaded_boto3": all(boto3_loaded)}


def _wall(which: str, sink: list[bool]) -> float:
    got = run_child("import_wall", {"which": which})
    sink.append(bool(got["boto3_loaded"]))
    return float(got["seconds"])


def bulk_session(env: Env, bucket: str, sid: str, events: int, size: int = 1024) -> None:
    """Setup only: a loose session of ``events`` messages written by evstore into a MemoryStore and
    copied into ``bucket`` byte for byte, 10,000 events at a time (bounded memory at 100,000)."""
    from evstore import MemoryStore, Store

    memory = MemoryStore()
    session = Store(memory).create(sid)
    env.bulk_put(bucket, memory_objects(memory))  # the manifest
    done = 0
    while done < events:
        for i in range(done, min(events, done + 10_000)):
            session.append(message(i, size))
        done = min(events, done + 10_000)
        batch = [(k, d, m) for k, d, m in memory_objects(memory) if _seq_of(k)]
        env.bulk_put(bucket, batch)
        memory.delete_many([k for k, _, _ in batch])


def bench_memory(env: Env, cfg: Config, targets: list[Target]) -> Results:
    out: Results = {"s3": {}, "local": {}}
    # S3 (moto over HTTP): evstore lists a page of 1,000 keys at a time and keeps 2 x concurrency GETs in flight
    bucket = env.new_bucket("memory")
    for n in cfg.memory_sizes:
        sid = f"mem-{n}"
        started = time.perf_counter()
        bulk_session(env, bucket, sid, n)
        print(f"(memory setup: {n:,} events copied into moto's backend in {time.perf_counter() - started:.0f} s)")
        res = run_child("replay_mem_s3", {"endpoint": env.endpoint, "bucket": bucket, "sid": sid}, timeout=3600)
        assert res["events"] == n, res
        out["s3"][str(n)] = res
    workdir = Path(tempfile.mkdtemp(prefix="evstore-bench-mem-"))
    try:
        for n in cfg.memory_sizes:
            directory = workdir / str(n)
            started = time.perf_counter()
            run_child(
                "populate_local",
                {"repo": str(REPO), "directory": str(directory), "sid": "mem", "events": n, "size": 1024},
                timeout=1800,
            )
            print(f"(memory setup: {n:,} events written to a LocalStore in {time.perf_counter() - started:.0f} s)")
            out["local"][str(n)] = run_child("replay_mem", {"directory": str(directory), "sid": "mem"}, timeout=1800)
            assert out["local"][str(n)]["events"] == n
    finally:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    table = Table(
        "peak memory of a streamed replay (store.replay in a fresh process; peak = VmHWM reset before the replay)",
        ["backend", "events", "requests", "time", "RSS before", "peak RSS during replay", "growth"],
    )
    growth: dict[tuple[str, int], float] = {}
    for kind, label in (("s3", "S3 (moto over HTTP, LIST by 1,000)"), ("local", "LocalStore (directory)")):
        for n in cfg.memory_sizes:
            res = out[kind][str(n)]
            growth[(kind, n)] = (res["maxrss_after_kib"] - res["maxrss_before_kib"]) / 1024
            req = Counter(res.get("requests", {}))
            table.add(
                label,
                f"{n:,}",
                f"{total(req)} ({describe(req)})" if req else "-",
                ms(res["seconds"]),
                f"{res['maxrss_before_kib'] / 1024:.1f} MiB",
                f"{res['maxrss_after_kib'] / 1024:.1f} MiB",
                f"+{growth[(kind, n)]:.1f} MiB",
            )
    table.show()
    small, large = cfg.memory_sizes[0], cfg.memory_sizes[-1]
    for kind, label in (("s3", "S3"), ("local", "LocalStore")):
        g_small, g_large = growth[(kind, small)], growth[(kind, large)]
        targets.append(
            Target(
                "memory",
                f"{label}: replay peak RSS growth, {large:,} vs {small:,} events",
                f"+{g_large:.1f} vs +{g_small:.1f} MiB",
                "does not grow with length (within 1.2x + 4 MiB)",
                g_large <= g_small * 1.2 + 4,
            )
        )
    return out


def bench_autocompact(env: Env, cfg: Config, targets: list[Target]) -> Results:
    """A writer with Store(auto_compact=S) packs its own runs into segments as it appends."""
    from evstore import Store

    bucket = env.new_bucket("autocompact")
    backend = env.s3store(bucket)
    size = cfg.segment_size
    n = cfg.autocompact_appends
    store = Store(backend, auto_compact=size)
    session = store.create("auto")
    before = Counter(backend.requests)
    times: list[float] = []
    per: list[int] = []
    for i in range(n):
        mark = total(backend.requests)
        started = time.perf_counter()
        session.append(message(i))
        times.append(time.perf_counter() - started)
        per.append(total(backend.requests) - mark)
    appended = Counter(backend.requests) - before
    per_append = total(appended) / n
    packing = [t for t, r in zip(times, per, strict=True) if r > 1]
    plain = [t for t, r in zip(times, per, strict=True) if r == 1]
    # replay: the auto-compacted session against one compacted by compact(sid) and against loose events is
    # the replay section's job; here: auto-compacted against compact(sid) of the same length, same bucket
    explicit = Store(backend)
    memory, _ = build_in_memory("explicit", n, compact=size)
    env.bulk_put(bucket, memory_objects(memory))
    variants = [
        Variant(f"context() of the auto-compacted session of {n:,}", lambda: store.context("auto"), backend.requests),
        Variant(f"context() of {n:,} after compact(sid, {size})", lambda: explicit.context("explicit"), backend.requests),
    ]
    interleave(variants, cfg.replay_rounds)
    assert len(store.context("auto")) == n
    table = Table(
        f"auto-compaction: Store(auto_compact={size:,}), {n:,} appends over HTTP, then replay (median of {cfg.replay_rounds})",
        ["what", "requests", "median time"],
    )
    table.add(
        f"{n:,} appends", f"{total(appended):,} ({describe(appended)}): {per_append:.4g} per append", ms(median(times)) + " each"
    )
    table.add(f"the {len(plain):,} appends of 1 PUT", "1 PUT each", ms(median(plain)) if plain else "-")
    table.add(f"the {len(packing)} appends that also PUT a segment", "2 PUT each", ms(median(packing)) if packing else "-")
    for v in variants:
        table.add(v.name, f"{total(v.typical_requests)} ({describe(v.typical_requests)})", ms(v.median))
    table.show()
    expected = 1 + 1 / size
    targets.append(
        Target(
            "autocompact",
            f"requests per append, auto_compact={size:,}, {n:,} appends",
            f"{per_append:.4g}",
            f"{expected:.4g}",
            abs(per_append - expected) < 1e-9,
        )
    )
    auto_req, explicit_req = (total(v.typical_requests) for v in variants)
    targets.append(
        Target(
            "autocompact",
            f"replay requests, auto-compacted vs compact(sid), {n:,} events",
            f"{auto_req} vs {explicit_req}",
            "equal",
            auto_req == explicit_req,
        )
    )
    return {
        "append_seconds": times,
        "append_requests": per,
        "requests": dict(appended),
        "requests_per_append": per_append,
        "replay": {v.name: v.raw() for v in variants},
    }


BENCHES: dict[str, Callable[[Env, Config, list[Target]], Results]] = {
    "append": bench_append,
    "growth": bench_growth,
    "open": bench_open,
    "replay": bench_replay,
    "fork": bench_fork,
    "gc": bench_gc,
    "crypto": bench_crypto,
    "import": bench_import,
    "autocompact": bench_autocompact,
    "memory": bench_memory,
}


def machine() -> dict[str, Any]:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(), "loadavg": load}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test in under 2 minutes")
    parser.add_argument(
        "--only", nargs="+", choices=SECTIONS, metavar="NAME", help=f"run only these sections: {', '.join(SECTIONS)}"
    )
    parser.add_argument("--json", metavar="FILE", help="save the raw figures here")
    parser.add_argument(
        "--moto-stock-list",
        action="store_true",
        help="keep moto's own ListObjectsV2 (it scans the whole bucket per request) instead of the page-proportional one",
    )
    parser.add_argument(
        "--moto-in-process",
        action="store_true",
        help="run moto's server in this process (one GIL with the client) instead of in a process of its own",
    )
    args = parser.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    chosen = args.only or SECTIONS
    env = Env(cfg, stock_list=args.moto_stock_list, in_process=args.moto_in_process)
    info = machine()
    print(
        f"# evstore benchmarks ({'quick' if cfg.quick else 'full'}) against {env.endpoint}"
        + {"thread": " (moto, in this process)", "process": " (moto, in a process of its own)"}.get(env.server_mode, "")
    )
    print(f"python {info['python']}, {info['cpus']} CPUs, load average {info['loadavg'][0]:.2f} at start")
    results: dict[str, Any] = {
        "machine": info,
        "mode": "quick" if cfg.quick else "full",
        "endpoint_is_moto": bool(env.server_mode),
        "moto_server_mode": env.server_mode,
        "moto_page_proportional_list": env.fast_list,
    }
    if env.fast_list:
        print("moto's ListObjectsV2 replaced by a page-proportional one (same answers: checked at startup)")
    targets: list[Target] = []
    started = time.perf_counter()
    try:
        for name in SECTIONS:
            if name in chosen:
                t0 = time.perf_counter()
                results[name] = BENCHES[name](env, cfg, targets)
                results[name + "_seconds"] = time.perf_counter() - t0
                print(f"({name}: {time.perf_counter() - t0:.0f} s)")
    finally:
        env.close()
    table = Table("targets", ["section", "figure", "measured", "target", "met"])
    for t in targets:
        table.add(t.section, t.name, t.figure, t.target, "yes" if t.met else "NO")
    table.show()
    results["targets"] = [t.__dict__ for t in targets]
    results["seconds"] = time.perf_counter() - started
    results["machine"]["loadavg_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(f"\ntotal {results['seconds']:.0f} s; load average at the end {results['machine']['loadavg_end'][0]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
