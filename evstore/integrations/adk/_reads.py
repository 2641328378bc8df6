"""Reading ADK sessions: whole (kept, so that the next read lists only what came after), or
backwards from the head as far as the events wanted reach; and the sync cores of
``get_session`` and ``list_sessions``, which settle a session's pending scoped deltas before
they answer.
"""

from __future__ import annotations

import itertools
from datetime import datetime
from typing import Any

from google.adk.events.event import Event
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.sessions.session import Session

from ... import Event as StoreEvent
from ... import IntegrityError, SessionExpiredError
from ... import Session as Writer
from ... import SessionNotFoundError as StoreSessionNotFoundError
from .._common import SessionLog
from ._context import Known, ServiceContext
from ._mapping import (
    app_state_evstore_id,
    encode_part,
    merged,
    parse_session_id,
    record_in,
    record_of,
    record_time,
    revision_marker,
    session_evstore_id,
    stored_event,
)
from ._scoped import scoped_state, settle, states, user_state

__all__ = ["Tail", "get_session", "known_at", "list_sessions", "read_tail", "record_at"]


class Tail:
    """What reading a session backwards from ``head`` found."""

    def __init__(self, uid: str, head: int) -> None:
        self.uid = uid
        self.head = head
        self.events: list[Event] = []  # newest first
        self.state_seq = 0
        self.state: dict[str, Any] | None = None  # the snapshot, when the newest record carries it
        self.updated: float | None = None
        self.found_newest = False
        self.newest: tuple[int, dict[str, Any]] | None = None  # the newest ADK record, by seq

    def take_state(self, evstore_id: str, seq: int, record: dict[str, Any]) -> None:
        """Where the newest record (at ``seq``) says the session state is: in it, or at the
        earlier seq its ``state_at`` names (``IntegrityError`` when it names none)."""
        if isinstance(record.get("state"), dict):
            self.state_seq, self.state = seq, record["state"]
        else:
            state_at = record.get("state_at", 0)
            if isinstance(state_at, bool) or not isinstance(state_at, int) or not 0 <= state_at < seq:
                raise IntegrityError(evstore_id, seq, "the ADK record points to no earlier state snapshot")
            self.state_seq = state_at


def known_at(ctx: ServiceContext, evstore_id: str, writer: Writer, new: list[StoreEvent] | None) -> Known | None:
    """What this service knows of the session, brought to ``writer``'s head with the ``new``
    events (``ServiceContext.caught_up``); None when it knows nothing that ends where they start."""
    with ctx.lock:
        known = ctx.known.get(evstore_id)
    start = new[0].seq - 1 if new else writer.head
    if new is None or known is None or known.uid != writer.manifest.uid or known.head != start:
        return None
    for stored in new:
        ctx.fold(evstore_id, known, stored.seq, record_of(stored))
    ctx.keep(evstore_id, known)
    return known


def _resumed(ctx: ServiceContext, evstore_id: str) -> tuple[Writer, Known]:
    """A new writer at the session's head and the session read whole with it, in one pass
    (``SessionLog.resume``: the requests of a replay, the writer included), both kept. The
    pass folds the context view, which leaves out what a retraction withdrew: a session
    with a retraction (or an event of more than one message) is read again (``_read_known``).
    Call under the id's stripe."""
    log = SessionLog.resume(ctx.store, evstore_id)
    writer = log.writer
    ctx.hold(evstore_id, writer)
    live = log.live
    if [(position.seq, position.index) for position, _ in live] != [(seq, 0) for seq in range(1, writer.head + 1)]:
        return writer, _read_known(ctx, evstore_id, writer)
    known = Known(writer.manifest.uid)
    for position, message in live:
        ctx.fold(evstore_id, known, position.seq, record_in([message]))
    known.head = writer.head
    return writer, ctx.keep(evstore_id, known)


def _read_known(ctx: ServiceContext, evstore_id: str, writer: Writer) -> Known:
    """The session read whole, forwards (its segments: a few requests per 2,048 events), to
    ``writer``'s head, and kept."""
    known = Known(writer.manifest.uid)
    for stored in ctx.store.replay(evstore_id, start=1, end=writer.head) if writer.head else ():
        ctx.fold(evstore_id, known, stored.seq, record_of(stored))
    known.head = writer.head
    return ctx.keep(evstore_id, known)


def _tail_of(ctx: ServiceContext, evstore_id: str, known: Known, limit: int | None, after: float | None, created: str) -> Tail:
    """What ``read_tail`` finds, from what this service knows (no request but a state snapshot's)."""
    tail = Tail(known.uid, known.head)
    if known.newest is not None:
        seq, record = known.newest
        tail.found_newest = True
        tail.newest = known.newest
        tail.take_state(evstore_id, seq, record)
        if record.get("kind") == "session":
            tail.updated = record_time(record, evstore_id, seq)
    for seq, record in reversed(known.events) if limit != 0 else ():
        event = stored_event(record, evstore_id, seq)
        if tail.updated is None:
            tail.updated = event.timestamp
        if after is not None and event.timestamp < after:
            break
        tail.events.append(event)
        if limit is not None and len(tail.events) >= limit:
            break
    if tail.updated is None and known.events:
        tail.updated = stored_event(known.events[-1][1], evstore_id, known.events[-1][0]).timestamp
    if tail.updated is None:  # created, but its creation record never written (a crash)
        tail.updated = datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
    return tail


def read_tail(ctx: ServiceContext, evstore_id: str, writer: Writer, limit: int | None, after: float | None) -> Tail:
    """Events newest first while they are wanted, and the newest record's state pointer and time."""
    tail = Tail(writer.manifest.uid, writer.head)
    collecting = limit != 0
    first = (limit + 2) if limit is not None else 32
    if collecting:
        events = ctx.chunks(evstore_id, tail.head, first, tail.uid)
    else:  # only the newest record is wanted: usually the head (one GET)
        head_event = writer.head_event()
        events = itertools.chain([head_event] if head_event else [], ctx.chunks(evstore_id, tail.head - 1, first, tail.uid))
    for stored in events:
        record = record_of(stored)
        if record is None:
            continue
        kind = record.get("kind")
        if kind not in ("event", "session"):
            continue
        if not tail.found_newest:
            tail.found_newest = True
            tail.newest = (stored.seq, record)
            tail.updated = record_time(record, evstore_id, stored.seq) if kind == "session" else None
            tail.take_state(evstore_id, stored.seq, record)
            if tail.state is not None:
                ctx.remember_snapshot(f"{evstore_id}:{tail.uid}:{stored.seq}", record["state"])
        if kind == "session":
            break
        if collecting:
            event = stored_event(record, evstore_id, stored.seq)
            if tail.updated is None:
                tail.updated = event.timestamp
            if after is not None and event.timestamp < after:
                collecting = False
            else:
                tail.events.append(event)
                if limit is not None and len(tail.events) >= limit:
                    collecting = False
        elif tail.updated is None:
            tail.updated = stored_event(record, evstore_id, stored.seq).timestamp
        if not collecting:
            break
    if tail.updated is None:  # created, but its creation record never written (a crash)
        tail.updated = datetime.fromisoformat(writer.manifest.created.replace("Z", "+00:00")).timestamp()
    return tail


def record_at(ctx: ServiceContext, evstore_id: str, seq: int) -> tuple[int, dict[str, Any]] | None:
    """The newest ``session`` or ``event`` record at or below ``seq``."""
    for stored in ctx.chunks(evstore_id, seq, 2):
        record = record_of(stored)
        if record is not None and record.get("kind") in ("event", "session"):
            return stored.seq, record
    return None


def _session_from(ctx: ServiceContext, app_name: str, user_id: str, session_id: str, evstore_id: str, tail: Tail) -> Session:
    own = tail.state if tail.state is not None else ctx.snapshot(evstore_id, tail.uid, tail.state_seq)
    app, user = states(ctx, app_name, user_id)
    session = Session(
        id=session_id,
        app_name=app_name,
        user_id=user_id,
        state=merged(own, app, user),
        events=list(reversed(tail.events)),
        last_update_time=tail.updated or 0.0,
    )
    session._storage_update_marker = revision_marker(tail.uid, tail.head, tail.state_seq)
    return session


def get_session(
    ctx: ServiceContext, app_name: str, user_id: str, session_id: str, config: GetSessionConfig | None
) -> Session | None:
    evstore_id = session_evstore_id(ctx.prefix, app_name, user_id, session_id)
    limit = config.num_recent_events if config is not None else None
    after = config.after_timestamp if config is not None else None
    with ctx.stripe(evstore_id):
        with ctx.lock:
            held = evstore_id in ctx.writers
        try:
            if not held and limit is None and after is None:  # the whole session is wanted: keep it
                writer, known = _resumed(ctx, evstore_id)
                new = None
            else:
                writer, new = ctx.caught_up(evstore_id)
                known = None
        except (StoreSessionNotFoundError, SessionExpiredError):
            ctx.forget(evstore_id)
            return None
        known = known or known_at(ctx, evstore_id, writer, new)
        if known is None and limit is None and after is None:
            known = _read_known(ctx, evstore_id, writer)  # the whole session is wanted: keep it
        if known is not None:
            tail = _tail_of(ctx, evstore_id, known, limit, after, writer.manifest.created)
        else:
            tail = read_tail(ctx, evstore_id, writer, limit, after)  # a few recent events: read backwards
    settle(ctx, app_name, user_id, evstore_id, tail.uid, tail.head, tail.newest)
    return _session_from(ctx, app_name, user_id, session_id, evstore_id, tail)


def list_sessions(ctx: ServiceContext, app_name: str, user_id: str | None) -> list[Session]:
    prefix = f"{ctx.prefix}.s.{encode_part(app_name)}." + (f"{encode_part(user_id)}." if user_id is not None else "")
    sessions: list[Session] = []
    scoped: dict[str, dict[str, Any]] = {}
    for evstore_id in list(ctx.store.list_sessions(prefix)):
        names = parse_session_id(ctx.prefix, evstore_id)
        if names is None or names[0] != app_name or (user_id is not None and names[1] != user_id):
            continue
        _, user, sid = names
        with ctx.stripe(evstore_id):
            try:
                writer, new = ctx.caught_up(evstore_id)
            except (StoreSessionNotFoundError, SessionExpiredError):
                ctx.forget(evstore_id)
                continue  # a deleted session's remnants
            known = known_at(ctx, evstore_id, writer, new)
            if known is not None:
                tail = _tail_of(ctx, evstore_id, known, 0, None, writer.manifest.created)
            else:
                tail = read_tail(ctx, evstore_id, writer, 0, None)
        settle(ctx, app_name, user, evstore_id, tail.uid, tail.head, tail.newest)
        own = tail.state if tail.state is not None else ctx.snapshot(evstore_id, tail.uid, tail.state_seq)
        sessions.append(Session(id=sid, app_name=app_name, user_id=user, state=own, last_update_time=tail.updated or 0.0))
        sessions[-1]._storage_update_marker = revision_marker(tail.uid, tail.head, tail.state_seq)
    app = scoped_state(ctx, app_state_evstore_id(ctx.prefix, app_name))[2]  # after every session's deltas are settled
    for session in sessions:
        if session.user_id not in scoped:
            scoped[session.user_id] = user_state(ctx, app_name, session.user_id)
        session.state = merged(session.state, app, scoped[session.user_id])
    sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
    return sessions
