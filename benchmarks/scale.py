"""evstore at scale: the yardstick of issue #27, "costs that stay flat as a session and a fleet grow".

    python benchmarks/scale.py [--quick] [--only SECTION ...] [--json FILE]

Sections (``--only``): resume, latency, open, fork, storage, gc, gc-million, list, tail, async,
import, fleet-verify.
The default run is every section; ``--quick`` is a small smoke run (under a minute).

Everything is measured through evstore's public API (``Store``, ``AsyncStore``,
``MemoryStore``, ``LocalStore``) over backends that implement the public
``ObjectStore`` interface (``benchmarks/_scale_backend.py``):

* requests are counted by kind (PUT, GET, HEAD, LIST, DELETE) as the backend
  receives them (a ``delete_many`` counts the DELETE requests it reports);
* dependent round trips are the longest chain of requests each of which
  started after the one before it had ended, with a fixed delay per request
  (printed per section) so that requests sent together overlap in time. CPU
  time between requests lengthens a chain as it would on S3, so the count is
  an upper bound of the logical rounds, closer to it the larger the delay;
* bytes downloaded are GET bodies plus LIST responses estimated at
  ``LIST_BYTES_PER_KEY`` (250) bytes per key listed and ``LIST_ENVELOPE_BYTES``
  (300) per page, about what S3's ListObjectsV2 XML takes;
* peak memory is tracemalloc's peak (Python allocations) during the call, in
  this process, the store's objects already in memory (so not counted), each
  GET's body a copy (``Copying``), as a read from the network allocates it.

Sessions of many events are written once per kind of message by appends with
the default settings (auto compaction on) into an in-memory bucket; a session
of n events is then that bucket's first objects in creation order up to the
n-th append: the very objects n appends wrote, byte for byte. Wall times are
printed beside the counts; the counts decide. Each "wanted" figure is issue
#27's; a figure not met is reported, never an error: the script exits non-zero
only when something fails.

Each section is a module of ``benchmarks/studies/scale/``, its sizes and sessions in ``setup``;
the tables are ``benchmarks/_tables.py``'s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks._harness import started_line  # noqa: E402
from benchmarks._tables import Report  # noqa: E402
from benchmarks.studies.scale import (  # noqa: E402
    async_appends,
    fleet_verify,
    forks,
    gc_fleet,
    imports,
    latency,
    listing,
    open_writer,
    resume,
    storage,
    tail,
)
from benchmarks.studies.scale.setup import FULL, QUICK, Bulk  # noqa: E402

SECTIONS = ["resume", "latency", "open", "fork", "storage", "gc", "gc-million", "list", "tail", "async", "import", "fleet-verify"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a small smoke run (under a minute)")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, metavar="SECTION", help=", ".join(SECTIONS))
    parser.add_argument("--json", type=Path, metavar="FILE", help="write every figure to FILE")
    args = parser.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    chosen = [s for s in SECTIONS if args.only is None or s in args.only]
    needs: dict[str, set[int]] = {"short": set(), "1KiB": set(cfg.resume_kib)}
    if {"resume", "latency", "open"} & set(chosen):
        needs["short"] |= set(cfg.resume_short)
    if "tail" in chosen:
        needs["short"] |= set(cfg.tail_sizes)
    bulk = Bulk(needs)
    report = Report()
    print(f"evstore scale benchmark ({'quick' if cfg.quick else 'full'}): {', '.join(chosen)}")
    print(started_line(1), flush=True)
    started = time.perf_counter()
    runners: dict[str, Callable[[], None]] = {
        "resume": lambda: resume.section_resume(cfg, bulk, report),
        "latency": lambda: latency.section_latency(cfg, bulk, report),
        "open": lambda: open_writer.section_open(cfg, bulk, report),
        "fork": lambda: forks.section_fork(cfg, report),
        "storage": lambda: storage.section_storage(cfg, report),
        "gc": lambda: gc_fleet.section_gc(cfg, report),
        "gc-million": lambda: gc_fleet.section_gc_million(cfg, report),
        "list": lambda: listing.section_list(cfg, report),
        "tail": lambda: tail.section_tail(cfg, bulk, report),
        "async": lambda: async_appends.section_async(cfg, report),
        "import": lambda: imports.section_import(cfg, report),
        "fleet-verify": lambda: fleet_verify.section_fleet_verify(cfg, report),
    }
    for name in chosen:
        report.timed(name, runners[name])
    total = time.perf_counter() - started
    print(f"\ndone in {total:.1f} s; load average {os.getloadavg()[0]:.1f} at the end")
    if args.json:
        figures = {"config": asdict(cfg), "seconds": total, "setup_seconds": bulk.seconds, "sections": report.sections}
        args.json.write_text(json.dumps(figures, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
