"""The writers an ``InstrumentedStore`` makes: ``InstrumentedSession``, a ``Session`` whose
operations are spanned and counted around ``Session``'s own."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar, cast

from ..._codec import Message, Retention
from ..._context import StoreContext
from ..._views import Event
from ..._write import Session
from ._operation import begin
from ._telemetry import Telemetry

T = TypeVar("T")


class InstrumentedSession(Session):
    """A ``Session`` (the same writer, the same state) whose operations are spanned and
    counted; made by an ``InstrumentedStore``, never directly."""

    _telemetry: Telemetry

    def _run(
        self, name: str, call: Callable[[], T], *, seq_result: bool = False, attributes: Mapping[str, Any] | None = None
    ) -> T:
        base = self._ctx
        operation = begin(self._telemetry, name, base, self.id, attributes)
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
        return adopt(writer, self._ctx, self._telemetry)

    def catch_up(self) -> list[Event]:
        base = self._ctx
        operation = begin(self._telemetry, "catch_up", base, self.id)
        self._ctx = operation.ctx
        try:
            events = operation.run(lambda: Session.catch_up(self))
        finally:
            self._ctx = base
        operation.finish(None, **{"evstore.events": len(events)})
        return events

    def refresh(self) -> int:
        return self._run("refresh", lambda: Session.refresh(self))


def adopt(writer: Session, shared: StoreContext, telemetry: Telemetry) -> InstrumentedSession:
    """The writer an operation made, moved off the operation's context onto the store's and
    instrumented: an ``InstrumentedSession`` (a ``Session`` subclass with no state of its own
    but the telemetry), so it stays what callers check for."""
    writer._ctx = shared
    writer.__class__ = InstrumentedSession
    instrumented = cast(InstrumentedSession, writer)
    instrumented._telemetry = telemetry
    return instrumented
