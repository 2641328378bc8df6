"""benchmarks/plot_costs.py (issue 48's plot): a tiny run writes the PNG and the figures it plotted, and
the figures grow as the two stores' designs say they must: evstore's append flat in requests and
bytes at every length, the snapshot's append a PUT of the whole session (no timing is checked)."""

from __future__ import annotations

import json
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import pytest

# one module-scoped run serves every test here: one xdist worker runs them all
pytestmark = pytest.mark.xdist_group("test_plot_benchmark")

pytest.importorskip("matplotlib")

REPO = Path(__file__).resolve().parents[1]
SIZES = [10, 100, 1000]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object], str]:
    folder = tmp_path_factory.mktemp("plot")
    png, figures = folder / "cost.png", folder / "cost.json"
    command = [sys.executable, str(REPO / "benchmarks" / "plot_costs.py"), "--sizes", ",".join(map(str, SIZES))]
    command += ["--rounds", "1", "--delay-ms", "1", "--out", str(png), "--json", str(figures)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    return png, json.loads(figures.read_text()), done.stdout


@pytest.mark.slow
def test_the_plot_is_written_as_a_png(tiny_run: tuple[Path, dict[str, object], str]) -> None:
    png, _, stdout = tiny_run
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot: {png}" in stdout


def test_the_figures_plotted_are_printed_and_saved_for_every_length(tiny_run: tuple[Path, dict[str, object], str]) -> None:
    _, saved, stdout = tiny_run
    assert saved["sizes"] == SIZES
    figures = saved["figures"]
    assert isinstance(figures, dict)
    for store in ("evstore", "snapshot"):
        for operation in ("resume", "append"):
            got = figures[store][operation]
            for name in ("requests", "requests_mean", "round_trips", "bytes_down", "bytes_up", "ms"):
                assert len(got[name]) == len(SIZES), (store, operation, name)
            assert all(v > 0 for v in got["ms"]), (store, operation)
            assert f"{store}: requests" in stdout
    assert "## resume cost against session length" in stdout and "## append cost against session length" in stdout


@pytest.mark.slow
def test_evstores_append_is_flat_and_the_snapshots_grows_with_the_session(
    tiny_run: tuple[Path, dict[str, object], str],
) -> None:
    _, saved, _ = tiny_run
    figures = saved["figures"]
    assert isinstance(figures, dict)
    evstore, snapshot = figures["evstore"]["append"], figures["snapshot"]["append"]
    # one PUT of one event at every length; the mean carries the amortized compaction, within a few percent
    assert evstore["requests"] == [1, 1, 1] and evstore["round_trips"] == [1, 1, 1]
    assert all(1 <= mean <= 1.2 for mean in evstore["requests_mean"]), evstore["requests_mean"]
    assert max(evstore["bytes_up"]) < 2 * min(evstore["bytes_up"]) < 4096
    # one PUT too, but of every message: its bytes grow with the length (about 10x per 10x)
    assert snapshot["requests"] == [1, 1, 1]
    growth = [b / a for a, b in pairwise(snapshot["bytes_up"])]
    assert all(g > 5 for g in growth), snapshot["bytes_up"]
    assert snapshot["bytes_up"][-1] > 1000 * 1024  # 1,000 messages of 1 KiB
    # a resume reads the whole session from both (evstore's segments compressed): the snapshot in one GET
    assert figures["snapshot"]["resume"]["requests"] == [1, 1, 1]
    for store in ("evstore", "snapshot"):
        read = figures[store]["resume"]["bytes_down"]
        assert all(b > 3 * a for a, b in pairwise(read)), (store, read)
