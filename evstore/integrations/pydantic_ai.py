"""Pydantic AI message history on evstore: ``EvstoreHistory``.

Stores a ``list[ModelMessage]`` history in one evstore session and restores
it. Install Pydantic AI with ``pip install 'evstore[pydantic-ai]'``::

    from pydantic_ai import Agent
    from evstore.integrations.pydantic_ai import EvstoreHistory

    history = EvstoreHistory(evstore.open_store("s3://bucket/agents"), "chat-42")
    result = agent.run_sync("hello", message_history=history.load())
    history.save(result.new_messages())          # one event: this run's new messages

Mapping: each ``save`` is one evstore event (one PUT, atomic), holding one
evstore message per ``ModelMessage``: role ``user`` for a ``ModelRequest``,
``assistant`` for a ``ModelResponse``, its text parts as content (so
``evstore replay`` shows the conversation) and the exact message, as
``ModelMessagesTypeAdapter`` dumps it to JSON, in ``meta.pydantic_ai``
(bytes included, base64). ``load`` validates those back through the same
adapter, from the context view, so evstore's retractions apply (``evstore
rewind``, ``Session.pop``). Plain messages other tools appended (``evstore
append``) are read as user prompts, model text and system prompts.

The object keeps the history it loaded and its head: a later ``load`` reads
only what other processes appended since (one LIST when they appended
nothing, whatever the session's length; a GET per new event when they did:
``Session.catch_up``), and what ``save`` writes is folded in without being
read back. A run (``load``, then ``save``) costs 2 requests at any length, 4
when automatic compaction packs a segment and retires the ones it covers (and
2 more once a minute, when the writer renews its lease: ``evstore._write``).

Writes are conditional: ``save`` appends at the head this object last loaded
or saved at, so a history another process extended meanwhile raises
``WriteConflictError`` instead of interleaving runs, and stores nothing. To go
on: ``load`` again (it reads what the other process added and moves to the
current head) and rerun; until then every ``save`` raises the conflict again.
The async forms (``aload``, ``asave``) run in an ``AsyncStore``'s bounded pool
and are cancel-safe (a cancelled save settles before ``CancelledError``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pydantic
import pydantic_core
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    UserPromptPart,
)

from .. import AsyncStore, IntegrityError, InvalidInputError, Message, Retention, SessionNotFoundError, Store
from ._common import SessionLog

__all__ = ["META_KEY", "EvstoreHistory", "from_messages", "to_messages"]

#: The meta key holding a message as ``ModelMessagesTypeAdapter`` dumps it.
META_KEY = "pydantic_ai"


def _text(message: ModelMessage) -> str | None:
    texts: list[str] = []
    for part in message.parts:
        if isinstance(part, TextPart | SystemPromptPart):
            texts.append(part.content)
        elif isinstance(part, UserPromptPart):
            if isinstance(part.content, str):
                texts.append(part.content)
            else:
                texts.extend(item for item in part.content if isinstance(item, str))
    return "\n".join(texts) if texts else None


def to_messages(history: Sequence[ModelMessage]) -> list[Message]:
    """The evstore messages that store ``history`` (one per ``ModelMessage``)."""
    try:
        dumped = ModelMessagesTypeAdapter.dump_python(list(history), mode="json")
    except (pydantic_core.PydanticSerializationError, TypeError, ValueError) as exc:
        raise InvalidInputError(f"messages cannot be stored as JSON: {exc}"[:300]) from None
    return [
        {
            "role": "user" if isinstance(message, ModelRequest) else "assistant",
            "content": _text(message),
            "meta": {META_KEY: data},
        }
        for message, data in zip(history, dumped, strict=True)
    ]


def _foreign(message: Message) -> dict[str, Any] | None:
    """A plain evstore message as ``ModelMessagesTypeAdapter`` JSON (None when it carries no text)."""
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    if not isinstance(content, str) or not content:
        return None
    role = message.get("role")
    if role == "assistant":
        return ModelMessagesTypeAdapter.dump_python([ModelResponse(parts=[TextPart(content)])], mode="json")[0]  # type: ignore[no-any-return]
    if role == "system":
        part: SystemPromptPart | UserPromptPart = SystemPromptPart(content)
    elif role == "user":
        part = UserPromptPart(content)
    else:
        return None
    return ModelMessagesTypeAdapter.dump_python([ModelRequest(parts=[part])], mode="json")[0]  # type: ignore[no-any-return]


def from_messages(messages: Sequence[Message], session_id: str = "") -> list[ModelMessage]:
    """The history evstore ``messages`` hold (``IntegrityError`` when a stored message does not validate)."""
    data: list[Any] = []
    for message in messages:
        meta = message.get("meta")
        stored = meta.get(META_KEY) if isinstance(meta, dict) else None
        item = stored if isinstance(stored, dict) else _foreign(message)
        if item is not None:
            data.append(item)
    try:
        return ModelMessagesTypeAdapter.validate_python(data)
    except pydantic.ValidationError as exc:
        raise IntegrityError(
            session_id, None, f"stored Pydantic AI messages do not validate ({exc.error_count()} errors)"
        ) from None


class EvstoreHistory:
    """A Pydantic AI message history in evstore session ``session_id``.

    ``store``: a ``Store``, or an ``AsyncStore`` whose pool runs the async forms.
    ``create``: create the session on first use when it does not exist (else
    ``load`` and ``save`` raise ``SessionNotFoundError``); ``retention`` applies to it.
    """

    def __init__(
        self, store: Store | AsyncStore, session_id: str, *, create: bool = True, retention: Retention = "permanent"
    ) -> None:
        self.async_store = store if isinstance(store, AsyncStore) else AsyncStore(store)
        self.store: Store = self.async_store.store
        self.session_id = session_id
        self.create = create
        self.retention: Retention = retention
        #: The session as this object last loaded or saved it (None until the first call).
        self._log: SessionLog | None = None
        self._lock = threading.Lock()  # a log is not thread-safe: one store call at a time
        #: The head this object last loaded or saved at: ``save`` appends there (None: not loaded yet).
        self.head: int | None = None

    def __repr__(self) -> str:
        return f"EvstoreHistory({self.store!r}, {self.session_id!r}, head={self.head})"

    def _current(self) -> SessionLog:
        """The log at the session's current head: read in one pass the first time (``Store.resume``'s),
        then only what other processes appended since. A deleted session is forgotten (and raised)."""
        try:
            if self._log is None:
                self._log = SessionLog.resume(self.store, self.session_id, create=self.create, retention=self.retention)
            else:
                self._log.catch_up()
        except SessionNotFoundError:
            self._log = None
            self.head = None
            raise
        return self._log

    def load(self) -> list[ModelMessage]:
        """The whole history, in order (empty for a new session)."""
        with self._lock:
            log = self._current()
            self.head = log.writer.head
            messages = log.folder.messages("none")
        return from_messages(messages, self.session_id)

    def save(self, messages: Sequence[ModelMessage]) -> int | None:
        """Append ``messages`` (a run's ``result.new_messages()``) as one event; return its seq (None if empty).

        Appends at the head of the last ``load``/``save`` (``WriteConflictError`` if
        the session moved on since); a history never loaded appends at the current head.
        """
        if not messages:
            return None
        stored = to_messages(messages)
        with self._lock:
            log = self._log if self._log is not None and self.head is not None else self._current()
            seq = log.append(stored)  # at log.writer.head, which is self.head once loaded
            self.head = seq
        return seq

    async def aload(self) -> list[ModelMessage]:
        """``load`` in the async store's pool."""
        return await self.async_store.run(self.load)

    async def asave(self, messages: Sequence[ModelMessage]) -> int | None:
        """``save`` in the async store's pool (cancel-safe: settles before ``CancelledError``)."""
        return await self.async_store.run(self.save, list(messages))
