"""Fault injection between evstore and moto's server, through ``faultproxy``.

For each fault: appends stay exactly-once, replays are never corrupt, retries
are bounded (attempts are counted at the proxy), and what finally fails is a
one-line ``StoreUnavailableError`` (exit 1 from the command).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator

import pytest

from evstore import EvstoreError, Store, StoreUnavailableError, WriteConflictError
from evstore._backends._retry import DEFAULT_MAX_ATTEMPTS
from evstore._backends._s3 import S3Store

from .conftest import (
    ROOT,
    SCALE,
    Figures,
    Journal,
    WriterSpec,
    audit,
    create_bucket,
    helper_env,
    run_writer,
)
from .faultproxy import AMBIGUOUS, Fault, FaultProxy, Request, every_nth, persistent, random_faults

pytestmark = pytest.mark.stress

READ_TIMEOUT = 0.3
#: S3Store's ``max_attempts`` counts every attempt, the first included, whatever the transient
#: failure (evstore retries; botocore makes one attempt per call).
MAX_ATTEMPTS = 3
TRANSIENT = [
    Fault.LOSE_RESPONSE,
    Fault.RESET_AFTER,
    Fault.RESET_BEFORE,
    Fault.ERROR_500,
    Fault.SLOWDOWN_503,
    Fault.CONFLICT_409,
    Fault.SLOW_RESPONSE,
    Fault.LATE_FORWARD,
]


@pytest.fixture
def proxy(stress_moto: str, figures: Figures) -> Iterator[FaultProxy]:
    with FaultProxy(stress_moto, delay=READ_TIMEOUT * 2.5) as running:
        yield running
        figures.add_faults(running.log.faults())


def store_via(proxy: FaultProxy, bucket: str, *, max_attempts: int = MAX_ATTEMPTS) -> Store:
    backend = S3Store(bucket, endpoint_url=proxy.url, max_attempts=max_attempts, read_timeout=READ_TIMEOUT, connect_timeout=1)
    return Store(backend, root="root")


def clean_store(stress_moto: str, bucket: str) -> Store:
    """The same bucket without the proxy: what an auditor reads afterwards."""
    return Store(S3Store(bucket, endpoint_url=stress_moto), root="root")


def one_line(error: BaseException) -> bool:
    text = str(error)
    return bool(text) and "\n" not in text and "Traceback" not in text


@pytest.mark.parametrize("fault", TRANSIENT, ids=lambda f: f.value)
def test_appends_stay_exactly_once_when_every_third_put_meets_a_fault(
    fault: Fault, proxy: FaultProxy, stress_moto: str, figures: Figures
) -> None:
    bucket = create_bucket(stress_moto)
    store = store_via(proxy, bucket)
    proxy.plan = every_nth(fault, 3)
    spec = WriterSpec(f"f-{fault.value}", "single", "single-shared", 15 * SCALE, 0, seed=1)
    journal = run_writer(store, spec)
    assert [seq for _, seq, _ in journal.acked] == list(range(1, 15 * SCALE + 1))
    assert proxy.log.faults()[fault] >= 5 * SCALE  # every third PUT, retries included
    if fault in AMBIGUOUS:
        # the retry met the object its own first attempt stored: the write-id path really ran
        assert proxy.log.upstream_statuses("PUT")[412] >= 5 * SCALE
    result = audit(clean_store(stress_moto, bucket), journal, ["single"], figures)
    assert result.clean, str(result)


def test_concurrent_writers_under_random_faults_lose_and_duplicate_nothing(
    proxy: FaultProxy, stress_moto: str, figures: Figures
) -> None:
    bucket = create_bucket(stress_moto)
    rates = {fault: 0.015 for fault in TRANSIENT} | {Fault.TRUNCATE_BODY: 0.01}
    proxy.plan = random_faults(rates, seed=int(os.environ.get("EVSTORE_STRESS_SEED", "7")), limit=400 * SCALE)
    writers = [
        WriterSpec(f"x{i}", f"own-x{i}", "shared-x", 12 * SCALE, 4 * SCALE, seed=i, tolerate_unavailable=True) for i in range(8)
    ]
    journals: list[Journal] = []
    errors: list[BaseException] = []

    def work(spec: WriterSpec) -> None:
        try:
            journals.append(run_writer(store_via(proxy, bucket), spec))
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(spec,)) for spec in writers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300 * SCALE)
    assert not errors, errors[:3]
    journal = Journal()
    for each in journals:
        journal.merge(each)
    figures.add(thread_writers=len(writers))
    assert proxy.log.injected() > 0
    result = audit(clean_store(stress_moto, bucket), journal, {s.own for s in writers} | {"shared-x"}, figures)
    assert result.clean, str(result)


@pytest.mark.parametrize("fault", [Fault.TRUNCATE_BODY, Fault.RESET_AFTER, Fault.ERROR_500], ids=lambda f: f.value)
def test_replays_through_faults_are_complete_or_fail_cleanly_never_corrupt(
    fault: Fault, proxy: FaultProxy, stress_moto: str, figures: Figures
) -> None:
    bucket = create_bucket(stress_moto)
    store = store_via(proxy, bucket)
    writer = store.open("read", create=True)
    for i in range(30):
        writer.append({"role": "user", "content": f"r{i}"})
    truth = [(e.seq, e.hash, e.messages) for e in clean_store(stress_moto, bucket).replay("read")]
    proxy.plan = every_nth(fault, 4, match=lambda r: r.method == "GET")
    outcomes = {"complete": 0, "unavailable": 0}
    for _ in range(6):
        try:
            got = [(e.seq, e.hash, e.messages) for e in store.replay("read")]
        except StoreUnavailableError as error:
            assert one_line(error)
            outcomes["unavailable"] += 1
            continue
        assert got == truth
        outcomes["complete"] += 1
    assert proxy.log.faults()[fault] > 0
    figures.add(audited_sessions=6, audited_events=30 * outcomes["complete"])
    assert sum(outcomes.values()) == 6


PERSISTENT = [
    (Fault.ERROR_500, MAX_ATTEMPTS),
    (Fault.SLOWDOWN_503, MAX_ATTEMPTS),
    (Fault.RESET_BEFORE, MAX_ATTEMPTS),
    (Fault.RESET_AFTER, MAX_ATTEMPTS),
    (Fault.LOSE_RESPONSE, MAX_ATTEMPTS),
    (Fault.SLOW_RESPONSE, MAX_ATTEMPTS),
    (Fault.CONFLICT_409, MAX_ATTEMPTS),
]


@pytest.mark.parametrize(("fault", "attempts"), PERSISTENT, ids=[f.value for f, _ in PERSISTENT])
def test_a_persistent_fault_ends_in_one_line_store_unavailable_after_bounded_attempts(
    fault: Fault, attempts: int, proxy: FaultProxy, stress_moto: str, figures: Figures
) -> None:
    bucket = create_bucket(stress_moto)
    store = store_via(proxy, bucket)
    writer = store.open("stuck", create=True)
    writer.append({"role": "user", "content": "before"})
    proxy.plan = persistent(fault, match=lambda r: r.is_event_put)
    with pytest.raises(StoreUnavailableError) as failure:
        writer.append({"role": "user", "content": "secret-payload"})
    assert one_line(failure.value)
    assert "secret-payload" not in str(failure.value)
    assert proxy.log.requests_for("/stuck/00000000000000000002", "PUT") == attempts
    # the fault lifts: the writer carries on after a refresh, and the failed append is there at most once
    proxy.plan = persistent(Fault.FORWARD)
    try:
        seq = writer.append({"role": "user", "content": "after"})
    except WriteConflictError:
        writer.refresh()  # the failed append was stored after all (its answer was lost)
        seq = writer.append({"role": "user", "content": "after"})
    contents = [m["content"] for e in clean_store(stress_moto, bucket).replay("stuck") for m in e.messages]
    stored = fault in AMBIGUOUS
    assert contents == ["before", *(["secret-payload"] if stored else []), "after"]
    assert seq == len(contents)
    clean_store(stress_moto, bucket).verify("stuck")
    figures.add(acked=2, attempts=attempts + 2, ambiguous=1, audited_sessions=1, audited_events=len(contents))


def test_the_command_under_a_persistent_conflict_exits_1_with_one_line(proxy: FaultProxy, stress_moto: str) -> None:
    bucket = create_bucket(stress_moto)
    store_via(proxy, bucket).open("cli", create=True).append({"role": "user", "content": "first"})
    proxy.plan = persistent(Fault.CONFLICT_409, match=lambda r: r.is_event_put)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "evstore_cli",
            "--store",
            f"s3://{bucket}/root",
            "--endpoint-url",
            proxy.url,
            "append",
            "cli",
            "hi",
        ],
        cwd=ROOT,
        env=helper_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1
    assert run.stdout == ""
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("evstore: "), run.stderr
    assert proxy.log.requests_for("/cli/00000000000000000002", "PUT") == DEFAULT_MAX_ATTEMPTS


LOST_CREATE = [
    ("manifest of the fork", lambda r: r.method == "PUT" and r.path.endswith("/sessions/child/manifest")),
    ("fork marker", lambda r: r.method == "PUT" and "/sessions/parent/forks/child@" in r.path),
]


@pytest.mark.parametrize(("what", "match"), LOST_CREATE, ids=[w for w, _ in LOST_CREATE])
def test_a_fork_whose_create_answer_is_lost_is_made_once_and_stays_replayable(
    what: str, match: object, proxy: FaultProxy, stress_moto: str
) -> None:
    bucket = create_bucket(stress_moto)
    store = store_via(proxy, bucket)
    parent = store.open("parent", create=True)
    for i in range(3):
        parent.append({"role": "user", "content": f"p{i}"})
    plan = every_nth(Fault.LOSE_RESPONSE, 1, match=match)  # type: ignore[arg-type]
    first = True

    def once(request: Request) -> Fault:
        nonlocal first
        if first and plan(request) is not Fault.FORWARD:
            first = False
            return Fault.LOSE_RESPONSE
        return Fault.FORWARD

    proxy.plan = once
    try:
        child = store.fork("parent", "child")
    except EvstoreError as error:
        pytest.fail(f"fork reported {type(error).__name__} although its own create succeeded: {error}")
    assert not first
    child.append({"role": "user", "content": "c"})
    clean = clean_store(stress_moto, bucket)
    assert [m["content"] for e in clean.replay("child") for m in e.messages] == ["p0", "p1", "p2", "c"]
    assert clean.info("parent").forks == ["child"]  # the marker that keeps the parent's events is there


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_request_whose_writer_dies_mid_body_is_never_passed_on_cut_short(
    proxy: FaultProxy, stress_moto: str, framing: str
) -> None:
    """A writer killed between its request's head and the end of its body leaves the proxy a
    short body: the proxy drops it, as a real server would, so the soak's moto (which checks no
    Content-MD5) never stores the part as the whole."""
    import boto3

    bucket = create_bucket(stress_moto)
    split = urllib.parse.urlsplit(proxy.url)
    framing_header = "Content-Length: 100" if framing == "content-length" else "Transfer-Encoding: chunked"
    partial = b"x" * 10 if framing == "content-length" else b"64\r\n" + b"x" * 10
    with socket.create_connection((split.hostname, split.port), timeout=5) as conn:
        conn.sendall(f"PUT /{bucket}/cut HTTP/1.1\r\nHost: {split.netloc}\r\n{framing_header}\r\n\r\n".encode() + partial)
        conn.shutdown(socket.SHUT_WR)  # what the kernel does for a killed writer: FIN after the part
        assert conn.recv(1024) == b""  # closed without an answer
    listed = boto3.client("s3", endpoint_url=stress_moto).list_objects_v2(Bucket=bucket)
    assert listed.get("KeyCount") == 0
    assert len(proxy.log) == 0
