"""Replay CPU and memory: a compacted replay against one GET of the same bytes, and the
memory of a LocalStore replay at two lengths, for this tree and (``--before REV``) an
earlier commit, side by side in one run.

    python benchmarks/replay_cpu.py [--events 10000] [--before REV] [--memory 10000 100000] [--profile]

* CPU: moto's S3 server runs in a process of its own (``benchmarks/_s3env.py``'s ``Env``). Sessions
  of ``--events`` 1 KiB messages, plaintext and encrypted, in two layouts (``LAYOUTS``): written
  with the defaults, then ``compact(sid, segment_size=1000)`` (as ``run.py``'s replay fixture), and
  written without auto-compaction, then ``compact(sid, segment_size=10000)``: one segment, the
  fewest requests, so the per-event CPU shows. Each session's event bytes are also stored back to
  back as one object. Fresh processes, alternating between the trees, each run interleaved rounds
  of: one GET of that object, ``store.context(sid)``, ``list(store.replay(sid))``. The figures are
  each variant's median over all rounds, of its wall time (to the call's return) and of the client's
  CPU (to the answers of any requests the call left in flight; the process's,
  every thread), each divided by the same median of the GET of the same bytes, measured in the
  same processes.
* Memory (``--memory``): a loose session in a LocalStore directory (``_child.py
  populate_local``), streamed by ``store.replay`` in a fresh process per tree: peak RSS
  growth (``VmHWM`` reset before the replay) and, in a second replay, the tracemalloc peak.
* ``--profile``: cProfile of ``list(store.replay(sid))`` and ``store.context(sid)`` over a
  MemoryStore (this tree), plaintext and encrypted; the top functions by own time.
"""

from __future__ import annotations

import argparse
import base64
import cProfile
import functools
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def _child_env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree)}


def _run(tree: Path, command: str, args: dict[str, Any], timeout: float = 3600) -> dict[str, Any]:
    """This script as a child, importing evstore from ``tree``."""
    from benchmarks._harness import json_child

    command_line = [sys.executable, __file__, "--child", command, json.dumps(args)]
    return json_child(command_line, f"{command} ({tree})", timeout=timeout, env=_child_env(tree), cwd=tempfile.gettempdir())


# ---- children ----------------------------------------------------------------


def _check_tree(tree: str) -> None:
    import evstore

    if not str(Path(evstore.__file__).resolve()).startswith(str(Path(tree).resolve())):
        raise RuntimeError(f"evstore imported from {evstore.__file__}, not from {tree}")


def _settled(requests: dict[str, int], quiet: float = 1.0, most: float = 10.0) -> None:
    """Return once ``requests`` (a live counter) has not changed for ``quiet`` seconds, or after
    ``most``: the requests a call left in flight are then its own, not the next call's."""
    deadline = time.monotonic() + most
    seen = dict(requests)
    while time.monotonic() < deadline:
        time.sleep(quiet)
        if (now := dict(requests)) == seen:
            return
        seen = now


def child_cpu(args: dict[str, Any]) -> dict[str, Any]:
    _check_tree(args["tree"])
    from evstore import Keyring, Store
    from evstore._backends._s3 import S3Store

    backend = S3Store(args["bucket"], endpoint_url=args["endpoint"])
    plain = Store(backend)
    sealed = Store(backend, keyring=Keyring({"bench": base64.b64decode(args["key"])}, "bench"))
    n = args["events"]
    runs: dict[str, Callable[[], None]] = {}
    for case in args["cases"]:
        store = sealed if case["encrypted"] else plain
        sid, single = case["sid"], case["single"]

        def get(single: str = single) -> None:
            backend.client.get_object(Bucket=backend.bucket, Key=single)["Body"].read()

        def context(store: Any = store, sid: str = sid) -> None:
            assert len(store.context(sid)) == n

        def replay(store: Any = store, sid: str = sid) -> None:
            assert len(list(store.replay(sid))) == n

        runs.update({f"{case['name']}/get": get, f"{case['name']}/context": context, f"{case['name']}/replay": replay})
    requests: dict[str, dict[str, int]] = {}
    for name, run in runs.items():  # warm: imports, pools, connections, keys; and the requests of each
        before = dict(backend.requests)
        run()
        _settled(backend.requests)  # a read's guessed GETs past the head may still be in flight
        requests[name] = {k: v - before.get(k, 0) for k, v in backend.requests.items() if v - before.get(k, 0)}
    times: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    order = list(runs)
    for r in range(args["rounds"]):
        for name in order if r % 2 == 0 else order[::-1]:
            started, used = time.perf_counter(), time.process_time()  # the process: every thread's CPU
            runs[name]()
            times[name].append(time.perf_counter() - started)
            _settled(backend.requests)  # its CPU includes the requests it left in flight, not the next call's
            cpu[name].append(time.process_time() - used)
    return {"times": times, "cpu": cpu, "requests": requests}


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def child_memory(args: dict[str, Any]) -> dict[str, Any]:
    _check_tree(args["tree"])
    import tracemalloc

    from evstore import LocalStore, Store

    store = Store(LocalStore(args["directory"]))
    store.info(args["sid"])
    for _ in store.replay(args["sid"], end=64):  # warm: imports, the pool
        pass
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # reset VmHWM to the current RSS
    rss_before = _status_kib("VmRSS")
    started = time.perf_counter()
    count = sum(1 for _ in store.replay(args["sid"]))
    seconds = time.perf_counter() - started
    rss_peak = _status_kib("VmHWM")
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    traced = sum(1 for _ in store.replay(args["sid"]))
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    assert count == traced == args["events"], (count, traced)
    return {"events": count, "seconds": seconds, "rss_growth_kib": rss_peak - rss_before, "traced_peak_bytes": peak}


CHILDREN = {"cpu": child_cpu, "memory": child_memory}


# ---- the parent ----------------------------------------------------------------


#: (name, encrypted, writer's auto_compact, compact(sid, segment_size)) of the sessions replayed
LAYOUTS = [
    ("defaults", False, "default", 1000),  # benchmarks/run.py's fixture: default writer, then compact(sid, 1000)
    ("defaults+enc", True, "default", 1000),
    ("1-segment", False, None, 10_000),  # auto_compact off, then compact(sid, 10000): one segment
    ("1-segment+enc", True, None, 10_000),
]


def _session(env: Any, events: int, encrypted: bool, auto: Any, segment: int, key: bytes) -> tuple[str, bytes]:
    """Setup: a session written into a MemoryStore and copied into the bucket (as run.py does);
    its id and its event bytes back to back."""
    import uuid

    from benchmarks._data import message
    from benchmarks._s3env import event_bytes, memory_objects
    from evstore import Keyring, MemoryStore, Store

    memory = MemoryStore()
    keyring = Keyring({"bench": key}, "bench") if encrypted else None
    store = Store(memory, keyring=keyring) if auto == "default" else Store(memory, keyring=keyring, auto_compact=auto)
    sid = f"cpu-{uuid.uuid4().hex[:8]}"
    session = store.create(sid)
    for i in range(events):
        session.append(message(i))
    store.compact(sid, segment_size=segment)
    env.bulk_put(env.shared_bucket, memory_objects(memory))
    return sid, b"".join(event_bytes(memory, sid))


def cpu(trees: dict[str, Path], events: int, rounds: int, processes: int) -> dict[str, Any]:
    from benchmarks._s3env import Env

    env = Env()
    try:
        key = os.urandom(32)
        cases = []
        for name, encrypted, auto, segment in LAYOUTS:
            sid, joined = _session(env, events, encrypted, auto, segment, key)
            single = f"single/{sid}"
            env.setup.put_object(Bucket=env.shared_bucket, Key=single, Body=joined)
            cases.append({"name": name, "encrypted": encrypted, "sid": sid, "single": single, "bytes": len(joined)})
        args = {
            "endpoint": env.endpoint,
            "bucket": env.shared_bucket,
            "key": base64.b64encode(key).decode(),
            "cases": cases,
            "events": events,
            "rounds": rounds,
        }
        results: dict[str, dict[str, Any]] = {label: {"times": {}, "cpu": {}, "requests": {}} for label in trees}
        labels = list(trees)
        for p in range(processes):
            for label in labels if p % 2 == 0 else labels[::-1]:
                got = _run(trees[label], "cpu", {**args, "tree": str(trees[label])})
                for measure in ("times", "cpu"):
                    for name, values in got[measure].items():
                        results[label][measure].setdefault(name, []).extend(values)
                results[label]["requests"] = got["requests"]
    finally:
        env.close()
    print(f"\n## replay of {events:,} compacted events against one GET of the same bytes (moto in its own process)")
    print(f"median of {rounds * processes} interleaved rounds; " + ", ".join(f"{c['name']}: {c['bytes']:,} bytes" for c in cases))
    print("wall: the time of the call (on moto mostly the server's: its LIST pages are slow);")
    print(
        "client CPU: the calling process's, every thread (what issue 28's 'within 3x one GET' is about), until the"
        " requests the call left in flight (guessed GETs past the head) have answered"
    )
    print("tree      variant                 requests                    wall        / GET   client CPU  / GET's CPU")
    for label in labels:
        times, cpu_times = results[label]["times"], results[label]["cpu"]
        for name in times:
            case = name.split("/")[0]
            med, base = statistics.median(times[name]), statistics.median(times[f"{case}/get"])
            used, base_used = statistics.median(cpu_times[name]), statistics.median(cpu_times[f"{case}/get"])
            req = " ".join(f"{v} {k}" for k, v in sorted(results[label]["requests"][name].items()))
            print(
                f"{label:9} {name:23} {req:27} {med * 1000:8.1f} ms {med / base:7.2f}x "
                f"{used * 1000:8.1f} ms {used / base_used:7.2f}x"
            )
    return {"cases": cases, "results": results}


def memory(trees: dict[str, Path], sizes: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {label: {} for label in trees}
    work = Path(tempfile.mkdtemp(prefix="evstore-replay-mem-"))
    try:
        for n in sizes:
            directory = work / str(n)
            started = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    str(REPO / "benchmarks" / "_child.py"),
                    "populate_local",
                    json.dumps({"repo": str(REPO), "directory": str(directory), "sid": "mem", "events": n, "size": 1024}),
                ],
                check=True,
                capture_output=True,
                cwd=REPO,
            )
            print(f"(setup: {n:,} loose events in a LocalStore in {time.perf_counter() - started:.0f} s)")
            for label, tree in trees.items():
                args = {"tree": str(tree), "directory": str(directory), "sid": "mem", "events": n}
                out[label][str(n)] = _run(tree, "memory", args)
    finally:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    print("\n## LocalStore: memory of a streamed store.replay (fresh process per tree)")
    print("tree      events    time       peak RSS growth   tracemalloc peak")
    for label in trees:
        for n in sizes:
            r = out[label][str(n)]
            print(
                f"{label:9} {n:<9,} {r['seconds']:7.2f} s  {r['rss_growth_kib'] / 1024:+8.1f} MiB"
                f"      {r['traced_peak_bytes'] / 2**20:8.2f} MiB"
            )
    return out


def profile(events: int) -> None:
    from benchmarks._s3env import build_in_memory
    from evstore import Keyring, Store

    ring = Keyring({"bench": os.urandom(32)}, "bench")
    for kind, keyring in (("plaintext", None), ("encrypted", ring)):
        memory_store, _ = build_in_memory(kind, events, keyring=keyring, compact=1000)
        store = Store(memory_store, keyring=keyring)
        calls: list[tuple[str, Callable[[], object]]] = [
            ("list(replay)", functools.partial(lambda s, k: list(s.replay(k)), store, kind)),
            ("context", functools.partial(store.context, kind)),
        ]
        for what, call in calls:
            call()
            prof = cProfile.Profile()
            prof.enable()
            call()
            prof.disable()
            text = io.StringIO()
            pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(12)
            print(f"\n## cProfile: {what}, {kind}, {events:,} compacted events (MemoryStore)")
            print("\n".join(line for line in text.getvalue().splitlines() if line.strip())[:3000])


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        sys.stdout.write(json.dumps(CHILDREN[sys.argv[2]](json.loads(sys.argv[3]))) + "\n")
        return 0
    sys.path.insert(0, str(REPO))
    from benchmarks._harness import export_evstore

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per process")
    parser.add_argument("--processes", type=int, default=4, help="fresh processes per tree, alternating")
    parser.add_argument("--before", metavar="REV", help="also measure the evstore package of this commit")
    parser.add_argument("--memory", type=int, nargs="*", metavar="N", help="LocalStore replay memory at these lengths")
    parser.add_argument("--no-cpu", action="store_true", help="skip the CPU comparison")
    parser.add_argument("--profile", action="store_true", help="cProfile replay and context over a MemoryStore")
    parser.add_argument("--json", metavar="FILE", help="save the raw figures here")
    args = parser.parse_args()
    results: dict[str, Any] = {"loadavg_start": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="evstore-before-") as tmp:
        trees = {"after": REPO}
        if args.before:
            trees = {"before": export_evstore(args.before, tmp), **trees}
        print(f"trees: {', '.join(f'{k} = {v}' for k, v in trees.items())}; load average {os.getloadavg()[0]:.2f}")
        if args.profile:
            profile(args.events)
        if not args.no_cpu:
            results["cpu"] = cpu(trees, args.events, args.rounds, args.processes)
        if args.memory:
            results["memory"] = memory(trees, args.memory)
    results["loadavg_end"] = os.getloadavg()
    print(f"\nload average at the end {results['loadavg_end'][0]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
