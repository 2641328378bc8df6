"""What every part of the store needs, in one small object: the backend, the
key layout, the keyring, the clock, the limits, the caches and the bounded
thread pool. The read path, the write path, forks, audit and retention each
receive a ``StoreContext``; none of them receives the ``Store`` facade.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Generator, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, TypeVar

from . import _lifecycle
from ._backends import ObjectExists, ObjectMissing, ObjectStore
from ._codec import DEFAULT_MAX_EVENT_BYTES, RekeyRecord, Retention, max_event_object_bytes
from ._errors import InvalidInputError
from ._ids import Layout

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from ._crypto import Keyring

A = TypeVar("A")
B = TypeVar("B")

#: Object metadata (``x-amz-meta-evstore-write-id``) naming the append that wrote an event.
WRITE_ID_METADATA = "evstore-write-id"
#: The tag every object of an ephemeral session carries, set by the PUT itself.
RETENTION_TAG = _lifecycle.RETENTION_TAG


#: By default writers compact as they go: a segment at every 32 appends, merged 4 to 1 level by level.
DEFAULT_AUTO_COMPACT = 32

#: A writer trusts that its session lives (no tombstone, the same manifest) for this many seconds
#: after it last read the manifest and listing; past that, it reads them again around its next append.
DEFAULT_WRITER_LEASE = 60.0
#: gc never touches an object younger than this unless told otherwise.
DEFAULT_GRACE = timedelta(days=1)
MAX_WRITER_LEASE = 300.0
#: ``delete`` fences the session at once, and gc removes its objects only once its tombstone is this
#: old: longer than any writer's lease, plus a margin for clock skew and requests in flight. Until
#: then every seq up to the fence stays taken, so a stale writer's append meets a 412, never a free slot.
FENCE_HOLD = timedelta(seconds=MAX_WRITER_LEASE + 300)


#: ``_Pools.grow`` waits no longer than this for the threads it started to wait for work.
_GROW_WAIT = 0.05
#: ``_Pools.grow`` leaves fewer missing threads than this to start with the requests, as a pool does
#: (about 1.6 ms in all): a read of a deep fork's ancestors would otherwise wait for a few threads to
#: start while hundreds of answers hold the GIL.
_GROW_LEAST = 8
#: ``StoreContext.wide_executor`` has this many threads per unit of ``concurrency`` at most.
WIDE_FACTOR = 8


def utc_now() -> datetime:
    return datetime.now(UTC)


class _Pools:
    """A context's thread pools by name, each made on first use. A copy of the context
    (``copy.copy``, as gc and the OpenTelemetry integration make) shares this object, and so
    its pools: a copy never starts threads of its own."""

    def __init__(self) -> None:
        self._pools: dict[str, ThreadPoolExecutor] = {}
        self._lock = threading.Lock()

    def get(self, name: str, threads: int) -> ThreadPoolExecutor:
        with self._lock:
            pool = self._pools.get(name)
            if pool is None:
                from concurrent.futures import ThreadPoolExecutor

                pool = self._pools[name] = ThreadPoolExecutor(threads, thread_name_prefix=name)
            return pool

    def grow(self, name: str, threads: int, wanted: int) -> None:
        """Start threads in the pool ``name`` (of ``threads`` at most) until it has ``wanted`` of
        them (busy ones count; none when fewer than ``_GROW_LEAST`` are missing), and return once
        they wait for work, or after ``_GROW_WAIT`` when other requests keep the pool busy. A pool
        starts a thread when a request finds none idle, about 0.2 ms each: the requests of a burst
        that must go out together would otherwise go out that far apart, while the first answers
        already compete for the GIL."""
        from concurrent.futures import wait

        pool = self.get(name, threads)
        wanted = min(wanted, threads)
        if wanted - len(pool._threads) < _GROW_LEAST:
            return
        gate = threading.Event()
        # each holds a thread until all are sent: the idle ones first, then each finds none and starts one
        holding = [pool.submit(gate.wait) for _ in range(wanted)]
        gate.set()
        wait(holding, timeout=_GROW_WAIT)

    def close(self) -> None:
        with self._lock:
            pools = list(self._pools.values())
        for pool in pools:
            pool.shutdown(wait=False, cancel_futures=True)


class StoreContext:
    """Shared by every part of one store; safe to share between threads.

    The caches hold what never changes for a session incarnation (derived keys)
    or what the read path refreshes itself when in doubt (rekey records).
    """

    def __init__(
        self,
        backend: ObjectStore,
        *,
        root: str = "",
        keyring: Keyring | None = None,
        require_encryption: bool = False,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        concurrency: int = 32,
        auto_compact: int | None = DEFAULT_AUTO_COMPACT,
        writer_lease: float = DEFAULT_WRITER_LEASE,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        lease_ok = isinstance(writer_lease, int | float) and not isinstance(writer_lease, bool)
        if not lease_ok or not 0 <= writer_lease <= MAX_WRITER_LEASE:
            raise InvalidInputError(f"writer_lease must be from 0 to {MAX_WRITER_LEASE:.0f} seconds")
        if auto_compact == 0:
            auto_compact = None
        if auto_compact is not None and not 2 <= auto_compact <= 100_000:
            raise InvalidInputError("auto_compact must be a segment size from 2 to 100000, or 0 (None) for off")
        self.backend = backend
        self.layout = Layout(root)
        if keyring is None:
            from ._crypto import Keyring  # here: a store without keys never loads the crypto module

            keyring = Keyring()
        self.keyring = keyring
        self.require_encryption = require_encryption
        self.max_event_bytes = max_event_bytes
        #: The largest event object a reader accepts (``max_event_bytes`` sealed, in its envelope).
        self.max_event_object_bytes = max_event_object_bytes(max_event_bytes)
        self.concurrency = max(1, concurrency)
        #: Writers pack segments as they append, LSM-style, from this size up (None: only ``compact``).
        self.auto_compact = auto_compact
        #: Seconds a writer trusts its session lives between reads of its manifest (see ``FENCE_HOLD``).
        self.writer_lease = float(writer_lease)
        self.clock = clock
        #: (session id, uid, key id) -> the session's derived AES key.
        self.session_keys: dict[tuple[str, str, str], AESGCM] = {}
        #: session id -> its rekey records, as the read path last loaded them.
        self.rekey_records: dict[str, list[RekeyRecord]] = {}
        self._pools = _Pools()

    def close(self) -> None:
        self._pools.close()
        self.backend.close()

    def executor(self) -> ThreadPoolExecutor:
        """The pool requests are made on: 2 x concurrency threads. The reads keep up to 2 x
        concurrency GETs in flight (a tail's early GETs queue behind the segment GETs only when a
        chain has that many segments)."""
        return self._pools.get("evstore-get", self.concurrency * 2)

    def ready_threads(self, requests: int, leaves: int = 0) -> None:
        """Make sure ``requests`` requests on ``executor``'s pool and ``leaves`` on
        ``wide_executor``'s each find a thread waiting (up to the pools' sizes): before a burst
        of requests that are all sent at once (``_Pools.grow``). The threads stay for the
        context's life, so a store that read a long session once starts none the next time."""
        self._pools.grow("evstore-get", self.concurrency * 2, requests)
        if leaves:
            self._pools.grow("evstore-leaf", self.concurrency * WIDE_FACTOR, leaves)

    def wide_executor(self) -> ThreadPoolExecutor:
        """A pool of up to ``WIDE_FACTOR`` x concurrency threads (256 by default), for small
        requests that wait on nothing and are sent many at once, which through the pool of
        ``executor`` would queue behind each other (or behind segment GETs) for rounds: a deep
        fork's ancestors (their manifests, listings and short ranges of events: 4 requests an
        ancestor that gave its fork 2 events, up to 100 ancestors), and the LIST pages whose ETags
        vouch for a chain of segments (one per 1,000 events). Threads start as requests need them."""
        return self._pools.get("evstore-leaf", self.concurrency * WIDE_FACTOR)

    def prefetched(
        self,
        items: Iterable[A],
        fetch: Callable[[A], B],
        window: int,
        *,
        early: Callable[[A], Future[B] | None] | None = None,
        primed: Callable[[], None] | None = None,
        weight: Callable[[A], int] = lambda _: 0,
        budget: int = 0,
        wide: Callable[[A], bool] = lambda _: False,
    ) -> Generator[tuple[A, B]]:
        """(item, fetch(item)) in the order of ``items``, with up to ``window`` fetches in flight
        on the pool (``wide(item)``: on ``wide_executor``'s); ``early(item)``: a fetch already sent
        for it, used instead of a new one; ``primed()`` runs once the first window is submitted; no
        fetch is sent while those in flight weigh more than ``budget`` (one always goes: by default
        nothing weighs anything)."""
        pending: deque[tuple[A, Future[B]]] = deque()
        in_flight = 0
        pool = self.executor()
        try:
            for item in items:
                future = early(item) if early is not None else None
                if future is None:
                    future = (self.wide_executor() if wide(item) else pool).submit(fetch, item)
                pending.append((item, future))
                in_flight += weight(item)
                while len(pending) >= window or in_flight > budget:
                    if primed is not None:
                        primed()
                        primed = None
                    done, result = pending.popleft()
                    in_flight -= weight(done)
                    yield done, result.result()
            if primed is not None:
                primed()
            while pending:
                done, result = pending.popleft()
                yield done, result.result()
        finally:
            for _, future in pending:
                future.cancel()

    def tags_for(self, retention: Retention) -> dict[str, str]:
        """Every object carries its session's retention class as a tag, set by its own PUT: the
        lifecycle rule expires ``ephemeral`` ones, and the writer role may not re-tag a tagged object
        (so it cannot make a permanent one expire)."""
        return {RETENTION_TAG: retention}

    def has_object(self, key: str) -> bool:
        """Whether ``key`` exists: one HEAD."""
        try:
            self.backend.head(key)
        except ObjectMissing:
            return False
        return True

    def create_once(self, key: str, data: bytes, tags: Mapping[str, str]) -> None:
        """Create ``key`` (``If-None-Match``). A 412 whose stored bytes are ours is our own
        earlier attempt, whose answer was lost and which botocore retried: success.
        Otherwise ``ObjectExists``. The bytes are unique (they carry a random uid or time)."""
        try:
            self.backend.create(key, data, tags=tags)
        except ObjectExists:
            try:
                if self.backend.get(key).data == data:
                    return
            except ObjectMissing:
                pass
            raise

    def forget_records(self, session_id: str) -> None:
        """The session's rekey records changed (or may have): read them afresh next time."""
        self.rekey_records.pop(session_id, None)

    def forget_keys(self, session_id: str) -> None:
        """The session's salt is gone (shred): its derived keys must not outlive it."""
        for cached in [k for k in self.session_keys if k[0] == session_id]:
            del self.session_keys[cached]
