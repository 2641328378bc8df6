"""The OpenAI Agents SDK adapter: EvstoreSession, with the real SDK and a scripted model (no network)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from evstore import MemoryStore, SessionNotFoundError, Store, WriteConflictError

from .conftest import new_bucket
from .helpers import CountingStore

pytest.importorskip("agents")

from agents import Runner
from agents.memory import Session as SdkSession
from agents.memory import SessionSettings

from evstore.integrations.openai_agents import EvstoreSession

from .scripts.openai_run import ScriptedModel, make_agent

REPO = Path(__file__).resolve().parent.parent

ITEMS: list[dict[str, Any]] = [
    {"role": "user", "content": "weather in Oslo?"},
    {"role": "developer", "content": "answer in one line"},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and Bergen?"}]},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "look it up"}]},
    {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "rain"},
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Rain in Oslo.", "annotations": []}],
    },
    {"type": "compaction", "id": "cmp_1", "encrypted_content": "opaque", "extra": {"nested": [1, 2.5, None, True]}},
]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def store() -> Store:
    return Store(MemoryStore(), root="root")


def test_implements_the_sdk_session_protocol(store: Store) -> None:
    assert isinstance(EvstoreSession("s", store), SdkSession)


def test_items_round_trip_exactly(store: Store) -> None:
    session = EvstoreSession("s", store)
    run(session.add_items(ITEMS))
    back = run(EvstoreSession("s", store).get_items())
    assert json.dumps(back) == json.dumps(ITEMS)  # same values, same key order


def test_non_message_items_are_wrapped_with_a_valid_role(store: Store) -> None:
    run(EvstoreSession("s", store).add_items(ITEMS))
    stored = store.context("s", repair="none")
    assert [m["role"] for m in stored] == ["user", "system", "user", "assistant", "assistant", "tool", "assistant", "assistant"]
    assert stored[0] == ITEMS[0]  # a plain message is stored as it is
    assert stored[4]["tool_calls"][0]["id"] == "call_1" and stored[5]["tool_call_id"] == "call_1"
    assert stored[4]["meta"]["openai_item"] == ITEMS[4]


def test_add_items_is_one_event_of_one_put_per_batch() -> None:
    counting = CountingStore(MemoryStore())
    store = Store(counting, root="root")
    session = EvstoreSession("s", store)
    run(session.add_items(ITEMS[:2]))
    counting.reset()
    run(session.add_items(ITEMS[4:6]))
    assert dict(counting.counts) == {"PUT": 1}
    assert [len(event.messages) for event in store.replay("s")] == [2, 2]


def test_a_turn_in_a_new_process_reads_the_session_once() -> None:
    """get_items then add_items, as a Runner turn does: one resume (one manifest GET, two LISTs),
    then the append's PUT — no second read of the session to open the writer."""
    counting = CountingStore(MemoryStore())
    store = Store(counting, root="root")
    run(EvstoreSession("s", store).add_items([{"role": "user", "content": f"m{i}"} for i in range(3)]))
    counting.reset()
    fresh = EvstoreSession("s", Store(counting, root="root"))
    assert len(run(fresh.get_items())) == 3
    run(fresh.add_items([{"role": "user", "content": "next"}]))
    assert [k for kind, k in counting.keys if kind == "GET" and k.endswith("manifest")] == ["root/sessions/s/manifest"]
    assert counting.counts["LIST"] == 1 + 1 and counting.counts["PUT"] == 1  # non-event objects, the events


def test_get_items_limit_returns_the_latest_in_order(store: Store) -> None:
    session = EvstoreSession("s", store)
    run(session.add_items(ITEMS))
    assert run(session.get_items(limit=3)) == ITEMS[-3:]
    assert run(session.get_items(limit=0)) == []
    assert run(session.get_items(limit=-1)) == ITEMS  # as the SDK's SQLiteSession: no limit


def test_session_settings_limit_applies_when_no_limit_is_given(store: Store) -> None:
    session = EvstoreSession("s", store, session_settings=SessionSettings(limit=2))
    run(session.add_items(ITEMS))
    assert run(session.get_items()) == ITEMS[-2:]
    assert run(session.get_items(limit=4)) == ITEMS[-4:]


def test_pop_item_withdraws_and_returns_the_newest_item(store: Store) -> None:
    session = EvstoreSession("s", store)
    run(session.add_items(ITEMS[:5]))
    run(session.add_items(ITEMS[5:]))
    assert run(session.pop_item()) == ITEMS[-1]
    assert run(session.pop_item()) == ITEMS[-2]
    assert run(session.get_items()) == ITEMS[:-2]
    audit = [m for event in store.replay("s") for m in event.messages]
    assert len(audit) == len(ITEMS)  # a retraction: the audit view keeps what was popped


def test_pop_item_of_an_empty_session_returns_none(store: Store) -> None:
    assert run(EvstoreSession("s", store).pop_item()) is None


def test_clear_session_withdraws_every_item(store: Store) -> None:
    session = EvstoreSession("s", store)
    run(session.add_items(ITEMS))
    run(session.clear_session())
    assert run(session.get_items()) == []
    run(session.add_items(ITEMS[:1]))
    assert run(session.get_items()) == ITEMS[:1]


def test_a_second_writer_meanwhile_makes_the_write_fail(store: Store) -> None:
    first, second = EvstoreSession("s", store), EvstoreSession("s", store)
    run(first.add_items(ITEMS[:1]))
    run(second.get_items())  # opens its writer at head 1
    run(first.add_items(ITEMS[1:2]))
    with pytest.raises(WriteConflictError):
        run(second.add_items(ITEMS[2:3]))
    assert run(EvstoreSession("s", store).get_items()) == ITEMS[:2]


def test_without_create_a_missing_session_is_not_found(store: Store) -> None:
    with pytest.raises(SessionNotFoundError):
        run(EvstoreSession("missing", store, create=False).get_items())


def test_messages_other_tools_appended_become_responses_items(store: Store) -> None:
    store.open("s", create=True).append(
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "t1", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "t1", "content": "done"},
        ]
    )
    assert run(EvstoreSession("s", store).get_items()) == [
        {"role": "user", "content": "go"},
        {"type": "function_call", "call_id": "t1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "t1", "output": "done"},
    ]


def test_streamed_run_persists_its_items(store: Store) -> None:
    async def streamed() -> None:
        result = Runner.run_streamed(make_agent(ScriptedModel()), "weather?", session=EvstoreSession("s", store))
        async for _ in result.stream_events():
            pass

    run(streamed())
    items = run(EvstoreSession("s", store).get_items())
    assert [item.get("type", "message") for item in items] == ["message", "function_call", "function_call_output", "message"]


@pytest.mark.slow
def test_a_new_process_resumes_the_conversation(moto_endpoint: str) -> None:
    backend = new_bucket(moto_endpoint)
    store = Store(backend, root="root")
    first = run(Runner.run(make_agent(ScriptedModel()), "weather in the first city?", session=EvstoreSession("chat", store)))
    assert first.final_output == "The tool said: sunny in City1"
    persisted = run(EvstoreSession("chat", store).get_items())
    assert [item.get("type", "message") for item in persisted] == ["message", "function_call", "function_call_output", "message"]

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("OPENAI_API_KEY", None)  # the script sets a dummy one
    completed = subprocess.run(
        [
            sys.executable,
            str(REPO / "tests" / "scripts" / "openai_run.py"),
            "--endpoint",
            moto_endpoint,
            "--bucket",
            backend.bucket,
            "--session",
            "chat",
            "--label",
            "B",
            "and the second city?",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    report = json.loads(completed.stdout)
    # the second process's first model call saw the first run's items, then the new prompt
    assert report["model_inputs"][0] == [*persisted, {"content": "and the second city?", "role": "user"}]
    assert report["final_output"] == "BThe tool said: sunny in CityB1"
    items = run(EvstoreSession("chat", store).get_items())
    assert items[:4] == persisted and len(items) == 8
    assert items[6] == {"call_id": "call_B1", "output": "sunny in CityB1", "type": "function_call_output"}


@pytest.mark.parametrize("framework", ["agents", "strands", "openai"])
def test_import_evstore_does_not_import_the_frameworks(framework: str) -> None:
    code = f"import sys, evstore, evstore.integrations; sys.exit(1 if {framework!r} in sys.modules else 0)"
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, check=False)
    assert completed.returncode == 0, completed.stderr


def test_the_adapter_module_does_not_import_the_sdk() -> None:
    code = "import sys, evstore.integrations.openai_agents; sys.exit(1 if 'agents' in sys.modules else 0)"
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, check=False)
    assert completed.returncode == 0, completed.stderr


def test_session_settings_default_to_the_sdks_defaults(store: Store) -> None:
    session = EvstoreSession("s", store)
    assert session.session_settings == SessionSettings()
    run(session.add_items(ITEMS))
    assert run(session.get_items()) == ITEMS


def test_a_dict_of_session_settings_is_coerced_and_validated(store: Store) -> None:
    session = EvstoreSession("s", store, session_settings={"limit": 2})
    assert isinstance(session.session_settings, SessionSettings) and session.session_settings.limit == 2
    run(session.add_items(ITEMS))
    assert run(session.get_items()) == ITEMS[-2:]
    with pytest.raises(TypeError):
        EvstoreSession("s", store, session_settings={"limitt": 2})


def test_cancelling_add_items_waits_for_the_write_then_reports_it() -> None:
    from evstore import AsyncStore

    from .test_async import BlockingPuts, spin, wait_for_thread_event

    blocking = BlockingPuts(MemoryStore())
    store = Store(blocking, root="root")
    store.create("s")

    async def main() -> None:
        session = EvstoreSession("s", AsyncStore(store), create=False)
        task = asyncio.create_task(session.add_items(ITEMS[:2]))
        await wait_for_thread_event(blocking.entered)
        task.cancel()
        await spin()
        assert not task.done()  # the PUT is held: the cancellation waits for it
        assert list(store.replay("s")) == []
        blocking.release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert session.last_outcome is not None and session.last_outcome.value == 1
        assert [len(e.messages) for e in store.replay("s")] == [2]
        assert await session.get_items() == ITEMS[:2]

    run(main())


# ---- a handle that keeps its head: reads only what is new, recovers from a conflict ----------


def _turn_prompts(items: list[dict[str, Any]]) -> list[str]:
    """The prompts of the stored turns, checking that each turn is whole and in one piece: the
    scripted model's turn is a user prompt, a function call, its output and the final message."""
    kinds = [item.get("type", "message") for item in items]
    assert len(items) % 4 == 0, kinds
    prompts = []
    for start in range(0, len(items), 4):
        prompt, call, output, final = items[start : start + 4]
        assert prompt["role"] == "user" and call["type"] == "function_call" and final["role"] == "assistant", kinds
        assert output == {"type": "function_call_output", "call_id": call["call_id"], "output": output["output"]}
        prompts.append(prompt["content"])
    return prompts


def test_a_handle_continues_after_another_session_appended(store: Store) -> None:
    """The stuck writer of issue 29: once another writer appended, every add_items failed, even
    after get_items re-read. Now get_items moves the handle to the current head."""
    first, second = EvstoreSession("s", store), EvstoreSession("s", store)
    run(first.add_items(ITEMS[:1]))
    run(second.get_items())
    run(first.add_items(ITEMS[1:2]))
    with pytest.raises(WriteConflictError):
        run(second.add_items(ITEMS[2:3]))  # raised once: nothing of it is stored
    with pytest.raises(WriteConflictError):
        run(second.add_items(ITEMS[2:3]))  # still made from the old history: not written either
    assert run(second.get_items()) == ITEMS[:2]  # re-read: what the first added is there
    run(second.add_items(ITEMS[2:3]))
    run(first.get_items())
    run(first.add_items(ITEMS[3:4]))
    assert run(EvstoreSession("s", store).get_items()) == ITEMS[:4]
    assert run(second.get_items()) == run(first.get_items()) == ITEMS[:4]


def test_pop_and_clear_act_on_the_current_history(store: Store) -> None:
    first, second = EvstoreSession("s", store), EvstoreSession("s", store)
    run(first.add_items(ITEMS[:2]))
    run(second.get_items())
    run(first.add_items(ITEMS[2:3]))
    assert run(second.pop_item()) == ITEMS[2]  # the newest item is the one the other session added
    assert run(first.get_items()) == ITEMS[:2]
    run(first.clear_session())
    assert run(second.get_items()) == []


def test_get_items_reads_what_another_process_retracted(store: Store) -> None:
    session = EvstoreSession("s", store)
    run(session.add_items(ITEMS[:3]))
    assert run(session.get_items()) == ITEMS[:3]
    writer = store.open("s")
    writer.rewind(1, keep=1)  # another tool withdraws the last two items of event 1
    writer.append({"role": "user", "content": "from elsewhere"})
    assert run(session.get_items()) == [*ITEMS[:1], {"role": "user", "content": "from elsewhere"}]
    run(session.add_items(ITEMS[3:4]))
    assert run(EvstoreSession("s", store).get_items()) == [*ITEMS[:1], {"role": "user", "content": "from elsewhere"}, ITEMS[3]]


def test_a_deleted_session_is_not_found_by_a_handle_that_read_it(store: Store) -> None:
    session = EvstoreSession("s", store, create=False)
    store.create("s").append({"role": "user", "content": "hi"})
    assert len(run(session.get_items())) == 1
    store.delete("s")
    with pytest.raises(SessionNotFoundError):
        run(session.get_items())
    with pytest.raises(SessionNotFoundError):
        run(session.add_items(ITEMS[:1]))  # not written into the old log's head
    recreating = EvstoreSession("t", store)
    run(recreating.add_items(ITEMS[:1]))
    store.delete("t")
    with pytest.raises(SessionNotFoundError):
        run(recreating.get_items())
    assert run(recreating.get_items()) == []  # create: a new session under the id
    run(recreating.add_items(ITEMS[1:2]))
    assert run(EvstoreSession("t", store).get_items()) == ITEMS[1:2]


@pytest.mark.slow
@pytest.mark.parametrize("length", [10, 300])
def test_requests_per_runner_turn_stay_flat(length: int) -> None:
    """A Runner turn on a handle that read the session: one LIST (nothing new) and the three
    add_items PUTs; automatic compaction adds a segment PUT and, at a higher level, a DELETE.
    Before, each get_items read the whole session again (7-8 requests rising to 36-47)."""
    counting = CountingStore(MemoryStore())
    store = Store(counting, root="root")
    writer = store.create("s")
    for i in range(length):
        writer.append({"role": "user", "content": f"m{i}"})
    session = EvstoreSession("s", store)
    run(session.get_items())  # the handle reads the session once
    totals = []
    for turn in range(12):  # 36 events: past a boundary of automatic compaction (every 32)
        counting.reset()
        result = run(Runner.run(make_agent(ScriptedModel()), f"weather {turn}?", session=session))
        assert result.final_output.startswith("The tool said")
        assert counting.counts["GET"] + counting.counts["LIST"] == 1, dict(counting.counts)  # the read: one LIST
        totals.append(counting.total)
    assert max(totals) <= 6, totals
    assert len(run(EvstoreSession("s", store).get_items())) == length + 12 * 4


@pytest.mark.slow
def test_two_processes_on_one_session_neither_lose_nor_interleave_a_turn(tmp_path: Path) -> None:
    """Two worker processes, each with one long-lived EvstoreSession, take turns on one session.
    A's turn reads, then B writes a whole turn before A adds anything: A's turn raises the
    conflict once, and A's next turn (its get_items re-reads) continues from B's."""
    from .scripts.handle_worker import Worker

    a = Worker("openai", tmp_path / "store", "chat", "A")
    b = Worker("openai", tmp_path / "store", "chat", "B")
    try:
        assert a.send(op="turn", prompt="a1")["ok"]
        assert b.send(op="turn", prompt="b1")["ok"]
        assert a.send(op="turn", prompt="a2", pause=True) == {"paused": True}  # A has read the session
        assert b.send(op="turn", prompt="b2")["ok"]  # and B writes a whole turn meanwhile
        lost = a.send(op="go")
        assert lost["ok"] is False and lost["error"] == "WriteConflictError", lost
        again = a.send(op="turn", prompt="a2")  # the same handle, run again
        assert again["ok"], again
        assert _turn_prompts(again["model_input"][:-1]) == ["a1", "b1", "b2"]  # it saw B's turn
        assert b.send(op="turn", prompt="b3")["ok"]
        assert a.send(op="turn", prompt="a3")["ok"]
    finally:
        a.close()
        b.close()
    from evstore import LocalStore

    items = run(EvstoreSession("chat", Store(LocalStore(tmp_path / "store")), create=False).get_items())
    assert _turn_prompts(items) == ["a1", "b1", "b2", "a2", "b3", "a3"]


def test_a_handle_on_an_encrypted_fork_catches_up() -> None:
    from evstore import Keyring

    store = Store(MemoryStore(), root="root", keyring=Keyring({"k1": os.urandom(32)}, "k1"))
    run(EvstoreSession("p", store).add_items(ITEMS[:2]))
    store.fork("p", "f")
    mine, other = EvstoreSession("f", store, create=False), EvstoreSession("f", store, create=False)
    assert run(mine.get_items()) == ITEMS[:2]
    run(other.add_items(ITEMS[2:4]))
    run(EvstoreSession("p", store).add_items(ITEMS[4:5]))  # the parent's own: not the fork's
    assert run(mine.get_items()) == ITEMS[:4]
    run(mine.add_items(ITEMS[5:6]))
    assert run(EvstoreSession("f", store).get_items()) == [*ITEMS[:4], ITEMS[5]]
