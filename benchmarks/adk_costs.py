"""Google ADK ``EvstoreSessionService``: the requests behind issue 29's ADK cells, at two lengths.

    python benchmarks/adk_costs.py [--quick]

Each row is one call through ADK's public ``BaseSessionService`` API, its requests counted
exactly by ``benchmarks/_scale_backend.py``'s ``Recorder`` over ``MemoryStore`` (no delay, so
no time is shown: counts decide). The session has app, user and session state; "a new process"
is a new service over a new ``Store`` over the same bucket, "long-lived" the service that wrote
it. Columns: the session grown to 10 and 1,500 events (``--quick``: 10 and 300); the
``list_sessions`` rows list 5 and 30 sessions of 3 events each. Compaction's amortized segment
PUTs count too. ``wanted`` is issue 29's cell, ``met`` whether both columns meet it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from typing import Any

from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.sessions.session import Session
from google.genai import types

from benchmarks._scale_backend import KINDS, Counts, Recorder
from evstore import MemoryStore, Store
from evstore.integrations.adk import EvstoreSessionService

APP, USER = "app", "ana"
Row = tuple[str, Callable[[int], Counts], Callable[[int], bool], str]


def event(text: str, **delta: Any) -> Event:
    content = types.Content(role="user", parts=[types.Part(text=text)])
    return Event(author="user", invocation_id="inv", content=content, actions=EventActions(state_delta=delta))


class Bench:
    """One bucket, a long-lived service and the session it grew."""

    def __init__(self, events: int) -> None:
        self.recorder = Recorder(MemoryStore())
        self.service = self.new_service()
        self.session = self.run(self.service.create_session(app_name=APP, user_id=USER, state={"k": 0, "app:a": 0, "user:u": 0}))
        for i in range(events):
            self.run(self.service.append_event(self.session, event(f"m{i}")))

    @staticmethod
    def run(coro: Any) -> Any:
        return asyncio.run(coro)

    def new_service(self) -> EvstoreSessionService:
        return EvstoreSessionService(Store(self.recorder, root="root"))

    def count(self, call: Callable[[], Any]) -> Counts:
        self.recorder.reset()
        call()
        return self.recorder.counts()

    def get(self, service: EvstoreSessionService, config: GetSessionConfig | None = None) -> Session:
        found: Session = self.run(service.get_session(app_name=APP, user_id=USER, session_id=self.session.id, config=config))
        return found

    def replay(self) -> Counts:
        evstore_id = self.service.session_evstore_id(APP, USER, self.session.id)
        return self.count(lambda: list(Store(self.recorder, root="root").replay(evstore_id)))

    def fresh_get(self, recent: int | None = None) -> Counts:
        service = self.new_service()
        config = GetSessionConfig(num_recent_events=recent) if recent is not None else None
        return self.count(lambda: self.get(service, config))

    def held_get(self, recent: int | None = None) -> Counts:
        self.get(self.service)
        config = GetSessionConfig(num_recent_events=recent) if recent is not None else None
        return self.count(lambda: self.get(self.service, config))

    def append(self, **delta: Any) -> Counts:
        session = self.get(self.service)
        return self.count(lambda: self.run(self.service.append_event(session, event("next", **delta))))


def listing(sessions: int, fresh: bool) -> Counts:
    bench = Bench(3)
    for _ in range(sessions - 1):
        session = bench.run(bench.service.create_session(app_name=APP, user_id=USER, state={"k": 1}))
        for i in range(3):
            bench.run(bench.service.append_event(session, event(f"m{i}")))
    service = bench.new_service() if fresh else bench.service
    return bench.count(lambda: bench.run(service.list_sessions(app_name=APP, user_id=USER)))


def rows() -> list[Row]:
    return [
        ("get_session, new process", lambda n: Bench(n).fresh_get(), lambda c: c <= 6, "<= 6"),
        ("  reference: store.replay of it all", lambda n: Bench(n).replay(), lambda c: True, ""),
        ("get_session, long-lived", lambda n: Bench(n).held_get(), lambda c: c <= 6, "<= 6"),
        ("num_recent_events=5, new process", lambda n: Bench(n).fresh_get(5), lambda c: c <= 3, "<= 3 + N/1000"),
        ("num_recent_events=100, new process", lambda n: Bench(n).fresh_get(100), lambda c: c <= 3, "<= 3 + N/1000"),
        ("num_recent_events=5, long-lived", lambda n: Bench(n).held_get(5), lambda c: c <= 3, "<= 3 + N/1000"),
        ("event with a session delta", lambda n: Bench(n).append(k=1), lambda c: c <= 2, "<= 2"),
        ("event with a user: delta", lambda n: Bench(n).append(**{"user:u": 1}), lambda c: c <= 2, "<= 2"),
        ("event with app: and user: deltas", lambda n: Bench(n).append(**{"app:a": 1, "user:u": 1}), lambda c: c <= 2, "<= 2"),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="10 and 300 events")
    args = parser.parse_args(argv)
    lengths = (10, 300) if args.quick else (10, 1500)
    print(f"ADK EvstoreSessionService: requests (by kind {'/'.join(k[0] for k in KINDS)}) over MemoryStore")
    print(f"{'':38}{lengths[0]:>17,} ev{lengths[1]:>17,} ev  {'wanted':14}met")
    for label, measure, meets, wanted in rows():
        counts = [measure(n) for n in lengths]
        met = ("met" if all(meets(c.total) for c in counts) else "not met") if wanted else ""
        print(f"{label:38}{cells(counts)}  {wanted:14}{met}", flush=True)
    print(f"{'':38}{5:>11} sessions{30:>11} sessions")
    for label, fresh in (("list_sessions, new process", True), ("list_sessions, long-lived", False)):
        counts = [listing(n, fresh) for n in (5, 30)]
        met = "met" if all(c.total <= 2 for c in counts) else "not met"
        print(f"{label:38}{cells(counts)}  {'<= 2 per page':14}{met}", flush=True)
    return 0


def cells(counts: list[Counts]) -> str:
    return "".join(f"{f'{c.total} ({c.by_kind()})':>20}" for c in counts)


if __name__ == "__main__":
    sys.exit(main())
