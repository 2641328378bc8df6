"""``Session.catch_up``: a long-lived handle reads what other writers appended since its head,
at a cost that does not grow with the session."""

from __future__ import annotations

import pytest

from evstore import IntegrityError, Keyring, MemoryStore, SessionNotFoundError, Store

from .helpers import CountingStore, msg


def _grown(events: int, keyring: Keyring | None = None) -> tuple[Store, CountingStore]:
    counting = CountingStore(MemoryStore())
    store = Store(counting, keyring=keyring)
    writer = store.open("s", create=True)
    for i in range(events):
        writer.append(msg(f"m{i}"))
    return store, counting


@pytest.mark.parametrize("events", [10, 3000])
def test_nothing_new_costs_one_list_at_any_length(events: int) -> None:
    store, counting = _grown(events)
    writer = store.open("s")
    counting.reset()
    assert writer.catch_up() == []
    assert counting.counts == {"LIST": 1}
    assert writer.head == events


@pytest.mark.parametrize("events", [10, 3000])
def test_new_events_cost_one_list_and_a_get_each_and_move_the_writer(events: int) -> None:
    store, counting = _grown(events)
    writer, other = store.open("s"), store.open("s")
    other.append(msg("theirs 1"))
    other.append([msg("theirs 2"), msg("and 3", role="assistant")])
    counting.reset()
    caught = writer.catch_up()
    assert counting.counts == {"LIST": 1, "GET": 2}
    assert [e.seq for e in caught] == [events + 1, events + 2]
    assert [m["content"] for e in caught for m in e.messages] == ["theirs 1", "theirs 2", "and 3"]
    assert caught == list(store.replay("s", start=events + 1))
    assert writer.append(msg("mine")) == events + 3  # after them: no conflict
    assert [m["content"] for m in store.context("s")[-2:]] == ["and 3", "mine"]


def test_a_caught_up_key_is_known_to_the_writer() -> None:
    store, counting = _grown(5)
    writer, other = store.open("s"), store.open("s")
    seq = other.append(msg("once"), idempotency_key="turn-7")
    writer.catch_up()
    counting.reset()
    assert writer.append(msg("once"), idempotency_key="turn-7") == seq
    assert counting.total == 0  # known from what it read: no request, nothing written twice


def test_sealed_events_are_opened() -> None:
    keyring = Keyring({"k1": bytes(range(32))}, "k1")
    store, _ = _grown(3, keyring)
    writer, other = store.open("s"), store.open("s")
    other.append(msg("secret"))
    assert [m["content"] for e in writer.catch_up() for m in e.messages] == ["secret"]
    assert writer.append(msg("next")) == 5


def test_a_deleted_session_is_not_found() -> None:
    store, _ = _grown(3)
    writer = store.open("s")
    store.delete("s")
    with pytest.raises(SessionNotFoundError):
        writer.catch_up()


def test_an_event_planted_after_the_head_is_refused() -> None:
    """An object a create-only attacker put at the next seq does not continue the head's chain:
    an error, never an event taken into the writer's history."""
    store, _ = _grown(3)
    writer = store.open("s")
    other = Store(MemoryStore()).open("s", create=True)
    for i in range(4):
        other.append(msg(f"forged {i}"))
    forged = other._ctx.backend.get(other._ctx.layout.event_key("s", 4)).data  # another incarnation's seq 4
    store.backend.create(store.layout.event_key("s", 4), forged)
    with pytest.raises(IntegrityError):
        writer.catch_up()
    assert writer.head == 3


def test_a_fork_reads_its_own_events_after_the_fork_seq() -> None:
    store = Store(MemoryStore())
    parent = store.create("p")
    parent.append(msg("one"))
    fork = store.fork("p", "f")
    parent.append(msg("parent only"))
    store.open("f").append(msg("fork two"))
    caught = fork.catch_up()
    assert [(e.session_id, e.seq, e.messages[0]["content"]) for e in caught] == [("f", 2, "fork two")]
    assert fork.append(msg("fork three")) == 3
