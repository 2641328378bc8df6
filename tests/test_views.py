"""The audit and context views: rewinds, pops, summaries, resume repair,
and a model-based property test of both views over appends, forks,
rewinds, summaries and deletes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from evstore import InvalidInputError, MemoryStore, SessionNotFoundError, Store
from evstore._views import INTERRUPTED_RESULT

from .helpers import msg

FIXTURES = Path(__file__).parent / "fixtures"


def texts(messages: list[dict[str, Any]]) -> list[Any]:
    return [m.get("content") for m in messages]


def test_rewind_withdraws_later_messages_from_the_context_but_not_the_audit(memory_store: Store) -> None:
    writer = memory_store.open("s", create=True)
    for i in range(5):
        writer.append(msg(f"m{i}"))
    assert writer.rewind(2) == 6
    writer.append(msg("after"))
    assert texts(memory_store.context("s")) == ["m0", "m1", "after"]
    audit = list(memory_store.replay("s"))
    assert len(audit) == 7 and audit[5].messages == []
    assert [m["content"] for e in audit for m in e.messages] == ["m0", "m1", "m2", "m3", "m4", "after"]


def test_rewind_to_a_seq_beyond_the_head_is_refused(memory_store: Store) -> None:
    writer = memory_store.open("s", create=True)
    writer.append(msg("x"))
    with pytest.raises(InvalidInputError):
        writer.rewind(5)


def test_pop_withdraws_the_last_message_even_inside_a_batch(memory_store: Store) -> None:
    writer = memory_store.open("s", create=True)
    writer.append(msg("a"))
    writer.append([msg("b"), msg("c")])
    assert writer.pop() == msg("c")
    assert texts(memory_store.context("s")) == ["a", "b"]
    assert writer.pop() == msg("b")
    assert writer.pop() == msg("a")
    assert writer.pop() is None
    writer.append(msg("d"))
    assert texts(memory_store.context("s")) == ["d"]


def test_clear_empties_the_context(memory_store: Store) -> None:
    writer = memory_store.open("s", create=True)
    writer.append(msg("a"))
    writer.clear()
    assert memory_store.context("s") == []
    writer.append(msg("b"))
    assert texts(memory_store.context("s")) == ["b"]


def test_a_rewind_back_past_a_summary_restores_what_it_covered(memory_store: Store) -> None:
    writer = memory_store.open("s", create=True)
    for i in range(3):
        writer.append(msg(f"m{i}"))
    writer.append(msg("S", "assistant", meta={"is_summary": True, "summary_of": 2}))
    assert texts(memory_store.context("s")) == ["m0", "S"]
    writer.rewind(3)
    assert texts(memory_store.context("s")) == ["m0", "m1", "m2"]


def test_the_latest_summary_stands_for_what_it_covers() -> None:
    store = Store(MemoryStore())
    chatcli = json.loads((FIXTURES / "chatcli-v2-session.json").read_text())
    writer = store.open("s", create=True)
    for message in chatcli["chat_history"]:
        writer.append(message)
    context = store.context("s")
    assert [m["role"] for m in context] == ["system", "assistant"]
    assert context[-1]["meta"]["is_summary"] is True
    writer.append(msg("next question"))
    writer.append(msg("Summary of everything", "assistant", meta={"is_summary": True}))
    assert texts(store.context("s")) == ["Summary of everything"]


def _harness_session() -> Store:
    store = Store(MemoryStore())
    writer = store.open("h", create=True)
    for line in (FIXTURES / "harness-session.jsonl").read_text().splitlines():
        writer.append(json.loads(line))
    return store


def test_resume_repair_answers_a_dangling_tool_call_with_an_error_by_default() -> None:
    context = _harness_session().context("h")
    assert context[-2]["tool_calls"][0]["id"] == "t2"
    assert context[-1] == {"role": "tool", "tool_call_id": "t2", "content": INTERRUPTED_RESULT, "meta": {"synthetic": True}}


def test_resume_repair_can_drop_the_dangling_call() -> None:
    context = _harness_session().context("h", repair="drop")
    assert len(context) == 3 and context[-1]["role"] == "tool" and context[-1]["tool_call_id"] == "t1"


def test_resume_repair_can_be_turned_off_and_never_changes_the_audit() -> None:
    store = _harness_session()
    assert store.context("h", repair="none")[-1]["tool_calls"][0]["id"] == "t2"
    assert sum(len(e.messages) for e in store.replay("h")) == 4
    with pytest.raises(InvalidInputError):
        store.context("h", repair="maybe")  # type: ignore[arg-type]


def test_drop_keeps_the_answered_calls_of_a_message_with_several() -> None:
    store = Store(MemoryStore())
    writer = store.open("s", create=True)
    calls = [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
        {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}},
    ]
    writer.append(
        [
            msg("go"),
            {"role": "assistant", "content": None, "tool_calls": calls},
            {"role": "tool", "tool_call_id": "a", "content": "ok"},
        ]
    )
    dropped = store.context("s", repair="drop")
    assert [c["id"] for c in dropped[1]["tool_calls"]] == ["a"]
    errored = store.context("s")
    assert [m.get("tool_call_id") for m in errored] == [None, None, "b", "a"]


def test_the_context_of_a_fork_includes_its_ancestry_and_its_own_rewinds(memory_store: Store) -> None:
    writer = memory_store.open("p", create=True)
    for i in range(4):
        writer.append(msg(f"p{i}"))
    fork = memory_store.fork("p", "f", at=3)
    fork.append(msg("f4"))
    fork.rewind(1)
    fork.append(msg("f6"))
    assert texts(memory_store.context("f")) == ["p0", "f6"]
    assert texts(memory_store.context("p")) == ["p0", "p1", "p2", "p3"]


class ViewsModel(RuleBasedStateMachine):
    """Random appends, forks, rewinds, summaries and deletes against a plain model of both views."""

    def __init__(self) -> None:
        super().__init__()
        self.store = Store(MemoryStore(), root="m")
        self.model: dict[str, list[tuple[str, Any]]] = {}  # sid -> lineage events: ("msgs", [...]) | ("rewind", seq)
        self.writers: dict[str, Any] = {}
        self.counter = 0

    @initialize()
    def first(self) -> None:
        self.writers["s0"] = self.store.open("s0", create=True)
        self.model["s0"] = []

    def _text(self) -> str:
        self.counter += 1
        return f"t{self.counter}"

    @rule(data=st.data(), batch=st.integers(1, 3))
    def append(self, data: st.DataObject, batch: int) -> None:
        sid = data.draw(st.sampled_from(sorted(self.model)))
        messages = [msg(self._text()) for _ in range(batch)]
        self.writers[sid].append(messages)
        self.model[sid].append(("msgs", messages))

    @rule(data=st.data())
    def summary(self, data: st.DataObject) -> None:
        sid = data.draw(st.sampled_from(sorted(self.model)))
        covered = data.draw(st.integers(0, 3))
        message = msg(self._text(), "assistant", meta={"is_summary": True, "summary_of": covered})
        self.writers[sid].append(message)
        self.model[sid].append(("msgs", [message]))

    @rule(data=st.data())
    def rewind(self, data: st.DataObject) -> None:
        sid = data.draw(st.sampled_from(sorted(self.model)))
        to = data.draw(st.integers(0, len(self.model[sid])))
        self.writers[sid].rewind(to)
        self.model[sid].append(("rewind", to))

    @precondition(lambda self: len(self.model) < 6)
    @rule(data=st.data())
    def fork(self, data: st.DataObject) -> None:
        sid = data.draw(st.sampled_from(sorted(self.model)))
        if not self.model[sid]:
            return
        at = data.draw(st.integers(1, len(self.model[sid])))
        self.counter += 1
        child = f"f{self.counter}"
        self.writers[child] = self.store.fork(sid, child, at=at)
        self.model[child] = list(self.model[sid][:at])

    @precondition(lambda self: len(self.model) > 1)
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        sid = data.draw(st.sampled_from(sorted(self.model)))
        self.store.delete(sid)
        del self.model[sid], self.writers[sid]
        with pytest.raises(SessionNotFoundError):
            list(self.store.replay(sid))

    @staticmethod
    def expected_context(events: list[tuple[str, Any]]) -> list[Any]:
        live: list[tuple[int, Any]] = []
        for seq, (kind, value) in enumerate(events, 1):
            live = [(s, m) for s, m in live if s <= value] if kind == "rewind" else live + [(seq, m) for m in value]
        out: list[Any] = []
        for _, m in live:
            if (m.get("meta") or {}).get("is_summary"):
                n = m["meta"]["summary_of"]
                out = out[: max(0, len(out) - n)] if n else []
            out.append(m)
        return out

    @invariant()
    def views_match_the_model(self) -> None:
        for sid, events in self.model.items():
            audit = list(self.store.replay(sid))
            assert [e.seq for e in audit] == list(range(1, len(events) + 1))
            assert [e.messages for e in audit] == [v if k == "msgs" else [] for k, v in events]
            assert self.store.context(sid, repair="none") == self.expected_context(events)


TestViewsModel = ViewsModel.TestCase
TestViewsModel.settings = settings(
    max_examples=30, stateful_step_count=20, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
