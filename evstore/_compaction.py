"""Packing events into segments: ``compact`` (full runs of loose events, on request) and the
automatic compaction a writer does as it appends (``SegmentPacker``: LSM-style levels of segments,
the lower ones retired, and a Merkle checkpoint object every ``_tree.TILE`` events).

Segments and checkpoint objects are derived data: loose events are never deleted (no seq slot is
freed), a segment holds the exact bytes of its events, and a segment or checkpoint PUT that fails
or finds its name taken is dropped, readers using the loose events.

Requests: ``compact``: ``_read.load``'s, the LISTs and GETs of the loose events after the newest
segment, and one PUT per segment made. Automatic compaction, amortized at the default size: one
segment PUT per 32 appends and one DELETE per 128, and one checkpoint PUT per 256.
"""

from __future__ import annotations

import contextlib

from . import _read, _tree
from ._backends import ObjectExists
from ._codec import MAX_SEGMENT_BYTES, Manifest, compress_segment, pack_segment
from ._context import StoreContext
from ._errors import EvstoreError, InvalidInputError
from ._read import Loaded, Meta

#: Each level of automatic compaction packs this many segments of the level below.
COMPACTION_FANOUT = 8
#: Automatic compaction writes this many levels: 32, 128, 512 and 2,048 events at the default size.
#: Segments stop there, so a long session resumes from many segments fetched and checked side by
#: side (9 at 10,000 events) rather than from one large one that is read, then checked, serially.
COMPACTION_LEVELS = 3
#: A writer holds the bytes of at most this many of its session's newest events for compaction
#: (fewer when its top level is smaller), and at most this many bytes of them.
COMPACTION_MEMORY_EVENTS = 8192
COMPACTION_MEMORY_BYTES = 16 * 1024 * 1024


def recent_limit(ctx: StoreContext) -> int:
    """How many of its session's newest events a writer holds for automatic compaction."""
    return min(COMPACTION_MEMORY_EVENTS, top_level(ctx.auto_compact or 0))


def top_level(size: int) -> int:
    """The events in a segment of automatic compaction's top level, for base size ``size``."""
    return size * int(COMPACTION_FANOUT ** (COMPACTION_LEVELS - 1))


def compact(ctx: StoreContext, session_id: str, *, segment_size: int = 1000) -> list[tuple[int, int]]:
    """Pack full runs of ``segment_size`` loose events into segment objects; return the new ones.

    Loose events are never deleted, so no seq slot is ever freed: a stale
    writer still meets ``If-None-Match`` at every seq. A segment holds the
    exact bytes of its events, so the chain and verify read it as they read them.
    """
    if not 2 <= segment_size <= 100_000:
        raise InvalidInputError("segment size must be from 2 to 100000")
    loaded = _read.load(ctx, session_id)
    manifest = loaded.manifest
    start = max([loaded.first_own] + [last + 1 for _, last in loaded.meta.segments])
    made: list[tuple[int, int]] = []
    run: list[tuple[int, bytes]] = []
    for raw in _read.own_raw(ctx, Loaded(manifest, loaded.genesis, Meta()), start, None):
        run.append((raw.seq, raw.data))
        if len(run) == segment_size:
            if write_segment(ctx, manifest, run):
                made.append((run[0][0], run[-1][0]))
            run = []
    return made


def write_segment(ctx: StoreContext, manifest: Manifest, run: list[tuple[int, bytes]], *, lower: bool = False) -> bool:
    """PUT a segment of the run of events, under ``young/`` for a ``lower`` level of automatic
    compaction (see ``Layout.young_key``); whether this call made it: False for a run too large to
    be read back as one segment (its loose events serve), or when the name was taken (another
    writer or compactor made it, or someone planted an object there)."""
    data = pack_segment(manifest.sid, manifest.uid, run)
    if len(data) > MAX_SEGMENT_BYTES:
        return False
    name = ctx.layout.young_key if lower else ctx.layout.segment_key
    try:
        ctx.backend.create(
            name(manifest.sid, run[0][0], run[-1][0]), compress_segment(data), tags=ctx.tags_for(manifest.retention)
        )
    except ObjectExists:
        return False
    return True


class SegmentPacker:
    """What one writer (``Session``) holds for automatic compaction of its session, and the
    segments and checkpoint objects it writes from it as its appends reach level boundaries.

    It holds the bytes of the session's newest own events that the writer read or wrote, and
    the session's Merkle tiles up to the writer's head. Not thread-safe, as the writer is not."""

    def __init__(self, ctx: StoreContext, manifest: Manifest) -> None:
        self._ctx = ctx
        self._manifest = manifest
        #: The bytes of the newest events held, by seq, in ascending order: what ``pack`` packs.
        self._recent: dict[int, bytes] = {}
        self._recent_bytes = 0
        self._recent_limit = recent_limit(ctx)
        self._may_retire = True  # until a DELETE of retired segments is refused
        #: The session's Merkle tiles up to the writer's head, for the checkpoint object automatic
        #: compaction leaves every ``_tree.TILE`` events (``grow_tree``); None when the writer did not
        #: read every event before its head (it opened without reading them, or others appended between).
        self.tiles: _tree.Tiles | None = None

    def hold(self, seq: int, data: bytes) -> None:
        """Hold the bytes of the event at ``seq`` (seqs come in ascending order), dropping the
        oldest beyond the limits (``COMPACTION_MEMORY_EVENTS``, ``COMPACTION_MEMORY_BYTES``)."""
        recent = self._recent
        recent[seq] = data
        self._recent_bytes += len(data)
        while len(recent) > self._recent_limit or self._recent_bytes > COMPACTION_MEMORY_BYTES:
            self._recent_bytes -= len(recent.pop(next(iter(recent))))  # the oldest: seqs go in ascending

    def hold_next(self, seq: int, data: bytes) -> None:
        """``hold`` the event that became the writer's head; when the event before it is not held
        (another writer's events came between), what was held is no run any more: it is dropped."""
        if self._recent and seq - 1 not in self._recent:
            self._recent.clear()
            self._recent_bytes = 0
        self.hold(seq, data)

    def grow_tree(self, seq: int, head_hash: str) -> None:
        """Add the new head to the Merkle tiles and, every ``_tree.TILE`` events, create the
        checkpoint object (``_tree``): one PUT per 256 appends. Derived data, as segments are:
        a failed or refused PUT (the name taken) is dropped, and readers fall back to the events."""
        tiles = self.tiles
        if tiles is None or tiles.size != seq - 1:
            self.tiles = None  # events this writer did not see came between: it holds no tiles
            return
        tiles.add(bytes.fromhex(head_hash))
        if tiles.size % _tree.TILE == 0:
            ctx, manifest = self._ctx, self._manifest
            with contextlib.suppress(EvstoreError, ObjectExists):
                ctx.backend.create(
                    ctx.layout.tree_key(manifest.sid, seq),
                    tiles.encode(manifest.sid, manifest.uid),
                    tags=ctx.tags_for(manifest.retention),
                )

    def pack(self, seq: int, size: int) -> None:
        """LSM-style segments, so the loose tail stays short at every length: at each multiple
        of ``size`` the last events become one segment, of the highest level that seq ends (the
        last ``size``, or at each multiple of ``size * 4`` the last ``size * 4``, and so on, up to
        ``COMPACTION_LEVELS`` levels), written once, with the bytes this writer holds (what it
        appended, or read when it resumed); a level whose events it does not hold is left to
        ``compact``. The levels below the top are named newest first (``young/``), so a reader
        lists the few it needs, not one per ``size`` events.

        A segment of a higher level retires the lower ones inside it (``_retire``): each event is
        then in at most one segment per level, and in the end in one top-level segment only.
        Amortized at the default size: one segment PUT per 32 appends and one DELETE per 128
        (1.039 requests per append).

        Segments are derived and the append has already succeeded, so a failed segment PUT (a
        role without the right, a flaky store) is dropped: readers use the loose events."""
        top = top_level(size)
        level = 0
        reach = size
        while reach <= top and seq % reach == 0 and reach <= len(self._recent):  # it holds at most a top level
            level, reach = reach, reach * COMPACTION_FANOUT
        if not level:
            return
        first = seq - level + 1
        run = [(s, self._recent[s]) for s in range(first, seq + 1) if s in self._recent]
        if len(run) != level:
            return
        with contextlib.suppress(EvstoreError):
            if write_segment(self._ctx, self._manifest, run, lower=level < top) and level > size:
                self._retire(seq, size, level)

    def _retire(self, seq: int, size: int, level: int) -> None:
        """Remove the lower-level segments that the new segment of ``level`` ending at ``seq``
        covers: three per level below it (those of its last child level's children were never
        written, a higher level being written at their end). One DELETE, best effort: a role
        that may not delete (the writer role of ``infra/iam``) leaves them to ``gc``, and stops
        trying. A reader that listed one of them before it went reads the loose events there
        instead: the same history, at more requests."""
        if not self._may_retire:
            return
        keys = []
        lower = size
        while lower < level:
            ends = [seq - k * lower for k in range(1, COMPACTION_FANOUT)]
            keys += [self._ctx.layout.young_key(self._manifest.sid, end - lower + 1, end) for end in ends]
            lower *= COMPACTION_FANOUT
        try:
            self._ctx.backend.delete_many(keys)
        except EvstoreError:
            self._may_retire = False
