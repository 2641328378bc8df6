"""Racing writers over RGW: many processes' worth of writers append to one session.

Each thread has its own Store and Session (a Session is not thread-safe) on
the same bucket, released together by a barrier. A writer that loses a seq
gets WriteConflictError, refreshes and tries again. Afterwards the log must
hold every acknowledged append exactly once, at the seq it was acknowledged
with, contiguous from 1, with an intact chain.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest

from evstore import Store, WriteConflictError
from evstore._backends._s3 import S3Store

from .conftest import rgw_bucket, rgw_client

pytestmark = pytest.mark.rgw

WRITERS = 8
APPENDS_PER_WRITER = 6
ATTEMPTS_PER_WRITER = 400  # bound: a writer that keeps losing gives up (and the test fails)
DEADLINE_SECONDS = 120.0  # bound on the whole race, not a timing assertion


def test_racing_writers_each_acknowledged_append_lands_exactly_once(rgw: Any) -> None:
    bucket = rgw_bucket(rgw).bucket
    # one client per writer, as separate processes would have
    stores = [Store(_store_on(rgw, bucket), root="root") for _ in range(WRITERS)]
    stores[0].open("race", create=True)
    barrier = threading.Barrier(WRITERS, timeout=60)
    deadline = time.monotonic() + DEADLINE_SECONDS
    acknowledged: list[tuple[int, str]] = []  # (seq, text)
    conflicts: Counter[int] = Counter()  # by writer
    conflict_seqs_ok = True
    failures: list[BaseException] = []
    lock = threading.Lock()

    def writer(index: int) -> None:
        nonlocal conflict_seqs_ok
        session = stores[index].open("race")
        barrier.wait()
        done = attempts = 0
        while done < APPENDS_PER_WRITER and attempts < ATTEMPTS_PER_WRITER and time.monotonic() < deadline:
            attempts += 1
            text = f"w{index}-{done}"
            expected_seq = session.head + 1
            try:
                seq = session.append({"role": "user", "content": text})
            except WriteConflictError as exc:
                with lock:
                    conflicts[index] += 1
                    conflict_seqs_ok &= exc.seq == expected_seq
                session.refresh()
                continue
            with lock:
                acknowledged.append((seq, text))
            done += 1

    def run(index: int) -> None:
        try:
            writer(index)
        except BaseException as exc:  # reported below: a thread's exception must fail the test
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(i,), name=f"writer-{i}") for i in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE_SECONDS + 60)
    assert not any(t.is_alive() for t in threads), "a writer is still running after the deadline"
    assert failures == [], failures  # losers only ever see WriteConflictError

    assert len(acknowledged) == WRITERS * APPENDS_PER_WRITER, "some writer gave up (attempt or time bound reached)"
    reader = Store(_store_on(rgw, bucket), root="root")
    events = list(reader.replay("race"))
    assert [e.seq for e in events] == list(range(1, len(events) + 1))  # contiguous from 1
    logged = [(e.seq, e.messages[0]["content"]) for e in events]
    assert sorted(acknowledged) == logged  # every acknowledged append, exactly once, at its seq; nothing else
    assert reader.verify("race").events == len(acknowledged)
    assert sum(conflicts.values()) > 0, "no writer ever lost a race: the test did not race"
    assert conflict_seqs_ok, "a WriteConflictError named a seq other than the one its writer tried"


def _store_on(rgw: Any, bucket: str) -> S3Store:
    return S3Store(bucket, endpoint_url=rgw.endpoint, client=rgw_client(rgw))
