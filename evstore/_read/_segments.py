"""A session's own events from a seq on: from chains of segments where the listing vouches for
them (``_vouching``), else from the loose events, fetched with bounded prefetch.
"""

from __future__ import annotations

import bisect
import functools
import heapq
from collections.abc import Generator, Iterable, Iterator
from typing import TYPE_CHECKING

import msgspec

from .._backends import ListPage, ObjectMissing
from .._codec import MAX_SEGMENT_BYTES, Manifest
from .._context import StoreContext
from .._errors import IntegrityError
from ._events import RawEvent, decode_raw, get_event_bytes
from ._listing import _tail_of
from ._loose import _EarlyGets, _list_tail, _loose_batches, _send_early, _send_guessed
from ._manifest import _LISTED, Loaded
from ._vouching import _checked_segment, _CheckedSegment, _listed_md5s, _md5s_of, _vouched

if TYPE_CHECKING:
    from concurrent.futures import Future


#: A checked segment's events are built this many at a time.
_BATCH = 256

#: Segments read as one group: fetched side by side, checked each on its own as it arrives, and
#: trusted together when the listing of the loose events they cover vouches for each (``_vouched``).
#: A group is up to ``_GROUP`` segments, and past its first no more than ``_GROUP_BYTES`` of them
#: (by their listed sizes). The GETs of as many groups as the pool has threads are in flight, and
#: no more than two groups' worth of segment bytes, so that a read holds a few groups of segments
#: whatever their size (up to ``MAX_SEGMENT_BYTES`` each) and a long chain of small ones goes in one
#: round trip (45,000 short or 1 KiB events: 4 round trips with the append, against 6 and 7 with
#: two groups at a time).
_GROUP = 8
_GROUP_BYTES = 32 * 1024 * 1024

#: A segment's listed (compressed) size times this is what a read counts it to hold once
#: decompressed, when it groups segments (``_GROUP_BYTES``). Segments in flight are counted at their
#: listed size: they are decompressed one at a time, as the reader checks them.
_EXPANSION = 8

#: When the loose tail after the segments is not on the first page of names listed with the
#: manifest, the GETs of its first this many seqs go out with the segment GETs, beside the LIST that
#: names its events, not a round after it (those past the head answer 404 and are dropped): automatic
#: compaction (``DEFAULT_AUTO_COMPACT``) leaves fewer loose events than this after its newest segment.
_TAIL_GUESS = 32

#: A read that ends inside a segment takes it when it wants at least this many of its events (or
#: half of them); fewer are read as loose events, a GET each. A read that goes on past a segment
#: always takes it: its loose events would cost a GET each where the segment costs one
#: (compaction retires the lower levels inside a higher one, so there is no shorter one to take).
_COVERED_EVENTS = 4

#: A read takes at most this many chains of segments, and reads at most this many loose events
#: between two of them (a gap: where a writer that held too few events packed no segment, as one
#: opened partway into a session does until its next boundary); past that, the rest is read loose.
_RUNS = 16
_GAP_EVENTS = 64

#: An ancestor's inherited range of at most this many events is fetched by its event GETs, sent
#: with its manifest's (no listing first); a longer one is read as any session is (``own_batches``).
#: So is a fork's own range, when its first page lists it whole and it is no longer than this
#: (``_lineage``), and an ancestor's loose tail to the fork seq after its segments (``through_end``).
_SHORT_RANGE = 32


def _segment_bytes(ctx: StoreContext, key: str) -> bytes | None:
    """A segment's stored bytes (compressed: ``expand_segment`` unpacks them, as the reader
    checks it, one at a time); None when it is gone, too large or unreadable (the loose events
    stand for it)."""
    try:
        return ctx.backend.get(key, max_bytes=MAX_SEGMENT_BYTES).data
    except (ObjectMissing, IntegrityError):
        return None


def own_raw(ctx: StoreContext, loaded: Loaded, start: int, end: int | None) -> Iterator[RawEvent]:
    """The session's own events in [start, end], from segments then loose objects, in order
    (see ``own_batches``)."""
    for batch in own_batches(ctx, loaded, start, end):
        yield from batch


def segment_chain(segments: Iterable[tuple[int, int]], cursor: int, end: int | None) -> list[tuple[int, int]]:
    """The segments (first, last) to read from seq ``cursor`` to ``end``, chosen greedily: at
    each seq, the segment that covers it and reaches furthest (of two that reach as far, the
    shorter) among those worth their GET: the read goes on past it, or wants at least half of
    its events or ``_COVERED_EVENTS`` of them (a range of a few events at a segment's end reads
    them loose). So a read from any seq costs no more requests than one from the start. Pure.

    One pass over ``segments`` in order of first seq, and a heap of those that start by the seq
    reached: a segment that no longer covers it, or is no longer worth its GET, never is again
    (the seq only grows), so each segment is pushed and popped once: O(S log S) for S listed
    segments, whatever names were planted.
    """
    ordered = sorted(segments)
    ready: list[tuple[int, int]] = []  # (-last, -first): the furthest-reaching on top
    chain: list[tuple[int, int]] = []
    index = 0
    reach = cursor
    while end is None or reach <= end:
        while index < len(ordered) and ordered[index][0] <= reach:
            first, last = ordered[index]
            heapq.heappush(ready, (-last, -first))
            index += 1
        while ready:
            last, first = -ready[0][0], -ready[0][1]
            wanted = (last if end is None else min(last, end)) - reach + 1
            if last >= reach and (end is None or end > last or wanted >= _COVERED_EVENTS or 2 * wanted >= last - first + 1):
                break
            heapq.heappop(ready)  # it can never be chosen: drop it
        else:
            break
        heapq.heappop(ready)
        chain.append((first, last))
        reach = last + 1
    return chain


class _Loose(msgspec.Struct, frozen=True):
    """A loose event fetched by its seq, without a LIST: one of a gap's (``segment_runs``)."""

    seq: int


def segment_runs(segments: Iterable[tuple[int, int]], cursor: int, end: int | None) -> list[tuple[int, list[tuple[int, int]]]]:
    """The chains of segments (``segment_chain``) to read from seq ``cursor`` to ``end``, each
    with the seq it starts at; the events between the end of one (or ``cursor``) and the start
    of the next are read loose, by their seqs. Without them a read met a gap in the segments
    once and read every event after it loose. Pure; at most ``_RUNS`` chains and ``_RUNS`` gaps
    of up to ``_GAP_EVENTS``, whatever names were planted."""
    ordered = sorted(segments)
    firsts = [first for first, _ in ordered]
    runs: list[tuple[int, list[tuple[int, int]]]] = []
    reach = cursor
    for _ in range(2 * _RUNS):
        if len(runs) == _RUNS or (end is not None and reach > end):
            break
        chain = segment_chain(ordered, reach, end)
        if chain:
            runs.append((reach, chain))
            reach = chain[-1][1] + 1
            continue
        after = bisect.bisect_right(firsts, reach)
        if after == len(firsts) or firsts[after] - reach > _GAP_EVENTS or (end is not None and firsts[after] > end):
            break
        reach = firsts[after]  # the events before it are a gap
    return runs


def own_batches(
    ctx: StoreContext, loaded: Loaded, start: int, end: int | None, *, through_end: bool = False
) -> Iterator[list[RawEvent]]:
    """The session's own events in [start, end], in order: a checked segment's events in lists
    of up to ``_BATCH``, a loose event as a list of one (the per-event work above runs in one
    loop per list).

    Segments are read while they continue each other from ``start``, in groups of up to
    ``_GROUP``: a group's segments are fetched side by side with the LIST pages of the loose
    events they cover (one per ``_LISTED`` events, each page's start computed, none waiting on
    another), each checked on its own as it arrives, and the group is used only when the listing
    vouches for each of its events (``_vouched``). The rest (and all of it, from the first
    group that fails) comes from the loose events, which always remain. The LIST of the loose
    tail goes out with the segment GETs, and the GETs of its first events as soon as it
    answers: neither waits for a segment to be checked. With
    ``through_end`` (the caller knows that every event to ``end`` exists: an ancestor's, to the
    fork seq whose hash the fork's manifest records), a loose tail of up to ``_SHORT_RANGE``
    events is fetched by its seqs with the segments, as a gap's are, without that LIST.

    The steps: ``_plan`` (pure) chooses what to fetch; the tail's requests are sent
    (``_send_tail``); ``_wanted`` is fetched in order, a window at a time, and ``_planned_batches``
    reads it; ``_loose_batches`` reads the loose events from where that stopped.
    """
    sid = loaded.manifest.sid
    plan = _plan(loaded, max(start, loaded.first_own), end, through_end)
    early = _EarlyGets()
    known_tail = _tail_of(ctx, sid, loaded.first_page, plan.tail_start)
    guessed = _guessed(loaded, plan, known_tail, end)
    # the segment GETs (and the tail's LIST, with the page after it), the LIST pages that vouch for
    # them and the guessed GETs on the wide pool: all sent at once, each on a thread already started
    ctx.ready_threads(plan.segments + 2, min(plan.listed_pages, 4 * ctx.concurrency) + len(guessed))
    tail = _send_tail(ctx, sid, plan, known_tail, end, early)
    try:
        budget = 2 * _GROUP_BYTES
        # a pool's worth of segment GETs in flight and the chain's LIST pages besides, up to
        # 4 x concurrency of them, on the wide pool (small, waiting on nothing: beside the segment
        # GETs, not queued behind them), two groups' bytes; then the tail's early GETs may go
        window = 2 * ctx.concurrency + min(plan.listed_pages, 4 * ctx.concurrency)
        fetched = ctx.prefetched(
            _wanted(plan),
            functools.partial(_fetch, ctx, loaded),
            window,
            primed=functools.partial(_send_guessed, ctx, sid, guessed, early),
            weight=functools.partial(_weight, loaded.meta.segments, budget // (2 * ctx.concurrency)),
            budget=budget,
            wide=lambda item: isinstance(item, int),
        )
        cursor = yield from _planned_batches(loaded.manifest, plan, fetched, end)
        fetched.close()
        early.release()  # the segments are done with (or there were none): the tail's GETs may go
        if end is not None and cursor > end:
            return
        # the tail's page when the loose events start where it does; else the first page's part from
        # the cursor on, or (None) they are listed from the cursor
        first_page: ListPage | None
        if tail is not None and cursor == plan.tail_start:
            first_page = tail.result()
        else:
            first_page = _tail_of(ctx, sid, loaded.first_page, cursor)
        yield from _loose_batches(ctx, loaded, cursor, end, first_page, early, guessed)
    finally:
        if tail is not None:
            tail.cancel()
        early.close()


#: A step of a read (``_Plan.steps``): a gap's loose events (its first seq, and the seq after it),
#: or a group of segments (first, last) that continue each other (never across a gap).
_Step = tuple[int, int] | list[tuple[int, int]]
#: What a read fetches (``_wanted``): a segment (first, last), the seq a LIST page of the loose
#: events lists after (whose MD5s vouch for segments), or a gap's loose event; and what each gives.
_Item = tuple[int, int] | int | _Loose
_Fetched = bytes | dict[int, str] | None


class _Plan(msgspec.Struct, frozen=True):
    """What a read of a session's own events from seq ``cursor`` fetches before its loose tail,
    in seq order (``_plan``)."""

    cursor: int
    steps: list[_Step]
    #: For each group of ``steps``, in order: how many LIST pages of the loose events go out after
    #: its segments (those of its events that no earlier group's pages cover). Page k lists the
    #: names after seq ``cursor - 1 + k * _LISTED``.
    pages: list[int]
    #: Where the loose tail starts: the seq after the last step's.
    tail_start: int
    #: Whether a chain of segments is read at all (else the loose events are the whole read).
    chained: bool

    @property
    def segments(self) -> int:
        return sum(len(step) for step in self.steps if isinstance(step, list))

    @property
    def listed_pages(self) -> int:
        return sum(self.pages)


def _plan(loaded: Loaded, cursor: int, end: int | None, through_end: bool) -> _Plan:
    """The steps of a read from seq ``cursor`` to ``end`` (``own_batches``): the chains of
    segments (``segment_runs``) cut into groups (``_add_groups``), the gaps between them, with
    ``through_end`` a loose tail of up to ``_SHORT_RANGE`` events as one more gap, and the LIST
    pages that vouch for each group (``_vouching_pages``). Pure."""
    sizes = loaded.meta.segments
    runs = segment_runs(sizes, cursor, end)
    steps: list[_Step] = []
    reach = cursor
    for run_start, chain in runs:
        if run_start > reach:
            steps.append((reach, run_start))
        _add_groups(steps, chain, sizes)
        reach = chain[-1][1] + 1
    if through_end and end is not None and 0 < end - reach + 1 <= _SHORT_RANGE:
        steps.append((reach, end + 1))  # the tail, by its seqs
        reach = end + 1
    return _Plan(cursor, steps, _vouching_pages(steps, cursor - 1, end), reach, bool(runs))


def _listed_size(sizes: dict[tuple[int, int], int], segment: tuple[int, int]) -> int:
    """The segment's size as listed (``Meta.segments``)."""
    return sizes.get(segment, MAX_SEGMENT_BYTES)


def _add_groups(steps: list[_Step], chain: list[tuple[int, int]], sizes: dict[tuple[int, int], int]) -> None:
    """Append the segments of ``chain`` to ``steps`` in groups: up to ``_GROUP`` segments, and past
    a group's first no more than ``_GROUP_BYTES`` of what they hold decompressed, as far as their
    listed sizes tell (zstd shrinks prose 3-6x, docs/format.md, and a segment never expands past
    the limit: ``_EXPANSION``)."""
    group_bytes = 0
    for index, link in enumerate(chain):
        size = min(_listed_size(sizes, link) * _EXPANSION, MAX_SEGMENT_BYTES)
        last_step = steps[-1] if steps else None
        if index and isinstance(last_step, list) and len(last_step) < _GROUP and group_bytes + size <= _GROUP_BYTES:
            last_step.append(link)
            group_bytes += size
        else:
            steps.append([link])
            group_bytes = size


def _vouching_pages(steps: list[_Step], base: int, end: int | None) -> list[int]:
    """For each group of ``steps``, the LIST pages (page k: the names after seq ``base + k *
    _LISTED``) of the loose events it yields that no earlier group's pages cover (``_Plan.pages``):
    made as the fetches go out, so a planted name's range costs at most a window of LISTs (its
    segment fails its check first). Pure."""
    pages: list[int] = []
    listed = 0
    for group in (step for step in steps if isinstance(step, list)):
        needed = -(-((group[-1][1] if end is None else min(group[-1][1], end)) - base) // _LISTED)
        pages.append(max(needed - listed, 0))
        listed = max(listed, needed)
    return pages


def _guessed(loaded: Loaded, plan: _Plan, known_tail: ListPage | None, end: int | None) -> range:
    """The tail's seqs whose GETs go out before a LIST names them (``_TAIL_GUESS``, to ``end``):
    after a chain of segments, in a read whose first page was listed with the manifest but does
    not reach the tail (``known_tail`` None); else none."""
    if loaded.first_page is None or known_tail is not None or not plan.chained:
        return range(0)
    start = plan.tail_start
    return range(start, start + _TAIL_GUESS if end is None else min(start + _TAIL_GUESS, end + 1))


def _send_tail(
    ctx: StoreContext, session_id: str, plan: _Plan, known_tail: ListPage | None, end: int | None, early: _EarlyGets
) -> Future[ListPage] | None:
    """Send, to run beside the segment GETs, what names the loose tail and the GETs of its first
    events (into ``early``): from ``known_tail`` (its part of the first page, listed with the
    manifest: the GETs at once, ``_send_early``), else after a chain of segments its first LIST
    (``_list_tail``). None when the tail is past ``end``, or the read is loose events alone (its
    stream lists them)."""
    if end is not None and plan.tail_start > end:
        return None
    if known_tail is not None:
        return ctx.executor().submit(_send_early, ctx, session_id, known_tail, end, early)
    if plan.chained:
        return ctx.executor().submit(_list_tail, ctx, session_id, plan.tail_start, end, early)
    return None


def _wanted(plan: _Plan) -> Iterator[_Item]:
    """What a read fetches, in the order it reads it: each step's (a gap's loose events by their
    seqs, a group's segments), each group's followed by its LIST pages (``_Plan.pages``)."""
    pages_by_group = iter(plan.pages)
    page = 0
    for step in plan.steps:
        if isinstance(step, tuple):
            yield from (_Loose(seq) for seq in range(*step))
            continue
        yield from step
        for _ in range(next(pages_by_group)):
            yield plan.cursor - 1 + page * _LISTED
            page += 1


def _fetch(ctx: StoreContext, loaded: Loaded, item: _Item) -> _Fetched:
    """One of ``_wanted``'s: a gap's loose event's bytes, a LIST page's MD5s by seq (the first page
    is not listed again when it was listed with the manifest), or a segment's stored bytes."""
    sid = loaded.manifest.sid
    if isinstance(item, _Loose):
        return get_event_bytes(ctx, sid, item.seq)
    if isinstance(item, int):
        if item == 0 and loaded.first_page is not None:  # listed with the manifest
            return _md5s_of(ctx.layout.session_prefix(sid), loaded.first_page)
        return _listed_md5s(ctx, sid, item)
    return _segment_bytes(ctx, loaded.meta.segment_key(ctx.layout, sid, item))


def _weight(sizes: dict[tuple[int, int], int], least: int, item: _Item) -> int:
    """What a fetch holds in flight (``StoreContext.prefetched``'s weight): a LIST page or a gap's
    loose event nothing; a segment its listed size (what its GET holds until the reader
    decompresses it), and at least ``least`` (1 / (2 x concurrency) of the budget): so no more than
    2 x concurrency (+ 1) segment GETs are in flight however small the segments are (planted ones:
    a byte each)."""
    return max(_listed_size(sizes, item), least) if isinstance(item, tuple) else 0


def _planned_batches(
    manifest: Manifest, plan: _Plan, fetched: Iterator[tuple[_Item, _Fetched]], end: int | None
) -> Generator[list[RawEvent], None, int]:
    """The events of ``plan``'s steps, from ``fetched`` (``_wanted(plan)``'s fetches, in order), as
    ``own_batches`` yields them: a gap's loose events while they are there, a group's events
    (``_BATCH`` at a time) when it is vouched for (``_checked_group``). Stops at the first step
    that fails, and returns the seq after the last event yielded: where the loose events go on."""
    cursor = plan.cursor
    covered: dict[int, str] = {}
    group_pages = iter(plan.pages)
    for step in plan.steps:
        if isinstance(step, tuple):  # a gap: its loose events, by their seqs
            for _ in range(*step):
                loose = next(fetched)[1]
                if not isinstance(loose, bytes):
                    break  # not there (a planted name past the head?): listed from the cursor after
                yield [decode_raw(manifest, cursor, loose)]
                cursor += 1
            if cursor < step[1]:
                break
            continue
        checked = _checked_group(manifest, step, next(group_pages), fetched, covered, cursor, end)
        if checked is None:
            break
        for (first, last), segment in zip(step, checked, strict=True):
            high = last - first + 1 if end is None or end >= last else end - first + 1
            for low in range(max(cursor - first, 0), high, _BATCH):
                yield segment.events(manifest, low, min(low + _BATCH, high))
            cursor = last + 1
        covered = {seq: md5 for seq, md5 in covered.items() if seq >= cursor}  # what later groups may still need
    return cursor


def _checked_group(
    manifest: Manifest,
    group: list[tuple[int, int]],
    pages: int,
    fetched: Iterator[tuple[_Item, _Fetched]],
    covered: dict[int, str],
    cursor: int,
    end: int | None,
) -> list[_CheckedSegment] | None:
    """The segments of ``group``, each checked as it arrives from ``fetched`` while the next ones
    are still on their way (``_checked_segment``), when the listing vouches for each of their
    events from ``cursor`` (to ``end``: ``_vouched``); else None. The MD5s of the group's
    ``pages`` LIST pages, which follow its segments in ``fetched``, are added to ``covered`` (the
    listed MD5s by seq); they are not waited for once a segment fails its own check."""
    checked = []
    for first, last in group:
        data = next(fetched)[1]
        assert not isinstance(data, dict)
        checked.append(_checked_segment(manifest, first, last, data))
    if any(segment is None for segment in checked):
        return None
    for _ in range(pages):
        page_md5s = next(fetched)[1]
        assert isinstance(page_md5s, dict)
        covered |= page_md5s
    if not _vouched(checked, covered, cursor, end):
        return None
    return [segment for segment in checked if segment is not None]  # each of them: vouched
