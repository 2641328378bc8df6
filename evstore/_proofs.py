"""Merkle proofs of a session's history (``_merkle``'s RFC 9162 trees over its event hashes):
tree heads, inclusion and consistency proofs, and their checks.

A proof is made by reading the session's events (their hashes, chained and checked as every read
is: no key is needed, sealed bodies stay sealed), so making one costs a replay's requests. A proof
is checked with no store and no key: the JSON of a proof (``to_json``) is what an auditor is
handed, and ``check_proof`` (or ``evstore check-proof``) answers from it alone. A tree head's text is
a C2SP checkpoint note body (origin ``evstore/<session id>``, tree size, base64 root); signing it
is left to the operator's note signer.
"""

from __future__ import annotations

import base64

import msgspec

from . import _merkle, _read
from ._context import StoreContext
from ._errors import InvalidInputError

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


def tree_head(ctx: StoreContext, session_id: str, size: int | None = None) -> TreeHead:
    found = leaves(ctx, session_id, size)
    return TreeHead(session_id, len(found), _merkle.root(found).hex())


def prove(ctx: StoreContext, session_id: str, seq: int, size: int | None = None) -> InclusionProof:
    found = leaves(ctx, session_id, size)
    if not 1 <= seq <= len(found):
        raise InvalidInputError(f"seq {seq} is not in the tree of {len(found)} events of {session_id!r}")
    path = _merkle.inclusion_proof(seq - 1, found)
    return InclusionProof(
        session_id, seq, len(found), found[seq - 1].hex(), [p.hex() for p in path], _merkle.root(found).hex()
    )


def prove_consistency(ctx: StoreContext, session_id: str, old_size: int, new_size: int | None = None) -> ConsistencyProof:
    found = leaves(ctx, session_id, new_size)
    if not 1 <= old_size <= len(found):
        raise InvalidInputError(f"a tree of {old_size} events is not a prefix of the {len(found)} of {session_id!r}")
    path = _merkle.consistency_proof(old_size, found)
    return ConsistencyProof(
        session_id,
        old_size,
        len(found),
        _merkle.root(found[:old_size]).hex(),
        _merkle.root(found).hex(),
        [p.hex() for p in path],
    )


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

