"""Pydantic AI's section: EvstoreHistory's load and save around Agent.run_sync, beside a JSON file of the history."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from benchmarks.studies.frameworks.base import REPLY, SID, Harness, prompt
from evstore import Store


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
