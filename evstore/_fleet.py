"""Verify every session of a store: ``verify_all``, what an auditor runs over a bucket.

Sessions are taken in id order (``list_sessions``: one LIST per 1,000) and verified
``concurrency`` at a time, each as ``_audit.verify`` checks one (contiguity, every ``prev``,
every tag a configured key opens); the results come back in id order, so the last one a caller
has seen is a place to start again from (``start_after``) after a crash, and at most
``concurrency`` sessions are in memory at once (verify streams each session's events).

Each session ends in one status: ``ok``; ``tampered`` (an ``IntegrityError``: a broken chain, a
forged or planted object, a hole); ``expired`` (its first events or its manifest gone, as the
bucket's lifecycle rules remove them); ``deleted`` (remnants of a delete that gc has yet to
remove); ``remnant`` (objects under an id that has no manifest: no session, only what gc
removes, which anyone who may create objects can make, so it fails no run); ``unreadable``
(anything else: the store failed, a key is refused). ``since``: only sessions with an object
written at or after it, from one flat LIST of the store's objects per 1,000 (what a
create-only principal adds to a session is such an object, so a session it tampered with since
is among them).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING

import msgspec

from . import _read
from ._context import StoreContext
from ._errors import EvstoreError, IntegrityError, SessionExpiredError, SessionNotFoundError

if TYPE_CHECKING:
    from concurrent.futures import Future

#: Sessions verified at once by default.
DEFAULT_CONCURRENCY = 8
STATUSES = ("ok", "tampered", "expired", "deleted", "remnant", "unreadable")


class SessionVerdict(msgspec.Struct, frozen=True):
    """How one session verified: ``status`` (one of ``STATUSES``), the error's message when it
    failed, and when ``ok`` its events and receipt (``SEQ:HASH``)."""

    session_id: str
    status: str
    detail: str = ""
    events: int = 0
    receipt: str | None = None


def verdict(ctx: StoreContext, session_id: str) -> SessionVerdict:
    """Verify one session and say how it ended (never raises an ``EvstoreError``)."""
    from . import _audit  # loaded on first use, as the store loads it

    try:
        result = _audit.verify(ctx, session_id)
    except IntegrityError as exc:
        return SessionVerdict(session_id, "tampered", str(exc))
    except SessionExpiredError as exc:
        return SessionVerdict(session_id, "expired", str(exc))
    except SessionNotFoundError as exc:
        return SessionVerdict(session_id, "deleted" if exc.deleted else "remnant", str(exc))
    except EvstoreError as exc:
        return SessionVerdict(session_id, "unreadable", str(exc))
    return SessionVerdict(session_id, "ok", events=result.events, receipt=str(result.receipt))


def changed_since(ctx: StoreContext, prefix: str, since: datetime, start_after: str = "") -> Iterator[str]:
    """Ids of the sessions (id starting with ``prefix``, after ``start_after``) with an object
    written at or after ``since``, in order: one flat LIST per 1,000 objects, one session's
    names in memory at a time."""
    layout = ctx.layout
    start = layout.session_prefix(start_after) + "\uffff" if start_after else ""
    current: str | None = None
    recent = False
    for info in ctx.backend.list(layout.sessions + prefix, start_after=start):
        split = layout.split(info.key)
        if split is None:
            continue
        session_id = split[0]
        if session_id != current:
            if current is not None and recent:
                yield current
            current, recent = session_id, False
        recent = recent or info.last_modified >= since
    if current is not None and recent:
        yield current


def verify_all(
    ctx: StoreContext,
    *,
    prefix: str = "",
    since: datetime | None = None,
    start_after: str = "",
    concurrency: int = DEFAULT_CONCURRENCY,
) -> Iterator[SessionVerdict]:
    """The verdict on every session (see the module docstring), in id order."""
    if since is None:
        ids: Iterable[str] = _read.list_sessions(ctx, prefix, start_after=start_after)
    else:
        ids = changed_since(ctx, prefix, since, start_after)
    from concurrent.futures import ThreadPoolExecutor  # loaded on first use, as the store's own pool is

    # sessions verify in a pool of their own: each verify waits on reads sent to the store's
    pool = ThreadPoolExecutor(max(1, concurrency), thread_name_prefix="evstore-verify")
    pending: list[Future[SessionVerdict]] = []
    try:
        for session_id in ids:
            pending.append(pool.submit(verdict, ctx, session_id))
            if len(pending) >= 2 * concurrency:
                yield pending.pop(0).result()
        while pending:
            yield pending.pop(0).result()
    finally:
        for future in pending:
            future.cancel()
        pool.shutdown(wait=True, cancel_futures=True)

