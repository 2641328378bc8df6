"""A new user's first hour: every mistake is one line with its exit code and what to do,
and every output says what it means (issue 12). The command runs in process (click's
runner) against a local directory store unless the case is about S3."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from evstore_cli import _write, cli

import evstore

FIXTURES = Path(__file__).parent / "fixtures"
Run = Callable[..., Result]


@pytest.fixture
def run(tmp_path: Path) -> Run:
    """``evstore`` against a fresh local directory store."""
    store_url = (tmp_path / "store").as_uri()

    def invoke(*args: str, input: str | None = None, env: dict[str, str | None] | None = None) -> Result:
        environment: dict[str, str | None] = {"EVSTORE_STORE": store_url, **(env or {})}
        return CliRunner().invoke(cli, list(args), input=input, env=environment, catch_exceptions=False)

    return invoke


def one_line_error(result: Result, code: int) -> str:
    assert result.exit_code == code, (result.exit_code, result.output, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("evstore: "), result.stderr
    assert "Traceback" not in result.output and "unexpected failure" not in lines[0]
    return lines[0]


def ok(result: Result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.output, result.stderr)
    return result.stdout


# ---- mistakes ---------------------------------------------------------------


def test_endpoint_without_a_scheme_is_exit_2_naming_the_fix(run: Run) -> None:
    line = one_line_error(run("--store", "s3://bucket/root", "--endpoint-url", "127.0.0.1:5000", "list"), 2)
    assert "http://127.0.0.1:5000" in line


def test_library_refuses_an_endpoint_without_a_scheme_with_invalid_input() -> None:
    with pytest.raises(evstore.InvalidInputError, match="http://"):
        evstore.open_store("s3://bucket/root", endpoint_url="127.0.0.1:5000")


def test_import_of_a_missing_file_is_exit_2(run: Run, tmp_path: Path) -> None:
    line = one_line_error(run("import", "chat", str(tmp_path / "nope.jsonl"), "--format", "jsonl"), 2)
    assert "cannot read" in line and "nope.jsonl" in line
    one_line_error(run("info", "chat"), 3)  # nothing was created


def test_export_into_a_missing_folder_is_exit_2_before_any_work(run: Run, tmp_path: Path) -> None:
    ok(run("append", "chat", "hello"))
    target = tmp_path / "missing" / "out.jsonl"
    line = one_line_error(run("export", "chat", "--format", "jsonl", "-o", str(target)), 2)
    assert "does not exist" in line and "create it" in line
    assert not target.parent.exists()


def test_keygen_into_a_missing_folder_is_exit_2(run: Run, tmp_path: Path) -> None:
    line = one_line_error(run("keygen", "--keyring", str(tmp_path / "missing" / "kr.json")), 2)
    assert "does not exist" in line


def test_open_store_accepts_a_keyring_path_and_refuses_other_types(run: Run, tmp_path: Path) -> None:
    path = tmp_path / "kr.json"
    ok(run("keygen", "--keyring", str(path)))
    store = evstore.open_store("memory://", keyring=str(path))
    assert store.keyring.active is not None
    store.open("chat", create=True).append({"role": "user", "content": "hi"})
    assert store.info("chat").encrypted
    assert store.context("chat") == [{"role": "user", "content": "hi"}]
    assert evstore.open_store("memory://", keyring=path).keyring == store.keyring  # a Path too
    with pytest.raises(evstore.InvalidInputError, match="Keyring or the path of a keyring file"):
        evstore.open_store("memory://", keyring=42)  # type: ignore[arg-type]
    with pytest.raises(evstore.InvalidInputError, match="cannot read keyring"):
        evstore.open_store("memory://", keyring=str(tmp_path / "absent.json"))


def test_missing_credentials_say_what_to_set(run: Run, tmp_path: Path) -> None:
    no_credentials: dict[str, str | None] = {
        name: None
        for name in (
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "AWS_PROFILE",
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            "AWS_WEB_IDENTITY_TOKEN_FILE",
        )
    }
    env = {
        **no_credentials,
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",  # never reached: the check comes first
    }
    line = one_line_error(run("--store", "s3://bucket/root", "append", "chat", "hi", env=env), 2)
    assert "AWS_ACCESS_KEY_ID" in line and "AWS_SECRET_ACCESS_KEY" in line and "AWS_PROFILE" in line


def test_a_key_under_another_id_says_it_does_not_open_the_session(run: Run, tmp_path: Path) -> None:
    ring = tmp_path / "kr.json"
    ok(run("keygen", "--keyring", str(ring)))
    ok(run("append", "chat", "secret", env={"EVSTORE_KEYRING": str(ring)}))
    other = evstore.generate_key()
    line = one_line_error(run("replay", "chat", env={"EVSTORE_KEY": other}), 2)
    assert "do not open session 'chat'" in line and "EVSTORE_KEY_ID=k-" in line
    assert "set EVSTORE_KEY" not in line


def test_a_wrong_key_under_the_default_id_says_it_does_not_open_the_session(run: Run) -> None:
    ok(run("append", "chat", "secret", env={"EVSTORE_KEY": evstore.generate_key()}))
    line = one_line_error(run("replay", "chat", env={"EVSTORE_KEY": evstore.generate_key()}), 5)
    assert "does not open this session" in line and "set EVSTORE_KEY" not in line


# ---- receipts ---------------------------------------------------------------


def test_verify_receipt_goes_straight_into_verify_expect(run: Run) -> None:
    ok(run("append", "chat", "one"))
    ok(run("append", "chat", "two"))
    receipt = ok(run("verify", "chat", "--receipt"))
    assert re.fullmatch(r"2:[0-9a-f]{64}\n", receipt)
    ok(run("append", "chat", "three"))
    assert "extends receipt" in ok(run("verify", "chat", "--expect", receipt.strip()))
    # the last line of the default output is the receipt too, and --json carries it
    assert ok(run("verify", "chat")).splitlines()[-1] == "receipt: " + ok(run("verify", "chat", "--receipt")).strip()
    assert json.loads(ok(run("verify", "chat", "--json")))["receipt"] == ok(run("verify", "chat", "--receipt")).strip()
    # a receipt the session does not extend fails
    ok(run("append", "other", "x"))
    foreign = ok(run("verify", "other", "--receipt")).strip()
    one_line_error(run("verify", "chat", "--expect", "1:" + foreign.split(":")[1]), 5)


# ---- output surprises -------------------------------------------------------


def test_expect_head_names_the_actual_head_and_appends_nothing(run: Run) -> None:
    ok(run("append", "chat", "one"))
    line = one_line_error(run("append", "chat", "two", "--expect-head", "7"), 4)
    assert "at head 1, not 7" in line and "seq 8" not in line
    assert ok(run("info", "chat", "--json")).count('"head":1') == 1
    assert ok(run("append", "chat", "two", "--expect-head", "1")) == "2\n"
    one_line_error(run("append", "new", "x", "--expect-head", "3"), 3)  # never created just to refuse it
    one_line_error(run("info", "new"), 3)


def test_append_ephemeral_to_a_permanent_session_is_refused(run: Run) -> None:
    ok(run("append", "chat", "one"))
    line = one_line_error(run("append", "chat", "two", "--ephemeral"), 2)
    assert "permanent" in line and "fork" in line
    info = json.loads(ok(run("info", "chat", "--json")))
    assert (info["retention"], info["head"]) == ("permanent", 1)
    assert ok(run("append", "eph", "x", "--ephemeral")) == "1\n"
    assert ok(run("append", "eph", "y", "--ephemeral")) == "2\n"  # the same retention again is fine


def test_lifecycle_apply_on_a_local_store_says_rules_never_run_there(run: Run) -> None:
    out = ok(run("lifecycle", "apply"))
    assert "never runs lifecycle rules" in out and "gc --apply-lifecycle" in out
    assert "installed" not in out


def test_lifecycle_preview_json_is_an_array_even_when_empty(run: Run) -> None:
    ok(run("lifecycle", "apply", "--ephemeral-days", "1"))
    assert json.loads(ok(run("lifecycle", "preview", "--at", "2000-01-01", "--json"))) == []
    ok(run("append", "eph", "x", "--ephemeral"))
    ok(run("append", "keep", "x"))
    due = json.loads(ok(run("lifecycle", "preview", "--at", "2999-01-01", "--json")))
    assert {item["session"] for item in due} == {"eph"} and len(due) == 2  # manifest and event


def test_compact_on_a_short_session_says_why_nothing_was_written(run: Run) -> None:
    ok(run("append", "chat", "one"))
    out = ok(run("compact", "chat"))
    assert out.startswith("0 segments written: ") and "1000" in out and "head 1" in out
    for text in ("two", "three"):
        ok(run("append", "chat", text))
    assert ok(run("compact", "chat", "--segment-size", "2")).startswith("1 segments written (1-2)")


def test_append_at_a_terminal_without_text_says_it_reads_stdin(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_write, "_stdin_is_terminal", lambda: True)
    result = run("append", "chat", input="typed\n")
    assert ok(result) == "1\n"
    assert "reading the message from standard input" in result.stderr and "Ctrl-D" in result.stderr
    monkeypatch.setattr(_write, "_stdin_is_terminal", lambda: False)
    assert run("append", "chat", input="piped\n").stderr == ""


def test_text_replay_indents_continuation_lines(run: Run) -> None:
    ok(run("append", "chat", "first line\nsecond line\nthird"))
    assert ok(run("replay", "chat")) == "[1] user: first line\n          second line\n          third\n"


def _append_json(run: Run, session: str, message: dict[str, Any]) -> None:
    ok(run("append", session, "--json", input=json.dumps(message)))


def test_adapter_records_render_as_what_they_stand_for(run: Run) -> None:
    records = [
        {"role": "system", "content": None, "meta": {"strands": {"kind": "session", "record": {"session_id": "s-1"}}}},
        {"role": "system", "content": None, "meta": {"strands": {"kind": "agent", "id": "main", "record": {}}}},
        {
            "role": "assistant",
            "content": [{"toolUse": {"toolUseId": "t1", "name": "clock", "input": {"tz": "UTC"}}}],
            "meta": {"strands": {"kind": "message", "agent": "main", "id": 1}},
        },
        {
            "role": "user",
            "content": [{"toolResult": {"toolUseId": "t1", "status": "success", "content": [{"text": "12:00"}]}}],
        },
        {
            "role": "tool",
            "content": None,
            "tool_call_id": "c9",
            "meta": {"openai_item": {"type": "function_call_output", "call_id": "c9", "output": "42"}},
        },
        {"role": "assistant", "content": None, "meta": {"openai_item": {"type": "reasoning", "summary": []}}},
    ]
    for record in records:
        _append_json(run, "chat", record)
    assert ok(run("replay", "chat")).splitlines() == [
        "[1] system: (strands session record s-1)",
        "[2] system: (strands agent record main)",
        '[3] assistant: -> clock({"tz":"UTC"}) [t1]',
        "[4] user: <- [t1] success: 12:00",
        "[5] tool [c9]: 42",
        "[6] assistant: (openai reasoning item)",
    ]


def test_export_jsonl_of_an_imported_chatcli_file_adds_nothing_to_the_messages(run: Run, tmp_path: Path) -> None:
    source = FIXTURES / "chatcli-v2-session.json"
    ok(run("import", "chat", str(source), "--format", "chatcli"))
    exported = [json.loads(line) for line in ok(run("export", "chat", "--format", "jsonl")).splitlines()]
    assert exported == json.loads(source.read_text())["chat_history"]
    assert "chatcli_file" not in json.dumps(exported)
    # the chatcli export still gives the file back whole
    assert json.loads(ok(run("export", "chat", "--format", "chatcli"))) == json.loads(source.read_text())


def test_replay_jsonl_piped_into_append_jsonl_keeps_events_and_rewinds(run: Run) -> None:
    ok(run("append", "src", "one"))
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
    ok(
        run(
            "append",
            "src",
            "--jsonl",
            input=json.dumps({"role": "assistant", "content": "", "tool_calls": [call]})
            + "\n"
            + json.dumps({"role": "tool", "tool_call_id": "c1", "content": "2"}),
        )
    )
    ok(run("rewind", "src", "--to", "2"))
    ok(run("append", "src", "four"))
    ok(run("rewind", "src", "--to", "1"))
    ok(run("append", "src", "six"))
    lines = ok(run("replay", "src", "--format", "jsonl"))
    assert '"rewind"' in lines

    def strip(jsonl: str) -> list[dict[str, Any]]:
        return [{k: v for k, v in json.loads(line).items() if k != "ts"} for line in jsonl.splitlines()]

    # into a new session: the same events at the same seqs
    assert ok(run("append", "copy", "--jsonl", input=lines)).split() == ["1", "2", "3", "4", "5", "6", "7"]
    assert strip(ok(run("replay", "copy", "--format", "jsonl"))) == strip(lines)
    context = ok(run("replay", "src", "--view", "context", "--format", "json"))
    assert ok(run("replay", "copy", "--view", "context", "--format", "json")) == context
    # into a session that has events: the rewinds follow the events they named
    ok(run("append", "busy", "earlier"))
    ok(run("append", "busy", "--jsonl", input=lines))
    busy = [json.loads(line) for line in ok(run("replay", "busy", "--format", "jsonl")).splitlines()]
    assert [line["rewind"]["to_seq"] for line in busy if "rewind" in line] == [3, 2]
    assert json.loads(ok(run("replay", "busy", "--view", "context", "--format", "json"))) == [
        {"message": {"role": "user", "content": "earlier"}},
        *json.loads(context),
    ]


def test_terminal_escapes_in_content_tool_names_and_ids_are_neutralised(run: Run) -> None:
    hostile = "\x1b[2J\x1b]0;owned\x07"
    call = {"id": "c\x1b[1A", "type": "function", "function": {"name": "rm\x1b[31m", "arguments": "{}"}}
    _append_json(run, "chat", {"role": "user", "content": f"hi{hostile}\rspoof\x08\u202eevil\nnext"})
    _append_json(run, "chat", {"role": "assistant", "content": "", "tool_calls": [call]})
    _append_json(run, "chat", {"role": "tool", "tool_call_id": "c\x1b[1A", "content": "\x9b2J"})
    out = ok(run("replay", "chat"))
    assert not any(ch in out for ch in "\x1b\x07\r\x08\x9b\u202e")
    assert "\\x1b[2J" in out and "\\x0dspoof" in out and "\\u202e" in out and "\\x9b" in out
    assert "rm\\x1b[31m" in out and "[c\\x1b[1A]" in out
    assert out.splitlines()[1].startswith("          next")  # a newline stays a (continuation) line
    # jsonl keeps the stored content exactly
    first = json.loads(ok(run("replay", "chat", "--format", "jsonl")).splitlines()[0])
    assert first["message"]["content"] == f"hi{hostile}\rspoof\x08\u202eevil\nnext"


def test_list_marks_deleted_sessions_kept_for_forks_in_every_form(run: Run) -> None:
    ok(run("append", "parent", "one"))
    ok(run("fork", "parent", "child"))
    ok(run("append", "solo", "x"))
    ok(run("delete", "parent"))
    assert ok(run("list")).split() == ["child", "parent", "solo"]  # ids that have objects, as documented
    long_lines = ok(run("list", "--long")).splitlines()
    assert [line.split("\t")[0] for line in long_lines] == ["child", "solo", "parent"]
    assert long_lines[-1] == (
        "parent\t(deleted; kept while its forks (child) read it: the id stays taken until they are deleted and gc has removed it)"
    )
    listed = [json.loads(x) for x in ok(run("list", "--json")).splitlines()]
    assert {"session": "parent", "state": "deleted", "kept_for_forks": ["child"]} in listed
    assert ok(run("list", "--tree")).splitlines() == ["solo (head 1)", "parent (deleted)", "  └─ child @1 (head 1)"]
    # reusing the id says why it is taken
    line = one_line_error(run("append", "parent", "again"), 3)
    assert "its forks (child) read its events" in line and "until those forks are deleted and gc has removed them" in line
    ok(run("delete", "solo"))  # no fork reads it: the id can be created again, and list says so
    assert (
        ok(run("list", "--long")).splitlines()[-1]
        == "solo\t(deleted; gc removes it after the fence hold; the id can be created again)"
    )
    assert {"session": "solo", "state": "deleted"} in [json.loads(x) for x in ok(run("list", "--json")).splitlines()]
    ok(run("create", "solo"))


def test_gc_keep_holds_back_sessions_younger_than_the_grace_and_says_so(run: Run) -> None:
    for name in ("auto-1", "auto-2"):
        ok(run("append", name, "x", "--ephemeral"))
    out = ok(run("gc", "--keep", "0", "--prefix", "auto-"))
    assert "gc: kept 2 sessions younger than --grace 1d, not counted against --keep 0" in out
    assert "beyond --keep" not in out and ok(run("replay", "auto-1")) and ok(run("replay", "auto-2"))
    out = ok(run("gc", "--keep", "0", "--prefix", "auto-", "--grace", "0", "--dry-run"))
    assert "would delete 2 sessions beyond --keep 0 (the newest of those older than --grace 0 are kept)" in out
    assert "younger than --grace" not in out
    out = ok(run("gc", "--keep", "0", "--prefix", "auto-", "--grace", "0"))
    assert "gc: deleted 2 sessions beyond --keep 0" in out
    assert "was deleted" in run("replay", "auto-1").output
    assert "beyond --keep" not in ok(run("gc", "--dry-run"))


def test_gc_apply_lifecycle_counts_the_sessions_it_removes(run: Run) -> None:
    ok(run("lifecycle", "apply", "--ephemeral-days", "1"))
    ok(run("append", "eph", "x", "--ephemeral"))
    ok(run("append", "eph", "y"))
    ok(run("append", "perm", "x"))
    report = json.loads(ok(run("gc", "--apply-lifecycle", "--now", "2999-01-01", "--json")))
    assert (report["objects_removed"], report["sessions_removed"]) == (3, 1)
    assert ok(run("list")).split() == ["perm"]
