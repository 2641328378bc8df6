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
    events a fork inherits.
    """

    session_id: str
    seq: int
    ts: str
    write_id: str
    key_id: str | None
    hash: str
    body: Body

    @property
    def messages(self) -> list[Message]:
        return self.body.messages if isinstance(self.body, MessagesBody) else []


class Position(msgspec.Struct, frozen=True):
    """Where a message sits: its event's seq and its index within that event."""

    seq: int
    index: int


class ContextFolder(msgspec.Struct):
    """Accumulates events (in seq order) into the context view."""

    live: list[tuple[Position, Message]] = msgspec.field(default_factory=list)

    def add(self, seq: int, body: Body) -> None:
        if isinstance(body, MessagesBody):
            self.live.extend((Position(seq, i), m) for i, m in enumerate(body.messages))
        elif isinstance(body, RewindBody):
            self.live = [(p, m) for p, m in self.live if _kept(p, body)]

    def positioned(self) -> list[tuple[Position, Message]]:
        """Messages after retractions, before summaries: what pop and rewind address."""
        return list(self.live)

    def messages(self, repair: Repair = "error") -> list[Message]:
        return repair_tool_calls(apply_summaries(m for _, m in self.live), repair)


def _kept(position: Position, rewind: RewindBody) -> bool:
    if position.seq != rewind.to_seq:
        return position.seq < rewind.to_seq
    return rewind.keep is None or position.index < rewind.keep


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
