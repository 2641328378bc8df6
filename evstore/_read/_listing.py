"""Which events a session has: the LIST pages of its event names, its head, and the ids of the
store's sessions.

Names among the events that are no seqs (junk, planted) are skipped, never taken for the end
of the events, and cost at most a LIST page per 1,000 (``_list_on``, ``_ids.seq_after``).
"""

from __future__ import annotations

from collections.abc import Iterator

from .._backends import ListPage, ObjectInfo
from .._context import StoreContext
from .._errors import IntegrityError, InvalidInputError, SessionExpiredError
from .._ids import MAX_SEQ, format_seq, parse_seq, seq_after
from ._events import decode_raw, get_event_bytes
from ._manifest import Loaded

#: The session-relative name of the highest possible seq: every event name sorts at or before it.
_LAST_SEQ_NAME = format_seq(MAX_SEQ)

#: The first LIST page of a loose tail asks for this many keys (continuation pages for 1,000):
#: the tail after the newest segment is short, and a page of 1,000 keys would also carry the
#: names of every segment (the client parses each). Request counts change only for a tail this long.
_TAIL_FIRST_PAGE = 64


def _tail_of(ctx: StoreContext, session_id: str, page: ListPage | None, start: int) -> ListPage | None:
    """The part of ``page`` (``Loaded.first_page``) from seq ``start`` on, as the first page of a
    LIST after seq ``start - 1`` (``_event_names`` goes on from its end as from any page), when
    the page reaches past that seq or lists the session to its end; else None. Pure."""
    if page is None:
        return None
    after = ctx.layout.event_key(session_id, start - 1)
    rest = [info for info in page.objects if info.key > after]
    if page.truncated and not rest:
        return None  # it ended before the seq: the LIST starts there
    return ListPage(rest, [], page.truncated, page.next_start_after)


def _list_on(prefix: str, page: ListPage) -> str | None:
    """Where the LIST after a truncated ``page`` of a session's names starts: after its last
    key, or past the names after it that cannot be seqs when that key is none (``seq_after``:
    planted junk costs no page it can jump over); None when no event can follow. Pure."""
    if not page.objects:
        return page.next_start_after
    name = page.objects[-1].key[len(prefix) :]
    if parse_seq(name) is not None:
        return page.next_start_after
    after = seq_after(name)
    return None if after is None else max(prefix + after, page.next_start_after)


def _event_names(
    ctx: StoreContext, session_id: str, after: int, first_page: ListPage | None = None
) -> Iterator[tuple[int, ObjectInfo]]:
    """(seq, listing) of the session's event objects after seq ``after``, in order
    (``first_page``: the first page of that LIST, already made).

    Names that are not seqs (junk, a planted ``-`` or ``…01~``) are skipped, never
    taken for the end of the events: the listing ends only where names sort after
    every possible seq (the manifest, segments, markers). A page that ends in junk is
    followed by one that starts past it (``_list_on``): planted names cost a LIST page
    per 1,000 at most, and none for a run of ``<seq>~…`` names the next page jumps over.
    """
    prefix = ctx.layout.session_prefix(session_id)
    first = ctx.layout.event_key(session_id, after)  # seq 0 is never an event
    page = first_page if first_page is not None else ctx.backend.list_page(prefix, start_after=first)
    while True:
        for info in page.objects:
            name = info.key[len(prefix) :]
            seq = parse_seq(name)
            if seq is not None:
                yield seq, info
            elif name > _LAST_SEQ_NAME:
                return
        start = _list_on(prefix, page) if page.truncated else None
        if start is None:
            return
        page = ctx.backend.list_page(prefix, start_after=start)


def _tail_page(ctx: StoreContext, session_id: str, after: int, *, short: bool = False) -> tuple[list[int], bool]:
    """Seqs listed after seq ``after``, and whether more events may follow (the last page
    ended in an event name): one LIST page of 1,000 keys or, ``short``, a page of
    ``_TAIL_FIRST_PAGE`` keys and, when names up to the events' end fill it, a second of
    1,000; and while a page ends in names that are no seqs, the next page from past them
    (``_list_on``: planted junk costs at most a page per 1,000 names, never the head)."""
    prefix = ctx.layout.session_prefix(session_id)
    start: str | None = ctx.layout.event_key(session_id, after)  # seq 0 is never an event
    seqs: list[int] = []
    sizes = [_TAIL_FIRST_PAGE, 1000] if short else [1000]
    while start is not None:
        page = ctx.backend.list_page(prefix, start_after=start, max_keys=sizes.pop(0) if sizes else 1000)
        names = [o.key[len(prefix) :] for o in page.objects]
        seqs += [s for name in names if (s := parse_seq(name)) is not None]
        if not (page.truncated and names and names[-1] <= _LAST_SEQ_NAME):
            break  # the events end in this page
        if not sizes and parse_seq(names[-1]) is not None:
            return seqs, True
        start = _list_on(prefix, page)
    return seqs, False


def missing_start(loaded: Loaded, found: int, data: bytes | None) -> SessionExpiredError | IntegrityError:
    """The error for a session whose first own event is missing while seq ``found`` is listed
    after it (``data``: that object's bytes, None if it is gone too).

    Expiry removes a session's objects and leaves the rest of its own events, so the gap is
    expiry only where what follows it is one: an event of this incarnation at ``found`` (sealed,
    in a session that takes only sealed events), or nothing any more (expiry going on). Anything
    else there was planted where no event was (the writer role may create any name): it is
    tampering (``IntegrityError`` at ``found``), never expiry, so that one junk object cannot
    make a session pass for expired. Pure."""
    manifest = loaded.manifest
    gap = f"seq {loaded.first_own} is missing"
    if data is not None:
        try:
            raw = decode_raw(manifest, found, data)
        except IntegrityError as error:
            return IntegrityError(manifest.sid, found, f"{error.detail}, and {gap} before it: planted, not expired")
        if raw.envelope.body is not None and loaded.sealed_only:
            detail = f"plaintext event in an encrypted session, and {gap} before it: planted, not expired"
            return IntegrityError(manifest.sid, found, detail)
    return SessionExpiredError(manifest.sid, f"its first events are gone ({gap})")


def find_head(ctx: StoreContext, loaded: Loaded, known: int = 0, *, require_start: bool = True) -> int:
    """The highest seq of the session, starting from ``known`` (a seq the caller knows
    exists: a writer's own head) or from the end of its newest segment.

    A segment's name is a hint, never the head: the LIST starts one seq before the
    segment's end and must show the loose event there (loose events always remain),
    else the segment is passed over. One LIST when fewer than 1,000 events follow
    (in a session with segments, whose names follow the events, the first page is
    short: two LISTs when 64 to 1,063 events follow, see ``_tail_page``); otherwise
    HEAD probes gallop up from the end of those pages (doubling the step) and then
    bisect, until 1,000 events remain for a final LIST. Names among the events that are
    no seqs are skipped, never taken for the end of them (``_tail_page``, ``_event_names``).
    Raises ``SessionExpiredError`` when the session's first own event is gone, or
    ``IntegrityError`` when what is listed after that gap is no event of the session
    (``missing_start``: one GET); with ``require_start`` False, neither: the highest seq
    listed whatever precedes it (where a fence goes).
    """
    session_id = loaded.manifest.sid
    layout = ctx.layout
    floors = sorted({last for _, last in loaded.meta.segments if last > known}, reverse=True)
    seqs: list[int] = []
    more = False
    floor = known
    short = bool(loaded.meta.segments)  # segment names follow the events: a short first page
    for candidate in floors[:3]:  # a few: planted segment names must not cost a LIST each
        seqs, more = _tail_page(ctx, session_id, candidate - 1, short=short)
        if seqs and seqs[0] == candidate:
            floor = candidate
            break
    else:
        seqs, more = _tail_page(ctx, session_id, known, short=short)
    if require_start and floor == 0 and seqs and seqs[0] > loaded.first_own:
        raise missing_start(loaded, seqs[0], get_event_bytes(ctx, session_id, seqs[0]))
    low = seqs[-1] if seqs else floor
    if not more:
        return max(low, loaded.first_own - 1)
    step = 1000
    while low + step <= MAX_SEQ and ctx.has_object(layout.event_key(session_id, low + step)):
        low += step
        step *= 2
    high = min(low + step, MAX_SEQ + 1)  # known absent
    while high - low > 1000:
        middle = (low + high) // 2
        if ctx.has_object(layout.event_key(session_id, middle)):
            low = middle
        else:
            high = middle
    # fewer than 1,000 events follow ``low``: list them to their end, past any junk among them
    return max((seq for seq, _ in _event_names(ctx, session_id, low)), default=low)


def list_sessions(ctx: StoreContext, prefix: str = "", *, start_after: str = "", limit: int | None = None) -> Iterator[str]:
    """Session ids in order (deleted and expired remnants included), one LIST per 1,000."""
    if prefix and not all(c.isalnum() or c in "._-" for c in prefix):
        raise InvalidInputError(f"invalid session id prefix {prefix[:80]!r}")
    layout = ctx.layout
    after = layout.session_prefix(start_after) if start_after else ""
    count = 0
    while True:
        page = ctx.backend.list_page(layout.sessions + prefix, start_after=after, delimiter="/")
        for common in page.prefixes:
            yield common[len(layout.sessions) : -1]
            count += 1
            if limit is not None and count >= limit:
                return
        if not page.truncated:
            return
        after = page.next_start_after
