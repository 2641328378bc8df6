"""EvstoreSaver, the LangGraph checkpointer: LangGraph's own conformance suite (grade FULL,
every capability) over memory and moto's server, request and byte counts, conflicts
between writers, and a real graph interrupted and resumed in a new process."""

from __future__ import annotations

import asyncio
import json
import operator
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver, Checkpoint, CheckpointTuple, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.types import ERROR
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send

from evstore import AsyncStore, IntegrityError, InvalidInputError, Keyring, LocalStore, MemoryStore, Store, WriteConflictError
from evstore._context import FENCE_HOLD
from evstore._ids import validate_session_id
from evstore.integrations.langgraph import EvstoreSaver, decode_session_id, session_id_for

from .conftest import new_bucket
from .helpers import CountingStore
from .scripts.langgraph_graph import build, summary

REPO = Path(__file__).resolve().parent.parent


def cfg(thread: str, ns: str = "", checkpoint_id: str | None = None) -> Any:
    configurable = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


# ---- LangGraph's conformance suite ------------------------------------------------------------------


def run_conformance(make_store: Any) -> dict[str, Any]:
    @checkpointer_test(name="EvstoreSaver")
    async def factory() -> AsyncIterator[EvstoreSaver]:
        yield EvstoreSaver(make_store())

    return asyncio.run(validate(factory)).to_dict()


def assert_full(report: dict[str, Any]) -> None:
    assert report["conformance_level"] == "FULL", report
    assert set(report["results"]) == {c.value for c in ALL_CAPABILITIES}
    for name, result in report["results"].items():
        assert result["detected"] is True, name
        assert result["passed"] is True, (name, result["failures"])
        assert result["tests_failed"] == 0 and result["tests_passed"] > 0, (name, result)


def test_conformance_full_over_memory() -> None:
    assert_full(run_conformance(lambda: Store(MemoryStore(), root="lg")))


def test_conformance_full_over_an_encrypted_store() -> None:
    backend = MemoryStore()
    ring = Keyring({"k1": b"\1" * 32}, "k1")
    assert_full(run_conformance(lambda: Store(backend, root="lg", keyring=ring, require_encryption=True)))
    assert b"channel" not in b"".join(backend.get(info.key).data for info in backend.list("lg/sessions/"))


@pytest.mark.slow
def test_conformance_full_over_moto_server(moto_endpoint: str) -> None:
    assert_full(run_conformance(lambda: Store(new_bucket(moto_endpoint), root="lg")))


# ---- session ids -------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    st.text(min_size=1, max_size=200),
    st.one_of(st.just(""), st.just("child:abc"), st.text(max_size=300)),
    st.sampled_from(["lg-", "x", "agents_lg-"]),
)
def test_session_ids_are_valid_and_reversible(thread: str, ns: str, prefix: str) -> None:
    try:
        sid = session_id_for(prefix, thread, ns)
    except InvalidInputError:  # lone surrogates are not text
        with pytest.raises(UnicodeEncodeError):
            (thread + ns).encode("utf-8")
        return
    assert validate_session_id(sid) == sid
    decoded = decode_session_id(prefix, sid)
    assert decoded is not None
    assert decoded[0] in (thread, None) and decoded[1] in (ns, None)
    if len(prefix) + len(thread.encode()) * 3 <= 80:  # short enough to be escaped, never hashed
        assert decoded[0] == thread
    assert session_id_for(prefix, thread, ns) == sid  # deterministic
    if ns:
        assert sid.startswith(session_id_for(prefix, thread) + ".")


def test_readable_session_ids_and_refusals() -> None:
    assert session_id_for("lg-", "3f2a0c1e-1111-4222-8333-944455556666", "child:abc") == (
        "lg-3f2a0c1e-1111-4222-8333-944455556666.child_3aabc"
    )
    assert session_id_for("lg-", "a.b_c") == "lg-a_2eb_5fc"
    with pytest.raises(InvalidInputError, match="non-empty"):
        session_id_for("lg-", "")
    with pytest.raises(InvalidInputError, match="prefix"):
        EvstoreSaver(Store(MemoryStore()), prefix="-bad")
    saver = EvstoreSaver(Store(MemoryStore()))
    with pytest.raises(InvalidInputError, match="thread_id"):
        saver.get_tuple({"configurable": {}})
    with pytest.raises(InvalidInputError, match="strategy"):
        saver.prune(["t"], strategy="everything")


def test_long_thread_ids_and_namespaces_are_hashed_and_recovered() -> None:
    saver = EvstoreSaver(Store(MemoryStore(), root="lg"))
    thread, ns = "t" * 70 + ":é" * 20, "|".join(f"sub{i}:{'9' * 36}" for i in range(3))
    other = "copy-" + "u" * 90
    stored = put(saver, cfg(thread, ns), {"k": "v"})
    put(saver, cfg(thread), {"k": "root"})
    sessions = list(saver.store.list_sessions("lg-"))
    assert all(len(s) <= 128 for s in sessions) and any("_h" in s for s in sessions)
    found = {(t.config["configurable"]["thread_id"], t.config["configurable"]["checkpoint_ns"]) for t in saver.list(None)}
    assert found == {(thread, ns), (thread, "")}
    saver.copy_thread(thread, other)
    copied = saver.get_tuple(cfg(other, ns))
    assert copied is not None and copied.checkpoint["id"] == stored["configurable"]["checkpoint_id"]
    assert copied.checkpoint["channel_values"] == {"k": "v"}
    assert {t.config["configurable"]["thread_id"] for t in saver.list(None)} == {thread, other}


# ---- helpers for raw puts --------------------------------------------------------------------------


def checkpoint(values: dict[str, Any], versions: dict[str, Any], step: int) -> Checkpoint:
    cp = empty_checkpoint()
    cp["id"] = str(uuid6(clock_seq=step))
    cp["channel_values"] = dict(values)
    cp["channel_versions"] = dict(versions)
    return cp


def put(saver: EvstoreSaver, config: Any, values: dict[str, Any], step: int = 0) -> Any:
    versions = {k: saver.get_next_version(None, None) for k in values}
    return saver.put(config, checkpoint(values, versions, step), {"source": "loop", "step": step}, versions)


def grow(saver: EvstoreSaver, thread: str, steps: int, big: str) -> tuple[Any, dict[str, Any]]:
    """``steps`` checkpoints: ``big`` written once, ``counter`` changed at every step, two writes each."""
    versions: dict[str, Any] = {}
    config = cfg(thread)
    for step in range(steps):
        new = {"counter": saver.get_next_version(versions.get("counter"), None)}
        if step == 0:
            new["big"] = saver.get_next_version(None, None)
        versions.update(new)
        values = {"counter": step, "big": big}  # LangGraph passes every channel's value
        config = saver.put(config, checkpoint(values, versions, step), {"source": "loop", "step": step}, new)
        saver.put_writes(config, [("counter", step + 1), ("log", f"step {step}")], f"task-{step}", "~")
    return config, versions


def stored_bytes(store: Store) -> int:
    """The bytes of the log itself: events and manifests. Segments (derived copies that writers
    pack as they go) hold each event at most once per level, so they add a bounded factor."""
    return sum(info.size for info in store.backend.list("") if "/segments/" not in info.key and "/young/" not in info.key)


# ---- request and byte counts -------------------------------------------------------------------------


def latest_cost(steps: int) -> tuple[int, int, CheckpointTuple]:
    counting = CountingStore(MemoryStore())
    store = Store(counting, root="lg")
    grow(EvstoreSaver(store), "long", steps, "B" * 1000)
    fresh = EvstoreSaver(store)  # a new process: nothing in memory
    counting.reset()
    cold = fresh.get_tuple(cfg("long"))
    cold_requests = counting.total
    counting.reset()
    warm = fresh.get_tuple(cfg("long"))
    assert cold is not None and warm is not None and warm.checkpoint == cold.checkpoint
    # the saver kept what it read: the second read only checks that the head has not moved
    assert not [key for _, key in counting.keys if key.rsplit("/", 1)[-1].isdigit()]
    return cold_requests, counting.total, cold


def test_latest_get_tuple_costs_the_same_at_5_and_200_checkpoints() -> None:
    cold_5, warm_5, short = latest_cost(5)
    cold_200, warm_200, long = latest_cost(200)
    assert (cold_5, warm_5) == (cold_200, warm_200)
    assert warm_200 < cold_200
    for found, steps in ((short, 5), (long, 200)):
        assert found.checkpoint["channel_values"] == {"counter": steps - 1, "big": "B" * 1000}
        assert found.metadata["step"] == steps - 1
        task = f"task-{steps - 1}"
        assert found.pending_writes == [(task, "counter", steps), (task, "log", f"step {steps - 1}")]


@pytest.mark.slow
@pytest.mark.parametrize("turns", [10, 300])
def test_a_graph_turn_reads_one_list_at_any_thread_length(turns: int) -> None:
    """A compiled graph's invoke on a thread this saver holds: get_tuple lists what came after
    the head it knows (``Session.catch_up``), then the puts; no read grows with the thread."""
    counting = CountingStore(MemoryStore())
    graph = counting_graph(EvstoreSaver(Store(counting, root="lg")), None)
    config: Any = {"configurable": {"thread_id": "t"}}
    for _ in range(turns):
        graph.invoke({"total": 1}, config)
    counting.reset()
    graph.invoke({"total": 1}, config)
    assert {kind: n for kind, n in counting.counts.items() if kind != "PUT"} == {"LIST": 1}
    assert 1 <= counting.counts["PUT"] <= 6  # the checkpoints and writes (and at times a segment)
    assert graph.get_state(config).values["total"] == 2 * (turns + 1)


def _listed_ids(saver: EvstoreSaver, config: Any, **kwargs: Any) -> list[str]:
    return [t.config["configurable"]["checkpoint_id"] for t in saver.list(config, **kwargs)]


def test_list_with_a_limit_reads_back_only_as_far_as_it_needs() -> None:
    costs = []
    for steps in (60, 600):
        counting = CountingStore(MemoryStore())
        store = Store(counting, root="lg", auto_compact=None)  # every event read is a GET: countable
        grow(EvstoreSaver(store), "t", steps, "b")
        saver = EvstoreSaver(store)
        everything = list(saver.list(cfg("t")))
        counting.reset()
        newest = list(saver.list(cfg("t"), limit=5))
        costs.append(counting.total)
        assert [t.checkpoint for t in newest] == [t.checkpoint for t in everything[:5]]
        assert [t.pending_writes for t in newest] == [t.pending_writes for t in everything[:5]]
        assert _listed_ids(saver, cfg("t"), limit=3, filter={"step": steps - 2}) == _listed_ids(
            saver, cfg("t"), filter={"step": steps - 2}
        )
    assert costs[1] <= costs[0] + 2, costs  # 10x the thread, not more requests


def old_checkpoint_cost(turns: int) -> tuple[dict[str, int], dict[str, int]]:
    """Requests of ``get_state`` of the 5th-oldest checkpoint of a ``turns``-turn thread: by the
    saver that ran the graph, and by a new one (a new process) that listed the history first."""
    counting = CountingStore(MemoryStore())
    store = Store(counting, root="lg", auto_compact=None)  # every event read is a GET: countable
    config: Any = {"configurable": {"thread_id": "t"}}
    graph = counting_graph(EvstoreSaver(store), None)
    for _ in range(turns):
        graph.invoke({"total": 1}, config)
    costs = []
    for reader in (graph, counting_graph(EvstoreSaver(store), None)):
        history = list(reader.get_state_history(config))
        old = history[-5]
        reader.get_state(config)  # the thread's latest: a new saver opens its writer (O(log n) HEADs once)
        counting.reset()
        found = reader.get_state(old.config)
        costs.append(dict(counting.counts))
        assert (found.values, found.next, found.metadata) == (old.values, old.next, old.metadata)
        assert found.tasks == old.tasks and found.config == old.config
    return costs[0], costs[1]


@pytest.mark.slow
def test_get_state_of_an_old_checkpoint_reads_its_span_at_30_and_300_turns() -> None:
    """An old checkpoint whose seq the saver knows (it wrote it, or listed it) is read with its
    writes and nothing after them: the same requests at 30 turns as at 300 (at 300 reading to
    the head took about 1,500 requests)."""
    short, long = old_checkpoint_cost(30), old_checkpoint_cost(300)
    assert short == long, (short, long)
    assert sum(long[0].values()) <= 16 and sum(long[1].values()) <= 16, long


def test_an_old_checkpoint_read_by_its_span_sees_late_writes_and_retractions() -> None:
    """Writes put to a checkpoint after later checkpoints (out of its span), from this saver or
    another, are found through the head's marks; a retraction hides the checkpoint."""
    counting = CountingStore(MemoryStore())
    store = Store(counting, root="lg", auto_compact=None)
    saver = EvstoreSaver(store)
    configs = [put(saver, cfg("t"), {"x": step}, step) for step in range(40)]
    old = configs[4]
    saver.put_writes(old, [("x", "late")], "late-task")
    for step in range(40, 80):
        configs.append(put(saver, configs[-1], {"x": step}, step))
    other = EvstoreSaver(store)
    other.get_tuple(cfg("t"))  # another process at the head: its write is out of span too
    other.put_writes(old, [("x", "later")], "other-task")
    for step in range(80, 120):
        configs.append(put(other, configs[-1], {"x": step}, step))
    expected = [("late-task", "x", "late"), ("other-task", "x", "later")]
    list(other.list(cfg("t")))  # the history, as get_state_history reads it: where each checkpoint is
    for reader in (saver, other):
        reader.get_tuple(cfg("t"))
        counting.reset()
        found = reader.get_tuple(old)
        assert found is not None and found.checkpoint["channel_values"] == {"x": 4}
        assert found.pending_writes == expected
        assert counting.total <= 30, counting.counts  # the span and 2 late writes (a replay each): not 120 events
    fresh = EvstoreSaver(store)  # knows no seq: reads from the start, and gets the same
    fresh_found = fresh.get_tuple(old)
    assert fresh_found is not None and fresh_found.pending_writes == expected
    other.delete_for_runs([])  # nothing to retract: no event
    saver.prune(["t"])  # keep_latest: every checkpoint but the newest retracted
    assert saver.get_tuple(old) is None and other.get_tuple(old) is None
    assert other.get_tuple(configs[-1]) is not None


def test_list_with_a_limit_finds_a_greater_id_put_long_before() -> None:
    """Ids order the list, not seqs: a checkpoint with an id greater than those after it (a
    clock that ran ahead) is found where a backward read that stopped at 3 would miss it."""
    saver = EvstoreSaver(Store(MemoryStore(), root="lg"))
    early = checkpoint({"x": 0}, {"x": saver.get_next_version(None, None)}, 0)
    early["id"] = "ffffffff-ffff-6fff-8fff-ffffffffffff"  # the greatest id there is
    saver.put(cfg("t"), early, {"step": 0}, early["channel_versions"])
    for step in range(1, 80):
        put(saver, cfg("t"), {"x": step}, step)
    retract = checkpoint({"x": -1}, {"x": saver.get_next_version(None, None)}, 99)
    saver.put(cfg("t"), retract, {"step": 99}, retract["channel_versions"])
    full = _listed_ids(EvstoreSaver(saver.store), cfg("t"))
    assert full[0] == early["id"]
    assert _listed_ids(EvstoreSaver(saver.store), cfg("t"), limit=3) == full[:3]


def test_list_with_a_limit_over_every_thread_names_a_hashed_thread() -> None:
    saver = EvstoreSaver(Store(MemoryStore(), root="lg"))
    long_id = "t" * 200  # hashed into the session id: its name is an event of its own
    for step in range(40):
        put(saver, cfg(long_id), {"x": step}, step)
    listed = list(EvstoreSaver(saver.store).list(None, limit=2))
    assert [t.config["configurable"]["thread_id"] for t in listed] == [long_id, long_id]


def test_put_stores_only_changed_channels() -> None:
    counting = CountingStore(MemoryStore())
    store = Store(counting, root="lg")
    saver = EvstoreSaver(store)
    big = "x" * 200_000
    config, versions = grow(saver, "t", 1, big)
    after_1 = stored_bytes(store)
    assert after_1 > len(big)
    config, versions = grow_more(saver, config, versions, big, 1, 11)
    after_11 = stored_bytes(store)
    config, versions = grow_more(saver, config, versions, big, 11, 21)
    after_21 = stored_bytes(store)
    # ten steps add the same, small amount each time: the big channel is stored once
    assert after_11 - after_1 < len(big) // 10
    assert abs((after_21 - after_11) - (after_11 - after_1)) < (after_11 - after_1) // 4
    # a steady-state put and put_writes are one PUT each, nothing else
    counting.reset()
    grow_more(saver, config, versions, big, 21, 22)
    assert counting.counts == {"PUT": 2}
    found = EvstoreSaver(store).get_tuple(cfg("t"))
    assert found is not None and found.checkpoint["channel_values"] == {"counter": 21, "big": big}


def grow_more(
    saver: EvstoreSaver, config: Any, versions: dict[str, Any], big: str, first: int, end: int
) -> tuple[Any, dict[str, Any]]:
    for step in range(first, end):
        new = {"counter": saver.get_next_version(versions["counter"], None)}
        versions = {**versions, **new}
        config = saver.put(config, checkpoint({"counter": step, "big": big}, versions, step), {"step": step}, new)
        saver.put_writes(config, [("counter", step + 1)], f"task-{step}")
    return config, versions


def test_put_writes_is_idempotent_per_task_and_index() -> None:
    counting = CountingStore(MemoryStore())
    store = Store(counting, root="lg")
    saver = EvstoreSaver(store)
    stored = put(saver, cfg("t"), {"a": 1})
    counting.reset()
    saver.put_writes(stored, [("a", 2), ("b", 3)], "task-1")
    assert counting.counts == {"PUT": 1}
    counting.reset()
    saver.put_writes(stored, [("a", 2), ("b", 3)], "task-1")  # a retry: nothing new
    assert counting.total == 0
    other = EvstoreSaver(store)  # another process retrying the same task: reads, appends nothing
    other.get_tuple(cfg("t"))
    counting.reset()
    other.put_writes(stored, [("a", 2), ("b", 3), ("c", 4)], "task-1")
    assert counting.counts["PUT"] == 1  # only ("c", 4), index 2, is new
    saver.get_tuple(cfg("t"))
    saver.put_writes(stored, [(ERROR, "first")], "task-2")
    saver.put_writes(stored, [(ERROR, "second")], "task-2")  # special channels: the latest wins
    found = EvstoreSaver(store).get_tuple(stored)
    assert found is not None
    assert found.pending_writes == [
        ("task-1", "a", 2),
        ("task-1", "b", 3),
        ("task-1", "c", 4),
        ("task-2", ERROR, "second"),
    ]


# ---- two writers --------------------------------------------------------------------------------------


def test_stale_writer_gets_a_conflict_not_an_overwrite() -> None:
    store = Store(MemoryStore(), root="lg")
    first, second = EvstoreSaver(store), EvstoreSaver(store)  # two processes
    base = put(first, cfg("t"), {"answer": "draft"}, 0)
    seen = second.get_tuple(cfg("t"))
    assert seen is not None and seen.checkpoint["id"] == base["configurable"]["checkpoint_id"]
    ahead = put(first, cfg("t", checkpoint_id=base["configurable"]["checkpoint_id"]), {"answer": "A"}, 1)
    with pytest.raises(WriteConflictError):
        put(second, cfg("t", checkpoint_id=base["configurable"]["checkpoint_id"]), {"answer": "B"}, 2)
    with pytest.raises(WriteConflictError):
        second.put_writes(base, [("answer", "B")], "task-b")
    latest = EvstoreSaver(store).get_tuple(cfg("t"))
    assert latest is not None and latest.checkpoint["id"] == ahead["configurable"]["checkpoint_id"]
    assert latest.checkpoint["channel_values"] == {"answer": "A"} and latest.pending_writes == []
    assert len(list(first.list(cfg("t")))) == 2
    # after reading the thread again, the second writer continues from what is there
    again = second.get_tuple(cfg("t"))
    assert again is not None and again.checkpoint["id"] == ahead["configurable"]["checkpoint_id"]
    put(second, cfg("t", checkpoint_id=ahead["configurable"]["checkpoint_id"]), {"answer": "B"}, 3)
    assert [t.checkpoint["channel_values"]["answer"] for t in first.list(cfg("t"))] == ["B", "A", "draft"]


@pytest.mark.slow
def test_a_stale_process_is_refused_after_another_process_ran_the_thread_over_s3(moto_endpoint: str) -> None:
    bucket = new_bucket(moto_endpoint)
    store = Store(bucket, root="agents")
    saver = EvstoreSaver(store)
    graph = build(saver)
    config: Any = {"configurable": {"thread_id": "shared"}}
    graph.invoke({"request": "plan a trip"}, config)  # up to the interrupt
    seen = saver.get_tuple(config)  # this process has read the thread
    assert seen is not None
    other = subprocess.run(
        [
            sys.executable,
            str(REPO / "tests" / "scripts" / "langgraph_graph.py"),
            f"s3://{bucket.bucket}/agents",
            "shared",
            "resume",
            "from the other process",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "AWS_ENDPOINT_URL": moto_endpoint},
    )
    assert other.returncode == 0, other.stderr[-2000:]
    assert json.loads(other.stdout)["result"]["decision"] == "from the other process"
    # this process now writes from what it read: refused, and the other process's work stands
    stale = checkpoint(seen.checkpoint["channel_values"], seen.checkpoint["channel_versions"], 50)
    with pytest.raises(WriteConflictError):
        saver.put(seen.config, stale, {"source": "update", "step": 50}, {})
    with pytest.raises(WriteConflictError):
        saver.put_writes(seen.config, [("decision", "mine")], "task-stale")
    final = build(EvstoreSaver(Store(bucket, root="agents"))).get_state(config)
    assert final.next == () and final.values["decision"] == "from the other process"
    # reading the thread again, this process continues from the other's result
    assert graph.get_state(config).values["decision"] == "from the other process"
    graph.update_state(config, {"decision": "amended"})
    assert build(EvstoreSaver(Store(bucket, root="agents"))).get_state(config).values["decision"] == "amended"


class Counter(TypedDict, total=False):
    total: int


def test_a_graph_run_overtaken_by_another_process_fails_with_a_conflict() -> None:
    store = Store(MemoryStore(), root="lg")
    config: Any = {"configurable": {"thread_id": "shared"}}
    other = counting_graph(EvstoreSaver(store), None)
    other.invoke({"total": 1}, config)

    def meanwhile() -> None:  # while this run's node works, another process runs the same thread
        other.invoke({"total": 10}, config, durability="sync")

    slow = counting_graph(EvstoreSaver(store), meanwhile)
    with pytest.raises(WriteConflictError):
        slow.invoke({"total": 100}, config, durability="sync")
    state = counting_graph(EvstoreSaver(store), None).get_state(config)
    # the other run read this run's input checkpoint (+100) and finished (+10, +1); this run's
    # node result (+1), computed from a state the other run overtook, was refused, not stored
    assert state.values == {"total": 1 + 1 + 100 + 10 + 1}
    assert state.next == ()


def counting_graph(saver: BaseCheckpointSaver[Any], during: Any) -> Any:
    class State(TypedDict, total=False):
        total: Annotated[int, operator.add]

    def bump(state: State) -> dict[str, int]:
        if during is not None:
            during()
        return {"total": 1}

    builder = StateGraph(State)
    builder.add_node("bump", bump)
    builder.add_edge(START, "bump")
    builder.add_edge("bump", END)
    return builder.compile(checkpointer=saver)


# ---- a real graph: interrupt, resume in a new process, time travel ----------------------------------


@pytest.mark.slow
def test_graph_interrupts_resumes_in_a_new_process_and_travels_in_time(tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'store'}"
    config: Any = {"configurable": {"thread_id": "trip-1"}}
    graph = build(EvstoreSaver(Store(LocalStore(tmp_path / "store"))))
    first = graph.invoke({"request": "plan a trip"}, config)
    assert [i.value["draft"] for i in first["__interrupt__"]] == ["draft: plan a trip"]
    assert graph.get_state(config).next == ("review",)

    resumed = subprocess.run(
        [sys.executable, str(REPO / "tests" / "scripts" / "langgraph_graph.py"), url, "trip-1", "resume", "approved"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    out = json.loads(resumed.stdout)
    assert out["next_before"] == ["review"]
    expected = [
        ["HumanMessage", "plan a trip"],
        ["AIMessage", "draft: plan a trip"],
        ["AIMessage", "final (approved): draft: plan a trip"],
    ]
    assert out["result"] == {"request": "plan a trip", "decision": "approved", "messages": expected}

    # this process sees what the other one wrote, through a saver that has read nothing yet
    graph = build(EvstoreSaver(Store(LocalStore(tmp_path / "store"))))
    state = graph.get_state(config)
    assert state.next == () and summary(state.values)["messages"] == expected

    # time travel: change the request at the checkpoint before the model ran, and continue from there
    history = list(graph.get_state_history(config))
    before_model = next(s for s in history if s.next == ("model",))
    forked = graph.update_state(before_model.config, {"request": "plan a hike"})
    assert forked["configurable"]["checkpoint_id"] != before_model.config["configurable"]["checkpoint_id"]
    again = graph.invoke(None, forked)
    assert [i.value["draft"] for i in again["__interrupt__"]] == ["draft: plan a hike"]
    done = graph.invoke(Command(resume="yes"), config)
    assert summary(done)["messages"] == [
        ["HumanMessage", "plan a hike"],
        ["AIMessage", "draft: plan a hike"],
        ["AIMessage", "final (yes): draft: plan a hike"],
    ]
    # the first branch is still in the thread's history, unchanged
    old_final = graph.get_state(history[0].config)
    assert summary(old_final.values)["messages"] == expected
    assert len(list(graph.get_state_history(config))) > len(history)


def test_async_graph_and_cancelled_put_settles() -> None:
    store = Store(MemoryStore(), root="lg")
    saver = EvstoreSaver(store)
    graph = build(saver)
    config: Any = {"configurable": {"thread_id": "async-1"}}

    async def run() -> None:
        first = await graph.ainvoke({"request": "write a poem"}, config)
        assert "__interrupt__" in first
        done = await graph.ainvoke(Command(resume="fine"), config)
        assert done["decision"] == "fine"

        values = {"k": "v"}
        versions = {"k": saver.get_next_version(None, None)}
        cp = checkpoint(values, versions, 9)
        task = asyncio.ensure_future(saver.aput(cfg("cancel"), cp, {"step": 9}, versions))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError) as raised:
            await task
        outcome = AsyncStore.outcome(raised.value)
        assert outcome is not None
        found = await saver.aget_tuple(cfg("cancel"))
        # a put that started was settled before the cancellation went through: it is stored iff it succeeded
        assert (found is not None) == (outcome.started and outcome.ok)

    asyncio.run(run())
    assert EvstoreSaver(store).get_tuple(config) is not None


class Work(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    rounds: int


def fan_out_graph(saver: BaseCheckpointSaver[Any]) -> Any:
    """Rounds of three parallel ``Send`` tasks and two parallel nodes, joined, three times."""

    def start(state: Work) -> dict[str, Any]:
        return {"log": [f"start-{state.get('rounds', 0)}"]}

    def work(arg: dict[str, int]) -> dict[str, Any]:
        return {"log": [f"work-{arg['i']}"]}

    def side(name: str) -> Any:
        return lambda state: {"log": [f"{name}-{state.get('rounds', 0)}"]}

    def join(state: Work) -> dict[str, Any]:
        return {"rounds": state.get("rounds", 0) + 1}

    builder = StateGraph(Work)
    builder.add_node("start", start)
    builder.add_node("work", work)
    builder.add_node("left", side("left"))
    builder.add_node("right", side("right"))
    builder.add_node("join", join)
    builder.add_edge(START, "start")
    builder.add_conditional_edges("start", lambda s: [Send("work", {"i": i}) for i in range(3)])
    builder.add_edge("start", "left")
    builder.add_edge("start", "right")
    builder.add_edge(["work", "left", "right"], "join")
    builder.add_conditional_edges("join", lambda s: "start" if s["rounds"] < 3 else END)
    return builder.compile(checkpointer=saver)


# Not "async": under it LangGraph hands put() live channel objects (a barrier's set) and runs it
# in the background, so a saver that is not instantaneous can store a set the next step already
# changed: LangGraph's own InMemorySaver with 20 ms of latency in put() shows the same history
# difference. The same states whatever the saver's latency need durability "sync" (or "exit").
@pytest.mark.parametrize(("durability", "mode"), [("sync", "sync"), ("exit", "sync"), ("sync", "async")])
def test_parallel_tasks_give_the_same_states_and_history_as_the_in_memory_saver(durability: str, mode: str) -> None:
    store = Store(MemoryStore(), root="lg")
    config: Any = {"configurable": {"thread_id": "fan"}}
    runs = {}
    for name, saver in (("memory", InMemorySaver()), ("evstore", EvstoreSaver(store))):
        graph = fan_out_graph(saver)
        for first in ("in", "again"):
            if mode == "async":  # aput_writes of parallel tasks, concurrently, through AsyncStore's pool
                asyncio.run(graph.ainvoke({"log": [first]}, config, durability=durability))
            else:
                graph.invoke({"log": [first]}, config, durability=durability)
        if name == "evstore":
            graph = fan_out_graph(EvstoreSaver(store))  # read back by a saver that wrote nothing
        runs[name] = [
            (s.metadata.get("step") if s.metadata else None, s.next, s.values, len(s.tasks))
            for s in graph.get_state_history(config)
        ]
    assert runs["evstore"] == runs["memory"]
    assert runs["evstore"][0][2]["rounds"] == 4 and len(runs["evstore"]) > 1  # 3 rounds, then 1 more


# ---- delta channels, prune and delete_for_runs ------------------------------------------------------


def extend(state: list[str], writes: Sequence[list[str]]) -> list[str]:
    return [*state, *(item for write in writes for item in write)]


class Items(TypedDict, total=False):
    items: Annotated[list[str], DeltaChannel(extend, snapshot_frequency=3)]


def delta_graph(saver: BaseCheckpointSaver[Any]) -> Any:
    def add(state: Items) -> dict[str, list[str]]:
        return {"items": [f"item-{len(state.get('items', []))}"]}

    builder = StateGraph(Items)
    builder.add_node("add", add)
    builder.add_edge(START, "add")
    builder.add_edge("add", END)
    return builder.compile(checkpointer=saver)


def test_delta_channel_history_matches_the_parent_chain_walk_and_survives_prune() -> None:
    store = Store(MemoryStore(), root="lg")
    saver = EvstoreSaver(store)
    graph = delta_graph(saver)
    config: Any = {"configurable": {"thread_id": "delta"}}
    for _ in range(7):
        graph.invoke({"items": []}, config)
    expected = [f"item-{i}" for i in range(7)]
    assert delta_graph(EvstoreSaver(store)).get_state(config).values["items"] == expected
    for snapshot in list(graph.get_state_history(config))[:6]:
        target = snapshot.config
        ours = EvstoreSaver(store).get_delta_channel_history(config=target, channels=["items"])
        reference = BaseCheckpointSaver.get_delta_channel_history(saver, config=target, channels=["items"])
        assert ours == reference
    latest = saver.get_delta_channel_history(config=config, channels=["items"])
    assert "seed" in latest["items"] or latest["items"]["writes"]

    saver.prune(["delta"], strategy="keep_latest")
    assert len(list(saver.list(config))) == 1
    # the retracted ancestors still rebuild the remaining checkpoint's state
    assert delta_graph(EvstoreSaver(store)).get_state(config).values["items"] == expected
    graph.invoke({"items": []}, config)
    assert delta_graph(EvstoreSaver(store)).get_state(config).values["items"] == [*expected, "item-7"]


def delta_history_cost(invokes: int) -> tuple[int, Any]:
    counting = CountingStore(MemoryStore())
    store = Store(counting, root="lg")
    graph = delta_graph(EvstoreSaver(store))
    config: Any = {"configurable": {"thread_id": "delta"}}
    for _ in range(invokes):
        graph.invoke({"items": []}, config)
    fresh = EvstoreSaver(store)
    fresh.get_tuple(config)
    counting.reset()
    history = fresh.get_delta_channel_history(config=config, channels=["items"])
    cost = counting.total
    assert history == BaseCheckpointSaver.get_delta_channel_history(fresh, config=config, channels=["items"])
    return cost, history


def test_delta_channel_history_reads_back_to_the_snapshot_only() -> None:
    short, early = delta_history_cost(9)  # the same place in the snapshot cycle (every 3 updates)
    long, late = delta_history_cost(36)
    assert short == long
    for history, invokes in ((early, 9), (late, 36)):  # the snapshot and the writes after it make up the items
        items = [*history["items"]["seed"].value, *(x for w in history["items"]["writes"] for x in w[2])]
        assert items == [f"item-{i}" for i in range(invokes)]


def test_prune_and_delete_for_runs_retract_and_delete_thread_frees() -> None:
    store = Store(MemoryStore(), root="lg")
    saver = EvstoreSaver(store)
    first = saver.put(cfg("t"), checkpoint({}, {}, 0), {"run_id": "run-1", "step": 0}, {})
    after_first = cfg("t", checkpoint_id=first["configurable"]["checkpoint_id"])
    second = saver.put(after_first, checkpoint({}, {}, 1), {"run_id": "run-2"}, {})
    saver.put(cfg("other"), checkpoint({}, {}, 2), {"run_id": "run-1"}, {})
    before = stored_bytes(store)
    saver.delete_for_runs(["run-1"])
    assert [t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg("t"))] == [second["configurable"]["checkpoint_id"]]
    assert saver.get_tuple(cfg("other")) is None and saver.get_tuple(first) is None
    assert stored_bytes(store) > before  # a retraction is one more event: nothing was freed
    # the audit view keeps what was retracted
    assert sum(1 for _ in store.replay(session_id_for("lg-", "t"))) == 3
    saver.delete_thread("t")
    saver.delete_thread("other")
    assert saver.get_tuple(cfg("t")) is None
    store.gc(grace=timedelta(0), now=datetime.now(UTC) + FENCE_HOLD + timedelta(minutes=1))  # past the fence hold
    assert stored_bytes(store) == 0


def test_copy_thread_is_a_fork_of_constant_cost() -> None:
    costs = []
    for steps in (3, 60):
        counting = CountingStore(MemoryStore())
        store = Store(counting, root="lg")
        saver = EvstoreSaver(store)
        grow(saver, "src", steps, "b")
        counting.reset()
        saver.copy_thread("src", "dst")
        costs.append(counting.total)
        source, copy = saver.get_tuple(cfg("src")), saver.get_tuple(cfg("dst"))
        assert source is not None and copy is not None
        assert copy.checkpoint == source.checkpoint and copy.pending_writes == source.pending_writes
        assert copy.config["configurable"]["thread_id"] == "dst"
        put(saver, cfg("dst", checkpoint_id=copy.checkpoint["id"]), {"counter": -1}, 99)
        after = saver.get_tuple(cfg("src"))
        assert after is not None and after.checkpoint["id"] == source.checkpoint["id"]  # the source is untouched
    assert costs[0] == costs[1]


def test_a_thread_deleted_and_written_again_elsewhere_is_read_afresh() -> None:
    store = Store(MemoryStore(), root="lg")
    reader, other = EvstoreSaver(store), EvstoreSaver(store)
    put(other, cfg("t"), {"k": "old"})
    seen = reader.get_tuple(cfg("t"))
    assert seen is not None and seen.checkpoint["channel_values"] == {"k": "old"}
    other.delete_thread("t")
    assert reader.get_tuple(cfg("t")) is None
    put(other, cfg("t"), {"k": "new"})  # a new session at the same seqs
    again = reader.get_tuple(cfg("t"))
    assert again is not None and again.checkpoint["channel_values"] == {"k": "new"}
    other.delete_thread("t")
    put(other, cfg("t"), {"k": "newer"})
    latest = reader.get_tuple(cfg("t"))  # the reader's writer is of a deleted incarnation: it reopens
    assert latest is not None and latest.checkpoint["channel_values"] == {"k": "newer"}


def test_every_read_adopts_the_head_before_the_next_write() -> None:
    store = Store(MemoryStore(), root="lg")
    first, second = EvstoreSaver(store), EvstoreSaver(store)
    one = put(first, cfg("t"), {"x": 1}, 0)
    assert second.get_tuple(cfg("t")) is not None
    two = put(second, cfg("t", checkpoint_id=one["configurable"]["checkpoint_id"]), {"x": 2}, 1)
    # reading an old checkpoint's delta history moves the first saver to the head, so its next
    # write records the right latest checkpoint
    first.get_delta_channel_history(config=one, channels=["x"])
    first.put_writes(two, [("x", 3)], "task")
    latest = EvstoreSaver(store).get_tuple(cfg("t"))
    assert latest is not None and latest.checkpoint["id"] == two["configurable"]["checkpoint_id"]
    assert latest.pending_writes == [("task", "x", 3)]


def test_unserializable_values_and_malformed_records_are_evstore_errors() -> None:
    store = Store(MemoryStore(), root="lg")
    saver = EvstoreSaver(store)
    with pytest.raises(InvalidInputError, match="cannot serialize channel 'k'"):
        put(saver, cfg("t"), {"k": object()})
    stored = put(saver, cfg("t"), {"k": "fine"})
    with pytest.raises(InvalidInputError, match="cannot serialize the write"):
        saver.put_writes(stored, [("ch", object())], "task")
    assert saver.get_tuple(cfg("t")) is not None
    # an event that claims to be a LangGraph record but lacks its fields
    store.open(session_id_for("lg-", "t")).append({"role": "system", "meta": {"langgraph": {"k": "cp", "id": 7}}})
    with pytest.raises(IntegrityError, match="malformed"):
        EvstoreSaver(store).get_tuple(cfg("t"))
    with pytest.raises(IntegrityError, match="malformed"):
        list(EvstoreSaver(store).list(cfg("t")))


def test_import_evstore_does_not_import_langgraph() -> None:
    code = "import sys, evstore; print(sorted(m for m in sys.modules if m.startswith(('langgraph', 'langchain'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]"
