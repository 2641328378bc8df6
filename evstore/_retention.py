"""Retention: installing lifecycle rules, previewing them (their evaluation is the pure
``evstore._lifecycle``), and garbage collection.

gc is session-granular and fork-aware. For each session prefix it removes:

* remnants of expired sessions: no manifest (lifecycle rules delete object by
  object, the manifest, created first, first);
* deleted sessions (tombstone) that no live fork needs, once the tombstone is
  older than ``FENCE_HOLD`` (until then the fence keeps stale writers out:
  see ``_forks``), the tombstone last;
* orphans: objects of a prefix without a manifest (a stale writer's append
  after the session was removed) — the same case as a remnant;
* fork markers whose fork no longer exists;
* a live session's young segments that a higher-level segment covers
  (``SegmentCoverage``: what a writer that may not delete leaves behind), from
  the listing alone;
* incomplete multipart uploads under the store's sessions;
* with ``keep``, the ephemeral sessions under the prefix beyond the newest
  ``keep`` of those older than ``grace`` (by when the store stored each
  manifest): deleted (fenced), their objects removed by a run after
  ``FENCE_HOLD``. A session younger than the grace is neither ranked nor
  counted.

It never touches an object younger than ``grace``, nor any object of a live
session except dead fork markers (and, with ``apply_lifecycle``, what the
bucket's own rules would have expired: the same semantics as S3). Only the
manifest, the tombstone, the rules and the grace decide: a session whose
manifest exists but does not decode, or whose first events are missing, is
left alone and reported (``GcReport.left_alone``), since junk objects anyone
could create must never make gc remove a live session.

How it lists. gc reads ``<root>/sessions/<prefix>`` with flat listings (no
delimiter) of key ranges, one page of 1,000 keys at a time, up to ``concurrency``
ranges at once. It starts with one range, the whole prefix; once the listing has
shown 2,000 objects per range, a range is split in two at a name about halfway
between where its listing is and where it ends (spelled in the characters of the
ids seen so far, from the id alphabet ``[A-Za-z0-9._-]``), and the upper half is
listed alongside. The last range ends, as far as the split can tell, where the
block of ids that start as every id listed so far does (``s0000000``...
``s0000399``: at ``s0001``), or, if they share no start, past every name; a
boundary past the ids costs one LIST that finds none, and halves the gap the next
time. A range that a page or two most likely finish (at the pace its pages went
so far) is not split: its halves would cost a LIST more. A boundary is a
name without ``/``, so it never falls inside a session: all of a session's keys
share the prefix ``<id>/`` and sort together, on one side of it. A session may
span pages of its range; its objects are gathered until the next session's
first key, or the range's end.

What costs a request. A session whose listing shows nothing to do costs none of
its own: a manifest, no tombstone, its first event seq 1 (or none) and no
older than the manifest, no fork marker older than the grace and, with rules, no
object older than the grace that the rules would expire now under either
retention class (a listing shows no tags). A manifest whose listed size no
manifest can have is left alone, from the listing too. Only the others are read,
``4 x concurrency`` sessions at a time, each one's independent requests together:

* no manifest listed (a remnant, an orphan, a deleted session's rest): none;
* any other that needs a decision: a GET of its manifest, then
  - with a tombstone: a GET of the tombstone, sent with the manifest's (its uid
    must be this incarnation's, and it records the forks alive at the delete),
    and, once it is older than ``FENCE_HOLD``, a GET per fork it records whose
    marker is listed (the fork's manifest);
  - a live session: a GET per fork marker older than the grace (the fork's
    manifest), sent with the manifest's.
  This is every fork with events of its own and every re-created id (their
  first seq is not 1), and, with ``keep``, every live session under the prefix
  (its retention class is in its manifest);
* a session of more than ``_HELD`` objects that is to be removed (or, with
  rules, has objects due): its pages listed again (only its names that decide
  are held), as the first listing of it did.

Requests per gc, as ``GcReport.requests`` reports them (counted as sent):
``L + G + D + U + [1 lifecycle GET with apply_lifecycle]``, where
``L <= objects/1000 + R`` LIST pages with ``R <= 1 + objects/2000`` ranges
(so ``L <= 1.5 * objects/1000 + 1``: the objects under the prefix), ``G`` the
GETs above, ``D`` = ⌈keys removed/1,000⌉ batch deletes, plus one batch per
1,000 tombstones, sent after every batch before them, and one batch at the end
for what is left of each, ``U`` = one LIST of incomplete uploads (sent with the
first LIST of the sessions) and one request per upload aborted, plus
``delete``'s requests per session beyond ``keep``. Dependent round trips: about ``L / concurrency`` listing rounds
(after the first few, while ranges split) and the sessions read divided by
``4 x concurrency`` (one round each, two for a deleted session with forks),
with the deletes in flight alongside. Memory: per range in flight, one page and one session's
objects (at most ``_HELD``), and a bounded queue of sessions waiting for their
GETs; the delete batches in flight.
"""

from __future__ import annotations

import bisect
import copy
import heapq
import itertools
import math
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from . import _lifecycle
from ._backends import (
    Forwarding,
    IncompleteUpload,
    ListPage,
    ObjectInfo,
    ObjectMissing,
    ObjectRefused,
    ObjectStore,
)
from ._codec import FORMAT_VERSION, MAX_SMALL_OBJECT_BYTES, Manifest, decode_manifest, encode_manifest, fence_of, parse_ts
from ._context import FENCE_HOLD, StoreContext
from ._errors import EvstoreError, InvalidInputError, SessionNotFoundError
from ._forks import delete
from ._ids import MAX_SEQ, YOUNG, format_seq, parse_fork_marker, parse_segment, parse_seq, validate_session_id
from ._read import first_own_seq, list_sessions, live_forks, read_manifest

if TYPE_CHECKING:
    from concurrent.futures import Future

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


@dataclass(frozen=True)
class ExpiringObject:
    key: str
    session_id: str
    expires: datetime


#: A session's objects gc holds while it judges them; past this many it holds only the names
#: that decide (manifest, tombstone, fork markers) and lists the session again to remove any.
_HELD = 4000
#: A range whose listing will most likely end within this many more pages is not split.
_FINISHING_PAGES = 1.5
#: The incomplete uploads S3 lists in one request.
_UPLOADS_PAGE = 1000
#: Session-relative names after this one are no event's (``Layout.after_events``).
_EVENTS_END = format_seq(MAX_SEQ)
#: Delete batches in flight at once; a thread that would send one more sends it itself.
_DELETES_IN_FLIGHT = 8
#: The shortest manifest that decodes, but for its session id: every field it must have, empty.
_SHORTEST_MANIFEST = len(encode_manifest(Manifest(FORMAT_VERSION, "", "", "")))
_UNREADABLE = "its manifest does not decode (corrupt, or a newer format)"


class _Counted(Forwarding):
    """The store's backend, counting the requests sent through it from any thread (a LIST page,
    a GET, each batch of a delete): what ``GcReport.requests`` reports."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.requests = 0
        self._lock = threading.Lock()

    def _request(self, kind: str, key: str, times: int = 1) -> None:
        with self._lock:
            self.requests += times


def _counted(ctx: StoreContext) -> tuple[StoreContext, _Counted]:
    """The store's context with its backend counted, sharing its pool, caches and clock."""
    ctx.executor()  # made now, so that the copy shares it rather than making its own
    counted = _Counted(ctx.backend)
    shared = copy.copy(ctx)
    shared.backend = counted
    return shared, counted


class _Deleter:
    """Batches deletes across sessions, from any thread, and sends each batch of 1,000 on the
    pool as it fills; keys queued ``last`` (tombstones) go only after every batch before them
    has been deleted. Reports each removal (and calls ``on_remove``) under ``lock``."""

    def __init__(self, ctx: StoreContext, report: GcReport, on_remove: OnRemove | None, lock: threading.Lock) -> None:
        self.ctx = ctx
        self.report = report
        self.on_remove = on_remove
        self.lock = lock
        self.batch: list[str] = []
        self.last: list[str] = []
        self.sent: list[Future[int]] = []

    def remove(self, info: ObjectInfo, reason: str, *, last: bool = False) -> None:
        with self.lock:
            report = self.report
            report.objects_removed += 1
            report.bytes_removed += info.size
            report.count(reason)
            if self.on_remove is not None:
                self.on_remove(info.key, info.size, reason)
            if report.dry_run:
                return
            (self.last if last else self.batch).append(info.key)
            if len(self.batch) < 1000:
                return
            batch, self.batch = self.batch, []
            self.sent = [f for f in self.sent if not f.done() or f.exception() is not None]
            if len(self.sent) < _DELETES_IN_FLIGHT:
                self.sent.append(self.ctx.executor().submit(self.ctx.backend.delete_many, batch))
                return
            from concurrent.futures import Future  # here: `import evstore` loads no concurrent.futures

            here: Future[int] = Future()  # enough in flight: this thread sends it, and is paced by it
            self.sent.append(here)
        try:
            here.set_result(self.ctx.backend.delete_many(batch))
        except BaseException as exc:
            here.set_exception(exc)
            raise

    @property
    def tombstones_due(self) -> bool:
        return len(self.last) >= 1000

    def flush_all(self) -> None:
        """Send what is queued, wait for every batch sent, then delete the tombstones queued."""
        with self.lock:
            last, self.last = self.last, []
            if self.batch:
                self.sent.append(self.ctx.executor().submit(self.ctx.backend.delete_many, self.batch))
                self.batch = []
            sent, self.sent = self.sent, []
        for future in sent:
            future.result()
        if last:
            self.ctx.backend.delete_many(last)


class _Unreadable:
    """A manifest exists but does not decode (corrupt, or a future format version)."""


def _manifest(ctx: StoreContext, session_id: str) -> Manifest | _Unreadable | None:
    try:
        data = ctx.backend.get(ctx.layout.manifest_key(session_id), max_bytes=MAX_SMALL_OBJECT_BYTES).data
        return decode_manifest(data, session_id)
    except ObjectMissing:
        return None
    except EvstoreError:
        return _Unreadable()


def _cannot_decode(info: ObjectInfo, session_id: str) -> bool:
    """Whether a manifest listed at this size cannot decode: shorter than every field it must
    have, or longer than any manifest is read."""
    return info.size < _SHORTEST_MANIFEST + len(session_id) or info.size > MAX_SMALL_OBJECT_BYTES


def _tombstone(ctx: StoreContext, session_id: str) -> bytes | None:
    """The tombstone's bytes (b"" for one too large to read), None if it is gone: one GET."""
    try:
        return ctx.backend.get(ctx.layout.tombstone_key(session_id), max_bytes=MAX_SMALL_OBJECT_BYTES).data
    except ObjectMissing:
        return None
    except ObjectRefused:
        return b""


def _fence(data: bytes | None, manifest: Manifest) -> tuple[bool, frozenset[str] | None]:
    """``tombstoned`` and ``recorded_forks`` (see ``_read``) from one GET of the tombstone:
    whether it is this incarnation's (one that does not decode counts: only an operator writes
    one), and the forks it records (None: a tombstone from before it recorded them)."""
    if data is None:
        return False, frozenset()
    tombstone = fence_of(data)
    if tombstone is None:
        return True, frozenset()
    return tombstone.uid == manifest.uid, None if tombstone.forks is None else frozenset(tombstone.forks)


T = TypeVar("T")


def _outcome(future: Future[T], request: Callable[[], T]) -> T:
    """The result of a request sent alongside on the store's pool, or, if it has yet to start,
    of the request sent from here instead (a thread never waits for work queued behind it)."""
    return request() if future.cancel() else future.result()


class _Listed:
    """One session's objects, as its listing range met them: those of a session of up to
    ``_HELD`` objects, and for any session the names after its events that decide."""

    def __init__(self, session_id: str, prefix: str) -> None:
        self.sid = session_id
        self.prefix = prefix
        self.count = 0
        #: The objects up to the last event's name, in order; None once more than ``_HELD`` were listed.
        self.held: list[ObjectInfo] | None = []
        #: The objects after the events, by session-relative name (once over ``_HELD``: only the
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
        if self.count > _HELD:
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

    def each(self, ctx: StoreContext) -> Iterator[ObjectInfo]:
        """Every object of the session, in key order: those held, or (past ``_HELD``) a listing again."""
        if self.held is None:
            yield from ctx.backend.list(self.prefix)
            return
        yield from self.held
        yield from self.named.values()


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


def _decides(name: str) -> bool:
    return name in ("manifest", "tombstone") or name.startswith("forks/")


class _Range:
    """The keys after ``after`` and before ``end`` (None: to the end of the listing's prefix),
    listed a page at a time; ``listed``: the session its pages have reached."""

    def __init__(self, after: str, end: str | None) -> None:
        self.origin = after
        self.after = after
        self.end = end
        self.pages = 0
        self.sent = False
        self.listed: _Listed | None = None


#: The characters of session ids in key order.
ID_ALPHABET = "".join(sorted("-._0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"))
_PRECISION = 4


def _number(name: str, alphabet: str) -> int:
    """The first ``_PRECISION`` characters of ``name`` as a number whose digits are places in
    ``alphabet`` (0: the name has ended; a character outside it counts as the one before it)."""
    value = 0
    for i in range(_PRECISION):
        value = value * (len(alphabet) + 1) + (bisect.bisect_right(alphabet, name[i]) if i < len(name) else 0)
    return value


def _shared(a: str, b: str) -> int:
    """How many characters ``a`` and ``b`` start with in common."""
    common = 0
    while common < min(len(a), len(b)) and a[common] == b[common]:
        common += 1
    return common


def pages_left(origin: str, reached: str, end: str, pages: int, alphabet: str = ID_ALPHABET) -> float:
    """About how many more pages a range that took ``pages`` pages from ``origin`` to
    ``reached`` needs to reach ``end``, were its ids spread evenly. Pure."""
    common = _shared(origin, end)
    start, at, stop = (_number(name[common:], alphabet) for name in (origin, reached, end))
    return pages * (stop - at) / (at - start) if at > start else math.inf


def between(low: str, high: str | None, alphabet: str = ID_ALPHABET) -> str | None:
    """A name about halfway between ``low`` and ``high`` (None: past every name), both
    excluded, spelled in ``alphabet`` (sorted characters of the id alphabet: those the ids seen
    so far use, so the halves hold ids alike) after their common start, so without ``/``
    unless that start has one; None if there is none at this precision. Pure."""
    base = len(alphabet) + 1
    common = _shared(low, high) if high is not None else 0
    top = _number(high[common:], alphabet) if high is not None else base**_PRECISION
    middle = (_number(low[common:], alphabet) + top) // 2
    chars: list[str] = []
    for place in range(_PRECISION - 1, -1, -1):
        digit = middle // base**place % base
        if digit == 0:
            break
        chars.append(alphabet[digit - 1])
    name = low[:common] + "".join(chars)
    if low < name and (high is None or name < high) and "/" not in name:
        return name
    return None


def block_end(start: str) -> str | None:
    """The first id after every id that starts with ``start`` (None: there is none, ``start``
    being empty or all of the id alphabet's last character). Pure."""
    while start:
        place = ID_ALPHABET.find(start[-1])
        if 0 <= place < len(ID_ALPHABET) - 1:
            return start[:-1] + ID_ALPHABET[place + 1]
        start = start[:-1]
    return None


class _Run:
    """One gc run: the listing ranges, the sessions waiting for their GETs, the deletes."""

    def __init__(
        self,
        ctx: StoreContext,
        report: GcReport,
        *,
        rules: list[_lifecycle.Rule],
        now: datetime,
        cutoff: datetime,
        keep: int | None,
        prefix: str,
        on_remove: OnRemove | None,
    ) -> None:
        self.ctx = ctx
        self.report = report
        self.rules = rules
        self.now = now
        self.cutoff = cutoff
        self.keep = keep
        self.prefix = prefix
        self.lock = threading.Lock()
        self.deleter = _Deleter(ctx, report, on_remove, self.lock)
        self.classes = [ctx.tags_for("permanent"), ctx.tags_for("ephemeral")]
        self.root = ctx.layout.sessions + prefix
        self.width = ctx.concurrency
        #: Sessions judged at once (128 by default): each has its manifest's GET in flight from its
        #: judge's thread, and its tombstone's (or its forks' manifests') on the wide pool, so a
        #: deleted session's two GETs wait for no other session's. Why 4 x and not 2 x or 8 x:
        #: docs/retention.md (round trips measured by benchmarks/scale.py, section 5).
        self.judges = 4 * ctx.concurrency
        self.ranges: list[_Range] = [_Range("", None)]
        self.made = 1  # ranges made: one more only per 2,000 objects listed, so LISTs <= 1.5 x objects/1000 + 1
        self.listed_objects = 0
        #: The characters of the ids listed: boundaries are spelled in them.
        self.seen: set[str] = set()
        #: The first id listed: the lowest, as ranges split only after the first range's pages.
        self.lowest = ""
        self.listing: dict[Future[ListPage], _Range] = {}
        self.judging: set[Future[list[tuple[datetime, str]]]] = set()
        self.waiting: deque[_Listed] = deque()
        # heap of (when, id): the ``keep`` newest ephemeral sessions, by when the store stored each
        # manifest (its listed LastModified). Not by the manifest's own ``created``: whoever may create a
        # manifest writes that, and a planted one claiming the far future would outlast every real session
        self.newest: list[tuple[datetime, str]] = []

    # ---- listing ----------------------------------------------------------------------------

    def run(self) -> None:
        from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

        # judges wait for their requests, so they get threads of their own: they never hold the
        # store's pool, where their second requests, the listings and the deletes run
        judges = ThreadPoolExecutor(self.judges, thread_name_prefix="evstore-gc")
        try:
            self._send()
            while self.listing or self.judging or self.waiting:
                for _ in range(min(len(self.waiting), self.judges - len(self.judging))):
                    self.judging.add(judges.submit(self._judge_waiting))
                pending: list[Future[Any]] = [*self.listing, *self.judging]
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    if future in self.listing:
                        self._page(self.listing.pop(future), future.result())
                    else:
                        self.judging.discard(future)
                        for live in future.result():
                            self._settle(live)
                if self.deleter.tombstones_due:
                    self.deleter.flush_all()
                self._split()
                self._send()
        finally:
            unsent: list[Future[Any]] = [*self.listing, *self.judging]
            for future in unsent:
                future.cancel()
            judges.shutdown()

    def _send(self) -> None:
        """A LIST for each range that waits for its next page, unless the sessions waiting for
        their GETs are many: then the ranges wait for them (memory stays bounded)."""
        if len(self.waiting) > 2 * self.judges:
            return
        for range_ in self.ranges:
            if not range_.sent and len(self.listing) < self.width:
                range_.sent = True
                future = self.ctx.executor().submit(self.ctx.backend.list_page, self.root, start_after=range_.after)
                self.listing[future] = range_

    def _page(self, range_: _Range, page: ListPage) -> None:
        range_.sent = False
        range_.pages += 1
        ended = not page.truncated
        for info in page.objects:
            if range_.end is not None and info.key >= range_.end:
                ended = True  # the rest is the next range's
                break
            self.listed_objects += 1
            self._take(range_, info)
        if ended:
            if range_.listed is not None:
                self._listed(range_.listed)
            self.ranges.remove(range_)
        else:
            range_.after = page.next_start_after

    def _take(self, range_: _Range, info: ObjectInfo) -> None:
        session, slash, name = info.key[len(self.root) :].partition("/")
        if not slash:
            return  # directly under the sessions prefix: no session's object
        session_id = self.prefix + session
        listed = range_.listed
        if listed is None or listed.sid != session_id:
            if listed is not None:
                self._listed(listed)
            listed = range_.listed = _Listed(session_id, self.ctx.layout.session_prefix(session_id))
            self.report.sessions += 1
            self.seen.update(c for c in session if c in ID_ALPHABET)
            if not self.lowest:
                self.lowest = session
        self.report.objects_scanned += 1
        if self.rules and not listed.due:
            listed.due = self._due(info)
        listed.add(name, info)
        # a live session's young segments that a higher level covers (the manifest and the
        # tombstone sort before young/, so the listing has told by then whether it lives)
        if (
            listed.coverage.covered(name, info.size)
            and listed.manifest is not None
            and listed.tombstone is None
            and info.last_modified <= self.cutoff
        ):
            self.deleter.remove(info, "segment retired by a higher level")

    def _due(self, info: ObjectInfo) -> bool:
        if info.last_modified > self.cutoff:
            return False
        for tags in self.classes:
            when = _lifecycle.expiry(self.rules, info.key, info.last_modified, tags, info.size)
            if when is not None and when <= self.now:
                return True
        return False

    def _split(self) -> None:
        """Split ranges while fewer than ``concurrency`` are listed and the objects listed pay
        for one more: at the first name about halfway from where a range's listing is (past
        the session it is in) to its end."""
        while len(self.ranges) < self.width and self.made <= self.listed_objects // 2000:
            for range_ in sorted(self.ranges, key=lambda r: -r.pages):
                at = self._boundary(range_)
                if at is not None:
                    break
            else:
                return
            self.ranges.append(_Range(self.root + at, range_.end))
            range_.end = self.root + at
            self.made += 1

    def _name(self, key: str) -> str:
        """``key`` below the listing's root ("" for a range that starts before every key)."""
        return key[len(self.root) :] if key.startswith(self.root) else ""

    def _boundary(self, range_: _Range) -> str | None:
        low = self._name(range_.after)
        slash = low.find("/")
        if slash >= 0:
            low = low[: slash + 1]  # the session the listing is in lies wholly before the boundary
        seen = "".join(sorted(self.seen)) if len(self.seen) > 1 else ID_ALPHABET
        # the last range: toward the end of the block of ids that start as every id listed so far
        # does (ids s0000000...: s0001), or past every name
        end = self._name(range_.end) if range_.end is not None else None
        high = end if end is not None else block_end(self.lowest[: _shared(self.lowest, low)])
        if high is not None:
            origin = self._name(range_.origin) or self.lowest
            if pages_left(origin, low, high, range_.pages, seen) <= _FINISHING_PAGES:
                return None  # a page or two most likely end it (or its block): halves would cost a LIST more
            return between(low, high, seen) or (between(low, None, seen) if end is None else None)
        return between(low, None, seen)

    # ---- judging ----------------------------------------------------------------------------

    def _listed(self, listed: _Listed) -> None:
        """A session's listing is complete: judge it from the listing, or read what it needs."""
        manifest = listed.manifest
        if manifest is not None and _cannot_decode(manifest, listed.sid):
            self._leave(listed.sid, _UNREADABLE)
            return
        if manifest is None:
            if listed.held is not None:
                self._judge(listed)  # no request: it removes what the listing holds
                return
        elif not (
            listed.tombstone is not None
            or self.keep is not None
            or listed.first_seq not in (None, 1)
            # an event older than the manifest is an earlier incarnation's (a create over a deleted id)
            or (listed.first is not None and listed.first.last_modified < manifest.last_modified)
            or any(info.last_modified <= self.cutoff for _, info in listed.markers())
            or listed.due
        ):
            return  # a live session with nothing to collect: its listing said so
        self.waiting.append(listed)

    def _leave(self, session_id: str, why: str) -> None:
        with self.lock:
            self.report.left_alone[session_id] = why

    def _add_young(self, objects: int) -> None:
        with self.lock:
            self.report.kept_young += objects

    def _removed_session(self) -> None:
        with self.lock:
            self.report.sessions_removed += 1

    def _judge_waiting(self) -> list[tuple[datetime, str]]:
        """Judge the sessions waiting, one after another, until none is left (a judge takes the
        next one itself, without a round through the main thread); the live ephemeral ones."""
        live: list[tuple[datetime, str]] = []
        while True:
            try:
                listed = self.waiting.popleft()
            except IndexError:
                return live
            if (found := self._judge(listed)) is not None:
                live.append(found)

    def _judge(self, listed: _Listed) -> tuple[datetime, str] | None:
        """Collect one session (on the pool, or inline when it needs no request). Returns the
        manifest's listed LastModified and the id of a live ephemeral session, else None."""
        ctx = self.ctx
        session_id = listed.sid
        if listed.manifest is None:
            self._remove_all(listed, "expired remnant or orphan" if listed.tombstone is None else "deleted")
            return None
        # what the decision needs besides the manifest, sent alongside it on the wide pool (its
        # small GETs wait on nothing, and the store's pool runs the listings and the deletes): the
        # tombstone, or the manifests of the forks whose markers are old enough to be removed
        pool = ctx.wide_executor()
        tombstone_data = pool.submit(_tombstone, ctx, session_id) if listed.tombstone is not None else None
        children: dict[str, Future[Manifest | _Unreadable | None]] = {}
        if tombstone_data is None:
            for (child, _), info in listed.markers():
                if info.last_modified <= self.cutoff and child not in children and _valid(child):
                    children[child] = pool.submit(_manifest, ctx, child)
        try:
            return self._decide(listed, _manifest(ctx, session_id), tombstone_data, children)
        finally:
            unused: list[Future[Any]] = [*children.values(), *([tombstone_data] if tombstone_data is not None else [])]
            for future in unused:
                future.cancel()  # not needed after all (an unreadable manifest): unsent if still queued

    def _decide(
        self,
        listed: _Listed,
        manifest: Manifest | _Unreadable | None,
        tombstone_data: Future[bytes | None] | None,
        children: dict[str, Future[Manifest | _Unreadable | None]],
    ) -> tuple[datetime, str] | None:
        ctx = self.ctx
        session_id = listed.sid
        if isinstance(manifest, _Unreadable):
            self._leave(session_id, _UNREADABLE)
            return None
        if manifest is None:
            self._remove_all(listed, "expired remnant or orphan" if listed.tombstone is None else "deleted")
            return None
        stored_at = listed.named["manifest"].last_modified
        tombstone = listed.tombstone
        if tombstone is not None and tombstone_data is not None:
            mine, recorded = _fence(_outcome(tombstone_data, lambda: _tombstone(ctx, session_id)), manifest)
            if not mine:
                self.deleter.remove(tombstone, "an earlier incarnation's tombstone")
            elif tombstone.last_modified > self.now - FENCE_HOLD:
                self._add_young(listed.count)  # fenced: stale writers' leases may still run
                return None
            else:
                markers = [marker for marker, _ in listed.markers()]
                # a fork planted after the delete keeps nothing: only those the tombstone records count
                if not markers or not live_forks(ctx, manifest.uid, markers, recorded=recorded):
                    self._remove_all(listed, "deleted")
                return None
        first_seq = listed.first_seq
        if first_seq is not None and first_seq > first_own_seq(manifest):
            # expired piecewise, or a junk object under a live manifest: only the manifest's own
            # expiry (by the rules, below) or a tombstone may remove a session
            self._leave(session_id, f"its first events are missing (the first listed is seq {first_seq})")
        if manifest.base and first_seq is not None and first_seq <= manifest.base:
            self._remove_earlier_incarnation(listed, manifest, min(self.cutoff, self.now - FENCE_HOLD))
        # what the rules may expire, and dead fork markers: every object if the rules have any due,
        # else the markers alone
        objects: Iterable[ObjectInfo] = listed.each(ctx) if self.rules and listed.due else listed.named.values()
        tags = ctx.tags_for(manifest.retention)
        for info in objects:
            name = info.key[len(listed.prefix) :]
            if info.last_modified > self.cutoff:
                continue
            when = _lifecycle.expiry(self.rules, info.key, info.last_modified, tags, info.size) if self.rules else None
            if when is not None and when <= self.now:
                self.deleter.remove(info, "lifecycle expiry")
                if name == "manifest":
                    self._removed_session()  # the session is gone with its manifest
            elif (marker := parse_fork_marker(name)) is not None and not self._fork_alive(marker, manifest.uid, children):
                self.deleter.remove(info, "dead fork marker")
        return (stored_at, session_id) if manifest.retention == "ephemeral" else None

    def _remove_all(self, listed: _Listed, reason: str) -> None:
        young = 0
        tombstone = None
        tombstone_key = self.ctx.layout.tombstone_key(listed.sid)
        for info in listed.each(self.ctx):
            if info.last_modified > self.cutoff:
                young += 1
            elif info.key == tombstone_key:
                tombstone = info
            else:
                self.deleter.remove(info, reason)
        self._add_young(young)
        if tombstone is not None and young == 0:
            self.deleter.remove(tombstone, reason, last=True)
        if young == 0:
            self._removed_session()

    def _remove_earlier_incarnation(self, listed: _Listed, manifest: Manifest, before: datetime) -> None:
        """The events, fence and segments a deleted session left below the base of the session
        created over it, once this manifest is older than ``before`` (so the delete is, too)."""
        young = listed.named["manifest"].last_modified > before
        kept = 0
        for info in listed.each(self.ctx):
            name = info.key[len(listed.prefix) :]
            seq = parse_seq(name)
            segment = parse_segment(name) if seq is None else None
            if (seq is not None and seq <= manifest.base) or (segment is not None and segment[1] <= manifest.base):
                if young:
                    kept += 1
                else:
                    self.deleter.remove(info, "earlier incarnation")
        self._add_young(kept)

    def _settle(self, live: tuple[datetime, str]) -> None:
        """Rank a live ephemeral session (its manifest's listed LastModified, its id) for ``keep``,
        deleting the oldest beyond the count; one younger than the grace is kept, unranked: the
        grace protects every object younger than it, ``keep`` included."""
        if self.keep is None:
            return
        stored_at, _ = live
        if stored_at > self.cutoff:
            with self.lock:
                self.report.kept_by_grace += 1
            return
        heapq.heappush(self.newest, live)
        if len(self.newest) > self.keep:
            _, oldest = heapq.heappop(self.newest)
            self._remove_for_keep(oldest)

    def _remove_for_keep(self, session_id: str) -> None:
        """Delete a session beyond the keep count with ``delete`` (a later run removes its objects)."""
        if not self.report.dry_run:
            self.deleter.flush_all()  # an earlier tombstone queued for removal goes before delete writes one
            try:
                delete(self.ctx, session_id)
            except SessionNotFoundError:
                return  # deleted meanwhile
        self.report.sessions_deleted += 1

    def _fork_alive(
        self, marker: tuple[str, str], parent_uid: str, children: dict[str, Future[Manifest | _Unreadable | None]]
    ) -> bool:
        child, child_uid = marker
        if not _valid(child):
            return False
        sent = children.get(child)
        manifest = _manifest(self.ctx, child) if sent is None else _outcome(sent, lambda: _manifest(self.ctx, child))
        return _alive_fork(manifest, child_uid, parent_uid)


def _valid(session_id: str) -> bool:
    try:
        validate_session_id(session_id)
    except InvalidInputError:
        return False
    return True


def _alive_fork(manifest: Manifest | _Unreadable | None, child_uid: str, parent_uid: str) -> bool:
    if isinstance(manifest, _Unreadable):
        return True  # gc does not judge what it cannot read: the marker stays
    return (
        isinstance(manifest, Manifest)
        and manifest.uid == child_uid
        and manifest.parent is not None
        and manifest.parent.uid == parent_uid
    )


def collect(
    ctx: StoreContext,
    *,
    dry_run: bool,
    grace: timedelta,
    apply_lifecycle: bool,
    keep: int | None,
    prefix: str,
    now: datetime | None,
    on_remove: OnRemove | None,
) -> GcReport:
    """``Store.gc``: its defaults and contract are there; what it costs is in this module's docstring."""
    if grace < timedelta(0):
        raise InvalidInputError("grace must not be negative")
    if keep is not None and keep < 0:
        raise InvalidInputError("keep must not be negative")
    if prefix and not all(c.isalnum() or c in "._-" for c in prefix):
        raise InvalidInputError(f"invalid session id prefix {prefix[:80]!r}")
    now = now or ctx.clock()
    report = GcReport(dry_run)
    counted_ctx, counted = _counted(ctx)
    try:
        rules = counted_ctx.backend.get_lifecycle() if apply_lifecycle else []
        cutoff = now - grace
        # the incomplete uploads' first page is listed alongside the sessions, not after them
        first_uploads = counted_ctx.executor().submit(_list_uploads, counted_ctx)
        run = _Run(counted_ctx, report, rules=rules, now=now, cutoff=cutoff, keep=keep, prefix=prefix, on_remove=on_remove)
        try:
            run.run()
        finally:
            first_uploads.exception()  # settled, without raising over the run's own error: no request outlives gc
        _abort_uploads(counted_ctx, run.deleter, report, rules, cutoff, now, first_uploads.result())
        run.deleter.flush_all()
    finally:
        report.requests = counted.requests
    return report


def _list_uploads(ctx: StoreContext) -> Iterator[IncompleteUpload]:
    """The incomplete uploads under the sessions, the first page of them read (the rest as iterated)."""
    uploads = iter(ctx.backend.list_incomplete_uploads(ctx.layout.sessions))
    return itertools.chain(list(itertools.islice(uploads, _UPLOADS_PAGE)), uploads)


def _abort_uploads(
    ctx: StoreContext,
    deleter: _Deleter,
    report: GcReport,
    rules: list[_lifecycle.Rule],
    cutoff: datetime,
    now: datetime,
    uploads: Iterable[IncompleteUpload],
) -> None:
    for upload in uploads:
        due = _lifecycle.upload_abort(rules, upload.key, upload.initiated) if rules else None
        if upload.initiated > cutoff and (due is None or due > now):
            continue
        report.uploads_aborted += 1
        report.count("incomplete upload")
        if deleter.on_remove is not None:
            deleter.on_remove(upload.key, 0, "incomplete upload")
        if not report.dry_run:
            ctx.backend.abort_upload(upload.key, upload.upload_id)


def preview(ctx: StoreContext, at: datetime) -> Iterator[ExpiringObject]:
    """Objects the bucket's lifecycle rules will have expired by ``at`` (the rules as installed).

    Tags are known from each session's retention class (evstore tags every
    object of an ephemeral session), so no per-object tagging request is made.
    """
    rules = ctx.backend.get_lifecycle()
    if not rules:
        return
    for session_id in list_sessions(ctx):
        try:
            found = read_manifest(ctx, session_id)
        except EvstoreError:
            found = None
        retention = found[0].retention if found is not None else None
        prefix = ctx.layout.session_prefix(session_id)
        for info in ctx.backend.list(prefix):
            if retention is None:
                try:
                    tags = ctx.backend.get_tags(info.key)
                except ObjectMissing:
                    continue
            else:
                tags = ctx.tags_for(retention)
            when = _lifecycle.expiry(rules, info.key, info.last_modified, tags, info.size)
            if when is not None and when <= at:
                yield ExpiringObject(info.key, session_id, when)


def apply_lifecycle_rules(ctx: StoreContext, ephemeral_days: int) -> tuple[bool, list[_lifecycle.Rule]]:
    """Install evstore's rules, merged with the bucket's; (changed, resulting rules). Idempotent:
    when the bucket already has them, no write is made."""
    existing = ctx.backend.get_lifecycle()
    merged = _lifecycle.merge_rules(existing, _lifecycle.evstore_rules(ctx.layout.sessions, ephemeral_days))
    if _lifecycle.rules_equal(merged, existing):
        return False, existing
    ctx.backend.put_lifecycle(merged)
    return True, merged


def parse_duration(text: str) -> timedelta:
    """``90s``, ``15m``, ``12h``, ``1d``, ``2w``, or a number of seconds: from 0 to 3650 days
    (``InvalidInputError`` otherwise, nan and the infinities included)."""
    text = text.strip().lower()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    number, unit = (text[:-1], text[-1]) if text and text[-1] in units else (text, "s")
    try:
        value = float(number)
    except ValueError:
        raise InvalidInputError(f"invalid duration {text[:40]!r}: use e.g. 90s, 15m, 12h, 1d, 2w") from None
    seconds = value * units[unit]  # bounded in seconds, after the unit: 3000000d is too long as well
    if not 0 <= seconds <= 3650 * 86400:  # false for nan, so nan is refused too
        raise InvalidInputError(f"invalid duration {text[:40]!r}: from 0 to 3650 days")
    return timedelta(seconds=seconds)


def parse_time(text: str) -> datetime:
    """``YYYY-MM-DD`` (midnight UTC) or an RFC 3339 time with its zone, of a year from 1970 to
    9000; ``InvalidInputError`` otherwise."""
    try:
        moment = parse_ts(text if "T" in text else text + "T00:00:00Z")
    except (ValueError, OverflowError):
        raise InvalidInputError(f"invalid date {text[:40]!r}: use YYYY-MM-DD or an RFC 3339 time") from None
    if moment.tzinfo is None:
        raise InvalidInputError(f"invalid date {text[:40]!r}: give a time zone (Z)")
    # far enough from datetime's limits (years 1 and 9999) that a grace or a retention period
    # added to it or taken from it never leaves them (OverflowError)
    if not 1970 <= moment.year <= 9000:
        raise InvalidInputError(f"invalid date {text[:40]!r}: give a year from 1970 to 9000")
    return moment
