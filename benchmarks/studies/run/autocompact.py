"""Section autocompact: a writer with Store(auto_compact=S) packs its own runs as it appends; its replay against
compact(sid)'s."""

from __future__ import annotations

import time
from collections import Counter

from benchmarks._data import message
from benchmarks._harness import Variant, describe, interleave, median, requests_cell, total
from benchmarks._s3env import Env, build_in_memory, memory_objects
from benchmarks._tables import TextTable
from benchmarks.studies.run.config import Config, Results, Target, ms


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
    table = TextTable(
        f"auto-compaction: Store(auto_compact={size:,}), {n:,} appends over HTTP, then replay (median of {cfg.replay_rounds})",
        ["what", "requests", "median time"],
    )
    table.add(
        f"{n:,} appends", f"{total(appended):,} ({describe(appended)}): {per_append:.4g} per append", ms(median(times)) + " each"
    )
    table.add(f"the {len(plain):,} appends of 1 PUT", "1 PUT each", ms(median(plain)) if plain else "-")
    table.add(f"the {len(packing)} appends that also PUT a segment", "2 PUT each", ms(median(packing)) if packing else "-")
    for v in variants:
        table.add(v.name, requests_cell(v.typical_requests), ms(v.median))
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
