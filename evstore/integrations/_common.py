"""What the adapters share: evstore's own message fields, and a session as a handle keeps it.

``SessionLog`` is a writer together with the context view folded from the events up to its
head. A handle (an OpenAI Agents ``EvstoreSession``, a Strands repository, a Pydantic AI
``EvstoreHistory``) keeps one per session, so that a turn reads only what other writers
appended since (``catch_up``: one LIST when they appended nothing, whatever the session's
length) and its own appends are folded in locally, never read back.

Contract: ``folder`` holds exactly the events up to ``writer.head`` (the session's and, for a
fork, its ancestors'); every method keeps that true or raises before changing either.
A write is conditional on that head: when another writer took the seq, ``WriteConflictError``
is raised and nothing changes here, so the same log stays stale (every later write raises too)
until ``catch_up`` folds in what the other writer appended; then writes continue from the
current head. Not thread-safe: each handle serialises its calls.
"""

from __future__ import annotations

from typing import Any

from .. import _write
from .._codec import Message, MessagesBody, Retention, RewindBody
from .._store import Session, Store
from .._views import ContextFolder, Position

__all__ = ["EVSTORE_FIELDS", "SessionLog", "meta_record"]

#: The fields evstore gives a message a meaning of its own for: a framework message that has none of
#: them is stored as it is; one that has any is wrapped (its exact value kept in ``meta``).
EVSTORE_FIELDS = ("meta", "tool_calls", "tool_call_id", "name")


def meta_record(message: Message, key: str) -> dict[str, Any] | None:
    """The adapter record ``message["meta"][key]`` when it is a JSON object, else None: how every
    adapter finds its own record in a message, whoever wrote the message (a message of another
    tool, or a hostile one, may hold anything under ``meta``). Pure."""
    meta = message.get("meta")
    record = meta.get(key) if isinstance(meta, dict) else None
    return record if isinstance(record, dict) else None


class SessionLog:
    """One evstore session as a handle last saw it: ``writer`` and the ``folder`` of the events
    up to ``writer.head`` (see the module docstring for the contract)."""

    def __init__(self, store: Store, writer: Session, folder: ContextFolder | None = None) -> None:
        self.store = store
        self.writer = writer
        self.folder = folder if folder is not None else ContextFolder()

    @classmethod
    def resume(
        cls, store: Store, session_id: str, *, create: bool = False, retention: Retention = "permanent"
    ) -> SessionLog:
        """The session's log from one pass (``Store.resume``'s: 2 dependent round trips to about 1,000 events), its
        writer at the head; ``create`` creates a missing session. ``SessionNotFoundError`` else."""
        writer, folder = _write.resume_folded(store.shared, session_id, create_missing=create, retention=retention)
        return cls(store, writer, folder)

    @property
    def live(self) -> list[tuple[Position, Message]]:
        """(position, message) of each live message: after retractions, before summaries."""
        return self.folder.live

    def catch_up(self) -> bool:
        """Fold in the events other writers appended after the head and move the writer there
        (``Session.catch_up``: one LIST when there were none, else a GET each); whether there were
        any. ``SessionNotFoundError`` once the session is deleted."""
        events = self.writer.catch_up()
        for event in events:
            self.folder.add(event.seq, event.body)
        return bool(events)

    def append(self, messages: list[Message], idempotency_key: str | None = None) -> int:
        """One event at the head this log knows (``WriteConflictError`` when another writer took
        its seq), folded in locally; its seq."""
        writer = self.writer
        seq = writer.append(messages, expected_head=writer.head, idempotency_key=idempotency_key)
        self.folder.add(seq, MessagesBody(messages))
        return seq

    def rewind(self, position: Position) -> int:
        """Withdraw every live message from ``position`` on (one retraction event at the head this
        log knows), folded in locally; its seq."""
        writer = self.writer
        seq = writer.rewind(position.seq, keep=position.index, expected_head=writer.head)
        self.folder.add(seq, RewindBody(position.seq, position.index))
        return seq

    def clear(self) -> int:
        """Withdraw every message (a rewind to seq 0 at the head this log knows); its seq."""
        writer = self.writer
        seq = writer.rewind(0, expected_head=writer.head)
        self.folder.add(seq, RewindBody(0, None))
        return seq
