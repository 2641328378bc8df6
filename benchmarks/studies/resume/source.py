"""Which evstore ``benchmarks/resume.py`` measures: a commit's ``evstore/`` (``git archive``), first on the
path of the parent and of every child, or the checkout as it is."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks._harness import REPO, export_evstore

#: a folder holding the evstore package to measure (a commit's, see --evstore-at), found ahead of the checkout's
SOURCE_ENV = "EVSTORE_BENCH_SOURCE"


def git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)
    return done.stdout.strip()


def evstore_source(rev: str) -> tuple[str | None, str]:
    """Make the parent and every child import evstore as of commit ``rev`` (``git archive`` into a temporary
    folder, first on the path), so that edits in the working tree during a run cannot reach it; ``worktree``
    measures the checkout as it is. Returns the folder (None for the checkout) and what is measured."""
    if "evstore" in sys.modules:
        raise RuntimeError("evstore was imported before its source was chosen")
    head = git("rev-parse", "--short", "HEAD")
    if rev == "worktree":
        dirty = git("status", "--porcelain", "--", "evstore")
        changed = f" with uncommitted changes in evstore/ ({len(dirty.splitlines())} files)" if dirty else ""
        return None, f"the working tree at commit {head or '?'}{changed}"
    commit = git("rev-parse", "--short", "--verify", f"{rev}^{{commit}}")
    if not commit:
        raise SystemExit(f"--evstore-at: no commit {rev!r} here (or no git); use --evstore-at worktree")
    folder = str(export_evstore(commit, tempfile.mkdtemp(prefix="evstore-bench-src-")))
    os.environ[SOURCE_ENV] = folder
    sys.path.insert(0, folder)
    import evstore

    if not str(Path(evstore.__file__ or "").resolve()).startswith(str(Path(folder).resolve())):
        raise RuntimeError(f"evstore was imported from {evstore.__file__}, not from {folder}")
    return folder, f"commit {commit} (its evstore/, extracted with git archive; the working tree is not used)"
