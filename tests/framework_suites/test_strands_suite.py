"""Strands Agents' own session tests (from its sdist) pass with EvstoreSessionRepository as its repositories."""

from __future__ import annotations

import re

import pytest

from ._sdist import run_suite, sdist_tree

pytest.importorskip("strands")

PATHS = ["tests/strands/session"]
#: strands-agents 1.62.0: 208 pass (58 skipped: file and S3 layouts, a storage's class name); 116 of
#: them are the snapshot manager's, over EvstoreStorage.
FLOOR = 200


@pytest.mark.slow
def test_strands_own_session_tests_pass_on_evstore() -> None:
    tree = sdist_tree("strands-agents")
    run = run_suite(tree, "evstore_strands_plugin", PATHS)
    failures = "\n".join(line for line in run.output.splitlines() if line.startswith(("FAILED", "ERROR")))
    tail = failures + "\n...\n" + run.output[-4000:]
    assert run.failed == 0 and run.errors == 0, tail
    assert run.returncode == 0, tail
    assert run.passed >= FLOOR, tail
    substituted = re.search(r"evstore-substituted repositories: (\d+)", run.output)
    assert substituted is not None and int(substituted.group(1)) >= 50, tail  # the tests ran on evstore
    storages = re.search(r"'storage': (\d+)", run.output)
    assert storages is not None and int(storages.group(1)) >= 100, tail  # the snapshot tests ran on EvstoreStorage
