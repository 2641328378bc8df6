"""The sizes of ``benchmarks/scale.py``'s full and quick runs, its messages, its sessions of many events
(``Bulk``) and fleets, and how a section measures a call over a ``Recorder``."""

from __future__ import annotations

import base64
import gc as pygc
import random
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from benchmarks._data import message
from benchmarks._scale_backend import Counts, FastMemory, Recorder
from evstore import ObjectStore, Store

SID = "bench"
Message = dict[str, Any]
T = TypeVar("T")


@dataclass(frozen=True)
class Config:
    quick: bool
    rtt: float  # seconds of delay per request where round trips are counted (resume, open, fork)
    resume_short: tuple[int, ...]
    resume_kib: tuple[int, ...]
    fork_depths: tuple[int, ...]
    fork_root: int  # events of the session the fork chain starts from
    fork_runs: int  # each fork read is measured this many times: its round trips are their median
    storage_events: int
    gc_sizes: tuple[int, ...]
    gc_rtt: float  # the delay gc is measured with while the run's projected time fits gc_budget
    gc_budget: float  # seconds one gc measurement may take with a delay; past it: no delay
    gc_million: int
    list_sizes: tuple[int, ...]
    tail_sizes: tuple[int, ...]
    tail_polls: int
    async_sessions: int
    async_rtt: float
    async_threads: int
    async_rounds: int
    import_runs: int
    verify_sizes: tuple[int, ...]
    verify_rtt: float
    latency_delays: tuple[float, float]  # section 1b: a fast and a slow delay per request
    latency_runs: int  # pairs of runs (fast, slow) per length: their differences' median decides


FULL = Config(
    quick=False,
    rtt=0.010,
    resume_short=(100, 1_000, 10_000, 100_000, 300_000),
    resume_kib=(10_000, 100_000, 300_000),
    fork_depths=(1, 10, 50, 100),
    fork_root=100,
    fork_runs=5,
    storage_events=10_000,
    gc_sizes=(1_000, 10_000, 100_000),
    gc_rtt=0.020,  # S3's latency, as issue 27 counts gc's round trips at
    gc_budget=60.0,
    gc_million=1_000_000,
    list_sizes=(1_000, 10_000, 100_000),
    tail_sizes=(100, 30_000),
    tail_polls=10,
    async_sessions=1_000,
    async_rtt=0.020,
    async_threads=64,
    async_rounds=3,
    import_runs=9,
    verify_sizes=(1_000, 10_000, 100_000),
    verify_rtt=0.001,
    latency_delays=(0.001, 0.300),  # 300 ms: a slow link, so each latency shows above the CPU's noise
    latency_runs=5,
)
QUICK = Config(
    quick=True,
    rtt=0.005,
    resume_short=(100, 1_000, 3_000),
    resume_kib=(1_000,),
    fork_depths=(1, 5),
    fork_root=50,
    fork_runs=1,
    storage_events=1_000,
    gc_sizes=(100, 1_000),
    gc_rtt=0.001,
    gc_budget=5.0,
    gc_million=5_000,
    list_sizes=(1_000, 4_000),
    tail_sizes=(100, 2_000),
    tail_polls=3,
    async_sessions=100,
    async_rtt=0.020,
    async_threads=64,
    async_rounds=1,
    import_runs=3,
    verify_sizes=(100, 1_000),
    verify_rtt=0.001,
    latency_delays=(0.001, 0.030),
    latency_runs=1,
)


# ---- messages --------------------------------------------------------------


def short(i: int) -> Message:
    return message(i, 32)


def kib(i: int) -> Message:
    return message(i, 1024)


def incompressible(i: int) -> Message:
    """1,024 characters of base64 of random bytes: what no compressor shrinks below 3/4."""
    return {"role": "user" if i % 2 == 0 else "assistant", "content": base64.b64encode(random.Random(i).randbytes(768)).decode()}


MAKERS: dict[str, Callable[[int], Message]] = {"short": short, "1KiB": kib, "random": incompressible}


def mb(n: float) -> float:
    return n / 1e6


def ms(seconds: float) -> float:
    return seconds * 1000


# ---- bulk sessions -----------------------------------------------------------


class Bulk:
    """Sessions of n events written by appends with the default settings, once per kind of message:
    one writer appends up to the largest n needed, noting how many objects the bucket held after
    each needed n; ``session(kind, n)`` is a new bucket of exactly those objects (see ``scale.py``)."""

    def __init__(self, needs: dict[str, set[int]]) -> None:
        self.needs = needs
        self.buckets: dict[str, FastMemory] = {}
        self.marks: dict[str, dict[int, int]] = {}
        self.seconds: dict[str, float] = {}

    def _write(self, kind: str) -> None:
        sizes = sorted(self.needs[kind])
        make = MAKERS[kind]
        bucket = FastMemory()
        marks: dict[int, int] = {}
        started = time.perf_counter()
        with Store(bucket) as store:
            writer = store.open(SID, create=True)
            for i in range(1, sizes[-1] + 1):
                writer.append(make(i))
                if i in self.needs[kind]:
                    marks[i] = bucket.created
        if bucket.replaced:
            raise RuntimeError("an append replaced an object: a copy by creation order would not be exact")
        self.seconds[kind] = time.perf_counter() - started
        print(f"   (setup: {sizes[-1]:,} {kind} events written by appends in {self.seconds[kind]:.1f} s)", flush=True)
        self.buckets[kind], self.marks[kind] = bucket, marks

    def session(self, kind: str, n: int) -> FastMemory:
        if kind not in self.buckets:
            self._write(kind)
        return self.buckets[kind].first(self.marks[kind][n])


def traced_peak(fn: Callable[[], object]) -> int:
    """Peak bytes of Python allocations while ``fn`` runs and its result is alive (tracemalloc)."""
    pygc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        result = fn()
        peak = tracemalloc.get_traced_memory()[1]
        del result
    finally:
        tracemalloc.stop()
    return peak - base


def measured(backend: ObjectStore, delay: float, fn: Callable[[Store], T]) -> tuple[Counts, float, T]:
    """Run ``fn`` on a new ``Store`` over ``backend`` through a ``Recorder``: (counts, seconds, result)."""
    recorder = Recorder(backend, delay)
    with Store(recorder) as store:
        started = time.perf_counter()
        result = fn(store)
        seconds = time.perf_counter() - started
    return recorder.counts(), seconds, result


def fleet(n: int, *, delete_odd: bool = True) -> FastMemory:
    """n sessions of 3 events by the library: the even ones live, the odd ones deleted (all live
    without ``delete_odd``)."""
    bucket = FastMemory()
    with Store(bucket) as store:
        for i in range(n):
            sid = f"s{i:07d}"
            writer = store.create(sid)
            for j in range(3):
                writer.append(short(j))
            if delete_odd and i % 2:
                store.delete(sid)
    return bucket
