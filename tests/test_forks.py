"""Forks as manifests: O(1), fork-at-seq, ancestry, encryption, races, retention."""

from __future__ import annotations

import threading

import msgspec
import pytest

from evstore import (
    IntegrityError,
    InvalidInputError,
    Keyring,
    MemoryStore,
    SessionExistsError,
    SessionNotFoundError,
    Store,
)
from evstore._codec import Manifest, encode_json, encode_manifest, fence_of
from evstore._forks import _record_late_forks
from evstore._read import decode_raw, read_manifest

from .helpers import CountingStore, msg
from .test_resume import DelayedStore


def manifest_of(store: Store, sid: str) -> Manifest:
    found = read_manifest(store.shared, sid)
    assert found is not None
    return found[0]


def contents(store: Store, sid: str) -> list[str]:
    return [m["content"] for e in store.replay(sid) for m in e.messages]


def filled(store: Store, sid: str, n: int, prefix: str = "m") -> None:
    writer = store.open(sid, create=True)
    for i in range(n):
        writer.append(msg(f"{prefix}{i}"))


def test_a_fork_shares_the_parent_prefix_and_leaves_the_parent_untouched(store: Store) -> None:
    filled(store, "p", 5)
    before = {o.key: store.backend.get(o.key).data for o in store.backend.list("root/sessions/p/")}
    fork = store.fork("p", "f", at=3)
    assert fork.head == 3
    assert fork.append(msg("own")) == 4
    assert contents(store, "f") == ["m0", "m1", "m2", "own"]
    assert [e.session_id for e in store.replay("f")] == ["p", "p", "p", "f"]
    assert contents(store, "p") == ["m0", "m1", "m2", "m3", "m4"]
    after = {o.key: store.backend.get(o.key).data for o in store.backend.list("root/sessions/p/") if "/forks/" not in o.key}
    assert after == before
    assert store.verify("f").events == 4


def test_the_forks_first_own_event_chains_to_the_parents_event(memory_store: Store) -> None:
    filled(memory_store, "p", 4)
    parent_hash = [e.hash for e in memory_store.replay("p")][1]
    memory_store.fork("p", "f", at=2).append(msg("x"))
    (own,) = memory_store.replay("f", start=3)
    stored = memory_store.backend.get(memory_store.layout.event_key("f", 3)).data
    envelope = decode_raw(manifest_of(memory_store, "f"), 3, stored).envelope
    assert envelope.prev == parent_hash and own.seq == 3
    info = memory_store.info("f")
    assert (info.parent.sid, info.parent.seq, info.parent.hash) == ("p", 2, parent_hash)  # type: ignore[union-attr]
    assert memory_store.info("p").forks == ["f"]


def test_fork_defaults_to_the_parents_head(memory_store: Store) -> None:
    filled(memory_store, "p", 3)
    assert memory_store.fork("p", "f").head == 3
    assert memory_store.info("f").head == 3


def test_fork_at_a_seq_beyond_the_head_is_refused(memory_store: Store) -> None:
    filled(memory_store, "p", 3)
    with pytest.raises(InvalidInputError, match="no event at seq 9"):
        memory_store.fork("p", "f", at=9)
    with pytest.raises(InvalidInputError):
        memory_store.fork("p", "p")
    with pytest.raises(SessionNotFoundError):
        memory_store.fork("missing", "f")


def test_an_ancestry_of_depth_ten_replays_in_order(memory_store: Store) -> None:
    filled(memory_store, "s0", 2, "s0-")
    expected = ["s0-0", "s0-1"]
    for depth in range(1, 11):
        fork = memory_store.fork(f"s{depth - 1}", f"s{depth}")
        fork.append(msg(f"s{depth}"))
        expected.append(f"s{depth}")
    assert contents(memory_store, "s10") == expected
    assert memory_store.verify("s10").events == 12
    assert memory_store.context("s10")[-1]["content"] == "s10"


def test_a_fork_of_a_fork_at_an_inherited_seq(memory_store: Store) -> None:
    filled(memory_store, "a", 5)
    memory_store.fork("a", "b", at=4).append(msg("b5"))
    memory_store.fork("b", "c", at=2).append(msg("c3"))
    assert contents(memory_store, "c") == ["m0", "m1", "c3"]
    assert memory_store.verify("c").events == 3


def test_forks_of_encrypted_sessions_get_their_own_key_and_read_inherited_events_with_the_ancestors() -> None:
    ring = Keyring({"k1": b"\1" * 32, "k2": b"\2" * 32}, "k1")
    backend = MemoryStore()
    store = Store(backend, root="root", keyring=ring)
    filled(store, "p", 2)
    rotated = Store(backend, root="root", keyring=Keyring(dict(ring.keys), "k2"))
    rotated.fork("p", "f").append(msg("under k2"))
    parent_salt = manifest_of(store, "p").salt
    fork_manifest = manifest_of(store, "f")
    assert fork_manifest.kid == "k2" and fork_manifest.salt != parent_salt
    assert [e.key_id for e in rotated.replay("f")] == ["k1", "k1", "k2"]
    assert contents(rotated, "f") == ["m0", "m1", "under k2"]
    only_k2 = Store(backend, root="root", keyring=Keyring({"k2": b"\2" * 32}, "k2"))
    with pytest.raises(Exception, match="key id 'k1'"):
        contents(only_k2, "f")


def test_forks_racing_for_the_same_name_have_exactly_one_winner(store: Store) -> None:
    filled(store, "p", 3)
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def race(i: int) -> None:
        barrier.wait()
        try:
            store.fork("p", "f", at=1 + i % 3)
            outcomes.append("won")
        except SessionExistsError:
            outcomes.append("lost")

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(outcomes) == ["lost"] * 7 + ["won"]
    assert store.info("p").forks == ["f"]
    assert store.verify("f").events == store.info("f").head


@pytest.mark.parametrize("length", [10, 1000, 10_000])
def test_fork_costs_the_same_requests_whatever_the_parents_length(length: int) -> None:
    counting = CountingStore(MemoryStore())
    store = Store(counting, root="root")
    writer = store.open("p", create=True)
    for low in range(0, length, 100):
        writer.append([msg(str(i)) for i in range(low, min(length, low + 100))])
    head = writer.head
    counting.reset()
    store.fork("p", "f", at=head)
    assert counting.counts == {"GET": 2, "HEAD": 1, "PUT": 2, "LIST": 2}
    parent_events = [k for kind, k in counting.keys if k.startswith("root/sessions/p/0")]
    assert parent_events == [store.layout.event_key("p", head)]  # only the fork point's hash is read
    assert not any(kind == "PUT" and k.startswith("root/sessions/p/") and "/forks/" not in k for kind, k in counting.keys)
    counting.reset()
    writer.fork("g")
    assert counting.counts == {"HEAD": 1, "PUT": 2, "LIST": 1}  # from a writer: no read of the parent at all


def test_a_fork_of_an_ephemeral_session_copies_what_it_needs(memory_store: Store) -> None:
    writer = memory_store.open("auto", create=True, retention="ephemeral")
    for i in range(3):
        writer.append(msg(f"m{i}"))
    fork = memory_store.fork("auto", "kept", at=2, retention="permanent")
    fork.append(msg("own"))
    info = memory_store.info("kept")
    assert info.parent is not None and info.parent.copied and info.retention == "permanent"
    memory_store.purge("auto")  # the lifecycle rules took the parent
    assert contents(memory_store, "kept") == ["m0", "m1", "own"]
    assert {e.session_id for e in memory_store.replay("kept")} == {"kept"}
    assert memory_store.backend.get_tags(memory_store.layout.event_key("kept", 1)) == {"evstore-retention": "permanent"}


def test_deleting_a_parent_keeps_its_forks_replayable(store: Store) -> None:
    filled(store, "p", 3)
    store.fork("p", "f", at=2).append(msg("own"))
    result = store.delete("p")
    assert result.kept_for_forks == ["f"] and result.fenced_at == 4
    with pytest.raises(SessionNotFoundError):
        list(store.replay("p"))
    assert contents(store, "f") == ["m0", "m1", "own"]
    with pytest.raises(SessionExistsError):
        store.create("p")  # the id is held until gc reclaims the parent


def test_a_fork_cannot_be_made_from_a_deleted_session(memory_store: Store) -> None:
    filled(memory_store, "p", 2)
    memory_store.delete("p")
    with pytest.raises(SessionNotFoundError):
        memory_store.fork("p", "f")


def test_a_fork_made_while_its_parent_is_deleted_backs_out() -> None:
    backend = MemoryStore()
    store = Store(backend, root="root")
    filled(store, "p", 2)
    real_create = backend.create

    def create_then_parent_deleted(key: str, data: bytes, **kwargs: object) -> str:
        etag = real_create(key, data, **kwargs)  # type: ignore[arg-type]
        if key == store.layout.manifest_key("f"):
            real_create(store.layout.tombstone_key("p"), b'{"sid":"p","uid":"x","deleted":"now"}')
        return etag

    backend.create = create_then_parent_deleted  # type: ignore[method-assign]
    with pytest.raises(SessionNotFoundError):
        store.fork("p", "f")
    backend.create = real_create  # type: ignore[method-assign]
    assert [o.key for o in backend.list("root/sessions/f/")] == []


def test_a_fork_whose_parent_was_replaced_is_an_integrity_error(memory_store: Store) -> None:
    filled(memory_store, "p", 2)
    memory_store.fork("p", "f")
    memory_store.purge("p")
    filled(memory_store, "p", 2, "other")
    with pytest.raises(IntegrityError, match="not the session this fork was made from"):
        list(memory_store.replay("f"))


def test_a_fork_whose_inherited_tail_is_missing_is_an_integrity_error(memory_store: Store) -> None:
    filled(memory_store, "p", 5)
    memory_store.fork("p", "f", at=4).append(msg("own"))
    memory_store.backend.delete_many([memory_store.layout.event_key("p", 4), memory_store.layout.event_key("p", 5)])
    with pytest.raises(IntegrityError, match="up to the fork seq are missing"):
        list(memory_store.replay("f"))


def test_delete_records_the_forks_alive_in_the_tombstone_and_they_still_read(store: Store) -> None:
    filled(store, "p", 3)
    store.fork("p", "f", at=2).append(msg("own"))
    result = store.delete("p")
    assert result.kept_for_forks == ["f"]
    tombstone = fence_of(store.backend.get(store.layout.tombstone_key("p")).data)
    assert tombstone is not None and tombstone.forks == [f"f@{manifest_of(store, 'f').uid}"]
    assert contents(store, "f") == ["m0", "m1", "own"]


def test_a_fork_made_while_the_tombstone_was_written_is_added_to_it() -> None:
    """The race ``_record_late_forks`` closes: a fork whose marker the delete's first listing
    missed (here: a tombstone that records no fork, as that delete wrote it) is found by the
    listing after the tombstone and added to it by a conditional replace; then it reads its
    parent's events."""
    store = Store(MemoryStore(), root="r")
    filled(store, "p", 3)
    store.fork("p", "late", at=2)
    store.delete("p")
    key = store.layout.tombstone_key("p")
    stored = store.backend.get(key)
    missed = fence_of(stored.data)
    assert missed is not None
    store.backend.replace(key, encode_json(msgspec.structs.replace(missed, forks=[])), etag=stored.etag)
    with pytest.raises(IntegrityError, match="not one its delete kept"):
        contents(store, "late")
    uid = manifest_of(store, "late").uid
    assert _record_late_forks(store.shared, "p", missed.uid, key, {}) == [f"late@{uid}"]
    recorded = fence_of(store.backend.get(key).data)
    assert recorded is not None and recorded.forks == [f"late@{uid}"]
    assert contents(store, "late") == ["m0", "m1"]


def forks_deep(store: Store, depth: int, own: int = 5) -> list[str]:
    """s0 with ``own`` events, then s1 forked from s0's head, s2 from s1's, ...: each with ``own`` events."""
    filled(store, "s0", own, "s0-")
    for d in range(1, depth + 1):
        writer = store.fork(f"s{d - 1}", f"s{d}")
        for i in range(own):
            writer.append(msg(f"s{d}-{i}"))
    return [f"s{d}-{i}" for d in range(depth + 1) for i in range(own)]


def test_a_fork_records_its_ancestry_above_its_parent_nearest_first(memory_store: Store) -> None:
    forks_deep(memory_store, 3)
    manifests = [manifest_of(memory_store, f"s{d}") for d in range(4)]
    assert manifests[0].parent is None and manifests[1].ancestry == () and manifests[2].ancestry == (manifests[1].parent,)
    assert manifests[3].ancestry == (manifests[2].parent, manifests[1].parent)


def test_the_ancestors_of_a_deep_fork_are_read_side_by_side() -> None:
    """With its ancestry recorded, a fork 8 deep is read in 2 rounds: its manifest and listings;
    then every ancestor's manifest, listing and short range of events and the fork's own events
    its first listing named, all sent together. Walking parent after parent it took 3 rounds
    per ancestor (about 26)."""
    memory = MemoryStore()
    expected = forks_deep(Store(memory, root="root"), 8)
    delayed = DelayedStore(memory, 0.05)
    counting = CountingStore(delayed)
    reader = Store(counting, root="root")
    warm(reader, "s8", delayed, counting)
    assert [m["content"] for e in reader.replay("s8") for m in e.messages] == expected
    assert delayed.chain() <= 3  # 2, and a busy machine may run some a round late
    # each ancestor: manifest GET, one LIST, its 5 event GETs; the fork: GET, 2 LISTs, 5 GETs
    assert counting.counts == {"GET": 8 * 6 + 6, "LIST": 8 + 2}


def warm(store: Store, session_id: str, *backends: DelayedStore | CountingStore) -> None:
    """Read ``session_id`` once, so that the store's pools have started their threads (on a busy
    machine, starting 100 threads can take longer than a round trip of the delaying backend),
    and forget its requests: what is counted next is how the requests wait on each other."""
    assert list(store.replay(session_id))
    for backend in backends:
        backend.reset()


def chain_of_forks(store: Store, depth: int, root: int = 40) -> list[str]:
    """As benchmarks/scale.py's section 3 builds it: s0 with ``root`` events (so with a segment
    and a loose tail, by default compaction), then s1 forked one event before s0's head, s2 one
    before s1's, ...: each with 3 events of its own. The contents of s<depth>, in order."""
    filled(store, "s0", root, "s0-")
    contents = [f"s0-{i}" for i in range(root)]
    for d in range(1, depth + 1):
        writer = store.fork(f"s{d - 1}", f"s{d}", at=len(contents) - 1)
        contents = contents[:-1]
        for i in range(3):
            writer.append(msg(f"s{d}-{i}"))
            contents.append(f"s{d}-{i}")
    return contents


@pytest.mark.parametrize("depth", [5, 40])
def test_a_fork_reads_its_ancestors_in_3_round_trips_at_any_depth(depth: int) -> None:
    """The deepest fork of ``chain_of_forks``: round 1, its manifest and its two listings; round
    2, every ancestor's manifest and listing (the root's young segments' too) and the GETs of
    each inherited range (2 events an ancestor) and of the fork's own 3 events, all at once on
    the context's wide pool; round 3, the root's segment, the LIST of the ETags that vouch for
    it and the GETs of its loose tail to the fork seq (by their seqs: no LIST). Walking parent
    after parent it took 3 rounds per ancestor; with the ancestors' requests through the pool
    of 64, 12 rounds at 100 deep."""
    memory = MemoryStore()
    expected = chain_of_forks(Store(memory, root="root"), depth)
    delayed = DelayedStore(memory, 0.1)
    counting = CountingStore(delayed)
    reader = Store(counting, root="root")
    warm(reader, f"s{depth}", delayed, counting)
    assert [m["content"] for e in reader.replay(f"s{depth}") for m in e.messages] == expected
    assert delayed.chain() <= 4  # 3, and a busy machine may run some a round late
    # the fork: GET manifest + 3 events, 2 LISTs; each ancestor but the root: GET manifest + 2
    # events, 1 LIST; the root: GET manifest, its segment (1-32) and its tail 33-39, 3 LISTs
    assert counting.counts == {"GET": 4 + 3 * (depth - 1) + 9, "LIST": 2 + (depth - 1) + 3}
    assert not [key for kind, key in counting.keys if kind == "LIST" and key.startswith("root/sessions/s0/0")][1:]


def test_an_ancestors_tail_read_by_its_seqs_still_finds_a_hole() -> None:
    """An ancestor's loose tail to the fork seq is fetched by its seqs, without a LIST: an event
    that is gone from it is a hole in the log, never events that end early."""
    store = Store(MemoryStore(), root="root")
    chain_of_forks(store, 2)
    store.backend.delete_many([store.layout.event_key("s0", 35)])
    with pytest.raises(IntegrityError, match="missing"):
        list(store.replay("s2"))


def test_a_forks_own_events_sent_ahead_keep_the_hole_and_planted_rules(memory_store: Store) -> None:
    """A fork's own events are fetched with its ancestors' when its first listing names them
    all, in a row; a listed event gone by the time of its GET is a hole, and a planted name
    past a gap is read as any session's tail is (a hole): the fork's events never just end."""
    filled(memory_store, "p", 3)
    writer = memory_store.fork("p", "f")
    for i in range(4):
        writer.append(msg(f"own{i}"))
    planted = memory_store.layout.event_key("f", 9)
    memory_store.backend.create(planted, memory_store.backend.get(memory_store.layout.event_key("f", 7)).data)
    with pytest.raises(IntegrityError, match="hole"):
        list(memory_store.replay("f"))
    memory_store.backend.delete_many([planted])
    assert contents(memory_store, "f") == ["m0", "m1", "m2", "own0", "own1", "own2", "own3"]

    real_get = memory_store.backend.get
    gone = memory_store.layout.event_key("f", 5)

    def get_after_the_listing(key: str, **kwargs: object) -> object:
        if key == gone:  # deleted after the listing named it: lifecycle expiry, or an operator
            from evstore._backends import ObjectMissing

            raise ObjectMissing(key)
        return real_get(key, **kwargs)  # type: ignore[arg-type]

    memory_store.backend.get = get_after_the_listing  # type: ignore[method-assign,assignment]
    with pytest.raises(IntegrityError, match="hole"):
        list(memory_store.replay("f"))


def test_a_false_ancestry_costs_requests_never_the_history(memory_store: Store) -> None:
    """The ancestry is a hint: where it names other sessions, incarnations or fork seqs than the
    manifests the walk meets, what was sent for it is dropped and the walk reads the true ones."""
    expected = forks_deep(memory_store, 4)
    key = memory_store.layout.manifest_key("s4")
    stored = memory_store.backend.get(key)
    true = manifest_of(memory_store, "s4")
    bogus = (
        msgspec.structs.replace(true.ancestry[0], seq=true.ancestry[0].seq - 2),  # another fork seq
        msgspec.structs.replace(true.ancestry[1], uid="0" * 32),  # another incarnation
        msgspec.structs.replace(true.ancestry[2], sid="s1"),  # another session
    )
    memory_store.backend.replace(key, encode_manifest(msgspec.structs.replace(true, ancestry=bogus)), etag=stored.etag)
    assert contents(memory_store, "s4") == expected
    assert memory_store.verify("s4").events == len(expected)
