"""The QitOS v2 store checklist (qitos-checkpoint-api.md §3.2), applied to qvc.

One test per checklist item, named after it. Where QitOS's two stores disagree, the tests
follow the reference README's "Choices already made" (latest = branch head, parent =
parent_id else head, caller's id kept, typed errors for bad input, metadata kept whole,
put_writes to a missing checkpoint raises the typed not-found error).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import helpers
import pytest

from qvc import (
    Checkpoint,
    CheckpointConfig,
    CheckpointStore,
    CheckpointTuple,
    DurabilityManager,
    DurabilityMode,
    GitCheckpointStore,
    NotFoundError,
    PendingWrite,
    PendingWriteManager,
    StateVersionTracker,
    UnknownCheckpointError,
    UnknownThreadError,
    fork_checkpoint,
    list_fork_history,
)

ROOT = Path(__file__).resolve().parents[2]


def cp(cid: str, thread: str = "t1", step: int = 0, state=None, parent_id=None) -> Checkpoint:
    return Checkpoint(id=cid, thread_id=thread, step=step,
                      state_data={"x": step} if state is None else state, parent_id=parent_id)


def put(store, cid, thread="t1", step=0, state=None, parent_id=None, metadata=None):
    """``helpers.put`` with this file's defaults (kept: id first, thread "t1", step 0, state ``{"x": step}``)."""
    return helpers.put(store, thread, cid, step, {"x": step} if state is None else state, parent_id=parent_id,
                       metadata=metadata)


# -- types ------------------------------------------------------------------------------


def test_checkpoint_to_dict_from_dict_round_trip():
    original = Checkpoint(
        id="cp1", thread_id="t1", step=4, state_data={"a": [1, 2], "b": {"c": "d"}},
        state_versions={"a": 2, "b": 1}, versions_seen={"node": {"a": 1}},
        pending_writes=[PendingWrite("task1", "findings", [1, 2])], parent_id="cp0",
    )
    payload = original.to_dict()
    assert payload["pending_writes"] == [{"task_id": "task1", "channel": "findings", "value": [1, 2]}]
    back = Checkpoint.from_dict(payload)
    for name in ("id", "thread_id", "step", "state_data", "state_versions", "versions_seen",
                 "pending_writes", "parent_id", "created_at", "schema_version"):
        assert getattr(back, name) == getattr(original, name), name
    assert back.pending_writes[0].task_id == "task1"
    assert back.pending_writes[0].channel == "findings"
    assert back.pending_writes[0].value == [1, 2]


def test_defaults_hold():
    c = Checkpoint(id="cp1", thread_id="t1", step=0, state_data={})
    assert c.state_versions == {}
    assert c.versions_seen == {}
    assert c.pending_writes == []
    assert c.parent_id is None
    assert c.schema_version == "v2"
    assert isinstance(c.created_at, str) and c.created_at
    # mutable defaults are not shared between instances
    c.state_versions["x"] = 1
    assert Checkpoint(id="cp2", thread_id="t1", step=0, state_data={}).state_versions == {}
    assert CheckpointConfig("t1") == CheckpointConfig("t1")
    assert CheckpointConfig("t1", "a") == CheckpointConfig(thread_id="t1", checkpoint_id="a")
    assert CheckpointConfig("t1") != CheckpointConfig("t1", "a")
    assert CheckpointConfig("t1").checkpoint_id is None
    assert hash(CheckpointConfig("t1", "a")) == hash(CheckpointConfig("t1", "a"))
    # the config is frozen
    with pytest.raises(dataclasses.FrozenInstanceError):
        CheckpointConfig("t1").thread_id = "t2"  # type: ignore[misc]


def test_state_version_tracker():
    tracker = StateVersionTracker()
    assert tracker.bump("scratchpad") == 1
    assert tracker.bump("scratchpad") == 2
    assert tracker.bump_all(["a", "scratchpad"]) == {"a": 1, "scratchpad": 3}
    assert tracker.bump_from_diff({"a": 1, "gone": 1, "same": 1}, {"a": 2, "new": 1, "same": 1}) == {
        "a": 2, "new": 1, "gone": 1}
    assert tracker.snapshot() == {"scratchpad": 3, "a": 2, "new": 1, "gone": 1}
    assert tracker.get("never") == 0
    tracker.apply_versions({"x": 5})
    assert tracker.snapshot() == {"x": 5}
    assert StateVersionTracker({"y": 2}).bump("y") == 3


# -- store CRUD -------------------------------------------------------------------------


def test_put_returns_config_with_thread_and_callers_id(store):
    checkpoint = cp("my-own-id-42", "t1")
    returned = store.put(CheckpointConfig(thread_id="t1"), checkpoint, {"source": "loop", "step": 0}, {})
    assert isinstance(returned, CheckpointConfig)
    assert returned.thread_id == "t1"
    assert returned.checkpoint_id == "my-own-id-42"
    assert store.get(returned).id == "my-own-id-42"


def test_get_without_id_returns_latest(store):
    for step in (0, 1, 2):
        put(store, f"cp{step}", step=step)
    latest = store.get(CheckpointConfig(thread_id="t1"))
    assert latest is not None
    assert latest.step == 2
    assert latest.id == "cp2"


def test_list_limit_newest_first_and_all_without_limit(store):
    for step in range(5):
        put(store, f"cp{step}", step=step)
    items = list(store.list(CheckpointConfig(thread_id="t1"), limit=3))
    assert len(items) == 3
    assert all(isinstance(t, CheckpointTuple) for t in items)
    assert [t.checkpoint.step for t in items] == [4, 3, 2]
    assert items[0].checkpoint.step == 4
    everything = list(store.list(CheckpointConfig(thread_id="t1")))
    assert len(everything) == 5
    assert [t.checkpoint.step for t in everything] == [4, 3, 2, 1, 0]


def test_put_writes_then_get_tuple_pending_writes(store):
    put(store, "cp1")
    store.put_writes(CheckpointConfig("t1", "cp1"), [PendingWrite("task1", "findings", [1, 2])], "task1")
    tup = store.get_tuple(CheckpointConfig("t1"))
    assert isinstance(tup.pending_writes, list)
    assert len(tup.pending_writes) == 1
    assert tup.pending_writes[0].value == [1, 2]
    assert tup.pending_writes[0].task_id == "task1"
    assert tup.pending_writes[0].channel == "findings"
    # the plain string value of the QitOS test
    put(store, "cp2", step=1)
    store.put_writes(CheckpointConfig("t1", "cp2"), [PendingWrite("task2", "ch", "val1")], "task2")
    tup2 = store.get_tuple(CheckpointConfig("t1"))
    assert [w.value for w in tup2.pending_writes] == ["val1"]


def test_delete_single_checkpoint_thread_makes_get_return_none(store):
    put(store, "cp1")
    store.delete(CheckpointConfig("t1", "cp1"))
    assert store.get(CheckpointConfig("t1")) is None
    assert store.get_tuple(CheckpointConfig("t1", "cp1")) is None


def test_threads_are_isolated(store):
    put(store, "a0", "t1", 0, {"who": "t1"})
    put(store, "b0", "t2", 0, {"who": "t2"})
    put(store, "a1", "t1", 1, {"who": "t1 again"})
    l1 = store.get(CheckpointConfig("t1"))
    l2 = store.get(CheckpointConfig("t2"))
    assert (l1.id, l1.state_data) == ("a1", {"who": "t1 again"})
    assert (l2.id, l2.state_data) == ("b0", {"who": "t2"})
    assert [t.checkpoint.id for t in store.list(CheckpointConfig("t2"))] == ["b0"]
    assert [t.checkpoint.id for t in store.list(CheckpointConfig("t1"))] == ["a1", "a0"]


def test_usable_as_context_manager_with_close(repo_path):
    with GitCheckpointStore(repo_path) as s:
        assert isinstance(s, CheckpointStore)
        put(s, "cp1")
        assert s.get(CheckpointConfig("t1")).id == "cp1"
    s.close()  # closing again after the with block is harmless
    with GitCheckpointStore(repo_path, create=False) as again:
        assert again.get(CheckpointConfig("t1")).id == "cp1"


def test_file_backed_store_persists_across_instance_reopen(repo_path):
    s = GitCheckpointStore(repo_path)
    put(s, "cp0", step=0, state={"msg": "hello"})
    put(s, "cp1", step=1, state={"msg": "world"}, metadata={"source": "loop", "step": 1, "run_id": "r1"})
    s.put_writes(CheckpointConfig("t1", "cp1"), [PendingWrite("task", "ch", {"v": 1})], "task")
    s.close()
    s2 = GitCheckpointStore(repo_path, create=False)
    try:
        tup = s2.get_tuple(CheckpointConfig("t1"))
        assert tup.checkpoint.id == "cp1"
        assert tup.checkpoint.state_data == {"msg": "world"}
        assert tup.metadata == {"source": "loop", "step": 1, "run_id": "r1"}
        assert tup.parent_config == CheckpointConfig("t1", "cp0")
        assert tup.pending_writes == [PendingWrite("task", "ch", {"v": 1})]
        assert [t.checkpoint.id for t in s2.list(CheckpointConfig("t1"))] == ["cp1", "cp0"]
    finally:
        s2.close()


def test_file_backed_store_persists_across_process_reopen(repo_path):
    script = (
        "import sys\n"
        "from qvc import GitCheckpointStore, Checkpoint, CheckpointConfig\n"
        "s = GitCheckpointStore(sys.argv[1])\n"
        "for i in range(3):\n"
        "    s.put(CheckpointConfig('proc'), Checkpoint(id=f'p{i}', thread_id='proc', step=i,\n"
        "          state_data={'i': i, 'who': 'child'}), {'source': 'loop', 'step': i}, {})\n"
        "s.close()\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-c", script, str(repo_path)], check=True, env=env, timeout=60)
    with GitCheckpointStore(repo_path, create=False) as s:
        assert s.threads() == ["proc"]
        latest = s.get(CheckpointConfig("proc"))
        assert (latest.id, latest.step, latest.state_data) == ("p2", 2, {"i": 2, "who": "child"})
        assert [t.checkpoint.id for t in s.list(CheckpointConfig("proc"))] == ["p2", "p1", "p0"]


# -- managers ---------------------------------------------------------------------------


def test_pending_write_manager_begin_complete_get_pending_and_load_from_store(store):
    put(store, "cp1")
    mgr = PendingWriteManager(store)
    mgr.begin_task("task1", "findings")
    assert mgr.get_pending("task1") is None
    mgr.complete_task("task1", {"hits": [1, 2]}, CheckpointConfig("t1", "cp1"))
    assert mgr.get_pending("task1") == {"hits": [1, 2]}
    with pytest.raises(KeyError):
        mgr.complete_task("never-begun", 1, CheckpointConfig("t1", "cp1"))
    # written through to the store at once
    assert store.get_tuple(CheckpointConfig("t1", "cp1")).pending_writes == [
        PendingWrite("task1", "findings", {"hits": [1, 2]})]
    # writes stored with put_writes are loaded as {task_id: value}
    store.put_writes(CheckpointConfig("t1", "cp1"), [PendingWrite("task2", "other", "val1")], "task2")
    fresh = PendingWriteManager(store)
    assert fresh.load_pending_from_store(CheckpointConfig("t1", "cp1")) == {
        "task1": {"hits": [1, 2]}, "task2": "val1"}
    assert fresh.get_pending("task2") == "val1"


def test_durability_manager_sync_visible_at_once(store):
    mgr = DurabilityManager(store, DurabilityMode.SYNC)
    returned = mgr.put(CheckpointConfig("t1"), cp("cp1"), {"source": "loop", "step": 0}, {})
    assert returned == CheckpointConfig("t1", "cp1")
    assert store.get(CheckpointConfig("t1")).id == "cp1"


def test_durability_manager_exit_visible_after_flush(store):
    mgr = DurabilityManager(store, DurabilityMode.EXIT)
    returned = mgr.put(CheckpointConfig("t1"), cp("cp1"), {"source": "loop", "step": 0}, {})
    assert returned == CheckpointConfig("t1", "cp1")
    assert store.get(CheckpointConfig("t1")) is None  # buffered until flush()
    mgr.flush()
    assert store.get(CheckpointConfig("t1")).id == "cp1"


def test_durability_manager_async_visible_after_flush(store):
    mgr = DurabilityManager(store, DurabilityMode.ASYNC)
    try:
        for i in range(5):
            returned = mgr.put(CheckpointConfig("t1"), cp(f"cp{i}", step=i), {"source": "loop", "step": i}, {})
            assert returned == CheckpointConfig("t1", f"cp{i}")
        mgr.flush()
        assert [t.checkpoint.id for t in store.list(CheckpointConfig("t1"))] == ["cp4", "cp3", "cp2", "cp1", "cp0"]
        # the worker keeps working after a flush (QitOS's older manager stopped here)
        mgr.put(CheckpointConfig("t1"), cp("cp5", step=5), {"source": "loop", "step": 5}, {})
        mgr.flush()
        assert store.get(CheckpointConfig("t1")).id == "cp5"
    finally:
        mgr.shutdown()


# -- forks ------------------------------------------------------------------------------


def test_fork_checkpoint_same_thread(store):
    put(store, "cp0", step=0, state={"plan": "a"})
    put(store, "cp1", step=1, state={"plan": "b", "notes": [1, 2]})
    returned = fork_checkpoint(store, CheckpointConfig("t1"))
    assert returned.thread_id == "t1"
    assert returned.checkpoint_id is not None
    assert returned.checkpoint_id not in ("cp0", "cp1")
    forked = store.get(returned)
    assert forked.state_data == {"plan": "b", "notes": [1, 2]}
    assert forked.parent_id == "cp1"
    assert forked.step == 1


def test_fork_checkpoint_new_thread(store):
    put(store, "cp0", step=0, state={"plan": "a"})
    put(store, "cp1", step=1, state={"plan": "b"})
    returned = fork_checkpoint(store, CheckpointConfig("t1", "cp0"), new_thread_id="t2")
    assert returned.thread_id == "t2"
    assert returned.checkpoint_id is not None
    forked = store.get(CheckpointConfig("t2"))
    assert forked.id == returned.checkpoint_id
    assert forked.thread_id == "t2"
    assert forked.state_data == {"plan": "a"}
    assert forked.parent_id == "cp0"
    # the source thread is untouched
    assert store.get(CheckpointConfig("t1")).id == "cp1"


def test_list_fork_history_with_parent_id_none_puts(store):
    for step in range(3):
        put(store, f"cp{step}", step=step)  # parent_id None each time
    history = list_fork_history(store, CheckpointConfig("t1", "cp2"))
    assert len(history) == 3
    assert history[0].checkpoint.step == 2
    assert history[2].checkpoint.step == 0
    assert [t.checkpoint.id for t in history] == ["cp2", "cp1", "cp0"]
    assert history[0].parent_config == CheckpointConfig("t1", "cp1")
    assert history[2].parent_config is None


def test_metadata_interrupt_accepted_and_extra_keys_kept(store):
    put(store, "cp0", step=0)
    meta = {"source": "interrupt", "step": 3}
    store.put(CheckpointConfig("t1"), cp("cp3", step=3, state={"q": "approve?"}), meta, {})
    tup = store.get_tuple(CheckpointConfig("t1"))
    assert tup.checkpoint.step == 3
    assert tup.checkpoint.state_data == {"q": "approve?"}
    assert tup.metadata == {"source": "interrupt", "step": 3}
    # extra keys are kept untouched (README: "every key the caller gives is kept")
    extra = {"source": "loop", "step": 4, "run_id": "r1", "parents": {"t0": "x"},
             "custom": {"nested": [1, 2]}, "cost_usd": 0.25}
    store.put(CheckpointConfig("t1"), cp("cp4", step=4), extra, {})
    assert store.get_tuple(CheckpointConfig("t1", "cp4")).metadata == extra


def test_explicit_checkpoint_id_resolves_across_threads(store):
    put(store, "a0", "run_aaa", 0, {"who": "a"})
    put(store, "b0", "run_bbb", 0, {"who": "b"})
    tup = store.get_tuple(CheckpointConfig(thread_id="run_bbb", checkpoint_id="a0"))
    assert tup is not None
    assert tup.checkpoint.id == "a0"
    assert tup.checkpoint.thread_id == "run_aaa"
    assert tup.config == CheckpointConfig("run_aaa", "a0")
    assert tup.checkpoint.state_data == {"who": "a"}


def test_put_keys_strictly_on_callers_checkpoint_id(store):
    mgr_exit = DurabilityManager(store, DurabilityMode.EXIT)
    mgr_async = DurabilityManager(store, DurabilityMode.ASYNC)
    try:
        ids = ["3f2a9c0d1e2b4c5d6e7f8091a2b3c4d5", "engine-chosen-id"]
        # The engine ignores put's return value and records checkpoint.id.
        r0 = store.put(CheckpointConfig("t1"), cp(ids[0]), {"source": "loop", "step": 0}, {})
        assert r0.checkpoint_id == ids[0]
        # ASYNC and EXIT return the caller's id before the store runs.
        r1 = mgr_exit.put(CheckpointConfig("t1"), cp(ids[1], step=1, parent_id=ids[0]),
                          {"source": "loop", "step": 1}, {})
        assert r1 == CheckpointConfig("t1", ids[1])
        assert store.get(CheckpointConfig("t1", ids[1])) is None
        mgr_exit.flush()
        r2 = mgr_async.put(CheckpointConfig("t1"), cp("async-id", step=2, parent_id=ids[1]),
                           {"source": "loop", "step": 2}, {})
        assert r2 == CheckpointConfig("t1", "async-id")
        mgr_async.flush()
        for cid in ids + ["async-id"]:
            assert store.get(CheckpointConfig("t1", cid)).id == cid
            assert store.get(CheckpointConfig("other-thread", cid)).id == cid
        assert [t.checkpoint.id for t in store.list(CheckpointConfig("t1"))] == ["async-id"] + ids[::-1]
    finally:
        mgr_async.shutdown()


def _hammer_reads(store, done: threading.Event, errors: list, counters: dict) -> None:
    i = 0
    while not done.is_set() or i < 3:
        tup = store.get_tuple(CheckpointConfig("t1"))
        assert tup is not None
        steps = [t.checkpoint.step for t in store.list(CheckpointConfig("t1"))]
        assert steps == sorted(steps, reverse=True), steps
        store.put_writes(CheckpointConfig("t1", "base"), [PendingWrite(f"task{i}", "ch", i)], f"task{i}")
        i += 1
    counters["writes"] = i


def test_put_safe_from_background_thread_concurrent_with_get_tuple_put_writes_list(store):
    put(store, "base", step=0)
    n = 30
    errors: list = []
    done = threading.Event()

    def writer():
        try:
            for i in range(1, n + 1):
                store.put(CheckpointConfig("t1"), cp(f"bg{i}", step=i), {"source": "loop", "step": i}, {})
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            done.set()

    t = threading.Thread(target=writer)
    counters: dict = {}
    t.start()
    try:
        _hammer_reads(store, done, errors, counters)
    finally:
        done.set()
        t.join(30)
    assert not errors, errors
    assert [tp.checkpoint.step for tp in store.list(CheckpointConfig("t1"))] == list(range(n, -1, -1))
    writes = store.get_tuple(CheckpointConfig("t1", "base")).pending_writes
    assert len(writes) == counters["writes"]
    assert sorted(w.value for w in writes) == list(range(counters["writes"]))


def test_put_safe_via_async_durability_manager_concurrent_with_reads(store):
    put(store, "base", step=0)
    mgr = DurabilityManager(store, DurabilityMode.ASYNC)
    n = 30
    try:
        done = threading.Event()
        errors: list = []
        counters: dict = {}

        def feeder():
            for i in range(1, n + 1):
                mgr.put(CheckpointConfig("t1"), cp(f"bg{i}", step=i), {"source": "loop", "step": i}, {})
            done.set()

        t = threading.Thread(target=feeder)
        t.start()
        _hammer_reads(store, done, errors, counters)
        t.join(30)
        mgr.flush()
    finally:
        mgr.shutdown()
    assert [tp.checkpoint.step for tp in store.list(CheckpointConfig("t1"))] == list(range(n, -1, -1))
    assert len(store.get_tuple(CheckpointConfig("t1", "base")).pending_writes) == counters["writes"]


def test_put_writes_to_missing_checkpoint_raises_typed_not_found(store):
    # README choice: the store raises the typed not-found error instead of ignoring.
    with pytest.raises(UnknownThreadError):
        store.put_writes(CheckpointConfig("fresh"), [PendingWrite("t", "ch", 1)], "t")
    put(store, "cp1")
    with pytest.raises(UnknownCheckpointError):
        store.put_writes(CheckpointConfig("t1", "not-yet-put"), [PendingWrite("t", "ch", 1)], "t")
    for exc in (UnknownThreadError, UnknownCheckpointError):
        assert issubclass(exc, NotFoundError) and issubclass(exc, LookupError)
    assert store.get_tuple(CheckpointConfig("t1", "cp1")).pending_writes is None


def test_pending_write_manager_does_not_crash_for_checkpoint_not_yet_put(store):
    # Checklist: "put_writes may target a checkpoint that does not exist yet, or has no id.
    # It must not crash ... Upstream PendingWriteManager checks get_tuple first."
    # The engine's first step completes tools against CheckpointConfig(thread, None) before
    # any checkpoint exists, then commit_writes() attaches them to that step's checkpoint.
    mgr = PendingWriteManager(store)
    mgr.begin_task("tool-1", "tool_terminal")
    mgr.complete_task("tool-1", {"ok": True}, CheckpointConfig("run_new"))  # must not raise
    assert mgr.get_pending("tool-1") == {"ok": True}
    put(store, "first", "run_new", 0)
    mgr.commit_writes(CheckpointConfig("run_new", "first"))
    writes = store.get_tuple(CheckpointConfig("run_new", "first")).pending_writes
    assert writes == [PendingWrite("tool-1", "tool_terminal", {"ok": True})]


@dataclasses.dataclass
class _AgentState:
    task: str
    current_step: int
    max_steps: int
    final_result: object
    stop_reason: object
    metadata: dict
    metrics: dict
    scratchpad: list
    ratio: float
    done: bool


def test_state_data_survives_json_round_trip(store):
    state = dataclasses.asdict(_AgentState(
        task="find the bug — ünïcödé", current_step=3, max_steps=10, final_result=None, stop_reason=None,
        metadata={"k": [1, 2.5, True, None, "s"], "nested": {"deep": {"x": -1}}},
        metrics={"tokens": 12, "latency": 0.125}, scratchpad=[{"role": "user", "content": "hi"}],
        ratio=1e-300, done=False,
    ))
    store.put(CheckpointConfig("t1"), cp("cp1", state=state), {"source": "loop", "step": 3}, {})
    back = store.get(CheckpointConfig("t1")).state_data
    assert back == state
    # json.dumps tells 1 from 1.0 and True from 1, so this also checks the scalar types
    strict = json.dumps(state, sort_keys=True, allow_nan=False)
    assert json.dumps(back, sort_keys=True, allow_nan=False) == strict
    assert json.loads(strict) == back


def test_after_time_travel_fork_get_thread_returns_fork(store):
    for step in range(4):
        put(store, f"cp{step}", step=step)
    returned = fork_checkpoint(store, CheckpointConfig("t1", "cp1"))
    latest = store.get(CheckpointConfig("t1"))
    assert latest.id == returned.checkpoint_id
    assert latest.parent_id == "cp1"
    assert latest.step == 1
    assert [t.checkpoint.id for t in store.list(CheckpointConfig("t1"))] == [returned.checkpoint_id, "cp1", "cp0"]
    # and the superseded line is still there
    ids = [t.checkpoint.id for t in store.list(CheckpointConfig("t1"), superseded=True)]
    assert "cp3" in ids and "cp2" in ids
