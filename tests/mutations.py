"""Mutation check: each mutation below breaks one guarantee evstore makes, and the tests named
beside it must fail. A mutation no test notices is a guarantee nothing protects.

Each runs on a copy of the checkout (the repository is never changed): the mutation is applied
to one exact piece of source, the named tests run in a fresh process against the copy, and the
mutation counts as caught only if they fail (pytest's exit 1) and the test that failed first passes
on the unmutated copy. A mutation whose source no longer appears exactly once is an error: update it
here together with the code it mutates.

    python tests/mutations.py            # all of them; exit 0 only if every one is caught
    python tests/mutations.py --list     # what each protects
    python tests/mutations.py NAME ...   # some of them

``tests/test_mutations.py`` runs it in CI.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COPIED = ("evstore", "cli", "tests", "benchmarks", "infra", "pyproject.toml")


@dataclass(frozen=True)
class Mutation:
    name: str
    protects: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


MUTATIONS = (
    Mutation(
        "hkdf-info",
        "every sealed session stays readable after an upgrade (the HKDF info string)",
        "evstore/_crypto.py",
        'SESSION_KEY_INFO = b"evstore/v1/session/"',
        'SESSION_KEY_INFO = b"evstore/v2/session/"',
        ("tests/test_known_answers.py::test_session_key_derivation_is_hkdf_sha256_of_the_master_key_salt_and_session_id",),
    ),
    Mutation(
        "hkdf-no-salt",
        "crypto-shredding: the manifest's salt is part of every session key",
        "evstore/_crypto.py",
        "length=KEY_BYTES, salt=salt,",
        "length=KEY_BYTES, salt=None,",
        ("tests/test_known_answers.py::test_each_input_of_the_derivation_changes_the_key",),
    ),
    Mutation(
        "no-chain-check",
        "the audit view: an event rewritten in place is caught by the next one's prev",
        "evstore/_read/_lineage.py",
        "if prev is not None and envelope.prev != prev and not same_event(ctx, manifest, envelope.prev, prev):",
        "if False:",
        ("tests/test_known_answers.py::test_a_middle_event_replaced_by_a_well_formed_one_breaks_the_chain_on_replay",),
    ),
    Mutation(
        "no-if-none-match",
        "single writer per seq on S3: a PUT never overwrites an event",
        "evstore/_backends/_s3.py",
        'return self._put(key, data, metadata, tags, first_attempt=first_attempt, IfNoneMatch="*")',
        "return self._put(key, data, metadata, tags, first_attempt=first_attempt)",
        ("tests/test_backends.py",),
    ),
    Mutation(
        "no-if-none-match-direct",
        "single writer per seq on S3: a create sent directly never overwrites an event either",
        "evstore/_backends/_s3_direct.py",
        'extra = {"if-none-match": "*", "content-md5": md5}',
        'extra = {"content-md5": md5}',
        ("tests/test_s3_direct.py",),
    ),
    Mutation(
        "append-past-the-head",
        "no hole in the log: an append takes the seq right after the head",
        "evstore/_session.py",
        "        seq = self._head + 1\n        if seq > MAX_SEQ:",
        "        seq = self._head + 2\n        if seq > MAX_SEQ:",
        ("tests/test_store.py",),
    ),
    Mutation(
        "gc-ignores-grace",
        "gc never removes an object younger than the grace period",
        "evstore/_retention/_gc.py",
        "    cutoff = now - grace\n",
        "    cutoff = now\n",
        ("tests/test_retention.py",),
    ),
    Mutation(
        "fence-ignored",
        "no append is acknowledged into a deleted session (a delete's fence)",
        "evstore/_read/_events.py",
        "if fence is not None and fence.uid == manifest.uid and ctx.has_object(ctx.layout.tombstone_key(manifest.sid)):",
        "if False:",
        ("tests/test_fencing.py",),
    ),
    Mutation(
        "delete-writes-no-fence",
        "a stale writer cannot append into a deleted session's freed slots",
        "evstore/_forks.py",
        "            ctx.create_once(ctx.layout.event_key(session_id, seq), tombstone, tags)\n            break",
        "            break",
        ("tests/test_fencing.py",),
    ),
    Mutation(
        "segment-not-vouched",
        "a planted segment never changes what a read returns",
        "evstore/_read/_segments.py",
        "    if not _vouched(checked, covered, cursor, end):",
        "    if False:",
        ("tests/test_hostile_bucket.py", "tests/test_hostile_segments.py"),
    ),
    Mutation(
        "any-412-is-ours",
        "exactly-once appends: a 412 is success only for this writer's own earlier attempt",
        "evstore/_session.py",
        "        if stored.data == data:\n            return data",
        "        if True:\n            return stored.data",
        ("tests/test_store.py", "tests/test_idempotency.py"),
    ),
)


def _copy(target: Path) -> dict[str, str]:
    """The checkout's code and tests under ``target``, and the environment that imports them."""
    ignore = shutil.ignore_patterns("__pycache__", ".hypothesis", ".pytest_cache", ".mypy_cache")
    for name in COPIED:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=ignore)
        else:
            shutil.copy2(source, target / name)
    shim = target / ".shim"
    shim.mkdir()
    (shim / "evstore_cli").symlink_to(target / "cli")  # the package name pyproject maps to cli/
    env = dict(os.environ, PYTHONPATH=f"{target}{os.pathsep}{shim}", PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTEST_ADDOPTS", None)
    return env


def _pytest(
    target: Path, env: dict[str, str], tests: tuple[str, ...], *, first_failure_stops: bool = True
) -> subprocess.CompletedProcess[str]:
    stop = ["-x"] if first_failure_stops else []
    command = [sys.executable, "-m", "pytest", "-q", *stop, "-p", "no:cacheprovider", "--no-header", *tests]
    return subprocess.run(command, cwd=target, env=env, capture_output=True, text=True, timeout=900, check=False)


def _failures(output: str) -> list[str]:
    """The tests pytest's summary names as failed or in error, in its order."""
    return [line.split(" ", 1)[1].split(" - ")[0] for line in output.splitlines() if line.startswith(("FAILED ", "ERROR "))]


def _mutated_run(target: Path, env: dict[str, str], m: Mutation, original: str) -> subprocess.CompletedProcess[str]:
    (target / m.path).write_text(original.replace(m.old, m.new))
    try:
        return _pytest(target, env, m.tests)
    finally:
        (target / m.path).write_text(original)


def check(mutations: tuple[Mutation, ...]) -> bool:
    """Run each mutation; print one line each; True when every one was caught.

    A mutation is caught when its tests fail (pytest's exit 1, stopping at the first failure) and
    that first failing test passes on the unmutated copy: all of those run once, together, at the end,
    so that a test failing for another reason than the mutation never counts as catching it."""
    with tempfile.TemporaryDirectory(prefix="evstore-mutations-") as scratch:
        target = Path(scratch)
        env = _copy(target)
        originals = {m.path: (target / m.path).read_text() for m in mutations}
        for m in mutations:
            if originals[m.path].count(m.old) != 1:
                print(f"error: mutation {m.name} no longer applies: {m.path} must hold its source exactly once")
                return False
        firsts: dict[str, str] = {}
        caught_all = True
        for m in mutations:
            run = _mutated_run(target, env, m, originals[m.path])
            failed = _failures(run.stdout)
            if run.returncode == 1 and failed:
                firsts[m.name] = failed[0]
            else:
                caught_all = False
                print(f"{m.name:24} NOT CAUGHT (pytest exit {run.returncode})", flush=True)
        if firsts:
            unmutated = _pytest(target, env, tuple(dict.fromkeys(firsts.values())), first_failure_stops=False)
            failing = set(_failures(unmutated.stdout))
            if unmutated.returncode not in (0, 1):
                print(f"error: the unmutated run of the catching tests ended with pytest exit {unmutated.returncode}:")
                print(unmutated.stdout[-3000:])
                return False
            for name, test in firsts.items():
                if test in failing:
                    caught_all = False
                    print(f"{name:24} error: {test} fails without the mutation too")
                else:
                    print(f"{name:24} caught by {test}")
        return caught_all


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="mutations to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutations and what each protects")
    args = parser.parse_args(argv)
    if args.list:
        for m in MUTATIONS:
            print(f"{m.name:24} {m.protects}")
        return 0
    unknown = set(args.names) - {m.name for m in MUTATIONS}
    if unknown:
        parser.error(f"unknown mutations: {', '.join(sorted(unknown))}")
    chosen = tuple(m for m in MUTATIONS if not args.names or m.name in args.names)
    return 0 if check(chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
