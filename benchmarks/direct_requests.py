"""The client's CPU per GET, LIST and create: ``S3Store``'s direct requests against botocore's, side by side.

    python benchmarks/direct_requests.py [--server rgw|moto] [--objects 50] [--rounds 7]

The server is Ceph RGW when it is installed (``infra/rgw.py`` starts a throwaway one; it checks
every signature), else moto's server in a process of its own; ``--server`` chooses. Two stores
over one bucket of ``--objects`` objects of 1 KiB: one with direct requests (the default; its
first GET, through botocore, teaches them), one with ``direct_requests=False``. Each round, with
each store, alternating which goes first: a GET of every object, 20 LISTs of the bucket's
objects, and ``--objects`` creates of new 1 KiB objects (``If-None-Match: *``, with the write-id
metadata an event carries). The figures are each store's median over the rounds of the
process's CPU per request, and their ratio; and how many of the direct store's requests went
through botocore after the warm-up (0 unless a direct one failed). A measurement on a shared
machine: the ratio, not the milliseconds, is the figure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks._s3env import Env, load_rgw  # noqa: E402

LISTS_PER_ROUND = 20


def cpu_per_call(calls: list[Callable[[], object]]) -> float:
    """The process's CPU seconds per call, over all of ``calls``."""
    started = time.process_time()
    for call in calls:
        call()
    return (time.process_time() - started) / len(calls)


def start_server(kind: str) -> tuple[str, Callable[[], None]]:
    """An endpoint of ``kind`` ("rgw" or "moto"), with credentials in the environment, and its stop."""
    if kind == "rgw":
        rgw = load_rgw()
        info = rgw.start()
        os.environ.update(info.env())
        return str(info.endpoint), lambda: rgw.stop(info)
    env = Env()  # moto's server in a process of its own, dummy credentials
    return env.endpoint, env.close


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", choices=("auto", "rgw", "moto"), default="auto")
    parser.add_argument("--objects", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    kind = args.server
    if kind == "auto":
        kind = "moto" if load_rgw().missing_binaries() else "rgw"
    endpoint, stop = start_server(kind)
    try:
        import boto3

        from evstore._backends._s3 import S3Store

        bucket = f"direct-{uuid.uuid4().hex[:10]}"
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
        direct = S3Store(bucket, endpoint_url=endpoint)
        plain = S3Store(bucket, endpoint_url=endpoint, direct_requests=False)
        keys = [f"sessions/s/{seq:020d}" for seq in range(1, args.objects + 1)]
        for key in keys:
            plain.create(key, os.urandom(1024))
        for store in (direct, plain):  # warm: botocore's first requests, and the direct requests learn
            store.get(keys[0])
            store.list_page("sessions/s/")
        assert direct._direct is not None and direct._direct.target is not None, "direct requests did not start"
        through_botocore: Counter[str] = Counter()

        def count(event_name: str, **_: object) -> None:
            through_botocore[event_name.rsplit(".", 1)[-1]] += 1

        for operation in ("GetObject", "ListObjectsV2", "PutObject"):
            direct.client.meta.events.register(f"before-send.s3.{operation}", count)
        stores = {"direct": direct, "botocore": plain}
        figures: dict[str, dict[str, list[float]]] = {what: {name: [] for name in stores} for what in ("get", "list", "create")}
        body = os.urandom(1024)
        for round_ in range(args.rounds):
            order = list(stores) if round_ % 2 == 0 else list(reversed(stores))
            for name in order:
                store = stores[name]
                figures["get"][name].append(cpu_per_call([lambda k=key, s=store: s.get(k) for key in keys]))
                figures["list"][name].append(cpu_per_call([lambda s=store: s.list_page("sessions/s/")] * LISTS_PER_ROUND))
                new = [f"created/{name}/{round_}/{index}" for index in range(args.objects)]
                figures["create"][name].append(
                    cpu_per_call([lambda k=key, s=store: s.create(k, body, metadata={"evstore-wid": "w1"}) for key in new])
                )
        print(f"# Client CPU per request, S3Store's direct requests and botocore's ({kind} at {endpoint})")
        print(f"{args.objects} objects of 1 KiB; {args.rounds} rounds; medians of each round's CPU per request\n")
        print("| request | direct | botocore | direct ÷ botocore |")
        print("|---|---|---|---|")
        rows = (
            ("GET of 1 KiB", "get"),
            (f"LIST of {args.objects} keys", "list"),
            ("create of 1 KiB (If-None-Match: *)", "create"),
        )
        for label, what in rows:
            mine, theirs = statistics.median(figures[what]["direct"]), statistics.median(figures[what]["botocore"])
            print(f"| {label} | {mine * 1000:.3f} ms | {theirs * 1000:.3f} ms | {mine / theirs:.2f}x |")
        print(f"\nthe direct store's requests sent through botocore after the warm-up: {sum(through_botocore.values())}")
    finally:
        stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
