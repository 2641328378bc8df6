"""evstore benchmarks: every figure of BENCHMARKS.md, from one command.

    python benchmarks/run.py [--quick] [--only NAME ...] [--json FILE]

Sections (``--only``): append, growth, open, replay, fork, gc, crypto, import, autocompact, memory.

Runs against a moto S3 server that this script starts on 127.0.0.1 (in a
process of its own, so that client and server do not share one GIL;
``--moto-in-process`` runs it in this process instead), over loopback HTTP, or against the endpoint named by
``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_S3``. Absolute times are moto's (a
Python server sharing the machine with the client); the figures that carry
over to real S3 are the request counts and the ratios, which are measured side
by side: the compared variants run interleaved, in rounds whose order
alternates, and each figure is the median over rounds.

Bulk setup (sessions of thousands of events that are not themselves being
timed) is written by evstore into a MemoryStore and then copied byte for byte
into the bucket: straight into moto's backend when this script owns the
server (through the server process's setup channel, see _moto_server.py),
else by parallel PUTs. The objects are exactly what appends would
have written; only the setup is faster.

Each section is a module of ``benchmarks/studies/run/``; the endpoint and the bulk setup are
``benchmarks/_s3env.py``'s, the rounds and the children ``benchmarks/_harness.py``'s.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks._harness import load_average, machine, started_line  # noqa: E402
from benchmarks._s3env import Env  # noqa: E402
from benchmarks._tables import TextTable  # noqa: E402
from benchmarks.studies.run import (  # noqa: E402
    append,
    autocompact,
    cold_open,
    crypto,
    forks,
    gc_bucket,
    growth,
    imports,
    memory,
    replay,
)
from benchmarks.studies.run.config import FULL, QUICK, Config, Results, Target  # noqa: E402

SECTIONS = ["append", "growth", "open", "replay", "fork", "gc", "crypto", "import", "autocompact", "memory"]
BENCHES: dict[str, Callable[[Env, Config, list[Target]], Results]] = {
    "append": append.bench_append,
    "growth": growth.bench_growth,
    "open": cold_open.bench_open,
    "replay": replay.bench_replay,
    "fork": forks.bench_fork,
    "gc": gc_bucket.bench_gc,
    "crypto": crypto.bench_crypto,
    "import": imports.bench_import,
    "autocompact": autocompact.bench_autocompact,
    "memory": memory.bench_memory,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test in under 2 minutes")
    parser.add_argument(
        "--only", nargs="+", choices=SECTIONS, metavar="NAME", help=f"run only these sections: {', '.join(SECTIONS)}"
    )
    parser.add_argument("--json", metavar="FILE", help="save the raw figures here")
    parser.add_argument(
        "--moto-stock-list",
        action="store_true",
        help="keep moto's own ListObjectsV2 (it scans the whole bucket per request) instead of the page-proportional one",
    )
    parser.add_argument(
        "--moto-in-process",
        action="store_true",
        help="run moto's server in this process (one GIL with the client) instead of in a process of its own",
    )
    args = parser.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    chosen = args.only or SECTIONS
    env = Env(cfg.segment_size, stock_list=args.moto_stock_list, in_process=args.moto_in_process)
    info = machine()
    print(
        f"# evstore benchmarks ({'quick' if cfg.quick else 'full'}) against {env.endpoint}"
        + {"thread": " (moto, in this process)", "process": " (moto, in a process of its own)"}.get(env.server_mode, "")
    )
    print(started_line(2))
    results: dict[str, Any] = {
        "machine": info,
        "mode": "quick" if cfg.quick else "full",
        "endpoint_is_moto": bool(env.server_mode),
        "moto_server_mode": env.server_mode,
        "moto_page_proportional_list": env.fast_list,
    }
    if env.fast_list:
        print("moto's ListObjectsV2 replaced by a page-proportional one (same answers: checked at startup)")
    targets: list[Target] = []
    started = time.perf_counter()
    try:
        for name in SECTIONS:
            if name in chosen:
                t0 = time.perf_counter()
                results[name] = BENCHES[name](env, cfg, targets)
                results[name + "_seconds"] = time.perf_counter() - t0
                print(f"({name}: {time.perf_counter() - t0:.0f} s)")
    finally:
        env.close()
    table = TextTable("targets", ["section", "figure", "measured", "target", "met"])
    for t in targets:
        table.add(t.section, t.name, t.figure, t.target, "yes" if t.met else "NO")
    table.show()
    results["targets"] = [t.__dict__ for t in targets]
    results["seconds"] = time.perf_counter() - started
    results["machine"]["loadavg_end"] = load_average()
    print(f"\ntotal {results['seconds']:.0f} s; load average at the end {results['machine']['loadavg_end'][0]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
