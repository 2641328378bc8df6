"""The events of a session and its ancestors across forks, in order, with the hash chain checked.

A fork whose manifest records its ancestry sends every ancestor's requests ahead in one round
(``_send_ahead``); the walk still goes from parent to parent as each manifest names it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import msgspec

from .._codec import ForkRef, Manifest
from .._context import StoreContext
from .._errors import IntegrityError, InvalidInputError
from .._ids import parse_seq
from ._events import RawEvent, _rekeyed_to, decode_raw, get_event_bytes, same_event
from ._listing import _LAST_SEQ_NAME, missing_start
from ._manifest import Loaded, _SentLoad, cancel_load, finish_load, load, reads_deleted_parent, send_load
from ._segments import _SHORT_RANGE, own_batches

if TYPE_CHECKING:
    from concurrent.futures import Future


#: Forks of forks may nest this deep; a deeper (or circular) ancestry is an integrity error.
MAX_FORK_DEPTH = 100


def lineage(
    ctx: StoreContext, loaded: Loaded, start: int, end: int | None, *, _descendants: tuple[str, ...] = ()
) -> Iterator[tuple[Manifest, RawEvent]]:
    """Events of the session and its ancestors in [start, end], in order, with the chain
    checked (see ``lineage_batches``)."""
    for manifest, batch in lineage_batches(ctx, loaded, start, end, _descendants=_descendants):
        for raw in batch:
            yield manifest, raw


class _Range(msgspec.Struct, frozen=True):
    """The GETs of a session's events ``low`` to ``high``, sent before the walk reaches them.
    ``listed``: a listing named each of them (a fork's own, from its first page), so one that
    is not there is a hole; else the range was computed from fork seqs, and the events may end
    before ``high`` (the walk then finds the event at the fork seq missing)."""

    low: int
    high: int
    events: list[Future[bytes | None]]
    listed: bool = False


class _Ahead(msgspec.Struct, frozen=True):
    """An ancestor's requests sent before the walk reaches it (``_send_ahead``): the ``ref`` the
    fork's ``ancestry`` gives for it, its load, and its inherited range with the GETs of its
    events when that is short (else none)."""

    ref: ForkRef
    load: _SentLoad
    range: _Range


class _SentAhead:
    """What a fork's read sent in its first round (``_send_ahead``): each ancestor's requests by
    session id, and the GETs of the fork's own listed events. The walk takes each where it
    arrives at it; ``drop`` cancels what is left."""

    def __init__(self, ancestors: dict[str, _Ahead], own: _Range | None) -> None:
        self.ancestors = ancestors
        self.own = own

    def take_own(self) -> _Range | None:
        own, self.own = self.own, None
        return own

    def drop(self, session_id: str) -> None:
        """Cancel what was sent for the ancestor ``session_id``: it is not wanted (running
        requests finish unread)."""
        item = self.ancestors.pop(session_id)
        item.load.manifest.cancel()
        cancel_load(item.load)
        for event in item.range.events:
            event.cancel()

    def drop_all(self) -> None:
        for session_id in list(self.ancestors):
            self.drop(session_id)
        own = self.take_own()
        for event in own.events if own is not None else []:
            event.cancel()


def _is_short(low: int, high: int) -> bool:
    """Whether an ancestor's inherited range ``low`` to ``high`` is read from its event GETs, sent
    ahead (no young segment is listed for it), rather than as any session's range is."""
    return 0 < high - low + 1 <= _SHORT_RANGE


def _own_range(ctx: StoreContext, loaded: Loaded, start: int, end: int | None) -> tuple[int, int] | None:
    """The fork's own events to read, ``(low, high)``, when its first page (``Loaded.first_page``)
    lists all of them (it reaches the names after the events, or ends), as consecutive seqs, at
    most ``_SHORT_RANGE``, and no segment of its covers them; else None (``own_batches`` reads
    them when the walk arrives). Pure."""
    page = loaded.first_page
    low = max(start, loaded.first_own)
    if page is None or any(last >= low for _, last in loaded.meta.segments):
        return None
    prefix = ctx.layout.session_prefix(loaded.manifest.sid)
    names = [info.key[len(prefix) :] for info in page.objects]
    if page.truncated and not (names and names[-1] > _LAST_SEQ_NAME):
        return None  # more events may follow the page
    seqs = [seq for name in names if (seq := parse_seq(name)) is not None and seq >= low]
    if end is not None:
        seqs = [seq for seq in seqs if seq <= end]
    if not seqs or seqs != list(range(low, low + len(seqs))) or len(seqs) > _SHORT_RANGE:
        return None
    return low, seqs[-1]


def _send_ahead(ctx: StoreContext, loaded: Loaded, start: int, end: int | None) -> _SentAhead:
    """For a fork whose manifest records its ``ancestry``: every ancestor's load and the event
    GETs of each short inherited range, and the GETs of the fork's own events its first page
    lists (``_own_range``), all sent at once on the wide pool (leaves). The ranges are computed
    from the refs, as the walk will find them if the refs are true; where they are not, the walk
    loads what it finds instead, and what was sent here is dropped unused. Nothing for a session
    that is no fork.

    The loads go first, the deepest ancestor's first: the walk waits for all of them before it
    reads that one's range (whose segments wait on its listing), and for the event GETs only
    as it yields their events."""
    manifest = loaded.manifest
    parent = manifest.parent
    if parent is None or parent.copied:
        return _SentAhead({}, None)
    plan: list[tuple[ForkRef, int, int]] = []  # each ancestor's ref and inherited range, deepest first
    seen: set[str] = set()
    upto = end
    for ref, above in zip([parent, *manifest.ancestry], [*manifest.ancestry, None], strict=True):
        if ref.copied or ref.sid in seen or start > ref.seq:
            break
        seen.add(ref.sid)
        upto = ref.seq if upto is None else min(ref.seq, upto)  # what the walk reads of this ancestor
        plan.insert(0, (ref, max(start, above.seq + 1 if above is not None and not above.copied else 1), upto))
    pool = ctx.wide_executor()

    def send_events(session_id: str, low: int, high: int) -> list[Future[bytes | None]]:
        return [pool.submit(get_event_bytes, ctx, session_id, seq) for seq in range(low, high + 1)]

    loads = [send_load(ctx, ref.sid, upto=None if _is_short(low, high) else high, pool=pool) for ref, low, high in plan]
    ancestors = {
        ref.sid: _Ahead(ref, sent, _Range(low, high, send_events(ref.sid, low, high) if _is_short(low, high) else []))
        for (ref, low, high), sent in zip(plan, loads, strict=True)
    }
    own = _own_range(ctx, loaded, start, end)
    return _SentAhead(ancestors, None if own is None else _Range(*own, send_events(manifest.sid, *own), listed=True))


def _short_range(loaded: Loaded, sent: _Range) -> Iterator[list[RawEvent]]:
    """The session's events ``sent.low`` to ``sent.high`` from the GETs sent ahead, as
    ``own_batches`` yields them: a missing event before one that is there, or one that was
    listed, is a hole (where it is the first, expiry or tampering: ``missing_start``); where
    none is there from some seq on, the events just end there."""
    manifest = loaded.manifest
    for index, seq in enumerate(range(sent.low, sent.high + 1)):
        data = sent.events[index].result()
        if data is None:
            rest = enumerate(sent.events[index + 1 :], seq + 1)
            later = next(((after, found) for after, event in rest if (found := event.result()) is not None), None)
            if later is None and not sent.listed:
                return
            if seq == loaded.first_own:
                raise missing_start(loaded, *(later or (seq, None)))
            raise IntegrityError(manifest.sid, seq, "event is missing (a hole in the log)")
        yield [decode_raw(manifest, seq, data)]


def lineage_batches(
    ctx: StoreContext,
    loaded: Loaded,
    start: int,
    end: int | None,
    *,
    _descendants: tuple[str, ...] = (),
    _ahead: _SentAhead | None = None,
) -> Iterator[tuple[Manifest, list[RawEvent]]]:
    """Events of the session and its ancestors in [start, end], in order, with the chain checked,
    as lists of events of one session (``own_batches``); a list holds only events that passed,
    so an event that fails is raised for after those before it are yielded.

    Each event's ``prev`` must be the hash of the event before it; the first
    event's is checked too when the range starts at 1 (against the manifest)
    or at a fork's first own seq (against the recorded parent hash). Ancestry
    deeper than ``MAX_FORK_DEPTH`` or circular is an integrity error. Once a
    session is encrypted (its manifest names a key, a rekey left a salt, or an
    earlier event is sealed), and whenever the store requires encryption, a
    plaintext event is refused.

    The walk goes from parent to parent as each manifest names it; a fork's recorded ancestry
    only sends the ancestors' requests ahead (``_send_ahead``), all in one round with the GETs
    of the fork's own listed events, and each is used only for the session, incarnation, fork
    seq and range the walk itself arrives at (``_inherited``, ``_own_events``; ``_chained``
    checks the session's own events).
    """
    if _ahead is None:
        ahead = _send_ahead(ctx, loaded, start, end)
        try:
            yield from lineage_batches(ctx, loaded, start, end, _descendants=_descendants, _ahead=ahead)
        finally:
            ahead.drop_all()
        return
    manifest = loaded.manifest
    parent = manifest.parent
    prev: str | None = loaded.genesis if start <= loaded.first_own else None
    if parent is not None and not parent.copied:
        lineage_ids = (*_descendants, f"{manifest.sid}@{manifest.uid}")
        yield from _inherited(ctx, manifest, parent, start, end, lineage_ids, _ahead)
        prev = parent.hash if start <= parent.seq + 1 else None
    yield from _chained(ctx, loaded, _own_events(ctx, loaded, start, end, _descendants, _ahead), prev)


def _inherited(
    ctx: StoreContext,
    manifest: Manifest,
    parent: ForkRef,
    start: int,
    end: int | None,
    lineage_ids: tuple[str, ...],
    ahead: _SentAhead,
) -> Iterator[tuple[Manifest, list[RawEvent]]]:
    """The events a fork (``manifest``, whose ``parent`` is referenced, not copied) inherits in
    [start, end], as ``lineage_batches`` yields them: its parent's lineage to the fork seq, whose
    last event must be there and be the one the fork was made from (its recorded hash, or the
    hash a rekey of the session owning it moved that to). ``lineage_ids``: the walk's sessions
    so far (``sid@uid``), this one last: ancestry deeper than ``MAX_FORK_DEPTH``, or circular,
    is an integrity error."""
    if len(lineage_ids) > MAX_FORK_DEPTH or f"{parent.sid}@{parent.uid}" in lineage_ids:
        raise IntegrityError(manifest.sid, None, f"fork ancestry is circular or deeper than {MAX_FORK_DEPTH} sessions")
    if start > parent.seq:
        return
    inherited_end = min(parent.seq, end) if end is not None else parent.seq
    ancestor = _parent_loaded(ctx, manifest, parent, inherited_end, ahead)
    last: RawEvent | None = None
    owner = ancestor.manifest  # the session whose own event ``last`` is: the parent's, or an ancestor's
    for item in lineage_batches(ctx, ancestor, start, inherited_end, _descendants=lineage_ids, _ahead=ahead):
        if item[1]:
            owner, last = item[0], item[1][-1]
        yield item
    if end is None or end >= parent.seq:
        if last is None or last.seq != parent.seq:
            raise IntegrityError(manifest.sid, parent.seq, "the parent's events up to the fork seq are missing")
        if last.hash != parent.hash and not _rekeyed_to(ctx, owner, parent.hash, last.hash):
            raise IntegrityError(manifest.sid, parent.seq, "the parent's event differs from the one this fork was made from")


def _parent_loaded(ctx: StoreContext, fork: Manifest, parent: ForkRef, inherited_end: int, ahead: _SentAhead) -> Loaded:
    """The ``parent`` of ``fork`` loaded: from the load sent ahead for it when that was sent for
    this incarnation and range (else it is dropped, and the parent loaded now). Raises
    ``IntegrityError`` when it is another incarnation than the fork's, or deleted without keeping
    this fork (``reads_deleted_parent``)."""
    sent = ahead.ancestors.get(parent.sid)  # its short range, if any, is taken when the walk is there
    if sent is not None and (sent.ref != parent or sent.range.high != inherited_end):
        ahead.drop(parent.sid)  # the ancestry named another incarnation, or fork seq
        sent = None
    ancestor = finish_load(ctx, sent.load) if sent else load(ctx, parent.sid, deleted_ok=True, upto=inherited_end)
    if ancestor.manifest.uid != parent.uid:
        raise IntegrityError(fork.sid, None, f"parent {parent.sid!r} is not the session this fork was made from")
    if ancestor.meta.tombstone and not reads_deleted_parent(ctx, fork, ancestor):
        raise IntegrityError(fork.sid, None, f"fork of {parent.sid!r} is not one its delete kept (planted after it)")
    return ancestor


def _own_events(
    ctx: StoreContext, loaded: Loaded, start: int, end: int | None, descendants: tuple[str, ...], ahead: _SentAhead
) -> Iterator[list[RawEvent]]:
    """The session's own events in [start, end], as ``own_batches`` yields them: from the GETs sent
    ahead for them (an ancestor's short range, or a fork's own listed events) when those start
    where the walk does, else read now (an ancestor's to its fork seq: ``through_end``). Takes
    what was sent ahead at once: call it when the walk arrives at these events."""
    if descendants:  # an ancestor: what was sent ahead for it, if anything
        sent_here = ahead.ancestors.pop(loaded.manifest.sid, None)
        short = sent_here.range if sent_here is not None and sent_here.range.events else None
    else:
        short = ahead.take_own()
    if short is not None and short.low == max(start, loaded.first_own):
        return _short_range(loaded, short)
    return own_batches(ctx, loaded, start, end, through_end=bool(descendants))


def _chained(
    ctx: StoreContext, loaded: Loaded, batches: Iterator[list[RawEvent]], prev: str | None
) -> Iterator[tuple[Manifest, list[RawEvent]]]:
    """``batches`` of the session's own events, as ``lineage_batches`` yields them, each event
    checked: it names the hash of the one before it (``prev`` for the first, when known; or one a
    rekey record leads to: ``same_event``), and it is sealed where the session takes only sealed
    events, where the store requires encryption, or after a sealed event."""
    manifest = loaded.manifest
    encrypted = loaded.sealed_only or ctx.require_encryption
    sealed_before = False
    for batch in batches:
        for index, raw in enumerate(batch):
            envelope = raw.envelope
            failure = None
            if prev is not None and envelope.prev != prev and not same_event(ctx, manifest, envelope.prev, prev):
                failure = IntegrityError(
                    raw.session_id, raw.seq, "prev hash does not match the previous event (chain broken)", broken_link=True
                )
            elif envelope.body is None:  # sealed (an envelope carries exactly one of body and sealed)
                sealed_before = True
            elif encrypted or sealed_before:
                where = "in an encrypted session" if encrypted and not ctx.require_encryption else "where encryption is required"
                failure = IntegrityError(raw.session_id, raw.seq, f"plaintext event {where} (forged, or written before a rekey)")
            if failure is not None:
                if index:
                    yield manifest, batch[:index]
                raise failure
            prev = raw.hash
        yield manifest, batch


def event_hash(ctx: StoreContext, loaded: Loaded, seq: int) -> str:
    """The hash of the lineage's event at ``seq`` (an ancestor's for inherited seqs)."""
    manifest = loaded.manifest
    parent = manifest.parent
    if parent is not None and not parent.copied and seq <= parent.seq:
        if seq == parent.seq:
            return parent.hash
        return event_hash(ctx, load(ctx, parent.sid, deleted_ok=True), seq)  # bounded by the fork depth check of reads
    data = get_event_bytes(ctx, manifest.sid, seq)
    if data is None:
        raise InvalidInputError(f"session {manifest.sid!r} has no event at seq {seq}")
    return decode_raw(manifest, seq, data).hash
