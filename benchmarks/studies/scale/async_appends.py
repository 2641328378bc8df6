"""Section 8: the same appends from AsyncStore's pool and from threads."""

from __future__ import annotations

import asyncio
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from benchmarks._harness import alternating
from benchmarks._scale_backend import FastMemory, Recorder
from benchmarks._tables import Report, Table
from benchmarks.studies.scale.setup import Config, ms, short
from evstore import AsyncSession, AsyncStore, Session, Store


def section_async(cfg: Config, report: Report) -> None:
    """The same appends (one per session, n sessions) from AsyncStore's pool and from threads."""
    n = cfg.async_sessions
    recorder = Recorder(FastMemory())  # no delay while setting up
    store = Store(recorder)
    astore = AsyncStore(store)
    writers = [store.open(f"t{i}", create=True) for i in range(n)]

    async def open_all() -> list[AsyncSession]:
        return list(await asyncio.gather(*(astore.open(f"a{i}", create=True) for i in range(n))))

    loop = asyncio.new_event_loop()
    sessions = loop.run_until_complete(open_all())
    recorder.delay = cfg.async_rtt
    seq = 0

    def with_async() -> float:
        async def go() -> None:
            await asyncio.gather(*(s.append(short(seq)) for s in sessions))

        started = time.perf_counter()
        loop.run_until_complete(go())
        return n / (time.perf_counter() - started)

    def with_threads() -> float:
        def one(writer: Session) -> int:
            return writer.append(short(seq))

        started = time.perf_counter()
        with ThreadPoolExecutor(cfg.async_threads) as pool:
            list(pool.map(one, writers))
        return n / (time.perf_counter() - started)

    rates: dict[str, list[float]] = {"async": [], "threads": []}
    try:
        for r in range(cfg.async_rounds):  # interleaved, the order alternating
            seq += 1
            for name in alternating(("async", "threads"), r):
                rates[name].append(with_async() if name == "async" else with_threads())
    finally:
        loop.run_until_complete(astore.aclose())
        loop.close()
        store.close()
    a, t = statistics.median(rates["async"]), statistics.median(rates["threads"])
    table = Table(
        f"8. AsyncStore: {n:,} appends (one per session), {ms(cfg.async_rtt):.0f} ms per request",
        ["appends/s"],
        [f"AsyncStore(store): max_workers={astore.max_workers}; threads: ThreadPoolExecutor({cfg.async_threads}); medians"],
    )
    table.row("AsyncStore (defaults)", [a])
    table.row(f"{cfg.async_threads} threads", [t])
    table.row("async / threads", [a / t], ">= 0.8x", [a / t >= 0.8])
    report.add("async", table)
