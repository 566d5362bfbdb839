"""A LangGraph agent on QvcSaver: a tool-calling graph checkpointed, forked, then read with ``qvc``. No API key needed.

The graph is LangGraph's own: a ``StateGraph`` over ``MessagesState`` whose ``agent`` node calls
a chat model and whose ``tools`` node is LangGraph's prebuilt ``ToolNode``, routed by
``tools_condition``, compiled with one changed line, ``checkpointer=QvcSaver(repo)``. The model
is LangChain's ``GenericFakeChatModel`` replaying a script (a batch of tool calls, then an answer),
so every run makes the same history (only commit SHAs and checkpoint ids differ).

1. Thread ``cities`` answers "Which city is larger, Paris or Lagos?": the model asks for both
   populations in one tool batch, ``ToolNode`` runs them, the model answers. LangGraph writes a
   checkpoint after every super-step; each is one commit on branch ``cities``.
2. A fork, as LangGraph forks: ``update_state`` at the checkpoint where the model asked for the
   tools, with Tokyo in place of Lagos, then ``invoke(None, ...)`` from there. The tools run again
   on the new call and the model answers anew. The thread's head is the fork; the line it left
   stays in the repository as a superseded line, every checkpoint of it still listed.
3. ``qvc log``, ``qvc show`` and ``qvc diff`` read the thread as a conversation (LangChain
   messages with their tool calls), and ``qvc log --all --graph`` draws the fork.

Usage::

    python samples/langgraph_agent.py [--repo PATH]

Needs ``pip install -e ".[langgraph]" langgraph``. Exits 0 when every step behaved as
described, 1 otherwise.
"""

from __future__ import annotations

import argparse
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from sample_repo import check, qvc, sample_repository

from qvc.integrations.langgraph import QvcSaver

THREAD = "cities"
POPULATIONS = {"Paris": "2.1 million", "Lagos": "15.4 million", "Tokyo": "14.0 million"}


@tool
def population(city: str) -> str:
    """The population of a city."""
    return f"{city}: {POPULATIONS.get(city, 'unknown')}"


def asks(*cities: str) -> AIMessage:
    """The model's tool batch: one ``population`` call per city."""
    return AIMessage("", id="ai-ask", tool_calls=[
        {"name": "population", "args": {"city": city}, "id": f"call-{city.lower()}"} for city in cities])


def graph(saver: QvcSaver, replies: list[AIMessage]) -> Any:
    """The agent graph on ``saver``, its model replaying ``replies`` in order."""
    model = GenericFakeChatModel(messages=iter(replies))

    def agent(state: MessagesState) -> dict:
        return {"messages": [model.invoke(state["messages"])]}

    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode([population]))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    return g.compile(checkpointer=saver)


def demo(repo: str) -> None:
    config = {"configurable": {"thread_id": THREAD}}
    with QvcSaver(repo) as saver:
        print(f"1. thread {THREAD!r} in {repo}: a question, one tool batch, an answer")
        app = graph(saver, [asks("Paris", "Lagos"), AIMessage("Lagos is larger: 15.4 million to 2.1 million.",
                                                              id="ai-answer")])
        final = app.invoke({"messages": [HumanMessage("Which city is larger, Paris or Lagos?", id="q-1")]}, config)
        tools = [m for m in final["messages"] if isinstance(m, ToolMessage)]
        check([m.content for m in tools] == ["Paris: 2.1 million", "Lagos: 15.4 million"],
              "ToolNode ran both calls of the batch")
        check(final["messages"][-1].content.startswith("Lagos is larger"), "the model answered from the results")
        first_line = [s.config["configurable"]["checkpoint_id"] for s in app.get_state_history(config)]
        check(len(first_line) == 5, "five checkpoints, one per super-step: the input, then after START, "
                                    "the tool calls, the results and the answer")

        print("2. fork where the model asked for the tools: Tokyo in place of Lagos")
        asked = next(s for s in app.get_state_history(config) if s.next == ("tools",))
        app = graph(saver, [AIMessage("Tokyo is larger: 14.0 million to 2.1 million.", id="ai-answer")])
        forked = app.update_state(asked.config, {"messages": [asks("Paris", "Tokyo")]}, as_node="agent")
        final = app.invoke(None, forked)
        check([m.content for m in final["messages"] if isinstance(m, ToolMessage)]
              == ["Paris: 2.1 million", "Tokyo: 14.0 million"], "the tools ran again on the edited call")
        check(final["messages"][-1].content.startswith("Tokyo is larger"), "the fork has its own answer")
        every = [t.config["configurable"]["checkpoint_id"] for t in saver.list(config)]
        check(set(first_line) <= set(every) and len(every) == len(first_line) + 3,
              "the line the fork left is kept: its five checkpoints and the fork's three are listed")

    print("3. what qvc shows")
    qvc(repo, "log", "--oneline", THREAD)
    qvc(repo, "log", "--all", "--graph")
    qvc(repo, "show", THREAD)
    qvc(repo, "diff", f"{THREAD}~3", THREAD)  # the fork against the checkpoint it was forked from


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", help="repository to create (replaced only if a sample created it; "
                        "default: a temporary directory, removed at the end)")
    args = parser.parse_args()
    with sample_repository(args.repo, "qvc-langgraph-") as repo:
        demo(repo)


if __name__ == "__main__":
    main()
