"""LangGraph's section: EvstoreSaver under a compiled graph's invoke, beside SqliteSaver."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from benchmarks.studies.frameworks.base import REPLY, SID, Harness, prompt
from evstore import Store


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
