"""QvcStorage and QvcSessionManager (qvc.integrations.strands): Strands Agents' ``Storage`` protocol and
``SessionRepository`` on a qvc repository.

The Storage contract (bytes round-trip, keys normalized and refused as Strands' own backends do,
overwrite, delete, prefix listing, search), each agent's snapshots as one thread (the latest and the
immutable history as checkpoints on its line, deletes as qvc's), two processes writing at once;
Strands' own ``Agent`` loop driven offline by a scripted model (qvc/integrations/strands/scripted.py)
through ``SnapshotSessionManager`` and ``RepositorySessionManager``: tool steps and the
checkpoints they give, time travel to an immutable snapshot, a fork, a Graph, a resume from the
repository alone in a new process, and (slow tier) a process SIGKILLed mid-turn; the command line
showing a session as a conversation; and the adapter kit (adapter_kit.py)."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List

import pytest

pytest.importorskip("strands")

from adapter_kit import AdapterDriver, AdapterKit, Operation  # noqa: E402
from helpers import QVC, child_env, fsck, invoke, run_git, slow_enabled, without  # noqa: E402
from strands import Agent  # noqa: E402
from strands.agent.conversation_manager import NullConversationManager  # noqa: E402
from strands.multiagent import GraphBuilder  # noqa: E402
from strands.session import RepositorySessionManager, SnapshotSessionManager  # noqa: E402
from strands.storage import InMemoryStorage  # noqa: E402
from strands.types.exceptions import SessionException, StorageError  # noqa: E402
from strands.types.session import Session, SessionAgent, SessionMessage, SessionType  # noqa: E402

from qvc import CheckpointConfig, GitCheckpointStore  # noqa: E402
from qvc.errors import (  # noqa: E402
    CheckpointConflictError,
    InvalidInputError,
    StoreClosedError,
    UnknownCheckpointError,
    UnknownThreadError,
)
from qvc.integrations.strands import (  # noqa: E402
    QvcSessionManager,
    QvcSessionRepository,
    QvcStorage,
    place_of,
    repository_thread,
    snapshot_thread,
)
from qvc.integrations.strands.layout import place_of_thread  # noqa: E402
from qvc.integrations.strands.scripted import ScriptedModel, lookup  # noqa: E402

A1 = snapshot_thread("s1", "agent", "a1")


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def latest_key(session: str, agent: str, namespace: str = "session") -> str:
    return f"{namespace}/{session}/scopes/agent/{agent}/snapshots/snapshot_latest.json"


def line(store: GitCheckpointStore, thread: str) -> list:
    """The thread's checkpoints on its line, oldest first (the tuples)."""
    return list(reversed(list(store.list(CheckpointConfig(thread)))))


def agent(model: ScriptedModel, manager: Any, agent_id: str = "a1", **more: Any) -> Agent:
    return Agent(model=model, tools=[lookup], session_manager=manager, agent_id=agent_id, callback_handler=None,
                 **more)


def snapshots(storage: Any, session: str, **more: Any) -> SnapshotSessionManager:
    """A SnapshotSessionManager that saves after every message and keeps each turn as an immutable snapshot."""
    return SnapshotSessionManager(session, storage=storage, save_latest_on="message",
                                  snapshot_trigger=lambda **kw: True, **more)


def texts(messages: List[Dict[str, Any]]) -> List[str]:
    return [b["text"] for m in messages for b in m["content"] if "text" in b]


# -- import ----------------------------------------------------------------------------------------


def test_import_qvc_does_not_import_strands():
    """Nor do the viewer and the layout: ``qvc show`` reads a session without loading Strands."""
    code = ("import sys, qvc, qvc.store.viewers, qvc.integrations.strands, qvc.integrations.strands.viewer\n"
            "import qvc.integrations.strands.layout\n"
            "assert not any(m.split('.')[0] == 'strands' for m in sys.modules), 'Strands was imported'")
    subprocess.run([sys.executable, "-c", code], env=child_env(), check=True, timeout=60)


# -- the Storage protocol ----------------------------------------------------------------------------


SNAPSHOT = json.dumps({"scope": "agent", "schema_version": "1.0", "created_at": "2026-01-01T00:00:00Z",
                       "data": {"messages": [{"role": "user", "content": [{"text": "héllo ✓"}]}], "state": {"k": 1},
                                "system_prompt": None},
                       "app_data": {}}, ensure_ascii=False).encode()
VALUES = [
    SNAPSHOT,
    b'{"a": [1, 2.5, -0.0, 1e300, 123456789012345678901234567890, null, true], "b": {"": "x"}}',  # canonical JSON
    b'{"a":1}',  # JSON not written as Strands writes it: kept as text
    b'{"a": "\\ud800"}',  # a lone surrogate: JSON the store cannot hold as values
    b'{"data": {"snapshot": 1}}',  # a data key that is the envelope's name
    "plain text ✓".encode(),
    bytes(range(256)),  # not UTF-8
    b"",
]


def test_values_round_trip_byte_for_byte(tmp_path):
    with QvcStorage(tmp_path / "r.qvc") as s:
        for i, value in enumerate(VALUES):
            run(s.write(f"v/{i}", value))
            run(s.write(latest_key("s", f"a{i}"), value))
        for i, value in enumerate(VALUES):
            assert run(s.read(f"v/{i}")) == value, i
            assert run(s.read(latest_key("s", f"a{i}"))) == value, i
        fields = s.store.get_tuple(CheckpointConfig(snapshot_thread("s", "agent", "a0"))).checkpoint.state_data
        assert fields["messages"] == [{"role": "user", "content": [{"text": "héllo ✓"}]}]
        assert fields["state"] == {"k": 1}
        assert list(fields["snapshot"]["data"]) == ["messages", "state", "system_prompt"]
    with QvcStorage(tmp_path / "r.qvc") as s:  # and from a fresh process's view
        assert [run(s.read(f"v/{i}")) for i in range(len(VALUES))] == VALUES
    fsck(tmp_path / "r.qvc")


def test_the_storage_contract(tmp_path):
    """What Strands' own backends' tests ask of a Storage (InMemoryStorage's, LocalFileStorage's),
    side by side with InMemoryStorage."""
    with QvcStorage(tmp_path / "r.qvc") as s:
        for storage in (s, InMemoryStorage()):
            assert run(storage.read("nothing")) is None
            run(storage.delete("nothing"))  # a no-op
            assert run(storage.list("")) == []
            run(storage.write("key", b"first"))
            run(storage.write("key", b"second"))
            assert run(storage.read("key")) == b"second"
            run(storage.write("//foo///bar//", b"data"))
            assert run(storage.read("/foo/bar/")) == b"data"
            for key in ("b/2", "a/1", "sessions/a", "sessions/b", "sessions2/c"):
                run(storage.write(key, key.encode()))
            assert run(storage.list("")) == ["a/1", "b/2", "foo/bar", "key", "sessions/a", "sessions/b", "sessions2/c"]
            assert run(storage.list("sessions/")) == ["sessions/a", "sessions/b"]
            assert run(storage.list("//sessions")) == ["sessions/a", "sessions/b", "sessions2/c"]
            run(storage.delete("key"))
            assert run(storage.read("key")) is None
            for bad in ("", "///", "../etc/passwd", "a/../b", "a\\b"):
                with pytest.raises(StorageError):
                    run(storage.write(bad, b"x"))
            with pytest.raises(StorageError):
                run(storage.list("a/../b"))
            run(storage.write("dark-mode.md", b"enable dark mode in settings"))
            run(storage.write("deploy.md", b"deploy to production"))
            found = run(storage.search("dark mode"))
            assert [r.key for r in found] == ["dark-mode.md"] and found[0].data == b"enable dark mode in settings"
        with pytest.raises(InvalidInputError):  # qvc's typed error, and Strands' StorageError
            run(s.write("a/../b", b"x"))
        with pytest.raises(InvalidInputError):
            run(s.write("k", "not bytes"))  # type: ignore[arg-type]
        assert s.thread("/foo//bar") == "strands/storage/foo/bar"
        s.close()
        with pytest.raises(StoreClosedError):
            run(s.write("k", b"x"))
        with pytest.raises(StorageError):
            run(s.write("k", b"x"))


def test_an_agents_snapshots_are_one_thread_and_deletes_are_qvc_deletes(tmp_path):
    """The latest snapshot and the immutable history on one line; an immutable entry deleted drops
    its checkpoint, the latest deleted while entries remain drops every write of it, and a session's
    keys deleted together delete its threads in one transaction (the commits stay until a prune)."""
    path = tmp_path / "r.qvc"
    d = "session/s1/scopes/agent/a1/snapshots/"
    ids = ["01a24c38-ba7e-77ac-aed3-dd627743855f", "01a24c38-ba7e-77ac-aed3-dd6277438560"]
    with QvcStorage(path) as s:
        run(s.write(d + "snapshot_latest.json", b'"one"'))
        run(s.write(d + f"immutable_history/snapshot_{ids[0]}.json", b'"two"'))
        run(s.write(d + "snapshot_latest.json", b'"two"'))
        run(s.write(d + f"immutable_history/snapshot_{ids[1]}.json", b'"three"'))
        run(s.write(d + "snapshot_latest.json", b'"three"'))
        run(s.write("session/s1/scopes/agent/helper/snapshots/snapshot_latest.json", b'"h"'))
        run(s.write("notes/todo.md", b"- water the plants"))
        assert s.store.threads() == ["strands/session/s1/agent/a1", "strands/session/s1/agent/helper",
                                     "strands/storage/notes/todo.md"]
        cps = line(s.store, A1)
        assert [t.metadata.get("snapshot_id") for t in cps] == [None, ids[0], None, ids[1], None]
        assert [t.checkpoint.step for t in cps] == [0, 1, 2, 3, 4]
        assert run(s.list(d)) == [d + f"immutable_history/snapshot_{ids[0]}.json",
                                  d + f"immutable_history/snapshot_{ids[1]}.json", d + "snapshot_latest.json"]
        assert run(s.read(d + f"immutable_history/snapshot_{ids[0]}.json")) == b'"two"'

        run(s.delete(d + f"immutable_history/snapshot_{ids[0]}.json"))
        assert [t.metadata.get("snapshot_id") for t in line(s.store, A1)] == [None, None, ids[1], None]
        assert run(s.read(d + "snapshot_latest.json")) == b'"three"'
        run(s.delete(d + "snapshot_latest.json"))  # an immutable entry remains: the latest's writes go
        assert run(s.list(d)) == [d + f"immutable_history/snapshot_{ids[1]}.json"]
        assert run(s.read(d + "snapshot_latest.json")) is None
        run(s.write(d + "snapshot_latest.json", b'"four"'))
        assert [t.metadata.get("snapshot_id") for t in line(s.store, A1)] == [ids[1], None]

        heads = [s.store.head(t) for t in s.store.threads()]
        before = len(list(s.store.rewrites()))
        run(SnapshotSessionManager("s1", storage=s).delete_session())  # gathers one delete per key
        assert s.store.threads() == ["strands/storage/notes/todo.md"]  # not the session's
        assert run(s.list("session/")) == []
        assert len(list(s.store.rewrites())) == before + 1  # one transaction for the session's threads
        for head in heads:
            assert run_git(path, "cat-file", "-t", head).stdout.strip() == "commit"  # until qvc gc --prune
    fsck(path)


def test_keys_and_threads_read_back_both_ways():
    for key in (latest_key("s1", "a1"), "session/s1/scopes/agent/a1/snapshots/immutable_history/snapshot_x-1.json",
                "tenant/a%/b/s1/scopes/multiAgent/g/snapshots/snapshot_latest.json", "context/s1/x.json",
                "session/s1/scopes/agent/a1/snapshots/other.json"):
        place = place_of(key)
        back = place_of_thread(place.thread)
        assert back is not None and back.key(place.snapshot_id) == key if place.snapshot else back.directory == key
    assert place_of(latest_key("s1", "a1")).thread == "strands/session/s1/agent/a1"
    assert place_of("tenant/a%/b/s1/scopes/multiAgent/g/snapshots/snapshot_latest.json").thread == \
        "strands/snapshots/tenant%2Fa%25%2Fb/s1/multiAgent/g"
    assert place_of_thread("strands/session/s1/agent") is None and place_of_thread("other/x") is None
    assert place_of_thread("strands/storage/" + latest_key("s", "a")) is None  # not where such a key lives
    assert repository_thread("s1", "agent", "a1") == "strands/repository/s1/agent/a1"
    for bad in ("", "a/b", None):
        with pytest.raises(InvalidInputError):
            repository_thread(bad)  # type: ignore[arg-type]


WRITER = """
import asyncio, os, sys, time
from strands.types.session import SessionMessage
from qvc.integrations.strands import QvcSessionRepository, QvcStorage
key = "session/shared/scopes/agent/a/snapshots/snapshot_latest.json"
who, first = sys.argv[2], int(sys.argv[2] == "b")
async def main():
    with QvcStorage(sys.argv[1]) as s, QvcSessionRepository(sys.argv[1]) as repo:
        print("ready", flush=True)
        while not os.path.exists(sys.argv[3]):
            time.sleep(0.005)
        for i in range(15):
            await s.write(key, f'"{who}-{i}"'.encode())
            await s.write(f"notes/{who}", f'"{i}"'.encode())
            repo.create_message("r1", "a1", SessionMessage({"role": "user", "content": [{"text": who}]}, 2 * i + first))
asyncio.run(main())
"""


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    """Each storage write is a checkpoint: two processes writing one agent's latest snapshot at
    once leave every write on its line, in each process's order; their SessionRepository messages
    to one agent all land (each call reads and writes in one transaction)."""
    path = tmp_path / "r.qvc"
    with QvcSessionRepository(path) as repo:
        repo.create_session(Session("r1", SessionType.AGENT))
        repo.create_agent("r1", SessionAgent("a1", {}, {}))
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), who, str(go)], env=child_env(),
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for who in ("a", "b")]
    for p in procs:
        assert p.stdout.readline() == "ready\n", p.stderr.read()
    go.touch()  # both at once: their writes interleave
    for p in procs:
        assert p.wait(timeout=120) == 0, p.stderr.read()
    fsck(path)
    with QvcStorage(path) as s:
        thread = snapshot_thread("shared", "agent", "a")
        written = [t.checkpoint.state_data["value"] for t in line(s.store, thread)]
        assert len(written) == 30
        for who in ("a", "b"):
            assert [w for w in written if w.startswith(who)] == [f"{who}-{i}" for i in range(15)]
        assert json.loads(run(s.read(latest_key("shared", "a")))) == written[-1]
        assert run(s.read("notes/a")) == b'"14"' and len(line(s.store, "strands/storage/notes/b")) == 15
    with QvcSessionRepository(path) as repo:
        messages = repo.list_messages("r1", "a1")
        assert [m.message_id for m in messages] == list(range(30))
        assert [m.message["content"][0]["text"] for m in messages] == ["a", "b"] * 15
        assert len(line(repo.store, repository_thread("r1", "agent", "a1"))) == 31


# -- Strands' own Agent loop ---------------------------------------------------------------------------


def test_tool_steps_give_one_checkpoint_per_save_and_a_new_agent_resumes(tmp_path):
    """K tool steps with ``save_latest_on="message"``: the prompt, K calls, K results and the answer
    are each a save (2K + 2 checkpoints), then the turn's end is an immutable snapshot and a last
    save; a new agent on the session restores from the repository and carries on."""
    k = 3
    model = ScriptedModel()
    model.plan("Look up items 0 to 2.", calls=[("lookup", {"n": n}) for n in range(k)], answer="Found 0, 1 and 2.")
    model.plan("And item -1.", calls=[("lookup", {"n": -1})], answer="Item -1 does not exist.")
    with QvcStorage(tmp_path / "r.qvc") as s:
        manager = snapshots(s, "s1")
        first = agent(model, manager, system_prompt="Be brief.")
        assert str(first("Look up items 0 to 2.")).strip() == "Found 0, 1 and 2."
        cps = line(s.store, A1)
        assert len(cps) == 2 * k + 2 + 2
        assert [len(t.checkpoint.state_data["messages"]) for t in cps] == [*range(1, 2 * k + 3), 2 * k + 2, 2 * k + 2]
        assert [bool(t.metadata.get("snapshot_id")) for t in cps[-2:]] == [True, False]
        assert s.store.changed(s.store.head(A1)) == []  # the turn's end: one capture, written twice
        ids = run(manager.list_snapshot_ids(first))
        assert ids == [cps[-2].metadata["snapshot_id"]]

        again = agent(model, snapshots(s, "s1"))  # a new agent: restored from the repository
        assert again.messages == first.messages and again.system_prompt == "Be brief."
        assert str(again("And item -1.")).strip() == "Item -1 does not exist."
        assert "Look up items 0 to 2." in json.dumps(model.requests[-1])  # the history went to the model
        result = [b for m in again.messages for b in m["content"] if "toolResult" in b][-1]["toolResult"]
        assert result["status"] == "error"
        assert len(run(snapshots(s, "s1").list_snapshot_ids(again))) == 2
    fsck(tmp_path / "r.qvc")


def test_time_travel_to_an_immutable_snapshot_and_a_fork(tmp_path):
    """``restore_snapshot`` brings an agent back to a turn's end and it carries on (new checkpoints
    on the line); ``fork_session`` starts a new session from one's snapshot whose first checkpoint
    has the source's as parent, and a manager of the new session resumes there."""
    path = tmp_path / "r.qvc"
    model = ScriptedModel()
    for prompt in ("One.", "Two.", "Three.", "On the fork."):
        model.plan(prompt, calls=[("lookup", {"n": 1})], answer=f"Answer to {prompt}")
    with QvcStorage(path) as s:
        manager = snapshots(s, "s1")
        a = agent(model, manager)
        a("One.")
        a("Two.")
        first, second = run(manager.list_snapshot_ids(a))
        assert run(manager.restore_snapshot(a, snapshot_id=first)) is True
        assert texts(a.messages)[-1] == "Answer to One."
        a("Three.")
        assert texts(a.messages) == ["One.", "Answer to One.", "Three.", "Answer to Three."]
        again = agent(model, snapshots(s, "s1"))
        assert texts(again.messages) == texts(a.messages)
        with pytest.raises(ValueError):
            run(manager.restore_snapshot(a, snapshot_id="not-a-snapshot-id"))

        made = s.fork_session("s1", "s1-retry", snapshot_id=second)
        assert made == [snapshot_thread("s1-retry", "agent", "a1")]
        source = next(t for t in line(s.store, A1) if t.metadata.get("snapshot_id") == second)
        fork_head = s.store.head(made[0])
        assert s.store.get_tuple(CheckpointConfig(made[0])).checkpoint.parent_id == source.checkpoint.id
        run_git(path, "merge-base", "--is-ancestor", s.store.resolve(source.checkpoint.id), fork_head)
        branch = agent(model, snapshots(s, "s1-retry"))
        assert texts(branch.messages) == ["One.", "Answer to One.", "Two.", "Answer to Two."]
        branch("On the fork.")
        assert texts(agent(model, snapshots(s, "s1-retry")).messages)[-1] == "Answer to On the fork."
        assert texts(agent(model, snapshots(s, "s1")).messages)[-1] == "Answer to Three."  # the source is as it was
        with pytest.raises(CheckpointConflictError):
            s.fork_session("s1", "s1-retry")
        with pytest.raises(UnknownCheckpointError):
            s.fork_session("nothing", "s9")
    fsck(path)


def test_a_graph_and_an_agent_level_storage(tmp_path):
    """A Graph's state is a ``multiAgent`` snapshot thread; ``Agent(storage=QvcStorage(...))`` with a
    ``SnapshotSessionManager`` of no storage of its own stores there too."""
    model = ScriptedModel()
    model.plan("Plan a trip.", calls=[("lookup", {"n": 2})], answer="Planned.")
    with QvcStorage(tmp_path / "r.qvc") as s:
        builder = GraphBuilder()
        builder.add_node(agent(model, None, "planner"), "planner")
        builder.add_node(agent(model, None, "writer"), "writer")
        builder.add_edge("planner", "writer")
        builder.set_entry_point("planner")
        builder.set_graph_id("trip")
        builder.set_max_node_executions(5)
        builder.set_session_manager(SnapshotSessionManager("g1", storage=s))
        assert builder.build()("Plan a trip.").status.value == "completed"
        state = s.store.get_tuple(CheckpointConfig(snapshot_thread("g1", "multiAgent", "trip"))).checkpoint.state_data
        assert sorted(state["state"]["completed_nodes"]) == ["planner", "writer"]

        a = Agent(model=model, tools=[lookup], agent_id="solo", callback_handler=None, storage=s,
                  session_manager=SnapshotSessionManager("s2"))
        a("Plan a trip.")
        assert s.store.head(snapshot_thread("s2", "agent", "solo")) is not None

        team = s.namespace("team")  # a scoped view, as Strands' own backends give one
        b = Agent(model=model, tools=[lookup], agent_id="solo", callback_handler=None, storage=team,
                  session_manager=SnapshotSessionManager("s2"))
        assert b.messages == []  # not the unscoped session's
        b("Plan a trip.")
        assert run(team.list("")) == [latest_key("s2", "solo")]
        assert run(s.list("team/")) == ["team/" + latest_key("s2", "solo")]
        assert s.thread("team/" + latest_key("s2", "solo")) == "strands/snapshots/team%2Fsession/s2/agent/solo"
        assert [r.key for r in run(team.search("trip"))] == [latest_key("s2", "solo")]
        run(team.namespace("session").delete(latest_key("s2", "solo")[len("session/"):]))
        assert run(team.list("")) == [] and run(s.read(latest_key("s2", "solo"))) is not None


RESUME = """
import sys
from strands import Agent
from strands.session import SnapshotSessionManager
from qvc.integrations.strands import QvcSessionManager, QvcStorage
from qvc.integrations.strands.scripted import ScriptedModel, lookup
model = ScriptedModel()
model.plan("Again, seven.", calls=[("lookup", {"n": 7})], answer="Seven is still value 7.")
if sys.argv[2] == "snapshot":
    storage = QvcStorage(sys.argv[1])
    manager = SnapshotSessionManager("s1", storage=storage, save_latest_on="message")
else:
    storage = manager = QvcSessionManager("r1", sys.argv[1])
agent = Agent(model=model, tools=[lookup], session_manager=manager, agent_id="a1", callback_handler=None)
print(len(agent.messages), str(agent("Again, seven.")).strip())
print(" | ".join(b["text"] for m in model.requests[0] for b in m["content"] if "text" in b))
storage.close()
"""


@pytest.mark.parametrize("kind", ["snapshot", "repository"])
def test_a_session_resumes_from_the_repository_alone_in_a_new_process(tmp_path, kind):
    path = tmp_path / "r.qvc"
    model = ScriptedModel()
    model.plan("First look up seven.", calls=[("lookup", {"n": 7})], answer="Seven is value 7.")
    if kind == "snapshot":
        with QvcStorage(path) as s:
            agent(model, SnapshotSessionManager("s1", storage=s, save_latest_on="message"))("First look up seven.")
    else:
        with QvcSessionManager("r1", path) as manager:
            agent(model, manager)("First look up seven.")
    proc = subprocess.run([sys.executable, "-c", RESUME, str(path), kind], env=child_env(),
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    restored, answer = proc.stdout.splitlines()[0].split(" ", 1)
    assert restored == "4" and answer == "Seven is still value 7."
    assert proc.stdout.splitlines()[1] == "First look up seven. | Seven is value 7. | Again, seven."
    fsck(path)


# -- the SessionRepository ----------------------------------------------------------------------------


def test_the_session_repository_through_strands_own_manager(tmp_path):
    """``RepositorySessionManager`` on ``QvcSessionRepository``, and ``QvcSessionManager`` (the same
    on its own repository): each append and sync a checkpoint; Strands' repository rules (a session
    created once, updates of what exists keep its created_at, messages by id)."""
    path = tmp_path / "r.qvc"
    model = ScriptedModel()
    model.plan("Look up item 3.", calls=[("lookup", {"n": 3})], answer="Item 3 is value 3.")
    with QvcSessionRepository(path) as repo:
        a = agent(model, RepositorySessionManager("r1", session_repository=repo))
        a("Look up item 3.")
        thread = repository_thread("r1", "agent", "a1")
        cps = line(repo.store, thread)
        # Strands appends each message as it is added and syncs the agent when its state changed
        # (the conversation manager counts model calls)
        assert [(t.metadata["op"], t.metadata.get("message_id")) for t in cps] == [
            ("create_agent", None), ("create_message", 0), ("update_agent", None), ("create_message", 1),
            ("create_message", 2), ("update_agent", None), ("create_message", 3)]
        assert [len(t.checkpoint.state_data["messages"]) for t in cps] == [0, 1, 1, 2, 3, 3, 4]
        session = repo.read_session("r1")
        assert session.session_id == "r1" and session.session_type == SessionType.AGENT
        with pytest.raises(SessionException):
            repo.create_session(Session("r1", SessionType.AGENT))
        with pytest.raises(CheckpointConflictError):
            repo.create_session(Session("r1", SessionType.AGENT))
        messages = repo.list_messages("r1", "a1")
        assert [m.message_id for m in messages] == [0, 1, 2, 3]
        assert [m.message_id for m in repo.list_messages("r1", "a1", limit=2, offset=1)] == [1, 2]
        assert repo.read_message("r1", "a1", 3).to_message() == a.messages[3]
        assert repo.read_message("r1", "a1", 9) is None and repo.read_agent("r1", "nobody") is None

        created = messages[0].created_at
        redacted = SessionMessage({"role": "user", "content": [{"text": "[redacted]"}]}, 0)
        redacted.redact_message = {"role": "user", "content": [{"text": "[redacted]"}]}
        repo.update_message("r1", "a1", redacted)
        assert repo.read_message("r1", "a1", 0).created_at == created
        assert repo.read_message("r1", "a1", 0).to_message()["content"] == [{"text": "[redacted]"}]
        agent_before = repo.read_agent("r1", "a1")
        repo.update_agent("r1", SessionAgent("a1", {"k": "v"}, agent_before.conversation_manager_state,
                                             agent_before._internal_state))
        after = repo.read_agent("r1", "a1")
        assert after.state == {"k": "v"} and after.created_at == agent_before.created_at
        for call in (lambda: repo.update_agent("r1", SessionAgent("ghost", {}, {})),
                     lambda: repo.update_message("r1", "a1", SessionMessage({"role": "user", "content": []}, 99)),
                     lambda: repo.create_message("r1", "ghost", SessionMessage({"role": "user", "content": []}, 0)),
                     lambda: repo.list_messages("r1", "ghost")):
            with pytest.raises(UnknownThreadError):
                call()
        with pytest.raises(InvalidInputError):
            repo.read_agent("r1", "a/b")
        with pytest.raises(SessionException):
            repo.list_messages("r1", "a1", offset=-1)

    model.plan("And item 4.", calls=[("lookup", {"n": 4})], answer="Item 4 is value 4.")
    with QvcSessionManager("r1", path) as manager:
        again = agent(model, manager)
        assert texts(again.messages)[0] == "[redacted]" and again.state.get("k") == "v"
        again("And item 4.")
        assert len(manager.list_messages("r1", "a1")) == 8
        manager.delete_session("r1")
        assert manager.store.threads() == []
        with pytest.raises(UnknownThreadError):
            manager.delete_session("r1")
    fsck(path)


# -- the command line ------------------------------------------------------------------------------------


def test_the_command_line_shows_a_session_as_a_conversation(tmp_path):
    path = tmp_path / "r.qvc"
    model = ScriptedModel()
    model.plan("Look up 1 and -1.", calls=[("lookup", {"n": 1}), ("lookup", {"n": -1})], answer="Only 1.")
    with QvcStorage(path) as s:
        a = agent(model, snapshots(s, "s1"), system_prompt="Be brief.")
        a("Look up 1 and -1.")
        first = line(s.store, A1)[1].checkpoint.id
    repo = ("--repo", str(path), "--no-pager")
    shown = invoke(*repo, "show", A1).output
    assert '0 user: "Look up 1 and -1."' in shown and 'assistant: → lookup({"n": 1})' in shown, shown
    assert 'tool [lookup]: "value 1"' in shown and 'tool [lookup] (failed): "Error: item -1 does not exist"' in shown
    assert 'system_prompt (v1): "Be brief."' in shown and "snapshot (v" not in shown, shown
    doc = json.loads(invoke(*repo, "show", "--json", A1).output)["state"]
    assert doc["scope"] == "agent" and doc["system_prompt"] == "Be brief."
    msgs = doc["messages"]
    call = a.messages[1]["content"][0]["toolUse"]
    assert msgs[1] == {"role": "assistant", "content": "", "id": a.messages[1]["tracking_id"],
                       "tool_calls": [{"id": call["toolUseId"], "name": "lookup", "args": {"n": 1}}],
                       "usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15}}
    assert msgs[2] == {"role": "tool", "content": "value 1", "id": a.messages[2]["tracking_id"],
                       "tool_call_id": call["toolUseId"], "name": "lookup"}
    assert msgs[4]["error"] is True and "snapshot" not in doc and "created_at" not in doc
    diff = invoke(*repo, "diff", first, A1).output
    assert "messages added" in diff and '"Only 1."' in diff, diff
    patched = invoke(*repo, "log", "-p", "-n", "3", A1).output
    assert "1 message added" in patched and '+ messages[5] assistant: "Only 1."' in patched, patched
    blamed = invoke(*repo, "blame", "messages", A1).output
    assert len(blamed.strip().splitlines()) == 6, blamed
    raw = json.loads(invoke(*repo, "show", "--raw", "--json", A1).output)["state"]
    assert raw["snapshot"]["data"] == ["messages", "state", "conversation_manager_state", "interrupt_state",
                                       "system_prompt", "model_state"]
    bare = subprocess.run([*QVC, *repo, "show", A1], env=without(tmp_path, "strands"), capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)  # where Strands is not installed
    assert bare.returncode == 0 and "hint:" not in bare.stderr, bare.stderr  # nothing to show less fully
    messages = [x for x in shown.split("\n") if x.startswith("     ")]  # one line a message
    assert len(messages) == 6 and messages == [x for x in bare.stdout.split("\n") if x.startswith("     ")], bare


# -- the adapter kit ---------------------------------------------------------------------------------


@dataclass
class Handle:
    """A QvcStorage, the scripted model, and what the script made."""

    storage: QvcStorage
    model: ScriptedModel = field(default_factory=ScriptedModel)
    prompts: int = 0

    def turn(self, manager: Any, agent_id: str = "a1", steps: int = 1) -> Agent:
        self.prompts += 1
        prompt = f"Turn {self.prompts}."
        self.model.plan(prompt, calls=[("lookup", {"n": n}) for n in range(steps)], answer=f"Answer {self.prompts}.")
        a = agent(self.model, manager, agent_id)
        a(prompt)
        return a


def _time_travel(h: Handle) -> None:
    manager = snapshots(h.storage, "s1")
    a = agent(h.model, manager)
    first = run(manager.list_snapshot_ids(a))[0]
    run(manager.restore_snapshot(a, snapshot_id=first))
    h.turn(manager)


def _graph(h: Handle) -> None:
    h.model.plan("Plan a trip.", calls=[("lookup", {"n": 2})], answer="Planned.")
    builder = GraphBuilder()
    builder.add_node(agent(h.model, None, "planner"), "planner")
    builder.add_node(agent(h.model, None, "writer"), "writer")
    builder.add_edge("planner", "writer")
    builder.set_entry_point("planner")
    builder.set_graph_id("trip")
    builder.set_max_node_executions(5)
    builder.set_session_manager(SnapshotSessionManager("g1", storage=h.storage))
    builder.build()("Plan a trip.")


def _repository(session: str) -> Any:
    def op(h: Handle) -> None:
        manager = QvcSessionManager(session, store=h.storage.store)
        h.turn(manager)
    return op


class StrandsDriver(AdapterDriver):
    name = "strands"

    def open(self, path: Path) -> Handle:
        return Handle(QvcStorage(path))

    def close(self, handle: Handle) -> None:
        handle.storage.close()

    def script(self) -> List[Operation]:
        return [
            Operation("s1: a turn of two tool steps", lambda h: h.turn(snapshots(h.storage, "s1"), steps=2)),
            Operation("s1: a turn, restored", lambda h: h.turn(snapshots(h.storage, "s1"))),
            Operation("s1: back to the first snapshot, a turn", _time_travel),
            Operation("fork s1 -> s2", lambda h: h.storage.fork_session("s1", "s2")),
            Operation("s2: a turn on the fork", lambda h: h.turn(snapshots(h.storage, "s2"))),
            Operation("s3: two agents", lambda h: [h.turn(snapshots(h.storage, "s3"), a) for a in ("a1", "helper")]),
            Operation("s3: delete", lambda h: run(snapshots(h.storage, "s3").delete_session())),
            Operation("g1: a Graph", _graph),
            Operation("r1: a turn (SessionRepository)", _repository("r1")),
            Operation("r1: a turn, resumed", _repository("r1")),
            Operation("r2: a turn and a delete", lambda h: (_repository("r2")(h), QvcSessionRepository(
                store=h.storage.store).delete_session("r2"))),
            Operation("s1: another turn", lambda h: h.turn(snapshots(h.storage, "s1"), steps=2)),
        ]

    def lines(self, handle: Handle) -> Dict[str, List[str]]:
        store = handle.storage.store
        out = {}
        for thread in store.threads():
            if thread.startswith("strands/"):
                out[thread] = [info.checkpoint_id for info in store.first_parents(store.head(thread))
                               if info.thread_id == thread]
        return out

    def snapshot(self, handle: Handle) -> Any:
        s = handle.storage
        out: Dict[str, Any] = {key: run(s.read(key)) for key in run(s.list(""))}
        repo = QvcSessionRepository(store=s.store)
        for thread in s.store.threads():
            out[thread] = [(t.checkpoint.id, t.metadata, t.checkpoint.state_data)
                           for t in s.store.list(CheckpointConfig(thread))]
            parts = thread.split("/")
            if thread.startswith("strands/repository/") and len(parts) == 5:
                out[thread + " (agent)"] = (repo.read_agent(parts[2], parts[4]).to_dict(),
                                            [m.to_dict() for m in repo.list_messages(parts[2], parts[4])])
        return out

    def writer(self, path: Path) -> List[str]:
        return [sys.executable, "-c", KILLED, str(path), "0"]

    def check_acknowledged(self, handle: Handle, tokens: List[str]) -> None:
        data = run(handle.storage.read(latest_key("writer", "w")))
        said = texts(json.loads(data)["data"]["messages"]) if data else []
        for token in tokens:
            assert f"Turn {token}." in said and f"Answer {token}." in said, f"acknowledged turn {token} is lost"


# A child that runs turn after turn of Strands' agent loop on one session (one tool call each, every
# message saved as it is added), printing an ack once a turn returned; it resumes what earlier
# children (killed) left, whole (no sliding window). argv[2]: the model's latency in seconds.
KILLED = """
import sys, uuid
from strands import Agent
from strands.agent.conversation_manager import NullConversationManager
from strands.session import SnapshotSessionManager
from qvc.integrations.strands import QvcStorage
from qvc.integrations.strands.scripted import ScriptedModel, lookup
model = ScriptedModel(delay=float(sys.argv[2]))
storage = QvcStorage(sys.argv[1])
manager = SnapshotSessionManager("writer", storage=storage, save_latest_on="message")
agent = Agent(model=model, tools=[lookup], session_manager=manager, agent_id="w", callback_handler=None,
              conversation_manager=NullConversationManager())
print("restored", len(agent.messages))
while True:
    token = uuid.uuid4().hex[:8]
    model.plan(f"Turn {token}.", calls=[("lookup", {"n": 1})], answer=f"Answer {token}.")
    agent(f"Turn {token}.")
    print(f"ack {token}")
"""


class TestStrandsAdapter(AdapterKit):
    driver = StrandsDriver()


# -- a run killed mid-turn ---------------------------------------------------------------------------


@pytest.mark.slow  # kills of the real loop, a few seconds: the slow tier (the kit kills a writer in every run)
def test_a_run_killed_mid_turn_loses_nothing_acknowledged_and_resumes_from_qvc(tmp_path, request):
    """A process runs turn after turn of the real loop (a model with latency, so the kill lands
    mid-turn: between a message's save and the next); it is SIGKILLed at a random moment, three
    times, each run resuming what the one before left. Every acknowledged turn is in the repository,
    and a new agent carries on from it with that history."""
    if not slow_enabled(request.config):
        pytest.skip("slow: run with -m slow or QVC_SLOW=1")
    path = tmp_path / "k.qvc"
    acked: List[str] = []
    for _ in range(3):
        errors = tmp_path / "stderr"
        with open(errors, "w") as err:
            proc = subprocess.Popen([sys.executable, "-c", KILLED, str(path), "0.02"], env=child_env(),
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            restored = proc.stdout.readline()
            assert restored.startswith("restored "), errors.read_text()[-3000:]
            assert int(restored.split()[1]) >= 4 * len(acked)  # every acknowledged turn came back
            first = proc.stdout.readline()
            assert first.startswith("ack "), errors.read_text()[-3000:]
            time.sleep(random.uniform(0.0, 0.3))
            proc.send_signal(signal.SIGKILL)
            rest = proc.stdout.read()
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=60)
        assert proc.returncode == -signal.SIGKILL
        acked += [first[4:].strip()] + [x[4:] for x in rest.split("\n")[:-1] if x.startswith("ack ")]
        fsck(path)
    with QvcStorage(path) as s:
        said = texts(json.loads(run(s.read(latest_key("writer", "w"))))["data"]["messages"])
        for token in acked:
            assert f"Turn {token}." in said and f"Answer {token}." in said, token
        model = ScriptedModel()
        model.plan("After the kills.", answer="Still here.")
        a = Agent(model=model, tools=[lookup], agent_id="w", callback_handler=None,
                  conversation_manager=NullConversationManager(),
                  session_manager=SnapshotSessionManager("writer", storage=s))
        assert str(a("After the kills.")).strip() == "Still here."
        seen = json.dumps(model.requests[-1])
        assert all(f"Answer {token}." in seen for token in acked)


# -- the sample ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_sample_runs(tmp_path, request):
    if not slow_enabled(request.config):
        pytest.skip("about 2 seconds, a dozen processes: run with -m slow (or QVC_SLOW=1)")
    proc = subprocess.run([sys.executable, str(Path(__file__).parents[2] / "samples" / "strands_session.py"),
                           "--repo", str(tmp_path / "s.qvc")], env=child_env(), capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAIL" not in proc.stdout and "→ lookup" in proc.stdout, proc.stdout
    fsck(tmp_path / "s.qvc")
