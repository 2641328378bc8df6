"""Reading the events a call needs, and no more: the latest checkpoint from its event to the
head, an older one by its span, a thread's newest checkpoints backwards from the head, the
events channel values live at, and a delta channel's writes back to its seed.

Every function that takes a ``SessionState`` is called under its lock; the records read are
kept in its caches (events never change where they are).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ... import IntegrityError, SessionNotFoundError, Store
from ._mapping import Fold, Info, Record, decode_session_id, span_marks
from ._state import SessionState, read_records

__all__ = ["delta_history", "fetch", "info", "load_id", "load_latest", "locate", "names", "newest_fold"]

#: How a caller decodes a stored value (``[type, base64]``) of the session at a seq (None: not known).
Decode = Callable[[list[str], str, int | None], Any]


def fetch(store: Store, session_id: str, fold: Fold, seqs: Iterable[int], state: SessionState | None = None) -> None:
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
        for seq, record in read_records(store, session_id, run[0], run[-1]):
            fold.records[seq] = record
            if state is not None:
                state.keep(seq, record)
        for seq in run:
            if seq not in fold.records:
                raise IntegrityError(session_id, seq, "an event a checkpoint refers to is not a LangGraph record")


def load_latest(state: SessionState) -> Fold | None:
    """The events from the latest live checkpoint to the head (plus its early writes)."""
    writer = state.writer
    assert writer is not None
    head = writer.head
    if head == 0:
        return None
    state.sync()
    if not state.lcp or state.lid is None:
        return None
    span = range(state.lcp, head + 1)
    if all(seq in state.tail for seq in span):  # this saver wrote or read all of them
        records = {seq: state.tail[seq] for seq in span}
    else:
        records = dict(state.read(state.lcp, head))
    latest = records.get(state.lcp)
    if latest is None or latest["k"] != "cp" or latest["id"] != state.lid:
        raise IntegrityError(state.session_id, state.lcp, "the latest checkpoint is not where the head says")
    early = sorted(s for s in latest.get("pre") or [] if s < state.lcp)
    gathered = Fold()
    gathered.records = {s: state.tail[s] for s in early if s in state.tail}
    fetch(state.store, state.session_id, gathered, early)
    fold = Fold()
    for seq in [*early, *sorted(records)]:  # in log order: first-wins and last-wins as written
        fold.add(seq, gathered.records[seq] if seq < state.lcp else records[seq])
    state.tail = dict(fold.records)
    fold.lcp, fold.lid, fold.head = state.lcp, state.lid, head
    state.learn(fold, whole=False)
    state.wkeys[state.lid] = set(fold.writes.get(state.lid, {}))
    return fold


def load_id(state: SessionState, checkpoint_id: str) -> Fold:
    """Events enough to build ``checkpoint_id`` with its writes: its span (``_span_fold``) when
    this saver knows its seq, else from its first event to the head."""
    writer = state.writer
    assert writer is not None
    known = state.infos.get(checkpoint_id)
    if known is not None and (spanned := _span_fold(state, checkpoint_id, known)) is not None:
        return spanned
    start = known.first if known is not None else 1
    fold = state.fold(start, writer.head)
    if known is not None and checkpoint_id not in fold.live and checkpoint_id not in fold.hidden:
        fold = state.fold(1, writer.head)  # the cache was wrong: read it all
    state.learn(fold, whole=start == 1)
    return fold


def _span_fold(state: SessionState, checkpoint_id: str, known: Info) -> Fold | None:
    """The events a checkpoint needs, read without reading to the head: its early writes
    (``pre``), its event and the events after it up to the ``SPAN``-th checkpoint event after it
    (its span: ``_span``), and the out-of-span records after that (late writes, retractions),
    found from the head's ``lo`` through their ``po`` links, newest first. None when a record on
    the way has no marks (an older saver's: read as before) or the event at the seq this saver
    knows is not that checkpoint's."""
    writer = state.writer
    assert writer is not None
    head, session_id = writer.head, state.session_id
    spanned = _span(state, known)
    if spanned is None:
        return None
    records, stop = spanned
    found = records.get(known.seq)
    if found is None or found["k"] != "cp" or found["id"] != checkpoint_id:
        return None
    tip = state.tail.get(head) if state.known_head == head else None
    if tip is None:
        tip = records.get(head) or next((r for _, r in state.read(head, head)), None)
    cursor = span_marks(tip)[1] if tip is not None else None
    if cursor is None:
        return None
    early = set(found.get("pre") or [])
    wanted = {seq: record for seq, record in records.items() if known.seq <= seq < stop or seq in early}
    while cursor >= stop:
        record = records.get(cursor) or next((r for _, r in state.read(cursor, cursor)), None)
        previous = record.get("po") if record is not None else None
        if record is None or not isinstance(previous, int) or not 0 <= previous < cursor:
            raise IntegrityError(session_id, cursor, "an out-of-span LangGraph record is not where the marks say")
        wanted[cursor] = record
        cursor = previous
    fold = Fold()
    for seq, record in sorted(wanted.items()):  # in log order, as written
        fold.add(seq, record)
    return fold


def _span(state: SessionState, known: Info) -> tuple[dict[int, Record], int] | None:
    """The records from the checkpoint's first event (``f``) through its span, read forwards in
    chunks that double, and where the span stops (the seq after it); None when a record after
    the checkpoint's event is no LangGraph record or has no marks."""
    writer = state.writer
    assert writer is not None
    head = writer.head
    records: dict[int, Record] = {}
    start, size, stop = known.first, 8, 0
    while not stop:
        end = min(head, start + size - 1)
        records.update(state.read(start, end))
        for seq in range(start, end + 1):
            if seq not in records:
                if seq < known.seq:
                    continue
                return None  # not a LangGraph record: it carries no marks
            if seq < known.seq:
                continue  # its early writes ("pre") and what came between them
            lc, _ = span_marks(records[seq])
            if lc is None:
                return None
            if known.seq not in lc:  # the SPAN-th checkpoint event after it: the span ends before it
                stop = seq
                break
        if not stop and end >= head:
            stop = head + 1
        start, size = end + 1, size * 2
    return records, stop


def newest_fold(state: SessionState, prefix: str, wanted: int, matches: Callable[[int, Record], bool]) -> Fold:
    """A fold of the session's newest events, read backwards in chunks that double, that holds
    its ``wanted`` live checkpoints of greatest id (that ``matches``) with their writes: what
    ``list(limit=k)`` needs, at a cost that follows k, not the thread's length.

    Enough once the fold of the events from seq ``s`` on has ``wanted`` such checkpoints
    after ``s``, each with its writes in it (they start at its ``f``), whose least id is
    greater than the ``lid`` the event at ``s`` records: the greatest id live after it, so
    the greatest of every checkpoint before ``s`` that is still live (a retraction comes
    after what it hides, and only hides). Otherwise the whole session is folded.
    """
    session_id = state.session_id
    with state.lock:
        if not state.refresh():
            raise SessionNotFoundError(session_id)
        assert state.writer is not None
        head = state.writer.head
    records: dict[int, Record] = {}
    end, size = head, max(16, 8 * wanted)
    while True:
        start = max(1, end - size + 1)
        records.update(state.read(start, end))
        fold = Fold()
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
                    if seq > start and (record.get("f") or seq) > start and matches(seq, record)
                ),
                reverse=True,
            )
            bound = boundary.get("lid")
            if len(found) >= wanted and (bound is None or found[wanted - 1] > bound):
                decoded = decode_session_id(prefix, session_id)
                if decoded is not None and decoded[0] is None:  # a hashed thread id: its name event is seq 1's
                    fold.name = next((r.get("thread") for _, r in state.read(1, 1) if r["k"] == "name"), None)
                return fold
        end, size = start - 1, size * 2


def locate(state: SessionState, fold: Fold) -> None:
    """Keep where the live checkpoints a whole read found are, so that ``load_id`` of one of
    them reads its span only (``_span_fold``); events never change where they are."""
    with state.lock:
        for checkpoint_id, (seq, record) in fold.live.items():
            state.remember(checkpoint_id, Info(seq, record))


def info(state: SessionState, checkpoint_id: str) -> Info | None:
    """Where a checkpoint (live or retracted) is and what it refers to; the whole session is read
    when this saver does not know."""
    found = state.infos.get(checkpoint_id)
    if found is None and state.writer is not None and state.writer.head:
        fold = state.fold(1, state.writer.head)
        state.learn(fold, whole=True)
        found = state.infos.get(checkpoint_id)
        if found is None and checkpoint_id in fold.hidden:
            found = Info(*fold.hidden[checkpoint_id])
    return found


def names(prefix: str, session_id: str, fold: Fold, thread_id: str | None, checkpoint_ns: Any) -> tuple[str, str] | None:
    """(thread id, namespace) of a session's checkpoints: the ones asked for, else from its id,
    else (a hashed part) from its events; None when they are not known."""
    decoded = decode_session_id(prefix, session_id)
    if decoded is None:
        return None
    thread = thread_id if thread_id is not None else (decoded[0] if decoded[0] is not None else fold.name)
    ns = str(checkpoint_ns) if checkpoint_ns is not None else decoded[1]
    if ns is None:
        ns = next((record.get("ns") for _, record in fold.live.values() if isinstance(record.get("ns"), str)), None)
    if thread is None or ns is None:
        return None
    return thread, ns


#: Per channel, its writes on the parent chain (newest first) and its seed value, when one was found.
History = tuple[dict[str, list[tuple[str, str, Any]]], dict[str, Any]]


def delta_history(state: SessionState, target_id: str | None, channels: Sequence[str], decode: Decode) -> History | None:
    """Per channel, the writes on the parent chain of ``target_id`` (the latest checkpoint when
    None) back to the nearest ancestor holding a value (its seed), in one replay from where that
    ancestor's events begin; None when there is no such checkpoint.

    Retracted ancestors still count: pruning never changes a remaining checkpoint's state.
    """
    with state.lock:
        if not state.refresh():
            return None
        writer = state.writer
        assert writer is not None
        if not target_id:
            if load_latest(state) is None or state.lid is None:
                return None
            target_id = state.lid
        target = info(state, target_id)
        if target is None:
            return None
        start = min(target.anc.get(ch, 1) for ch in channels)
        fold = state.fold(start, writer.head)
    return _walk_back(state, fold, target_id, channels, decode)


def _walk_back(state: SessionState, fold: Fold, target_id: str, channels: Sequence[str], decode: Decode) -> History | None:
    session_id = state.session_id
    every = {**fold.hidden, **fold.live}
    target = every.get(target_id)
    if target is None:
        return None
    collected: dict[str, list[tuple[str, str, Any]]] = {ch: [] for ch in channels}
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
                collected[channel].append((task, channel, decode(typed, session_id, None)))
        refs: dict[str, list[Any]] = record.get("r") or {}
        here = [ch for ch in remaining if ch in refs]
        if here:
            fetch(state.store, session_id, fold, {refs[ch][0] for ch in here}, state)
            for ch in here:
                blob_seq = refs[ch][0]
                seeds[ch] = decode(fold.records[blob_seq]["b"][ch], session_id, blob_seq)
                remaining.discard(ch)
        cursor = record.get("p")
    return collected, seeds
