"""The command given hostile option values and hostile streams (from a fuzzing pass): empty
values, nan and the infinities, numbers that overflow, line separators inside JSON lines,
closed or full standard streams, a session name that is not UTF-8. Each case ends in the
true output, or one line on standard error with its documented exit code: never a traceback,
never "unexpected failure", never a hang, never a silent success that drops what was asked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from evstore_cli import cli

from evstore import LocalStore, Store

from .helpers import msg
from .test_cli_usability import one_line_error

EVSTORE = [sys.executable, "-m", "evstore_cli"]
Run = Callable[..., Result]


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    """A local store holding session ``c``: three events."""
    path = tmp_path / "store"
    session = Store(LocalStore(path)).open("c", create=True)
    for i in (1, 2, 3):
        session.append(msg(f"msg {i}"))
    return path


@pytest.fixture
def run(store_path: Path) -> Run:
    """``evstore ARGS`` in process, against the local store (``EVSTORE_STORE``)."""

    def invoke(*args: str, input: str | bytes | None = None, env: dict[str, str | None] | None = None) -> Result:
        environment = {"EVSTORE_STORE": store_path.as_uri(), "EVSTORE_KEY": None, "EVSTORE_KEYRING": None, **(env or {})}
        return CliRunner().invoke(cli, list(args), input=input, env=environment, catch_exceptions=False)

    return invoke


def run_process(store_path: Path, *args: str, **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    """``evstore ARGS`` as a process of its own (its standard streams are real files)."""
    env = {**os.environ, "EVSTORE_STORE": store_path.as_uri()}
    return subprocess.run([*EVSTORE, *args], env=env, timeout=60, check=False, **kwargs)  # type: ignore[call-overload, no-any-return]


def ok(result: Result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.output, result.stderr)
    return result.stdout


# ---- 1. an empty value given explicitly is refused, not dropped ---------------------------------


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["verify", "c", "--expect", ""], "--expect"),
        (["verify", "--all", "--since", ""], "--since"),
        (["gc", "--dry-run", "--now", ""], "--now"),
        (["keygen", "--keyring", ""], "--keyring"),
        (["keygen", "--key-id", ""], "--key-id"),
        (["--store", "", "list"], "--store"),
        (["--endpoint-url", "", "list"], "--endpoint-url"),
    ],
)
def test_an_empty_option_value_is_exit_2_not_the_option_left_out(run: Run, args: list[str], option: str) -> None:
    line = one_line_error(run(*args), 2)
    assert line.startswith(f"evstore: {option} is empty"), line


def test_check_proof_refuses_an_empty_tree_head_instead_of_trusting_the_proof_alone(run: Run) -> None:
    proof = ok(run("prove", "c", "1"))
    assert ok(run("check-proof", "-", input=proof)).startswith("ok: event 1")
    line = one_line_error(run("check-proof", "-", "--tree-head", "", input=proof), 2)
    assert line.startswith("evstore: --tree-head is empty"), line


def test_verify_all_refuses_an_empty_session_argument(run: Run) -> None:
    assert "give no SESSION" in one_line_error(run("verify", "", "--all"), 2)


def test_an_empty_environment_variable_still_counts_as_unset(run: Run, tmp_path: Path) -> None:
    assert one_line_error(run("--store", "", "list"), 2).startswith("evstore: --store is empty")
    home = {"EVSTORE_STORE": "", "AWS_ENDPOINT_URL": "", "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data")}
    assert ok(run("list", env=home)) == ""  # the default local store, empty


# ---- 2. line separators: a line is what ends in "\n" --------------------------------------------


def test_replay_jsonl_with_line_separators_in_strings_copies_through_append_jsonl(run: Run) -> None:
    content = "a\u2028b\u2029c\x0cd\x1ce\x85f"
    assert ok(run("append", "sep", "--json", input=json.dumps({"role": "user", "content": content}))) == "1\n"
    replayed = ok(run("replay", "sep", "--format", "jsonl"))
    assert "\u2028" in replayed  # written raw, as JSON allows
    assert ok(run("append", "copy", "--jsonl", input=replayed)) == "1\n"
    copied = [json.loads(line) for line in ok(run("replay", "copy", "--format", "jsonl")).split("\n") if line]
    assert [line["message"] for line in copied] == [{"role": "user", "content": content}]


def test_an_error_names_the_line_of_the_file(run: Run, tmp_path: Path) -> None:
    good = json.dumps(msg("fine"))
    data = f"\x0c\r\n{good}\r\n\x1c\u2028\nnot json\n"  # the bad line is the file's 4th
    assert one_line_error(run("append", "c", "--jsonl", input=data), 2).startswith("evstore: line 4: invalid JSON")
    (tmp_path / "in.jsonl").write_text(data, encoding="utf-8")
    assert one_line_error(run("import", "new", str(tmp_path / "in.jsonl"), "--format", "jsonl"), 2).startswith(
        "evstore: line 4: invalid JSON"
    )


# ---- 3. --idempotency-key with --jsonl: KEY:N for the file's line N, from 0 ----------------------------


def test_jsonl_idempotency_keys_are_the_files_line_numbers(run: Run) -> None:
    data = f"{json.dumps(msg('one'))}\n\n{json.dumps(msg('three'))}\n"  # lines 0 and 2
    assert ok(run("append", "k", "--jsonl", "--idempotency-key", "K", input=data)) == "1\n2\n"
    assert ok(run("append", "k", "--jsonl", "--idempotency-key", "K", input=data)) == "1\n2\n"  # a retry
    assert ok(run("append", "k", "three", "--idempotency-key", "K:2")) == "2\n"  # line 2's key: done already
    assert ok(run("append", "k", "one", "--idempotency-key", "K:0")) == "1\n"
    assert ok(run("append", "k", "new", "--idempotency-key", "K:1")) == "3\n"  # the blank line keyed nothing


def test_a_replayed_event_of_several_lines_is_keyed_by_its_first_line(run: Run) -> None:
    lines = [
        {"seq": 1, "ts": "2026-01-01T00:00:00Z", "message": msg("a")},
        {"seq": 1, "ts": "2026-01-01T00:00:00Z", "message": msg("b")},
        {"seq": 2, "ts": "2026-01-01T00:00:00Z", "message": msg("c")},
    ]
    data = "".join(json.dumps(line) + "\n" for line in lines)
    assert ok(run("append", "g", "--jsonl", "--idempotency-key", "K", input=data)) == "1\n2\n"
    assert ok(run("append", "g", "c", "--idempotency-key", "K:2")) == "2\n"


# ---- 4, 5, 6. numbers: nan, the infinities, overflows, the library's bounds ----------------------


@pytest.mark.parametrize(
    "args",
    [
        ["tail", "c", "-f", "--timeout", "1", "--interval", "nan"],
        ["tail", "c", "-f", "--timeout", "1", "--interval", "inf"],
        ["tail", "c", "-f", "--timeout", "1", "--interval", "1e10"],
        ["tail", "c", "-f", "--timeout", "inf", "--max-events", "1"],
        ["gc", "--dry-run", "--grace", "nan"],
        ["gc", "--dry-run", "--grace", "3000000d"],
        ["gc", "--dry-run", "--now", "0001-01-01"],
        ["gc", "--dry-run", "--now", "0001-01-01T00:00:00+12:00"],
        ["gc", "--dry-run", "--now", "9999-12-31T23:59:59-12:00"],
    ],
)
def test_nan_infinities_and_overflowing_values_are_exit_2(run: Run, args: list[str]) -> None:
    one_line_error(run(*args), 2)


def test_a_time_out_of_the_years_says_which_years(run: Run) -> None:
    line = one_line_error(run("gc", "--dry-run", "--now", "0001-01-01"), 2)
    assert "give a year from 1970 to 9000" in line, line
    ok(run("gc", "--dry-run", "--now", "1970-01-01"))  # the first year accepted
    assert "from 0 to 3650 days" in one_line_error(run("gc", "--dry-run", "--grace", "3651d"), 2)
    ok(run("gc", "--dry-run", "--grace", "3650d"))


@pytest.mark.parametrize("option", ["--connect-timeout", "--read-timeout", "--retry-deadline"])
def test_a_nan_network_option_is_refused_before_any_command_runs(run: Run, option: str) -> None:
    # keygen opens no store: a value only the library checks would go unchecked there
    line = one_line_error(run(option, "nan", "keygen"), 2)
    assert line == f"evstore: Invalid value for '{option}': 'nan' is not a finite number.", line


def test_retry_deadline_has_the_librarys_bound(run: Run) -> None:
    line = one_line_error(run("--retry-deadline", "3601", "keygen"), 2)
    assert line == "evstore: Invalid value for '--retry-deadline': 3601.0 is not in the range 0<x<=3600.", line
    assert ok(run("--retry-deadline", "3600", "list")) == "c\n"


def test_tail_follow_with_a_nan_timeout_ends_at_once(store_path: Path) -> None:
    done = run_process(store_path, "tail", "c", "-f", "--timeout", "nan", capture_output=True)  # timeout=60: no hang
    assert done.returncode == 2, done
    assert done.stderr.decode().splitlines() == ["evstore: Invalid value for '--timeout': 'nan' is not a finite number."]


# ---- 7. closed standard streams ------------------------------------------------------------------


def test_a_closed_standard_error_fails_no_command(store_path: Path) -> None:
    done = run_process(store_path, "list", preexec_fn=lambda: os.close(2), stdout=subprocess.PIPE)  # 2>&-
    assert (done.returncode, done.stdout) == (0, b"c\n"), done
    missing = run_process(store_path, "info", "nope", preexec_fn=lambda: os.close(2), stdout=subprocess.PIPE)
    assert missing.returncode == 3, missing  # the documented code, with nowhere to say why


def test_a_closed_standard_output_fails_no_command(store_path: Path) -> None:
    for command in (["list"], ["replay", "c", "--format", "jsonl"], ["replay", "c", "--format", "json"]):
        done = run_process(store_path, *command, preexec_fn=lambda: os.close(1), stderr=subprocess.PIPE)  # >&-
        assert (done.returncode, done.stderr) == (0, b""), (command, done)


def test_append_with_no_input_at_all_appends_nothing(run: Run, store_path: Path) -> None:
    """An empty pipe or file, or a closed standard input, is a pipeline that produced nothing: it was
    an empty message appended, with exit 0. An empty message is still TEXT ''."""
    for flags in ([], ["--json"], ["--jsonl"]):
        assert one_line_error(run("append", "c", *flags, input=""), 2).startswith("evstore: ")
    closed = run_process(store_path, "append", "c", preexec_fn=lambda: os.close(0), stderr=subprocess.PIPE)  # <&-
    assert closed.returncode == 2 and closed.stderr.count(b"\n") == 1, closed
    assert Store(LocalStore(store_path)).info("c").head == 3  # nothing appended
    assert ok(run("append", "c", "")) == "4\n"
    assert ok(run("append", "c", input="\n")) == "5\n"  # a line with nothing on it is a message
    assert [m["content"] for m in Store(LocalStore(store_path)).context("c")][3:] == ["", ""]


# ---- 8. a session name that is not UTF-8 -----------------------------------------------------------


def test_a_name_that_is_not_utf8_is_listed_with_escapes_in_text_and_json(run: Run, store_path: Path) -> None:
    os.mkdir(os.path.join(os.fsencode(store_path), b"objects", b"sessions", b"\xff\xfe"))
    assert ok(run("list")) == "c\n\\xff\\xfe\n"
    listed = run("list", "--json")
    assert "(marked unreadable)" in one_line_error(listed, 5)
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [row["session"] for row in rows] == ["c", "\\xff\\xfe"]
    assert rows[1]["state"] == "unreadable"
    verified = run("verify", "--all", "--json")
    assert one_line_error(verified, 1) == "evstore: 1 sessions could not be read"
    found = [json.loads(line) for line in verified.stdout.splitlines()]
    assert [row.get("session_id") for row in found[:2]] == ["c", "\\xff\\xfe"]
    assert found[1]["status"] == "unreadable"


# ---- 9. standard output: a closed pipe, a full device ----------------------------------------------


def big_session(store_path: Path) -> None:
    """Session ``big``: one event of 2,000 messages, far more than a pipe's buffer as JSON lines."""
    Store(LocalStore(store_path)).open("big", create=True).append([msg(f"m{i} " + "x" * 200) for i in range(2000)])


def test_export_into_a_reader_that_goes_away_ends_quietly_as_replay_does(store_path: Path) -> None:
    big_session(store_path)
    env = {**os.environ, "EVSTORE_STORE": store_path.as_uri()}
    command = ["export", "big", "--format", "jsonl"]
    with subprocess.Popen([*EVSTORE, *command], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.readline()  # what `| head -1` reads
        process.stdout.close()
        errors = process.stderr.read()
        assert process.wait(timeout=60) == 0, errors
    assert errors == b""


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize(
    "command",
    [
        ["list"],
        ["list", "--json"],
        ["info", "c"],
        ["verify", "c"],
        ["replay", "c"],
        ["replay", "big", "--format", "jsonl"],
        ["replay", "c", "--format", "json"],
        ["export", "big", "--format", "jsonl"],
        ["prove", "c", "1"],
        ["lifecycle", "show"],
    ],
)
def test_a_full_standard_output_is_exit_2_in_one_line(store_path: Path, command: list[str]) -> None:
    big_session(store_path)
    with open("/dev/full", "wb") as full:
        done = run_process(store_path, *command, stdout=full, stderr=subprocess.PIPE)
    assert done.returncode == 2, done
    assert done.stderr.decode().splitlines() == ["evstore: cannot write to standard output: No space left on device"]


def test_a_rewind_line_after_plain_message_lines_is_exit_2_and_appends_nothing(run: Run) -> None:
    data = f"{json.dumps(msg('one'))}\n{json.dumps(msg('two'))}\n" + json.dumps({"rewind": {"to_seq": 1}}) + "\n"
    result = run("append", "p", "--jsonl", input=data)
    assert result.exit_code == 2, result.output
    assert "line 3: a rewind line follows plain message lines (line 1)" in result.output
    assert run("replay", "p").exit_code == 3  # nothing appended: the session was never made


# ---- 10. a mistyped store path, options that contradict each other ---------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["list"],
        ["info", "c"],
        ["replay", "c"],
        ["tail", "c"],
        ["verify", "c"],
        ["export", "c", "--format", "jsonl"],
        ["prove", "c", "1"],
        ["tree-head", "c"],
        ["gc", "--dry-run"],
        ["compact", "c"],
        ["delete", "c"],
        ["fork", "c", "d"],
        ["rewind", "c", "--to", "1"],
        ["lifecycle", "show"],
    ],
)
@pytest.mark.parametrize("named_by", ["--store", "EVSTORE_STORE"])
def test_a_command_that_creates_no_session_fails_where_no_store_is_and_makes_nothing(
    run: Run, tmp_path: Path, command: list[str], named_by: str
) -> None:
    """Only append, create, import and lifecycle apply make a store. Any other command, as for a
    missing bucket: exit 1 in one line, and the mistyped path is left as it was; a directory that
    holds other files is no store either."""
    other = tmp_path / "home"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    cases = {tmp_path / "typo" / "store": "it does not exist", other: "it holds other files, and no evstore objects"}
    for path, why in cases.items():
        if named_by == "--store":
            result = run("--store", path.as_uri(), *command)
        else:
            result = run(*command, env={"EVSTORE_STORE": path.as_uri()})
        assert one_line_error(result, 1) == f"evstore: no store in directory {str(path)!r}: {why}"
    assert not (tmp_path / "typo").exists()
    assert [p.name for p in other.iterdir()] == ["notes.txt"]


def test_an_empty_directory_is_an_empty_store_to_a_read(run: Run, tmp_path: Path) -> None:
    """As an empty bucket is: nothing listed, a session not found (exit 3)."""
    empty = tmp_path / "empty"
    empty.mkdir()
    assert ok(run("--store", empty.as_uri(), "list")) == ""
    assert one_line_error(run("--store", empty.as_uri(), "replay", "c"), 3) == "evstore: session 'c' not found"


def test_the_commands_that_create_a_session_or_set_rules_make_the_store(run: Run, tmp_path: Path) -> None:
    (tmp_path / "m.jsonl").write_text(json.dumps(msg("hello")) + "\n")
    commands = {
        "append": ["append", "s", "hello"],
        "create": ["create", "s"],
        "import": ["import", "s", str(tmp_path / "m.jsonl"), "--format", "jsonl"],
        "lifecycle apply": ["lifecycle", "apply"],
    }
    for name, command in commands.items():
        url = (tmp_path / name / "store").as_uri()
        ok(run("--store", url, *command))
        assert ok(run("--store", url, "list")) == ("" if name == "lifecycle apply" else "s\n")


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["list", "--long", "--json"], "--long, --tree and --json are alternatives: give one"),
        (["list", "--tree", "--long"], "--long, --tree and --json are alternatives: give one"),
        (["list", "--tree", "--json"], "--long, --tree and --json are alternatives: give one"),
        (["tail", "c", "--from", "2", "-n", "1"], "--from and -n/--events are alternatives: give one"),
        (["tail", "c", "--from", "2", "--events", "10"], "--from and -n/--events are alternatives: give one"),
        (["tail", "c", "--timeout", "1"], "--timeout: only with --follow"),
        (["tail", "c", "--interval", "1", "--timeout", "1"], "--interval and --timeout: only with --follow"),
    ],
)
def test_options_that_contradict_each_other_are_exit_2(run: Run, args: list[str], error: str) -> None:
    assert error in one_line_error(run(*args), 2)


def test_the_options_each_alone_still_work(run: Run) -> None:
    assert ok(run("list", "--json")).count("\n") == 1
    assert ok(run("tail", "c", "--from", "2")).splitlines() == ["[2] user: msg 2", "[3] user: msg 3"]
    assert ok(run("tail", "c", "-n", "1")).splitlines() == ["[3] user: msg 3"]
    assert ok(run("tail", "c", "-f", "--interval", "0.05", "--timeout", "0.2")).count("\n") == 3
