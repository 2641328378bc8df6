"""``evstore.integrations.parquet.export`` and ``evstore export --all --format parquet``: every
verified event of a store as one Parquet row, partitioned by day, read back with DuckDB.

The fleet: plaintext and encrypted sessions over several days, a fork of each, a rewind, a
session that fails verification (a hole at seq 3, after two good events), an expired one, a
deleted one, and one sealed under a key the exporting keyring lacks (locked).
"""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from evstore_cli import cli

from evstore import Event, EvstoreError, InvalidInputError, Keyring, LocalStore, Store, StoreUnavailableError
from evstore._backends._s3 import S3Store
from evstore._codec import MessagesBody
from evstore.integrations import parquet
from evstore.integrations.parquet import _report, _rows, _writer

from .helpers import T0, Clock, msg, python_output

K1 = Keyring({"k1": bytes(range(32))}, "k1")
K2 = Keyring({"k2": bytes(range(1, 33))}, "k2")
HEALTHY = {"plain-1", "plain-1-b", "plain-2", "sealed-1", "sealed-1-b"}


def _call(name: str, call_id: str) -> dict[str, Any]:
    function = {"name": name, "arguments": "{}"}
    return {"role": "assistant", "content": None, "tool_calls": [{"id": call_id, "type": "function", "function": function}]}


def _fleet(root: Path) -> Clock:
    """The fleet of the module docstring, written day by day from T0 (2026-03-01 10:30 UTC)."""
    clock = Clock()
    plain = Store(LocalStore(root), clock=clock)
    sealed = Store(LocalStore(root), clock=clock, keyring=K1)
    other = Store(LocalStore(root), clock=clock, keyring=K2)
    p1 = plain.open("plain-1", create=True)
    p1.append(msg("find the invoice"))
    p1.append(_call("search", "c1"))
    p1.append({"role": "tool", "tool_call_id": "c1", "content": "invoice 7"})
    clock.advance(days=1)  # 2026-03-02
    s1 = sealed.open("sealed-1", create=True)
    s1.append([msg("sealed question"), {"role": "assistant", "content": [{"type": "text", "text": "sealed answer"}]}])
    s1.append(_call("fetch", "c2"))
    p2 = plain.open("plain-2", create=True)
    p2.append(msg("one"))
    p2.append(msg("two"))
    p2.rewind(1)
    for sid, store in (("tampered", plain), ("expired", plain), ("deleted", plain), ("locked", other)):
        writer = store.open(sid, create=True)
        for i in range(5):
            writer.append(_call("search", f"{sid}-{i}") if i == 1 else msg(f"{sid} {i}"))
    clock.advance(days=2)  # 2026-03-04
    plain.fork("plain-1", "plain-1-b", at=2).append(_call("delete_file", "c3"))
    sealed.fork("sealed-1", "sealed-1-b").append(_call("search", "c4"))
    plain.backend.delete_many([plain.layout.event_key("tampered", 3)])
    plain.backend.delete_many([plain.layout.event_key("expired", 1), plain.layout.event_key("expired", 2)])
    plain.delete("deleted")
    return clock


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    _fleet(tmp_path / "store")
    return tmp_path / "store"


def _sql(out: Path | str, query: str) -> list[tuple[Any, ...]]:
    """``query`` with ``rows`` standing for every row of the export at ``out``."""
    source = f"read_parquet('{out}/**/*.parquet', hive_partitioning=true)"
    return duckdb.sql(query.replace("rows", source)).fetchall()


def test_every_verified_event_is_one_row_and_nothing_else(fleet: Path, tmp_path: Path) -> None:
    store = Store(LocalStore(fleet), keyring=K1)
    seen: list[parquet.SessionOutcome] = []
    report = parquet.export(store, tmp_path / "out", on_session=seen.append)
    assert [(o.session_id, o.status) for o in seen] == [
        ("deleted", "deleted"),
        ("expired", "expired"),
        ("locked", "locked"),
        ("plain-1-b", "exported"),  # the store's listing order: "plain-1-b/" before "plain-1/"
        ("plain-1", "exported"),
        ("plain-2", "exported"),
        ("sealed-1-b", "exported"),
        ("sealed-1", "exported"),
        ("tampered", "tampered"),
    ]
    assert report.counts == {"exported": 5, "tampered": 1, "expired": 1, "deleted": 1, "remnant": 0, "locked": 1, "unreadable": 0}
    assert [o.session_id for o in report.skipped] == ["deleted", "expired", "locked", "tampered"]
    assert "seq 3" in report.skipped[-1].detail and "'k2'" in report.skipped[2].detail
    out = tmp_path / "out"
    # the rows of each session are exactly what replay yields: seq, hash, prev, key, writer, messages
    rows = _sql(out, "SELECT session_id, seq, hash, prev_hash, key_id, write_id, stored_in, messages FROM rows ORDER BY 1, 2")
    expected = [
        (sid, e.seq, e.hash, e.prev, e.key_id, e.write_id, e.session_id, json.dumps(e.messages, separators=(",", ":")))
        for sid in sorted(HEALTHY)
        for e in store.replay(sid)
    ]
    assert rows == expected and report.rows == len(expected) == 3 + 3 + 3 + 2 + 3
    assert sorted(report.files) == [f"day=2026-03-0{d}/part-00000.parquet" for d in (1, 2, 4)]
    assert _sql(out, "SELECT count(*) FROM rows WHERE session_id IN ('tampered', 'expired', 'deleted', 'locked')") == [(0,)]
    # the first event's prev is the manifest's hash, each later one's the event before it
    for sid in ("plain-1", "plain-2"):
        hashes = _sql(out, f"SELECT hash, prev_hash FROM rows WHERE session_id = '{sid}' ORDER BY seq")
        assert all(prev == hashes[i - 1][0] for i, (_, prev) in enumerate(hashes) if i)
    # files are private: they hold decrypted messages
    assert all(oct(p.stat().st_mode & 0o777) == "0o600" for p in out.rglob("*.parquet"))
    assert not list(out.rglob(".*"))  # no part left under its in-progress name


def test_duckdb_answers_an_auditors_questions(fleet: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    parquet.export(Store(LocalStore(fleet), keyring=K1), out)
    # which sessions called tool `search` after 2026-03-02? (a fork's own call, not the tampered
    # or locked sessions' calls, which are not exported; plain-1's call was on 2026-03-01)
    after = _sql(
        out,
        "SELECT DISTINCT session_id FROM rows WHERE list_contains(tool_names, 'search')"
        " AND time > TIMESTAMPTZ '2026-03-02 00:00:00+00' ORDER BY 1",
    )
    assert after == [("sealed-1-b",)]
    # every call of `search`, inherited ones counted once (stored_in is the log that holds it)
    calls = _sql(out, "SELECT DISTINCT stored_in, seq FROM rows WHERE list_contains(tool_names, 'search') ORDER BY 1")
    assert calls == [("plain-1", 2), ("sealed-1-b", 3)]
    # the partition column, the types, a fork's parent, decrypted text, roles and a rewind
    assert _sql(out, "SELECT day, count(*) FROM rows GROUP BY day ORDER BY day") == [
        (T0.date(), 5),
        (T0.date().replace(day=2), 7),
        (T0.date().replace(day=4), 2),
    ]
    assert _sql(out, "SELECT DISTINCT fork_parent, fork_seq FROM rows WHERE session_id = 'plain-1-b'") == [("plain-1", 2)]
    assert _sql(out, "SELECT count(*) FROM rows WHERE fork_parent IS NULL AND fork_seq IS NULL") == [(8,)]
    assert _sql(out, "SELECT roles, text, key_id FROM rows WHERE session_id = 'sealed-1' AND seq = 1") == [
        (["user", "assistant"], "sealed question\nsealed answer", "k1")
    ]
    assert _sql(out, "SELECT kind, rewind_to_seq, rewind_keep, messages FROM rows WHERE session_id = 'plain-2' AND seq = 3") == [
        ("rewind", 1, None, "[]")
    ]
    types = dict(_sql(out, "SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM rows)"))
    assert types["time"] == "TIMESTAMP WITH TIME ZONE" and types["day"] == "DATE"
    assert types["seq"] == types["fork_seq"] == "BIGINT" and types["tool_names"] == "VARCHAR[]"
    assert _sql(out, "SELECT time FROM rows WHERE session_id = 'plain-1' AND seq = 1")[0][0].timestamp() == T0.timestamp()


def test_rows_go_out_in_row_groups_and_parts_with_memory_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Small limits: a session longer than a spool batch spills to disk (and, tampered at its end,
    still leaves no row); days beyond the open-file limit close a part and start another."""
    monkeypatch.setattr(_writer, "ROW_GROUP_ROWS", 4)
    monkeypatch.setattr(_writer, "MAX_OPEN_FILES", 2)
    clock = Clock()
    store = Store(LocalStore(tmp_path / "store"), clock=clock)
    writers = [store.open(sid, create=True) for sid in ("long", "long-2", "long-bad")]
    for i in range(30):
        for writer in writers:
            writer.append(msg(f"event {i}"))
        clock.advance(hours=8)  # three events a day, over ten days
    key = store.layout.event_key("long-bad", 25)  # altered: the chain breaks at seq 26
    altered = store.backend.get(key).data.replace(b"event 24", b"event 42")
    store.backend.delete_many([key])
    store.backend.create(key, altered)
    spilled: list[str] = []
    spill = _writer.Spool._spill

    def counting(self: _writer.Spool) -> None:
        spilled.append(self.columns["session_id"][0])
        spill(self)

    monkeypatch.setattr(_writer.Spool, "_spill", counting)
    report = parquet.export(store, tmp_path / "out")
    assert spilled.count("long-bad") == 6  # 25 events spooled, 24 of them spilled, before seq 26 failed
    assert "seq 26" in report.skipped[0].detail
    assert report.counts["exported"] == 2 and report.counts["tampered"] == 1 and report.rows == 60
    out = tmp_path / "out"
    assert _sql(out, "SELECT session_id, count(*), count(DISTINCT seq), min(seq), max(seq) FROM rows GROUP BY 1 ORDER BY 1") == [
        ("long", 30, 30, 1, 30),
        ("long-2", 30, 30, 1, 30),
    ]
    assert _sql(out, "SELECT count(*) FROM rows WHERE session_id = 'long-bad'") == [(0,)]
    assert len({f.split("/")[0] for f in report.files}) == 11
    # the spool's batches arrive one after another: a day's rows fill a row group of at most 4
    for path in out.rglob("*.parquet"):
        meta = pq.ParquetFile(path).metadata
        assert all(meta.row_group(i).num_rows <= 4 for i in range(meta.num_row_groups))
    # the second session reopens days whose part the open-file limit closed: a new part each
    parts = [f for f in report.files if f.startswith("day=2026-03-01/")]
    assert sorted(parts) == ["day=2026-03-01/part-00000.parquet", "day=2026-03-01/part-00001.parquet"]
    assert len(report.files) == len(list(out.rglob("*.parquet"))) > 11


def test_the_command_reports_skipped_sessions_and_exits_5_on_tampering(fleet: Path, tmp_path: Path) -> None:
    env = {"EVSTORE_STORE": f"file://{fleet}", "EVSTORE_KEY": base64.b64encode(bytes(range(32))).decode(), "EVSTORE_KEY_ID": "k1"}
    run = CliRunner()
    result = run.invoke(cli, ["export", "--all", "--format", "parquet", str(tmp_path / "out")], env=env)
    lines = result.stdout.splitlines()
    assert result.exit_code == 5, result.output
    assert [line.split()[:2] for line in lines[:-1]] == [
        ["deleted", "deleted:"],
        ["expired", "expired:"],
        ["LOCKED", "locked:"],
        ["TAMPERED", "tampered:"],
    ]
    assert (
        lines[-1].startswith("exported 14 events of 5 sessions to ") and "1 tampered, 1 expired, 1 deleted, 0 remnant, 1 locked"
        in lines[-1]
    )
    assert result.stderr.startswith("evstore: 1 sessions failed verification (tampered)")
    # the locked session alone: exit 1 (the export is incomplete), with --json lines
    result = run.invoke(
        cli, ["export", "--all", "--format", "parquet", str(tmp_path / "out2"), "--prefix", "lo", "--json"], env=env
    )
    objects = [json.loads(line) for line in result.stdout.splitlines()]
    assert result.exit_code == 1 and objects[0]["status"] == "locked" and objects[-1]["summary"]["locked"] == 1
    # healthy sessions only: exit 0
    result = run.invoke(cli, ["export", "--all", "--format", "parquet", str(tmp_path / "out3"), "--prefix", "plain-"], env=env)
    assert result.exit_code == 0 and result.stdout.startswith("exported 9 events of 3 sessions"), result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["export", "--all", "--format", "jsonl", "OUT"], "--all writes Parquet"),
        (["export", "s1", "--format", "parquet"], "--format parquet exports every session"),
        (["export", "s1", "--format", "jsonl", "--prefix", "x"], "--prefix narrows --all"),
        (["export", "--all", "--format", "parquet", "OUT", "-o", "f"], "not to --output"),
        (["export", "--all", "--format", "parquet", "FULL"], "it is not empty"),
        (["export", "--all", "--format", "parquet", "missing/OUT"], "does not exist"),
        (["export", "--all", "--format", "parquet", "ftp://host/x"], "name a folder or s3://"),
        (["export", "--all", "--format", "parquet", "OUT", "--prefix", "a/b"], "invalid session id prefix"),
    ],
)
def test_usage_mistakes_are_exit_2_with_one_line(fleet: Path, tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "FULL").mkdir()
    (tmp_path / "FULL" / "old.parquet").write_bytes(b"")
    os.chdir(tmp_path)
    result = CliRunner().invoke(cli, args, env={"EVSTORE_STORE": f"file://{fleet}"})
    assert result.exit_code == 2 and message in result.stderr, result.output
    assert not (tmp_path / "OUT").exists()


def test_without_pyarrow_the_export_is_exit_2_naming_the_extra(
    fleet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("pyarrow", "pyarrow.parquet", "pyarrow.ipc", "pyarrow.compute"):
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError
    result = CliRunner().invoke(
        cli, ["export", "--all", "--format", "parquet", str(tmp_path / "out")], env={"EVSTORE_STORE": f"file://{fleet}"}
    )
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1
    assert "pip install 'evstore[parquet]'" in result.stderr
    assert not (tmp_path / "out").exists()
    with pytest.raises(InvalidInputError, match=r"evstore\[parquet\]"):
        parquet.export(Store(LocalStore(fleet)), tmp_path / "out")


def test_importing_the_module_loads_no_pyarrow() -> None:
    code = "import sys, evstore, evstore.integrations.parquet; print('pyarrow' in sys.modules)"
    assert python_output(code) == "False"


def test_an_s3_destination_on_moto(fleet: Path, tmp_path: Path, s3_backend: S3Store, moto_endpoint: str) -> None:
    store = Store(LocalStore(fleet), keyring=K1)
    url = f"s3://{s3_backend.bucket}/exports/2026-03"
    report = parquet.export(store, url, prefix="plain-", endpoint_url=moto_endpoint)
    assert report.destination == url and report.rows == 9
    keys = sorted(o.key for o in s3_backend.list("exports/"))
    assert keys == [f"exports/2026-03/{f}" for f in sorted(report.files)] and len(keys) == 3
    for key in keys:  # DuckDB reads S3 through an extension it downloads: read the objects locally
        path = tmp_path / "copy" / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(s3_backend.get(key).data)
    copy = tmp_path / "copy" / "exports" / "2026-03"
    assert _sql(copy, "SELECT session_id, count(*) FROM rows GROUP BY 1 ORDER BY 1") == [
        ("plain-1", 3),
        ("plain-1-b", 3),
        ("plain-2", 3),
    ]
    # a prefix that holds objects is refused (rows of two exports are never mixed), before any work
    with pytest.raises(InvalidInputError, match="already holds objects"):
        parquet.export(store, url, endpoint_url=moto_endpoint)
    # the command: the same, with the endpoint from the environment
    env = {"EVSTORE_STORE": f"file://{fleet}", "AWS_ENDPOINT_URL": moto_endpoint}
    result = CliRunner().invoke(
        cli, ["export", "--all", "--format", "parquet", f"s3://{s3_backend.bucket}/cli", "--prefix", "plain-"], env=env
    )
    assert result.exit_code == 0 and "exported 9 events of 3 sessions" in result.stdout, result.output
    assert len(list(s3_backend.list("cli/"))) == 3


def test_past_the_memory_cap_the_largest_waiting_group_is_written_early(
    fleet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_writer, "MAX_BUFFERED_BYTES", 1)  # every routed batch goes out at once
    report = parquet.export(Store(LocalStore(fleet), keyring=K1), tmp_path / "out")
    assert report.rows == 14 and _sql(tmp_path / "out", "SELECT count(*) FROM rows") == [(14,)]
    groups = [pq.ParquetFile(p).metadata.num_row_groups for p in (tmp_path / "out").rglob("*.parquet")]
    assert sum(groups) > len(groups)  # row groups written before their day's part closed


def test_an_export_that_stops_leaves_no_half_written_part(fleet: Path, tmp_path: Path) -> None:
    def stop(outcome: parquet.SessionOutcome) -> None:
        if outcome.session_id == "plain-2":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        parquet.export(Store(LocalStore(fleet), keyring=K1), tmp_path / "out", on_session=stop)
    assert [p for p in (tmp_path / "out").rglob("*") if p.is_file()] == []  # no part completed, none in progress


def test_an_event_time_that_is_no_rfc_3339_time_makes_the_session_unreadable() -> None:
    event = Event("s", 4, "yesterday", "w", None, "0" * 64, MessagesBody([]))
    with pytest.raises(EvstoreError, match="seq 4: time 'yesterday' is not an RFC 3339 time"):
        _rows.time_of(event)
    outcome = _report.outcome_of("s", _rows.Unreadable("x"))
    assert outcome.status == "unreadable"


def test_a_failed_upload_is_one_error_and_leaves_no_object(
    fleet: Path, s3_backend: S3Store, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3.s3.inject

    def refuse(*args: object, **kwargs: object) -> None:
        raise boto3.exceptions.S3UploadFailedError("Failed to upload: An error occurred (SlowDown)")

    monkeypatch.setattr(boto3.s3.inject, "upload_file", refuse)  # clients made from here on carry it
    with pytest.raises(StoreUnavailableError, match=r"cannot upload 'x/day=2026-03-0\d/part-00000.parquet'"):
        parquet.export(Store(LocalStore(fleet)), f"s3://{s3_backend.bucket}/x", prefix="plain-", endpoint_url=moto_endpoint)
    assert list(s3_backend.list("x/")) == []


def test_a_local_write_that_fails_is_one_error(fleet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(self: _writer.Part, pa: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_writer.Part, "flush", full)
    result = CliRunner().invoke(
        cli, ["export", "--all", "--format", "parquet", str(tmp_path / "out")], env={"EVSTORE_STORE": f"file://{fleet}"}
    )
    assert result.exit_code == 1 and result.stderr.splitlines() == [
        f"evstore: cannot write the export to '{tmp_path / 'out'}': No space left on device"
    ]
    assert [p for p in (tmp_path / "out").rglob("*") if p.is_file()] == []


def test_an_object_planted_under_an_id_without_a_manifest_is_a_remnant_not_a_failed_export(tmp_path: Path) -> None:
    store = Store(LocalStore(tmp_path / "store"))
    store.create("real").append({"role": "user", "content": "hi"})
    store.backend.create("sessions/jj/zzz", b"junk")  # what one who may create objects can plant
    report = parquet.export(store, tmp_path / "out")
    assert report.counts["exported"] == 1 and report.counts["remnant"] == 1 and report.counts["unreadable"] == 0
