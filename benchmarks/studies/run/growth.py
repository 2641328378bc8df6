"""Section growth: an append at seq ~N against one at seq ~10, in the same session and interleaved with small ones."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from benchmarks._data import message
from benchmarks._harness import alternating, median, ratio, total
from benchmarks._s3env import Env, build_in_memory, memory_objects, seq_of
from benchmarks._tables import TextTable
from benchmarks.studies.run.config import Config, Results, Target, ms


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
    env.bulk_put(bucket, ((k, d, m) for k, d, m in memory_objects(memory) if seq_of(k) > w))
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
        for step in alternating(steps, j):
            step()
    e_t, l_t, il_t = (median(t for t, _ in xs) for xs in (early, late, early_il))
    e_r, l_r, il_r = (median(r for _, r in xs) for xs in (early, late, early_il))
    table = TextTable(
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
