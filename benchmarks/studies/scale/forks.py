"""Section 3: a chain of forks d deep: replay and resume + append of the deepest."""

from __future__ import annotations

import statistics
import time
from typing import Any

from benchmarks._scale_backend import Counts, FastMemory, Recorder
from benchmarks._tables import Report, Table, at_most
from benchmarks.studies.scale.setup import Config, measured, ms, short
from evstore import Store


def section_fork(cfg: Config, report: Report) -> None:
    """A chain of forks: fork-d is fork-(d-1) forked one event before its head, plus 3 events of its own."""
    bucket = FastMemory()
    heads: dict[int, int] = {}
    with Store(bucket) as store:
        writer = store.open("fork-0", create=True)
        for i in range(1, cfg.fork_root + 1):
            writer.append(short(i))
        heads[0] = writer.head
        for d in range(1, max(cfg.fork_depths) + 1):
            writer = store.fork(f"fork-{d - 1}", f"fork-{d}", at=heads[d - 1] - 1)
            for i in range(3):
                writer.append(short(heads[d - 1] + i))
            heads[d] = writer.head
    # a round trip is a request that started after another ended: a busy machine's scheduling
    # lengthens some chains, so each read is measured ``fork_runs`` times (the counts are the same)
    replays: list[list[tuple[Counts, float]]] = []
    resumes: list[list[tuple[Counts, float, int]]] = []
    for d in cfg.fork_depths:

        def replay(store: Store, d: int = d) -> int:
            return sum(1 for _ in store.replay(f"fork-{d}"))

        replays.append([])
        resumes.append([])
        for _ in range(cfg.fork_runs):
            counts, seconds, events = measured(bucket.copy(), cfg.rtt, replay)
            if events != heads[d]:
                raise RuntimeError(f"replay of fork-{d} gave {events} events, not {heads[d]}")
            replays[-1].append((counts, seconds))

            recorder = Recorder(bucket.copy(), cfg.rtt)
            with Store(recorder) as store:
                started = time.perf_counter()
                writer, _ = store.resume(f"fork-{d}")
                alone = recorder.counts()
                writer.append(short(0))
                seconds = time.perf_counter() - started
            resumes[-1].append((recorder.counts(), seconds, alone.chain))
    runs = f"median of {cfg.fork_runs}" if cfg.fork_runs > 1 else "1 run"
    table = Table(
        f"3. forks d deep: replay and resume + append of the deepest (root {cfg.fork_root} events, 3 own events per fork)",
        [f"d={d}" for d in cfg.fork_depths],
        [f"{ms(cfg.rtt):.0f} ms per request; round trips and times: {runs}; wanted for resume: resume's own (<= 4)"],
    )

    def median(values: list[float]) -> Any:
        return statistics.median_low(values)

    def spread(values: list[int]) -> str:
        return f"{min(values)}-{max(values)}"

    rounds = [median([c.chain for c, _ in runs_]) for runs_ in replays]
    resume_rounds = [median([chain for _, _, chain in runs_]) for runs_ in resumes]
    first_replay = [runs_[0][0] for runs_ in replays]
    first_resume = [runs_[0][0] for runs_ in resumes]
    table.row("events replayed", [heads[d] for d in cfg.fork_depths])
    table.row("replay: PUT/GET/HEAD/LIST/DELETE", [c.by_kind() for c in first_replay])
    table.row("replay: requests", [c.total for c in first_replay])
    table.row("replay: round trips", rounds, "<= 6", at_most(rounds, 6))
    table.row("replay: round trips, fewest-most", [spread([c.chain for c, _ in runs_]) for runs_ in replays])
    table.row("replay: ms (wall)", [ms(median([s for _, s in runs_])) for runs_ in replays])
    table.row("resume+append: PUT/GET/HEAD/LIST/DELETE", [c.by_kind() for c in first_resume])
    table.row("resume+append: requests", [c.total for c in first_resume])
    table.row("resume: round trips", resume_rounds, "<= 4", at_most(resume_rounds, 4))
    table.row("resume: round trips, fewest-most", [spread([chain for _, _, chain in runs_]) for runs_ in resumes])
    table.row("resume+append: round trips", [median([c.chain for c, _, _ in runs_]) for runs_ in resumes])
    table.row("resume+append: ms (wall)", [ms(median([s for _, s, _ in runs_])) for runs_ in resumes])
    report.add("fork", table)
