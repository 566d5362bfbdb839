"""A real LangGraph graph for the page's browser tests: an agent node driven by a scripted chat
model (LangChain's ``GenericFakeChatModel``, no key) and LangGraph's own ``ToolNode``, routed by
``tools_condition``, checkpointed by :class:`~qvc.integrations.langgraph.QvcSaver`.

Usage (another process adding a turn while the page is open)::

    python tests/server/page_graph.py REPO THREAD CITY
"""

from __future__ import annotations

import sys
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from qvc.integrations.langgraph import QvcSaver


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    if city == "Atlantis":
        raise ValueError("no weather station in Atlantis")
    return f"{city}: 3°C, light snow"


def script(city: str, turn: int) -> list:
    """The model's replies for one question about ``city``: a tool call, then an answer."""
    return [AIMessage(content="", tool_calls=[{"name": "weather", "args": {"city": city}, "id": f"wx-{turn}"}]),
            AIMessage(content=f"Snow is likely in {city}: 3°C.")]


def ask(saver: QvcSaver, thread: str, city: str, turn: int) -> dict[str, Any]:
    """One turn of the graph on ``thread``: the user asks about ``city``; returns the final state."""
    model = GenericFakeChatModel(messages=iter(script(city, turn)))

    def agent(state: MessagesState) -> dict:
        return {"messages": [model.invoke(state["messages"])]}

    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode([weather]))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    graph = g.compile(checkpointer=saver)
    question = HumanMessage(f"What's the weather in {city}?", id=f"ask-{turn}")
    return graph.invoke({"messages": [question]}, {"configurable": {"thread_id": thread}})


if __name__ == "__main__":
    repo, thread, city = sys.argv[1:4]
    with QvcSaver(repo) as saver:
        ask(saver, thread, city, 2)
