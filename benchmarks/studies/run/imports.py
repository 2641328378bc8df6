"""Section import: import evstore against import boto3, and open_store against boto3.client, in fresh interpreters."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Callable

from benchmarks._harness import median, ratio, rounds_of, run_child
from benchmarks._s3env import Env
from benchmarks._tables import TextTable
from benchmarks.studies.run.config import Config, Results, Target, ms


def importtime(statement: str, module: str) -> float:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", statement],
        capture_output=True,
        text=True,
        check=True,
        cwd=tempfile.gettempdir(),
    )
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[2].strip() == module and not parts[2].startswith("  "):
            return int(parts[1]) / 1e6
    raise RuntimeError(f"no importtime line for {module}")


def bench_import(env: Env, cfg: Config, targets: list[Target]) -> Results:
    boto3_loaded: list[bool] = []
    calls: dict[str, Callable[[], float]] = {
        "import evstore": lambda: importtime("import evstore", "evstore"),
        "import boto3": lambda: importtime("import boto3", "boto3"),
        "evstore + open_store(s3://)": lambda: _wall("evstore", boto3_loaded),
        "boto3 + client('s3')": lambda: _wall("boto3", []),
    }
    samples = rounds_of(calls, cfg.import_runs)
    med = {k: median(v) for k, v in samples.items()}
    r1 = ratio(med["import evstore"], med["import boto3"])
    r2 = ratio(med["evstore + open_store(s3://)"], med["boto3 + client('s3')"])
    table = TextTable(
        f"import time, fresh interpreter, median of {cfg.import_runs} (-X importtime cumulative; wall for the open rows)",
        ["what", "median", "ratio"],
    )
    table.add(
        "import evstore", ms(med["import evstore"]), f"{ratio(med['import evstore'], med['import boto3']):.2f}x of import boto3"
    )
    table.add("import boto3", ms(med["import boto3"]), "1.00x")
    table.add(
        "import evstore; open_store('s3://b')",
        ms(med["evstore + open_store(s3://)"]),
        f"{r2:.2f}x of the boto3 row",
    )
    table.add("import boto3; boto3.client('s3')", ms(med["boto3 + client('s3')"]), "1.00x")
    table.show()
    targets.append(Target("import", "import evstore vs import boto3", f"{r1:.2f}x", "<= 1.15x", r1 <= 1.15))
    targets.append(Target("import", "evstore + open_store(s3) vs boto3 + client", f"{r2:.2f}x", "<= 1.15x", r2 <= 1.15))
    return {"samples": samples, "ratio_import": r1, "ratio_open": r2, "open_store_loaded_boto3": all(boto3_loaded)}


def _wall(which: str, sink: list[bool]) -> float:
    got = run_child("import_wall", {"which": which})
    sink.append(bool(got["boto3_loaded"]))
    return float(got["seconds"])
