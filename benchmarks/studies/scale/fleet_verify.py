"""Section 10: verify --all, Store.verify_all() over fleets of live sessions."""

from __future__ import annotations

import time

from benchmarks._scale_backend import Counts
from benchmarks._tables import Report, Table, label
from benchmarks.studies.scale.setup import Config, fleet, mb, measured, ms


def section_fleet_verify(cfg: Config, report: Report) -> None:
    """``Store.verify_all()`` (what ``evstore verify --all`` runs) over fleets of live sessions of
    3 events each, written by the library (a copy of one session would not verify: its manifest
    names its own id)."""
    runs: list[tuple[int, int, Counts, float, int]] = []
    setup = 0.0
    for n in cfg.verify_sizes:
        started = time.perf_counter()
        bucket = fleet(n, delete_odd=False)
        setup += time.perf_counter() - started
        counts, seconds, verdicts = measured(bucket, cfg.verify_rtt, lambda store: [v.status for v in store.verify_all()])
        if len(verdicts) != n or set(verdicts) != {"ok"}:
            raise RuntimeError(f"verify_all gave {len(verdicts)} verdicts ({sorted(set(verdicts))}), not {n} ok")
        runs.append((n, len(bucket), counts, seconds, verdicts.count("ok")))
        del bucket
    table = Table(
        "10. verify --all: Store.verify_all() over a fleet of sessions of 3 events",
        [label(n) for n, *_ in runs],
        [
            f"{ms(cfg.verify_rtt):.0f} ms per request; sessions verified 8 at a time (verify_all's default); "
            "every session ok (manifest + 3 events)",
            f"(setup by the library: {setup:.1f} s)",
        ],
    )
    table.row("objects", [objects for _, objects, *_ in runs])
    table.row("requests PUT/GET/HEAD/LIST/DELETE", [c.by_kind() for _, _, c, _, _ in runs])
    table.row("requests", [c.total for _, _, c, _, _ in runs])
    table.row("requests per session", [c.total / n for n, _, c, _, _ in runs])
    table.row("LIST requests per session", [c.kinds["LIST"] / n for n, _, c, _, _ in runs])
    table.row("round trips", [c.chain for _, _, c, _, _ in runs])
    table.row("round trips per session", [c.chain / n for n, _, c, _, _ in runs])
    table.row("MB downloaded", [mb(c.down) for _, _, c, _, _ in runs])
    table.row("s (wall)", [seconds for _, _, _, seconds, _ in runs])
    table.row("sessions ok", [ok for *_, ok in runs])
    report.add("fleet-verify", table)
