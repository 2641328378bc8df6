"""``_read.events_after``: what a handle that keeps its head reads to catch up (the adapters' SessionLog)."""

from __future__ import annotations

import os

import pytest

from evstore import IntegrityError, Keyring, MemoryStore, SessionNotFoundError, Store
from evstore._read import events_after

from .helpers import CountingStore, msg


@pytest.mark.parametrize("length", [10, 2000])
def test_nothing_new_costs_one_list_at_any_length(length: int) -> None:
    counting = CountingStore(MemoryStore())
    store = Store(counting, root="root")
    writer = store.create("s")
    for i in range(length):
        writer.append(msg(f"m{i}"))  # automatic compaction packs segments as it goes
    counting.reset()
    assert events_after(store.shared, writer.manifest, writer.head, writer.head_hash) == []
    assert dict(counting.counts) == {"LIST": 1}


def test_new_events_are_opened_and_chained_to_the_head() -> None:
    store = Store(MemoryStore(), keyring=Keyring({"k1": os.urandom(32)}, "k1"))
    mine = store.create("s")
    mine.append(msg("one"))
    other = store.open("s")
    other.append(msg("two"))
    other.append([msg("three"), msg("four")])
    events = events_after(store.shared, mine.manifest, mine.head, mine.head_hash)
    assert [(e.seq, [m["content"] for m in e.messages]) for e in events] == [(2, ["two"]), (3, ["three", "four"])]
    assert events[-1].hash == other.head_hash
    with pytest.raises(IntegrityError) as broken:  # a head hash that is not the event before them
        events_after(store.shared, mine.manifest, mine.head, events[-1].hash)
    assert broken.value.broken_link


def test_a_fork_reads_its_own_events_after_the_fork_seq() -> None:
    store = Store(MemoryStore())
    parent = store.create("p")
    parent.append(msg("one"))
    fork = store.fork("p", "f")
    parent.append(msg("parent only"))
    store.open("f").append(msg("fork two"))
    events = events_after(store.shared, fork.manifest, fork.head, fork.head_hash)
    assert [(e.session_id, e.seq, e.messages[0]["content"]) for e in events] == [("f", 2, "fork two")]


def test_a_deleted_session_is_not_found() -> None:
    store = Store(MemoryStore())
    writer = store.create("s")
    writer.append(msg("one"))
    store.delete("s")
    with pytest.raises(SessionNotFoundError):
        events_after(store.shared, writer.manifest, writer.head, writer.head_hash)
