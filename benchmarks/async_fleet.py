"""By hand: appends/s of a fleet of sessions through ``AsyncStore`` next to plain threads.

    PYTHONPATH=$PWD python benchmarks/async_fleet.py [--sessions 1000] [--appends 5] [--delay 0.02]
        [--max-workers N] [--rounds 3]

A backend that sleeps ``--delay`` seconds before each request (over a ``MemoryStore``) stands in
for S3's round trip. ``--sessions`` writers are opened first (no delay), then each appends
``--appends`` messages one after the other, all sessions at once:

* async: one ``AsyncStore`` (its defaults, or ``--max-workers``), a task per session;
* threads: a ``ThreadPoolExecutor`` with a thread per session, calling ``Session.append``.

It prints appends/s of each round (each on fresh sessions and a fresh pool: starting threads is
counted on both sides), the most requests the backend saw in flight at once and the most threads
alive, then the median and the best of the rounds of each and their ratios. A measurement,
not a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from evstore import AsyncSession, AsyncStore, MemoryStore, Message, ObjectStore, Session, Store
from evstore._backends import IncompleteUpload, LifecycleRule, ListPage, ObjectInfo, StoredObject

T = TypeVar("T")


class DelayingStore(ObjectStore):
    """Sleeps ``delay`` seconds before each request, then forwards it; counts requests in flight."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.location = inner.location
        self.delay = 0.0
        self.in_flight = 0
        self.most_in_flight = 0
        self.most_threads = 0
        self._lock = threading.Lock()

    def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        with self._lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self.most_threads = max(self.most_threads, threading.active_count())
        try:
            if self.delay:
                time.sleep(self.delay)
            return fn(*args, **kwargs)
        finally:
            with self._lock:
                self.in_flight -= 1

    def reset(self) -> None:
        with self._lock:
            self.most_in_flight = self.most_threads = 0

    def create(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None
    ) -> str:
        return self._call(self.inner.create, key, data, metadata=metadata, tags=tags)

    def replace(self, key: str, data: bytes, *, etag: str, **kwargs: Any) -> str:
        return self._call(self.inner.replace, key, data, etag=etag, **kwargs)

    def get(self, key: str, *, max_bytes: int | None = None) -> StoredObject:
        return self._call(self.inner.get, key, max_bytes=max_bytes)

    def head(self, key: str) -> ObjectInfo:
        return self._call(self.inner.head, key)

    def list_page(self, prefix: str, *, start_after: str = "", max_keys: int = 1000, delimiter: str = "") -> ListPage:
        return self._call(self.inner.list_page, prefix, start_after=start_after, max_keys=max_keys, delimiter=delimiter)

    def delete_many(self, keys: Iterable[str]) -> int:
        return self._call(self.inner.delete_many, list(keys))

    def get_tags(self, key: str) -> dict[str, str]:
        return self._call(self.inner.get_tags, key)

    def get_lifecycle(self) -> list[LifecycleRule]:
        return self._call(self.inner.get_lifecycle)

    def put_lifecycle(self, rules: list[LifecycleRule]) -> None:
        self._call(self.inner.put_lifecycle, rules)

    def list_incomplete_uploads(self, prefix: str) -> Iterator[IncompleteUpload]:
        return self.inner.list_incomplete_uploads(prefix)

    def abort_upload(self, key: str, upload_id: str) -> None:
        self._call(self.inner.abort_upload, key, upload_id)


def message(i: int) -> Message:
    return {"role": "user", "content": f"message {i} " + "x" * 200}


def writers(backend: DelayingStore, store: Store, tag: str, count: int) -> list[Session]:
    backend.delay = 0.0
    opened = [store.create(f"{tag}-{i}") for i in range(count)]
    return opened


def run_async(backend: DelayingStore, store: Store, sessions: list[Session], appends: int, max_workers: int | None) -> float:
    async def main() -> float:
        astore = AsyncStore(store) if max_workers is None else AsyncStore(store, max_workers=max_workers)
        async with astore:
            wrapped = [AsyncSession(astore, s) for s in sessions]

            async def one(session: AsyncSession) -> None:
                for i in range(appends):
                    await session.append(message(i))

            started = time.perf_counter()
            await asyncio.gather(*(one(s) for s in wrapped))
            return time.perf_counter() - started

    return asyncio.run(main())


def run_threads(sessions: list[Session], appends: int) -> float:
    def one(session: Session) -> None:
        for i in range(appends):
            session.append(message(i))

    with ThreadPoolExecutor(max_workers=len(sessions)) as pool:
        started = time.perf_counter()
        list(pool.map(one, sessions))
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--appends", type=int, default=5, help="appends per session, one after the other")
    parser.add_argument("--delay", type=float, default=0.02, help="seconds per request")
    parser.add_argument("--max-workers", type=int, default=None, help="AsyncStore's max_workers (default: its default)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    backend = DelayingStore(MemoryStore())
    store = Store(backend)
    total = args.sessions * args.appends
    rates: dict[str, list[float]] = {"async": [], "threads": []}
    for r in range(args.rounds):
        for kind in ("async", "threads") if r % 2 == 0 else ("threads", "async"):
            sessions = writers(backend, store, f"{kind}{r}", args.sessions)
            backend.delay = args.delay
            backend.reset()
            if kind == "async":
                seconds = run_async(backend, store, sessions, args.appends, args.max_workers)
            else:
                seconds = run_threads(sessions, args.appends)
            rate = total / seconds
            print(f"round {r} {kind:<7} {rate:8.0f} appends/s  (in flight at most {backend.most_in_flight}, "
                  f"threads at most {backend.most_threads})")
            rates[kind].append(rate)
    workers = AsyncStore(store).max_workers if args.max_workers is None else args.max_workers
    print(f"{args.sessions} sessions x {args.appends} appends, {args.delay * 1000:g} ms per request, "
          f"AsyncStore max_workers={workers}")
    med = {kind: statistics.median(values) for kind, values in rates.items()}
    best = {kind: max(values) for kind, values in rates.items()}
    print(f"async   median {med['async']:8.0f}  best {best['async']:8.0f} appends/s over {args.rounds} rounds")
    print(f"threads median {med['threads']:8.0f}  best {best['threads']:8.0f} appends/s over {args.rounds} rounds")
    ratios = f"{med['async'] / med['threads']:.2f}x of the medians, {best['async'] / best['threads']:.2f}x of the bests"
    print(f"ratio async/threads: {ratios}")


if __name__ == "__main__":
    main()
