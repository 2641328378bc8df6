"""LangGraph checkpoints on evstore: ``EvstoreSaver``, a ``BaseCheckpointSaver``.

Install with ``pip install 'evstore[langgraph]'``; this module imports LangGraph,
``import evstore`` never does::

    from evstore.integrations.langgraph import EvstoreSaver

    graph = builder.compile(checkpointer=EvstoreSaver(evstore.open_store("s3://bucket/agents")))
    graph.invoke(inputs, {"configurable": {"thread_id": "chat-42"}})

Design
------
**One evstore session per (thread, namespace).** Its id is ``prefix`` + the
thread id, then ``.`` + the namespace for a non-root namespace, each part
encoded reversibly: ``[A-Za-z0-9-]`` stay as they are (a uuid4 thread id is
readable in ``evstore list``), every other UTF-8 byte becomes ``_`` + two hex
digits (``child:abc`` -> ``child_3aabc``), so ``.`` only ever separates the two
parts and ``..`` never appears. A part that would make the id longer than
evstore's 128 characters (a thread part over 80 characters with the prefix, or
a deep subgraph namespace) is ``_h`` + 40 hex digits of its SHA-256 instead
(``_h`` is never an escape); the original string is kept in the session's events
(a ``name`` event for a hashed thread id, every checkpoint for the namespace),
so ``list`` and ``copy_thread`` still recover it. Thread ids must be non-empty.

Each session's events are single messages ``{"role": "system", "content": null,
"meta": {"langgraph": record}}`` of four kinds:

* ``cp`` -- one per ``put``: the checkpoint without its channel values and the
  metadata (LangGraph's serializer, base64), the blobs of **only the channels in
  ``new_versions``**, and ``r``: for every channel with a stored value, the seq
  of the event holding its blob at the current version (unchanged channels are
  referenced, never rewritten, so storage grows with what changed). ``a`` holds,
  per channel, where the delta-channel ancestor walk must start reading.
* ``w`` -- one per ``put_writes`` call: the writes not already stored for that
  (checkpoint, task_id, idx) -- a repeated call appends nothing (special channels
  ERROR/INTERRUPT/... keep the latest value, as LangGraph's savers do).
* ``x`` -- a retraction: checkpoint ids (and their writes) hidden from every
  read from then on (``prune`` keep_latest, ``delete_for_runs``).
* ``name`` -- the original thread id of a hashed session id.

Every event also carries ``lcp``/``lid``: the seq and id of the latest live
checkpoint (the greatest id, as LangGraph's savers order them) once it is
applied. So ``get_tuple`` of the latest checkpoint reads the head event, the
events from that checkpoint to the head (its pending writes: one super-step's),
and one event per distinct seq its channel values live at: a bounded number of
requests that does not grow with the thread (a new process's first read of a
session finds its head as ``Store.open`` does: past 1,000 events without
segments, a few HEAD probes more, O(log n)). ``get_tuple`` of an older
``checkpoint_id`` reads from that checkpoint to the head (the first time a
saver meets an id, the whole session); ``list(limit=k)`` reads each session
backwards from its head, in chunks that double, only as far as its k newest
checkpoints and their writes reach (``_newest_fold``), and without a limit, or
with ``before``, replays the sessions it lists.
A saver keeps, per session it used (the 1,024 most recent), its writer, where
the recent checkpoints are and their small channel values; its next read of
that session lists only what came after the head it knows (``Session.catch_up``:
one LIST when nothing came, and the records another process appended taken in
as they are read), so a graph's turn on a thread it holds reads one LIST at any
length, then puts.

**Concurrency.** Each saver keeps one evstore writer per session and appends
at the head it last read (``get_tuple``, ``get_delta_channel_history``) or wrote; every append is a
conditional PUT. A second process that read an older state and then puts is
refused with ``evstore.WriteConflictError`` (nothing is overwritten); read the
thread again (``get_tuple``) to continue from what is there. Within one saver a
lock per session serializes the parallel tasks' ``put_writes``.

**Copies and deletes.** ``copy_thread`` forks each of the thread's sessions
(``Store.fork``: O(1), the copy shares the source's objects).
``delete_thread`` and ``prune(strategy="delete")`` delete the thread's sessions
(``Store.delete``: their objects are removed at once, or by ``evstore gc`` once
no fork needs them). ``prune(strategy="keep_latest")`` and ``delete_for_runs``
append retractions: the checkpoints are gone for every read, but nothing is
freed (the log is append-only; the audit view keeps them); reclaim their
storage by deleting the thread. Retracted checkpoints still feed
``get_delta_channel_history`` of the checkpoints that remain, so pruning never
breaks a ``DeltaChannel``. ``delete_for_runs`` replays every session under the
prefix (no index of runs is kept): O(store) requests. A thread id that was
deleted while a fork of it lives cannot be used again until gc removes it.

Under LangGraph's default ``durability="async"``, LangGraph calls ``put`` in the
background with live channel objects (a join barrier's set), so a checkpoint
can hold a value the next step already changed; this saver serializes them as
early as it can, but only ``durability="sync"`` makes every checkpoint exact.

Limits: a checkpoint's changed channels (base64 of LangGraph's serialization)
must fit in one evstore event (``Store.max_event_bytes``, 5 MiB by default).
Async methods run the sync ones in ``AsyncStore``'s bounded pool; a cancelled
call settles before ``CancelledError`` is raised.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import random
import threading
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from .._async import AsyncStore
from .._errors import IntegrityError, InvalidInputError, SessionExistsError, SessionNotFoundError
from .._store import Session, Store
from .._views import Event
from ._common import meta_record
from ._names import escape, unescape

__all__ = ["EvstoreSaver", "decode_session_id", "session_id_for"]

_MAX_ID = 128
_THREAD_PART_MAX = 80
_HASHED = "_h"
_PREFIX_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
_STRATEGIES = ("keep_latest", "delete")
#: Checkpoint summaries a saver keeps per session (id -> seq, refs); older ones are re-read when needed.
_CACHE_LIMIT = 4096
#: A checkpoint's span: its events up to the ``_SPAN``-th checkpoint event after it. A write put to
#: it later is out of span (LangGraph's background puts at times land the next checkpoint before
#: the last write of a step: a span of one checkpoint would leave many writes out).
_SPAN = 3
#: Sessions a saver keeps state for (writer, caches), least recently used dropped first.
_STATES_LIMIT = 1024
#: Base64 characters of channel values a saver keeps per session, so that a value that has not
#: changed for many steps costs no request to read again (events are immutable).
_RECORDS_BUDGET = 256 * 1024

Record = dict[str, Any]


# ---- session ids ---------------------------------------------------------------


def _escape(text: str) -> str:
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError("thread ids and namespaces must be valid Unicode text") from None
    return escape(data, upper=False)


def _unescape(part: str) -> str | None:
    """The text of an escaped part; None for a hashed part or anything this module did not write."""
    data = unescape(part, upper=False)  # a hashed part's "_h" is no escape: None
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _hashed(text: str) -> str:
    return _HASHED + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def _thread_part(prefix: str, thread_id: str) -> str:
    if not thread_id:
        raise InvalidInputError("a LangGraph thread id must be a non-empty string")
    part = _escape(thread_id)
    return part if len(prefix) + len(part) <= _THREAD_PART_MAX else _hashed(thread_id)


def session_id_for(prefix: str, thread_id: str, checkpoint_ns: str = "") -> str:
    """The evstore session id holding (thread, namespace): see the module docstring."""
    head = prefix + _thread_part(prefix, thread_id)
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
    if thread is None and not (thread_part.startswith(_HASHED) and len(thread_part) == 42):
        return None
    if not dot:
        return thread, ""
    ns = _unescape(ns_part)
    if ns is None and not (ns_part.startswith(_HASHED) and len(ns_part) == 42):
        return None
    return thread, ns


# ---- records ---------------------------------------------------------------------


def _message(record: Record) -> dict[str, Any]:
    return {"role": "system", "content": None, "meta": {"langgraph": record}}


def _record_of(messages: list[dict[str, Any]]) -> Record | None:
    if len(messages) != 1:
        return None
    record = meta_record(messages[0], "langgraph")
    return record if record is not None and isinstance(record.get("k"), str) else None


class _Info:
    """What a put needs of a stored checkpoint: its seq, blob refs and walk starts."""

    __slots__ = ("anc", "first", "refs", "seq")

    def __init__(self, seq: int, record: Record) -> None:
        self.seq = seq
        self.refs: dict[str, list[Any]] = record.get("r") or {}
        self.anc: dict[str, int] = record.get("a") or {}
        self.first: int = record.get("f") or seq


class _Fold:
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


class _State:
    """A saver's view of one session: its writer, the latest checkpoint, what it has seen."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.lock = threading.RLock()
        self.writer: Session | None = None
        self.known_head = 0  # the head up to which lcp/lid and the caches are exact
        self.lcp = 0
        self.lid: str | None = None
        #: The span marks at known_head (``_marks``): the last checkpoint event's seq and the newest
        #: out-of-span record's; None when the head event predates them (written by an older saver).
        self.lc: list[int] | None = []
        self.lo: int | None = 0
        self.infos: dict[str, _Info] = {}
        self.blobs: dict[tuple[str, str], int] = {}  # (channel, repr(version)) -> seq of its blob
        self.wkeys: dict[str, set[tuple[str, int]]] = {}  # checkpoint id -> (task_id, idx) stored
        self.pre: dict[str, list[int]] = {}  # checkpoint id not yet put -> seqs of its writes
        self.records: dict[int, Record] = {}  # seq -> checkpoint event with small channel values
        self.tail: dict[int, Record] = {}  # the records from the latest checkpoint to known_head (and its early writes)
        self.records_chars = 0

    def keep(self, seq: int, record: Record) -> None:
        """Keep a checkpoint event's record to read its channel values from memory later."""
        size = sum(len(blob[1]) for blob in (record.get("b") or {}).values())
        if not size or size > _RECORDS_BUDGET // 4 or seq in self.records:
            return
        while self.records and self.records_chars + size > _RECORDS_BUDGET:
            oldest = next(iter(self.records))
            self.records_chars -= sum(len(b[1]) for b in (self.records.pop(oldest).get("b") or {}).values())
        self.records[seq] = record
        self.records_chars += size

    def remember(self, checkpoint_id: str, info: _Info) -> None:
        if len(self.infos) >= _CACHE_LIMIT:
            for stale in list(self.infos)[: _CACHE_LIMIT // 2]:
                del self.infos[stale]
            self.wkeys = {k: v for k, v in self.wkeys.items() if k in self.infos or k == self.lid}
        if len(self.blobs) >= _CACHE_LIMIT * 4:
            self.blobs.clear()
        self.infos[checkpoint_id] = info


def _is_typed(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)


def _well_formed(record: Record) -> bool:
    """The fields reads rely on, with their types (records this module wrote always pass)."""
    kind: str = record["k"]
    if not isinstance(record.get("lcp", 0), int) or not isinstance(record.get("lid"), str | None):
        return False
    if not all(type(record.get(mark, 0)) is int for mark in ("lo", "po")):
        return False
    lc = record.get("lc", [])
    if not isinstance(lc, list) or len(lc) > _SPAN or not all(type(seq) is int for seq in lc):
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


def _span_marks(record: Record) -> tuple[list[int] | None, int | None]:
    """(lc, lo) of a record: the seqs of the last ``_SPAN`` checkpoint events at or before it
    (oldest first), and the seq of the newest out-of-span record (a late write or a retraction)
    at or before it; (None, None) for a record an older saver wrote, which the marks after it
    cannot vouch for."""
    lc, lo = record.get("lc"), record.get("lo")
    return (lc, lo) if isinstance(lc, list) and isinstance(lo, int) else (None, None)


def _mark(state: _State, record: Record, seq: int, *, out_of_span: bool = False) -> None:
    """Give ``record``, to be appended at ``seq`` after ``state``'s head, its span marks (see
    ``_span_marks``; none when the head's are unknown). An out-of-span record links to the one
    before it (``po``), so a reader finds them all from the head, newest first."""
    if state.lc is None or state.lo is None:
        return
    record["lc"] = [*state.lc, seq][-_SPAN:] if record["k"] == "cp" else state.lc
    record["lo"] = seq if out_of_span else state.lo
    if out_of_span:
        record["po"] = state.lo


def _typed(value: tuple[str, bytes]) -> list[str]:
    return [value[0], base64.b64encode(value[1]).decode("ascii")]


def _version_key(channel: str, version: Any) -> tuple[str, str]:
    return channel, repr(version)


# ---- the saver -------------------------------------------------------------------------


class EvstoreSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer on an evstore ``Store`` (see the module docstring).

    ``prefix``: the session id prefix of every thread (letters, digits, ``-``, ``_``;
    starting with a letter or digit; at most 40 characters). ``max_workers``: the
    async methods' thread pool size.
    """

    def __init__(
        self,
        store: Store,
        *,
        prefix: str = "lg-",
        serde: SerializerProtocol | None = None,
        max_workers: int = 8,
    ) -> None:
        super().__init__(serde=serde)
        if (
            not isinstance(prefix, str)
            or not 1 <= len(prefix) <= 40
            or not prefix[0].isascii()
            or not prefix[0].isalnum()
            or not set(prefix) <= _PREFIX_CHARS
        ):
            raise InvalidInputError("prefix must be 1-40 letters, digits, '-' or '_', starting with a letter or digit")
        self.store = store
        self.prefix = prefix
        self.aio = AsyncStore(store, max_workers=max_workers)
        self._states: dict[str, _State] = {}
        self._states_lock = threading.Lock()

    # ---- plumbing --------------------------------------------------------------

    def _state(self, session_id: str) -> _State:
        with self._states_lock:
            state = self._states.pop(session_id, None)
            if state is None:
                state = _State(session_id)
                if len(self._states) >= _STATES_LIMIT:
                    del self._states[next(iter(self._states))]
            self._states[session_id] = state  # most recently used last
            return state

    def _forget(self, session_id: str) -> None:
        with self._states_lock:
            self._states.pop(session_id, None)

    @staticmethod
    def _parts(config: RunnableConfig) -> tuple[str, str]:
        configurable = config.get("configurable") or {}
        thread_id = configurable.get("thread_id")
        if thread_id is None or thread_id == "":
            raise InvalidInputError("the config needs configurable.thread_id")
        return str(thread_id), str(configurable.get("checkpoint_ns") or "")

    def _sid(self, thread_id: str, checkpoint_ns: str) -> str:
        return session_id_for(self.prefix, thread_id, checkpoint_ns)

    def _thread_sessions(self, thread_id: str) -> list[str]:
        """Session ids of every namespace of the thread: one LIST per 1,000."""
        head = self.prefix + _thread_part(self.prefix, thread_id)
        return [sid for sid in self.store.list_sessions(head) if sid == head or sid.startswith(head + ".")]

    def _read(self, session_id: str, start: int, end: int | None) -> Iterator[tuple[int, Record]]:
        for event in self.store.replay(session_id, start=start, end=end):
            record = _record_of(event.messages)
            if record is not None:
                if not _well_formed(record):
                    raise IntegrityError(session_id, event.seq, "a LangGraph record is malformed")
                yield event.seq, record

    def _dump(self, value: Any, what: str) -> list[str]:
        try:
            return _typed(self.serde.dumps_typed(value))
        except (TypeError, ValueError, OverflowError) as exc:
            raise InvalidInputError(f"cannot serialize {what[:80]}: {str(exc)[:120]}") from None

    def _fold(self, session_id: str, start: int = 1, end: int | None = None) -> _Fold:
        fold = _Fold()
        for seq, record in self._read(session_id, start, end):
            fold.add(seq, record)
        return fold

    def _decode(self, typed: list[str], session_id: str, seq: int | None) -> Any:
        try:
            data = base64.b64decode(typed[1].encode("ascii"), validate=True)
            return self.serde.loads_typed((typed[0], data))
        except Exception as exc:  # any serializer failure on stored bytes: they are not what was written
            raise IntegrityError(session_id, seq, f"a LangGraph value does not decode ({type(exc).__name__})") from None

    def _refresh(self, state: _State) -> bool:
        """Bring the writer to the session's head (what a later put must extend); False if none.

        A session deleted (and perhaps created again) since is opened afresh, its caches dropped.
        """
        if state.writer is not None:
            try:
                new = state.writer.catch_up()  # one LIST when nothing came: a turn's cost at any length
            except (SessionNotFoundError, IntegrityError):
                self._reset(state)  # deleted (perhaps created again), or a planted object: opened afresh
            else:
                self._adopt(state, new)
                return True
        try:
            state.writer = self.store.open(state.session_id)
        except SessionNotFoundError:
            self._reset(state)
            return False
        state.known_head = 0  # nothing of this incarnation is known yet
        self._sync(state)
        return True

    def _adopt(self, state: _State, new: list[Event]) -> None:
        """Take in the events another process appended (``Session.catch_up``): the latest
        checkpoint's seq and id from the newest, and the records into ``tail``, so that
        ``_load_latest`` reads none of them again. Anything but LangGraph records after what this
        saver knew falls back to ``_sync`` (the head event read)."""
        if not new:
            self._sync(state)
            return
        records: dict[int, Record] = {}
        for event in new:
            record = _record_of(event.messages)
            if record is not None and not _well_formed(record):
                raise IntegrityError(state.session_id, event.seq, "a LangGraph record is malformed")
            if record is None or new[0].seq != state.known_head + 1:
                self._sync(state)
                return
            records[event.seq] = record
        last = records[new[-1].seq]
        state.known_head = new[-1].seq
        state.lcp, state.lid = last.get("lcp") or 0, last.get("lid")
        state.lc, state.lo = _span_marks(last)
        merged = {**state.tail, **records}
        latest = merged.get(state.lcp)
        early = set(latest.get("pre") or []) if latest is not None else set()
        state.tail = {seq: record for seq, record in merged.items() if seq >= state.lcp or seq in early}

    def _sync(self, state: _State) -> None:
        """Make the latest checkpoint's seq and id exact at the writer's head: every event names
        them, so when the head moved (or is new to this saver) its event is read."""
        writer = state.writer
        assert writer is not None
        head = writer.head
        if head == state.known_head:
            return
        last = next(iter(self._read(state.session_id, head, head)), None) if head else None
        state.known_head = head
        state.lcp, state.lid = (last[1].get("lcp") or 0, last[1].get("lid")) if last else (0, None)
        state.lc, state.lo = _span_marks(last[1]) if last else (None, None) if head else ([], 0)
        state.tail = {last[0]: last[1]} if last and last[0] == head else {}

    def _reset(self, state: _State) -> None:
        state.writer = None
        state.known_head = state.lcp = 0
        state.lid = None
        state.lc, state.lo = [], 0  # right for an empty session; _sync reads the head event of any other
        state.infos.clear()
        state.blobs.clear()
        state.wkeys.clear()
        state.pre.clear()
        state.records.clear()
        state.records_chars = 0
        state.tail.clear()

    def _learn(self, state: _State, fold: _Fold, *, whole: bool) -> None:
        """Adopt what a fold read: the latest checkpoint and summaries of the checkpoints seen."""
        for checkpoint_id, (seq, record) in fold.live.items():
            state.remember(checkpoint_id, _Info(seq, record))
            for channel, (ref_seq, version) in (record.get("r") or {}).items():
                state.blobs[_version_key(channel, version)] = ref_seq
        if whole:
            for checkpoint_id in fold.live:
                state.wkeys[checkpoint_id] = set(fold.writes.get(checkpoint_id, {}))
        if fold.head:
            state.known_head = fold.head
            state.lcp, state.lid = fold.lcp, fold.lid
            head = fold.records.get(fold.head)
            state.lc, state.lo = _span_marks(head) if head is not None else (None, None)

    def _tuple(
        self, thread_id: str, checkpoint_ns: str, session_id: str, fold: _Fold, checkpoint_id: str, state: _State | None = None
    ) -> CheckpointTuple | None:
        found = fold.live.get(checkpoint_id)
        if found is None:
            return None
        seq, record = found
        checkpoint: Checkpoint = self._decode(record["c"], session_id, seq)
        checkpoint["channel_values"] = self._values(session_id, fold, record, state)
        metadata: CheckpointMetadata = self._decode(record["m"], session_id, seq)
        pending: list[PendingWrite] = [
            (task, channel, self._decode(typed, session_id, None)) for task, channel, typed in fold.ordered_writes(checkpoint_id)
        ]
        parent = record.get("p")
        return CheckpointTuple(
            config=_config(thread_id, checkpoint_ns, checkpoint_id),
            checkpoint=checkpoint,
            metadata=metadata,
            parent_config=_config(thread_id, checkpoint_ns, parent) if parent else None,
            pending_writes=pending,
        )

    def _values(self, session_id: str, fold: _Fold, record: Record, state: _State | None) -> dict[str, Any]:
        """The checkpoint's channel values: each from the event its ref names (read if not folded)."""
        refs: dict[str, list[Any]] = record.get("r") or {}
        self._fetch(session_id, fold, {ref[0] for ref in refs.values()}, state)
        values = {}
        for channel, (seq, _) in refs.items():
            blob = (fold.records[seq].get("b") or {}).get(channel)
            if blob is None:
                raise IntegrityError(session_id, seq, f"the value of channel {channel!r:.60} is not in its event")
            values[channel] = self._decode(blob, session_id, seq)
        return values

    def _fetch(self, session_id: str, fold: _Fold, seqs: Iterable[int], state: _State | None = None) -> None:
        """Read the events at ``seqs`` the fold lacks (from ``state``'s cache when it has them),
        one replay per run of consecutive seqs; keep what was read in the cache."""
        wanted = set(seqs)
        if state is not None:
            for seq, record in fold.records.items():
                if seq in wanted:
                    state.keep(seq, record)
            for seq in wanted - set(fold.records):
                if seq in state.records:
                    fold.records[seq] = state.records[seq]
        missing = sorted(s for s in wanted if s not in fold.records)
        runs: list[list[int]] = []
        for seq in missing:
            if runs and seq == runs[-1][-1] + 1:
                runs[-1].append(seq)
            else:
                runs.append([seq])
        for run in runs:
            for seq, record in self._read(session_id, run[0], run[-1]):
                fold.records[seq] = record
                if state is not None:
                    state.keep(seq, record)
            for seq in run:
                if seq not in fold.records:
                    raise IntegrityError(session_id, seq, "an event a checkpoint refers to is not a LangGraph record")

    def _load_latest(self, state: _State) -> _Fold | None:
        """The events from the latest live checkpoint to the head (plus its early writes)."""
        writer = state.writer
        assert writer is not None
        head = writer.head
        if head == 0:
            return None
        self._sync(state)
        if not state.lcp or state.lid is None:
            return None
        span = range(state.lcp, head + 1)
        if all(seq in state.tail for seq in span):  # this saver wrote or read all of them
            records = {seq: state.tail[seq] for seq in span}
        else:
            records = dict(self._read(state.session_id, state.lcp, head))
        latest = records.get(state.lcp)
        if latest is None or latest["k"] != "cp" or latest["id"] != state.lid:
            raise IntegrityError(state.session_id, state.lcp, "the latest checkpoint is not where the head says")
        early = sorted(s for s in latest.get("pre") or [] if s < state.lcp)
        gathered = _Fold()
        gathered.records = {s: state.tail[s] for s in early if s in state.tail}
        self._fetch(state.session_id, gathered, early)
        fold = _Fold()
        for seq in [*early, *sorted(records)]:  # in log order: first-wins and last-wins as written
            fold.add(seq, gathered.records[seq] if seq < state.lcp else records[seq])
        state.tail = dict(fold.records)
        fold.lcp, fold.lid, fold.head = state.lcp, state.lid, head
        self._learn(state, fold, whole=False)
        state.wkeys[state.lid] = set(fold.writes.get(state.lid, {}))
        return fold

    def _load_id(self, state: _State, checkpoint_id: str) -> _Fold:
        """Events enough to build ``checkpoint_id`` with its writes: its span (``_span_fold``) when
        this saver knows its seq, else from its first event to the head."""
        writer = state.writer
        assert writer is not None
        info = state.infos.get(checkpoint_id)
        if info is not None and (spanned := self._span_fold(state, checkpoint_id, info)) is not None:
            return spanned
        start = info.first if info is not None else 1
        fold = self._fold(state.session_id, start, writer.head)
        if info is not None and checkpoint_id not in fold.live and checkpoint_id not in fold.hidden:
            fold = self._fold(state.session_id, 1, writer.head)  # the cache was wrong: read it all
        self._learn(state, fold, whole=start == 1)
        return fold

    def _span_fold(self, state: _State, checkpoint_id: str, info: _Info) -> _Fold | None:
        """The events a checkpoint needs, read without reading to the head: its early writes
        (``pre``), its event and the events after it up to the ``_SPAN``-th checkpoint event after it (its span:
        read forwards in chunks that double), and the out-of-span records after that (late
        writes, retractions), found from the head's ``lo`` through their ``po`` links, newest
        first. None when a record on the way has no marks (an older saver's: read as before)
        or the event at the seq this saver knows is not that checkpoint's."""
        writer = state.writer
        assert writer is not None
        head, session_id = writer.head, state.session_id
        records: dict[int, Record] = {}
        start, size, stop = info.first, 8, 0
        while not stop:
            end = min(head, start + size - 1)
            records.update(self._read(session_id, start, end))
            for seq in range(start, end + 1):
                if seq not in records:
                    if seq < info.seq:
                        continue
                    return None  # not a LangGraph record: it carries no marks
                if seq < info.seq:
                    continue  # its early writes ("pre") and what came between them
                lc, _ = _span_marks(records[seq])
                if lc is None:
                    return None
                if info.seq not in lc:  # the _SPAN-th checkpoint event after it: the span ends before it
                    stop = seq
                    break
            if not stop and end >= head:
                stop = head + 1
            start, size = end + 1, size * 2
        found = records.get(info.seq)
        if found is None or found["k"] != "cp" or found["id"] != checkpoint_id:
            return None
        tip = state.tail.get(head) if state.known_head == head else None
        if tip is None:
            tip = records.get(head) or next((r for _, r in self._read(session_id, head, head)), None)
        cursor = _span_marks(tip)[1] if tip is not None else None
        if cursor is None:
            return None
        early = set(found.get("pre") or [])
        wanted = {seq: record for seq, record in records.items() if info.seq <= seq < stop or seq in early}
        while cursor >= stop:
            record = records.get(cursor) or next((r for _, r in self._read(session_id, cursor, cursor)), None)
            previous = record.get("po") if record is not None else None
            if record is None or not isinstance(previous, int) or not 0 <= previous < cursor:
                raise IntegrityError(session_id, cursor, "an out-of-span LangGraph record is not where the marks say")
            wanted[cursor] = record
            cursor = previous
        fold = _Fold()
        for seq, record in sorted(wanted.items()):  # in log order, as written
            fold.add(seq, record)
        return fold

    # ---- reading ---------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its latest when it names no checkpoint_id), or None.

        The latest costs a bounded number of requests whatever the thread's length.
        """
        thread_id, checkpoint_ns = self._parts(config)
        session_id = self._sid(thread_id, checkpoint_ns)
        state = self._state(session_id)
        with state.lock:
            if not self._refresh(state):
                return None
            checkpoint_id = get_checkpoint_id(config)
            if checkpoint_id:
                fold = self._load_id(state, checkpoint_id)
            else:
                latest = self._load_latest(state)
                if latest is None or state.lid is None:
                    return None
                fold, checkpoint_id = latest, state.lid
            return self._tuple(thread_id, checkpoint_ns, session_id, fold, checkpoint_id, state)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by id) per namespace: with ``limit`` (and no ``before``)
        from each session's newest events only, else from the whole session."""
        if config is not None:
            thread_id, _ = self._parts(config)
            configurable = config.get("configurable") or {}
            wanted_ns = configurable.get("checkpoint_ns")
            sessions = [self._sid(thread_id, str(wanted_ns))] if wanted_ns is not None else self._thread_sessions(thread_id)
            only_id = get_checkpoint_id(config)
        else:
            thread_id = None
            wanted_ns = None
            sessions = [sid for sid in self.store.list_sessions(self.prefix) if decode_session_id(self.prefix, sid)]
            only_id = None
        before_id = get_checkpoint_id(before) if before else None
        remaining = limit
        for session_id in sessions:
            if remaining is not None and remaining <= 0:
                return
            try:
                if remaining is None or before_id or only_id:
                    fold = self._fold(session_id)
                    self._locate(session_id, fold)
                else:
                    fold = self._newest_fold(session_id, remaining, filter)
            except SessionNotFoundError:
                continue
            names = self._names(session_id, fold, thread_id, wanted_ns)
            if names is None:
                continue
            thread, checkpoint_ns = names
            for checkpoint_id in sorted(fold.live, reverse=True):
                if only_id and checkpoint_id != only_id:
                    continue
                if before_id and checkpoint_id >= before_id:
                    continue
                seq, record = fold.live[checkpoint_id]
                if not self._matches(session_id, seq, record, filter):
                    continue
                if remaining is not None:
                    if remaining <= 0:
                        return
                    remaining -= 1
                found = self._tuple(thread, checkpoint_ns, session_id, fold, checkpoint_id)
                if found is not None:
                    yield found

    def _newest_fold(self, session_id: str, wanted: int, filter: dict[str, Any] | None) -> _Fold:
        """A fold of the session's newest events, read backwards in chunks that double, that holds
        its ``wanted`` live checkpoints of greatest id (matching ``filter``) with their writes:
        what ``list(limit=k)`` needs, at a cost that follows k, not the thread's length.

        Enough once the fold of the events from seq ``s`` on has ``wanted`` such checkpoints
        after ``s``, each with its writes in it (they start at its ``f``), whose least id is
        greater than the ``lid`` the event at ``s`` records: the greatest id live after it, so
        the greatest of every checkpoint before ``s`` that is still live (a retraction comes
        after what it hides, and only hides). Otherwise the whole session is folded.
        """
        state = self._state(session_id)
        with state.lock:
            if not self._refresh(state):
                raise SessionNotFoundError(session_id)
            assert state.writer is not None
            head = state.writer.head
        records: dict[int, Record] = {}
        end, size = head, max(16, 8 * wanted)
        while True:
            start = max(1, end - size + 1)
            records.update(self._read(session_id, start, end))
            fold = _Fold()
            for seq in sorted(records):
                fold.add(seq, records[seq])
            boundary = records.get(start)
            if start == 1:
                return fold
            if boundary is not None:
                found = sorted(
                    (
                        checkpoint_id
                        for checkpoint_id, (seq, record) in fold.live.items()
                        if seq > start and (record.get("f") or seq) > start and self._matches(session_id, seq, record, filter)
                    ),
                    reverse=True,
                )
                bound = boundary.get("lid")
                if len(found) >= wanted and (bound is None or found[wanted - 1] > bound):
                    decoded = decode_session_id(self.prefix, session_id)
                    if decoded is not None and decoded[0] is None:  # a hashed thread id: its name event is seq 1's
                        fold.name = next((r.get("thread") for _, r in self._read(session_id, 1, 1) if r["k"] == "name"), None)
                    return fold
            end, size = start - 1, size * 2

    def _locate(self, session_id: str, fold: _Fold) -> None:
        """Keep where the live checkpoints a whole read found are, so that ``get_tuple`` of one
        of them reads its span only (``_span_fold``); events never change where they are."""
        state = self._state(session_id)
        with state.lock:
            for checkpoint_id, (seq, record) in fold.live.items():
                state.remember(checkpoint_id, _Info(seq, record))

    def _matches(self, session_id: str, seq: int, record: Record, filter: dict[str, Any] | None) -> bool:
        if not filter:
            return True
        metadata = self._decode(record["m"], session_id, seq)
        return all(metadata.get(k) == v for k, v in filter.items())

    def _names(self, session_id: str, fold: _Fold, thread_id: str | None, checkpoint_ns: Any) -> tuple[str, str] | None:
        decoded = decode_session_id(self.prefix, session_id)
        if decoded is None:
            return None
        thread = thread_id if thread_id is not None else (decoded[0] if decoded[0] is not None else fold.name)
        ns = str(checkpoint_ns) if checkpoint_ns is not None else decoded[1]
        if ns is None:
            ns = next((record.get("ns") for _, record in fold.live.values() if isinstance(record.get("ns"), str)), None)
        if thread is None or ns is None:
            return None
        return thread, ns

    # ---- writing ------------------------------------------------------------------------

    def _writer(self, state: _State, thread_id: str) -> Session:
        """The session's writer, created (with its name event when the thread id is hashed) if new."""
        if state.writer is None:
            state.writer = self.store.open(state.session_id, create=True)
            if state.writer.head:
                self._load_latest(state)  # another process made it: continue from its head (synced)
            elif _thread_part(self.prefix, thread_id).startswith(_HASHED):
                state.writer.append(_message({"k": "name", "thread": thread_id, "lcp": 0, "lid": None, "lc": [], "lo": 0}))
                state.known_head = state.writer.head
                state.lc, state.lo = [], 0
        return state.writer

    def _info(self, state: _State, checkpoint_id: str) -> _Info | None:
        info = state.infos.get(checkpoint_id)
        if info is None and state.writer is not None and state.writer.head:
            fold = self._fold(state.session_id, 1, state.writer.head)
            self._learn(state, fold, whole=True)
            info = state.infos.get(checkpoint_id)
            if info is None and checkpoint_id in fold.hidden:
                info = _Info(*fold.hidden[checkpoint_id])
        return info

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Append one event: the checkpoint, its metadata and the channels in ``new_versions``.

        Raises ``evstore.WriteConflictError`` when another writer appended to the
        thread since this saver last read or wrote it.
        """
        thread_id, checkpoint_ns = self._parts(config)
        session_id = self._sid(thread_id, checkpoint_ns)
        parent_id = get_checkpoint_id(config)
        # serialize first, before any wait: LangGraph may change channel objects after calling put
        stored: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = stored.pop("channel_values")
        blobs: dict[str, list[str]] = {}
        for channel in new_versions:
            if channel in values:
                blobs[channel] = self._dump(values[channel], f"channel {channel!r}")
        full_metadata = get_checkpoint_metadata(config, metadata)
        dumped_checkpoint = self._dump(stored, "the checkpoint")
        dumped_metadata = self._dump(full_metadata, "the checkpoint metadata")
        state = self._state(session_id)
        with state.lock:
            writer = self._writer(state, thread_id)
            self._sync(state)  # the marks at the writer's head
            seq = writer.head + 1
            parent = self._info(state, parent_id) if parent_id else None
            latest = state.infos.get(state.lid) if state.lid else None
            refs: dict[str, list[Any]] = {}
            for channel, version in checkpoint["channel_versions"].items():
                if channel in new_versions:
                    if channel in blobs:
                        refs[channel] = [seq, version]
                    continue
                ref = None
                for known in (parent, latest):
                    if known is not None and channel in known.refs and known.refs[channel][1] == version:
                        ref = known.refs[channel]
                        break
                if ref is None and (found := state.blobs.get(_version_key(channel, version))) is not None:
                    ref = [found, version]
                if ref is not None:
                    refs[channel] = ref
            anc: dict[str, int] = {}
            if parent is not None:
                anc = dict(parent.anc)
                for channel in parent.refs:
                    anc[channel] = parent.first
            pre = state.pre.pop(checkpoint["id"], [])
            lcp, lid = state.lcp, state.lid
            if lid is None or checkpoint["id"] >= lid:
                lcp, lid = seq, checkpoint["id"]
            record: Record = {
                "k": "cp",
                "id": checkpoint["id"],
                "p": parent_id,
                "ns": checkpoint_ns,
                "c": dumped_checkpoint,
                "m": dumped_metadata,
                "b": blobs,
                "r": refs,
                "a": anc,
                "f": min([seq, *pre]),
                "pre": pre,
                "lcp": lcp,
                "lid": lid,
            }
            run_id = full_metadata.get("run_id")
            if isinstance(run_id, str):
                record["run"] = run_id
            _mark(state, record, seq)
            try:  # keyed by the checkpoint id: a put retried after a lost answer lands once
                writer.append(_message(record), expected_head=seq - 1, idempotency_key=f"lg-checkpoint:{checkpoint['id']}")
            except BaseException:
                state.pre[checkpoint["id"]] = pre
                raise
            if lcp == seq:
                state.tail = {s: state.tail[s] for s in pre if s in state.tail}
            state.tail[seq] = record
            state.known_head, state.lcp, state.lid = writer.head, lcp, lid
            state.lc, state.lo = _span_marks(record)
            state.remember(checkpoint["id"], _Info(seq, record))
            state.keep(seq, record)
            for channel, version in new_versions.items():
                if channel in blobs:
                    state.blobs[_version_key(channel, version)] = seq
            keys = state.wkeys.setdefault(checkpoint["id"], set())
            if not pre:
                keys.clear()
        return _config(thread_id, checkpoint_ns, checkpoint["id"])

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Append the writes not yet stored for (checkpoint, task_id, idx); nothing if none is new."""
        thread_id, checkpoint_ns = self._parts(config)
        session_id = self._sid(thread_id, checkpoint_ns)
        checkpoint_id = get_checkpoint_id(config)
        if not checkpoint_id:
            raise InvalidInputError("put_writes needs configurable.checkpoint_id")
        dumped: list[list[Any]] = [
            [WRITES_IDX_MAP.get(channel, idx), channel, *self._dump(value, f"the write to channel {channel!r}")]
            for idx, (channel, value) in enumerate(writes)
        ]
        state = self._state(session_id)
        with state.lock:
            writer = self._writer(state, thread_id)
            self._sync(state)  # lcp, lid and the marks at the writer's head
            keys = state.wkeys.get(checkpoint_id)
            if keys is None:
                keys = self._stored_keys(state, checkpoint_id)
            items = [item for item in dumped if item[0] < 0 or (task_id, item[0]) not in keys]
            slots: list[int] = [item[0] for item in items]
            if not items:
                return
            record: Record = {
                "k": "w",
                "cp": checkpoint_id,
                "t": task_id,
                "path": task_path,
                "items": items,
                "lcp": state.lcp,
                "lid": state.lid,
            }
            # Out of span: _SPAN checkpoint events came after its checkpoint's, or its checkpoint is
            # an older one this saver does not know the seq of. A write to a checkpoint newer than
            # any stored is early: its checkpoint's event lists it ("pre").
            target = state.infos.get(checkpoint_id)
            newer = state.lid is None or checkpoint_id > state.lid
            late = state.lc is not None and (target.seq not in state.lc if target is not None else not newer)
            _mark(state, record, writer.head + 1, out_of_span=late)
            writer.append(_message(record), expected_head=writer.head)
            state.known_head = writer.head
            state.lc, state.lo = _span_marks(record)
            state.tail[writer.head] = record
            keys.update((task_id, slot) for slot in slots)
            state.wkeys[checkpoint_id] = keys
            if checkpoint_id not in state.infos:
                state.pre.setdefault(checkpoint_id, []).append(writer.head)

    def _stored_keys(self, state: _State, checkpoint_id: str) -> set[tuple[str, int]]:
        """(task_id, idx) already stored for the checkpoint, read up to this writer's head."""
        writer = state.writer
        assert writer is not None
        if checkpoint_id not in state.infos and (state.lid is None or checkpoint_id > state.lid):
            return set()  # a checkpoint newer than any stored: its writes are the ones this saver appends
        if not writer.head:
            return set()
        info = state.infos.get(checkpoint_id)
        fold = self._fold(state.session_id, info.first if info else 1, writer.head)
        keys = set(fold.writes.get(checkpoint_id, {}))
        state.wkeys[checkpoint_id] = keys
        return keys

    # ---- deleting and copying -----------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        """Delete every session of the thread (``Store.delete``; gc reclaims what forks still hold)."""
        for session_id in self._thread_sessions(str(thread_id)):
            state = self._state(session_id)
            with state.lock:
                with contextlib.suppress(SessionNotFoundError):
                    self.store.delete(session_id)
                self._reset(state)
            self._forget(session_id)

    def _retract(self, session_id: str, hide: Iterable[str]) -> None:
        """Append a retraction hiding ``hide`` (live checkpoint ids of the session), at its head."""
        state = self._state(session_id)
        with state.lock:
            self._reset(state)
            if not self._refresh(state):
                return
            writer = state.writer
            assert writer is not None
            fold = self._fold(session_id, 1, writer.head)
            hidden = sorted(set(hide) & set(fold.live))
            if not hidden:
                return
            rest = sorted(set(fold.live) - set(hidden))
            lid = rest[-1] if rest else None
            lcp = fold.live[lid][0] if lid else 0
            self._sync(state)
            retraction: Record = {"k": "x", "hide": hidden, "lcp": lcp, "lid": lid}
            _mark(state, retraction, writer.head + 1, out_of_span=True)
            writer.append(_message(retraction), expected_head=writer.head)
            self._reset(state)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: retract every checkpoint but the latest of each namespace (frees nothing);
        ``delete``: delete the threads, as ``delete_thread``."""
        if strategy not in _STRATEGIES:
            raise InvalidInputError(f"prune strategy must be keep_latest or delete, not {strategy!r:.40}")
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            for session_id in self._thread_sessions(str(thread_id)):
                try:
                    fold = self._fold(session_id)
                except SessionNotFoundError:
                    continue
                if len(fold.live) > 1:
                    self._retract(session_id, sorted(fold.live)[:-1])

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Retract every checkpoint (and its writes) whose metadata run_id is one of ``run_ids``,
        in every thread under the prefix: replays them all (frees nothing)."""
        runs = {str(r) for r in run_ids}
        if not runs:
            return
        for session_id in list(self.store.list_sessions(self.prefix)):
            if decode_session_id(self.prefix, session_id) is None:
                continue
            try:
                fold = self._fold(session_id)
            except SessionNotFoundError:
                continue
            doomed = [cid for cid, (_, record) in fold.live.items() if record.get("run") in runs]
            if doomed:
                self._retract(session_id, doomed)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Fork every session of the source thread into the target thread (O(1) each).

        ``evstore.SessionExistsError`` when the target thread already has checkpoints.
        """
        source, target = str(source_thread_id), str(target_thread_id)
        source_head = self.prefix + _thread_part(self.prefix, source)
        for session_id in self._thread_sessions(source):
            checkpoint_ns: str | None = ""
            if session_id != source_head:
                decoded = decode_session_id(self.prefix, session_id)
                checkpoint_ns = decoded[1] if decoded else None
                if checkpoint_ns is None:  # a hashed namespace: its checkpoints name it
                    fold = self._fold(session_id)
                    checkpoint_ns = next((r["ns"] for _, r in fold.live.values() if isinstance(r.get("ns"), str)), None)
            if checkpoint_ns is None:
                continue
            target_id = self._sid(target, checkpoint_ns)
            try:
                fork = self.store.fork(session_id, target_id)
            except InvalidInputError:
                continue  # a session with no events: nothing to copy
            except SessionExistsError:
                raise SessionExistsError(target_id, f"exists: thread {target[:80]!r} already has checkpoints") from None
            if _thread_part(self.prefix, target).startswith(_HASHED):
                fork.append(_message({"k": "name", "thread": target, **self._latest_marks(session_id, fork.head)}))
            self._forget(target_id)

    def _latest_marks(self, session_id: str, head: int) -> dict[str, Any]:
        last = next(iter(self._read(session_id, head, head)), None)
        if last is None:
            return {"lcp": 0, "lid": None, "lc": [], "lo": 0}
        marks: dict[str, Any] = {"lcp": last[1].get("lcp") or 0, "lid": last[1].get("lid")}
        lc, lo = _span_marks(last[1])
        return marks if lc is None else {**marks, "lc": lc, "lo": lo}

    # ---- delta channels -------------------------------------------------------------

    def get_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]) -> Mapping[str, DeltaChannelHistory]:
        """Per channel, the writes on the parent chain back to the nearest ancestor holding a
        value (its ``seed``), in one replay from where that ancestor's events begin.

        Retracted ancestors still count: pruning never changes a remaining checkpoint's state.
        """
        if not channels:
            return {}
        thread_id, checkpoint_ns = self._parts(config)
        session_id = self._sid(thread_id, checkpoint_ns)
        state = self._state(session_id)
        empty: dict[str, DeltaChannelHistory] = {ch: {"writes": []} for ch in channels}
        with state.lock:
            if not self._refresh(state):
                return empty
            writer = state.writer
            assert writer is not None
            target_id = get_checkpoint_id(config)
            if not target_id:
                if self._load_latest(state) is None or state.lid is None:
                    return empty
                target_id = state.lid
            info = self._info(state, target_id)
            if info is None:
                return empty
            start = min(info.anc.get(ch, 1) for ch in channels)
            fold = self._fold(session_id, start, writer.head)
        every = {**fold.hidden, **fold.live}
        target = every.get(target_id)
        if target is None:
            return empty
        collected: dict[str, list[PendingWrite]] = {ch: [] for ch in channels}
        seeds: dict[str, Any] = {}
        remaining = set(channels)
        cursor = target[1].get("p")
        while cursor and remaining:
            found = every.get(cursor)
            if found is None:
                break
            record = found[1]
            for task, channel, typed in reversed(fold.ordered_writes(cursor, hidden=True)):
                if channel in remaining:
                    collected[channel].append((task, channel, self._decode(typed, session_id, None)))
            refs: dict[str, list[Any]] = record.get("r") or {}
            here = [ch for ch in remaining if ch in refs]
            if here:
                self._fetch(session_id, fold, {refs[ch][0] for ch in here}, state)
                for ch in here:
                    blob_seq = refs[ch][0]
                    seeds[ch] = self._decode(fold.records[blob_seq]["b"][ch], session_id, blob_seq)
                    remaining.discard(ch)
            cursor = record.get("p")
        result: dict[str, DeltaChannelHistory] = {}
        for ch in channels:
            entry: DeltaChannelHistory = {"writes": list(reversed(collected[ch]))}
            if ch in seeds:
                entry["seed"] = seeds[ch]
            result[ch] = entry
        return result

    def get_next_version(self, current: str | None, channel: None) -> str:
        """``<counter>.<random>``: versions of two branches of one thread never collide."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # ---- async: the sync methods in AsyncStore's pool -------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self.aio.run(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await self.aio.run(_as_list, self.list(config, filter=filter, before=before, limit=limit))
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await self.aio.run(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self.aio.run(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await self.aio.run(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self.aio.run(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self.aio.run(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self.aio.run(self.prune, thread_ids, strategy=strategy)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return await self.aio.run(self.get_delta_channel_history, config=config, channels=channels)


def _config(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns, "checkpoint_id": checkpoint_id}}


def _as_list(items: Iterator[CheckpointTuple]) -> list[CheckpointTuple]:
    return list(items)
