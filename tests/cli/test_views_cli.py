"""Every CLI reader shows values as their users think of them (issue 25, items 1 and 2).

Repositories are made by the frameworks' real run loops, offline: a LangGraph graph with a
scripted chat model and a tool (one of which fails), a qvc run driven by the samples' scripted
agent, an agno agent with agno's scripted model. Then the real ``qvc`` as a subprocess: ``show``
(text and ``--json``), ``diff`` (text, ``--stat``, ``--json``), ``log -p`` and ``blame`` print
roles and contents, never a Python repr, raw bytes, a run's segment keys or its owner's
heartbeats; ``--raw`` shows the stored fields; lines diverging after a shared prefix diff as
messages removed and added, not as changed pairs.
"""

from __future__ import annotations

import json
import time
from typing import Any, TypedDict

import pytest
from helpers import qvc, qvc_json

from qvc import GitCheckpointStore

STORAGE = ("HumanMessage(", "AIMessage(", "ToolMessage(", "b'\\x", "$bytes", "log.0000", "heartbeat", "owner")


def clean(text: str) -> None:
    """Nothing of the storage shows through."""
    for mark in STORAGE:
        assert mark not in text, f"{mark!r} in:\n{text}"


def heads(path, *threads: str) -> list[str]:
    with GitCheckpointStore(path, readonly=True) as store:
        return [store.head(t) for t in threads]


# -- LangGraph ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def langgraph_repo(tmp_path_factory):
    """README's two invokes on thread ``t1`` with a scripted chat model calling tools (``add``
    answers, ``boom`` fails); then time travel from the first answer: a line diverging after it.
    Returns ``(path, head before the time travel, head after)``."""
    pytest.importorskip("langgraph.prebuilt")
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode

    from qvc.integrations.langgraph import QvcSaver

    class ScriptedChat(FakeMessagesListChatModel):
        """LangChain's own scripted chat model, accepting tools as a provider's model does."""

        def bind_tools(self, tools, **kwargs):
            return self

    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @tool
    def boom(x: str) -> str:
        """Always fails."""
        raise ValueError("boom failed")

    model = ScriptedChat(responses=[
        AIMessage("", tool_calls=[{"id": "call-1", "name": "add", "args": {"a": 2, "b": 3}}], id="ai-1"),
        AIMessage("2+3 is 5", id="ai-2"),
        AIMessage("", tool_calls=[{"id": "call-2", "name": "boom", "args": {"x": "y"}}], id="ai-3"),
        AIMessage("the tool failed", id="ai-4"),
        AIMessage("Paris", id="ai-5"),
    ]).bind_tools([add, boom])

    g = StateGraph(MessagesState)
    g.add_node("model", lambda state: {"messages": [model.invoke(state["messages"])]})
    g.add_node("tools", ToolNode([add, boom], handle_tool_errors=True))
    g.add_edge(START, "model")
    g.add_conditional_edges("model", lambda s: "tools" if s["messages"][-1].tool_calls else END, ["tools", END])
    g.add_edge("tools", "model")
    path = tmp_path_factory.mktemp("lg") / "agent.qvc"
    cfg = {"configurable": {"thread_id": "t1"}}
    with QvcSaver(path) as saver:
        app = g.compile(checkpointer=saver)
        app.invoke({"messages": [("user", "what is 2+3?")]}, cfg)
        app.invoke({"messages": [("user", "now explode")]}, cfg)
        before = next(iter(saver.list(cfg)))  # the head: 8 messages
        answered = next(s for s in app.get_state_history(cfg) if len(s.values["messages"]) == 4 and not s.next)
        app.invoke({"messages": [("user", "capital of France?")]}, answered.config)  # time travel
    old, new = before.config["configurable"]["checkpoint_id"], heads(path, "t1")[0]
    return path, old, new


def test_langgraph_show_prints_roles_and_contents(langgraph_repo):
    path, old, _ = langgraph_repo
    repo = ("--repo", str(path))
    text = qvc(*repo, "show", old).stdout
    clean(text)
    assert "messages (v8): 8 messages" in text
    for line in ('0 user: "what is 2+3?"', '1 assistant: → add({"a": 2, "b": 3})', '2 tool [add]: "5"',
                 '3 assistant: "2+3 is 5"', "6 tool [boom] (failed):", '7 assistant: "the tool failed"'):
        assert line in text
    shown = qvc_json(*repo, "show", old)
    messages = shown["state"]["messages"]
    clean(json.dumps(shown))
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"] * 2
    assert messages[1]["tool_calls"] == [{"id": "call-1", "name": "add", "args": {"a": 2, "b": 3}}]
    assert messages[2]["tool_call_id"] == "call-1" and messages[2]["name"] == "add" and "error" not in messages[2]
    assert messages[6]["error"] is True and "boom failed" in messages[6]["content"]
    assert [m["id"] for m in messages if m["role"] == "assistant"] == ["ai-1", "ai-2", "ai-3", "ai-4"]


def test_langgraph_diff_stat_json_and_log_p(langgraph_repo):
    path, old, _ = langgraph_repo
    repo = ("--repo", str(path))
    text = qvc(*repo, "diff", f"{old}~4", old).stdout
    clean(text)
    lines = text.splitlines()
    assert lines[lines.index("~~~ field messages (changed)") + 1] == \
        "4 messages added, 1 tool call made, 1 tool call failed"
    assert '+ messages[4] user: "now explode"' in text and "+ messages[6] tool [boom] (failed):" in text
    stat = qvc(*repo, "diff", "--stat", f"{old}~4", old).stdout
    assert "messages | 4 + · 4 messages added, 1 tool call made, 1 tool call failed" in stat  # LangGraph's own hidden
    diff = qvc_json(*repo, "diff", f"{old}~4", old)
    messages = next(d for d in diff if d["field"] == "messages")
    assert messages["summary"] == "4 messages added, 1 tool call made, 1 tool call failed"
    assert messages["counts"]["tool_calls_failed"] == 1
    assert [c["new"]["role"] for c in messages["changes"]] == ["user", "assistant", "tool", "assistant"]
    log = qvc(*repo, "log", "-p", "-n", "3", old).stdout
    clean(log)
    assert '+ messages[7] assistant: "the tool failed"' in log and "1 message added" in log
    assert [e["diff"][-1]["summary"] for e in qvc_json(*repo, "log", "-p", "-n", "2", old)] == [
        "1 message added", "1 message added, 1 tool call failed"]


def test_langgraph_blame_names_the_checkpoint_that_added_each_message(langgraph_repo):
    path, old, _ = langgraph_repo
    repo = ("--repo", str(path))
    text = qvc(*repo, "blame", "messages", old).stdout
    clean(text)
    rows = text.splitlines()
    assert len(rows) == 8 and 'messages[0] user: "what is 2+3?"' in rows[0] and "messages[7] assistant" in rows[7]
    blamed = qvc_json(*repo, "blame", "messages", old)
    steps = [b["step"] for b in blamed]
    assert steps == sorted(steps) and len(set(steps)) == 8  # each message its own checkpoint, in order
    assert [b["value"]["role"] for b in blamed][:4] == ["user", "assistant", "tool", "assistant"]


def test_langgraph_fork_after_a_shared_prefix_is_added_and_removed_messages(langgraph_repo):
    path, old, new = langgraph_repo
    repo = ("--repo", str(path))
    text = qvc(*repo, "diff", old, new).stdout
    clean(text)
    assert "2 messages added, 4 messages removed" in text
    assert "~ messages[" not in text  # no pairs of unrelated messages "changed"
    assert '+ messages[4] user: "capital of France?"' in text and '+ messages[5] assistant: "Paris"' in text
    assert '- messages[4] user: "now explode"' in text


def test_langgraph_raw_shows_the_stored_channels(langgraph_repo):
    path, old, _ = langgraph_repo
    repo = ("--repo", str(path))
    raw = qvc_json(*repo, "show", "--raw", old)
    assert raw["state"]["messages"][0] == "msgpack" and "$bytes" in json.dumps(raw["state"])
    assert "b'\\x" in qvc(*repo, "show", "--raw", old).stdout
    blamed = qvc_json(*repo, "blame", "--raw", "messages", old)
    assert "$bytes" in json.dumps(blamed)
    assert "$bytes" in json.dumps(qvc_json(*repo, "diff", "--raw", f"{old}~1", old))


# -- qvc runs -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run_repo(tmp_path_factory):
    """The samples' research agent on a qvc run (one tool call fails), and a fork of it after its
    first tool batch that asks something else."""
    from qvc.runs import Runs
    from samples.scripted_agent import QUESTION, RESEARCH_PLAN, ScriptedModel, drive, make_tools

    path = tmp_path_factory.mktemp("runs") / "r.qvc"
    plan = RESEARCH_PLAN[:1] + [[("lookup", {"city": "Atlantis"})]] + RESEARCH_PLAN[1:]
    with Runs(path) as runs:
        with runs.start(QUESTION, run_id="research", session_id="s1") as rec:
            drive(rec, ScriptedModel(plan), make_tools())
        at = runs.timeline("research")[0].message_index
        fork = runs.fork("research", at, input="and Berlin?")
        with runs.continue_run(fork.run_id) as rec:
            drive(rec, ScriptedModel([[("search", {"city": "Berlin"})]]), make_tools())
    return path, fork.run_id


def test_a_run_is_shown_as_its_conversation_without_bookkeeping(run_repo):
    path, _ = run_repo
    repo = ("--repo", str(path))
    text = qvc(*repo, "show", "run/s1/research").stdout
    clean(text)
    assert "messages: 11 messages" in text and 'status (v2): "COMPLETED"' in text
    assert '5 tool [lookup] (failed): "ValueError: no such city' in text
    for field in ("content", "error", "metrics", "session_state"):
        assert f"  {field} (v" in text
    shown = qvc_json(*repo, "show", "run/s1/research")
    clean(json.dumps(shown))
    state = shown["state"]
    assert {"messages", "status", "content", "error", "metrics", "session_state", "run"} <= set(state)
    assert not {"owner", "takeovers"} & set(state) and not shown["pending_writes"]
    first = state["messages"][1]
    assert first["role"] == "assistant" and first["tool_calls"][0] == {
        "id": "call_0", "name": "search", "args": {"city": "Paris"}}
    failed = state["messages"][5]
    assert failed["role"] == "tool" and failed["error"] is True and failed["name"] == "lookup"
    assert all(m["time"].startswith("20") for m in state["messages"])


def test_run_diffs_read_as_a_conversation(run_repo):
    path, _ = run_repo
    repo = ("--repo", str(path))
    text = qvc(*repo, "diff", "research@4", "research@8").stdout
    clean(text)
    assert "4 messages added, 2 tool calls made, 1 tool call failed" in text
    assert '+ messages[4] assistant: → lookup({"city": "Atlantis"})' in text
    assert "~ metrics.model_calls: 1 → 3" in text
    stat = qvc(*repo, "diff", "--stat", "research@4", "research@8").stdout
    clean(stat)
    assert "messages      | 4 + · 4 messages added" in stat
    diff = qvc_json(*repo, "diff", "research@4", "research@8")
    clean(json.dumps(diff))
    assert next(d for d in diff if d["field"] == "messages")["counts"] == {
        "messages_added": 4, "messages_removed": 0, "messages_changed": 0, "tool_calls_made": 2,
        "tool_calls_failed": 1}
    log = qvc(*repo, "log", "-p", "run/s1/research").stdout
    clean("\n".join(line for line in log.splitlines() if not line.startswith("Changed:")))  # log's own line
    assert "1 message added" in log and '"RUNNING" → "COMPLETED"' in log


def test_run_blame_gives_each_message_its_checkpoint(run_repo):
    path, _ = run_repo
    repo = ("--repo", str(path))
    blamed = qvc_json(*repo, "blame", "messages", "run/s1/research")
    assert len(blamed) == 11
    assert [b["step"] for b in blamed] == [0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4]
    text = qvc(*repo, "blame", "messages", "run/s1/research").stdout
    clean(text)
    assert 'messages[5] tool [lookup] (failed): "ValueError' in text
    assert qvc(*repo, "blame", "--raw", "messages", "run/s1/research", check=3).stderr.count("\n") == 1


def test_a_forked_run_diffs_as_messages_added_and_removed(run_repo):
    path, fork = run_repo
    repo = ("--repo", str(path))
    text = qvc(*repo, "diff", "run/s1/research", f"run/s1/{fork}").stdout
    clean(text)
    assert "~ messages[" not in text
    summary = text.splitlines()[text.splitlines().index("~~~ field messages (changed)") + 1]
    assert summary.startswith("4 messages added, 7 messages removed"), summary
    assert '+ messages[4] user: "and Berlin?"' in text


def test_raw_shows_a_runs_storage(run_repo):
    path, _ = run_repo
    repo = ("--repo", str(path))
    raw = qvc(*repo, "show", "--raw", "run/s1/research").stdout
    assert "log.00000000" in raw and "owner" in raw
    assert "log.00000001" in qvc(*repo, "diff", "--raw", "research@4", "research@6").stdout
    assert "log.00000004" in qvc(*repo, "log", "-p", "--raw", "-n", "1", "run/s1/research").stdout
    assert [b["path"] for b in qvc_json(*repo, "blame", "--raw", "log.00000000", "run/s1/research")] == [
        ["messages"], ["tools"]]


def test_a_live_runs_heartbeats_are_hidden(tmp_path):
    """A RUNNING run's owner lease and the heartbeats written as pending writes on its checkpoint."""
    from qvc.runs import Runs

    path = tmp_path / "r.qvc"
    runs = Runs(GitCheckpointStore(path))
    rec = runs.start("q", run_id="live", session_id="s", heartbeat_interval=0.05)
    rec.add_message({"role": "assistant", "content": "thinking"})
    rec.checkpoint()
    first = runs.get("live").owner.heartbeat_at
    deadline = time.time() + 10
    while runs.get("live").owner.heartbeat_at == first and time.time() < deadline:
        time.sleep(0.05)
    runs.store.flush()
    repo = ("--repo", str(path))
    shown = qvc_json(*repo, "show", "run/s/live")
    clean(json.dumps(shown))
    assert shown["state"]["status"] == "RUNNING" and shown["pending_writes"] == []
    raw = qvc_json(*repo, "show", "--raw", "run/s/live")
    assert raw["state"]["owner"]["heartbeat_at"] and [w["channel"] for w in raw["pending_writes"]] == ["owner"]
    rec.complete("done")
    runs.close()
    text = qvc(*repo, "diff", "run/s/live~1", "run/s/live").stdout
    clean(text)
    assert '~ status: "RUNNING" → "COMPLETED"' in text and '~ content: null → "done"' in text


# -- agno ---------------------------------------------------------------------------------------


def test_an_agno_run_reads_as_its_conversation(tmp_path):
    pytest.importorskip("agno.agent")
    from qvc.integrations.agno import QvcDb
    from tests.workers.agno_worker import SESSION, batches, make_agent

    path = tmp_path / "a.qvc"
    db = QvcDb(path)
    make_agent(db, batches(2), SESSION).run("go", run_id="arun")
    db.close()
    repo = ("--repo", str(path))
    text = qvc(*repo, "show", f"run/{SESSION}/arun").stdout
    clean(text)
    assert 'messages: 6 messages' in text and '0 user: "go"' in text and '1 assistant: → lookup({"n": 1})' in text
    shown = qvc_json(*repo, "show", f"run/{SESSION}/arun")["state"]
    clean(json.dumps(shown))
    assert [m["role"] for m in shown["messages"]] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert shown["messages"][1]["tool_calls"] == [{"id": "call_1_0", "name": "lookup", "args": {"n": 1}}]
    assert shown["messages"][2]["tool_call_id"] == "call_1_0" and shown["messages"][2]["name"] == "lookup"
    assert shown["status"] == "COMPLETED" and shown["content"] == "final answer"
    assert not any(k.startswith("agno_") for m in shown["messages"] for k in m)
    diff = qvc(*repo, "diff", "arun@3", "arun@6").stdout
    clean(diff)
    assert "3 messages added, 1 tool call made" in diff and '+ messages[5] assistant: "final answer"' in diff
    blamed = qvc_json(*repo, "blame", "messages", f"run/{SESSION}/arun")
    assert [b["step"] for b in blamed] == [0, 0, 0, 1, 1, 2]


def test_langgraph_objects_other_than_messages_are_plain_json(tmp_path):
    """Other channel values read as LangGraph's serializer writes them as JSON: a LangChain
    document's fields, a UUID's and a decimal's text, an enum's value, a datetime in tagged JSON."""
    pytest.importorskip("langgraph.graph")
    import datetime as dt
    import enum
    import uuid
    from decimal import Decimal

    from langchain_core.documents import Document
    from langgraph.graph import END, START, StateGraph

    from qvc.integrations.langgraph import QvcSaver

    class Mode(enum.Enum):
        FAST = "fast"

    class State(TypedDict, total=False):
        doc: Any
        ident: Any
        price: Any
        mode: Any
        when: Any

    g = StateGraph(State)
    g.add_node("n", lambda s: {"doc": Document(page_content="hello", metadata={"src": "a"}),
                               "ident": uuid.UUID(int=7), "price": Decimal("1.50"), "mode": Mode.FAST,
                               "when": dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.timezone.utc)})
    g.add_edge(START, "n")
    g.add_edge("n", END)
    path = tmp_path / "o.qvc"
    with QvcSaver(path) as saver:
        g.compile(checkpointer=saver).invoke({}, {"configurable": {"thread_id": "o"}})
    shown = qvc_json("--repo", str(path), "show", "o")["state"]
    clean(json.dumps(shown))
    assert shown["doc"]["page_content"] == "hello" and shown["doc"]["metadata"] == {"src": "a"}
    assert shown["ident"] == str(uuid.UUID(int=7)) and shown["price"] == "1.50"
    assert shown["when"] == {"$datetime": "2026-12-02T12:00:00+00:00"}
    assert shown["mode"] == "fast"
    text = qvc("--repo", str(path), "show", "o").stdout
    assert "Document(" not in text and "UUID(" not in text and "Decimal(" not in text
