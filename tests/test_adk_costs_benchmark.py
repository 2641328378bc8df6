"""benchmarks/adk_costs.py (issue 29's ADK cells): its quick run prints every row with a count per
column and a verdict (well-formed; no timing is shown or checked)."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("google.adk")

from benchmarks import adk_costs


@pytest.mark.slow
def test_the_quick_run_prints_a_count_per_column_and_a_verdict_for_every_row(capsys: pytest.CaptureFixture[str]) -> None:
    assert adk_costs.main(["--quick"]) == 0
    out = capsys.readouterr().out
    labels = [label for label, *_ in adk_costs.rows()] + ["list_sessions, new process", "list_sessions, long-lived"]
    for label in labels:
        line = next(line for line in out.splitlines() if line.startswith(label))
        cells = re.findall(r"(\d+) \((\d+)/(\d+)/(\d+)/(\d+)/(\d+)\)", line)
        assert len(cells) == 2, line
        assert all(int(total) == sum(map(int, kinds)) for total, *kinds in cells), line
        assert "reference" in label or line.rstrip().endswith("met"), line
