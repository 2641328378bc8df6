"""The command, end to end against moto's HTTP server (in process with click's
runner, and as a real subprocess where a fresh process matters)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
from click.testing import CliRunner, Result
from evstore_cli import cli

from evstore._context import FENCE_HOLD

from .conftest import new_bucket

EVSTORE = [sys.executable, "-m", "evstore_cli"]
Run = Callable[..., Result]


@pytest.fixture
def bucket(moto_endpoint: str) -> str:
    return str(new_bucket(moto_endpoint).bucket)


@pytest.fixture
def run(bucket: str, moto_endpoint: str) -> Run:
    """Invoke ``evstore`` against s3://<fresh bucket>/root on the moto server."""

    def invoke(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Result:
        environment = {"EVSTORE_STORE": f"s3://{bucket}/root", "AWS_ENDPOINT_URL": moto_endpoint, **(env or {})}
        return CliRunner().invoke(cli, list(args), input=input, env=environment, catch_exceptions=False)

    return invoke


def keys(bucket: str, endpoint: str) -> list[str]:
    client = boto3.client("s3", endpoint_url=endpoint)
    return [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]


def one_line_error(result: Result, code: int) -> str:
    assert result.exit_code == code, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("evstore: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


@pytest.mark.slow
def test_fresh_checkout_append_and_replay_work_with_no_configuration(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVSTORE_", "AWS_ENDPOINT"))}
    env.update(HOME=str(tmp_path), XDG_DATA_HOME=str(tmp_path / "data"))
    subprocess.run([*EVSTORE, "append", "demo", "hello"], env=env, check=True, capture_output=True, timeout=60)
    out = subprocess.run([*EVSTORE, "replay", "demo"], env=env, check=True, capture_output=True, text=True, timeout=60)
    assert out.stdout == "[1] user: hello\n"
    assert (tmp_path / "data" / "evstore" / "objects" / "sessions" / "demo" / "00000000000000000001").is_file()


@pytest.mark.slow
def test_events_land_at_exactly_root_sessions_id_seq(moto_endpoint: str, bucket: str) -> None:
    env = {**os.environ, "AWS_ENDPOINT_URL": moto_endpoint}
    store = ["--store", f"s3://{bucket}/root"]
    for text in ("hello", "again"):
        subprocess.run([*EVSTORE, *store, "append", "demo", text], env=env, check=True, capture_output=True, timeout=60)
    assert keys(bucket, moto_endpoint) == [
        "root/sessions/demo/00000000000000000001",
        "root/sessions/demo/00000000000000000002",
        "root/sessions/demo/manifest",
    ]
    out = subprocess.run(
        [*EVSTORE, *store, "replay", "demo", "--format", "jsonl"], env=env, check=True, capture_output=True, text=True, timeout=60
    )
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(x["seq"], x["message"]) for x in lines] == [
        (1, {"role": "user", "content": "hello"}),
        (2, {"role": "user", "content": "again"}),
    ]
    assert all(x["ts"].endswith("Z") for x in lines)


def test_a_second_writer_racing_for_a_seq_gets_exit_4_and_nothing_is_overwritten(
    run: Run, bucket: str, moto_endpoint: str
) -> None:
    assert run("append", "s", "first", "--expect-head", "0").output == "1\n"
    result = run("append", "s", "second", "--expect-head", "0")
    assert "at head 1, not 0" in one_line_error(result, 4)
    assert run("replay", "s").output == "[1] user: first\n"


@pytest.mark.slow
def test_append_reads_stdin_json_and_jsonl(run: Run) -> None:
    assert run("append", "s", input="from stdin\n").output == "1\n"
    assert run("append", "s", "--json", input='{"role": "assistant", "content": "hi", "x": 1}').output == "2\n"
    assert (
        run(
            "append",
            "s",
            "--jsonl",
            "--role",
            "user",
            input='{"role": "user", "content": "a"}\n\n{"role": "tool", "tool_call_id": "c", "content": "b"}\n',
        ).output
        == "3\n4\n"
    )
    replayed = run("replay", "s", "--format", "json").output
    assert [m["message"]["content"] for m in json.loads(replayed)] == ["from stdin", "hi", "a", "b"]
    assert json.loads(replayed)[1]["message"]["x"] == 1


def test_replay_jsonl_pipes_back_into_append(run: Run) -> None:
    run("append", "src", "one")
    run("append", "src", "--role", "assistant", "two")
    lines = run("replay", "src", "--format", "jsonl").output
    assert run("append", "copy", "--jsonl", input=lines).output == "1\n2\n"
    assert run("replay", "copy").output == "[1] user: one\n[2] assistant: two\n"


@pytest.mark.slow
def test_replay_ranges_and_text_format(run: Run) -> None:
    for i in range(5):
        run("append", "s", f"m{i}")
    assert run("replay", "s", "--from", "2", "--to", "3").output == "[2] user: m1\n[3] user: m2\n"


@pytest.mark.parametrize("bad_id", ["../x", "a/b", "", "x" * 129, "ctl\x01id", "new\nline"])
def test_invalid_session_ids_exit_2_and_write_nothing(bad_id: str, run: Run, bucket: str, moto_endpoint: str) -> None:
    one_line_error(run("append", bad_id, "text"), 2)
    one_line_error(run("replay", bad_id), 2)
    assert keys(bucket, moto_endpoint) == []


@pytest.mark.parametrize("payload", ["{bad", "[1, 2]", '{"role": "wizard", "content": "x"}', '"just a string"', "\xff"])
def test_invalid_json_exits_2_and_writes_nothing(payload: str, run: Run, bucket: str, moto_endpoint: str) -> None:
    one_line_error(run("append", "s", "--json", input=payload), 2)
    one_line_error(run("append", "s", "--jsonl", input='{"role": "user", "content": "ok"}\n' + payload), 2)
    assert keys(bucket, moto_endpoint) == []


def test_a_message_over_5_mib_exits_2_and_writes_nothing(run: Run, bucket: str, moto_endpoint: str) -> None:
    assert "5242880" in one_line_error(run("append", "s", input="x" * (5 * 1024 * 1024 + 1)), 2)
    assert keys(bucket, moto_endpoint) == []


@pytest.mark.slow
def test_replay_of_a_missing_session_exits_3(run: Run) -> None:
    assert "not found" in one_line_error(run("replay", "nobody"), 3)
    one_line_error(run("info", "nobody"), 3)
    one_line_error(run("delete", "nobody"), 3)


@pytest.mark.parametrize(
    "body",
    [
        b"garbage",
        b'{"v":1,"sid":"other","uid":"u","seq":2,"ts":"t","wid":"w","prev":"p","body":{"type":"messages","messages":[]}}',
    ],
)
def test_a_corrupt_or_foreign_object_exits_5_naming_the_seq(body: bytes, run: Run, bucket: str, moto_endpoint: str) -> None:
    run("append", "s", "ok")
    boto3.client("s3", endpoint_url=moto_endpoint).put_object(
        Bucket=bucket, Key="root/sessions/s/00000000000000000002", Body=body
    )
    assert "seq 2" in one_line_error(run("replay", "s"), 5)
    one_line_error(run("verify", "s"), 5)


def test_an_expired_session_exits_6(run: Run, bucket: str, moto_endpoint: str) -> None:
    run("append", "s", "a")
    run("append", "s", "b")
    boto3.client("s3", endpoint_url=moto_endpoint).delete_object(Bucket=bucket, Key="root/sessions/s/manifest")
    assert "expired" in one_line_error(run("replay", "s"), 6)
    one_line_error(run("append", "s", "more"), 6)


def test_unreachable_store_exits_1_with_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli,
        ["--store", "s3://no-such-bucket-here/x", "--endpoint-url", "http://127.0.0.1:9", "list"],
        env={"AWS_MAX_ATTEMPTS": "1"},
    )
    one_line_error(result, 1)


def test_usage_errors_exit_2(run: Run) -> None:
    assert run("replay").exit_code == 2
    assert run("append", "s", "--json", "--jsonl", input="{}").exit_code == 2
    one_line_error(run("--store", "ftp://x", "list"), 2)


@pytest.mark.slow
def test_list_info_and_delete(run: Run) -> None:
    for sid in ("b", "a", "c"):
        run("append", sid, "x")
    assert run("list").output == "a\nb\nc\n"
    assert run("list", "--prefix", "b").output == "b\n"
    info = json.loads(run("info", "a", "--json").output)
    assert (info["session"], info["head"], info["retention"], info["encrypted"]) == ("a", 1, "permanent", False)
    assert [json.loads(line)["session"] for line in run("list", "--json").output.splitlines()] == ["a", "b", "c"]
    assert run("delete", "a").output.startswith("deleted a (fenced at seq 2); gc removes its objects after ")
    assert run("list").output == "a\nb\nc\n"  # its objects stay until gc, past the fence hold
    assert run("list", "--long").output.splitlines()[-1].startswith("a\t(deleted")


@pytest.mark.slow
def test_forks_rewind_and_views_through_the_command(run: Run) -> None:
    for i in range(4):
        run("append", "p", f"p{i}")
    assert run("fork", "p", "f", "--at", "2").output == "forked p@2 into f\n"
    assert run("append", "f", "own").output == "3\n"
    assert run("replay", "f").output == "[1] user: p0\n[2] user: p1\n[3] user: own\n"
    assert [json.loads(x).get("session") for x in run("replay", "f", "--format", "jsonl").output.splitlines()] == ["p", "p", None]
    info = json.loads(run("info", "f", "--json").output)
    assert (info["parent"], info["fork_seq"]) == ("p", 2)
    assert run("list", "--tree").output == "p (head 4)\n  └─ f @2 (head 3)\n"
    assert run("rewind", "f", "--to", "1").output == "4\n"
    assert run("replay", "f", "--view", "context").output == "user: p0\n"
    assert run("replay", "f").output.endswith("[4] (rewind to seq 1)\n")
    run("delete", "p")
    assert run("replay", "f", "--view", "context", "--format", "jsonl").output == '{"message":{"role":"user","content":"p0"}}\n'
    one_line_error(run("fork", "f", "f"), 2)


def test_context_view_repairs_a_dangling_tool_call(run: Run) -> None:
    fixture = Path(__file__).parent / "fixtures" / "harness-session.jsonl"
    run("append", "h", "--jsonl", input=fixture.read_text())
    last = json.loads(run("replay", "h", "--view", "context", "--format", "json").output)[-1]["message"]
    assert last["role"] == "tool" and last["tool_call_id"] == "t2"
    dropped = json.loads(run("replay", "h", "--view", "context", "--repair", "drop", "--format", "json").output)
    assert dropped[-1]["message"]["tool_call_id"] == "t1"


@pytest.mark.slow
def test_encryption_rotation_rekey_receipts_and_shred_through_the_command(
    run: Run, bucket: str, moto_endpoint: str, tmp_path: Path
) -> None:
    ring = tmp_path / "ring.json"
    assert "added key k1" in run("keygen", "--keyring", str(ring), "--key-id", "k1").output
    env = {"EVSTORE_KEYRING": str(ring)}
    run("append", "s", "top secret", env=env)
    client = boto3.client("s3", endpoint_url=moto_endpoint)
    raw = b"".join(client.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys(bucket, moto_endpoint))
    assert b"top secret" not in raw
    assert "key" in one_line_error(run("replay", "s"), 2)
    wrong = {"EVSTORE_KEY": run("keygen").output.strip(), "EVSTORE_KEY_ID": "k1"}
    assert "seq 1" in one_line_error(run("replay", "s", env=wrong), 5)
    verified = json.loads(run("verify", "s", "--json", env=env).output)
    assert verified["sealed_checked"] == 1
    receipt = verified["receipt"]
    run("keygen", "--keyring", str(ring), "--key-id", "k2")
    assert "1 events re-sealed" in run("rekey", "s", env=env).output
    assert "superseded by a recorded rekey" in run("verify", "s", "--expect", receipt, env=env).output
    assert json.loads(run("verify", "s", "--expect", receipt, "--json", env=env).output)["superseded_by_rekey"] is True
    assert run("replay", "s", env=env).output == "[1] user: top secret\n"
    client.delete_object(Bucket=bucket, Key="root/sessions/s/00000000000000000001")
    assert "truncated" in one_line_error(run("verify", "s", "--expect", receipt, env=env), 5)
    run("append", "t", "x", env=env)
    shredded = run("shred", "t", env=env).output
    assert "salt destroyed" in shredded and "fenced at seq 2" in shredded
    left = {k: client.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys(bucket, moto_endpoint) if "/t/" in k}
    assert sorted(k.rsplit("/", 1)[1] for k in left) == ["00000000000000000001", "00000000000000000002", "manifest", "tombstone"]
    assert b'"salt"' not in left["root/sessions/t/manifest"]  # until gc: the fence in each slot, no content, no salt
    assert left["root/sessions/t/00000000000000000001"] == left["root/sessions/t/tombstone"]
    assert "was deleted" in one_line_error(run("append", "t", "more", env=env), 3)
    later = (datetime.now(UTC) + FENCE_HOLD + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    run("gc", "--grace", "0", "--now", later)
    assert not [k for k in keys(bucket, moto_endpoint) if "/t/" in k]


@pytest.mark.slow
def test_lifecycle_and_gc_through_the_command(run: Run) -> None:
    run("append", "scratch", "x", "--ephemeral")
    run("append", "named", "y")
    assert run("lifecycle", "apply", "--ephemeral-days", "2").output == "installed: 2 rules\n"
    assert run("lifecycle", "apply", "--ephemeral-days", "2").output == "unchanged: 2 rules\n"
    rules = json.loads(run("lifecycle", "show").output)
    assert {r["ID"] for r in rules} == {"evstore-ephemeral-expiry:root", "evstore-abort-incomplete-uploads:root"}
    preview = run("lifecycle", "preview", "--at", "2099-01-01").output
    assert "root/sessions/scratch/manifest" in preview and "named" not in preview
    assert preview.endswith("2 objects of 1 sessions expire by 2099-01-01\n")
    dry = run("gc", "--dry-run", "--apply-lifecycle", "--now", "2099-01-01", "--grace", "0s").output
    assert "would remove root/sessions/scratch/" in dry
    assert run("replay", "scratch").exit_code == 0
    report = json.loads(run("gc", "--apply-lifecycle", "--now", "2099-01-01", "--grace", "0s", "--json").output)
    assert report["objects_removed"] == 2 and report["reasons"] == {"lifecycle expiry": 2}
    one_line_error(run("replay", "scratch"), 3)
    assert run("replay", "named").output == "[1] user: y\n"
    assert run("gc", "--keep", "1").exit_code == 2  # --keep needs --prefix


def test_every_command_has_help() -> None:
    runner = CliRunner()
    for name, command in cli.commands.items():
        assert runner.invoke(cli, [name, "--help"]).exit_code == 0, name
        if hasattr(command, "commands"):
            for sub in command.commands:  # type: ignore[attr-defined]
                assert runner.invoke(cli, [name, sub, "--help"]).exit_code == 0
    assert "0.1.0" in runner.invoke(cli, ["--version"]).output


def test_auto_compaction_is_reachable_from_the_command(tmp_path: Path) -> None:
    env = {"EVSTORE_STORE": (tmp_path / "s").as_uri(), "EVSTORE_AUTO_COMPACT": "10"}
    lines = "".join(json.dumps({"role": "user", "content": f"m{i}"}) + "\n" for i in range(25))
    runner = CliRunner()
    assert runner.invoke(cli, ["append", "s", "--jsonl"], input=lines, env=env).exit_code == 0
    assert json.loads(runner.invoke(cli, ["info", "s", "--json"], env=env).output)["segments"] == 2
    assert runner.invoke(cli, ["verify", "s"], env=env).output.startswith("ok: 25 events")
    bad = runner.invoke(cli, ["append", "s", "x"], env={**env, "EVSTORE_AUTO_COMPACT": "lots"})
    assert bad.exit_code == 2
