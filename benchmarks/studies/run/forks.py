"""Section fork: fork at a seq, at the head, and from a writer, for parents of each size."""

from __future__ import annotations

from collections.abc import Callable

from benchmarks._harness import Variant, interleave, ratio, requests_cell, total
from benchmarks._s3env import Env
from benchmarks._tables import TextTable
from benchmarks.studies.run.config import Config, Results, Target, ms


def bench_fork(env: Env, cfg: Config, targets: list[Target]) -> Results:
    from evstore import Store

    backend = env.s3store(env.shared_bucket)
    store = Store(backend)
    parents = {n: env.fixture(n, "loose") for n in cfg.open_sizes}
    made = iter(range(10**9))

    def forker(sid: str, at: int | None) -> Callable[[], object]:
        return lambda: store.fork(sid, f"fork-{sid}-{next(made)}", at=at)

    # at a given seq (the caller knows it: the head it appended, a turn it wants to branch from),
    # and at the head (the library finds it first: the cost of a cold open)
    variants = [
        Variant(f"fork at seq {n:,} of a parent of {n:,}", forker(sid, n), backend.requests) for n, sid in parents.items()
    ]
    variants += [
        Variant(f"fork at the head of a parent of {n:,}", forker(sid, None), backend.requests) for n, sid in parents.items()
    ]
    # from a writer, which knows its head: Session.fork (opening the writer is not timed)
    writers = {n: store.open(sid) for n, sid in parents.items()}

    def writer_forker(n: int) -> Callable[[], object]:
        return lambda: writers[n].fork(f"wfork-{parents[n]}-{next(made)}")

    variants += [Variant(f"Session.fork from a writer at the head of {n:,}", writer_forker(n), backend.requests) for n in parents]
    interleave(variants, cfg.fork_rounds)
    base = variants[0].median
    table = TextTable(f"fork, median of {cfg.fork_rounds}", ["fork", "requests", "median time", "ratio vs the first row"])
    for v in variants:
        table.add(v.name, requests_cell(v.typical_requests), ms(v.median), f"{ratio(v.median, base):.2f}x")
    table.show()
    at_seq = variants[: len(parents)]
    counts = {total(r) for v in at_seq for r in v.requests}
    sizes = " / ".join(f"{n:,}" for n in parents)
    targets.append(
        Target(
            "fork",
            f"fork at a seq: requests for parents of {sizes}",
            " / ".join(str(total(v.typical_requests)) for v in at_seq),
            "equal",
            len(counts) == 1,
        )
    )
    from_writer = variants[2 * len(parents) :]
    targets.append(
        Target(
            "fork",
            f"Session.fork from a writer: requests for parents of {sizes}",
            " / ".join(str(total(v.typical_requests)) for v in from_writer),
            "equal",
            len({total(r) for v in from_writer for r in v.requests}) == 1,
        )
    )
    return {v.name: v.raw() for v in variants}
