"""The async API: AsyncStore/AsyncSession over memory, local and moto (in process), and its
cancellation contract (a cancelled write settles before CancelledError, its outcome knowable)."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import threading
from collections.abc import Mapping
from typing import Any

import pytest

from evstore import (
    AsyncSession,
    AsyncStore,
    InvalidInputError,
    MemoryStore,
    ObjectStore,
    Outcome,
    Session,
    SessionExistsError,
    SessionNotFoundError,
    Store,
    WriteConflictError,
    _async,
)
from evstore._async import DEFAULT_MAX_WORKERS

from .helpers import CountingStore, msg

WAIT = 10  # seconds: a bound for waits that a working implementation ends at once


def run(coro: Any) -> Any:
    return asyncio.run(coro)


class BlockingPuts(CountingStore):
    """Holds every PUT of an event object until ``release`` is set; ``entered`` is set when one waits."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.entered = threading.Event()
        self.release = threading.Event()

    def create(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None
    ) -> str:
        if key.rsplit("/", 1)[-1].isdigit():
            self.entered.set()
            assert self.release.wait(WAIT), "the test never released the PUT"
        return super().create(key, data, metadata=metadata, tags=tags)


async def wait_for_thread_event(event: threading.Event) -> None:
    assert await asyncio.to_thread(event.wait, WAIT)


async def spin(loops: int = 20) -> None:
    """Let the event loop run other callbacks a number of times (no clock involved)."""
    for _ in range(loops):
        await asyncio.sleep(0)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["memory", "local", "moto"], indirect=True)
def test_round_trip_over_each_backend(store: Store) -> None:
    async def main() -> None:
        async with AsyncStore(store, max_workers=2) as astore:
            assert astore.store is store
            session = await astore.create("chat")
            assert isinstance(session, AsyncSession) and session.id == "chat" and session.head == 0
            assert await session.append(msg("one")) == 1
            assert await session.append([msg("two"), msg("three", "assistant")]) == 2
            assert session.last_outcome is not None and session.last_outcome.value == 2
            assert await astore.context("chat") == [msg("one"), msg("two"), msg("three", "assistant")]
            assert [e.seq async for e in astore.replay("chat")] == [1, 2]
            assert (await astore.info("chat")).head == 2
            fork = await astore.fork("chat", "chat.b", at=1)
            assert await fork.append(msg("other")) == 2
            assert await astore.context("chat.b") == [msg("one"), msg("other")]
            listed = await astore.list_sessions("chat")
            assert sorted(listed) == ["chat", "chat.b"] and listed == list(store.list_sessions("chat"))
            assert await astore.list_sessions("chat", limit=1) == listed[:1]
            result = await astore.verify("chat")
            assert result.receipt.seq == 2 and result.events == 2
            assert (await astore.verify("chat", result.receipt)).expected == result.receipt
            reopened = await astore.open("chat")
            assert reopened.head == 2
            await astore.delete("chat.b")
            with pytest.raises(SessionNotFoundError):
                await astore.context("chat.b")

    run(main())


def test_session_writes_rewind_pop_clear_refresh_fork(memory_store: Store) -> None:
    async def main() -> None:
        astore = AsyncStore(memory_store)
        session = await astore.open("s", create=True)
        for text in ("a", "b", "c"):
            await session.append(msg(text))
        assert await session.pop() == msg("c")
        assert session.last_outcome is not None and session.last_outcome.value == msg("c")
        await session.rewind(1)
        assert await astore.context("s") == [msg("a")]
        other = memory_store.open("s")
        other.append(msg("from elsewhere"))
        assert await session.refresh() == other.head
        forked = await session.fork("s.fork")
        assert forked.head == session.head and await astore.context("s.fork") == [msg("a"), msg("from elsewhere")]
        await session.clear()
        assert await astore.context("s") == []
        await astore.aclose()

    run(main())


def test_errors_are_evstore_errors_and_recorded(memory_store: Store) -> None:
    async def main() -> None:
        astore = AsyncStore(memory_store)
        with pytest.raises(SessionNotFoundError):
            await astore.open("missing")
        await astore.create("s")
        with pytest.raises(SessionExistsError):
            await astore.create("s")
        session = await astore.open("s")
        with pytest.raises(WriteConflictError):
            await session.append(msg("x"), expected_head=3)
        assert session.last_outcome is not None and isinstance(session.last_outcome.error, WriteConflictError)
        with pytest.raises(InvalidInputError):
            AsyncStore(memory_store, max_workers=0)

    run(main())


def test_concurrent_appends_on_one_session_run_one_at_a_time(memory_store: Store) -> None:
    async def main() -> list[int]:
        astore = AsyncStore(memory_store, max_workers=8)
        session = await astore.create("s")
        return list(await asyncio.gather(*(session.append(msg(str(i))) for i in range(12))))

    assert sorted(run(main())) == list(range(1, 13))
    assert [e.seq for e in memory_store.replay("s")] == list(range(1, 13))


def test_cancelled_append_raises_only_after_the_write_landed() -> None:
    blocking = BlockingPuts(MemoryStore())
    store = Store(blocking, root="root")
    store.create("s")

    async def main() -> None:
        astore = AsyncStore(store)
        session = await astore.open("s")
        task = asyncio.create_task(session.append(msg("hello")))
        await wait_for_thread_event(blocking.entered)  # the PUT is in flight, held
        task.cancel()
        await spin()
        assert not task.done()  # the cancellation waits for the held PUT
        task.cancel()  # a second cancel changes nothing either
        await spin()
        assert not task.done()
        assert list(store.replay("s")) == []  # nothing landed yet
        blocking.release.set()
        with pytest.raises(asyncio.CancelledError) as caught:
            await task
        # the write landed before the CancelledError arrived, and its outcome is knowable
        assert session.last_outcome is not None and session.last_outcome.value == 1 and session.last_outcome.ok
        assert session.head == 1
        outcome = AsyncStore.outcome(caught.value)
        assert outcome is not None and outcome.value == 1
        assert any("returned 1" in note for note in getattr(caught.value, "__notes__", []))
        assert [e.seq for e in store.replay("s")] == [1]
        assert await session.append(msg("next")) == 2  # the writer stays usable at the right head

    run(main())


def test_cancelled_append_that_fails_reports_the_error() -> None:
    blocking = BlockingPuts(MemoryStore())
    store = Store(blocking, root="root")
    store.create("s")

    async def main() -> None:
        loop_errors: list[dict[str, Any]] = []
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: loop_errors.append(context))
        astore = AsyncStore(store)
        session = await astore.open("s")
        rival = Store(blocking.inner, root="root").open("s")
        task = asyncio.create_task(session.append(msg("mine")))
        await wait_for_thread_event(blocking.entered)
        rival.append(msg("theirs"))  # straight to the inner store: takes seq 1 while ours is held
        task.cancel()
        blocking.release.set()
        with pytest.raises(asyncio.CancelledError) as caught:
            await task
        outcome = AsyncStore.outcome(caught.value)
        assert outcome is not None and outcome.started and isinstance(outcome.error, WriteConflictError)
        assert session.last_outcome is outcome
        assert [m for e in store.replay("s") for m in e.messages] == [msg("theirs")]
        await spin()
        assert loop_errors == []  # the failed call's error was retrieved: no "never retrieved" report

    run(main())


def test_timeout_still_becomes_timeout_error_after_the_write_settles() -> None:
    blocking = BlockingPuts(MemoryStore())
    store = Store(blocking, root="root")
    store.create("s")

    async def main() -> None:
        astore = AsyncStore(store)
        session = await astore.open("s")

        async def expire_while_held(deadline: asyncio.Timeout) -> None:
            await wait_for_thread_event(blocking.entered)  # the PUT is running in its thread
            deadline.reschedule(asyncio.get_running_loop().time())  # the timeout expires now
            await spin()
            blocking.release.set()

        with pytest.raises(TimeoutError):
            async with asyncio.timeout(None) as deadline:
                releaser = asyncio.create_task(expire_while_held(deadline))
                await session.append(msg("x"))
        await releaser
        assert session.last_outcome is not None and session.last_outcome.value == 1
        assert [e.seq for e in store.replay("s")] == [1]

    run(main())


def test_a_call_still_queued_when_cancelled_never_runs(memory_store: Store) -> None:
    gate = threading.Event()
    started = threading.Event()
    ran: list[str] = []

    def hold() -> str:
        started.set()
        assert gate.wait(WAIT)
        return "held"

    async def main() -> None:
        astore = AsyncStore(memory_store, max_workers=1)
        first = asyncio.create_task(astore.run(hold))
        await wait_for_thread_event(started)
        queued = asyncio.create_task(astore.run(ran.append, "queued"))
        await spin()
        queued.cancel()
        with pytest.raises(asyncio.CancelledError) as caught:
            await queued  # at once: the worker is still busy with ``hold``
        outcome = AsyncStore.outcome(caught.value)
        assert outcome is not None and not outcome.started and outcome.value is None
        gate.set()
        assert await first == "held"
        await astore.aclose()
        assert ran == []

    run(main())


def test_run_passes_arguments_and_context_variables(memory_store: Store) -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")

    def read(prefix: str, *, suffix: str) -> str:
        return prefix + var.get() + suffix

    async def main() -> str:
        var.set("set")
        return await AsyncStore(memory_store).run(read, "<", suffix=">")

    assert run(main()) == "<set>"


def test_replay_pulls_in_batches_and_closes_early(memory_store: Store) -> None:
    session = memory_store.create("s")
    for i in range(7):
        session.append(msg(str(i)))

    async def main() -> None:
        astore = AsyncStore(memory_store)
        assert [e.seq async for e in astore.replay("s", batch=3)] == list(range(1, 8))
        assert [e.seq async for e in astore.replay("s", start=3, end=5, batch=2)] == [3, 4, 5]
        events = astore.replay("s", batch=2)
        assert (await anext(events)).seq == 1
        await events.aclose()
        with pytest.raises(SessionNotFoundError):
            async for _ in astore.replay("missing"):
                pass
        with pytest.raises(InvalidInputError):
            async for _ in astore.replay("s", batch=0):
                pass

    run(main())


def test_a_closed_async_store_refuses_calls_and_leaves_the_store_open(memory_store: Store) -> None:
    async def main() -> None:
        astore = AsyncStore(memory_store)
        await astore.create("s")
        await astore.aclose()
        with pytest.raises(InvalidInputError):
            await astore.info("s")

    run(main())
    assert memory_store.info("s").head == 0


def test_outcome_result_returns_or_raises() -> None:
    assert Outcome(3, None).result() == 3
    error = WriteConflictError("s", 1)
    with pytest.raises(WriteConflictError):
        Outcome(None, error).result()
    assert AsyncStore.outcome(asyncio.CancelledError()) is None


class GatedPuts(CountingStore):
    """Holds each PUT of an event object until ``target`` of them are in flight at once (or
    ``WAIT`` passes), then lets them all go; records the most in flight and the threads seen."""

    def __init__(self, inner: ObjectStore, target: int) -> None:
        super().__init__(inner)
        self.target = target
        self.in_flight = 0
        self.most = 0
        self.threads: set[str] = set()
        self.reached = False
        self._cond = threading.Condition()

    def create(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None
    ) -> str:
        if key.rsplit("/", 1)[-1].isdigit():
            with self._cond:
                self.in_flight += 1
                self.most = max(self.most, self.in_flight)
                self.threads.add(threading.current_thread().name)
                if self.in_flight >= self.target:
                    self.reached = True
                    self._cond.notify_all()
                self._cond.wait_for(lambda: self.reached, timeout=WAIT)
                self.in_flight -= 1
        with self._cond:  # CountingStore's counters are not made for threads
            return super().create(key, data, metadata=metadata, tags=tags)


def _fleet(count: int, target: int) -> tuple[GatedPuts, Store, list[Session]]:
    gated = GatedPuts(MemoryStore(), target)
    store = Store(gated, root="root")
    return gated, store, [store.create(f"s{i}") for i in range(count)]


def test_by_default_a_fleet_of_sessions_appends_in_parallel_on_a_bounded_pool() -> None:
    """Structural: 300 sessions append at once through the defaults; the backend sees a full
    pool's worth of PUTs in flight together, and never more: the rest queue, no thread per session."""
    assert DEFAULT_MAX_WORKERS >= 200  # a fleet's round trips overlap, not 8 at a time
    sessions_count = DEFAULT_MAX_WORKERS + 44
    gated, store, sessions = _fleet(sessions_count, DEFAULT_MAX_WORKERS)

    async def main() -> list[int]:
        async with AsyncStore(store) as astore:
            assert astore.max_workers == DEFAULT_MAX_WORKERS
            return list(await asyncio.gather(*(AsyncSession(astore, s).append(msg("hi")) for s in sessions)))

    assert run(main()) == [1] * sessions_count
    assert gated.reached and gated.most == DEFAULT_MAX_WORKERS
    assert len(gated.threads) == DEFAULT_MAX_WORKERS
    assert all(name.startswith("evstore-async-") for name in gated.threads)


def test_max_workers_bounds_the_requests_in_flight_and_threads_start_only_as_needed() -> None:
    gated, store, sessions = _fleet(40, 4)  # the first four PUTs go together, the rest as they come

    async def main() -> None:
        astore = AsyncStore(store, max_workers=4)
        assert astore._pool.threads == set()  # nothing started before the first call
        assert await astore.run(sum, [1, 2]) == 3
        assert len(astore._pool.threads) == 1  # one call, one thread
        await asyncio.gather(*(AsyncSession(astore, s).append(msg("hi")) for s in sessions))
        assert len(astore._pool.threads) == 4
        threads = list(astore._pool.threads)
        await astore.aclose()
        assert not any(t.is_alive() for t in threads)

    run(main())
    assert gated.most == 4 and len(gated.threads) == 4
    assert all(store.info(s.id).head == 1 for s in sessions)


def test_idle_workers_end_and_a_later_call_starts_one_again(memory_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_async, "IDLE_SECONDS", 0.05)

    async def main() -> None:
        astore = AsyncStore(memory_store, max_workers=3)
        gate = threading.Event()
        held = [asyncio.create_task(astore.run(gate.wait, WAIT)) for _ in range(3)]
        await spin()
        threads = list(astore._pool.threads)
        assert len(threads) == 3
        gate.set()
        assert await asyncio.gather(*held) == [True] * 3
        await asyncio.to_thread(_join_all, threads)  # each ends once idle for IDLE_SECONDS
        assert astore._pool.threads == set() and astore._pool.waiting == 0
        assert await astore.run(sum, [4]) == 4  # the next call starts a worker again
        assert len(astore._pool.threads) == 1
        await astore.aclose()

    run(main())


def _join_all(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive()


@pytest.mark.slow
def test_an_async_store_dropped_without_aclose_ends_its_workers(memory_store: Store) -> None:
    async def main() -> list[threading.Thread]:
        astore = AsyncStore(memory_store, max_workers=2)
        await astore.run(sum, [1])
        return list(astore._pool.threads)

    threads = run(main())  # the AsyncStore is unreachable once main returns
    gc.collect()
    _join_all(threads)


def test_calls_queued_before_aclose_still_run(memory_store: Store) -> None:
    ran: list[int] = []
    gate = threading.Event()

    async def main() -> None:
        astore = AsyncStore(memory_store, max_workers=1)
        first = asyncio.create_task(astore.run(gate.wait, WAIT))
        queued = [asyncio.create_task(astore.run(ran.append, i)) for i in range(3)]
        await spin()
        closing = asyncio.create_task(astore.aclose())
        await spin()
        with pytest.raises(InvalidInputError):
            await astore.run(ran.append, 99)
        threads = list(astore._pool.threads)
        gate.set()
        await asyncio.gather(first, *queued, closing)  # aclose returns once its workers ended
        assert astore._pool.threads == set() and not any(t.is_alive() for t in threads)

    run(main())
    assert ran == [0, 1, 2]
