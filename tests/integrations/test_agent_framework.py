"""QvcCheckpointStorage (qvc.integrations.agent_framework): Microsoft Agent Framework's workflow
``CheckpointStorage`` on a qvc repository.

The storage protocol's contracts (round trips, caller-owned copies, filters, unknown ids, deletes,
refusals); the framework's own workflow loop, offline (plain executors, qvc/integrations/agent_framework/
scripted.py): K tool steps give K + 3 checkpoints whose git parents are the framework's previous
checkpoints, a resume from an older checkpoint in a new process from the repository alone (qvc's time
travel, nothing lost), a human-in-the-loop request answered in another process, a fork into a
workflow of another name; the command line showing a checkpoint as a superstep; the adapter kit
(adapter_kit.py); and (slow tier) a process killed mid-workflow that resumes from the last checkpoint
it acknowledged. The framework's own storage tests are run by hand with agent_framework_suite_plugin.py
(docs/agent-framework.md)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Set

import pytest

pytest.importorskip("agent_framework")

from adapter_kit import AdapterDriver, AdapterKit, Operation  # noqa: E402
from agent_framework import (  # noqa: E402
    InMemoryCheckpointStorage,
    WorkflowCheckpoint,
    WorkflowCheckpointException,
    WorkflowEvent,
    WorkflowMessage,
    WorkflowRunState,
)
from helpers import child_env, fsck, qvc, qvc_json, run_git, slow_enabled  # noqa: E402

from qvc import CheckpointConfig, GitCheckpointStore  # noqa: E402
from qvc.errors import CheckpointConflictError, InvalidInputError, SerializationError, UnknownCheckpointError  # noqa: E402
from qvc.integrations.agent_framework import QvcCheckpointStorage, workflow_of, workflow_thread  # noqa: E402
from qvc.integrations.agent_framework.scripted import NAME, Draft, Task, build_workflow  # noqa: E402

ROOT = Path(__file__).parents[2]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def cp(name: str = "wf", **fields: Any) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(workflow_name=name, graph_signature_hash="h", **fields)


@dataclass
class Unregistered:
    value: int


@dataclass
class Note:
    text: str
    at: dt.datetime
    tags: List[str] = field(default_factory=list)


# -- import ----------------------------------------------------------------------------------------


def test_import_qvc_does_not_import_the_framework():
    """Nor does the viewer: ``qvc show`` reads a workflow checkpoint without loading the framework."""
    code = ("import sys, qvc, qvc.store.viewers, qvc.integrations.agent_framework.viewer\n"
            "assert not any(m.split('.')[0] == 'agent_framework' for m in sys.modules), 'the framework was imported'")
    subprocess.run([sys.executable, "-c", code], env=child_env(), check=True, timeout=60)


# -- the protocol's contracts ----------------------------------------------------------------------


def test_a_checkpoint_round_trips_with_every_kind_of_value_and_its_fields_are_readable(tmp_path):
    from agent_framework import register_checkpoint_type

    register_checkpoint_type(Note)
    when = dt.datetime(2026, 1, 2, 3, 4, 5, 678, tzinfo=dt.timezone.utc)
    note = Note("hi", when, ["a"])
    request = WorkflowEvent.request_info("r1", "writer", Draft("t", "text"), str)
    original = cp(
        messages={"a": [WorkflowMessage(data={"n": 1, "t": (1, "x")}, source_id="a", target_id="b"),
                        WorkflowMessage(data=note, source_id="a")], "b": [], "c": [{"plain": "dict"}]},
        state={"user": {"big": 2**70, "f": 0.5, "none": None, "b": b"\x00\xff", "s": {1, 2}, "fs": frozenset("ab"),
                        "when": when, "naive": dt.datetime(2026, 1, 1), "d": dt.date(2026, 1, 1),
                        "td": dt.timedelta(seconds=3), "k": {1: "int key", (1, 2): "tuple key", "": "empty"}},
               "note": note, "markers": {"__type__": "not an envelope"}, "a/b%": 1, "": 2,
               "_executor_state": {"w": {"calls": 2}},
               "_edge_state": {"fan-in": {"a": [1]}}},
        pending_request_info_events={"r1": request}, iteration_count=7, metadata={"superstep": 7},
        previous_checkpoint_id=None, version="1.0")
    with QvcCheckpointStorage(tmp_path / "r.qvc") as s:
        assert run(s.save(original)) == original.checkpoint_id
        loaded = run(s.load(original.checkpoint_id))
        for name in ("workflow_name", "graph_signature_hash", "checkpoint_id", "previous_checkpoint_id", "timestamp",
                     "messages", "state", "iteration_count", "metadata", "version"):
            assert getattr(loaded, name) == getattr(original, name), name
        assert type(loaded.state["user"]["s"]) is set and type(loaded.state["user"]["k"][(1, 2)]) is str
        event = loaded.pending_request_info_events["r1"]
        assert type(event) is WorkflowEvent and vars(event) == vars(request)
        fields = s.store.read(s.store.resolve(original.checkpoint_id)).checkpoint.state_data
        assert set(fields) == {"messages", "state/user", "state/note", "state/markers", "state/a/b%", "state/",
                               "executor_states", "edge_state", "pending_requests", "iteration", "graph_signature",
                               "metadata", "checkpoint"}
        assert fields["state/user"]["when"] == when and fields["iteration"] == 7  # stored as they are
        assert fields["state/note"]["__type__"].endswith(":Note")  # the framework's envelope
        assert fields["state/markers"]["__type__"] == "builtins:dict"  # marker keys: pickled, as the framework does
        assert fields["messages"]["a"][0] == {"message": {"data": {"n": 1, "t": (1, "x")}, "source_id": "a",
                                                          "target_id": "b", "type": "standard", "trace_contexts": None,
                                                          "source_span_ids": None, "original_request_info_event": None}}
        assert fields["executor_states"] == {"w": {"calls": 2}} and "state/_executor_state" not in fields
    fsck(tmp_path / "r.qvc")


def test_reads_are_caller_owned_and_saves_snapshot_at_call_time(tmp_path):
    with QvcCheckpointStorage(tmp_path / "r.qvc") as s:
        one = cp(state={"nested": {"deep": ["original"]}, "s": {1}},
                 messages={"x": [WorkflowMessage(data=["original"], source_id="x")]})
        run(s.save(one))
        one.state["nested"]["deep"][0] = "mutated"
        for read in (lambda: run(s.load(one.checkpoint_id)), lambda: run(s.get_latest(workflow_name="wf")),
                     lambda: run(s.list_checkpoints(workflow_name="wf"))[0]):
            got = read()
            assert got.state["nested"]["deep"] == ["original"]
            got.state["nested"]["deep"].append("mutated")
            got.state["s"].add(2)
            got.messages["x"][0].data.append("mutated")
        again = run(s.load(one.checkpoint_id))
        assert again.state == {"nested": {"deep": ["original"]}, "s": {1}}
        assert again.messages["x"][0].data == ["original"]


def test_lists_filter_by_workflow_and_unknown_names_and_ids_read_as_nothing(tmp_path):
    with QvcCheckpointStorage(tmp_path / "r.qvc") as s:
        a1, b1 = cp("a/1%"), cp("b")
        a2 = cp("a/1%", previous_checkpoint_id=a1.checkpoint_id)
        for c in (a1, b1, a2):
            run(s.save(c))
        assert run(s.list_checkpoint_ids(workflow_name="a/1%")) == [a1.checkpoint_id, a2.checkpoint_id]
        assert [c.checkpoint_id for c in run(s.list_checkpoints(workflow_name="b"))] == [b1.checkpoint_id]
        assert run(s.get_latest(workflow_name="a/1%")).checkpoint_id == a2.checkpoint_id
        assert run(s.get_latest(workflow_name="unknown")) is None
        assert run(s.list_checkpoints(workflow_name="unknown")) == [] == run(s.list_checkpoint_ids(workflow_name="c"))
        thread = s.thread("a/1%")
        assert thread == "maf/workflow/a%2F1%25" == workflow_thread("a/1%") and workflow_of(thread) == "a/1%"
        sha = s.store.resolve(a1.checkpoint_id)
        for unknown in ("nonexistent-id", sha, sha[:12], a1.checkpoint_id[:8], ""):
            with pytest.raises(WorkflowCheckpointException) as raised:
                run(s.load(unknown))  # an id only: not the commit's SHA, nor a prefix
            assert isinstance(raised.value, UnknownCheckpointError)
            assert run(s.delete(unknown)) is False
        with pytest.raises(InvalidInputError):
            run(s.list_checkpoints(workflow_name=""))


def test_a_checkpoint_with_no_previous_extends_the_thread_and_a_deleted_previous_is_kept_as_named(tmp_path):
    with QvcCheckpointStorage(tmp_path / "r.qvc") as s:
        first = cp()
        fresh = cp()  # a new run of a new workflow object names no previous checkpoint
        run(s.save(first))
        run(s.save(fresh))
        head = s.store.commit_info(s.store.head(s.thread("wf")))
        assert s.store.commit_info(head.parent).checkpoint_id == first.checkpoint_id
        assert run(s.load(fresh.checkpoint_id)).previous_checkpoint_id is None
        shown = qvc_json("--repo", str(s.path), "show", s.thread("wf"))["state"]
        assert shown["previous_checkpoint_id"] is None  # the viewer says it is not the parent
        assert run(s.delete(fresh.checkpoint_id)) is True
        after = cp(previous_checkpoint_id=fresh.checkpoint_id)
        run(s.save(after))
        assert run(s.load(after.checkpoint_id)).previous_checkpoint_id == fresh.checkpoint_id
        assert s.store.commit_info(s.store.commit_info(s.store.head(s.thread("wf"))).parent).checkpoint_id == \
            first.checkpoint_id


def test_delete_is_a_qvc_delete(tmp_path):
    """Children are re-parented onto the deleted checkpoint's parent (ids, contents and the framework's
    own previous_checkpoint_id stay); the bytes stay until a prune; the last one takes the thread."""
    path = tmp_path / "r.qvc"
    with QvcCheckpointStorage(path) as s:
        a = cp(state={"n": 1})
        b = cp(state={"n": 2}, previous_checkpoint_id=a.checkpoint_id)
        c = cp(state={"n": 3}, previous_checkpoint_id=b.checkpoint_id)
        for x in (a, b, c):
            run(s.save(x))
        old = s.store.resolve(b.checkpoint_id)
        assert run(s.delete(b.checkpoint_id)) is True and run(s.delete(b.checkpoint_id)) is False
        assert run(s.list_checkpoint_ids(workflow_name="wf")) == [a.checkpoint_id, c.checkpoint_id]
        moved = run(s.load(c.checkpoint_id))
        assert moved.previous_checkpoint_id == b.checkpoint_id and moved.state == {"n": 3}
        assert s.store.commit_info(s.store.commit_info(s.store.resolve(c.checkpoint_id)).parent).checkpoint_id == \
            a.checkpoint_id
        assert run_git(path, "cat-file", "-t", old).stdout.strip() == "commit"  # until qvc gc --prune
        for x in (a, c):
            assert run(s.delete(x.checkpoint_id)) is True
        assert s.store.threads() == [] and run(s.get_latest(workflow_name="wf")) is None
    fsck(path)


def test_ids_are_kept_and_never_rewritten(tmp_path):
    with QvcCheckpointStorage(tmp_path / "r.qvc") as s:
        one = cp(checkpoint_id="fixed-id", state={"n": 1})
        run(s.save(one))
        run(s.save(one))  # the same content again: nothing new
        assert len(line(s.store, s.thread("wf"))) == 1
        with pytest.raises(CheckpointConflictError):
            run(s.save(dataclasses.replace(one, state={"n": 2})))
        assert run(s.load("fixed-id")).state == {"n": 1}


def test_bad_input_is_refused_recorded_and_stores_nothing(tmp_path):
    path = tmp_path / "r.qvc"
    with QvcCheckpointStorage(path) as s:
        for bad in ({"workflow_name": "wf"}, cp(name=""), cp(checkpoint_id="")):
            with pytest.raises(WorkflowCheckpointException) as raised:
                run(s.save(bad))
            assert isinstance(raised.value, InvalidInputError)
        with pytest.raises(WorkflowCheckpointException) as raised:
            run(s.save(cp(state={"x": [Unregistered(1)]})))  # would not load: refused when saved
        assert isinstance(raised.value, SerializationError) and "state['x'][0]" in str(raised.value)
        with pytest.raises(SerializationError, match="cannot be pickled"):
            run(s.save(cp(state={"f": lambda: 1})))
        assert s.store.threads() == []
    with QvcCheckpointStorage(path, allowed_checkpoint_types=[f"{__name__}:Unregistered"]) as s:
        allowed = cp(state={"x": [Unregistered(1)]})
        run(s.save(allowed))
        assert run(s.load(allowed.checkpoint_id)).state == {"x": [Unregistered(1)]}
    with QvcCheckpointStorage(path) as s:  # another storage without that type cannot load it
        with pytest.raises(WorkflowCheckpointException, match="Unregistered"):
            run(s.load(allowed.checkpoint_id))
    with pytest.raises(InvalidInputError):
        QvcCheckpointStorage(path, allowed_checkpoint_types=["no-colon"])
    status = qvc_json("--repo", str(path), "status")
    assert status["failures"] == 5 and status["last_failures"][-1]["operation"] == "agent-framework save"


def test_one_script_reads_the_same_on_the_frameworks_in_memory_storage(tmp_path):
    """Saves, lists, the latest, deletes and unknown ids give the same answers on both storages."""
    def script(s: Any) -> list:
        stamp = [f"2026-01-01T00:00:0{i}+00:00" for i in range(4)]
        a = cp("x", checkpoint_id="a", state={"n": 1}, timestamp=stamp[0])
        b = cp("y", checkpoint_id="b", timestamp=stamp[1])
        c = cp("x", checkpoint_id="c", previous_checkpoint_id="a", state={"n": 2}, timestamp=stamp[2])
        d = cp("x", checkpoint_id="d", previous_checkpoint_id="c", timestamp=stamp[3])
        out: list = [run(s.save(v)) for v in (a, b, c, d)]
        out.append([v.to_dict() for v in run(s.list_checkpoints(workflow_name="x"))])
        out += [run(s.list_checkpoint_ids(workflow_name="y")), run(s.get_latest(workflow_name="x")).to_dict()]
        out += [run(s.delete("c")), run(s.delete("c")), run(s.delete("nope")), run(s.get_latest(workflow_name="z"))]
        out += [run(s.list_checkpoint_ids(workflow_name="x")), run(s.load("d")).to_dict()]
        with pytest.raises(WorkflowCheckpointException):
            run(s.load("c"))
        return out

    with QvcCheckpointStorage(tmp_path / "r.qvc") as s:
        assert script(s) == script(InMemoryCheckpointStorage())


# -- the framework's own loop ----------------------------------------------------------------------


def line(store: GitCheckpointStore, thread: str) -> list:
    """The thread's line, oldest first (the tuples)."""
    return list(reversed(list(store.list(CheckpointConfig(thread)))))


def test_k_tool_steps_give_k_plus_3_checkpoints_parented_as_the_framework_chains_them(tmp_path):
    path = tmp_path / "r.qvc"
    with QvcCheckpointStorage(path) as s:
        result = run(build_workflow(s).run(Task("t", 4)))
        assert result.get_outputs() == ["4 items: value 0, value 1, value 2, value 3"]
        cps = run(s.list_checkpoints(workflow_name=NAME))
        assert len(cps) == 4 + 3 and [c.iteration_count for c in cps] == list(range(7))
        tuples = line(s.store, s.thread(NAME))
        assert [t.checkpoint.id for t in tuples] == [c.checkpoint_id for c in cps]
        for before, after in zip(cps, cps[1:], strict=False):
            assert after.previous_checkpoint_id == before.checkpoint_id
        assert [t.parent_config.checkpoint_id if t.parent_config else None for t in tuples] == \
            [c.previous_checkpoint_id for c in cps]
        assert cps[-1].state["results"] == [f"value {i}" for i in range(4)]
        assert cps[-1].state["_executor_state"]["worker"] == {"calls": 4}
        # one field per value that changes on its own: a tool step writes the messages, the results,
        # the worker's counter and the bookkeeping, never the graph signature
        assert set(s.store.changed(s.store.resolve(cps[3].checkpoint_id))) == {
            "messages", "state/results", "executor_states", "iteration", "checkpoint"}
    fsck(path)


RESUMER = """
import asyncio, json, sys
from qvc.integrations.agent_framework import QvcCheckpointStorage
from qvc.integrations.agent_framework.scripted import build_workflow
async def main():
    with QvcCheckpointStorage(sys.argv[1]) as storage:
        more = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
        result = await build_workflow(storage, review=more.pop("review", False), name=more.pop("name", "lookups")).run(
            checkpoint_id=sys.argv[2], **more)
        print(json.dumps({"outputs": result.get_outputs(), "state": result.get_final_state().name}))
asyncio.run(main())
"""


def resume(path: Path, checkpoint_id: str, **more: Any) -> dict:
    """Resume the scripted workflow from ``checkpoint_id`` in a new process, from the repository alone."""
    proc = subprocess.run([sys.executable, "-c", RESUMER, str(path), checkpoint_id, json.dumps(more)],
                          env=child_env(), capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_a_resume_from_an_older_checkpoint_in_a_new_process_is_time_travel_that_loses_nothing(tmp_path):
    path = tmp_path / "r.qvc"
    with QvcCheckpointStorage(path) as s:
        run(build_workflow(s).run(Task("t", 3)))
        first = run(s.list_checkpoint_ids(workflow_name=NAME))
        old_head = s.store.head(s.thread(NAME))
    middle = first[3]  # after the planner and two tool steps
    assert resume(path, middle) == {"outputs": ["3 items: value 0, value 1, value 2"], "state": "IDLE"}
    fsck(path)
    with QvcCheckpointStorage(path) as s:
        every = run(s.list_checkpoint_ids(workflow_name=NAME))
        assert set(first) < set(every) and len(every) == len(first) + 2  # the last tool step and the writer again
        thread = s.thread(NAME)
        ids = [t.checkpoint.id for t in line(s.store, thread)]
        assert ids[:4] == first[:4] and not set(ids) & set(first[4:])  # the new line branches at `middle`
        new = [run(s.load(i)) for i in ids[4:]]
        assert new[0].previous_checkpoint_id == middle and new[0].state["_executor_state"]["worker"] == {"calls": 3}
        superseded = [t.checkpoint.id for t in s.store.list(CheckpointConfig(thread), superseded=True)]
        assert set(first) <= set(superseded)  # the line left behind is kept
        head = s.store.head(thread)
        assert run_git(path, "merge-base", "--is-ancestor", s.store.resolve(middle), head).returncode == 0
    logged = {e["id"] for e in qvc_json("--repo", str(path), "log", "--all")}
    assert set(every) <= logged and old_head


def test_a_request_for_review_is_answered_in_another_process_from_the_repository_alone(tmp_path):
    path = tmp_path / "r.qvc"
    with QvcCheckpointStorage(path) as s:
        result = run(build_workflow(s, review=True).run(Task("t", 2)))
        assert result.get_final_state() == WorkflowRunState.IDLE_WITH_PENDING_REQUESTS
        [request] = result.get_request_info_events()
        paused = run(s.get_latest(workflow_name=NAME))
        assert list(paused.pending_request_info_events) == [request.request_id] == ["review-t"]
        assert paused.pending_request_info_events["review-t"].data == Draft("t", "2 items: value 0, value 1")
    shown = qvc_json("--repo", str(path), "show", workflow_thread(NAME))["state"]
    [pending] = shown["pending_requests"]
    assert pending == {"id": "review-t", "from": "writer", "data": pending["data"],
                       "request_type": "qvc.integrations.agent_framework.scripted:Draft",
                       "response_type": "builtins:str"}
    assert pending["data"]["pickled"] == "qvc.integrations.agent_framework.scripted:Draft"
    out = resume(path, paused.checkpoint_id, review=True, responses={"review-t": "approved"})
    assert out == {"outputs": ["2 items: value 0, value 1 (approved)"], "state": "IDLE"}
    with QvcCheckpointStorage(path) as s:
        latest = run(s.get_latest(workflow_name=NAME))
        assert not latest.pending_request_info_events and latest.iteration_count == paused.iteration_count + 1


def test_a_workflow_of_another_name_resumed_from_a_checkpoint_is_a_fork_sharing_its_commits(tmp_path):
    path = tmp_path / "r.qvc"
    with QvcCheckpointStorage(path) as s:
        run(build_workflow(s).run(Task("t", 3)))
        source = run(s.list_checkpoint_ids(workflow_name=NAME))[2]
        out = run(build_workflow(s, name="lookups-retry").run(checkpoint_id=source))
        assert out.get_outputs() == ["3 items: value 0, value 1, value 2"]
        fork = s.thread("lookups-retry")
        own = [t for t in line(s.store, fork) if t.config.thread_id == fork]  # the line goes on into the source's
        assert own[0].parent_config.checkpoint_id == source and own[0].parent_config.thread_id == s.thread(NAME)
        assert run_git(path, "merge-base", "--is-ancestor", s.store.resolve(source), s.store.head(fork)).returncode == 0
        assert len(run(s.list_checkpoint_ids(workflow_name="lookups-retry"))) == 3  # its own, not the source's
        assert len(run(s.list_checkpoint_ids(workflow_name=NAME))) == 6  # untouched


def test_the_command_line_shows_a_checkpoint_as_a_superstep(tmp_path):
    path = tmp_path / "r.qvc"
    with QvcCheckpointStorage(path) as s:
        run(build_workflow(s).run(Task("t", 2)))
        ids = run(s.list_checkpoint_ids(workflow_name=NAME))
    repo, thread = ("--repo", str(path)), workflow_thread(NAME)
    state = qvc_json(*repo, "show", ids[2])["state"]
    assert state == {"workflow": NAME, "iteration": 2, "time": state["time"],
                     "messages": [{"from": "worker", "to": "worker", "data": {"pickled": state["messages"][0]["data"]
                                   ["pickled"], "bytes": state["messages"][0]["data"]["bytes"]}}],
                     "state": {"task": {"name": "t", "steps": 2}, "results": ["value 0"]},
                     "executors": {"planner": {}, "worker": {"calls": 1}, "writer": {}}, "pending_requests": []}
    assert state["messages"][0]["data"]["pickled"] == "qvc.integrations.agent_framework.scripted:Step"
    shown = qvc(*repo, "show", thread).stdout
    assert '"2 items: value 0, value 1"' not in shown and 'results' in shown and "graph_signature" not in shown, shown
    patched = qvc(*repo, "log", "-p", "-n", "2", thread).stdout
    assert '+ state.results[1]: "value 1"' in patched or 'value 1' in patched, patched
    assert "messages[0]" in patched, patched
    diff = qvc(*repo, "diff", ids[1], ids[-1]).stdout
    assert "results" in diff and "calls" in diff, diff
    raw = qvc_json(*repo, "show", "--raw", thread)["state"]
    assert raw["graph_signature"] and raw["checkpoint"]["workflow_name"] == NAME
    assert len(qvc(*repo, "log", "--oneline", thread).stdout.splitlines()) == len(ids)


# -- the adapter kit ---------------------------------------------------------------------------------


@dataclass
class Handle:
    storage: QvcCheckpointStorage
    runs: Dict[str, str] = field(default_factory=dict)


def _run(task: str, steps: int, review: bool = False):
    def op(h: Handle) -> None:
        run(build_workflow(h.storage, review=review, name=f"{NAME}-review" if review else NAME).run(Task(task, steps)))
    return op


def _answer(h: Handle) -> None:
    paused = run(h.storage.get_latest(workflow_name=f"{NAME}-review"))
    run(build_workflow(h.storage, review=True, name=f"{NAME}-review").run(
        checkpoint_id=paused.checkpoint_id, responses={"review-r": "ok"}))


def _travel(h: Handle) -> None:
    ids = run(h.storage.list_checkpoint_ids(workflow_name=NAME))
    run(build_workflow(h.storage).run(checkpoint_id=ids[2]))


def _fork(h: Handle) -> None:
    ids = run(h.storage.list_checkpoint_ids(workflow_name=NAME))
    run(build_workflow(h.storage, name=f"{NAME}-fork").run(checkpoint_id=ids[1]))


def _delete(h: Handle) -> None:
    ids = run(h.storage.list_checkpoint_ids(workflow_name=f"{NAME}-fork"))
    assert run(h.storage.delete(ids[1])) is True


class AgentFrameworkDriver(AdapterDriver):
    name = "agent-framework"

    def open(self, path: Path) -> Handle:
        return Handle(QvcCheckpointStorage(path))

    def close(self, handle: Handle) -> None:
        handle.storage.close()

    def script(self) -> List[Operation]:
        return [
            Operation("a run of three tool steps", _run("a", 3)),
            Operation("a run that pauses for review", _run("r", 1, review=True)),
            Operation("the review answered", _answer),
            Operation("a resume from an older checkpoint", _travel),
            Operation("a fork into another workflow name", _fork),
            Operation("a checkpoint of the fork deleted", _delete),
            Operation("a fresh run of the first workflow", _run("b", 2)),
        ]

    def lines(self, handle: Handle) -> Dict[str, List[str]]:
        store = handle.storage.store
        return {t: [x.checkpoint.id for x in store.list(CheckpointConfig(t))]
                for t in store.threads() if workflow_of(t) is not None}

    def checkpoints(self, handle: Handle) -> Dict[str, Set[str]]:
        store = handle.storage.store
        return {t: set(run(handle.storage.list_checkpoint_ids(workflow_name=workflow_of(t))))
                for t in store.threads() if workflow_of(t) is not None}

    def snapshot(self, handle: Handle) -> Any:
        s = handle.storage
        out = {}
        for t in s.store.threads():
            name = workflow_of(t)
            if name is None:
                continue
            ids = run(s.list_checkpoint_ids(workflow_name=name))
            out[t] = (ids, run(s.get_latest(workflow_name=name)).checkpoint_id,
                      [(x.checkpoint.id, x.metadata, x.checkpoint.state_data) for x in
                       s.store.list(CheckpointConfig(t), superseded=True)],
                      [repr(run(s.load(i)).to_dict()) for i in ids])
        return out

    def writer(self, path: Path) -> List[str]:
        return [sys.executable, "-c", WRITER, str(path)]

    def check_acknowledged(self, handle: Handle, tokens: List[str]) -> None:
        for token in tokens:
            loaded = run(handle.storage.load(token))
            assert loaded.workflow_name == "killed", token


# A child that runs the workflow again and again, each run resumed from the newest checkpoint when
# the last one ended mid-way; it prints an ack once a checkpoint's save returned.
WRITER = """
import asyncio, sys
from qvc.integrations.agent_framework import QvcCheckpointStorage
from qvc.integrations.agent_framework.scripted import Task, build_workflow
class Acking(QvcCheckpointStorage):
    async def save(self, checkpoint):
        saved = await super().save(checkpoint)
        print(f"ack {saved}", flush=True)
        return saved
async def main():
    storage = Acking(sys.argv[1])
    i = 0
    while True:
        await build_workflow(storage, name="killed", payload=200).run(Task(f"run-{i}", 3))
        i += 1
asyncio.run(main())
"""


class TestAgentFrameworkAdapter(AdapterKit):
    driver = AgentFrameworkDriver()


# -- a process killed mid-workflow -------------------------------------------------------------------


RUNNER = """
import asyncio, sys
from qvc.integrations.agent_framework import QvcCheckpointStorage
from qvc.integrations.agent_framework.scripted import Task, build_workflow
class Acking(QvcCheckpointStorage):
    async def save(self, checkpoint):
        saved = await super().save(checkpoint)
        print(f"ack {saved} {checkpoint.iteration_count}", flush=True)
        return saved
async def main():
    with Acking(sys.argv[1]) as storage:
        await build_workflow(storage, delay=0.05).run(Task("long", 40))
asyncio.run(main())
"""


@pytest.mark.slow  # a real workflow killed in a loop of supersteps, then resumed (a few seconds)
def test_a_workflow_killed_mid_run_resumes_from_the_last_acknowledged_superstep(tmp_path, request):
    if not slow_enabled(request.config):
        pytest.skip("slow: run with -m slow or QVC_SLOW=1")
    path = tmp_path / "k.qvc"
    errors = tmp_path / "runner-stderr"
    with open(errors, "w") as err:
        proc = subprocess.Popen([sys.executable, "-c", RUNNER, str(path)], env=child_env(), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=err, text=True)
    acks: List[List[str]] = []
    try:
        while len(acks) < 12:  # the entry, the planner and ten tool steps acknowledged; killed in the next one
            raw = proc.stdout.readline()
            assert raw.endswith("\n"), errors.read_text()[-3000:]
            acks.append(raw.split()[1:])
        time.sleep(0.03)
        proc.send_signal(signal.SIGKILL)
        acks += [x.split()[1:] for x in proc.stdout.read().split("\n")[:-1] if x.startswith("ack ")]
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    fsck(path)
    with QvcCheckpointStorage(path) as s:
        ids = run(s.list_checkpoint_ids(workflow_name=NAME))
        assert ids[:len(acks)] == [a[0] for a in acks]  # every acknowledged superstep is there, in order
        latest = run(s.get_latest(workflow_name=NAME))
        assert latest.checkpoint_id == ids[-1] and latest.iteration_count == int(acks[-1][1]) + (len(ids) - len(acks))
        done = len(latest.state["results"])
    out = resume(path, latest.checkpoint_id)  # a new process, from qvc alone
    assert out == {"outputs": ["40 items: " + ", ".join(f"value {i}" for i in range(40))], "state": "IDLE"}
    with QvcCheckpointStorage(path) as s:
        final = run(s.get_latest(workflow_name=NAME))
        assert final.state["_executor_state"]["worker"] == {"calls": 40} and done < 40
        chain, cursor = [], final.checkpoint_id
        by_id = {c.checkpoint_id: c for c in run(s.list_checkpoints(workflow_name=NAME))}
        while cursor is not None:
            chain.append(cursor)
            cursor = by_id[cursor].previous_checkpoint_id
        assert chain[::-1][:len(acks)] == [a[0] for a in acks]  # one unbroken lineage across the kill
    fsck(path)


# -- the sample ----------------------------------------------------------------------------------------


@pytest.mark.slow  # about 3 seconds: the slow tier (the tests above run the same workflows)
def test_the_sample_runs(tmp_path, request):
    if not slow_enabled(request.config):
        pytest.skip("slow: run with -m slow or QVC_SLOW=1")
    proc = subprocess.run([sys.executable, str(ROOT / "samples" / "agent_framework_workflow.py"),
                           "--repo", str(tmp_path / "s.qvc")], env=child_env(), capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAIL" not in proc.stdout and "superseded" in proc.stdout and "approved" in proc.stdout, proc.stdout
    fsck(tmp_path / "s.qvc")
