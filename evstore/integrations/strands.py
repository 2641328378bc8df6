"""Strands Agents persistence on evstore: ``EvstoreSessionRepository``.

An implementation of Strands' ``SessionRepository`` (install with
``pip install 'evstore[strands]'``); this module imports ``strands``, ``import
evstore`` never does::

    from strands import Agent
    from evstore.integrations.strands import session_manager

    agent = Agent(session_manager=session_manager("chat-42", evstore.open_store("s3://bucket/agents")))

Design: **one evstore session per Strands session** (id ``prefix + session_id``)
holds everything Strands stores for it, in one hash-chained log:

* the session record: a message ``{"role": "system", "content": null,
  "meta": {"strands": {"kind": "session", "record": Session.to_dict()}}}``;
* agent records (``kind: "agent"``, ``id``: agent id) and multi-agent states
  (``kind: "multi_agent"``), one event per ``create_agent``/``update_agent``:
  the latest live record wins;
* the messages of every agent: the Strands message's own fields at the top
  level (Bedrock-style ``role``/``content`` blocks, readable by ``evstore
  replay``) and ``meta.strands = {"kind": "message", "agent", "id",
  "redact_message", "created_at", "updated_at"}``. A message whose fields would
  clash with evstore's goes whole into ``meta.strands.message`` instead.

So ``create_message`` is one append (one PUT), ``update_agent`` one append
(S3SessionManager: GET + PUT), restore is one replay, and ``store.fork`` of
the evstore session forks the whole Strands session (every agent, its state,
its messages): open the fork's id with a new session manager to resume the
branch. Every write is conditional on the head this repository last saw:
another process writing the same session meanwhile makes the write fail with
``WriteConflictError`` rather than interleave. ``create_message`` also
requires ``message_id`` to be the agent's message count (Strands numbers
messages from its own memory, so a mismatch means a stale agent). A write
reads nothing (one PUT); reads fold in only what other writers appended since
this repository last read (one LIST when nothing). After a conflict, the
repository's next call reads what the other process appended and continues
from the current head. ``session_manager`` returns an ``EvstoreSessionManager``,
which raises the conflict out of the agent call once and, at the agent's next
invocation, restores the agent from the session as it is now (the other
process's messages included, the failed call's unsaved ones dropped) before it
continues: a long-lived agent goes on; to retry the failed prompt, call the
agent with it again. A plain ``RepositorySessionManager`` over this
repository cannot: its agent keeps the unsaved messages and their ids, so
create a new agent with a new session manager there.
With a keyring the store seals every record and message (AES-256-GCM).

``update_message`` (guardrail redaction) is a rewind to the message's position
followed by one event re-appending the replaced message and everything live
after it: two events, each conditional. The audit view keeps the original
event, so the unredacted text stays in the store's history (Strands itself
has already overwritten it in memory, see below); delete the session, or
rely on encryption and crypto-shredding, where the original must not survive.
Note: Strands mutates the message it stored in place when it redacts, so the
record's ``message`` arrives redacted too; records are serialised at write
time, so earlier events are never affected by such mutations.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from strands.hooks import BeforeInvocationEvent, HookRegistry
from strands.session import RepositorySessionManager, SessionRepository
from strands.types.exceptions import SessionException
from strands.types.session import Session, SessionAgent, SessionMessage

from .._codec import ROLES, Message, Retention
from .._errors import SessionExistsError, SessionNotFoundError, WriteConflictError
from .._store import Store
from .._views import Position
from ._common import EVSTORE_FIELDS, SessionLog, meta_record

if TYPE_CHECKING:
    from strands.multiagent.base import MultiAgentBase
    from strands.types.agent import LocalAgent
    from strands.types.content import Message as StrandsMessage

__all__ = ["EvstoreSessionManager", "EvstoreSessionRepository", "session_manager"]


def _strands_meta(message: Message) -> dict[str, Any] | None:
    return meta_record(message, "strands")


def _record(kind: str, record: dict[str, Any], record_id: str | None = None) -> Message:
    entry: dict[str, Any] = {"kind": kind, "record": record}
    if record_id is not None:
        entry["id"] = record_id
    return {"role": "system", "content": None, "meta": {"strands": entry}}


def _message(agent_id: str, session_message: SessionMessage) -> Message:
    data = session_message.to_dict()  # a deep copy, bytes as base64: later mutations of Strands' objects cannot reach it
    entry: dict[str, Any] = {
        "kind": "message",
        "agent": agent_id,
        "id": data["message_id"],
        "redact_message": data["redact_message"],
        "created_at": data["created_at"],
        "updated_at": data["updated_at"],
    }
    message = data["message"]
    if (
        isinstance(message, dict)
        and message.get("role") in ROLES
        and isinstance(message.get("content"), list | str)
        and not any(key in message for key in EVSTORE_FIELDS)
    ):
        return {**message, "meta": {"strands": entry}}
    entry["message"] = message
    return {"role": "assistant", "content": None, "meta": {"strands": entry}}


def _session_message(stored: Message) -> SessionMessage:
    entry = _strands_meta(stored) or {}
    message = entry["message"] if "message" in entry else {k: v for k, v in stored.items() if k != "meta"}
    return SessionMessage.from_dict(
        {
            "message": message,
            "message_id": entry.get("id"),
            "redact_message": entry.get("redact_message"),
            "created_at": entry.get("created_at"),
            "updated_at": entry.get("updated_at"),
        }
    )


class EvstoreSessionRepository(SessionRepository):
    """Strands ``SessionRepository`` over an evstore ``Store`` (see the module docstring).

    ``prefix`` is prepended to Strands session ids to make evstore session ids;
    ``retention`` applies to sessions this repository creates. Thread-safe.
    """

    def __init__(self, store: Store, *, prefix: str = "", retention: Retention = "permanent") -> None:
        self.store = store
        self.prefix = prefix
        self.retention: Retention = retention
        self._logs: dict[str, SessionLog] = {}
        #: Sessions whose last write raised ``WriteConflictError``: the next call reads what the
        #: other writer appended before it writes (a write never reads otherwise).
        self._stale: set[str] = set()
        #: Inside ``reading_once``: the sessions read there (None outside).
        self._read_once: set[str] | None = None
        self._lock = threading.RLock()

    def evstore_id(self, session_id: str) -> str:
        """The evstore session id of a Strands session."""
        return self.prefix + session_id

    # ---- the log ------------------------------------------------------------

    @contextmanager
    def reading_once(self) -> Iterator[None]:
        """Within it (in this thread: it holds the repository's lock), a session is brought up to
        date by its first read only; later reads there use what that one read, as if all of them
        had happened at once. For reads that belong together: ``EvstoreSessionManager`` restores
        an agent in it (``read_agent`` and ``list_messages``, one LIST for both). Writes stay
        conditional on the head, so a write made from such a read never overwrites."""
        with self._lock:
            outer = self._read_once
            self._read_once = set() if outer is None else outer
            try:
                yield
            finally:
                self._read_once = outer

    def _log(self, session_id: str) -> SessionLog | None:
        """The session's log brought up to date (events other writers appended are folded in: one
        LIST when there are none; none inside ``reading_once`` once read there); None when the
        session does not exist."""
        sid = self.evstore_id(session_id)
        log = self._logs.get(sid)
        once = self._read_once
        if log is not None and once is not None and sid in once and sid not in self._stale:
            return log
        if log is None:
            try:
                log = SessionLog.resume(self.store, sid)
            except SessionNotFoundError:
                return None
            self._logs[sid] = log
        else:
            try:
                log.catch_up()
            except SessionNotFoundError:
                del self._logs[sid]
                return None
        self._stale.discard(sid)
        if once is not None:
            once.add(sid)
        return log

    def _existing(self, session_id: str) -> SessionLog:
        """The session's log for a write: as this repository last saw it (no request), unless its
        last write conflicted; then brought up to date first."""
        sid = self.evstore_id(session_id)
        log = self._logs.get(sid) if sid not in self._stale else None
        log = log or self._log(session_id)
        if log is None:
            raise SessionException(f"session {session_id!r} does not exist")
        return log

    @contextmanager
    def _writing(self, log: SessionLog) -> Iterator[None]:
        """A write's conflict marks the log stale (and is raised): the next call re-reads."""
        try:
            yield
        except WriteConflictError:
            self._stale.add(log.writer.id)
            raise

    def _append(self, log: SessionLog, messages: list[Message], idempotency_key: str | None = None) -> None:
        """One conditional event at the head this repository knows, folded in locally."""
        with self._writing(log):
            log.append(messages, idempotency_key)

    def _latest(self, log: SessionLog, kind: str, record_id: str | None) -> tuple[Position, dict[str, Any]] | None:
        for position, message in reversed(log.live):
            entry = _strands_meta(message)
            if entry is not None and entry.get("kind") == kind and entry.get("id") == record_id:
                record = entry.get("record")
                if isinstance(record, dict):
                    return position, record
        return None

    def _messages(self, log: SessionLog, agent_id: str) -> list[tuple[Position, Message]]:
        out = []
        for position, message in log.live:
            entry = _strands_meta(message)
            if entry is not None and entry.get("kind") == "message" and entry.get("agent") == agent_id:
                out.append((position, message))
        return out

    # ---- sessions -----------------------------------------------------------

    def create_session(self, session: Session, **kwargs: Any) -> Session:
        """Create the evstore session and write the session record; ``SessionException`` (as
        Strands' own repositories) when it exists, the ``SessionExistsError`` as its cause."""
        with self._lock:
            try:
                writer = self.store.create(self.evstore_id(session.session_id), retention=self.retention)
            except SessionExistsError as exists:
                raise SessionException(f"session {session.session_id!r} already exists") from exists
            log = SessionLog(self.store, writer)
            self._logs[writer.id] = log
            self._stale.discard(writer.id)
            self._append(log, [_record("session", session.to_dict())])
            return session

    def read_session(self, session_id: str, **kwargs: Any) -> Session | None:
        """The session record; its ``session_id`` is the one asked for (a fork's, for a fork)."""
        with self._lock:
            log = self._log(session_id)
            found = self._latest(log, "session", None) if log is not None else None
            if found is None:
                return None
            return Session.from_dict({**found[1], "session_id": session_id})

    def delete_session(self, session_id: str, **kwargs: Any) -> None:
        """Delete the evstore session (its forks keep what they need); ``SessionException``
        (as Strands' own repositories) when it does not exist."""
        with self._lock:
            self._logs.pop(self.evstore_id(session_id), None)
            self._stale.discard(self.evstore_id(session_id))
            try:
                self.store.delete(self.evstore_id(session_id))
            except SessionNotFoundError as missing:
                raise SessionException(f"session {session_id!r} does not exist") from missing

    # ---- agents -------------------------------------------------------------

    def create_agent(self, session_id: str, session_agent: SessionAgent, **kwargs: Any) -> None:
        with self._lock:
            log = self._existing(session_id)
            self._append(log, [_record("agent", session_agent.to_dict(), session_agent.agent_id)])

    def read_agent(self, session_id: str, agent_id: str, **kwargs: Any) -> SessionAgent | None:
        with self._lock:
            log = self._log(session_id)
            found = self._latest(log, "agent", agent_id) if log is not None else None
            return SessionAgent.from_dict(found[1]) if found is not None else None

    def update_agent(self, session_id: str, session_agent: SessionAgent, **kwargs: Any) -> None:
        """A new agent record (one event); ``created_at`` stays the first record's."""
        with self._lock:
            log = self._existing(session_id)
            found = self._latest(log, "agent", session_agent.agent_id)
            if found is None:
                raise SessionException(f"agent {session_agent.agent_id!r} does not exist in session {session_id!r}")
            record = session_agent.to_dict()
            record["created_at"] = found[1].get("created_at", record["created_at"])
            self._append(log, [_record("agent", record, session_agent.agent_id)])

    # ---- messages -----------------------------------------------------------

    def create_message(self, session_id: str, agent_id: str, session_message: SessionMessage, **kwargs: Any) -> None:
        """Append the message (one event, one PUT); its id must be the agent's message count."""
        with self._lock:
            log = self._existing(session_id)
            messages = self._messages(log, agent_id)
            count = len(messages)
            message = _message(agent_id, session_message)
            landed = messages[session_message.message_id][1] if session_message.message_id < count else None
            if landed is not None and _strands_meta(landed) == _strands_meta(message):
                return  # a retry of a create that landed: the same message under the same id
            if session_message.message_id != count:
                self._stale.add(log.writer.id)  # the agent is stale: so may be this log
                raise WriteConflictError(
                    log.writer.id,
                    log.writer.head + 1,
                    f"agent {agent_id!r} has {count} messages, so the next message id is {count},"
                    f" not {session_message.message_id} (stale agent?)",
                )
            digest = hashlib.sha256(json.dumps(message, sort_keys=True, default=str).encode()).hexdigest()[:32]
            self._append(log, [message], idempotency_key=f"strands:{agent_id}:{session_message.message_id}:{digest}")

    def read_message(self, session_id: str, agent_id: str, message_id: int, **kwargs: Any) -> SessionMessage | None:
        with self._lock:
            log = self._log(session_id)
            if log is None:
                return None
            for _, message in self._messages(log, agent_id):
                entry = _strands_meta(message)
                if entry is not None and entry.get("id") == message_id:
                    return _session_message(message)
            return None

    def update_message(self, session_id: str, agent_id: str, session_message: SessionMessage, **kwargs: Any) -> None:
        """Replace a message: rewind to its position, then one event re-appending it (new
        version) and every live entry after it. ``created_at`` stays the original's."""
        with self._lock:
            log = self._existing(session_id)
            live = log.live
            index = next(
                (
                    i
                    for i, (_, message) in enumerate(live)
                    if (entry := _strands_meta(message)) is not None
                    and entry.get("kind") == "message"
                    and entry.get("agent") == agent_id
                    and entry.get("id") == session_message.message_id
                ),
                None,
            )
            if index is None:
                raise SessionException(f"message {session_message.message_id} of agent {agent_id!r} does not exist")
            position, old = live[index]
            replacement = _message(agent_id, session_message)
            replacement["meta"]["strands"]["created_at"] = (_strands_meta(old) or {}).get("created_at")
            after = [message for _, message in live[index + 1 :]]
            with self._writing(log):
                log.rewind(position)
            self._append(log, [replacement, *after])

    def list_messages(
        self, session_id: str, agent_id: str, limit: int | None = None, offset: int = 0, **kwargs: Any
    ) -> list[SessionMessage]:
        """The agent's live messages in order, from ``offset``, at most ``limit`` (one replay of new events)."""
        with self._lock:
            log = self._log(session_id)
            if log is None:
                return []
            messages = self._messages(log, agent_id)[offset:]
            if limit is not None:
                messages = messages[:limit]
            return [_session_message(message) for _, message in messages]

    # ---- multi-agent --------------------------------------------------------

    def create_multi_agent(self, session_id: str, multi_agent: MultiAgentBase, **kwargs: Any) -> None:
        with self._lock:
            log = self._existing(session_id)
            self._append(log, [_record("multi_agent", multi_agent.serialize_state(), multi_agent.id)])

    def read_multi_agent(self, session_id: str, multi_agent_id: str, **kwargs: Any) -> dict[str, Any] | None:
        with self._lock:
            log = self._log(session_id)
            found = self._latest(log, "multi_agent", multi_agent_id) if log is not None else None
            return found[1] if found is not None else None

    def update_multi_agent(self, session_id: str, multi_agent: MultiAgentBase, **kwargs: Any) -> None:
        with self._lock:
            log = self._existing(session_id)
            if self._latest(log, "multi_agent", multi_agent.id) is None:
                raise SessionException(f"multi-agent {multi_agent.id!r} does not exist in session {session_id!r}")
            self._append(log, [_record("multi_agent", multi_agent.serialize_state(), multi_agent.id)])


class EvstoreSessionManager(RepositorySessionManager):
    """Strands' ``RepositorySessionManager`` that recovers an agent whose write lost a race.

    Contract: when a write of an agent (a message, its record) raises ``WriteConflictError``
    (another process wrote the session since this one read it), the error propagates out of that
    agent call, once; the agent is then stale (its ``messages`` hold what was not stored). At
    the agent's next invocation, before its prompt is added, the agent is restored from the
    session as it is now, exactly as a new session manager would restore it (its messages,
    state and conversation manager; the other process's writes included, the unsaved messages
    of the failed call dropped), and the invocation continues from the current head. To run the
    failed prompt again, call the agent with it again.
    """

    def __init__(self, session_id: str, session_repository: SessionRepository, **kwargs: Any) -> None:
        super().__init__(session_id, session_repository, **kwargs)
        self._stale_agents: set[str] = set()

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        super().register_hooks(registry, **kwargs)
        registry.add_callback(BeforeInvocationEvent, lambda event: self._restore_if_stale(event.agent))

    def initialize(self, agent: LocalAgent, **kwargs: Any) -> None:
        """Strands' restore, its reads of an ``EvstoreSessionRepository`` made as one
        (``reading_once``: one LIST for the agent record and its messages)."""
        repository = self.session_repository
        with repository.reading_once() if isinstance(repository, EvstoreSessionRepository) else nullcontext():
            super().initialize(agent, **kwargs)

    @contextmanager
    def _marking(self, agent: LocalAgent) -> Iterator[None]:
        try:
            yield
        except WriteConflictError:
            self._stale_agents.add(agent.agent_id)
            raise

    def append_message(self, message: StrandsMessage, agent: LocalAgent, **kwargs: Any) -> None:
        with self._marking(agent):
            super().append_message(message, agent, **kwargs)

    def redact_latest_message(self, redact_message: StrandsMessage, agent: LocalAgent, **kwargs: Any) -> None:
        with self._marking(agent):
            super().redact_latest_message(redact_message, agent, **kwargs)

    def sync_agent(self, agent: LocalAgent, **kwargs: Any) -> None:
        with self._marking(agent):
            super().sync_agent(agent, **kwargs)

    def _restore_if_stale(self, agent: LocalAgent) -> None:
        """Restore a stale agent as ``initialize`` restores one in a new session manager: what
        this manager tracks of the agent is dropped first (``initialize`` refuses an agent id it
        tracks, and the tracked message ids are those of the unsaved messages)."""
        if agent.agent_id not in self._stale_agents:
            return
        self._latest_agent_message.pop(agent.agent_id, None)
        self._last_synced_internal_state.pop(agent.agent_id, None)
        self._held_records.pop(agent.agent_id, None)
        self._is_new_session = False
        self.initialize(agent)
        self._stale_agents.discard(agent.agent_id)


def session_manager(
    session_id: str, store: Store, *, prefix: str = "", retention: Retention = "permanent", **kwargs: Any
) -> EvstoreSessionManager:
    """An ``EvstoreSessionManager`` (Strands' ``RepositorySessionManager``, recovering from a
    conflict) for ``session_id`` over an ``EvstoreSessionRepository``."""
    repository = EvstoreSessionRepository(store, prefix=prefix, retention=retention)
    return EvstoreSessionManager(session_id=session_id, session_repository=repository, **kwargs)
