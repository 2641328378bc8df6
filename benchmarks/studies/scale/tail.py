"""Section 7: tail -f, store.follow(id) on an idle session: what an idle poll costs."""

from __future__ import annotations

from benchmarks._scale_backend import LIST_BYTES_PER_KEY, LIST_ENVELOPE_BYTES, Counts, Recorder
from benchmarks._tables import Report, Table, at_most, label
from benchmarks.studies.scale.setup import SID, Bulk, Config
from evstore import Store


def section_tail(cfg: Config, bulk: Bulk, report: Report) -> None:
    sizes = cfg.tail_sizes
    polls = cfg.tail_polls
    rows: list[tuple[float, float, float, float, Counts]] = []
    for n in sizes:
        recorder = Recorder(bulk.session("short", n))
        marks: list[Counts] = []

        def idle(_: float, recorder: Recorder = recorder, marks: list[Counts] = marks) -> None:
            marks.append(recorder.counts())  # called once after each poll that found nothing new

        def done(marks: list[Counts] = marks) -> bool:
            return len(marks) > polls

        with Store(recorder) as store:
            got = list(store.follow(SID, after=n, interval=0.0, should_stop=done, sleep=idle))
        if got:
            raise RuntimeError("an idle session's follow returned events")
        start, end = marks[0], marks[-1]
        k = len(marks) - 1
        rows.append(
            (
                (end.total - start.total) / k,
                (end.listed_keys - start.listed_keys) / k,
                (end.down - start.down) / k,
                (end.get_bytes - start.get_bytes) / k,
                start,
            )
        )
    table = Table(
        f"7. tail -f: store.follow(id) on an idle session, short messages ({polls} idle polls)",
        [label(n) for n in sizes],
        [f"bytes: GET bodies + LIST responses estimated at {LIST_BYTES_PER_KEY} B per key + {LIST_ENVELOPE_BYTES} B per page"],
    )
    table.row("requests per idle poll", [r[0] for r in rows])
    table.row("keys listed per idle poll", [r[1] for r in rows])
    table.row("bytes per idle poll", [r[2] for r in rows], "<= 2 KB", at_most([r[2] for r in rows], 2048))
    table.row("  of which GET bodies", [r[3] for r in rows])
    table.row("start: PUT/GET/HEAD/LIST/DELETE", [r[4].by_kind() for r in rows])
    table.row("start: KB", [r[4].down / 1000 for r in rows])
    report.add("tail", table)
