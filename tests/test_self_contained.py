"""The repository stands alone: no test, script or module reads a path outside the checkout."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# An absolute path of some machine, a climb out of the checkout, or the sibling folder of the old layout.
OUTSIDE = re.compile(
    r"""(["'](/work|/home|/root|/farm|/Users)/|\.\./shared|["']shared["']\s*/\s*["']fixtures|parents\[(\d+)\])"""
)


def tracked_sources() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "*.py", "*.sh", ".ci/*", "*.toml", "*.cfg"], cwd=ROOT, capture_output=True, text=True
    )
    if listed.returncode == 0 and listed.stdout.strip():
        return [ROOT / name for name in listed.stdout.splitlines()]
    return [p for p in ROOT.rglob("*.py") if ".venv" not in p.parts]


def climbs_out(path: Path, match: re.Match[str]) -> bool:
    """``parents[N]`` of a file N+1 folders deep leaves the checkout; anything else the pattern finds does."""
    if match.group(3) is None:
        return True
    depth = len(path.relative_to(ROOT).parts) - 1  # parents[depth] is the root itself
    return int(match.group(3)) > depth


def test_no_source_reads_a_path_outside_the_checkout() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in tracked_sources()
        if path.exists() and path != Path(__file__).resolve()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        for match in OUTSIDE.finditer(line)
        if climbs_out(path, match)
    ]
    assert offenders == []


def test_the_fixtures_the_tests_read_are_in_the_repository() -> None:
    fixtures = ROOT / "tests" / "fixtures"
    assert (fixtures / "chatcli-v2-session.json").is_file()
    assert (fixtures / "harness-session.jsonl").is_file()


def test_the_pattern_finds_what_it_must() -> None:
    """The checker itself can fail: each of these lines reads outside the checkout."""
    deep = ROOT / "tests" / "x.py"
    machine, sibling = "/" + "work", "shared"  # built up, so this file names no path outside the checkout
    examples = [f'FIXTURES = Path("{machine}/{sibling}/fixtures")', f'p = "../{sibling}/x"', "Path(__file__).parents[2] / 'a'"]
    for line in examples:
        assert any(climbs_out(deep, m) for m in OUTSIDE.finditer(line)), line
    assert not any(climbs_out(ROOT / "tests" / "stress" / "c.py", m) for m in OUTSIDE.finditer("Path(__file__).parents[2]"))
