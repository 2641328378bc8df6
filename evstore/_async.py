"""The async API: ``AsyncStore`` and ``AsyncSession`` over a sync ``Store``.

Every blocking call runs in a bounded thread pool the ``AsyncStore`` owns, over
the same ``Store`` object and therefore the same objects and sessions as the
sync API.

The pool: at most ``max_workers`` threads (``DEFAULT_MAX_WORKERS``, 256, by
default), each started only when a call finds no idle one, and each retired
after ``IDLE_SECONDS`` without work; a call that finds all of them busy queues.
A session costs no thread: a thousand sessions appending at once share the
pool. Why 256: a worker spends a request's round trip blocked on I/O with the
GIL released, so threads, not CPU, bound throughput until one process's CPU
does (on two cores, about 10,000 small appends/s over a 20 ms backend, i.e.
200 requests in flight; with boto3's own CPU per request, less); a blocked
thread costs about 16 KiB of resident memory (its stack is reserved, not
touched). Beyond that number more threads only contend for the GIL. Give
``S3Store`` at least as many connections (``max_pool_connections``, 512 by
default), or requests beyond its pool each open a connection of their own.
A call's result reaches the event loop by one ``call_soon_threadsafe``.

Cancellation contract (``AsyncStore.run`` and every method built on it): a
call that has started in the pool is never abandoned. When the awaiting task
is cancelled while the call runs, the coroutine first waits for the call's
outcome, then raises ``CancelledError`` — the same exception instance the
cancellation delivered, so ``asyncio.timeout``, ``wait_for`` and task groups
behave as usual. A cancelled write is therefore never left unsettled, and its
outcome is knowable:

* ``AsyncStore.outcome(cancelled_error)`` returns the ``Outcome`` (the value
  the call returned, or the exception it raised), and a note on the
  ``CancelledError`` says which;
* ``AsyncSession.last_outcome`` is the ``Outcome`` of the session's last
  settled write (``append``, ``rewind``, ``pop``, ``clear``), cancelled or not:
  for an append, ``value`` is its seq.

A call still queued for a worker when the task is cancelled has not started
either: it is cancelled outright, and the outcome says so (``started`` False).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from itertools import islice
from queue import Empty, SimpleQueue
from typing import Any, Generic, ParamSpec, TypeVar

from ._chain import Receipt
from ._codec import Message, Retention
from ._errors import InvalidInputError
from ._store import DeleteResult, Session, SessionInfo, Store, VerifyResult
from ._views import Event, Repair

__all__ = ["AsyncSession", "AsyncStore", "Outcome"]

T = TypeVar("T")
P = ParamSpec("P")

#: Events fetched per pool round trip by ``AsyncStore.replay``.
REPLAY_BATCH = 256
#: ``AsyncStore``'s ``max_workers`` by default (see the module's docstring for why).
DEFAULT_MAX_WORKERS = 256
#: A worker with no call for this many seconds ends (the next burst starts threads again).
IDLE_SECONDS = 60.0
_OUTCOME_ATTR = "evstore_outcome"


class Outcome(Generic[T]):
    """How a call that ran in the pool settled: it returned ``value`` or raised ``error``.

    ``started`` is False for a call cancelled before a worker picked it up
    (it did nothing; ``error`` is then a ``CancelledError``).
    """

    __slots__ = ("error", "started", "value")

    def __init__(self, value: T | None, error: BaseException | None, *, started: bool = True) -> None:
        self.value = value
        self.error = error
        self.started = started

    @property
    def ok(self) -> bool:
        return self.error is None

    def result(self) -> T:
        """The value, or raise the error."""
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]  # None only when T admits it

    def __repr__(self) -> str:
        if self.error is None:
            return f"Outcome(value={self.value!r:.80})"
        return f"Outcome(error={type(self.error).__name__}, started={self.started})"


_QUEUED, _STARTED, _CANCELLED = 0, 1, 2


class _Job:
    """One call for the pool: run ``fn`` in ``context`` and hand its outcome to ``future`` on ``loop``."""

    __slots__ = ("args", "context", "fn", "future", "kwargs", "loop", "state")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[Any],
        context: contextvars.Context,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        self.loop = loop
        self.future = future
        self.context = context
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.state = _QUEUED


class _CallFuture(asyncio.Future[T]):
    """The future ``AsyncStore.run`` awaits. Cancelling it (as a task cancelled while it awaits
    does) succeeds only while its call is still queued, which then never runs; once a worker has
    started the call, ``cancel`` returns False, so the task's ``CancelledError`` waits for the
    call's outcome and is raised then (asyncio's own rule for a future that refuses to cancel)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, pool: _Pool) -> None:
        super().__init__(loop=loop)
        self._evstore_pool = pool
        self._evstore_job: _Job | None = None

    def cancel(self, msg: Any = None) -> bool:
        job = self._evstore_job
        if job is not None and not self.done() and not self._evstore_pool.cancel(job):
            return False  # running, or finished with its outcome on its way to the loop
        return super().cancel(msg)


class _Pool:
    """At most ``size`` worker threads over one FIFO queue, started on demand, ended when idle.

    Under ``lock``: ``queued`` calls wait in the queue and ``waiting`` workers wait for one
    (a thread being started counts as waiting). A submit starts a thread only when the calls
    queued outnumber the workers waiting and the bound allows; a worker idle for
    ``idle_seconds`` ends only while the others waiting still outnumber the calls queued.
    A worker holds no reference to the ``AsyncStore``, so an ``AsyncStore`` dropped without
    ``aclose`` ends its workers (``weakref.finalize`` calls ``close``). Workers are daemon
    threads: an interpreter exits without them, and by then ``asyncio.run`` has waited for
    every call that started (a cancelled call waits for its outcome), so none is cut short.
    """

    def __init__(self, size: int, idle_seconds: float) -> None:
        self.size = size
        self.idle_seconds = idle_seconds
        self.queue: SimpleQueue[_Job | None] = SimpleQueue()
        self.lock = threading.Lock()
        self.threads: set[threading.Thread] = set()
        self.queued = 0
        self.waiting = 0
        self.closed = False
        self._started = 0

    def submit(self, job: _Job) -> None:
        with self.lock:
            if self.closed:
                raise InvalidInputError("this AsyncStore is closed")
            self.queue.put(job)
            self.queued += 1
            if self.queued > self.waiting and len(self.threads) < self.size:
                self._started += 1
                thread = threading.Thread(target=self._work, name=f"evstore-async-{self._started}", daemon=True)
                self.threads.add(thread)
                self.waiting += 1
                thread.start()

    def cancel(self, job: _Job) -> bool:
        """Cancel ``job`` if no worker has started it (it will then never run)."""
        with self.lock:
            if job.state != _QUEUED:
                return False
            job.state = _CANCELLED
            return True

    def close(self) -> list[threading.Thread]:
        """Refuse new calls; each worker ends after the calls queued before it. The threads to join."""
        with self.lock:
            self.closed = True
            threads = list(self.threads)
            for _ in threads:
                self.queue.put(None)
        return threads

    def _work(self) -> None:
        me = threading.current_thread()
        while True:  # counted in ``waiting`` here
            try:
                job = self.queue.get(timeout=self.idle_seconds)
            except Empty:
                with self.lock:
                    if self.waiting - 1 >= self.queued:  # the others waiting cover every queued call
                        self.waiting -= 1
                        self.threads.discard(me)
                        return
                continue
            with self.lock:
                self.waiting -= 1
                if job is None:  # closed
                    self.threads.discard(me)
                    return
                self.queued -= 1
                run = job.state == _QUEUED
                if run:
                    job.state = _STARTED
            if run:
                _run_job(job)
            with self.lock:
                self.waiting += 1


def _run_job(job: _Job) -> None:
    value: Any = None
    error: BaseException | None = None
    try:
        value = job.context.run(job.fn, *job.args, **job.kwargs)
    except BaseException as exc:  # the call's outcome, whatever it is (as concurrent.futures)
        error = exc
    job.fn = job.args = job.kwargs = None  # type: ignore[assignment]  # drop references early
    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody awaits the outcome
        job.loop.call_soon_threadsafe(_deliver, job.future, value, error)


def _deliver(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(value)
    else:
        future.set_exception(error)


def _outcome_of(future: asyncio.Future[T]) -> Outcome[T]:
    if future.cancelled():  # the pool dropped the call before it started (shutdown)
        return Outcome(None, asyncio.CancelledError(), started=False)
    error = future.exception()
    if error is not None:
        return Outcome(None, error)
    return Outcome(future.result(), None)


class AsyncStore:
    """Async access to a ``Store`` through a bounded thread pool of its own.

    ``store``: the sync store it wraps (shared, usable alongside). ``aclose``
    (or ``async with``) shuts the pool down; it does not close the store.
    """

    def __init__(self, store: Store, *, max_workers: int = DEFAULT_MAX_WORKERS) -> None:
        if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
            raise InvalidInputError("max_workers must be a positive integer")
        self.store = store
        self.max_workers = max_workers
        self._pool = _Pool(max_workers, IDLE_SECONDS)
        weakref.finalize(self, self._pool.close)  # dropped without aclose: the workers end

    def __repr__(self) -> str:
        return f"AsyncStore({self.store!r}, max_workers={self.max_workers})"

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run the blocking ``fn(*args, **kwargs)`` in the pool and return its result.

        If the awaiting task is cancelled while ``fn`` runs, wait for ``fn``'s
        outcome, then raise the ``CancelledError`` (``AsyncStore.outcome(exc)``
        tells the outcome). Adapters build everything on this.
        """
        loop = asyncio.get_running_loop()
        future: _CallFuture[T] = _CallFuture(loop, self._pool)
        context = contextvars.copy_context()  # as asyncio.to_thread: contextvars reach fn
        future._evstore_job = job = _Job(loop, future, context, fn, args, kwargs)
        self._pool.submit(job)
        try:
            return await future  # a cancellation while fn runs is held until it settles: see _CallFuture
        except asyncio.CancelledError as cancelled:
            if future.cancelled():  # it was still queued: it never runs
                outcome: Outcome[T] = Outcome(None, asyncio.CancelledError(), started=False)
            else:  # it ran: its outcome is in the future (settled already, but wait if not)
                await _settle(future)
                outcome = _outcome_of(future)
            setattr(cancelled, _OUTCOME_ATTR, outcome)
            name = getattr(fn, "__qualname__", type(fn).__name__)
            if outcome.error is None:
                note = f"evstore: cancelled while {name} ran; it completed and returned {outcome.value!r:.80}"
            elif not outcome.started:
                note = f"evstore: cancelled before {name} started; it did not run"
            else:
                note = f"evstore: cancelled while {name} ran; it raised {type(outcome.error).__name__}"
            cancelled.add_note(note)
            raise

    @staticmethod
    def outcome(cancelled: BaseException) -> Outcome[Any] | None:
        """The outcome of the call a ``CancelledError`` from ``run`` interrupted (None if none)."""
        found = getattr(cancelled, _OUTCOME_ATTR, None)
        return found if isinstance(found, Outcome) else None

    # ---- sessions -----------------------------------------------------------
    async def create(self, session_id: str, *, retention: Retention = "permanent") -> AsyncSession:
        return AsyncSession(self, await self.run(self.store.create, session_id, retention=retention))

    async def open(self, session_id: str, *, create: bool = False, retention: Retention = "permanent") -> AsyncSession:
        return AsyncSession(self, await self.run(self.store.open, session_id, create=create, retention=retention))

    async def resume(
        self, session_id: str, *, create: bool = False, retention: Retention = "permanent", repair: Repair = "error"
    ) -> tuple[AsyncSession, list[Message]]:
        """``Store.resume``: a writer at the head and the context view, from one pass."""
        writer, context = await self.run(self.store.resume, session_id, create=create, retention=retention, repair=repair)
        return AsyncSession(self, writer), context

    async def fork(self, source: str, target: str, *, at: int | None = None, retention: Retention | None = None) -> AsyncSession:
        return AsyncSession(self, await self.run(self.store.fork, source, target, at=at, retention=retention))

    async def delete(self, session_id: str) -> DeleteResult:
        return await self.run(self.store.delete, session_id)

    # ---- reading --------------------------------------------------------------
    async def replay(
        self, session_id: str, *, start: int = 1, end: int | None = None, batch: int = REPLAY_BATCH
    ) -> AsyncIterator[Event]:
        """The audit view as an async iterator: the sync ``Store.replay`` generator is pulled
        in the pool, ``batch`` events per round trip. Errors surface as iteration reaches them."""
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise InvalidInputError("batch must be a positive integer")
        # made in the pool too: whatever Store.replay does before its first event stays off the loop
        events: Iterator[Event] = iter(await self.run(self.store.replay, session_id, start=start, end=end))
        try:
            while True:
                chunk = await self.run(_take, events, batch)
                for event in chunk:
                    yield event
                if len(chunk) < batch:
                    return
        finally:
            # never running here: each pull settles before this generator resumes
            events_close = getattr(events, "close", None)
            if events_close is not None:
                events_close()  # cancels pending prefetches; no request

    async def context(self, session_id: str, *, repair: Repair = "error") -> list[Message]:
        return await self.run(self.store.context, session_id, repair=repair)

    async def info(self, session_id: str) -> SessionInfo:
        return await self.run(self.store.info, session_id)

    async def list_sessions(self, prefix: str = "", *, start_after: str = "", limit: int | None = None) -> list[str]:
        return await self.run(_listed, self.store.list_sessions, prefix, start_after=start_after, limit=limit)

    async def verify(self, session_id: str, expect: Receipt | None = None) -> VerifyResult:
        return await self.run(self.store.verify, session_id, expect=expect)

    # ---- lifetime -------------------------------------------------------------
    async def aclose(self) -> None:
        """Shut the pool down after the calls in it finish (the store stays open)."""
        threads = self._pool.close()
        if threads:
            await asyncio.get_running_loop().run_in_executor(None, functools.partial(_join, threads))

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncSession:
    """An async writer for one session, wrapping a sync ``Session``.

    Calls on one ``AsyncSession`` run one at a time (a ``Session`` is not
    thread-safe); concurrent tasks queue. Every write is cancel-safe (see the
    module's cancellation contract) and records ``last_outcome``.
    """

    def __init__(self, astore: AsyncStore, session: Session) -> None:
        self.astore = astore
        self.session = session
        #: How the last write settled (value: the seq for append/rewind/clear, the message for pop).
        self.last_outcome: Outcome[Any] | None = None
        self._lock = threading.Lock()

    @property
    def id(self) -> str:
        return self.session.id

    @property
    def head(self) -> int:
        return self.session.head

    def __repr__(self) -> str:
        return f"AsyncSession({self.id!r}, head={self.head})"

    def _locked(self, fn: Callable[P, T]) -> Callable[P, T]:
        def call(*args: P.args, **kwargs: P.kwargs) -> T:
            with self._lock:
                return fn(*args, **kwargs)

        call.__qualname__ = getattr(fn, "__qualname__", "call")
        return call

    async def _write(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            value = await self.astore.run(self._locked(fn), *args, **kwargs)
        except asyncio.CancelledError as cancelled:
            found = AsyncStore.outcome(cancelled)
            if found is not None and found.started:
                self.last_outcome = found
            raise
        except BaseException as error:
            self.last_outcome = Outcome(None, error)
            raise
        self.last_outcome = Outcome(value, None)
        return value

    async def append(
        self, message: Message | Iterable[Message], *, expected_head: int | None = None, idempotency_key: str | None = None
    ) -> int:
        """Append one message, or a list as one atomic event; return its seq (see ``Session.append``
        for ``idempotency_key``). Cancel-safe: a cancelled append waits for the PUT's outcome,
        records it in ``last_outcome``, then raises ``CancelledError``."""
        return await self._write(self.session.append, message, expected_head=expected_head, idempotency_key=idempotency_key)

    async def rewind(self, to_seq: int, *, keep: int | None = None, expected_head: int | None = None) -> int:
        return await self._write(self.session.rewind, to_seq, keep=keep, expected_head=expected_head)

    async def pop(self) -> Message | None:
        return await self._write(self.session.pop)

    async def clear(self) -> int:
        return await self._write(self.session.clear)

    async def refresh(self) -> int:
        return await self.astore.run(self._locked(self.session.refresh))

    async def catch_up(self) -> list[Event]:
        return await self.astore.run(self._locked(self.session.catch_up))

    async def head_event(self) -> Event | None:
        return await self.astore.run(self._locked(self.session.head_event))

    async def fork(self, target: str, *, retention: Retention | None = None) -> AsyncSession:
        forked = await self.astore.run(self._locked(self.session.fork), target, retention=retention)
        return AsyncSession(self.astore, forked)


async def _settle(future: asyncio.Future[Any]) -> None:
    """Wait until ``future`` is done, absorbing further cancellations (they are re-raised
    by the caller's single ``CancelledError``: the task stays cancelled)."""
    while not future.done():
        try:
            await asyncio.shield(future)
        except asyncio.CancelledError:
            if future.cancelled():
                return
        except BaseException:  # the call's own error: it is the outcome, read by the caller
            return


def _join(threads: Iterable[threading.Thread]) -> None:
    for thread in threads:
        thread.join()


def _take(events: Iterator[T], count: int) -> list[T]:
    return list(islice(events, count))


def _listed(fn: Callable[P, Iterable[T]], /, *args: P.args, **kwargs: P.kwargs) -> list[T]:
    return list(fn(*args, **kwargs))
