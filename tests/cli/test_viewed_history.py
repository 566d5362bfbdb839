"""History as readers show it after copies, edits, races and repairs, each through the real ``qvc``
as a subprocess (or ``qvc serve``):

1. a run checkpoint copied by a fork (``qvc branch``) or edited by ``qvc commit`` still reads as a
   run (the viewer of the checkpoint it was made from), and so does a LangGraph fork;
2. LangGraph's internal channels are hidden unless ``--raw``, and its serializer's type warnings
   never reach the terminal from a reader;
3. ``qvc log`` names the fields a checkpoint changed as its viewer shows them (``Changed:``,
   ``%(changed)``, ``--name-only``/``--name-status``, ``-- FIELD``) unless ``--raw``;
4. ``qvc log --follow`` names run checkpoints ``RUN@N``, as ``qvc log`` does;
5. ``qvc checkout --to DIR --json`` carries the editor's notes;
6. ``qvc commit``'s stale-directory check and its write are one compare-and-swap: a checkpoint
   another writer adds in between is refused, never rewound;
7. ``qvc fsck`` reports a reflog entry naming a commit that is gone as a warning (exit 0);
8. ``qvc serve`` lists threads with a garbled HEAD.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, TypedDict

import pytest
from helpers import QVC, ROOT, child_env, env, fsck, put, qvc, qvc_json

from qvc import GitCheckpointStore

STORAGE = ("log.0000", "heartbeat", "owner", "takeovers")


def stored_names_absent(text: str) -> None:
    for mark in STORAGE:
        assert mark not in text, f"{mark!r} in:\n{text}"


# -- a run repository ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run_master(tmp_path_factory) -> Path:
    """The samples' research agent on a qvc run: thread ``run/s1/research``, 4 checkpoints."""
    from qvc.runs import Runs
    from samples.scripted_agent import QUESTION, RESEARCH_PLAN, ScriptedModel, drive, make_tools

    path = tmp_path_factory.mktemp("runs") / "r.qvc"
    with Runs(path) as runs:
        with runs.start(QUESTION, run_id="research", session_id="s1") as rec:
            drive(rec, ScriptedModel(RESEARCH_PLAN), make_tools())
    return path


@pytest.fixture
def run_repo(run_master, tmp_path) -> Path:
    """A copy of the run repository this test may change."""
    path = tmp_path / "r.qvc"
    shutil.copytree(run_master, path)
    return path


# -- 1. copies of a run read as a run --------------------------------------------------------------


def test_a_forked_run_reads_as_a_run(run_repo):
    repo = ("--repo", str(run_repo))
    qvc(*repo, "branch", "mine", "run/s1/research")
    qvc(*repo, "branch", "mine-too", "mine")  # a fork of a fork: back through both copies
    for thread in ("mine", "mine-too"):
        shown = qvc_json(*repo, "show", thread)
        assert shown["metadata"]["source"] == "fork"
        state = shown["state"]
        assert {"messages", "status", "run"} <= set(state) and not any(k.startswith("log.") for k in state)
        assert state["messages"][1]["role"] == "assistant" and state["messages"][1]["tool_calls"]
        text = qvc(*repo, "show", thread).stdout
        stored_names_absent(text)
        assert "messages: 9 messages" in text
    assert qvc(*repo, "diff", "run/s1/research", "mine").stdout.strip() == ""  # the same run, shown alike
    blamed = qvc_json(*repo, "blame", "messages", "mine")
    assert len(blamed) == 9 and blamed[0]["value"]["role"] == "user"
    assert "log.00000000" in qvc_json(*repo, "show", "--raw", "mine")["state"]


def test_an_edited_run_reads_as_a_run_and_an_unreadable_edit_as_stored(run_repo, tmp_path):
    repo = ("--repo", str(run_repo))
    work = tmp_path / "edit"
    qvc(*repo, "checkout", "run/s1/research")
    qvc(*repo, "checkout", "--to", str(work))
    (work / "status.json").write_text('"ERROR"\n')
    qvc(*repo, "commit", str(work), "-m", "mark it failed")
    shown = qvc_json(*repo, "show")
    assert shown["metadata"]["source"] == "update"
    assert shown["state"]["status"] == "ERROR" and len(shown["state"]["messages"]) == 9
    assert qvc(*repo, "diff", "HEAD~1", "HEAD").stdout.splitlines() == [
        "~~~ field status (changed)", '~ status: "COMPLETED" → "ERROR"']
    # The run is checked out as its conversation (issue 32): an edit a run cannot hold is refused.
    assert not [p.name for p in work.iterdir() if p.name.startswith(("log%2E", "owner", "takeovers"))]
    (work / "messages.json").write_text('"not a list"\n')
    refused = qvc(*repo, "commit", str(work), check=2)
    assert "messages must be a list" in refused.stderr and refused.stderr.count("\n") == 1
    assert qvc_json(*repo, "show")["state"]["status"] == "ERROR"  # nothing stored
    fsck(run_repo)


def test_a_langgraph_fork_reads_as_langgraph(langgraph_repo, tmp_path):
    path = tmp_path / "agent.qvc"
    shutil.copytree(langgraph_repo, path)
    repo = ("--repo", str(path))
    qvc(*repo, "branch", "copy", "t1")
    shown = qvc_json(*repo, "show", "copy")
    assert shown["metadata"]["source"] == "fork"
    assert [m["role"] for m in shown["state"]["messages"]] == ["user", "assistant"] * 2
    assert "$bytes" not in json.dumps(shown)


# -- 2. LangGraph's own channels, and its serializer's warnings ------------------------------------


@pytest.fixture(scope="module")
def langgraph_repo(tmp_path_factory) -> Path:
    """README's LangGraph snippet, run twice on thread ``t1``."""
    pytest.importorskip("langgraph.graph")
    from langgraph.graph import START, MessagesState, StateGraph

    from qvc.integrations.langgraph import QvcSaver

    builder = StateGraph(MessagesState)
    builder.add_node("bot", lambda state: {"messages": [("ai", "hello")]})
    builder.add_edge(START, "bot")
    path = tmp_path_factory.mktemp("lg") / "agent.qvc"
    for _ in range(2):
        with QvcSaver(path) as saver:
            graph = builder.compile(checkpointer=saver)
            graph.invoke({"messages": [("user", "hi")]}, {"configurable": {"thread_id": "t1"}})
    return path


INTERNAL = ("__start__", "branch:to:bot", "__pregel")


def test_langgraph_internal_channels_are_hidden_unless_raw(langgraph_repo, tmp_path):
    repo = ("--repo", str(langgraph_repo))
    for args in (("log", "-p", "t1"), ("diff", "t1~1", "t1"), ("diff", "t1~3", "t1"), ("show", "t1"),
                 ("log", "--name-status", "t1"), ("blame", "messages", "t1")):
        proc = qvc(*repo, *args)
        for name in INTERNAL:
            assert name not in proc.stdout, (args, proc.stdout)
        assert proc.stderr == ""
    assert set(qvc_json(*repo, "show", "t1")["state"]) == {"messages"}
    assert [d["field"] for d in qvc_json(*repo, "diff", "t1~3", "t1")] == ["messages"]
    log = qvc(*repo, "log", "t1").stdout
    assert "Changed: messages\n" in log and "Changed: (nothing)" in log  # an input step changes only __start__
    assert set(qvc_json(*repo, "show", "t1~1")["state"]) == {"messages"}
    assert "branch:to:bot" in qvc_json(*repo, "show", "--raw", "t1~1")["state"]  # the step that wrote it
    assert "branch:to:bot" in qvc(*repo, "log", "--raw", "-n", "1", "t1").stdout
    written = qvc_json(*repo, "checkout", "t1~1", "--to", str(tmp_path / "t1"))
    assert any("branch" in f for f in written["files"]) and written["notes"] == []


def test_langgraph_type_warnings_do_not_reach_the_terminal(tmp_path):
    """A user's own types in the state: LangGraph's serializer warns about each when it decodes
    them ("Deserializing unregistered type", "Could not reconstruct"); readers stay quiet."""
    pytest.importorskip("langgraph.graph")
    from langgraph.graph import END, START, StateGraph

    from qvc.integrations.langgraph import QvcSaver

    types = tmp_path / "types"
    types.mkdir()
    (types / "fixups_user_types.py").write_text(textwrap.dedent("""\
        from dataclasses import dataclass

        from pydantic import BaseModel


        @dataclass
        class Point:
            x: int
            y: int


        class Note(BaseModel):
            text: str
        """))
    sys.path.insert(0, str(types))
    try:
        from fixups_user_types import Note, Point  # noqa: I001 - written above

        class State(TypedDict, total=False):
            point: Any
            note: Any

        g = StateGraph(State)
        g.add_node("n", lambda s: {"point": Point(1, 2), "note": Note(text="hi")})
        g.add_edge(START, "n")
        g.add_edge("n", END)
        path = tmp_path / "o.qvc"
        with QvcSaver(path) as saver:
            g.compile(checkpointer=saver).invoke({}, {"configurable": {"thread_id": "o"}})
    finally:
        sys.path.remove(str(types))
        sys.modules.pop("fixups_user_types", None)
    repo = ("--repo", str(path))
    with_types = {"PYTHONPATH": os.pathsep.join([str(types), str(ROOT)])}
    for extra in (with_types, {}):  # the types importable, and not
        for args in (("show", "--json", "o"), ("show", "o"), ("log", "-p", "o"), ("diff", "o~1", "o")):
            proc = qvc(*repo, *args, **extra)
            assert proc.stderr == "", (extra, args, proc.stderr)
        state = qvc_json(*repo, "show", "o", **extra)["state"]
        assert state["point"] == {"x": 1, "y": 2} and state["note"] == {"text": "hi"}


# -- 3. log names fields as the viewer shows them ---------------------------------------------------


def test_log_names_a_runs_fields_as_shown(run_repo):
    repo = ("--repo", str(run_repo))
    log = qvc(*repo, "log", "run/s1/research").stdout
    stored_names_absent(log)
    changed = [line for line in log.splitlines() if line.startswith("Changed:")]
    assert changed == ["Changed: status, content, metrics, messages", "Changed: metrics, session_state, messages",
                       "Changed: metrics, session_state, messages",
                       "Changed: run, status, content, error, metrics, session_state, messages"]
    assert [e["changed"] for e in qvc_json(*repo, "log", "-n", "1", "run/s1/research")] == [
        ["status", "content", "metrics", "messages"]]
    fmt = qvc(*repo, "log", "--format=%(changed)|%(nchanged)", "-n", "2", "run/s1/research").stdout
    assert fmt.splitlines() == ["status,content,metrics,messages|4", "metrics,session_state,messages|3"]
    names = qvc(*repo, "log", "--name-only", "--format=%h", "-n", "1", "run/s1/research").stdout
    assert names.split()[1:] == ["content", "messages", "metrics", "status"]
    status = qvc(*repo, "log", "--name-status", "--oneline", "-n", "1", "run/s1/research").stdout
    assert "M\tmessages" in status and "M\tstatus" in status
    first = qvc(*repo, "log", "--name-status", "--oneline", "--reverse", "run/s1/research").stdout.splitlines()
    assert "A\tmessages" in first[:9]
    # -- FIELD selects by the fields as shown: every checkpoint added messages, none "owner"
    assert len(json.loads(qvc(*repo, "log", "--json", "run/s1/research", "--", "messages").stdout)) == 4
    assert json.loads(qvc(*repo, "log", "--json", "run/s1/research", "--", "owner").stdout) == []
    graph = qvc(*repo, "log", "--graph", "--format=%(changed)", "run/s1/research").stdout
    assert "status,content,metrics,messages" in graph and "log.0000" not in graph
    # --raw: the stored names, as before
    raw = qvc(*repo, "log", "--raw", "-n", "1", "run/s1/research").stdout
    assert "Changed: content, log.00000003, metrics, owner, status" in raw
    assert len(json.loads(qvc(*repo, "log", "--raw", "--json", "run/s1/research", "--", "owner").stdout)) == 4
    assert "log.00000003" in qvc(*repo, "log", "--raw", "--name-only", "-n", "1", "run/s1/research").stdout


def test_log_of_plain_states_names_the_stored_fields(tmp_path):
    path = tmp_path / "p.qvc"
    with GitCheckpointStore(path) as store:
        put(store, "t", "a0", state={"x": 1, "y": [1]})
        put(store, "t", "a1", state={"x": 2, "y": [1]})
        put(store, "t", "a2", state={"y": [1, 2], "z": "new"})
    repo = ("--repo", str(path))
    viewed = qvc_json(*repo, "log", "t")
    assert [e["changed"] for e in viewed] == [["y", "z", "x"], ["x"], ["x", "y"]]
    assert viewed == qvc_json(*repo, "log", "--raw", "t")
    assert qvc(*repo, "log", "--name-status", "--format=%h", "-n", "1", "t").stdout.split()[1:] == [
        "D", "x", "M", "y", "A", "z"]


# -- 4. log --follow names run checkpoints RUN@N ----------------------------------------------------


class Follower:
    """``qvc log --follow`` as a process: its lines as they come."""

    def __init__(self, *args: str):
        self.proc = subprocess.Popen([*QVC, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=env(), stdin=subprocess.DEVNULL)
        self.lines: queue.Queue = queue.Queue()
        self.reader = threading.Thread(target=lambda: [self.lines.put(x) for x in self.proc.stdout], daemon=True)
        self.reader.start()

    def line(self, timeout: float = 30) -> str:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("no line from qvc log --follow") from None

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        assert self.proc.wait(timeout=15) == 0
        self.reader.join(15)
        err = self.proc.stderr.read()
        self.proc.stdout.close()
        self.proc.stderr.close()
        assert "Traceback" not in err, err


def test_log_follow_names_run_checkpoints_as_log_does(run_repo):
    from qvc.runs import Runs

    repo = ("--repo", str(run_repo))
    logged = [line.split()[2] for line in qvc(*repo, "log", "--oneline", "--reverse", "run/s1/research").stdout
              .splitlines()]
    assert logged == ["research@4", "research@6", "research@8", "research@9"]
    follow = Follower(*repo, "log", "--follow", "--oneline", "run/s1/research")
    assert [follow.line().split()[2] for _ in range(4)] == logged
    follow.stop()
    follow = Follower(*repo, "log", "--follow", "run/s2/later")  # a run that does not exist yet
    time.sleep(0.5)  # the watcher is up before the run starts (a later start is seen all the same)
    with Runs(run_repo) as runs:
        rec = runs.start("count to two", run_id="later", session_id="s2")
        rec.add_message({"role": "assistant", "content": "one"})
        rec.checkpoint()
        rec.add_message({"role": "assistant", "content": "two"})
        rec.complete("two")
    blocks: list[str] = []
    deadline = time.time() + 30
    while sum("Run: later@" in b for b in blocks) < 2 and time.time() < deadline:
        blocks.append(follow.line(max(0.1, deadline - time.time())))
    text = "".join(blocks)
    assert "Run: later@" in text and "Step: " not in text, text
    assert "Changed: " in text
    stored_names_absent(text)
    follow.stop()


# -- 5. checkout --to --json carries the editor's notes ---------------------------------------------


def test_checkout_to_json_has_the_editors_notes(tmp_path):
    pytest.importorskip("langgraph.graph")
    from langgraph.graph import END, START, StateGraph

    from qvc.integrations.langgraph import QvcSaver

    class State(TypedDict, total=False):
        pair: Any
        text: Any

    g = StateGraph(State)
    g.add_node("n", lambda s: {"pair": b"\x00\x01", "text": "plain"})  # bytes have no exact JSON form
    g.add_edge(START, "n")
    g.add_edge("n", END)
    path = tmp_path / "o.qvc"
    with QvcSaver(path) as saver:
        g.compile(checkpointer=saver).invoke({}, {"configurable": {"thread_id": "o"}})
    proc = qvc("--repo", str(path), "checkout", "o", "--to", str(tmp_path / "d"), "--json")
    done = json.loads(proc.stdout)
    assert len(done["notes"]) == 1 and "'pair'" in done["notes"][0] and "stored encoding" in done["notes"][0]
    assert done["notes"][0] in proc.stderr  # still on stderr too


# -- 6. qvc commit: the stale check and the write are one step --------------------------------------

RACE = """\
import subprocess
import sys

import qvc.cli.workdir as workdir
from qvc.cli import main

checked = workdir.check_directory


def then_another_writer(*args, **kwargs):
    stale = checked(*args, **kwargs)
    subprocess.run(sys.argv[2:], check=True)  # another process adds a checkpoint right after the check
    return stale


workdir.check_directory = then_another_writer
sys.exit(main(["--repo", sys.argv[1], "commit", "-m", "mine", *{commit_args}]))
"""

WRITER = """\
import sys

from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore

with GitCheckpointStore(sys.argv[1]) as store:
    head = store.get_tuple(CheckpointConfig("main"))
    cp = Checkpoint(id="theirs", thread_id="main", step=head.checkpoint.step + 1, state_data={"n": 99})
    store.put(CheckpointConfig("main"), cp, {"source": "loop"})
"""


def test_commit_loses_a_race_with_another_writer_and_rewinds_nothing(tmp_path):
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        for i in range(3):
            put(store, "main", f"m{i}", i, {"n": i})
        store.checkout("main")
    work = tmp_path / "edit"
    qvc("--repo", str(path), "checkout", "--to", str(work))
    (work / "n.json").write_text("7\n")
    writer = tmp_path / "writer.py"
    writer.write_text(WRITER)
    race = tmp_path / "race.py"
    race.write_text(RACE.replace("{commit_args}", repr([str(work)])))
    proc = subprocess.run([sys.executable, str(race), str(path), sys.executable, str(writer), str(path)],
                          capture_output=True, text=True, env=child_env(), timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert re.match(r"qvc: thread 'main' was moved by another writer \(expected [0-9a-f]{12}, found [0-9a-f]{12}\); "
                    r"nothing was stored", proc.stderr), proc.stderr
    assert [e["id"] for e in qvc_json("--repo", str(path), "log", "--all")] == ["theirs", "m2", "m1", "m0"]
    assert qvc_json("--repo", str(path), "status")["superseded_lines"] == 0
    # Committing again is the stale refusal: the directory predates their checkpoint.
    again = qvc("--repo", str(path), "commit", str(work), check=4)
    assert "has moved on since" in again.stderr
    fsck(path)


# -- 7. fsck: a reflog entry naming a commit that is gone -------------------------------------------


def test_fsck_warns_of_a_reflog_entry_a_head_repair_left(tmp_path):
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        for i in range(3):
            put(store, "main", f"m{i}", i, {"n": i})
        put(store, "other", "o0", 0, {"n": 0})
        store.checkout("main")
    repo = ("--repo", str(path))
    (path / "refs" / "heads" / "main").write_text("1" * 40 + "\n")  # the head commit is missing
    qvc(*repo, "reset", "main@{0}")  # repaired from the reflog; the reflog keeps the SHA it left
    checked = qvc(*repo, "fsck")
    assert checked.stdout.strip().endswith(": ok (2 warning(s))")
    warnings = checked.stderr.splitlines()
    assert len(warnings) == 2 and all(w.startswith("warning: ") and "qvc gc --prune" in w for w in warnings)
    assert "refs/heads/main: reflog entry 111111111111" in checked.stderr
    report = qvc_json(*repo, "fsck")
    assert report["ok"] and report["problems"] == [] and len(report["warnings"]) == 2
    # Damaged otherwise: the entry is one of the problems again.
    (path / "refs" / "heads" / "other").write_text("2" * 40 + "\n")
    damaged = qvc(*repo, "fsck", check=5)
    assert "invalid reflog entry " + "1" * 40 in damaged.stderr and "warning:" not in damaged.stderr
    qvc(*repo, "branch", "-D", "other")
    qvc(*repo, "gc", "--prune")  # drops the entry
    clean = qvc(*repo, "fsck")
    assert clean.stdout.strip().endswith(": ok") and clean.stderr == ""
    assert qvc_json(*repo, "fsck")["warnings"] == []


# -- 8. qvc serve with a garbled HEAD ---------------------------------------------------------------


def test_serve_lists_threads_with_a_garbled_head(run_repo):
    pytest.importorskip("fastapi")
    import urllib.request

    (run_repo / "HEAD").write_text("garbage\n")
    proc = subprocess.Popen([*QVC, "--repo", str(run_repo), "serve", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env(), stdin=subprocess.DEVNULL)
    try:
        line = proc.stdout.readline()
        m = re.search(r"at (http://\S+?/)", line)
        assert m, line

        def get(path: str) -> tuple[int, Any]:
            try:
                with urllib.request.urlopen(m.group(1) + path, timeout=30) as resp:
                    return resp.status, json.loads(resp.read())
            except urllib.error.HTTPError as exc:
                with exc:
                    return exc.code, json.loads(exc.read())

        status, threads = get("api/threads")
        assert status == 200, threads
        assert [t["thread"] for t in threads["threads"]] == ["run/s1/research"]
        assert not any(t["current"] for t in threads["threads"])
        assert get("api/threads?status=COMPLETED")[1]["total"] == 1
        status, repository = get("api/repository")
        assert status == 200 and repository["thread"] is None and repository["damaged"]
        status, line_json = get("api/threads/run/s1/research")
        assert status == 200 and len(line_json["line"]) == 4
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0 and "Traceback" not in err, err
