"""The command against a hostile bucket or hostile input: an attacker who may only create
objects (the writer role), or anyone who feeds it bytes. Each case ends in the true output
or one clean error line with its documented exit code: never a traceback, never
"unexpected failure", never a raw control character on the terminal, never unbounded work."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from click.testing import CliRunner, Result
from evstore_cli import cli
from evstore_cli._common import CommandError

import evstore
from evstore import IntegrityError, LocalStore, Store
from evstore._codec import (
    FORMAT_VERSION,
    Envelope,
    ForkRef,
    Manifest,
    MessagesBody,
    decode_body,
    encode_json,
    encode_manifest,
    format_ts,
    pack_segment,
)
from evstore._read import read_manifest

from .helpers import msg
from .test_cli import one_line_error
from .test_hostile_bucket import CreateOnly

#: What must never reach a terminal raw: C0 controls but tab and newline, DEL, C1, bidi marks.
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
ESCAPES = "\x1b[2J\x1b]0;owned\x07\u202e\r"


class Bucket:
    """A local store the command reads (``run``), and the attacker's create-only hands on it."""

    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "store"
        self.backend = LocalStore(self.path)
        self.store = Store(self.backend)
        self.attacker = CreateOnly(self.backend)

    def run(self, *args: str, input: str | bytes | None = None, env: dict[str, Any] | None = None) -> Result:
        """``evstore --store file://... ARGS``; ``color=True`` so click strips no escape sequence itself."""
        environment = {"EVSTORE_KEY": None, "EVSTORE_KEYRING": None, **(env or {})}
        return CliRunner().invoke(
            cli, ["--store", self.path.as_uri(), *args], input=input, env=environment, color=True, catch_exceptions=False
        )

    def plant(self, key: str, data: bytes = b"x") -> None:
        self.attacker.create(key, data)

    def forge_next(self, session_id: str, message: dict[str, Any]) -> int:
        """A plaintext event after the head holding ``message`` as is, chained correctly: what a
        program that writes around evstore's append (or an attacker) can create."""
        events = list(self.store.replay(session_id))
        found = read_manifest(self.store.shared, session_id)
        assert found is not None
        seq = events[-1].seq + 1
        env = Envelope(
            FORMAT_VERSION, session_id, found[0].uid, seq, format_ts(self.store.clock()), "f" * 32, events[-1].hash,
            body=MessagesBody([message]),
        )
        self.plant(f"sessions/{session_id}/{seq:020d}", encode_json(env))
        return seq


@pytest.fixture
def bucket(tmp_path: Path) -> Bucket:
    found = Bucket(tmp_path)
    found.store.open("s", create=True).append([msg("hello"), msg("hi", "assistant")])
    return found


def listed(result: Result) -> list[str]:
    """The session ids ``list`` printed, in order, whatever its mode."""
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    if lines and lines[0].startswith("{"):
        return [msgspec.json.decode(line)["session"] for line in lines]
    return [line.replace("└─", "").split()[0] for line in lines]


def clean(result: Result) -> Result:
    """No raw control character anywhere in what the command wrote, and no traceback."""
    assert not RAW.search(result.stdout), result.stdout
    assert not RAW.search(result.stderr), result.stderr
    assert "Traceback" not in result.output and "unexpected failure" not in result.output
    return result


# ---- 1. escapes in planted manifests, session ids and key names --------------------------------


def plant_evil_manifest(bucket: Bucket) -> None:
    manifest = Manifest(
        FORMAT_VERSION,
        "evil",
        "a" * 32,
        f"2026-01-01{ESCAPES}",
        parent=ForkRef(f"s{ESCAPES}", "b" * 32, 1, "0" * 64, copied=True),
        kid=None,
    )
    bucket.plant("sessions/evil/manifest", encode_manifest(manifest))


def test_info_shows_a_planted_manifests_escapes_as_visible_text(bucket: Bucket) -> None:
    plant_evil_manifest(bucket)
    text = clean(bucket.run("info", "evil"))
    assert text.exit_code == 0
    assert "created: 2026-01-01\\x1b[2J\\x1b]0;owned\\x07\\u202e\\x0d" in text.stdout
    assert "parent: s\\x1b[2J" in text.stdout
    data = clean(bucket.run("info", "evil", "--json"))
    assert data.exit_code == 0 and "\\u202e" in data.stdout  # JSON: the same value, escaped
    assert msgspec.json.decode(data.stdout)["created"] == f"2026-01-01{ESCAPES}"


@pytest.mark.parametrize("mode", [[], ["--long"], ["--json"], ["--tree"]])
def test_list_shows_a_planted_manifests_escapes_as_visible_text(bucket: Bucket, mode: list[str]) -> None:
    plant_evil_manifest(bucket)
    result = clean(bucket.run("list", *mode))
    assert result.exit_code == 0 and listed(result) == ["evil", "s"]
    if mode == ["--long"]:
        assert "fork of s\\x1b[2J" in result.stdout


@pytest.mark.parametrize("mode", [[], ["--long"], ["--json"], ["--tree"]])
def test_list_shows_a_key_name_with_escapes_as_visible_text(bucket: Bucket, mode: list[str]) -> None:
    bucket.plant(f"sessions/x{ESCAPES}y/manifest", b"junk")
    result = clean(bucket.run("list", *mode))
    assert "s" in listed(result)
    if not mode:  # the bare listing names what has objects; nothing is read
        assert result.exit_code == 0 and "x\\x1b[2J\\x1b]0;owned\\x07\\u202e\\x0dy" in result.stdout
        return
    # not a session id: listed as unreadable among the rest, then exit 5
    line = one_line_error(result, 5)
    assert "cannot read 1 of the sessions listed" in line
    assert "unreadable" in result.stdout and "not a valid session id" in result.stdout


def test_gc_dry_run_and_verbose_show_planted_key_names_as_visible_text(bucket: Bucket) -> None:
    bucket.plant(f"sessions/gone{ESCAPES}/\x1b[2Jjunk")
    dry = clean(bucket.run("gc", "--dry-run", "--grace", "0s"))
    assert dry.exit_code == 0 and "would remove sessions/gone\\x1b[2J" in dry.stdout and "/\\x1b[2Jjunk" in dry.stdout
    verbose = clean(bucket.run("gc", "-v", "--grace", "0s"))
    assert verbose.exit_code == 0 and "removed sessions/gone\\x1b[2J" in verbose.stdout
    assert list(bucket.store.list_sessions()) == ["s"]


def test_lifecycle_preview_shows_planted_key_names_as_visible_text(bucket: Bucket) -> None:
    bucket.store.open("eph", create=True, retention="ephemeral").append(msg("short-lived"))
    bucket.store.apply_lifecycle(1)
    bucket.plant(f"sessions/eph/{ESCAPES}")
    text = clean(bucket.run("lifecycle", "preview", "--at", "2099-01-01"))
    assert text.exit_code == 0 and "sessions/eph/\\x1b[2J\\x1b]0;owned\\x07\\u202e\\x0d" in text.stdout
    data = clean(bucket.run("lifecycle", "preview", "--at", "2099-01-01", "--json"))
    assert data.exit_code == 0
    assert f"sessions/eph/{ESCAPES}" in [item["key"] for item in msgspec.json.decode(data.stdout)]


def test_replay_jsonl_writes_bidi_marks_as_json_escapes(bucket: Bucket) -> None:
    bucket.store.open("s").append(msg(f"look{ESCAPES}here"))
    result = clean(bucket.run("replay", "s", "--format", "jsonl"))
    assert result.exit_code == 0
    assert msgspec.json.decode(result.stdout.splitlines()[-1])["message"]["content"] == f"look{ESCAPES}here"
    text = clean(bucket.run("replay", "s"))
    assert "[2] user: look\\x1b[2J" in text.stdout


@pytest.mark.parametrize("fmt", ["jsonl", "chatcli"])
def test_export_to_stdout_writes_control_characters_as_json_escapes(bucket: Bucket, tmp_path: Path, fmt: str) -> None:
    bucket.store.open("s").append(msg(f"look{ESCAPES}here"))
    result = clean(bucket.run("export", "s", "--format", fmt))
    assert result.exit_code == 0 and "\\u202e" in result.stdout
    to_file = clean(bucket.run("export", "s", "--format", fmt, "-o", str(tmp_path / "out")))
    assert to_file.exit_code == 0 and "\u202e".encode() in (tmp_path / "out").read_bytes()  # a file: as written
    if fmt == "jsonl":  # the same JSON values either way
        assert [msgspec.json.decode(line) for line in result.stdout.splitlines()] == [
            msgspec.json.decode(line) for line in (tmp_path / "out").read_bytes().splitlines()
        ]
    else:
        assert msgspec.json.decode(result.stdout) == msgspec.json.decode((tmp_path / "out").read_bytes())


def test_a_retry_note_shows_what_the_server_said_as_visible_text(capsys: pytest.CaptureFixture[str]) -> None:
    from evstore_cli._network import note_retry

    note_retry(f"GET 'k': {ESCAPES} (HTTP 503); retrying in 0.1 s (attempt 2 of 3)")
    err = capsys.readouterr().err
    assert not RAW.search(err) and err.startswith("evstore: GET 'k': \\x1b[2J")


def test_an_error_line_shows_what_it_quotes_as_visible_text(bucket: Bucket) -> None:
    error = CommandError(f"cannot read {ESCAPES}\nsecond line", 2)
    assert error.format_message() == "cannot read \\x1b[2J\\x1b]0;owned\\x07\\u202e second line"
    result = clean(bucket.run("replay", "s", "--format", f"x{ESCAPES}"))  # click quotes the bad value
    line = one_line_error(result, 2)
    assert "--format" in line


# ---- 2. a chained event whose message breaks the schema -----------------------------------------

BAD_MESSAGES = [
    {"role": "assistant", "tool_calls": 5},
    {"role": "user", "content": 5},
    {"role": "user", "content": {"text": "x"}},
    {"role": "user", "content": "x", "meta": "m"},
    {"role": "tool", "content": "x", "tool_call_id": 7},
    {"role": ["user"], "content": "x"},
    {"role": "robot", "content": "x"},
    {"content": "x"},
]


@pytest.mark.parametrize("bad", BAD_MESSAGES, ids=lambda m: msgspec.json.encode(m).decode())
def test_a_forged_event_breaking_the_message_schema_is_an_integrity_error_at_its_seq(
    bucket: Bucket, bad: dict[str, Any]
) -> None:
    seq = bucket.forge_next("s", bad)
    for args in (
        ["replay", "s"],
        ["replay", "s", "--format", "jsonl"],
        ["replay", "s", "--view", "context"],
        ["tail", "s"],
        ["verify", "s"],
        ["export", "s", "--format", "jsonl"],
    ):
        result = clean(bucket.run(*args))
        line = one_line_error(result, 5)
        assert f"at seq {seq} of session 's'" in line and "not a valid message" in line, (args, line)
        if args in (["replay", "s"], ["tail", "s"]):  # what came before the forged event is shown
            assert result.stdout == "[1] user: hello\n[1] assistant: hi\n"
    with pytest.raises(IntegrityError, match=f"seq {seq} .*not a valid message"):
        list(bucket.store.replay("s"))
    with pytest.raises(IntegrityError, match=f"seq {seq} .*not a valid message"):
        bucket.store.context("s")


def test_a_forged_event_breaking_the_message_schema_inside_a_segment_is_an_integrity_error(bucket: Bucket) -> None:
    """A segment holding it fails its own check (each event passes decode_envelope, as a loose
    one does), so the loose events stand for it and the loose event's decode refuses it: the
    same one line, never the forged message printed or a TypeError."""
    seq = bucket.forge_next("s", {"role": "assistant", "tool_calls": 5})
    found = read_manifest(bucket.store.shared, "s")
    assert found is not None
    events = [(n, bucket.backend.get(f"sessions/s/{n:020d}").data) for n in range(1, seq + 1)]
    bucket.plant(f"sessions/s/segments/{1:020d}-{seq:020d}", pack_segment("s", found[0].uid, events))
    for args in (["replay", "s"], ["verify", "s"]):
        line = one_line_error(clean(bucket.run(*args)), 5)
        assert f"at seq {seq} of session 's'" in line and "message 0 is not a valid message" in line, (args, line)


def test_a_sealed_body_breaking_the_message_schema_is_an_integrity_error() -> None:
    with pytest.raises(IntegrityError, match=r"seq 3 .*message 1 is not a valid message: message field 'tool_calls'"):
        decode_body(encode_json(MessagesBody([msg("ok"), {"role": "assistant", "tool_calls": 5}])), "s", 3)


def test_the_openai_agents_session_refuses_a_forged_message_with_an_integrity_error(bucket: Bucket) -> None:
    pytest.importorskip("agents")
    import asyncio

    from evstore.integrations.openai_agents import EvstoreSession

    bucket.forge_next("s", {"role": "assistant", "tool_calls": 5})
    with pytest.raises(IntegrityError, match="not a valid message"):
        asyncio.run(EvstoreSession("s", bucket.store).get_items())


#: Valid messages (append takes them) whose inner values are of any JSON type.
ODD_MESSAGES = [
    {"role": "user", "content": [{"toolResult": {"content": 5, "toolUseId": "a"}}, 5, None, {"type": 7}, {"toolUse": 5}]},
    {"role": "user", "content": [{"toolResult": {"content": "text", "status": 3}}, {"toolUse": {"input": {"x": [1]}}}]},
    {"role": "assistant", "content": None, "tool_calls": [5, None, {"function": 3}, {"function": {"name": 5}, "id": 2}]},
    {"role": "tool", "content": [], "tool_call_id": "x", "meta": {"is_summary": True, "summary_of": "x"}},
    {"role": "system", "content": None, "meta": {"strands": {"kind": 5, "record": 5}, "openai_item": 5}},
    {"role": "user", "content": None, "meta": {"openai_item": {"type": 5, "summary": 5, "content": 5, "output": {"a": 1}}}},
]


def test_messages_with_any_json_inside_print_in_every_format(bucket: Bucket, tmp_path: Path) -> None:
    bucket.store.open("s").append(ODD_MESSAGES)
    for args in (
        ["replay", "s"],
        ["replay", "s", "--view", "context"],
        ["replay", "s", "--view", "context", "--repair", "drop"],
        ["tail", "s"],
        ["export", "s", "--format", "html", "-o", str(tmp_path / "page.html")],
        ["export", "s", "--format", "chatcli"],
    ):
        result = clean(bucket.run(*args))
        assert result.exit_code == 0, (args, result.output)
    assert "<- [a]: 5" in bucket.run("replay", "s").stdout


# ---- 3. input nested deeper than the decoder goes ---------------------------------------------------

DEEP = '{"role":"user","content":' + "[" * 100_000 + "]" * 100_000 + "}\n"


@pytest.mark.parametrize(
    "args",
    [
        ["append", "t", "--jsonl"],
        ["append", "t", "--json"],
        ["import", "t", "-", "--format", "jsonl"],
        ["import", "t", "-", "--format", "chatcli"],
    ],
)
def test_input_nested_100000_deep_is_invalid_input(bucket: Bucket, args: list[str]) -> None:
    data = DEEP if "chatcli" not in args else "[" + DEEP.strip() + "]"
    line = one_line_error(clean(bucket.run(*args, input=data)), 2)
    assert "at most 64 levels deep" in line
    assert list(bucket.store.list_sessions()) == ["s"]


def test_an_input_file_nested_100000_deep_is_invalid_input(bucket: Bucket, tmp_path: Path) -> None:
    path = tmp_path / "deep.jsonl"
    path.write_text(DEEP)
    line = one_line_error(clean(bucket.run("import", "t", str(path), "--format", "jsonl")), 2)
    assert "line 1: a message may nest lists and objects at most 64 levels deep" in line


def test_a_keyring_file_nested_100000_deep_is_invalid_input(bucket: Bucket, tmp_path: Path) -> None:
    path = tmp_path / "keyring.json"
    path.write_text('{"active": "k", "keys": {}, "extra": ' + "[" * 100_000 + "]" * 100_000 + "}")  # skipped, but parsed
    line = one_line_error(clean(bucket.run("replay", "s", env={"EVSTORE_KEYRING": str(path)})), 2)
    assert "is not JSON of the form" in line


# ---- 4. one undecodable manifest -----------------------------------------------------------------


@pytest.mark.parametrize("mode", ["--long", "--json", "--tree"])
def test_one_undecodable_manifest_is_reported_and_the_rest_listed_then_exit_5(bucket: Bucket, mode: str) -> None:
    bucket.store.open("t", create=True).append(msg("also here"))
    bucket.plant("sessions/junk/manifest", b"\xff\xfe junk \x1b[2J")
    result = clean(bucket.run("list", mode))
    line = one_line_error(result, 5)
    assert line == "evstore: cannot read 1 of the sessions listed (marked unreadable): 'junk'"
    lines = result.stdout.splitlines()
    if mode == "--json":
        by_id = {entry["session"]: entry for entry in map(msgspec.json.decode, lines)}
        assert by_id["s"]["head"] == 1 and by_id["t"]["head"] == 1
        assert by_id["junk"]["state"] == "unreadable" and "manifest does not decode" in by_id["junk"]["error"]
    else:
        assert listed(result) == ["s", "t", "junk"]
        assert "unreadable: integrity failure at session 'junk': manifest does not decode" in lines[-1]
    assert bucket.run("list").stdout.split() == ["junk", "s", "t"]


# ---- 5. a FIFO or a device as the input file ----------------------------------------------------


def run_process(bucket: Bucket, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """The command as a real process, with a deadline: a read that blocks fails the test, not the suite."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVSTORE_")}
    command = [sys.executable, "-m", "evstore_cli", "--store", bucket.path.as_uri(), *args]
    return subprocess.run(command, input=input, env=env, capture_output=True, timeout=60, check=False)


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_a_fifo_or_device_as_the_input_file_is_refused_at_once(bucket: Bucket, tmp_path: Path, kind: str) -> None:
    path = str(tmp_path / "pipe") if kind == "fifo" else kind
    if kind == "fifo":
        os.mkfifo(path)  # no writer ever opens it: an open without O_NONBLOCK would wait for ever
    done = run_process(bucket, "import", "t", path, "--format", "jsonl")
    assert done.returncode == 2, done.stderr
    assert done.stderr.decode().splitlines() == [f"evstore: input file {path!r} is not a regular file"]
    assert list(bucket.store.list_sessions()) == ["s"]


@pytest.mark.parametrize("args", [["append", "t"], ["append", "t", "--jsonl"], ["append", "t", "--json"]])
def test_dev_zero_as_appends_standard_input_is_read_bounded(bucket: Bucket, args: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVSTORE_")}
    command = [sys.executable, "-m", "evstore_cli", "--store", bucket.path.as_uri(), *args]
    with open("/dev/zero", "rb") as zeros:
        done = subprocess.run(command, stdin=zeros, env=env, capture_output=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert re.fullmatch(r"evstore: input exceeds the limit of \d+ bytes\n", done.stderr.decode())
    assert list(bucket.store.list_sessions()) == ["s"]


def test_standard_input_stays_an_input_file(bucket: Bucket) -> None:
    result = bucket.run("import", "t", "-", "--format", "jsonl", input='{"role": "user", "content": "piped"}\n')
    assert result.exit_code == 0 and "imported 1 messages into t" in result.stdout


# ---- 6. a junk salt object ---------------------------------------------------------------------------


@pytest.mark.parametrize("junk", [b"garbage", b"\xff\xfe\x00", b"QUJD", b""])
def test_a_junk_salt_makes_rekey_a_clean_integrity_error(bucket: Bucket, junk: bytes) -> None:
    bucket.plant("sessions/s/salt", junk)
    result = clean(bucket.run("rekey", "s", env={"EVSTORE_KEY": evstore.generate_key()}))
    line = one_line_error(result, 5)
    assert line == "evstore: integrity failure at session 's': salt object is not 32 bytes of base64"


# ---- 7. a junk object in a session with no events ------------------------------------------------------


def test_a_junk_event_in_an_empty_session_is_tampering_and_delete_frees_the_id(bucket: Bucket) -> None:
    """Exit 5 for every command that reaches it, never 6 "expired" (which no gc would ever clear):
    and the operator's delete fences past it, so the id starts a new session again."""
    assert bucket.run("create", "empty").exit_code == 0
    bucket.plant("sessions/empty/00000000000000000002", b"junk")
    for command in (["append", "empty", "hi"], ["info", "empty"], ["replay", "empty"], ["verify", "empty"]):
        line = one_line_error(clean(bucket.run(*command)), 5)
        assert line.startswith("evstore: integrity failure at seq 2 of session 'empty': not a valid event object")
        assert line.endswith("and seq 1 is missing before it: planted, not expired"), line
    deleted = clean(bucket.run("delete", "empty"))
    assert deleted.exit_code == 0 and "fenced at seq 3" in deleted.stdout
    assert clean(bucket.run("append", "empty", "--new", "a new start")).stdout == "4\n"
    assert clean(bucket.run("replay", "empty", "--format", "jsonl")).stdout.count("a new start") == 1
