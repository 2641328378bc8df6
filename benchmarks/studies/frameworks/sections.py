"""Each adapter's two tables (its long-lived turns, a fresh process's first turn), and the restart section's."""

from __future__ import annotations

import shutil
import statistics
import tempfile
import traceback
from collections.abc import Callable, Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks._scale_backend import KINDS
from benchmarks._tables import Report, Table
from benchmarks.studies.frameworks.adk_service import Adk
from benchmarks.studies.frameworks.base import Config, Harness
from benchmarks.studies.frameworks.langgraph_saver import LangGraph
from benchmarks.studies.frameworks.openai_session import OpenAiAgents
from benchmarks.studies.frameworks.pydantic_history import PydanticAi
from benchmarks.studies.frameworks.strands_manager import Strands
from benchmarks.studies.frameworks.turns import Length, Turn, run_framework

HARNESSES: dict[str, Callable[[], Harness]] = {
    "langgraph": LangGraph,
    "adk": Adk,
    "strands": Strands,
    "openai": OpenAiAgents,
    "pydantic-ai": PydanticAi,
}


# ---- output ----------------------------------------------------------------


def mean(values: Iterable[float]) -> float:
    return statistics.fmean(values)


def average(values: list[float] | list[int]) -> float | int:
    """The mean; an int when it is a whole number."""
    found = mean(values)
    return int(found) if found.is_integer() else round(found, 1)


def per_turn(turns: list[Turn], value: Callable[[Turn], float]) -> float | int:
    """The mean over the turns of ``value``."""
    return average([value(t) for t in turns])


def kinds_cell(turns: list[Turn]) -> str:
    """Requests per turn by kind, ``PUT/GET/HEAD/LIST/DELETE`` (means where the turns differ)."""
    return "/".join(str(average([t.kinds[kind] for t in turns])) for kind in KINDS)


def flat(values: list[float | int]) -> list[bool | None]:
    """Whether each length's figure is within 1 of the first length's."""
    return [abs(v - values[0]) <= 1 for v in values]


def tables(cfg: Config, harness: Harness, lengths: list[Length], summary: dict[str, Any]) -> list[Table]:
    columns = [f"{found.events:,} ev" for found in lengths]
    notes = [
        f"evstore over MemoryStore, {cfg.rtt * 1000:.0f} ms per request; {harness.native} on local disk, no delay (local I/O)",
        f"{cfg.turns} turns measured per length; session length = the evstore session's events before them",
        "requests exclude the amortized compaction requests (segment PUTs, DELETEs retiring segments), shown apart",
    ]
    warm = Table(f"{harness.title} -- vs {harness.native}", columns, notes)
    totals = [per_turn(f.turns, lambda t: t.requests) for f in lengths]
    warm.row("requests per turn", totals, "flat +-1", flat(totals))
    warm.row("  by kind P/G/H/L/D", [kinds_cell(f.turns) for f in lengths])
    warm.row(
        "  compaction P/D (amortized)",
        ["/".join(str(sum(t.compaction.get(k, 0) for t in f.turns)) for k in ("PUT", "DELETE")) for f in lengths],
    )
    rounds = [per_turn(f.turns, lambda t: t.round_trips) for f in lengths]
    warm.row("dependent round trips per turn", rounds)
    warm.row("ms per turn (evstore, 15 ms/req)", [mean(t.seconds for t in f.turns) * 1000 for f in lengths])
    warm.row(f"ms per turn ({harness.native})", [mean(f.native_seconds) * 1000 for f in lengths])

    cold_notes = [
        "a new adapter object over a new Store over a copy of the bucket, its construction included;",
        f"{harness.native}: a new one over a copy of its files",
    ]
    cold = Table(f"{harness.title} -- first turn of a fresh process", columns, cold_notes)
    fresh = [f.fresh for f in lengths if f.fresh is not None]
    cold_totals = [t.requests for t in fresh]
    cold.row("requests", cold_totals, "flat +-1", flat([float(v) for v in cold_totals]))
    cold.row("  by kind P/G/H/L/D", [kinds_cell([t]) for t in fresh])
    cold.row("  compaction P/D (amortized)", [f"{t.compaction.get('PUT', 0)}/{t.compaction.get('DELETE', 0)}" for t in fresh])
    cold.row("dependent round trips", [t.round_trips for t in fresh])
    cold.row("ms (evstore, 15 ms/req)", [t.seconds * 1000 for t in fresh])
    cold.row(f"ms ({harness.native})", [f.native_fresh_seconds * 1000 for f in lengths])
    replays = [sum(f.replay.values()) for f in lengths]
    cold.row("reference: store.replay of it all", replays)
    cold.row("  by kind P/G/H/L/D", ["/".join(str(f.replay[k]) for k in KINDS) for f in lengths])
    beyond = [total - replay for total, replay in zip(cold_totals, replays, strict=True)]
    cold.row("requests beyond that replay", beyond, "flat +-1", flat([float(v) for v in beyond]))
    compaction = summary["compaction"]
    cold.notes.append(
        f"the whole run: {summary['turns']:,} turns, {summary['events']:,} events; compaction requests"
        f" {compaction.get('PUT', 0)} PUT + {compaction.get('DELETE', 0)} DELETE ="
        f" {summary['compaction_per_turn']:.2f} per turn (amortized)"
    )
    return [warm, cold]


def section_adapter(cfg: Config, number: int, name: str, report: Report) -> list[str]:
    """One adapter's two tables (its long-lived turns, a fresh process's first turn); the names failed."""
    directory = Path(tempfile.mkdtemp(prefix=f"evstore-frameworks-{name}-"))
    try:
        harness = HARNESSES[name]()
        lengths, summary = run_framework(cfg, harness, directory)
        for table in tables(cfg, harness, lengths, summary):
            table.title = f"{number}. {table.title}"
            report.add(name, table)
        report.note(name, "summary", summary)
        report.note(name, "turns", [asdict(found) for found in lengths])
        return []
    except Exception:
        print(f"\n## {number}. {name}: FAILED\n{traceback.format_exc()}", flush=True)
        return [name]
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def section_restart(cfg: Config, number: int, adapters: list[str], report: Report) -> list[str]:
    """Every adapter again, its process restarted at each length (the first time at the first):
    the restarted objects' turns, their first turn, and a whole replay, one table."""
    columns = [f"{n:,}" for n in cfg.lengths]
    table = Table(
        f"{number}. after a process restart at each length (the first at {cfg.lengths[0]} events): requests",
        columns,
        [
            "as sections 1-5, but each fresh process goes on over the bucket itself as the long-lived one:",
            "a long-lived turn past the first length is the restarted process's, over the segments it wrote",
            f"columns: at least that many events; {cfg.rtt * 1000:.0f} ms per request; compaction requests left out",
        ],
    )
    failed: list[str] = []
    turns: dict[str, Any] = {}
    for name in adapters:
        directory = Path(tempfile.mkdtemp(prefix=f"evstore-frameworks-restart-{name}-"))
        try:
            lengths, _ = run_framework(cfg, HARNESSES[name](), directory, restart=True)
        except Exception:
            print(f"\n## {number}. restart, {name}: FAILED\n{traceback.format_exc()}", flush=True)
            failed.append(f"restart:{name}")
            continue
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        totals = [per_turn(f.turns, lambda t: t.requests) for f in lengths]
        table.row(f"{name}: long-lived turn", totals, "flat +-1", flat(totals))
        table.row(f"{name}: first turn of the process", [f.fresh.requests if f.fresh else 0 for f in lengths])
        table.row(f"{name}: store.replay of it all", [sum(f.replay.values()) for f in lengths])
        turns[name] = [asdict(found) for found in lengths]
    if table.rows:
        report.add("restart", table)
    report.note("restart", "turns", turns)
    return failed
