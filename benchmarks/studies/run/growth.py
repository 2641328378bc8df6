"""Section growth: an append at seq ~N against one at seq ~10, in the same session and interleaved with small ones."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchmarks._data import message
from benchmarks._harness import alternating, median, ratio, total
from benchmarks._s3env import Env, build_in_memory, memory_objects, seq_of
from benchmarks._tables import TextTable
from benchmarks.studies.run.config import Config, Results, Target, ms


def bench_growth(env: Env, cfg: Config, targets: list[Target]) -> Results:
    from evstore import Store

    bucket = env.new_bucket("growth")
    backend = env.s3store(bucket)
    store = Store(backend)
    sid = "growth"
    w = cfg.growth_window
    session = store.create(sid)
    early = [timed_append(backend, session, i) for i in range(w)]  # seqs 1..w, through S3
    late_session = grown(env, cfg, bucket, store, sid)
    rounds = interleaved_rounds(env, cfg, bucket, store, sid, late_session)
    e_t, l_t, il_t = (median(t for t, _ in xs) for xs in (early, rounds.late, rounds.early_interleaved))
    e_r, l_r, il_r = (median(r for _, r in xs) for xs in (early, rounds.late, rounds.early_interleaved))
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
        f"{ms(median(rounds.raw_late))} / {ms(median(rounds.raw_small))}",
        "1",
        f"{ratio(median(rounds.raw_late), median(rounds.raw_small)):.2f}x",
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
        "late": rounds.late,
        "early_interleaved": rounds.early_interleaved,
        "ratio_same_session": growth,
        "ratio_interleaved": ratio(l_t, il_t),
        "raw_put_control": {"late_prefix": rounds.raw_late, "small_prefix": rounds.raw_small},
    }


def timed_append(backend: Any, session: Any, i: int) -> tuple[float, int]:
    """One append's time and the requests it made."""
    before = total(backend.requests)
    started = time.perf_counter()
    session.append(message(i))
    return time.perf_counter() - started, total(backend.requests) - before


def grown(env: Env, cfg: Config, bucket: str, store: Any, sid: str) -> Any:
    """Session ``sid`` (written through S3 up to the window) continued to seq N - window, and opened again.

    Seqs window+1 .. N-window are appended by an evstore writer on a MemoryStore holding these very
    objects, then copied into the bucket (setup speed; the bytes are the same)."""
    from evstore import MemoryStore, Store

    w = cfg.growth_window
    memory = MemoryStore()
    for key, data, metadata in memory_objects(store.backend, f"sessions/{sid}/"):
        memory.create(key, data, metadata=metadata)
    twin = Store(memory).open(sid)
    for i in range(w, cfg.growth_to - w):
        twin.append(message(i))
    env.bulk_put(bucket, ((k, d, m) for k, d, m in memory_objects(memory) if seq_of(k) > w))
    late_session = store.open(sid)
    assert late_session.head == cfg.growth_to - w, late_session.head
    return late_session


@dataclass
class Rounds:
    """What the interleaved rounds measured: appends (time, requests) to the grown session and to the
    small ones, and the raw control PUTs' times under each one's prefix."""

    late: list[tuple[float, int]] = field(default_factory=list)
    early_interleaved: list[tuple[float, int]] = field(default_factory=list)
    raw_late: list[float] = field(default_factory=list)
    raw_small: list[float] = field(default_factory=list)


def interleaved_rounds(env: Env, cfg: Config, bucket: str, store: Any, sid: str, late_session: Any) -> Rounds:
    """The interleaved check: each round, one append to a session at seq ~10 and one at seq ~N.

    Control: raw PUTs of the same size under each session's prefix, in the same rounds, to tell
    evstore's cost from the server's (non-event names: evstore ignores them)."""
    w = cfg.growth_window
    backend = store.backend
    smalls = []
    for j in range(w):
        small_sid = f"small-{j}"
        small_memory, _ = build_in_memory(small_sid, 10)
        env.bulk_put(bucket, memory_objects(small_memory))
        smalls.append(store.open(small_sid))
    rounds = Rounds()
    client = backend.client
    size = len(backend.get(store.layout.event_key(sid, 1)).data)

    def raw_put(sink: list[float], prefix: str, j: int) -> None:
        started = time.perf_counter()
        client.put_object(Bucket=bucket, Key=f"{prefix}x-control-{j}", Body=b"x" * size, IfNoneMatch="*")
        sink.append(time.perf_counter() - started)

    for j in range(w):
        steps: list[Callable[[], None]] = [
            functools.partial(lambda j: rounds.late.append(timed_append(backend, late_session, cfg.growth_to - w + j)), j),
            functools.partial(lambda j: rounds.early_interleaved.append(timed_append(backend, smalls[j], 10 + j)), j),
            functools.partial(raw_put, rounds.raw_late, store.layout.session_prefix(sid), j),
            functools.partial(raw_put, rounds.raw_small, store.layout.session_prefix(f"small-{j}"), j),
        ]
        for step in alternating(steps, j):
            step()
    return rounds
