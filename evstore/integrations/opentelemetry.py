"""OpenTelemetry spans and metrics for evstore's store operations: ``instrument(store)``.

Install with ``pip install 'evstore[otel]'`` (the OpenTelemetry API; the SDK, or any other
implementation, is the application's). This module imports OpenTelemetry; ``import evstore``
never does, and a ``Store`` that was not instrumented pays nothing::

    from evstore.integrations.opentelemetry import instrument

    store = instrument(evstore.open_store("s3://bucket/agents"))   # the global providers
    writer = store.open("chat-42", create=True)                    # span evstore.open
    writer.append({"role": "user", "content": "hi"})               # span evstore.append: 1 PUT

What is measured
----------------
Each operation of the instrumented store and of the writers it makes is one span named
``evstore.<operation>`` (kind INTERNAL, a child of the span current when it is called),
counted in the metrics below. The store's operations: ``open``, ``create``, ``resume``,
``fork``, ``replay``, ``context``, ``info``, ``compact``, ``delete``, ``gc``, ``verify`` and
``verify_all``; a writer's: ``append``, ``rewind``, ``pop``, ``clear``, ``fork``, ``catch_up``
and ``refresh``. Other methods (``list_sessions``, ``follow``, ``shred``, ...) run as on the
store itself, with no span. The framework adapters that resume through
``integrations._common.SessionLog`` (OpenAI Agents, Strands, Pydantic AI) do so below the
facade (``_write.resume_folded``): that resume and the writer it makes are not spanned; what
they call on the store's own methods is.

Span attributes:

* ``gen_ai.conversation.id``: the session id (the OpenTelemetry GenAI semantic conventions'
  name for a conversation); a fork's is its source, ``evstore.fork.target`` its new session.
  ``gc`` and ``verify_all`` name no session.
* ``evstore.outcome``: ``ok``, or the class name of the exception the
  operation raised (``SessionNotFoundError``, ``WriteConflictError``, ...), which is also
  ``error.type`` (fully qualified) with the span status ERROR (description: the class name).
  The exception is not recorded as a span event: its message can quote what it refused.
* ``evstore.requests`` and, by kind, ``evstore.requests.put`` / ``.get`` / ``.head`` /
  ``.list`` / ``.delete``: the requests the operation sent to the backend, from any thread
  (reads prefetched on the store's pool, gc's and verify_all's workers). A request the backend
  retried (``S3Store``'s transient failures) counts once; a batch delete counts as the
  DELETE requests it took (one per 1,000 keys).
* ``evstore.bytes.up`` / ``evstore.bytes.down``: the object bodies sent (PUT) and received
  (GET). That is what the backend interface knows: LIST and HEAD responses, headers and
  metadata are not in it.
* ``evstore.round_trips``: dependent round trips, the longest chain of the operation's requests
  each of which was sent after the one before it had answered (as ``benchmarks/`` count them):
  1 for requests sent side by side, N for N sent one after another; a batch delete of N
  requests counts N. Over a backend that answers at once (``MemoryStore``) requests meant to
  overlap rarely do, so there round trips come out near the requests.
* ``evstore.seq`` (append, rewind, clear: the seq written); ``evstore.events`` (replay,
  catch_up: the events returned; verify_all: the verdicts); ``evstore.stream.complete``
  (replay, verify_all: whether the caller read the stream to its end).

A count or size that is zero is left out (an append has ``evstore.requests.put`` = 1 and no
other kind): each attribute costs the SDK a validation on every span.

**No message content, by default and always**: no attribute, metric attribute or status holds a
message, a tool call, an argument or a result; only ids, counts, sizes and class names.

A stream (``replay``, ``verify_all``) is one span from the call to the stream's end: its last
item, its error, or the caller closing it (or dropping it, when it is collected). Its duration
therefore includes the caller's own work between items; its requests are the stream's only.

Metrics (attributes ``evstore.operation`` and, on the first two, ``evstore.outcome``; never
the session id, which would make a series per session):

* ``evstore.operation.duration`` (histogram, seconds; its count is the operations too);
* ``evstore.operations`` (counter): operations finished;
* ``evstore.requests`` (counter, also by ``evstore.request.kind``: PUT, GET, HEAD, LIST, DELETE);
* ``evstore.io`` (counter, bytes, by ``network.io.direction``: ``transmit`` for PUT bodies,
  ``receive`` for GET bodies).

The three counters are observable counters (cumulative totals, reported when the reader
collects), so that an operation costs one histogram record, not four synchronous adds; round
trips are on the spans only (a histogram of them would cost another record per operation).

How
---
``instrument`` returns an ``InstrumentedStore``, a ``Store`` over the same shared context (the
same backend, caches and thread pool: the original store stays usable, uninstrumented, and
closing either closes both). Each operation runs on a copy of that context whose backend is a
``Forwarding`` of its own (``_OperationBackend``) that tallies the operation's requests, bytes
and round trips, the way ``gc`` counts its requests: work sent to any thread is counted where
it belongs, and concurrent operations never mix. Writers it makes are ``Session`` objects of
the subclass ``InstrumentedSession``, whose operations do the same around ``Session``'s own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime, timedelta
from operator import add
from typing import Any, TypeVar, cast

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.metrics import MeterProvider, Observation
from opentelemetry.trace import SpanKind, Status, StatusCode, TracerProvider

import evstore

from .._backends import (
    Forwarding,
    IncompleteUpload,
    KeysPage,
    LifecycleRule,
    ListPage,
    ObjectInfo,
    ObjectStore,
    StoredObject,
)
from .._chain import Receipt
from .._codec import Message, Retention
from .._context import DEFAULT_GRACE, StoreContext
from .._fleet import SessionVerdict
from .._retention import GcReport, OnRemove
from .._store import DeleteResult, SessionInfo, Store, VerifyResult
from .._views import Event, Repair
from .._write import Session

__all__ = ["InstrumentedSession", "InstrumentedStore", "instrument"]

T = TypeVar("T")

#: The OpenTelemetry GenAI semantic conventions' attribute for a conversation: the session id.
CONVERSATION_ID = "gen_ai.conversation.id"
#: The request kinds the backend interface knows, in the order ``_OperationBackend`` tallies them.
KINDS = ("PUT", "GET", "HEAD", "LIST", "DELETE")
_PUT, _GET, _HEAD, _LIST, _DELETE = range(len(KINDS))
_KIND_ATTRIBUTES = tuple(f"evstore.requests.{kind.lower()}" for kind in KINDS)
#: ``network.io.direction`` of the bytes ``_Telemetry`` totals: PUT bodies sent, GET bodies received.
_DIRECTIONS = ("transmit", "receive")

#: Histogram buckets: store operations take from microseconds (memory) to minutes (gc of a bucket).
_DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class _OperationBackend(Forwarding):
    """The backend one operation sees: forwards every request to the store's and tallies it.

    Thread-safe (an operation's reads run on the store's pool). ``round_trips`` is the longest
    chain of requests each sent after the previous one answered, kept online: a request sent
    when the deepest answered chain is d is at depth d + 1, and when it answers, the deepest
    answered chain becomes at least that. A request that failed (missing key, taken key, a
    failure the backend gave up on) was still sent, and counts."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.requests = [0] * len(KINDS)
        self.bytes_up = 0
        self.bytes_down = 0
        self.round_trips = 0
        self._lock = threading.Lock()

    def _sent(self) -> int:
        """The depth of a request being sent now (one read of an int, whole under any thread: no lock)."""
        return self.round_trips + 1

    def _answered(self, kind: int, depth: int, *, times: int = 1, up: int = 0, down: int = 0) -> None:
        """A request sent at ``depth`` answered (``times``: the requests of a batch, one after another)."""
        with self._lock:
            self.requests[kind] += times
            self.bytes_up += up
            self.bytes_down += down
            if times:
                self.round_trips = max(self.round_trips, depth + times - 1)

    def create(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None
    ) -> str:
        depth = self._sent()
        try:
            return self.inner.create(key, data, metadata=metadata, tags=tags)
        finally:
            self._answered(_PUT, depth, up=len(data))

    def replace(
        self,
        key: str,
        data: bytes,
        *,
        etag: str,
        metadata: Mapping[str, str] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> str:
        depth = self._sent()
        try:
            return self.inner.replace(key, data, etag=etag, metadata=metadata, tags=tags)
        finally:
            self._answered(_PUT, depth, up=len(data))

    def get(self, key: str, *, max_bytes: int | None = None) -> StoredObject:
        depth = self._sent()
        size = 0
        try:
            found = self.inner.get(key, max_bytes=max_bytes)
            size = len(found.data)
            return found
        finally:
            self._answered(_GET, depth, down=size)

    def head(self, key: str) -> ObjectInfo:
        depth = self._sent()
        try:
            return self.inner.head(key)
        finally:
            self._answered(_HEAD, depth)

    def list_page(self, prefix: str, *, start_after: str = "", max_keys: int = 1000, delimiter: str = "") -> ListPage:
        depth = self._sent()
        try:
            return self.inner.list_page(prefix, start_after=start_after, max_keys=max_keys, delimiter=delimiter)
        finally:
            self._answered(_LIST, depth)

    def list_etags(self, prefix: str, *, start_after: str = "", max_keys: int = 1000) -> KeysPage:
        depth = self._sent()
        try:
            return self.inner.list_etags(prefix, start_after=start_after, max_keys=max_keys)
        finally:
            self._answered(_LIST, depth)

    def delete_many(self, keys: Iterable[str]) -> int:
        depth = self._sent()
        requests = 1  # a failed batch delete sent at least one request
        try:
            requests = self.inner.delete_many(keys)
            return requests
        finally:
            self._answered(_DELETE, depth, times=requests)

    def get_tags(self, key: str) -> dict[str, str]:
        depth = self._sent()
        try:
            return self.inner.get_tags(key)
        finally:
            self._answered(_GET, depth)

    def get_lifecycle(self) -> list[LifecycleRule]:
        depth = self._sent()
        try:
            return self.inner.get_lifecycle()
        finally:
            self._answered(_GET, depth)

    def put_lifecycle(self, rules: list[LifecycleRule]) -> None:
        depth = self._sent()
        try:
            self.inner.put_lifecycle(rules)
        finally:
            self._answered(_PUT, depth)

    def list_incomplete_uploads(self, prefix: str) -> Iterator[IncompleteUpload]:
        depth = self._sent()
        try:
            uploads = list(self.inner.list_incomplete_uploads(prefix))  # read now, so the request is timed
        finally:
            self._answered(_LIST, depth)  # one per 1,000 uploads on S3: counted as one, as Forwarding does
        return iter(uploads)

    def abort_upload(self, key: str, upload_id: str) -> None:
        depth = self._sent()
        try:
            self.inner.abort_upload(key, upload_id)
        finally:
            self._answered(_DELETE, depth)


def _error_type(error: BaseException) -> str:
    """``error.type``: the exception's fully qualified class name, by its public name for evstore's."""
    cls = type(error)
    module = cls.__module__
    if module.startswith("evstore.") and getattr(evstore, cls.__name__, None) is cls:
        module = "evstore"
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def _with_backend(shared: StoreContext, backend: ObjectStore) -> StoreContext:
    """A shallow copy of the store's context with another backend (as ``copy.copy`` makes, for
    a quarter of its cost: this runs once per operation)."""
    bound = object.__new__(type(shared))
    bound.__dict__.update(shared.__dict__)
    bound.backend = backend
    return bound


class _Operation:
    """One operation in flight: its span, its clock, and the context copy its requests go through."""

    __slots__ = ("attributes", "backend", "ctx", "name", "span", "started", "telemetry")

    def __init__(self, telemetry: _Telemetry, name: str, shared: StoreContext, attributes: dict[str, Any]) -> None:
        self.telemetry = telemetry
        self.name = name
        self.backend = _OperationBackend(shared.backend)
        # the store's context with this operation's backend: the same pool, caches, keyring and clock
        # (the pool exists already: ``InstrumentedStore`` made it, so no copy makes one of its own)
        self.ctx = _with_backend(shared, self.backend)
        self.attributes = attributes  # what the span gets when it ends, besides the tallies
        self.span = telemetry.tracer.start_span(f"evstore.{name}", kind=SpanKind.INTERNAL, attributes=attributes)
        self.started = time.perf_counter()

    def facade(self) -> Store:
        """A ``Store`` over this operation's context, to run the facade's own method on."""
        store = Store.__new__(Store)
        store.shared = self.ctx
        return store

    def run(self, call: Callable[[], T]) -> T:
        """``call()`` with the span current (nested instrumentation, such as botocore's, is its child)."""
        token = otel_context.attach(trace.set_span_in_context(self.span))
        try:
            result = call()
        except BaseException as error:
            otel_context.detach(token)
            self.finish(error)
            raise
        otel_context.detach(token)
        return result

    def finish(self, error: BaseException | None, **extra: Any) -> None:
        """End the span and record the metrics: ``ok``, or the outcome of ``error``."""
        elapsed = time.perf_counter() - self.started
        backend = self.backend
        requests = backend.requests
        span = self.span
        outcome = "ok" if error is None else type(error).__name__
        # only what is not zero: each attribute costs the SDK a validation (an append sets 6)
        attributes = {
            "evstore.outcome": outcome,
            "evstore.requests": sum(requests),
            "evstore.round_trips": backend.round_trips,
            **extra,
        }
        for kind, count in enumerate(requests):
            if count:
                attributes[_KIND_ATTRIBUTES[kind]] = count
        if backend.bytes_up:
            attributes["evstore.bytes.up"] = backend.bytes_up
        if backend.bytes_down:
            attributes["evstore.bytes.down"] = backend.bytes_down
        if error is not None:
            attributes["error.type"] = _error_type(error)
            span.set_status(Status(StatusCode.ERROR, outcome))
        span.set_attributes(attributes)
        span.end()
        self.telemetry.record(self.name, outcome, elapsed, backend)


class _Telemetry:
    """The tracer and the instruments of one ``instrument`` call.

    Per operation, only the span and the duration histogram go through OpenTelemetry; the
    counters (operations, requests, bytes) are observable: their totals are plain integers,
    added to under a lock as each operation ends and reported when a reader collects them
    (cumulative, as a counter's sum is). That keeps an append's cost to the span, one
    histogram record and a few additions, where each synchronous ``Counter.add`` of the SDK
    costs about what the rest of a memory append does."""

    def __init__(self, tracer_provider: TracerProvider | None, meter_provider: MeterProvider | None) -> None:
        self.tracer = trace.get_tracer("evstore", evstore.__version__, tracer_provider=tracer_provider)
        meter = metrics.get_meter("evstore", evstore.__version__, meter_provider=meter_provider)
        self.duration = meter.create_histogram(
            "evstore.operation.duration",
            unit="s",
            description="Duration of evstore store operations (its count: the operations, by outcome)",
            explicit_bucket_boundaries_advisory=list(_DURATION_BUCKETS),
        )
        self._lock = threading.Lock()
        # the totals, added to as each operation ends; attribute sets are made when a reader collects
        self._operations: dict[tuple[str, str], list[Any]] = {}  # (operation, outcome) -> [attributes, total]
        self._requests: dict[str, list[int]] = {}  # operation -> requests by kind, in KINDS order
        self._io: dict[str, list[int]] = {}  # operation -> [bytes transmitted (PUT), received (GET)]
        meter.create_observable_counter(
            "evstore.operations",
            callbacks=[lambda _: self._observe_operations()],
            unit="{operation}",
            description="evstore store operations finished",
        )
        meter.create_observable_counter(
            "evstore.requests",
            callbacks=[lambda _: self._observe_by(self._requests, "evstore.request.kind", KINDS)],
            unit="{request}",
            description="Requests evstore sent to the object store",
        )
        meter.create_observable_counter(
            "evstore.io",
            callbacks=[lambda _: self._observe_by(self._io, "network.io.direction", _DIRECTIONS)],
            unit="By",
            description="Object bodies evstore sent (PUT) and received (GET)",
        )

    def begin(
        self, name: str, shared: StoreContext, session_id: str | None, attributes: Mapping[str, Any] | None = None
    ) -> _Operation:
        start: dict[str, Any] = {} if session_id is None else {CONVERSATION_ID: session_id}
        if attributes:
            start.update(attributes)
        return _Operation(self, name, shared, start)

    def record(self, name: str, outcome: str, elapsed: float, backend: _OperationBackend) -> None:
        with self._lock:
            operation = self._operations.get((name, outcome))
            if operation is None:
                operation = self._operations[(name, outcome)] = [{"evstore.operation": name, "evstore.outcome": outcome}, 0]
            operation[1] += 1
            requests = self._requests.get(name)
            if requests is None:
                requests = self._requests[name] = [0] * len(KINDS)
            requests[:] = map(add, requests, backend.requests)
            io = self._io.get(name)
            if io is None:
                io = self._io[name] = [0, 0]
            io[0] += backend.bytes_up
            io[1] += backend.bytes_down
        self.duration.record(elapsed, operation[0])

    def _observe_operations(self) -> list[Observation]:
        with self._lock:
            return [Observation(total, attributes) for attributes, total in self._operations.values()]

    def _observe_by(self, totals: dict[str, list[int]], attribute: str, names: tuple[str, ...]) -> list[Observation]:
        """A point per operation and ``attribute`` (one of ``names``, by position) that has a total."""
        with self._lock:
            found = [(name, list(values)) for name, values in totals.items()]
        return [
            Observation(total, {"evstore.operation": name, attribute: names[index]})
            for name, values in found
            for index, total in enumerate(values)
            if total
        ]


class _Stream(Iterator[T]):
    """A stream's items with its operation around them: the span ends at the stream's end, its
    error, ``close()``, or when the stream is collected unfinished (``evstore.stream.complete``
    says which). The operation's context goes with the inner stream, so its requests are its own."""

    def __init__(self, operation: _Operation, inner: Iterator[T]) -> None:
        self._operation: _Operation | None = operation
        self._inner = inner
        self._items = 0

    def __iter__(self) -> _Stream[T]:
        return self

    def __next__(self) -> T:
        if self._operation is None:
            raise StopIteration
        try:
            item = next(self._inner)
        except StopIteration:
            self._end(None, complete=True)
            raise
        except BaseException as error:
            self._end(error, complete=False)
            raise
        self._items += 1
        return item

    def close(self) -> None:
        """Stop reading: the inner stream is closed (its reads in flight are dropped) and the span ends."""
        if self._operation is None:
            return
        close = getattr(self._inner, "close", None)
        try:
            if close is not None:
                close()
        finally:
            self._end(None, complete=False)

    def __del__(self) -> None:
        self.close()

    def _end(self, error: BaseException | None, *, complete: bool) -> None:
        operation, self._operation = self._operation, None
        if operation is not None:
            operation.finish(error, **{"evstore.events": self._items, "evstore.stream.complete": complete})


class InstrumentedSession(Session):
    """A ``Session`` (the same writer, the same state) whose operations are spanned and
    counted; made by an ``InstrumentedStore``, never directly."""

    _telemetry: _Telemetry

    def _run(
        self, name: str, call: Callable[[], T], *, seq_result: bool = False, attributes: Mapping[str, Any] | None = None
    ) -> T:
        base = self._ctx
        operation = self._telemetry.begin(name, base, self.id, attributes)
        self._ctx = operation.ctx  # a writer is used by one thread at a time: the swap is its own
        try:
            result = operation.run(call)
        finally:
            self._ctx = base
        if seq_result and isinstance(result, int):
            operation.finish(None, **{"evstore.seq": result})
        else:
            operation.finish(None)
        return result

    def append(
        self, message: Message | Iterable[Message], *, expected_head: int | None = None, idempotency_key: str | None = None
    ) -> int:
        return self._run(
            "append",
            lambda: Session.append(self, message, expected_head=expected_head, idempotency_key=idempotency_key),
            seq_result=True,
        )

    def rewind(self, to_seq: int, *, keep: int | None = None, expected_head: int | None = None) -> int:
        return self._run("rewind", lambda: Session.rewind(self, to_seq, keep=keep, expected_head=expected_head), seq_result=True)

    def pop(self) -> Message | None:
        return self._run("pop", lambda: Session.pop(self))

    def clear(self) -> int:
        return self._run("clear", lambda: Session.clear(self), seq_result=True)

    def fork(self, target: str, *, retention: Retention | None = None) -> Session:
        writer = self._run(
            "fork", lambda: Session.fork(self, target, retention=retention), attributes={"evstore.fork.target": target}
        )
        return _adopt(writer, self._ctx, self._telemetry)

    def catch_up(self) -> list[Event]:
        base = self._ctx
        operation = self._telemetry.begin("catch_up", base, self.id)
        self._ctx = operation.ctx
        try:
            events = operation.run(lambda: Session.catch_up(self))
        finally:
            self._ctx = base
        operation.finish(None, **{"evstore.events": len(events)})
        return events

    def refresh(self) -> int:
        return self._run("refresh", lambda: Session.refresh(self))


def _adopt(writer: Session, shared: StoreContext, telemetry: _Telemetry) -> InstrumentedSession:
    """The writer an operation made, moved off the operation's context onto the store's and
    instrumented: an ``InstrumentedSession`` (a ``Session`` subclass with no state of its own
    but the telemetry), so it stays what callers check for."""
    writer._ctx = shared
    writer.__class__ = InstrumentedSession
    instrumented = cast(InstrumentedSession, writer)
    instrumented._telemetry = telemetry
    return instrumented


class InstrumentedStore(Store):
    """A ``Store`` whose operations are spanned and counted (see the module): made by ``instrument``.

    It shares the instrumented store's context (backend, caches, thread pool, configuration)."""

    def __init__(self, store: Store, telemetry: _Telemetry) -> None:  # no Store.__init__: the context exists
        self.shared = store.shared
        self.shared.executor()  # made now, so that each operation's copy of the context shares it
        self._telemetry = telemetry

    def _run(
        self, name: str, session_id: str | None, call: Callable[[Store], T], attributes: Mapping[str, Any] | None = None
    ) -> T:
        operation = self._telemetry.begin(name, self.shared, session_id, attributes)
        facade = operation.facade()
        result = operation.run(lambda: call(facade))
        operation.finish(None)
        return result

    def _stream(self, name: str, session_id: str | None, call: Callable[[Store], Iterator[T]]) -> Iterator[T]:
        operation = self._telemetry.begin(name, self.shared, session_id)
        facade = operation.facade()
        return _Stream(operation, operation.run(lambda: call(facade)))

    def _writer(self, writer: Session) -> InstrumentedSession:
        return _adopt(writer, self.shared, self._telemetry)

    # ---- reading ------------------------------------------------------------

    def replay(self, session_id: str, *, start: int = 1, end: int | None = None) -> Iterator[Event]:
        return self._stream("replay", session_id, lambda store: store.replay(session_id, start=start, end=end))

    def context(self, session_id: str, *, repair: Repair = "error") -> list[Message]:
        return self._run("context", session_id, lambda store: store.context(session_id, repair=repair))

    def info(self, session_id: str) -> SessionInfo:
        return self._run("info", session_id, lambda store: store.info(session_id))

    # ---- writing ------------------------------------------------------------

    def create(self, session_id: str, *, retention: Retention = "permanent") -> Session:
        return self._writer(self._run("create", session_id, lambda store: store.create(session_id, retention=retention)))

    def open(
        self, session_id: str, *, create: bool = False, retention: Retention = "permanent", recreate: bool = True
    ) -> Session:
        writer = self._run(
            "open",
            session_id,
            lambda store: store.open(session_id, create=create, retention=retention, recreate=recreate),
        )
        return self._writer(writer)

    def resume(
        self, session_id: str, *, create: bool = False, retention: Retention = "permanent", repair: Repair = "error"
    ) -> tuple[Session, list[Message]]:
        writer, context = self._run(
            "resume",
            session_id,
            lambda store: store.resume(session_id, create=create, retention=retention, repair=repair),
        )
        return self._writer(writer), context

    def fork(self, source: str, target: str, *, at: int | None = None, retention: Retention | None = None) -> Session:
        writer = self._run(
            "fork",
            source,
            lambda store: store.fork(source, target, at=at, retention=retention),
            {"evstore.fork.target": target},
        )
        return self._writer(writer)

    def compact(self, session_id: str, *, segment_size: int = 1000) -> list[tuple[int, int]]:
        return self._run("compact", session_id, lambda store: store.compact(session_id, segment_size=segment_size))

    # ---- deletion, audit, retention -------------------------------------------

    def delete(self, session_id: str) -> DeleteResult:
        return self._run("delete", session_id, lambda store: store.delete(session_id))

    def verify(self, session_id: str, *, expect: Receipt | None = None) -> VerifyResult:
        return self._run("verify", session_id, lambda store: store.verify(session_id, expect=expect))

    def verify_all(self, *, prefix: str = "", since: datetime | None = None, start_after: str = "") -> Iterator[SessionVerdict]:
        return self._stream(
            "verify_all", None, lambda store: store.verify_all(prefix=prefix, since=since, start_after=start_after)
        )

    def gc(
        self,
        *,
        dry_run: bool = False,
        grace: timedelta = DEFAULT_GRACE,
        apply_lifecycle: bool = False,
        keep: int | None = None,
        prefix: str = "",
        now: datetime | None = None,
        on_remove: OnRemove | None = None,
    ) -> GcReport:
        return self._run(
            "gc",
            None,
            lambda store: store.gc(
                dry_run=dry_run,
                grace=grace,
                apply_lifecycle=apply_lifecycle,
                keep=keep,
                prefix=prefix,
                now=now,
                on_remove=on_remove,
            ),
        )


def instrument(
    store: Store, *, tracer_provider: TracerProvider | None = None, meter_provider: MeterProvider | None = None
) -> InstrumentedStore:
    """``store`` with its operations spanned and measured (see the module): an
    ``InstrumentedStore`` over the same backend, caches and pool. The providers default to
    OpenTelemetry's global ones. Instrumenting an instrumented store instruments its store once,
    with the new providers (spans never nest store in store)."""
    return InstrumentedStore(store, _Telemetry(tracer_provider, meter_provider))
