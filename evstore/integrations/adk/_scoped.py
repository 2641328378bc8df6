"""The ``app:`` and ``user:`` state logs: reading a scope's state at its log's head, applying a
session record's deltas to them once whoever applies them, and settling what a crash left
undone (see the package docstring for the commit protocol).

A scope's log is one evstore session (``<prefix>.a.<app>``, ``<prefix>.u.<app>.<user>``) whose
every record carries the whole scoped state after its delta, so its head event is the state.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

from ... import Message, SessionExistsError, WriteConflictError
from ... import Session as Writer
from ... import SessionNotFoundError as StoreSessionNotFoundError
from ._context import ServiceContext
from ._mapping import META_KEY, RECORD_VERSION, app_state_evstore_id, record_of, scoped_source, user_state_evstore_id

__all__ = ["apply_scoped", "scoped_logs", "scoped_part", "scoped_state", "settle", "states", "user_state"]

_SCOPED_ATTEMPTS = 50


def scoped_state(ctx: ServiceContext, evstore_id: str) -> tuple[Writer | None, int, dict[str, Any]]:
    """(writer, head, the app or user state stored in ``evstore_id`` at that head); ({} when none yet)."""
    with ctx.stripe(evstore_id):
        with ctx.lock:
            cached = evstore_id in ctx.writers
        if not cached and not _listed(ctx, evstore_id):
            return None, 0, {}  # one LIST: an app or user without scoped state yet is the usual case
        try:
            writer, new = ctx.caught_up(evstore_id)
        except StoreSessionNotFoundError:
            return None, 0, {}
        uid, head = writer.manifest.uid, writer.head
        for stored in new or ():  # each record carries the whole scoped state after it
            record = record_of(stored)
            if record is not None and isinstance(record.get("state"), dict):
                ctx.remember_snapshot(f"{evstore_id}:{uid}:{stored.seq}", record["state"])
        with ctx.lock:
            known = ctx.snapshots.get(f"{evstore_id}:{uid}:{head}")
        if known is not None:  # events never change: the head's snapshot read or written before
            return writer, head, copy.deepcopy(known)
        newest = writer.head_event()  # each record carries the whole state: the head's is it (one GET)
        for stored in itertools.chain([newest] if newest is not None else [], ctx.chunks(evstore_id, head - 1, 1)):
            record = record_of(stored)
            if record is not None and isinstance(record.get("state"), dict):
                state = ctx.remember_snapshot(f"{evstore_id}:{uid}:{stored.seq}", record["state"])
                return writer, head, copy.deepcopy(state)
        return writer, head, {}


def _listed(ctx: ServiceContext, evstore_id: str) -> bool:
    """Whether the store lists the session (one LIST; its remnants after a delete count)."""
    for found in ctx.store.list_sessions(evstore_id):
        if found == evstore_id:
            return True
        if found + "/" > evstore_id + "/":  # listed in the order of "<id>/"
            return False
    return False


def _scoped_cached(ctx: ServiceContext, evstore_id: str) -> tuple[Writer, int, dict[str, Any]] | None:
    """(writer, head, state at that head) for an app or user state log from what this service
    holds (no request), or None. The head may be behind: an append at it is conditional."""
    with ctx.lock:
        writer = ctx.writers.get(evstore_id)
        state = ctx.snapshots.get(f"{evstore_id}:{writer.manifest.uid}:{writer.head}") if writer is not None else None
    if writer is None or (state is None and writer.head):
        return None
    return writer, writer.head, copy.deepcopy(state or {})


def _applied(ctx: ServiceContext, evstore_id: str, source: str, after: int, head: int) -> bool:
    """Whether a record of the app or user state log ``evstore_id`` between ``after`` (exclusive)
    and ``head`` applied the delta of ``source`` (read forwards: it usually follows ``after``)."""
    start = after + 1
    size = 8
    while start <= head:
        end = min(head, start + size - 1)
        for stored in ctx.store.replay(evstore_id, start=start, end=end):
            record = record_of(stored)
            if record is not None and record.get("source") == source:
                return True
        start, size = end + 1, min(size * 2, 1024)
    return False


def _update_scoped(
    ctx: ServiceContext, evstore_id: str, kind: str, delta: dict[str, Any], source: str, after: int
) -> dict[str, Any]:
    """Apply ``delta``, the app or user part of the session record ``source`` names, to the
    state in ``evstore_id`` at its head, once; return the state after it.

    ``after``: a head of the log from before that record was written, so the delta is in no
    record up to it. Once, whoever applies it (the appender, or readers completing it): the
    records from ``after`` to the head this attempt starts at are searched for ``source``
    (none when the head is ``after``), and the append is keyed by ``source``
    (``idempotency_key``) at that head, so a racing appender of the same delta either takes
    the seq first (its record is taken for this one: the same delta on the same state) or
    is seen after the conflict (the writer knows the keys it caught up on).
    The first attempt appends at the head this service holds without a request; a conflict
    reads what came after it."""
    held = _scoped_cached(ctx, evstore_id)
    searched = after
    for _ in range(_SCOPED_ATTEMPTS):
        writer, head, current = held if held is not None else scoped_state(ctx, evstore_id)
        held = None
        if head > searched:
            if _applied(ctx, evstore_id, source, searched, head):
                return current  # the state at ``head``, after the delta
            searched = head
        with ctx.stripe(evstore_id):
            if writer is None:
                try:
                    writer = ctx.store.create(evstore_id, retention=ctx.retention)
                except SessionExistsError:
                    continue  # created concurrently: read it again
                ctx.hold(evstore_id, writer)
            state = {**current, **delta}
            record = {"v": RECORD_VERSION, "kind": kind, "delta": delta, "state": state, "source": source}
            message: Message = {"role": "system", "content": None, "meta": {META_KEY: record}}
            try:  # at the head ``current`` was read at: a change since then is a conflict
                seq = writer.append(message, expected_head=head, idempotency_key=source)
            except WriteConflictError:
                continue  # another writer changed it: apply the delta to what it wrote
        if seq <= head:  # applied before, past ``searched``: by a racing appender this writer caught up on
            return scoped_state(ctx, evstore_id)[2]
        ctx.remember_snapshot(f"{evstore_id}:{writer.manifest.uid}:{seq}", state)
        return copy.deepcopy(state)
    raise WriteConflictError(evstore_id, 0, f"{kind} kept changing under {_SCOPED_ATTEMPTS} attempts")


def apply_scoped(
    ctx: ServiceContext, app_name: str, user_id: str, source: str, scoped: object
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Apply a session record's ``scoped`` deltas (see ``scoped_part``) to the app and user state
    logs, once each; return (app state, user state) after them ({} for a scope it has no delta for)."""
    parts: dict[str, Any] = scoped if isinstance(scoped, dict) else {}
    bounds = parts.get("after")
    after: dict[str, Any] = bounds if isinstance(bounds, dict) else {}
    states: list[dict[str, Any]] = []
    for scope, evstore_id in scoped_logs(ctx, app_name, user_id):
        delta, floor = parts.get(scope), after.get(scope, 0)
        if isinstance(floor, bool) or not isinstance(floor, int) or floor < 0:
            floor = 0  # no usable bound: search the whole log
        if isinstance(delta, dict) and delta:
            states.append(_update_scoped(ctx, evstore_id, f"{scope}_state", delta, source, floor))
        else:
            states.append({})
    return states[0], states[1]


def scoped_logs(ctx: ServiceContext, app_name: str, user_id: str) -> tuple[tuple[str, str], tuple[str, str]]:
    """("app", its state log's id), ("user", its state log's id)."""
    return ("app", app_state_evstore_id(ctx.prefix, app_name)), ("user", user_state_evstore_id(ctx.prefix, app_name, user_id))


def scoped_part(
    ctx: ServiceContext, app_name: str, user_id: str, app_delta: dict[str, Any], user_delta: dict[str, Any]
) -> dict[str, Any]:
    """What a session record carries of its ``app:`` and ``user:`` deltas (the commit point of
    both): the deltas, and the heads of their logs this service holds (0 when it holds none),
    before which no record can have applied them."""
    after = {}
    for scope, evstore_id in scoped_logs(ctx, app_name, user_id):
        with ctx.lock:
            writer = ctx.writers.get(evstore_id)
        after[scope] = writer.head if writer is not None else 0
    return {"app": app_delta, "user": user_delta, "after": after}


def settle(
    ctx: ServiceContext,
    app_name: str,
    user_id: str,
    evstore_id: str,
    uid: str,
    head: int,
    newest: tuple[int, dict[str, Any]] | None,
) -> None:
    """Complete what a crash may have left undone in the session as of ``head``: the ``app:`` and
    ``user:`` deltas of its ``newest`` ADK record (at or below ``head``), applied to their logs
    once (``_update_scoped``), then vouch for ``head``. Only the newest record can need it: a
    record goes on top of another only once that one's deltas are applied (``_writes.append_event``).
    Call outside the session's stripe (the state logs' are taken)."""
    if ctx.vouched_for(evstore_id, uid, head):
        return
    if newest is not None and isinstance(newest[1].get("scoped"), dict):
        seq, record = newest
        if not ctx.vouched_for(evstore_id, uid, seq):
            apply_scoped(ctx, app_name, user_id, scoped_source(evstore_id, uid, seq), record["scoped"])
    ctx.vouch(evstore_id, uid, head)


def states(ctx: ServiceContext, app_name: str, user_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    app = scoped_state(ctx, app_state_evstore_id(ctx.prefix, app_name))[2]
    user = scoped_state(ctx, user_state_evstore_id(ctx.prefix, app_name, user_id))[2]
    return app, user


def user_state(ctx: ServiceContext, app_name: str, user_id: str) -> dict[str, Any]:
    return scoped_state(ctx, user_state_evstore_id(ctx.prefix, app_name, user_id))[2]
