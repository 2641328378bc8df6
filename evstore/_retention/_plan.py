"""gc's decisions that need no request: what a session's listing holds and shows, which young
segments are covered, what a tombstone's bytes say, which forks are alive, which ephemeral
sessions ``keep`` ranks out, and the report. Pure: the requests are ``_judge``'s, ``_deletes``'
and ``_gc``'s."""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from .. import _lifecycle
from .._backends import ObjectInfo
from .._codec import FORMAT_VERSION, MAX_SMALL_OBJECT_BYTES, Manifest, encode_manifest, fence_of
from .._errors import InvalidInputError
from .._ids import MAX_SEQ, YOUNG, format_seq, parse_fork_marker, parse_segment, parse_seq, validate_session_id

#: Called for every object gc removes (or would remove, in a dry run): key, size, reason.
#: gc calls it from its threads, one call at a time.
OnRemove = Callable[[str, int, str], None]


@dataclass
class GcReport:
    dry_run: bool
    sessions: int = 0
    objects_scanned: int = 0
    objects_removed: int = 0
    bytes_removed: int = 0
    sessions_removed: int = 0
    uploads_aborted: int = 0
    kept_young: int = 0
    #: Sessions beyond ``keep`` that this run deleted: fenced now, their objects removed by a
    #: gc run once ``FENCE_HOLD`` has passed.
    sessions_deleted: int = 0
    #: Ephemeral sessions under ``keep``'s prefix younger than the grace (by when the store stored
    #: their manifests): kept, and neither ranked nor counted among the ``keep`` newest.
    kept_by_grace: int = 0
    #: The requests this run sent (each LIST page, GET, batch DELETE, abort, and ``delete``'s).
    requests: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    #: Sessions gc would not judge, with why: an undecodable manifest, missing first events.
    left_alone: dict[str, str] = field(default_factory=dict)

    def count(self, reason: str, objects: int = 1) -> None:
        self.reasons[reason] = self.reasons.get(reason, 0) + objects


#: A session's objects gc holds while it judges them; past this many it holds only the names
#: that decide (manifest, tombstone, fork markers) and lists the session again to remove any.
HELD = 4000
#: Session-relative names after this one are no event's (``Layout.after_events``).
_EVENTS_END = format_seq(MAX_SEQ)
#: The shortest manifest that decodes, but for its session id: every field it must have, empty.
_SHORTEST_MANIFEST = len(encode_manifest(Manifest(FORMAT_VERSION, "", "", "")))
UNREADABLE = "its manifest does not decode (corrupt, or a newer format)"


class Unreadable:
    """A manifest exists but does not decode (corrupt, or a future format version)."""


def cannot_decode(info: ObjectInfo, session_id: str) -> bool:
    """Whether a manifest listed at this size cannot decode: shorter than every field it must
    have, or longer than any manifest is read."""
    return info.size < _SHORTEST_MANIFEST + len(session_id) or info.size > MAX_SMALL_OBJECT_BYTES


def tombstone_fence(data: bytes | None, manifest: Manifest) -> tuple[bool, frozenset[str] | None]:
    """``tombstoned`` and ``recorded_forks`` (see ``_read``) from one GET of the tombstone:
    whether it is this incarnation's (one that does not decode counts: only an operator writes
    one), and the forks it records (None: a tombstone from before it recorded them)."""
    if data is None:
        return False, frozenset()
    tombstone = fence_of(data)
    if tombstone is None:
        return True, frozenset()
    return tombstone.uid == manifest.uid, None if tombstone.forks is None else frozenset(tombstone.forks)


def due(rules: list[_lifecycle.Rule], classes: list[dict[str, str]], info: ObjectInfo, cutoff: datetime, now: datetime) -> bool:
    """Whether the rules expire this object by ``now`` under one of the retention classes'
    ``tags`` (a listing shows no tags), unless it is younger than the grace (``cutoff``)."""
    if info.last_modified > cutoff:
        return False
    for tags in classes:
        when = _lifecycle.expiry(rules, info.key, info.last_modified, tags, info.size)
        if when is not None and when <= now:
            return True
    return False


class Listed:
    """One session's objects, as its listing range met them: those of a session of up to
    ``HELD`` objects, and for any session the names after its events that decide."""

    def __init__(self, session_id: str, prefix: str) -> None:
        self.sid = session_id
        self.prefix = prefix
        self.count = 0
        #: The objects up to the last event's name, in order; None once more than ``HELD`` were listed.
        self.held: list[ObjectInfo] | None = []
        #: The objects after the events, by session-relative name (once over ``HELD``: only the
        #: manifest, the tombstone and the fork markers).
        self.named: dict[str, ObjectInfo] = {}
        self.first: ObjectInfo | None = None
        self.first_seq: int | None = None
        #: Some object older than the grace is due by the rules under one retention class or the other.
        self.due = False
        self.coverage = SegmentCoverage()

    def add(self, name: str, info: ObjectInfo) -> None:
        self.count += 1
        if name > _EVENTS_END:
            if self.held is not None or _decides(name):
                self.named[name] = info
        elif self.first_seq is None and (seq := parse_seq(name)) is not None:
            self.first, self.first_seq = info, seq
        if self.held is None:
            return
        if self.count > HELD:
            self.held = None
            self.named = {n: i for n, i in self.named.items() if _decides(n)}
        elif name <= _EVENTS_END:
            self.held.append(info)

    @property
    def manifest(self) -> ObjectInfo | None:
        return self.named.get("manifest")

    @property
    def tombstone(self) -> ObjectInfo | None:
        return self.named.get("tombstone")

    def markers(self) -> list[tuple[tuple[str, str], ObjectInfo]]:
        return [(marker, info) for name, info in self.named.items() if (marker := parse_fork_marker(name)) is not None]

    def held_objects(self) -> Iterable[ObjectInfo] | None:
        """Every object of the session, in key order, if it holds them all (None: past ``HELD``)."""
        return None if self.held is None else itertools.chain(self.held, self.named.values())

    def nothing_to_collect(self, manifest: ObjectInfo, *, keep: int | None, cutoff: datetime) -> bool:
        """Whether the listing of a session with this ``manifest`` shows nothing to collect, so
        that it costs no request of its own."""
        return not (
            self.tombstone is not None
            or keep is not None
            or self.first_seq not in (None, 1)
            # an event older than the manifest is an earlier incarnation's (a create over a deleted id)
            or (self.first is not None and self.first.last_modified < manifest.last_modified)
            or any(info.last_modified <= cutoff for _, info in self.markers())
            or self.due
        )


def _decides(name: str) -> bool:
    return name in ("manifest", "tombstone") or name.startswith("forks/")


class SegmentCoverage:
    """Tells, of a session's names fed in key order, which young segments (lower levels of
    automatic compaction) another segment listed before them covers: what their writer retires
    when it may delete (``_write``), left behind by one that may not. Pure; O(log S) a name.

    In key order ``segments/<a>-<b>`` come by their first seq, and ``young/<M-b>-<a>`` after
    them by their end, newest first (of one end, the longest first): so a young segment is
    covered exactly when a ``segments/`` one that starts by its start reaches its end, or a
    young one before it (they all end at or after its end) starts by its start.

    A segment is derived, so removing one never changes a read: a reader that listed it and
    then finds it gone reads its events loose. A planted covering name can make gc remove true
    young segments; that costs loose reads, never history (and a planted name costs a reader a
    GET in any case)."""

    def __init__(self) -> None:
        self._firsts: list[int] = []  # of the segments/ ones, ascending
        self._reach: list[int] = []  # the furthest end among them up to each
        self._young_first = MAX_SEQ + 1  # the least start among the young ones so far

    def covered(self, name: str, size: int) -> bool:
        """Feed one name (session-relative) and its listed size: whether it is a covered young segment."""
        if (found := parse_segment(name)) is None or not size:
            return False  # no segment (an empty one is none: it covers nothing)
        first, last = found
        if not name.startswith(YOUNG):
            self._firsts.append(first)
            self._reach.append(max(last, self._reach[-1] if self._reach else 0))
            return False
        index = bisect.bisect_right(self._firsts, first)
        covered = self._young_first <= first or (index > 0 and self._reach[index - 1] >= last)
        self._young_first = min(self._young_first, first)
        return covered


def below_base(name: str, base: int) -> bool:
    """Whether a session-relative name is an event or segment at or below ``base``: an earlier
    incarnation's, under a session created over a deleted id."""
    seq = parse_seq(name)
    segment = parse_segment(name) if seq is None else None
    return (seq is not None and seq <= base) or (segment is not None and segment[1] <= base)


def valid(session_id: str) -> bool:
    try:
        validate_session_id(session_id)
    except InvalidInputError:
        return False
    return True


def alive_fork(manifest: Manifest | Unreadable | None, child_uid: str, parent_uid: str) -> bool:
    if isinstance(manifest, Unreadable):
        return True  # gc does not judge what it cannot read: the marker stays
    return (
        isinstance(manifest, Manifest)
        and manifest.uid == child_uid
        and manifest.parent is not None
        and manifest.parent.uid == parent_uid
    )


class Newest:
    """The ``keep`` newest live ephemeral sessions, by when the store stored each manifest (its
    listed LastModified). Not by the manifest's own ``created``: whoever may create a manifest
    writes that, and a planted one claiming the far future would outlast every real session."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._heap: list[tuple[datetime, str]] = []  # (when, id), the oldest first

    def rank(self, stored_at: datetime, session_id: str) -> str | None:
        """Rank one session; the id of the oldest ranked, once one more than ``keep`` are."""
        heapq.heappush(self._heap, (stored_at, session_id))
        if len(self._heap) > self.keep:
            return heapq.heappop(self._heap)[1]
        return None
