"""The Pydantic AI helper: EvstoreHistory, with real agents on FunctionModel and TestModel (no network)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from evstore import IntegrityError, MemoryStore, ObjectStore, SessionNotFoundError, Store, WriteConflictError

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from evstore.integrations.pydantic_ai import META_KEY, EvstoreHistory


def as_json(messages: list[ModelMessage]) -> list[Any]:
    return ModelMessagesTypeAdapter.dump_python(messages, mode="json")  # type: ignore[no-any-return]


def prompts(messages: list[ModelMessage]) -> list[str]:
    out: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, UserPromptPart | TextPart) and isinstance(part.content, str):
                out.append(part.content)
    return out


class Echo:
    """A FunctionModel function: answers with the prompts it was sent, and records them."""

    def __init__(self) -> None:
        self.seen: list[list[str]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.seen.append(prompts(messages))
        return ModelResponse(parts=[TextPart(f"answer {len(self.seen)}")])


@pytest.fixture
def store() -> Store:
    return Store(MemoryStore(), root="root")


def test_a_history_resumes_in_a_fresh_store_object(backend: ObjectStore) -> None:
    echo = Echo()
    agent = Agent(FunctionModel(echo), instructions="Be brief.")
    history = EvstoreHistory(Store(backend, root="root"), "chat")
    first = agent.run_sync("hello", message_history=history.load())
    history.save(first.new_messages())

    resumed = EvstoreHistory(Store(backend, root="root"), "chat")  # a new process
    loaded = resumed.load()
    assert loaded == first.all_messages()
    second = agent.run_sync("and again?", message_history=loaded)
    assert echo.seen[-1] == ["hello", "answer 1", "and again?"]
    resumed.save(second.new_messages())
    assert as_json(EvstoreHistory(Store(backend, root="root"), "chat").load()) == as_json(second.all_messages())


def test_each_save_is_one_event_holding_the_runs_new_messages(store: Store) -> None:
    agent = Agent(FunctionModel(Echo()))
    history = EvstoreHistory(store, "chat")
    runs = []
    for prompt in ("one", "two", "three"):
        result = agent.run_sync(prompt, message_history=history.load())
        history.save(result.new_messages())
        runs.append(result.new_messages())
    events = list(store.replay("chat"))
    assert [len(e.messages) for e in events] == [len(r) for r in runs]
    assert [[m["meta"][META_KEY] for m in e.messages] for e in events] == [as_json(r) for r in runs]
    assert [m["role"] for m in events[0].messages] == ["user", "assistant"]
    assert [m["content"] for m in events[0].messages] == ["one", "answer 1"]


def test_tool_calls_and_returns_round_trip(store: Store) -> None:
    agent = Agent(TestModel())

    @agent.tool_plain
    def forecast(city: str) -> str:
        """The forecast for a city."""
        return f"rain in {city}"

    history = EvstoreHistory(store, "chat")
    result = agent.run_sync("weather?", message_history=history.load())
    history.save(result.new_messages())
    loaded = EvstoreHistory(store, "chat").load()
    assert loaded == result.all_messages()
    parts = [p for m in loaded for p in m.parts]
    assert any(isinstance(p, ToolCallPart) for p in parts) and any(isinstance(p, ToolReturnPart) for p in parts)


def test_bytes_round_trip(store: Store) -> None:
    data = bytes(range(256))
    agent = Agent(FunctionModel(Echo()))
    history = EvstoreHistory(store, "chat")
    result = agent.run_sync(["look at this", BinaryContent(data=data, media_type="application/octet-stream")])
    history.save(result.new_messages())
    loaded = EvstoreHistory(store, "chat").load()
    assert as_json(loaded) == as_json(result.all_messages())
    first = loaded[0].parts[0]
    assert isinstance(first, UserPromptPart) and not isinstance(first.content, str)
    binary = first.content[1]
    assert isinstance(binary, BinaryContent) and binary.data == data


def test_a_save_after_another_writer_extended_the_history_conflicts_and_writes_nothing(store: Store) -> None:
    agent = Agent(FunctionModel(Echo()))
    one, two = EvstoreHistory(store, "chat"), EvstoreHistory(store, "chat")
    one.load()
    two.load()
    one.save(agent.run_sync("from one").new_messages())
    with pytest.raises(WriteConflictError):
        two.save(agent.run_sync("from two").new_messages())
    assert prompts(EvstoreHistory(store, "chat").load()) == ["from one", "answer 1"]
    assert prompts(two.load()) == ["from one", "answer 1"]  # load again, and it appends
    two.save(agent.run_sync("from two").new_messages())
    assert len(list(store.replay("chat"))) == 2


def test_an_empty_save_writes_nothing(store: Store) -> None:
    history = EvstoreHistory(store, "chat")
    assert history.load() == []
    assert history.save([]) is None
    assert list(store.replay("chat")) == []


def test_retractions_apply_to_the_loaded_history(store: Store) -> None:
    agent = Agent(FunctionModel(Echo()))
    history = EvstoreHistory(store, "chat")
    for prompt in ("keep", "drop"):
        history.save(agent.run_sync(prompt, message_history=history.load()).new_messages())
    store.open("chat").rewind(1)
    assert prompts(history.load()) == ["keep", "answer 1"]


def test_messages_other_tools_appended_are_read_as_text(store: Store) -> None:
    writer = store.open("chat", create=True)
    writer.append([{"role": "system", "content": "be kind"}, {"role": "user", "content": "hi"}])
    writer.append({"role": "assistant", "content": [{"type": "text", "text": "hello"}]})
    loaded = EvstoreHistory(store, "chat").load()
    assert [type(m) for m in loaded] == [ModelRequest, ModelRequest, ModelResponse]
    assert isinstance(loaded[0].parts[0], SystemPromptPart) and loaded[0].parts[0].content == "be kind"
    assert prompts(loaded) == ["hi", "hello"]


def test_a_missing_session_raises_when_create_is_off(store: Store) -> None:
    with pytest.raises(SessionNotFoundError):
        EvstoreHistory(store, "nope", create=False).load()
    assert list(store.list_sessions()) == []


def test_a_stored_message_that_does_not_validate_is_an_integrity_error(store: Store) -> None:
    store.open("chat", create=True).append({"role": "user", "content": "x", "meta": {META_KEY: {"kind": "nonsense"}}})
    with pytest.raises(IntegrityError):
        EvstoreHistory(store, "chat").load()


def test_the_async_forms_load_and_save(store: Store) -> None:
    agent = Agent(FunctionModel(Echo()))

    async def go() -> list[ModelMessage]:
        history = EvstoreHistory(store, "chat")
        result = await agent.run("async hello", message_history=await history.aload())
        await history.asave(result.new_messages())
        return await EvstoreHistory(store, "chat").aload()

    assert prompts(asyncio.run(go())) == ["async hello", "answer 1"]


@pytest.mark.slow
@pytest.mark.parametrize("length", [10, 300])
def test_requests_per_run_stay_flat(length: int) -> None:
    """A run (load, the agent, save) on a history that loaded before: one LIST for what is new
    (nothing) and the save's PUT, a segment PUT and a DELETE at most where automatic compaction
    packs one. Before, each load read the whole session again (open's refresh and a full replay)."""
    from .helpers import CountingStore

    counting = CountingStore(MemoryStore())
    store = Store(counting, root="root")
    writer = store.create("chat")
    for i in range(length):
        writer.append({"role": "user", "content": f"m{i}"})
    agent = Agent(FunctionModel(Echo()))
    history = EvstoreHistory(store, "chat")
    history.load()  # the first load reads the session once
    totals = []
    for turn in range(40):  # past a boundary of automatic compaction (every 32 events)
        counting.reset()
        history.save(agent.run_sync(f"turn {turn}", message_history=history.load()).new_messages())
        assert counting.counts["GET"] + counting.counts["LIST"] == 1, dict(counting.counts)  # the load: one LIST
        totals.append(counting.total)
    assert max(totals) <= 4 and totals.count(2) >= 36, totals
    assert len(EvstoreHistory(store, "chat").load()) == length + 40 * 2


def test_a_history_reads_only_what_another_writer_appended() -> None:
    from .helpers import CountingStore

    counting = CountingStore(MemoryStore())
    store = Store(counting, root="root")
    agent = Agent(FunctionModel(Echo()))
    one, two = EvstoreHistory(store, "chat"), EvstoreHistory(store, "chat")
    for turn in range(20):
        one.save(agent.run_sync(f"one {turn}", message_history=one.load()).new_messages())
    two.load()
    one.save(agent.run_sync("one more", message_history=one.load()).new_messages())
    counting.reset()
    assert prompts(two.load())[-2:] == ["one more", "answer 21"]
    gets = [key for kind, key in counting.keys if kind == "GET" and "/sessions/chat/0" in key]
    # the new event only: its GET, and the refresh's GET of the head (the same event)
    assert gets == ["root/sessions/chat/00000000000000000021"] * len(gets) and len(gets) <= 2
    two.save(agent.run_sync("two", message_history=two.load()).new_messages())
    assert prompts(EvstoreHistory(store, "chat").load())[-4:] == ["one more", "answer 21", "two", "answer 22"]


# ---- EvstoreConversationStore: Pydantic AI's ConversationStore hook ------------------------------------


def test_conversation_store_runs_saves_and_resumes_in_a_new_store_object() -> None:
    from pydantic_ai.conversation import Conversation
    from pydantic_ai.conversation_store import ConversationConflict

    from evstore.integrations.pydantic_ai import EvstoreConversationStore

    backend = MemoryStore()
    echo = Echo()
    agent = Agent(FunctionModel(echo))

    async def turn(conversations: EvstoreConversationStore, prompt: str) -> list[str]:
        conversation = await conversations.load("chat-1") or Conversation(conversation_id="chat-1")
        result = await agent.run(prompt, conversation=conversation)
        await conversations.save(result)
        return prompts(result.all_messages())

    async def scenario() -> None:
        first = EvstoreConversationStore(Store(backend, root="r"))
        await turn(first, "one")
        await turn(first, "two")
        restarted = EvstoreConversationStore(Store(backend, root="r"))  # a new process over the same bucket
        assert await turn(restarted, "three") == ["one", "answer 1", "two", "answer 2", "three", "answer 3"]
        assert echo.seen[-1] == ["one", "answer 1", "two", "answer 2", "three"]
        # two processes racing from the same revision: one save lands, the other conflicts, nothing mixes
        a, b = EvstoreConversationStore(Store(backend, root="r")), EvstoreConversationStore(Store(backend, root="r"))
        loaded_a, loaded_b = await a.load("chat-1"), await b.load("chat-1")
        assert loaded_a is not None and loaded_b is not None
        result_a = await agent.run("from a", conversation=loaded_a)
        result_b = await agent.run("from b", conversation=loaded_b)
        await a.save(result_a)
        with pytest.raises(ConversationConflict):
            await b.save(result_b)
        final = await EvstoreConversationStore(Store(backend, root="r")).load("chat-1")
        assert final is not None and prompts(final.messages)[-2:] == ["from a", "answer 4"]
        assert len(final.messages) == 8
        # fork, list, delete
        fork = await first.fork("chat-1", at=2, new_conversation_id="chat-2")
        assert prompts(fork.messages) == ["one", "answer 1"]
        assert {r.conversation_id for r in await restarted.list_conversations()} == {"chat-1", "chat-2"}
        await restarted.delete("chat-1")
        assert await EvstoreConversationStore(Store(backend, root="r")).load("chat-1") is None
        kept = await EvstoreConversationStore(Store(backend, root="r")).load("chat-2")
        assert kept is not None and prompts(kept.messages) == ["one", "answer 1"]

    asyncio.run(scenario())


@pytest.mark.parametrize("turns", [5, 25])
def test_conversation_store_turn_costs_the_same_requests_at_any_length(turns: int) -> None:
    from pydantic_ai.conversation import Conversation

    from evstore.integrations.pydantic_ai import EvstoreConversationStore

    from .helpers import CountingStore

    counting = CountingStore(MemoryStore())
    conversations = EvstoreConversationStore(Store(counting, root="r"))
    agent = Agent(TestModel(custom_output_text="ok"))

    async def turn(prompt: str) -> None:
        conversation = await conversations.load("c") or Conversation(conversation_id="c")
        await conversations.save(await agent.run(prompt, conversation=conversation))

    async def scenario() -> dict[str, int]:
        for i in range(turns):
            await turn(f"p{i}")
        counting.reset()
        await turn("last")
        return dict(counting.counts)

    counts = asyncio.run(scenario())
    assert counts == {"LIST": 2, "PUT": 1}, counts  # load and save read a LIST each (nothing new); the save is one PUT
