"""How a LangGraph thread is laid out in evstore: the session id of each (thread, namespace), and
the records its events hold (``cp``, ``w``, ``x``, ``name``: see the package docstring). Pure:
nothing here makes a request.

A record is one system message ``{"role": "system", "content": null, "meta": {"langgraph":
record}}``; ``well_formed`` is what every read demands of one before trusting its fields, and a
``Fold`` is the events of one session taken in log order (first-wins and last-wins as written).
"""

from __future__ import annotations

import hashlib
from typing import Any

from langgraph.checkpoint.base import writes_sort_key

from ... import InvalidInputError
from .._common import meta_record
from .._names import escape, unescape

__all__ = [
    "HASHED",
    "SPAN",
    "Fold",
    "Info",
    "Record",
    "decode_session_id",
    "message",
    "record_of",
    "session_id_for",
    "span_marks",
    "thread_part",
    "version_key",
    "well_formed",
]

_MAX_ID = 128
_THREAD_PART_MAX = 80
#: What a hashed part starts with (never an escape: ``_h`` is no pair of hex digits).
HASHED = "_h"
#: A checkpoint's span: its events up to the ``SPAN``-th checkpoint event after it. A write put to
#: it later is out of span (LangGraph's background puts at times land the next checkpoint before
#: the last write of a step: a span of one checkpoint would leave many writes out).
SPAN = 3

Record = dict[str, Any]


# ---- session ids ---------------------------------------------------------------


def _escape(text: str) -> str:
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError("thread ids and namespaces must be valid Unicode text") from None
    return escape(data, upper=False)


def _unescape(part: str) -> str | None:
    """The text of an escaped part; None for a hashed part or anything this package did not write."""
    data = unescape(part, upper=False)  # a hashed part's "_h" is no escape: None
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _hashed(text: str) -> str:
    return HASHED + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def thread_part(prefix: str, thread_id: str) -> str:
    """The thread's part of its session ids: escaped, or hashed when it would not fit."""
    if not thread_id:
        raise InvalidInputError("a LangGraph thread id must be a non-empty string")
    part = _escape(thread_id)
    return part if len(prefix) + len(part) <= _THREAD_PART_MAX else _hashed(thread_id)


def session_id_for(prefix: str, thread_id: str, checkpoint_ns: str = "") -> str:
    """The evstore session id holding (thread, namespace): see the package docstring."""
    head = prefix + thread_part(prefix, thread_id)
    if not checkpoint_ns:
        return head
    part = _escape(checkpoint_ns)
    if len(head) + 1 + len(part) > _MAX_ID:
        part = _hashed(checkpoint_ns)
    return f"{head}.{part}"


def decode_session_id(prefix: str, session_id: str) -> tuple[str | None, str | None] | None:
    """(thread id, namespace) of a session id, None for a hashed part (its events hold it);
    None when the id is not one this prefix makes."""
    if not session_id.startswith(prefix):
        return None
    rest = session_id[len(prefix) :]
    thread_part, dot, ns_part = rest.partition(".")
    if not thread_part or (dot and not ns_part):
        return None
    thread = _unescape(thread_part)
    if thread is None and not (thread_part.startswith(HASHED) and len(thread_part) == 42):
        return None
    if not dot:
        return thread, ""
    ns = _unescape(ns_part)
    if ns is None and not (ns_part.startswith(HASHED) and len(ns_part) == 42):
        return None
    return thread, ns


# ---- records ---------------------------------------------------------------------


def message(record: Record) -> dict[str, Any]:
    """The one message of the event that holds ``record``."""
    return {"role": "system", "content": None, "meta": {"langgraph": record}}


def record_of(messages: list[dict[str, Any]]) -> Record | None:
    """The LangGraph record of an event's messages, or None (an event someone else wrote)."""
    if len(messages) != 1:
        return None
    record = meta_record(messages[0], "langgraph")
    return record if record is not None and isinstance(record.get("k"), str) else None


class Info:
    """What a put needs of a stored checkpoint: its seq, blob refs and walk starts."""

    __slots__ = ("anc", "first", "refs", "seq")

    def __init__(self, seq: int, record: Record) -> None:
        self.seq = seq
        self.refs: dict[str, list[Any]] = record.get("r") or {}
        self.anc: dict[str, int] = record.get("a") or {}
        self.first: int = record.get("f") or seq


class Fold:
    """Events of one session folded: live and retracted checkpoints, their writes, blob events."""

    def __init__(self) -> None:
        self.live: dict[str, tuple[int, Record]] = {}
        self.hidden: dict[str, tuple[int, Record]] = {}
        self.writes: dict[str, dict[tuple[str, int], tuple[str, str, list[str], str]]] = {}
        self.hidden_writes: dict[str, dict[tuple[str, int], tuple[str, str, list[str], str]]] = {}
        self.records: dict[int, Record] = {}
        self.name: str | None = None
        self.head = 0
        self.lcp = 0
        self.lid: str | None = None

    def add(self, seq: int, record: Record) -> None:
        self.head = seq
        self.records[seq] = record
        self.lcp, self.lid = record.get("lcp") or 0, record.get("lid")
        kind = record["k"]
        if kind == "cp":
            self.live[record["id"]] = (seq, record)
            self.hidden.pop(record["id"], None)
        elif kind == "w":
            stored = self.writes.setdefault(record["cp"], {})
            for idx, channel, typ, data in record["items"]:
                key = (record["t"], idx)
                if idx >= 0 and key in stored:
                    continue
                stored[key] = (record["t"], channel, [typ, data], record.get("path", ""))
        elif kind == "x":
            for checkpoint_id in record["hide"]:
                if checkpoint_id in self.live:
                    self.hidden[checkpoint_id] = self.live.pop(checkpoint_id)
                if checkpoint_id in self.writes:
                    self.hidden_writes.setdefault(checkpoint_id, {}).update(self.writes.pop(checkpoint_id))
        elif kind == "name":
            self.name = record.get("thread")

    def ordered_writes(self, checkpoint_id: str, *, hidden: bool = False) -> list[tuple[str, str, list[str]]]:
        stored = dict(self.writes.get(checkpoint_id, {}))
        if hidden:
            stored = {**self.hidden_writes.get(checkpoint_id, {}), **stored}
        keys = sorted(stored, key=lambda k: writes_sort_key(stored[k][3], k[0], k[1]))
        return [stored[k][:3] for k in keys]


def _is_typed(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)


def well_formed(record: Record) -> bool:
    """The fields reads rely on, with their types (records this package wrote always pass)."""
    kind: str = record["k"]
    if not isinstance(record.get("lcp", 0), int) or not isinstance(record.get("lid"), str | None):
        return False
    if not all(type(record.get(mark, 0)) is int for mark in ("lo", "po")):
        return False
    lc = record.get("lc", [])
    if not isinstance(lc, list) or len(lc) > SPAN or not all(type(seq) is int for seq in lc):
        return False
    if kind == "cp":
        return (
            isinstance(record.get("id"), str)
            and isinstance(record.get("p"), str | None)
            and _is_typed(record.get("c"))
            and _is_typed(record.get("m"))
            and isinstance(record.get("b", {}), dict)
            and all(_is_typed(v) for v in record.get("b", {}).values())
            and isinstance(record.get("r", {}), dict)
            and all(isinstance(v, list) and len(v) == 2 and isinstance(v[0], int) for v in record.get("r", {}).values())
            and isinstance(record.get("a", {}), dict)
            and isinstance(record.get("pre", []), list)
        )
    if kind == "w":
        return (
            isinstance(record.get("cp"), str)
            and isinstance(record.get("t"), str)
            and isinstance(record.get("path", ""), str)
            and isinstance(record.get("items"), list)
            and all(
                isinstance(i, list) and len(i) == 4 and isinstance(i[0], int) and all(isinstance(x, str) for x in i[1:])
                for i in record["items"]
            )
        )
    if kind == "x":
        return isinstance(record.get("hide"), list) and all(isinstance(i, str) for i in record["hide"])
    return kind == "name"


def span_marks(record: Record) -> tuple[list[int] | None, int | None]:
    """(lc, lo) of a record: the seqs of the last ``SPAN`` checkpoint events at or before it
    (oldest first), and the seq of the newest out-of-span record (a late write or a retraction)
    at or before it; (None, None) for a record an older saver wrote, which the marks after it
    cannot vouch for."""
    lc, lo = record.get("lc"), record.get("lo")
    return (lc, lo) if isinstance(lc, list) and isinstance(lo, int) else (None, None)


def version_key(channel: str, version: Any) -> tuple[str, str]:
    """A channel's version as a cache key (versions are any value LangGraph's saver makes)."""
    return channel, repr(version)
