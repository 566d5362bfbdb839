"""QvcDb / AsyncQvcDb under agno's real run loop (a scripted model, no API key): checkpoints, fidelity
against SqliteDb, crash recovery, errors, forks, regenerate, the CLI and git fsck."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import ROOT, child_env, fsck, run_git

pytest.importorskip("agno.agent")
pytest.importorskip("sqlalchemy")

from agno.db.sqlite import SqliteDb  # noqa: E402
from agno.run.base import RunStatus  # noqa: E402

from qvc import GitCheckpointStore  # noqa: E402
from qvc.integrations.agno import AsyncQvcDb, NotStoredError, QvcDb  # noqa: E402
from qvc.runs import Runs  # noqa: E402
from qvc.runs.failures import recorded_failures  # noqa: E402
from tests.workers.agno_worker import SESSION, batches, make_agent  # noqa: E402

WORKER = Path(ROOT, "tests", "workers", "agno_worker.py")


def qvc_cli(*args: str) -> subprocess.CompletedProcess:
    """The ``qvc`` console script as a subprocess."""
    exe = shutil.which("qvc") or str(Path(sys.executable).with_name("qvc"))
    return subprocess.run([exe, "--no-pager", "--color=never", *args], capture_output=True, text=True,
                          env=child_env(), timeout=120)


def timeline(path, run_id):
    with Runs(str(path)) as runs:
        return runs.timeline(run_id)


def run_agent(db, script, run_id, *, is_async, session_id=SESSION):
    agent = make_agent(db, script, session_id)
    if is_async:
        return asyncio.run(agent.arun("go", run_id=run_id))
    return agent.run("go", run_id=run_id)


class MirrorDb(QvcDb):
    """QvcDb that also writes every run and session to a SqliteDb and checks both read back equal."""

    def __init__(self, path, sqlite):
        super().__init__(path)
        self.sqlite = sqlite
        self.compared = 0

    def upsert_run(self, run, session_id, user_id=None, run_index=None):
        super().upsert_run(run, session_id, user_id=user_id, run_index=run_index)
        self.sqlite.upsert_run(run, session_id, user_id=user_id, run_index=run_index)
        ours, theirs = self.get_run(run.run_id), self.sqlite.get_run(run.run_id)
        assert ours.to_dict() == theirs.to_dict()
        row, their_row = self.get_run(run.run_id, deserialize=False), self.sqlite.get_run(run.run_id,
                                                                                           deserialize=False)
        for key in ("run_id", "session_id", "run_type", "agent_id", "user_id", "status", "run_index", "run_data"):
            assert row[key] == their_row[key], key
        self.compared += 1

    def upsert_session(self, session, deserialize=True):
        out = super().upsert_session(session, deserialize=deserialize)
        self.sqlite.upsert_session(session, deserialize=deserialize)
        ours = self.get_session(session.session_id).to_dict()
        theirs = self.sqlite.get_session(session.session_id).to_dict()
        ours.pop("updated_at", None), theirs.pop("updated_at", None)  # the time of each write
        assert ours == theirs
        return out


# -- 1. K tool batches, K+1 checkpoints, read back as SqliteDb returns it -------------------------------


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("k", [1, 4])
def test_k_tool_batches_give_k_plus_one_checkpoints(tmp_path, k, is_async):
    path = tmp_path / "r.qvc"
    db = AsyncQvcDb(path) if is_async else QvcDb(path)
    out = run_agent(db, batches(k), "run-k", is_async=is_async)
    assert out.status is RunStatus.completed
    entries = timeline(path, "run-k")
    assert len(entries) == k + 1
    assert [e.status.value for e in entries] == ["RUNNING"] * k + ["COMPLETED"]
    assert [e.reason for e in entries] == ["tool-batch"] * k + ["end"]
    assert [e.message_index for e in entries] == [1 + 2 * (i + 1) for i in range(k)] + [2 + 2 * k]
    stored = (db.sync if is_async else db).get_run("run-k")
    assert stored.status is RunStatus.completed and len(stored.tools) == k
    assert stored.tools[0].result.startswith("item 1: ")
    fsck(path)


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_every_checkpoint_reads_back_as_sqlitedb_returns_it(tmp_path, is_async):
    mirror = MirrorDb(tmp_path / "r.qvc", SqliteDb(db_file=str(tmp_path / "a.db")))
    db = AsyncQvcDb(sync=mirror) if is_async else mirror
    run_agent(db, batches(3), "run-1", is_async=is_async)
    run_agent(db, batches(1), "run-2", is_async=is_async)
    assert mirror.compared == 4 + 2
    ours = mirror.get_session(SESSION).to_dict()
    theirs = mirror.sqlite.get_session(SESSION).to_dict()
    ours.pop("updated_at"), theirs.pop("updated_at")
    assert ours == theirs and [r["run_id"] for r in ours["runs"]] == ["run-1", "run-2"]
    for runs_limit in (1, 5):
        assert [r.run_id for r in mirror.get_session(SESSION, runs_limit=runs_limit).runs] == \
               [r.run_id for r in mirror.sqlite.get_session(SESSION, runs_limit=runs_limit).runs]
    rows, total = mirror.get_runs(session_id=SESSION, deserialize=False)
    assert total == 2 and [r["run_id"] for r in rows] == ["run-1", "run-2"]
    fsck(tmp_path / "r.qvc")


# -- 2. SIGKILL inside a tool batch, then acontinue_run ------------------------------------------------


def test_a_worker_killed_inside_a_tool_batch_is_continued_to_completed(tmp_path):
    path, marker = tmp_path / "r.qvc", tmp_path / "inside"
    worker = subprocess.Popen([sys.executable, str(WORKER), str(path), "crashed", str(marker)], env=child_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert worker.poll() is None, worker.stderr.read().decode()
            assert time.monotonic() < deadline, "the worker never reached its second tool batch"
            time.sleep(0.05)
        os.kill(worker.pid, signal.SIGKILL)
    finally:
        worker.wait(timeout=60)
    assert worker.returncode == -signal.SIGKILL

    db = AsyncQvcDb(path)
    crashed = db.sync.get_run("crashed")
    assert crashed.status is RunStatus.running  # the last batch's checkpoint, as the crash left it
    assert len(crashed.tools) == 1 and len(crashed.messages) == 3
    assert crashed.last_checkpoint_at_message_index == 3

    agent = make_agent(db, batches(3))
    done = asyncio.run(agent.acontinue_run(run_id="crashed", session_id=SESSION))
    assert done.run_id == "crashed" and done.status is RunStatus.completed
    stored = db.sync.get_run("crashed")
    assert stored.status is RunStatus.completed and stored.content == "final answer"
    assert [m.role for m in stored.messages].count("tool") == 3  # batch 2 ran again, then batch 3
    entries = timeline(path, "crashed")
    assert entries[0].status.value == "RUNNING" and entries[0].message_index == 3
    assert entries[-1].status.value == "COMPLETED" and all(e.current for e in entries)
    fsck(path)


# -- 3. a model failure: an ERROR run that keeps its messages, continued in place ----------------------


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_a_model_failure_keeps_messages_and_continues_in_place(tmp_path, is_async):
    path = tmp_path / "r.qvc"
    db = AsyncQvcDb(path) if is_async else QvcDb(path)
    sync_db = db.sync if is_async else db
    state = {"fail": True}

    def first(messages):
        if state["fail"]:
            raise RuntimeError("provider down")
        return [("lookup", {"n": 1})]

    agent = make_agent(db, [first, "final answer"])
    out = asyncio.run(agent.arun("go", run_id="e1")) if is_async else agent.run("go", run_id="e1")
    assert out.status is RunStatus.error
    stored = sync_db.get_run("e1")
    assert stored.status is RunStatus.error and [m.role for m in stored.messages] == ["user"]
    state["fail"] = False
    again = asyncio.run(agent.acontinue_run(run_id="e1", session_id=SESSION)) if is_async else \
        agent.continue_run(run_id="e1", session_id=SESSION)
    assert again.run_id == "e1" and again.status is RunStatus.completed
    entries = timeline(path, "e1")
    assert [e.status.value for e in entries] == ["ERROR", "RUNNING", "COMPLETED"]
    assert all(e.current for e in entries)
    fsck(path)


def test_continue_from_in_place_is_time_travel_that_keeps_the_old_tail(tmp_path):
    path = tmp_path / "r.qvc"
    db = QvcDb(path)
    state = {"fail": True}

    def third(messages):
        if state["fail"]:
            raise RuntimeError("provider down")
        return "final answer"

    agent = make_agent(db, [[("lookup", {"n": 1})], [("lookup", {"n": 2})], third])
    assert agent.run("go", run_id="t1").status is RunStatus.error
    before = timeline(path, "t1")
    assert [e.message_index for e in before] == [3, 5, 5]
    state["fail"] = False
    done = agent.continue_run(run_id="t1", session_id=SESSION, continue_from=3)
    assert done.run_id == "t1" and done.status is RunStatus.completed
    entries = timeline(path, "t1")
    current = [e for e in entries if e.current]
    superseded = [e for e in entries if not e.current]
    assert current[0].id == before[0].id  # the head moved back to the checkpoint at message 3
    assert {e.id for e in superseded} == {before[1].id, before[2].id}  # the old tail, kept
    assert current[-1].status.value == "COMPLETED"
    fsck(path)


# -- 4. forks and regenerate share the source's commits ------------------------------------------------


def test_fork_and_regenerate_share_the_sources_history(tmp_path):
    path = tmp_path / "r.qvc"
    db = QvcDb(path)
    agent = make_agent(db, batches(2))
    agent.run("go", run_id="src")
    source = timeline(path, "src")
    fork = agent.continue_run(run_id="src", session_id=SESSION, continue_from=3, fork=True)
    assert fork.run_id != "src" and fork.forked_from_run_id == "src" and fork.status is RunStatus.completed
    regen = agent.continue_run(run_id="src", session_id=SESSION, regenerate=True)
    assert regen.regenerated_from == "src" and db.get_run("src").status is RunStatus.regenerated

    store = GitCheckpointStore(path)
    commit = {e.id: store.resolve(e.id) for e in source}
    fork_first = timeline(path, fork.run_id)[0]
    assert fork_first.parent_id == source[0].id  # its first commit's parent: the source's commit at message 3
    regen_first = timeline(path, regen.run_id)[0]
    assert regen_first.parent_id == source[1].id  # before the final answer: the checkpoint at message 5
    for child, ancestor in ((fork_first.id, source[0].id), (regen_first.id, source[1].id)):
        run_git(path, "merge-base", "--is-ancestor", commit[ancestor], store.resolve(child))
    entries = timeline(path, "src")
    assert entries[-1].status.value == "REGENERATED" and entries[-1].reason == "regenerated"

    new_session = agent.fork_session(source_session_id=SESSION)
    copied = db.get_session(new_session)
    assert len(copied.runs) == 3 and all(r.session_id == new_session for r in copied.runs)
    store.close()
    fsck(path)


# -- 5. the qvc CLI on an agno run ----------------------------------------------------------------------


def test_qvc_runs_timeline_and_show_on_an_agno_run(tmp_path):
    path = tmp_path / "r.qvc"
    db = QvcDb(path)
    run_agent(db, batches(2), "cli-run", is_async=False)
    db.close()
    runs = qvc_cli("--repo", str(path), "runs", "--json")
    assert runs.returncode == 0, runs.stderr
    listed = json.loads(runs.stdout)
    assert [(r["run_id"], r["status"], r["session_id"]) for r in listed] == [("cli-run", "COMPLETED", SESSION)]
    tl = qvc_cli("--repo", str(path), "timeline", "cli-run", "--json")
    assert tl.returncode == 0, tl.stderr
    assert [e["message_index"] for e in json.loads(tl.stdout)] == [3, 5, 6]
    shown = qvc_cli("--repo", str(path), "show", "cli-run@3", "--json")
    assert shown.returncode == 0, shown.stderr
    snap = json.loads(shown.stdout)
    assert snap["exact"] and snap["run"]["status"] == "RUNNING" and len(snap["run"]["messages"]) == 3
    assert snap["run"]["messages"][1]["tool_calls"][0]["name"] == "lookup"
    text = qvc_cli("--repo", str(path), "timeline", "cli-run")
    assert text.returncode == 0 and "COMPLETED" in text.stdout
    log = qvc_cli("--repo", str(path), "log", "--all")
    assert log.returncode == 0 and "run/agno-session/cli-run" in log.stdout
    first, last = json.loads(tl.stdout)[0]["id"], json.loads(tl.stdout)[-1]["id"]
    diff = qvc_cli("--repo", str(path), "diff", "--json", first, last)
    assert diff.returncode == 0, diff.stderr
    changed = {d["field"]: d for d in json.loads(diff.stdout)}  # the run as a conversation, not its segments
    assert {"status", "content", "messages"} <= set(changed) and not any(f.startswith("log.") for f in changed)
    assert changed["messages"]["summary"] == "3 messages added, 1 tool call made"
    raw = qvc_cli("--repo", str(path), "diff", "--json", "--raw", first, last)
    changed = {d["field"] for d in json.loads(raw.stdout)}
    assert {"status", "content", "log.00000001", "log.00000002"} <= changed and "log.00000000" not in changed
    by_run = qvc_cli("--repo", str(path), "diff", "--json", "cli-run@3", "cli-run@6")
    assert by_run.returncode == 0, by_run.stderr
    assert json.loads(by_run.stdout) == json.loads(diff.stdout)
    between = qvc_cli("--repo", str(path), "diff", "--json", "cli-run@4", "cli-run@6")  # as `qvc show cli-run@4`:
    assert between.returncode == 0 and json.loads(between.stdout) == json.loads(diff.stdout)  # boundary 3
    fsck(path)


def test_qvc_serve_shows_agno_runs(tmp_path):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from qvc.server.app import create_app

    path = tmp_path / "r.qvc"
    run_agent(QvcDb(path), batches(2), "served", is_async=False)
    client = TestClient(create_app(path, read_only=True), base_url="http://127.0.0.1")
    listed = client.get("/api/runs").json()
    assert [(r["run_id"], r["status"]) for r in listed["runs"]] == [("served", "COMPLETED")]
    points = client.get("/api/runs/served/checkpoints").json()["checkpoints"]
    assert [p["message_index"] for p in points] == [3, 5, 6]
    snap = client.get(f"/api/runs/served/checkpoints/{points[0]['id']}").json()
    assert snap["run"]["status"] == "RUNNING" and len(snap["run"]["messages"]) == 3


# -- delegation, failures -------------------------------------------------------------------------------


def test_memories_without_other_raise_naming_what_to_pass(tmp_path):
    db = QvcDb(tmp_path / "r.qvc")
    with pytest.raises(NotStoredError, match="other=SqliteDb"):
        db.get_user_memories(user_id="u1")
    with pytest.raises(NotStoredError, match="memories"):
        asyncio.run(AsyncQvcDb(tmp_path / "a.qvc").get_user_memories(user_id="u1"))


def test_memories_with_other_go_to_the_other_database(tmp_path):
    from agno.db.schemas.memory import UserMemory

    other = SqliteDb(db_file=str(tmp_path / "m.db"))
    db = QvcDb(tmp_path / "r.qvc", other=other)
    db.upsert_user_memory(UserMemory(memory="likes tea", user_id="u1", memory_id="m1"))
    assert [m.memory for m in db.get_user_memories(user_id="u1")] == ["likes tea"]
    assert [m.memory for m in other.get_user_memories(user_id="u1")] == ["likes tea"]
    assert db.table_exists(db.session_table_name)


def test_a_failed_checkpoint_is_logged_and_recorded_for_qvc_status(tmp_path, caplog):
    path = tmp_path / "r.qvc"
    db = QvcDb(path)
    out = run_agent(db, batches(1), "bad@id", is_async=False)  # '@' cannot be in a qvc run id
    assert out.status is RunStatus.completed  # agno only logs database failures
    assert any("upsert_run of run bad@id failed in" in r.getMessage() and r.levelname == "ERROR"
               for r in caplog.records)
    failures = recorded_failures(str(path))
    assert failures and failures[-1]["run_id"] == "bad@id" and "InvalidInputError" in failures[-1]["cause"]
    status = qvc_cli("--repo", str(path), "status", "--json")
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    assert report["failures"] == len(failures) and report["last_failures"][-1]["run_id"] == "bad@id"
    text = qvc_cli("--repo", str(path), "status")
    assert "checkpoint failure" in text.stdout and "bad@id" in text.stdout
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from qvc.server.app import create_app

    served = TestClient(create_app(path, read_only=True), base_url="http://127.0.0.1").get("/api/repository").json()
    assert served["failures"] == len(failures) and served["last_failures"][-1]["run_id"] == "bad@id"


def test_sessions_filter_sort_and_page_as_sqlitedb(tmp_path):
    from agno.session import AgentSession, TeamSession

    ours, theirs = QvcDb(tmp_path / "r.qvc"), SqliteDb(db_file=str(tmp_path / "s.db"))
    for i in range(7):
        cls = AgentSession if i % 3 else TeamSession
        extra = {"agent_id": f"a{i % 2}"} if cls is AgentSession else {"team_id": "t"}
        s = cls(session_id=f"s{i}", user_id=f"u{i % 2}", created_at=1000 + i,
                session_data={"session_name": f"name {i}"}, **extra)
        for db in (ours, theirs):
            db.upsert_session(s)
    queries = [dict(), dict(user_id="u1"), dict(session_type="agent"), dict(component_id="a1", session_type="agent"),
               dict(sort_by="created_at", sort_order="asc", limit=3, page=2), dict(sort_by="created_at", limit=2),
               dict(session_name="name 4"), dict(start_timestamp=1002, end_timestamp=1005, sort_by="created_at")]
    from agno.db.base import SessionType
    for q in queries:
        if "session_type" in q:
            q["session_type"] = SessionType(q["session_type"])
        a, n = ours.get_sessions(deserialize=False, **q)
        b, m = theirs.get_sessions(deserialize=False, **q)
        key = (lambda r: r["session_id"]) if "sort_by" not in q else None
        ids_a = [r["session_id"] for r in (sorted(a, key=key) if key else a)]
        ids_b = [r["session_id"] for r in (sorted(b, key=key) if key else b)]
        assert (ids_a, n) == (ids_b, m), q
    renamed = ours.rename_session("s1", None, "renamed")
    assert renamed.session_data["session_name"] == "renamed"
    assert ours.delete_session("s1") and ours.get_session("s1") is None
    assert not ours.delete_session("s1")


def test_the_agno_sample_runs(tmp_path):
    proc = subprocess.run([sys.executable, str(Path(ROOT, "samples", "agno_agent.py")), "--repo",
                           str(tmp_path / "s.qvc"), "--delay", "0.4"], env=child_env(), capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAIL" not in proc.stdout and "  ok    " in proc.stdout and "$ qvc timeline" in proc.stdout
    fsck(tmp_path / "s.qvc")


# -- 6. AgentOS's checkpoint routes over QvcDb -------------------------------------------------------------


def test_agentos_checkpoint_routes_over_qvcdb(tmp_path):
    pytest.importorskip("multipart")
    from agno.os import AgentOS
    from fastapi.testclient import TestClient

    db = QvcDb(tmp_path / "r.qvc")
    agent = make_agent(db, batches(2))
    agent.id = "a1"
    agent.run("go", run_id="r1")
    client = TestClient(AgentOS(agents=[agent], db=db, telemetry=False).get_app())
    listed = client.get("/agents/a1/runs/r1/checkpoints", params={"session_id": SESSION})
    assert listed.status_code == 200, listed.text
    points = listed.json()["checkpoints"]
    assert [p["message_index"] for p in points] == [3, 5, 6] and points[-1]["is_latest"]
    snap = client.get("/agents/a1/runs/r1/checkpoints/3", params={"session_id": SESSION})
    assert snap.status_code == 200, snap.text
    assert len(snap.json()["snapshot"]["messages"]) == 3
    assert client.get("/agents/a1/runs/r1/checkpoints/99", params={"session_id": SESSION}).status_code == 400
    sessions = client.get("/sessions", params={"type": "agent"})
    assert sessions.status_code == 200 and [s["session_id"] for s in sessions.json()["data"]] == [SESSION]
    runs = client.get(f"/sessions/{SESSION}/runs", params={"type": "agent"})
    assert runs.status_code == 200 and [r["run_id"] for r in runs.json()] == ["r1"]


def test_the_index_sees_what_another_writer_did_at_once(tmp_path):
    from agno.session import AgentSession

    path = tmp_path / "r.qvc"
    reader, writer = QvcDb(path), QvcDb(path)  # two databases, as two processes: no shared cache
    writer.upsert_session(AgentSession(session_id="first", agent_id="a"))
    assert [s.session_id for s in reader.get_sessions()] == ["first"]
    assert reader.get_run("r-new") is None
    for i in range(3):  # each change right after the previous read, within one clock tick
        writer.upsert_session(AgentSession(session_id=f"s{i}", agent_id="a"))
        assert len(reader.get_sessions()) == 2 + i
    run_agent(writer, batches(1), "r-new", is_async=False)
    assert reader.get_run("r-new").status is RunStatus.completed
    assert [r.run_id for r in reader.get_session(SESSION).runs] == ["r-new"]
    assert writer.delete_session(SESSION)
    assert reader.get_run("r-new") is None and reader.get_session(SESSION) is None
    assert reader.index.scans >= 3


def test_team_and_workflow_sessions_read_back_as_sqlitedb_returns_them(tmp_path):
    from agno.agent import Agent
    from agno.db.base import SessionType
    from agno.team import Team
    from agno.workflow import Step, Workflow
    from agno.workflow.types import StepOutput

    from qvc.integrations.agno.scripted import ScriptedModel
    from tests.workers.agno_worker import lookup

    db = MirrorDb(tmp_path / "r.qvc", SqliteDb(db_file=str(tmp_path / "a.db")))
    member = Agent(id="member", name="member", model=ScriptedModel(script=["hi"]), telemetry=False)
    team = Team(id="team", members=[member], model=ScriptedModel(script=batches(2)), tools=[lookup], db=db,
                checkpoint="tool-batch", session_id="team-session", telemetry=False)
    assert team.run("go", run_id="team-run").status is RunStatus.completed
    assert db.compared == 3  # two tool batches and the end, each compared with SqliteDb's answer
    session = db.get_session("team-session", session_type=SessionType.TEAM)
    assert type(session).__name__ == "TeamSession" and [r.run_id for r in session.runs] == ["team-run"]
    assert [e.status.value for e in timeline(tmp_path / "r.qvc", "team-run")] == ["RUNNING", "RUNNING", "COMPLETED"]

    flow = Workflow(id="flow", name="flow", db=db, session_id="flow-session", telemetry=False,
                    steps=[Step(name="only", executor=lambda step_input: StepOutput(content="done"))])
    assert flow.run("go", run_id="flow-run").status is RunStatus.completed
    session = db.get_session("flow-session", session_type=SessionType.WORKFLOW)
    assert type(session).__name__ == "WorkflowSession" and [r.run_id for r in session.runs] == ["flow-run"]
    fsck(tmp_path / "r.qvc")


def test_durability_and_a_refused_session_write(tmp_path):
    from agno.session import AgentSession

    assert QvcDb(tmp_path / "a.qvc", durability="async").store.durability.value == "async"
    db = QvcDb(tmp_path / "r.qvc")
    assert db.store.durability.value == "sync"
    db.upsert_session(AgentSession(session_id="owned", user_id="alice"))
    assert db.upsert_session(AgentSession(session_id="owned", user_id="mallory")) is None  # as SqliteDb
    assert db.get_session("owned").user_id == "alice"
    failure = recorded_failures(db.path)[-1]
    assert failure["operation"] == "upsert_session" and "alice" in failure["cause"]  # not silent (agno #7986)


def test_a_paused_run_resolved_and_continued_reads_back_as_sqlitedb_returns_it(tmp_path):
    from agno.agent import Agent
    from agno.tools import tool

    from qvc.integrations.agno.scripted import ScriptedModel

    @tool(requires_confirmation=True)
    def wire(amount: int) -> str:
        """Wire money (needs a human's confirmation)."""
        return f"wired {amount}"

    db = MirrorDb(tmp_path / "r.qvc", SqliteDb(db_file=str(tmp_path / "a.db")))
    agent = Agent(model=ScriptedModel(script=[[("wire", {"amount": 5})], "sent"]), db=db, tools=[wire],
                  checkpoint="tool-batch", session_id="hitl", telemetry=False)
    paused = agent.run("pay", run_id="p1")
    assert paused.status is RunStatus.paused and db.get_run("p1").tools[0].requires_confirmation
    for requirement in paused.active_requirements:
        requirement.confirm()
    done = agent.continue_run(run_id="p1", requirements=paused.requirements, session_id="hitl")
    assert done.status is RunStatus.completed and db.get_run("p1").tools[0].result == "wired 5"
    assert db.compared == 3  # every write compared with SqliteDb's answer, the changed tool execution included
    assert [(e.status.value, e.reason) for e in timeline(tmp_path / "r.qvc", "p1")] == \
           [("RUNNING", "tool-batch"), ("PAUSED", "paused"), ("COMPLETED", "end")]
    fsck(tmp_path / "r.qvc")
