"""By hand: how long ``import evstore`` takes next to ``import boto3``, in fresh processes.

    PYTHONPATH=$PWD python benchmarks/import_ratio.py [--runs 21]

Each round runs ``python -c pass``, ``python -c 'import evstore'`` and ``python -c 'import boto3'``
in a fresh interpreter each (the order rotates from round to round, so drift on a shared machine
falls on all three alike) and times the process's wall clock. It prints the medians and two
ratios: raw (interpreter start-up included in both) and net (the median of ``pass`` subtracted
from both: what the import itself adds). A measurement, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMANDS = {"pass": "pass", "evstore": "import evstore", "boto3": "import boto3"}


def wall(code: str, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="rounds (each runs all three once)")
    parser.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="compile evstore's modules on every run: remove evstore's __pycache__ directories first and set "
        "PYTHONDONTWRITEBYTECODE (by default it is unset for the children, so evstore's modules are compiled "
        "once and read from __pycache__ after, as an installed package's are; boto3's are cached either way)",
    )
    args = parser.parse_args()
    env = os.environ.copy()
    if args.no_bytecode_cache:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        spec = importlib.util.find_spec("evstore")  # finds the package without importing it
        assert spec is not None and spec.origin is not None
        for cache in Path(spec.origin).parent.rglob("__pycache__"):
            shutil.rmtree(cache)
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    names = list(COMMANDS)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for name in names:  # warm the file cache and the bytecode caches first; not counted
        wall(COMMANDS[name], env)
    for r in range(args.runs):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            samples[name].append(wall(COMMANDS[name], env))
    med = {name: statistics.median(values) for name, values in samples.items()}
    for name in names:
        print(f"python -c {COMMANDS[name]!r:<18} median {med[name] * 1000:7.1f} ms over {args.runs} runs")
    raw = med["evstore"] / med["boto3"]
    net = (med["evstore"] - med["pass"]) / (med["boto3"] - med["pass"])
    print(f"bytecode: {'compiled on every run' if 'PYTHONDONTWRITEBYTECODE' in env else 'cached (__pycache__)'}")
    print(f"ratio evstore/boto3, raw (start-up included): {raw:.2f}x")
    print(f"ratio evstore/boto3, net of `python -c pass`:  {net:.2f}x")


if __name__ == "__main__":
    main()
