"""Section open: a cold store.open(sid) in a fresh process, loose and compacted sessions of each size."""

from __future__ import annotations

from collections import Counter
from typing import Any

from benchmarks._harness import alternating, median, ratio, requests_cell, run_child, total
from benchmarks._s3env import Env
from benchmarks._tables import TextTable
from benchmarks.studies.run.config import Config, Results, Target, ms


def bench_open(env: Env, cfg: Config, targets: list[Target]) -> Results:
    cases = [(n, kind, env.fixture(n, kind)) for n in cfg.open_sizes for kind in ("loose", "compacted")]
    samples: dict[tuple[int, str], list[dict[str, Any]]] = {(n, k): [] for n, k, _ in cases}
    for r in range(cfg.open_rounds):
        for n, kind, sid in alternating(cases, r):
            result = run_child("open", {"endpoint": env.endpoint, "bucket": env.shared_bucket, "sid": sid})
            assert result["head"] == n, result
            samples[(n, kind)].append(result)
    base = median(s["seconds"] for s in samples[(cfg.open_sizes[0], "loose")])
    table = TextTable(
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
            requests_cell(req),
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
