"""The bench of ``benchmarks/resume.py``: the server behind the latency proxy, each size's sessions set up
(and put back after every run), the resumes in fresh processes, and the appends in this one."""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from benchmarks._data import message, strands_message
from benchmarks._harness import REPO, alternating, median, timed_rounds
from benchmarks._s3env import Env, load_rgw
from benchmarks.studies.resume.child import unpack_resume
from benchmarks.studies.resume.plan import (
    BIG,
    CLIENT_CORES,
    FEW_REQUESTS,
    SEGMENT,
    Item,
    Plan,
    Sample,
    fmt_ms,
    variants_at,
)
from benchmarks.studies.resume.report import Figures
from benchmarks.studies.resume.strands_sessions import (
    snapshot_storage,
    strands_agent,
    strands_client,
    strands_s3_objects,
    strands_snapshot_objects,
)

#: the script a resume runs in (``--child``): it puts the evstore being measured first on the path
SCRIPT = REPO / "benchmarks" / "resume.py"


def threads_cpu(pid: int) -> float:
    """CPU seconds the live threads of process ``pid`` have run (``/proc/<pid>/task/*/schedstat``:
    nanoseconds, unlike ``stat``'s 10 ms ticks); 0.0 where it cannot be read."""
    total = 0
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError, IndexError):
                total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


class Bench:
    """The server (RGW, moto or an external endpoint) behind a ``LatencyProxy``, one bucket, and the
    figures measured through them (``figures``)."""

    def __init__(self, plan: Plan, server: str) -> None:
        self.plan = plan
        self.rgw: ModuleType | None = None
        self.rgw_info: Any = None
        external = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if server == "auto":
            server = "external" if external else "rgw" if not load_rgw().missing_binaries() else "moto"
        if server == "external" and not external:
            raise SystemExit("--server external needs AWS_ENDPOINT_URL")
        if server in ("rgw", "moto"):
            os.environ.pop("AWS_ENDPOINT_URL_S3", None)
            os.environ.pop("AWS_ENDPOINT_URL", None)
        if server == "rgw":
            self.rgw = load_rgw()
            started = time.perf_counter()
            self.rgw_info = self.rgw.start()
            os.environ.update(self.rgw_info.env())
            version = subprocess.run(["radosgw", "--version"], capture_output=True, text=True, check=False).stdout.split()
            ceph = " ".join(version[:3]) if version else "ceph"
            took = time.perf_counter() - started
            self.server = f"Ceph RGW ({ceph}, infra/rgw.py: one mon, one OSD on memstore), started in {took:.0f} s"
        # moto: Env starts moto's server in a process of its own and loads setup objects through a side channel
        try:
            self.env = Env(SEGMENT)
        except BaseException:
            self.close()
            raise
        if server == "moto":
            import moto

            self.server = f"moto {moto.__version__} in a process of its own (page-proportional LIST: {self.env.fast_list})"
        elif server == "external":
            self.server = f"the endpoint at {self.env.endpoint} (AWS_ENDPOINT_URL)"
        from benchmarks.latency_proxy import LatencyProxy

        self.proxy = LatencyProxy(self.env.endpoint).start()
        self.bucket = self.env.new_bucket("resume")
        self.sessions: dict[tuple[str, int], str] = {}
        #: each session's objects as set up: key -> (md5, bytes, metadata), to put it back after a run
        self.fixtures: dict[str, dict[str, tuple[str, bytes, dict[str, str]]]] = {}
        self.layout_notes: dict[tuple[str, int], str] = {}
        self.index = iter(range(1_000_000, 10**9))
        from evstore import Store

        self.has_resume = hasattr(Store, "resume")
        self.auto_compact_default = inspect.signature(Store).parameters["auto_compact"].default
        self.figures = Figures(plan, self.has_resume)

    def close(self) -> None:
        steps: tuple[Callable[[], object], ...] = (
            lambda: self.proxy.close(),
            lambda: self.env.close(),
            lambda: self.rgw.stop(self.rgw_info) if self.rgw is not None and self.rgw_info is not None else None,
        )
        for step in steps:
            with contextlib.suppress(Exception):  # each resource is released even when another fails
                step()

    # ---- setup ----------------------------------------------------------------------

    def evstore_objects(self, sid: str, n: int, kind: str) -> Iterator[Item]:
        from evstore import MemoryStore, Store

        memory = MemoryStore()
        store = Store(memory) if kind == "evstore-defaults" else Store(memory, auto_compact=None)
        session = store.create(sid)
        for i in range(n):
            session.append(message(i))
        if kind == "evstore-compacted":
            store.compact(sid, segment_size=min(SEGMENT, n))
        store.close()  # anything the defaults do in the background is done
        prefix = store.layout.session_prefix(sid)
        names = [info.key.removeprefix(prefix) for info in memory.list(prefix)]  # events are bare seqs
        # segments are "<first>-<last>" (young ones under young/); other names by their first part (manifest, ztree)
        segment = re.compile(r"(?:segments|young)/\d+-\d+")
        extra = Counter("segment" if segment.fullmatch(name) else name.split("/")[0] for name in names if not name.isdigit())
        others = ", ".join(f"{count:,} {name}" for name, count in sorted(extra.items()))
        self.layout_notes[(kind, n)] = f"{len(names):,} objects ({len(names) - extra.total():,} events, {others})"
        if kind == "evstore-uncompacted" and extra.total() != 1:
            print(f"WARNING: the uncompacted session of {n:,} has objects besides its events and manifest: {others}")
        for info in memory.list(""):
            stored = memory.get(info.key)
            yield stored.key, stored.data, dict(stored.metadata)

    def setup(self, n: int) -> None:
        started = time.perf_counter()
        items: list[Item] = []
        for kind in variants_at(n):
            sid = f"{kind}-{n}-{uuid.uuid4().hex[:6]}"
            self.sessions[(kind, n)] = sid
            if kind.startswith("evstore"):
                objects = list(self.evstore_objects(sid, n, kind))
            elif kind == "strands-s3":
                objects = strands_s3_objects(self.bucket, sid, n)
            else:
                objects = strands_snapshot_objects(sid, n)
            self.fixtures[sid] = {key: (hashlib.md5(data).hexdigest(), data, meta) for key, data, meta in objects}
            items.extend(objects)
        built = time.perf_counter() - started
        stored = self.env.bulk_put(self.bucket, items)
        took = time.perf_counter() - started - built
        print(f"(setup of {n:,} messages: {stored:,} objects built in {built:.1f} s, stored in {took:.1f} s)")

    def restore(self, sid: str) -> int:
        """Put a session back as it was set up (directly, not through the proxy), so that every resume
        meets exactly N messages: remove what a run added, rewrite what it changed. Returns the objects touched."""
        fixture = self.fixtures[sid]
        first = next(iter(fixture))
        prefix = first[: first.index(sid) + len(sid) + 1]  # "<layout's folder>/<...sid>/"
        client = self.env.setup
        seen: set[str] = set()
        touched = 0
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                key = str(item["Key"])
                seen.add(key)
                if key not in fixture:
                    client.delete_object(Bucket=self.bucket, Key=key)
                    touched += 1
                elif str(item["ETag"]).strip('"') != fixture[key][0]:
                    client.put_object(Bucket=self.bucket, Key=key, Body=fixture[key][1], Metadata=fixture[key][2])
                    touched += 1
        for key in fixture.keys() - seen:
            client.put_object(Bucket=self.bucket, Key=key, Body=fixture[key][1], Metadata=fixture[key][2])
            touched += 1
        return touched

    # ---- resume -----------------------------------------------------------------------

    def server_cpu(self) -> float:
        """CPU seconds so far of what answers the client: RGW's daemons (or moto's process) and this
        process, whose only work during a run is the proxy's threads."""
        pids = list(self.rgw_info.pids.values()) if self.rgw_info is not None else []
        moto = getattr(self.env, "_server_process", None)
        if moto is not None:
            pids.append(moto.pid)
        return time.process_time() + sum(threads_cpu(pid) for pid in pids)

    def child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("AWS_ENDPOINT_URL_S3", None)
        env["AWS_ENDPOINT_URL"] = self.proxy.endpoint  # anything that finds its endpoint itself finds the proxy
        env["OTEL_SDK_DISABLED"] = "true"
        return env

    def resume_once(self, variant: str, n: int) -> Sample:
        sid = self.sessions[(variant, n)]
        args: dict[str, Any] = {"endpoint": self.proxy.endpoint, "bucket": self.bucket, "sid": sid, "index": next(self.index)}
        if variant.startswith("evstore"):
            args["kind"] = "evstore"
            args["call"] = "resume" if variant == "evstore-defaults" and self.has_resume else "open+context"
        else:
            args["kind"] = variant
        with tempfile.TemporaryFile("w+") as errors:
            proc = subprocess.Popen(
                [sys.executable, str(SCRIPT), "--child", json.dumps(args)],
                preexec_fn=(lambda: os.sched_setaffinity(0, CLIENT_CORES)) if self.plan.pinned else None,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errors,
                text=True,
                cwd=REPO,
                env=self.child_env(),
            )
            assert proc.stdin is not None and proc.stdout is not None
            ready = proc.stdout.readline()
            if not ready:
                proc.wait()
                errors.seek(0)
                raise RuntimeError(f"{variant} child failed before it was ready: {errors.read()[-3000:]}")
            self.proxy.reset()
            server_before = self.server_cpu()
            proc.stdin.write("go\n")
            proc.stdin.flush()
            out, _ = proc.communicate(timeout=3600)
            self.proxy.wait_idle()
            server_cpu = self.server_cpu() - server_before
            stats = self.proxy.snapshot()
            if proc.returncode != 0:
                errors.seek(0)
                raise RuntimeError(f"{variant} child exited {proc.returncode}: {errors.read()[-3000:]}")
        got = json.loads(out.strip().splitlines()[-1])
        if got["context"] < n:
            raise RuntimeError(f"{variant} resumed {got['context']} messages of {n}")
        if got["client_requests"] != stats.requests:
            print(
                f"WARNING: {variant} at {n:,}: the client sent {got['client_requests']} requests, the proxy saw {stats.requests}"
            )
        sent = got["client_requests"]
        return Sample(got["seconds"], got["cpu"], stats.requests, stats.depth, sent, stats.by_kind, got["context"], server_cpu)

    def rounds(self, variant: str, n: int) -> int:
        rounds = self.plan.big_rounds if n >= BIG else self.plan.rounds
        return max(rounds, self.plan.few_request_rounds) if variant in FEW_REQUESTS else rounds

    def bench_resume(self, n: int) -> None:
        for delay_ms in self.plan.delays_ms:
            self.proxy.delay = delay_ms / 1000
            here = variants_at(n)
            for r in range(max(self.rounds(variant, n) for variant in here)):
                for variant in (v for v in alternating(here, r) if r < self.rounds(v, n)):
                    sample = self.resume_once(variant, n)
                    self.restore(self.sessions[(variant, n)])
                    self.figures.samples.setdefault((variant, n, delay_ms), []).append(sample)
                    print(
                        f"  resume {n:,} @ {delay_ms:g} ms, {variant}: {sample.requests:,} requests, "
                        f"{sample.depth:,} dependent, {fmt_ms(sample.seconds)}",
                        flush=True,
                    )
        self.proxy.delay = 0.0

    # ---- append -----------------------------------------------------------------------

    def bench_append(self, n: int, delay_ms: float) -> None:
        import boto3
        from strands.session.snapshot_session_manager import SnapshotSessionManager

        from evstore import Store
        from evstore._backends._s3 import S3Store

        self.proxy.delay = 0.0
        backend = S3Store(self.bucket, endpoint_url=self.proxy.endpoint)
        store = Store(backend)  # defaults
        sid = self.sessions[("evstore-defaults", n)]
        # the writer an agent appends with: from resume() when the library has it (it has read the tail, which
        # default compaction packs from), else from open()
        writer = unpack_resume(store.resume(sid))[0] if self.has_resume else store.open(sid)
        event = backend.get(store.layout.event_key(sid, 1)).data  # an event's bytes, as stored
        client = backend.client  # the raw baseline: the very same client and connection pool
        snap_sid = self.sessions[("strands-snapshot", n)]
        agent = strands_agent([strands_message(i) for i in range(n)])
        snap_client = strands_client(boto3.session.Session(), self.proxy.endpoint)
        manager = SnapshotSessionManager(snap_sid, storage=snapshot_storage(self.bucket, snap_client))

        def evstore_append() -> None:
            writer.append(message(next(self.index)))

        def raw_put() -> None:
            client.put_object(Bucket=self.bucket, Key=f"raw/{uuid.uuid4().hex}", Body=event, IfNoneMatch="*")

        def snapshot_save() -> None:
            agent.messages.append(strands_message(next(self.index)))
            manager.sync_agent(agent)

        variants: dict[str, Callable[[], None]] = {"evstore": evstore_append, "raw": raw_put, "snapshot": snapshot_save}
        for fn in variants.values():  # warm: connections made, code paths loaded
            fn()
        self.proxy.delay = delay_ms / 1000
        requests_before = sum(backend.requests.values())
        times = timed_rounds(variants, self.plan.append_rounds)
        self.proxy.delay = 0.0
        store.close()  # background work of the defaults, if any, is counted
        evstore_requests = sum(backend.requests.values()) - requests_before - self.plan.append_rounds  # less the raw PUTs
        self.figures.appends[(n, delay_ms)] = {
            "times": times,
            "evstore_requests_per_append": evstore_requests / self.plan.append_rounds,
            "event_bytes": len(event),
        }
        med = {k: median(v) for k, v in times.items()}
        print(
            f"  append at {n:,} @ {delay_ms:g} ms: evstore {fmt_ms(med['evstore'])}, raw PUT {fmt_ms(med['raw'])}, "
            f"snapshot save {fmt_ms(med['snapshot'])}",
            flush=True,
        )

    def bench_amortized(self, count: int) -> None:
        """Requests per append with the defaults over ``count`` appends to a new session, counted by the proxy
        (no delay: only the count matters), background work included (``close`` waits for it)."""
        from evstore import Store
        from evstore._backends._s3 import S3Store

        self.proxy.delay = 0.0
        store = Store(S3Store(self.bucket, endpoint_url=self.proxy.endpoint))
        writer = store.create(f"amortized-{uuid.uuid4().hex[:6]}")
        self.proxy.reset()
        for i in range(count):
            writer.append(message(i))
        store.close()
        self.proxy.wait_idle()
        stats = self.proxy.snapshot()
        self.figures.amortized = (count, stats.requests / count)
        print(f"  {count:,} appends to a new session with the defaults: {stats.requests:,} requests ({stats.by_kind})")
