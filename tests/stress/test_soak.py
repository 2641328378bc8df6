"""The soak (``python -m tests.stress.soak``) at a tiny scale, so its code stays honest in CI: the
full command runs against moto with faults and SIGKILLs, and its audit finds nothing lost,
duplicated, corrupt or unexpected."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

import pytest

from .conftest import Figures
from .soak import SOAK_FAULTS, SoakConfig, main, run

pytestmark = pytest.mark.stress


def test_a_tiny_soak_against_moto_faults_and_kills_writers_and_audits_clean(tmp_path: Path, figures: Figures) -> None:
    config = SoakConfig(
        server="moto",
        appends=200,
        writers=3,
        sessions=6,  # two own sessions per writer: the many-sessions layout too
        batch=40,
        fault_rate=0.1,
        kill_interval=1.5,
        timeout=600,  # a bound on the writing phase, not a speed assertion: a loaded machine is slow
        seed=7,
        workdir=str(tmp_path),
    )
    out = io.StringIO()
    result = run(config, out=out, figures=figures)
    printed = out.getvalue()
    assert (result.lost, result.duplicated, result.corrupt, result.unexpected) == (0, 0, 0, 0), printed
    assert result.writer_errors == [], printed
    assert result.acked >= 200 and result.target_reached, printed
    assert result.ok, printed
    assert result.kills >= 1, printed  # writer processes really died by SIGKILL and were restarted
    assert result.lives > 3, printed
    assert set(result.faults) == {fault.value for fault in SOAK_FAULTS}, printed  # every kind was injected
    assert result.audited_sessions == 7 and result.audited_events >= result.acked, printed
    assert "lost: 0, duplicated: 0, corrupt: 0, unexpected: 0" in printed
    figures.add(process_writers=result.lives, crashes=result.kills)
    figures.add_faults(Counter(result.faults))


def test_the_soak_command_refuses_a_layout_it_cannot_run() -> None:
    with pytest.raises(SystemExit, match="sessions >= writers"):
        main(["--server", "moto", "--writers", "4", "--sessions", "2"])
