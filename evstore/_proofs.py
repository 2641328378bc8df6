"""Merkle proofs of a session's history (``_merkle``'s RFC 9162 trees over its event hashes):
tree heads, inclusion and consistency proofs, and their checks.

A proof is made from the checkpoint objects automatic compaction leaves every 256 events
(``_tree``: a handful of small objects, whatever the session's length) when they hold what it
needs and agree with each other and with the session's events they are tied to (the event at the
tree's size, and the proven event); otherwise, and for the tree of all events by default, by
reading the session's events (their hashes, chained and checked as every read is: no key is
needed, sealed bodies stay sealed), at a replay's requests. Either way the proof is checked
before it is returned. A proof is checked with no store and no key: the JSON of a proof (``to_json``) is what an auditor is
handed, and ``check_proof`` (or ``evstore check-proof``) answers from it alone. A tree head's text is
a C2SP checkpoint note body (origin ``evstore/<session id>``, tree size, base64 root); signing it
is left to the operator's note signer.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from . import _merkle, _read, _tree
from ._backends import ObjectMissing
from ._context import StoreContext
from ._errors import EvstoreError, IntegrityError, InvalidInputError
from ._ids import parse_tree

#: The largest proof a checker reads: a tree of 2**64 leaves needs at most 128 hashes.
MAX_PROOF_BYTES = 64 * 1024
_MAX_PATH = 128


class TreeHead(msgspec.Struct, frozen=True):
    """The root of the tree of a session's first ``size`` events."""

    session_id: str
    size: int
    root: str  # hex

    def checkpoint(self) -> str:
        """The C2SP checkpoint body: origin, size and base64 root, one per line."""
        return f"evstore/{self.session_id}\n{self.size}\n{base64.b64encode(bytes.fromhex(self.root)).decode()}\n"

    @classmethod
    def from_checkpoint(cls, text: str) -> TreeHead:
        """The tree head a checkpoint body states (its first three lines; a signature block
        after them is the signer's to check); ``InvalidInputError`` for anything else."""
        lines = text.split("\n")
        if len(lines) < 4 or not lines[0].startswith("evstore/") or not lines[1].isdigit() or lines[1] != str(int(lines[1])):
            raise InvalidInputError("not an evstore tree head: origin evstore/<session>, size, base64 root")
        try:
            digest = base64.b64decode(lines[2], validate=True)
        except ValueError:
            digest = b""
        if len(digest) != _merkle.HASH_BYTES or base64.b64encode(digest).decode() != lines[2]:
            raise InvalidInputError("not an evstore tree head: its root is not 32 bytes of base64")
        return cls(lines[0].removeprefix("evstore/"), int(lines[1]), digest.hex())


class InclusionProof(msgspec.Struct, frozen=True, tag="inclusion"):
    """That event ``seq`` (its hash ``leaf``) is in the tree of the session's first ``size`` events."""

    session_id: str
    seq: int
    size: int
    leaf: str  # hex: the event's hash
    path: list[str]  # hex
    root: str  # hex


class ConsistencyProof(msgspec.Struct, frozen=True, tag="consistency"):
    """That the tree of the first ``old_size`` events is a prefix of the tree of ``new_size``."""

    session_id: str
    old_size: int
    new_size: int
    old_root: str
    new_root: str
    path: list[str]


Proof = InclusionProof | ConsistencyProof


def leaves(ctx: StoreContext, session_id: str, size: int | None = None) -> list[bytes]:
    """The leaf data of the session's first ``size`` events (all, by default): their hashes, read
    and chained in order (a fork's inherited events included)."""
    loaded = _read.load(ctx, session_id)
    found = [bytes.fromhex(raw.hash) for _, raw in _read.lineage(ctx, loaded, 1, size)]
    if size is not None and len(found) < size:
        raise InvalidInputError(f"session {session_id!r} has {len(found)} events, not {size}")
    return found


#: How many of the newest checkpoint names a reader tries (each costs a GET of its event): names
#: planted past the head cost requests and then the replay, never a wrong answer.
_CANDIDATES = 3


@dataclass(frozen=True)
class StoredTree:
    """Subtree roots from checkpoint objects, tied to the session: the tree of ``checkpoint``
    events (a checkpoint object's size) whose leaves at ``tied`` are the hashes of the session's
    events stored there now (read in the same round)."""

    checkpoint: int
    nodes: _tree.Nodes
    tied: frozenset[int]

    def root(self, size: int) -> bytes:
        return self.nodes.root(size)


def checkpoint_sizes(ctx: StoreContext, session_id: str) -> list[int]:
    """The sizes of the session's newest checkpoint objects, newest first: one LIST."""
    prefix = ctx.layout.session_prefix(session_id)
    page = ctx.backend.list_page(ctx.layout.tree_prefix(session_id), max_keys=_CANDIDATES)
    names = (parse_tree(info.key[len(prefix) :]) for info in page.objects)
    return [size for size in names if size is not None and size % _tree.TILE == 0]  # none is written at another size


def stored_tree(
    ctx: StoreContext,
    loaded: _read.Loaded,
    sizes: Sequence[int],
    *,
    least: int,
    tie: Sequence[int] = (),
    leaves: Sequence[int] = (),
    prefixes: Sequence[int] = (),
) -> tuple[StoredTree | None, str]:
    """The stored tree at the newest of ``sizes`` (checkpoint objects listed, newest first) of
    at least ``least`` events that holds the nodes of proofs about ``leaves`` (leaf indexes) and
    ``prefixes`` (tree sizes), with its last leaf and the leaves at ``tie`` (leaf indexes) checked
    against the session's events: (the tree, "") or (None, why not). Reads, side by side, the
    checkpoint objects ``_tree.checkpoints_needed`` names and the events it ties."""
    why = "no checkpoint object (written at compaction, every 256 events) of that many events"
    for size in sizes:
        if size < least:
            break
        tree, why = _tree_at(ctx, loaded, size, tie, leaves, prefixes)
        if tree is not None:
            return tree, ""
    return None, why


def _tree_at(
    ctx: StoreContext, loaded: _read.Loaded, size: int, tie: Sequence[int], leaves: Sequence[int], prefixes: Sequence[int]
) -> tuple[StoredTree | None, str]:
    session_id = loaded.manifest.sid
    tied = sorted({size - 1, *tie})
    needed = sorted(_tree.checkpoints_needed(size, leaves=[*leaves, *tied], prefixes=prefixes))
    pool = ctx.executor()

    def checkpoint(at: int) -> bytes | None:
        try:
            return ctx.backend.get(ctx.layout.tree_key(session_id, at), max_bytes=_tree.MAX_CHECKPOINT_BYTES).data
        except ObjectMissing:
            return None

    objects = [pool.submit(checkpoint, at) for at in needed]
    events = [pool.submit(_read.get_event_bytes, ctx, session_id, index + 1) for index in tied]
    nodes = _tree.Nodes()
    why = ""
    for at, sent in zip(needed, objects, strict=True):
        try:
            data = sent.result()
            if data is None:
                why = why or f"no checkpoint object of {at} events"
                continue
            found = _tree.decode(session_id, data)
            if found.uid != loaded.manifest.uid:
                raise ValueError("of another incarnation of the session")
            nodes.add(found)
        except (ValueError, EvstoreError) as exc:
            why = why or f"the checkpoint object of {at} events is refused: {exc}"[:160]
    for index, sent in zip(tied, events, strict=True):
        try:
            data = sent.result()
        except EvstoreError as exc:
            why = why or f"event {index + 1} could not be read: {exc}"[:160]
            continue
        if data is None:
            why = why or f"event {index + 1} is not there"
        elif (0, index) not in nodes.held:
            why = why or f"no checkpoint object holds event {index + 1}"
        elif nodes.held[0, index] != hashlib.sha256(data).digest():
            why = why or f"event {index + 1} is not the one the checkpoint objects name"
        else:
            try:
                _read.decode_at(ctx, loaded.manifest, index + 1, data)  # an event of this session, at its seq
            except EvstoreError:
                why = why or f"event {index + 1} is not an event of this session"
    if why:
        return None, why
    return StoredTree(size, nodes, frozenset(tied)), ""


def _stored(
    ctx: StoreContext,
    session_id: str,
    *,
    least: int,
    tie: Sequence[int] = (),
    leaves: Sequence[int] = (),
    prefixes: Sequence[int] = (),
) -> tuple[StoredTree | None, str]:
    """``stored_tree`` for a session, in two rounds: its manifest GET, the LIST of its tombstone
    (a deleted session is refused as every read refuses it) and the LIST of its checkpoint names,
    side by side; then the checkpoint objects and the events they are tied to. Not the listing of
    all its other objects, which grows with its length."""
    pool = ctx.executor()
    listed = pool.submit(checkpoint_sizes, ctx, session_id)
    tombstone = pool.submit(ctx.backend.list_page, ctx.layout.tombstone_key(session_id), max_keys=1)
    try:
        found = _read.read_manifest(ctx, session_id)
    finally:
        sizes, marked = listed.result(), bool(tombstone.result().objects)
    if found is None:
        raise _read.gone(ctx, session_id)
    loaded = _read.Loaded(*found, _read.Meta(tombstone=marked))
    if marked and _read.tombstoned(ctx, loaded.manifest, loaded.meta):
        raise _read.deleted(ctx, loaded.manifest, loaded.meta)
    return stored_tree(ctx, loaded, sizes, least=least, tie=tie, leaves=leaves, prefixes=prefixes)


def tree_head(ctx: StoreContext, session_id: str, size: int | None = None, *, checkpoint: bool = False) -> TreeHead:
    """The tree head of the first ``size`` events (all by default), read from every event: what an
    auditor keeps. With ``checkpoint``, the newest checkpoint object's, read from it (a few
    requests; only as trustworthy as the checkpoint objects: docs/security.md), or, when none
    serves, that of every event."""
    if checkpoint:
        stored, _ = _stored(ctx, session_id, least=1)
        if stored is not None:
            return TreeHead(session_id, stored.checkpoint, stored.root(stored.checkpoint).hex())
    found = leaves(ctx, session_id, size)
    return TreeHead(session_id, len(found), _merkle.root(found).hex())


def prove(ctx: StoreContext, session_id: str, seq: int, size: int | None = None, *, checkpoint: bool = False) -> InclusionProof:
    """That event ``seq`` is in the tree of the first ``size`` events (all by default; with
    ``checkpoint``, the newest checkpoint's), from checkpoint objects where they serve; else from
    every event, in the tree of ``size`` (all events when it is not given)."""
    if size is not None or checkpoint:
        least = max(seq, size or 1)
        tie = [seq - 1] + ([size - 1] if size else [])
        stored, _ = _stored(ctx, session_id, least=least, tie=tie, leaves=[seq - 1], prefixes=[size] if size else ())
        if stored is not None:
            at = size or stored.checkpoint
            proof = _inclusion(session_id, seq, at, stored.nodes.held[0, seq - 1], stored.nodes.node)
            if proof is not None:
                return proof
    found = leaves(ctx, session_id, size)
    if not 1 <= seq <= len(found):
        raise InvalidInputError(f"seq {seq} is not in the tree of {len(found)} events of {session_id!r}")
    proof = _inclusion(session_id, seq, len(found), found[seq - 1], lambda lo, hi: _merkle.root(found[lo:hi]))
    assert proof is not None  # the proof of the leaves read holds
    return proof


def _inclusion(session_id: str, seq: int, size: int, leaf: bytes, node: _merkle.NodeHash) -> InclusionProof | None:
    """The inclusion proof from ``node``'s subtree roots, checked; None when they do not hold it."""
    try:
        path, root = _merkle.inclusion_path(seq - 1, size, node), node(0, size)
    except KeyError:
        return None
    proof = InclusionProof(session_id, seq, size, leaf.hex(), [p.hex() for p in path], root.hex())
    return proof if check_proof(proof) else None


def prove_consistency(
    ctx: StoreContext, session_id: str, old_size: int, new_size: int | None = None, *, checkpoint: bool = False
) -> ConsistencyProof:
    """That the tree of the first ``old_size`` events is a prefix of the tree of ``new_size``
    (all by default; with ``checkpoint``, the newest checkpoint's), from checkpoint objects
    where they serve; else from every event, in the tree of ``new_size`` (all when not given)."""
    if new_size is not None or checkpoint:
        least = max(old_size, new_size or 1)
        stored, _ = _stored(
            ctx,
            session_id,
            least=least,
            tie=[new_size - 1] if new_size else (),
            prefixes=[old_size, *([new_size] if new_size else [])],
        )
        if stored is not None:
            proof = _consistency(session_id, old_size, new_size or stored.checkpoint, stored.nodes.node)
            if proof is not None:
                return proof
    found = leaves(ctx, session_id, new_size)
    if not 1 <= old_size <= len(found):
        raise InvalidInputError(f"a tree of {old_size} events is not a prefix of the {len(found)} of {session_id!r}")
    proof = _consistency(session_id, old_size, len(found), lambda lo, hi: _merkle.root(found[lo:hi]))
    assert proof is not None  # the proof of the leaves read holds
    return proof


def _consistency(session_id: str, old_size: int, new_size: int, node: _merkle.NodeHash) -> ConsistencyProof | None:
    """The consistency proof from ``node``'s subtree roots, checked; None when they do not hold it."""
    if not 1 <= old_size <= new_size:
        return None
    try:
        path, old_root, new_root = _merkle.consistency_path(old_size, new_size, node), node(0, old_size), node(0, new_size)
    except KeyError:
        return None
    proof = ConsistencyProof(session_id, old_size, new_size, old_root.hex(), new_root.hex(), [p.hex() for p in path])
    return proof if check_proof(proof) else None


class TreeCheck(msgspec.Struct, frozen=True):
    """What ``verify_tree`` proved: that the session's tree ``tree_head`` extends ``expected``."""

    session_id: str
    expected: TreeHead
    #: The tree proven to extend ``expected``: the newest checkpoint object's (``stored``), its last
    #: leaf the session's event at its size as stored now; or the tree of every event, read.
    tree_head: TreeHead
    proof: ConsistencyProof
    #: Whether the proof came from checkpoint objects (a handful of requests), not from every event.
    stored: bool
    #: Why the checkpoint objects did not serve (empty when they did, or when ``full`` was asked).
    fallback: str = ""


def verify_tree(ctx: StoreContext, session_id: str, expected: TreeHead, *, full: bool = False) -> TreeCheck:
    """That the session still extends the tree head ``expected`` (a C2SP checkpoint body from
    ``tree_head``): a consistency proof from it to the newest checkpoint object's tree, assembled
    from the checkpoint objects (``stored_tree``: the tree's last leaf tied to the session's event
    there) and checked step by step (RFC 9162 2.1.4.2), in a handful of requests whatever the
    length. When they cannot serve, or do not show it, or with ``full``: the tree of every event,
    read and chained (``leaves``), and ``IntegrityError`` unless it extends ``expected``.

    What the stored proof shows, and does not, is in docs/security.md: the checkpoint objects are
    derived data, so a "yes" from them is as good as they are; a "no" is never taken from them."""
    if expected.session_id != session_id:
        raise InvalidInputError(f"the tree head is of session {expected.session_id!r}, not {session_id!r}")
    old_root = _hashes([expected.root])
    if old_root is None or expected.size < 1:
        raise InvalidInputError("not a tree head: its size is below 1 or its root is not 64 lowercase hex digits")
    fallback = ""
    if not full:
        stored, fallback = _stored(ctx, session_id, least=expected.size, prefixes=[expected.size])
        if stored is not None:
            proof = _consistency(session_id, expected.size, stored.checkpoint, stored.nodes.node)
            if proof is not None and proof.old_root == expected.root:
                head = TreeHead(session_id, stored.checkpoint, proof.new_root)
                return TreeCheck(session_id, expected, head, proof, True)
            fallback = "the checkpoint objects do not show it"
    found = leaves(ctx, session_id)
    if len(found) < expected.size:
        raise IntegrityError(session_id, None, f"has {len(found)} events, fewer than the tree head's {expected.size} (truncated)")
    path = _merkle.consistency_proof(expected.size, found)
    new_root = _merkle.root(found)
    if not _merkle.check_consistency(expected.size, len(found), old_root[0], new_root, path):
        raise IntegrityError(session_id, None, f"does not extend the tree head of {expected.size} events (history rewritten)")
    proof = ConsistencyProof(session_id, expected.size, len(found), expected.root, new_root.hex(), [p.hex() for p in path])
    return TreeCheck(session_id, expected, TreeHead(session_id, len(found), new_root.hex()), proof, False, fallback)


def to_json(proof: Proof) -> bytes:
    return msgspec.json.encode(proof)


def from_json(data: bytes) -> Proof:
    """A proof from its JSON; ``InvalidInputError`` for anything else (too large, malformed)."""
    if len(data) > MAX_PROOF_BYTES:
        raise InvalidInputError(f"a proof is at most {MAX_PROOF_BYTES} bytes")
    try:
        return msgspec.json.decode(data, type=Proof)
    except msgspec.ValidationError as exc:
        raise InvalidInputError(f"not a proof: {exc}"[:200]) from None
    except msgspec.DecodeError:
        raise InvalidInputError("not a proof: not JSON") from None


def _hashes(values: list[str]) -> list[bytes] | None:
    """32-byte hashes from lowercase hex, or None (a checker takes no other spelling)."""
    out = []
    for value in values:
        if len(value) != 2 * _merkle.HASH_BYTES or value != value.lower():
            return None
        try:
            out.append(bytes.fromhex(value))
        except ValueError:
            return None
    return out


def check_proof(proof: Proof, trusted: TreeHead | None = None) -> bool:
    """Whether the proof holds (RFC 9162's checks: ``_merkle``) against the tree head the
    checker ``trusted`` (one it kept or whose signature it checked): an inclusion proof must be
    for that tree, a consistency proof must start from it. Without one, only that the proof is
    sound in itself: its tree size and root are the prover's word until compared with a head."""
    if len(proof.path) > _MAX_PATH:
        return False
    if trusted is not None:
        stated = (proof.size, proof.root) if isinstance(proof, InclusionProof) else (proof.old_size, proof.old_root)
        if (proof.session_id, *stated) != (trusted.session_id, trusted.size, trusted.root):
            return False
    if isinstance(proof, InclusionProof):
        hashes = _hashes([proof.leaf, proof.root, *proof.path])
        return hashes is not None and _merkle.check_inclusion(proof.seq - 1, proof.size, hashes[0], hashes[2:], hashes[1])
    hashes = _hashes([proof.old_root, proof.new_root, *proof.path])
    return hashes is not None and _merkle.check_consistency(proof.old_size, proof.new_size, hashes[0], hashes[1], hashes[2:])
