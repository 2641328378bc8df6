"""Google ADK's section: EvstoreSessionService under a Runner's run_async, beside SqliteSessionService."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from benchmarks.studies.frameworks.base import APP, REPLY, SID, USER, Harness, prompt
from evstore import MemoryStore, Store


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
