"""A LangGraph ``StateGraph`` with a scripted model (no network) on an ``EvstoreSaver``.

``model`` drafts an answer to ``request``; the ``review`` subgraph stops at
``interrupt`` for a human decision (its checkpoints live in a child
namespace); ``finish`` writes the final answer. Imported by
tests/test_langgraph.py, and run as a script to resume a thread in a new
process::

    python tests/scripts/langgraph_graph.py STORE_URL THREAD_ID resume DECISION
    python tests/scripts/langgraph_graph.py STORE_URL THREAD_ID start REQUEST

``resume`` resumes the interrupted thread with ``Command(resume=DECISION)``;
``start`` runs the graph on REQUEST up to the interrupt. Either prints the
state it began from and the result as one JSON object. An S3 store's endpoint
comes from ``AWS_ENDPOINT_URL``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, interrupt


class State(TypedDict, total=False):
    request: str
    draft: str
    decision: str
    messages: Annotated[list[AnyMessage], add_messages]


def scripted_model(state: State) -> dict[str, Any]:
    """The model: a fixed reply built from the request, as one AIMessage."""
    draft = f"draft: {state['request']}"
    return {"draft": draft, "messages": [HumanMessage(state["request"]), AIMessage(draft)]}


def ask(state: State) -> dict[str, Any]:
    decision = interrupt({"question": "approve this draft?", "draft": state["draft"]})
    return {"decision": str(decision)}


def finish(state: State) -> dict[str, Any]:
    return {"messages": [AIMessage(f"final ({state['decision']}): {state['draft']}")]}


def build(checkpointer: BaseCheckpointSaver[Any]) -> CompiledStateGraph[Any, Any, Any, Any]:
    review = StateGraph(State)
    review.add_node("ask", ask)
    review.add_edge(START, "ask")
    review.add_edge("ask", END)
    builder = StateGraph(State)
    builder.add_node("model", scripted_model)
    builder.add_node("review", review.compile())
    builder.add_node("finish", finish)
    builder.add_edge(START, "model")
    builder.add_edge("model", "review")
    builder.add_edge("review", "finish")
    builder.add_edge("finish", END)
    return builder.compile(checkpointer=checkpointer)


def summary(values: dict[str, Any]) -> dict[str, Any]:
    return {
        "request": values.get("request"),
        "decision": values.get("decision"),
        "messages": [[type(m).__name__, m.content] for m in values.get("messages", [])],
    }


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    import evstore
    from evstore.integrations.langgraph import EvstoreSaver

    url, thread_id, action, value = sys.argv[1:5]
    graph = build(EvstoreSaver(evstore.open_store(url)))
    config: Any = {"configurable": {"thread_id": thread_id}}
    before = graph.get_state(config)
    if action == "resume":
        result = graph.invoke(Command(resume=value), config)
    elif action == "start":
        result = graph.invoke({"request": value}, config)
    else:
        raise SystemExit(f"unknown action {action!r}")
    print(json.dumps({"next_before": list(before.next), "result": summary(result)}))


if __name__ == "__main__":
    main()
