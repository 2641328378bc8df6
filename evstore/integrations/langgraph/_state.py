"""What a saver keeps of each session it used, and how that stays exact at the session's head.

``Sessions`` is a saver's storage side: its store and prefix, and a ``SessionState`` per session
(the 1,024 most recently used). A ``SessionState`` holds the session's writer, the latest
checkpoint's seq and id and the span marks at ``known_head``, and caches (where checkpoints and
channel blobs are, small channel values, the records from the latest checkpoint on). Its lock
serializes every call on the session; ``refresh`` brings the writer to the head (one LIST when
nothing came), taking in what another process appended.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from ... import Event, IntegrityError, Session, SessionNotFoundError, Store
from ._mapping import Fold, Info, Record, record_of, session_id_for, span_marks, thread_part, version_key, well_formed

__all__ = ["SessionState", "Sessions", "fold_records", "read_records"]

#: Checkpoint summaries a saver keeps per session (id -> seq, refs); older ones are re-read when needed.
_CACHE_LIMIT = 4096
#: Sessions a saver keeps state for (writer, caches), least recently used dropped first.
_STATES_LIMIT = 1024
#: Base64 characters of channel values a saver keeps per session, so that a value that has not
#: changed for many steps costs no request to read again (events are immutable).
_RECORDS_BUDGET = 256 * 1024


def read_records(store: Store, session_id: str, start: int, end: int | None) -> Iterator[tuple[int, Record]]:
    """(seq, record) of the session's LangGraph events from ``start`` to ``end`` (a replay);
    ``IntegrityError`` on a malformed one."""
    for event in store.replay(session_id, start=start, end=end):
        record = record_of(event.messages)
        if record is not None:
            if not well_formed(record):
                raise IntegrityError(session_id, event.seq, "a LangGraph record is malformed")
            yield event.seq, record


def fold_records(store: Store, session_id: str, start: int = 1, end: int | None = None) -> Fold:
    fold = Fold()
    for seq, record in read_records(store, session_id, start, end):
        fold.add(seq, record)
    return fold


class SessionState:
    """A saver's view of one session: its writer, the latest checkpoint, what it has seen."""

    def __init__(self, store: Store, session_id: str) -> None:
        self.store = store
        self.session_id = session_id
        self.lock = threading.RLock()
        self.writer: Session | None = None
        self.known_head = 0  # the head up to which lcp/lid and the caches are exact
        self.lcp = 0
        self.lid: str | None = None
        #: The span marks at known_head (``span_marks``): the last checkpoint event's seq and the newest
        #: out-of-span record's; None when the head event predates them (written by an older saver).
        self.lc: list[int] | None = []
        self.lo: int | None = 0
        self.infos: dict[str, Info] = {}
        self.blobs: dict[tuple[str, str], int] = {}  # (channel, repr(version)) -> seq of its blob
        self.wkeys: dict[str, set[tuple[str, int]]] = {}  # checkpoint id -> (task_id, idx) stored
        self.pre: dict[str, list[int]] = {}  # checkpoint id not yet put -> seqs of its writes
        self.records: dict[int, Record] = {}  # seq -> checkpoint event with small channel values
        self.tail: dict[int, Record] = {}  # the records from the latest checkpoint to known_head (and its early writes)
        self.records_chars = 0

    def read(self, start: int, end: int | None) -> Iterator[tuple[int, Record]]:
        return read_records(self.store, self.session_id, start, end)

    def fold(self, start: int = 1, end: int | None = None) -> Fold:
        return fold_records(self.store, self.session_id, start, end)

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

    def remember(self, checkpoint_id: str, info: Info) -> None:
        if len(self.infos) >= _CACHE_LIMIT:
            for stale in list(self.infos)[: _CACHE_LIMIT // 2]:
                del self.infos[stale]
            self.wkeys = {k: v for k, v in self.wkeys.items() if k in self.infos or k == self.lid}
        if len(self.blobs) >= _CACHE_LIMIT * 4:
            self.blobs.clear()
        self.infos[checkpoint_id] = info

    def refresh(self) -> bool:
        """Bring the writer to the session's head (what a later put must extend); False if none.

        A session deleted (and perhaps created again) since is opened afresh, its caches dropped.
        """
        if self.writer is not None:
            try:
                new = self.writer.catch_up()  # one LIST when nothing came: a turn's cost at any length
            except (SessionNotFoundError, IntegrityError):
                self.reset()  # deleted (perhaps created again), or a planted object: opened afresh
            else:
                self.adopt(new)
                return True
        try:
            self.writer = self.store.open(self.session_id)
        except SessionNotFoundError:
            self.reset()
            return False
        self.known_head = 0  # nothing of this incarnation is known yet
        self.sync()
        return True

    def adopt(self, new: list[Event]) -> None:
        """Take in the events another process appended (``Session.catch_up``): the latest
        checkpoint's seq and id from the newest, and the records into ``tail``, so that
        ``load_latest`` reads none of them again. Anything but LangGraph records after what this
        saver knew falls back to ``sync`` (the head event read)."""
        if not new:
            self.sync()
            return
        records: dict[int, Record] = {}
        for event in new:
            record = record_of(event.messages)
            if record is not None and not well_formed(record):
                raise IntegrityError(self.session_id, event.seq, "a LangGraph record is malformed")
            if record is None or new[0].seq != self.known_head + 1:
                self.sync()
                return
            records[event.seq] = record
        last = records[new[-1].seq]
        self.known_head = new[-1].seq
        self.lcp, self.lid = last.get("lcp") or 0, last.get("lid")
        self.lc, self.lo = span_marks(last)
        merged = {**self.tail, **records}
        latest = merged.get(self.lcp)
        early = set(latest.get("pre") or []) if latest is not None else set()
        self.tail = {seq: record for seq, record in merged.items() if seq >= self.lcp or seq in early}

    def sync(self) -> None:
        """Make the latest checkpoint's seq and id exact at the writer's head: every event names
        them, so when the head moved (or is new to this saver) its event is read."""
        writer = self.writer
        assert writer is not None
        head = writer.head
        if head == self.known_head:
            return
        last = next(iter(self.read(head, head)), None) if head else None
        self.known_head = head
        self.lcp, self.lid = (last[1].get("lcp") or 0, last[1].get("lid")) if last else (0, None)
        self.lc, self.lo = span_marks(last[1]) if last else (None, None) if head else ([], 0)
        self.tail = {last[0]: last[1]} if last and last[0] == head else {}

    def reset(self) -> None:
        self.writer = None
        self.known_head = self.lcp = 0
        self.lid = None
        self.lc, self.lo = [], 0  # right for an empty session; sync reads the head event of any other
        self.infos.clear()
        self.blobs.clear()
        self.wkeys.clear()
        self.pre.clear()
        self.records.clear()
        self.records_chars = 0
        self.tail.clear()

    def learn(self, fold: Fold, *, whole: bool) -> None:
        """Adopt what a fold read: the latest checkpoint and summaries of the checkpoints seen."""
        for checkpoint_id, (seq, record) in fold.live.items():
            self.remember(checkpoint_id, Info(seq, record))
            for channel, (ref_seq, version) in (record.get("r") or {}).items():
                self.blobs[version_key(channel, version)] = ref_seq
        if whole:
            for checkpoint_id in fold.live:
                self.wkeys[checkpoint_id] = set(fold.writes.get(checkpoint_id, {}))
        if fold.head:
            self.known_head = fold.head
            self.lcp, self.lid = fold.lcp, fold.lid
            head = fold.records.get(fold.head)
            self.lc, self.lo = span_marks(head) if head is not None else (None, None)


class Sessions:
    """A saver's sessions: its store and prefix, and the state of each session it used (the
    ``_STATES_LIMIT`` most recently used)."""

    def __init__(self, store: Store, prefix: str) -> None:
        self.store = store
        self.prefix = prefix
        self._states: dict[str, SessionState] = {}
        self._lock = threading.Lock()

    def state(self, session_id: str) -> SessionState:
        with self._lock:
            state = self._states.pop(session_id, None)
            if state is None:
                state = SessionState(self.store, session_id)
                if len(self._states) >= _STATES_LIMIT:
                    del self._states[next(iter(self._states))]
            self._states[session_id] = state  # most recently used last
            return state

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._states.pop(session_id, None)

    def session_id(self, thread_id: str, checkpoint_ns: str) -> str:
        return session_id_for(self.prefix, thread_id, checkpoint_ns)

    def thread_head(self, thread_id: str) -> str:
        """The id of the thread's root-namespace session: every other one's starts with it and ``.``."""
        return self.prefix + thread_part(self.prefix, thread_id)

    def of_thread(self, thread_id: str) -> list[str]:
        """Session ids of every namespace of the thread: one LIST per 1,000."""
        head = self.thread_head(thread_id)
        return [sid for sid in self.store.list_sessions(head) if sid == head or sid.startswith(head + ".")]

    def fold(self, session_id: str) -> Fold:
        """The whole session folded."""
        return fold_records(self.store, session_id)
