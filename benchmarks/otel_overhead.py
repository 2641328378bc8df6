"""By hand: what the OpenTelemetry extra adds to an append.

    PYTHONPATH=$PWD python benchmarks/otel_overhead.py [--appends 2000] [--rounds 7]
        [--slow-appends 200] [--delay 0.005]

Each round appends to a fresh session of a fresh store once per configuration, in turn, so that
the configurations share the machine's drift (interleaved rounds):

* ``plain``: a ``Store`` that was not instrumented;
* ``sdk``: ``instrument(store)`` with the OpenTelemetry SDK's providers, as an application
  would configure them: a ``TracerProvider`` with a ``BatchSpanProcessor`` (to an exporter that
  drops what it is given: the export is the application's cost, not evstore's) and a
  ``MeterProvider`` whose reader collects on demand (every instrument still records);
* ``noop``: ``instrument(store)`` with the API's no-op providers (the extra installed, no SDK);
* ``floor``: a plain ``Store`` whose appends the benchmark wraps by hand in what the SDK is
  asked for per append, the least any instrumentation that spans each append pays: a span with
  the same attributes, made current while the append runs, and one histogram record, with the
  same providers as ``sdk``. ``sdk`` minus ``floor`` is evstore's own part.

Over two backends: a ``MemoryStore`` (an append is tens of microseconds of CPU: the worst case
for a ratio) and the same behind ``benchmarks/_scale_backend.Recorder`` with ``--delay``
seconds per request (5 ms: a fast S3 round trip). It prints each round's microseconds per
append, then per backend the median of the rounds' ratios to ``plain`` and the median added
microseconds per append. With a delay, the sleep's own jitter is of the order of the overhead,
so the ratio there is noisy; the memory figure, in microseconds, over the delay, bounds it too.
A measurement, not a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind

from benchmarks._scale_backend import Recorder
from evstore import MemoryStore, ObjectStore, Session, Store
from evstore.integrations.opentelemetry import instrument

MESSAGE = {"role": "user", "content": "x" * 200}


class Dropping(SpanExporter):
    """Accepts every batch and keeps nothing."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


Append = Callable[[Session], int]


def plain_append(writer: Session) -> int:
    return writer.append(MESSAGE)


def by_hand(tracer_provider: TracerProvider, meter_provider: MeterProvider) -> Append:
    """An append wrapped in the SDK calls ``instrument`` makes for one (see ``floor`` above)."""
    tracer = tracer_provider.get_tracer("floor")
    duration = meter_provider.get_meter("floor").create_histogram("floor.duration", unit="s")
    metric_attributes = {"evstore.operation": "append", "evstore.outcome": "ok"}

    def append(writer: Session) -> int:
        started = time.perf_counter()
        span = tracer.start_span("evstore.append", kind=SpanKind.INTERNAL, attributes={"gen_ai.conversation.id": writer.id})
        token = otel_context.attach(trace.set_span_in_context(span))
        seq = writer.append(MESSAGE)
        otel_context.detach(token)
        span.set_attributes(
            {
                "evstore.outcome": "ok",
                "evstore.requests": 1,
                "evstore.round_trips": 1,
                "evstore.requests.put": 1,
                "evstore.bytes.up": 300,
                "evstore.seq": seq,
            }
        )
        span.end()
        duration.record(time.perf_counter() - started, metric_attributes)
        return seq

    return append


def per_append_us(make_store: Callable[[], Store], appends: int, append: Append = plain_append) -> float:
    """Microseconds per append over ``appends`` appends to a new session (its creation not timed)."""
    store = make_store()
    writer = store.create("bench")
    started = time.perf_counter()
    for _ in range(appends):
        append(writer)
    elapsed = time.perf_counter() - started
    store.close()
    return elapsed / appends * 1e6


def run(name: str, backend: Callable[[], ObjectStore], appends: int, rounds: int) -> None:
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(Dropping()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    noop_tracer, noop_meter = trace.NoOpTracerProvider(), metrics.NoOpMeterProvider()

    def sdk() -> Store:
        return instrument(Store(backend()), tracer_provider=tracer_provider, meter_provider=meter_provider)

    def noop() -> Store:
        return instrument(Store(backend()), tracer_provider=noop_tracer, meter_provider=noop_meter)

    configurations: dict[str, tuple[Callable[[], Store], Append]] = {
        "plain": (lambda: Store(backend()), plain_append),
        "sdk": (sdk, plain_append),
        "noop": (noop, plain_append),
        "floor": (lambda: Store(backend()), by_hand(tracer_provider, meter_provider)),
    }
    for make, append in configurations.values():
        per_append_us(make, min(appends, 50), append)  # warm: imports, the pool, the SDK's first streams
    results: dict[str, list[float]] = {key: [] for key in configurations}
    for round_ in range(rounds):
        for key, (make, append) in configurations.items():
            results[key].append(per_append_us(make, appends, append))
        line = "  ".join(f"{key} {results[key][-1]:9.1f}" for key in configurations)
        print(f"{name} round {round_ + 1}: us/append  {line}", flush=True)
    plain = results["plain"]
    for key in ("sdk", "noop", "floor"):
        ratios = [value / base for value, base in zip(results[key], plain, strict=True)]
        added = [value - base for value, base in zip(results[key], plain, strict=True)]
        print(
            f"{name}: {key} / plain median {statistics.median(ratios):.4f}x "
            f"(rounds {min(ratios):.4f}-{max(ratios):.4f}), median +{statistics.median(added):.1f} us per append "
            f"on {statistics.median(plain):.1f} us",
            flush=True,
        )
    added = {key: statistics.median(v - b for v, b in zip(results[key], plain, strict=True)) for key in ("sdk", "floor")}
    own = added["sdk"] - added["floor"]
    print(
        f"{name}: evstore's own part, sdk's median added minus floor's: {own:+.1f} us per append "
        f"({own / statistics.median(plain):+.2%} of plain)",
        flush=True,
    )
    tracer_provider.shutdown()
    meter_provider.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--appends", type=int, default=2000, help="appends per round on the memory store")
    parser.add_argument("--slow-appends", type=int, default=200, help="appends per round with the delay")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--delay", type=float, default=0.005, help="seconds per request of the slow backend")
    args = parser.parse_args()
    run("memory", MemoryStore, args.appends, args.rounds)
    run(f"delay {args.delay * 1000:g} ms", lambda: Recorder(MemoryStore(), delay=args.delay), args.slow_appends, args.rounds)


if __name__ == "__main__":
    main()
