"""Section append: evstore's append against boto3's put_object of the same bytes on the same client, and its own CPU."""

from __future__ import annotations

import time
import uuid

from benchmarks._data import message
from benchmarks._harness import Variant, describe, interleave, median, ratio, total
from benchmarks._s3env import Env
from benchmarks._tables import TextTable
from benchmarks.studies.run.config import Config, Results, Target, ms


def bench_append(env: Env, cfg: Config, targets: list[Target]) -> Results:
    from evstore import Store

    backend = env.s3store(env.new_bucket("append"))
    store = Store(backend)
    client = backend.client  # the raw baseline uses the very same client (same config, same pool)
    wire = backend.requests  # every request on that client, and the store's direct reads
    session = store.create("append")
    session.append(message(0))
    sample = backend.get(store.layout.event_key("append", 1)).data  # an event's bytes, as evstore writes them
    counter = iter(range(10**9))
    texts = iter(range(1, 10**9))

    def evstore_batch() -> None:
        for _ in range(cfg.append_batch):
            session.append(message(next(texts)))

    def raw_batch() -> None:
        for _ in range(cfg.append_batch):
            client.put_object(
                Bucket=backend.bucket,
                Key=f"raw/{next(counter):020d}",
                Body=sample,
                IfNoneMatch="*",
                Metadata={"evstore-write-id": uuid.uuid4().hex},
            )

    def raw_plain_batch() -> None:
        for _ in range(cfg.append_batch):
            client.put_object(Bucket=backend.bucket, Key=f"plain/{next(counter):020d}", Body=sample)

    variants = [
        Variant("evstore append", evstore_batch, wire),
        Variant("boto3 put_object, same bytes + If-None-Match + metadata", raw_batch, wire),
        Variant("boto3 put_object, same bytes, unconditional", raw_plain_batch, wire),
    ]
    interleave([Variant("warm-up", evstore_batch, wire), Variant("warm-up raw", raw_batch, wire)], 1)
    interleave(variants, cfg.append_rounds)
    n = cfg.append_batch
    base = variants[1].median
    paired = median(e / b for e, b in zip(variants[0].times, variants[1].times, strict=True))
    table = TextTable(
        f"append: {cfg.append_rounds} rounds of {n} append(s) of a {len(sample)} B event each, alternating, same client",
        ["variant", "median / append", "ratio vs boto3 (conditional)", "requests / append"],
    )
    for v in variants:
        table.add(
            v.name,
            ms(v.median / n),
            f"{ratio(v.median, base):.3f}x",
            f"{total(v.typical_requests) / n:g} ({describe(v.typical_requests)})",
        )
    table.show()
    print(f"median of the per-round ratios evstore / boto3 conditional: {paired:.3f}x")
    evs = variants[0]
    per_append = total(evs.typical_requests) / n
    r = ratio(evs.median, base)
    targets.append(Target("append", "requests per append", f"{per_append:g}", "exactly 1", per_append == 1))
    targets.append(Target("append", "time vs boto3 put_object (same bytes, same client)", f"{r:.3f}x", "<= 1.15x", r <= 1.15))
    cpu = append_cpu_cost()
    print(f"evstore's own CPU per append (MemoryStore, no I/O): {cpu * 1e6:.0f} us")
    return {
        "event_bytes": len(sample),
        "batch": n,
        "variants": {v.name: v.raw() for v in variants},
        "ratio_vs_conditional_put": r,
        "paired_ratio_vs_conditional_put": paired,
        "ratio_vs_plain_put": ratio(evs.median, variants[2].median),
        "requests_per_append": per_append,
        "memorystore_cpu_seconds_per_append": cpu,
    }


def append_cpu_cost() -> float:
    from evstore import MemoryStore, Store

    session = Store(MemoryStore()).create("cpu")
    started = time.perf_counter()
    for i in range(2000):
        session.append(message(i))
    return (time.perf_counter() - started) / 2000
