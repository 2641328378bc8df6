"""The tracer and the instruments of one ``instrument`` call, and the totals its observable
counters report (see the package docstring's Metrics)."""

from __future__ import annotations

import threading
from operator import add
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.metrics import MeterProvider, Observation
from opentelemetry.trace import TracerProvider

import evstore

from ._backend import OperationBackend
from ._names import DIRECTIONS, DURATION_BUCKETS, KINDS


class Telemetry:
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
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
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
            callbacks=[lambda _: self._observe_by(self._io, "network.io.direction", DIRECTIONS)],
            unit="By",
            description="Object bodies evstore sent (PUT) and received (GET)",
        )

    def record(self, name: str, outcome: str, elapsed: float, backend: OperationBackend) -> None:
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
