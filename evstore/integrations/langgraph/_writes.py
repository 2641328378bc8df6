"""Appending a thread's records: a checkpoint's event (its changed channels' blobs, refs to the
unchanged ones), a task's writes, retractions, and a thread's sessions forked into another.

Each append is conditional on the head the session's state holds (``WriteConflictError`` when
another process appended since) and gives the record its span marks; the state then takes the
record in, so the next read of the session reads nothing this saver wrote.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from ... import InvalidInputError, Session, SessionExistsError, SessionNotFoundError
from ._mapping import HASHED, SPAN, Info, Record, decode_session_id, message, span_marks, thread_part, version_key
from ._reads import info, load_latest
from ._state import Sessions, SessionState, read_records

__all__ = ["Serialized", "append_checkpoint", "append_writes", "copy_thread", "delete_session", "retract"]


class Serialized(NamedTuple):
    """A put's values as LangGraph's serializer wrote them (``[type, base64]``), made before any wait."""

    checkpoint: list[str]  # without its channel values
    metadata: list[str]
    blobs: dict[str, list[str]]  # the values of the channels in new_versions
    run_id: str | None


def _mark(state: SessionState, record: Record, seq: int, *, out_of_span: bool = False) -> None:
    """Give ``record``, to be appended at ``seq`` after ``state``'s head, its span marks (see
    ``span_marks``; none when the head's are unknown). An out-of-span record links to the one
    before it (``po``), so a reader finds them all from the head, newest first."""
    if state.lc is None or state.lo is None:
        return
    record["lc"] = [*state.lc, seq][-SPAN:] if record["k"] == "cp" else state.lc
    record["lo"] = seq if out_of_span else state.lo
    if out_of_span:
        record["po"] = state.lo


def _writer(state: SessionState, prefix: str, thread_id: str) -> Session:
    """The session's writer, created (with its name event when the thread id is hashed) if new."""
    if state.writer is None:
        state.writer = state.store.open(state.session_id, create=True)
        if state.writer.head:
            load_latest(state)  # another process made it: continue from its head (synced)
        elif thread_part(prefix, thread_id).startswith(HASHED):
            state.writer.append(message({"k": "name", "thread": thread_id, "lcp": 0, "lid": None, "lc": [], "lo": 0}))
            state.known_head = state.writer.head
            state.lc, state.lo = [], 0
    return state.writer


def _refs(
    state: SessionState,
    seq: int,
    known: tuple[Info | None, Info | None],
    channel_versions: Mapping[str, Any],
    new_versions: Mapping[str, Any],
    blobs: dict[str, list[str]],
) -> dict[str, list[Any]]:
    """Per channel with a stored value, [seq of its blob, version]: ``seq`` for the changed ones,
    else where the parent, the latest checkpoint or the cache found that version."""
    refs: dict[str, list[Any]] = {}
    for channel, version in channel_versions.items():
        if channel in new_versions:
            if channel in blobs:
                refs[channel] = [seq, version]
            continue
        ref = None
        for checkpoint in known:
            if checkpoint is not None and channel in checkpoint.refs and checkpoint.refs[channel][1] == version:
                ref = checkpoint.refs[channel]
                break
        if ref is None and (found := state.blobs.get(version_key(channel, version))) is not None:
            ref = [found, version]
        if ref is not None:
            refs[channel] = ref
    return refs


def append_checkpoint(
    state: SessionState,
    prefix: str,
    thread_id: str,
    checkpoint_ns: str,
    parent_id: str | None,
    checkpoint: Mapping[str, Any],
    new_versions: Mapping[str, Any],
    values: Serialized,
) -> None:
    """Append one ``cp`` event at the head: the checkpoint, its metadata, the blobs of the channels
    in ``new_versions`` and refs to the others; keyed by the checkpoint id, so a put retried
    after a lost answer lands once."""
    checkpoint_id: str = checkpoint["id"]
    with state.lock:
        writer = _writer(state, prefix, thread_id)
        state.sync()  # the marks at the writer's head
        seq = writer.head + 1
        parent = info(state, parent_id) if parent_id else None
        latest = state.infos.get(state.lid) if state.lid else None
        refs = _refs(state, seq, (parent, latest), checkpoint["channel_versions"], new_versions, values.blobs)
        anc: dict[str, int] = {}
        if parent is not None:
            anc = dict(parent.anc)
            for channel in parent.refs:
                anc[channel] = parent.first
        pre = state.pre.pop(checkpoint_id, [])
        lcp, lid = state.lcp, state.lid
        if lid is None or checkpoint_id >= lid:
            lcp, lid = seq, checkpoint_id
        record: Record = {
            "k": "cp",
            "id": checkpoint_id,
            "p": parent_id,
            "ns": checkpoint_ns,
            "c": values.checkpoint,
            "m": values.metadata,
            "b": values.blobs,
            "r": refs,
            "a": anc,
            "f": min([seq, *pre]),
            "pre": pre,
            "lcp": lcp,
            "lid": lid,
        }
        if values.run_id is not None:
            record["run"] = values.run_id
        _mark(state, record, seq)
        try:
            writer.append(message(record), expected_head=seq - 1, idempotency_key=f"lg-checkpoint:{checkpoint_id}")
        except BaseException:
            state.pre[checkpoint_id] = pre
            raise
        if lcp == seq:
            state.tail = {s: state.tail[s] for s in pre if s in state.tail}
        state.tail[seq] = record
        state.known_head, state.lcp, state.lid = writer.head, lcp, lid
        state.lc, state.lo = span_marks(record)
        state.remember(checkpoint_id, Info(seq, record))
        state.keep(seq, record)
        for channel, version in new_versions.items():
            if channel in values.blobs:
                state.blobs[version_key(channel, version)] = seq
        keys = state.wkeys.setdefault(checkpoint_id, set())
        if not pre:
            keys.clear()


def append_writes(
    state: SessionState, prefix: str, thread_id: str, checkpoint_id: str, task: tuple[str, str], dumped: list[list[Any]]
) -> None:
    """Append one ``w`` event with the writes (``dumped``: [idx, channel, type, base64]) not yet
    stored for (checkpoint, task_id, idx); nothing if none is new. ``task``: (task_id, task_path)."""
    task_id, task_path = task
    with state.lock:
        writer = _writer(state, prefix, thread_id)
        state.sync()  # lcp, lid and the marks at the writer's head
        keys = state.wkeys.get(checkpoint_id)
        if keys is None:
            keys = _stored_keys(state, checkpoint_id)
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
        # Out of span: SPAN checkpoint events came after its checkpoint's, or its checkpoint is
        # an older one this saver does not know the seq of. A write to a checkpoint newer than
        # any stored is early: its checkpoint's event lists it ("pre").
        target = state.infos.get(checkpoint_id)
        newer = state.lid is None or checkpoint_id > state.lid
        late = state.lc is not None and (target.seq not in state.lc if target is not None else not newer)
        _mark(state, record, writer.head + 1, out_of_span=late)
        writer.append(message(record), expected_head=writer.head)
        state.known_head = writer.head
        state.lc, state.lo = span_marks(record)
        state.tail[writer.head] = record
        keys.update((task_id, slot) for slot in slots)
        state.wkeys[checkpoint_id] = keys
        if checkpoint_id not in state.infos:
            state.pre.setdefault(checkpoint_id, []).append(writer.head)


def _stored_keys(state: SessionState, checkpoint_id: str) -> set[tuple[str, int]]:
    """(task_id, idx) already stored for the checkpoint, read up to this writer's head."""
    writer = state.writer
    assert writer is not None
    if checkpoint_id not in state.infos and (state.lid is None or checkpoint_id > state.lid):
        return set()  # a checkpoint newer than any stored: its writes are the ones this saver appends
    if not writer.head:
        return set()
    known = state.infos.get(checkpoint_id)
    fold = state.fold(known.first if known else 1, writer.head)
    keys = set(fold.writes.get(checkpoint_id, {}))
    state.wkeys[checkpoint_id] = keys
    return keys


def delete_session(state: SessionState) -> None:
    """``Store.delete`` of the session (nothing when it is gone), its state dropped."""
    with state.lock:
        with contextlib.suppress(SessionNotFoundError):
            state.store.delete(state.session_id)
        state.reset()


def retract(state: SessionState, hide: Iterable[str]) -> None:
    """Append a retraction hiding ``hide`` (live checkpoint ids of the session), at its head."""
    with state.lock:
        state.reset()
        if not state.refresh():
            return
        writer = state.writer
        assert writer is not None
        fold = state.fold(1, writer.head)
        hidden = sorted(set(hide) & set(fold.live))
        if not hidden:
            return
        rest = sorted(set(fold.live) - set(hidden))
        lid = rest[-1] if rest else None
        lcp = fold.live[lid][0] if lid else 0
        state.sync()
        retraction: Record = {"k": "x", "hide": hidden, "lcp": lcp, "lid": lid}
        _mark(state, retraction, writer.head + 1, out_of_span=True)
        writer.append(message(retraction), expected_head=writer.head)
        state.reset()


def copy_thread(sessions: Sessions, source: str, target: str) -> None:
    """Fork every session of the source thread into the target thread (``Store.fork``: O(1) each);
    a hashed target thread id gets its name event. ``SessionExistsError`` when the target thread
    already has checkpoints."""
    store, prefix = sessions.store, sessions.prefix
    source_head = sessions.thread_head(source)
    for session_id in sessions.of_thread(source):
        checkpoint_ns: str | None = ""
        if session_id != source_head:
            decoded = decode_session_id(prefix, session_id)
            checkpoint_ns = decoded[1] if decoded else None
            if checkpoint_ns is None:  # a hashed namespace: its checkpoints name it
                fold = sessions.fold(session_id)
                checkpoint_ns = next((r["ns"] for _, r in fold.live.values() if isinstance(r.get("ns"), str)), None)
        if checkpoint_ns is None:
            continue
        target_id = sessions.session_id(target, checkpoint_ns)
        try:
            fork = store.fork(session_id, target_id)
        except InvalidInputError:
            continue  # a session with no events: nothing to copy
        except SessionExistsError:
            raise SessionExistsError(target_id, f"exists: thread {target[:80]!r} already has checkpoints") from None
        if thread_part(prefix, target).startswith(HASHED):
            fork.append(message({"k": "name", "thread": target, **_latest_marks(sessions, session_id, fork.head)}))
        sessions.forget(target_id)


def _latest_marks(sessions: Sessions, session_id: str, head: int) -> dict[str, Any]:
    last = next(iter(read_records(sessions.store, session_id, head, head)), None)
    if last is None:
        return {"lcp": 0, "lid": None, "lc": [], "lo": 0}
    marks: dict[str, Any] = {"lcp": last[1].get("lcp") or 0, "lid": last[1].get("lid")}
    lc, lo = span_marks(last[1])
    return marks if lc is None else {**marks, "lc": lc, "lo": lo}
