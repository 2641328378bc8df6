"""One operation in flight: its span, its clock and the copy of the store's context its requests
go through (``Operation``); a stream's items with its operation around them (``Stream``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from ..._backends import ObjectStore
from ..._context import StoreContext
from ..._store import Store
from ._backend import OperationBackend
from ._names import CONVERSATION_ID, finished_attributes
from ._telemetry import Telemetry

T = TypeVar("T")


def begin(
    telemetry: Telemetry, name: str, shared: StoreContext, session_id: str | None, attributes: Mapping[str, Any] | None = None
) -> Operation:
    """An operation of ``telemetry`` begun: its span started with the session id and ``attributes``."""
    start: dict[str, Any] = {} if session_id is None else {CONVERSATION_ID: session_id}
    if attributes:
        start.update(attributes)
    return Operation(telemetry, name, shared, start)


def with_backend(shared: StoreContext, backend: ObjectStore) -> StoreContext:
    """A shallow copy of the store's context with another backend (as ``copy.copy`` makes, for
    a quarter of its cost: this runs once per operation)."""
    bound = object.__new__(type(shared))
    bound.__dict__.update(shared.__dict__)
    bound.backend = backend
    return bound


class Operation:
    """One operation in flight: its span, its clock, and the context copy its requests go through."""

    __slots__ = ("attributes", "backend", "ctx", "name", "span", "started", "telemetry")

    def __init__(self, telemetry: Telemetry, name: str, shared: StoreContext, attributes: dict[str, Any]) -> None:
        self.telemetry = telemetry
        self.name = name
        self.backend = OperationBackend(shared.backend)
        # the store's context with this operation's backend: the same pool, caches, keyring and clock
        # (the pool exists already: ``InstrumentedStore`` made it, so no copy makes one of its own)
        self.ctx = with_backend(shared, self.backend)
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
        span = self.span
        outcome = "ok" if error is None else type(error).__name__
        attributes = finished_attributes(
            outcome, error, backend.requests, backend.round_trips, backend.bytes_up, backend.bytes_down, extra
        )
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, outcome))
        span.set_attributes(attributes)
        span.end()
        self.telemetry.record(self.name, outcome, elapsed, backend)


class Stream(Iterator[T]):
    """A stream's items with its operation around them: the span ends at the stream's end, its
    error, ``close()``, or when the stream is collected unfinished (``evstore.stream.complete``
    says which). The operation's context goes with the inner stream, so its requests are its own."""

    def __init__(self, operation: Operation, inner: Iterator[T]) -> None:
        self._operation: Operation | None = operation
        self._inner = inner
        self._items = 0

    def __iter__(self) -> Stream[T]:
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
