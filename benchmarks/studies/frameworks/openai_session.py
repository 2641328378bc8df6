"""OpenAI Agents' section: EvstoreSession under Runner.run, beside SQLiteSession."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from benchmarks.studies.frameworks.base import REPLY, SID, Harness, prompt
from evstore import Store


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
