"""Writing ADK sessions: the sync cores of ``create_session``, ``append_event`` and
``delete_session``. A session record (the creation, or an event) is appended at the head the
session object was read at and is the commit point of its ``app:`` and ``user:`` deltas, which
are then applied to their logs (``_scoped``); an event that rewinds an invocation is followed by
an evstore retraction.
"""

from __future__ import annotations

import contextlib
from typing import Any

from google.adk.events.event import Event
from google.adk.sessions.session import Session

from ... import Message, SessionExistsError, SessionExpiredError, WriteConflictError
from ... import Session as Writer
from ... import SessionNotFoundError as StoreSessionNotFoundError
from ._context import Known, ServiceContext
from ._errors import AlreadyExistsError, SessionNotFoundError, StaleSessionError
from ._mapping import (
    META_KEY,
    RECORD_VERSION,
    dump_event,
    event_text,
    logger,
    merged,
    parse_marker,
    record_of,
    revision_marker,
    scoped_source,
    session_evstore_id,
    split_state,
)
from ._reads import known_at, read_tail, record_at
from ._scoped import apply_scoped, scoped_logs, scoped_part, scoped_state, settle, states

__all__ = ["append_event", "create_session", "delete_session"]


def create_session(
    ctx: ServiceContext, app_name: str, user_id: str, state: dict[str, Any] | None, session_id: str, now: float
) -> Session:
    evstore_id = session_evstore_id(ctx.prefix, app_name, user_id, session_id)
    app_delta, user_delta, own = split_state(state)
    app, user = states(ctx, app_name, user_id)  # their heads bound where the deltas can be applied
    with ctx.stripe(evstore_id):
        try:
            writer = ctx.store.create(evstore_id, retention=ctx.retention)
        except SessionExistsError:
            raise AlreadyExistsError(evstore_id, f"Session with id {session_id} already exists.") from None
        record = {
            "v": RECORD_VERSION,
            "kind": "session",
            "app_name": app_name,
            "user_id": user_id,
            "session_id": session_id,
            "time": now,
            "state": own,
        }
        if app_delta or user_delta:  # the commit point of these too: see ``settle``
            record["scoped"] = scoped_part(ctx, app_name, user_id, app_delta, user_delta)
        seq = writer.append({"role": "system", "content": None, "meta": {META_KEY: record}}, expected_head=writer.head)
        uid = writer.manifest.uid
        known = Known(uid)
        ctx.fold(evstore_id, known, seq, record)
        ctx.hold(evstore_id, writer)
        ctx.keep(evstore_id, known)
    if "scoped" in record:
        app_after, user_after = apply_scoped(ctx, app_name, user_id, scoped_source(evstore_id, uid, seq), record["scoped"])
        app, user = (app_after if app_delta else app), (user_after if user_delta else user)
    ctx.vouch(evstore_id, uid, seq)
    session = Session(id=session_id, app_name=app_name, user_id=user_id, state=merged(own, app, user), last_update_time=now)
    session._storage_update_marker = revision_marker(uid, seq, seq)
    return session


def delete_session(ctx: ServiceContext, app_name: str, user_id: str, session_id: str) -> None:
    evstore_id = session_evstore_id(ctx.prefix, app_name, user_id, session_id)
    with ctx.stripe(evstore_id):
        ctx.forget(evstore_id)
        with contextlib.suppress(StoreSessionNotFoundError):  # never created, or deleted: a no-op, as ADK's
            ctx.store.delete(evstore_id)


def append_event(ctx: ServiceContext, session: Session, event: Event) -> str:
    """Store ``event`` for ``session`` at the revision its marker names; return the new marker."""
    evstore_id = session_evstore_id(ctx.prefix, session.app_name, session.user_id, session.id)
    dumped = dump_event(event)
    marker = session._storage_update_marker
    parsed = parse_marker(marker) if marker is not None else None
    deltas = split_state(event.actions.state_delta if event.actions else None)[:2]
    for (_, scoped_id), delta in zip(scoped_logs(ctx, session.app_name, session.user_id), deltas, strict=True):
        with ctx.lock:
            held = scoped_id in ctx.writers
        if delta and not held:  # hold its head before the record names it (``_scoped.scoped_part``)
            scoped_state(ctx, scoped_id)
    for settled in (False, True):
        with ctx.stripe(evstore_id):
            writer, uid, head, state_seq = _revision(ctx, session, evstore_id, parsed)
            if settled or not head or ctx.vouched_for(evstore_id, uid, head):
                seq, record, new_marker = _write_event(ctx, session, event, evstore_id, writer, head, state_seq, dumped)
                new_head = writer.head
                break
        # a record goes on top of others only once their deltas are in the app and user logs
        try:
            newest = record_at(ctx, evstore_id, head)
        except (StoreSessionNotFoundError, SessionExpiredError):
            ctx.forget(evstore_id)
            raise SessionNotFoundError(evstore_id, f"Session {session.id} not found.") from None
        settle(ctx, session.app_name, session.user_id, evstore_id, uid, head, newest)
    if "scoped" in record:
        apply_scoped(ctx, session.app_name, session.user_id, scoped_source(evstore_id, uid, seq), record["scoped"])
    ctx.vouch(evstore_id, uid, new_head)
    return new_marker


def _revision(
    ctx: ServiceContext, session: Session, evstore_id: str, parsed: tuple[str, int, int] | None
) -> tuple[Writer, str, int, int]:
    """(writer, uid, head, state seq) of the stored revision ``session`` was read at (its marker,
    ``parsed``); ``StaleSessionError`` when it is not the stored head. Call under the id's stripe."""
    with ctx.lock:
        writer = ctx.writers.get(evstore_id)
    if writer is None or parsed is None or parsed[:2] != (writer.manifest.uid, writer.head):
        # not the revision the cached writer is at (or none cached): catch up to learn the head;
        # at it, the append is its PUT alone (a delete meanwhile meets its fence there)
        try:
            writer, new = ctx.caught_up(evstore_id)
        except (StoreSessionNotFoundError, SessionExpiredError):
            ctx.forget(evstore_id)
            raise SessionNotFoundError(evstore_id, f"Session {session.id} not found.") from None
        known_at(ctx, evstore_id, writer, new)
    uid, head = writer.manifest.uid, writer.head
    if parsed is not None:
        if parsed[0] != uid:  # an object of a session since deleted and created again
            raise StaleSessionError(evstore_id, head + 1)
        if parsed[1] != head:
            raise StaleSessionError(evstore_id, parsed[1] + 1)
        return writer, uid, head, parsed[2]
    # an object this service did not make: accept it if its last event is the stored head's
    tail = read_tail(ctx, evstore_id, writer, 1, None)
    stored_last = tail.events[0].id if tail.events else None
    if stored_last != (session.events[-1].id if session.events else None):
        raise StaleSessionError(evstore_id, head + 1)
    return writer, uid, head, tail.state_seq


def _write_event(
    ctx: ServiceContext,
    session: Session,
    event: Event,
    evstore_id: str,
    writer: Writer,
    head: int,
    state_seq: int,
    dumped: dict[str, Any],
) -> tuple[int, dict[str, Any], str]:
    """Append ``event``'s record (``dumped``: the event as JSON) at ``head``; return (its seq, the
    record, the new marker). Call under the id's stripe."""
    uid = writer.manifest.uid
    app_delta, user_delta, own_delta = split_state(event.actions.state_delta if event.actions else None)
    role = "user" if event.author == "user" else "assistant"
    record: dict[str, Any] = {"v": RECORD_VERSION, "kind": "event", "event": dumped}
    new_state: dict[str, Any] | None = None
    if own_delta:
        new_state = {**ctx.snapshot(evstore_id, uid, state_seq), **own_delta}
        record["state"] = new_state
    else:
        record["state_at"] = state_seq
    if app_delta or user_delta:  # the commit point of these too: see ``settle``
        record["scoped"] = scoped_part(ctx, session.app_name, session.user_id, app_delta, user_delta)
    message: Message = {"role": role, "content": event_text(event), "meta": {META_KEY: record}}
    try:  # the event id keys the append: a retry that finds it landed gets its seq, writes nothing
        seq = writer.append(message, expected_head=head, idempotency_key=f"adk-event:{event.id}" if event.id else None)
    except WriteConflictError:
        raise StaleSessionError(evstore_id, head + 1) from None
    except StoreSessionNotFoundError:
        ctx.forget(evstore_id)
        raise SessionNotFoundError(evstore_id, f"Session {session.id} not found.") from None
    with ctx.lock:
        known = ctx.known.get(evstore_id)
    if known is not None and known.uid == uid and known.head == seq - 1:
        ctx.fold(evstore_id, known, seq, record)
    if new_state is not None:
        state_seq = seq
        ctx.remember_snapshot(f"{evstore_id}:{uid}:{seq}", new_state)
    rewound = event.actions.rewind_before_invocation_id if event.actions else None
    if rewound:
        _retract(ctx, evstore_id, writer, rewound, seq)
    return seq, record, revision_marker(uid, writer.head, state_seq)


def _retract(ctx: ServiceContext, evstore_id: str, writer: Writer, invocation_id: str, seq: int) -> None:
    """Withdraw from evstore's context view every event from the invocation's first one to ``seq``."""
    first = None
    for stored in ctx.store.replay(evstore_id, start=1, end=seq - 1):
        record = record_of(stored)
        stored_event = record.get("event") if record is not None and record.get("kind") == "event" else None
        if isinstance(stored_event, dict) and stored_event.get("invocation_id") == invocation_id:
            first = stored.seq
            break
    if first is None:
        return
    try:
        writer.rewind(first - 1, expected_head=seq)
    except WriteConflictError:  # another writer went on meanwhile: its events must stay in the context view
        logger.warning(
            "session %s: rewind of invocation %s left out of the context view (concurrent append)", evstore_id, invocation_id
        )
