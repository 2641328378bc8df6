"""What every benchmark measures with: timing, medians and ratios, interleaved rounds, request
counting on boto3 clients, children in fresh processes, and the lines that say where a run ran.

Not a public interface. A figure compared against another is measured side by side: the
contenders run in rounds, one run each per round, in an order that alternates (``alternating``)
so that none always goes first; each figure is then the median over the rounds.
"""

from __future__ import annotations

import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parent.parent
CHILD = str(REPO / "benchmarks" / "_child.py")
T = TypeVar("T")


# ---- figures -----------------------------------------------------------------


def median(values: Iterable[float]) -> float:
    return float(statistics.median(list(values)))


def ratio(a: float, b: float) -> float:
    return a / b if b else float("inf")


# ---- interleaved rounds --------------------------------------------------------


def alternating(order: Sequence[T], round_: int) -> Sequence[T]:
    """``order`` in even rounds, reversed in odd ones: no contender always goes first."""
    return order if round_ % 2 == 0 else order[::-1]


def rounds_of(calls: Mapping[str, Callable[[], T]], rounds: int) -> dict[str, list[T]]:
    """What each call returns, once per round, the calls in alternating order."""
    got: dict[str, list[T]] = {name: [] for name in calls}
    for r in range(rounds):
        for name in alternating(list(calls), r):
            got[name].append(calls[name]())
    return got


def timed_rounds(calls: Mapping[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """The wall time of each call, once per round, the calls in alternating order."""

    def timer(call: Callable[[], object]) -> Callable[[], float]:
        def run() -> float:
            started = time.perf_counter()
            call()
            return time.perf_counter() - started

        return run

    return rounds_of({name: timer(call) for name, call in calls.items()}, rounds)


def total(counter: Mapping[str, int]) -> int:
    return sum(counter.values())


@dataclass
class Variant:
    """One contender in a side-by-side measurement: ``run`` is timed, ``counter`` diffed around it."""

    name: str
    run: Callable[[], object]
    counter: Counter[str]
    times: list[float] = field(default_factory=list)
    requests: list[Counter[str]] = field(default_factory=list)

    @property
    def median(self) -> float:
        return median(self.times)

    @property
    def typical_requests(self) -> Counter[str]:
        """The per-run request count of the median-total run (they are normally all equal)."""
        ordered = sorted(self.requests, key=total)
        return ordered[len(ordered) // 2]

    def raw(self) -> dict[str, Any]:
        return {"seconds": self.times, "requests": [dict(r) for r in self.requests]}


def interleave(variants: list[Variant], rounds: int) -> None:
    """Run every variant once per round, in alternating order; record each run's time and requests."""
    for r in range(rounds):
        for variant in alternating(variants, r):
            before = Counter(variant.counter)
            started = time.perf_counter()
            variant.run()
            variant.times.append(time.perf_counter() - started)
            variant.requests.append(Counter(variant.counter) - before)


# ---- requests on boto3 clients ---------------------------------------------------


def count_requests(events: Any, counter: Counter[str] | None = None) -> Counter[str]:
    """Count the HTTP requests sent through a boto3 event system (``client.meta.events``, or a
    session's ``events``: every client made from it later), by operation, retries included, as
    ``S3Store.requests`` does."""
    counter = Counter() if counter is None else counter

    def count(**kwargs: Any) -> None:
        counter[str(kwargs.get("event_name", "")).rsplit(".", 1)[-1]] += 1

    events.register("before-send.s3", count)
    keep = getattr(events, "_bench_keepalive", None)
    if keep is None:
        keep = []
        events._bench_keepalive = keep  # the event system holds handlers weakly
    keep.append(count)
    return counter


def describe(counter: Mapping[str, int]) -> str:
    """``3 GET 1 PUT``-style: the counts by operation, boto3's names shortened."""
    names = {"PutObject": "PUT", "GetObject": "GET", "HeadObject": "HEAD", "ListObjectsV2": "LIST", "DeleteObjects": "DEL"}
    return " ".join(f"{v} {names.get(k, k)}" for k, v in sorted(counter.items()) if v) or "0"


def requests_cell(counter: Mapping[str, int]) -> str:
    """``3 (2 GET 1 LIST)``: the requests in all, and by operation."""
    return f"{total(counter)} ({describe(counter)})"


# ---- children in fresh processes --------------------------------------------------


def json_child(
    command: list[str], what: str, *, timeout: float, env: Mapping[str, str] | None = None, cwd: Path | str = REPO
) -> dict[str, Any]:
    """Run ``command`` (a fresh interpreter) and return the JSON object on its last line of output;
    RuntimeError with the end of its stderr when it fails."""
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, env=None if env is None else dict(env), cwd=cwd, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"child {what} failed: {done.stderr.strip()[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def run_child(command: str, args: dict[str, Any], timeout: float = 900) -> dict[str, Any]:
    """One of ``benchmarks/_child.py``'s measurements, in a fresh process."""
    return json_child([sys.executable, CHILD, command, json.dumps(args)], command, timeout=timeout)


def export_evstore(commit: str, into: Path | str) -> Path:
    """The ``evstore/`` package of ``commit`` (``git archive``), unpacked under ``into``: a tree to
    measure that edits in the working tree cannot reach."""
    data = subprocess.run(["git", "-C", str(REPO), "archive", commit, "evstore"], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        archive.extractall(into, filter="data")
    return Path(into)


# ---- where a run ran ------------------------------------------------------------------


def load_average() -> tuple[float, float, float]:
    return os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg": load_average(),
    }


def started_line(digits: int, load: float | None = None) -> str:
    """``python 3.11.2, 2 CPUs, load average 0.52 at start``: the load to ``digits`` places, now's unless
    ``load`` gives the one read when the run started."""
    load = load_average()[0] if load is None else load
    return f"python {platform.python_version()}, {os.cpu_count()} CPUs, load average {load:.{digits}f} at start"
