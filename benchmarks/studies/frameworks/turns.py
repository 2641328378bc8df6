"""A framework's session grown in both stores and measured at every length: the recorder that counts compaction
apart, a measured turn, and a fresh process's first turn."""

from __future__ import annotations

import functools
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._scale_backend import KINDS, Counts, FastMemory, Recorder
from benchmarks.studies.frameworks.base import Config, Harness
from evstore import MemoryStore, ObjectStore, Store

# ---- the recorder ----------------------------------------------------------


def is_segment(key: str) -> bool:
    """A compaction segment's key (``segments/`` or ``young/`` in its session's folder)."""
    return "/segments/" in key or "/young/" in key


class SegmentRecorder(Recorder):
    """``Recorder``, also counting apart the amortized compaction requests: PUTs of segments and
    DELETEs that retire segments. ``compaction`` is since the last ``reset``, ``compaction_total``
    since it was made. Every request is still in ``counts()``: subtract ``compaction`` there."""

    def __init__(self, inner: ObjectStore, delay: float = 0.0) -> None:
        super().__init__(inner, delay)
        self.compaction: Counter[str] = Counter()
        self.compaction_total: Counter[str] = Counter()
        self._compaction_lock = threading.Lock()

    def reset(self) -> None:
        super().reset()
        with self._compaction_lock:
            self.compaction = Counter()

    def _note(self, kind: str, times: int = 1) -> None:
        with self._compaction_lock:
            self.compaction[kind] += times
            self.compaction_total[kind] += times

    def create(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None
    ) -> str:
        etag = super().create(key, data, metadata=metadata, tags=tags)
        if is_segment(key):
            self._note("PUT")
        return etag

    def delete_many(self, keys: Iterable[str]) -> int:
        batch = list(keys)
        requests = super().delete_many(batch)
        if batch and all(is_segment(key) for key in batch):
            self._note("DELETE", requests)
        return requests


@dataclass
class Turn:
    """One measured turn: its requests without compaction, the compaction requests, its rounds and time."""

    kinds: dict[str, int]
    compaction: dict[str, int]
    round_trips: int
    seconds: float

    @property
    def requests(self) -> int:
        return sum(self.kinds.values())


def measure(recorder: SegmentRecorder, work: Callable[[], object]) -> Turn:
    """``work``'s requests through ``recorder`` (at the delay it is set to), its rounds and wall time;
    the compaction requests are taken out of ``kinds`` (kept in ``compaction``), not out of the rounds."""
    recorder.reset()
    started = time.perf_counter()
    work()
    seconds = time.perf_counter() - started
    counts: Counts = recorder.counts()
    compaction = dict(recorder.compaction)
    kinds = {kind: counts.kinds[kind] - compaction.get(kind, 0) for kind in KINDS}
    return Turn(kinds, compaction, counts.chain, seconds)


# ---- one framework -------------------------------------------------------------


@dataclass
class Length:
    """The figures at one session length: the long-lived object's turns and a fresh process's first turn."""

    events: int  # evstore events in the session before the measured turns
    turns: list[Turn] = field(default_factory=list)
    native_seconds: list[float] = field(default_factory=list)
    fresh: Turn | None = None
    native_fresh_seconds: float = 0.0
    replay: dict[str, int] = field(default_factory=dict)  # a whole replay's requests by kind (no delay), before the fresh turn


def head(memory: MemoryStore, session_id: str) -> int:
    """The session's evstore events, read over the bare bucket (no request is recorded)."""
    with Store(memory) as store:
        return store.open(session_id).head


def whole_replay(memory: MemoryStore, session_id: str) -> dict[str, int]:
    """The requests of ``store.replay`` of the whole session from a new ``Store`` (by kind): what a
    read of all of the history costs, the floor of a framework that loads it all."""
    recorder = SegmentRecorder(memory)
    with Store(recorder) as store:
        for _ in store.replay(session_id):
            pass
    counts = recorder.counts()
    return {kind: counts.kinds[kind] for kind in KINDS}


def run_framework(
    cfg: Config, harness: Harness, directory: Path, *, restart: bool = False
) -> tuple[list[Length], dict[str, Any]]:
    """Grow one session in both stores and measure at every length (see ``frameworks.py``).

    The fresh process's turn runs over a copy of the bucket (and of the native store's files), so
    the long-lived objects go on over a session that one process wrote. With ``restart``, it runs
    over the bucket itself and the fresh objects go on as the long-lived ones (a process restarted
    at each length, the first time at the first length)."""
    memory = FastMemory()  # evstore's MemoryStore, whose bucket can be copied
    recorder = SegmentRecorder(memory)
    handle = harness.open(Store(recorder))
    native = harness.open_native(directory)
    sid = harness.evstore_id()
    i = 0
    grown = 0.0
    lengths: list[Length] = []
    for n in cfg.lengths:
        recorder.delay = 0.0
        started = time.perf_counter()
        if i == 0:  # the first turn is a whole one in every harness: it creates what the session needs
            harness.turn(handle, i)
            harness.native_turn(native, i)
            i += 1
        while head(memory, sid) < n:
            harness.grow(handle, native, i)
            i += 1
        harness.grown(handle, native)
        grown += time.perf_counter() - started
        found = Length(head(memory, sid))
        recorder.delay = cfg.rtt
        for _ in range(cfg.turns):
            found.turns.append(measure(recorder, functools.partial(harness.turn, handle, i)))
            started = time.perf_counter()
            harness.native_turn(native, i)
            found.native_seconds.append(time.perf_counter() - started)
            i += 1
        # a fresh process: new objects over a new Store, measured from their construction on
        copied = memory if restart else memory.copy()
        found.replay = whole_replay(copied, sid)  # the session the fresh turn finds, read whole
        bucket = recorder if restart else SegmentRecorder(copied, cfg.rtt)
        files = directory if restart else Path(shutil.copytree(directory, directory.with_name(directory.name + "-copy")))
        if restart:
            harness.close(handle)
            harness.close(native)
        opened: list[Any] = []

        def first_turn(at: int = i, bucket: SegmentRecorder = bucket, opened: list[Any] = opened) -> None:
            opened.append(harness.open(Store(bucket)))
            harness.turn(opened[0], at)

        found.fresh = measure(bucket, first_turn)
        started = time.perf_counter()
        fresh_native = harness.open_native(files)
        harness.native_turn(fresh_native, i)
        found.native_fresh_seconds = time.perf_counter() - started
        if restart:
            handle, native = opened[0], fresh_native
            i += 1
        else:
            harness.close(opened[0])
            harness.close(fresh_native)
            shutil.rmtree(files, ignore_errors=True)
        lengths.append(found)
    harness.close(handle)
    harness.close(native)
    events = head(memory, sid)
    summary = {
        "turns": i,
        "events": events,
        "growth_seconds": grown,
        "compaction": dict(recorder.compaction_total),
        "compaction_per_turn": sum(recorder.compaction_total.values()) / i,
    }
    return lengths, summary
