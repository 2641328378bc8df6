"""The client's CPU per GET and per LIST: ``S3Store``'s direct reads against botocore's, side by side.

    python benchmarks/direct_reads.py [--server rgw|moto] [--objects 50] [--rounds 7]

The server is Ceph RGW when it is installed (``infra/rgw.py`` starts a throwaway one; it checks
every signature), else moto's server in a process of its own; ``--server`` chooses. Two stores
over one bucket of ``--objects`` objects of 1 KiB: one with direct reads (the default; its first
GET, through botocore, teaches them), one with ``direct_reads=False``. Each round GETs every
object once and LISTs the bucket 20 times with each store, alternating which goes first; the
figures are each store's median over the rounds of the process's CPU per request, and their
ratio. A measurement on a shared machine: the ratio, not the milliseconds, is the figure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.resume import load_rgw  # noqa: E402

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
    from benchmarks.run import QUICK, Env

    env = Env(QUICK)  # moto's server in a process of its own, dummy credentials
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
        plain = S3Store(bucket, endpoint_url=endpoint, direct_reads=False)
        keys = [f"sessions/s/{seq:020d}" for seq in range(1, args.objects + 1)]
        for key in keys:
            plain.create(key, os.urandom(1024))
        for store in (direct, plain):  # warm: botocore's first requests, and the direct reads learn
            store.get(keys[0])
            store.list_page("sessions/s/")
        assert direct._direct is not None and direct._direct.target is not None, "direct reads did not start"
        stores = {"direct": direct, "botocore": plain}
        gets: dict[str, list[float]] = {name: [] for name in stores}
        lists: dict[str, list[float]] = {name: [] for name in stores}
        for round_ in range(args.rounds):
            order = list(stores) if round_ % 2 == 0 else list(reversed(stores))
            for name in order:
                store = stores[name]
                gets[name].append(cpu_per_call([lambda k=key, s=store: s.get(k) for key in keys]))
                lists[name].append(cpu_per_call([lambda s=store: s.list_page("sessions/s/")] * LISTS_PER_ROUND))
        before = dict(direct.requests)
        direct.get(keys[-1])
        direct.list_page("sessions/s/")
        fallbacks = sum(direct.requests.values()) - sum(before.values()) - 2
        print(f"# Client CPU per request, S3Store's direct reads and botocore's ({kind} at {endpoint})")
        print(f"{args.objects} objects of 1 KiB; {args.rounds} rounds; medians of each round's CPU per request\n")
        print("| request | direct | botocore | direct ÷ botocore |")
        print("|---|---|---|---|")
        for what, figures in (("GET of 1 KiB", gets), (f"LIST of {args.objects} keys", lists)):
            mine, theirs = statistics.median(figures["direct"]), statistics.median(figures["botocore"])
            print(f"| {what} | {mine * 1000:.3f} ms | {theirs * 1000:.3f} ms | {mine / theirs:.2f}x |")
        print(f"\nrequests sent again through botocore after a direct one: {fallbacks}")
    finally:
        stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
