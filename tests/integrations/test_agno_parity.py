"""QvcDb against SqliteDb on the same script, where a user of agno's db tests noticed a difference (issue 26):
metrics, cancel_pending_run, reassign_session_owner, db.id, AsyncQvcDb's delegation to ``other``,
run_index under concurrent writers (real processes), the config round trip, the default order of
get_sessions and a run for a session that does not exist. Real agno agents on qvc's scripted model."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import child_env, fsck

pytest.importorskip("agno.agent")
pytest.importorskip("sqlalchemy")

from agno.db.sqlite import AsyncSqliteDb, SqliteDb  # noqa: E402
from agno.run.agent import RunOutput  # noqa: E402
from agno.run.base import RunStatus  # noqa: E402
from agno.session import AgentSession  # noqa: E402

from qvc.errors import InvalidInputError  # noqa: E402
from qvc.integrations.agno import AsyncQvcDb, QvcDb, UnknownSessionError, db_from_dict  # noqa: E402
from qvc.runs import Runs  # noqa: E402
from tests.workers.agno_worker import batches, make_agent  # noqa: E402


def both(tmp_path, **qvc_kwargs):
    """A QvcDb and a SqliteDb, fresh, in ``tmp_path``."""
    return QvcDb(tmp_path / "r.qvc", **qvc_kwargs), SqliteDb(db_file=str(tmp_path / "a.db"))


def run_agent(db, session_id, run_id, k=1, user_id=None):
    return make_agent(db, batches(k), session_id).run("go", run_id=run_id, user_id=user_id)


def plain(record):
    """A metrics record without what differs by when and where it was written."""
    out = dict(record)
    for key in ("id", "created_at", "updated_at"):
        out.pop(key)
    return out


def canon(records):
    """Metrics records comparable whatever their order and key order."""
    return sorted(json.dumps(plain(r), sort_keys=True, default=str) for r in records)


# -- metrics ---------------------------------------------------------------------------------------------


def test_metrics_are_computed_from_qvcs_own_sessions_and_runs_as_sqlitedb_computes_them(tmp_path):
    # other= holds no sessions or runs: the metrics come from the repository's, not from it
    qvc = QvcDb(tmp_path / "r.qvc", other=SqliteDb(db_file=str(tmp_path / "other.db")))
    sqlite = SqliteDb(db_file=str(tmp_path / "a.db"))
    for db in (qvc, sqlite):
        run_agent(db, "s1", "s1-r1", user_id="alice")
        run_agent(db, "s1", "s1-r2", user_id="alice")
        run_agent(db, "s2", "s2-r1")
        run_agent(db, "s2", "s2-r2")
    ours, theirs = qvc.calculate_metrics(), sqlite.calculate_metrics()
    assert ours and canon(ours) == canon(theirs)
    (got, latest), (want, their_latest) = qvc.get_metrics(), sqlite.get_metrics()
    assert len(got) == 2 and latest is not None and their_latest is not None
    assert canon(got) == canon(want)
    alice = next(r for r in got if r["user_id"] == "alice")
    assert alice["agent_sessions_count"] == 1 and alice["agent_runs_count"] == 2 and alice["users_count"] == 1
    assert alice["model_metrics"] == [{"model_id": "scripted", "model_provider": "qvc", "count": 2}]
    assert [plain(r) for r in qvc.get_metrics(user_id="alice")[0]] == \
           [plain(r) for r in sqlite.get_metrics(user_id="alice")[0]]
    nobody = next(r for r in got if r["user_id"] is None)  # the unowned bucket, as SqliteDb returns it
    assert nobody["agent_runs_count"] == 2 and nobody["users_count"] == 0
    assert qvc.other.get_metrics()[0] == []  # nothing went to other=

    # a second calculation of today updates the same records (their ids stay), in a new object too
    run_agent(qvc, "s1", "s1-r3", user_id="alice")
    again = QvcDb(tmp_path / "r.qvc")
    redone = again.calculate_metrics()
    assert {r["id"] for r in redone} == {r["id"] for r in got}
    assert next(r for r in again.get_metrics(user_id="alice")[0])["agent_runs_count"] == 3
    fsck(tmp_path / "r.qvc")


def test_metrics_of_an_empty_database_are_none_and_empty_as_in_sqlitedb(tmp_path):
    qvc, sqlite = both(tmp_path)
    assert qvc.calculate_metrics() is None and sqlite.calculate_metrics() is None
    assert qvc.get_metrics() == sqlite.get_metrics() == ([], None)


def test_async_metrics(tmp_path):
    db = AsyncQvcDb(tmp_path / "r.qvc")
    asyncio.run(make_agent(db, batches(1), "s1").arun("go", run_id="r1"))

    async def main():
        return await db.calculate_metrics(), await db.get_metrics()

    computed, (rows, _) = asyncio.run(main())
    assert [r["agent_runs_count"] for r in computed] == [r["agent_runs_count"] for r in rows] == [1]


# -- cancel_pending_run and reassign_session_owner -------------------------------------------------------


def test_cancel_pending_run_returns_and_changes_what_sqlitedb_does(tmp_path):
    qvc, sqlite = both(tmp_path)
    for db in (qvc, sqlite):
        db.upsert_session(AgentSession(session_id="s", agent_id="a", user_id="alice"))
        db.upsert_run(RunOutput(run_id="pending", session_id="s", agent_id="a", status=RunStatus.pending), "s",
                      user_id="alice", run_index=0)
        db.upsert_run(RunOutput(run_id="running", session_id="s", agent_id="a", status=RunStatus.running,
                                content="half an answer"), "s", user_id="alice", run_index=1)
    steps = [  # (arguments, what both return)
        (dict(run_id="pending", session_id="s", reason="stale", user_id="alice", expected_status="RUNNING"), False),
        (dict(run_id="pending", session_id="s", reason="stale", user_id="mallory"), False),
        (dict(run_id="pending", session_id="other", reason="stale", user_id="alice"), False),
        (dict(run_id="nope", session_id="s", reason="stale", user_id="alice"), False),
        (dict(run_id="pending", session_id="s", reason="stale", user_id="alice"), True),
        (dict(run_id="pending", session_id="s", reason="again", user_id="alice"), False),
        (dict(run_id="running", session_id="s", reason="worker lost", user_id="alice", expected_status="RUNNING"),
         True),
    ]
    for kwargs, expected in steps:
        assert qvc.cancel_pending_run(**kwargs) is expected, kwargs
        assert sqlite.cancel_pending_run(**kwargs) is expected, kwargs
    for run_id, content in (("pending", "stale"), ("running", "half an answer")):
        ours, theirs = qvc.get_run(run_id), sqlite.get_run(run_id)
        assert ours.status is theirs.status is RunStatus.cancelled
        assert ours.content == theirs.content == content
        assert qvc.get_run(run_id, deserialize=False)["status"] == "CANCELLED"
    with pytest.raises(ValueError):
        sqlite.cancel_pending_run("running", session_id="s", reason="x", expected_status="COMPLETED")
    with pytest.raises(InvalidInputError):
        qvc.cancel_pending_run("running", session_id="s", reason="x", expected_status="COMPLETED")
    with Runs(str(tmp_path / "r.qvc")) as runs:  # a checkpoint of its own, the history kept
        assert [e.reason for e in runs.timeline("pending")][-1] == "cancelled"
        assert [e.status.value for e in runs.timeline("pending")] == ["PENDING", "CANCELLED"]


def test_reassign_session_owner_returns_and_changes_what_sqlitedb_does(tmp_path):
    qvc, sqlite = both(tmp_path)
    for db in (qvc, sqlite):
        run_agent(db, "s", "done", user_id="alice")
    before = {id(db): db.get_session("s").updated_at for db in (qvc, sqlite)}
    steps = [(dict(previous_user_id="bob", user_id="carol"), False),
             (dict(previous_user_id="alice", user_id="carol"), True),
             (dict(previous_user_id="alice", user_id="dave"), False),
             (dict(previous_user_id="carol", user_id=None), True),
             ]
    for kwargs, expected in steps:
        for db in (qvc, sqlite):
            assert db.reassign_session_owner("s", **kwargs) is expected, (db, kwargs)
            assert db.get_session("s").user_id == (None if expected and kwargs["user_id"] is None else
                                                    db.get_session("s").user_id)
    for db in (qvc, sqlite):
        assert db.get_session("s").user_id is None
        assert db.get_session("s").updated_at == before[id(db)]  # only the owner changed
        assert db.get_run("done").user_id == "alice"  # runs keep theirs, as in SqliteDb
        assert db.reassign_session_owner("missing", previous_user_id="alice", user_id="bob") is False
    # a session with a run in flight is not handed over
    for db in (qvc, sqlite):
        db.reassign_session_owner("s", previous_user_id=None, user_id="alice")
        db.upsert_run(RunOutput(run_id="live", session_id="s", agent_id="a", status=RunStatus.paused), "s",
                      user_id="alice", run_index=1)
        assert db.reassign_session_owner("s", previous_user_id="alice", user_id="bob") is False
        assert db.get_session("s").user_id == "alice"


# -- db.id and the config round trip ---------------------------------------------------------------------


def test_db_id_is_derived_from_the_repository_as_sqlitedbs_from_its_file(tmp_path):
    path = tmp_path / "r.qvc"
    first = QvcDb(path).id
    assert QvcDb(path).id == QvcDb(str(path)).id == first  # same repository: same id, object after object
    assert AsyncQvcDb(path).id == first
    assert QvcDb(tmp_path / "other.qvc").id != first
    assert QvcDb(path, id="mine").id == "mine"
    assert SqliteDb(db_file=str(tmp_path / "a.db")).id == SqliteDb(db_file=str(tmp_path / "a.db")).id
    code = "import sys; from qvc.integrations.agno import QvcDb; print(QvcDb(sys.argv[1]).id)"
    restarted = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                               env=child_env(), timeout=120, check=True).stdout.strip()
    assert restarted == first  # and after a restart


def test_to_dict_rebuilds_as_sqlitedbs_does(tmp_path):
    from agno.agent import Agent
    from agno.db.utils import db_from_dict as agno_db_from_dict
    from agno.registry import Registry

    qvc = QvcDb(tmp_path / "r.qvc", durability="async", other=SqliteDb(db_file=str(tmp_path / "m.db")))
    sqlite = SqliteDb(db_file=str(tmp_path / "a.db"))
    assert agno_db_from_dict(sqlite.to_dict()).to_dict() == sqlite.to_dict()
    rebuilt = db_from_dict(qvc.to_dict())  # qvc's db_from_dict: qvc's types and agno's
    assert isinstance(rebuilt, QvcDb) and rebuilt.to_dict() == qvc.to_dict()
    assert rebuilt.id == qvc.id and rebuilt.path == qvc.path and rebuilt.store.durability.value == "async"
    assert isinstance(rebuilt.other, SqliteDb) and rebuilt.other.id == qvc.other.id
    assert db_from_dict(sqlite.to_dict()).to_dict() == sqlite.to_dict()
    async_db = AsyncQvcDb(tmp_path / "r.qvc")
    again = db_from_dict(async_db.to_dict())
    assert isinstance(again, AsyncQvcDb) and again.to_dict() == async_db.to_dict()
    # agno's own db_from_dict knows only its types; a stored agent config finds QvcDb through the registry
    assert agno_db_from_dict(qvc.to_dict()) is None
    run_agent(qvc, "s", "r1")
    config = make_agent(qvc, batches(1), "s").to_dict()
    assert config["db"] == qvc.to_dict()
    del config["model"]  # qvc's scripted model is no provider agno can rebuild; the db is what is checked
    restarted = QvcDb(tmp_path / "r.qvc")  # a new process would build its own: the same id
    loaded = Agent.from_dict(config, registry=Registry(dbs=[restarted]))
    assert loaded.db is restarted
    assert [r.run_id for r in loaded.db.get_session("s").runs] == ["r1"]


# -- AsyncQvcDb and other= -------------------------------------------------------------------------------


@pytest.mark.parametrize("other_kind", ["sync", "async"])
def test_async_qvcdb_sends_other_tables_schema_versions_to_other(tmp_path, other_kind):
    other = SqliteDb(db_file=str(tmp_path / "m.db")) if other_kind == "sync" else \
        AsyncSqliteDb(db_file=str(tmp_path / "m.db"))
    db = AsyncQvcDb(tmp_path / "r.qvc", other=other)

    async def call(target, name, *args):
        result = getattr(target, name)(*args)
        return await result if inspect.isawaitable(result) else result

    async def main():
        table = db.memory_table_name
        before = await db.get_latest_schema_version(table)
        assert before == await call(other, "get_latest_schema_version", table)
        await db.upsert_schema_version(table, "2.9.0")
        assert await db.get_latest_schema_version(table) == "2.9.0"  # written to other, read from it
        assert await call(other, "get_latest_schema_version", table) == "2.9.0"
        assert await db.table_exists(db.session_table_name) and await db.table_exists(db.runs_table_name)
        assert await db.get_latest_schema_version(db.session_table_name) == db.sync.default_schema_version
        return before

    asyncio.run(main())
    # agno declares the component methods synchronous on AsyncBaseDb: they stay so
    assert not inspect.iscoroutinefunction(db.list_components)
    if other_kind == "sync":
        listed = db.list_components()
        assert not inspect.isawaitable(listed) and listed == other.list_components()
    else:  # AsyncSqliteDb has none, and says so at once, as on its own
        with pytest.raises(NotImplementedError, match="Component methods are not supported for async"):
            db.list_components()


# -- run_index under concurrent writers ------------------------------------------------------------------


#: A process writing N new runs of session ``s`` without a run_index (as agno's own recovery writes do).
WRITER = """
import os, sys, time
from agno.run.agent import RunOutput
from agno.run.base import RunStatus
kind, path, tag, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
if kind == "sqlite":
    from agno.db.sqlite import SqliteDb
    db = SqliteDb(db_file=path)
else:
    from qvc.integrations.agno import QvcDb
    db = QvcDb(path)
open(path + "." + tag + ".ready", "w").close()  # then start together with the other writer
while not os.path.exists(path + ".go"):
    time.sleep(0.01)
for i in range(n):
    db.upsert_run(RunOutput(run_id=f"{tag}-{i}", session_id="s", agent_id="a", status=RunStatus.completed), "s")
"""


@pytest.mark.parametrize("kind", ["qvc", "sqlite"])
def test_concurrent_writers_in_processes_give_unique_run_indexes(tmp_path, kind):
    path = str(tmp_path / ("r.qvc" if kind == "qvc" else "a.db"))
    db = SqliteDb(db_file=path) if kind == "sqlite" else QvcDb(path)
    db.upsert_session(AgentSession(session_id="s", agent_id="a"))
    db.upsert_session(AgentSession(session_id="warm", agent_id="a"))  # SqliteDb's tables exist before the race
    db.upsert_run(RunOutput(run_id="warm", session_id="warm", agent_id="a"), "warm", run_index=0)
    n = 10
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, kind, path, tag, str(n)], env=child_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for tag in ("p", "q")]
    deadline = time.monotonic() + 120
    while not all(os.path.exists(f"{path}.{tag}.ready") for tag in ("p", "q")):
        assert all(p.poll() is None for p in procs), [p.stderr.read().decode()[-2000:] for p in procs]
        assert time.monotonic() < deadline, "the writers never got ready"
        time.sleep(0.02)
    Path(path + ".go").touch()
    for p in procs:
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err.decode()[-2000:]
    rows, total = db.get_runs(session_id="s", deserialize=False)
    assert total == 2 * n
    assert sorted(r["run_index"] for r in rows) == list(range(2 * n))


def test_two_objects_in_one_process_give_unique_run_indexes(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    path = tmp_path / "r.qvc"
    first, second = QvcDb(path), QvcDb(path)
    first.upsert_session(AgentSession(session_id="s", agent_id="a"))

    def write(db, tag):
        for i in range(6):
            db.upsert_run(RunOutput(run_id=f"{tag}-{i}", session_id="s", agent_id="a", status=RunStatus.completed),
                          "s")

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(write, (first, second), ("a", "b")))
    rows, _ = QvcDb(path).get_runs(session_id="s", deserialize=False)
    assert sorted(r["run_index"] for r in rows) == list(range(12))
    assert [r["run_index"] for r in rows] == list(range(12))  # and in that order
    first.upsert_run(RunOutput(run_id="given", session_id="s", agent_id="a"), "s", run_index=40)  # as agno passes
    first.upsert_run(RunOutput(run_id="after", session_id="s", agent_id="a"), "s")
    assert first.get_run("after", deserialize=False)["run_index"] == 41  # after the largest, as SqliteDb


# -- get_sessions' default order and a run without its session ------------------------------------------


def test_get_sessions_without_sort_by_keeps_insertion_order_as_sqlitedb(tmp_path):
    qvc, sqlite = both(tmp_path)
    for db in (qvc, sqlite):
        for session_id, created in (("late", 3000), ("early", 1000), ("middle", 2000)):
            db.upsert_session(AgentSession(session_id=session_id, agent_id="a", created_at=created))
        run_agent(db, "by-agent", "r1")
        db.upsert_session(AgentSession(session_id="late", agent_id="a", created_at=3000,
                                       session_data={"session_name": "renamed"}))  # an update keeps its place
        db.delete_session("early")
        db.upsert_session(AgentSession(session_id="early", agent_id="a", created_at=1000))  # back, at the end
    order = ["late", "middle", "by-agent", "early"]
    assert [s.session_id for s in qvc.get_sessions()] == [s.session_id for s in sqlite.get_sessions()] == order
    assert [s.session_id for s in QvcDb(tmp_path / "r.qvc").get_sessions(limit=2, page=2)] == \
           [s.session_id for s in sqlite.get_sessions(limit=2, page=2)] == order[2:]
    assert [s.session_id for s in qvc.get_sessions(sort_by="created_at")] == \
           [s.session_id for s in sqlite.get_sessions(sort_by="created_at")]


def test_a_run_for_a_session_that_does_not_exist_is_refused_as_sqlitedb_refuses_it(tmp_path):
    from sqlalchemy.exc import IntegrityError

    qvc, sqlite = both(tmp_path)
    run = RunOutput(run_id="orphan", session_id="nowhere", agent_id="a", status=RunStatus.running)
    with pytest.raises(IntegrityError):
        sqlite.upsert_run(run, "nowhere")
    with pytest.raises(UnknownSessionError, match="session 'nowhere' is not stored"):
        qvc.upsert_run(run, "nowhere")
    assert qvc.get_run("orphan") is None and sqlite.get_run("orphan") is None
    for db in (qvc, sqlite):  # once the session is stored, the same run is accepted
        db.upsert_session(AgentSession(session_id="nowhere", agent_id="a"))
        db.upsert_run(run, "nowhere")
        assert db.get_run("orphan").status is RunStatus.running
        db.delete_session("nowhere")  # and its runs go with it, so a write after that is refused again
        assert db.get_run("orphan") is None
    with pytest.raises(UnknownSessionError):
        qvc.upsert_run(run, "nowhere")
    fsck(tmp_path / "r.qvc")


def test_agentos_metrics_page_over_qvcdb_shows_what_it_shows_over_sqlitedb(tmp_path):
    pytest.importorskip("multipart")
    from agno.os import AgentOS
    from fastapi.testclient import TestClient

    pages = []
    for db in both(tmp_path):
        agent = make_agent(db, batches(1), "s1")
        agent.id = "a1"
        for session_id, run_id in (("s1", "r1"), ("s1", "r2"), ("s2", "r3"), ("s2", "r4")):
            agent.run("go", session_id=session_id, run_id=run_id)
        client = TestClient(AgentOS(agents=[agent], db=db, telemetry=False).get_app())
        refreshed = client.post("/metrics/refresh")
        assert refreshed.status_code == 200, refreshed.text
        got = client.get("/metrics", params={"db_id": db.id})
        assert got.status_code == 200, got.text
        pages.append(got.json()["metrics"])
    ours, theirs = pages
    assert ours and canon(ours) == canon(theirs)
    assert ours[0]["agent_runs_count"] == 4 and ours[0]["agent_sessions_count"] == 2
