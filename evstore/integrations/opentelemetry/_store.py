"""``instrument`` and the store it returns: ``InstrumentedStore``, a ``Store`` over the same shared
context whose operations are spanned and counted, each run on the facade's own method."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar

from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider

from ..._chain import Receipt
from ..._codec import Message, Retention
from ..._context import DEFAULT_GRACE
from ..._fleet import SessionVerdict
from ..._retention import GcReport, OnRemove
from ..._store import DeleteResult, SessionInfo, Store, VerifyResult
from ..._views import Event, Repair
from ..._write import Session
from ._operation import Stream, begin
from ._session import InstrumentedSession, adopt
from ._telemetry import Telemetry

T = TypeVar("T")


class InstrumentedStore(Store):
    """A ``Store`` whose operations are spanned and counted (see the package docstring): made by ``instrument``.

    It shares the instrumented store's context (backend, caches, thread pool, configuration)."""

    def __init__(self, store: Store, telemetry: Telemetry) -> None:  # no Store.__init__: the context exists
        self.shared = store.shared
        self.shared.executor()  # made now, so that each operation's copy of the context shares it
        self._telemetry = telemetry

    def _run(
        self, name: str, session_id: str | None, call: Callable[[Store], T], attributes: Mapping[str, Any] | None = None
    ) -> T:
        operation = begin(self._telemetry, name, self.shared, session_id, attributes)
        facade = operation.facade()
        result = operation.run(lambda: call(facade))
        operation.finish(None)
        return result

    def _stream(self, name: str, session_id: str | None, call: Callable[[Store], Iterator[T]]) -> Iterator[T]:
        operation = begin(self._telemetry, name, self.shared, session_id)
        facade = operation.facade()
        return Stream(operation, operation.run(lambda: call(facade)))

    def _writer(self, writer: Session) -> InstrumentedSession:
        return adopt(writer, self.shared, self._telemetry)

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
    """``store`` with its operations spanned and measured (see the package docstring): an
    ``InstrumentedStore`` over the same backend, caches and pool. The providers default to
    OpenTelemetry's global ones. Instrumenting an instrumented store instruments its store once,
    with the new providers (spans never nest store in store)."""
    return InstrumentedStore(store, Telemetry(tracer_provider, meter_provider))
