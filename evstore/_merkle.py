"""Merkle trees over a session's event hashes, as RFC 9162 (Certificate Transparency 2.0) defines
them, and its inclusion and consistency proofs: pure, no I/O.

A session of n events is the tree of n leaves whose i-th leaf (0-based) is the 32-byte SHA-256 of
event i + 1's stored bytes (the hash ``replay`` reports, that the next event's ``prev`` names).
Hashing (RFC 9162 2.1.1): a leaf is ``SHA-256(0x00 || leaf)``, an inner node
``SHA-256(0x01 || left || right)``, the tree of no leaves ``SHA-256()``; the split is at the
largest power of two below n, so a tree of n leaves never changes when leaves are added: each
larger tree extends it, which a consistency proof shows in O(log n) hashes.

The proofs are lists of node hashes (``PATH`` and ``PROOF`` of RFC 9162 2.1.3.1 and 2.1.4.1); a
checker needs no key and no event, only the leaf and the roots. Each check follows RFC 9162's
verification algorithm (2.1.3.2, 2.1.4.2) step by step, and refuses a proof with a hash too many
or too few, an index out of range, or a hash that is not 32 bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

HASH_BYTES = 32


def leaf_hash(leaf: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + leaf).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than ``n`` (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def root(leaves: Sequence[bytes]) -> bytes:
    """MTH(D[n]): the root of the tree of ``leaves`` (the leaf data, not yet hashed)."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    # bottom up, one level at a time: a node without a sibling is carried up as it is, which
    # gives the same tree as RFC 9162's split at the largest power of two
    level = [leaf_hash(leaf) for leaf in leaves]
    while len(level) > 1:
        paired = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0]


#: MTH(D[lo:hi]) of a range of the tree: how a proof is assembled from whatever holds the nodes
#: (the leaves themselves, or stored subtree roots; see ``_tree``).
NodeHash = Callable[[int, int], bytes]


def _over(leaves: Sequence[bytes]) -> NodeHash:
    return lambda lo, hi: root(leaves[lo:hi])


def inclusion_proof(index: int, leaves: Sequence[bytes]) -> list[bytes]:
    """PATH(index, D[n]): the hashes that, with leaf ``index``, rebuild the root."""
    return inclusion_path(index, len(leaves), _over(leaves))


def inclusion_path(index: int, size: int, node: NodeHash) -> list[bytes]:
    """PATH(index, D[size]) with the subtree roots ``node`` gives (RFC 9162 2.1.3.1)."""
    if not 0 <= index < size:
        raise ValueError(f"leaf {index} is not in a tree of {size}")
    path: list[bytes] = []
    lo, hi = 0, size
    while hi - lo > 1:  # top down; the path lists the siblings bottom up
        k = _split(hi - lo)
        if index < lo + k:
            path.append(node(lo + k, hi))
            hi = lo + k
        else:
            path.append(node(lo, lo + k))
            lo += k
    return path[::-1]


def consistency_proof(old_size: int, leaves: Sequence[bytes]) -> list[bytes]:
    """PROOF(m, D[n]): the hashes that show the tree of the first ``old_size`` leaves is a
    prefix of the tree of all of them (0 < m <= n; empty when m == n)."""
    return consistency_path(old_size, len(leaves), _over(leaves))


def consistency_path(old_size: int, size: int, node: NodeHash) -> list[bytes]:
    """PROOF(old_size, D[size]) with the subtree roots ``node`` gives (RFC 9162 2.1.4.1)."""
    if not 0 < old_size <= size:
        raise ValueError(f"a tree of {old_size} is not a prefix of a tree of {size}")
    path: list[bytes] = []
    lo, hi, m, whole = 0, size, old_size, True
    while m != hi - lo:  # SUBPROOF(m, D[lo:hi], whole), top down; listed bottom up
        k = _split(hi - lo)
        if m <= k:
            path.append(node(lo + k, hi))
            hi = lo + k
        else:
            path.append(node(lo, lo + k))
            lo, m, whole = lo + k, m - k, False
    if not whole:
        path.append(node(lo, hi))
    return path[::-1]


def _well_formed(*hashes: bytes) -> bool:
    return all(len(h) == HASH_BYTES for h in hashes)


def check_inclusion(index: int, size: int, leaf: bytes, path: Sequence[bytes], expected_root: bytes) -> bool:
    """Whether ``path`` proves leaf ``index`` (the leaf data) is in the tree of ``size`` leaves
    with root ``expected_root`` (RFC 9162 2.1.3.2)."""
    if not 0 <= index < size or not _well_formed(expected_root, *path):
        return False
    fn, sn = index, size - 1
    r = leaf_hash(leaf)
    for p in path:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and r == expected_root


def check_consistency(old_size: int, new_size: int, old_root: bytes, new_root: bytes, path: Sequence[bytes]) -> bool:
    """Whether ``path`` proves the tree of ``old_size`` leaves with root ``old_root`` is a prefix
    of the tree of ``new_size`` with root ``new_root`` (RFC 9162 2.1.4.2)."""
    if not 0 < old_size <= new_size or not _well_formed(old_root, new_root, *path):
        return False
    if old_size == new_size:
        return not path and old_root == new_root
    if not path:
        return False
    hashes = list(path)
    if old_size & (old_size - 1) == 0:  # an exact power of two: the old root is a node of the new tree
        hashes.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = hashes[0]
    for c in hashes[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and fr == old_root and sr == new_root
