"""Section replay: context() of loose and compacted sessions against Strands' S3SessionManager restore, a whole file,
local JSONL and one GET of the same bytes; then an append at N against rewriting the whole file."""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks._data import message, strands_message
from benchmarks._harness import Variant, count_requests, interleave, ratio, requests_cell
from benchmarks._s3env import Env
from benchmarks._tables import TextTable
from benchmarks.studies.run.config import Config, Results, Target, ms


def bench_replay(env: Env, cfg: Config, targets: list[Target]) -> Results:
    from evstore import Store

    backend = env.s3store(env.shared_bucket)
    store = Store(backend)
    wire = backend.requests  # every request on its client, and its direct reads
    workdir = Path(tempfile.mkdtemp(prefix="evstore-bench-"))
    try:
        return {str(n): _replay_one(env, cfg, store, wire, n, workdir, targets) for n in cfg.replay_sizes}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _replay_one(env: Env, cfg: Config, store: Any, wire: Counter[str], n: int, workdir: Path, targets: list[Target]) -> Results:
    bucket = env.shared_bucket
    backend = store.backend
    client = backend.client
    loose = env.fixture(n, "loose")
    compacted = env.fixture(n, "compacted")
    ssid, strands_restore, strands_wire = _strands_session(env, n)
    # the whole-file approach and the physical bound, on the same client as evstore
    msgs = [message(i) for i in range(n)]
    whole_key = f"whole/{ssid}.json"
    client.put_object(Bucket=bucket, Key=whole_key, Body=json.dumps({"messages": msgs}).encode())
    single_key = f"single/{loose}"
    joined = env.joined[(bucket, n, "loose")]  # the session's event bytes, as stored, back to back
    client.put_object(Bucket=bucket, Key=single_key, Body=joined)
    jsonl = workdir / f"{n}.jsonl"
    jsonl.write_text("".join(json.dumps(m) + "\n" for m in msgs))

    def evstore_context(sid: str) -> Callable[[], int]:
        def run() -> int:
            got = store.context(sid)
            assert len(got) == n
            return len(got)

        return run

    def whole_file() -> int:
        return len(json.loads(client.get_object(Bucket=bucket, Key=whole_key)["Body"].read())["messages"])

    def single_get() -> int:
        return len(client.get_object(Bucket=bucket, Key=single_key)["Body"].read())

    def local_jsonl() -> int:
        with jsonl.open() as f:
            return len([json.loads(line) for line in f])

    variants = [
        Variant("evstore context(), loose events", evstore_context(loose), wire),
        Variant(f"evstore context(), after compact(sid, {cfg.segment_size})", evstore_context(compacted), wire),
        Variant("Strands S3SessionManager restore", strands_restore, strands_wire),
        Variant("whole file: 1 GET + json decode", whole_file, wire),
        Variant("JSONL on local disk: read + decode", local_jsonl, wire),
        Variant(f"bound: 1 GET of all {len(joined):,} bytes", single_get, wire),
    ]
    interleave(variants, cfg.replay_rounds)
    by = {v.name: v for v in variants}
    strands_t = by["Strands S3SessionManager restore"].median
    bound = variants[-1].median
    table = TextTable(
        f"replay of {n:,} events of ~1 KiB, median of {cfg.replay_rounds} interleaved rounds",
        ["variant", "requests", "median time", "Strands / this", "this / 1-GET bound"],
    )
    for v in variants:
        table.add(
            v.name,
            requests_cell(v.typical_requests),
            ms(v.median),
            f"{ratio(strands_t, v.median):.1f}x",
            f"{ratio(v.median, bound):.2f}x",
        )
    table.show()
    appends = _append_at(store, client, bucket, loose, whole_key, n, cfg, wire)
    out = {
        "variants": {v.name: v.raw() for v in variants},
        "appends": {v.name: v.raw() for v in appends},
        "single_object_bytes": len(joined),
    }
    if n == max(cfg.replay_sizes):
        loose_x = ratio(strands_t, by["evstore context(), loose events"].median)
        comp_x = ratio(strands_t, by[f"evstore context(), after compact(sid, {cfg.segment_size})"].median)
        comp_bound = ratio(by[f"evstore context(), after compact(sid, {cfg.segment_size})"].median, bound)
        targets.append(Target("replay", f"{n:,} events, compacted vs Strands", f"{comp_x:.1f}x faster", ">= 10x", comp_x >= 10))
        targets.append(Target("replay", f"{n:,} events, loose vs Strands", f"{loose_x:.1f}x faster", ">= 10x", loose_x >= 10))
        targets.append(
            Target("replay", f"{n:,} events, compacted vs 1-GET bound", f"{comp_bound:.2f}x", "<= 2x", comp_bound <= 2)
        )
    return out


def _strands_session(env: Env, n: int) -> tuple[str, Callable[[], int], Counter[str]]:
    """A session of n messages written through Strands' own S3SessionManager (its SessionRepository API),
    same server: its id, its restore by a new manager, and that manager's requests."""
    from strands.session.s3_session_manager import S3SessionManager
    from strands.types.session import SessionAgent, SessionMessage

    bucket = env.shared_bucket
    ssid = f"strands-{n}-{uuid.uuid4().hex[:6]}"
    writer = S3SessionManager(ssid, bucket, endpoint_url=env.endpoint)
    writer.create_agent(
        ssid,
        SessionAgent(
            agent_id="main",
            state={},
            conversation_manager_state={
                "__name__": "SlidingWindowConversationManager",
                "removed_message_count": 0,
                "model_call_count": 0,
            },
        ),
    )
    with ThreadPoolExecutor(8) as pool:  # setup only: Strands' own create_message, in parallel
        list(
            pool.map(
                lambda i: writer.create_message(ssid, "main", SessionMessage.from_message(strands_message(i), i)),  # type: ignore[arg-type]
                range(n),
            )
        )
    reader = S3SessionManager(ssid, bucket, endpoint_url=env.endpoint)  # default config, as an agent gets it
    strands_wire = count_requests(reader.client.meta.events)

    def strands_restore() -> int:
        # RepositorySessionManager's restore path: read_session, read_agent, list_messages(offset=0)
        reader.read_session(ssid)
        reader.read_agent(ssid, "main")
        messages = [m.to_message() for m in reader.list_messages(ssid, "main", offset=0)]
        assert len(messages) == n
        return len(messages)

    return ssid, strands_restore, strands_wire


def _append_at(
    store: Any, client: Any, bucket: str, loose: str, whole_key: str, n: int, cfg: Config, wire: Counter[str]
) -> list[Variant]:
    """An append at n: evstore's (1 PUT) against rewriting the whole file (GET + PUT of n messages)."""
    writer_session = store.open(loose)

    def evstore_append() -> None:
        writer_session.append(message(n + 1))

    def whole_append() -> None:
        doc = json.loads(client.get_object(Bucket=bucket, Key=whole_key)["Body"].read())
        doc["messages"].append(message(n + 1))
        client.put_object(Bucket=bucket, Key=whole_key, Body=json.dumps(doc).encode())

    appends = [
        Variant(f"evstore append at {n:,}", evstore_append, wire),
        Variant(f"whole-file append at {n:,} (GET+PUT)", whole_append, wire),
    ]
    interleave(appends, max(5, cfg.replay_rounds * 2))
    at = TextTable(
        f"append at {n:,}: the whole-file approach pays O(N) per turn",
        ["variant", "requests", "median time", "ratio vs evstore"],
    )
    for v in appends:
        at.add(
            v.name,
            requests_cell(v.typical_requests),
            ms(v.median),
            f"{ratio(v.median, appends[0].median):.1f}x",
        )
    at.show()
    return appends
