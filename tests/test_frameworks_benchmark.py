"""benchmarks/frameworks.py (issue #29's per-turn benchmark): its recorder tells compaction
requests apart, and its quick run prints a table per adapter and writes every figure (well-formed;
no timing is checked)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.frameworks import ADAPTERS, SECTIONS
from benchmarks.studies.frameworks.turns import SegmentRecorder, is_segment, measure
from evstore import MemoryStore, Store

# one module-scoped run serves every test here: one xdist worker runs them all
pytestmark = pytest.mark.xdist_group("test_frameworks_benchmark")

REPO = Path(__file__).resolve().parents[1]
TITLES = {
    "langgraph": "LangGraph EvstoreSaver",
    "adk": "Google ADK EvstoreSessionService",
    "strands": "Strands session_manager",
    "openai": "OpenAI Agents EvstoreSession",
    "pydantic-ai": "Pydantic AI EvstoreHistory",
}
KINDS = ("PUT", "GET", "HEAD", "LIST", "DELETE")


def test_segment_keys_are_told_from_events_and_manifests() -> None:
    assert is_segment("root/sessions/s/segments/00000000000000000001-00000000000000001000")
    assert is_segment("sessions/s/young/99999999999999999743-00000000000000000001")
    assert not is_segment("sessions/s/00000000000000000032")
    assert not is_segment("sessions/s/manifest")


def test_a_turn_counts_compaction_apart_from_its_requests() -> None:
    """32 appends at the default settings: the 32nd writes a young segment, which the recorder
    counts as compaction and ``measure`` leaves out of the turn's requests (still in its rounds)."""
    recorder = SegmentRecorder(MemoryStore())
    writer = Store(recorder).open("s", create=True)
    for i in range(31):
        writer.append({"role": "user", "content": f"m{i}"})
    turn = measure(recorder, lambda: writer.append({"role": "user", "content": "m31"}))
    assert turn.compaction == {"PUT": 1}
    assert turn.kinds == {"PUT": 1, "GET": 0, "HEAD": 0, "LIST": 0, "DELETE": 0}
    assert turn.requests == 1 and turn.round_trips == 2
    assert recorder.compaction_total["PUT"] == 1


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, object]]:
    figures = tmp_path_factory.mktemp("frameworks") / "frameworks.json"
    command = [sys.executable, str(REPO / "benchmarks" / "frameworks.py"), "--quick", "--json", str(figures)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    return done.stdout, json.loads(figures.read_text())


@pytest.mark.slow
def test_quick_run_prints_a_table_per_adapter(quick_run: tuple[str, dict[str, object]]) -> None:
    stdout, _ = quick_run
    for number, name in enumerate(ADAPTERS, 1):
        assert f"## {number}. {TITLES[name]}" in stdout, (name, stdout[-3000:])
    assert stdout.count("-- first turn of a fresh process") == len(ADAPTERS)
    assert "FAILED" not in stdout
    assert stdout.count("requests per turn  ") == len(ADAPTERS)
    assert f"## {len(ADAPTERS) + 1}. after a process restart at each length" in stdout
    for name in ADAPTERS:
        assert f"{name}: long-lived turn" in stdout and f"{name}: first turn of the process" in stdout


def test_quick_run_writes_every_figure(quick_run: tuple[str, dict[str, object]]) -> None:
    _, saved = quick_run
    assert saved["failed"] == []
    sections = saved["sections"]
    assert isinstance(sections, dict) and set(sections) == set(SECTIONS)
    restart = sections["restart"]
    assert len(restart["tables"]) == 1 and len(restart["tables"][0]["rows"]) == 3 * len(ADAPTERS)
    assert set(restart["turns"]) == set(ADAPTERS)
    for name in ADAPTERS:
        section = sections[name]
        tables = section["tables"]
        assert len(tables) == 2, name
        for table in tables:
            assert len(table["columns"]) == 2  # 10 and 300 events
            assert table["rows"] and all(len(row["values"]) == len(table["columns"]) for row in table["rows"])
        flat = tables[0]["rows"][0]
        assert flat["name"] == "requests per turn" and flat["verdict"] in ("met", f"not met ({tables[0]['columns'][1]})")
        lengths = section["turns"]
        assert [found["events"] >= n for found, n in zip(lengths, (10, 300), strict=True)] == [True, True]
        for found in lengths:
            assert len(found["turns"]) == 2 and len(found["native_seconds"]) == 2
            assert set(found["replay"]) == set(KINDS) and found["replay"]["GET"] >= 1
            for turn in [*found["turns"], found["fresh"]]:
                assert set(turn["kinds"]) == set(KINDS) and all(n >= 0 for n in turn["kinds"].values())
                assert sum(turn["kinds"].values()) >= 1  # every turn writes
                assert 1 <= turn["round_trips"] <= sum(turn["kinds"].values()) + sum(turn["compaction"].values())
        summary = section["summary"]
        assert summary["events"] >= 300 and summary["turns"] >= 3
