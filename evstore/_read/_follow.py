"""Following a session: the events other writers append, a LIST page at a time."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import msgspec

from .._backends import ListPage
from .._codec import Manifest
from .._context import StoreContext
from .._errors import IntegrityError, InvalidInputError, SessionNotFoundError
from .._ids import parse_seq, seq_after
from .._views import Event
from ._events import RawEvent, decode_at, get_event_bytes, to_event
from ._listing import _LAST_SEQ_NAME
from ._manifest import load


def _follow_on(prefix: str, page: ListPage) -> str | None:
    """``_list_on`` for a page listed with delimiter "/", whose last entry may be a common prefix
    (``<seq>/``, junk among the events, or ``young/`` past them): where the LIST after the
    truncated ``page`` starts, past its last entry and any junk after it; None when no event can
    follow. Pure."""
    last = max(page.objects[-1].key if page.objects else "", page.prefixes[-1] if page.prefixes else "")
    name = last[len(prefix) :]
    if not last or parse_seq(name) is not None:
        return page.next_start_after
    after = seq_after(name)
    return None if after is None else max(prefix + after, page.next_start_after)


class Polled(msgspec.Struct, frozen=True):
    """What one ``poll`` found: the new events (checked, in order), and where the next LIST
    starts when the page ended among the events (None: the log's end was reached)."""

    events: list[RawEvent]
    start: str | None


def poll(ctx: StoreContext, manifest: Manifest, last: int, prev_hash: str | None, start: str | None = None) -> Polled:
    """The events after seq ``last`` that one LIST page shows (``start``: where a page ended
    among the events), each chained to the one before (to ``prev_hash`` when given).

    One LIST with ``StartAfter`` = event ``last``'s key (or ``start``) and delimiter "/": the
    new events, then the session's other names, where ``forks/``, ``rekeys/``, ``segments/``
    and ``young/`` are one common prefix each, so a page with no new event lists the manifest
    and at most six other entries whatever the session's length (without the delimiter it
    listed every segment: a full page of 1,000 keys, about 290 KB from S3, past 24,000
    events). The new events are read ``concurrency`` GETs at a time. ``SessionNotFoundError``
    once the session is deleted: the page shows its tombstone, or at the log's end no longer
    its manifest. Names planted past the events that fill the page are paged over (a LIST per
    1,000 of them) to see those two.
    """
    session_id = manifest.sid
    layout = ctx.layout
    prefix = layout.session_prefix(session_id)
    page = ctx.backend.list_page(prefix, start_after=start or layout.event_key(session_id, last), delimiter="/")
    names = [info.key[len(prefix) :] for info in page.objects]
    last_entry = max(names[-1] if names else "", page.prefixes[-1][len(prefix) :] if page.prefixes else "")
    start = None  # the next LIST is from the last event, unless this page ended among the events:
    if page.truncated and last_entry <= _LAST_SEQ_NAME:
        start = _follow_on(prefix, page)  # then from past it, and past any junk it ended in
    others = [name for name in names if name > _LAST_SEQ_NAME]
    rest = page
    while start is None and rest.truncated:  # the events end here, and planted names fill the page after them
        rest = ctx.backend.list_page(prefix, start_after=rest.next_start_after, delimiter="/")
        others += [name for info in rest.objects if (name := info.key[len(prefix) :]) in ("manifest", "tombstone")]
    if "tombstone" in others:
        raise SessionNotFoundError(session_id, "was deleted", deleted=True)  # before reading what may be its fence
    seqs = [seq for seq in map(parse_seq, names) if seq is not None]
    fetched = ctx.executor().map(lambda seq: get_event_bytes(ctx, session_id, seq), seqs)
    events: list[RawEvent] = []
    for seq, data in zip(seqs, fetched, strict=True):
        if seq != last + 1 or data is None:
            raise IntegrityError(session_id, last + 1, "event is missing (a hole in the log)")
        raw = decode_at(ctx, manifest, seq, data)
        if prev_hash is not None and raw.envelope.prev != prev_hash:
            raise IntegrityError(session_id, seq, "prev hash does not match the previous event (chain broken)", broken_link=True)
        events.append(raw)
        last, prev_hash = seq, raw.hash
    if start is None and "manifest" not in others:
        raise SessionNotFoundError(session_id, "was deleted", deleted=True)
    return Polled(events, start)


def follow(
    ctx: StoreContext,
    session_id: str,
    *,
    after: int = 0,
    after_hash: str | None = None,
    interval: float = 1.0,
    should_stop: Callable[[], bool] = lambda: False,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[Event]:
    """Events after seq ``after`` as other writers append them, until ``should_stop()``: a
    ``poll`` at a time (an idle one is one LIST of the manifest and at most six other names),
    each new event opened and chained to the previous one (to event ``after`` too when
    ``after_hash`` is given). ``sleep(interval)`` runs between polls that found the log's end.
    ``SessionNotFoundError`` once the session is deleted. For a fork, ``after`` must be at
    least the fork seq (the inherited events are the parent's; ``replay`` reads them).
    """
    loaded = load(ctx, session_id)
    if after < loaded.first_own - 1:
        raise InvalidInputError(f"follow a fork from its fork seq {loaded.first_own - 1} on (replay reads the earlier events)")
    manifest = loaded.manifest
    last = after
    prev_hash = after_hash
    start: str | None = None
    while not should_stop():
        polled = poll(ctx, manifest, last, prev_hash, start)
        for raw in polled.events:
            yield to_event(ctx, manifest, raw)
            last, prev_hash = raw.seq, raw.hash
            if should_stop():
                return
        start = polled.start
        if start is None:
            sleep(interval)
