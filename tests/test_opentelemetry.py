"""The OpenTelemetry extra (``evstore.integrations.opentelemetry``): a span and metrics per
operation, with the operation's own requests, bytes and round trips; errors as error spans;
no message content anywhere; nothing at all for a store that was not instrumented."""

from __future__ import annotations

import asyncio
import gc
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import evstore
from benchmarks._scale_backend import Recorder
from evstore import MemoryStore, Session, SessionNotFoundError, Store, WriteConflictError
from evstore.integrations.opentelemetry import KINDS, InstrumentedSession, InstrumentedStore, instrument

from .helpers import CountingStore, msg, python_output

MARKER = "zq-secret-content-7731"  # in every message these tests write; never in any telemetry


@dataclass
class Telemetry:
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def only(self, name: str) -> ReadableSpan:
        found = [s for s in self.finished() if s.name == name]
        assert len(found) == 1, [s.name for s in self.finished()]
        return found[0]

    def points(self, metric: str) -> list[Any]:
        data = self.metrics.get_metrics_data()
        assert data is not None
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for m in scope.metrics
            if m.name == metric
            for point in m.data.data_points
        ]


@pytest.fixture
def telemetry(monkeypatch: pytest.MonkeyPatch) -> Iterator[Telemetry]:
    # the SDK reads OTEL_SDK_DISABLED as a provider is made; tests/test_strands.py sets it for the run
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    yield Telemetry(spans, reader, tracer_provider, meter_provider)
    tracer_provider.shutdown()
    meter_provider.shutdown()


def instrumented(store: Store, telemetry: Telemetry) -> InstrumentedStore:
    return instrument(store, tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider)


def requests_of(span: ReadableSpan) -> dict[str, int]:
    attributes = span.attributes or {}
    return {kind: int(attributes.get(f"evstore.requests.{kind.lower()}", 0)) for kind in KINDS}  # absent: none


# Each operation as the tests drive it: (span name, session id on the span, the call). The store
# holds session "s" of 3 events (and writer ``w`` at its head) before each runs.
Action = Callable[[InstrumentedStore, Session], object]
OPERATIONS: list[tuple[str, str | None, Action]] = [
    ("open", "s", lambda store, w: store.open("s")),
    ("create", "new", lambda store, w: store.create("new")),
    ("resume", "s", lambda store, w: store.resume("s")),
    ("fork", "s", lambda store, w: store.fork("s", "s-fork", at=2)),
    ("replay", "s", lambda store, w: list(store.replay("s"))),
    ("context", "s", lambda store, w: store.context("s")),
    ("info", "s", lambda store, w: store.info("s")),
    ("compact", "s", lambda store, w: store.compact("s", segment_size=2)),
    ("delete", "s", lambda store, w: store.delete("s")),
    ("gc", None, lambda store, w: store.gc()),
    ("verify", "s", lambda store, w: store.verify("s")),
    ("verify_all", None, lambda store, w: list(store.verify_all())),
    ("append", "s", lambda store, w: w.append(msg(f"more {MARKER}"))),
    ("rewind", "s", lambda store, w: w.rewind(1)),
    ("pop", "s", lambda store, w: w.pop()),
    ("clear", "s", lambda store, w: w.clear()),
    ("fork", "s", lambda store, w: w.fork("w-fork")),
    ("catch_up", "s", lambda store, w: w.catch_up()),
    ("refresh", "s", lambda store, w: w.refresh()),
]


@pytest.mark.parametrize(("name", "session_id", "action"), OPERATIONS, ids=[f"{i}-{op[0]}" for i, op in enumerate(OPERATIONS)])
def test_each_operation_is_one_span_with_its_name_session_and_exactly_its_requests(
    telemetry: Telemetry, name: str, session_id: str | None, action: Action
) -> None:
    counting = CountingStore(MemoryStore())
    store = instrumented(Store(counting), telemetry)
    writer = store.create("s")
    for i in range(3):
        writer.append(msg(f"event {i} {MARKER}"))
    telemetry.spans.clear()
    counting.reset()

    action(store, writer)

    (span,) = telemetry.finished()
    attributes = span.attributes or {}
    assert span.name == f"evstore.{name}"
    assert attributes.get("gen_ai.conversation.id") == session_id
    assert attributes["evstore.outcome"] == "ok"
    assert span.status.status_code is StatusCode.UNSET
    # the span's requests are the backend's, kind by kind: none lost on the pool's threads
    assert requests_of(span) == {kind: counting.counts[kind] for kind in KINDS}
    assert attributes["evstore.requests"] == counting.total
    assert 1 <= attributes["evstore.round_trips"] <= counting.total


def test_an_append_on_a_memory_store_is_one_put_of_its_bytes(telemetry: Telemetry) -> None:
    recorder = Recorder(MemoryStore())
    store = instrumented(Store(recorder), telemetry)
    writer = store.open("chat", create=True)
    recorder.reset()
    assert writer.append(msg(f"hello {MARKER}")) == 1

    span = telemetry.finished()[-1]
    attributes = span.attributes or {}
    assert span.name == "evstore.append"
    assert requests_of(span) == {"PUT": 1, "GET": 0, "HEAD": 0, "LIST": 0, "DELETE": 0}
    assert attributes["evstore.round_trips"] == 1
    assert attributes["evstore.bytes.up"] == recorder.counts().up > 0
    assert "evstore.bytes.down" not in attributes  # what is zero is left out
    assert attributes["evstore.seq"] == 1


def test_requests_bytes_and_round_trips_match_a_recorder_of_a_slow_backend(telemetry: Telemetry) -> None:
    # 10 ms a request: requests sent side by side overlap, so round trips fall below requests
    recorder = Recorder(MemoryStore(), delay=0.01)
    store = instrumented(Store(recorder, auto_compact=None), telemetry)
    writer = store.create("slow")
    for i in range(12):
        writer.append(msg(f"event {i} {MARKER}"))
    for name, call in [
        ("resume", lambda: store.resume("slow")),
        ("replay", lambda: list(store.replay("slow"))),
        ("verify", lambda: store.verify("slow")),
    ]:
        recorder.reset()
        telemetry.spans.clear()
        call()
        counts = recorder.counts()
        attributes = telemetry.only(f"evstore.{name}").attributes or {}
        assert attributes["evstore.requests"] == counts.total, name
        assert attributes.get("evstore.bytes.up", 0) == counts.up, name
        assert attributes["evstore.bytes.down"] == counts.get_bytes > 0, name
        assert attributes["evstore.round_trips"] == counts.chain, name
        assert counts.chain < counts.total, name  # the GETs went side by side, on the store's pool


def test_a_failed_operation_is_an_error_span_with_its_outcome(telemetry: Telemetry) -> None:
    store = instrumented(Store(MemoryStore()), telemetry)
    with pytest.raises(SessionNotFoundError):
        store.open("missing")
    span = telemetry.only("evstore.open")
    attributes = span.attributes or {}
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "SessionNotFoundError"
    assert attributes["evstore.outcome"] == "SessionNotFoundError"
    assert attributes["error.type"] == "evstore.SessionNotFoundError"
    assert attributes["gen_ai.conversation.id"] == "missing"
    assert attributes["evstore.requests"] > 0  # the reads that found nothing
    assert not span.events  # the exception is not recorded: its message may quote what it refused

    first, second = store.create("race"), store.open("race")
    first.append(msg("one"))
    telemetry.spans.clear()
    with pytest.raises(WriteConflictError):
        second.append(msg("two"))
    span = telemetry.only("evstore.append")
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})["evstore.outcome"] == "WriteConflictError"

    stream = store.replay("missing-too")  # a stream fails as it is read
    with pytest.raises(SessionNotFoundError):
        list(stream)
    span = telemetry.only("evstore.replay")
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})["evstore.stream.complete"] is False

    errors = [p for p in telemetry.points("evstore.operations") if p.attributes["evstore.outcome"] != "ok"]
    assert {(p.attributes["evstore.operation"], p.attributes["evstore.outcome"], p.value) for p in errors} == {
        ("open", "SessionNotFoundError", 1),
        ("append", "WriteConflictError", 1),
        ("replay", "SessionNotFoundError", 1),
    }


def test_no_message_content_appears_in_any_span_or_metric(telemetry: Telemetry) -> None:
    store = instrumented(Store(MemoryStore(), max_event_bytes=2_000), telemetry)
    writer = store.create(f"chat-{len(MARKER)}")
    call = {"id": "c1", "type": "function", "function": {"name": f"tool_{MARKER}", "arguments": f'{{"q": "{MARKER}"}}'}}
    writer.append(msg(f"question {MARKER}"))
    writer.append([msg("", role="assistant", tool_calls=[call]), msg(MARKER, role="tool", tool_call_id="c1")])
    with pytest.raises(evstore.InvalidInputError):
        writer.append(msg(MARKER * 200))  # refused, over max_event_bytes
    list(store.replay(writer.id))
    store.context(writer.id)
    _, context = store.resume(writer.id)
    assert any(MARKER in str(m) for m in context)  # the content is there, for the caller only
    writer.pop()
    assert len(telemetry.finished()) == 8

    seen: list[str] = []
    for span in telemetry.finished():
        seen += [span.name, str(span.status.description)]
        seen += [f"{k}={v}" for k, v in (span.attributes or {}).items()]
        seen += [str(event.attributes) for event in span.events]
    data = telemetry.metrics.get_metrics_data()
    assert data is not None
    seen.append(data.to_json())
    assert not [text for text in seen if MARKER in text]


def test_metrics_count_operations_durations_requests_and_bytes(telemetry: Telemetry) -> None:
    store = instrumented(Store(MemoryStore()), telemetry)
    writer = store.open("m", create=True)
    for i in range(5):
        writer.append(msg(f"event {i}"))
    list(store.replay("m"))
    spans = telemetry.finished()

    operations = {
        (p.attributes["evstore.operation"], p.attributes["evstore.outcome"]): p.value
        for p in telemetry.points("evstore.operations")
    }
    assert operations == {("open", "ok"): 1, ("append", "ok"): 5, ("replay", "ok"): 1}
    durations = {p.attributes["evstore.operation"]: p for p in telemetry.points("evstore.operation.duration")}
    assert durations["append"].count == 5 and durations["append"].sum > 0
    assert durations["append"].attributes == {"evstore.operation": "append", "evstore.outcome": "ok"}
    every = ["evstore.operation.duration", "evstore.operations", "evstore.requests", "evstore.io"]
    for point in [point for metric in every for point in telemetry.points(metric)]:
        assert "gen_ai.conversation.id" not in point.attributes  # no series per session

    requests = Counter[tuple[str, str]]()
    for span in spans:
        for kind, count in requests_of(span).items():
            if count:
                requests[(span.name.removeprefix("evstore."), kind)] += count
    metric = {
        (p.attributes["evstore.operation"], p.attributes["evstore.request.kind"]): p.value
        for p in telemetry.points("evstore.requests")
    }
    assert metric == dict(requests)
    assert metric[("append", "PUT")] == 5

    io = {
        (p.attributes["evstore.operation"], p.attributes["network.io.direction"]): p.value for p in telemetry.points("evstore.io")
    }
    up = sum(int((s.attributes or {}).get("evstore.bytes.up", 0)) for s in spans if s.name == "evstore.append")
    assert io[("append", "transmit")] == up > 0
    assert io[("replay", "receive")] == (telemetry.only("evstore.replay").attributes or {})["evstore.bytes.down"]


def test_writers_of_an_instrumented_store_are_sessions_and_spanned(telemetry: Telemetry) -> None:
    store = instrumented(Store(MemoryStore()), telemetry)
    made = [store.create("a"), store.open("a"), store.resume("a")[0]]
    made[0].append(msg("x"))
    made += [store.fork("a", "b"), made[0].fork("c")]
    for writer in made:
        assert isinstance(writer, Session) and isinstance(writer, InstrumentedSession)
    telemetry.spans.clear()
    for writer in made[1:]:
        writer.refresh()
    for writer in made[3:]:
        writer.append(msg("y"))
    names = Counter(span.name for span in telemetry.finished())
    assert names == {"evstore.refresh": 4, "evstore.append": 2}
    parent = store.info("c").parent
    assert parent is not None and parent.sid == "a"


def test_spans_are_children_of_the_callers_span_sync_and_async(telemetry: Telemetry) -> None:
    store = instrumented(Store(MemoryStore()), telemetry)
    tracer = telemetry.tracer_provider.get_tracer("agent")
    with tracer.start_as_current_span("turn") as turn:
        store.open("p", create=True).append(msg("hi"))

    async def in_a_task() -> None:
        async with evstore.AsyncStore(store) as astore:
            with tracer.start_as_current_span("async turn"):
                session = await astore.open("p")
                await session.append(msg("again"))

    asyncio.run(in_a_task())
    parents = {span.name: span.parent.span_id if span.parent else None for span in telemetry.finished()}
    spans = telemetry.finished()
    first_append = next(s for s in spans if s.name == "evstore.append")
    assert first_append.parent is not None and first_append.parent.span_id == turn.get_span_context().span_id
    async_turn = telemetry.only("async turn")
    async_spans = [s for s in spans if s.start_time > async_turn.start_time and s.name.startswith("evstore.")]
    assert [s.name for s in async_spans] == ["evstore.open", "evstore.append"]
    assert all(s.parent is not None and s.parent.span_id == async_turn.context.span_id for s in async_spans), parents


def test_a_stream_read_in_part_ends_its_span_when_closed_or_dropped(telemetry: Telemetry) -> None:
    store = instrumented(Store(MemoryStore()), telemetry)
    writer = store.create("long")
    for i in range(6):
        writer.append(msg(f"event {i}"))
    telemetry.spans.clear()

    stream = store.replay("long")
    next(stream)
    stream.close()
    attributes = telemetry.only("evstore.replay").attributes or {}
    assert attributes["evstore.events"] == 1 and attributes["evstore.stream.complete"] is False
    assert attributes["evstore.outcome"] == "ok"

    telemetry.spans.clear()
    dropped = store.replay("long")
    next(dropped)
    del dropped
    gc.collect()
    assert (telemetry.only("evstore.replay").attributes or {})["evstore.events"] == 1

    telemetry.spans.clear()
    assert len(list(store.replay("long", start=3))) == 4
    attributes = telemetry.only("evstore.replay").attributes or {}
    assert attributes["evstore.events"] == 4 and attributes["evstore.stream.complete"] is True


def test_concurrent_operations_each_count_only_their_own_requests(telemetry: Telemetry) -> None:
    counting = CountingStore(MemoryStore())
    store = instrumented(Store(counting, auto_compact=None), telemetry)
    writers = [store.create(f"t{i}") for i in range(4)]
    telemetry.spans.clear()
    counting.reset()
    barrier = threading.Barrier(len(writers) + 1)

    def work(writer: Session) -> None:
        barrier.wait()
        for i in range(25):
            writer.append(msg(f"event {i}"))
        list(store.replay(writer.id))

    threads = [threading.Thread(target=work, args=(w,)) for w in writers]
    for thread in threads:
        thread.start()
    barrier.wait()
    for thread in threads:
        thread.join()
    spans = telemetry.finished()
    appends = [s for s in spans if s.name == "evstore.append"]
    assert len(appends) == 100 and all(requests_of(s) == {"PUT": 1, "GET": 0, "HEAD": 0, "LIST": 0, "DELETE": 0} for s in appends)
    replays = [s for s in spans if s.name == "evstore.replay"]
    assert all((s.attributes or {})["evstore.events"] == 25 for s in replays)
    assert sum(int((s.attributes or {})["evstore.requests"]) for s in spans) == counting.total


def test_gc_counts_the_requests_its_report_names(telemetry: Telemetry) -> None:
    store = instrumented(Store(MemoryStore()), telemetry)
    for i in range(3):
        store.create(f"g{i}").append(msg("x"))
    store.delete("g1")
    telemetry.spans.clear()
    report = store.gc(grace=timedelta(0))
    assert (telemetry.only("evstore.gc").attributes or {})["evstore.requests"] == report.requests


def test_a_store_that_was_not_instrumented_makes_no_span(telemetry: Telemetry) -> None:
    plain = Store(MemoryStore())
    instrumented(plain, telemetry)  # an instrumented store over the same context...
    writer = plain.create("quiet")  # ...leaves the store itself as it was
    writer.append(msg("hi"))
    list(plain.replay("quiet"))
    plain.verify("quiet")
    assert type(writer) is Session
    assert telemetry.finished() == []
    data = telemetry.metrics.get_metrics_data()
    assert data is None or not telemetry.points("evstore.operations")


def test_evstore_without_the_extra_imports_no_opentelemetry() -> None:
    code = (
        "import sys, evstore\n"
        "store = evstore.open_store('memory://')\n"
        "store.create('x').append({'role': 'user', 'content': 'hi'})\n"
        "list(store.replay('x'))\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry') or m == 'evstore.integrations.opentelemetry'))\n"
    )
    assert python_output(code) == "[]"


def test_instrumenting_an_instrumented_store_does_not_nest_spans(telemetry: Telemetry) -> None:
    store = instrumented(instrumented(Store(MemoryStore()), telemetry), telemetry)
    store.create("once").append(msg("hi"))
    assert [s.name for s in telemetry.finished()] == ["evstore.create", "evstore.append"]


def test_every_backend_counts_the_requests_it_was_sent(telemetry: Telemetry, backend: evstore.ObjectStore) -> None:
    # memory, a local directory, moto in process and moto's HTTP server: the same tallies as a counter
    counting = CountingStore(backend)
    store = instrumented(Store(counting), telemetry)
    writer = store.create("any")
    for i in range(5):
        writer.append(msg(f"event {i}"))
    for name, call in [
        ("resume", lambda: store.resume("any")),
        ("replay", lambda: list(store.replay("any"))),
        ("verify", lambda: store.verify("any")),
    ]:
        counting.reset()
        telemetry.spans.clear()
        call()
        span = telemetry.only(f"evstore.{name}")
        assert requests_of(span) == {kind: counting.counts[kind] for kind in KINDS}, name
        assert (span.attributes or {})["evstore.bytes.down"] > 0, name
