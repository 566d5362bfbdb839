"""One history across frameworks (issue 33, item 5): runs of several agent frameworks written into ONE
qvc repository, pushed to a real ``git daemon`` on 127.0.0.1, cloned, and read back in the clone
through each framework's own adapter and through ``qvc log --all``.

Each framework is driven through its own loop or storage API, offline, by the scripted models the
adapters' own tests use (no network but 127.0.0.1, no API keys):

- LangGraph: ``StateGraph`` runs on ``QvcSaver`` (tests/workers/langgraph_worker.py): an interrupt,
  its resume, a fork by ``update_state``;
- the Claude Agent SDK: ``query`` with its bundled program on the scripted model server
  (qvc/integrations/claude_agent_sdk/scripted.py), mirrored into ``QvcSessionStore``, then resumed;
- Microsoft Agent Framework: the scripted workflow (qvc/integrations/agent_framework/scripted.py)
  checkpointing into ``QvcCheckpointStorage``, a resume from an older checkpoint, a fork;
- Strands Agents: ``Agent`` on the scripted model (qvc/integrations/strands/scripted.py) through a
  ``SnapshotSessionManager`` on ``QvcStorage`` and through ``QvcSessionManager``, a fork;
- the OpenAI Agents SDK: ``Runner.run`` with the SDK's ``ScriptedModel``
  (qvc/integrations/openai_agents/scripted.py) on ``QvcSession``, a fork;
- agno: ``Agent`` on the scripted model (tests/workers/agno_worker.py) on ``QvcDb``, a regenerate.

Every adapter is built from the same repository path (the one line a user changes), and they are
open TOGETHER: each adapter opens a store of its own on the path, all in this one process, and the
frameworks' writes interleave (a first round of every framework, then a second). Each framework is
imported with ``pytest.importorskip``: the test runs those that are installed (at least two).

Two tests at the end hold LangGraph's ``QvcSaver`` to the sharing: a ``list`` with a filter skips
the other frameworks' checkpoints, and a LangGraph thread id such as ``openai`` never reaches the
other framework's threads (this test found both).
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List, Optional, Set

import pytest
from adapter_kit import qvc_cli, qvc_many
from git_servers import GitDaemon
from helpers import fsck, run_git

from qvc import CheckpointConfig


def run(coro: Any) -> Any:
    return asyncio.run(coro)


class Framework:
    """One framework's runs in the shared repository. ``open(path)`` builds its adapter(s) on the
    path; ``write(round)`` runs the framework (round 0, then round 1); ``lines`` (every thread the
    adapter wrote, its current line's checkpoint ids newest first), ``checkpoints`` (every id it can
    still reach, per thread) and ``snapshot`` (everything it reads back, comparable with ``==``) are
    read through the adapter alone, so they can be read again on the clone."""

    name = "framework"
    module = ""  # what pytest.importorskip must find

    def open(self, path: Path) -> None:
        raise NotImplementedError

    def write(self, round: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def lines(self) -> Dict[str, List[str]]:
        raise NotImplementedError

    def checkpoints(self) -> Dict[str, Set[str]]:
        return {thread: set(ids) for thread, ids in self.lines().items()}

    def snapshot(self) -> Any:
        raise NotImplementedError


def _line(store: Any, thread: str) -> List[tuple]:
    """A thread's current line as (checkpoint id, metadata, values), newest first, from the store the adapter opened."""
    return [(t.checkpoint.id, t.metadata, t.checkpoint.state_data) for t in store.list(CheckpointConfig(thread))]


# -- LangGraph -------------------------------------------------------------------------------------------


def _lg(thread: str, **extra: Any) -> dict:
    return {"configurable": {"thread_id": thread, **extra}}


class LangGraph(Framework):
    name, module = "langgraph", "langgraph.graph"

    def open(self, path: Path) -> None:
        from qvc.integrations.langgraph import QvcSaver
        from tests.workers.langgraph_worker import build

        self.saver = QvcSaver(path)
        self.graphs = {"lg-chat": build("chat", self.saver), "lg-ask": build("interrupt", self.saver)}

    def write(self, round: int) -> None:
        from langgraph.types import Command

        from tests.workers.langgraph_worker import human

        chat, ask = self.graphs["lg-chat"], self.graphs["lg-ask"]
        if round == 0:
            chat.invoke(human(0), _lg("lg-chat"))
            ask.invoke(human(0), _lg("lg-ask"))  # stops at the interrupt
            return
        ask.invoke(Command(resume="yes"), _lg("lg-ask"))
        first = [s for s in ask.get_state_history(_lg("lg-ask")) if s.next == ("ask",)][-1]
        ask.update_state(first.config, {"count": 100})  # a fork inside the thread: the old line superseded
        ask.invoke(Command(resume="again"), _lg("lg-ask"))
        chat.invoke(human(1), _lg("lg-chat"))

    def close(self) -> None:
        self.saver.close()

    def _tuples(self) -> Dict[str, list]:
        from qvc.integrations.langgraph import thread_name

        out: Dict[str, list] = defaultdict(list)
        for t in self.saver.list(None):  # every LangGraph checkpoint of the repository, and only those
            c = t.config["configurable"]
            out[thread_name(c["thread_id"], c.get("checkpoint_ns", ""))].append(t)
        return dict(out)

    def lines(self) -> Dict[str, List[str]]:
        out = {}
        for thread, tuples in self._tuples().items():
            c = tuples[0].config["configurable"]
            t = self.saver.get_tuple(_lg(c["thread_id"], checkpoint_ns=c.get("checkpoint_ns", "")))
            line = []
            while t is not None:
                line.append(t.config["configurable"]["checkpoint_id"])
                t = self.saver.get_tuple(t.parent_config) if t.parent_config else None
            out[thread] = line
        return out

    def checkpoints(self) -> Dict[str, Set[str]]:
        return {thread: {t.config["configurable"]["checkpoint_id"] for t in tuples}
                for thread, tuples in self._tuples().items()}

    def snapshot(self) -> Any:
        states = {tid: (graph.get_state(_lg(tid)).values, [(s.config, s.values, s.next, s.metadata)
                                                            for s in graph.get_state_history(_lg(tid))])
                  for tid, graph in self.graphs.items()}
        return states, [(t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes)
                        for t in self.saver.list(None)]


# -- the Claude Agent SDK ---------------------------------------------------------------------------------


class ClaudeAgentSdk(Framework):
    name, module = "claude-agent-sdk", "claude_agent_sdk"

    def open(self, path: Path) -> None:
        from qvc.integrations.claude_agent_sdk import QvcSessionStore

        self.store = QvcSessionStore(path)
        self.work = path.parent / f"{path.name}.claude"  # the program's project directory and local state
        self.model: Any = None
        self.sid: Optional[str] = None

    def write(self, round: int) -> None:
        from qvc.integrations.claude_agent_sdk.scripted import LOOKUP, ScriptedModel, ask, offline_options

        if self.model is None:
            self.model = ScriptedModel().start()
            self.model.plan("Look up items 0 and 1.", calls=[(LOOKUP, {"n": n}) for n in range(2)],
                            answer="Items 0 and 1: found.")
            self.model.plan("And item 5.", calls=[(LOOKUP, {"n": 5})], answer="Item 5 is value 5.")
        more = {"resume": self.sid} if self.sid else {}
        prompt = "And item 5." if round else "Look up items 0 and 1."
        options = offline_options(self.store, self.model, str(self.work / "project"), str(self.work / "config"),
                                  **more)
        sid, answer = run(ask(prompt, options))
        assert answer == ("Item 5 is value 5." if round else "Items 0 and 1: found.")
        assert self.sid in (None, sid)
        self.sid = sid

    def close(self) -> None:
        if self.model is not None:
            self.model.stop()
        self.store.close()

    def lines(self) -> Dict[str, List[str]]:
        from qvc.integrations.claude_agent_sdk import key_of

        s = self.store.store
        return {t: [x[0] for x in _line(s, t)] for t in s.threads() if key_of(t) is not None}

    def snapshot(self) -> Any:
        from qvc.integrations.claude_agent_sdk import key_of

        s, out = self.store.store, {}
        keys = {t: key_of(t) for t in s.threads() if key_of(t) is not None}
        for thread, key in keys.items():
            out[thread] = (self.store.entries(key), _line(s, thread))
        for project in {k["project_key"] for k in keys.values()}:
            out[project] = (sorted(x["session_id"] for x in run(self.store.list_sessions(project))),
                            sorted((x["session_id"], x["mtime"], x["data"])
                                   for x in run(self.store.list_session_summaries(project))))
        return out


# -- Microsoft Agent Framework -----------------------------------------------------------------------------


class AgentFramework(Framework):
    name, module = "agent-framework", "agent_framework"

    def open(self, path: Path) -> None:
        from qvc.integrations.agent_framework import QvcCheckpointStorage

        self.storage = QvcCheckpointStorage(path)

    def write(self, round: int) -> None:
        from qvc.integrations.agent_framework.scripted import NAME, Task, build_workflow

        if round == 0:
            result = run(build_workflow(self.storage).run(Task("maf", 3)))
            assert result.get_outputs() == ["3 items: value 0, value 1, value 2"]
            return
        ids = run(self.storage.list_checkpoint_ids(workflow_name=NAME))
        run(build_workflow(self.storage).run(checkpoint_id=ids[3]))  # a resume from an older one: time travel
        run(build_workflow(self.storage, name=f"{NAME}-fork").run(checkpoint_id=ids[1]))  # a fork

    def close(self) -> None:
        self.storage.close()

    def _names(self) -> Dict[str, str]:
        from qvc.integrations.agent_framework import workflow_of

        return {t: workflow_of(t) for t in self.storage.store.threads() if workflow_of(t) is not None}

    def lines(self) -> Dict[str, List[str]]:
        return {t: [x[0] for x in _line(self.storage.store, t)] for t in self._names()}

    def checkpoints(self) -> Dict[str, Set[str]]:
        return {t: set(run(self.storage.list_checkpoint_ids(workflow_name=name))) for t, name in self._names().items()}

    def snapshot(self) -> Any:
        s, out = self.storage, {}
        for t, name in self._names().items():
            ids = run(s.list_checkpoint_ids(workflow_name=name))
            out[t] = (ids, run(s.get_latest(workflow_name=name)).checkpoint_id,
                      [(x.checkpoint.id, x.metadata, x.checkpoint.state_data)
                       for x in s.store.list(CheckpointConfig(t), superseded=True)],
                      [repr(run(s.load(i)).to_dict()) for i in ids])
        return out


# -- Strands Agents -----------------------------------------------------------------------------------------


class Strands(Framework):
    name, module = "strands", "strands"

    def open(self, path: Path) -> None:
        from qvc.integrations.strands import QvcStorage

        self.path = path
        self.storage = QvcStorage(path)
        self.model: Any = None

    def _turn(self, manager: Any, prompt: str, steps: int, agent_id: str = "a1") -> None:
        from strands import Agent

        from qvc.integrations.strands.scripted import lookup

        self.model.plan(prompt, calls=[("lookup", {"n": n}) for n in range(steps)], answer=f"Answer to {prompt}")
        agent = Agent(model=self.model, tools=[lookup], session_manager=manager, agent_id=agent_id,
                      callback_handler=None)
        assert str(agent(prompt)).strip() == f"Answer to {prompt}"

    def _snapshots(self, session: str) -> Any:
        from strands.session import SnapshotSessionManager

        return SnapshotSessionManager(session, storage=self.storage, save_latest_on="message",
                                      snapshot_trigger=lambda **kw: True)

    def write(self, round: int) -> None:
        from qvc.integrations.strands import QvcSessionManager
        from qvc.integrations.strands.scripted import ScriptedModel

        if self.model is None:
            self.model = ScriptedModel()
        with QvcSessionManager("st-r1", self.path) as manager:  # Strands' per-message repository, the same path
            self._turn(manager, f"Repository turn {round}.", 1)
        if round == 0:
            self._turn(self._snapshots("st-s1"), "Look up items 0 and 1.", 2)
            return
        self._turn(self._snapshots("st-s1"), "And item 3.", 1)  # a new agent, restored from the repository
        self.storage.fork_session("st-s1", "st-s2")
        self._turn(self._snapshots("st-s2"), "On the fork.", 1)

    def close(self) -> None:
        self.storage.close()

    def lines(self) -> Dict[str, List[str]]:
        store = self.storage.store
        return {t: [i.checkpoint_id for i in store.first_parents(store.head(t)) if i.thread_id == t]
                for t in store.threads() if t.startswith("strands/")}

    def snapshot(self) -> Any:
        from qvc.integrations.strands import QvcSessionRepository

        s = self.storage
        out: Dict[str, Any] = {key: run(s.read(key)) for key in run(s.list(""))}
        repo = QvcSessionRepository(store=s.store)
        for thread in s.store.threads():
            if not thread.startswith("strands/"):
                continue
            out[thread] = _line(s.store, thread)
            parts = thread.split("/")
            if thread.startswith("strands/repository/") and len(parts) == 5:
                out[thread + " (agent)"] = (repo.read_agent(parts[2], parts[4]).to_dict(),
                                            [m.to_dict() for m in repo.list_messages(parts[2], parts[4])])
        return out


# -- the OpenAI Agents SDK ------------------------------------------------------------------------------------


class OpenAIAgents(Framework):
    name, module = "openai-agents", "agents"

    def open(self, path: Path) -> None:
        from qvc.integrations.openai_agents import QvcSession

        self.session = QvcSession("oa-s1", path)

    def _turn(self, session: Any, steps: int, tag: str) -> None:
        from agents import Runner

        from qvc.integrations.openai_agents.scripted import RUN_CONFIG, make_agent

        result = run(Runner.run(make_agent(steps, tag, answer=f"done {tag}"), f"q {tag}", session=session,
                                run_config=RUN_CONFIG))
        assert result.final_output == f"done {tag}"

    def write(self, round: int) -> None:
        if round == 0:
            self._turn(self.session, 2, "a")
            return
        self._turn(self.session, 1, "b")
        fork = run(self.session.fork("oa-s2", turn=2))  # the items before the second run's prompt
        self._turn(fork, 1, "c")

    def close(self) -> None:
        self.session.close()

    def _sessions(self) -> Dict[str, str]:
        from qvc.integrations.openai_agents import session_of

        return {t: session_of(t) for t in self.session.store.threads() if session_of(t) is not None}

    def lines(self) -> Dict[str, List[str]]:
        return {t: [x[0] for x in _line(self.session.store, t)] for t in self._sessions()}

    def snapshot(self) -> Any:
        from qvc.integrations.openai_agents import QvcSession

        return {sid: (run(QvcSession(sid, store=self.session.store).get_items()), _line(self.session.store, t))
                for t, sid in self._sessions().items()}


# -- agno ----------------------------------------------------------------------------------------------------------


class Agno(Framework):
    name, module = "agno", "agno.agent"

    def open(self, path: Path) -> None:
        from qvc.integrations.agno import QvcDb

        self.db = QvcDb(path)

    def write(self, round: int) -> None:
        from agno.run.base import RunStatus

        from tests.workers.agno_worker import batches, make_agent

        if round == 0:
            out = make_agent(self.db, batches(2), session_id="ag-s1").run("go", run_id="ag-r1")
            assert out.status is RunStatus.completed
            return
        out = make_agent(self.db, batches(1), session_id="ag-s1").run("again", run_id="ag-r2")
        assert out.status is RunStatus.completed
        again = make_agent(self.db, ["another answer"], session_id="ag-s1").continue_run(
            run_id="ag-r1", session_id="ag-s1", regenerate=True)
        assert again.regenerated_from == "ag-r1"

    def close(self) -> None:
        self.db.close()

    def _entries(self) -> Dict[str, List[tuple]]:
        """Per thread, its checkpoints newest first as (id, on the current line): a session's from the
        store's line, a run's from its timeline (qvc.runs)."""
        from qvc.runs import Runs

        out = {}
        for row in self.db.get_sessions(deserialize=False)[0]:
            thread = f"agno/session/{row['session_id']}"
            out[thread] = [(t.checkpoint.id, True) for t in self.db.store.list(CheckpointConfig(thread))]
        runs = Runs(self.db.store)
        for row in self.db.get_runs(deserialize=False)[0]:
            out[runs.thread(row["run_id"])] = [(e.id, e.current) for e in reversed(runs.timeline(row["run_id"]))]
        return out

    def lines(self) -> Dict[str, List[str]]:
        return {t: [cid for cid, current in entries if current] for t, entries in self._entries().items()}

    def checkpoints(self) -> Dict[str, Set[str]]:
        return {t: {cid for cid, _ in entries} for t, entries in self._entries().items()}

    def snapshot(self) -> Any:
        rows, _ = self.db.get_sessions(deserialize=False, sort_by="session_id")
        runs = sorted((r["run_id"], self.db.get_run(r["run_id"], deserialize=False))
                      for r in self.db.get_runs(deserialize=False)[0])
        return rows, runs, [self.db.get_session(r["session_id"]).to_dict() for r in rows]


# -- the test -------------------------------------------------------------------------------------------------------

FRAMEWORKS = [LangGraph, ClaudeAgentSdk, AgentFramework, Strands, OpenAIAgents, Agno]


def installed() -> List[Framework]:
    """The frameworks whose packages import here (``pytest.importorskip`` each; a missing one is left out)."""
    found = []
    for kind in FRAMEWORKS:
        try:
            pytest.importorskip(kind.module)
        except pytest.skip.Exception:
            continue
        found.append(kind())
    if len(found) < 2:
        pytest.skip(f"one history across frameworks needs two of them installed, found {[f.name for f in found]}")
    return found


def read(kind: type, path: Path) -> Dict[str, Any]:
    """Everything one framework's adapter, opened afresh on ``path``, reads back."""
    framework = kind()
    framework.open(path)
    try:
        return {"lines": framework.lines(), "checkpoints": framework.checkpoints(), "snapshot": framework.snapshot()}
    finally:
        framework.close()


def test_runs_of_every_framework_share_one_repository_through_a_push_and_a_clone(tmp_path, isolated_git):
    path, bare = tmp_path / "one.qvc", tmp_path / "srv" / "hub.git"
    frameworks = installed()
    for f in frameworks:  # every adapter on the same path, open together
        f.open(path)
    try:
        for round in (0, 1):  # the frameworks' writes interleave in the one repository
            for f in frameworks:
                f.write(round)
        expected = {f.name: {"lines": f.lines(), "checkpoints": f.checkpoints(), "snapshot": f.snapshot()}
                    for f in frameworks}
    finally:
        for f in frameworks:
            f.close()

    owners: Dict[str, str] = {}  # each thread is one framework's; none claims another's
    for name, seen in expected.items():
        assert seen["lines"], f"{name} wrote no thread"
        assert set(seen["checkpoints"]) == set(seen["lines"]), name
        reachable = {cid for ids in seen["checkpoints"].values() for cid in ids}
        for thread, line in seen["lines"].items():  # a fork's line goes on into its source thread's
            assert line and set(line) <= reachable, (name, thread)
            assert thread not in owners, f"{thread!r} is read as {owners.get(thread)}'s and as {name}'s"
            owners[thread] = name
    fsck(path)

    bare.parent.mkdir()
    run_git(None, "init", "-q", "--bare", str(bare))
    daemon = GitDaemon(str(bare.parent)).start()
    try:
        url = daemon.url(bare.name)
        qvc_cli(path, "remote", "add", "origin", url)
        qvc_cli(path, "push", "origin")
        clone = tmp_path / "clone.qvc"
        qvc_cli(None, "clone", url, str(clone))
    finally:
        daemon.stop()
    shutil.rmtree(path)  # the clone alone from here on: nothing can be read from the original by mistake

    fsck(clone)
    for f in frameworks:  # each framework's own adapter on the clone reads what it wrote, as data
        got = read(type(f), clone)
        want = expected[f.name]
        assert got["lines"] == want["lines"], f"{f.name}: the clone's threads and lines differ"
        assert got["checkpoints"] == want["checkpoints"], f"{f.name}: the clone's checkpoints differ"
        assert got["snapshot"] == want["snapshot"], f"{f.name}: the clone reads different values"

    threads = sorted(owners)
    outs = qvc_many(clone, [("branch", "--json"), ("log", "--all", "--json"), *[("show", t) for t in threads]])
    branches, logged = json.loads(outs[0]), json.loads(outs[1])
    assert {b["thread"] for b in branches} == set(owners), "the clone's threads are not the frameworks' threads"
    for b in branches:
        assert b["head_id"] == expected[owners[b["thread"]]]["lines"][b["thread"]][0], b["thread"]
    for thread, shown in zip(threads, outs[2:], strict=True):  # every framework's viewer, in one reader
        head = expected[owners[thread]]["lines"][thread][0]
        assert shown.startswith(f"checkpoint {head}\n"), f"qvc show {thread}:\n{shown[:500]}"
    every = {cid for seen in expected.values() for ids in seen["checkpoints"].values() for cid in ids}
    ids = {e["id"] for e in logged}
    assert every <= ids, f"qvc log --all does not name {sorted(every - ids)}"
    assert ids == every, f"qvc log --all names checkpoints no framework reads: {sorted(ids - every)}"
    assert {e["thread"] for e in logged} <= set(owners)


# -- LangGraph beside the other frameworks: two bugs of QvcSaver in a shared repository ------------------------------


def langgraph_and_another() -> tuple:
    """LangGraph and one other installed framework (the quickest to run), each having written its
    first round into one repository; skips unless both are installed."""
    pytest.importorskip(LangGraph.module)
    for kind in (AgentFramework, OpenAIAgents, Strands, Agno, ClaudeAgentSdk):
        try:
            pytest.importorskip(kind.module)
        except pytest.skip.Exception:
            continue
        return LangGraph(), kind()
    pytest.skip("no framework besides LangGraph is installed")


def test_langgraph_lists_its_checkpoints_with_a_filter_in_a_shared_repository(tmp_path):
    lg, other = langgraph_and_another()
    path = tmp_path / "shared.qvc"
    lg.open(path)
    other.open(path)
    try:
        lg.write(0)
        other.write(0)
        everything = list(lg.saver.list(None))
        assert everything and all(t.metadata.get("source") for t in everything)
        wanted = [t.config for t in everything if t.metadata["source"] == "loop"]
        assert wanted and [t.config for t in lg.saver.list(None, filter={"source": "loop"})] == wanted
    finally:
        lg.close()
        other.close()


def test_a_langgraph_thread_id_never_reaches_another_frameworks_threads(tmp_path):
    lg, other = langgraph_and_another()
    path = tmp_path / "shared.qvc"
    lg.open(path)
    other.open(path)
    try:
        lg.write(0)
        other.write(0)
        theirs = other.lines()
        top = sorted({thread.split("/")[0] for thread in theirs})  # 'openai', 'strands', 'maf', ...
        mine = lg.lines()
        assert not set(top) & {name.split("/")[0] for name in mine}  # no LangGraph thread has those ids
        for thread_id in top:
            lg.saver.delete_thread(thread_id)  # a thread id LangGraph never wrote: nothing to delete
    finally:
        lg.close()
        other.close()
    assert read(type(other), path)["lines"] == theirs, f"QvcSaver.delete_thread({top}) deleted {other.name}'s threads"
    assert read(LangGraph, path)["lines"] == mine
