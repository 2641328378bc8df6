"""One OpenAI Agents SDK run on an evstore session, with a scripted model (no network).

Imported by tests/test_openai_agents.py for its in-process runs, and run as a
script to resume a session in a new process::

    python tests/scripts/openai_run.py --endpoint URL --bucket B --session S PROMPT

prints one JSON object: the run's final output and the inputs the model got.
Connections anywhere but 127.0.0.1 raise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
from collections.abc import AsyncIterator
from typing import Any

os.environ.setdefault("OPENAI_API_KEY", "sk-dummy-no-network")
os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

from agents import Agent, Model, ModelResponse, Runner, Usage, function_tool, set_tracing_disabled
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

set_tracing_disabled(True)


class ScriptedModel(Model):
    """Asks for ``get_weather`` for a new user message; answers with the tool's output after it.

    ``inputs`` keeps a copy of every input the runner sent.
    """

    def __init__(self, label: str = "") -> None:
        self.label = label
        self.calls = 0
        self.inputs: list[Any] = []

    def _output(self, input: Any) -> list[Any]:
        self.calls += 1
        self.inputs.append(json.loads(json.dumps(input)))
        last = input[-1] if isinstance(input, list) and input else None
        if isinstance(last, dict) and last.get("type") == "function_call_output":
            text = ResponseOutputText(type="output_text", text=f"{self.label}The tool said: {last['output']}", annotations=[])
            return [
                ResponseOutputMessage(
                    id=f"msg_{self.label}{self.calls}", type="message", role="assistant", status="completed", content=[text]
                )
            ]
        return [
            ResponseFunctionToolCall(
                id=f"fc_{self.label}{self.calls}",
                call_id=f"call_{self.label}{self.calls}",
                type="function_call",
                name="get_weather",
                arguments=json.dumps({"city": f"City{self.label}{self.calls}"}),
            )
        ]

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:  # type: ignore[override]
        usage = Usage(requests=1, input_tokens=1, output_tokens=1, total_tokens=2)
        return ModelResponse(output=self._output(input), usage=usage, response_id=None)

    async def stream_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:  # type: ignore[override]
        response = Response(
            id="resp_scripted",
            created_at=0,
            model="scripted",
            object="response",
            output=self._output(input),
            tool_choice="auto",
            tools=[],
            parallel_tool_calls=False,
            status="completed",
        )
        yield ResponseCompletedEvent(type="response.completed", response=response, sequence_number=0)


@function_tool
def get_weather(city: str) -> str:
    """Return the weather for a city."""
    return f"sunny in {city}"


def make_agent(model: ScriptedModel) -> Agent[Any]:
    return Agent(name="assistant", instructions="Be brief.", model=model, tools=[get_weather])


def loopback_only() -> None:
    """Make every connection to anything but 127.0.0.1 fail (proves the run is offline)."""
    real_connect = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] != "127.0.0.1":
            raise RuntimeError(f"network access attempted: {address!r}")
        real_connect(self, address)

    socket.socket.connect = connect  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--bucket", required=True)
    parser.add_argument("--session", required=True)
    parser.add_argument("--label", default="")
    parser.add_argument("prompt")
    args = parser.parse_args()
    loopback_only()

    from evstore import Store
    from evstore._backends._s3 import S3Store
    from evstore.integrations.openai_agents import EvstoreSession

    store = Store(S3Store(args.bucket, endpoint_url=args.endpoint), root="root")
    model = ScriptedModel(args.label)
    session = EvstoreSession(args.session, store, create=False)
    result = asyncio.run(Runner.run(make_agent(model), args.prompt, session=session))
    json.dump({"final_output": result.final_output, "model_inputs": model.inputs}, sys.stdout)
    store.close()


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    main()
