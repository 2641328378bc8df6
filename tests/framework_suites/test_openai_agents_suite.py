"""The OpenAI Agents SDK's own session tests (from its sdist) pass with EvstoreSession as SQLiteSession."""

from __future__ import annotations

import re

import pytest

from ._sdist import run_suite, sdist_tree

pytest.importorskip("agents")

#: The SDK's session test files: sessions, limits, the encrypted wrapper, and the runner's
#: tests that use a SQLiteSession (the plugin selects those in the runner modules).
PATHS = [
    "tests/memory/test_session.py",
    "tests/memory/test_session_limit.py",
    "tests/extensions/memory/test_encrypt_session.py",
    "tests/test_agent_runner.py",
    "tests/test_agent_runner_streamed.py",
]
#: openai-agents 0.24.0: 114 pass (28 skipped: SQLite internals, other backends' extras).
FLOOR = 110


@pytest.mark.slow
def test_the_sdks_own_session_tests_pass_on_evstore() -> None:
    tree = sdist_tree("openai-agents")
    run = run_suite(tree, "evstore_openai_plugin", PATHS)
    failures = "\n".join(line for line in run.output.splitlines() if line.startswith(("FAILED", "ERROR")))
    tail = failures + "\n...\n" + run.output[-4000:]
    assert run.failed == 0 and run.errors == 0, tail
    assert run.returncode == 0, tail
    assert run.passed >= FLOOR, tail
    substituted = re.search(r"evstore-substituted sessions: (\d+)", run.output)
    assert substituted is not None and int(substituted.group(1)) >= 50, tail  # the tests ran on evstore
