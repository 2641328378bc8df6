"""Stored Merkle tree data (``evstore/_tree.py``): the checkpoint objects automatic compaction
writes every 256 events, tree heads and proofs assembled from a few of them, ``verify_tree``'s
consistency check in a handful of requests at any length, and forged or planted checkpoint
objects that never make a check or a proof say what the events do not."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pytest

from evstore import IntegrityError, InvalidInputError, LocalStore, MemoryStore, Store, check_proof
from evstore._backends import ObjectStore, StoredObject
from evstore._merkle import check_consistency, check_inclusion, consistency_path, inclusion_path, root
from evstore._proofs import TreeHead
from evstore._tree import TILE, Nodes, Tiles, checkpoints_needed, decode

from .helpers import CountingStore, msg
from .test_merkle import _evstore


def written(store: Store, session_id: str, events: int) -> None:
    writer = store.open(session_id, create=True)
    for i in range(events):
        writer.append(msg(f"m{i}"))


def event_hashes(store: Store, session_id: str) -> list[bytes]:
    return [bytes.fromhex(event.hash) for event in store.replay(session_id)]


class ByteCounting(CountingStore):
    """Counts requests, and the bytes its GETs returned."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.read = 0

    def get(self, key: str, *, max_bytes: int | None = None) -> StoredObject:
        stored = super().get(key, max_bytes=max_bytes)
        self.read += len(stored.data)
        return stored

    def reset(self) -> None:
        super().reset()
        self.read = 0


# ---- the tiles and the nodes, pure --------------------------------------------------------------


def checkpoints_of(leaves: list[bytes], sizes: set[int]) -> dict[int, bytes]:
    tiles, made = Tiles(), {}
    for leaf in leaves:
        tiles.add(leaf)
        if tiles.size in sizes:
            made[tiles.size] = tiles.encode("s", "u")
    return made


@pytest.mark.parametrize("deferred", [0, 1, 255, 256, 700, 65_536 + 300])
def test_deferred_leaves_make_the_checkpoint_objects_that_added_ones_do(deferred: int) -> None:
    """A resumed writer defers the leaves it read (``Tiles.defer``): every checkpoint it then
    writes, at the first boundary and after it, is byte for byte the one an eager writer writes."""
    rng = random.Random(deferred)
    leaves = [rng.randbytes(32) for _ in range(deferred + 3 * 256 + 5)]
    sizes = {size for size in range(256, len(leaves) + 1, 256) if size > deferred}
    lazy, made = Tiles(), {}
    for leaf in leaves[:deferred]:
        lazy.defer(leaf)
    assert lazy.size == deferred and not lazy.block
    for leaf in leaves[deferred:]:
        lazy.add(leaf)
        if lazy.size in sizes:
            made[lazy.size] = lazy.encode("s", "u")
    assert made == checkpoints_of(leaves, sizes) and len(made) == len(sizes) >= 3
    with pytest.raises(ValueError, match="32-byte"):
        Tiles().defer(b"short")


@pytest.mark.slow
def test_a_checkpoint_object_states_the_rfc_root_of_its_size_and_proofs_come_from_a_few() -> None:
    """Against ``_merkle.root`` of the leaves, at sizes with one level of tiles and with two
    (past 65,536 leaves, where a point in an older window needs that window's checkpoint)."""
    rng = random.Random(7)
    leaves = [rng.randbytes(32) for _ in range(66 * 1024)]
    size = len(leaves)
    points = [1, 200, 256, 300, 4096, 65536, 65537, 66000, size]
    needed: set[int] = {size}
    for point in points:
        needed |= checkpoints_needed(size, prefixes=[point], leaves=[point - 1])
    objects = checkpoints_of(leaves, needed | {256, 65536})
    assert decode("s", objects[256]).root() == root(leaves[:256])
    assert decode("s", objects[65536]).root() == root(leaves[:65536])
    assert decode("s", objects[size]).root() == root(leaves)
    assert checkpoints_needed(size, prefixes=[300]) == {size, 512, 65536}  # its block, its level-1 window
    assert checkpoints_needed(size, prefixes=[65536 + 512]) == {size}  # E's own window: E's object alone
    for point in points:
        nodes = Nodes()
        for at in checkpoints_needed(size, prefixes=[point], leaves=[point - 1]):
            nodes.add(decode("s", objects[at]))
        assert check_consistency(point, size, root(leaves[:point]), root(leaves), consistency_path(point, size, nodes.node))
        assert check_inclusion(point - 1, size, leaves[point - 1], inclusion_path(point - 1, size, nodes.node), root(leaves))


def test_the_path_builders_give_the_recursive_definitions_proofs() -> None:
    rng = random.Random(3)
    leaves = [rng.randbytes(32) for _ in range(600)]
    objects = checkpoints_of(leaves, {256, 512})
    nodes = Nodes()
    for data in objects.values():
        nodes.add(decode("s", data))
    from .test_merkle import path, subproof

    for m in (1, 100, 255, 256, 257, 511, 512):
        assert consistency_path(m, 512, nodes.node) == subproof(m, leaves[:512], True)
        assert inclusion_path(m - 1, 512, nodes.node) == path(m - 1, leaves[:512])


def test_a_checkpoint_object_edited_anywhere_is_refused() -> None:
    rng = random.Random(5)
    data = checkpoints_of([rng.randbytes(32) for _ in range(512)], {512})[512]
    header = data.index(b"uid u\n") + len(b"uid u\n")
    for at in [*range(header, len(data), 97), len(data) - 1]:  # every region of the hashes
        edited = bytearray(data)
        edited[at] ^= 1
        with pytest.raises(ValueError):
            decode("s", bytes(edited))
    for bad in (data[:-32], data + bytes(32), data.replace(b"\n512\n", b"\n768\n", 1), data.replace(b"evstore/s", b"evstore/t")):
        with pytest.raises(ValueError):
            decode("s", bad)
    root_line = data.split(b"\n")[2]
    with pytest.raises(ValueError):
        decode("s", data.replace(root_line, root_line[:-4] + b"AAA=", 1))


def test_checkpoint_objects_that_disagree_are_refused_together() -> None:
    rng = random.Random(9)
    leaves = [rng.randbytes(32) for _ in range(512)]
    honest = checkpoints_of(leaves, {256, 512})
    other = checkpoints_of([rng.randbytes(32) for _ in range(256)] + leaves[256:], {512})[512]
    nodes = Nodes()
    nodes.add(decode("s", honest[256]))
    with pytest.raises(ValueError):  # its level-1 entry for block 0 is not the root of block 0
        nodes.add(decode("s", other))


# ---- written by automatic compaction --------------------------------------------------------------


def test_automatic_compaction_writes_a_checkpoint_object_every_256_events_that_resumes_continue() -> None:
    store = Store(MemoryStore(), root="r")
    written(store, "s", 600)
    writer, _ = store.resume("s")  # a writer that read every event carries the tiles on
    for i in range(600, 800):
        writer.append(msg(f"m{i}"))
    hashes = event_hashes(store, "s")
    names = sorted(info.key for info in store.backend.list("r/sessions/s/ztree/"))
    assert names == [store.layout.tree_key("s", size) for size in (768, 512, 256)]
    for size in (256, 512, 768):
        checkpoint = decode("s", store.backend.get(store.layout.tree_key("s", size)).data)
        assert (checkpoint.size, checkpoint.root(), checkpoint.leaves) == (size, root(hashes[:size]), hashes[size - TILE : size])
    assert store.tree_head("s", checkpoint=True) == store.tree_head("s", size=768)
    counting = CountingStore(store.backend)
    for size in (256, 300, 768):  # a tree head to keep is read from the events; a proof from checkpoint objects
        counting.reset()
        assert Store(counting, root="r").tree_head("s", size=size).root == root(hashes[:size]).hex()
        assert not any("/ztree/" in key for _, key in counting.keys)  # no checkpoint object listed or read
        counting.reset()
        proof = Store(counting, root="r").prove("s", size, size=size)
        assert proof.root == root(hashes[:size]).hex() and check_proof(proof)
        assert counting.counts["GET"] <= 5 and counting.counts["LIST"] == 2


def test_no_automatic_compaction_no_checkpoint_objects() -> None:
    store = Store(MemoryStore(), root="r", auto_compact=None)
    written(store, "s", 300)
    assert list(store.backend.list("r/sessions/s/ztree/")) == []
    head = store.tree_head("s", size=100)
    assert store.verify_tree("s", head).stored is False  # from every event


# ---- verify --expect a tree head -----------------------------------------------------------------


@pytest.mark.parametrize("length", [300, 5000])
def test_verify_tree_proves_an_earlier_head_from_a_handful_of_objects_at_any_length(length: int) -> None:
    """4 GETs at most (the manifest, the newest checkpoint object, the one that ends the receipt's
    block when that is an older one, the event at the checkpoint) and 2 LISTs, under 64 KB, at
    300 events as at 5,000: the count does not grow with the length."""
    inner = MemoryStore()
    written(Store(inner, root="r"), "s", length)
    counting = ByteCounting(inner)
    store = Store(counting, root="r")
    newest = length // TILE * TILE
    for size in (200, 256, newest):
        expected = Store(inner, root="r").tree_head("s", size=size)
        counting.reset()
        check = store.verify_tree("s", expected)
        assert check.stored and check.fallback == ""
        assert check.tree_head.size == newest and check_proof(check.proof, expected)
        assert counting.counts["LIST"] == 2 and counting.counts["GET"] <= 4
        block_end = -(-size // TILE) * TILE  # the checkpoint object that holds the receipt's last leaves
        assert counting.counts["GET"] == 3 + (size % TILE != 0 and block_end != newest)
        assert counting.read <= 64 * 1024
        gets = [key for kind, key in counting.keys if kind == "GET"]
        assert store.layout.event_key("s", newest) in gets  # the tree's last leaf, tied to the session's event
    assert store.verify_tree("s", expected, full=True).tree_head == Store(inner, root="r").tree_head("s")


def test_a_tree_head_the_session_does_not_extend_is_refused_after_reading_every_event() -> None:
    inner = MemoryStore()
    written(Store(inner, root="r"), "s", 600)
    counting = CountingStore(inner)
    store = Store(counting, root="r")
    honest = store.tree_head("s", size=300)
    forged = TreeHead("s", 300, hashlib.sha256(b"another history").hexdigest())
    counting.reset()
    with pytest.raises(IntegrityError, match="does not extend the tree head of 300 events"):
        store.verify_tree("s", forged)
    assert counting.counts["GET"] > 5  # no "no" is taken from checkpoint objects: the events decided
    with pytest.raises(IntegrityError, match="fewer than the tree head's 700"):
        store.verify_tree("s", TreeHead("s", 700, honest.root))
    with pytest.raises(IntegrityError):
        store.verify_tree("s", TreeHead("s", 300, store.tree_head("s", size=301).root))
    for malformed in (TreeHead("s", 300, honest.root.upper()), TreeHead("s", 0, honest.root), TreeHead("t", 300, honest.root)):
        with pytest.raises(InvalidInputError):
            store.verify_tree("s", malformed)


def test_a_rewritten_event_is_seen_by_the_full_check_only(tmp_path: Path) -> None:
    """What docs/security.md states: the stored check reads the checkpoint objects and the event
    at the checkpoint, not the events before it; one who may overwrite events (not the writer
    role) can rewrite one the stored check does not read. ``full`` reads them all."""
    inner = MemoryStore()
    store = Store(inner, root="r")
    written(store, "s", 600)
    expected = store.tree_head("s", size=300)
    key = store.layout.event_key("s", 100)
    inner.replace(key, inner.get(key).data.replace(b'"m99"', b'"xx"'), etag=inner.get(key).etag)
    assert store.verify_tree("s", expected).stored  # the limit of the stored check, as documented
    with pytest.raises(IntegrityError):
        store.verify_tree("s", expected, full=True)


@pytest.mark.parametrize("length", [300, 5000])
def test_proofs_from_checkpoint_objects_take_a_handful_of_requests_and_hold(length: int) -> None:
    inner = MemoryStore()
    written(Store(inner, root="r"), "s", length)
    counting = CountingStore(inner)
    store = Store(counting, root="r")
    newest = length // TILE * TILE
    trusted = Store(inner, root="r").tree_head("s", size=newest)
    for seq in (1, 200, newest):
        counting.reset()
        proof = store.prove("s", seq, checkpoint=True)
        assert proof.size == newest and check_proof(proof, trusted)
        # manifest, 1 or 2 checkpoint objects, the proven event and the event at the checkpoint
        assert counting.counts["LIST"] == 2 and counting.counts["GET"] <= 5
    counting.reset()
    consistency = store.prove_consistency("s", 100, size=newest)
    assert consistency.new_size == newest and check_proof(consistency, Store(inner, root="r").tree_head("s", size=100))
    assert counting.counts["LIST"] == 2 and counting.counts["GET"] <= 4


def test_a_forks_writer_that_resumed_writes_checkpoint_objects_over_its_inherited_events() -> None:
    store = Store(MemoryStore(), root="r")
    written(store, "p", 300)
    store.fork("p", "c", at=200)
    writer, _ = store.resume("c")
    for i in range(400):
        writer.append(msg(f"c{i}"))
    assert [info.key for info in store.backend.list("r/sessions/c/ztree/")] == [
        store.layout.tree_key("c", 512),
        store.layout.tree_key("c", 256),
    ]
    check = store.verify_tree("c", store.tree_head("c", size=150))  # inside the parent's events
    assert check.stored and check.tree_head == store.tree_head("c", size=512)


def test_reads_never_list_checkpoint_objects() -> None:
    """They sort after young/: a session's listing of its other objects stops there, so even
    thousands of them (planted, or a long session's) cost a read no LIST page."""
    inner = MemoryStore()
    store = Store(inner, root="r")
    written(store, "s", 40)
    counting = CountingStore(inner)
    reader = Store(counting, root="r")
    assert len(reader.context("s")) == 40
    before = dict(counting.counts)
    for size in range(1, 2501):
        inner.create(store.layout.tree_key("s", size * TILE), b"junk")
    counting.reset()
    assert len(reader.context("s")) == 40
    assert dict(counting.counts) == before


# ---- forged and planted checkpoint objects ---------------------------------------------------------


def plant(store: Store, size: int, data: bytes) -> None:
    key = store.layout.tree_key("s", size)
    if store.backend.list_page(key).objects:
        store.backend.delete_many([key])  # as if the attacker had created it before the writer
    store.backend.create(key, data)


def forged_tree(store: Store, size: int, last: bytes, seed: int = 1) -> bytes:
    """A self-consistent checkpoint object of ``size`` whose last leaf is ``last`` (the real
    event's hash, which anyone who may read can know) and whose other leaves are invented."""
    rng = random.Random(seed)
    tiles = Tiles()
    for _ in range(size - 1):
        tiles.add(rng.randbytes(32))
    tiles.add(last)
    manifest_uid = decode("s", store.backend.get(store.layout.tree_key("s", 256)).data).uid
    return tiles.encode("s", manifest_uid)


def edited_last_byte(data: bytes) -> bytes:
    """``data`` with its last byte changed: always changed (a byte set to 0 was already 0 in one
    run of 256, and the "forgery" was then the true object)."""
    return data[:-1] + bytes([data[-1] ^ 1])


def test_planted_or_forged_checkpoint_objects_never_make_a_check_say_what_the_events_do_not() -> None:
    store = Store(MemoryStore(), root="r")
    written(store, "s", 600)
    hashes = event_hashes(store, "s")
    expected = store.tree_head("s", size=300)
    truth = store.tree_head("s")
    forgeries = {
        "self-consistent, the real last leaf, invented leaves before it": forged_tree(store, 512, hashes[511]),
        "a last leaf that is no event of the session": forged_tree(store, 512, bytes(32)),
        "an edited hash": edited_last_byte(store.backend.get(store.layout.tree_key("s", 512)).data),
        "not a checkpoint object": b"junk",
    }
    for what, data in forgeries.items():
        plant(store, 512, data)
        check = store.verify_tree("s", expected)
        assert not check.stored and check.tree_head == truth, what  # from every event: the truth
        with pytest.raises(IntegrityError):
            store.verify_tree("s", TreeHead("s", 300, hashlib.sha256(what.encode()).hexdigest()))
        proof = store.prove("s", 400, checkpoint=True)
        assert check_proof(proof, truth if proof.size == 600 else store.tree_head("s", size=proof.size)), what
        assert bytes.fromhex(proof.leaf) == hashes[399]


def test_checkpoint_names_planted_past_the_head_cost_requests_not_truth() -> None:
    store = Store(MemoryStore(), root="r")
    written(store, "s", 600)
    data = store.backend.get(store.layout.tree_key("s", 512)).data
    plant(store, 10**6, data.replace(b"\n512\n", b"\n1000000\n", 1))
    plant(store, 768, b"junk")
    expected = store.tree_head("s", size=300)
    check = store.verify_tree("s", expected)
    assert check.stored and check.tree_head.size == 512  # the newest that is tied to its event
    assert store.tree_head("s", checkpoint=True) == store.tree_head("s", size=512)


# ---- the command -----------------------------------------------------------------------------------


def test_verify_expect_takes_a_tree_head_file(tmp_path: Path) -> None:
    store = tmp_path / "store"
    written(Store(LocalStore(store)), "s", 300)
    head = _evstore("tree-head", "s", "--size", "256", store=store)
    (tmp_path / "head").write_text(head.stdout)
    ok = _evstore("verify", "s", "--expect", str(tmp_path / "head"), store=store)
    assert ok.exit_code == 0, ok.output
    lines = ok.stdout.splitlines()
    assert lines[0] == "ok: extends the tree head of 256 events: a consistency proof to the tree of 256 (checkpoint objects)"
    assert lines[1:3] == ["evstore/s", "256"]
    full = _evstore("verify", "s", "--expect", "-", "--full", store=store, stdin=head.stdout_bytes)
    assert full.exit_code == 0 and "300 events, chain intact" in full.stdout and "(every event, read)" in full.stdout
    (tmp_path / "other").write_text(head.stdout.replace(head.stdout.splitlines()[2], "A" * 43 + "="))
    refused = _evstore("verify", "s", "--expect", str(tmp_path / "other"), store=store)
    assert refused.exit_code == 5 and "does not extend the tree head of 256 events" in refused.stderr
    (tmp_path / "junk").write_text("not a tree head\n")
    assert _evstore("verify", "s", "--expect", str(tmp_path / "junk"), store=store).exit_code == 2
    assert _evstore("verify", "s", "--full", store=store).exit_code == 2
    checkpoint = _evstore("tree-head", "s", "--checkpoint", store=store)
    assert checkpoint.stdout == head.stdout
    proof = _evstore("prove", "s", "7", "--checkpoint", store=store)
    (tmp_path / "proof").write_bytes(proof.stdout_bytes)
    assert _evstore("check-proof", str(tmp_path / "proof"), "--tree-head", str(tmp_path / "head"), store=store).exit_code == 0
