"""The core log: appends, replay, single writer, exactly-once, bad input."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from evstore import (
    IntegrityError,
    InvalidInputError,
    Keyring,
    MemoryStore,
    SessionExistsError,
    SessionExpiredError,
    SessionNotFoundError,
    Store,
    WriteConflictError,
)
from evstore._backends import ObjectExists
from evstore._context import FENCE_HOLD
from evstore._ids import format_seq

from .helpers import CountingStore, msg


def test_append_assigns_contiguous_seqs_and_replay_returns_them(store: Store) -> None:
    writer = store.open("demo", create=True)
    assert [writer.append(msg(f"m{i}")) for i in range(5)] == [1, 2, 3, 4, 5]
    events = list(store.replay("demo"))
    assert [e.seq for e in events] == [1, 2, 3, 4, 5]
    assert [e.messages[0]["content"] for e in events] == [f"m{i}" for i in range(5)]


def test_events_land_at_zero_padded_keys_under_the_root(store: Store) -> None:
    writer = store.open("demo", create=True)
    writer.append(msg("a"))
    writer.append(msg("b"))
    keys = [o.key for o in store.backend.list("root/")]
    assert keys == [
        "root/sessions/demo/00000000000000000001",
        "root/sessions/demo/00000000000000000002",
        "root/sessions/demo/manifest",
    ]


def test_plaintext_events_are_json_readable_with_standard_tools(store: Store) -> None:
    store.open("demo", create=True).append(msg("hello", meta={"mode": "chat"}))
    raw = msgspec.json.decode(store.backend.get("root/sessions/demo/" + format_seq(1)).data)
    assert raw["sid"] == "demo" and raw["seq"] == 1
    assert raw["body"]["messages"] == [{"role": "user", "content": "hello", "meta": {"mode": "chat"}}]


def test_a_batch_is_one_atomic_event(memory_store: Store) -> None:
    writer = memory_store.open("s", create=True)
    seq = writer.append([msg("q"), msg("a", "assistant"), msg("t", "tool", tool_call_id="c1")])
    (event,) = memory_store.replay("s")
    assert seq == event.seq == 1
    assert [m["role"] for m in event.messages] == ["user", "assistant", "tool"]


def test_unknown_message_fields_survive_a_round_trip(memory_store: Store) -> None:
    message = {
        "role": "assistant",
        "content": [{"type": "text", "text": "x"}],
        "tool_calls": [{"id": "c"}],
        "name": "bot",
        "meta": {"is_summary": False},
        "vendor_field": {"nested": [1, 2.5, None]},
    }
    memory_store.open("s", create=True).append(message)
    assert next(memory_store.replay("s")).messages == [message]


def test_steady_state_append_is_exactly_one_put(counting_store: tuple[Store, CountingStore]) -> None:
    _, counting = counting_store
    store = Store(counting, root="root", auto_compact=None)  # the uncompacted log: no segment PUTs, no floor
    writer = store.open("s", create=True)
    writer.append(msg("first"))
    counting.reset()
    for i in range(50):
        writer.append(msg(f"m{i}"))
    assert counting.counts == {"PUT": 50}


def test_creating_a_session_costs_two_requests_then_one_per_append(counting_store: tuple[Store, CountingStore]) -> None:
    store, counting = counting_store
    writer = store.open("s", create=True)
    writer.append(msg("x"))
    # GET manifest (absent), LIST the prefix (empty: no remnants), PUT manifest, PUT event
    assert counting.counts == {"GET": 1, "LIST": 1, "PUT": 2}


def test_opening_an_existing_session_costs_four_requests(counting_store: tuple[Store, CountingStore]) -> None:
    store, counting = counting_store
    writer = store.open("s", create=True)
    for i in range(30):
        writer.append(msg(f"m{i}"))
    counting.reset()
    reopened = store.open("s")
    assert reopened.head == 30 and reopened.head_hash == writer.head_hash
    assert counting.counts == {"GET": 2, "LIST": 2}


@pytest.mark.slow
def test_opening_a_long_session_probes_logarithmically(counting_store: tuple[Store, CountingStore]) -> None:
    _, counting = counting_store
    store = Store(counting, root="root", auto_compact=None)  # the uncompacted log: no segment PUTs, no floor
    writer = store.open("s", create=True)
    for i in range(5000):
        writer.append(msg(f"m{i}"))
    counting.reset()
    assert store.open("s").head == 5000
    assert counting.counts["LIST"] == 3  # non-event objects, first page, final page
    assert counting.counts["HEAD"] <= 2 * 5  # gallop + bisect over 5,000 / 1,000


def test_reopened_writer_continues_the_chain(store: Store) -> None:
    store.open("s", create=True).append(msg("a"))
    store.open("s").append(msg("b"))
    assert store.verify("s").events == 2


def test_second_writer_gets_a_conflict_naming_the_seq_and_nothing_is_overwritten(store: Store) -> None:
    first = store.open("s", create=True)
    second = store.open("s")
    first.append(msg("mine"))
    with pytest.raises(WriteConflictError) as caught:
        second.append(msg("theirs"))
    assert caught.value.seq == 1
    assert "seq 1" in str(caught.value)
    assert [e.messages[0]["content"] for e in store.replay("s")] == ["mine"]
    assert second.refresh() == 1
    assert second.append(msg("theirs")) == 2
    assert [e.messages[0]["content"] for e in store.replay("s")] == ["mine", "theirs"]


def test_expected_head_is_checked(memory_store: Store) -> None:
    writer = memory_store.open("s", create=True)
    writer.append(msg("a"), expected_head=0)
    with pytest.raises(WriteConflictError):
        writer.append(msg("b"), expected_head=0)
    assert writer.append(msg("b"), expected_head=1) == 2


def test_own_write_whose_response_was_lost_is_success_exactly_once() -> None:
    """A retried PUT that meets its own earlier object (412) is the same append, not a conflict."""
    backend = MemoryStore()
    store = Store(backend)
    writer = store.open("s", create=True)
    original_create = backend.create

    def create_then_lose_response(key: str, data: bytes, **kwargs: object) -> str:
        original_create(key, data, **kwargs)  # type: ignore[arg-type]
        return original_create(key, data, **kwargs)  # type: ignore[arg-type]  # the retry: 412

    backend.create = create_then_lose_response  # type: ignore[method-assign]
    assert writer.append(msg("once")) == 1
    backend.create = original_create  # type: ignore[method-assign]
    assert writer.append(msg("next")) == 2
    assert [e.messages[0]["content"] for e in store.replay("s")] == ["once", "next"]
    assert store.verify("s").events == 2


def test_create_refuses_an_existing_id(memory_store: Store) -> None:
    memory_store.create("s")
    with pytest.raises(SessionExistsError):
        memory_store.create("s")


@pytest.mark.parametrize("bad", ["../x", "a/b", "", "x" * 129, "bad\nid", "tab\tid", "nul\0", ".hidden", "a..b", "é", " lead"])
def test_invalid_session_ids_are_refused_before_any_request(bad: str, counting_store: tuple[Store, CountingStore]) -> None:
    store, counting = counting_store
    for action in (
        lambda: store.open(bad, create=True),
        lambda: list(store.replay(bad)),
        lambda: store.info(bad),
        lambda: store.delete(bad),
        lambda: store.fork("ok", bad, at=1),
    ):
        with pytest.raises(InvalidInputError):
            action()
    assert counting.total == 0


def test_longest_valid_id_is_accepted(memory_store: Store) -> None:
    long_id = "a" + "b._-" * 31 + "xyz"
    assert len(long_id) == 128
    memory_store.open(long_id, create=True).append(msg("x"))
    assert memory_store.info(long_id).head == 1


@pytest.mark.parametrize(
    "bad",
    [
        "text",
        ["a list"],
        {"content": "no role"},
        {"role": "robot", "content": "x"},
        {"role": "user", "content": 5},
        {"role": "user", "tool_calls": "x"},
        {"role": "user", "meta": []},
    ],
)
def test_invalid_messages_are_refused_and_nothing_is_written(bad: object, memory_store: Store) -> None:
    writer = memory_store.open("s", create=True)
    with pytest.raises(InvalidInputError):
        writer.append(bad)  # type: ignore[arg-type]
    assert writer.head == 0 and list(memory_store.replay("s")) == []


def test_oversized_message_is_refused(counting_store: tuple[Store, CountingStore]) -> None:
    store, counting = counting_store
    writer = store.open("s", create=True)
    counting.reset()
    with pytest.raises(InvalidInputError, match="exceeds the limit of 5242880 bytes"):
        writer.append(msg("x" * (5 * 1024 * 1024)))
    assert counting.total == 0


def test_replay_of_a_missing_session_is_not_found(store: Store) -> None:
    with pytest.raises(SessionNotFoundError):
        list(store.replay("missing"))
    with pytest.raises(SessionNotFoundError):
        store.open("missing")


def test_replay_range(memory_store: Store) -> None:
    writer = memory_store.open("s", create=True)
    for i in range(10):
        writer.append(msg(f"m{i}"))
    assert [e.seq for e in memory_store.replay("s", start=4, end=6)] == [4, 5, 6]
    assert [e.seq for e in memory_store.replay("s", start=9)] == [9, 10]
    assert list(memory_store.replay("s", start=11)) == []


def test_replay_is_streamed_not_read_whole(counting_store: tuple[Store, CountingStore]) -> None:
    _, counting = counting_store
    store = Store(counting, root="root", concurrency=4)
    writer = store.open("s", create=True)
    for i in range(500):
        writer.append(msg(f"m{i}"))
    counting.reset()
    events = store.replay("s")
    first = next(events)
    assert first.seq == 1
    # the manifest, the segment window (8 segments, each with its loose event) and the tail's early GETs
    assert counting.counts["GET"] <= 1 + 16 + 2 * store.concurrency
    events.close()


def _put_raw(store: Store, session: str, seq: int, data: bytes) -> None:
    store.backend.create(store.layout.event_key(session, seq), data)


@pytest.mark.parametrize("garbage", [b"", b"not json", b"{}", b'{"v":1}', b"\xff\xfe", b"[1,2,3]"])
def test_an_object_that_is_not_an_event_is_an_integrity_error(garbage: bytes, memory_store: Store) -> None:
    writer = memory_store.open("s", create=True)
    writer.append(msg("ok"))
    _put_raw(memory_store, "s", 2, garbage)
    with pytest.raises(IntegrityError) as caught:
        list(memory_store.replay("s"))
    assert caught.value.seq == 2


def test_an_event_of_another_session_or_seq_is_an_integrity_error(memory_store: Store) -> None:
    a = memory_store.open("a", create=True)
    a.append(msg("a1"))
    a.append(msg("a2"))
    b = memory_store.open("b", create=True)
    b.append(msg("b1"))
    moved = memory_store.backend.get(memory_store.layout.event_key("a", 2)).data
    _put_raw(memory_store, "b", 2, moved)
    with pytest.raises(IntegrityError, match="belongs to seq 2 of session 'a'"):
        list(memory_store.replay("b"))
    shifted = memory_store.backend.get(memory_store.layout.event_key("b", 1)).data
    _put_raw(memory_store, "b", 3, shifted)
    with pytest.raises(IntegrityError):
        list(memory_store.replay("b", start=3))


def test_a_hole_in_the_log_is_an_integrity_error(memory_store: Store) -> None:
    writer = memory_store.open("s", create=True)
    for i in range(4):
        writer.append(msg(f"m{i}"))
    memory_store.backend.delete_many([memory_store.layout.event_key("s", 3)])
    with pytest.raises(IntegrityError, match="seq 3"):
        list(memory_store.replay("s"))


def test_a_session_whose_manifest_is_gone_is_expired(memory_store: Store) -> None:
    writer = memory_store.open("s", create=True)
    writer.append(msg("a"))
    writer.append(msg("b"))
    memory_store.backend.delete_many([memory_store.layout.manifest_key("s")])
    with pytest.raises(SessionExpiredError):
        list(memory_store.replay("s"))
    with pytest.raises(SessionExpiredError):
        memory_store.open("s")


def test_a_session_whose_first_events_are_gone_is_expired_not_partial(memory_store: Store) -> None:
    writer = memory_store.open("s", create=True)
    for i in range(5):
        writer.append(msg(f"m{i}"))
    memory_store.backend.delete_many([memory_store.layout.event_key("s", s) for s in (1, 2)])
    with pytest.raises(SessionExpiredError, match="first events are gone"):
        list(memory_store.replay("s"))
    with pytest.raises(SessionExpiredError):
        memory_store.open("s").append(msg("more"))


def test_list_sessions_pages_and_filters_by_prefix(memory_store: Store) -> None:
    ids = [f"agent-{i:03d}" for i in range(25)] + ["other"]
    for session_id in ids:
        memory_store.create(session_id)
    assert list(memory_store.list_sessions()) == sorted(ids)
    assert list(memory_store.list_sessions("agent-01")) == [f"agent-01{i}" for i in range(10)]
    assert list(memory_store.list_sessions(limit=3)) == ids[:3]
    assert list(memory_store.list_sessions(start_after="agent-023")) == ["agent-024", "other"]
    with pytest.raises(InvalidInputError):
        list(memory_store.list_sessions("../"))


def test_list_sessions_crosses_list_pages(memory_store: Store) -> None:
    for i in range(1005):
        memory_store.backend.create(memory_store.layout.manifest_key(f"s{i:05d}"), b"{}")
    assert len(list(memory_store.list_sessions())) == 1005


def test_info_reports_head_created_and_retention(memory_store: Store) -> None:
    writer = memory_store.open("s", create=True, retention="ephemeral")
    writer.append(msg("a"))
    info = memory_store.info("s")
    assert (info.head, info.retention, info.encrypted, info.parent) == (1, "ephemeral", False, None)
    assert info.created.endswith("Z")


def test_delete_hides_the_session_at_once_and_gc_removes_it_after_the_fence_hold(store: Store) -> None:
    writer = store.open("s", create=True)
    for i in range(3):
        writer.append(msg(f"m{i}"))
    result = store.delete("s")
    assert result.fenced_at == 4 and result.kept_for_forks == []
    with pytest.raises(SessionNotFoundError):
        list(store.replay("s"))
    with pytest.raises(SessionNotFoundError):
        store.delete("s")
    report = store.gc(grace=timedelta(0), now=datetime.now(UTC) + FENCE_HOLD + timedelta(minutes=1))
    assert report.objects_removed == 6  # 3 events, the manifest, the fence, the tombstone
    assert list(store.backend.list("root/sessions/s/")) == []
    assert store.open("s", create=True).append(msg("new life")) == 1  # an empty prefix: seqs from 1 again
    assert [e.messages[0]["content"] for e in store.replay("s")] == ["new life"]


def test_retention_must_be_known(memory_store: Store) -> None:
    with pytest.raises(InvalidInputError):
        memory_store.create("s", retention="forever")  # type: ignore[arg-type]


def test_many_appends_keep_order(memory_store: Store) -> None:
    writer = memory_store.open("s", create=True)
    for low in range(0, 300, 7):
        writer.append([msg(str(i)) for i in range(low, min(low + 7, 300))])
    contents = [m["content"] for e in memory_store.replay("s") for m in e.messages]
    assert contents == [str(i) for i in range(300)]


def test_compaction_segments_cut_replay_requests_and_keep_every_loose_event(
    counting_store: tuple[Store, CountingStore],
) -> None:
    _, counting = counting_store
    store = Store(counting, root="root", auto_compact=None)  # segments from ``compact`` only
    writer = store.open("s", create=True)
    for i in range(250):
        writer.append(msg(f"m{i}"))
    assert store.compact("s", segment_size=100) == [(1, 100), (101, 200)]
    assert store.compact("s", segment_size=100) == []  # idempotent: 201-250 is not a full run
    counting.reset()
    assert [e.messages[0]["content"] for e in store.replay("s")] == [f"m{i}" for i in range(250)]
    # manifest, two segments (trusted where the LIST of the loose events 1-200, sent alongside
    # them, gives each of their events' MD5 as its ETag), the loose tail
    assert counting.counts["GET"] == 1 + 2 + 50
    assert len([k for k in store.backend.list("root/sessions/s/") if "/segments/" not in k.key]) == 251
    assert store.verify("s").events == 250
    counting.reset()
    assert store.open("s").head == 250
    assert counting.counts == {"GET": 2, "LIST": 2}  # the newest segment is the floor: no galloping


def test_a_writer_with_auto_compaction_packs_its_own_runs() -> None:
    memory_store = Store(MemoryStore(), root="root", auto_compact=10)
    writer = memory_store.open("s", create=True)
    for i in range(25):
        writer.append(msg(f"m{i}"))
    assert memory_store.info("s").segments == 2
    assert [e.seq for e in memory_store.replay("s")] == list(range(1, 26))
    assert memory_store.verify("s").events == 25


def test_a_segment_that_does_not_match_its_events_is_passed_over_for_the_loose_events(memory_store: Store) -> None:
    writer = memory_store.open("s", create=True)
    for i in range(4):
        writer.append(msg(f"m{i}"))
    other = memory_store.open("t", create=True)
    for i in range(2):
        other.append(msg(f"t{i}"))
    memory_store.compact("t", segment_size=2)
    forged = memory_store.backend.get(memory_store.layout.segment_key("t", 1, 2)).data
    memory_store.backend.create(memory_store.layout.segment_key("s", 1, 2), forged)
    # a derived object never changes what a read returns: the true history, from the loose events
    assert [e.messages[0]["content"] for e in memory_store.replay("s")] == ["m0", "m1", "m2", "m3"]
    assert memory_store.verify("s").events == 4


def test_refresh_lists_from_the_writers_head_not_from_seq_one(counting_store: tuple[Store, CountingStore]) -> None:
    store, counting = counting_store
    writer = store.open("s", create=True)
    for i in range(3000):
        writer.append(msg(f"m{i}"))
    other = store.open("s")
    other.append(msg("theirs"))
    counting.reset()
    assert writer.refresh() == 3001
    assert counting.counts == {"GET": 2, "LIST": 2}  # manifest, non-event objects, from the head, the new head


def test_a_lost_response_on_create_or_fork_is_our_own_success() -> None:
    backend = MemoryStore()
    store = Store(backend, root="root")
    real_create = backend.create

    def create_twice(key: str, data: bytes, **kwargs: object) -> str:
        real_create(key, data, **kwargs)  # type: ignore[arg-type]
        return real_create(key, data, **kwargs)  # type: ignore[arg-type]  # the retry meets our own object

    backend.create = create_twice  # type: ignore[method-assign]
    writer = store.create("s")
    writer.append(msg("a"))
    fork = store.fork("s", "f")
    store.delete("f")
    backend.create = real_create  # type: ignore[method-assign]
    assert fork.head == 1
    with pytest.raises(SessionNotFoundError, match="was deleted"):
        store.open("f")  # the tombstone and the fence each met their own bytes: both landed once
    assert [name for name in (o.key.rsplit("/", 1)[1] for o in store.backend.list("root/sessions/f/"))] == [
        "00000000000000000002",
        "manifest",
        "tombstone",
    ]
    assert [e.messages[0]["content"] for e in store.replay("s")] == ["a"]


def test_an_event_planted_with_our_write_id_is_a_conflict_never_our_append() -> None:
    # a stranger who learned the write id (from a local store's temporary file, say) creates the
    # slot first with a forged event carrying it, in its metadata and its envelope
    backend = MemoryStore()
    store = Store(backend, root="root")
    writer = store.create("s")
    writer.append(msg("a"))
    real_create = backend.create

    def plant_first(key: str, data: bytes, **kwargs: Any) -> str:
        if key.endswith(format_seq(2)):
            forged = msgspec.json.decode(data)
            forged["body"]["messages"][0]["content"] = "forged"
            real_create(key, msgspec.json.encode(forged), **kwargs)
        return real_create(key, data, **kwargs)

    backend.create = plant_first  # type: ignore[method-assign]
    with pytest.raises(WriteConflictError):
        writer.append(msg("b"))
    assert writer.head == 1


def test_our_landed_append_re_sealed_by_a_rekey_before_the_retry_answers_is_ours() -> None:
    backend = MemoryStore()
    keys = {"k1": bytes(range(32)), "k2": bytes(range(1, 33))}
    store = Store(backend, root="root", keyring=Keyring(keys, "k1"))
    writer = store.create("s")
    writer.append(msg("a"))
    real_create = backend.create

    def land_then_rekey(key: str, data: bytes, **kwargs: Any) -> str:
        etag = real_create(key, data, **kwargs)
        if key.endswith(format_seq(2)):
            backend.create = real_create  # type: ignore[method-assign]
            Store(backend, root="root", keyring=Keyring(keys, "k2")).rekey("s")  # re-seals seq 2 too, under k2
            raise ObjectExists(key)  # the response was lost; the retry met the re-sealed object
        return etag

    backend.create = land_then_rekey  # type: ignore[method-assign]
    assert writer.append(msg("b")) == 2
    stored = backend.get("root/sessions/s/" + format_seq(2)).data
    assert b'"kid":"k2"' in stored  # what the writer took is the re-sealed event, as its head hash says
    assert [e.messages[0]["content"] for e in store.replay("s")] == ["a", "b"]
    assert store.verify("s").receipt.seq == 2


def test_lone_surrogates_and_unhashable_roles_are_invalid_input(memory_store: Store) -> None:
    writer = memory_store.open("s", create=True)
    for bad in ({"role": "user", "content": "\ud800"}, {"role": [], "content": "x"}):
        with pytest.raises(InvalidInputError):
            writer.append(bad)
    assert writer.head == 0
