"""``EvstoreSaver``: LangGraph's ``BaseCheckpointSaver`` contract over the storage modules.

This module owns what LangGraph sees: the configs it passes (``configurable.thread_id``,
``checkpoint_ns``, ``checkpoint_id``) and the arguments' checks, LangGraph's serializer (values
in and out of the ``[type, base64]`` form records hold), and the types it gets back
(``CheckpointTuple``, ``DeltaChannelHistory``, versions). Where records are and how they are read
and appended is ``_reads``'s and ``_writes``'s; the async methods are ``_async``'s.
"""

from __future__ import annotations

import base64
import functools
import random
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from ... import AsyncStore, IntegrityError, InvalidInputError, SessionNotFoundError, Store
from ._async import AsyncCheckpointSaver
from ._mapping import Fold, Record, decode_session_id
from ._reads import delta_history, fetch, load_id, load_latest, locate, names, newest_fold
from ._state import Sessions, SessionState
from ._writes import Serialized, append_checkpoint, append_writes, copy_thread, delete_session, retract

__all__ = ["EvstoreSaver"]

_PREFIX_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
_STRATEGIES = ("keep_latest", "delete")


class EvstoreSaver(AsyncCheckpointSaver):
    """A LangGraph checkpointer on an evstore ``Store`` (see the package docstring).

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
        self._sessions = Sessions(store, prefix)

    # ---- configs and values ----------------------------------------------------------

    @staticmethod
    def _parts(config: RunnableConfig) -> tuple[str, str]:
        configurable = config.get("configurable") or {}
        thread_id = configurable.get("thread_id")
        if thread_id is None or thread_id == "":
            raise InvalidInputError("the config needs configurable.thread_id")
        return str(thread_id), str(configurable.get("checkpoint_ns") or "")

    def _dump(self, value: Any, what: str) -> list[str]:
        try:
            dumped = self.serde.dumps_typed(value)
            return [dumped[0], base64.b64encode(dumped[1]).decode("ascii")]
        except (TypeError, ValueError, OverflowError) as exc:
            raise InvalidInputError(f"cannot serialize {what[:80]}: {str(exc)[:120]}") from None

    def _decode(self, typed: list[str], session_id: str, seq: int | None) -> Any:
        try:
            data = base64.b64decode(typed[1].encode("ascii"), validate=True)
            return self.serde.loads_typed((typed[0], data))
        except Exception as exc:  # any serializer failure on stored bytes: they are not what was written
            raise IntegrityError(session_id, seq, f"a LangGraph value does not decode ({type(exc).__name__})") from None

    def _matches(self, session_id: str, seq: int, record: Record, filter: dict[str, Any] | None) -> bool:
        if not filter:
            return True
        metadata = self._decode(record["m"], session_id, seq)
        return all(metadata.get(k) == v for k, v in filter.items())

    def _tuple(
        self,
        thread_id: str,
        checkpoint_ns: str,
        session_id: str,
        fold: Fold,
        checkpoint_id: str,
        state: SessionState | None = None,
    ) -> CheckpointTuple | None:
        """The checkpoint as LangGraph reads it, its channel values from the events its refs name
        (read when the fold lacks them, from ``state``'s cache when it has them); None when the
        fold holds no such live checkpoint."""
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

    def _values(self, session_id: str, fold: Fold, record: Record, state: SessionState | None) -> dict[str, Any]:
        """The checkpoint's channel values: each from the event its ref names (read if not folded)."""
        refs: dict[str, list[Any]] = record.get("r") or {}
        fetch(self.store, session_id, fold, {ref[0] for ref in refs.values()}, state)
        values = {}
        for channel, (seq, _) in refs.items():
            blob = (fold.records[seq].get("b") or {}).get(channel)
            if blob is None:
                raise IntegrityError(session_id, seq, f"the value of channel {channel!r:.60} is not in its event")
            values[channel] = self._decode(blob, session_id, seq)
        return values

    # ---- reading ---------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its latest when it names no checkpoint_id), or None.

        The latest costs a bounded number of requests whatever the thread's length.
        """
        thread_id, checkpoint_ns = self._parts(config)
        session_id = self._sessions.session_id(thread_id, checkpoint_ns)
        state = self._sessions.state(session_id)
        with state.lock:
            if not state.refresh():
                return None
            checkpoint_id = get_checkpoint_id(config)
            if checkpoint_id:
                fold = load_id(state, checkpoint_id)
            else:
                latest = load_latest(state)
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
        thread_id, wanted_ns, sessions, only_id = self._listed(config)
        before_id = get_checkpoint_id(before) if before else None
        remaining = limit
        for session_id in sessions:
            if remaining is not None and remaining <= 0:
                return
            try:
                if remaining is None or before_id or only_id:
                    fold = self._sessions.fold(session_id)
                    locate(self._sessions.state(session_id), fold)
                else:
                    matches = functools.partial(self._matches, session_id, filter=filter)
                    fold = newest_fold(self._sessions.state(session_id), self.prefix, remaining, matches)
            except SessionNotFoundError:
                continue
            found = names(self.prefix, session_id, fold, thread_id, wanted_ns)
            if found is None:
                continue
            thread, checkpoint_ns = found
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
                listed = self._tuple(thread, checkpoint_ns, session_id, fold, checkpoint_id)
                if listed is not None:
                    yield listed

    def _listed(self, config: RunnableConfig | None) -> tuple[str | None, Any, Sequence[str], str | None]:
        """What ``list`` reads: (thread id, namespace, session ids, checkpoint id), each None when
        the config does not name it (every thread's sessions under the prefix when no config)."""
        if config is None:
            sessions = [sid for sid in self.store.list_sessions(self.prefix) if decode_session_id(self.prefix, sid)]
            return None, None, sessions, None
        thread_id, _ = self._parts(config)
        configurable = config.get("configurable") or {}
        wanted_ns = configurable.get("checkpoint_ns")
        if wanted_ns is not None:
            sessions = [self._sessions.session_id(thread_id, str(wanted_ns))]
        else:
            sessions = self._sessions.of_thread(thread_id)
        return thread_id, wanted_ns, sessions, get_checkpoint_id(config)

    # ---- writing ------------------------------------------------------------------------

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
        session_id = self._sessions.session_id(thread_id, checkpoint_ns)
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
        run_id = full_metadata.get("run_id")
        serialized = Serialized(dumped_checkpoint, dumped_metadata, blobs, run_id if isinstance(run_id, str) else None)
        state = self._sessions.state(session_id)
        append_checkpoint(state, self.prefix, thread_id, checkpoint_ns, parent_id, checkpoint, new_versions, serialized)
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
        session_id = self._sessions.session_id(thread_id, checkpoint_ns)
        checkpoint_id = get_checkpoint_id(config)
        if not checkpoint_id:
            raise InvalidInputError("put_writes needs configurable.checkpoint_id")
        dumped: list[list[Any]] = [
            [WRITES_IDX_MAP.get(channel, idx), channel, *self._dump(value, f"the write to channel {channel!r}")]
            for idx, (channel, value) in enumerate(writes)
        ]
        state = self._sessions.state(session_id)
        append_writes(state, self.prefix, thread_id, checkpoint_id, (task_id, task_path), dumped)

    # ---- deleting and copying -----------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        """Delete every session of the thread (``Store.delete``; gc reclaims what forks still hold)."""
        for session_id in self._sessions.of_thread(str(thread_id)):
            delete_session(self._sessions.state(session_id))
            self._sessions.forget(session_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: retract every checkpoint but the latest of each namespace (frees nothing);
        ``delete``: delete the threads, as ``delete_thread``."""
        if strategy not in _STRATEGIES:
            raise InvalidInputError(f"prune strategy must be keep_latest or delete, not {strategy!r:.40}")
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            for session_id in self._sessions.of_thread(str(thread_id)):
                try:
                    fold = self._sessions.fold(session_id)
                except SessionNotFoundError:
                    continue
                if len(fold.live) > 1:
                    retract(self._sessions.state(session_id), sorted(fold.live)[:-1])

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
                fold = self._sessions.fold(session_id)
            except SessionNotFoundError:
                continue
            doomed = [cid for cid, (_, record) in fold.live.items() if record.get("run") in runs]
            if doomed:
                retract(self._sessions.state(session_id), doomed)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Fork every session of the source thread into the target thread (O(1) each).

        ``evstore.SessionExistsError`` when the target thread already has checkpoints.
        """
        copy_thread(self._sessions, str(source_thread_id), str(target_thread_id))

    # ---- delta channels -------------------------------------------------------------

    def get_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]) -> Mapping[str, DeltaChannelHistory]:
        """Per channel, the writes on the parent chain back to the nearest ancestor holding a
        value (its ``seed``), in one replay from where that ancestor's events begin.

        Retracted ancestors still count: pruning never changes a remaining checkpoint's state.
        """
        if not channels:
            return {}
        thread_id, checkpoint_ns = self._parts(config)
        state = self._sessions.state(self._sessions.session_id(thread_id, checkpoint_ns))
        history = delta_history(state, get_checkpoint_id(config), channels, self._decode)
        if history is None:
            return {ch: {"writes": []} for ch in channels}
        collected, seeds = history
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


def _config(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns, "checkpoint_id": checkpoint_id}}
