"""The soak: the reliability harness at volume, as a command outside CI.

    python -m tests.stress.soak --server moto --appends 100000
    python -m tests.stress.soak --server rgw --appends 100000
    python -m tests.stress.soak --server rgw --appends 32000 --writers 32 --sessions 1000

What runs (every piece is the harness's own, from ``conftest`` and ``faultproxy``):

* the server: moto's S3 server in its own process with PutObject serialized
  (``conftest.moto_server``), or a throwaway Ceph RGW (``infra/rgw.py``);
* ``--writers`` writer *processes* (``conftest``'s writer helper, journaling
  every ``try`` and ``ack`` with one O_APPEND write per line). Writer ``i``
  owns the sessions ``own-j`` with ``j % writers == i`` (``--sessions`` of
  them in all) and also appends to one ``shared`` session that every writer
  contends for (``--shared-fraction`` of its appends). A process appends a
  batch (``--batch`` appends over its sessions) and exits; the slot then starts
  a new process that resumes the same sessions;
* SIGKILL: every ``--kill-interval`` seconds on average (exponential gaps, so
  at random moments) a running writer process that has begun appending is
  killed, wherever it is in an append; its slot is restarted at once and the
  new process resumes its sessions;
* faults: all writer traffic crosses the fault proxy, which gives each request
  a fault with probability ``--fault-rate``, split evenly over lost response
  after commit, reset after, reset before, 500 InternalError and 503 SlowDown.
  Writers tolerate ``StoreUnavailableError`` (the append counts as
  unacknowledged: it may be stored at most once);
* the audit (``conftest.audit``), on a client that bypasses the proxy: every
  session is replayed and verified; every acknowledged append is found exactly
  once at its acknowledged seq, an unacknowledged one at most once, nothing
  nobody tried is found, seqs run 1..head.

The run stops starting writers once ``--appends`` appends are acknowledged;
every loop is bounded by count and by ``--timeout`` seconds. Only 127.0.0.1
is used. Exit status 0 only when the audit finds lost, duplicated, corrupt and
unexpected all 0, the target was reached and no writer failed on its own.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .conftest import (
    Figures,
    Journal,
    StoreSpec,
    WriterProcess,
    WriterSpec,
    audit,
    moto_server,
    read_journal,
    start_writer_processes,
)
from .faultproxy import Fault, FaultProxy, random_faults

#: The faults the soak injects (the issue's list), each with an equal share of ``--fault-rate``.
SOAK_FAULTS = (Fault.LOSE_RESPONSE, Fault.ERROR_500, Fault.SLOWDOWN_503, Fault.RESET_BEFORE, Fault.RESET_AFTER)
#: A writer process that appends for longer than this has failed (it raises TimeoutError).
LIFE_DEADLINE_SECONDS = 900.0


@dataclass(frozen=True)
class SoakConfig:
    server: str = "moto"
    appends: int = 100_000
    writers: int = 8
    sessions: int = 0  # 0: one own session per writer
    batch: int = 300
    shared_fraction: float = 0.1
    fault_rate: float = 0.07
    kill_interval: float = 4.0
    read_timeout: float = 2.0
    max_attempts: int = 3
    timeout: float = 5400.0
    seed: int = 1
    workdir: str = ""


@dataclass
class SoakResult:
    server: str
    writers: int
    sessions: int
    acked: int = 0
    tried: int = 0
    unacknowledged: int = 0
    conflicts: int = 0
    requests: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    kills: int = 0
    lives: int = 0
    writer_errors: list[str] = field(default_factory=list)
    stopped: int = 0  # writer processes still running at the timeout, killed by the soak then
    write_seconds: float = 0.0
    audit_seconds: float = 0.0
    audited_sessions: int = 0
    audited_events: int = 0
    lost: int = 0
    duplicated: int = 0
    corrupt: int = 0
    unexpected: int = 0
    examples: str = ""
    target_reached: bool = False

    @property
    def injected(self) -> int:
        return sum(self.faults.values())

    @property
    def fault_rate(self) -> float:
        return 100.0 * self.injected / self.requests if self.requests else 0.0

    @property
    def ok(self) -> bool:
        return self.target_reached and not (self.lost or self.duplicated or self.corrupt or self.unexpected or self.writer_errors)

    def lines(self) -> list[str]:
        kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(self.faults.items()))
        wall = self.write_seconds + self.audit_seconds
        return [
            f"server: {self.server}; {self.writers} writer processes, {self.sessions} own sessions + 1 shared",
            f"appends acknowledged: {self.acked} ({self.tried} tried, {self.unacknowledged} unacknowledged:"
            f" failed or in flight at a kill; {self.conflicts} conflicts refreshed and retried by writers that finished)",
            f"requests through the fault proxy: {self.requests}",
            f"faults injected: {self.injected} ({kinds}); fault rate {self.fault_rate:.2f}% of requests",
            f"writer processes: {self.lives} started, {self.kills} killed with SIGKILL and restarted,"
            f" {len(self.writer_errors)} failed on their own, {self.stopped} stopped at the timeout",
            f"wall time: {wall:.0f} s ({self.write_seconds:.0f} s writing, {self.audit_seconds:.0f} s auditing);"
            f" throughput {self.acked / self.write_seconds if self.write_seconds else 0:.1f} acknowledged appends/s",
            f"audited: {self.audited_sessions} sessions, {self.audited_events} events replayed and verified",
            f"lost: {self.lost}, duplicated: {self.duplicated}, corrupt: {self.corrupt}, unexpected: {self.unexpected}",
        ]


@contextmanager
def server(kind: str) -> Iterator[tuple[str, str, str]]:
    """(endpoint, access key, secret key) of a fresh server on 127.0.0.1, stopped on exit."""
    if kind == "moto":
        with moto_server() as url:
            yield url, "", ""
        return
    if kind != "rgw":
        raise SystemExit(f"soak: unknown server {kind!r} (moto or rgw)")
    from tests.rgw.conftest import load_rgw_module

    rgw = load_rgw_module()
    info = rgw.start(None, None, None, timeout=180.0)
    try:
        yield info.endpoint, info.access_key, info.secret_key
    finally:
        rgw.stop(info)


def make_bucket(endpoint: str, access_key: str, secret_key: str) -> str:
    import boto3

    name = f"soak-{uuid.uuid4().hex[:12]}"
    session = boto3.session.Session(
        aws_access_key_id=access_key or "testing", aws_secret_access_key=secret_key or "testing", region_name="us-east-1"
    )
    session.client("s3", endpoint_url=endpoint).create_bucket(Bucket=name)
    return name


@dataclass
class Life:
    """One writer process of a slot; ``killed`` once the soak sent it SIGKILL."""

    slot: int
    writer: WriterProcess
    killed: bool = False
    stopped: bool = False  # killed because the writing phase reached its timeout


def run(config: SoakConfig, *, out: Any = sys.stdout, figures: Figures | None = None) -> SoakResult:
    """Run the soak and return its figures (printing progress and the figures to ``out``; the audit
    also adds to ``figures``, the harness's totals, when given)."""
    writers = config.writers
    n_sessions = config.sessions or writers
    if writers < 1 or n_sessions < writers or config.appends < 1 or config.batch < 1:
        raise SystemExit("soak: need writers >= 1, sessions >= writers, appends >= 1, batch >= 1")
    result = SoakResult(config.server, writers, n_sessions)
    rng = random.Random(config.seed)
    own = [[f"own-{j:05d}" for j in range(slot, n_sessions, writers)] for slot in range(writers)]
    sessions = {sid for group in own for sid in group} | {"shared"}
    workdir = Path(config.workdir or tempfile.mkdtemp(prefix="evstore-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    go = workdir / "go"
    go.touch()  # writers start appending as soon as they are up
    rates = {fault: config.fault_rate / len(SOAK_FAULTS) for fault in SOAK_FAULTS}

    def emit(line: str) -> None:
        print(line, file=out, flush=True)

    with server(config.server) as (endpoint, access_key, secret_key):
        bucket = make_bucket(endpoint, access_key, secret_key)
        # a fault proxy of its own per run; slow faults hold for 2.5 read timeouts (none are in SOAK_FAULTS)
        with FaultProxy(endpoint, delay=config.read_timeout * 2.5) as proxy:
            proxy.plan = random_faults(rates, seed=config.seed, limit=10 * config.appends + 10_000)
            via_proxy = StoreSpec(
                "s3",
                endpoint=proxy.url,
                bucket=bucket,
                max_attempts=config.max_attempts,
                read_timeout=config.read_timeout,
                access_key=access_key,
                secret_key=secret_key,
            )
            emit(f"soak: {config.server} at {endpoint}, bucket {bucket}, proxy {proxy.url}, journals in {workdir}")
            journal, started = _write_phase(config, via_proxy, own, go, workdir, rng, result, emit)
            result.write_seconds = time.monotonic() - started
            result.requests = len(proxy.log)
            result.faults = {fault.value: count for fault, count in sorted(proxy.log.faults().items(), key=lambda i: i[0].value)}
        emit(f"soak: writing done in {result.write_seconds:.0f} s; auditing {len(sessions)} sessions")
        audit_started = time.monotonic()
        direct = StoreSpec(
            "s3",
            endpoint=endpoint,
            bucket=bucket,
            max_attempts=5,
            read_timeout=30.0,
            access_key=access_key,
            secret_key=secret_key,
        )
        # every session some writer tried an append to (a try is journaled after the writer opened all its
        # sessions, so each of these exists); with all slots running at the start that is every session
        tried_in = {sid for sid, _ in journal.tried}
        if tried_in != sessions:
            idle = sorted(sessions - tried_in)
            emit(f"soak: {len(idle)} sessions got no append attempt (not audited): {idle[:5]}")
        outcome = audit(direct.open(), journal, tried_in, figures or Figures(), verify=lambda sid: True)
        result.audit_seconds = time.monotonic() - audit_started
    result.acked = len(journal.acked)
    result.tried = len(journal.tried)
    result.unacknowledged = result.tried - result.acked
    result.conflicts = journal.conflicts
    result.audited_sessions, result.audited_events = outcome.sessions, outcome.events
    result.lost, result.duplicated = len(outcome.lost), len(outcome.duplicated)
    result.corrupt, result.unexpected = len(outcome.corrupt), len(outcome.unexpected)
    result.examples = "" if outcome.clean else str(outcome)
    result.target_reached = result.acked >= config.appends
    for line in result.lines():
        emit(line)
    if result.examples:
        emit(f"audit: {result.examples}")
    for error in result.writer_errors[:5]:
        emit(f"writer error: {error}")
    if not result.target_reached:
        emit(f"soak: only {result.acked} of {config.appends} appends acknowledged before the timeout")
    return result


def _write_phase(
    config: SoakConfig,
    store: StoreSpec,
    own: list[list[str]],
    go: Path,
    workdir: Path,
    rng: random.Random,
    result: SoakResult,
    emit: Any,
) -> tuple[Journal, float]:
    """Keep ``config.writers`` writer processes running, kill one at random moments, restart every
    slot whose process ended, until the acknowledged appends reach the target (or the timeout)."""
    journal = Journal()
    started = time.monotonic()
    deadline = started + config.timeout
    running: dict[int, Life] = {}
    acked = 0  # acknowledged by writer processes that have ended
    lives = Counter[int]()
    next_kill = started + rng.expovariate(1 / config.kill_interval) if config.kill_interval > 0 else math.inf
    next_report = started + 30

    # a smaller batch when the target is small, so that every writer slot gets a process at the start
    batch = max(1, min(config.batch, math.ceil(config.appends / config.writers / 2)))

    def expected(slot: int) -> int:
        per = max(1, batch // len(own[slot]))
        return per * len(own[slot]) + _shared_count(per * len(own[slot]), config.shared_fraction)

    def start(slot: int) -> None:
        lives[slot] += 1
        per = max(1, batch // len(own[slot]))
        spec = WriterSpec(
            writer=f"w{slot}.{lives[slot]}",
            own=own[slot][0],
            shared="shared",
            own_count=per,
            shared_count=_shared_count(per * len(own[slot]), config.shared_fraction),
            seed=rng.randrange(2**32),
            tolerate_unavailable=True,
            sessions=tuple(own[slot][1:]),
            deadline=LIFE_DEADLINE_SECONDS,
        )
        (process,), _ = start_writer_processes(store, [spec], workdir, go=go)
        running[slot] = Life(slot, process)
        result.lives += 1

    def finish(life: Life) -> int:
        process = life.writer.process
        stderr = process.stderr.read().decode(errors="replace") if process.stderr else ""
        if process.stderr:
            process.stderr.close()
        each, report = read_journal(life.writer.journal)
        if report is None:  # killed: at least one attempt per append it tried (its conflict retries are unknown)
            each.attempts = len(each.tried)
        journal.merge(each)
        if process.returncode == -signal.SIGKILL and life.killed:
            result.kills += 1
        elif life.stopped:
            result.stopped += 1
        elif process.returncode != 0 or report is None:
            tail = " ".join(stderr.strip().splitlines()[-1:])[:300]
            result.writer_errors.append(f"{life.writer.spec.writer} exited {process.returncode}: {tail}")
        return len(each.acked)

    try:
        while True:
            now = time.monotonic()
            for slot, life in list(running.items()):
                if life.writer.process.poll() is not None:
                    acked += finish(life)
                    del running[slot]
            if now > deadline:
                break
            in_flight = sum(expected(slot) for slot in running)
            for slot in range(config.writers):
                if slot not in running and acked + in_flight < config.appends:
                    start(slot)
                    in_flight += expected(slot)
            if not running:
                break
            if now >= next_kill:
                next_kill = now + rng.expovariate(1 / config.kill_interval)
                # only a process that has begun appending is killed
                candidates = [life for life in running.values() if _has_begun(life.writer.journal)]
                if candidates:
                    victim = rng.choice(candidates)
                    if victim.writer.process.poll() is None:
                        victim.killed = True
                        victim.writer.process.send_signal(signal.SIGKILL)
            if now >= next_report:
                next_report = now + 30
                emit(
                    f"soak: {now - started:.0f} s, {acked} acknowledged by ended writers, {result.lives} started,"
                    f" {result.kills} killed"
                )
            time.sleep(0.02)
    finally:
        for life in running.values():  # only at the timeout (or an error): the loop drains otherwise
            if life.writer.process.poll() is None:
                life.stopped = True
                life.writer.process.kill()
            life.writer.process.wait()
            finish(life)
    return journal, started


def _has_begun(journal: Path) -> bool:
    """The writer has journaled an append (a ``try`` after its ``ready`` line): it has opened its
    sessions and is appending, so a kill lands in its appends, not in its start-up. (Killing writers
    that are still opening their sessions can starve a slow server's run of appends.)"""
    return journal.exists() and journal.stat().st_size > len(b"ready\n")


def _shared_count(own_total: int, fraction: float) -> int:
    """Appends to the shared session for ``own_total`` own appends, so they are ``fraction`` of all."""
    fraction = max(0.0, min(fraction, 0.9))
    return round(own_total * fraction / (1 - fraction))


def parse(argv: Sequence[str] | None) -> tuple[SoakConfig, str]:
    defaults = SoakConfig()
    parser = argparse.ArgumentParser(prog="python -m tests.stress.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", choices=("moto", "rgw"), default=defaults.server)
    parser.add_argument("--appends", type=int, default=defaults.appends, help="acknowledged appends to reach")
    parser.add_argument("--writers", type=int, default=defaults.writers, help="writer processes at a time")
    parser.add_argument("--sessions", type=int, default=defaults.sessions, help="own sessions in all (default: one per writer)")
    parser.add_argument("--batch", type=int, default=defaults.batch, help="own appends per writer process")
    parser.add_argument("--shared-fraction", type=float, default=defaults.shared_fraction)
    parser.add_argument("--fault-rate", type=float, default=defaults.fault_rate, help="probability a request is faulted")
    parser.add_argument(
        "--kill-interval", type=float, default=defaults.kill_interval, help="mean seconds between SIGKILLs (0: none)"
    )
    parser.add_argument("--read-timeout", type=float, default=defaults.read_timeout)
    parser.add_argument("--max-attempts", type=int, default=defaults.max_attempts)
    parser.add_argument("--timeout", type=float, default=defaults.timeout, help="bound on the writing phase, seconds")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--workdir", default="", help="where the journals go (default: a new temporary directory)")
    parser.add_argument("--json", default="", help="also write the figures as JSON to this file")
    args = parser.parse_args(argv)
    values = {name: value for name, value in vars(args).items() if name != "json"}
    return SoakConfig(**values), args.json


def main(argv: Sequence[str] | None = None) -> int:
    config, json_path = parse(argv)
    result = run(config)
    if json_path:
        payload = {**asdict(result), "fault_rate_percent": result.fault_rate, "ok": result.ok, "config": asdict(config)}
        Path(json_path).write_text(json.dumps(payload, indent=2) + "\n")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
