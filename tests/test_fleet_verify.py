"""``Store.verify_all`` and ``evstore verify --all``: every session of a store checked, in id
order, each ending in one status, resumable, and ``--since`` taking only what was written to."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from click.testing import CliRunner
from evstore_cli import cli

from evstore import Keyring, LocalStore, MemoryStore, Store

from .helpers import T0, Clock, msg


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
    assert lines[-1] == "summary: 3 ok, 1 tampered, 1 expired, 1 deleted, 0 unreadable"
    code, out, _ = _run(store, "--all", "--json", "--prefix", "ok-")
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [r.get("status") for r in rows[:-1]] == ["ok", "ok", "ok"]
    assert rows[-1] == {"summary": {"ok": 3, "tampered": 0, "expired": 0, "deleted": 0, "unreadable": 0}}
    code, out, _ = _run(store, "--all", "--resume-from", "ok-3")
    assert code == 5 and [line.split()[1] for line in out.splitlines()[:-1]] == ["tampered:"]
    assert _run(store, "--all", "ok-1")[0] == 2
    assert _run(store)[0] == 2
    assert _run(store, "ok-1", "--prefix", "x")[0] == 2
    assert _run(store, "--all", "--since", "yesterday")[0] == 2
