"""A session's own events from a seq on: from chains of segments where the listing vouches for
them (``_vouching``), else from the loose events, fetched with bounded prefetch.
"""

from __future__ import annotations

import bisect
import functools
import heapq
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import msgspec

from .._backends import ListPage, ObjectMissing
from .._codec import MAX_SEGMENT_BYTES
from .._context import StoreContext
from .._errors import IntegrityError
from ._events import RawEvent, decode_raw, get_event_bytes
from ._listing import _tail_of, missing_start
from ._loose import _EarlyGets, _list_tail, _loose_events, _send_early
from ._manifest import _LISTED, Loaded
from ._vouching import _checked_segment, _listed_md5s, _md5s_of, _vouched

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
    """
    manifest = loaded.manifest
    sid = manifest.sid
    cursor = max(start, loaded.first_own)
    runs = segment_runs(loaded.meta.segments, cursor, end)

    def listed_size(segment: tuple[int, int]) -> int:
        return loaded.meta.segments.get(segment, MAX_SEGMENT_BYTES)

    def size_of(segment: tuple[int, int]) -> int:
        # what it holds once decompressed, as far as its listed size tells: zstd shrinks prose
        # 3-6x (docs/format.md), and a segment never expands past the limit
        return min(listed_size(segment) * _EXPANSION, MAX_SEGMENT_BYTES)

    # the steps, in seq order: a gap's loose events (its first seq, and the seq after it), or a
    # group of segments that continue each other (never across a gap)
    steps: list[tuple[int, int] | list[tuple[int, int]]] = []
    reach = cursor
    for run_start, chain in runs:
        if run_start > reach:
            steps.append((reach, run_start))
        group_bytes = 0
        for index, link in enumerate(chain):
            size = size_of(link)
            last_step = steps[-1] if steps else None
            if index and isinstance(last_step, list) and len(last_step) < _GROUP and group_bytes + size <= _GROUP_BYTES:
                last_step.append(link)
                group_bytes += size
            else:
                steps.append([link])
                group_bytes = size
        reach = chain[-1][1] + 1
    if through_end and end is not None and 0 < end - reach + 1 <= _SHORT_RANGE:
        steps.append((reach, end + 1))  # the tail, by its seqs
        reach = end + 1
    groups = [step for step in steps if isinstance(step, list)]
    # each group's segments, then the LIST pages (by the seq they list after) of the loose events
    # it yields that no earlier group's pages cover: made as the fetches go out, so a planted
    # name's range costs at most a window of LISTs (its segment fails its check first)
    base = cursor - 1  # page k lists the names after seq base + k * _LISTED
    pages_of: list[int] = []
    listed_pages = 0
    for group in groups:
        needed = -(-((group[-1][1] if end is None else min(group[-1][1], end)) - base) // _LISTED)
        pages_of.append(max(needed - listed_pages, 0))
        listed_pages = max(listed_pages, needed)
    tail_start = reach
    tail: Future[ListPage] | None = None
    early = _EarlyGets()
    known_tail = _tail_of(ctx, sid, loaded.first_page, tail_start)
    guessed = range(0)  # the tail's seqs whose GETs go out before a LIST names them
    if loaded.first_page is not None and known_tail is None and runs:
        guessed = range(tail_start, tail_start + _TAIL_GUESS if end is None else min(tail_start + _TAIL_GUESS, end + 1))
    # the segment GETs (and the tail's LIST, with the page after it), the LIST pages that vouch for
    # them and the guessed GETs on the wide pool: all sent at once, each on a thread already started
    ctx.ready_threads(sum(len(group) for group in groups) + 2, min(listed_pages, 4 * ctx.concurrency) + len(guessed))
    if known_tail is not None and (end is None or tail_start <= end):  # listed with the manifest: GETs at once
        tail = ctx.executor().submit(_send_early, ctx, sid, known_tail, end, early)
    elif runs and (end is None or tail_start <= end):
        tail = ctx.executor().submit(_list_tail, ctx, sid, tail_start, end, early)
    try:
        pages_by_group = iter(pages_of)

        def wanted() -> Iterator[tuple[int, int] | int | _Loose]:
            page = 0
            for step in steps:
                if isinstance(step, tuple):
                    yield from (_Loose(seq) for seq in range(*step))
                    continue
                yield from step
                for _ in range(next(pages_by_group)):
                    yield base + page * _LISTED
                    page += 1

        def fetch(item: tuple[int, int] | int | _Loose) -> bytes | dict[int, str] | None:
            if isinstance(item, _Loose):
                return get_event_bytes(ctx, sid, item.seq)
            if isinstance(item, int):
                if item == 0 and loaded.first_page is not None:  # listed with the manifest
                    return _md5s_of(ctx.layout.session_prefix(sid), loaded.first_page)
                return _listed_md5s(ctx, sid, item)
            return _segment_bytes(ctx, loaded.meta.segment_key(ctx.layout, sid, item))

        budget = 2 * _GROUP_BYTES
        least = budget // (2 * ctx.concurrency)

        def weight(item: tuple[int, int] | int | _Loose) -> int:
            # a LIST page or a gap's loose event weighs nothing; a segment its listed size (what its
            # GET holds until the reader decompresses it), and at least 1 / (2 x concurrency) of the
            # budget: so no more than 2 x concurrency (+ 1) segment GETs are in flight however small
            # the segments are (planted ones: a byte each)
            return max(listed_size(item), least) if isinstance(item, tuple) else 0

        def send_guessed() -> None:
            # the segment GETs that go first are queued: the tail's GETs follow, the guessed ones at
            # once (small, on the wide pool: not queued behind segment GETs), those its LIST names
            # when it answers
            pool = ctx.wide_executor()
            for seq in guessed:
                early.send(seq, functools.partial(pool.submit, get_event_bytes, ctx, sid, seq))
            early.release()

        # a pool's worth of segment GETs in flight and the chain's LIST pages besides, up to
        # 4 x concurrency of them, on the wide pool (small, waiting on nothing: beside the segment
        # GETs, not queued behind them), two groups' bytes; then the tail's early GETs may go
        window = 2 * ctx.concurrency + min(listed_pages, 4 * ctx.concurrency)
        fetched = ctx.prefetched(
            wanted(), fetch, window, primed=send_guessed, weight=weight, budget=budget, wide=lambda item: isinstance(item, int)
        )
        covered: dict[int, str] = {}
        group_pages = iter(pages_of)
        for step in steps:
            if isinstance(step, tuple):  # a gap: its loose events, by their seqs
                for _ in range(*step):
                    loose = next(fetched)[1]
                    if not isinstance(loose, bytes):
                        break  # not there (a planted name past the head?): listed from the cursor below
                    yield [decode_raw(manifest, cursor, loose)]
                    cursor += 1
                if cursor < step[1]:
                    break
                continue
            group, pages = step, next(group_pages)
            # each segment is checked as it arrives, while the next ones are still on their way
            checked = []
            for first, last in group:
                data = next(fetched)[1]
                assert not isinstance(data, dict)
                checked.append(_checked_segment(manifest, first, last, data))
            if any(segment is None for segment in checked):
                break
            for _ in range(pages):
                page_md5s = next(fetched)[1]
                assert isinstance(page_md5s, dict)
                covered |= page_md5s
            if not _vouched(checked, covered, cursor, end):
                break
            for (first, last), segment in zip(group, checked, strict=True):
                assert segment is not None  # vouched
                high = last - first + 1 if end is None or end >= last else end - first + 1
                for low in range(max(cursor - first, 0), high, _BATCH):
                    yield segment.events(manifest, low, min(low + _BATCH, high))
                cursor = last + 1
            covered = {seq: md5 for seq, md5 in covered.items() if seq >= cursor}  # what later groups may still need
        fetched.close()
        early.release()  # the segments are done with (or there were none): the tail's GETs may go
        if end is not None and cursor > end:
            return
        # the tail's page when the loose events start where it does; else the first page's part from
        # the cursor on, or (None) they are listed from the cursor
        first_page = tail.result() if tail is not None and cursor == tail_start else _tail_of(ctx, sid, loaded.first_page, cursor)
        expected = cursor
        for seq, listed in _loose_events(ctx, sid, cursor, end, first_page, early):
            if listed is None and seq in guessed:  # its GET went before the LIST that names it
                listed = get_event_bytes(ctx, sid, seq)
            if seq != expected or listed is None:
                missing = expected if seq != expected else seq
                if missing == loaded.first_own:
                    raise missing_start(loaded, seq, listed)
                raise IntegrityError(sid, missing, "event is missing (a hole in the log)")
            yield [decode_raw(manifest, seq, listed)]
            expected += 1
    finally:
        if tail is not None:
            tail.cancel()
        early.close()
