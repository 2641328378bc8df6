"""Import and export: the pure conversions (evstore._formats) and the commands (cli/_ecosystem.py)."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from evstore_cli import cli

from evstore import InvalidInputError, LocalStore, Store
from evstore._codec import MessagesBody, encode_body
from evstore._formats import batch_messages, parse_chatcli, parse_jsonl, render_chatcli, render_jsonl

FIXTURES = Path(__file__).parent / "fixtures"
CHATCLI = FIXTURES / "chatcli-v2-session.json"
HARNESS = FIXTURES / "harness-session.jsonl"


@pytest.fixture(autouse=True)
def _fixtures_present() -> None:
    if not CHATCLI.exists() or not HARNESS.exists():
        pytest.fail(f"fixtures missing under {FIXTURES}")


def evstore(store_dir: Path, *args: str, input: bytes | None = None) -> Any:
    return CliRunner().invoke(cli, ["--store", store_dir.as_uri(), *args], input=input, catch_exceptions=False)


# ---- pure conversions --------------------------------------------------------


def test_chatcli_v2_round_trips_to_the_same_json_value() -> None:
    data = CHATCLI.read_bytes()
    assert render_chatcli(parse_chatcli(data)) == json.loads(data)


def test_chatcli_file_fields_go_into_the_first_message_meta() -> None:
    messages = parse_chatcli(CHATCLI.read_bytes())
    entry = messages[0]["meta"]["chatcli_file"]
    assert entry["fields"]["title"] == "Why does the nightly export stall"
    assert entry["fields"]["chat_history"] is None
    assert messages[1:] == json.loads(CHATCLI.read_bytes())["chat_history"][1:]


def test_chatcli_older_list_format_round_trips() -> None:
    legacy = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello", "meta": {"mode": "chat"}}]
    messages = parse_chatcli(json.dumps(legacy))
    assert render_chatcli(messages) == legacy


def test_chatcli_unknown_top_level_fields_and_their_order_survive() -> None:
    original = {"title": "t", "chat_history": [{"role": "user", "content": "x"}], "version": 2, "custom": {"a": [1]}}
    back = render_chatcli(parse_chatcli(json.dumps(original)))
    assert back == original and list(back) == list(original)


def test_chatcli_export_of_a_session_from_elsewhere_is_a_v2_file() -> None:
    out = render_chatcli([{"role": "user", "content": "x"}])
    assert out["version"] == 2 and out["chat_history"] == [{"role": "user", "content": "x"}]
    assert out["agent_history"] == [] and out["coder_history"] == []


def test_chatcli_refuses_a_file_without_messages() -> None:
    with pytest.raises(InvalidInputError, match="no messages"):
        parse_chatcli(b'{"version": 2, "chat_history": []}')


def test_jsonl_round_trips_line_by_line() -> None:
    lines = HARNESS.read_text().splitlines()
    rendered = b"".join(render_jsonl(parse_jsonl(lines))).decode().splitlines()
    assert [json.loads(line) for line in rendered] == [json.loads(line) for line in lines if line.strip()]


def test_jsonl_accepts_replay_lines() -> None:
    line = json.dumps({"seq": 3, "ts": "2026-01-01T00:00:00Z", "message": {"role": "user", "content": "x"}})
    assert list(parse_jsonl([line])) == [{"role": "user", "content": "x"}]


def test_jsonl_names_the_line_of_an_invalid_message() -> None:
    with pytest.raises(InvalidInputError, match="line 2"):
        list(parse_jsonl(['{"role": "user", "content": "ok"}', '{"role": "robot", "content": "no"}']))


def test_batches_stay_within_the_event_limit_and_keep_order() -> None:
    messages = [{"role": "user", "content": "x" * (100 + i * 37 % 900)} for i in range(60)]
    batches = list(batch_messages(messages, 1500))
    assert len(batches) > 1
    assert [m for batch in batches for m in batch] == messages
    for batch in batches:
        encode_body(MessagesBody(batch), 1500)  # raises when over the limit
    merged = [batches[i] + batches[i + 1][:1] for i in range(len(batches) - 1)]
    assert all(len(encode_body(MessagesBody(m), 10**9)) > 1500 for m in merged)  # greedy: no batch could take one more


def test_a_message_larger_than_an_event_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="message 2"):
        list(batch_messages([{"role": "user", "content": "a"}, {"role": "user", "content": "b" * 2000}], 1000))


# ---- commands ----------------------------------------------------------------


def test_import_then_export_chatcli_reproduces_the_fixture(tmp_path: Path) -> None:
    assert evstore(tmp_path, "import", "c", str(CHATCLI), "--format", "chatcli").exit_code == 0
    result = evstore(tmp_path, "export", "c", "--format", "chatcli")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == json.loads(CHATCLI.read_bytes())


def test_import_then_export_jsonl_reproduces_the_harness_file(tmp_path: Path) -> None:
    assert evstore(tmp_path, "import", "h", str(HARNESS), "--format", "jsonl").exit_code == 0
    result = evstore(tmp_path, "export", "h", "--format", "jsonl")
    expected = [json.loads(line) for line in HARNESS.read_text().splitlines() if line.strip()]
    assert [json.loads(line) for line in result.stdout.splitlines()] == expected


def test_an_imported_harness_session_resumes_with_its_dangling_call_answered(tmp_path: Path) -> None:
    evstore(tmp_path, "import", "h", str(HARNESS), "--format", "jsonl")
    context = Store(LocalStore(tmp_path)).context("h")
    assert context[-1]["role"] == "tool" and context[-1]["tool_call_id"] == "t2" and context[-1]["meta"]["synthetic"]


def test_import_is_one_event(tmp_path: Path) -> None:
    evstore(tmp_path, "import", "c", str(CHATCLI), "--format", "chatcli")
    events = list(Store(LocalStore(tmp_path)).replay("c"))
    assert [len(e.messages) for e in events] == [7]


def test_import_larger_than_an_event_is_split_into_several(tmp_path: Path) -> None:
    big = b"".join(json.dumps({"role": "user", "content": "x" * (1 << 20)}).encode() + b"\n" for _ in range(7))
    result = evstore(tmp_path, "import", "big", "-", "--format", "jsonl", "--json", input=big)
    report = json.loads(result.stdout)
    assert report["messages"] == 7 and report["events"] == 2
    assert [len(e.messages) for e in Store(LocalStore(tmp_path)).replay("big")] == [4, 3]


def test_import_into_an_existing_session_is_refused(tmp_path: Path) -> None:
    evstore(tmp_path, "import", "h", str(HARNESS), "--format", "jsonl")
    result = evstore(tmp_path, "import", "h", str(HARNESS), "--format", "jsonl")
    assert result.exit_code == 4
    assert Store(LocalStore(tmp_path)).info("h").head == 1


def test_import_of_invalid_input_writes_nothing(tmp_path: Path) -> None:
    result = evstore(tmp_path, "import", "bad", "-", "--format", "jsonl", input=b'{"role": "user"}\n{"role": 7}\n')
    assert result.exit_code == 2 and "line 2" in result.stderr
    assert list(Store(LocalStore(tmp_path)).list_sessions()) == []


def test_import_json_reports_the_result(tmp_path: Path) -> None:
    result = evstore(tmp_path, "import", "c", str(CHATCLI), "--format", "chatcli", "--json")
    assert json.loads(result.stdout) == {"session": "c", "messages": 7, "events": 1, "first_seq": 1, "head": 1}


def test_export_reads_the_audit_view_and_notes_rewinds(tmp_path: Path) -> None:
    evstore(tmp_path, "import", "h", str(HARNESS), "--format", "jsonl")
    Store(LocalStore(tmp_path)).open("h").rewind(0)
    result = evstore(tmp_path, "export", "h", "--format", "jsonl")
    assert len(result.stdout.splitlines()) == 4
    assert "1 rewinds" in result.stderr


def test_export_to_a_file_with_json_summary(tmp_path: Path) -> None:
    evstore(tmp_path, "import", "c", str(CHATCLI), "--format", "chatcli")
    target = tmp_path / "out.json"
    result = evstore(tmp_path, "export", "c", "--format", "chatcli", "-o", str(target), "--json")
    assert json.loads(result.stdout)["messages"] == 7
    assert json.loads(target.read_bytes()) == json.loads(CHATCLI.read_bytes())


def test_export_json_without_output_file_is_a_usage_error(tmp_path: Path) -> None:
    evstore(tmp_path, "import", "c", str(CHATCLI), "--format", "chatcli")
    assert evstore(tmp_path, "export", "c", "--format", "jsonl", "--json").exit_code == 2


def test_export_of_a_missing_session_exits_3(tmp_path: Path) -> None:
    assert evstore(tmp_path, "export", "nope", "--format", "jsonl").exit_code == 3


def test_no_progress_bar_when_stderr_is_piped(tmp_path: Path) -> None:
    result = evstore(tmp_path, "import", "c", str(CHATCLI), "--format", "chatcli")
    assert result.stderr == ""


def _run_with_tty_stderr(args: list[str]) -> tuple[int, str]:
    """Run the command with stderr on a pseudo-terminal; return its exit code and what the terminal got."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=follower, stdin=subprocess.DEVNULL)
    os.close(follower)
    chunks = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.5)
        if ready:
            try:
                data = os.read(leader, 4096)
            except OSError:  # the terminal closed: the process is done
                break
            if not data:
                break
            chunks.append(data)
        elif process.poll() is not None:
            break
    os.close(leader)
    return process.wait(timeout=60), b"".join(chunks).decode(errors="replace")


def test_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "from evstore_cli import main; main()", "--store", tmp_path.as_uri()]
    code, terminal = _run_with_tty_stderr([*command, "import", "c", str(CHATCLI), "--format", "chatcli"])
    assert code == 0 and "importing c" in terminal
    code, terminal = _run_with_tty_stderr([*command, "export", "c", "--format", "jsonl"])
    assert code == 0 and "exporting c" in terminal


@pytest.mark.slow
def test_a_jsonl_import_streams_so_memory_stays_near_one_event(tmp_path: Path) -> None:
    """A 30 MB file (which once peaked at 491 MB): memory holds one event's messages, the bytes a
    writer keeps for compaction (16 MiB at most) and a segment being packed, not the file."""
    import tracemalloc

    source = tmp_path / "big.jsonl"
    line = json.dumps({"role": "user", "content": "x" * 1000}) + "\n"
    source.write_text(line * 30_000)
    store_dir = tmp_path / "store"
    tracemalloc.start()
    try:
        result = evstore(store_dir, "import", "big", str(source), "--format", "jsonl")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.exit_code == 0, result.output
    assert "imported 30000 messages" in result.output
    assert peak < 48 * 1024 * 1024 < source.stat().st_size * 2
    assert sum(len(e.messages) for e in Store(LocalStore(store_dir)).replay("big")) == 30_000


def test_a_bad_line_late_in_a_jsonl_import_writes_nothing(tmp_path: Path) -> None:
    source = tmp_path / "bad.jsonl"
    source.write_text(json.dumps({"role": "user", "content": "ok"}) + "\n" + "{not json}\n")
    result = evstore(tmp_path / "store", "import", "s", str(source), "--format", "jsonl")
    assert result.exit_code == 2 and "line 2" in result.output
    assert list(Store(LocalStore(tmp_path / "store")).list_sessions()) == []
