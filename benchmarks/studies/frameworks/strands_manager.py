"""Strands' section: the session_manager under an Agent call, beside FileSessionManager."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.studies.frameworks.base import REPLY, SID, Harness, prompt
from evstore import Store


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
