"""Stored Merkle tree data: the tiles a writer leaves at every 256th event, from which a tree head,
an inclusion proof or a consistency proof is assembled from a few small objects, not a replay.
Pure: no I/O.

A session's tree (``_merkle``: RFC 9162 over its event hashes) has, for every aligned range of
2**(8L) leaves (L >= 1), a perfect subtree whose root is stored once it is complete: the
"level-L entries" (C2SP tlog-tiles' tiles of 256 hashes per level, with the leaves themselves as
level 0). A *checkpoint object* at size E (a multiple of ``TILE``) holds:

* its C2SP checkpoint body (origin ``evstore/<session id>``, E, the base64 root) and a line naming
  the session's uid;
* the leaf data of its last 256 leaves (the event hashes of events E-255..E);
* for each level L >= 1 with an entry, the partial tile of that level: the level-L entries from
  the start of the window of 256 that holds the newest one up to that newest one.

From one checkpoint alone the root of the tree of E leaves is computed (the checker recomputes
it; ``decode`` refuses an object whose stated root, or any hash it holds twice over, disagrees).
A range near an older point m needs the leaves of m's block (the checkpoint that ends that block)
and, per level, the window holding m when E's window at that level is a later one (the
checkpoint that ends that window): at most 1 + 1 + levels objects, levels <= 3 below 2**24 events.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, field

from . import _merkle

#: Leaves per block and entries per tile: a checkpoint object is written every ``TILE`` events.
TILE_HEIGHT = 8
TILE = 1 << TILE_HEIGHT
_H = _merkle.HASH_BYTES
#: A checkpoint object is at most this large: the leaves and one tile per level (8 levels: 2**64).
MAX_CHECKPOINT_BYTES = 1024 + _H * TILE * 9


def _perfect_root(nodes: list[bytes]) -> bytes:
    """The root over ``nodes``, a power-of-two count of equal perfect subtrees' roots."""
    while len(nodes) > 1:
        nodes = [_merkle.node_hash(nodes[i], nodes[i + 1]) for i in range(0, len(nodes), 2)]
    return nodes[0]


def tile_spans(size: int) -> list[tuple[int, int]]:
    """For each level L >= 1 that has an entry at ``size`` leaves: (first, count) of the entries
    its partial tile holds, the window of ``TILE`` holding the newest one up to it."""
    spans = []
    level = 1
    while (count := size >> (TILE_HEIGHT * level)) > 0:
        first = ((count - 1) >> TILE_HEIGHT) << TILE_HEIGHT
        spans.append((first, count - first))
        level += 1
    return spans


@dataclass
class Tiles:
    """What a writer keeps of its session's tree to write the next checkpoint object: the leaves
    of the newest block and each level's partial tile (O(256 x levels) hashes). ``add`` a leaf
    (an event hash) per event, in order from seq 1.

    A writer that resumes a session adds every event it read, and most write no checkpoint before
    they end (one append in 256 does): ``defer`` only counts such a leaf and keeps its 32 bytes,
    and the hashing waits for ``encode`` (O(size) bytes held until then, not O(256 x levels))."""

    size: int = 0
    block: list[bytes] = field(default_factory=list)
    levels: list[list[bytes]] = field(default_factory=list)
    #: leaves counted in ``size`` but not yet hashed into ``block`` and ``levels``, 32 bytes each
    deferred: bytearray = field(default_factory=bytearray)

    def defer(self, leaf: bytes) -> None:
        """``add``, with the hashing left to the next ``encode``."""
        if len(leaf) != _H:
            raise ValueError("a leaf is a 32-byte event hash")
        self.deferred += leaf
        self.size += 1

    def add(self, leaf: bytes) -> None:
        if self.deferred:
            self.defer(leaf)
            return
        if len(leaf) != _H:
            raise ValueError("a leaf is a 32-byte event hash")
        self._hash_in(leaf)

    def _hash_in(self, leaf: bytes) -> None:
        if len(self.block) == TILE:
            self.block = []
        self.block.append(leaf)
        self.size += 1
        if len(self.block) == TILE:
            self._push(0, _merkle.root(self.block))

    def _settle(self) -> None:
        """Hash the deferred leaves in, in order."""
        deferred, self.deferred = self.deferred, bytearray()
        self.size -= len(deferred) // _H
        for start in range(0, len(deferred), _H):
            self._hash_in(bytes(deferred[start : start + _H]))

    def _push(self, level: int, entry: bytes) -> None:
        """Add a complete subtree root to the tile of level ``level + 1``."""
        if len(self.levels) == level:
            self.levels.append([])
        tile = self.levels[level]
        if len(tile) == TILE:
            tile.clear()
        tile.append(entry)
        if len(tile) == TILE:
            self._push(level + 1, _perfect_root(list(tile)))

    def encode(self, session_id: str, uid: str) -> bytes:
        """The checkpoint object at this size (a positive multiple of ``TILE``)."""
        if not self.size or self.size % TILE:
            raise ValueError(f"a checkpoint object is written at a multiple of {TILE} events, not {self.size}")
        self._settle()
        checkpoint = Checkpoint(session_id, uid, self.size, list(self.block), [list(t) for t in self.levels])
        return checkpoint.text().encode() + b"".join(checkpoint.leaves) + b"".join(h for t in checkpoint.tiles for h in t)


@dataclass(frozen=True)
class Checkpoint:
    """A decoded checkpoint object (``decode``): consistent in itself, not yet tied to any event."""

    session_id: str
    uid: str
    size: int
    leaves: list[bytes]  # leaf data of leaves size-256 .. size-1
    tiles: list[list[bytes]]  # tiles[L-1]: the partial tile of level L (``tile_spans``)

    def node(self) -> Nodes:
        nodes = Nodes()
        nodes.add(self)
        return nodes

    def root(self) -> bytes:
        return self.node().root(self.size)

    def text(self) -> str:
        """The C2SP checkpoint body, then the line naming the session's incarnation."""
        return f"evstore/{self.session_id}\n{self.size}\n{base64.b64encode(self.root()).decode()}\nuid {self.uid}\n"


def decode(session_id: str, data: bytes) -> Checkpoint:
    """The checkpoint object of ``session_id`` in ``data``; ``ValueError`` for anything that is not
    exactly one (wrong session, size, length) or whose hashes disagree with each other."""
    if len(data) > MAX_CHECKPOINT_BYTES:
        raise ValueError("too large for a checkpoint object")
    parts = data.split(b"\n", 4)
    if len(parts) != 5:
        raise ValueError("not a checkpoint object")
    origin, size_text, _root, uid_line, hashes = parts  # the root is recomputed and compared below
    if origin != f"evstore/{session_id}".encode() or not size_text.isdigit() or size_text != str(int(size_text)).encode():
        raise ValueError("not a checkpoint object of this session")
    size = int(size_text)
    if not size or size % TILE or not uid_line.startswith(b"uid ") or not uid_line[4:].isascii():
        raise ValueError("not a checkpoint object: size or uid")
    spans = tile_spans(size)
    if len(hashes) != _H * (TILE + sum(count for _, count in spans)):
        raise ValueError("a checkpoint object of the wrong length")
    split = [hashes[i : i + _H] for i in range(0, len(hashes), _H)]
    tiles, at = [], TILE
    for _, count in spans:
        tiles.append(split[at : at + count])
        at += count
    checkpoint = Checkpoint(session_id, uid_line[4:].decode(), size, split[:TILE], tiles)
    # text() computes the root from the hashes, and refuses hashes held twice over that disagree
    if checkpoint.text().encode() != data[: len(data) - len(hashes)]:
        raise ValueError("a checkpoint object whose stated root is not the root of its hashes")
    return checkpoint


class Nodes:
    """The subtree roots that checkpoint objects hold, merged: ``node(lo, hi)`` is MTH(D[lo:hi])
    computed from them (``KeyError`` when they do not hold what it needs). ``add`` refuses
    (``ValueError``) any hash that disagrees with what is held or derivable at the same place:
    a leaf twice, an entry twice, a block's leaves and its level-1 entry, a window's 256 entries
    and the entry above it."""

    def __init__(self) -> None:
        #: (level, index) -> the leaf data of leaf ``index`` (level 0), or the root of the
        #: ``index``-th aligned run of 2**(8 level) leaves
        self.held: dict[tuple[int, int], bytes] = {}

    def _put(self, level: int, index: int, value: bytes) -> None:
        if self.held.setdefault((level, index), value) != value:
            raise ValueError("checkpoint objects disagree about a hash")

    def add(self, checkpoint: Checkpoint) -> None:
        first_leaf = checkpoint.size - TILE
        for i, leaf in enumerate(checkpoint.leaves):
            self._put(0, first_leaf + i, leaf)
        spans = list(zip(tile_spans(checkpoint.size), checkpoint.tiles, strict=True))
        for level, ((first, _), tile) in enumerate(spans, 1):
            for i, entry in enumerate(tile):
                self._put(level, first + i, entry)
        # what is held twice over: the block's leaves and its entry, each full window and the entry above
        self._put(1, first_leaf >> TILE_HEIGHT, _merkle.root(checkpoint.leaves))
        for level, ((first, count), tile) in enumerate(spans, 1):
            if count == TILE:
                self._put(level + 1, first >> TILE_HEIGHT, _perfect_root(list(tile)))

    def node(self, lo: int, hi: int) -> bytes:
        """MTH(D[lo:hi]) for a range of the tree (RFC 9162's split), from what is held."""
        width = hi - lo
        if width == 1:
            return _merkle.leaf_hash(self.held[0, lo])
        if width & (width - 1) == 0 and width.bit_length() - 1 >= TILE_HEIGHT:
            height = width.bit_length() - 1
            if height % TILE_HEIGHT == 0 and lo % width == 0:
                held = self.held.get((height // TILE_HEIGHT, lo // width))
                if held is not None:
                    return held
        k = 1 << ((width - 1).bit_length() - 1)
        return _merkle.node_hash(self.node(lo, lo + k), self.node(lo + k, hi))

    def root(self, size: int) -> bytes:
        return self.node(0, size)


def checkpoints_needed(size: int, *, leaves: Sequence[int] = (), prefixes: Sequence[int] = ()) -> set[int]:
    """The sizes of the checkpoint objects that hold every node a proof in the tree of ``size``
    leaves needs (``size``: a checkpoint's): the one at ``size``; for each leaf index in
    ``leaves`` (an inclusion proof's), the one that ends its block; for each prefix size in
    ``prefixes`` (a consistency proof's old size), the one that ends its last block unless it
    ends on a block boundary; and per level, the one that ends the window holding such a point
    when the tree's newest window at that level is a later one."""
    needed = {size}
    points = [*leaves, *(m - 1 for m in prefixes)]  # the last leaf index each proof's path starts from
    for index in leaves:
        needed.add(min(size, ((index >> TILE_HEIGHT) + 1) << TILE_HEIGHT))
    for m in prefixes:
        if m % TILE:
            needed.add(min(size, ((m >> TILE_HEIGHT) + 1) << TILE_HEIGHT))
    for index in points:
        level = 1
        while size >> (TILE_HEIGHT * level):
            span = TILE_HEIGHT * (level + 1)
            if index >> span != (size - 1) >> span:
                needed.add(((index >> span) + 1) << span)
            level += 1
    return needed
