"""Section 9: import evstore against import boto3, in fresh processes."""

from __future__ import annotations

import functools
import os
import statistics
import subprocess
import sys

from benchmarks._harness import REPO, rounds_of
from benchmarks._tables import Report, Table
from benchmarks.studies.scale.setup import Config, ms


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    return env


def import_seconds(module: str) -> float:
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    done = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, check=True, timeout=120)
    return float(done.stdout.split()[-1])


def section_import(cfg: Config, report: Report) -> None:
    times = rounds_of({module: functools.partial(import_seconds, module) for module in ("evstore", "boto3")}, cfg.import_runs)
    e, b = statistics.median(times["evstore"]), statistics.median(times["boto3"])
    table = Table(
        "9. import time in fresh processes",
        ["ms"],
        [f"median of {cfg.import_runs}, interleaved; time of the import statement itself (interpreter start excluded)"],
    )
    table.row("import evstore", [ms(e)])
    table.row("import boto3", [ms(b)])
    table.row("evstore / boto3", [e / b], "<= 0.5x", [e / b <= 0.5])
    report.add("import", table)
