"""What an ``EvstoreSessionService`` holds between calls, given to every module that reads or
writes for it (as evstore's parts share a ``StoreContext``): its store, prefix and retention, a
writer per evstore id it used, the state snapshots it read or wrote, the sessions it read whole
(``Known``), and how far it vouches for each session's scoped deltas.

Locks: ``lock`` guards the caches (held for no request); ``stripe(id)`` serializes the writer
calls on one evstore id (held across its requests). Every cache is an ``Lru`` of 1,024 entries.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any, TypeVar

from ... import Event as StoreEvent
from ... import IntegrityError, Retention, Store
from ... import Session as Writer
from ... import SessionNotFoundError as StoreSessionNotFoundError
from ._mapping import record_of

__all__ = ["Known", "Lru", "ServiceContext"]

T = TypeVar("T")

_CACHE_SIZE = 1024
#: The sessions a service keeps whole hold at most this many events between them (the least
#: recently used go first): about 200 MB of records at 1 KiB each.
_KNOWN_EVENTS = 200_000


class Lru(OrderedDict[str, T]):
    def remember(self, key: str, value: T) -> T:
        self[key] = value
        self.move_to_end(key)
        while len(self) > _CACHE_SIZE:
            self.popitem(last=False)
        return value


class Known:
    """A session as this service last read it, kept so that the next read lists only what came
    after ``head`` (``Writer.catch_up``): its live ``event`` records (after its newest ``session``
    record) and its newest record, by seq. Built by folding records in seq order."""

    def __init__(self, uid: str) -> None:
        self.uid = uid
        self.head = 0
        self.events: list[tuple[int, dict[str, Any]]] = []
        self.newest: tuple[int, dict[str, Any]] | None = None

    def add(self, seq: int, record: dict[str, Any] | None) -> None:
        self.head = seq
        kind = record.get("kind") if record is not None else None
        if record is None or kind not in ("event", "session"):
            return
        if kind == "session":
            self.events = []
        else:
            self.events.append((seq, record))
        self.newest = (seq, record)


class ServiceContext:
    """A service's store and settings, and what it holds between calls (see the module docstring)."""

    def __init__(self, store: Store, prefix: str, retention: Retention) -> None:
        self.store = store
        self.prefix = prefix
        self.retention: Retention = retention
        self.lock = threading.Lock()  # guards the caches and the stripe table
        self._stripes = [threading.Lock() for _ in range(64)]  # one writer call per evstore id at a time
        self.writers: Lru[Writer] = Lru()
        self.snapshots: Lru[dict[str, Any]] = Lru()  # "<id>:<uid>:<seq>" -> state stored at that event
        self.known: Lru[Known] = Lru()  # ADK sessions read whole, at their writer's head
        self.vouched: Lru[tuple[str, int]] = Lru()  # id -> (uid, seq): its records to seq have their deltas applied

    def stripe(self, evstore_id: str) -> threading.Lock:
        return self._stripes[hash(evstore_id) % len(self._stripes)]

    def hold(self, evstore_id: str, writer: Writer) -> Writer:
        """Keep ``writer`` as the id's, the most recently used."""
        with self.lock:
            return self.writers.remember(evstore_id, writer)

    def caught_up(self, evstore_id: str) -> tuple[Writer, list[StoreEvent] | None]:
        """A writer at the session's current head, and the events it had not seen: with a cached
        writer one LIST when there are none (``Writer.catch_up``), with a new one (``store.open``:
        3 requests) None, nothing being known before it. Call under the id's stripe.

        Raises ``SessionNotFoundError`` (never created, or deleted) or ``SessionExpiredError``.
        """
        with self.lock:
            writer = self.writers.get(evstore_id)
        if writer is not None:
            try:
                return writer, writer.catch_up()
            except (StoreSessionNotFoundError, IntegrityError):
                # deleted, or deleted and created again, or an object planted past the head: what the
                # session holds is read afresh, which raises if it is not the true history
                self.forget(evstore_id)
        return self.hold(evstore_id, self.store.open(evstore_id)), None

    def forget(self, evstore_id: str) -> None:
        with self.lock:
            self.writers.pop(evstore_id, None)
            self.known.pop(evstore_id, None)

    def keep(self, evstore_id: str, known: Known) -> Known:
        """Keep ``known`` as the most recently used, within ``_KNOWN_EVENTS`` events in all."""
        with self.lock:
            self.known.remember(evstore_id, known)
            held = sum(len(other.events) for other in self.known.values())
            while held > _KNOWN_EVENTS and len(self.known) > 1:
                _, dropped = self.known.popitem(last=False)
                held -= len(dropped.events)
            return known

    def fold(self, evstore_id: str, known: Known, seq: int, record: dict[str, Any] | None) -> None:
        """Fold a record into ``known``, keeping the state snapshot it carries."""
        known.add(seq, record)
        if record is not None and isinstance(record.get("state"), dict):
            self.remember_snapshot(f"{evstore_id}:{known.uid}:{seq}", record["state"])

    def chunks(self, evstore_id: str, head: int, first: int, uid: str | None = None) -> Iterator[StoreEvent]:
        """The session's events from ``head`` down to seq 1, read in chunks that double from ``first``;
        with ``uid``, the state snapshots of every chunk read are kept (``snapshot`` needs no request)."""
        end = head
        size = max(1, first)
        while end >= 1:
            start = max(1, end - size + 1)
            chunk = list(self.store.replay(evstore_id, start=start, end=end))
            for stored in chunk if uid is not None else ():
                record = record_of(stored)
                if record is not None and isinstance(record.get("state"), dict):
                    self.remember_snapshot(f"{evstore_id}:{uid}:{stored.seq}", record["state"])
            yield from reversed(chunk)
            end = start - 1
            size = min(size * 2, 1024)

    def snapshot(self, evstore_id: str, uid: str, seq: int) -> dict[str, Any]:
        """The state stored at ``seq`` (the record there must carry one; {} for seq 0)."""
        if seq == 0:
            return {}
        key = f"{evstore_id}:{uid}:{seq}"
        with self.lock:
            found = self.snapshots.get(key)
        if found is None:
            events = list(self.store.replay(evstore_id, start=seq, end=seq))
            record = record_of(events[0]) if events else None
            state = record.get("state") if record is not None else None
            if not isinstance(state, dict):
                raise IntegrityError(evstore_id, seq, "the ADK record there carries no state snapshot")
            found = self.remember_snapshot(key, state)
        return copy.deepcopy(found)

    def remember_snapshot(self, key: str, state: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            return self.snapshots.remember(key, copy.deepcopy(state))

    def vouch(self, evstore_id: str, uid: str, seq: int) -> None:
        """Note that the session's records up to ``seq`` have their deltas in the app and user logs."""
        with self.lock:
            vouched = self.vouched.get(evstore_id)
            if vouched is None or vouched[0] != uid or vouched[1] < seq:
                self.vouched.remember(evstore_id, (uid, seq))

    def vouched_for(self, evstore_id: str, uid: str, seq: int) -> bool:
        """Whether this service knows the session's records up to ``seq`` to have their deltas applied."""
        with self.lock:
            vouched = self.vouched.get(evstore_id)
        return vouched is not None and vouched[0] == uid and vouched[1] >= seq
