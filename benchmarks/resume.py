"""Resume and append under S3-like latency: evstore against Strands' session managers, side by side.

    python benchmarks/resume.py [--quick] [--delays 15,50] [--sizes 100,1000,10000] [--json FILE]
                                [--server auto|rgw|moto|external] [--evstore-at REV|worktree]
    python benchmarks/resume.py --report-from FILE

evstore is measured as of a commit (default HEAD: its ``evstore/`` extracted
with ``git archive``), so that edits in the working tree cannot reach a run;
``--evstore-at worktree`` measures the checkout as it is.

Every request goes through ``benchmarks/latency_proxy.py``, which adds a fixed
delay per request (requests overlap, as on S3), counts them and measures the
longest chain of dependent requests (the "dependent round trips"). Behind the
proxy is Ceph RGW when it is installed (``infra/rgw.py`` starts a throwaway
one), else moto in a process of its own, else the endpoint named by
``AWS_ENDPOINT_URL`` (``--server`` chooses); the output says which.

**Resume**: a fresh process, its client already made, opens a session of N
messages, gets the context it would send to a model and appends one message:

* evstore with its defaults (a session written by ``Store()`` as it is; read
  with ``Store.resume`` when the library has it, else ``open()`` + ``context()``);
* evstore after ``Store.compact`` (whole session in segments) and uncompacted
  (loose events only), read with ``open()`` + ``context()``;
* Strands' ``S3SessionManager`` (one object per message): the manager is made
  (it reads the session), ``initialize(agent)`` restores the messages, and
  ``append_message`` writes one;
* Strands' ``SnapshotSessionManager`` over ``S3Storage`` (one object for the
  whole agent): ``initialize(agent)`` restores it, ``sync_agent`` saves it
  with the new message.

Reported per size and delay: requests, dependent round trips, time and time ÷
delay (round trips' worth), client CPU, and the time that is not latency
(time - dependent round trips x delay: the client's CPU, the server's own time
and the transfer), which should come out the same at both delays.

**Append** (in this process, warm clients, through the proxy): evstore's
``Session.append`` at N against a raw conditional PUT of the same bytes
(``put_object(IfNoneMatch="*")`` on the same client) and against a Strands
snapshot save of an agent holding N messages, interleaved rounds, medians.

Setup writes each session straight to the server (not through the proxy),
built in memory first and copied in parallel (``benchmarks/_s3env.py``'s ``Env``).
After each resume the session is put back as it was set up (the appended
object removed, a rewritten one restored; directly, not through the proxy),
so every resume meets exactly N messages.

The pieces are ``benchmarks/studies/resume/``'s: the plan, the evstore ``source``, Strands' sessions,
the resuming ``child``, the ``bench`` and the ``report``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.studies.resume.source import SOURCE_ENV, evstore_source  # noqa: E402

if os.environ.get(SOURCE_ENV):  # a child: the evstore being measured, found ahead of the checkout's
    sys.path.insert(0, os.environ[SOURCE_ENV])

from benchmarks._harness import started_line  # noqa: E402
from benchmarks.studies.resume.bench import Bench  # noqa: E402
from benchmarks.studies.resume.child import child  # noqa: E402
from benchmarks.studies.resume.plan import BIG, CLIENT_CORES, FEW_REQUESTS, FULL, QUICK, Plan, variants_at  # noqa: E402
from benchmarks.studies.resume.report import Figures  # noqa: E402


def parse_list(text: str, kind: Callable[[str], Any]) -> tuple[Any, ...]:
    try:
        values = tuple(kind(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive numbers: {text!r}")
    return values


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a smoke run: sizes 100 and 1,000, one round")
    parser.add_argument("--delays", type=lambda t: parse_list(t, float), help="delays per request in ms (default 15,50)")
    parser.add_argument("--sizes", type=lambda t: parse_list(t, int), help="session lengths in messages")
    parser.add_argument("--rounds", type=int, help="resume rounds per cell (default 3; 1 with --quick)")
    parser.add_argument("--big-rounds", type=int, help=f"resume rounds for sizes of {BIG:,} and more (default 1)")
    parser.add_argument(
        "--few-request-rounds",
        type=int,
        help=f"resume rounds at every size for {', '.join(FEW_REQUESTS)} (default 9; with --quick as --rounds)",
    )
    parser.add_argument("--append-rounds", type=int, help="append rounds per cell (default 30; 5 with --quick)")
    parser.add_argument(
        "--amortized-appends", type=int, help="appends to a new session for requests per append (default 2048; 256 quick)"
    )
    parser.add_argument("--server", choices=("auto", "rgw", "moto", "external"), default="auto")
    parser.add_argument(
        "--evstore-at",
        default="HEAD",
        metavar="REV",
        help="measure evstore as of this commit (default HEAD; 'worktree': the checkout as it is, uncommitted edits too)",
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="run each resuming client on core 0 and everything else (server, proxy) on the other cores, "
        "so that the server's work does not take the client's CPU, as with a remote S3",
    )
    parser.add_argument("--json", metavar="FILE", help="save every sample here")
    parser.add_argument("--report-from", metavar="FILE", help="print the tables from a --json file of an earlier run")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    return parser


def plan_of(args: argparse.Namespace) -> Plan:
    """The quick or full plan, with what the command line sets instead."""
    plan = QUICK if args.quick else FULL
    return dataclasses.replace(
        plan,
        sizes=args.sizes or plan.sizes,
        delays_ms=args.delays or plan.delays_ms,
        rounds=args.rounds or plan.rounds,
        big_rounds=args.big_rounds or plan.big_rounds,
        append_rounds=args.append_rounds or plan.append_rounds,
        amortized_appends=args.amortized_appends or plan.amortized_appends,
        few_request_rounds=args.few_request_rounds or plan.few_request_rounds,
        pinned=args.pin,
    )


def pin_off_the_client_cores() -> None:
    """--pin: this process, the proxy's threads and the servers it starts, on the cores the resuming clients are not."""
    cores = os.sched_getaffinity(0) - CLIENT_CORES
    if not cores or not os.sched_getaffinity(0) >= CLIENT_CORES:
        raise SystemExit("--pin needs core 0 and at least one other core")
    os.sched_setaffinity(0, cores)


def print_heading(bench: Bench, plan: Plan, quick: bool, measured: str, load: float) -> None:
    print(f"# Resume under latency ({'quick' if quick else 'full'})")
    print(f"server: {bench.server}")
    print(f"proxy: {bench.proxy.endpoint}; delays {', '.join(f'{d:g} ms' for d in plan.delays_ms)}; sizes {plan.sizes}")
    print(
        f"evstore: {measured}; Store.resume: {'yes' if bench.has_resume else 'no'}; "
        f"Store(auto_compact) default: {bench.auto_compact_default}"
    )
    print(started_line(2, load), flush=True)
    if plan.pinned:
        others = sorted(os.sched_getaffinity(0))
        print(f"pinned: each resuming client on core(s) {sorted(CLIENT_CORES)}; server, proxy and appends on {others}")


def measure(bench: Bench, plan: Plan) -> None:
    """Every size's resumes (its sessions set up first), then the appends per delay and size, then the amortized appends."""
    for n in plan.sizes:
        bench.setup(n)
        for kind in variants_at(n):
            if kind.startswith("evstore"):
                print(f"  {kind} at {n:,}: {bench.layout_notes[(kind, n)]}")
        bench.bench_resume(n)
    for d in plan.delays_ms:
        for n in plan.sizes:
            bench.bench_append(n, d)
    bench.bench_amortized(plan.amortized_appends)


def main(argv: list[str] | None = None) -> int:
    args = arguments().parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))), flush=True)
        return 0
    if args.report_from:
        print(Figures.from_json(json.loads(Path(args.report_from).read_text())).report())
        return 0
    plan = plan_of(args)
    if plan.pinned:
        pin_off_the_client_cores()
    # SIGTERM, and SIGINT even where a background start ignored it, end the run through its cleanup
    # (the proxy, moto's process, RGW's daemons)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    started = time.perf_counter()
    load = os.getloadavg()[0]
    source, measured = evstore_source(args.evstore_at)
    try:
        bench = Bench(plan, args.server)
    except BaseException:
        if source:
            shutil.rmtree(source, ignore_errors=True)
        raise
    try:
        print_heading(bench, plan, args.quick, measured, load)
        measure(bench, plan)
        print()
        print(bench.figures.report())
        print(f"\ntotal {time.perf_counter() - started:.0f} s; load average at the end {os.getloadavg()[0]:.2f}")
        if args.json:
            Path(args.json).write_text(
                json.dumps(
                    {"server": bench.server, "evstore": measured, **bench.figures.as_json()},
                    indent=1,
                )
            )
    finally:
        bench.close()
        if source:
            shutil.rmtree(source, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
