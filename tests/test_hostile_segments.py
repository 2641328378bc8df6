"""Issue #32, round 2: forged segments and gc against the writer role (create-only, with the
session key where the writer has one). Each way of planting ends in the true history, or an
``IntegrityError`` at the exact seq where the planted events begin; never changed history."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from click.testing import CliRunner
from evstore_cli import cli

from evstore import IntegrityError, LocalStore, MemoryStore, ObjectStore, SessionNotFoundError, Store
from evstore._backends import ListPage, ObjectInfo
from evstore._codec import (
    FORMAT_VERSION,
    Envelope,
    ForkRef,
    MessagesBody,
    encode_json,
    encode_manifest,
    format_ts,
    pack_segment,
    sha256_hex,
)
from evstore._context import FENCE_HOLD
from evstore._manifests import new_manifest

from .helpers import CountingStore, msg
from .test_hostile_bucket import KEYRING, CreateOnly, Scene

TRUE = [f"m{i}" for i in range(5)]


@pytest.fixture(params=["memory", "local"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    return MemoryStore() if request.param == "memory" else LocalStore(tmp_path / "store")


@pytest.fixture(params=["plaintext", "sealed"])
def scene(request: pytest.FixtureRequest, backend: ObjectStore) -> Scene:
    return Scene(backend, KEYRING if request.param == "sealed" else None)


def segment(first: int, last: int) -> str:
    return f"segments/{first:020d}-{last:020d}"


def refused_at(scene: Scene, seq: int) -> None:
    """replay gives the true events and then IntegrityError at ``seq``; context and verify refuse there too."""
    seen: list[str] = []
    with pytest.raises(IntegrityError) as raised:
        for event in scene.store.replay("s"):
            seen += [m["content"] for m in event.messages]
    assert seen == TRUE[: seq - 1] and raised.value.seq == seq
    with pytest.raises(IntegrityError) as raised:
        scene.store.context("s")
    assert raised.value.seq == seq
    with pytest.raises(IntegrityError) as raised:
        scene.store.verify("s", expect=scene.receipt)  # never a receipt of the forged head
    assert raised.value.seq == seq


def test_a_forged_segment_ending_on_one_planted_loose_event_past_the_head(scene: Scene) -> None:
    forged = scene.forged_events([f"forged {i}" for i in range(6)])
    scene.plant(segment(1, 6), pack_segment("s", scene.manifest.uid, forged))
    scene.plant(f"{6:020d}", forged[-1][1])
    refused_at(scene, 6)  # the planted event 6 does not chain to the true 5


def test_a_forged_segment_with_the_true_first_event_and_three_planted_loose_events(scene: Scene) -> None:
    true_first = scene.backend.get(scene.key(f"{1:020d}")).data
    # chained from the true event 1, so the segment agrees with the loose events at its start
    rest = scene.forged_events([f"forged {i}" for i in range(2, 9)], first=2, prev=sha256_hex(true_first))
    forged = [(1, true_first), *rest]
    scene.plant(segment(1, 8), pack_segment("s", scene.manifest.uid, forged))
    for seq, data in forged[5:]:  # 6, 7, 8: the segment's last three, past the true head
        scene.plant(f"{seq:020d}", data)
    refused_at(scene, 6)


def test_a_forged_segment_then_wholly_planted_segments_beyond_the_head(scene: Scene) -> None:
    forged = scene.forged_events([f"forged {i}" for i in range(12)])
    uid = scene.manifest.uid
    scene.plant(segment(1, 6), pack_segment("s", uid, forged[:6]))
    scene.plant(segment(7, 9), pack_segment("s", uid, forged[6:9]))
    scene.plant(segment(10, 12), pack_segment("s", uid, forged[9:]))
    scene.plant(f"{6:020d}", forged[5][1])
    refused_at(scene, 6)


def test_planted_segments_only_beyond_the_head_change_nothing(scene: Scene) -> None:
    events = list(scene.store.replay("s"))
    beyond = scene.forged_events(["a", "b", "c"], first=6, prev=events[-1].hash)
    scene.plant(segment(6, 8), pack_segment("s", scene.manifest.uid, beyond))  # no loose events vouch for them
    scene.truth()


def test_a_forged_young_segment_with_a_planted_loose_event(scene: Scene) -> None:
    forged = scene.forged_events([f"forged {i}" for i in range(6)])
    young = scene.store.layout.young_key("s", 1, 6)
    scene.attacker.backend.create(young, pack_segment("s", scene.manifest.uid, forged))
    scene.plant(f"{6:020d}", forged[-1][1])
    refused_at(scene, 6)


def test_the_honest_path_still_reads_from_segments(backend: ObjectStore) -> None:
    store = Store(backend, keyring=KEYRING, auto_compact=None)
    writer = store.open("s", create=True)
    for i in range(40):
        writer.append(msg(f"m{i}"))
    assert store.compact("s", segment_size=20) == [(1, 20), (21, 40)]
    counting = CountingStore(backend)
    assert [m["content"] for m in Store(counting, keyring=KEYRING).context("s")] == [f"m{i}" for i in range(40)]
    gets = [key for kind, key in counting.keys if kind == "GET"]
    assert len(gets) == 1 + 2 and all("/segments/" in key for key in gets[1:])  # the manifest, both segments
    # the non-event objects, and the first page of the session's names (listed with the manifest),
    # whose ETags vouch for the 40 events and which shows no tail
    assert counting.counts["LIST"] == 2


def test_a_forged_segment_reaching_past_a_true_one_is_never_used(scene: Scene) -> None:
    scene.store.compact("s", segment_size=5)  # the true segment 1-5
    forged = scene.forged_events([f"forged {i}" for i in range(6)])
    scene.plant(segment(1, 6), pack_segment("s", scene.manifest.uid, forged))  # reaches further: chosen first
    scene.plant(f"{6:020d}", forged[-1][1])
    refused_at(scene, 6)


class ListedETags(CountingStore):
    """Lists every object with the ETag ``etag`` gives it: a store whose listed ETags state no MD5."""

    def __init__(self, inner: ObjectStore, etag: Callable[[ObjectInfo], str]) -> None:
        super().__init__(inner)
        self._etag = etag

    def list_page(self, prefix: str, *, start_after: str = "", max_keys: int = 1000, delimiter: str = "") -> ListPage:
        page = super().list_page(prefix, start_after=start_after, max_keys=max_keys, delimiter=delimiter)
        objects = [ObjectInfo(o.key, o.size, self._etag(o), o.last_modified, o.metadata) for o in page.objects]
        return ListPage(objects, page.prefixes, page.truncated, page.next_start_after)


@pytest.mark.parametrize("etag", ['"0123456789abcdef0123456789abcdef-2"', "", '"0123456789abcdef0123456789abcdef"'])
def test_a_listing_whose_etags_are_not_the_events_md5_reads_the_loose_events(etag: str) -> None:
    """Multipart (``-``), none, or 32 hex digits that are not the MD5 (SSE-KMS): the segments are
    passed over and every event is read loose (correct, slower)."""
    memory = MemoryStore()
    store = Store(memory, auto_compact=None)
    writer = store.open("s", create=True)
    for i in range(40):
        writer.append(msg(f"m{i}"))
    assert store.compact("s", segment_size=16) == [(1, 16), (17, 32)]
    counting = ListedETags(memory, lambda _: etag)
    assert [m["content"] for m in Store(counting).context("s")] == [f"m{i}" for i in range(40)]
    names = [key.rsplit("/", 1)[-1] for kind, key in counting.keys if kind == "GET"]
    assert sorted(int(name) for name in names if name.isdigit()) == list(range(1, 41))


def test_the_local_store_lists_each_object_with_its_content_etag(tmp_path: Path) -> None:
    local = LocalStore(tmp_path / "store")
    local.create("a/b", b"one")
    local.create("a/c", b"two")
    listed = {info.key: info.etag for info in local.list("a/")}
    assert listed == {"a/b": local.head("a/b").etag, "a/c": local.head("a/c").etag}
    assert all(len(etag.strip('"')) == 32 for etag in listed.values())


def test_the_command_exits_5_on_a_forged_segment(tmp_path: Path) -> None:
    url = (tmp_path / "store").as_uri()

    def run(*args: str) -> Any:
        return CliRunner().invoke(cli, ["--store", url, *args], env={"EVSTORE_KEY": None, "EVSTORE_KEYRING": None})

    for i in range(5):
        assert run("append", "t", f"m{i}").exit_code == 0
    receipt = run("verify", "t", "--receipt").output.strip()
    attacker = CreateOnly(LocalStore(tmp_path / "store"))
    manifest = attacker.get("sessions/t/manifest").data
    found = msgspec.json.decode(manifest)
    events: list[tuple[int, bytes]] = []
    prev = sha256_hex(manifest)
    for seq in range(1, 7):
        env = Envelope(FORMAT_VERSION, "t", found["uid"], seq, format_ts(datetime.now(UTC)), "f" * 32, prev, None)
        data = encode_json(msgspec.structs.replace(env, body=MessagesBody([msg(f"forged {seq}")])))
        events.append((seq, data))
        prev = sha256_hex(data)
    attacker.create(f"sessions/t/{segment(1, 6)}", pack_segment("t", found["uid"], events))
    attacker.create(f"sessions/t/{6:020d}", events[-1][1])
    for args in (("replay", "t", "--format", "jsonl"), ("export", "t", "--format", "jsonl")):
        result = run(*args)
        assert result.exit_code == 5 and "forged" not in result.output
    assert run("verify", "t", "--expect", receipt).exit_code == 5


# ---- gc ------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 6, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def tick(self, delta: timedelta = timedelta(minutes=1)) -> None:
        self.now += delta


def test_planted_manifests_claiming_the_far_future_do_not_make_keep_delete_real_sessions() -> None:
    clock = Clock()
    memory = MemoryStore(clock=clock)
    store = Store(memory, clock=clock)
    for name in ("p1", "p2", "p3"):  # planted first, each claiming to be created in the year 9999
        manifest = new_manifest(store.shared, name, "ephemeral", None)
        manifest = msgspec.structs.replace(manifest, created="9999-12-31T23:59:59.999999Z")
        memory.create(store.layout.manifest_key(name), encode_manifest(manifest))
        clock.tick()
    for name in ("r1", "r2", "r3"):
        store.open(name, create=True, retention="ephemeral").append(msg(name))
        clock.tick()
    report = store.gc(keep=2, grace=timedelta(0))
    assert report.sessions_deleted == 4
    for name in ("r2", "r3"):
        assert [m["content"] for m in store.context(name)] == [name]
    for name in ("p1", "p2", "p3", "r1"):
        with pytest.raises(SessionNotFoundError):
            store.context(name)


def forked_parent(clock: Clock) -> tuple[MemoryStore, Store, list[str]]:
    memory = MemoryStore(clock=clock)
    store = Store(memory, clock=clock)
    writer = store.open("p", create=True)
    for i in range(5):
        writer.append(msg(f"m{i}"))
    return memory, store, [e.hash for e in store.replay("p")]


def plant_fork(memory: MemoryStore, store: Store, head_hash: str, *, marker: bool) -> None:
    """A fork of ``p`` at its head, as ``fork_manifest`` writes one, minus its check for a tombstone."""
    uid = msgspec.json.decode(memory.get(store.layout.manifest_key("p")).data)["uid"]
    fork = new_manifest(store.shared, "f", "permanent", ForkRef("p", uid, 5, head_hash, depth=1))
    if marker:
        memory.create(store.layout.fork_marker_key("p", "f", fork.uid), encode_json({"seq": 5, "uid": fork.uid}))
    memory.create(store.layout.manifest_key("f"), encode_manifest(fork))


@pytest.mark.parametrize("marker", [True, False])
def test_a_fork_planted_after_its_parents_delete_reads_and_keeps_nothing(marker: bool) -> None:
    clock = Clock()
    memory, store, hashes = forked_parent(clock)
    clock.tick()
    store.delete("p")
    clock.tick()
    plant_fork(memory, store, hashes[-1], marker=marker)
    with pytest.raises(IntegrityError) as raised:
        store.context("f")
    assert raised.value.session_id == "f" and raised.value.seq is None
    with pytest.raises(SessionNotFoundError) as gone:  # nor does it hold the deleted parent (or its id)
        store.context("p")
    assert gone.value.kept_for_forks == ()
    clock.tick(FENCE_HOLD + timedelta(minutes=1))
    report = store.gc(grace=timedelta(0))
    # the deleted parent is removed whole (its marker too); the planted manifest is all that is left
    assert report.sessions_removed == 1
    assert [info.key for info in memory.list("sessions/")] == ["sessions/f/manifest"]


def test_a_fork_made_before_its_parents_delete_still_reads_and_keeps_it() -> None:
    clock = Clock()
    _, store, _ = forked_parent(clock)
    clock.tick()
    store.fork("p", "f").append(msg("own"))
    clock.tick()
    store.delete("p")
    clock.tick(FENCE_HOLD + timedelta(minutes=1))
    store.gc(grace=timedelta(0))
    assert [m["content"] for m in store.context("f")] == [*TRUE, "own"]
