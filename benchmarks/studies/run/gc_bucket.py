"""Section gc: store.gc over a bucket of sessions, half of them deleted or expired, in a fresh process."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from benchmarks._harness import requests_cell, run_child
from benchmarks._s3env import Env, build_in_memory, memory_objects
from benchmarks._tables import TextTable
from benchmarks.studies.run.config import Config, Results, Target


def bench_gc(env: Env, cfg: Config, targets: list[Target]) -> Results:
    from evstore import Store
    from evstore._codec import Tombstone, encode_json, format_ts

    if not hasattr(Store, "gc"):
        print("\n## gc\nskipped: this evstore has no Store.gc yet")
        return {"skipped": "Store has no gc"}
    bucket = env.new_bucket("gc")
    sessions = cfg.gc_sessions
    per = cfg.gc_objects_per_session  # the manifest + (per - 1) events
    started = time.perf_counter()
    expected_removed = 0
    for j in range(sessions):
        sid = f"s{j:05d}"
        memory, session = build_in_memory(sid, per - 1, size=200)
        objects = list(memory_objects(memory))
        fate = j % 4  # 0, 1: live; 2: deleted (tombstone, objects left behind); 3: expired (manifest gone)
        if fate == 2:
            tomb = Tombstone(sid, session.manifest.uid, format_ts(datetime.now(UTC) - timedelta(days=3)))
            objects.append((f"sessions/{sid}/tombstone", encode_json(tomb), {}))
            expected_removed += len(objects)
        elif fate == 3:
            objects = [o for o in objects if not o[0].endswith("/manifest")]
            expected_removed += len(objects)
        env.bulk_put(bucket, objects)
    n_objects = sum(1 for _ in env.keys(bucket))
    print(f"\n(gc setup: {n_objects:,} objects in {sessions:,} sessions in {time.perf_counter() - started:.0f} s)")
    args = {"endpoint": env.endpoint, "bucket": bucket, "days_ahead": 2}
    dry = run_child("gc", {**args, "dry_run": True}, timeout=1800)
    real = run_child("gc", {**args, "dry_run": False}, timeout=1800)
    left = sum(1 for _ in env.keys(bucket))
    table = TextTable(
        f"gc over {n_objects:,} objects in {sessions:,} sessions (half of them deleted or expired), moto over HTTP",
        ["run", "requests on the wire", "objects scanned", "removed", "objects / s", "peak RSS over start"],
    )
    for name, res in (("dry run", dry), ("gc", real)):
        rep = res["report"]
        scanned = rep.get("objects_scanned", 0)
        table.add(
            name,
            requests_cell(res["wire_requests"]),
            f"{scanned:,}",
            f"{rep.get('objects_removed', 0):,}",
            f"{scanned / res['seconds']:,.0f}",
            f"{(res['maxrss_after_kib'] - res['maxrss_before_kib']) / 1024:.1f} MiB"
            f" (peak {res['maxrss_after_kib'] / 1024:.0f} MiB)",
        )
    table.show()
    print(
        f"objects left: {left:,} (expected {n_objects - expected_removed:,}); report: {real['report']} reasons {real['reasons']}"
    )
    targets.append(
        Target(
            "gc",
            f"removes exactly the dead half of {n_objects:,} objects",
            f"{real['report'].get('objects_removed', 0):,} removed, {left:,} left",
            f"{expected_removed:,} removed",
            real["report"].get("objects_removed") == expected_removed and left == n_objects - expected_removed,
        )
    )
    return {
        "objects": n_objects,
        "sessions": sessions,
        "expected_removed": expected_removed,
        "left": left,
        "dry_run": dry,
        "gc": real,
    }
