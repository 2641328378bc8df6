"""Integrity against a hostile or messy bucket: an attacker who may only *create* objects
(exactly what infra/iam/writer.json grants) never changes, hides or adds to what replay,
the context view, verify or export return. Each attack ends in the true history or a
clean error with its exit code — on the memory and local backends and on moto's server."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from click.testing import CliRunner
from evstore_cli import cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evstore import (
    IntegrityError,
    InvalidInputError,
    Keyring,
    LocalStore,
    MemoryStore,
    ObjectStore,
    SessionExpiredError,
    Store,
)
from evstore._backends import LifecycleRule
from evstore._codec import (
    FORMAT_VERSION,
    Envelope,
    ForkRef,
    Manifest,
    MessagesBody,
    RekeyRecord,
    b64encode,
    encode_json,
    encode_manifest,
    format_ts,
    header_aad,
    pack_segment,
    sha256_hex,
)
from evstore._crypto import seal
from evstore._ids import MAX_SEQ
from evstore._read import read_manifest, session_key

from .conftest import new_bucket
from .helpers import CountingStore, msg


class CreateOnly(CountingStore):
    """The writer role's rights: read, list, and create new objects; nothing is replaced or deleted."""

    def replace(self, key: str, data: bytes, *, etag: str, **_: Any) -> str:
        raise PermissionError("create-only")

    def delete_many(self, keys: Iterable[str]) -> int:
        if list(keys):
            raise PermissionError("create-only")
        return 0

    def put_lifecycle(self, rules: list[LifecycleRule]) -> None:
        raise PermissionError("create-only")

    def abort_upload(self, key: str, upload_id: str) -> None:
        raise PermissionError("create-only")


KEYRING = Keyring({"k1": os.urandom(32)}, "k1")


@pytest.fixture(params=["memory", "local", "moto_server"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "memory":
        return MemoryStore()
    if request.param == "local":
        return LocalStore(tmp_path / "store")
    return new_bucket(request.getfixturevalue("moto_endpoint"))


@pytest.fixture(params=["plaintext", "encrypted"])
def keyring(request: pytest.FixtureRequest) -> Keyring | None:
    return KEYRING if request.param == "encrypted" else None


class Scene:
    """A session of five messages, its auditor's receipt, and an attacker on the same bucket
    holding what a writer holds (the key too, for encrypted sessions)."""

    def __init__(self, backend: ObjectStore, keyring: Keyring | None) -> None:
        self.backend = backend
        self.store = Store(backend, root="root", keyring=keyring)
        self.attacker = Store(CreateOnly(backend), root="root", keyring=keyring)
        writer = self.store.open("s", create=True)
        for i in range(5):
            writer.append(msg(f"m{i}"))
        self.receipt = self.store.verify("s").receipt
        found = read_manifest(self.store.shared, "s")
        assert found is not None
        self.manifest, self.genesis = found

    def key(self, name: str) -> str:
        return f"root/sessions/s/{name}"

    def plant(self, name: str, data: bytes = b"") -> None:
        self.attacker.backend.create(self.key(name), data)

    def forged_events(self, texts: list[str], *, first: int = 1, prev: str | None = None) -> list[tuple[int, bytes]]:
        """Events chained from ``prev`` (the manifest hash), sealed under the session key when it has one."""
        events = []
        prev = prev or self.genesis
        for seq, text in enumerate(texts, first):
            body = MessagesBody([msg(text)])
            env = Envelope(
                FORMAT_VERSION, "s", self.manifest.uid, seq, format_ts(self.store.clock()), "f" * 32, prev, self.manifest.kid
            )
            if self.manifest.kid is None:
                env = msgspec.structs.replace(env, body=body)
            else:
                key = session_key(self.attacker.shared, self.manifest, self.manifest.kid)
                env = msgspec.structs.replace(env, sealed=b64encode(seal(key, encode_json(body), header_aad(env))))
            data = encode_json(env)
            events.append((seq, data))
            prev = sha256_hex(data)
        return events

    def contents(self) -> list[str]:
        return [m["content"] for e in self.store.replay("s") for m in e.messages]

    def truth(self) -> None:
        """What every read of the session must still say."""
        assert self.contents() == [f"m{i}" for i in range(5)]
        assert [m["content"] for m in self.store.context("s")] == [f"m{i}" for i in range(5)]
        result = self.store.verify("s", expect=self.receipt)
        assert result.receipt == self.receipt and result.events == 5 and not result.superseded_by_rekey
        assert self.store.info("s").head == 5


@pytest.fixture
def scene(backend: ObjectStore, keyring: Keyring | None) -> Scene:
    return Scene(backend, keyring)


# ---- 1. history rewritten by a segment and a rekey record ------------------------


def test_a_forged_segment_and_rekey_record_change_nothing(scene: Scene) -> None:
    forged = scene.forged_events([f"forged {i}" for i in range(5)])
    scene.plant("segments/00000000000000000001-00000000000000000005", pack_segment("s", scene.manifest.uid, forged))
    real = [e.hash for e in scene.store.replay("s")]
    record = RekeyRecord(
        "s", scene.manifest.uid, format_ts(scene.store.clock()), "k1", 1, real, [sha256_hex(d) for _, d in forged]
    )
    scene.plant("rekeys/2026-01-01T00:00:00.000000Z-x", encode_json(record))
    scene.truth()


def test_a_forged_segment_covering_part_of_the_log_changes_nothing(scene: Scene) -> None:
    forged = scene.forged_events(["forged 1", "forged 2", "forged 3"])
    scene.plant("segments/00000000000000000001-00000000000000000003", pack_segment("s", scene.manifest.uid, forged))
    scene.truth()


def test_a_forged_segment_with_a_planted_next_event_changes_nothing(scene: Scene) -> None:
    """Chaining a planted loose event to a forged segment does not make the segment true."""
    scene.store.compact("s", segment_size=5)  # a true segment exists too
    forged = scene.forged_events([f"forged {i}" for i in range(5)])
    scene.plant("segments/00000000000000000001-00000000000000000006", pack_segment("s", scene.manifest.uid, forged))
    scene.truth()


def test_a_forged_segment_before_a_true_one_changes_nothing(scene: Scene) -> None:
    """Segments read as a group are trusted only when their chain reaches the loose event at
    its end: a forged first segment does not continue the true one after it."""
    scene.store.compact("s", segment_size=2)  # true segments 1-2 and 3-4
    forged = scene.forged_events(["forged 1", "forged 2", "forged 3"])
    scene.plant("segments/00000000000000000001-00000000000000000003", pack_segment("s", scene.manifest.uid, forged))
    scene.truth()


@pytest.mark.slow
def test_forged_segments_that_continue_each_other_change_nothing(scene: Scene) -> None:
    forged = scene.forged_events([f"forged {i}" for i in range(5)])
    scene.plant("segments/00000000000000000001-00000000000000000003", pack_segment("s", scene.manifest.uid, forged[:3]))
    scene.plant("segments/00000000000000000004-00000000000000000005", pack_segment("s", scene.manifest.uid, forged[3:]))
    scene.truth()


# ---- 2. truncation by one junk object ------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", ["-", "00000000000000000001~", "0", "00000000000000000003.tmp", "~"])
def test_a_junk_name_among_the_events_hides_nothing(scene: Scene, name: str) -> None:
    scene.plant(name)
    scene.truth()
    assert scene.store.open("s").append(msg("m5")) == 6
    assert scene.contents()[-1] == "m5"


@pytest.mark.parametrize("name", ["-", "00000000000000000001~"])
def test_a_junk_name_hides_nothing_from_the_command(tmp_path: Path, name: str) -> None:
    url = (tmp_path / "store").as_uri()

    def run(*args: str) -> Any:
        return CliRunner().invoke(cli, ["--store", url, *args], env={"EVSTORE_KEY": None, "EVSTORE_KEYRING": None})

    for i in range(3):
        assert run("append", "s", f"m{i}").exit_code == 0
    receipt = run("verify", "s", "--receipt").output.strip()
    LocalStore(tmp_path / "store").create(f"sessions/s/{name}", b"")
    assert len(run("replay", "s", "--format", "jsonl").output.splitlines()) == 3
    assert len(run("replay", "s", "--view", "context", "--format", "jsonl").output.splitlines()) == 3
    assert len(run("export", "s", "--format", "jsonl").output.splitlines()) == 3
    checked = run("verify", "s", "--expect", receipt)
    assert checked.exit_code == 0 and "3 events" in checked.output


# ---- 3. acknowledged but invisible -----------------------------------------------------


def test_an_event_planted_at_the_highest_seq_refuses_the_next_append_and_is_a_hole(scene: Scene) -> None:
    ((seq, data),) = scene.forged_events(["far away"], first=MAX_SEQ, prev="0" * 64)
    scene.plant(f"{seq:020d}", data)
    writer = scene.store.open("s")
    assert writer.head == MAX_SEQ
    with pytest.raises(IntegrityError, match="no seq is left"):
        writer.append(msg("lost?"))
    assert [o.key for o in scene.backend.list("root/sessions/s/") if len(o.key.rsplit("/", 1)[1]) > 20] == []
    with pytest.raises(IntegrityError, match="missing"):
        scene.contents()


def test_a_segment_name_never_moves_the_head(scene: Scene) -> None:
    scene.plant(f"segments/00000000000000000010-{MAX_SEQ:020d}")
    scene.plant("segments/00000000000000000003-00000000000000000900")
    scene.truth()
    assert scene.store.open("s").append(msg("m5")) == 6


# ---- 4. plaintext in an encrypted session -------------------------------------------


def plant_plaintext_after_head(backend: ObjectStore, store: Store, text: str) -> None:
    """What a principal without the key can do: create a plaintext event chained to the head."""
    found = read_manifest(store.shared, "s")
    assert found is not None
    head = list(store.replay("s"))[-1]
    env = Envelope(FORMAT_VERSION, "s", found[0].uid, head.seq + 1, format_ts(store.clock()), "f" * 32, head.hash)
    env = msgspec.structs.replace(env, body=MessagesBody([msg(text)]))
    CreateOnly(backend).create(f"root/sessions/s/{head.seq + 1:020d}", encode_json(env))


def test_a_plaintext_event_after_a_rekey_is_refused(backend: ObjectStore) -> None:
    plain = Store(backend, root="root")
    plain.open("s", create=True).append(msg("before"))
    keyed = Store(backend, root="root", keyring=KEYRING)
    keyed.rekey("s")
    assert keyed.info("s").key_id == "k1" and keyed.info("s").encrypted
    plant_plaintext_after_head(backend, keyed, "injected")
    with pytest.raises(IntegrityError, match="plaintext event in an encrypted session"):
        list(keyed.replay("s"))


def test_require_encryption_holds_for_reads(backend: ObjectStore) -> None:
    Store(backend, root="root").open("s", create=True).append(msg("plain"))
    strict = Store(backend, root="root", keyring=KEYRING, require_encryption=True)
    with pytest.raises(IntegrityError, match="where encryption is required"):
        list(strict.replay("s"))


def test_a_manifest_swapped_for_a_keyless_one_does_not_admit_plaintext(backend: ObjectStore) -> None:
    """Someone with bucket-wide write replaces the manifest and adds a plaintext event: the chain
    from seq 1 names the true manifest, so every full read and verify fails instead."""
    keyed = Store(backend, root="root", keyring=KEYRING)
    keyed.open("s", create=True).append(msg("sealed"))
    plant_plaintext_after_head(backend, keyed, "plaintext")
    found = read_manifest(keyed.shared, "s")
    assert found is not None
    keyless = encode_manifest(msgspec.structs.replace(found[0], kid=None, salt=None))
    backend.replace("root/sessions/s/manifest", keyless, etag=backend.head("root/sessions/s/manifest").etag)
    for store in (keyed, Store(backend, root="root")):
        with pytest.raises(IntegrityError):
            list(store.replay("s"))
        with pytest.raises(IntegrityError):
            store.verify("s")


# ---- 5. unbounded reads ----------------------------------------------------------------


def test_an_oversized_event_object_is_refused_by_replay_and_open(backend: ObjectStore) -> None:
    small = Store(backend, root="root", max_event_bytes=1000)
    writer = small.open("s", create=True)
    writer.append(msg("ok"))
    limit = small.shared.max_event_object_bytes
    CreateOnly(backend).create("root/sessions/s/00000000000000000002", b"x" * (limit + 1))
    with pytest.raises(IntegrityError, match=r"larger|exceeds|bytes"):
        list(small.replay("s"))
    with pytest.raises(IntegrityError, match=r"larger|exceeds|bytes"):
        small.open("s")


# ---- 6. what can be written can be read -----------------------------------------------------


def test_a_deeply_nested_message_is_refused_at_append_and_nothing_is_left(backend: ObjectStore) -> None:
    store = Store(backend, root="root")
    deep: Any = "x"
    for _ in range(100):
        deep = [deep]
    writer = store.open("s", create=True)
    with pytest.raises(InvalidInputError, match="levels deep"):
        writer.append({"role": "user", "content": deep})
    assert writer.head == 0 and list(store.replay("s")) == []


def test_a_planted_deeply_nested_event_is_an_integrity_error(scene: Scene) -> None:
    scene.plant("00000000000000000006", b"[" * 5000 + b"]" * 5000)
    with pytest.raises(IntegrityError):
        scene.contents()


def test_forks_nest_at_most_the_depth_limit_and_all_of_them_read(memory_store: Store) -> None:
    from evstore._read import MAX_FORK_DEPTH

    memory_store.open("f0", create=True).append(msg("root"))
    for depth in range(1, MAX_FORK_DEPTH + 1):
        memory_store.fork(f"f{depth - 1}", f"f{depth}").append(msg(f"at {depth}"))
    assert len(list(memory_store.replay(f"f{MAX_FORK_DEPTH}"))) == MAX_FORK_DEPTH + 1
    with pytest.raises(InvalidInputError, match="nest at most"):
        memory_store.fork(f"f{MAX_FORK_DEPTH}", "too-deep")


def test_a_manifest_whose_parent_is_itself_is_an_integrity_error(backend: ObjectStore) -> None:
    store = Store(backend, root="root")
    uid = "a" * 32
    manifest = Manifest(FORMAT_VERSION, "loop", uid, format_ts(store.clock()), parent=ForkRef("loop", uid, 3, "0" * 64))
    CreateOnly(backend).create("root/sessions/loop/manifest", encode_manifest(manifest))
    with pytest.raises(IntegrityError, match="circular"):
        list(store.replay("loop"))


# ---- 7. gc never destroys a live session -------------------------------------------------------


def plant_before_any_event(backend: ObjectStore, store: Store, seq: int, data: bytes) -> None:
    """A session created with no event yet, and the writer role's object at ``seq`` > 1."""
    store.create("fresh")
    CreateOnly(backend).create(f"root/sessions/fresh/{seq:020d}", data)


def forged_envelope(store: Store, seq: int, *, uid: str | None = None) -> bytes:
    """A plaintext event of session 'fresh' at ``seq``, chained to nothing (its seq 1 was never there)."""
    found = read_manifest(store.shared, "fresh")
    assert found is not None
    env = Envelope(FORMAT_VERSION, "fresh", uid or found[0].uid, seq, format_ts(store.clock()), "f" * 32, "0" * 64)
    return encode_json(msgspec.structs.replace(env, body=MessagesBody([msg("planted")])))


@pytest.mark.parametrize("seq", [2, 3, 1000])
def test_a_junk_object_past_the_head_of_an_empty_session_is_tampering_not_expiry(backend: ObjectStore, seq: int) -> None:
    store = Store(backend, root="root")
    plant_before_any_event(backend, store, seq, b"junk")
    reads = [lambda: store.open("fresh"), lambda: store.info("fresh"), lambda: list(store.replay("fresh"))]
    reads += [lambda: store.verify("fresh"), lambda: store.resume("fresh"), lambda: store.open("fresh").append(msg("x"))]
    for read in reads:
        with pytest.raises(IntegrityError, match="seq 1 is missing before it: planted, not expired") as caught:
            read()
        assert caught.value.seq == seq
    # the operator's way out: delete fences past the junk, and the id starts again after the fence
    assert store.delete("fresh").fenced_at == seq + 1
    assert store.create("fresh").append(msg("again")) == seq + 2
    assert [e.messages for e in store.replay("fresh")] == [[msg("again")]]


def test_an_event_of_another_incarnation_or_plaintext_in_an_encrypted_session_is_no_remnant(backend: ObjectStore) -> None:
    plain = Store(backend, root="root")
    plain.create("fresh")
    CreateOnly(backend).create("root/sessions/fresh/00000000000000000002", forged_envelope(plain, 2, uid="e" * 32))
    with pytest.raises(IntegrityError, match=r"another incarnation.*planted, not expired"):
        plain.open("fresh")
    keyed = Store(backend, root="keyed", keyring=KEYRING)
    keyed.create("fresh")
    CreateOnly(backend).create("keyed/sessions/fresh/00000000000000000002", forged_envelope(keyed, 2))
    with pytest.raises(IntegrityError, match=r"plaintext event in an encrypted session.*planted, not expired"):
        keyed.info("fresh")


def test_first_events_gone_before_true_events_are_still_expiry(backend: ObjectStore) -> None:
    """What expiry leaves: the session's own later events. The gap before them stays exit 6."""
    store = Store(backend, root="root", keyring=KEYRING)
    writer = store.open("s", create=True)
    for i in range(4):
        writer.append(msg(f"m{i}"))
    backend.delete_many([f"root/sessions/s/{seq:020d}" for seq in (1, 2)])
    for read in (lambda: store.open("s"), lambda: store.info("s"), lambda: list(store.replay("s"))):
        with pytest.raises(SessionExpiredError, match=r"seq 1 is missing\)$"):
            read()


def test_a_fork_read_through_its_own_fork_tells_a_planted_start_from_expiry() -> None:
    """The same rule where a grandchild reads its parent's own events from GETs sent ahead."""
    backend = MemoryStore()
    store = Store(backend, root="root")
    store.open("p", create=True).append(msg("p1"))
    fork = store.fork("p", "f")
    fork.append(msg("f2"))
    fork.append(msg("f3"))
    store.fork("f", "g").append(msg("g4"))
    backend.delete_many(["root/sessions/f/00000000000000000002"])  # f's first own event expired
    with pytest.raises(SessionExpiredError, match="seq 2 is missing"):
        list(store.replay("g"))
    third = "root/sessions/f/00000000000000000003"
    backend.replace(third, b"junk", etag=backend.head(third).etag)  # and what follows it is no event
    with pytest.raises(IntegrityError, match="seq 2 is missing before it: planted, not expired") as caught:
        list(store.replay("g"))
    assert caught.value.seq == 3


def test_a_junk_event_in_a_fresh_session_does_not_make_gc_remove_it(backend: ObjectStore) -> None:
    from datetime import timedelta

    store = Store(backend, root="root")
    store.create("fresh")
    CreateOnly(backend).create("root/sessions/fresh/00000000000000000002", b"junk")
    report = store.gc(grace=timedelta(0))
    assert report.objects_removed == 0 and "fresh" in report.left_alone
    assert backend.head("root/sessions/fresh/manifest").size > 0


def test_an_undecodable_manifest_is_left_alone_and_reported(backend: ObjectStore) -> None:
    from datetime import timedelta

    store = Store(backend, root="root")
    store.open("s", create=True).append(msg("kept"))
    stored = backend.get("root/sessions/s/manifest")
    backend.replace("root/sessions/s/manifest", b'{"v": 99}', etag=stored.etag)
    store.apply_lifecycle(1)  # with rules to apply, gc reads every manifest
    report = store.gc(grace=timedelta(0), apply_lifecycle=True)
    assert report.objects_removed == 0 and "does not decode" in report.left_alone["s"]
    assert len(list(backend.list("root/sessions/s/"))) == 2


# ---- the property: derived objects and junk never change what replay returns ----------------------------

DERIVED = st.one_of(
    st.sampled_from(["-", "~", "0", "00000000000000000002~", "zzz", "segments/", "forks/x@y", "rekeys/r", "tombstonex"]),
    st.builds(lambda a, b: f"segments/{min(a, b):020d}-{max(a, b):020d}", st.integers(1, 12), st.integers(1, 12)),
    st.builds(lambda n: f"{n:020d}", st.integers(7, 12)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(st.tuples(DERIVED, st.binary(max_size=64) | st.just(b"")), max_size=6), forged=st.booleans())
def test_derived_objects_and_junk_never_change_what_replay_returns(names: list[tuple[str, bytes]], forged: bool) -> None:
    """Segments, markers and junk change nothing: replay returns the five true events. The one
    exception is a planted event name (seq 7 to 12): seq 6 is then missing, and replay fails at
    it, after the true events, as a hole in the log."""
    scene = Scene(MemoryStore(), None)
    truth = [(e.seq, e.hash) for e in scene.store.replay("s")]
    if forged:
        data = pack_segment("s", scene.manifest.uid, scene.forged_events(["a", "b", "c"]))
        names = [("segments/00000000000000000001-00000000000000000003", data), *names]
    planted = set()
    for name, data in names:
        if name not in planted:  # the attacker cannot overwrite: the first of a repeated name stands
            scene.plant(name, data)
            planted.add(name)
    seen: list[tuple[int, str]] = []
    if any(len(name) == 20 and name.isdigit() for name in planted):
        with pytest.raises(IntegrityError, match="missing") as caught:
            seen.extend((e.seq, e.hash) for e in scene.store.replay("s"))
        assert caught.value.seq == 6
    else:
        seen.extend((e.seq, e.hash) for e in scene.store.replay("s"))
    assert seen == truth


def test_the_create_only_wrapper_refuses_to_replace_or_delete() -> None:
    inner = MemoryStore()
    inner.create("a", b"1")
    wrapper = CreateOnly(inner)
    with pytest.raises(PermissionError):
        wrapper.delete_many(["a"])
    with pytest.raises(PermissionError):
        wrapper.replace("a", b"2", etag=inner.head("a").etag)
    assert inner.get("a").data == b"1"
