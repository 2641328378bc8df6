"""A scripted Strands model (no network) for the adapter tests.

It asks for the ``get_weather`` tool, then answers with the tool's result; a
user message containing ``SECRET`` triggers a guardrail redaction. Every
request's messages are recorded in ``seen`` so a test can check what a
resumed agent sent to its model.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncGenerator
from typing import Any

from strands import tool
from strands.models import Model


class ScriptedModel(Model):
    def __init__(self, label: str = "") -> None:
        self.config: dict[str, Any] = {"model_id": "scripted"}
        self.label = label
        self.calls = 0
        self.seen: list[list[dict[str, Any]]] = []

    def update_config(self, **model_config: Any) -> None:
        self.config.update(model_config)

    def get_config(self) -> dict[str, Any]:
        return self.config

    async def structured_output(self, output_model: Any, prompt: Any, system_prompt: Any = None, **kwargs: Any) -> Any:  # type: ignore[override]
        raise NotImplementedError
        yield {}  # pragma: no cover

    async def stream(  # type: ignore[override]
        self, messages: Any, tool_specs: Any = None, system_prompt: Any = None, **kwargs: Any
    ) -> AsyncGenerator[Any, None]:
        self.calls += 1
        self.seen.append(copy.deepcopy(list(messages)))
        last = messages[-1]
        results = [c["toolResult"] for c in last["content"] if "toolResult" in c]
        yield {"messageStart": {"role": "assistant"}}
        if results:
            text = f"{self.label}The tool said: " + results[0]["content"][0]["text"]
            yield {"contentBlockStart": {"start": {}}}
            yield {"contentBlockDelta": {"delta": {"text": text}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "end_turn"}}
        elif "SECRET" in " ".join(c.get("text", "") for c in last["content"]):
            yield {"redactContent": {"redactUserContentMessage": "[user input redacted]"}}
            yield {"contentBlockDelta": {"delta": {"text": "I can't help with that."}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "guardrail_intervened"}}
        else:
            start = {"toolUse": {"toolUseId": f"tooluse_{self.label}{self.calls}", "name": "get_weather"}}
            yield {"contentBlockStart": {"start": start}}
            yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps({"city": f"City{self.label}{self.calls}"})}}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "tool_use"}}
        yield {"metadata": {"usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}, "metrics": {"latencyMs": 0}}}


@tool
def get_weather(city: str) -> str:
    """Return the weather for a city.

    Args:
        city: city name
    """
    return f"sunny in {city}"
