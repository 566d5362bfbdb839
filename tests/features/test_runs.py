"""Agent runs (qvc.runs) on real repositories: checkpoints, errors, continue, fork, regenerate, timeline."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import ROOT, child_env, fsck, run_git

from qvc import Checkpoint, CheckpointConfig
from qvc.errors import (
    CheckpointConflictError,
    InvalidInputError,
    RunOwnedError,
    RunStateError,
    UnknownCheckpointError,
    UnknownRunError,
)
from qvc.runs import Message, Runs, RunStatus, ToolCall, parse_run_ref, resolve_continue_from, safe_truncation_index

RESULT = "r" * 2000


@pytest.fixture
def runs(store):
    return Runs(store)


def batch(rec, n: int, calls: int = 1, result: str = RESULT) -> list[str]:
    """One assistant message with ``calls`` tool calls, their results, then the batch hook."""
    base = sum(len(m.tool_calls) for m in rec.run.messages)
    ids = [f"call_{base + i}" for i in range(calls)]
    rec.add_message(Message("assistant", tool_calls=[ToolCall(i, "tool", {"n": n}) for i in ids]))
    for i in ids:
        rec.tool_result(i, f"{result}:{i}")
        rec.after_tool_call()
    rec.after_tool_batch()
    return ids


def finished_run(runs, k: int = 3, run_id: str = "r1", session_id: str = "s", **kw) -> str:
    with runs.start("question", system="sys", run_id=run_id, session_id=session_id, **kw) as rec:
        for n in range(k):
            batch(rec, n)
            rec.run.session_state["batches"] = n + 1
        rec.add_message(Message("assistant", "answer"))
        rec.complete()
    return run_id


def changed_fields(repo_path, newer: str, older: str) -> set[str]:
    out = run_git(repo_path, "diff", "--name-only", older, newer).stdout.split()
    return {name.split("/")[0] for name in out}


# -- the recorder ---------------------------------------------------------------------------------


def test_k_batches_give_k_plus_one_checkpoints_each_holding_only_its_batch(runs, store, repo_path):
    k = 5
    finished_run(runs, k)
    line = list(store.list(CheckpointConfig(runs.thread("r1"))))
    assert len(line) == k + 1
    assert [t.metadata["reason"] for t in line] == ["end"] + ["tool-batch"] * k
    assert [t.metadata["message_index"] for t in line][::-1] == [2 + 2 * (i + 1) for i in range(k)] + [2 * k + 3]
    heads = run_git(repo_path, "log", "--format=%H", "--first-parent", "refs/heads/run%2Fs%2Fr1").stdout.split()
    assert len(heads) == k + 1
    for i in range(1, k):  # batch i+1 adds exactly one new segment field, earlier ones are shared
        fields = changed_fields(repo_path, heads[k - i], heads[k - i + 1])
        segments = {f for f in fields if f.startswith("log.")}
        assert segments == {f"log.{i:08d}"}, fields
        assert fields <= segments | {".qvc", "owner", "metrics", "session_state"}, fields
    fsck(repo_path)


def test_tool_result_is_stored_once(runs, store, repo_path):
    finished_run(runs, 1)
    blob = run_git(repo_path, "cat-file", "blob", "refs/heads/run%2Fs%2Fr1:log.00000000", text=False).stdout
    assert blob.count(RESULT.encode()) == 1
    run = runs.get("r1")
    assert run.tools[0].result == f"{RESULT}:call_0" == run.messages[3].content


def test_cadence_runs_writes_only_the_terminal_checkpoint(runs, store):
    finished_run(runs, 4, cadence="runs")
    assert [t.metadata["reason"] for t in store.list(CheckpointConfig(runs.thread("r1")))] == ["end"]
    assert len(runs.get("r1").messages) == 11


def test_cadence_tools_checkpoints_each_call_and_resumes_mid_batch(runs, store):
    rec = runs.start("q", run_id="t1", session_id="s", cadence="tools")
    rec.add_message(Message("assistant", tool_calls=[ToolCall("a", "tool"), ToolCall("b", "tool")]))
    rec.tool_result("a", "A")
    assert rec.after_tool_call() is not None
    rec.close()  # the process stops mid-batch: call b was never answered
    assert runs.get("t1").status is RunStatus.RUNNING
    rec = runs.continue_run("t1")
    assert [c.id for c in rec.pending_tool_calls()] == ["b"]
    rec.tool_result("b", "B")
    rec.after_tool_call()
    assert rec.after_tool_batch() is None  # the per-call checkpoint already holds it
    rec.complete("done")
    reasons = [e.reason for e in runs.timeline("t1")]
    assert reasons == ["tool", "takeover", "tool", "end"]  # detached: its owner let go


def test_error_flush_before_the_first_batch_keeps_system_and_user(runs):
    for cadence in ("runs", "tool-batch"):
        with pytest.raises(ConnectionError):
            with runs.start("why?", system="be brief", run_id=f"e-{cadence}", session_id="s", cadence=cadence):
                raise ConnectionError("model down")
        run = runs.get(f"e-{cadence}")
        assert run.status is RunStatus.ERROR
        assert [(m.role, m.content) for m in run.messages] == [("system", "be brief"), ("user", "why?")]
        assert run.error == {"type": "ConnectionError", "message": "model down"}
        assert run.owner is None


def test_recording_after_finish_and_bad_input_raise_typed_errors(runs):
    finished_run(runs, 1)
    with pytest.raises(InvalidInputError):
        runs.start("q", run_id="r1", session_id="s")  # in use
    with pytest.raises(InvalidInputError):
        runs.start("q", run_id="a/b")
    with pytest.raises(InvalidInputError):
        runs.start("q", cadence="sometimes")
    rec = runs.start("q", run_id="r2", session_id="s")
    with pytest.raises(InvalidInputError):
        rec.add_message({"role": "tool", "content": "x"})  # no tool_call_id
    rec.complete("a")
    with pytest.raises(RunStateError):
        rec.add_message(Message("user", "late"))
    with pytest.raises(UnknownRunError):
        runs.get("nope")


def test_round_trip_of_empty_values_and_json(runs):
    rec = runs.start(None, run_id="empty", session_id="s")
    rec.checkpoint()
    rec.complete()
    run = runs.get("empty")
    assert run.metrics.keys() == {"duration"} and run.session_state == {} and run.messages == []
    json.dumps(run.to_dict())
    for e in runs.timeline("empty"):
        json.dumps(e.to_dict())


# -- pair-safe cuts --------------------------------------------------------------------------------


def conversation() -> list[Message]:
    return [Message("user", "q"), Message("assistant", tool_calls=[ToolCall("call_0", "t")]),
            Message("tool", "x", tool_call_id="call_0"), Message("assistant", tool_calls=[ToolCall("call_1", "t")]),
            Message("tool", "y", tool_call_id="call_1")]


def test_safe_truncation_index_matches_the_rule():
    msgs = conversation()
    assert safe_truncation_index(msgs, 2) == 1
    assert safe_truncation_index(msgs, 4) == 3
    assert [safe_truncation_index(msgs, k) for k in (-1, 0, 1, 3, 5, 9)] == [-1, 0, 1, 3, 5, 9]
    assert resolve_continue_from(msgs, "last_user") == 1
    assert resolve_continue_from(msgs, -1) == 3
    for bad in (6, -6, "middle", True, 1.5):
        with pytest.raises(InvalidInputError):
            resolve_continue_from(msgs, bad)


def test_parse_run_ref():
    assert parse_run_ref("r1") == ("r1", None)
    assert parse_run_ref("r1@7") == ("r1", 7)
    assert parse_run_ref("r1@ab12cd") == ("r1", "ab12cd")
    with pytest.raises(InvalidInputError):
        parse_run_ref("r1@")


# -- timeline and snapshots ----------------------------------------------------------------------


def test_snapshot_is_the_true_state_at_the_boundary(runs):
    finished_run(runs, 3)
    timeline = runs.timeline("r1")
    assert [e.is_latest for e in timeline] == [False, False, False, True]
    inner = timeline[1]
    snap = runs.snapshot("r1", inner.message_index)
    assert snap.exact and snap.checkpoint_id == inner.id
    assert snap.run.session_state == {"batches": 1}  # batch 2's state update came after this checkpoint
    assert snap.run.status is RunStatus.RUNNING and snap.run.metrics["tool_calls"] == 2
    assert len(snap.run.messages) == inner.message_index and len(snap.run.tools) == 2
    assert runs.snapshot("r1", inner.id).run.to_dict() == snap.run.to_dict()
    mid = runs.snapshot("r1", inner.message_index - 1)  # inside the exchange: snaps to before it
    assert (mid.requested_index, mid.message_index, mid.exact) == (5, 4, True)
    early = runs.snapshot("r1", 1)  # before the first checkpoint: the initial state
    assert not early.exact and early.run.session_state == {} and early.run.tools == []
    assert runs.get("r1").session_state == {"batches": 3}  # nothing was written
    assert [e.id for e in runs.timeline("r1")] == [e.id for e in timeline]
    with pytest.raises(InvalidInputError):
        runs.snapshot("r1", 99)
    with pytest.raises(UnknownCheckpointError):
        runs.snapshot("r1", "0123456789abcdef")
    assert runs.show("r1@4").message_index == 4
    assert runs.show("r1").status is RunStatus.COMPLETED


# -- continue ---------------------------------------------------------------------------------------


def test_continue_rules_by_status(runs):
    finished_run(runs, 1, run_id="done")
    rec = runs.continue_run("done", "follow-up")
    assert rec.run_id != "done" and rec.run.forked_from_run_id == "done"
    assert rec.run.forked_from_message_index == 5 and rec.run.metrics == {}
    assert rec.run.messages[-1].content == "follow-up"
    rec.complete("ok")
    assert runs.get("done").status is RunStatus.COMPLETED

    rec = runs.start("q", run_id="cancel", session_id="s")
    rec.cancel("user pressed stop")
    with pytest.raises(RunStateError):
        runs.continue_run("cancel")

    rec = runs.start("q", run_id="hitl", session_id="s")
    rec.add_message(Message("assistant", tool_calls=[ToolCall("c9", "delete_all")]))
    rec.pause([{"tool_call_id": "c9", "kind": "confirmation"}])
    assert runs.get("hitl").status is RunStatus.PAUSED
    with pytest.raises(RunStateError):
        runs.continue_run("hitl")
    rec = runs.continue_run("hitl", requirements=[{"tool_call_id": "c9", "resolved": True, "value": False}])
    assert rec.run_id == "hitl" and rec.run.requirements[0].resolved
    rec.tool_result("c9", "not confirmed by the user")
    rec.complete("cancelled the deletion")
    assert runs.get("hitl").status is RunStatus.COMPLETED


def test_rewind_in_place_keeps_the_tail(runs, store):
    with pytest.raises(RuntimeError):
        with runs.start("q", run_id="r", session_id="s") as rec:
            for n in range(3):
                batch(rec, n)
            raise RuntimeError("boom")
    before = runs.timeline("r")
    rec = runs.continue_run("r", "try again", continue_from=before[0].message_index)
    assert rec.run_id == "r" and len(rec.run.tools) == 1
    rec.complete("fine")
    after = runs.timeline("r")
    assert {e.id for e in after if not e.current} == {e.id for e in before[1:]}
    current = [e for e in after if e.current]
    assert current[0].id == before[0].id and current[1].reason == "rewind"
    # the old tail right after the checkpoint it branched from, never after the latest
    assert [e.id for e in after] == [before[0].id, *(e.id for e in before[1:]), *(e.id for e in current[1:])]
    listed = {t.checkpoint.id for t in store.list(CheckpointConfig(runs.thread("r")), superseded=True)}
    assert {e.id for e in before} <= listed
    assert runs.snapshot("r", before[-1].id).run.status is RunStatus.ERROR


def test_fork_shares_the_prefix_and_keeps_lineage(runs, repo_path):
    finished_run(runs, 4)
    at = runs.timeline("r1")[2].message_index
    fork = runs.fork("r1", at, input="what if?")
    assert fork.status is RunStatus.PENDING and fork.forked_from_message_index == at
    assert len(fork.tools) == 3 and fork.metrics == {} and fork.session_state == {"batches": 2}
    src = "refs/heads/run%2Fs%2Fr1"
    dst = f"refs/heads/run%2Fs%2F{fork.run_id}"
    for seg in ("log.00000000", "log.00000001", "log.00000002"):
        assert run_git(repo_path, "rev-parse", f"{src}:{seg}").stdout == run_git(
            repo_path, "rev-parse", f"{dst}:{seg}").stdout
    rec = runs.continue_run(fork.run_id)
    assert rec.run_id == fork.run_id  # PENDING continues in place
    rec.complete("forked answer")
    first = runs.timeline(fork.run_id)[0]
    assert first.reason == "fork" and first.parent_id == runs.timeline("r1")[2].id
    # an unsafe index snaps down and tools are pruned to the surviving calls
    fork2 = runs.fork("r1", at - 1)
    assert fork2.forked_from_message_index == at - 2 and len(fork2.tools) == 2
    fsck(repo_path)


def test_regenerate_marks_the_source_only_after_the_new_run_completes(runs):
    finished_run(runs, 2)
    rec = runs.regenerate("r1", additional_instructions="shorter please")
    assert rec.run.regenerated_from == "r1" and rec.run.messages[-1].metadata["kind"] == "additional_instructions"
    assert runs.get("r1").status is RunStatus.COMPLETED
    assert [r.run_id for r in runs.history_runs("s")] == ["r1"]  # the new run is RUNNING, not current
    rec.add_message(Message("assistant", "short answer"))
    rec.complete()
    assert runs.get("r1").status is RunStatus.REGENERATED and runs.get("r1").regenerated_by == rec.run_id
    assert [r.run_id for r in runs.history_runs("s")] == [rec.run_id]

    finished_run(runs, 1, run_id="keep")
    rec = runs.regenerate("keep", replace_original=False)
    rec.complete("alt")
    assert runs.get("keep").status is RunStatus.COMPLETED

    finished_run(runs, 1, run_id="fails")
    with pytest.raises(ValueError):
        with runs.regenerate("fails"):
            raise ValueError("model broke")
    assert runs.get("fails").status is RunStatus.COMPLETED
    assert "fails" in [r.run_id for r in runs.history_runs("s")]
    with pytest.raises(RunStateError):
        runs.regenerate(runs.list_runs("s")[-1].run_id)  # an ERROR run


def test_history_skips_hidden_statuses_and_other_running_runs(runs):
    finished_run(runs, 1, run_id="a")
    rec = runs.start("q", run_id="err", session_id="s")
    rec.fail("x")
    rec = runs.start("q", run_id="pause", session_id="s")
    rec.pause([])
    live = runs.start("current question", run_id="live", session_id="s")
    live.checkpoint()
    other = runs.start("q", run_id="other", session_id="s")
    other.checkpoint()
    assert [r.run_id for r in runs.history_runs("s")] == ["a"]
    assert [r.run_id for r in runs.history_runs("s", current_run_id="live")] == ["a", "live"]
    assert [m.role for m in runs.history("s")] == ["user", "assistant", "tool", "assistant"]
    live.complete("x")
    other.complete("y")


def test_copy_session_remaps_lineage(runs):
    finished_run(runs, 1, run_id="a", session_id="orig")
    rec = runs.continue_run("a", "more")
    rec.complete("b")
    mapping = runs.copy_session("orig", "copy")
    assert set(mapping) == {"a", rec.run_id}
    copies = {r.run_id: runs.get(r.run_id) for r in runs.list_runs("copy")}
    forked = copies[mapping[rec.run_id]]
    assert forked.forked_from_run_id == mapping["a"] and forked.forked_from_session_id == "orig"
    assert copies[mapping["a"]].messages == runs.get("a").messages
    again = runs.copy_session("copy", "copy2")
    assert runs.get(again[mapping["a"]]).forked_from_session_id == "orig"  # the root session
    with pytest.raises(InvalidInputError):
        runs.copy_session("orig", "copy")
    with pytest.raises(UnknownRunError):
        runs.copy_session("nope")


def test_long_runs_seal_old_segments_and_stay_correct(runs, store, repo_path):
    with runs.start("q", run_id="long", session_id="s") as rec:
        for n in range(130):
            batch(rec, n, result="x")
        rec.complete("done")
    state = store.get(CheckpointConfig(runs.thread("long"))).state_data
    assert "sealed.00000000" in state and len([f for f in state if f.startswith("log.")]) == 66
    run = runs.get("long")
    assert len(run.messages) == 1 + 2 * 130 and [t.tool_call_id for t in run.tools] == [
        f"call_{i}" for i in range(130)]
    fork = runs.fork("long", 101)
    assert len(fork.messages) == 101 and len(fork.tools) == 50


# -- owners and takeover ------------------------------------------------------------------------


def test_a_live_owner_in_this_process_is_refused(runs):
    rec = runs.start("q", run_id="mine", session_id="s")
    rec.checkpoint()
    assert runs.owner_status("mine").state == "live"
    with pytest.raises(RunOwnedError) as info:
        runs.continue_run("mine")
    assert isinstance(info.value, CheckpointConflictError)
    rec.close()  # detached: RUNNING, lock free
    assert runs.owner_status("mine").state == "stale"
    rec = runs.continue_run("mine")
    assert len(rec.run.takeovers) == 1
    rec.complete("x")
    assert runs.owner_status("mine").state == "none"


def test_takeover_of_a_live_then_killed_worker(runs, repo_path, tmp_path):
    worker = Path(ROOT, "tests", "workers", "runs_worker.py")
    proc = subprocess.Popen([sys.executable, str(worker), str(repo_path), "w1"],
                            env=child_env(), stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("ready "), line
        status = runs.owner_status("w1")
        assert status.state == "live" and status.owner.pid == proc.pid
        with pytest.raises(RunOwnedError):
            runs.continue_run("w1")
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    crashed = runs.get("w1")
    assert crashed.status is RunStatus.RUNNING and crashed.checkpoint_id == line.split()[1]
    assert [m.role for m in crashed.messages] == ["user", "assistant", "tool"] or \
        [m.role for m in crashed.messages] == ["system", "user", "assistant", "tool"]
    assert runs.owner_status("w1").state == "stale"
    rec = runs.continue_run("w1")
    assert rec.run.takeovers[0]["previous_owner"]["pid"] == proc.pid
    rec.complete("recovered")
    timeline = runs.timeline("w1")
    assert [e.reason for e in timeline] == ["tool-batch", "takeover", "end"]
    assert runs.get("w1").status is RunStatus.COMPLETED


def test_owner_on_another_host_is_judged_by_its_heartbeat(store):
    runs = Runs(store, lease=5)
    rec = runs.start("q", run_id="remote", session_id="s")
    rec.checkpoint()
    rec.close()
    tup = store.get_tuple(CheckpointConfig(runs.thread("remote")))
    state = dict(tup.checkpoint.state_data)
    now = time.time()
    state["owner"] = {"pid": 1, "host": socket.gethostname() + "-elsewhere", "started_at": now,
                      "heartbeat_at": now, "token": "t"}
    store.put(CheckpointConfig(runs.thread("remote")),
              Checkpoint(id="remote-owner", thread_id=runs.thread("remote"), step=9, state_data=state),
              dict(tup.metadata))
    assert runs.owner_status("remote").state == "live"
    with pytest.raises(RunOwnedError):
        runs.continue_run("remote")
    store.put_writes(CheckpointConfig(runs.thread("remote"), "remote-owner"),
                     [("owner", {"token": "t", "heartbeat_at": now - 60})], task_id="x")
    assert runs.owner_status("remote").state == "live"  # an older heartbeat never moves it back
    state["owner"] = dict(state["owner"], heartbeat_at=now - 60)
    store.put(CheckpointConfig(runs.thread("remote")),
              Checkpoint(id="remote-stale", thread_id=runs.thread("remote"), step=10, state_data=state),
              dict(tup.metadata))
    assert runs.owner_status("remote").state == "stale"
    rec = runs.continue_run("remote")
    assert "no heartbeat" in rec.run.takeovers[0]["reason"]
    rec.complete("x")


def test_heartbeat_refreshes_without_a_checkpoint(runs, store):
    rec = runs.start("q", run_id="hb", session_id="s", heartbeat_interval=0.05)
    rec.checkpoint()
    first = runs.get("hb").owner.heartbeat_at
    time.sleep(0.3)
    assert runs.get("hb").owner.heartbeat_at > first
    assert len(runs.timeline("hb")) == 1
    rec.complete("x")


# -- samples ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("sample", ["crash_recovery.py", "tool_error.py", "time_travel.py"])
def test_sample_runs(sample, tmp_path):
    args = [sys.executable, str(Path(ROOT, "samples", sample)), "--repo", str(tmp_path / "s.qvc")]
    if sample == "crash_recovery.py":
        args += ["--delay", "0.3"]
    proc = subprocess.run(args, env=child_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAIL" not in proc.stdout and "  ok    " in proc.stdout
    fsck(tmp_path / "s.qvc")


def test_history_hides_a_replaced_source_even_if_its_mark_was_lost(runs):
    finished_run(runs, 1, run_id="src")
    blocker = runs._lock(runs.thread("src"))  # another process holding the source's lock
    assert blocker.try_acquire()
    try:
        rec = runs.regenerate("src")
        rec.complete("better")
    finally:
        blocker.release()
    assert runs.get("src").status is RunStatus.COMPLETED  # the mark could not be written
    assert [r.run_id for r in runs.history_runs("s")] == [rec.run_id]


def test_continue_from_last_user_rewinds_in_place_and_copy_run(runs):
    with pytest.raises(KeyError):
        with runs.start("first", run_id="lu", session_id="s") as rec:
            batch(rec, 0)
            raise KeyError("tool registry")
    rec = runs.continue_run("lu", continue_from="last_user")
    assert rec.run_id == "lu" and [m.role for m in rec.run.messages] == ["user"] and rec.run.tools == []
    rec.complete("fresh")
    assert [e.reason for e in runs.timeline("lu") if e.current] == ["tool-batch", "rewind", "end"]
    copy = runs.copy_run("lu", session_id="elsewhere")
    assert copy.run_id != "lu" and copy.session_id == "elsewhere" and copy.forked_from_session_id == "s"
    assert copy.messages == runs.get("lu").messages and copy.status is RunStatus.COMPLETED
