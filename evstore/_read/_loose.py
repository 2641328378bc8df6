"""Loose events fetched in order: the listed event objects from a seq on, ``2 * concurrency``
GETs in flight, a seq missing among them a hole (``_loose_batches``); and the GETs of a loose
tail's first events sent early (``_EarlyGets``), beside the segment GETs of the same read
rather than a round after them.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from .._backends import ListPage
from .._context import StoreContext
from .._errors import IntegrityError
from .._ids import parse_seq
from ._events import RawEvent, decode_raw, get_event_bytes
from ._listing import _LAST_SEQ_NAME, _TAIL_FIRST_PAGE, _event_names, _list_on, missing_start
from ._manifest import Loaded

if TYPE_CHECKING:
    from concurrent.futures import Future


def _loose_events(
    ctx: StoreContext,
    session_id: str,
    start: int,
    end: int | None,
    first_page: ListPage | None = None,
    early: _EarlyGets | None = None,
) -> Iterator[tuple[int, bytes | None]]:
    """(seq, bytes) of listed events from ``start`` on, in order, ``2 * concurrency`` GETs in flight
    (``early``: GETs already sent for some of those seqs; each is used instead of a new one)."""

    def seqs() -> Iterator[int]:
        for seq, _ in _event_names(ctx, session_id, start - 1, first_page):
            if end is not None and seq > end:
                return
            yield seq

    def fetch(seq: int) -> bytes | None:
        return get_event_bytes(ctx, session_id, seq)

    return ctx.prefetched(seqs(), fetch, ctx.concurrency * 2, early=early.take if early is not None else None)


class _EarlyGets:
    """GETs of the loose tail's first events, sent from the pool as soon as the segment GETs'
    first window has gone out (so they queue behind those and wait for no segment decode): the
    guessed seqs' at once (``_TAIL_GUESS``), the rest when the tail's LIST names them. ``take``
    hands one over to the stream that reads its seq; after ``close`` none is sent, and those not
    taken are cancelled."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self._released = threading.Event()
        self._futures: dict[int, Future[bytes | None]] = {}
        self._sent: set[int] = set()

    def release(self) -> None:
        """The segment GETs that go first are queued: the early GETs may follow."""
        self._released.set()

    def wait(self) -> None:
        self._released.wait()

    def send(self, seq: int, submit: Callable[[], Future[bytes | None]]) -> bool:
        """Send the GET of ``seq`` (``submit``) unless one was sent already; False once closed."""
        with self._lock:
            if self._closed:
                return False
            if seq not in self._sent:
                self._sent.add(seq)
                self._futures[seq] = submit()
            return True

    def take(self, seq: int) -> Future[bytes | None] | None:
        with self._lock:
            return self._futures.pop(seq, None)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            left = list(self._futures.values())
            self._futures.clear()
        self._released.set()
        for future in left:
            future.cancel()


def _list_tail(ctx: StoreContext, session_id: str, start: int, end: int | None, early: _EarlyGets) -> ListPage:
    """The first LIST page of the loose events from ``start`` on (``_TAIL_FIRST_PAGE`` keys, or
    ``2 * concurrency`` if more; ``_event_names`` asks for the rest a page of 1,000 at a time);
    once it answers, the GETs of its first ``2 * concurrency`` events (to ``end``) go out into
    ``early``: the GETs the stream would send first when it reaches them."""
    prefix = ctx.layout.session_prefix(session_id)
    page = ctx.backend.list_page(
        prefix,
        start_after=ctx.layout.event_key(session_id, start - 1),
        max_keys=max(_TAIL_FIRST_PAGE, 2 * ctx.concurrency),
    )
    return _send_early(ctx, session_id, page, end, early)


def _send_early(ctx: StoreContext, session_id: str, page: ListPage, end: int | None, early: _EarlyGets) -> ListPage:
    """Send the GETs of the first ``2 * concurrency`` events ``page`` lists (to ``end``) into
    ``early``, once the segment GETs that go first are queued; return the page.

    When the page ends in event names before that many were sent (the first 1,000 names of a
    session a little longer than that: the tail starts on the first page and goes on past it),
    the next page is listed now, beside the segment GETs, and its events' GETs follow: the
    stream would list it only once it reached the page's end, a round later. The page returned
    is the two together, so the stream lists nothing twice."""
    prefix = ctx.layout.session_prefix(session_id)
    early.wait()  # behind the segment GETs that go first (or not at all: closed)
    pool = ctx.executor()
    budget = ctx.concurrency * 2
    sent = 0
    index = 0
    while True:
        for info in page.objects[index:]:
            seq = parse_seq(info.key[len(prefix) :])
            if seq is None:
                continue
            if (end is not None and seq > end) or sent >= budget:
                return page
            if not early.send(seq, functools.partial(pool.submit, get_event_bytes, ctx, session_id, seq)):
                return page
            sent += 1
        index = len(page.objects)
        last = page.objects[-1].key[len(prefix) :] if page.objects else ""
        if not page.truncated or last > _LAST_SEQ_NAME or (start := _list_on(prefix, page)) is None:
            return page  # the events end on this page
        more = ctx.backend.list_page(prefix, start_after=start)
        page = ListPage([*page.objects, *more.objects], page.prefixes, more.truncated, more.next_start_after)


def _send_guessed(ctx: StoreContext, session_id: str, guessed: range, early: _EarlyGets) -> None:
    """Once the segment GETs that go first are queued: the tail's GETs follow, the guessed ones
    at once (small, on the wide pool: not queued behind segment GETs), those its LIST names when
    it answers (``early.release``)."""
    pool = ctx.wide_executor()
    for seq in guessed:
        early.send(seq, functools.partial(pool.submit, get_event_bytes, ctx, session_id, seq))
    early.release()


def _loose_batches(
    ctx: StoreContext,
    loaded: Loaded,
    cursor: int,
    end: int | None,
    first_page: ListPage | None,
    early: _EarlyGets,
    guessed: range,
) -> Iterator[list[RawEvent]]:
    """The loose events from ``cursor`` (to ``end``) as the listing names them, each as a list of
    one (``first_page``: the first page of that listing, already made; ``early``: GETs sent for
    some of them; ``guessed``: seqs whose GETs went before a LIST named them, sent again where
    they found nothing). A seq missing before a listed one is a hole, and where it is the first
    own seq, expiry or tampering (``missing_start``)."""
    manifest = loaded.manifest
    sid = manifest.sid
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
