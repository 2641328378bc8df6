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

from ._errors import AlreadyExistsError, SessionNotFoundError, StaleSessionError
from ._mapping import decode_part, encode_part
from ._service import EvstoreSessionService

__all__ = [
    "AlreadyExistsError",
    "EvstoreSessionService",
    "SessionNotFoundError",
    "StaleSessionError",
    "decode_part",
    "encode_part",
]
