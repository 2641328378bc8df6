"""Section memory: the peak memory of a streamed replay in a fresh process, over S3 and a LocalStore, at two lengths."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path

from benchmarks._data import message
from benchmarks._harness import REPO, requests_cell, run_child
from benchmarks._s3env import Env, memory_objects, seq_of
from benchmarks._tables import TextTable
from benchmarks.studies.run.config import Config, Results, Target, ms


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
        batch = [(k, d, m) for k, d, m in memory_objects(memory) if seq_of(k)]
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
        shutil.rmtree(workdir, ignore_errors=True)
    table = TextTable(
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
                requests_cell(req) if req else "-",
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
