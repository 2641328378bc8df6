"""The reliability harness: a moto S3 server of its own, writers (threads and
processes) that record what was acknowledged, the audit that compares it with
what replays, and the figures printed at the end of the run.

Scale: ``EVSTORE_STRESS_SCALE`` (default 1) multiplies writers' event counts,
crash rounds and fuzzing examples; scale 1 keeps the whole harness within a
few minutes on 2 cores.

This module is also the entry point of the out-of-process helpers
(``python -m tests.stress.conftest moto PORT`` and ``... writer SPEC_JSON``),
so a writer process runs exactly the code a writer thread runs.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from functools import partial
from pathlib import Path
from typing import Any

import pytest

os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")

ROOT = Path(__file__).resolve().parents[2]
SCALE = max(1, int(os.environ.get("EVSTORE_STRESS_SCALE", "1") or "1"))
#: Bounds on every retry loop of the writers: conflicts per append, refresh attempts, and wall time.
MAX_CONFLICTS_PER_APPEND = 400
MAX_REFRESH_ATTEMPTS = 20
WRITER_DEADLINE_SECONDS = 300.0 * SCALE


# ---- figures ---------------------------------------------------------------


@dataclass
class Figures:
    """Measured totals for the run; tests add to them, the summary hook prints them."""

    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    thread_writers: int = 0
    process_writers: int = 0
    acked: int = 0
    attempts: int = 0
    conflicts: int = 0
    ambiguous: int = 0
    audited_sessions: int = 0
    audited_events: int = 0
    requests: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    crashes: int = 0
    fuzzed: Counter[str] = field(default_factory=Counter)
    lost: int = 0
    duplicated: int = 0
    corrupt: int = 0
    unexpected: int = 0

    def add(self, **amounts: int) -> None:
        with self.lock:
            for name, amount in amounts.items():
                setattr(self, name, getattr(self, name) + amount)

    def add_faults(self, faults: Counter[Any]) -> None:
        with self.lock:
            for fault, count in faults.items():
                self.faults[getattr(fault, "value", str(fault))] += count

    def add_fuzzed(self, target: str, count: int = 1) -> None:
        with self.lock:
            self.fuzzed[target] += count

    @property
    def touched(self) -> bool:
        return bool(self.thread_writers or self.process_writers or self.faults or self.crashes or self.fuzzed or self.acked)

    def totals(self) -> dict[str, Any]:
        """The figures as plain JSON values: what an xdist worker hands the controller."""
        with self.lock:
            values = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "lock"}
            return {name: dict(value) if isinstance(value, Counter) else value for name, value in values.items()}

    def add_totals(self, totals: dict[str, Any]) -> None:
        """Add another process's ``totals()`` to these figures."""
        with self.lock:
            for name, value in totals.items():
                if isinstance(value, dict):
                    getattr(self, name).update(value)
                else:
                    setattr(self, name, getattr(self, name) + value)


FIGURES = Figures()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Under pytest-xdist a worker prints nothing: it hands its figures to the controller, which
    adds them up (tests/conftest.py's ``pytest_testnodedown``) and prints them once."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None and FIGURES.touched:
        workeroutput["stress_figures"] = FIGURES.totals()


def print_figures(terminalreporter: Any) -> None:
    """The run's stress figures as a section of the terminal summary (nothing when no stress test ran)."""
    f = FIGURES
    if not f.touched:
        return
    tr = terminalreporter
    tr.section("evstore stress figures")
    tr.line(f"scale: {SCALE} (EVSTORE_STRESS_SCALE)")
    tr.line(f"writers: {f.thread_writers + f.process_writers} ({f.thread_writers} threads, {f.process_writers} processes)")
    tr.line(
        f"operations: {f.acked} appends acknowledged, {f.attempts} append attempts, {f.conflicts} conflicts refreshed"
        f" and retried, {f.ambiguous} appends failed unacknowledged; {f.requests} S3 requests counted"
    )
    tr.line(f"audited: {f.audited_sessions} sessions, {f.audited_events} events replayed and verified")
    kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(f.faults.items()))
    tr.line(f"faults injected: {sum(f.faults.values())}" + (f" ({kinds})" if kinds else ""))
    tr.line(f"crashes: {f.crashes} writer processes killed with SIGKILL")
    fuzzed = ", ".join(f"{target} {count}" for target, count in sorted(f.fuzzed.items()))
    tr.line(f"inputs fuzzed: {sum(f.fuzzed.values())}" + (f" ({fuzzed})" if fuzzed else ""))
    tr.line(f"lost: {f.lost}, duplicated: {f.duplicated}, corrupt: {f.corrupt}, unexpected: {f.unexpected}")


@pytest.fixture
def figures() -> Figures:
    return FIGURES


# ---- a moto S3 server of our own ---------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve_moto(port: int) -> None:
    """moto's threaded S3 server on 127.0.0.1:port until standard input closes (the parent is gone).

    moto checks ``If-None-Match``/``If-Match`` and then stores, without a lock:
    two concurrent conditional PUTs of one key can both succeed, which S3 never
    allows. That is moto's bug, not evstore's, and would make the audit report
    a loss that real S3 cannot produce; so PutObject is serialized here.
    """
    from moto.s3.responses import S3Response
    from moto.server import ThreadedMotoServer

    lock = threading.Lock()
    put_object = S3Response.put_object

    def atomic_put_object(self: S3Response) -> Any:
        with lock:
            return put_object(self)

    S3Response.put_object = atomic_put_object  # type: ignore[method-assign]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    sys.stdin.read()
    server.stop()


def wait_for_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def helper_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "EVSTORE_STORE", "EVSTORE_KEY", "EVSTORE_KEYRING", "AWS_PROFILE"):
        env.pop(name, None)
    return env


@pytest.fixture(scope="session")
def stress_moto() -> Iterator[str]:
    """moto's S3 server in its own process (so writer threads in this one do not share its GIL)."""
    with moto_server() as url:
        yield url


@contextmanager
def moto_server() -> Iterator[str]:
    """Start moto's S3 server (PutObject serialized, see ``_serve_moto``) in its own process on
    127.0.0.1 and yield its URL; the server stops when the context exits."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.stress.conftest", "moto", str(port)],
        cwd=ROOT,
        env=helper_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def create_bucket(endpoint: str) -> str:
    import boto3

    name = f"evs-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=name)
    return name


# ---- writers -------------------------------------------------------------------


@dataclass(frozen=True)
class WriterSpec:
    """One writer: ``own_count`` events to its own session and ``shared_count`` to the shared one, interleaved."""

    writer: str
    own: str
    shared: str
    own_count: int
    shared_count: int
    seed: int
    tolerate_unavailable: bool = False  # under injected faults: a failed append is recorded, not fatal
    #: More sessions of this writer's own, each getting ``own_count`` events too, interleaved with the rest.
    sessions: tuple[str, ...] = ()
    #: The writer's wall-clock bound in seconds (0: ``WRITER_DEADLINE_SECONDS``).
    deadline: float = 0.0


@dataclass(frozen=True)
class StoreSpec:
    """How a writer process opens the store (``kind`` s3: through ``endpoint``; file: ``directory``)."""

    kind: str
    root: str = "root"
    endpoint: str = ""
    bucket: str = ""
    directory: str = ""
    max_attempts: int = 3
    read_timeout: float = 10.0
    #: Credentials for a server that checks them (RGW); empty: the environment's (moto takes any).
    access_key: str = ""
    secret_key: str = ""

    def open(self) -> Any:
        from evstore import LocalStore, Store

        if self.kind == "file":
            return Store(LocalStore(self.directory), root=self.root)
        from evstore._backends._s3 import S3Store

        client = None
        if self.access_key:  # the same client S3Store builds (botocore makes one attempt), with these keys
            import boto3
            from botocore.config import Config

            session = boto3.session.Session(
                aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key, region_name="us-east-1"
            )
            config = Config(
                retries={"mode": "standard", "total_max_attempts": 1},
                connect_timeout=2.0,
                read_timeout=self.read_timeout,
                max_pool_connections=32,
                s3={"addressing_style": "path"},
            )
            client = session.client("s3", endpoint_url=self.endpoint, config=config)
        backend = S3Store(
            self.bucket,
            endpoint_url=self.endpoint,
            client=client,
            max_attempts=self.max_attempts,
            read_timeout=self.read_timeout,
            connect_timeout=2.0,
        )
        return Store(backend, root=self.root)


@dataclass
class Journal:
    """What a writer tried and what was acknowledged: (session, content) and (session, seq, content)."""

    tried: list[tuple[str, str]] = field(default_factory=list)
    acked: list[tuple[str, int, str]] = field(default_factory=list)
    attempts: int = 0
    conflicts: int = 0
    unavailable: int = 0

    def merge(self, other: Journal) -> None:
        self.tried += other.tried
        self.acked += other.acked
        self.attempts += other.attempts
        self.conflicts += other.conflicts
        self.unavailable += other.unavailable


class JournalFile:
    """A writer process's journal: one ``write`` per line on an O_APPEND descriptor, so a SIGKILL
    loses nothing the writer had recorded (at most the acknowledgement of the append in flight)."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def line(self, *fields: object) -> None:
        os.write(self.fd, ("\t".join(str(f) for f in fields) + "\n").encode())


def read_journal(path: Path) -> tuple[Journal, dict[str, Any] | None]:
    """The journal a writer process left, and its final report (None if it was killed before it finished)."""
    journal = Journal()
    report = None
    for raw in path.read_text().splitlines():
        kind, _, rest = raw.partition("\t")
        parts = rest.split("\t")
        if kind == "try" and len(parts) == 2:
            journal.tried.append((parts[0], parts[1]))
        elif kind == "ack" and len(parts) == 3:
            journal.acked.append((parts[0], int(parts[1]), parts[2]))
        elif kind == "done":
            report = json.loads(rest)
    if report is not None:
        journal.attempts, journal.conflicts, journal.unavailable = report["attempts"], report["conflicts"], report["unavailable"]
    return journal, report


def run_writer(
    store: Any,
    spec: WriterSpec,
    *,
    on_try: Callable[[str, str], None] | None = None,
    on_ack: Callable[[str, int, str], None] | None = None,
) -> Journal:
    """Append the writer's events, refreshing and retrying on conflict (bounded); return its journal.

    Each message's content is unique (writer/session/index), so the audit can
    tell every acknowledged append from every other one.
    """
    from evstore import StoreUnavailableError, WriteConflictError

    journal = Journal()
    deadline = time.monotonic() + (spec.deadline or WRITER_DEADLINE_SECONDS)
    rng = random.Random(spec.seed)

    def retrying(action: Callable[[], Any]) -> Any:
        for attempt in range(MAX_REFRESH_ATTEMPTS):
            try:
                return action()
            except StoreUnavailableError:
                if not spec.tolerate_unavailable or attempt + 1 == MAX_REFRESH_ATTEMPTS:
                    raise
                time.sleep(0.01 * rng.random())
        raise AssertionError("unreachable")

    sessions = {sid: retrying(partial(store.open, sid, create=True)) for sid in (spec.own, spec.shared, *spec.sessions)}
    order = [spec.own] * spec.own_count + [spec.shared] * spec.shared_count
    order += [sid for sid in spec.sessions for _ in range(spec.own_count)]
    rng.shuffle(order)
    counters: Counter[str] = Counter()
    for sid in order:
        content = f"{spec.writer}/{sid}/{counters[sid]}"
        counters[sid] += 1
        session = sessions[sid]
        journal.tried.append((sid, content))
        if on_try:
            on_try(sid, content)
        for conflicts in range(MAX_CONFLICTS_PER_APPEND):
            if conflicts:  # jittered exponential backoff, as a real client would: keeps 16 writers from lockstep
                time.sleep(rng.uniform(0, 0.004 * 2 ** min(conflicts, 6)))
            if time.monotonic() > deadline:
                raise TimeoutError(f"writer {spec.writer} passed its deadline")
            journal.attempts += 1
            try:
                seq = session.append({"role": "user", "content": content})
            except WriteConflictError:
                journal.conflicts += 1
                retrying(session.refresh)
                continue
            except StoreUnavailableError:
                if not spec.tolerate_unavailable:
                    raise
                journal.unavailable += 1  # maybe stored, maybe not: the audit allows it at most once
                break
            journal.acked.append((sid, seq, content))
            if on_ack:
                on_ack(sid, seq, content)
            break
        else:
            raise RuntimeError(f"writer {spec.writer}: {MAX_CONFLICTS_PER_APPEND} conflicts in a row on {sid}")
    return journal


def _writer_process(spec_json: str) -> None:
    """``python -m tests.stress.conftest writer SPEC``: a writer in its own process, journaling to a file."""
    args = json.loads(spec_json)
    store = StoreSpec(**args["store"]).open()
    spec = WriterSpec(**args["writer"])
    out = JournalFile(args["journal"])
    out.line("ready")
    go = Path(args["go"])
    deadline = time.monotonic() + 120
    while not go.exists():  # start together, so the writers contend
        if time.monotonic() > deadline:
            raise SystemExit("no go signal")
        time.sleep(0.005)
    journal = run_writer(store, spec, on_try=lambda s, c: out.line("try", s, c), on_ack=lambda s, q, c: out.line("ack", s, q, c))
    requests = sum(getattr(store.backend, "requests", Counter()).values())
    report = {"attempts": journal.attempts, "conflicts": journal.conflicts, "unavailable": journal.unavailable}
    out.line("done", json.dumps({**report, "requests": requests}))


@dataclass
class WriterProcess:
    process: subprocess.Popen[bytes]
    journal: Path
    spec: WriterSpec


def start_writer_processes(
    store: StoreSpec, specs: Iterable[WriterSpec], workdir: Path, *, timeout: float = 120, go: Path | None = None
) -> tuple[list[WriterProcess], Path]:
    """Start one process per spec; they wait for the returned go file, which the caller creates.

    With ``go`` given (a file that may already exist), return at once without waiting for the
    writers to be ready: a writer whose go file exists starts appending as soon as it is up."""
    wait_ready = go is None
    go = go or workdir / f"go-{uuid.uuid4().hex[:8]}"
    started = []
    for spec in specs:
        journal = workdir / f"{spec.writer}-{uuid.uuid4().hex[:6]}.journal"
        payload = json.dumps({"store": asdict(store), "writer": asdict(spec), "journal": str(journal), "go": str(go)})
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.stress.conftest", "writer", payload],
            cwd=ROOT,
            env=helper_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        started.append(WriterProcess(process, journal, spec))
    if not wait_ready:
        return started, go
    deadline = time.monotonic() + timeout
    for writer in started:  # every writer is ready (imports done, store open) before any starts
        while not (writer.journal.exists() and writer.journal.read_text().startswith("ready")):
            if writer.process.poll() is not None or time.monotonic() > deadline:
                stop_processes(started)
                raise RuntimeError(f"writer {writer.spec.writer} did not start: {_stderr_tail(writer)}")
            time.sleep(0.02)
    return started, go


def _stderr_tail(writer: WriterProcess) -> str:
    if writer.process.poll() is None or writer.process.stderr is None:
        return "still running"
    return writer.process.stderr.read().decode(errors="replace")[-2000:]


def wait_processes(writers: list[WriterProcess], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for writer in writers:
        try:
            writer.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            stop_processes(writers)
            raise
        if writer.process.returncode != 0:
            raise RuntimeError(f"writer {writer.spec.writer} failed ({writer.process.returncode}): {_stderr_tail(writer)}")


def stop_processes(writers: list[WriterProcess]) -> None:
    for writer in writers:
        if writer.process.poll() is None:
            writer.process.kill()
        writer.process.wait()
        if writer.process.stderr is not None:
            writer.process.stderr.close()


# ---- the audit -------------------------------------------------------------------------


@dataclass
class Audit:
    sessions: int = 0
    events: int = 0
    lost: list[tuple[str, int, str]] = field(default_factory=list)  # acknowledged, not at its seq
    duplicated: list[str] = field(default_factory=list)  # content found more than once
    corrupt: list[str] = field(default_factory=list)  # sessions whose replay/verify failed or had holes
    unexpected: list[str] = field(default_factory=list)  # content nobody tried to append

    @property
    def clean(self) -> bool:
        return not (self.lost or self.duplicated or self.corrupt or self.unexpected)

    def __str__(self) -> str:
        return (
            f"lost {len(self.lost)} {self.lost[:3]}, duplicated {len(self.duplicated)} {self.duplicated[:3]}, "
            f"corrupt {len(self.corrupt)} {self.corrupt[:3]}, unexpected {len(self.unexpected)} {self.unexpected[:3]}"
        )


def audit(
    store: Any, journal: Journal, sessions: Iterable[str], figures: Figures, *, verify: Callable[[str], bool] = lambda sid: True
) -> Audit:
    """Replay and verify every session and compare with the journal.

    Every acknowledged append must be found exactly once, at the seq it was
    acknowledged with (so nothing was overwritten); an append that was tried
    but not acknowledged may be found at most once; nothing else may be found;
    seqs must run 1..head without holes and ``store.verify`` must pass.

    Replay itself checks every ``prev`` from the manifest on and refuses holes
    (the code path verify uses); ``verify`` selects the sessions that are also
    put through ``store.verify`` with the replayed head as the expected receipt,
    since that reads every event a second time and moto serves ~90 requests/s.
    """
    from evstore import EvstoreError, Receipt

    result = Audit()
    found: Counter[str] = Counter()
    where: dict[str, tuple[str, int]] = {}
    for sid in sorted(set(sessions)):
        result.sessions += 1
        try:
            events = list(store.replay(sid))
            if verify(sid):
                expect = Receipt(events[-1].seq, events[-1].hash) if events else None
                verified = store.verify(sid, expect=expect)
                if verified.receipt.seq != len(events):
                    result.corrupt.append(f"{sid}: verify ends at {verified.receipt.seq}, replay at {len(events)}")
        except EvstoreError as error:
            result.corrupt.append(f"{sid}: {type(error).__name__}: {error}")
            continue
        seqs = [event.seq for event in events]
        if seqs != list(range(1, len(events) + 1)):
            result.corrupt.append(f"{sid}: seqs are not 1..{len(events)}")
        result.events += len(events)
        for event in events:
            for message in event.messages:
                content = str(message.get("content"))
                found[content] += 1
                where[content] = (sid, event.seq)
    tried = {content for _, content in journal.tried}
    for sid, seq, content in journal.acked:
        if where.get(content) != (sid, seq):
            result.lost.append((sid, seq, content))
    result.duplicated = sorted(content for content, count in found.items() if count > 1)
    result.unexpected = sorted(content for content in found if content not in tried)
    figures.add(
        audited_sessions=result.sessions,
        audited_events=result.events,
        lost=len(result.lost),
        duplicated=len(result.duplicated),
        corrupt=len(result.corrupt),
        unexpected=len(result.unexpected),
        acked=len(journal.acked),
        attempts=journal.attempts,
        conflicts=journal.conflicts,
        ambiguous=journal.unavailable,
    )
    return result


def resume_check(store: Any, sid: str) -> tuple[int, int, int]:
    """(head a new writer sees, last replayed seq, seq its first append got)."""
    last = max((event.seq for event in store.replay(sid)), default=0)
    writer = store.open(sid)
    head = writer.head
    seq = writer.append({"role": "user", "content": f"resumed/{sid}"})
    return head, last, seq


if __name__ == "__main__":
    if sys.argv[1] == "moto":
        _serve_moto(int(sys.argv[2]))
    elif sys.argv[1] == "writer":
        _writer_process(sys.argv[2])
    else:
        raise SystemExit(f"unknown helper {sys.argv[1]!r}")
