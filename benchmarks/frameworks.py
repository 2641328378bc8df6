"""evstore's framework adapters per agent turn: the benchmark of issue #29, beside each framework's own store.

    python benchmarks/frameworks.py [--quick] [--only SECTION ...] [--json FILE]

Sections (``--only``): langgraph, adk, strands, openai, pydantic-ai, restart. The
default run is every section (a few minutes); ``--quick`` measures at 10 and 300
events only, two turns each (under a minute).

One section per adapter (``evstore.integrations``), each driven through its
framework's public API with a canned model that answers every prompt with the
same text (no network, no real model):

* LangGraph ``EvstoreSaver``: a compiled graph (one node appending an AI
  message to a ``messages`` channel) and its ``invoke`` on one thread; beside
  ``SqliteSaver`` (langgraph-checkpoint-sqlite).
* Google ADK ``EvstoreSessionService``: a ``Runner`` over an ``LlmAgent``
  (``run_async``: get_session, append of the user event and of the model's
  event); beside ADK's ``SqliteSessionService``.
* Strands ``session_manager``: an ``Agent`` call (the session manager's hooks
  for the user message and the assistant message, and its agent syncs);
  beside ``FileSessionManager``.
* OpenAI Agents ``EvstoreSession``: ``Runner.run`` with the session (its
  get_items and add_items); beside the SDK's ``SQLiteSession``.
* Pydantic AI ``EvstoreHistory``: ``load``, ``Agent.run_sync(message_history=)``
  and ``save(result.new_messages())``, as the adapter's docstring shows; beside
  a JSON file of the whole history (``ModelMessagesTypeAdapter``, written to a
  temporary file, fsync'd and renamed over the old one).

A turn is what the framework does per agent turn in a long-lived process: one
object (saver, service, agent, session, history) makes every turn. The session
is grown until it holds at least 10, 300 and 1,500 evstore events (one per
framework event or record the adapter writes), the native store alike, and at
each length a few whole turns are measured; then a fresh process's first turn
is measured apart, from the construction of its objects on: a new adapter
object over a new ``Store`` over a copy of the bucket (the native store: a new
object over a copy of its files), so the long-lived objects go on over a
session that one process wrote. Section ``restart`` does it all again with
each fresh process going on over the bucket itself as the long-lived object
(a process restarted at each length): the segments a restarted writer leaves
are what later reads find. LangGraph and Strands grow by whole turns. Where the
framework's own CPU per turn grows with the history in both stores (ADK's
Runner, the OpenAI Runner, a Pydantic AI run over its history), the growth
makes a turn's writes through the same objects without its reads, so the run
stays within minutes: ADK ``append_event`` of the user's and the model's
event, OpenAI ``add_items`` of the input and of the output, Pydantic AI
``save`` of a run's new messages (the JSON file written once per stretch).

evstore runs over ``MemoryStore`` through ``benchmarks/_scale_backend.py``'s
``Recorder``, so the counts are exact:

* requests are counted by kind (PUT, GET, HEAD, LIST, DELETE) as the backend
  receives them; the PUTs of compaction segments (``segments/``, ``young/``)
  and the DELETEs of the segments they retire are amortized over many appends
  (about one PUT per 32 events): they are counted apart, not in the turn's
  requests, and shown as their own row and as a rate over the whole run;
* dependent round trips are the longest chain of requests each of which
  started after the one before it had ended, with 15 ms of delay per request
  (requests sent together overlap). CPU time between requests lengthens a
  chain as it would on S3, so it is an upper bound of the logical rounds;
* ms per turn is the wall time of the turn with that delay, the framework's
  own CPU included;
* beside a fresh process's first turn, the requests of ``store.replay`` of
  the whole session from a new ``Store`` (no delay), taken just before that
  turn over the same bucket: the floor of a framework that loads all of its
  history in a new process. It varies with the length as the fresh turn does:
  a GET per segment and per loose event after the newest one (up to 31 with
  the default compaction every 32), so where the session stands in the
  compaction cycle moves both.

The native stores run on local disk (a temporary directory) with no delay
added: their time is local I/O and the framework's CPU, no network. The same
machine, the same turns. Counts decide, times are printed beside them. A turn's
requests are "flat" when the count at every length is within 1 of the count
at 10 events; an adapter that is not flat is reported, never an error: the
script exits non-zero only when something fails.

A module of ``benchmarks/studies/frameworks/`` per framework's turn; how a session is grown and
measured is ``turns``, the tables ``sections``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks._harness import started_line  # noqa: E402
from benchmarks._tables import Report  # noqa: E402
from benchmarks.studies.frameworks.base import FULL, QUICK  # noqa: E402
from benchmarks.studies.frameworks.sections import section_adapter, section_restart  # noqa: E402

ADAPTERS = ["langgraph", "adk", "strands", "openai", "pydantic-ai"]
SECTIONS = [*ADAPTERS, "restart"]


def offline() -> None:
    """The environment the frameworks run in here: no telemetry exporter (Strands), no tracing and a
    dummy key (the OpenAI SDK: its client is never used). Set by ``main``, not on import."""
    os.environ.setdefault("OTEL_SDK_DISABLED", "true")
    os.environ.setdefault("OPENAI_API_KEY", "sk-dummy-no-network")
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 10 and 300 events, 2 turns each (under a minute)")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, metavar="SECTION", help=", ".join(SECTIONS))
    parser.add_argument("--json", type=Path, metavar="FILE", help="write every figure to FILE")
    args = parser.parse_args(argv)
    offline()
    cfg = QUICK if args.quick else FULL
    chosen = [s for s in SECTIONS if args.only is None or s in args.only]
    report = Report()
    failed: list[str] = []
    print(f"evstore framework adapters per turn ({'quick' if cfg.quick else 'full'}): {', '.join(chosen)}")
    print(started_line(1), flush=True)
    started = time.perf_counter()
    adapters = [name for name in chosen if name in ADAPTERS] or ADAPTERS  # restart alone: every adapter's
    for number, name in enumerate(chosen, 1):
        if name == "restart":
            section = functools.partial(section_restart, cfg, number, adapters, report)
        else:
            section = functools.partial(section_adapter, cfg, number, name, report)
        failed += report.timed(name, section)
    total = time.perf_counter() - started
    print(f"\ndone in {total:.1f} s; load average {os.getloadavg()[0]:.1f} at the end")
    if failed:
        print(f"failed: {', '.join(failed)}")
    if args.json:
        figures = {"config": asdict(cfg), "seconds": total, "failed": failed, "sections": report.sections}
        args.json.write_text(json.dumps(figures, indent=2, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
