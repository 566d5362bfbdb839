"""Deterministic LangGraph graphs for tests/test_langgraph_e2e.py, and a subprocess entry point.

Usage::

    python tests/workers/langgraph_worker.py run PATH SCENARIO DURABILITY THREAD TURNS
    python tests/workers/langgraph_worker.py history PATH SCENARIO THREAD

``run`` opens ``QvcSaver(PATH)``, runs SCENARIO (``chat`` or ``interrupt``) for TURNS turns on
THREAD with LangGraph's ``durability`` option, prints one JSON line (the final state) and
exits without closing the saver explicitly (the process's exit closes it). ``history`` prints
the thread's ``get_state_history`` summary (:func:`summarize`) as one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated, Any, Optional

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt
from pydantic import BaseModel
from typing_extensions import TypedDict


class Note(BaseModel):
    """A pydantic value in the state: it must round-trip through the saver's serde."""

    text: str
    n: int
    tags: list[str] = []


class State(TypedDict, total=False):
    messages: Annotated[list, add_messages]
    count: int
    note: Optional[Note]


def _user(state: State) -> dict:
    return {"count": state.get("count", 0) + 1}


def _bot(state: State) -> dict:
    n = len(state["messages"])
    return {"messages": [AIMessage(content=f"reply to {n} messages", id=f"ai-{n}")],
            "note": Note(text=f"after {n}", n=n, tags=["bot", str(n % 3)])}


def _ask(state: State) -> dict:
    answer = interrupt({"question": f"approve turn {state.get('count', 0)}?"})
    n = len(state["messages"])
    return {"messages": [HumanMessage(content=f"answer: {answer}", id=f"answer-{n}")]}


def build(scenario: str, checkpointer: Any) -> Any:
    """``chat``: user -> bot; ``interrupt``: user -> ask (interrupts) -> bot."""
    g = StateGraph(State)
    g.add_node("user", _user)
    g.add_node("bot", _bot)
    g.add_edge(START, "user")
    if scenario == "interrupt":
        g.add_node("ask", _ask)
        g.add_edge("user", "ask")
        g.add_edge("ask", "bot")
    else:
        g.add_edge("user", "bot")
    g.add_edge("bot", END)
    return g.compile(checkpointer=checkpointer)


def human(i: int) -> dict:
    return {"messages": [HumanMessage(content=f"question {i} " + "lorem ipsum " * 5, id=f"human-{i}")]}


def run_turns(graph: Any, thread: str, turns: int, durability: str, scenario: str = "chat") -> dict:
    config = {"configurable": {"thread_id": thread}}
    for i in range(turns):
        graph.invoke(human(i), config, durability=durability)
        if scenario == "interrupt":
            graph.invoke(Command(resume=f"yes {i}"), config, durability=durability)
    return dump_values(graph.get_state(config).values)


def dump_value(value: Any) -> Any:
    if isinstance(value, BaseMessage):
        return [value.type, value.id, value.content]
    if isinstance(value, BaseModel):
        return {"model": type(value).__name__, **value.model_dump()}
    if isinstance(value, list):
        return [dump_value(v) for v in value]
    return value


def dump_values(values: dict) -> dict:
    return {k: dump_value(v) for k, v in sorted(values.items())}


def summarize(graph: Any, config: dict) -> list:
    """``get_state_history`` as comparable data: ids differ between savers, structure must not."""
    out = []
    for snap in graph.get_state_history(config):
        out.append({
            "values": dump_values(snap.values),
            "next": list(snap.next),
            "source": snap.metadata.get("source"),
            "step": snap.metadata.get("step"),
            "has_parent": snap.parent_config is not None,
            "interrupts": [i.value for i in snap.interrupts],
        })
    return out


def main(argv: list[str]) -> int:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from qvc.integrations.langgraph import QvcSaver

    if argv[0] == "run":
        path, scenario, durability, thread, turns = argv[1:6]
        saver = QvcSaver(path)  # closed by the interpreter's exit (qvc flushes at exit)
        final = run_turns(build(scenario, saver), thread, int(turns), durability, scenario)
        print(json.dumps(final))
        return 0
    if argv[0] == "history":
        path, scenario, thread = argv[1:4]
        with QvcSaver(path, create=False) as saver:
            print(json.dumps(summarize(build(scenario, saver), {"configurable": {"thread_id": thread}})))
        return 0
    raise SystemExit(f"unknown command {argv[0]!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
