"""Folding events into the two replay views. Pure functions only.

* Audit view: every event as written, in seq order (replay yields it).
* Context view: what an agent sends to a model next. Retractions (rewind,
  pop) withdraw the messages after their position; a summary message
  (``meta.is_summary``) stands for the ``meta.summary_of`` messages before it
  (all of them when that is absent or 0); the latest summary wins because it
  is folded last. Dangling tool calls are then repaired as the caller chose.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import msgspec

from ._codec import Body, Message, MessagesBody, RewindBody

Repair = Literal["error", "drop", "none"]
REPAIRS: tuple[Repair, ...] = ("error", "drop", "none")
#: Content of the tool result that the ``error`` repair adds for a call that never returned.
INTERRUPTED_RESULT = "error: this tool call was interrupted before it returned a result"


class Event(msgspec.Struct, frozen=True):
    """One event as written: the audit view's unit.

    ``session_id`` is the session whose log holds the event: an ancestor's id for
    events a fork inherits. ``prev`` is the ``prev`` hash its object names, which the read
    checked against the event before it (for the first event, the manifest's hash, or a
    fork's parent event; after a rekey it may name that event's hash before the rekey).
    """

    session_id: str
    seq: int
    ts: str
    write_id: str
    key_id: str | None
    hash: str
    body: Body
    prev: str = ""

    @property
    def messages(self) -> list[Message]:
        return self.body.messages if isinstance(self.body, MessagesBody) else []


class Position(msgspec.Struct, frozen=True):
    """Where a message sits: its event's seq and its index within that event."""

    seq: int
    index: int


class ContextFolder:
    """Accumulates events (in seq order) into the context view.

    Each live message is kept with its position in parallel lists (seq, index, message),
    so that folding builds no object per message and leaves nothing for the garbage
    collector to walk; ``live`` pairs them on demand.
    """

    __slots__ = ("_indexes", "_messages", "_seqs")

    def __init__(self) -> None:
        self._seqs: list[int] = []
        self._indexes: list[int] = []
        self._messages: list[Message] = []

    @property
    def live(self) -> list[tuple[Position, Message]]:
        """(position, message) of each message after retractions, before summaries (a new list)."""
        return [(Position(s, i), m) for s, i, m in zip(self._seqs, self._indexes, self._messages, strict=True)]

    def add(self, seq: int, body: Body) -> None:
        if isinstance(body, MessagesBody):
            messages = body.messages
            if len(messages) == 1:  # the common case
                self._seqs.append(seq)
                self._indexes.append(0)
                self._messages.append(messages[0])
            else:
                self._seqs.extend([seq] * len(messages))
                self._indexes.extend(range(len(messages)))
                self._messages.extend(messages)
        elif isinstance(body, RewindBody):
            kept = [k for k, (s, i) in enumerate(zip(self._seqs, self._indexes, strict=True)) if _kept(s, i, body)]
            self._seqs = [self._seqs[k] for k in kept]
            self._indexes = [self._indexes[k] for k in kept]
            self._messages = [self._messages[k] for k in kept]

    def positioned(self) -> list[tuple[Position, Message]]:
        """Messages after retractions, before summaries: what pop and rewind address."""
        return self.live

    def messages(self, repair: Repair = "error") -> list[Message]:
        return repair_tool_calls(apply_summaries(self._messages), repair)


def _kept(seq: int, index: int, rewind: RewindBody) -> bool:
    if seq != rewind.to_seq:
        return seq < rewind.to_seq
    return rewind.keep is None or index < rewind.keep


def is_summary(message: Message) -> bool:
    meta = message.get("meta")
    return isinstance(meta, dict) and meta.get("is_summary") is True


def apply_summaries(messages: Iterable[Message]) -> list[Message]:
    out: list[Message] = []
    for message in messages:
        if is_summary(message):
            covered = message["meta"].get("summary_of")
            if isinstance(covered, int) and not isinstance(covered, bool) and covered > 0:
                del out[max(0, len(out) - covered) :]
            else:
                out.clear()
        out.append(message)
    return out


def _call_id(call: object) -> str | None:
    if isinstance(call, dict) and isinstance(call.get("id"), str):
        return str(call["id"])
    return None


def dangling_tool_calls(messages: list[Message]) -> set[str]:
    """Ids of tool calls that no later tool message answers."""
    answered = {m.get("tool_call_id") for m in messages if m.get("role") == "tool"}
    calls = {
        call_id
        for m in messages
        if m.get("role") == "assistant"
        for call_id in map(_call_id, m.get("tool_calls") or [])
        if call_id is not None
    }
    return calls - answered


def repair_tool_calls(messages: list[Message], repair: Repair) -> list[Message]:
    """Make a history that ends (or breaks off) with unanswered tool calls acceptable to a model.

    ``error`` (the default) answers each dangling call, right after the message
    that made it, with a tool result whose content is ``INTERRUPTED_RESULT`` and
    whose ``meta.synthetic`` is true; ``drop`` removes the dangling calls (and a
    message left with neither content nor calls); ``none`` changes nothing.
    """
    if repair == "none":
        return messages
    dangling = dangling_tool_calls(messages)
    if not dangling:
        return messages
    out: list[Message] = []
    for message in messages:
        calls = message.get("tool_calls") or [] if message.get("role") == "assistant" else []
        unanswered = [c for c in calls if _call_id(c) in dangling]
        if not unanswered:
            out.append(message)
        elif repair == "drop":
            kept = [c for c in calls if _call_id(c) not in dangling]
            if kept or message.get("content"):
                out.append({**message, "tool_calls": kept or None})
        else:
            out.append(message)
            out.extend(
                {"role": "tool", "tool_call_id": _call_id(c), "content": INTERRUPTED_RESULT, "meta": {"synthetic": True}}
                for c in unanswered
            )
    return out
