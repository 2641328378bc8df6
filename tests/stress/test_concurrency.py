"""Concurrency torture: 16 writers (threads, then processes) against moto's HTTP
server, each appending to a shared session and to its own, refreshing and
retrying on conflict. The audit checks every acknowledged append replays
exactly once at its seq, seqs are contiguous, and the chain verifies."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from evstore import Store
from evstore._backends._s3 import S3Store

from .conftest import (
    SCALE,
    WRITER_DEADLINE_SECONDS,
    Figures,
    Journal,
    StoreSpec,
    WriterSpec,
    audit,
    create_bucket,
    read_journal,
    resume_check,
    run_writer,
    start_writer_processes,
    wait_processes,
)

pytestmark = pytest.mark.stress

WRITERS = 16
# Scale 1: 60 events per writer (960 per run), 80 of them to the one shared session that all 16 writers
# contend for (each conflict costs a refresh: about 6 requests). moto's server answers about 90 requests
# a second on 2 cores, so this is what fits the CI budget; EVSTORE_STRESS_SCALE=5 gives 300 per writer.
OWN_EVENTS = 55 * SCALE
SHARED_EVENTS = 5 * SCALE


def specs(tag: str) -> list[WriterSpec]:
    shared = f"shared-{tag}"
    return [WriterSpec(f"{tag}{i:02d}", f"own-{tag}{i:02d}", shared, OWN_EVENTS, SHARED_EVENTS, seed=i) for i in range(WRITERS)]


def sampled(sid: str) -> bool:
    """store.verify the shared session and 5 of the 16 own ones (replay checks the chain of all of them)."""
    return sid.startswith("shared-") or sid.endswith(("0", "4", "8"))


def test_thread_writers_lose_nothing_and_duplicate_nothing(stress_moto: str, figures: Figures) -> None:
    bucket = create_bucket(stress_moto)
    backend = S3Store(bucket, endpoint_url=stress_moto, max_attempts=3, read_timeout=10, max_pool_connections=WRITERS * 2)
    store = Store(backend, root="root")
    writers = specs("t")
    journals: dict[str, Journal] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(WRITERS)

    def work(spec: WriterSpec) -> None:
        try:
            start.wait(timeout=60)
            journals[spec.writer] = run_writer(store, spec)
        except BaseException as error:  # reported below, with the writer's name
            errors.append(error)

    threads = [threading.Thread(target=work, args=(spec,), name=spec.writer) for spec in writers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=WRITER_DEADLINE_SECONDS + 60)
    assert not errors, errors[:3]
    assert not any(thread.is_alive() for thread in threads)
    journal = Journal()
    for each in journals.values():
        journal.merge(each)
    figures.add(thread_writers=WRITERS)
    result = audit(store, journal, {s.own for s in writers} | {writers[0].shared}, figures, verify=sampled)
    figures.add(requests=sum(backend.requests.values()))
    assert result.clean, str(result)
    assert len(journal.acked) == WRITERS * (OWN_EVENTS + SHARED_EVENTS)
    assert journal.conflicts > 0  # the shared session really was contended


def test_process_writers_lose_nothing_and_duplicate_nothing(stress_moto: str, figures: Figures, tmp_path: Path) -> None:
    bucket = create_bucket(stress_moto)
    spec = StoreSpec("s3", endpoint=stress_moto, bucket=bucket, max_attempts=3, read_timeout=10)
    writers = specs("p")
    processes, go = start_writer_processes(spec, writers, tmp_path)
    go.touch()
    wait_processes(processes, timeout=WRITER_DEADLINE_SECONDS + 60)
    journal = Journal()
    requests = 0
    for process in processes:
        each, report = read_journal(process.journal)
        assert report is not None, f"writer {process.spec.writer} left no report"
        requests += report["requests"]
        journal.merge(each)
    figures.add(process_writers=WRITERS, requests=requests)
    result = audit(spec.open(), journal, {s.own for s in writers} | {writers[0].shared}, figures, verify=sampled)
    assert result.clean, str(result)
    assert len(journal.acked) == WRITERS * (OWN_EVENTS + SHARED_EVENTS)
    assert journal.conflicts > 0


def test_a_new_writer_resumes_after_the_contended_session_at_its_head(stress_moto: str) -> None:
    """After concurrent writers, a fresh writer opens at the true head and appends right after it."""
    bucket = create_bucket(stress_moto)
    store = Store(S3Store(bucket, endpoint_url=stress_moto), root="root")
    writers = [WriterSpec(f"r{i}", f"own-r{i}", "shared-r", 0, 10, seed=i) for i in range(4)]
    threads = [threading.Thread(target=run_writer, args=(store, spec)) for spec in writers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    head, last, seq = resume_check(store, "shared-r")
    assert (head, last, seq) == (40, 40, 41)
