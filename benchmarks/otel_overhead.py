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
* ``noop``: ``instrument(store)`` with the API's no-op providers (the extra installed, no SDK).

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

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from benchmarks._scale_backend import Recorder
from evstore import MemoryStore, ObjectStore, Store
from evstore.integrations.opentelemetry import instrument

MESSAGE = {"role": "user", "content": "x" * 200}


class Dropping(SpanExporter):
    """Accepts every batch and keeps nothing."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def per_append_us(make_store: Callable[[], Store], appends: int) -> float:
    """Microseconds per append over ``appends`` appends to a new session (its creation not timed)."""
    store = make_store()
    writer = store.create("bench")
    started = time.perf_counter()
    for _ in range(appends):
        writer.append(MESSAGE)
    elapsed = time.perf_counter() - started
    store.close()
    return elapsed / appends * 1e6


def run(name: str, backend: Callable[[], ObjectStore], appends: int, rounds: int) -> None:
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(Dropping()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    noop_tracer, noop_meter = trace.NoOpTracerProvider(), metrics.NoOpMeterProvider()
    configurations: dict[str, Callable[[], Store]] = {
        "plain": lambda: Store(backend()),
        "sdk": lambda: instrument(Store(backend()), tracer_provider=tracer_provider, meter_provider=meter_provider),
        "noop": lambda: instrument(Store(backend()), tracer_provider=noop_tracer, meter_provider=noop_meter),
    }
    for make in configurations.values():
        per_append_us(make, min(appends, 50))  # warm: imports, the pool, the SDK's first streams
    results: dict[str, list[float]] = {key: [] for key in configurations}
    for round_ in range(rounds):
        for key, make in configurations.items():
            results[key].append(per_append_us(make, appends))
        line = "  ".join(f"{key} {results[key][-1]:9.1f}" for key in configurations)
        print(f"{name} round {round_ + 1}: us/append  {line}", flush=True)
    plain = results["plain"]
    for key in ("sdk", "noop"):
        ratios = [value / base for value, base in zip(results[key], plain, strict=True)]
        added = [value - base for value, base in zip(results[key], plain, strict=True)]
        print(
            f"{name}: {key} / plain median {statistics.median(ratios):.4f}x "
            f"(rounds {min(ratios):.4f}-{max(ratios):.4f}), median +{statistics.median(added):.1f} us per append "
            f"on {statistics.median(plain):.1f} us",
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
