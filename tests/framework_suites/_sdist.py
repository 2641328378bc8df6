"""Fetch a framework's published source distribution at test time and run its own tests in a
subprocess with one of our substitution plugins (nothing of theirs is committed here).

The sdist of exactly the installed version is downloaded with ``pip download --no-binary
:all: --no-deps NAME==VERSION`` into a cache (``$EVSTORE_SDIST_CACHE``, else the system
temporary directory) and its ``tests/`` tree and ``pyproject.toml`` (their pytest settings)
extracted; the installed package is what runs. Without network the test is skipped with the
reason, unless ``CI`` is set: then it fails.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

import evstore

HERE = Path(__file__).resolve().parent
DOWNLOAD_TIMEOUT = 300  # seconds: pip may also fetch the sdist's build backend to read its metadata
RUN_TIMEOUT = 600


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _unavailable(reason: str) -> None:
    if _in_ci():
        pytest.fail(f"{reason} (CI is set: the framework's own tests must run)")
    pytest.skip(f"{reason}; set CI=true to make this a failure")


def cache_root() -> Path:
    return Path(os.environ.get("EVSTORE_SDIST_CACHE") or Path(tempfile.gettempdir()) / "evstore-framework-sdists")


def sdist_tree(distribution: str) -> Path:
    """The extracted ``tests/`` and ``pyproject.toml`` of the installed version's sdist."""
    try:
        version = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        _unavailable(f"{distribution} is not installed")
        raise  # unreachable: skip/fail raise
    target = cache_root() / f"{distribution}-{version}"
    if (target / ".complete").exists():
        return target
    cache_root().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_root()) as work:
        spec = f"{distribution}=={version}"
        completed = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "-q", spec, "-d", work],
            capture_output=True,
            text=True,
            timeout=DOWNLOAD_TIMEOUT,
            check=False,
        )
        archives = sorted(Path(work).glob("*.tar.gz"))
        if completed.returncode != 0 or not archives:
            last = (completed.stderr.strip().splitlines() or ["no output"])[-1][:300]
            _unavailable(f"could not download the sdist of {spec} (no network?): {last}")
        staging = Path(work) / "tree"
        with tarfile.open(archives[0]) as archive:
            members = []
            for member in archive.getmembers():
                parts = Path(member.name).parts
                if len(parts) >= 2 and (parts[1] == "tests" or parts[1:] == ("pyproject.toml",)):
                    member.name = str(Path(*parts[1:]))
                    members.append(member)
            archive.extractall(staging, members=members, filter="data")
        (staging / ".complete").write_text(spec + "\n")
        try:
            staging.rename(target)
        except OSError:  # another run extracted it meanwhile
            if not (target / ".complete").exists():
                shutil.rmtree(target, ignore_errors=True)
                staging.rename(target)
    return target


@dataclass
class SuiteRun:
    passed: int
    failed: int
    errors: int
    skipped: int
    deselected: int
    returncode: int
    output: str


def _count(summary: str, word: str) -> int:
    found = re.search(rf"(\d+) {word}", summary)
    return int(found.group(1)) if found else 0


def run_suite(tree: Path, plugin: str, paths: list[str]) -> SuiteRun:
    """pytest over ``paths`` of the extracted tree, in a subprocess, with ``plugin`` loaded."""
    missing = [path for path in paths if not (tree / path).exists()]
    assert not missing, f"the sdist no longer has {missing}: update the list of session test files"
    # the plugin, and the evstore under test: this checkout's (a worktree's too), not whichever
    # one the venv has installed (the tree's own ``tests`` package still comes first: the cwd)
    under_test = Path(evstore.__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(under_test)])}
    for name in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS"):
        env.pop(name, None)
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            plugin,
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            "-q",
            "-rfEs",
            "--no-header",
            *paths,
        ],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    output = completed.stdout + completed.stderr
    lines = [line for line in output.splitlines() if re.search(r"\d+ (passed|failed|error)", line)]
    summary = lines[-1] if lines else ""
    return SuiteRun(
        passed=_count(summary, "passed"),
        failed=_count(summary, "failed"),
        errors=_count(summary, "error"),
        skipped=_count(summary, "skipped"),
        deselected=_count(summary, "deselected"),
        returncode=completed.returncode,
        output=output,
    )
