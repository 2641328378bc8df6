"""Rekey against forks of forks and a damaged bucket.

A rekey of an ancestor is a legitimate operator action: every fork below it, at any depth, keeps
reading, while an ancestor event that really changed is still refused. A rekey that fails leaves
the session as it was; one interrupted between its writes leaves a state that running it again
completes."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from evstore import Event, IntegrityError, KeyRequiredError, Keyring, LocalStore, MemoryStore, ObjectStore, Store
from evstore._backends import Forwarding
from evstore._codec import (
    FORMAT_VERSION,
    Envelope,
    MessagesBody,
    RekeyRecord,
    b64encode,
    encode_json,
    format_ts,
    header_aad,
    sha256_hex,
)
from evstore._crypto import seal
from evstore._read import read_manifest, session_key

from .helpers import msg

A, B = os.urandom(32), os.urandom(32)
ONLY_A = Keyring({"a": A}, "a")
A_THEN_B = Keyring({"a": A, "b": B}, "b")


@pytest.fixture(params=["memory", "local"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    return MemoryStore() if request.param == "memory" else LocalStore(tmp_path / "store")


@pytest.fixture(params=["migrate", "rotate"])
def stores(request: pytest.FixtureRequest, backend: ObjectStore) -> tuple[Store, Store]:
    """(the store that writes the sessions, the operator's store that rekeys them): plaintext
    sessions encrypted by rekey, or sessions under key "a" re-sealed under "b"."""
    writing = Store(backend, root="root", keyring=None if request.param == "migrate" else ONLY_A)
    return writing, Store(backend, root="root", keyring=A_THEN_B)


def contents(store: Store, session_id: str) -> list[str]:
    return [m["content"] for e in store.replay(session_id) for m in e.messages]


def objects(backend: ObjectStore) -> dict[str, bytes]:
    return {o.key: backend.get(o.key).data for o in backend.list("")}


def overwrite(backend: ObjectStore, key: str, data: bytes) -> None:
    """What anyone with bucket-wide write (or the operator role) can do to an object."""
    backend.replace(key, data, etag=backend.head(key).etag)


def event_key(session_id: str, seq: int) -> str:
    return f"root/sessions/{session_id}/{seq:020d}"


def forged_event(store: Store, session_id: str, seq: int, prev: str, text: str) -> bytes:
    """A well-formed event of the session at ``seq`` naming ``prev``, sealed under the key its
    events are under now (the operator's keyring holds it), or plaintext when they are plaintext."""
    found = read_manifest(store.shared, session_id)
    assert found is not None
    manifest = found[0]
    kid = next(store.replay(session_id, start=seq, end=seq)).key_id
    env = Envelope(FORMAT_VERSION, session_id, manifest.uid, seq, format_ts(store.clock()), "f" * 32, prev, kid)
    body = MessagesBody([msg(text)])
    if kid is None:
        return encode_json(msgspec.structs.replace(env, body=body))
    key = session_key(store.shared, manifest, kid)
    return encode_json(msgspec.structs.replace(env, sealed=b64encode(seal(key, encode_json(body), header_aad(env)))))


# ---- forks of forks across an ancestor's rekey --------------------------------------------------

SHAPES: dict[str, list[tuple[str, str, str, int | None]]] = {
    # d forks c inside c's events and adds its own; e forks d inside what d inherits; f forks e
    "inherited": [
        ("fork", "c", "d", 4),
        ("append", "d", "", None),
        ("fork", "d", "e", 2),
        ("append", "e", "", None),
        ("fork", "e", "f", 1),
        ("append", "f", "", None),
    ],
    # d forks c at 3 and adds nothing; e forks d at d's head (c's event 3); f forks e at its head
    "at the head": [("fork", "c", "d", 3), ("fork", "d", "e", None), ("fork", "e", "f", None), ("append", "f", "", None)],
}


def build(store: Store, shape: str) -> None:
    writer = store.open("c", create=True)
    for i in range(1, 6):
        writer.append(msg(f"c{i}"))
    for action, source, target, at in SHAPES[shape]:
        if action == "fork":
            store.fork(source, target, at=at)
        else:
            store.open(source).append(msg(f"own of {source}"))


@pytest.mark.slow
@pytest.mark.parametrize("shape", list(SHAPES))
def test_forks_of_forks_read_after_each_ancestor_is_rekeyed(stores: tuple[Store, Store], shape: str) -> None:
    writing, operator = stores
    build(writing, shape)
    sessions = ["c", "d", "e", "f"]
    before = {s: contents(writing, s) for s in sessions}
    receipts = {s: writing.verify(s).receipt for s in sessions}
    for rekeyed in sessions:  # the root first, then each fork below it
        operator.rekey(rekeyed)
        for s in sessions:
            assert contents(operator, s) == before[s], (rekeyed, s)
            result = operator.verify(s, expect=receipts[s])
            assert result.events == len(before[s])
            assert [m["content"] for m in operator.context(s)] == before[s]
    assert {e.key_id for s in sessions for e in operator.replay(s)} == {"b"}
    operator.open("f").append(msg("after"))  # a writer still continues the deepest fork
    assert contents(operator, "f") == [*before["f"], "after"]
    operator.fork("e", "g", at=2)  # and a fork made after the rekeys reads too
    assert contents(operator, "g") == before["e"][:2]


def test_a_changed_ancestor_event_is_still_refused_by_a_fork_of_a_fork(stores: tuple[Store, Store]) -> None:
    """A changed event of c, read through d by e, is refused even with a rekey record planted in
    d's prefix that maps e's recorded hash to it: only c's own records speak for c's events."""
    writing, operator = stores
    build(writing, "inherited")
    operator.rekey("c")
    backend = operator.backend
    e = read_manifest(operator.shared, "e")
    d = read_manifest(operator.shared, "d")
    assert e is not None and d is not None and e[0].parent is not None
    first = next(operator.replay("c", end=1))
    forged = forged_event(operator, "c", 2, first.hash, "forged")
    overwrite(backend, event_key("c", 2), forged)
    record = RekeyRecord("d", d[0].uid, format_ts(operator.clock()), "b", 2, [e[0].parent.hash], [sha256_hex(forged)])
    backend.create("root/sessions/d/rekeys/2026-01-01T00:00:00.000000Z-x", encode_json(record))
    operator.shared.forget_records("d")
    with pytest.raises(IntegrityError, match="at seq 2 of session 'e': the parent's event differs from the one"):
        list(operator.replay("e"))
    with pytest.raises(IntegrityError, match="at seq 2 of session 'e'"):
        operator.verify("e")
    for reader in ("c", "d"):  # c's event 3 names the event that was there
        with pytest.raises(IntegrityError, match="at seq 3 of session 'c': prev hash does not match"):
            operator.verify(reader)


# ---- a rekey that fails changes nothing -----------------------------------------------------------


def truncate(store: Store, data: bytes) -> bytes:
    return data[:100]


def break_the_chain(store: Store, data: bytes) -> bytes:
    """A well-formed event 3 naming the manifest instead of event 2 (history rewritten)."""
    found = read_manifest(store.shared, "s")
    assert found is not None
    return forged_event(store, "s", 3, found[1], "rewritten")


def alter_the_seal(store: Store, data: bytes) -> bytes:
    env = msgspec.json.decode(data, type=Envelope)
    if env.sealed is None:  # plaintext: change the message, keep the chain
        return encode_json(msgspec.structs.replace(env, body=MessagesBody([msg("altered")])))
    sealed = env.sealed
    return encode_json(msgspec.structs.replace(env, sealed=("B" if sealed[0] == "A" else "A") + sealed[1:]))


DAMAGE: dict[str, Callable[[Store, bytes], bytes]] = {
    "truncated": truncate,
    "chain broken": break_the_chain,
    "altered": alter_the_seal,
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_rekey_that_fails_on_a_damaged_event_changes_nothing(stores: tuple[Store, Store], damage: str) -> None:
    writing, operator = stores
    writer = writing.open("s", create=True)
    for i in range(1, 6):
        writer.append(msg(f"m{i}"))
    writing.compact("s", segment_size=5)
    backend = operator.backend
    seq = 5 if damage == "truncated" else 3
    original = backend.get(event_key("s", seq)).data
    overwrite(backend, event_key("s", seq), DAMAGE[damage](operator, original))
    readable = [e.messages for e in _until_failure(operator, "s")]
    altered_plaintext = damage == "altered" and writing.keyring.active is None
    assert len(readable) == (seq if altered_plaintext else seq - 1)  # those before the break, then exit 5
    snapshot = objects(backend)
    info = operator.info("s")
    if altered_plaintext:  # a changed plaintext message breaks the chain at the next seq
        with pytest.raises(IntegrityError, match=f"at seq {seq + 1} "):
            operator.rekey("s")
    else:
        with pytest.raises(IntegrityError, match=f"at seq {seq} "):
            operator.rekey("s")
    assert objects(backend) == snapshot  # not one write: no salt object, the segment kept, no record
    assert operator.info("s") == info
    assert [e.messages for e in _until_failure(operator, "s")] == readable
    assert [e.messages for e in _until_failure(writing, "s")] == readable
    # once the damage is repaired (a backup of the event), rekey completes
    overwrite(backend, event_key("s", seq), original)
    assert operator.rekey("s").resealed == 5
    assert contents(operator, "s") == [f"m{i}" for i in range(1, 6)]
    assert operator.verify("s").sealed_checked == 5


def _until_failure(store: Store, session_id: str) -> list[Event]:
    """The events a replay yields before it fails (exit 5), or all of them."""
    events: list[Event] = []
    try:
        for event in store.replay(session_id):
            events.append(event)
    except IntegrityError:
        pass
    return events


def test_a_rekey_without_the_old_key_changes_nothing(backend: ObjectStore) -> None:
    writing = Store(backend, root="root", keyring=ONLY_A)
    writer = writing.open("s", create=True)
    for i in range(4):
        writer.append(msg(f"m{i}"))
    writing.compact("s", segment_size=4)
    snapshot = objects(backend)
    with pytest.raises(KeyRequiredError):
        Store(backend, root="root", keyring=Keyring({"b": B}, "b")).rekey("s")
    assert objects(backend) == snapshot  # the segment too


# ---- a rekey interrupted between its writes -------------------------------------------------------


class Crash(Exception):
    """The process died: the write it was sending never landed."""


class CrashingAt(Forwarding):
    """Lets the first ``writes`` writes (PUT, DELETE) through, then fails every later one."""

    def __init__(self, inner: ObjectStore, writes: int) -> None:
        super().__init__(inner)
        self.writes = writes

    def _request(self, kind: str, key: str, times: int = 1) -> None:
        if kind in ("PUT", "DELETE"):
            if self.writes <= 0:
                raise Crash(key)
            self.writes -= 1


@pytest.mark.parametrize("writes", range(9))
def test_an_interrupted_rekey_of_an_ancestor_is_completed_by_running_it_again(stores: tuple[Store, Store], writes: int) -> None:
    """Killed after any of its writes (salt object, segment delete, record, each event): re-sealing
    under another key, every session reads throughout, forks of forks included; encrypting a
    plaintext session, its events read again once rekey runs again. Either way the rerun completes."""
    writing, operator = stores
    build(writing, "inherited")
    writing.compact("c", segment_size=5)
    sessions = ["c", "d", "e", "f"]
    before = {s: contents(writing, s) for s in sessions}
    crashing = Store(CrashingAt(operator.backend, writes), root="root", keyring=A_THEN_B)
    try:
        crashing.rekey("c")
        crashed = False
    except Crash:
        crashed = True
    migrating = writing.keyring.active is None
    assert crashed == (writes < 7 + migrating)  # the salt object (migrating), segment delete, record, 5 events
    if not migrating:  # re-sealing: nothing is unreadable meanwhile
        for s in sessions:
            assert contents(operator, s) == before[s], s
    operator.rekey("c")
    for s in sessions:
        assert contents(operator, s) == before[s], s
        assert operator.verify(s).events == len(before[s])
    assert {e.key_id for e in operator.replay("c")} == {"b"}


@pytest.mark.parametrize("empty", ["fork", "new session"])
def test_a_session_rekeyed_before_its_first_event_takes_appends_under_the_new_key(
    stores: tuple[Store, Store], empty: str
) -> None:
    """A fork with no event of its own (or a session created empty), rekeyed: nothing is
    re-sealed, and a record declares the key its first event is sealed under, so the writer's
    first event is sealed under it and reads accept it (the key id is not one the session never
    used). A store without the key is told so in one line, and appends nothing."""
    writing, operator = stores
    build(writing, "at the head")  # c, and d a fork of c at 3 with no event of its own
    if empty == "new session":
        writing.create("d2")
    sid = "d" if empty == "fork" else "d2"
    before = contents(operator, sid)
    result = operator.rekey(sid)
    assert (result.resealed, result.already_current, len(result.records)) == (0, 0, 1)
    assert operator.rekey(sid).records == []  # again: the record names the key already
    writer, context = operator.resume(sid)  # the writer of one pass, as the adapters take it
    assert [m["content"] for m in context] == before
    writer.append(msg("first own"))
    operator.open(sid).append(msg("second own"))
    assert contents(operator, sid) == [*before, "first own", "second own"]
    own = [e for e in operator.replay(sid) if e.seq > len(before)]
    assert [e.key_id for e in own] == ["b", "b"]
    assert operator.verify(sid).events == len(before) + 2
    keyless = Store(operator.backend, root="root")
    with pytest.raises(KeyRequiredError, match="key id 'b'"):
        keyless.open(sid).append(msg("no key"))
    assert contents(operator, sid) == [*before, "first own", "second own"]
    assert operator.rekey(sid).records == []  # with its events: nothing to re-seal


def test_a_planted_record_cannot_make_a_first_event_sealed_under_a_key_the_keyring_lacks(backend: ObjectStore) -> None:
    store = Store(backend, root="root", keyring=ONLY_A)
    store.open("c", create=True).append(msg("one"))
    store.fork("c", "d")
    d = read_manifest(store.shared, "d")
    assert d is not None
    record = RekeyRecord("d", d[0].uid, "2999-01-01T00:00:00.000000Z", "planted", 2, [], [])
    backend.create("root/sessions/d/rekeys/2999-01-01T00:00:00.000000Z-x", encode_json(record))
    with pytest.raises(KeyRequiredError, match="key id 'planted'"):
        store.open("d").append(msg("two"))
    assert contents(store, "d") == ["one"]
