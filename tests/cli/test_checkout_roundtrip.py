"""`qvc checkout --to DIR` / `qvc commit DIR` round trips of LangGraph checkpoints, and one
numbering of a run's checkpoints in `log`, `timeline` and `show`.

A real LangGraph graph (a scripted chat model that calls a real tool through LangGraph's
``ToolNode``) writes through QvcSaver; the CLI runs as a subprocess; QvcSaver and
``graph.get_state`` read what ``qvc commit`` stored.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Annotated, TypedDict

import pytest
from helpers import child_env, fsck, put, qvc, qvc_json

pytest.importorskip("langgraph.graph")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.graph import END, START, MessagesState, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402
from langgraph.prebuilt import ToolNode, tools_condition  # noqa: E402

from qvc import CheckpointConfig, GitCheckpointStore  # noqa: E402
from qvc.integrations.langgraph import QvcSaver  # noqa: E402
from qvc.runs import Message, Runs, ToolCall  # noqa: E402

CONFIG = {"configurable": {"thread_id": "t1"}}


class LongState(TypedDict):
    messages: Annotated[list, add_messages]
    tags: set


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _graph(replies: list[AIMessage]):
    """An agent: a scripted chat model (its replies in order) and LangGraph's ToolNode running ``add``."""
    model = GenericFakeChatModel(messages=iter(replies))
    g = StateGraph(MessagesState)
    g.add_node("agent", lambda s: {"messages": [model.invoke(s["messages"])]})
    g.add_node("tools", ToolNode([add]))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    g.add_edge("agent", END)
    return g


def _replies() -> list[AIMessage]:
    return [AIMessage(content="", id="ai-1", tool_calls=[{"id": "call-1", "name": "add", "args": {"a": 2, "b": 3}}]),
            AIMessage(content="2 + 3 is 5.", id="ai-2")]


@pytest.fixture
def agent_repo(tmp_path) -> Path:
    """A repository a LangGraph agent wrote: thread t1, one tool call and a final answer."""
    path = tmp_path / "agent.qvc"
    with QvcSaver(path) as saver:
        graph = _graph(_replies()).compile(checkpointer=saver)
        graph.invoke({"messages": [SystemMessage("You add.", id="sys-1"), HumanMessage("What is 2 + 3?", id="h-1")]},
                     CONFIG)
    qvc("--repo", str(path), "checkout", "t1")
    return path


def _state(path: Path):
    """``graph.get_state`` of t1 through a fresh QvcSaver, and the raw tuple."""
    with QvcSaver(path) as saver:
        return _graph([]).compile(checkpointer=saver).get_state(CONFIG), saver.get_tuple(CONFIG)


def test_checkout_writes_editable_json_and_commit_reads_back_langchain_messages(agent_repo, tmp_path):
    before, before_tuple = _state(agent_repo)
    work = tmp_path / "work"
    out = qvc("--repo", str(agent_repo), "checkout", "t1", "--to", str(work))
    assert out.stderr == ""  # every channel had an exact JSON form: nothing kept in its stored encoding

    text = (work / "messages.json").read_text()
    assert "$bytes" not in text and "msgpack" not in text
    assert '"id": ["langchain", "schema", "messages", "AIMessage"]' in text  # short lists on one line
    messages = json.loads(text)
    assert [m["kwargs"]["type"] for m in messages] == ["system", "human", "ai", "tool", "ai"]
    assert messages[1]["kwargs"]["content"] == "What is 2 + 3?"
    assert messages[2]["kwargs"]["tool_calls"][0]["args"] == {"a": 2, "b": 3}
    assert messages[3]["kwargs"]["content"] == "5" and messages[3]["kwargs"]["tool_call_id"] == "call-1"

    messages[4]["kwargs"]["content"] = "2 + 3 is five."
    (work / "messages.json").write_text(json.dumps(messages, indent=2))
    done = qvc_json("--repo", str(agent_repo), "commit", str(work), "-m", "spell it out")
    assert done["changed"] == ["messages"]

    after, after_tuple = _state(agent_repo)
    assert after_tuple.checkpoint["id"] == done["id"] != before_tuple.checkpoint["id"]
    assert after_tuple.parent_config["configurable"]["checkpoint_id"] == before_tuple.checkpoint["id"]
    edited = after.values["messages"]
    assert all(isinstance(m, BaseMessage) for m in edited)
    assert isinstance(edited[4], AIMessage) and edited[4].content == "2 + 3 is five." and edited[4].id == "ai-2"
    assert edited[:4] == before.values["messages"][:4]
    assert isinstance(edited[3], ToolMessage) and edited[2].tool_calls == before.values["messages"][2].tool_calls
    assert after.metadata["source"] == "update" and after.metadata["message"] == "spell it out"
    versions, old = after_tuple.checkpoint["channel_versions"], before_tuple.checkpoint["channel_versions"]
    assert versions["messages"] > old["messages"]
    assert {k: v for k, v in versions.items() if k != "messages"} == {k: v for k, v in old.items() if k != "messages"}

    shown = qvc_json("--repo", str(agent_repo), "show", "t1")  # the viewer reads the committed checkpoint
    assert shown["state"]["messages"][4]["content"] == "2 + 3 is five."

    # the graph goes on from the edited checkpoint
    with QvcSaver(agent_repo) as saver:
        graph = _graph([AIMessage(content="You are welcome.", id="ai-3")]).compile(checkpointer=saver)
        final = graph.invoke({"messages": [HumanMessage("Thanks!", id="h-2")]}, CONFIG)
    assert [m.content for m in final["messages"][4:]] == ["2 + 3 is five.", "Thanks!", "You are welcome."]
    fsck(agent_repo)


def test_editing_an_older_tool_call_reruns_the_tool_with_the_edited_arguments(agent_repo, tmp_path):
    """Time travel by hand: the checkpoint after the model asked for ``add(2, 3)`` is edited to
    ask for ``add(2, 30)``; the graph continues from it and runs the tool on the new arguments."""
    work = tmp_path / "older"
    qvc("--repo", str(agent_repo), "checkout", "t1~2", "--to", str(work))
    messages = json.loads((work / "messages.json").read_text())
    assert messages[-1]["kwargs"]["tool_calls"][0]["args"] == {"a": 2, "b": 3}
    messages[-1]["kwargs"]["tool_calls"][0]["args"]["b"] = 30
    (work / "messages.json").write_text(json.dumps(messages))
    done = qvc_json("--repo", str(agent_repo), "commit", str(work))
    assert done["time_travel"] is True
    with QvcSaver(agent_repo) as saver:
        graph = _graph([AIMessage(content="2 + 30 is 32.", id="ai-4")]).compile(checkpointer=saver)
        assert graph.get_state(CONFIG).next == ("tools",)
        final = graph.invoke(None, CONFIG)
    assert [(type(m).__name__, m.content) for m in final["messages"][3:]] == [("ToolMessage", "32"),
                                                                              ("AIMessage", "2 + 30 is 32.")]
    fsck(agent_repo)


def test_an_untouched_checkout_commits_identical_channel_values(agent_repo, tmp_path):
    _, before = _state(agent_repo)
    work = tmp_path / "same"
    qvc("--repo", str(agent_repo), "checkout", "t1", "--to", str(work))
    done = qvc_json("--repo", str(agent_repo), "commit", str(work), "--allow-empty")
    assert done["changed"] == []
    with GitCheckpointStore(agent_repo) as store:
        head = store.head("t1")
        parent = store.commit_info(head).parent
        assert store.tree_entries(head).keys() == store.tree_entries(parent).keys()
        same = {n: e for n, e in store.tree_entries(head).items() if n != ".qvc"}
        assert same == {n: e for n, e in store.tree_entries(parent).items() if n != ".qvc"}  # the very blobs
    _, after = _state(agent_repo)
    assert after.checkpoint["channel_values"] == before.checkpoint["channel_values"]
    assert after.checkpoint["channel_versions"] == before.checkpoint["channel_versions"]


def test_a_long_conversation_and_a_value_without_json_form(tmp_path):
    """A list past 64 items is stored chunked, one pair per item, as QvcSaver stores it; a value
    without an exact JSON form (a set) stays in its stored encoding with one line saying so."""
    g = StateGraph(LongState)
    g.add_node("fill", lambda s: {"messages": [HumanMessage(f"note {i}", id=f"n-{i}") for i in range(70)],
                                  "tags": {"x", "y"}})
    g.add_edge(START, "fill")
    g.add_edge("fill", END)
    path = tmp_path / "long.qvc"
    with QvcSaver(path) as saver:
        g.compile(checkpointer=saver).invoke({"messages": []}, CONFIG)
    qvc("--repo", str(path), "checkout", "t1")
    work = tmp_path / "w"
    out = qvc("--repo", str(path), "checkout", "t1", "--to", str(work))
    assert out.stderr.count("\n") == 1 and "'tags'" in out.stderr and "stored encoding" in out.stderr
    assert "qvc:stored" in (work / "tags.json").read_text()

    messages = json.loads((work / "messages.json").read_text())
    messages[65]["kwargs"]["content"] = "edited"
    (work / "messages.json").write_text(json.dumps(messages))
    qvc("--repo", str(path), "commit", str(work))
    with QvcSaver(path) as saver:
        values = saver.get_tuple(CONFIG).checkpoint["channel_values"]
    assert values["tags"] == {"x", "y"}
    assert [m.content for m in values["messages"]] == [f"note {i}" if i != 65 else "edited" for i in range(70)]
    with GitCheckpointStore(path) as store:
        head = store.head("t1")
        parent = store.commit_info(head).parent
        mine, theirs = (store.history.tree(store.tree_entries(c)["messages"][1]) for c in (head, parent))
        assert mine["00000000"] == theirs["00000000"] and mine["00000001"] != theirs["00000001"]
    fsck(path)


def test_an_edit_langgraph_cannot_read_is_refused_and_stores_nothing(agent_repo, tmp_path):
    work = tmp_path / "bad"
    qvc("--repo", str(agent_repo), "checkout", "t1", "--to", str(work))
    messages = json.loads((work / "messages.json").read_text())
    messages[1]["id"][-1] = "NoSuchMessage"
    (work / "messages.json").write_text(json.dumps(messages))
    with GitCheckpointStore(agent_repo) as store:
        head = store.head("t1")
    proc = qvc("--repo", str(agent_repo), "commit", str(work), check=2)
    assert proc.stderr.count("\n") == 1 and "messages[1]" in proc.stderr
    with GitCheckpointStore(agent_repo) as store:
        assert store.head("t1") == head


def test_the_langgraph_editor_is_declared_as_an_entry_point():
    from importlib.metadata import entry_points

    declared = {ep.name: ep.value for ep in entry_points(group="qvc.editors")}
    assert declared.get("langgraph") == "qvc.integrations.langgraph.editor:EDITOR", (
        "the qvc.editors entry points are missing: run `pip install -e .` again after changing pyproject.toml")


def test_without_langgraph_checkout_keeps_the_stored_pairs_and_commit_refuses(agent_repo, tmp_path):
    """Where the editor's framework does not import, checkout writes the stored values and says
    so, and a directory the editor wrote is not committed (it would store JSON where LangGraph
    expects its serializer's bytes)."""
    edited, raw = tmp_path / "edited", tmp_path / "raw"
    qvc("--repo", str(agent_repo), "checkout", "t1", "--to", str(edited))
    script = f"""
import sys
sys.modules["langgraph"] = None  # as if it were not installed: importing it fails
from qvc import GitCheckpointStore
from qvc.errors import InvalidInputError
from qvc.edit.workdir import commit_directory
from qvc.readers.workdir import checkout_to_directory
with GitCheckpointStore({str(agent_repo)!r}) as store:
    head = store.head("t1")
    done = checkout_to_directory(store, head, {str(raw)!r})
    print(done.editor, len(done.notes), "does not import" in done.notes[0])
    try:
        commit_directory(store, {str(edited)!r})
    except InvalidInputError as exc:
        print("refused:", "'langgraph' editor" in str(exc), store.head("t1") == head)
"""
    proc = subprocess.run([sys.executable, "-c", script], env=child_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["None 1 True", "refused: True True"]
    assert json.loads((raw / "messages.json").read_text())[0] == "msgpack"


def test_plain_states_round_trip_as_before(tmp_path):
    path = tmp_path / "plain.qvc"
    with GitCheckpointStore(path) as store:
        put(store, "p", "c1", 0, {"n": 1, "blob": b"\x00\x01", "pair": (1, 2)})
    qvc("--repo", str(path), "checkout", "p")
    work = tmp_path / "p"
    assert qvc("--repo", str(path), "checkout", "p", "--to", str(work)).stderr == ""
    assert json.loads((work / "blob.json").read_text()) == {"$bytes": "AAE="}
    manifest = json.loads((work / ".qvc-state.json").read_text())
    assert "editor" not in manifest["meta"]
    (work / "n.json").write_text("2\n")
    qvc("--repo", str(path), "commit", str(work))
    with GitCheckpointStore(path) as store:
        state = store.read(store.head("p")).checkpoint.state_data
    assert state == {"n": 2, "blob": b"\x00\x01", "pair": (1, 2)}


# -- one numbering of a run's checkpoints -----------------------------------------------------------


def test_log_timeline_and_show_agree_on_a_run_checkpoints_number(tmp_path):
    path = tmp_path / "runs.qvc"
    with GitCheckpointStore(path) as store:
        with Runs(store).start("question", system="sys", run_id="r1", session_id="s") as rec:
            for n in range(2):
                rec.add_message(Message("assistant", tool_calls=[ToolCall(f"call_{n}", "tool", {"n": n})]))
                rec.tool_result(f"call_{n}", f"result {n}")
                rec.after_tool_batch()
            rec.add_message(Message("assistant", "answer"))
            rec.complete()
    repo = ("--repo", str(path))
    timeline = qvc_json(*repo, "timeline", "r1")
    assert [e["n"] for e in timeline] == [4, 6, 7]
    assert [e["name"] for e in timeline] == ["r1@4", "r1@6", "r1@7"]
    log = qvc_json(*repo, "log", "run/s/r1")
    assert [(e["id"], e["n"]) for e in log] == [(e["id"], e["n"]) for e in reversed(timeline)]
    for e in timeline:
        shown = qvc_json(*repo, "show", e["name"])
        assert (shown["checkpoint_id"], shown["n"]) == (e["id"], e["n"])

    middle = timeline[1]
    text = qvc(*repo, "timeline", "r1").stdout
    assert "r1@6" in text and "msg" not in text
    logged = qvc(*repo, "log", "run/s/r1").stdout
    assert "Run: r1@6" in logged and "Step:" not in logged
    oneline = qvc(*repo, "log", "--oneline", "run/s/r1").stdout.splitlines()
    assert [line.split()[2] for line in oneline] == ["r1@7", "r1@6", "r1@4"]
    assert "r1@6" in qvc(*repo, "show", "r1@6").stdout
    plain = qvc_json(*repo, "show", middle["id"])  # the checkpoint itself, by its id
    assert (plain["id"], plain["n"], plain["name"]) == (middle["id"], 6, "r1@6")
    assert "Run: r1@6" in qvc(*repo, "show", middle["id"]).stdout
    assert qvc_json(*repo, "log", "-n", "1", middle["name"])[0]["id"] == middle["id"]


def test_every_name_of_a_rewound_run_resolves_to_its_own_checkpoint(tmp_path):
    """A rewind leaves a second checkpoint at the same message index and a superseded line: each
    checkpoint still has one name, the one `qvc show` and `qvc log` resolve to it."""
    path = tmp_path / "rewound.qvc"
    with GitCheckpointStore(path) as store:
        runs = Runs(store)
        with pytest.raises(RuntimeError), runs.start("question", run_id="r2", session_id="s") as rec:
            for n in range(2):
                rec.add_message(Message("assistant", tool_calls=[ToolCall(f"call_{n}", "tool", {"n": n})]))
                rec.tool_result(f"call_{n}", f"result {n}")
                rec.after_tool_batch()
            raise RuntimeError("the model went away")
        runs.continue_run("r2", continue_from=3).close()
    repo = ("--repo", str(path))
    timeline = qvc_json(*repo, "timeline", "r2")
    names = [e["name"] for e in timeline]
    assert len(set(names)) == len(names) == len(timeline)
    assert "r2@3" in names and any(not e["current"] for e in timeline)
    for e in timeline:
        assert qvc_json(*repo, "log", "-n", "1", e["name"])[0]["id"] == e["id"]
        assert qvc_json(*repo, "show", e["id"])["name"] == e["name"]
    logged = {e["id"]: (e["n"], e["name"]) for e in qvc_json(*repo, "log", "--all")}
    assert logged == {e["id"]: (e["n"], e["name"]) for e in timeline}


def test_put_keeps_an_adapters_header_keys_and_refuses_the_stores_own(tmp_path):
    from qvc.errors import InvalidInputError

    with GitCheckpointStore(tmp_path / "h.qvc") as store:
        put(store, "h", "c1", 0, header={"mine": {"v": 1}})
        assert store.header(store.head("h"))[0]["mine"] == {"v": 1}
        for key in ("id", "versions"):
            with pytest.raises(InvalidInputError, match="store's own"):
                put(store, "h", "c2", 1, header={key: 1})
        assert store.get_tuple(CheckpointConfig("h")).checkpoint.id == "c1"


def test_field_files_put_short_lists_of_scalars_on_one_line():
    from qvc.codec.tagged import loads_tagged
    from qvc.readers.statefiles import field_text

    value = {"ids": ["a", "b, c", 'say "hi"\n[x]'], "n": [1, -2.5, True, None], "long": list(range(40)),
             "nested": [[1, 2], {"k": []}], "bytes": [b"\x00"], "pair": (1, 2)}
    text = field_text(value)
    assert '"ids": ["a", "b, c", "say \\"hi\\"\\n[x]"]' in text and '"n": [1, -2.5, true, null]' in text
    assert '"long": [\n' in text  # too long for one line
    assert loads_tagged(text) == value
