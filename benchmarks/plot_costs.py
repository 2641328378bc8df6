"""What a resume and an append cost against the session's length: evstore beside a snapshot store, plotted.

    python benchmarks/plot_costs.py [--quick] [--sizes 10,100,1000] [--delay-ms 15] [--rounds 3]
                                    [--out docs/cost-vs-length.png] [--json FILE]

Both stores run side by side in one process over the same in-memory object store behind
``benchmarks/_scale_backend.py``'s ``Recorder``, which counts every request and holds each one a
fixed delay (15 ms by default: requests sent together overlap, as on S3), so that the counts are
exact and the times are what the requests wait plus the client's CPU:

* evstore: a session of n 1 KiB messages written by appends with the default settings (auto
  compaction on; ``scale.py``'s ``Bulk``). Resume: ``Store.resume(id)`` in a new ``Store``.
  Append: 32 ``Session.append`` calls on the writer the resume returned, each counted apart (32: one
  cycle of the default compaction, whose segment PUT some appends carry);
* the snapshot store: the whole session as one JSON object, the approach of Strands'
  ``SnapshotSessionManager`` and of ``run.py``'s "whole file": resume is one GET and the decoding of
  every message, an append (by a process that holds the messages, as an agent after its turn) is the
  encoding of every message and one PUT of the whole object. 3 appends per round.

Each round measures both stores at a length in alternating order, on fresh copies; the figures are
medians over the rounds (and over the appends). Requests per append are also given as a mean (the
amortized compaction). The store has no bandwidth limit: a snapshot's bytes cost its CPU here, and
would add their transfer time over a network; the bytes are in the table.

Prints the figures it plots as tables, writes the plot (two panels, log-log: requests and round
trips, and time; matplotlib's Agg backend) and, with ``--json``, the figures.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks._harness import alternating, median, started_line  # noqa: E402
from benchmarks._scale_backend import Counts, Recorder  # noqa: E402
from benchmarks._tables import Report, Table, label  # noqa: E402
from benchmarks.studies.scale.setup import MAKERS, SID, Bulk  # noqa: E402
from evstore import MemoryStore, ObjectStore, Store  # noqa: E402

SIZES = (10, 100, 1_000, 10_000, 100_000)
QUICK_SIZES = (10, 100, 1_000)
KIND = "1KiB"  # scale.py's messages of 1,024 characters
APPENDS = 32  # evstore appends per round: one cycle of the default compaction
SNAPSHOT_APPENDS = 3  # each writes the whole session
SNAPSHOT_KEY = "snapshots/bench.json"
STORES = ("evstore", "snapshot")
OPERATIONS = ("resume", "append")
OUT = REPO / "docs" / "cost-vs-length.png"
T = TypeVar("T")


@dataclass
class Runs:
    """One operation of one store at one length: each run's counts and wall time."""

    counts: list[Counts] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    def add(self, counts: Counts, seconds: float) -> None:
        self.counts.append(counts)
        self.seconds.append(seconds)

    def figures(self) -> dict[str, float]:
        requests = [c.total for c in self.counts]
        return {
            "requests": median(requests),
            "requests_mean": sum(requests) / len(requests),
            "round_trips": median(c.chain for c in self.counts),
            "bytes_down": median(c.down for c in self.counts),
            "bytes_up": median(c.up for c in self.counts),
            "ms": median(self.seconds) * 1000,
        }


def timed(recorder: Recorder, call: Callable[[], T]) -> tuple[Counts, float, T]:
    """``call``'s requests through ``recorder`` (from a reset), its wall time and its result."""
    recorder.reset()
    started = time.perf_counter()
    result = call()
    return recorder.counts(), time.perf_counter() - started, result


def one_round(
    recorder: Recorder, resume: Callable[[], tuple[Callable[[Any], object], int]], n: int, appends: int, runs: dict[str, Runs]
) -> None:
    """``resume`` (which gives an append and the messages it resumed), then ``appends`` appends, each counted apart."""
    counts, seconds, (append, length) = timed(recorder, resume)
    if length != n:
        raise RuntimeError(f"a resume of {n} messages resumed {length}")
    runs["resume"].add(counts, seconds)
    for i in range(appends):
        counts, seconds, _ = timed(recorder, functools.partial(append, MAKERS[KIND](n + 1 + i)))
        runs["append"].add(counts, seconds)


def evstore_round(bulk: Bulk, n: int, delay: float, runs: dict[str, Runs]) -> None:
    recorder = Recorder(bulk.session(KIND, n), delay)
    with Store(recorder) as store:

        def resume() -> tuple[Callable[[Any], object], int]:
            writer, context = store.resume(SID)
            return writer.append, len(context)

        one_round(recorder, resume, n, APPENDS, runs)


class SnapshotStore:
    """The whole session as one JSON object: read whole to resume, written whole after each append by
    the process that holds the messages (as an agent saves its snapshot after a turn)."""

    def __init__(self, backend: ObjectStore) -> None:
        self.backend = backend
        self.etag = ""
        self.messages: list[Any] = []

    def resume(self) -> list[Any]:
        found = self.backend.get(SNAPSHOT_KEY)
        self.etag, self.messages = found.etag, list(json.loads(found.data)["messages"])
        return self.messages

    def append(self, message: Any) -> None:
        self.messages.append(message)
        self.etag = self.backend.replace(SNAPSHOT_KEY, json.dumps({"messages": self.messages}).encode(), etag=self.etag)


def snapshot_round(document: bytes, n: int, delay: float, runs: dict[str, Runs]) -> None:
    bucket = MemoryStore()
    bucket.create(SNAPSHOT_KEY, document)  # setup: not through the recorder
    recorder = Recorder(bucket, delay)
    snapshot = SnapshotStore(recorder)
    one_round(recorder, lambda: (snapshot.append, len(snapshot.resume())), n, SNAPSHOT_APPENDS, runs)


def measure(sizes: tuple[int, ...], delay: float, rounds: int) -> dict[str, dict[str, dict[str, list[float]]]]:
    """``figures[store][operation][figure]``: one value per size (see ``Runs.figures``)."""
    bulk = Bulk({KIND: set(sizes)})
    figures: dict[str, dict[str, dict[str, list[float]]]] = {s: {op: {} for op in OPERATIONS} for s in STORES}
    for n in sizes:
        runs = {store: {op: Runs() for op in OPERATIONS} for store in STORES}
        document = json.dumps({"messages": [MAKERS[KIND](i) for i in range(1, n + 1)]}).encode()
        started = time.perf_counter()
        for r in range(rounds):
            for store in alternating(STORES, r):
                if store == "evstore":
                    evstore_round(bulk, n, delay, runs[store])
                else:
                    snapshot_round(document, n, delay, runs[store])
        print(f"   ({n:,} messages: {rounds} round(s) in {time.perf_counter() - started:.1f} s)", flush=True)
        for store in STORES:
            for op, found in runs[store].items():
                for name, value in found.figures().items():
                    figures[store][op].setdefault(name, []).append(value)
    return figures


def tables(figures: dict[str, dict[str, dict[str, list[float]]]], sizes: tuple[int, ...], delay: float, rounds: int) -> Report:
    report = Report()
    columns = [label(n) for n in sizes]
    notes = [
        f"in-process object store, {delay * 1000:g} ms per request, 1 KiB messages; medians of {rounds} round(s)",
        f"appends: {APPENDS} (evstore) and {SNAPSHOT_APPENDS} (snapshot) per round;",
        "KB down: GET bodies and LIST responses (estimated as S3's); KB up: PUT bodies",
    ]
    for op in OPERATIONS:
        table = Table(f"{op} cost against session length: evstore beside a whole-session snapshot", columns, notes)
        for store in STORES:
            got = figures[store][op]
            table.row(f"{store}: requests", got["requests"])
            if op == "append":
                table.row(f"{store}: requests, mean", got["requests_mean"])
            table.row(f"{store}: round trips", got["round_trips"])
            moved = "up" if op == "append" else "down"
            table.row(f"{store}: KB {moved}", [b / 1000 for b in got[f"bytes_{moved}"]])
            table.row(f"{store}: ms", got["ms"])
        report.add(op, table)
    return report


def plot(figures: dict[str, dict[str, dict[str, list[float]]]], sizes: tuple[int, ...], delay: float, out: Path) -> None:
    """Two log-log panels, the same lines in each: requests (and evstore's resume round trips), and wall time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    colors = {"evstore": "#1f77b4", "snapshot": "#d62728"}
    names = {"evstore": "evstore", "snapshot": "snapshot (the session as one JSON object)"}
    styles = {"resume": ("-", "o"), "append": ("--", "s")}
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 5.2), dpi=100)
    for store in STORES:
        for op in OPERATIONS:
            line, marker = styles[op]
            got = figures[store][op]
            requests = got["requests_mean" if op == "append" else "requests"]
            name = f"{names[store]}: {op}"
            left.plot(sizes, requests, line, marker=marker, color=colors[store], label=name)
            right.plot(sizes, got["ms"], line, marker=marker, color=colors[store], label=name)
    rounds = figures["evstore"]["resume"]["round_trips"]
    left.plot(sizes, rounds, ":", marker="o", mfc="white", color=colors["evstore"], label="evstore: resume, round trips")
    for store, offset in (("snapshot", 8), ("evstore", -14)):
        up = figures[store]["append"]["bytes_up"][-1]
        left.annotate(
            f"{store} append at {sizes[-1]:,}: a PUT of {up / 1000:,.1f} KB" if up < 1e6 else
            f"{store} append at {sizes[-1]:,}: a PUT of {up / 1e6:,.1f} MB",
            (sizes[-1], figures[store]["append"]["requests_mean"][-1]),
            textcoords="offset points",
            xytext=(0, offset),
            ha="right",
            fontsize=8,
            color=colors[store],
        )  # fmt: skip
    left.set_title("requests per operation (per append: the mean)")
    left.set_ylabel("requests")
    left.set_ylim(bottom=0.5)  # room below the appends' line for its note
    right.set_title(f"time per operation, {delay * 1000:g} ms per request")
    right.set_ylabel("ms (wall, median)")
    right.set_ylim(bottom=min(10.0, *(v for store in STORES for op in OPERATIONS for v in figures[store][op]["ms"])))
    for axes in (left, right):
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.xaxis.set_major_locator(FixedLocator(list(sizes)))
        axes.xaxis.set_minor_locator(NullLocator())
        axes.xaxis.set_major_formatter(FuncFormatter(lambda x, _: label(round(x))))
        axes.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:,.10g}"))
        axes.set_xlabel("session length (messages of 1 KiB)")
        axes.grid(True, which="major", alpha=0.3)
    handles, labels = left.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False, bbox_to_anchor=(0.5, 0.05))
    fig.suptitle("Resume and append against session length: evstore beside a whole-session snapshot")
    fig.text(
        0.5,
        0.01,
        "in-process object store counting every request; no bandwidth limit: the snapshot's bytes cost its CPU here, "
        "and would add their transfer time over a network",
        ha="center",
        fontsize=8,
        color="#555555",
    )
    fig.tight_layout(rect=(0, 0.14, 1, 0.96))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)


def parse_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(sorted({int(v) for v in text.split(",") if v.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None
    if not sizes or sizes[0] <= 0:
        raise argparse.ArgumentTypeError(f"expected positive numbers: {text!r}")
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help=f"sizes {', '.join(map(str, QUICK_SIZES))}, one round")
    parser.add_argument("--sizes", type=parse_sizes, help=f"session lengths (default {','.join(map(str, SIZES))})")
    parser.add_argument("--delay-ms", type=float, default=15.0, help="delay per request in ms (default 15)")
    parser.add_argument("--rounds", type=int, help="rounds per length (default 3; 1 with --quick)")
    parser.add_argument("--out", type=Path, default=OUT, help="where the plot goes (default docs/cost-vs-length.png)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the plotted figures to FILE")
    args = parser.parse_args(argv)
    sizes = args.sizes or (QUICK_SIZES if args.quick else SIZES)
    rounds = args.rounds or (1 if args.quick else 3)
    delay = args.delay_ms / 1000
    print(f"evstore's resume and append cost against session length, beside a snapshot store: {', '.join(map(label, sizes))}")
    print(started_line(1), flush=True)
    started = time.perf_counter()
    figures = measure(sizes, delay, rounds)
    report = tables(figures, sizes, delay, rounds)
    plot(figures, sizes, delay, args.out)
    seconds = time.perf_counter() - started
    print(f"\nplot: {args.out}\ndone in {seconds:.1f} s")
    if args.json:
        config = {"delay_ms": args.delay_ms, "rounds": rounds, "appends": APPENDS, "snapshot_appends": SNAPSHOT_APPENDS}
        saved = {"config": config, "sizes": sizes, "figures": figures, "tables": report.sections, "seconds": seconds}
        args.json.write_text(json.dumps(saved, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
