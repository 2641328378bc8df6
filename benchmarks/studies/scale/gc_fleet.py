"""Sections 5 and 5b: gc over fleets of sessions written by the library, and over a million copies simulated in memory."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from benchmarks._scale_backend import Counts, FastMemory
from benchmarks._tables import Report, Table, label
from benchmarks.studies.scale.setup import Config, fleet, measured, ms, short
from evstore import Store


@dataclass
class GcRun:
    sessions: int
    objects: int
    counts: Counts
    reported: int
    seconds: float
    delay: float
    removed: int
    sessions_removed: int
    left_alone: int


def run_gc(bucket: FastMemory, sessions: int, delay: float) -> GcRun:
    objects = len(bucket)
    later = datetime.now(UTC) + timedelta(days=2)  # past gc's grace (1 day) and delete's fence hold (10 min)
    counts, seconds, gc_report = measured(bucket, delay, lambda store: store.gc(now=later))
    if gc_report.sessions != sessions:
        raise RuntimeError(f"gc saw {gc_report.sessions} sessions, not {sessions}")
    return GcRun(
        sessions,
        objects,
        counts,
        gc_report.requests,
        seconds,
        delay,
        gc_report.objects_removed,
        gc_report.sessions_removed,
        len(gc_report.left_alone),
    )


def gc_table(title: str, runs: list[GcRun], notes: list[str]) -> Table:
    table = Table(title, [label(r.sessions) for r in runs], notes)
    lists = [r.counts.kinds["LIST"] for r in runs]
    rounds = [r.counts.chain for r in runs]
    table.row("objects before gc", [r.objects for r in runs])
    wanted_lists = [x <= r.objects / 1000 * 1.5 for x, r in zip(lists, runs, strict=True)]
    table.row("LIST requests", lists, "<= objects/1000*1.5", wanted_lists)
    table.row("GET requests", [r.counts.kinds["GET"] for r in runs])
    table.row("DELETE requests", [r.counts.kinds["DELETE"] for r in runs])
    table.row("PUT + HEAD requests", [r.counts.kinds["PUT"] + r.counts.kinds["HEAD"] for r in runs])
    table.row("requests made", [r.counts.total for r in runs])
    table.row("requests gc reported", [r.reported for r in runs], "== made", [r.reported == r.counts.total for r in runs])
    table.row(
        "round trips",
        [f"{r.counts.chain:,}" if r.delay else f"<= {r.counts.chain:,}" for r in runs],
        "<= sessions/100",
        [x <= r.sessions / 100 for x, r in zip(rounds, runs, strict=True)],
    )
    table.row("delay per request, ms", [ms(r.delay) for r in runs])
    table.row("s (wall)", [r.seconds for r in runs])
    table.row("sessions / objects removed", [f"{r.sessions_removed:,}/{r.removed:,}" for r in runs])
    table.row("sessions left alone", [r.left_alone for r in runs])
    return table


def section_gc(cfg: Config, report: Report) -> None:
    runs: list[GcRun] = []
    setup = 0.0
    for n in cfg.gc_sizes:
        started = time.perf_counter()
        bucket = fleet(n)
        setup += time.perf_counter() - started
        delay = cfg.gc_rtt
        if runs:  # project this run's time from the last one's: its requests grow with n
            last = runs[-1]
            if not last.delay or last.seconds * n / last.sessions > cfg.gc_budget:
                delay = 0.0
        runs.append(run_gc(bucket, n, delay))
        del bucket
    notes = ["half the sessions live with nothing to collect, half deleted (Store.delete); gc runs as if 2 days later"]
    if any(not r.delay for r in runs):
        notes.append("round trips '<= n': measured without a delay (to fit the run's time): the true chain is no longer")
    notes.append(f"(setup by the library: {setup:.1f} s)")
    report.add("gc", gc_table("5. gc over a fleet of sessions of 3 events", runs, notes))


def section_gc_million(cfg: Config, report: Report) -> None:
    """Copies of two template sessions: live, and an expired remnant (its manifest gone, as
    lifecycle expiry removes it first). gc reads no object of either: only LISTs, then DELETEs."""
    n = cfg.gc_million
    started = time.perf_counter()
    template = FastMemory()
    with Store(template) as store:
        for sid in ("live", "remnant"):
            writer = store.create(sid)
            for j in range(3):
                writer.append(short(j))
    template.delete_many(["sessions/remnant/manifest"])
    kinds = {sid: template.entries(f"sessions/{sid}/") for sid in ("live", "remnant")}

    def copies() -> Iterator[tuple[str, bytes, str, datetime, dict[str, str]]]:
        for i in range(n):
            sid = "live" if i % 2 == 0 else "remnant"
            for key, data, etag, modified, metadata in kinds[sid]:
                yield f"sessions/s{i:07d}/{key.removeprefix(f'sessions/{sid}/')}", data, etag, modified, metadata

    bucket = FastMemory()
    bucket.put_entries(copies())
    setup = time.perf_counter() - started
    run = run_gc(bucket, n, 0.0)
    if run.sessions_removed != n // 2:
        raise RuntimeError(f"gc removed {run.sessions_removed} sessions, not {n // 2}")
    notes = [
        "half live copies of one session (manifest + 3 events), half copies of an expired remnant (3 events, no manifest);",
        "the objects' bytes are the templates' (gc reads none of them); no delay: round trips '<= n' are an upper bound",
        f"(setup: {setup:.1f} s)",
    ]
    report.add("gc-million", gc_table(f"5b. gc over {n:,} sessions (simulated in memory)", [run], notes))
