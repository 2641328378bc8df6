"""Measurements that need a fresh process: ``python benchmarks/_child.py COMMAND JSON-ARGS``.

Each command prints one JSON object on stdout. Run by the sections of ``benchmarks/run.py`` (``_harness.run_child``);
not a public interface.

* ``open``: a cold ``store.open(sid)`` against an S3 endpoint (time, requests).
* ``gc``: ``store.gc(...)`` over a bucket (time, requests, report, peak RSS).
* ``populate_local``: write a session into a LocalStore directory (setup only).
* ``replay_mem``: stream ``store.replay(sid)`` from a LocalStore; peak RSS before/after.
* ``replay_mem_s3``: the same against an S3 endpoint (LIST paged by 1,000); also time and requests.
* ``import_wall``: wall time of ``import evstore; open_store(s3://...)`` or the boto3 equivalent.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from typing import Any


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _start_peak() -> int:
    """The current RSS (KiB), with the peak reset to it where Linux allows.

    ``ru_maxrss`` survives ``exec`` (a child starts with its parent's peak), so
    the peak is read from ``VmHWM``, reset here through ``/proc/self/clear_refs``.
    """
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        pass
    return _status_kib("VmRSS") or int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def _peak() -> int:
    return _status_kib("VmHWM") or int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def cmd_open(args: dict[str, Any]) -> dict[str, Any]:
    from evstore import Store
    from evstore._backends._s3 import S3Store

    backend = S3Store(args["bucket"], endpoint_url=args["endpoint"])
    store = Store(backend)
    started = time.perf_counter()
    session = store.open(args["sid"])
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "requests": dict(backend.requests), "head": session.head}


def cmd_gc(args: dict[str, Any]) -> dict[str, Any]:
    from datetime import UTC, datetime, timedelta

    from evstore import Store
    from evstore._backends._s3 import S3Store

    backend = S3Store(args["bucket"], endpoint_url=args["endpoint"])
    store = Store(backend)
    now = datetime.now(UTC) + timedelta(days=args["days_ahead"])
    rss_before = _start_peak()
    started = time.perf_counter()
    report = store.gc(dry_run=args["dry_run"], grace=timedelta(days=1), now=now)
    seconds = time.perf_counter() - started
    fields = {
        name: getattr(report, name)
        for name in ("sessions", "objects_scanned", "objects_removed", "bytes_removed", "sessions_removed", "requests")
        if hasattr(report, name)
    }
    reasons = getattr(report, "reasons", {})
    return {
        "seconds": seconds,
        "wire_requests": dict(backend.requests),
        "report": fields,
        "reasons": dict(reasons) if isinstance(reasons, dict) else {},
        "maxrss_before_kib": rss_before,
        "maxrss_after_kib": _peak(),
    }


def cmd_populate_local(args: dict[str, Any]) -> dict[str, Any]:
    """Setup only: fsync is skipped while writing (the measured replay only reads)."""
    from concurrent.futures import ThreadPoolExecutor

    from evstore import LocalStore, MemoryStore, Store

    sys.path.insert(0, args["repo"])
    from benchmarks._data import message

    os.fsync = lambda fd: None  # setup writes only; durability is not what is measured
    memory = MemoryStore()
    twin = Store(memory)
    session = twin.create(args["sid"])
    batch = 0
    local = LocalStore(args["directory"])

    def copy(key: str) -> None:
        stored = memory.get(key)
        local.create(key, stored.data, metadata=stored.metadata)

    with ThreadPoolExecutor(8) as pool:
        keys = [info.key for info in memory.list("")]
        list(pool.map(copy, keys))
        for i in range(args["events"]):
            session.append(message(i, args["size"]))
            batch += 1
            if batch == 10_000 or i == args["events"] - 1:
                keys = [info.key for info in memory.list("") if info.key.rsplit("/", 1)[-1].isdigit()]
                list(pool.map(copy, keys))
                memory.delete_many(keys)  # keep the parent's memory bounded while writing 100k
                batch = 0
    return {"events": args["events"]}


def cmd_replay_mem(args: dict[str, Any]) -> dict[str, Any]:
    from evstore import LocalStore, Store

    store = Store(LocalStore(args["directory"]))
    store.info(args["sid"])  # warm: imports, pools, first reads
    rss_before = _start_peak()
    started = time.perf_counter()
    count = 0
    body_bytes = 0
    for event in store.replay(args["sid"]):
        count += 1
        body_bytes += len(event.messages[0].get("content") or "") if event.messages else 0
    seconds = time.perf_counter() - started
    return {
        "events": count,
        "seconds": seconds,
        "content_bytes": body_bytes,
        "maxrss_before_kib": rss_before,
        "maxrss_after_kib": _peak(),
    }


def cmd_replay_mem_s3(args: dict[str, Any]) -> dict[str, Any]:
    from evstore import Store
    from evstore._backends._s3 import S3Store

    backend = S3Store(args["bucket"], endpoint_url=args["endpoint"])
    store = Store(backend)
    store.info(args["sid"])
    # warm what every replay sets up once, whatever its length: imports, the GET pool, the HTTP connections
    for _ in store.replay(args["sid"], end=64):
        pass
    warm = dict(backend.requests)
    rss_before = _start_peak()
    started = time.perf_counter()
    count = 0
    for event in store.replay(args["sid"]):
        count += 1
        if event.seq != count:
            raise AssertionError(f"seq {event.seq} at position {count}")
    seconds = time.perf_counter() - started
    requests = {k: v - warm.get(k, 0) for k, v in backend.requests.items()}
    return {
        "events": count,
        "seconds": seconds,
        "requests": requests,
        "maxrss_before_kib": rss_before,
        "maxrss_after_kib": _peak(),
    }


def cmd_import_wall(args: dict[str, Any]) -> dict[str, Any]:
    started = time.perf_counter()
    if args["which"] == "evstore":
        import evstore

        evstore.open_store("s3://bench-import")
    else:
        import boto3

        boto3.client("s3")
    return {"seconds": time.perf_counter() - started, "boto3_loaded": "boto3" in sys.modules}


COMMANDS = {
    "open": cmd_open,
    "gc": cmd_gc,
    "populate_local": cmd_populate_local,
    "replay_mem": cmd_replay_mem,
    "replay_mem_s3": cmd_replay_mem_s3,
    "import_wall": cmd_import_wall,
}

if __name__ == "__main__":
    result = COMMANDS[sys.argv[1]](json.loads(sys.argv[2]))
    sys.stdout.write(json.dumps(result) + "\n")
