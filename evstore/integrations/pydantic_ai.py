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

import contextlib
import hashlib
import threading
from collections.abc import Sequence
from typing import Any

import pydantic
import pydantic_core
from pydantic_ai.conversation_store import ConversationConflict, ConversationEntry, ConversationRecord, ConversationStore
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    UserPromptPart,
)

from .. import (
    AsyncStore,
    IntegrityError,
    InvalidInputError,
    Message,
    Retention,
    SessionExistsError,
    SessionNotFoundError,
    Store,
    WriteConflictError,
)
from ._common import SessionLog, meta_record
from ._names import escape

__all__ = ["ENTRY_KEY", "META_KEY", "RECORD_KEY", "EvstoreConversationStore", "EvstoreHistory", "from_messages", "to_messages"]

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
        stored = meta_record(message, META_KEY)
        item = stored if stored is not None else _foreign(message)
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


# ---- Pydantic AI's own persistence hook: a ConversationStore --------------------------------------

#: The meta keys of a conversation's evstore messages: an entry's id and parent, and the record.
ENTRY_KEY = "pydantic_ai_entry"
RECORD_KEY = "pydantic_ai_record"
_RECORDS = pydantic.TypeAdapter(ConversationRecord)
_SESSION_PART_MAX = 100


class _Conversation:
    """A conversation as this store last read it: its log, its latest record and its entries."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.lock = threading.Lock()
        self.log: SessionLog | None = None
        self.record: dict[str, Any] | None = None
        #: entry id -> (parent id, the message as ModelMessagesTypeAdapter dumps it, the seq of its event)
        self.entries: dict[str, tuple[str | None, Any, int]] = {}

    def fold(self) -> None:
        """Entries and the latest record from the live messages (a later record replaces one before)."""
        assert self.log is not None
        self.record, self.entries = None, {}
        for position, message in self.log.live:
            if (record := meta_record(message, RECORD_KEY)) is not None:
                self.record = None if record.get("deleted") is True else record
            entry, stored = meta_record(message, ENTRY_KEY), meta_record(message, META_KEY)
            if entry is not None and isinstance(entry.get("id"), str) and stored is not None:
                parent = entry.get("parent")
                self.entries[entry["id"]] = (parent if isinstance(parent, str) else None, stored, position.seq)


class EvstoreConversationStore(ConversationStore):
    """Pydantic AI's ``ConversationStore`` on evstore: load a ``Conversation``, run, ``save(result)``.

    One evstore session per conversation (``prefix`` + the escaped conversation id, or a hash
    of a long one). Each ``write_record`` is one event, appended on the head this store last
    read (a conditional PUT): the new entries, one evstore message each (role, text and the
    exact message in ``meta.pydantic_ai``, the entry's id and parent in
    ``meta.pydantic_ai_entry``), then the record (``meta.pydantic_ai_record``). So a save
    conflicting with another writer stores nothing and raises ``ConversationConflict``, and
    the record and its entries land together. A fork is ``Store.fork`` at the event holding
    the entry it keeps (O(1), sharing the source's objects); ``delete`` appends a tombstone
    record on the head it read (so a save since makes it conflict) and deletes the session
    (its objects stay while a fork needs them, until ``evstore gc``).

    The store keeps each conversation it read, as ``EvstoreHistory`` does: a later read lists
    only what other processes appended (one LIST when nothing came), so ``load`` and ``save``
    of a turn cost 3 requests at any length. ``read_entry`` answers for the conversations this
    store has read (``KeyError`` for another entry); ``list_conversations`` reads every
    conversation under the prefix. Async methods run in an ``AsyncStore``'s bounded pool.
    """

    def __init__(self, store: Store | AsyncStore, *, prefix: str = "pai-") -> None:
        if not isinstance(prefix, str) or not 1 <= len(prefix) <= 20 or not prefix[0].isascii() or not prefix[0].isalnum():
            raise InvalidInputError("prefix must be 1-20 characters, starting with a letter or digit")
        self.async_store = store if isinstance(store, AsyncStore) else AsyncStore(store)
        self.store: Store = self.async_store.store
        self.prefix = prefix
        self._conversations: dict[str, _Conversation] = {}
        self._where: dict[str, str] = {}  # entry id -> the conversation id whose session holds it
        self._lock = threading.Lock()

    def session_id(self, conversation_id: str) -> str:
        """The evstore session holding a conversation."""
        part = escape(conversation_id.encode("utf-8", "surrogatepass"), upper=False)
        if len(part) > _SESSION_PART_MAX:
            part = "_h" + hashlib.sha256(conversation_id.encode("utf-8", "surrogatepass")).hexdigest()[:40]
        return self.prefix + part

    def _conversation(self, conversation_id: str) -> _Conversation:
        with self._lock:
            found = self._conversations.get(conversation_id)
            if found is None:
                found = self._conversations[conversation_id] = _Conversation(self.session_id(conversation_id))
            return found

    def _refresh(self, state: _Conversation) -> bool:
        """Bring ``state`` to its session's head (a full read the first time); False once it has none."""
        try:
            if state.log is None:
                state.log = SessionLog.resume(self.store, state.session_id)
                changed = True
            else:
                changed = state.log.catch_up()
        except SessionNotFoundError:
            state.log, state.record, state.entries = None, None, {}
            return False
        if changed:
            state.fold()
        return True

    def _record(self, conversation_id: str) -> ConversationRecord | None:
        state = self._conversation(conversation_id)
        with state.lock:
            self._refresh(state)
            data = state.record
            with self._lock:
                self._where.update(dict.fromkeys(state.entries, conversation_id))
        if data is None:
            return None
        try:
            record = _RECORDS.validate_python(data)
        except pydantic.ValidationError as exc:
            raise IntegrityError(
                state.session_id, None, f"a stored conversation record does not validate ({exc.error_count()} errors)"
            ) from None
        return record if record.conversation_id == conversation_id else None

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        return await self.async_store.run(self._record, conversation_id)

    def _records(self, scope: str | None, limit: int | None) -> list[ConversationRecord]:
        found: list[ConversationRecord] = []
        for session_id in self.store.list_sessions(self.prefix):
            log = None
            try:
                log = SessionLog.resume(self.store, session_id)
            except SessionNotFoundError:
                continue
            probe = _Conversation(session_id)
            probe.log = log
            probe.fold()
            conversation_id = probe.record.get("conversation_id") if probe.record else None
            if isinstance(conversation_id, str) and self.session_id(conversation_id) == session_id:
                record = self._record(conversation_id)
                if record is not None and (scope is None or record.scope == scope):
                    found.append(record)
        found.sort(key=lambda record: record.updated_at, reverse=True)
        return found[:limit]

    async def read_records(self, *, scope: str | None = None, limit: int | None = None) -> Sequence[ConversationRecord]:
        return await self.async_store.run(self._records, scope, limit)

    def _write(self, record: ConversationRecord, new_entries: Sequence[ConversationEntry], expected_revision: str | None) -> None:
        conversation_id = record.conversation_id
        state = self._conversation(conversation_id)
        stored = [
            {**message, "meta": {**message["meta"], ENTRY_KEY: {"id": entry.id, "parent": entry.parent_id}}}
            for entry, message in zip(new_entries, to_messages([e.message for e in new_entries]), strict=True)
        ]
        record_message: Message = {
            "role": "system",
            "content": None,
            "meta": {RECORD_KEY: _RECORDS.dump_python(record, mode="json")},
        }
        with state.lock:
            if state.log is None:  # else the head last read: the append is conditional on it
                self._refresh(state)
            if (state.record.get("revision") if state.record else None) != expected_revision:
                raise ConversationConflict(conversation_id)
            head = record.head_id
            if (
                state.log is None
                and head is not None
                and record.forked_from is not None
                and head not in {e.id for e in new_entries}
            ):
                self._fork_into(state, record.forked_from, head)
            if head is not None and head not in state.entries and head not in {e.id for e in new_entries}:
                raise ConversationConflict(conversation_id)
            try:
                if state.log is None:
                    state.log = SessionLog.resume(self.store, state.session_id, create=True)
                    state.fold()
                    if (state.record.get("revision") if state.record else None) != expected_revision:
                        raise ConversationConflict(conversation_id)
                state.log.append([*stored, record_message])
            except WriteConflictError:
                raise ConversationConflict(conversation_id) from None
            state.fold()
            with self._lock:
                self._where.update(dict.fromkeys(state.entries, conversation_id))

    def _fork_into(self, state: _Conversation, source_id: str, head: str) -> None:
        """Fork the source conversation's session at the event holding ``head`` into ``state``'s."""
        source = self._conversation(source_id)
        with source.lock:
            self._refresh(source)
            located = source.entries.get(head)
        if located is None:
            return  # not the source's: write_record refuses it
        try:
            self.store.fork(source.session_id, state.session_id, at=located[2])
        except SessionExistsError:
            raise ConversationConflict(state.session_id) from None
        self._refresh(state)

    async def write_record(
        self, record: ConversationRecord, *, new_entries: Sequence[ConversationEntry] = (), expected_revision: str | None
    ) -> None:
        await self.async_store.run(self._write, record, list(new_entries), expected_revision)

    def _delete(self, conversation_id: str, expected_revision: str) -> None:
        state = self._conversation(conversation_id)
        with state.lock:
            if not self._refresh(state) or state.record is None or state.record.get("revision") != expected_revision:
                raise ConversationConflict(conversation_id)
            assert state.log is not None
            tombstone: Message = {"role": "system", "content": None, "meta": {RECORD_KEY: {"deleted": True}}}
            try:  # on the head read: a save since makes this conflict
                state.log.append([tombstone])
            except WriteConflictError:
                raise ConversationConflict(conversation_id) from None
            with contextlib.suppress(SessionNotFoundError):
                self.store.delete(state.session_id)
            state.log, state.record, state.entries = None, None, {}

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        await self.async_store.run(self._delete, conversation_id, expected_revision)

    def _history(self, head_id: str | None, limit: int | None) -> list[ConversationEntry]:
        if head_id is None:
            return []
        with self._lock:
            conversation_id = self._where.get(head_id)
        if conversation_id is None:
            raise KeyError(head_id)
        state = self._conversation(conversation_id)
        with state.lock:
            chain: list[tuple[str, str | None, Any]] = []
            entry_id: str | None = head_id
            while entry_id is not None and (limit is None or len(chain) < limit):
                found = state.entries.get(entry_id)
                if found is None:
                    raise KeyError(entry_id)
                chain.append((entry_id, found[0], found[1]))
                entry_id = found[0]
        chain.reverse()
        try:
            messages = ModelMessagesTypeAdapter.validate_python([data for _, _, data in chain])
        except pydantic.ValidationError as exc:
            raise IntegrityError(
                state.session_id, None, f"stored Pydantic AI messages do not validate ({exc.error_count()} errors)"
            ) from None
        return [ConversationEntry(id=i, parent_id=p, message=m) for (i, p, _), m in zip(chain, messages, strict=True)]

    async def read_history(self, head_id: str | None, *, limit: int | None = None) -> list[ConversationEntry]:
        """The entries up to ``head_id`` from memory (the conversation holding it was read): no request."""
        return await self.async_store.run(self._history, head_id, limit)

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        entries = await self.async_store.run(self._history, entry_id, 1)
        return entries[0]
