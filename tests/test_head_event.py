"""``Session.head_event``: the event a writer's next append continues, read in one GET and checked
against the writer's head hash (what the ADK adapter reads an app or user state log's state from)."""

from __future__ import annotations

import asyncio

import pytest

from evstore import AsyncStore, IntegrityError, MemoryStore, Store

from .helpers import CountingStore, msg


def test_head_event_is_the_newest_event_in_one_get() -> None:
    counting = CountingStore(MemoryStore())
    store = Store(counting, root="root")
    writer = store.create("s")
    assert writer.head_event() is None  # no event yet
    for i in range(40):
        writer.append(msg(f"m{i}"))
    opened = store.open("s")
    counting.reset()
    head = opened.head_event()
    assert counting.counts == {"GET": 1}
    assert head is not None and head == list(store.replay("s"))[-1]
    assert head.seq == opened.head == 40 and head.messages[0]["content"] == "m39"


def test_a_head_object_that_is_not_the_event_the_writer_continues_is_refused() -> None:
    memory = MemoryStore()
    store = Store(memory, root="root")
    writer = store.create("s")
    writer.append(msg("first"))
    writer.append(msg("second"))
    opened = store.open("s")
    key = "root/sessions/s/00000000000000000002"
    other = memory.get("root/sessions/s/00000000000000000001").data
    memory.replace(key, other, etag=memory.head(key).etag)  # another event's bytes there
    with pytest.raises(IntegrityError):
        opened.head_event()


def test_an_async_session_reads_its_head_event() -> None:
    async def go() -> None:
        store = AsyncStore(Store(MemoryStore(), root="root"))
        writer = await store.create("s")
        await writer.append(msg("only"))
        head = await writer.head_event()
        assert head is not None and head.seq == 1 and head.messages[0]["content"] == "only"

    asyncio.run(go())
