"""evstore's framework adapters per agent turn: the benchmark of issue #29, beside each framework's own store.

    python benchmarks/frameworks.py [--quick] [--only SECTION ...] [--json FILE]

Sections (``--only``): langgraph, adk, strands, openai, pydantic-ai, restart. The
default run is every section (a few minutes); ``--quick`` measures at 10 and 300
events only, two turns each (under a minute).

One section per adapter (``evstore.integrations``), each driven through its
framework's public API with a canned model that answers every prompt with the
same text (no network, no real model):

* LangGraph ``EvstoreSaver``: a compiled graph (one node appending an AI
  message to a ``messages`` channel) and its ``invoke`` on one thread; beside
  ``SqliteSaver`` (langgraph-checkpoint-sqlite).
* Google ADK ``EvstoreSessionService``: a ``Runner`` over an ``LlmAgent``
  (``run_async``: get_session, append of the user event and of the model's
  event); beside ADK's ``SqliteSessionService``.
* Strands ``session_manager``: an ``Agent`` call (the session manager's hooks
  for the user message and the assistant message, and its agent syncs);
  beside ``FileSessionManager``.
* OpenAI Agents ``EvstoreSession``: ``Runner.run`` with the session (its
  get_items and add_items); beside the SDK's ``SQLiteSession``.
* Pydantic AI ``EvstoreHistory``: ``load``, ``Agent.run_sync(message_history=)``
  and ``save(result.new_messages())``, as the adapter's docstring shows; beside
  a JSON file of the whole history (``ModelMessagesTypeAdapter``, written to a
  temporary file, fsync'd and renamed over the old one).

A turn is what the framework does per agent turn in a long-lived process: one
object (saver, service, agent, session, history) makes every turn. The session
is grown until it holds at least 10, 300 and 1,500 evstore events (one per
framework event or record the adapter writes), the native store alike, and at
each length a few whole turns are measured; then a fresh process's first turn
is measured apart, from the construction of its objects on: a new adapter
object over a new ``Store`` over a copy of the bucket (the native store: a new
object over a copy of its files), so the long-lived objects go on over a
session that one process wrote. Section ``restart`` does it all again with
each fresh process going on over the bucket itself as the long-lived object
(a process restarted at each length): the segments a restarted writer leaves
are what later reads find. LangGraph and Strands grow by whole turns. Where the
framework's own CPU per turn grows with the history in both stores (ADK's
Runner, the OpenAI Runner, a Pydantic AI run over its history), the growth
makes a turn's writes through the same objects without its reads, so the run
stays within minutes: ADK ``append_event`` of the user's and the model's
event, OpenAI ``add_items`` of the input and of the output, Pydantic AI
``save`` of a run's new messages (the JSON file written once per stretch).

evstore runs over ``MemoryStore`` through ``benchmarks/_scale_backend.py``'s
``Recorder``, so the counts are exact:

* requests are counted by kind (PUT, GET, HEAD, LIST, DELETE) as the backend
  receives them; the PUTs of compaction segments (``segments/``, ``young/``)
  and the DELETEs of the segments they retire are amortized over many appends
  (about one PUT per 32 events): they are counted apart, not in the turn's
  requests, and shown as their own row and as a rate over the whole run;
* dependent round trips are the longest chain of requests each of which
  started after the one before it had ended, with 15 ms of delay per request
  (requests sent together overlap). CPU time between requests lengthens a
  chain as it would on S3, so it is an upper bound of the logical rounds;
* ms per turn is the wall time of the turn with that delay, the framework's
  own CPU included;
* beside a fresh process's first turn, the requests of ``store.replay`` of
  the whole session from a new ``Store`` (no delay), taken just before that
  turn over the same bucket: the floor of a framework that loads all of its
  history in a new process. It varies with the length as the fresh turn does:
  a GET per segment and per loose event after the newest one (up to 31 with
  the default compaction every 32), so where the session stands in the
  compaction cycle moves both.

The native stores run on local disk (a temporary directory) with no delay
added: their time is local I/O and the framework's CPU, no network. The same
machine, the same turns. Counts decide, times are printed beside them. A turn's
requests are "flat" when the count at every length is within 1 of the count
at 10 events; an adapter that is not flat is reported, never an error: the
script exits non-zero only when something fails.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks._scale_backend import KINDS, Counts, FastMemory, Recorder  # noqa: E402
from benchmarks.scale import Report, Table  # noqa: E402
from evstore import MemoryStore, ObjectStore, Store  # noqa: E402

ADAPTERS = ["langgraph", "adk", "strands", "openai", "pydantic-ai"]
SECTIONS = [*ADAPTERS, "restart"]
SID = "chat-1"
APP = "bench"
USER = "user-1"
REPLY = "Here is a short answer from the canned model, about as long as a sentence or two of a real reply."
RTT = 0.015  # seconds of delay per evstore request while a turn is measured


def offline() -> None:
    """The environment the frameworks run in here: no telemetry exporter (Strands), no tracing and a
    dummy key (the OpenAI SDK: its client is never used). Set by ``main``, not on import."""
    os.environ.setdefault("OTEL_SDK_DISABLED", "true")
    os.environ.setdefault("OPENAI_API_KEY", "sk-dummy-no-network")
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")


def prompt(i: int) -> str:
    return f"question {i}: what should the agent do next in this conversation?"


# ---- configuration ---------------------------------------------------------


@dataclass(frozen=True)
class Config:
    quick: bool
    lengths: tuple[int, ...]  # evstore events in the session when turns are measured
    turns: int  # turns measured per length (the long-lived object)
    rtt: float


FULL = Config(quick=False, lengths=(10, 300, 1_500), turns=3, rtt=RTT)
QUICK = Config(quick=True, lengths=(10, 300), turns=2, rtt=RTT)


# ---- the recorder ----------------------------------------------------------


def is_segment(key: str) -> bool:
    """A compaction segment's key (``segments/`` or ``young/`` in its session's folder)."""
    return "/segments/" in key or "/young/" in key


class SegmentRecorder(Recorder):
    """``Recorder``, also counting apart the amortized compaction requests: PUTs of segments and
    DELETEs that retire segments. ``compaction`` is since the last ``reset``, ``compaction_total``
    since it was made. Every request is still in ``counts()``: subtract ``compaction`` there."""

    def __init__(self, inner: ObjectStore, delay: float = 0.0) -> None:
        super().__init__(inner, delay)
        self.compaction: Counter[str] = Counter()
        self.compaction_total: Counter[str] = Counter()
        self._compaction_lock = threading.Lock()

    def reset(self) -> None:
        super().reset()
        with self._compaction_lock:
            self.compaction = Counter()

    def _note(self, kind: str, times: int = 1) -> None:
        with self._compaction_lock:
            self.compaction[kind] += times
            self.compaction_total[kind] += times

    def create(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None
    ) -> str:
        etag = super().create(key, data, metadata=metadata, tags=tags)
        if is_segment(key):
            self._note("PUT")
        return etag

    def delete_many(self, keys: Iterable[str]) -> int:
        batch = list(keys)
        requests = super().delete_many(batch)
        if batch and all(is_segment(key) for key in batch):
            self._note("DELETE", requests)
        return requests


@dataclass
class Turn:
    """One measured turn: its requests without compaction, the compaction requests, its rounds and time."""

    kinds: dict[str, int]
    compaction: dict[str, int]
    round_trips: int
    seconds: float

    @property
    def requests(self) -> int:
        return sum(self.kinds.values())


def measure(recorder: SegmentRecorder, work: Callable[[], object]) -> Turn:
    """``work``'s requests through ``recorder`` (at the delay it is set to), its rounds and wall time;
    the compaction requests are taken out of ``kinds`` (kept in ``compaction``), not out of the rounds."""
    recorder.reset()
    started = time.perf_counter()
    work()
    seconds = time.perf_counter() - started
    counts: Counts = recorder.counts()
    compaction = dict(recorder.compaction)
    kinds = {kind: counts.kinds[kind] - compaction.get(kind, 0) for kind in KINDS}
    return Turn(kinds, compaction, counts.chain, seconds)


# ---- the frameworks ----------------------------------------------------------


class Harness:
    """One framework: how its adapter and its native store make a turn.

    ``open`` makes the objects of a new process over ``store`` (adapter object, framework
    objects); ``turn`` makes turn ``i`` with them. ``open_native`` and ``native_turn`` likewise
    over the native store in ``directory``. ``evstore_id`` names the evstore session that holds
    the conversation (whose length is measured)."""

    key = ""
    title = ""
    native = ""

    def evstore_id(self) -> str:
        raise NotImplementedError

    def open(self, store: Store) -> Any:
        raise NotImplementedError

    def turn(self, handle: Any, i: int) -> None:
        raise NotImplementedError

    def open_native(self, directory: Path) -> Any:
        raise NotImplementedError

    def native_turn(self, handle: Any, i: int) -> None:
        raise NotImplementedError

    def grow(self, handle: Any, native: Any, i: int) -> None:
        """Add turn ``i`` to both stores while a session is grown to a length (not measured): a whole
        turn, unless a harness writes what a turn writes without its reads (see the module)."""
        self.turn(handle, i)
        self.native_turn(native, i)

    def grown(self, handle: Any, native: Any) -> None:
        """A stretch of ``grow`` calls is over: whatever it held back is stored."""

    def close(self, handle: Any) -> None:
        """Let go of a process's objects (``open``'s or ``open_native``'s)."""


class LangGraph(Harness):
    key = "langgraph"
    title = "LangGraph EvstoreSaver: graph.invoke on a thread"
    native = "SqliteSaver"

    def __init__(self) -> None:
        from typing import Annotated, TypedDict

        from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
        from langgraph.graph import END, START, StateGraph
        from langgraph.graph.message import add_messages

        from evstore.integrations.langgraph import EvstoreSaver, session_id_for

        # the functional form: this module's annotations are strings, and these names are local
        Chat = TypedDict("Chat", {"messages": Annotated[list[AnyMessage], add_messages]})  # noqa: UP013

        def model(state: Any) -> dict[str, Any]:
            return {"messages": [AIMessage(content=REPLY)]}

        builder = StateGraph(Chat)
        builder.add_node("model", model)
        builder.add_edge(START, "model")
        builder.add_edge("model", END)
        self.builder = builder
        self.human = HumanMessage
        self.saver_class = EvstoreSaver
        self.session_id_for = session_id_for
        self.config: Any = {"configurable": {"thread_id": SID}}

    def evstore_id(self) -> str:
        return str(self.session_id_for("lg-", SID))

    def open(self, store: Store) -> Any:
        return self.builder.compile(checkpointer=self.saver_class(store))

    def turn(self, handle: Any, i: int) -> None:
        handle.invoke({"messages": [self.human(content=prompt(i))]}, self.config)

    def open_native(self, directory: Path) -> Any:
        from langgraph.checkpoint.sqlite import SqliteSaver

        connection = sqlite3.connect(str(directory / "checkpoints.sqlite"), check_same_thread=False)
        graph = self.builder.compile(checkpointer=SqliteSaver(connection))
        return graph, connection

    def native_turn(self, handle: Any, i: int) -> None:
        self.turn(handle[0], i)

    def close(self, handle: Any) -> None:
        if isinstance(handle, tuple):
            handle[1].close()


class Adk(Harness):
    key = "adk"
    title = "Google ADK EvstoreSessionService: Runner.run_async (get_session, the user's and the model's event)"
    native = "SqliteSessionService"

    def __init__(self) -> None:
        from collections.abc import AsyncGenerator

        from google.adk.agents import LlmAgent
        from google.adk.events.event import Event
        from google.adk.models.base_llm import BaseLlm
        from google.adk.models.llm_request import LlmRequest
        from google.adk.models.llm_response import LlmResponse
        from google.adk.runners import Runner
        from google.genai import types

        from evstore.integrations.adk import EvstoreSessionService

        class CannedLlm(BaseLlm):
            """Answers every request with REPLY."""

            async def generate_content_async(
                self, llm_request: LlmRequest, stream: bool = False
            ) -> AsyncGenerator[LlmResponse, None]:
                usage = types.GenerateContentResponseUsageMetadata(
                    prompt_token_count=1, candidates_token_count=1, total_token_count=2
                )
                yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=REPLY)]), usage_metadata=usage)

        self.agent = LlmAgent(name="helper", model=CannedLlm(model="canned"), instruction="Answer briefly.")
        self.runner_class = Runner
        self.service_class = EvstoreSessionService
        self.types = types
        self.event_class = Event
        self.growing: dict[int, Any] = {}  # id(runner) -> the session object appended to while growing
        self.loop = asyncio.new_event_loop()  # one loop for the run, as a long-lived server has

    def evstore_id(self) -> str:
        return str(self.service_class.session_evstore_id(self.service_class(Store(MemoryStore())), APP, USER, SID))

    def _runner(self, service: Any) -> Any:
        if self.loop.run_until_complete(service.get_session(app_name=APP, user_id=USER, session_id=SID)) is None:
            self.loop.run_until_complete(service.create_session(app_name=APP, user_id=USER, session_id=SID))
        return self.runner_class(app_name=APP, agent=self.agent, session_service=service)

    def open(self, store: Store) -> Any:
        return self._runner(self.service_class(store))

    def turn(self, handle: Any, i: int) -> None:
        async def go() -> None:
            message = self.types.Content(role="user", parts=[self.types.Part(text=prompt(i))])
            async for _ in handle.run_async(user_id=USER, session_id=SID, new_message=message):
                pass

        self.loop.run_until_complete(go())

    def grow(self, handle: Any, native: Any, i: int) -> None:
        """A Runner turn's two appends, through each runner's service, on one session object per stretch."""
        for runner in (handle, native):
            service = runner.session_service
            session = self.growing.get(id(runner))
            if session is None:
                found = self.loop.run_until_complete(service.get_session(app_name=APP, user_id=USER, session_id=SID))
                session = self.growing[id(runner)] = found
            for author, role, text in (("user", "user", prompt(i)), ("helper", "model", REPLY)):
                content = self.types.Content(role=role, parts=[self.types.Part(text=text)])
                event = self.event_class(author=author, invocation_id=f"grow-{i}", content=content)
                self.loop.run_until_complete(service.append_event(session, event))

    def grown(self, handle: Any, native: Any) -> None:
        self.growing.clear()  # the next stretch reads the session again, after the measured turns

    def open_native(self, directory: Path) -> Any:
        from google.adk.sessions.sqlite_session_service import SqliteSessionService

        return self._runner(SqliteSessionService(str(directory / "sessions.sqlite")))

    def native_turn(self, handle: Any, i: int) -> None:
        self.turn(handle, i)


class Strands(Harness):
    key = "strands"
    title = "Strands session_manager: Agent(prompt) (a user and an assistant message, agent syncs)"
    native = "FileSessionManager"

    def __init__(self) -> None:
        from collections.abc import AsyncGenerator

        from strands import Agent
        from strands.models import Model
        from strands.session import FileSessionManager

        from evstore.integrations.strands import session_manager

        class CannedModel(Model):
            """Streams REPLY as the assistant's message for every request."""

            def update_config(self, **model_config: Any) -> None:
                pass

            def get_config(self) -> Any:
                return {"model_id": "canned"}

            async def structured_output(self, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
                raise NotImplementedError
                yield {}  # an async generator, as the interface declares

            async def stream(self, messages: Any, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
                yield {"messageStart": {"role": "assistant"}}
                yield {"contentBlockStart": {"start": {}}}
                yield {"contentBlockDelta": {"delta": {"text": REPLY}}}
                yield {"contentBlockStop": {}}
                yield {"messageStop": {"stopReason": "end_turn"}}
                usage = {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}
                yield {"metadata": {"usage": usage, "metrics": {"latencyMs": 0}}}

        self.agent_class = Agent
        self.model_class = CannedModel
        self.file_manager = FileSessionManager
        self.session_manager = session_manager

    def evstore_id(self) -> str:
        return SID  # the repository's prefix is empty

    def _agent(self, manager: Any) -> Any:
        return self.agent_class(model=self.model_class(), session_manager=manager, agent_id="main", callback_handler=None)

    def open(self, store: Store) -> Any:
        return self._agent(self.session_manager(SID, store))

    def turn(self, handle: Any, i: int) -> None:
        handle(prompt(i))

    def open_native(self, directory: Path) -> Any:
        return self._agent(self.file_manager(SID, storage_dir=str(directory)))

    def native_turn(self, handle: Any, i: int) -> None:
        self.turn(handle, i)


class OpenAiAgents(Harness):
    key = "openai"
    title = "OpenAI Agents EvstoreSession: Runner.run(session=) (get_items, add_items)"
    native = "SQLiteSession"

    def __init__(self) -> None:
        from collections.abc import AsyncIterator

        from agents import Agent, Model, ModelResponse, Runner, Usage, set_tracing_disabled
        from openai.types.responses import ResponseOutputMessage, ResponseOutputText

        from evstore.integrations.openai_agents import EvstoreSession

        set_tracing_disabled(True)

        class CannedModel(Model):
            """Answers every request with REPLY as one assistant message."""

            def __init__(self) -> None:
                self.calls = 0

            async def get_response(self, *args: Any, **kwargs: Any) -> Any:
                self.calls += 1
                text = ResponseOutputText(type="output_text", text=REPLY, annotations=[])
                message = ResponseOutputMessage(
                    id=f"msg_{self.calls}", type="message", role="assistant", status="completed", content=[text]
                )
                usage = Usage(requests=1, input_tokens=1, output_tokens=1, total_tokens=2)
                return ModelResponse(output=[message], usage=usage, response_id=None)

            def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
                raise NotImplementedError("the benchmark runs Runner.run, not run_streamed")

        self.agent = Agent(name="assistant", instructions="Be brief.", model=CannedModel())
        self.runner = Runner
        self.session_class = EvstoreSession
        self.loop = asyncio.new_event_loop()

    def evstore_id(self) -> str:
        return SID

    def open(self, store: Store) -> Any:
        return self.session_class(SID, store)

    def turn(self, handle: Any, i: int) -> None:
        self.loop.run_until_complete(self.runner.run(self.agent, prompt(i), session=handle))

    def grow(self, handle: Any, native: Any, i: int) -> None:
        """A Runner turn's two add_items (the input, then the output message) on each session."""
        user = {"role": "user", "content": prompt(i)}
        text = {"type": "output_text", "text": REPLY, "annotations": []}
        reply = {"id": f"msg_grow_{i}", "type": "message", "role": "assistant", "status": "completed", "content": [text]}
        for session in (handle, native):
            self.loop.run_until_complete(session.add_items([user]))
            self.loop.run_until_complete(session.add_items([reply]))

    def open_native(self, directory: Path) -> Any:
        from agents.memory import SQLiteSession

        return SQLiteSession(SID, directory / "sessions.sqlite")

    def native_turn(self, handle: Any, i: int) -> None:
        self.turn(handle, i)

    def close(self, handle: Any) -> None:
        closing = getattr(handle, "close", None)
        if closing is not None:
            closing()


class PydanticAi(Harness):
    key = "pydantic-ai"
    title = "Pydantic AI EvstoreHistory: load, Agent.run_sync(message_history=), save(new_messages())"
    native = "JSON file"

    def __init__(self) -> None:
        from pydantic_ai import Agent
        from pydantic_ai.messages import ModelMessagesTypeAdapter
        from pydantic_ai.models.test import TestModel

        from evstore.integrations.pydantic_ai import EvstoreHistory

        self.agent = Agent(TestModel(custom_output_text=REPLY, call_tools=[]), instructions="Be brief.")
        self.adapter = ModelMessagesTypeAdapter
        self.history_class = EvstoreHistory
        self.pending: list[Any] = []  # messages grown into the JSON file at the end of the stretch

    def evstore_id(self) -> str:
        return SID

    def open(self, store: Store) -> Any:
        return self.history_class(store, SID)

    def turn(self, handle: Any, i: int) -> None:
        result = self.agent.run_sync(prompt(i), message_history=handle.load())
        handle.save(result.new_messages())

    def grow(self, handle: Any, native: Any, i: int) -> None:
        """A run's new messages (the agent run without the history), saved; the JSON file's held back."""
        new = self.agent.run_sync(prompt(i)).new_messages()
        handle.save(new)
        self.pending.extend(new)

    def grown(self, handle: Any, native: Any) -> None:
        self._write(native, [*self._read(native), *self.pending])
        self.pending = []

    def open_native(self, directory: Path) -> Any:
        return directory / "history.json"

    def _read(self, path: Path) -> list[Any]:
        return list(self.adapter.validate_json(path.read_bytes())) if path.exists() else []

    def _write(self, path: Path, messages: list[Any]) -> None:
        """The whole history, durably: a temporary file, fsync'd, renamed over the old one."""
        temporary = path.with_suffix(".tmp")
        with temporary.open("wb") as out:
            out.write(self.adapter.dump_json(messages))
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)

    def native_turn(self, handle: Any, i: int) -> None:
        result = self.agent.run_sync(prompt(i), message_history=self._read(handle))
        self._write(handle, result.all_messages())


HARNESSES: dict[str, Callable[[], Harness]] = {
    "langgraph": LangGraph,
    "adk": Adk,
    "strands": Strands,
    "openai": OpenAiAgents,
    "pydantic-ai": PydanticAi,
}


# ---- one framework -------------------------------------------------------------


@dataclass
class Length:
    """The figures at one session length: the long-lived object's turns and a fresh process's first turn."""

    events: int  # evstore events in the session before the measured turns
    turns: list[Turn] = field(default_factory=list)
    native_seconds: list[float] = field(default_factory=list)
    fresh: Turn | None = None
    native_fresh_seconds: float = 0.0
    replay: dict[str, int] = field(default_factory=dict)  # a whole replay's requests by kind (no delay), before the fresh turn


def head(memory: MemoryStore, session_id: str) -> int:
    """The session's evstore events, read over the bare bucket (no request is recorded)."""
    with Store(memory) as store:
        return store.open(session_id).head


def whole_replay(memory: MemoryStore, session_id: str) -> dict[str, int]:
    """The requests of ``store.replay`` of the whole session from a new ``Store`` (by kind): what a
    read of all of the history costs, the floor of a framework that loads it all."""
    recorder = SegmentRecorder(memory)
    with Store(recorder) as store:
        for _ in store.replay(session_id):
            pass
    counts = recorder.counts()
    return {kind: counts.kinds[kind] for kind in KINDS}


def run_framework(
    cfg: Config, harness: Harness, directory: Path, *, restart: bool = False
) -> tuple[list[Length], dict[str, Any]]:
    """Grow one session in both stores and measure at every length (see the module).

    The fresh process's turn runs over a copy of the bucket (and of the native store's files), so
    the long-lived objects go on over a session that one process wrote. With ``restart``, it runs
    over the bucket itself and the fresh objects go on as the long-lived ones (a process restarted
    at each length, the first time at the first length)."""
    memory = FastMemory()  # evstore's MemoryStore, whose bucket can be copied
    recorder = SegmentRecorder(memory)
    handle = harness.open(Store(recorder))
    native = harness.open_native(directory)
    sid = harness.evstore_id()
    i = 0
    grown = 0.0
    lengths: list[Length] = []
    for n in cfg.lengths:
        recorder.delay = 0.0
        started = time.perf_counter()
        if i == 0:  # the first turn is a whole one in every harness: it creates what the session needs
            harness.turn(handle, i)
            harness.native_turn(native, i)
            i += 1
        while head(memory, sid) < n:
            harness.grow(handle, native, i)
            i += 1
        harness.grown(handle, native)
        grown += time.perf_counter() - started
        found = Length(head(memory, sid))
        recorder.delay = cfg.rtt
        for _ in range(cfg.turns):
            found.turns.append(measure(recorder, functools.partial(harness.turn, handle, i)))
            started = time.perf_counter()
            harness.native_turn(native, i)
            found.native_seconds.append(time.perf_counter() - started)
            i += 1
        # a fresh process: new objects over a new Store, measured from their construction on
        copied = memory if restart else memory.copy()
        found.replay = whole_replay(copied, sid)  # the session the fresh turn finds, read whole
        bucket = recorder if restart else SegmentRecorder(copied, cfg.rtt)
        files = directory if restart else Path(shutil.copytree(directory, directory.with_name(directory.name + "-copy")))
        if restart:
            harness.close(handle)
            harness.close(native)
        opened: list[Any] = []

        def first_turn(at: int = i, bucket: SegmentRecorder = bucket, opened: list[Any] = opened) -> None:
            opened.append(harness.open(Store(bucket)))
            harness.turn(opened[0], at)

        found.fresh = measure(bucket, first_turn)
        started = time.perf_counter()
        fresh_native = harness.open_native(files)
        harness.native_turn(fresh_native, i)
        found.native_fresh_seconds = time.perf_counter() - started
        if restart:
            handle, native = opened[0], fresh_native
            i += 1
        else:
            harness.close(opened[0])
            harness.close(fresh_native)
            shutil.rmtree(files, ignore_errors=True)
        lengths.append(found)
    harness.close(handle)
    harness.close(native)
    events = head(memory, sid)
    summary = {
        "turns": i,
        "events": events,
        "growth_seconds": grown,
        "compaction": dict(recorder.compaction_total),
        "compaction_per_turn": sum(recorder.compaction_total.values()) / i,
    }
    return lengths, summary


# ---- output ----------------------------------------------------------------


def mean(values: Iterable[float]) -> float:
    return statistics.fmean(values)


def average(values: list[float] | list[int]) -> float | int:
    """The mean; an int when it is a whole number."""
    found = mean(values)
    return int(found) if found.is_integer() else round(found, 1)


def per_turn(turns: list[Turn], value: Callable[[Turn], float]) -> float | int:
    """The mean over the turns of ``value``."""
    return average([value(t) for t in turns])


def kinds_cell(turns: list[Turn]) -> str:
    """Requests per turn by kind, ``PUT/GET/HEAD/LIST/DELETE`` (means where the turns differ)."""
    return "/".join(str(average([t.kinds[kind] for t in turns])) for kind in KINDS)


def flat(values: list[float | int]) -> list[bool | None]:
    """Whether each length's figure is within 1 of the first length's."""
    return [abs(v - values[0]) <= 1 for v in values]


def tables(cfg: Config, harness: Harness, lengths: list[Length], summary: dict[str, Any]) -> list[Table]:
    columns = [f"{found.events:,} ev" for found in lengths]
    notes = [
        f"evstore over MemoryStore, {cfg.rtt * 1000:.0f} ms per request; {harness.native} on local disk, no delay (local I/O)",
        f"{cfg.turns} turns measured per length; session length = the evstore session's events before them",
        "requests exclude the amortized compaction requests (segment PUTs, DELETEs retiring segments), shown apart",
    ]
    warm = Table(f"{harness.title} -- vs {harness.native}", columns, notes)
    totals = [per_turn(f.turns, lambda t: t.requests) for f in lengths]
    warm.row("requests per turn", totals, "flat +-1", flat(totals))
    warm.row("  by kind P/G/H/L/D", [kinds_cell(f.turns) for f in lengths])
    warm.row(
        "  compaction P/D (amortized)",
        ["/".join(str(sum(t.compaction.get(k, 0) for t in f.turns)) for k in ("PUT", "DELETE")) for f in lengths],
    )
    rounds = [per_turn(f.turns, lambda t: t.round_trips) for f in lengths]
    warm.row("dependent round trips per turn", rounds)
    warm.row("ms per turn (evstore, 15 ms/req)", [mean(t.seconds for t in f.turns) * 1000 for f in lengths])
    warm.row(f"ms per turn ({harness.native})", [mean(f.native_seconds) * 1000 for f in lengths])

    cold_notes = [
        "a new adapter object over a new Store over a copy of the bucket, its construction included;",
        f"{harness.native}: a new one over a copy of its files",
    ]
    cold = Table(f"{harness.title} -- first turn of a fresh process", columns, cold_notes)
    fresh = [f.fresh for f in lengths if f.fresh is not None]
    cold_totals = [t.requests for t in fresh]
    cold.row("requests", cold_totals, "flat +-1", flat([float(v) for v in cold_totals]))
    cold.row("  by kind P/G/H/L/D", [kinds_cell([t]) for t in fresh])
    cold.row("  compaction P/D (amortized)", [f"{t.compaction.get('PUT', 0)}/{t.compaction.get('DELETE', 0)}" for t in fresh])
    cold.row("dependent round trips", [t.round_trips for t in fresh])
    cold.row("ms (evstore, 15 ms/req)", [t.seconds * 1000 for t in fresh])
    cold.row(f"ms ({harness.native})", [f.native_fresh_seconds * 1000 for f in lengths])
    replays = [sum(f.replay.values()) for f in lengths]
    cold.row("reference: store.replay of it all", replays)
    cold.row("  by kind P/G/H/L/D", ["/".join(str(f.replay[k]) for k in KINDS) for f in lengths])
    beyond = [total - replay for total, replay in zip(cold_totals, replays, strict=True)]
    cold.row("requests beyond that replay", beyond, "flat +-1", flat([float(v) for v in beyond]))
    compaction = summary["compaction"]
    cold.notes.append(
        f"the whole run: {summary['turns']:,} turns, {summary['events']:,} events; compaction requests"
        f" {compaction.get('PUT', 0)} PUT + {compaction.get('DELETE', 0)} DELETE ="
        f" {summary['compaction_per_turn']:.2f} per turn (amortized)"
    )
    return [warm, cold]


def section_adapter(cfg: Config, number: int, name: str, report: Report) -> list[str]:
    """One adapter's two tables (its long-lived turns, a fresh process's first turn); the names failed."""
    directory = Path(tempfile.mkdtemp(prefix=f"evstore-frameworks-{name}-"))
    try:
        harness = HARNESSES[name]()
        lengths, summary = run_framework(cfg, harness, directory)
        for table in tables(cfg, harness, lengths, summary):
            table.title = f"{number}. {table.title}"
            report.add(name, table)
        report.note(name, "summary", summary)
        report.note(name, "turns", [asdict(found) for found in lengths])
        return []
    except Exception:
        print(f"\n## {number}. {name}: FAILED\n{traceback.format_exc()}", flush=True)
        return [name]
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def section_restart(cfg: Config, number: int, adapters: list[str], report: Report) -> list[str]:
    """Every adapter again, its process restarted at each length (the first time at the first):
    the restarted objects' turns, their first turn, and a whole replay, one table."""
    columns = [f"{n:,}" for n in cfg.lengths]
    table = Table(
        f"{number}. after a process restart at each length (the first at {cfg.lengths[0]} events): requests",
        columns,
        [
            "as sections 1-5, but each fresh process goes on over the bucket itself as the long-lived one:",
            "a long-lived turn past the first length is the restarted process's, over the segments it wrote",
            f"columns: at least that many events; {cfg.rtt * 1000:.0f} ms per request; compaction requests left out",
        ],
    )
    failed: list[str] = []
    turns: dict[str, Any] = {}
    for name in adapters:
        directory = Path(tempfile.mkdtemp(prefix=f"evstore-frameworks-restart-{name}-"))
        try:
            lengths, _ = run_framework(cfg, HARNESSES[name](), directory, restart=True)
        except Exception:
            print(f"\n## {number}. restart, {name}: FAILED\n{traceback.format_exc()}", flush=True)
            failed.append(f"restart:{name}")
            continue
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        totals = [per_turn(f.turns, lambda t: t.requests) for f in lengths]
        table.row(f"{name}: long-lived turn", totals, "flat +-1", flat(totals))
        table.row(f"{name}: first turn of the process", [f.fresh.requests if f.fresh else 0 for f in lengths])
        table.row(f"{name}: store.replay of it all", [sum(f.replay.values()) for f in lengths])
        turns[name] = [asdict(found) for found in lengths]
    if table.rows:
        report.add("restart", table)
    report.note("restart", "turns", turns)
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 10 and 300 events, 2 turns each (under a minute)")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, metavar="SECTION", help=", ".join(SECTIONS))
    parser.add_argument("--json", type=Path, metavar="FILE", help="write every figure to FILE")
    args = parser.parse_args(argv)
    offline()
    cfg = QUICK if args.quick else FULL
    chosen = [s for s in SECTIONS if args.only is None or s in args.only]
    report = Report()
    failed: list[str] = []
    print(f"evstore framework adapters per turn ({'quick' if cfg.quick else 'full'}): {', '.join(chosen)}")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start", flush=True)
    started = time.perf_counter()
    adapters = [name for name in chosen if name in ADAPTERS] or ADAPTERS  # restart alone: every adapter's
    for number, name in enumerate(chosen, 1):
        began = time.perf_counter()
        if name == "restart":
            failed += section_restart(cfg, number, adapters, report)
        else:
            failed += section_adapter(cfg, number, name, report)
        seconds = time.perf_counter() - began
        report.note(name, "seconds", seconds)
        print(f"   ({name}: {seconds:.1f} s)", flush=True)
    total = time.perf_counter() - started
    print(f"\ndone in {total:.1f} s; load average {os.getloadavg()[0]:.1f} at the end")
    if failed:
        print(f"failed: {', '.join(failed)}")
    if args.json:
        figures = {"config": asdict(cfg), "seconds": total, "failed": failed, "sections": report.sections}
        args.json.write_text(json.dumps(figures, indent=2, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
