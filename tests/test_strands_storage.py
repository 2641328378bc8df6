"""Strands' snapshot persistence on evstore: EvstoreStorage under Strands' own SnapshotSessionManager,
and EvstoreSnapshotSessionManager, with the real package and a scripted model (no network)."""

from __future__ import annotations

import asyncio
import base64
import os
from pathlib import Path
from typing import Any

import pytest

from evstore import KeyRequiredError, Keyring, LocalStore, MemoryStore, Store, WriteConflictError, generate_key

from .helpers import CountingStore

os.environ.setdefault("OTEL_SDK_DISABLED", "true")
pytest.importorskip("strands")

from strands import Agent
from strands.session import SnapshotSessionManager
from strands.storage import Storage
from strands.types.exceptions import StorageError

from evstore.integrations.strands_storage import (
    EvstoreStorage,
    parse_record,
    record,
    snapshot_session_manager,
    split_key,
)

from .scripts.strands_model import ScriptedModel, get_weather
from .test_strands import _turn_texts, race_two_workers, texts

LATEST = "session/chat/scopes/agent/main/snapshots/snapshot_latest.json"


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def make_agent(store: Store, model: ScriptedModel | None = None, **kwargs: Any) -> Agent:
    return Agent(
        model=model or ScriptedModel(),
        tools=[get_weather],
        session_manager=snapshot_session_manager("chat", store, **kwargs),
        agent_id="main",
        callback_handler=None,
    )


# ---- keys and records (pure) ----------------------------------------------------------------------


def test_keys_are_normalised_as_strands_storages_do() -> None:
    assert split_key("//a//b/c.json/") == (["a", "b"], "c.json")
    assert split_key("top") == ([], "top")
    for bad in ("", "///", "a/../b", "a\\b"):
        with pytest.raises(StorageError):
            split_key(bad)


def test_a_directory_and_its_session_id_map_one_to_one() -> None:
    storage = EvstoreStorage(Store(MemoryStore()), prefix="app-")
    for parts in ([], ["session"], ["a.b", "_x", "é/no"[:2]], ["snapshots", "immutable_history"]):
        session_id = storage.session_id(parts)
        assert session_id.startswith("app-s") and ".." not in session_id
        assert storage.directory_of(session_id) == parts
    assert storage.directory_of("app-x.session") is None  # another tool's session
    assert storage.directory_of("app-s.a_3A") is None  # not the canonical escape of any part
    with pytest.raises(StorageError, match="at most 128"):
        storage.session_id(["x" * 130])


def test_records_round_trip_text_and_bytes() -> None:
    assert parse_record(record("a.json", b'{"k": "\xc3\xa9"}')) == ("a.json", b'{"k": "\xc3\xa9"}')
    assert record("a.json", b"{}")["meta"]["strands_storage"] == {"name": "a.json", "text": "{}"}
    binary = bytes(range(256))
    assert parse_record(record("b", binary)) == ("b", binary)
    assert parse_record(record("b", None)) == ("b", None)
    assert parse_record({"role": "user", "content": "hi"}) is None  # another tool's message
    bad = {"role": "system", "content": None, "meta": {"strands_storage": {"name": "b", "base64": "**"}}}
    assert parse_record(bad) is None


# ---- the Storage interface ------------------------------------------------------------------------


def test_it_is_a_strands_storage() -> None:
    assert isinstance(EvstoreStorage(Store(MemoryStore())), Storage)


def test_write_read_overwrite_and_delete() -> None:
    storage = EvstoreStorage(Store(MemoryStore()))
    assert run(storage.read("a/b.json")) is None
    run(storage.write("a/b.json", b"one"))
    run(storage.write("a/b.json", b"two"))
    run(storage.write("a/c.bin", b"\xff\x00"))
    fresh = EvstoreStorage(storage.store)  # nothing cached
    assert run(fresh.read("a/b.json")) == b"two"
    assert run(fresh.read("/a//c.bin")) == b"\xff\x00"
    run(fresh.delete("a/b.json"))
    run(fresh.delete("a/never.json"))  # a no-op
    assert run(EvstoreStorage(storage.store).read("a/b.json")) is None
    assert run(storage.read("a/b.json")) is None  # the first handle reads what the other appended


def test_every_version_stays_in_the_audit_view() -> None:
    store = Store(MemoryStore())
    storage = EvstoreStorage(store)
    run(storage.write("d/k", b"v1"))
    run(storage.write("d/k", b"v2"))
    run(storage.delete("d/k"))
    entries = [m["meta"]["strands_storage"] for event in store.replay("s.d") for m in event.messages]
    assert entries == [{"name": "k", "text": "v1"}, {"name": "k", "text": "v2"}, {"name": "k", "deleted": True}]


def test_list_returns_the_keys_under_a_prefix_sorted() -> None:
    storage = EvstoreStorage(Store(MemoryStore()))
    for key in ("s/1/a", "s/1/b", "s/1/deep/c", "s/10/a", "s/2/a", "t/a", "top"):
        run(storage.write(key, b"x"))
    run(storage.delete("s/1/b"))
    fresh = EvstoreStorage(storage.store)
    assert run(fresh.list("s/1/")) == ["s/1/a", "s/1/deep/c"]
    assert run(fresh.list("s/1")) == ["s/1/a", "s/1/deep/c", "s/10/a"]
    assert run(fresh.list("")) == ["s/1/a", "s/1/deep/c", "s/10/a", "s/2/a", "t/a", "top"]
    assert run(fresh.list("s/1/a")) == ["s/1/a"]
    assert run(fresh.list("nothing/")) == []


def test_a_stale_handle_is_refused_once_then_writes_at_the_head() -> None:
    store = Store(MemoryStore())
    mine, other = EvstoreStorage(store), EvstoreStorage(store)
    run(mine.write("d/k", b"mine"))
    assert run(other.read("d/k")) == b"mine"
    run(other.write("d/k", b"other"))
    for _ in range(2):  # refused until the handle reads the key again: no lost update
        with pytest.raises(WriteConflictError):
            run(mine.write("d/k", b"stale"))
    assert run(mine.read("d/k")) == b"other"  # re-read from the head
    run(mine.write("d/k", b"after"))
    assert run(other.read("d/k")) == b"after"


# ---- through Strands' SnapshotSessionManager -------------------------------------------------------


def test_a_new_agent_resumes_messages_and_state_from_the_latest_snapshot(tmp_path: Path) -> None:
    agent = make_agent(Store(LocalStore(tmp_path)))
    agent("weather in the first city?")
    agent.state.set("visits", 2)
    agent("and the second?")
    resumed = make_agent(Store(LocalStore(tmp_path)))  # another store object over the same directory
    assert resumed.messages == agent.messages and len(agent.messages) == 8
    assert resumed.state.get("visits") == 2


def test_strands_own_snapshot_manager_runs_on_the_storage() -> None:
    store = Store(MemoryStore())
    manager = SnapshotSessionManager("chat", storage=EvstoreStorage(store), snapshot_trigger=lambda **_: True)
    model = ScriptedModel()
    agent = Agent(model=model, tools=[get_weather], session_manager=manager, agent_id="main", callback_handler=None)
    agent("weather in the first city?")
    agent("and the second?")
    ids = run(manager.list_snapshot_ids(agent))
    assert len(ids) == 2
    assert run(manager.restore_snapshot(agent, snapshot_id=ids[0]))  # time travel
    first_turn = ["weather in the first city?", "use City1", "result sunny in City1", "The tool said: sunny in City1"]
    assert texts(agent.messages) == first_turn
    run(manager.delete_session())
    assert run(EvstoreStorage(store).list("")) == []
    assert len(make_agent(store).messages) == 0


def test_an_encrypted_store_seals_every_snapshot(tmp_path: Path) -> None:
    keyring = Keyring.from_key(generate_key())
    agent = make_agent(Store(LocalStore(tmp_path), keyring=keyring))
    agent("weather in the first city?")
    raw = b"".join(path.read_bytes() for path in tmp_path.rglob("*") if path.is_file())
    assert b"weather" not in raw and b"City1" not in raw and base64.b64encode(b"weather")[:8] not in raw
    assert make_agent(Store(LocalStore(tmp_path), keyring=keyring)).messages == agent.messages
    with pytest.raises(KeyRequiredError):
        make_agent(Store(LocalStore(tmp_path)))


def _fresh_restore(turns: int) -> tuple[CountingStore, list[tuple[str, str]], Agent]:
    counting = CountingStore(MemoryStore())
    agent = make_agent(Store(counting))
    for turn in range(turns):
        agent(f"turn {turn}")
    counting.reset()
    restored = make_agent(Store(counting))  # a fresh process: nothing cached
    assert restored.messages == agent.messages
    return counting, list(counting.keys), restored


@pytest.mark.slow
def test_restoring_the_latest_snapshot_costs_the_same_requests_at_any_length() -> None:
    """A fresh agent reads the head event of its snapshot log and nothing older: 9 requests at 3 and
    at 70 saves (past two boundaries of automatic compaction), where reading the log would grow."""
    short, _, _ = _fresh_restore(3)
    long, long_keys, restored = _fresh_restore(70)
    assert short.total == long.total == 9, (dict(short.counts), dict(long.counts))
    events = [key.rsplit("/", 1)[1] for kind, key in long_keys if kind == "GET" and not key.endswith("manifest")]
    assert events == ["00000000000000000070"] * 2  # the head: opening the writer, then reading it
    long.reset()
    restored("one more")
    assert dict(long.counts) == {"PUT": 1}  # the save: one conditional PUT, nothing read


def test_a_long_lived_agent_raises_a_conflict_once_then_continues() -> None:
    store = Store(MemoryStore())
    first = make_agent(store, ScriptedModel("A"))
    first("a1")
    second = make_agent(store, ScriptedModel("B"))
    second("b1")
    with pytest.raises(WriteConflictError):
        first("a2")  # its snapshot was made from a1 alone
    model = first.model
    assert isinstance(model, ScriptedModel)
    calls = len(model.seen)
    first("a2")  # restored first: b1 is in its history, the failed turn is not
    assert texts(model.seen[calls])[-2:] == ["BThe tool said: sunny in CityB1", "a2"]
    assert _turn_texts(make_agent(store).messages) == ["a1", "b1", "a2"]


def test_a_plain_snapshot_manager_stays_stale() -> None:
    """Strands' own manager over the storage: the conflict is raised, but the agent is never
    restored, so every later save raises it again (the stuck writer the evstore manager fixes)."""
    store = Store(MemoryStore())

    def plain(label: str) -> Agent:
        manager = SnapshotSessionManager("chat", storage=EvstoreStorage(store))
        model = ScriptedModel(label)
        return Agent(model=model, tools=[get_weather], session_manager=manager, agent_id="main", callback_handler=None)

    first = plain("A")
    first("a1")
    plain("B")("b1")
    for prompt in ("a2", "a3"):
        with pytest.raises(WriteConflictError):
            first(prompt)
    assert _turn_texts(make_agent(store).messages) == ["a1", "b1"]


@pytest.mark.slow
def test_two_processes_on_one_agent_neither_lose_nor_interleave_a_turn(tmp_path: Path) -> None:
    """Two worker processes, each with one long-lived Agent under EvstoreSnapshotSessionManager on
    one local store. The one whose snapshot is behind raises the conflict once; its next turn
    restores it from the other's snapshot and continues after it."""
    from .scripts.handle_worker import Worker

    a = Worker("strands-snapshot", tmp_path / "store", "chat", "A")
    try:
        assert a.answer() == {"ready": True, "messages": 0}
        assert a.send(op="turn", prompt="a1")["ok"]
        b = Worker("strands-snapshot", tmp_path / "store", "chat", "B")
        try:
            race_two_workers(a, b)
        finally:
            b.close()
    finally:
        a.close()
    restored = make_agent(Store(LocalStore(tmp_path / "store")))
    assert _turn_texts(restored.messages) == ["a1", "b1", "a2", "b2"]
