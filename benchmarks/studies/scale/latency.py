"""Section 1b: what latency costs a resume, in request latencies waited (a fast and a slow delay per request, in pairs)."""

from __future__ import annotations

import statistics

from benchmarks._tables import Report, Table, label
from benchmarks.studies.scale.setup import MAKERS, SID, Bulk, Config, measured, ms
from evstore import Store


def section_latency(cfg: Config, bulk: Bulk, report: Report) -> None:
    """Resume + append at a fast and a slow delay per request, in pairs (fast, then slow, on a
    fresh copy of the session each): the wall time the slower requests add, divided by how much
    slower each is, is how many request latencies the operation waits through one after another.
    A chain of requests spaced by CPU (section 1's round trips past 100,000 events) adds little:
    the requests wait while the CPU works. Medians of ``latency_runs`` pairs."""
    fast, slow = cfg.latency_delays
    sizes = cfg.resume_short
    walls: dict[float, list[float]] = {fast: [], slow: []}
    chains: list[int] = []
    paid: list[float] = []
    spread: list[str] = []

    def resume_and_append(store: Store) -> int:
        writer, context = store.resume(SID)
        writer.append(MAKERS["short"](len(context) + 1))
        return len(context)

    for n in sizes:
        runs: dict[float, list[float]] = {fast: [], slow: []}
        slow_chains: list[int] = []
        for _ in range(cfg.latency_runs):
            for delay in (fast, slow):
                counts, seconds, length = measured(bulk.session("short", n), delay, resume_and_append)
                if length != n:
                    raise RuntimeError(f"resume of {n} events returned a context of {length} messages")
                runs[delay].append(seconds)
                if delay == slow:
                    slow_chains.append(counts.chain)
        differences = [(b - a) / (slow - fast) for a, b in zip(runs[fast], runs[slow], strict=True)]
        paid.append(statistics.median(differences))
        spread.append(f"{min(differences):.1f} to {max(differences):.1f}")
        chains.append(int(statistics.median(slow_chains)))
        for delay in (fast, slow):
            walls[delay].append(ms(statistics.median(runs[delay])))
    f_ms, s_ms = f"{ms(fast):.0f} ms", f"{ms(slow):.0f} ms"
    table = Table(
        f"1b. what latency costs a resume: Store.resume(id) + one append, short messages, at {f_ms} and {s_ms} per request",
        [label(n) for n in sizes],
        [
            f"pairs of runs ({f_ms}, then {s_ms} per request) on fresh copies: {cfg.latency_runs} per length, medians",
            f"latencies waited: (wall at {s_ms} - wall at {f_ms}) / {ms(slow - fast):.0f} ms, each pair's; their median",
            "(issue 27 counts a resume in round trips: this is how many of them its wall time pays)",
        ],
    )
    table.row(f"ms, resume + append at {f_ms} per request", walls[fast])
    table.row(f"ms, resume + append at {s_ms} per request", walls[slow])
    table.row(f"wall at {s_ms} / at {f_ms}", [b / a for a, b in zip(walls[fast], walls[slow], strict=True)])
    table.row("latencies waited (median)", paid)
    table.row("latencies waited (fewest to most)", spread)
    table.row(f"round trips (section 1's chain) at {s_ms}", chains)
    report.add("latency", table)
