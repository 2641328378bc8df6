"""Section crypto: what AES-256-GCM costs an append and a replay, over moto and over a MemoryStore."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from benchmarks._data import message
from benchmarks._harness import Variant, interleave, ratio, total
from benchmarks._s3env import Env, build_in_memory
from benchmarks._tables import TextTable
from benchmarks.studies.run.config import Config, Results, Target, ms


def bench_crypto(env: Env, cfg: Config, targets: list[Target]) -> Results:
    from evstore import Keyring, Store, generate_key

    bucket = env.new_bucket("crypto")
    backend = env.s3store(bucket)
    keyring = Keyring.from_key(generate_key())
    plain = Store(backend)
    sealed = Store(backend, keyring=keyring)
    p_session = plain.create("plain-append")
    s_session = sealed.create("sealed-append")
    texts = iter(range(10**9))
    batch = 10

    def appender(session: Any) -> Callable[[], None]:
        def run() -> None:
            for _ in range(batch):
                session.append(message(next(texts)))

        return run

    appends = [
        Variant("plaintext append", appender(p_session), backend.requests),
        Variant("encrypted append", appender(s_session), backend.requests),
    ]
    interleave(appends, cfg.crypto_rounds)
    n = cfg.crypto_replay
    p_sid = env.fixture(n, "loose", bucket=bucket)
    s_sid = env.fixture(n, "sealed", keyring=keyring, bucket=bucket)
    replays = [
        Variant(f"plaintext context() of {n:,}", lambda: plain.context(p_sid), backend.requests),
        Variant(f"encrypted context() of {n:,}", lambda: sealed.context(s_sid), backend.requests),
    ]
    interleave(replays, max(3, cfg.crypto_rounds // 3))
    # the CPU side alone, without moto: MemoryStore
    mp, _ = build_in_memory("cpu", 2000)
    ms_, _ = build_in_memory("cpu", 2000, keyring=keyring)
    cpu = [
        Variant("plaintext context() of 2,000, MemoryStore", lambda: Store(mp).context("cpu"), Counter()),
        Variant("encrypted context() of 2,000, MemoryStore", lambda: Store(ms_, keyring=keyring).context("cpu"), Counter()),
        Variant("plaintext 200 appends, MemoryStore", lambda: _mem_appends(None), Counter()),
        Variant("encrypted 200 appends, MemoryStore", lambda: _mem_appends(keyring), Counter()),
    ]
    interleave(cpu, 5)
    table = TextTable(
        "encryption cost: AES-256-GCM per event, 1 KiB messages", ["variant", "requests", "median time", "encrypted / plaintext"]
    )
    for pair in (appends, replays, cpu[:2], cpu[2:]):
        for v in pair:
            per = f" ({ms(v.median / batch)} each)" if v in appends else ""
            table.add(
                v.name,
                f"{total(v.typical_requests)}" if v.counter is backend.requests else "-",
                ms(v.median) + per,
                f"{ratio(v.median, pair[0].median):.3f}x",
            )
    table.show()
    a = ratio(appends[1].median, appends[0].median)
    r = ratio(replays[1].median, replays[0].median)
    targets.append(Target("crypto", "encrypted / plaintext append (moto)", f"{a:.3f}x", "report", True))
    targets.append(Target("crypto", "encrypted / plaintext replay (moto)", f"{r:.3f}x", "report", True))
    return {
        "appends": {v.name: v.raw() for v in appends},
        "replays": {v.name: v.raw() for v in replays},
        "cpu": {v.name: v.raw() for v in cpu},
    }


def _mem_appends(keyring: Any) -> None:
    from evstore import MemoryStore, Store

    session = Store(MemoryStore(), keyring=keyring).create("x")
    for i in range(200):
        session.append(message(i))
