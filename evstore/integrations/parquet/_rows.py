"""What a row is (see the package docstring): the columns and their Arrow types, and an event's
row in them. Pure: nothing here reads or writes; the Arrow schema is built with the pyarrow
module the export loaded.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import msgspec

from ..._codec import MessagesBody, RewindBody, parse_ts
from ..._errors import EvstoreError
from ..._views import Event

#: The columns, in file order, with their Arrow types (``day`` is the partition, in paths only).
SCHEMA_DOC: tuple[tuple[str, str], ...] = (
    ("session_id", "string: the exported session"),
    ("seq", "int64: the event's seq in that session"),
    ("time", "timestamp[us, UTC]: when the event was written"),
    ("kind", "string: messages or rewind"),
    ("roles", "list<string>: each message's role, in order"),
    ("tool_names", "list<string>: the names of the tool calls its messages make, in order"),
    ("messages", "string: the messages as a JSON array, as written (empty for a rewind)"),
    ("text", "string: the text content of the messages, joined by newlines (null when none)"),
    ("rewind_to_seq", "int64: a rewind's to_seq (null otherwise)"),
    ("rewind_keep", "int64: a rewind's keep (null otherwise, or when it keeps all)"),
    ("hash", "string: SHA-256 (hex) of the event object"),
    ("prev_hash", "string: the prev hash the event object names (checked by the read)"),
    ("key_id", "string: the key id it is sealed under (null: plaintext)"),
    ("write_id", "string: the id of the writer that appended it"),
    ("stored_in", "string: the session whose log holds it (an ancestor's id for inherited events)"),
    ("fork_parent", "string: the session this one was forked from (null: no fork)"),
    ("fork_seq", "int64: the seq it was forked at (null: no fork)"),
)

REQUIRED = frozenset({"session_id", "seq", "time", "kind", "roles", "tool_names", "messages", "hash", "write_id", "stored_in"})


def schema(pa: Any, *, spool: bool = False) -> Any:
    """The file schema (``SCHEMA_DOC``); with ``spool``, and the ``day`` each row belongs in."""
    string, int64 = pa.string(), pa.int64()
    types = {
        "seq": int64,
        "time": pa.timestamp("us", tz="UTC"),
        "roles": pa.list_(string),
        "tool_names": pa.list_(string),
        "rewind_to_seq": int64,
        "rewind_keep": int64,
        "fork_seq": int64,
    }
    fields = [pa.field(name, types.get(name, string), nullable=name not in REQUIRED) for name, _ in SCHEMA_DOC]
    if spool:
        fields.append(pa.field("day", string, nullable=False))
    return pa.schema(fields)


def text_of(message: dict[str, Any]) -> str | None:
    """A message's text: its content when that is text, else the ``text`` of each part that has one."""
    content = message.get("content")
    if isinstance(content, str):
        return content or None
    if isinstance(content, list):
        parts = [p if isinstance(p, str) else p.get("text") for p in content if isinstance(p, str | dict)]
        texts = [p for p in parts if isinstance(p, str) and p]
        return "\n".join(texts) or None
    return None


def tool_names(message: dict[str, Any]) -> Iterator[str]:
    """The name of each tool call a message makes: OpenAI's ``function.name``, else ``name``."""
    for call in message.get("tool_calls") or ():
        if not isinstance(call, dict):
            continue
        function = call.get("function")
        name = function.get("name") if isinstance(function, dict) else call.get("name")
        if isinstance(name, str):
            yield name


class Unreadable(EvstoreError):
    """An event the rows cannot hold as it is (its time is no RFC 3339 time)."""


def time_of(event: Event) -> datetime:
    try:
        moment = parse_ts(event.ts)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise Unreadable(f"session {event.session_id!r} seq {event.seq}: time {event.ts[:40]!r} is not an RFC 3339 time")
    return moment.astimezone(UTC)


def row(event: Event, session_id: str, parent: str | None, fork_seq: int | None) -> dict[str, Any]:
    """``event``'s row in ``session_id``'s export (forked from ``parent`` at ``fork_seq``, or
    not): a value per column of ``schema(pa, spool=True)``, its ``day`` last. Raises
    ``Unreadable`` for a time that is no RFC 3339 time."""
    moment = time_of(event)
    body = event.body
    messages = body.messages if isinstance(body, MessagesBody) else []
    encoded = msgspec.json.encode(messages).decode()
    texts = [t for m in messages if (t := text_of(m)) is not None]
    text = "\n".join(texts) if texts else None
    rewind = body if isinstance(body, RewindBody) else None
    return {
        "session_id": session_id,
        "seq": event.seq,
        "time": moment,
        "kind": "rewind" if rewind is not None else "messages",
        "roles": [m.get("role") for m in messages],
        "tool_names": [name for m in messages for name in tool_names(m)],
        "messages": encoded,
        "text": text,
        "rewind_to_seq": rewind.to_seq if rewind is not None else None,
        "rewind_keep": rewind.keep if rewind is not None else None,
        "hash": event.hash,
        "prev_hash": event.prev or None,
        "key_id": event.key_id,
        "write_id": event.write_id,
        "stored_in": event.session_id,
        "fork_parent": parent,
        "fork_seq": fork_seq,
        "day": moment.strftime("%Y-%m-%d"),
    }
