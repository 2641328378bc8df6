"""OpenAI Agents SDK session memory on evstore: ``EvstoreSession``.

``EvstoreSession`` implements the SDK's ``Session`` protocol (``agents.memory.Session``)
structurally, so this module does not import ``agents`` at all (the SDK takes
seconds to import). Install the SDK with ``pip install 'evstore[openai-agents]'``::

    from agents import Runner
    from evstore.integrations.openai_agents import EvstoreSession

    session = EvstoreSession("chat-42", evstore.open_store("s3://bucket/agents"))
    await Runner.run(agent, "hello", session=session)

Mapping (one evstore session per SDK session):

* ``add_items(items)``: one event holding the batch (one PUT): a tool call is
  written together with its output, atomically.
* ``get_items(limit)``: the context view (``repair="none"``): the latest
  ``limit`` items (else ``session_settings.limit``, else all), in order; a
  negative limit means all, as in the SDK's ``SQLiteSession``.
* ``pop_item()``: a retraction of the newest item of the session's current
  history (what other processes appended included); returns it.
* ``clear_session()``: a retraction of everything (as ``Session.clear``).

Items are opaque JSON dicts. An item that already is a plain evstore message
(``type`` absent or ``"message"``, role ``user|assistant|system|tool``, text or
list content, none of evstore's own fields ``meta``, ``tool_calls``,
``tool_call_id``, ``name``) is stored as it is. Every other item
(``function_call``, ``function_call_output``, ``reasoning``, ``developer``
messages, ...) is wrapped in a message that carries the exact item in
``meta.openai_item``; a function call also gets ``tool_calls`` and its output
``tool_call_id``, so ``evstore replay`` shows them and the context view can
repair a call that never got its output. ``get_items`` returns the exact dicts
that were added. Messages other tools appended (``evstore append``, an import)
are translated: chat-completions tool calls become ``function_call`` items,
tool messages ``function_call_output`` items, evstore fields are dropped.

The session keeps the history it read and its head: ``get_items`` reads only
what other processes appended since (one LIST when they appended nothing,
whatever the session's length; a GET per new event when they did:
``Session.catch_up``), and what this session adds is folded in without being read
back. A Runner turn with one tool call (one ``get_items``, three ``add_items``)
costs 4 requests at any length, 6 when automatic compaction packs a segment
and retires the ones it covers in it (and 2 more once a minute, when the
writer renews its lease: ``evstore._write``).

Writes are conditional on that head, so a second process appending to the
same session meanwhile makes the next write fail with ``WriteConflictError``
instead of interleaving turns silently. To go on after one: call ``get_items``
(``Runner.run`` does, first), which reads what the other process added and
moves this session to the current head, then run the turn again (the write
that raised stored nothing). Until then every write raises the conflict again
(the items it would add were made from the history before the other
process's). Blocking
store calls run in the thread pool of an ``evstore.AsyncStore`` (pass one to
share its pool; a ``Store`` gets a one-thread pool of its own), one at a time
per ``EvstoreSession``. Cancelling ``add_items``, ``pop_item`` or
``clear_session`` waits for the write's outcome before ``CancelledError``
(as the SDK's SQLite session does); ``last_outcome`` then tells it (the seq
written, or the error).

``session_settings`` defaults to ``SessionSettings()``; a dict is coerced and
validated as the SDK does (an unknown field raises ``TypeError``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from .._async import AsyncStore, Outcome
from .._codec import ROLES, Message, Retention
from .._errors import SessionNotFoundError
from .._store import Store
from ._common import EVSTORE_FIELDS, SessionLog, meta_record

if TYPE_CHECKING:  # typing only: importing the SDK costs seconds
    from agents.memory import SessionSettings

__all__ = ["EvstoreSession", "item_to_message", "message_to_items"]

T = TypeVar("T")
#: The meta key of a wrapped item.
ITEM_KEY = "openai_item"
_CALL_TYPES = frozenset({"function_call"})


def _is_plain_message(item: dict[str, Any]) -> bool:
    return (
        item.get("type", "message") == "message"
        and item.get("role") in ROLES
        and isinstance(item.get("content"), str | list)
        and not any(field in item for field in EVSTORE_FIELDS)
    )


def item_to_message(item: dict[str, Any]) -> Message:
    """The evstore message that stores one SDK item (the item itself, or a wrapper)."""
    if not isinstance(item, dict):
        raise TypeError(f"an item must be a dict, not {type(item).__name__}")
    if _is_plain_message(item):
        return item
    kind = item.get("type", "message")
    message: Message
    if kind == "function_call_output" or (isinstance(kind, str) and kind.endswith("_output")):
        message = {"role": "tool", "content": None}
        if isinstance(item.get("call_id"), str):
            message["tool_call_id"] = item["call_id"]
    elif kind == "message" and item.get("role") in ("system", "developer"):
        message = {"role": "system", "content": None}
    elif kind == "message" and item.get("role") == "user":
        message = {"role": "user", "content": None}
    else:
        message = {"role": "assistant", "content": None}
        if kind in _CALL_TYPES and isinstance(item.get("call_id"), str):
            function = {"name": item.get("name"), "arguments": item.get("arguments")}
            message["tool_calls"] = [{"id": item["call_id"], "type": "function", "function": function}]
    message["meta"] = {ITEM_KEY: item}
    return message


def message_to_items(message: Message) -> list[dict[str, Any]]:
    """The SDK items one evstore message stands for (exactly the added item for our own)."""
    item = meta_record(message, ITEM_KEY)
    if item is not None:
        return [item]
    if not any(field in message for field in EVSTORE_FIELDS):
        return [message]
    # written by another tool: translate chat-completions fields into Responses items
    role = message.get("role")
    content = message.get("content")
    if role == "tool":
        output = content if isinstance(content, str) else "" if content is None else content
        return [{"type": "function_call_output", "call_id": message.get("tool_call_id") or "", "output": output}]
    items: list[dict[str, Any]] = []
    if content:
        items.append({"role": role, "content": content})
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            items.append(
                {
                    "type": "function_call",
                    "call_id": call.get("id") or "",
                    "name": function.get("name") or "",
                    "arguments": function.get("arguments") or "",
                }
            )
    return items


def _coerce_settings(value: SessionSettings | Mapping[str, Any] | None) -> SessionSettings:
    """``SessionSettings()`` for None; a dict coerced and validated as the SDK's own sessions do."""
    from agents.memory import SessionSettings  # the caller uses the SDK: it is imported already

    if value is None:
        return SessionSettings()
    if isinstance(value, SessionSettings):
        return value
    try:  # the SDK's own coercion (recent versions): unknown fields raise TypeError
        from agents.memory.session_settings import coerce_session_settings
    except ImportError:  # older SDKs: the dataclass constructor rejects unknown fields with TypeError
        if not isinstance(value, Mapping):
            raise TypeError(f"session_settings must be SessionSettings or a dict, not {type(value).__name__}") from None
        return SessionSettings(**dict(value))
    return coerce_session_settings(value)  # type: ignore[arg-type]  # it validates the type itself


class EvstoreSession:
    """An OpenAI Agents SDK ``Session`` stored in evstore session ``session_id``.

    ``store``: a ``Store``, or an ``AsyncStore`` whose pool runs the blocking calls.
    ``create``: create the evstore session on first use when it does not exist
    (else ``SessionNotFoundError``); ``retention`` applies to a created session.
    ``session_settings``: the SDK's ``SessionSettings`` or a dict of its fields
    (default ``SessionSettings()``; its ``limit`` caps ``get_items``). The
    session is opened lazily, in the pool, on the first call.
    """

    def __init__(
        self,
        session_id: str,
        store: Store | AsyncStore,
        *,
        create: bool = True,
        retention: Retention = "permanent",
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings: SessionSettings = _coerce_settings(session_settings)
        self.astore = store if isinstance(store, AsyncStore) else AsyncStore(store, max_workers=1)
        self.store = self.astore.store
        self.create = create
        self.retention: Retention = retention
        #: How the last write (add_items, pop_item, clear_session) settled, cancelled or not.
        self.last_outcome: Outcome[Any] | None = None
        #: The session as this object last read or wrote it (None until the first call).
        self._log: SessionLog | None = None
        self._lock = threading.Lock()  # a log is not thread-safe: one store call at a time

    def __repr__(self) -> str:
        return f"EvstoreSession({self.session_id!r}, {self.store!r})"

    def _locked(self, work: Callable[[], T]) -> T:
        with self._lock:
            return work()

    async def _run(self, work: Callable[[], T]) -> T:
        return await self.astore.run(self._locked, work)

    async def _write(self, work: Callable[[], T]) -> T:
        """A write: cancel-safe (``AsyncStore.run`` waits for it), its outcome kept in ``last_outcome``."""
        try:
            value = await self._run(work)
        except asyncio.CancelledError as cancelled:
            found = AsyncStore.outcome(cancelled)
            if found is not None and found.started:
                self.last_outcome = found
            raise
        except Exception as error:
            self.last_outcome = Outcome(None, error)
            raise
        self.last_outcome = Outcome(value, None)
        return value

    def _open(self) -> SessionLog:
        """The log; the first call reads the session in one pass (``Store.resume``'s)."""
        if self._log is None:
            self._log = SessionLog.resume(self.store, self.session_id, create=self.create, retention=self.retention)
        return self._log

    def _current(self) -> SessionLog:
        """The log at the session's current head: what other processes appended is folded in. A
        deleted session is forgotten (and raised): the next call opens the id afresh (``create``)."""
        if self._log is None:
            return self._open()
        try:
            self._log.catch_up()
        except SessionNotFoundError:
            self._log = None
            raise
        return self._log

    def _items(self) -> list[dict[str, Any]]:
        messages = self._current().folder.messages("none")
        return [item for message in messages for item in message_to_items(message)]

    async def get_items(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The latest ``limit`` items in order (default ``session_settings.limit``, else all).

        ``limit`` 0 returns none; a negative ``limit`` returns all, as the SDK's ``SQLiteSession``.
        """
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        items = await self._run(self._items)
        if limit is None or limit < 0:
            return items
        return items[-limit:] if limit > 0 else []

    async def add_items(self, items: list[dict[str, Any]]) -> None:
        """Append the items as one event (atomic; one PUT at steady state). Cancel-safe."""
        if not items:
            return
        messages = [item_to_message(item) for item in items]
        # Not keyed by item ids: the SDK's own session tests add items with the same ids again and
        # expect them stored (as SQLiteSession does), so ids do not identify one append.
        await self._write(lambda: self._open().append(messages))

    async def pop_item(self) -> dict[str, Any] | None:
        """Withdraw the newest item (a retraction; the audit view keeps it) and return it, or None.

        A message another tool wrote may stand for several items (text and tool
        calls): it is withdrawn whole, and its last item is returned.
        """

        def pop() -> Message | None:
            log = self._current()  # the newest item is the session's, not what this object last saw
            live = log.live
            if not live:
                return None
            position, message = live[-1]
            log.rewind(position)
            return message

        message = await self._write(pop)
        if message is None:
            return None
        items = message_to_items(message)
        return items[-1] if items else None

    async def clear_session(self) -> None:
        """Withdraw every item (one retraction event; the audit view keeps them)."""
        await self._write(lambda: self._current().clear())
