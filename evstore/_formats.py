"""Conversion between evstore messages and other tools' session files. Pure functions only.

Formats:

* ``jsonl``: one message per line, as agent harnesses append them. Lines of
  ``evstore replay --format jsonl`` (``{"seq", "ts", "message"}``) are accepted too.
* ``chatcli``: ChatCLI's session file. Version 2 is an object
  (``version``, ``title``, ``chat_history``, ``agent_history``, ``coder_history``,
  ``shared_memory``, ...); the older format is a plain JSON list of messages.

Where the file's own fields live. evstore's manifest is fixed, so the fields of a
ChatCLI file other than its messages (``version``, ``title``, the compatibility
lists, anything unknown) are kept in the **meta of the first imported message**,
under ``meta.chatcli_file``::

    {"layout": "v2", "fields": {"version": 2, "title": "...", "chat_history": null, ...}, "meta_added": false}

``fields`` keeps the file's key order, with ``chat_history`` as a placeholder;
``layout`` is ``"list"`` for the older format; ``meta_added`` says the message had
no ``meta`` of its own. Export removes the entry again, so import then export
gives back the same JSON value. The context view ignores unknown meta keys, so
the entry never reaches a model.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Literal

import msgspec

from ._codec import Message, MessagesBody, decode_json_value, validate_message
from ._errors import InvalidInputError

Format = Literal["jsonl", "chatcli"]
FORMATS: tuple[Format, ...] = ("jsonl", "chatcli")
#: The meta key of the first imported message that keeps a ChatCLI file's own fields.
CHATCLI_META_KEY = "chatcli_file"
#: The fields a ChatCLI v2 file gets when the session did not come from one.
CHATCLI_V2_DEFAULTS: dict[str, Any] = {
    "version": 2,
    "chat_history": None,
    "agent_history": [],
    "coder_history": [],
    "shared_memory": [],
}

_encoder = msgspec.json.Encoder()


def _checked(value: object, where: str) -> Message:
    try:
        return validate_message(value)
    except InvalidInputError as exc:
        raise InvalidInputError(f"{where}: {exc}") from None


# ---- JSONL -------------------------------------------------------------------


def parse_jsonl(lines: Iterable[str | bytes]) -> Iterator[Message]:
    """Messages from JSONL, one per non-blank line, in order; lines of ``replay --format jsonl`` too."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        value = decode_json_value(line, f"line {number}")
        if isinstance(value, dict) and "role" not in value:
            if "message" in value:
                value = value["message"]
            elif "rewind" in value:
                raise InvalidInputError(f"line {number} is a rewind event, not a message")
        yield _checked(value, f"line {number}")


def render_jsonl(messages: Iterable[Message]) -> Iterator[bytes]:
    """One line (with its newline) per message, as written, except the ``meta.chatcli_file``
    entry an import from ChatCLI keeps in the first message: that is the ChatCLI file's own
    fields, not part of any message, so a JSONL export leaves it out."""
    _, history = split_chatcli_entry(messages)
    for message in history:
        yield _encoder.encode(message) + b"\n"


# ---- ChatCLI -----------------------------------------------------------------


def parse_chatcli(data: str | bytes) -> list[Message]:
    """The messages of a ChatCLI session file (v2 object or older plain list), the file's own
    fields folded into the first message's ``meta.chatcli_file``."""
    value = decode_json_value(data, "chatcli file")
    history: Any
    fields: dict[str, Any] | None
    if isinstance(value, list):
        layout, history, fields = "list", value, None
    elif isinstance(value, dict):
        history = value.get("chat_history")
        if not isinstance(history, list):
            raise InvalidInputError("chatcli file: chat_history must be a list of messages")
        layout = "v2"
        fields = {key: (None if key == "chat_history" else item) for key, item in value.items()}
    else:
        raise InvalidInputError("chatcli file must be a JSON object (version 2) or a list of messages")
    messages = [_checked(m, f"chat_history[{i}]") for i, m in enumerate(history)]
    if not messages:
        raise InvalidInputError("chatcli file has no messages to import")
    first = dict(messages[0])
    meta = first.get("meta")
    entry: dict[str, Any] = {"layout": layout, "meta_added": meta is None}
    if fields is not None:
        entry["fields"] = fields
    if meta is not None and CHATCLI_META_KEY in meta:
        raise InvalidInputError(f"chat_history[0]: meta already has a {CHATCLI_META_KEY!r} entry")
    first["meta"] = {**(meta or {}), CHATCLI_META_KEY: entry}
    return [first, *messages[1:]]


def split_chatcli_entry(messages: Iterable[Message]) -> tuple[dict[str, Any] | None, list[Message]]:
    """The ``meta.chatcli_file`` entry of the first message (None if absent), and the messages
    without it: the first one as it was in the ChatCLI file (no ``meta`` if it had none)."""
    history = list(messages)
    entry: dict[str, Any] | None = None
    if history:
        meta = history[0].get("meta")
        if isinstance(meta, dict) and isinstance(meta.get(CHATCLI_META_KEY), dict):
            entry = meta[CHATCLI_META_KEY]
            rest = {key: item for key, item in meta.items() if key != CHATCLI_META_KEY}
            first = {key: item for key, item in history[0].items() if key != "meta"}
            if rest or not entry.get("meta_added"):
                first = {**history[0], "meta": rest}
            history[0] = first
    return entry, history


def render_chatcli(messages: Iterable[Message]) -> Any:
    """The ChatCLI session file (a JSON value) for these messages.

    The layout and fields come from the first message's ``meta.chatcli_file``
    when the session was imported from ChatCLI; otherwise a v2 file with the
    default fields.
    """
    entry, history = split_chatcli_entry(messages)
    if entry is not None and entry.get("layout") == "list":
        return history
    fields = entry.get("fields") if entry is not None else None
    if not isinstance(fields, dict):
        fields = CHATCLI_V2_DEFAULTS
    out = {key: (history if key == "chat_history" else item) for key, item in fields.items()}
    out.setdefault("chat_history", history)
    return out


def encode_chatcli(value: Any) -> bytes:
    """A ChatCLI file's bytes: indented JSON with a final newline."""
    return msgspec.json.format(_encoder.encode(value), indent=2) + b"\n"


# ---- batching into events ----------------------------------------------------

_BODY_OVERHEAD = len(_encoder.encode(MessagesBody([])))


def batch_messages(messages: Iterable[Message], max_bytes: int) -> Iterator[list[Message]]:
    """Greedy runs of messages whose event body stays within ``max_bytes`` (in order).

    ``InvalidInputError`` when one message alone is too large for an event.
    """
    batch: list[Message] = []
    size = _BODY_OVERHEAD
    for index, message in enumerate(messages):
        length = len(_encoder.encode(message))
        if _BODY_OVERHEAD + length > max_bytes:
            raise InvalidInputError(f"message {index + 1} is {length} bytes, over the event limit of {max_bytes} bytes")
        added = length + (1 if batch else 0)  # the comma between messages
        if batch and size + added > max_bytes:
            yield batch
            batch, size, added = [], _BODY_OVERHEAD, length
        batch.append(message)
        size += added
    if batch:
        yield batch
