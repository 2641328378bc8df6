"""The evstore command end to end against Ceph RGW: --store s3://bucket/root, with
AWS_ENDPOINT_URL and the gateway's keys in the environment, as a user would run it.

Most tests drive the click command in process (CliRunner, with the environment
set for the call); one runs the installed console script in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from evstore_cli import cli

import evstore
from evstore._backends._s3 import S3Store
from evstore._context import FENCE_HOLD

from .conftest import unavailable

pytestmark = pytest.mark.rgw

Run = Callable[..., Result]


def require_command(*path: str) -> None:
    """The lead adds gc/lifecycle/rekey/shred: skip (fail in CI) while one is missing."""
    group: Any = cli
    for name in path:
        commands = getattr(group, "commands", {})
        if name not in commands:
            unavailable(f"the command `evstore {' '.join(path)}` does not exist yet")
        group = commands[name]


@pytest.fixture
def bucket(rgw_backend: S3Store) -> S3Store:
    return rgw_backend


@pytest.fixture
def run(bucket: S3Store, rgw_env: dict[str, str]) -> Run:
    """``run(*args, input=None, env={})``: evstore --store s3://<fresh bucket>/root ARGS."""

    def invoke(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Result:
        return CliRunner().invoke(
            cli,
            ["--store", f"s3://{bucket.bucket}/root", *args],
            input=input,
            env={**rgw_env, **(env or {})},
            catch_exceptions=False,
        )

    return invoke


def ok(result: Result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.output, result.stderr)
    return result.stdout


def jsonl(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def contents(lines: Sequence[dict[str, Any]]) -> list[Any]:
    return [line["message"]["content"] for line in lines]


def keys_under(bucket: S3Store, prefix: str) -> list[str]:
    return [o.key for o in bucket.list(prefix)]


def test_append_and_replay_round_trip(run: Run) -> None:
    assert ok(run("append", "s1", "hello")) == "1\n"
    assert ok(run("append", "s1", "--role", "assistant", "hi there")) == "2\n"
    assert ok(run("append", "s1", "--jsonl", input='{"role": "user", "content": "a"}\n{"role": "user", "content": "b"}\n')) == (
        "3\n4\n"
    )
    lines = jsonl(ok(run("replay", "s1", "--format", "jsonl")))
    assert [line["seq"] for line in lines] == [1, 2, 3, 4]
    assert contents(lines) == ["hello", "hi there", "a", "b"]
    assert lines[1]["message"]["role"] == "assistant"


def test_append_with_a_stale_expected_head_exits_4(run: Run) -> None:
    ok(run("append", "s1", "one"))
    ok(run("append", "s1", "two"))
    result = run("append", "s1", "late", "--expect-head", "1")
    assert result.exit_code == 4, result.output
    assert contents(jsonl(ok(run("replay", "s1", "--format", "jsonl")))) == ["one", "two"]


def test_replay_of_a_missing_session_exits_3(run: Run) -> None:
    assert run("replay", "nobody").exit_code == 3


def test_fork_shares_the_history_up_to_the_fork_seq_and_then_diverges(run: Run) -> None:
    for text in ("a", "b", "c"):
        ok(run("append", "src", text))
    assert ok(run("fork", "src", "dst", "--at", "2")) == "forked src@2 into dst\n"
    assert ok(run("append", "dst", "d")) == "3\n"
    assert contents(jsonl(ok(run("replay", "dst", "--format", "jsonl")))) == ["a", "b", "d"]
    assert contents(jsonl(ok(run("replay", "src", "--format", "jsonl")))) == ["a", "b", "c"]
    ok(run("verify", "dst"))


def test_verify_issues_a_receipt_that_a_later_verify_accepts(run: Run) -> None:
    ok(run("append", "s1", "one"))
    ok(run("append", "s1", "two"))
    first = json.loads(ok(run("verify", "s1", "--json")))
    assert first["ok"] and first["head_seq"] == 2 and first["events"] == 2
    ok(run("append", "s1", "three"))
    later = json.loads(ok(run("verify", "s1", "--json", "--expect", first["receipt"])))
    assert later["head_seq"] == 3 and later["expected"] == first["receipt"]


def test_verify_rejects_a_receipt_the_log_does_not_extend(run: Run) -> None:
    ok(run("append", "s1", "one"))
    receipt = json.loads(ok(run("verify", "s1", "--json")))["receipt"]
    seq, digest = receipt.split(":", 1)
    forged = f"{seq}:{('0' if digest[0] != '0' else '1')}{digest[1:]}"
    assert run("verify", "s1", "--expect", forged).exit_code == 5


def test_delete_removes_the_session_and_replay_then_exits_3(run: Run, bucket: S3Store) -> None:
    ok(run("append", "s1", "one"))
    ok(run("append", "keep", "other"))
    assert ok(run("delete", "s1")).startswith("deleted s1")
    assert run("replay", "s1").exit_code == 3
    assert contents(jsonl(ok(run("replay", "keep", "--format", "jsonl")))) == ["other"]


def test_installed_command_appends_and_replays_in_a_subprocess(bucket: S3Store, rgw_env: dict[str, str]) -> None:
    script = Path(sys.executable).with_name("evstore")
    if not script.exists():
        pytest.fail(f"console script {script} missing: install the project (pip install -e .)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "EVSTORE_"))} | rgw_env
    store = ["--store", f"s3://{bucket.bucket}/root"]

    def evstore_cmd(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(script), *store, *args], env=env, capture_output=True, text=True, timeout=60, check=False)

    appended = evstore_cmd("append", "proc", "from a subprocess")
    assert (appended.returncode, appended.stdout) == (0, "1\n"), appended.stderr
    replayed = evstore_cmd("replay", "proc", "--format", "jsonl")
    assert replayed.returncode == 0, replayed.stderr
    assert contents(jsonl(replayed.stdout)) == ["from a subprocess"]


# ---- retention and key management (guarded: the lead adds these commands) ----------


def test_lifecycle_apply_installs_the_rules_and_a_second_apply_changes_nothing(run: Run, bucket: S3Store) -> None:
    """RGW reads an And filter back as Prefix + Tag: the merge must still recognise its own rule."""
    require_command("lifecycle", "apply")
    assert ok(run("lifecycle", "apply", "--ephemeral-days", "1")).startswith("installed")
    assert ok(run("lifecycle", "apply", "--ephemeral-days", "1")).startswith("unchanged")
    (expiry,) = [r for r in bucket.get_lifecycle() if "Expiration" in r]
    assert expiry["Expiration"] == {"Days": 1}
    assert expiry["Filter"] == {"Prefix": "root/sessions/", "Tag": {"Key": "evstore-retention", "Value": "ephemeral"}}


def test_lifecycle_apply_keeps_the_buckets_own_rules(run: Run, bucket: S3Store) -> None:
    require_command("lifecycle", "apply")
    foreign = {"ID": "logs", "Status": "Enabled", "Filter": {"Prefix": "logs/"}, "Expiration": {"Days": 30}}
    bucket.put_lifecycle([foreign])
    ok(run("lifecycle", "apply", "--ephemeral-days", "1"))
    ids = {r["ID"] for r in bucket.get_lifecycle()}
    assert "logs" in ids and len(ids) >= 2


def test_lifecycle_show_prints_the_installed_rules_as_json(run: Run, bucket: S3Store) -> None:
    require_command("lifecycle", "show")
    ok(run("lifecycle", "apply", "--ephemeral-days", "3"))
    shown = json.loads(ok(run("lifecycle", "show")))
    assert shown == bucket.get_lifecycle()
    assert any(r.get("Expiration") == {"Days": 3} for r in shown)


def test_lifecycle_preview_lists_the_objects_of_ephemeral_sessions_only(run: Run) -> None:
    require_command("lifecycle", "preview")
    ok(run("append", "eph", "scratch", "--ephemeral"))
    ok(run("append", "perm", "keep me"))
    ok(run("lifecycle", "apply", "--ephemeral-days", "1"))
    at = (datetime.now(UTC) + timedelta(days=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    items = json.loads(ok(run("lifecycle", "preview", "--at", at, "--json")))  # one JSON array
    assert {item["session"] for item in items} == {"eph"}
    assert {item["key"] for item in items} >= {"root/sessions/eph/manifest", "root/sessions/eph/00000000000000000001"}


def test_gc_removes_the_remnant_of_a_session_whose_manifest_is_gone(run: Run, bucket: S3Store) -> None:
    require_command("gc")
    for text in ("a", "b"):
        ok(run("append", "gone", text))
    ok(run("append", "live", "stays"))
    bucket.delete_many(["root/sessions/gone/manifest"])  # what a lifecycle rule does first
    assert run("replay", "gone").exit_code == 6
    ok(run("gc", "--grace", "0s", "--dry-run"))
    assert len(keys_under(bucket, "root/sessions/gone/")) == 2  # a dry run changes nothing
    ok(run("gc", "--grace", "0s"))
    assert keys_under(bucket, "root/sessions/gone/") == []
    assert run("replay", "gone").exit_code == 3
    assert contents(jsonl(ok(run("replay", "live", "--format", "jsonl")))) == ["stays"]


def test_rekey_encrypts_a_plaintext_session_and_its_old_receipt_stays_checkable(run: Run, bucket: S3Store) -> None:
    """Rekey replaces event objects with If-Match: on RGW that is the unquoted-ETag path."""
    require_command("rekey")
    for text in ("one", "two"):
        ok(run("append", "s1", text))
    receipt = json.loads(ok(run("verify", "s1", "--json")))["receipt"]
    key = {"EVSTORE_KEY": evstore.generate_key()}
    ok(run("rekey", "s1", env=key))
    raw = bucket.get("root/sessions/s1/00000000000000000001").data
    assert b"one" not in raw  # sealed now
    assert contents(jsonl(ok(run("replay", "s1", "--format", "jsonl", env=key)))) == ["one", "two"]
    ok(run("verify", "s1", "--expect", receipt, env=key))


def test_shred_destroys_the_session_and_replay_then_exits_3(run: Run, bucket: S3Store) -> None:
    require_command("shred")
    key = {"EVSTORE_KEY": evstore.generate_key()}
    ok(run("append", "secret", "classified", env=key))
    ok(run("append", "other", "kept", env=key))
    ok(run("shred", "secret", env=key))
    assert run("replay", "secret", env=key).exit_code == 3
    # until gc, each event's slot holds the fence (so a stale writer's append is refused, never
    # acknowledged and lost), beside the manifest without its salt and the tombstone
    left = {k.rsplit("/", 1)[1]: bucket.get(k).data for k in keys_under(bucket, "root/sessions/secret/")}
    assert sorted(left) == ["00000000000000000001", "00000000000000000002", "manifest", "tombstone"]
    assert left["00000000000000000001"] == left["tombstone"] and b'"salt"' not in left["manifest"]
    later = (datetime.now(UTC) + FENCE_HOLD + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    ok(run("gc", "--grace", "0", "--now", later))
    assert keys_under(bucket, "root/sessions/secret/") == []
    assert contents(jsonl(ok(run("replay", "other", "--format", "jsonl", env=key)))) == ["kept"]
