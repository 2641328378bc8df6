"""Google ADK sessions on evstore: ``EvstoreSessionService``.

A ``google.adk.sessions.BaseSessionService`` over an evstore ``Store`` (or an
``AsyncStore``; blocking calls run in its bounded pool, cancel-safe: a
cancelled call settles before ``CancelledError`` is raised). Install ADK with
``pip install 'evstore[adk]'``::

    from google.adk.runners import Runner
    from evstore.integrations.adk import EvstoreSessionService

    service = EvstoreSessionService(evstore.open_store("s3://bucket/agents"))
    runner = Runner(app_name="app", agent=agent, session_service=service)

Layout (``prefix`` defaults to ``adk``; each name part is encoded as below):

* ``<prefix>.s.<app>.<user>.<session>``: one evstore session per ADK session.
  Seq 1 records the creation (ids, creation time, initial session state); each
  ADK event is then one evstore event holding one message whose
  ``meta.adk.event`` is ``Event.model_dump(mode="json")`` (``None`` fields
  left out when the event validates back equal without them), so an event
  reads back equal to the one appended, bytes parts included. The message's
  role is ``user`` for events the user authored, else ``assistant``, and its
  content the event's text parts, so ``evstore replay`` shows the conversation.
* Session state (keys without a prefix) lives in those events: an event that
  changes it carries the whole session state after it (``meta.adk.state``),
  every other event the seq of the newest one that does (``meta.adk.state_at``).
  Reading a session's state costs its head event and at most one more.
* ``<prefix>.a.<app>`` (``app:`` keys) and ``<prefix>.u.<app>.<user>``
  (``user:`` keys): one event per state delta, carrying the delta, the whole
  scoped state after it and the session record it came from (``source``, also
  its idempotency key), appended at the head it was computed from (retried
  on a conflict), so concurrent writers never lose each other's keys.
* The session record (of an event, or of the creation) is the commit point of
  its ``app:`` and ``user:`` deltas too: it carries them (``meta.adk.scoped``,
  with the heads of their logs this service held before it, below which no
  record can have applied them), and they are applied to their logs after it,
  once each: a record's deltas are looked for in its log from that head on, and
  appended keyed by the record, so the appender and any number of readers
  completing them race to one record. A record goes on top of another only once
  that one's deltas are applied (``append_event`` completes them first when the
  service cannot vouch for them), so only a session's newest record can have
  deltas left undone (a crash between its PUT and theirs): ``get_session``,
  ``list_sessions`` and the next ``append_event`` of that session complete them
  before they answer. Until one of them does, another session of the same user
  or app reads the state without them.
  ``temp:`` keys are never stored. Values are replaced whole; values that are
  not JSON are stored as their JSON form (``pydantic_core.to_jsonable_python``),
  or their ``str`` when they have none, as ADK's database services do.

Name parts are encoded reversibly into evstore ids: ``A-Z a-z 0-9 -`` are kept,
every other UTF-8 byte becomes ``_XX`` (upper-case hex) and an empty part is
``_``. An encoded id longer than evstore's 128 characters is refused with
``InvalidInputError`` before any request.

Behaviour (ADK's documented contract and its own services'):

* ``create_session`` strips the id, generates a uuid4 when it is None or blank,
  and creates the evstore session with a conditional PUT: of two concurrent
  creates of one (app, user, id) exactly one wins, the other raises
  ``AlreadyExistsError`` and writes nothing.
* ``get_session`` returns None for a missing or deleted session; otherwise the
  merged state and the events in order. The service keeps each session it read
  whole (up to 1,024 of them) with a writer at its head, and later calls list
  only what came after it (``Session.catch_up``): a Runner's turn costs one LIST
  each for the session, its app and its user state when nothing new came, at
  any length, and a GET per event another process appended. A session it does
  not hold is read forwards in one pass with its writer (``SessionLog.resume``:
  what a replay of it costs, segments and all; a session with a retraction is
  read again by ``replay``), and an app or user state log from its head event
  (``Session.head_event``); with
  ``GetSessionConfig.num_recent_events`` or ``after_timestamp`` (inclusive) it
  is read backwards from the head in growing chunks (``store.replay(id,
  start=..., end=...)``): the requests grow with the events returned, not with
  the session's length. As ADK's in-memory service, the backward walk stops at
  the first event older than ``after_timestamp``.
* ``append_event`` skips partial events, keeps ``temp:`` keys out of storage,
  and appends at the head the session object was read at (``expected_head``;
  its PUT alone when the service's writer is at that head, a delete meanwhile
  meeting its fence there):
  a session object overtaken by another append (another process, or another
  copy of the same revision) raises ``StaleSessionError`` and writes nothing.
  Exactly one of two racing appends from one revision wins. A session never
  created, or deleted, raises ADK's ``SessionNotFoundError``. An event's
  ``app:`` and ``user:`` deltas are then applied to their logs at the heads the
  service holds (a PUT each, no LIST; a conflict reads what came after it): see
  the layout above for what a crash in between leaves, and who completes it.
* An event with ``actions.rewind_before_invocation_id`` (``Runner.rewind_async``)
  is stored as any event, then followed by an evstore retraction
  (``Session.rewind``) to just before the invocation's first event, so
  evstore's context view shows what ADK considers live. Finding that event
  reads the session from the start (rewinds are rare).
* ``delete_session`` of an unknown session is a no-op; ``list_sessions(app,
  user_id=None)`` lists every user's sessions of the app, without events,
  ordered by last update time as ADK's services do.

Errors: ADK's own types, each also an evstore error (``AlreadyExistsError`` is
also ``SessionExistsError``, ``StaleSessionError`` also ``WriteConflictError``,
ADK's ``SessionNotFoundError`` also evstore's). Other store failures raise
evstore's errors.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, TypeVar, cast

import pydantic
import pydantic_core
from google.adk.errors import StaleSessionError as _AdkStaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError as _AdkAlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError as _AdkSessionNotFoundError
from google.adk.events.event import Event
from google.adk.platform import time as platform_time
from google.adk.platform import uuid as platform_uuid
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig, ListSessionsResponse
from google.adk.sessions.session import Session
from google.adk.sessions.state import State
from typing_extensions import override

from .. import (
    AsyncStore,
    IntegrityError,
    InvalidInputError,
    Message,
    Retention,
    SessionExistsError,
    SessionExpiredError,
    Store,
    WriteConflictError,
)
from .. import Event as StoreEvent
from .. import Session as Writer
from .. import SessionNotFoundError as StoreSessionNotFoundError
from ._common import SessionLog, meta_record
from ._names import escape, unescape

__all__ = [
    "AlreadyExistsError",
    "EvstoreSessionService",
    "SessionNotFoundError",
    "StaleSessionError",
    "decode_part",
    "encode_part",
]

logger = logging.getLogger(__name__)
T = TypeVar("T")

#: The meta key of every record this module writes.
META_KEY = "adk"
RECORD_VERSION = 1
_MAX_ID = 128
_CACHE_SIZE = 1024
#: The sessions a service keeps whole hold at most this many events between them (the least
#: recently used go first): about 200 MB of records at 1 KiB each.
_KNOWN_EVENTS = 200_000
_SCOPED_ATTEMPTS = 50
_STALE = "The session has been modified in storage since it was loaded. Reload the session before appending more events."


class AlreadyExistsError(_AdkAlreadyExistsError, SessionExistsError):
    """ADK's ``AlreadyExistsError`` for an existing (app, user, session id); also evstore's ``SessionExistsError``."""

    def __init__(self, session_id: str, message: str) -> None:
        Exception.__init__(self, message)
        self.message = message
        self.session_id = session_id
        self.seq = 0


class StaleSessionError(_AdkStaleSessionError, WriteConflictError):
    """ADK's ``StaleSessionError`` for an append from a superseded session object; also ``WriteConflictError``."""

    def __init__(self, session_id: str, seq: int) -> None:
        Exception.__init__(self, _STALE)
        self.session_id = session_id
        self.seq = seq


class SessionNotFoundError(_AdkSessionNotFoundError, StoreSessionNotFoundError):
    """ADK's ``SessionNotFoundError`` for an append to a missing session; also evstore's."""

    def __init__(self, session_id: str, message: str) -> None:
        Exception.__init__(self, message)
        self.session_id = session_id


# ---- ids -----------------------------------------------------------------------


def encode_part(text: str) -> str:
    """One name part as evstore id characters (reversible; see the module docstring)."""
    return escape(text.encode("utf-8", "surrogatepass"), upper=True) if text else "_"


def decode_part(part: str) -> str | None:
    """The name ``encode_part`` made ``part`` from, or None when ``part`` is not such an encoding."""
    if part == "_":
        return ""
    data = unescape(part, upper=True)
    if data is None:
        return None
    try:
        text = data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None
    return text if text and encode_part(text) == part else None


# ---- records -------------------------------------------------------------------


def _json_safe(state: dict[str, Any]) -> dict[str, Any]:
    try:
        return cast(dict[str, Any], pydantic_core.to_jsonable_python(state))
    except (pydantic_core.PydanticSerializationError, TypeError, ValueError):
        logger.warning("ADK state holds values that are not JSON-serializable; they are stored as their str()")
        return cast(dict[str, Any], pydantic_core.to_jsonable_python(state, fallback=str))


def _split_state(state: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(app, user, session) parts of a state dict or delta, prefixes stripped, ``temp:`` dropped, as JSON."""
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    own: dict[str, Any] = {}
    for key, value in (state or {}).items():
        if key.startswith(State.APP_PREFIX):
            app[key.removeprefix(State.APP_PREFIX)] = value
        elif key.startswith(State.USER_PREFIX):
            user[key.removeprefix(State.USER_PREFIX)] = value
        elif not key.startswith(State.TEMP_PREFIX):
            own[key] = value
    return _json_safe(app), _json_safe(user), _json_safe(own)


def _merged(own: dict[str, Any], app: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    state = copy.deepcopy(own)
    state.update({State.APP_PREFIX + k: copy.deepcopy(v) for k, v in app.items()})
    state.update({State.USER_PREFIX + k: copy.deepcopy(v) for k, v in user.items()})
    return state


def _dump_event(event: Event) -> dict[str, Any]:
    """The event as JSON that validates back equal to it (``None`` fields left out when they may be)."""
    try:
        data = event.model_dump(mode="json", exclude_none=True)
        if Event.model_validate(data) != event:
            data = event.model_dump(mode="json")
    except (pydantic_core.PydanticSerializationError, pydantic.ValidationError, TypeError, ValueError) as exc:
        raise InvalidInputError(f"ADK event {event.id!r} cannot be stored as JSON: {exc}"[:300]) from None
    return data


def _event_text(event: Event) -> str | None:
    parts = event.content.parts if event.content is not None and event.content.parts else []
    texts = [part.text for part in parts if part.text]
    return "".join(texts) if texts else None


def _record(event: StoreEvent) -> dict[str, Any] | None:
    """This module's record in an evstore event, or None (a retraction, or a message someone else wrote)."""
    return _record_in(event.messages)


def _record_in(messages: list[Message]) -> dict[str, Any] | None:
    """This module's record in an event's ``messages`` (``_record``)."""
    record = meta_record(messages[0], META_KEY) if len(messages) == 1 else None
    return record if record is not None and record.get("v") == RECORD_VERSION else None


def _stored_event(record: dict[str, Any], evstore_id: str, seq: int) -> Event:
    """The ADK event an ``event`` record holds (``IntegrityError`` when it does not validate)."""
    try:
        return Event.model_validate(record.get("event"))
    except pydantic.ValidationError as exc:
        raise IntegrityError(evstore_id, seq, f"the stored ADK event does not validate ({exc.error_count()} errors)") from None


def _record_time(record: dict[str, Any], evstore_id: str, seq: int) -> float:
    time = record.get("time")
    if isinstance(time, bool) or not isinstance(time, int | float):
        raise IntegrityError(evstore_id, seq, "the ADK session record has no creation time")
    return float(time)


def _scoped_source(evstore_id: str, uid: str, seq: int) -> str:
    """The identity of a session record's ``app:``/``user:`` deltas in their logs (their idempotency key)."""
    return f"adk-scoped:{evstore_id}:{uid}:{seq}"


def _marker(uid: str, head: int, state_seq: int) -> str:
    return f"{uid}:{head}:{state_seq}"


def _parse_marker(marker: str) -> tuple[str, int, int] | None:
    parts = marker.split(":")
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    return parts[0], int(parts[1]), int(parts[2])


class _Tail:
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


class _Known:
    """A session as this service last read it, kept so that the next read lists only what came
    after ``head`` (``Writer.catch_up``): its live ``event`` records (after its newest ``session``
    record) and its newest record, by seq. Built by folding records in seq order."""

    def __init__(self, uid: str) -> None:
        self.uid = uid
        self.head = 0
        self.events: list[tuple[int, dict[str, Any]]] = []
        self.newest: tuple[int, dict[str, Any]] | None = None

    def add(self, seq: int, record: dict[str, Any] | None) -> None:
        self.head = seq
        kind = record.get("kind") if record is not None else None
        if record is None or kind not in ("event", "session"):
            return
        if kind == "session":
            self.events = []
        else:
            self.events.append((seq, record))
        self.newest = (seq, record)


class _Lru(OrderedDict[str, T]):
    def remember(self, key: str, value: T) -> T:
        self[key] = value
        self.move_to_end(key)
        while len(self) > _CACHE_SIZE:
            self.popitem(last=False)
        return value


# ---- the service -----------------------------------------------------------------


class EvstoreSessionService(BaseSessionService):
    """ADK sessions in an evstore ``Store`` (see the module docstring for the layout).

    ``store``: a ``Store``, or an ``AsyncStore`` whose pool runs the blocking calls.
    ``prefix``: the first part of every evstore id this service uses.
    ``retention``: of the evstore sessions it creates.
    """

    def __init__(self, store: Store | AsyncStore, *, prefix: str = "adk", retention: Retention = "permanent") -> None:
        if not prefix or not prefix[0].isascii() or not prefix[0].isalnum() or encode_part(prefix) != prefix:
            raise InvalidInputError("prefix must be letters, digits and '-', starting with a letter or digit")
        self.async_store = store if isinstance(store, AsyncStore) else AsyncStore(store)
        self.store: Store = self.async_store.store
        self.prefix = prefix
        self.retention: Retention = retention
        self._lock = threading.Lock()  # guards the caches and the stripe table
        self._stripes = [threading.Lock() for _ in range(64)]  # one writer call per evstore id at a time
        self._writers: _Lru[Writer] = _Lru()
        self._snapshots: _Lru[dict[str, Any]] = _Lru()  # "<id>:<uid>:<seq>" -> state stored at that event
        self._known: _Lru[_Known] = _Lru()  # ADK sessions read whole, at their writer's head
        self._vouched: _Lru[tuple[str, int]] = _Lru()  # id -> (uid, seq): its records to seq have their deltas applied

    def __repr__(self) -> str:
        return f"EvstoreSessionService({self.store!r}, prefix={self.prefix!r})"

    # ---- ids ----------------------------------------------------------------------

    def _checked(self, evstore_id: str, what: str) -> str:
        if len(evstore_id) > _MAX_ID:
            raise InvalidInputError(f"ADK {what} encodes to an evstore id of {len(evstore_id)} characters; at most {_MAX_ID} fit")
        return evstore_id

    def session_evstore_id(self, app_name: str, user_id: str, session_id: str) -> str:
        """The evstore id holding one ADK session."""
        parts = (encode_part(app_name), encode_part(user_id), encode_part(session_id))
        return self._checked(f"{self.prefix}.s.{'.'.join(parts)}", "app name, user id and session id")

    def app_state_evstore_id(self, app_name: str) -> str:
        return self._checked(f"{self.prefix}.a.{encode_part(app_name)}", "app name")

    def user_state_evstore_id(self, app_name: str, user_id: str) -> str:
        return self._checked(f"{self.prefix}.u.{encode_part(app_name)}.{encode_part(user_id)}", "app name and user id")

    def _parse_session_id(self, evstore_id: str) -> tuple[str, str, str] | None:
        head = f"{self.prefix}.s."
        if not evstore_id.startswith(head):
            return None
        parts = evstore_id[len(head) :].split(".")
        if len(parts) != 3:
            return None
        app, user, sid = (decode_part(p) for p in parts)
        if app is None or user is None or sid is None:
            return None
        return app, user, sid

    # ---- writers and snapshots (sync; run in the pool) ------------------------------

    def _stripe(self, evstore_id: str) -> threading.Lock:
        return self._stripes[hash(evstore_id) % len(self._stripes)]

    def _caught_up(self, evstore_id: str) -> tuple[Writer, list[StoreEvent] | None]:
        """A writer at the session's current head, and the events it had not seen: with a cached
        writer one LIST when there are none (``Writer.catch_up``), with a new one (``store.open``:
        3 requests) None, nothing being known before it. Call under the id's stripe.

        Raises ``SessionNotFoundError`` (never created, or deleted) or ``SessionExpiredError``.
        """
        with self._lock:
            writer = self._writers.get(evstore_id)
        if writer is not None:
            try:
                return writer, writer.catch_up()
            except (StoreSessionNotFoundError, IntegrityError):
                # deleted, or deleted and created again, or an object planted past the head: what the
                # session holds is read afresh, which raises if it is not the true history
                self._forget(evstore_id)
        writer = self.store.open(evstore_id)
        with self._lock:
            return self._writers.remember(evstore_id, writer), None

    def _forget(self, evstore_id: str) -> None:
        with self._lock:
            self._writers.pop(evstore_id, None)
            self._known.pop(evstore_id, None)

    def _known_at(self, evstore_id: str, writer: Writer, new: list[StoreEvent] | None) -> _Known | None:
        """What this service knows of the session, brought to ``writer``'s head with the ``new``
        events (``_caught_up``); None when it knows nothing that ends where they start."""
        with self._lock:
            known = self._known.get(evstore_id)
        start = new[0].seq - 1 if new else writer.head
        if new is None or known is None or known.uid != writer.manifest.uid or known.head != start:
            return None
        for stored in new:
            self._fold(evstore_id, known, stored.seq, _record(stored))
        self._keep(evstore_id, known)
        return known

    def _keep(self, evstore_id: str, known: _Known) -> _Known:
        """Keep ``known`` as the most recently used, within ``_KNOWN_EVENTS`` events in all."""
        with self._lock:
            self._known.remember(evstore_id, known)
            held = sum(len(other.events) for other in self._known.values())
            while held > _KNOWN_EVENTS and len(self._known) > 1:
                _, dropped = self._known.popitem(last=False)
                held -= len(dropped.events)
            return known

    def _fold(self, evstore_id: str, known: _Known, seq: int, record: dict[str, Any] | None) -> None:
        known.add(seq, record)
        if record is not None and isinstance(record.get("state"), dict):
            self._remember_snapshot(f"{evstore_id}:{known.uid}:{seq}", record["state"])

    def _resumed(self, evstore_id: str) -> tuple[Writer, _Known]:
        """A new writer at the session's head and the session read whole with it, in one pass
        (``SessionLog.resume``: the requests of a replay, the writer included), both kept. The
        pass folds the context view, which leaves out what a retraction withdrew: a session
        with a retraction (or an event of more than one message) is read again (``_read_known``).
        Call under the id's stripe."""
        log = SessionLog.resume(self.store, evstore_id)
        writer = log.writer
        with self._lock:
            self._writers.remember(evstore_id, writer)
        live = log.live
        if [(position.seq, position.index) for position, _ in live] != [(seq, 0) for seq in range(1, writer.head + 1)]:
            return writer, self._read_known(evstore_id, writer)
        known = _Known(writer.manifest.uid)
        for position, message in live:
            self._fold(evstore_id, known, position.seq, _record_in([message]))
        known.head = writer.head
        return writer, self._keep(evstore_id, known)

    def _read_known(self, evstore_id: str, writer: Writer) -> _Known:
        """The session read whole, forwards (its segments: a few requests per 2,048 events), to
        ``writer``'s head, and kept."""
        known = _Known(writer.manifest.uid)
        for stored in self.store.replay(evstore_id, start=1, end=writer.head) if writer.head else ():
            self._fold(evstore_id, known, stored.seq, _record(stored))
        known.head = writer.head
        return self._keep(evstore_id, known)

    def _tail_of(self, evstore_id: str, known: _Known, limit: int | None, after: float | None, created: str) -> _Tail:
        """What ``_tail`` finds, from what this service knows (no request but a state snapshot's)."""
        tail = _Tail(known.uid, known.head)
        if known.newest is not None:
            seq, record = known.newest
            tail.found_newest = True
            tail.newest = known.newest
            if isinstance(record.get("state"), dict):
                tail.state_seq, tail.state = seq, record["state"]
            else:
                state_at = record.get("state_at", 0)
                if isinstance(state_at, bool) or not isinstance(state_at, int) or not 0 <= state_at < seq:
                    raise IntegrityError(evstore_id, seq, "the ADK record points to no earlier state snapshot")
                tail.state_seq = state_at
            if record.get("kind") == "session":
                tail.updated = _record_time(record, evstore_id, seq)
        for seq, record in reversed(known.events) if limit != 0 else ():
            event = _stored_event(record, evstore_id, seq)
            if tail.updated is None:
                tail.updated = event.timestamp
            if after is not None and event.timestamp < after:
                break
            tail.events.append(event)
            if limit is not None and len(tail.events) >= limit:
                break
        if tail.updated is None and known.events:
            tail.updated = _stored_event(known.events[-1][1], evstore_id, known.events[-1][0]).timestamp
        if tail.updated is None:  # created, but its creation record never written (a crash)
            tail.updated = datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
        return tail

    def _chunks(self, evstore_id: str, head: int, first: int, uid: str | None = None) -> Iterator[StoreEvent]:
        """The session's events from ``head`` down to seq 1, read in chunks that double from ``first``;
        with ``uid``, the state snapshots of every chunk read are kept (``_snapshot`` needs no request)."""
        end = head
        size = max(1, first)
        while end >= 1:
            start = max(1, end - size + 1)
            chunk = list(self.store.replay(evstore_id, start=start, end=end))
            for stored in chunk if uid is not None else ():
                record = _record(stored)
                if record is not None and isinstance(record.get("state"), dict):
                    self._remember_snapshot(f"{evstore_id}:{uid}:{stored.seq}", record["state"])
            yield from reversed(chunk)
            end = start - 1
            size = min(size * 2, 1024)

    def _snapshot(self, evstore_id: str, uid: str, seq: int) -> dict[str, Any]:
        """The state stored at ``seq`` (the record there must carry one; {} for seq 0)."""
        if seq == 0:
            return {}
        key = f"{evstore_id}:{uid}:{seq}"
        with self._lock:
            found = self._snapshots.get(key)
        if found is None:
            events = list(self.store.replay(evstore_id, start=seq, end=seq))
            record = _record(events[0]) if events else None
            state = record.get("state") if record is not None else None
            if not isinstance(state, dict):
                raise IntegrityError(evstore_id, seq, "the ADK record there carries no state snapshot")
            found = self._remember_snapshot(key, state)
        return copy.deepcopy(found)

    def _remember_snapshot(self, key: str, state: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            return self._snapshots.remember(key, copy.deepcopy(state))

    def _tail(self, evstore_id: str, writer: Writer, limit: int | None, after: float | None) -> _Tail:
        """Events newest first while they are wanted, and the newest record's state pointer and time."""
        tail = _Tail(writer.manifest.uid, writer.head)
        collecting = limit != 0
        first = (limit + 2) if limit is not None else 32
        if collecting:
            events = self._chunks(evstore_id, tail.head, first, tail.uid)
        else:  # only the newest record is wanted: usually the head (one GET)
            head_event = writer.head_event()
            events = itertools.chain([head_event] if head_event else [], self._chunks(evstore_id, tail.head - 1, first, tail.uid))
        for stored in events:
            record = _record(stored)
            if record is None:
                continue
            kind = record.get("kind")
            if kind not in ("event", "session"):
                continue
            if not tail.found_newest:
                tail.found_newest = True
                tail.newest = (stored.seq, record)
                tail.updated = _record_time(record, evstore_id, stored.seq) if kind == "session" else None
                if isinstance(record.get("state"), dict):
                    tail.state_seq = stored.seq
                    tail.state = record["state"]
                    self._remember_snapshot(f"{evstore_id}:{tail.uid}:{stored.seq}", record["state"])
                else:
                    state_at = record.get("state_at", 0)
                    if isinstance(state_at, bool) or not isinstance(state_at, int) or not 0 <= state_at < stored.seq:
                        raise IntegrityError(evstore_id, stored.seq, "the ADK record points to no earlier state snapshot")
                    tail.state_seq = state_at
            if kind == "session":
                break
            if collecting:
                event = _stored_event(record, evstore_id, stored.seq)
                if tail.updated is None:
                    tail.updated = event.timestamp
                if after is not None and event.timestamp < after:
                    collecting = False
                else:
                    tail.events.append(event)
                    if limit is not None and len(tail.events) >= limit:
                        collecting = False
            elif tail.updated is None:
                tail.updated = _stored_event(record, evstore_id, stored.seq).timestamp
            if not collecting:
                break
        if tail.updated is None:  # created, but its creation record never written (a crash)
            tail.updated = datetime.fromisoformat(writer.manifest.created.replace("Z", "+00:00")).timestamp()
        return tail

    def _scoped_state(self, evstore_id: str) -> tuple[Writer | None, int, dict[str, Any]]:
        """(writer, head, the app or user state stored in ``evstore_id`` at that head); ({} when none yet)."""
        with self._stripe(evstore_id):
            with self._lock:
                cached = evstore_id in self._writers
            if not cached and not self._listed(evstore_id):
                return None, 0, {}  # one LIST: an app or user without scoped state yet is the usual case
            try:
                writer, new = self._caught_up(evstore_id)
            except StoreSessionNotFoundError:
                return None, 0, {}
            uid, head = writer.manifest.uid, writer.head
            for stored in new or ():  # each record carries the whole scoped state after it
                record = _record(stored)
                if record is not None and isinstance(record.get("state"), dict):
                    self._remember_snapshot(f"{evstore_id}:{uid}:{stored.seq}", record["state"])
            with self._lock:
                known = self._snapshots.get(f"{evstore_id}:{uid}:{head}")
            if known is not None:  # events never change: the head's snapshot read or written before
                return writer, head, copy.deepcopy(known)
            newest = writer.head_event()  # each record carries the whole state: the head's is it (one GET)
            for stored in itertools.chain([newest] if newest is not None else [], self._chunks(evstore_id, head - 1, 1)):
                record = _record(stored)
                if record is not None and isinstance(record.get("state"), dict):
                    state = self._remember_snapshot(f"{evstore_id}:{uid}:{stored.seq}", record["state"])
                    return writer, head, copy.deepcopy(state)
            return writer, head, {}

    def _listed(self, evstore_id: str) -> bool:
        """Whether the store lists the session (one LIST; its remnants after a delete count)."""
        for found in self.store.list_sessions(evstore_id):
            if found == evstore_id:
                return True
            if found + "/" > evstore_id + "/":  # listed in the order of "<id>/"
                return False
        return False

    def _scoped_cached(self, evstore_id: str) -> tuple[Writer, int, dict[str, Any]] | None:
        """(writer, head, state at that head) for an app or user state log from what this service
        holds (no request), or None. The head may be behind: an append at it is conditional."""
        with self._lock:
            writer = self._writers.get(evstore_id)
            state = self._snapshots.get(f"{evstore_id}:{writer.manifest.uid}:{writer.head}") if writer is not None else None
        if writer is None or (state is None and writer.head):
            return None
        return writer, writer.head, copy.deepcopy(state or {})

    def _applied(self, evstore_id: str, source: str, after: int, head: int) -> bool:
        """Whether a record of the app or user state log ``evstore_id`` between ``after`` (exclusive)
        and ``head`` applied the delta of ``source`` (read forwards: it usually follows ``after``)."""
        start = after + 1
        size = 8
        while start <= head:
            end = min(head, start + size - 1)
            for stored in self.store.replay(evstore_id, start=start, end=end):
                record = _record(stored)
                if record is not None and record.get("source") == source:
                    return True
            start, size = end + 1, min(size * 2, 1024)
        return False

    def _update_scoped(self, evstore_id: str, kind: str, delta: dict[str, Any], source: str, after: int) -> dict[str, Any]:
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
        held = self._scoped_cached(evstore_id)
        searched = after
        for _ in range(_SCOPED_ATTEMPTS):
            writer, head, current = held if held is not None else self._scoped_state(evstore_id)
            held = None
            if head > searched:
                if self._applied(evstore_id, source, searched, head):
                    return current  # the state at ``head``, after the delta
                searched = head
            with self._stripe(evstore_id):
                if writer is None:
                    try:
                        writer = self.store.create(evstore_id, retention=self.retention)
                    except SessionExistsError:
                        continue  # created concurrently: read it again
                    with self._lock:
                        self._writers.remember(evstore_id, writer)
                state = {**current, **delta}
                record = {"v": RECORD_VERSION, "kind": kind, "delta": delta, "state": state, "source": source}
                message: Message = {"role": "system", "content": None, "meta": {META_KEY: record}}
                try:  # at the head ``current`` was read at: a change since then is a conflict
                    seq = writer.append(message, expected_head=head, idempotency_key=source)
                except WriteConflictError:
                    continue  # another writer changed it: apply the delta to what it wrote
            if seq <= head:  # applied before, past ``searched``: by a racing appender this writer caught up on
                return self._scoped_state(evstore_id)[2]
            self._remember_snapshot(f"{evstore_id}:{writer.manifest.uid}:{seq}", state)
            return copy.deepcopy(state)
        raise WriteConflictError(evstore_id, 0, f"{kind} kept changing under {_SCOPED_ATTEMPTS} attempts")

    def _apply_scoped(self, app_name: str, user_id: str, source: str, scoped: object) -> tuple[dict[str, Any], dict[str, Any]]:
        """Apply a session record's ``scoped`` deltas (see ``_scoped_part``) to the app and user state
        logs, once each; return (app state, user state) after them ({} for a scope it has no delta for)."""
        parts: dict[str, Any] = scoped if isinstance(scoped, dict) else {}
        bounds = parts.get("after")
        after: dict[str, Any] = bounds if isinstance(bounds, dict) else {}
        states: list[dict[str, Any]] = []
        for scope, evstore_id in self._scoped_logs(app_name, user_id):
            delta, floor = parts.get(scope), after.get(scope, 0)
            if isinstance(floor, bool) or not isinstance(floor, int) or floor < 0:
                floor = 0  # no usable bound: search the whole log
            if isinstance(delta, dict) and delta:
                states.append(self._update_scoped(evstore_id, f"{scope}_state", delta, source, floor))
            else:
                states.append({})
        return states[0], states[1]

    def _scoped_logs(self, app_name: str, user_id: str) -> tuple[tuple[str, str], tuple[str, str]]:
        """("app", its state log's id), ("user", its state log's id)."""
        return ("app", self.app_state_evstore_id(app_name)), ("user", self.user_state_evstore_id(app_name, user_id))

    def _scoped_part(self, app_name: str, user_id: str, app_delta: dict[str, Any], user_delta: dict[str, Any]) -> dict[str, Any]:
        """What a session record carries of its ``app:`` and ``user:`` deltas (the commit point of
        both): the deltas, and the heads of their logs this service holds (0 when it holds none),
        before which no record can have applied them."""
        after = {}
        for scope, evstore_id in self._scoped_logs(app_name, user_id):
            with self._lock:
                writer = self._writers.get(evstore_id)
            after[scope] = writer.head if writer is not None else 0
        return {"app": app_delta, "user": user_delta, "after": after}

    def _vouch(self, evstore_id: str, uid: str, seq: int) -> None:
        """Note that the session's records up to ``seq`` have their deltas in the app and user logs."""
        with self._lock:
            vouched = self._vouched.get(evstore_id)
            if vouched is None or vouched[0] != uid or vouched[1] < seq:
                self._vouched.remember(evstore_id, (uid, seq))

    def _vouched_for(self, evstore_id: str, uid: str, seq: int) -> bool:
        """Whether this service knows the session's records up to ``seq`` to have their deltas applied."""
        with self._lock:
            vouched = self._vouched.get(evstore_id)
        return vouched is not None and vouched[0] == uid and vouched[1] >= seq

    def _settle(
        self, app_name: str, user_id: str, evstore_id: str, uid: str, head: int, newest: tuple[int, dict[str, Any]] | None
    ) -> None:
        """Complete what a crash may have left undone in the session as of ``head``: the ``app:`` and
        ``user:`` deltas of its ``newest`` ADK record (at or below ``head``), applied to their logs
        once (``_update_scoped``), then vouch for ``head``. Only the newest record can need it: a
        record goes on top of another only once that one's deltas are applied (``_append``).
        Call outside the session's stripe (the state logs' are taken)."""
        if self._vouched_for(evstore_id, uid, head):
            return
        if newest is not None and isinstance(newest[1].get("scoped"), dict):
            seq, record = newest
            if not self._vouched_for(evstore_id, uid, seq):
                self._apply_scoped(app_name, user_id, _scoped_source(evstore_id, uid, seq), record["scoped"])
        self._vouch(evstore_id, uid, head)

    def _record_at(self, evstore_id: str, seq: int) -> tuple[int, dict[str, Any]] | None:
        """The newest ``session`` or ``event`` record at or below ``seq``."""
        for stored in self._chunks(evstore_id, seq, 2):
            record = _record(stored)
            if record is not None and record.get("kind") in ("event", "session"):
                return stored.seq, record
        return None

    def _states(self, app_name: str, user_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
        app = self._scoped_state(self.app_state_evstore_id(app_name))[2]
        user = self._scoped_state(self.user_state_evstore_id(app_name, user_id))[2]
        return app, user

    def _session_from(self, app_name: str, user_id: str, session_id: str, evstore_id: str, tail: _Tail) -> Session:
        own = tail.state if tail.state is not None else self._snapshot(evstore_id, tail.uid, tail.state_seq)
        app, user = self._states(app_name, user_id)
        session = Session(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=_merged(own, app, user),
            events=list(reversed(tail.events)),
            last_update_time=tail.updated or 0.0,
        )
        session._storage_update_marker = _marker(tail.uid, tail.head, tail.state_seq)
        return session

    # ---- sync cores ---------------------------------------------------------------------

    def _create(self, app_name: str, user_id: str, state: dict[str, Any] | None, session_id: str, now: float) -> Session:
        evstore_id = self.session_evstore_id(app_name, user_id, session_id)
        app_delta, user_delta, own = _split_state(state)
        app, user = self._states(app_name, user_id)  # their heads bound where the deltas can be applied
        with self._stripe(evstore_id):
            try:
                writer = self.store.create(evstore_id, retention=self.retention)
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
            if app_delta or user_delta:  # the commit point of these too: see ``_settle``
                record["scoped"] = self._scoped_part(app_name, user_id, app_delta, user_delta)
            seq = writer.append({"role": "system", "content": None, "meta": {META_KEY: record}}, expected_head=writer.head)
            uid = writer.manifest.uid
            known = _Known(uid)
            self._fold(evstore_id, known, seq, record)
            with self._lock:
                self._writers.remember(evstore_id, writer)
            self._keep(evstore_id, known)
        if "scoped" in record:
            app_after, user_after = self._apply_scoped(app_name, user_id, _scoped_source(evstore_id, uid, seq), record["scoped"])
            app, user = (app_after if app_delta else app), (user_after if user_delta else user)
        self._vouch(evstore_id, uid, seq)
        session = Session(id=session_id, app_name=app_name, user_id=user_id, state=_merged(own, app, user), last_update_time=now)
        session._storage_update_marker = _marker(uid, seq, seq)
        return session

    def _get(self, app_name: str, user_id: str, session_id: str, config: GetSessionConfig | None) -> Session | None:
        evstore_id = self.session_evstore_id(app_name, user_id, session_id)
        limit = config.num_recent_events if config is not None else None
        after = config.after_timestamp if config is not None else None
        with self._stripe(evstore_id):
            with self._lock:
                held = evstore_id in self._writers
            try:
                if not held and limit is None and after is None:  # the whole session is wanted: keep it
                    writer, known = self._resumed(evstore_id)
                    new = None
                else:
                    writer, new = self._caught_up(evstore_id)
                    known = None
            except (StoreSessionNotFoundError, SessionExpiredError):
                self._forget(evstore_id)
                return None
            known = known or self._known_at(evstore_id, writer, new)
            if known is None and limit is None and after is None:
                known = self._read_known(evstore_id, writer)  # the whole session is wanted: keep it
            if known is not None:
                tail = self._tail_of(evstore_id, known, limit, after, writer.manifest.created)
            else:
                tail = self._tail(evstore_id, writer, limit, after)  # a few recent events: read backwards
        self._settle(app_name, user_id, evstore_id, tail.uid, tail.head, tail.newest)
        return self._session_from(app_name, user_id, session_id, evstore_id, tail)

    def _list(self, app_name: str, user_id: str | None) -> list[Session]:
        prefix = f"{self.prefix}.s.{encode_part(app_name)}." + (f"{encode_part(user_id)}." if user_id is not None else "")
        sessions: list[Session] = []
        scoped: dict[str, dict[str, Any]] = {}
        for evstore_id in list(self.store.list_sessions(prefix)):
            names = self._parse_session_id(evstore_id)
            if names is None or names[0] != app_name or (user_id is not None and names[1] != user_id):
                continue
            _, user, sid = names
            with self._stripe(evstore_id):
                try:
                    writer, new = self._caught_up(evstore_id)
                except (StoreSessionNotFoundError, SessionExpiredError):
                    self._forget(evstore_id)
                    continue  # a deleted session's remnants
                known = self._known_at(evstore_id, writer, new)
                if known is not None:
                    tail = self._tail_of(evstore_id, known, 0, None, writer.manifest.created)
                else:
                    tail = self._tail(evstore_id, writer, 0, None)
            self._settle(app_name, user, evstore_id, tail.uid, tail.head, tail.newest)
            own = tail.state if tail.state is not None else self._snapshot(evstore_id, tail.uid, tail.state_seq)
            sessions.append(Session(id=sid, app_name=app_name, user_id=user, state=own, last_update_time=tail.updated or 0.0))
            sessions[-1]._storage_update_marker = _marker(tail.uid, tail.head, tail.state_seq)
        app = self._scoped_state(self.app_state_evstore_id(app_name))[2]  # after every session's deltas are settled
        for session in sessions:
            if session.user_id not in scoped:
                scoped[session.user_id] = self._user_state(app_name, session.user_id)
            session.state = _merged(session.state, app, scoped[session.user_id])
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return sessions

    def _delete(self, app_name: str, user_id: str, session_id: str) -> None:
        evstore_id = self.session_evstore_id(app_name, user_id, session_id)
        with self._stripe(evstore_id):
            self._forget(evstore_id)
            with contextlib.suppress(StoreSessionNotFoundError):  # never created, or deleted: a no-op, as ADK's
                self.store.delete(evstore_id)

    def _append(self, session: Session, event: Event) -> str:
        """Store ``event`` for ``session`` at the revision its marker names; return the new marker."""
        evstore_id = self.session_evstore_id(session.app_name, session.user_id, session.id)
        dumped = _dump_event(event)
        marker = session._storage_update_marker
        parsed = _parse_marker(marker) if marker is not None else None
        deltas = _split_state(event.actions.state_delta if event.actions else None)[:2]
        for (_, scoped_id), delta in zip(self._scoped_logs(session.app_name, session.user_id), deltas, strict=True):
            with self._lock:
                held = scoped_id in self._writers
            if delta and not held:  # hold its head before the record names it (``_scoped_part``)
                self._scoped_state(scoped_id)
        for settled in (False, True):
            with self._stripe(evstore_id):
                writer, uid, head, state_seq = self._revision(session, evstore_id, parsed)
                if settled or not head or self._vouched_for(evstore_id, uid, head):
                    seq, record, new_marker = self._write_event(session, event, evstore_id, writer, head, state_seq, dumped)
                    new_head = writer.head
                    break
            # a record goes on top of others only once their deltas are in the app and user logs
            try:
                newest = self._record_at(evstore_id, head)
            except (StoreSessionNotFoundError, SessionExpiredError):
                self._forget(evstore_id)
                raise SessionNotFoundError(evstore_id, f"Session {session.id} not found.") from None
            self._settle(session.app_name, session.user_id, evstore_id, uid, head, newest)
        if "scoped" in record:
            self._apply_scoped(session.app_name, session.user_id, _scoped_source(evstore_id, uid, seq), record["scoped"])
        self._vouch(evstore_id, uid, new_head)
        return new_marker

    def _revision(self, session: Session, evstore_id: str, parsed: tuple[str, int, int] | None) -> tuple[Writer, str, int, int]:
        """(writer, uid, head, state seq) of the stored revision ``session`` was read at (its marker,
        ``parsed``); ``StaleSessionError`` when it is not the stored head. Call under the id's stripe."""
        with self._lock:
            writer = self._writers.get(evstore_id)
        if writer is None or parsed is None or parsed[:2] != (writer.manifest.uid, writer.head):
            # not the revision the cached writer is at (or none cached): catch up to learn the head;
            # at it, the append is its PUT alone (a delete meanwhile meets its fence there)
            try:
                writer, new = self._caught_up(evstore_id)
            except (StoreSessionNotFoundError, SessionExpiredError):
                self._forget(evstore_id)
                raise SessionNotFoundError(evstore_id, f"Session {session.id} not found.") from None
            self._known_at(evstore_id, writer, new)
        uid, head = writer.manifest.uid, writer.head
        if parsed is not None:
            if parsed[0] != uid:  # an object of a session since deleted and created again
                raise StaleSessionError(evstore_id, head + 1)
            if parsed[1] != head:
                raise StaleSessionError(evstore_id, parsed[1] + 1)
            return writer, uid, head, parsed[2]
        # an object this service did not make: accept it if its last event is the stored head's
        tail = self._tail(evstore_id, writer, 1, None)
        stored_last = tail.events[0].id if tail.events else None
        if stored_last != (session.events[-1].id if session.events else None):
            raise StaleSessionError(evstore_id, head + 1)
        return writer, uid, head, tail.state_seq

    def _write_event(
        self,
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
        app_delta, user_delta, own_delta = _split_state(event.actions.state_delta if event.actions else None)
        role = "user" if event.author == "user" else "assistant"
        record: dict[str, Any] = {"v": RECORD_VERSION, "kind": "event", "event": dumped}
        new_state: dict[str, Any] | None = None
        if own_delta:
            new_state = {**self._snapshot(evstore_id, uid, state_seq), **own_delta}
            record["state"] = new_state
        else:
            record["state_at"] = state_seq
        if app_delta or user_delta:  # the commit point of these too: see ``_settle``
            record["scoped"] = self._scoped_part(session.app_name, session.user_id, app_delta, user_delta)
        message: Message = {"role": role, "content": _event_text(event), "meta": {META_KEY: record}}
        try:  # the event id keys the append: a retry that finds it landed gets its seq, writes nothing
            seq = writer.append(message, expected_head=head, idempotency_key=f"adk-event:{event.id}" if event.id else None)
        except WriteConflictError:
            raise StaleSessionError(evstore_id, head + 1) from None
        except StoreSessionNotFoundError:
            self._forget(evstore_id)
            raise SessionNotFoundError(evstore_id, f"Session {session.id} not found.") from None
        with self._lock:
            known = self._known.get(evstore_id)
        if known is not None and known.uid == uid and known.head == seq - 1:
            self._fold(evstore_id, known, seq, record)
        if new_state is not None:
            state_seq = seq
            self._remember_snapshot(f"{evstore_id}:{uid}:{seq}", new_state)
        rewound = event.actions.rewind_before_invocation_id if event.actions else None
        if rewound:
            self._retract(evstore_id, writer, rewound, seq)
        return seq, record, _marker(uid, writer.head, state_seq)

    def _retract(self, evstore_id: str, writer: Writer, invocation_id: str, seq: int) -> None:
        """Withdraw from evstore's context view every event from the invocation's first one to ``seq``."""
        first = None
        for stored in self.store.replay(evstore_id, start=1, end=seq - 1):
            record = _record(stored)
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

    def _user_state(self, app_name: str, user_id: str) -> dict[str, Any]:
        return self._scoped_state(self.user_state_evstore_id(app_name, user_id))[2]

    # ---- BaseSessionService ---------------------------------------------------------------

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await self.async_store.run(fn, *args)

    @override
    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        session_id = session_id.strip() if session_id else ""
        session_id = session_id or platform_uuid.new_uuid()
        return await self._run(self._create, app_name, user_id, state, session_id, platform_time.get_time())

    @override
    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        session_id = session_id.strip() if session_id else session_id
        return await self._run(self._get, app_name, user_id, session_id, config)

    @override
    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> ListSessionsResponse:
        return ListSessionsResponse(sessions=await self._run(self._list, app_name, user_id))

    @override
    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        session_id = session_id.strip() if session_id else session_id
        await self._run(self._delete, app_name, user_id, session_id)

    @override
    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        return await self._run(self._user_state, app_name, user_id)

    @override
    async def append_event(self, session: Session, event: Event) -> Event:
        """Store ``event`` and apply it to ``session`` (see the module docstring).

        ``temp:`` keys reach the in-memory ``session.state`` only, and only once the
        event is stored: a refused (stale) append leaves ``session`` as it was.
        """
        if event.partial:
            return event
        delta = event.actions.state_delta if event.actions else None
        temp = {k: v for k, v in (delta or {}).items() if k.startswith(State.TEMP_PREFIX)}
        event = self._trim_temp_delta_state(event)
        marker = await self._run(self._append, session, event)
        session.state.update(temp)
        session.last_update_time = event.timestamp
        session._storage_update_marker = marker
        return self._commit_event_to_session(session, event)
