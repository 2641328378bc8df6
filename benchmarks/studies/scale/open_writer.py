"""Section 2: store.open(id), a writer only, at each length: requests and round trips."""

from __future__ import annotations

from benchmarks._tables import Report, Table, at_most, label
from benchmarks.studies.scale.setup import SID, Bulk, Config, measured, ms


def section_open(cfg: Config, bulk: Bulk, report: Report) -> None:
    sizes = cfg.resume_short
    runs = [measured(bulk.session("short", n), cfg.rtt, lambda store: store.open(SID)) for n in sizes]
    table = Table(
        "2. store.open(id): a writer only, short messages (default settings)",
        [label(n) for n in sizes],
        [f"{ms(cfg.rtt):.0f} ms per request; wanted: README/docs/format.md, '4 requests, 3 round trips'"],
    )
    totals = [c.total for c, _, _ in runs]
    rounds = [c.chain for c, _, _ in runs]
    table.row("requests PUT/GET/HEAD/LIST/DELETE", [c.by_kind() for c, _, _ in runs])
    table.row("requests", totals, "<= 4", at_most(totals, 4))
    table.row("round trips", rounds, "<= 3", at_most(rounds, 3))
    table.row("ms (wall)", [ms(s) for _, s, _ in runs])
    report.add("open", table)
