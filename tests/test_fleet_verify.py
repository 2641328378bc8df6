"""``Store.verify_all`` and ``evstore verify --all``: every session of a store checked, in id
order, each ending in one status, resumable, and ``--since`` taking only what was written to."""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest
from click.testing import CliRunner
from evstore_cli import _fleet as fleet_cli
from evstore_cli import cli
from evstore_cli._common import CommandError, Context, StatusLine

from evstore import Keyring, LocalStore, MemoryStore, Store, StoreUnavailableError
from evstore._fleet import SessionVerdict

from .helpers import T0, Clock, CountingStore, msg


def _fleet(store: Store) -> None:
    """ok-1, ok-2 (sealed), ok-3 (a fork of ok-1), tampered (a hole), expired (its first events
    gone, as lifecycle rules remove them), deleted (remnants gc has yet to remove)."""
    for sid in ("ok-1", "ok-2", "tampered", "expired", "deleted"):
        writer = store.open(sid, create=True)
        for i in range(5):
            writer.append(msg(f"{sid} {i}"))
    store.fork("ok-1", "ok-3").append(msg("own"))
    store.backend.delete_many([store.layout.event_key("tampered", 3)])
    store.backend.delete_many([store.layout.event_key("expired", 1), store.layout.event_key("expired", 2)])
    store.delete("deleted")


def test_every_session_is_checked_in_id_order_with_its_status() -> None:
    store = Store(MemoryStore(), keyring=Keyring({"k1": bytes(range(32))}, "k1"))
    _fleet(store)
    verdicts = list(store.verify_all())
    assert [(v.session_id, v.status) for v in verdicts] == [
        ("deleted", "deleted"),
        ("expired", "expired"),
        ("ok-1", "ok"),
        ("ok-2", "ok"),
        ("ok-3", "ok"),
        ("tampered", "tampered"),
    ]
    ok = {v.session_id: v for v in verdicts if v.status == "ok"}
    assert ok["ok-3"].events == 6 and ok["ok-3"].receipt == str(store.verify("ok-3").receipt)
    assert "seq 3" in next(v.detail for v in verdicts if v.status == "tampered")
    assert [v.session_id for v in store.verify_all(start_after="ok-2")] == ["ok-3", "tampered"]
    assert [v.session_id for v in store.verify_all(prefix="ok-")] == ["ok-1", "ok-2", "ok-3"]


def test_since_takes_only_the_sessions_written_to_since() -> None:
    clock = Clock()
    memory = MemoryStore(clock=clock)
    store = Store(memory, clock=clock)
    for sid in ("a", "b", "c"):
        store.open(sid, create=True).append(msg(sid))
    clock.advance(days=2)
    store.open("b").append(msg("later"))
    memory.create(store.layout.event_key("c", 7), b"planted")  # what a create-only principal adds counts
    since = T0 + timedelta(days=1)
    assert [(v.session_id, v.status) for v in store.verify_all(since=since)] == [("b", "ok"), ("c", "tampered")]
    assert [v.session_id for v in store.verify_all(since=since, start_after="b")] == ["c"]


def _run(store: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["verify", *args], env={"EVSTORE_STORE": f"file://{store}"}, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_the_command_reports_each_session_and_fails_on_tampering(tmp_path: Path) -> None:
    store = tmp_path / "store"
    _fleet(Store(LocalStore(store)))
    code, out, err = _run(store, "--all")
    lines = out.splitlines()
    assert code == 5 and err.startswith("evstore: 1 sessions failed verification")
    assert [line.split()[:2] for line in lines[:-1]] == [
        ["deleted", "deleted:"],
        ["expired", "expired:"],
        ["ok", "ok-1:"],
        ["ok", "ok-2:"],
        ["ok", "ok-3:"],
        ["TAMPERED", "tampered:"],
    ]
    assert lines[-1] == "summary: 3 ok, 1 tampered, 1 expired, 1 deleted, 0 remnant, 0 unreadable"
    code, out, _ = _run(store, "--all", "--json", "--prefix", "ok-")
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [r.get("status") for r in rows[:-1]] == ["ok", "ok", "ok"]
    assert rows[-1] == {"summary": {"ok": 3, "tampered": 0, "expired": 0, "deleted": 0, "remnant": 0, "unreadable": 0}}
    code, out, _ = _run(store, "--all", "--resume-from", "ok-3")
    assert code == 5 and [line.split()[1] for line in out.splitlines()[:-1]] == ["tampered:"]
    assert _run(store, "--all", "ok-1")[0] == 2
    assert _run(store)[0] == 2
    assert _run(store, "ok-1", "--prefix", "x")[0] == 2
    assert _run(store, "--all", "--since", "yesterday")[0] == 2


def test_verify_all_costs_a_listing_page_then_a_manifest_two_lists_and_the_events_per_session() -> None:
    """Today's per-session reads (BENCHMARKS.md, "10. verify --all"): the manifest, the
    session's non-event objects and its event names (two LISTs), then each event."""
    counting = CountingStore(MemoryStore())
    store = Store(counting)
    for i in range(5):
        writer = store.create(f"s{i}")
        for j in range(3):
            writer.append(msg(f"{i}.{j}"))
    counting.reset()
    assert {v.status for v in store.verify_all()} == {"ok"}
    assert dict(counting.counts) == {"LIST": 1 + 5 * 2, "GET": 5 * (1 + 3)}


# ---- the status line on a terminal ---------------------------------------------------------------

WIPE = StatusLine.WIPE
FLEET_TALLY = "verify --all: 6/6 sessions checked: 3 ok, 1 tampered, 1 expired, 1 deleted, 0 remnant, 0 unreadable"


class FakeTerminal(io.StringIO):
    """Standard error as a terminal: what was written to it, and a fixed width."""

    def isatty(self) -> bool:
        return True


def test_the_status_line_is_drawn_in_place_cut_to_the_width_and_wiped_only_on_a_terminal() -> None:
    now = [0.0]
    screen = FakeTerminal()
    line = StatusLine(screen, True, width=20, interval=0.1, clock=lambda: now[0])
    line.show("first")
    line.show("too soon")  # within the interval: not redrawn
    now[0] = 0.5
    line.show("x" * 30)  # cut to 19 columns: a line that wraps could not be taken back
    line.clear()
    line.clear()
    line.show("after a clear")  # always drawn
    assert screen.getvalue() == WIPE + "first" + WIPE + "x" * 19 + WIPE + WIPE + "after a clear"
    piped = io.StringIO()
    quiet = StatusLine(piped, False, width=20)
    quiet.show("first")
    quiet.clear()
    assert piped.getvalue() == "" and not quiet.shown


def _listed(count: int) -> fleet_cli.Listed:
    """A total already counted: ``count`` sessions."""
    listed = fleet_cli.Listed(f"s{i}" for i in range(count))
    listed.wait()
    return listed


def _forever() -> Iterator[str]:
    while True:
        yield "s"


def _failing() -> Iterator[str]:
    yield "s"
    raise StoreUnavailableError("the listing failed")


def test_the_total_is_what_the_listing_found_so_far() -> None:
    counts = {"ok": 2, "tampered": 1}
    checked = "2 ok, 1 tampered, 0 expired, 0 deleted, 0 remnant, 0 unreadable"
    assert fleet_cli.tally(counts) == f"verify --all: 3 sessions checked: {checked}"
    assert fleet_cli.tally(counts, _listed(5)).startswith("verify --all: 3/5 sessions checked: 2 ok")
    counting = fleet_cli.Listed(_forever())
    counting.stop()
    counting.wait(timeout=60)
    assert not counting.complete and not counting.failed and counting.found >= 0
    counting.found = 1  # behind the sessions already checked: never shown below them
    assert fleet_cli.tally(counts, counting).startswith("verify --all: 3/3+ sessions checked")
    failed = fleet_cli.Listed(_failing())
    failed.wait(timeout=60)
    assert failed.failed and fleet_cli.tally(counts, failed) == fleet_cli.tally(counts)


class _Fleet:
    """A store of two sessions that notes how the total was listed."""

    def __init__(self) -> None:
        self.listings: list[tuple[str, str]] = []

    def list_sessions(self, prefix: str = "", *, start_after: str = "") -> Iterator[str]:
        self.listings.append((prefix, start_after))
        return iter(["a", "b"])

    def verify_all(self, **_: object) -> Iterator[SessionVerdict]:
        yield from (SessionVerdict(sid, "ok", events=1, receipt="1:" + "0" * 64) for sid in ("a", "b"))


def test_the_total_is_counted_only_for_a_terminal_and_not_with_since(capsys: pytest.CaptureFixture[str]) -> None:
    for is_terminal, since, counted in [(True, None, True), (False, None, False), (True, T0, False)]:
        fleet = _Fleet()
        line = StatusLine(FakeTerminal(), is_terminal, width=200, clock=lambda: 0.0)
        state = cast(Context, SimpleNamespace(store=fleet))
        fleet_cli.verify_all(state, prefix="p", since=since, resume_from="r", as_json=False, line=line, lines_to_terminal=False)
        assert fleet.listings == ([("p", "r")] if counted else [])
    assert capsys.readouterr().out.count("summary: 2 ok") == 3


def _fleet_context(tmp_path: Path) -> Context:
    store = tmp_path / "store"
    _fleet(Store(LocalStore(store)))
    return Context(f"file://{store}", None)


def test_the_command_counts_sessions_on_the_status_line_and_wipes_it_before_each_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    screen = FakeTerminal()
    line = StatusLine(screen, True, width=200, clock=lambda: 0.0)  # a clock that stands still: only forced redraws
    with pytest.raises(CommandError) as failed:
        fleet_cli.verify_all(
            _fleet_context(tmp_path),
            prefix="",
            since=None,
            resume_from="",
            as_json=False,
            line=line,
            lines_to_terminal=True,
            listed=_listed(6),
        )
    assert failed.value.exit_code == 5
    out = capsys.readouterr().out
    assert "\x1b" not in out and "verify --all:" not in out and len(out.splitlines()) == 7
    drawn = screen.getvalue().split(WIPE)
    # drawn before the first session, then wiped before each of the 6 lines and drawn again; wiped at the end
    assert drawn[0] == "" and drawn[-1] == ""
    shown = [text for text in drawn[1:-1] if text]
    assert len(shown) == 7 and shown[0] == fleet_cli.tally({}, _listed(6)) and shown[-1] == FLEET_TALLY
    assert screen.getvalue().count(WIPE) == 14 and not line.shown


def test_the_status_line_is_drawn_once_per_interval_when_the_lines_go_elsewhere_and_never_when_piped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    context = _fleet_context(tmp_path)
    screen = FakeTerminal()
    line = StatusLine(screen, True, width=200, clock=lambda: 0.0)
    with pytest.raises(CommandError):
        fleet_cli.verify_all(
            context, prefix="", since=None, resume_from="", as_json=True, line=line, lines_to_terminal=False, listed=_listed(6)
        )
    assert screen.getvalue() == WIPE + fleet_cli.tally({}, _listed(6)) + WIPE  # the stopped clock allows no redraw
    rows = [json.loads(row) for row in capsys.readouterr().out.splitlines()]
    assert len(rows) == 7 and rows[-1]["summary"]["tampered"] == 1
    piped = io.StringIO()
    with pytest.raises(CommandError):
        fleet_cli.verify_all(
            context, prefix="", since=None, resume_from="", as_json=False, line=StatusLine(piped, False), lines_to_terminal=False
        )
    assert piped.getvalue() == ""


class _Interrupted:
    """A store whose fleet verify is interrupted (Ctrl-C) after one session."""

    def verify_all(self, **_: object) -> Iterator[SessionVerdict]:
        yield SessionVerdict("a", "ok", events=1, receipt="1:" + "0" * 64)
        raise KeyboardInterrupt


def test_ctrl_c_wipes_the_status_line(capsys: pytest.CaptureFixture[str]) -> None:
    screen = FakeTerminal()
    line = StatusLine(screen, True, width=200, clock=lambda: 0.0)
    state = cast(Context, SimpleNamespace(store=_Interrupted()))
    with pytest.raises(KeyboardInterrupt):
        fleet_cli.verify_all(
            state, prefix="", since=None, resume_from="", as_json=False, line=line, lines_to_terminal=False, listed=_listed(1)
        )
    assert screen.getvalue() == WIPE + fleet_cli.tally({}, _listed(1)) + WIPE and not line.shown
    assert capsys.readouterr().out.startswith("ok          a: 1 events")


def test_the_real_command_shows_the_status_line_on_a_terminal_only(tmp_path: Path) -> None:
    """``evstore verify --all`` in a process whose standard error is a pseudo-terminal (and its
    standard output a pipe): the status line is drawn there (redrawn at most every 0.1 s, so
    how often is the machine's) and wiped before the error line."""
    store = tmp_path / "store"
    _fleet(Store(LocalStore(store)))
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 200, 0, 0))
    env = {**os.environ, "EVSTORE_STORE": f"file://{store}"}
    with subprocess.Popen(
        [sys.executable, "-m", "evstore_cli", "verify", "--all"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
        env=env,
    ) as process:
        os.close(slave)
        out, _ = process.communicate(timeout=120)
    screen = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the terminal's other end closed and everything was read
            break
        if not chunk:
            break
        screen += chunk
    os.close(master)
    assert process.returncode == 5
    wipe = WIPE.encode()
    assert re.match(rb"\r\x1b\[Kverify --all: 0/\d\+? sessions checked: 0 ok, 0 tampered", screen), screen
    assert screen.endswith(wipe + b"evstore: 1 sessions failed verification (tampered)\r\n")
    assert b"\x1b" not in out and out.decode().splitlines()[-1] == (
        "summary: 3 ok, 1 tampered, 1 expired, 1 deleted, 0 remnant, 0 unreadable"
    )


def test_an_object_planted_under_an_id_without_a_manifest_is_a_remnant_not_a_failed_run(tmp_path: Path) -> None:
    store = Store(LocalStore(tmp_path))
    store.create("real").append({"role": "user", "content": "hi"})
    store.backend.create("sessions/jj/zzz", b"junk")  # what one who may create objects can plant
    found = {v.session_id: v.status for v in store.verify_all()}
    assert found == {"jj": "remnant", "real": "ok"}
    result = CliRunner().invoke(cli, ["--store", f"file://{tmp_path}", "verify", "--all"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == "summary: 1 ok, 0 tampered, 0 expired, 0 deleted, 1 remnant, 0 unreadable"
