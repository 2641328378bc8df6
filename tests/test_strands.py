"""The Strands Agents adapter: EvstoreSessionRepository, with the real package and a scripted model
(no network), against moto's HTTP server."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from evstore import KeyRequiredError, Keyring, MemoryStore, Store, WriteConflictError, generate_key
from evstore._backends._s3 import S3Store

from .conftest import new_bucket

os.environ.setdefault("OTEL_SDK_DISABLED", "true")
pytest.importorskip("strands")

from strands import Agent
from strands.types.exceptions import SessionException
from strands.types.session import Session, SessionAgent, SessionMessage, SessionType

from evstore.integrations.strands import EvstoreSessionRepository, session_manager

from .scripts.strands_model import ScriptedModel, get_weather


def make_agent(store: Store, session_id: str, model: ScriptedModel | None = None) -> Agent:
    return Agent(
        model=model or ScriptedModel(),
        tools=[get_weather],
        session_manager=session_manager(session_id, store),
        agent_id="main",
        callback_handler=None,
    )


def texts(messages: list[Any]) -> list[str]:
    out = []
    for message in messages:
        for block in message["content"]:
            if "text" in block:
                out.append(block["text"])
            elif "toolUse" in block:
                out.append(f"use {block['toolUse']['input']['city']}")
            elif "toolResult" in block:
                out.append(f"result {block['toolResult']['content'][0]['text']}")
    return out


@pytest.fixture(scope="module")
def backend(moto_endpoint: str) -> S3Store:
    """One bucket for the module (making clients and buckets is slow); each test gets its own root."""
    return new_bucket(moto_endpoint)


@pytest.fixture
def root() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def store(backend: S3Store, root: str) -> Store:
    return Store(backend, root=root)


def test_a_new_agent_resumes_messages_and_state(store: Store, backend: S3Store, root: str) -> None:
    agent = make_agent(store, "chat")
    agent("weather in the first city?")
    agent.state.set("visits", 2)
    agent("and the second?")
    assert len(agent.messages) == 8
    resumed = make_agent(Store(backend, root=root), "chat")  # a fresh store object: nothing cached
    assert resumed.messages == agent.messages
    assert resumed.state.get("visits") == 2


def test_a_resumed_agent_sends_the_history_to_its_model(store: Store) -> None:
    make_agent(store, "chat")("weather in the first city?")
    model = ScriptedModel("B")
    resumed = make_agent(store, "chat", model)
    resumed("and the second?")
    assert texts(model.seen[0]) == [
        "weather in the first city?",
        "use City1",
        "result sunny in City1",
        "The tool said: sunny in City1",
        "and the second?",
    ]
    assert texts(make_agent(store, "chat").messages)[-1] == "BThe tool said: sunny in CityB1"


def test_create_message_is_one_put(store: Store, backend: S3Store) -> None:
    repository = EvstoreSessionRepository(store)
    repository.create_session(Session("chat", SessionType.AGENT))
    repository.create_agent("chat", SessionAgent("main", {}, {}))
    repository.create_message("chat", "main", SessionMessage({"role": "user", "content": [{"text": "hi"}]}, 0))
    backend.requests.clear()
    repository.create_message("chat", "main", SessionMessage({"role": "assistant", "content": [{"text": "hello"}]}, 1))
    assert dict(backend.requests) == {"PutObject": 1}


def test_a_new_agent_reads_its_session_once_and_catches_up_once() -> None:
    """A fresh process's restore: the session manager's read_session is one pass over the session
    (Store.resume's requests), and the agent's restore (read_agent, list_messages) one LIST for
    both (it was one each before)."""
    from collections import Counter

    from .helpers import CountingStore

    counting = CountingStore(MemoryStore())
    agent = make_agent(Store(counting), "chat")
    agent("weather in the first city?")
    agent("and the second?")
    counting.reset()
    Store(counting).resume("chat")
    resume = Counter(counting.counts)
    counting.reset()
    assert make_agent(Store(counting), "chat").messages == agent.messages
    assert counting.counts == resume + Counter({"LIST": 1}), (dict(counting.counts), dict(resume))


def test_each_message_is_readable_in_the_evstore_log(store: Store) -> None:
    make_agent(store, "chat")("weather in the first city?")
    messages = [m for m in store.context("chat", repair="none") if m["meta"]["strands"]["kind"] == "message"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert messages[0]["content"] == [{"text": "weather in the first city?"}]
    assert [m["meta"]["strands"]["id"] for m in messages] == [0, 1, 2, 3]


def test_list_messages_applies_offset_and_limit(store: Store) -> None:
    agent = make_agent(store, "chat")
    agent("weather in the first city?")
    repository = EvstoreSessionRepository(store)
    listed = repository.list_messages("chat", "main", offset=1, limit=2)
    assert [m.message_id for m in listed] == [1, 2]
    assert [m.to_message() for m in listed] == agent.messages[1:3]


def test_guardrail_redaction_replaces_the_message_for_the_model(store: Store) -> None:
    agent = make_agent(store, "chat")
    agent("weather in the first city?")
    agent("tell me the SECRET")
    resumed = make_agent(store, "chat")
    assert texts(resumed.messages)[4:] == ["[user input redacted]", "I can't help with that."]
    assert [m.message_id for m in EvstoreSessionRepository(store).list_messages("chat", "main")] == list(range(6))


def test_redaction_keeps_the_original_in_the_audit_view(store: Store) -> None:
    agent = make_agent(store, "chat")
    agent("tell me the SECRET")
    audit = [m.get("content") for event in store.replay("chat") for m in event.messages]
    assert [{"text": "tell me the SECRET"}] in audit
    assert all("SECRET" not in str(m) for m in store.context("chat", repair="none"))


def test_updating_an_older_message_keeps_the_later_ones_in_order(store: Store) -> None:
    repository = EvstoreSessionRepository(store)
    repository.create_session(Session("chat", SessionType.AGENT))
    repository.create_agent("chat", SessionAgent("main", {}, {}))
    originals = [SessionMessage({"role": "user", "content": [{"text": f"m{i}"}]}, i) for i in range(3)]
    for message in originals:
        repository.create_message("chat", "main", message)
    repository.update_agent("chat", SessionAgent("main", {"k": 1}, {}))
    redacted = SessionMessage(
        {"role": "user", "content": [{"text": "m0"}]}, 0, redact_message={"role": "user", "content": [{"text": "gone"}]}
    )
    repository.update_message("chat", "main", redacted)
    fresh = EvstoreSessionRepository(store)
    listed = fresh.list_messages("chat", "main")
    assert [texts([m.to_message()])[0] for m in listed] == ["gone", "m1", "m2"]
    assert listed[0].created_at == originals[0].created_at
    agent = fresh.read_agent("chat", "main")
    assert agent is not None and agent.state == {"k": 1}


def test_a_stale_writer_is_refused(store: Store) -> None:
    first = make_agent(store, "chat")
    first("weather in the first city?")
    second = make_agent(store, "chat")  # another process resuming the same session
    first("and the second?")
    with pytest.raises(WriteConflictError):
        second("and the third?")
    assert len(make_agent(store, "chat").messages) == 8


def test_a_message_id_other_than_the_count_is_refused(store: Store) -> None:
    repository = EvstoreSessionRepository(store)
    repository.create_session(Session("chat", SessionType.AGENT))
    repository.create_agent("chat", SessionAgent("main", {}, {}))
    with pytest.raises(WriteConflictError, match="next message id is 0"):
        repository.create_message("chat", "main", SessionMessage({"role": "user", "content": []}, 1))


def test_an_encrypted_store_seals_everything_and_resumes(backend: S3Store, root: str) -> None:
    keyring = Keyring.from_key(generate_key())
    agent = make_agent(Store(backend, root=root, keyring=keyring), "chat")
    agent("weather in the first city?")
    listing = list(backend.list(root + "/"))  # the store's own requests (its client reads LIST bodies itself)
    raw = b"".join(backend.get(o.key).data for o in listing)
    assert len(listing) > 5 and b"weather" not in raw and b"City1" not in raw and b"SlidingWindow" not in raw
    assert make_agent(Store(backend, root=root, keyring=keyring), "chat").messages == agent.messages


def test_an_encrypted_session_needs_its_key(backend: S3Store, root: str) -> None:
    make_agent(Store(backend, root=root, keyring=Keyring.from_key(generate_key())), "chat")("hi")
    with pytest.raises(KeyRequiredError):
        make_agent(Store(backend, root=root), "chat")


def test_a_fork_resumes_the_branch(store: Store) -> None:
    agent = make_agent(store, "chat")
    agent("weather in the first city?")
    after_first_turn = store.info("chat").head
    agent("and the second?")
    store.fork("chat", "chat-alt", at=after_first_turn)
    model = ScriptedModel("alt")
    branch = make_agent(store, "chat-alt", model)
    assert branch.messages == agent.messages[:4]
    branch("what about elsewhere?")
    assert texts(model.seen[0]) == [*texts(agent.messages[:4]), "what about elsewhere?"]
    assert texts(make_agent(store, "chat-alt").messages)[4:] == [
        "what about elsewhere?",
        "use Cityalt1",
        "result sunny in Cityalt1",
        "altThe tool said: sunny in Cityalt1",
    ]
    assert make_agent(store, "chat").messages == agent.messages  # the parent is untouched


def test_read_session_of_a_fork_names_the_fork(store: Store) -> None:
    make_agent(store, "chat")("hi")
    store.fork("chat", "chat-alt")
    session = EvstoreSessionRepository(store).read_session("chat-alt")
    assert session is not None and session.session_id == "chat-alt"


def test_read_session_of_a_missing_session_is_none() -> None:
    assert EvstoreSessionRepository(Store(MemoryStore())).read_session("nope") is None


def test_read_message_finds_a_message_by_id() -> None:
    store = Store(MemoryStore())
    agent = make_agent(store, "chat")
    agent("weather in the first city?")
    repository = EvstoreSessionRepository(store)
    found = repository.read_message("chat", "main", 2)
    assert found is not None and found.to_message() == agent.messages[2]
    assert repository.read_message("chat", "main", 9) is None


class _MultiAgent:
    def __init__(self, state: dict[str, Any]) -> None:
        self.id = "swarm"
        self.state = state

    def serialize_state(self) -> dict[str, Any]:
        return self.state


def test_multi_agent_state_round_trips() -> None:
    repository = EvstoreSessionRepository(Store(MemoryStore()))
    repository.create_session(Session("chat", SessionType.AGENT))
    repository.create_multi_agent("chat", _MultiAgent({"step": 1}))  # type: ignore[arg-type]
    repository.update_multi_agent("chat", _MultiAgent({"step": 2, "nodes": ["a"]}))  # type: ignore[arg-type]
    assert repository.read_multi_agent("chat", "swarm") == {"step": 2, "nodes": ["a"]}
    assert repository.read_multi_agent("chat", "other") is None


def test_updating_a_missing_agent_is_an_error() -> None:
    repository = EvstoreSessionRepository(Store(MemoryStore()))
    repository.create_session(Session("chat", SessionType.AGENT))
    with pytest.raises(SessionException):
        repository.update_agent("chat", SessionAgent("ghost", {}, {}))


def test_bytes_in_messages_round_trip() -> None:
    store = Store(MemoryStore())
    repository = EvstoreSessionRepository(store)
    repository.create_session(Session("chat", SessionType.AGENT))
    repository.create_agent("chat", SessionAgent("main", {}, {}))
    image = {"image": {"format": "png", "source": {"bytes": b"\x89PNG\x00\xff"}}}
    repository.create_message("chat", "main", SessionMessage({"role": "user", "content": [image]}, 0))
    (listed,) = EvstoreSessionRepository(store).list_messages("chat", "main")
    assert listed.message["content"][0]["image"]["source"]["bytes"] == b"\x89PNG\x00\xff"


def test_creating_an_existing_session_raises_strands_session_exception() -> None:
    from evstore import SessionExistsError

    repository = EvstoreSessionRepository(Store(MemoryStore()))
    repository.create_session(Session("chat", SessionType.AGENT))
    with pytest.raises(SessionException, match="already exists") as caught:
        repository.create_session(Session("chat", SessionType.AGENT))
    assert isinstance(caught.value.__cause__, SessionExistsError)


def test_deleting_a_missing_session_raises_strands_session_exception() -> None:
    from evstore import SessionNotFoundError

    store = Store(MemoryStore())
    repository = EvstoreSessionRepository(store)
    with pytest.raises(SessionException, match="does not exist") as caught:
        repository.delete_session("never")
    assert isinstance(caught.value.__cause__, SessionNotFoundError)
    repository.create_session(Session("chat", SessionType.AGENT))
    repository.delete_session("chat")
    assert repository.read_session("chat") is None
    with pytest.raises(SessionException):
        repository.delete_session("chat")  # deleted already


# ---- a long-lived agent recovers from a conflict ------------------------------------------------


def _turn_texts(messages: list[Any]) -> list[str]:
    """The prompts of the stored turns, checking that each turn is whole and in one piece: the
    scripted model's turn is the prompt, the tool use, its result and the answer."""
    assert len(messages) % 4 == 0, texts(messages)
    prompts = []
    for start in range(0, len(messages), 4):
        prompt, use, result, answer = messages[start : start + 4]
        assert [m["role"] for m in (prompt, use, result, answer)] == ["user", "assistant", "user", "assistant"]
        assert "toolUse" in use["content"][0] and "toolResult" in result["content"][0]
        assert result["content"][0]["toolResult"]["toolUseId"] == use["content"][0]["toolUse"]["toolUseId"]
        prompts.append(prompt["content"][0]["text"])
    return prompts


def test_a_long_lived_agent_raises_a_conflict_once_then_continues() -> None:
    """The stuck writer of issue 29: after another worker wrote, every turn of a long-lived agent
    failed while its messages grew unsaved. Now the turn that lost raises once, and the agent's
    next invocation restores it from the session as it is and continues."""
    store = Store(MemoryStore())
    first = make_agent(store, "chat", ScriptedModel("A"))
    first("a1")
    second = make_agent(store, "chat", ScriptedModel("B"))
    second("b1")
    with pytest.raises(WriteConflictError):
        first("a2")  # its view ends at a1
    assert len(first.messages) == 5  # Strands keeps the unsaved prompt until the next invocation
    model = first.model
    assert isinstance(model, ScriptedModel)
    calls = len(model.seen)
    first("a2")  # restored first: b1 is in its history, the failed prompt is not
    assert texts(model.seen[calls])[-2:] == ["BThe tool said: sunny in CityB1", "a2"]
    assert _turn_texts(first.messages) == ["a1", "b1", "a2"]
    with pytest.raises(WriteConflictError):
        second("b2")
    second("b2")
    assert _turn_texts(make_agent(store, "chat").messages) == ["a1", "b1", "a2", "b2"]


def test_after_a_conflict_the_repository_reads_what_the_other_wrote_before_it_writes() -> None:
    store = Store(MemoryStore())
    mine, other = EvstoreSessionRepository(store), EvstoreSessionRepository(store)
    mine.create_session(Session("s", SessionType.AGENT))
    mine.create_agent("s", SessionAgent("main", {}, {}))
    other.create_agent("s", SessionAgent("helper", {}, {}))  # another process, another agent
    message = SessionMessage({"role": "user", "content": [{"text": "hi"}]}, 0)
    with pytest.raises(WriteConflictError):
        mine.create_message("s", "main", message)
    mine.create_message("s", "main", message)  # re-read first: the helper's record does not clash
    assert [m.message["content"][0]["text"] for m in other.list_messages("s", "main")] == ["hi"]
    assert other.read_agent("s", "helper") is not None


def race_two_workers(a: Any, b: Any) -> None:
    """Worker A took turn a1; B restores it and takes b1; each of A and B is then behind the other
    once: its turn raises the conflict once, and the same agent called again continues after the
    other's turn."""
    assert b.answer() == {"ready": True, "messages": 4}  # B restored A's turn
    assert b.send(op="turn", prompt="b1")["ok"]
    lost = a.send(op="turn", prompt="a2")
    assert lost["ok"] is False and lost["error"] == "WriteConflictError", lost
    again = a.send(op="turn", prompt="a2")  # the same agent, called again
    assert again["ok"], again
    assert _turn_texts(again["model_input"][:-1]) == ["a1", "b1"]  # it saw B's turn
    lost = b.send(op="turn", prompt="b2")
    assert lost["ok"] is False and lost["error"] == "WriteConflictError", lost
    assert b.send(op="turn", prompt="b2")["ok"]


@pytest.mark.slow
def test_two_processes_on_one_session_neither_lose_nor_interleave_a_turn(tmp_path: Path) -> None:
    """Two worker processes, each with one long-lived Agent on one session (same agent id). The
    one whose view is behind raises the conflict once; its next turn restores it from the
    session and continues after the other's turn."""
    from .scripts.handle_worker import Worker

    a = Worker("strands", tmp_path / "store", "chat", "A")
    try:
        assert a.answer() == {"ready": True, "messages": 0}
        assert a.send(op="turn", prompt="a1")["ok"]
        b = Worker("strands", tmp_path / "store", "chat", "B")
        try:
            race_two_workers(a, b)
            assert a.send(op="turn", prompt="a3")["ok"] is False  # behind again: once
            assert a.send(op="turn", prompt="a3")["ok"]
        finally:
            b.close()
    finally:
        a.close()
    from evstore import LocalStore

    restored = make_agent(Store(LocalStore(tmp_path / "store")), "chat")
    assert _turn_texts(restored.messages) == ["a1", "b1", "a2", "b2", "a3"]
