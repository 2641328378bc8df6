"""Integrity on the write path and in head-finding (issue #32, round 2): an attacker holding the
writer role (create-only, and the session key where the writer has one) or a hostile bucket
plants objects at free keys. Every outcome is the true history or a clean error with its exit
code (IntegrityError: 5), never a message stored in plaintext or acknowledged and stored
nowhere, never the wrong head, never work that grows faster than what was planted."""

from __future__ import annotations

import heapq
import itertools
import random
from pathlib import Path
from typing import Any

import msgspec
import pytest
from click.testing import CliRunner
from evstore_cli import cli

from evstore import IntegrityError, Keyring, LocalStore, MemoryStore, ObjectStore, Store, WriteConflictError, _read
from evstore._codec import FORMAT_VERSION, Envelope, MessagesBody, b64encode, encode_json, format_ts, header_aad, sha256_hex
from evstore._crypto import seal
from evstore._ids import MAX_SEQ, format_seq, seq_after
from evstore._read import _segments, session_key

from . import test_hostile_bucket
from .helpers import Clock, CountingStore, msg
from .test_hostile_bucket import KEYRING, CreateOnly, Scene, plant_plaintext_after_head

backend = test_hostile_bucket.backend  # the same stores and keyrings as the first round's attacks
keyring = test_hostile_bucket.keyring


@pytest.fixture
def scene(backend: ObjectStore, keyring: Keyring | None) -> Scene:
    return Scene(backend, keyring)


def forge(scene: Scene, seq: int, prev: str, text: str, *, idem: str | None = None, plaintext: bool = False) -> bytes:
    """An event at ``seq`` naming ``prev``, sealed under the session key when the session has one
    (unless ``plaintext``): what the writer role can make."""
    kid = None if plaintext else scene.manifest.kid
    env = Envelope(FORMAT_VERSION, "s", scene.manifest.uid, seq, format_ts(scene.store.clock()), "f" * 32, prev, kid)
    env = msgspec.structs.replace(env, idem=idem)
    body = MessagesBody([msg(text)])
    if kid is None:
        return encode_json(msgspec.structs.replace(env, body=body))
    key = session_key(scene.attacker.shared, scene.manifest, kid)
    return encode_json(msgspec.structs.replace(env, sealed=b64encode(seal(key, encode_json(body), header_aad(env)))))


def head_hash(scene: Scene) -> str:
    return list(scene.store.replay("s"))[-1].hash


def absent(scene: Scene, seq: int) -> bool:
    return not scene.backend.list_page(f"root/sessions/s/{seq:020d}", max_keys=1).objects


# ---- 1. a writer takes its sealing from the manifest and salt, never from the events ----------------------


def test_a_plaintext_event_planted_at_head_plus_one_of_a_sealed_session_stops_the_writer(backend: ObjectStore) -> None:
    scene = Scene(backend, KEYRING)
    stale = scene.store.open("s")  # opened before the plant: head 5
    plant_plaintext_after_head(backend, scene.store, "planted")
    with pytest.raises(IntegrityError, match=r"seq 6 .*plaintext event in an encrypted session"):
        scene.store.open("s")  # the head it finds is plaintext: it writes nothing after it
    with pytest.raises(WriteConflictError):
        stale.append(msg("secret"))  # seq 6 is taken by what is no event of its own
    with pytest.raises(IntegrityError, match=r"seq 6 .*plaintext event in an encrypted session"):
        stale.refresh()
    assert absent(scene, 7)
    with pytest.raises(IntegrityError, match=r"seq 6 .*plaintext event in an encrypted session"):
        scene.contents()  # reads refuse the planted event itself
    with pytest.raises(IntegrityError, match="seq 6"):
        scene.store.resume("s")


def test_a_plaintext_event_planted_after_a_rekey_stops_the_writer(backend: ObjectStore) -> None:
    """A session encrypted by rekey has no key in its manifest: its salt object decides."""
    Store(backend, root="root").open("s", create=True).append(msg("before"))
    keyed = Store(backend, root="root", keyring=KEYRING)
    keyed.rekey("s")
    plant_plaintext_after_head(backend, keyed, "planted")
    with pytest.raises(IntegrityError, match=r"seq 2 .*plaintext event in an encrypted session"):
        keyed.open("s")
    with pytest.raises(IntegrityError, match=r"seq 2 .*plaintext event in an encrypted session"):
        list(keyed.replay("s"))


def test_a_plaintext_writer_learns_of_a_rekey_at_its_lease_and_writes_no_plaintext() -> None:
    clock = Clock()
    backend = MemoryStore(clock=clock)
    writer = Store(backend, root="root", clock=clock).open("s", create=True)
    writer.append(msg("before"))
    keyed = Store(backend, root="root", keyring=KEYRING, clock=clock)
    keyed.rekey("s")
    clock.advance(seconds=writer._ctx.writer_lease)
    with pytest.raises(WriteConflictError, match="encrypted since this writer read its head"):
        writer.append(msg("after"))
    assert [e.seq for e in keyed.replay("s")] == [1]
    assert keyed.open("s").append(msg("after")) == 2  # open it again: sealed under the session's key
    assert [e.key_id for e in keyed.replay("s")] == ["k1", "k1"]


def test_the_command_writes_no_plaintext_into_a_sealed_session(tmp_path: Path) -> None:
    url = (tmp_path / "store").as_uri()
    key = CliRunner().invoke(cli, ["keygen"]).output.strip()
    env = {"EVSTORE_KEY": key, "EVSTORE_KEY_ID": "k1", "EVSTORE_KEYRING": None}

    def run(*args: str) -> Any:
        return CliRunner().invoke(cli, ["--store", url, *args], env=env)

    assert run("append", "s", "m0").exit_code == 0
    keyed = Store(LocalStore(tmp_path / "store"), keyring=Keyring.from_env({"EVSTORE_KEY": key, "EVSTORE_KEY_ID": "k1"}))
    plant_plaintext_after_head_at(LocalStore(tmp_path / "store"), keyed, "")
    result = run("append", "s", "secret")
    assert result.exit_code == 5 and "plaintext event in an encrypted session" in result.output
    assert "Traceback" not in result.output
    assert not LocalStore(tmp_path / "store").list_page("sessions/s/00000000000000000003").objects
    assert run("replay", "s").exit_code == 5


def plant_plaintext_after_head_at(backend: ObjectStore, store: Store, root: str) -> None:
    """``plant_plaintext_after_head`` for a store at ``root``."""
    found = _read.read_manifest(store.shared, "s")
    assert found is not None
    head = list(store.replay("s"))[-1]
    env = Envelope(FORMAT_VERSION, "s", found[0].uid, head.seq + 1, format_ts(store.clock()), "f" * 32, head.hash)
    env = msgspec.structs.replace(env, body=MessagesBody([msg("planted")]))
    CreateOnly(backend).create(f"{root}sessions/s/{head.seq + 1:020d}", encode_json(env))


# ---- 2. "already done" only for a verified event --------------------------------------------------------


def test_a_planted_event_with_the_clients_key_is_tampering_not_done(scene: Scene) -> None:
    """Planted at head+1 with the key a client will use, naming the wrong event before it."""
    scene.plant(f"{6:020d}", forge(scene, 6, scene.genesis, "planted", idem="K"))
    with pytest.raises(IntegrityError, match=r"seq 6 .*chain broken"):
        scene.store.open("s").append(msg("mine"), idempotency_key="K")
    assert absent(scene, 7)
    with pytest.raises(IntegrityError, match=r"seq 6 .*chain broken"):
        scene.contents()


@pytest.mark.slow
def test_a_planted_event_with_the_key_is_refused_at_the_412_too(scene: Scene) -> None:
    """Writers that knew the head before the plant: with ``expected_head`` (no window read) and
    without (the window holds no key): the 412 at seq 6 finds the key, and the event is checked."""
    writers = [scene.store.open("s"), scene.store.open("s")]
    scene.plant(f"{6:020d}", forge(scene, 6, scene.genesis, "planted", idem="K"))
    with pytest.raises(IntegrityError, match=r"seq 6 .*chain broken"):
        writers[0].append(msg("mine"), expected_head=5, idempotency_key="K")
    with pytest.raises(IntegrityError, match=r"seq 6 .*chain broken"):
        writers[1].append(msg("mine"), idempotency_key="K")
    assert absent(scene, 7) and writers[0].head == writers[1].head == 5


def test_two_planted_events_chained_to_each_other_are_found_where_they_join(scene: Scene) -> None:
    first = forge(scene, 6, scene.genesis, "planted 6")
    scene.plant(f"{6:020d}", first)
    scene.plant(f"{7:020d}", forge(scene, 7, sha256_hex(first), "planted 7", idem="K"))
    with pytest.raises(IntegrityError, match=r"seq 6 .*chain broken"):
        scene.store.open("s").append(msg("mine"), idempotency_key="K")
    assert absent(scene, 8)


def test_a_planted_event_with_the_key_that_does_not_open_is_tampering() -> None:
    scene = Scene(MemoryStore(), KEYRING)
    data = forge(scene, 6, head_hash(scene), "planted", idem="K")
    env = msgspec.json.decode(data, type=Envelope)
    assert env.sealed is not None
    forged = msgspec.structs.replace(env, sealed=b64encode(b"\x00" * 40))  # well-formed, under no key
    stale = scene.store.open("s")
    scene.plant(f"{6:020d}", encode_json(forged))
    with pytest.raises(IntegrityError, match=r"seq 6 .*authentication failed"):
        scene.store.open("s")  # a writer opens the head it finds (a wrong key must not seal what follows)
    with pytest.raises(IntegrityError, match=r"seq 6 .*authentication failed"):
        stale.append(msg("mine"), expected_head=5, idempotency_key="K")  # its head: no window read, then the 412
    with pytest.raises(IntegrityError, match="seq 6"):
        scene.contents()


def test_a_plaintext_event_with_the_key_in_a_sealed_session_is_tampering_at_the_412() -> None:
    scene = Scene(MemoryStore(), KEYRING)
    writer = scene.store.open("s")
    scene.plant(f"{6:020d}", forge(scene, 6, head_hash(scene), "planted", idem="K", plaintext=True))
    with pytest.raises(IntegrityError, match=r"seq 6 .*plaintext event in an encrypted session"):
        writer.append(msg("mine"), expected_head=5, idempotency_key="K")
    assert absent(scene, 7)


def test_an_event_with_the_key_that_is_one_of_the_sessions_is_already_done(scene: Scene) -> None:
    """The limit of the writer role: an event it appends with the key, chained and sealed as an
    append is, is an append (another process's); the key answers with its seq, and every read
    shows that event."""
    scene.plant(f"{6:020d}", forge(scene, 6, head_hash(scene), "theirs", idem="K"))
    assert scene.store.open("s").append(msg("mine"), idempotency_key="K") == 6
    assert scene.contents() == [f"m{i}" for i in range(5)] + ["theirs"]


def test_a_retry_after_a_rekey_or_in_a_fork_is_still_already_done() -> None:
    """Verification refuses no true event: re-sealed ones (their hashes changed: the rekey records
    say so) and a fork's first own event (it names the parent's event)."""
    backend = MemoryStore()
    plain = Store(backend, root="root")
    writer = plain.open("s", create=True)
    for i in range(3):
        writer.append(msg(f"m{i}"), idempotency_key=f"k{i}")
    keyed = Store(backend, root="root", keyring=KEYRING)
    keyed.rekey("s")
    assert keyed.open("s").append(msg("m1"), idempotency_key="k1") == 2
    assert keyed.open("s").append(msg("m2"), idempotency_key="k2") == 3
    fork = keyed.fork("s", "f")
    assert fork.append(msg("f0"), idempotency_key="f0") == 4
    assert keyed.open("f").append(msg("f0"), idempotency_key="f0") == 4
    assert [e.seq for e in keyed.replay("f")] == [1, 2, 3, 4]


def test_the_command_answers_a_planted_key_with_exit_5(tmp_path: Path) -> None:
    url = (tmp_path / "store").as_uri()

    def run(*args: str) -> Any:
        return CliRunner().invoke(cli, ["--store", url, *args], env={"EVSTORE_KEY": None, "EVSTORE_KEYRING": None})

    assert run("append", "s", "m0").output == "1\n"
    scene_store = Store(LocalStore(tmp_path / "store"))
    found = _read.read_manifest(scene_store.shared, "s")
    assert found is not None
    env = Envelope(FORMAT_VERSION, "s", found[0].uid, 2, format_ts(scene_store.clock()), "f" * 32, found[1], idem="K")
    env = msgspec.structs.replace(env, body=MessagesBody([msg("planted")]))
    CreateOnly(LocalStore(tmp_path / "store")).create("sessions/s/00000000000000000002", encode_json(env))
    result = run("append", "s", "mine", "--idempotency-key", "K")
    assert result.exit_code == 5 and "seq 2" in result.output and "Traceback" not in result.output
    assert run("replay", "s").exit_code == 5
    assert [o.key for o in LocalStore(tmp_path / "store").list("sessions/s/0")] == [
        "sessions/s/00000000000000000001",
        "sessions/s/00000000000000000002",
    ]


# ---- 3. junk names among the events never hide the head ----------------------------------------------------


def junk_session(names: int, suffix: str = "~") -> tuple[CountingStore, Store]:
    counting = CountingStore(MemoryStore())
    store = Store(counting, root="root")
    writer = store.open("s", create=True)
    for i in range(5):
        writer.append(msg(f"m{i}"))
    for i in range(names):
        counting.inner.create(f"root/sessions/s/00000000000000000003{suffix}{i}", b"")
    counting.reset()
    return counting, store


def test_2500_junk_names_between_two_events_cost_one_list_page_and_hide_nothing() -> None:
    counting, store = junk_session(2500)
    assert store.info("s").head == 5
    assert counting.counts == {"LIST": 3, "GET": 1}  # 2 without the junk: its first page, then a jump past it
    counting.reset()
    assert [e.seq for e in store.replay("s")] == [1, 2, 3, 4, 5]
    assert counting.counts["LIST"] == 3 and counting.counts["GET"] == 6  # manifest and 5 events
    counting.reset()
    assert store.open("s").append(msg("m5")) == 6
    assert counting.counts == {"LIST": 3, "GET": 2, "PUT": 1}
    follower = store.follow("s", after=3, sleep=lambda _: None)
    assert [next(follower).seq for _ in range(3)] == [4, 5, 6]


def test_junk_that_no_list_can_jump_over_costs_a_page_per_1000_names() -> None:
    """Names past DEL after a seq's digits are paged over: work bounded by what was planted."""
    counting, store = junk_session(2500, "\u00e9")
    assert store.info("s").head == 5
    assert counting.counts == {"LIST": 4, "GET": 1}  # the listing of the rest, then 3 pages for 2,503 names
    assert [e.seq for e in store.replay("s", start=4)] == [4, 5]


def test_junk_before_the_first_event_is_not_listed() -> None:
    counting, store = junk_session(0)
    for name in ("00000000000000000000", "-", "0", "0000000000000000000~"):
        counting.inner.create(f"root/sessions/s/{name}", b"junk")
    assert store.info("s").head == 5
    assert [e.seq for e in store.replay("s")] == [1, 2, 3, 4, 5]
    assert [e.seq for e in itertools.islice(store.follow("s", sleep=lambda _: None), 5)] == [1, 2, 3, 4, 5]


@pytest.mark.slow
def test_tail_shows_the_newest_events_past_junk(tmp_path: Path) -> None:
    url = (tmp_path / "store").as_uri()

    def run(*args: str) -> Any:
        return CliRunner().invoke(cli, ["--store", url, *args], env={"EVSTORE_KEY": None, "EVSTORE_KEYRING": None})

    for i in range(5):
        assert run("append", "s", f"m{i}").exit_code == 0
    local = CreateOnly(LocalStore(tmp_path / "store"))
    for i in range(2500):
        local.create(f"sessions/s/00000000000000000003~{i}", b"")
    shown = run("tail", "s", "-n", "2", "--format", "jsonl")
    assert shown.exit_code == 0
    assert [msgspec.json.decode(line)["seq"] for line in shown.output.splitlines()] == [4, 5]
    assert run("append", "s", "m5").output == "6\n"
    assert Store(LocalStore(tmp_path / "store")).info("s").head == 6


def test_the_strands_adapter_reads_every_message_past_junk() -> None:
    pytest.importorskip("strands")
    from strands.types.session import Session, SessionAgent, SessionMessage, SessionType

    from evstore.integrations.strands import EvstoreSessionRepository

    backend = MemoryStore()
    store = Store(backend)
    repository = EvstoreSessionRepository(store)
    repository.create_session(Session("chat", SessionType.AGENT))
    repository.create_agent("chat", SessionAgent("main", {}, {}))
    for i in range(6):
        repository.create_message("chat", "main", SessionMessage({"role": "user", "content": [{"text": f"m{i}"}]}, i))
    head = store.info("chat").head
    for i in range(2500):
        backend.create(f"sessions/chat/{format_seq(head - 2)}~{i}", b"")
    listed = EvstoreSessionRepository(store).list_messages("chat", "main")
    assert [m.message["content"][0]["text"] for m in listed] == [f"m{i}" for i in range(6)]


def test_langgraph_reads_the_latest_state_past_junk() -> None:
    pytest.importorskip("langgraph")
    from evstore.integrations.langgraph import EvstoreSaver

    from .test_langgraph import cfg, put

    backend = MemoryStore()
    store = Store(backend, root="lg")
    saver = EvstoreSaver(store)
    config = put(saver, cfg("t"), {"answer": "first"}, 0)
    for step in range(1, 4):
        config = put(saver, config, {"answer": f"step {step}"}, step)
    (sid,) = _read.list_sessions(store.shared)
    head = store.info(sid).head
    for i in range(2500):
        backend.create(f"lg/sessions/{sid}/{format_seq(head - 1)}~{i}", b"")
    latest = EvstoreSaver(store).get_tuple(cfg("t"))
    assert latest is not None and latest.checkpoint["channel_values"] == {"answer": "step 3"}


@pytest.mark.parametrize(
    ("name", "after"),
    [
        ("00000000000000000003~7", "00000000000000000003\x7f"),
        ("00000000000000000003\u00e9", "00000000000000000003\u00e9"),  # past DEL: from the name itself
        ("0000000000000000001-", "0000000000000000001-"),
        ("-", "-"),
        ("0", "0"),
        ("00000000000000000000~", "00000000000000000000\x7f"),
        ("12x", "12x"),  # past every seq that starts 12
        ("12-", "12-"),  # digits, then a character before "0": the next seq starts 12000
        ("99999999999999999999~", None),
        ("9x", None),
        ("manifest", None),
    ],
)
def test_seq_after_skips_only_names_that_cannot_be_seqs(name: str, after: str | None) -> None:
    assert seq_after(name) == after
    if after is not None:
        assert after >= name


# ---- 4. planted segment names: linear work, no GET for what cannot be a segment ---------------------------


def planted_segments(count: int, data: bytes) -> tuple[CountingStore, Store]:
    counting = CountingStore(MemoryStore())
    store = Store(counting, root="root")
    writer = store.open("s", create=True)
    for i in range(5):
        writer.append(msg(f"m{i}"))
    for i in range(count):
        counting.inner.create(f"root/sessions/s/segments/{i + 1:020d}-{i + 1 + i % 7:020d}", data)
    counting.reset()
    return counting, store


def test_30000_empty_segment_names_cost_no_get() -> None:
    counting, store = planted_segments(30_000, b"")
    assert [m["content"] for e in store.replay("s") for m in e.messages] == [f"m{i}" for i in range(5)]
    assert counting.counts["GET"] == 6  # the manifest and 5 events: none for an empty object
    assert counting.counts["LIST"] <= 2 + 31  # the listing pages the names, 1,000 a page
    assert store.info("s").segments == 0


@pytest.mark.slow
def test_30000_planted_segments_cost_gets_that_do_not_grow_with_them() -> None:
    for count in (1_000, 30_000):
        counting, store = planted_segments(count, b"x")
        assert [e.seq for e in store.replay("s")] == [1, 2, 3, 4, 5]
        # the manifest, the segment GETs in flight when the first group fails to be vouched for
        # (a window of 2 * concurrency, and the group's 8 and its loose event taken from it), the
        # GETs of the seqs after the planted chain's end, guessed (they find nothing), the 5 events
        assert counting.counts["GET"] <= 1 + 2 * store.concurrency + 9 + _segments._TAIL_GUESS + 5
        assert store.info("s").head == 5


def reference_chain(segments: list[tuple[int, int]], cursor: int, end: int | None) -> list[tuple[int, int]]:
    """The greedy selection as a scan of every segment per link: the contract."""
    chain: list[tuple[int, int]] = []
    while True:
        reach = chain[-1][1] + 1 if chain else cursor
        if end is not None and reach > end:
            return chain
        worth = [
            (last, first)
            for first, last in segments
            if first <= reach <= last
            and (
                end is None
                or end > last
                or end - reach + 1 >= _segments._COVERED_EVENTS
                or 2 * (min(last, end) - reach + 1) >= last - first + 1
            )
        ]
        if not worth:
            return chain
        last, first = max(worth)
        chain.append((first, last))


def test_segment_chain_chooses_as_the_scan_did() -> None:
    rng = random.Random(7)
    for _ in range(400):
        segments = sorted({(a, a + rng.randrange(0, 12)) for a in (rng.randrange(1, 40) for _ in range(rng.randrange(0, 25)))})
        cursor = rng.randrange(1, 30)
        end = rng.choice([None, rng.randrange(cursor, 60)])
        assert _read.segment_chain(segments, cursor, end) == reference_chain(segments, cursor, end)


def test_segment_chain_touches_each_planted_segment_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """30,000 overlapping names (a chain through all of them): heap operations counted, not seconds."""
    segments = [(i + 1, i + 1 + i % 7) for i in range(30_000)]
    operations = 0
    push, pop = heapq.heappush, heapq.heappop

    def counted_push(heap: list[Any], item: Any) -> None:
        nonlocal operations
        operations += 1
        push(heap, item)

    def counted_pop(heap: list[Any]) -> Any:
        nonlocal operations
        operations += 1
        return pop(heap)

    monkeypatch.setattr(_segments.heapq, "heappush", counted_push)
    monkeypatch.setattr(_segments.heapq, "heappop", counted_pop)
    chain = _read.segment_chain(segments, 1, None)
    assert chain[0][0] == 1 and all(b[0] <= a[1] + 1 <= b[1] for a, b in itertools.pairwise(chain))
    assert operations <= 2 * len(segments)
    assert _read.segment_chain(segments, 1, None) == chain and chain[-1][1] <= MAX_SEQ
