"""A repository written by LangGraph through QvcSaver reads as ordinary qvc threads on the CLI."""

from __future__ import annotations

import json
import operator
from typing import Annotated, TypedDict

import pytest
from helpers import run_git

pytest.importorskip("langgraph.graph")

from langgraph.graph import END, START, StateGraph  # noqa: E402

from qvc.cli import main  # noqa: E402
from qvc.integrations.langgraph import QvcSaver  # noqa: E402


class State(TypedDict):
    items: Annotated[list, operator.add]
    n: int


def _graph():
    g = StateGraph(State)
    g.add_node("a", lambda s: {"items": [f"a{s['n']}"], "n": s["n"] + 1})
    g.add_node("b", lambda s: {"items": ["b"], "n": s["n"] * 2})
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", END)
    return g


def qvc(capsys, *args: str) -> str:
    code = main(["--no-pager", "--color=never", *args])
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out


def test_the_json_forms_show_langchain_messages_as_plain_data(tmp_path, capsys):
    """``--json`` (and so ``qvc serve``) shows LangChain messages in the shared conversation shape,
    the way people read them; so does the text form (roles and contents, no reprs)."""
    from langgraph.graph import MessagesState

    g = StateGraph(MessagesState)
    g.add_node("bot", lambda s: {"messages": [("ai", "hello")]})
    g.add_edge(START, "bot")
    path = tmp_path / "m.qvc"
    with QvcSaver(path) as saver:
        g.compile(checkpointer=saver).invoke({"messages": [("user", "hi")]}, {"configurable": {"thread_id": "m"}})
    repo = ["--repo", str(path)]

    shown = json.loads(qvc(capsys, *repo, "show", "--json", "m"))
    assert [(m["role"], m["content"]) for m in shown["state"]["messages"]] == [("user", "hi"), ("assistant", "hello")]
    diff = json.loads(qvc(capsys, *repo, "diff", "--json", "m"))
    added = next(d for d in diff if d["field"] == "messages")["changes"]
    assert [c["new"]["content"] for c in added if c["op"] == "add"] == ["hello"]
    log = json.loads(qvc(capsys, *repo, "log", "--json", "-p", "m"))
    assert any(d["field"] == "messages" for d in log[0]["diff"])
    text = qvc(capsys, *repo, "show", "m")
    assert 'user: "hi"' in text and "HumanMessage(" not in text


def test_log_show_diff_on_a_langgraph_repository(tmp_path, capsys):
    path = tmp_path / "g.qvc"
    with QvcSaver(path) as saver:
        app = _graph().compile(checkpointer=saver)
        cfg = {"configurable": {"thread_id": "chat-1"}}
        app.invoke({"items": [], "n": 1}, cfg)
        history = list(app.get_state_history(cfg))
        app.update_state(history[1].config, {"n": 100})  # a fork inside the thread
    repo = ["--repo", str(path)]

    log = json.loads(qvc(capsys, *repo, "log", "--json", "chat-1"))
    assert [e["source"] for e in log][:2] == ["update", "loop"]
    assert all(e["thread"] == "chat-1" for e in log)
    assert log[0]["changed"] == ["n"]

    shown = json.loads(qvc(capsys, *repo, "show", "--json", "chat-1"))
    assert shown["state"]["n"] == 100 and shown["state"]["items"] == ["a1"]  # decoded, not serde bytes
    text = qvc(capsys, *repo, "show", "chat-1")
    assert "items (v" in text and '["a1"]' in text

    diff = json.loads(qvc(capsys, *repo, "diff", "--json", "chat-1"))
    assert [d["field"] for d in diff] == ["n"]
    assert diff[0]["changes"][0]["new"] == 100

    graph = qvc(capsys, *repo, "log", "--graph", "--all")
    assert "(chat-1)" in graph
    assert "ok" in qvc(capsys, *repo, "fsck")
    run_git(path, "fsck", "--strict")
