"""Crashes: writer processes killed with SIGKILL at random points of their
append stream, round after round on the same sessions. Afterwards no event
is partial (every session replays and verifies), every acknowledged append is
there exactly once, the one in flight is there at most once, and a new
writer resumes right after the head."""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import pytest

from .conftest import (
    SCALE,
    Figures,
    Journal,
    StoreSpec,
    WriterSpec,
    audit,
    create_bucket,
    read_journal,
    resume_check,
    start_writer_processes,
    stop_processes,
)

pytestmark = pytest.mark.stress

ROUNDS = 2 * SCALE
WRITERS = 5
OWN_EVENTS = 30
SHARED_EVENTS = 6


def acks_in(path: Path) -> int:
    return path.read_bytes().count(b"\nack\t")


@pytest.mark.parametrize("kind", ["s3", "file"])
def test_writers_killed_at_random_points_lose_no_acknowledged_append(
    kind: str, stress_moto: str, tmp_path: Path, figures: Figures
) -> None:
    if kind == "s3":
        store_spec = StoreSpec("s3", endpoint=stress_moto, bucket=create_bucket(stress_moto))
    else:
        store_spec = StoreSpec("file", directory=str(tmp_path / "store"))
    rng = random.Random(2024)
    journal = Journal()
    sessions: set[str] = set()
    killed = 0
    for round_ in range(ROUNDS):
        # the same sessions every round: each round resumes what the killed writers of the last one left
        specs = [
            WriterSpec(f"c{round_}-{i}", f"own-c{i}", "shared-c", OWN_EVENTS, SHARED_EVENTS, seed=round_ * 100 + i)
            for i in range(WRITERS)
        ]
        sessions |= {s.own for s in specs} | {"shared-c"}
        processes, go = start_writer_processes(store_spec, specs, tmp_path)
        # each writer dies after a random number of acknowledged appends, plus a random few milliseconds
        # so that the kill lands anywhere in an append: before, during or after its PUT
        kill_after = {p.spec.writer: rng.randint(1, OWN_EVENTS + SHARED_EVENTS - 1) for p in processes}
        jitter = {p.spec.writer: rng.uniform(0, 0.03) for p in processes}
        go.touch()
        deadline = time.monotonic() + 120 * SCALE
        try:
            pending = list(processes)
            while pending and time.monotonic() < deadline:
                for writer in list(pending):
                    if writer.process.poll() is not None:
                        pending.remove(writer)
                    elif acks_in(writer.journal) >= kill_after[writer.spec.writer]:
                        time.sleep(jitter[writer.spec.writer])
                        if writer.process.poll() is None:
                            writer.process.send_signal(signal.SIGKILL)
                            writer.process.wait()
                            killed += writer.process.returncode == -signal.SIGKILL
                        pending.remove(writer)
                time.sleep(0.002)
            assert not pending, "writers neither finished nor were killed in time"
        finally:
            stop_processes(processes)
        for writer in processes:
            each, _report = read_journal(writer.journal)
            journal.merge(each)
    figures.add(process_writers=ROUNDS * WRITERS, crashes=killed)
    assert killed >= ROUNDS * WRITERS // 2  # most writers really died mid-stream
    store = store_spec.open()
    result = audit(store, journal, sessions, figures)
    assert result.clean, str(result)
    in_flight = {c for _, c in journal.tried} - {c for _, _, c in journal.acked}
    assert len(in_flight) <= ROUNDS * WRITERS  # at most the one append each writer had in flight
    for sid in sorted(sessions):
        head, last, seq = resume_check(store, sid)
        assert head == last and seq == last + 1, (sid, head, last, seq)
    store.verify("shared-c")
