"""GitCheckpointStore's storage model, checked against the repository with real ``git``."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import helpers
import pytest
from helpers import run_git

from qvc import (
    Checkpoint,
    CheckpointConfig,
    CheckpointConflictError,
    DurabilityMode,
    GitCheckpointStore,
    InvalidInputError,
    InvalidThreadIdError,
    NotARepositoryError,
    NotFoundError,
    PendingWrite,
    QvcError,
    SerializationError,
    UnknownCheckpointError,
    UnknownThreadError,
    fork_checkpoint,
)
from qvc.store.refnames import SUPERSEDED


def cp(cid, thread="t1", step=0, state=None, parent_id=None):
    return Checkpoint(id=cid, thread_id=thread, step=step, state_data={"x": step} if state is None else state,
                      parent_id=parent_id)


def put(store, cid, thread="t1", step=0, state=None, parent_id=None, metadata=None, new_versions=None):
    """``helpers.put`` with this file's defaults (kept: id first, thread "t1", step 0, state ``{"x": step}``)."""
    return helpers.put(store, thread, cid, step, {"x": step} if state is None else state, parent_id=parent_id,
                       metadata=metadata, new_versions=new_versions)


def ids(store, thread="t1", **kw):
    return [t.checkpoint.id for t in store.list(CheckpointConfig(thread), **kw)]


def ls_tree(git, treeish) -> dict[str, tuple[str, str]]:
    """``git ls-tree`` as {name: (type, oid)}."""
    out = {}
    for line in git("ls-tree", treeish).stdout.splitlines():
        meta, name = line.split("\t", 1)
        _, kind, oid = meta.split()
        out[name] = (kind, oid)
    return out


def five_puts(store):
    """current_step changes every put, scratchpad 3 times, final_result appears at the end."""
    states = [
        {"current_step": 0, "scratchpad": "a"},
        {"current_step": 1, "scratchpad": "a"},
        {"current_step": 2, "scratchpad": "b"},
        {"current_step": 3, "scratchpad": "b"},
        {"current_step": 4, "scratchpad": "c", "final_result": "done"},
    ]
    for i, state in enumerate(states):
        # whatever versions the caller passes are ignored: they are derived from the trees
        put(store, f"cp{i}", step=i, state=state, new_versions={"scratchpad": 99})
    return states


# -- state versions ---------------------------------------------------------------------


def test_state_versions_are_derived_from_tree_diffs(store):
    five_puts(store)
    latest = store.get(CheckpointConfig("t1"))
    assert latest.state_versions == {"scratchpad": 3, "current_step": 5, "final_result": 1}
    assert store.get(CheckpointConfig("t1", "cp0")).state_versions == {"scratchpad": 1, "current_step": 1}
    assert store.get(CheckpointConfig("t1", "cp2")).state_versions == {"scratchpad": 2, "current_step": 3}
    assert store.get(CheckpointConfig("t1", "cp3")).state_versions == {"scratchpad": 2, "current_step": 4}


def test_state_versions_ignore_what_the_caller_passed(store):
    store.put(CheckpointConfig("t1"), Checkpoint(id="c", thread_id="t1", step=0, state_data={"a": 1},
                                                 state_versions={"a": 41, "ghost": 7}), {}, {"a": 41})
    assert store.get(CheckpointConfig("t1")).state_versions == {"a": 1}


def test_new_versions(store):
    five_puts(store)
    assert store.new_versions(CheckpointConfig("t1")) == {"scratchpad": 3, "current_step": 5, "final_result": 1}
    assert store.new_versions(CheckpointConfig("t1", "cp3")) == {"current_step": 4}
    assert store.new_versions(CheckpointConfig("t1", "cp2")) == {"current_step": 3, "scratchpad": 2}
    assert store.new_versions(CheckpointConfig("t1", "cp0")) == {"current_step": 1, "scratchpad": 1}
    with pytest.raises(UnknownCheckpointError):
        store.new_versions(CheckpointConfig("t1", "nope"))
    with pytest.raises(UnknownThreadError):
        store.new_versions(CheckpointConfig("empty"))


def test_state_versions_survive_reopen(repo_path):
    with GitCheckpointStore(repo_path) as s:
        five_puts(s)
    with GitCheckpointStore(repo_path, create=False) as s:
        assert s.get(CheckpointConfig("t1")).state_versions == {"scratchpad": 3, "current_step": 5, "final_result": 1}


# -- objects: sharing and chunking ------------------------------------------------------


def test_unchanged_fields_share_blob_ids(store, git):
    five_puts(store)
    trees = [ls_tree(git, store.resolve(f"cp{i}")) for i in range(5)]
    for tree in trees:
        assert tree["scratchpad"][0] == "blob" and tree["current_step"][0] == "blob"
        assert ".qvc" in tree
    assert trees[0]["scratchpad"][1] == trees[1]["scratchpad"][1]
    assert trees[2]["scratchpad"][1] == trees[3]["scratchpad"][1]
    assert trees[1]["scratchpad"][1] != trees[2]["scratchpad"][1]
    assert len({t["current_step"][1] for t in trees}) == 5
    assert "final_result" not in trees[3] and "final_result" in trees[4]
    # the blob is the field's value, readable by git
    raw = git("cat-file", "blob", trees[0]["scratchpad"][1], text=False).stdout
    assert b"a" in raw


def test_long_list_is_chunked_and_appends_reuse_chunk_blobs(store, git):
    messages = [{"role": "user" if i % 2 else "assistant", "content": f"message number {i}"} for i in range(200)]
    put(store, "m0", step=0, state={"messages": messages, "step": 0})
    sha0 = store.resolve("m0")
    root = ls_tree(git, sha0)
    assert root["messages"][0] == "tree"
    chunks0 = ls_tree(git, root["messages"][1])
    assert sorted(chunks0) == ["00000000", "00000001", "00000002", "00000003"]
    assert all(kind == "blob" for kind, _ in chunks0.values())

    grown = messages + [{"role": "tool", "content": f"appended {i}"} for i in range(10)]
    put(store, "m1", step=1, state={"messages": grown, "step": 1})
    chunks1 = ls_tree(git, ls_tree(git, store.resolve("m1"))["messages"][1])
    assert sorted(chunks1) == ["00000000", "00000001", "00000002", "00000003"]
    for name in ("00000000", "00000001", "00000002"):
        assert chunks1[name][1] == chunks0[name][1], name
    assert chunks1["00000003"][1] != chunks0["00000003"][1]

    more = grown + [{"role": "tool", "content": f"more {i}"} for i in range(60)]  # 270 -> 5 chunks
    put(store, "m2", step=2, state={"messages": more, "step": 2})
    chunks2 = ls_tree(git, ls_tree(git, store.resolve("m2"))["messages"][1])
    assert sorted(chunks2) == [f"{i:08d}" for i in range(5)]
    for name in ("00000000", "00000001", "00000002"):
        assert chunks2[name][1] == chunks0[name][1], name

    assert store.get(CheckpointConfig("t1", "m0")).state_data["messages"] == messages
    assert store.get(CheckpointConfig("t1", "m1")).state_data["messages"] == grown
    assert store.get(CheckpointConfig("t1")).state_data["messages"] == more
    assert store.get(CheckpointConfig("t1")).state_versions == {"messages": 3, "step": 3}


def test_chunk_blobs_reused_after_reopen(repo_path):
    messages = [f"m{i}" for i in range(130)]
    with GitCheckpointStore(repo_path) as s:
        put(s, "a", state={"msgs": messages})
    with GitCheckpointStore(repo_path, create=False) as s:
        put(s, "b", step=1, state={"msgs": messages + ["new"]})
        first, second = s.resolve("a"), s.resolve("b")

    def git(*args, **kw):
        return run_git(repo_path, *args, **kw)

    t0 = ls_tree(git, ls_tree(git, first)["msgs"][1])
    t1 = ls_tree(git, ls_tree(git, second)["msgs"][1])
    assert t0["00000000"] == t1["00000000"] and t0["00000001"] == t1["00000001"]
    assert t0["00000002"] != t1["00000002"]


# -- commits: messages, trailers, fsck --------------------------------------------------


def test_commit_messages_are_readable_with_trailers(store, git):
    five_puts(store)
    subjects = git("log", "--format=%s", "t1").stdout.splitlines()
    assert len(subjects) == 5
    assert re.fullmatch(r"step 4 · loop · 3 fields changed", subjects[0]), subjects[0]
    assert re.fullmatch(r"step 3 · loop · 1 fields? changed", subjects[1]), subjects[1]
    assert re.fullmatch(r"step 0 · loop · 2 fields changed", subjects[4]), subjects[4]
    body = git("log", "-1", "--format=%B", "t1").stdout
    for name in ("current_step", "scratchpad", "final_result"):
        assert name in body
    trailers = git("log", "-1", "--format=%(trailers:only,unfold)", "t1").stdout
    assert "Checkpoint-Id: cp4" in trailers
    assert "Thread: t1" in trailers
    assert "Step: 4" in trailers
    ids_from_git = git("log", "--format=%(trailers:key=Checkpoint-Id,valueonly)", "t1").stdout.split()
    assert ids_from_git == ["cp4", "cp3", "cp2", "cp1", "cp0"]


def test_git_fsck_strict_is_clean(store, git):
    five_puts(store)
    put(store, "long", step=5, state={"msgs": list(range(300)), "nested": {"a": [1, {2: 3}]}})
    fork_checkpoint(store, CheckpointConfig("t1", "cp2"), new_thread_id="branch/2 ü")
    fork_checkpoint(store, CheckpointConfig("t1", "cp1"))  # time travel
    store.put_writes(CheckpointConfig("t1", "cp3"), [PendingWrite("task", "ch", {"v": 1})], "task")
    store.delete(CheckpointConfig("t1", "cp3"))
    store.put(CheckpointConfig("t1"), Checkpoint(id="odd", thread_id="t1", step=6,
                                                 state_data={".qvc": 1, "a/b": 2, "%": 3, ".x": 4, "": 5}), {}, {})
    store.flush()
    fsck = git("fsck", "--strict", "--no-dangling", check=False)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    assert "error" not in (fsck.stdout + fsck.stderr).lower()
    assert "warning" not in (fsck.stdout + fsck.stderr).lower()


def test_field_names_that_look_like_paths_round_trip(store, git):
    state = {".qvc": "not the header", "a/b": 1, "%41": 2, ".hidden": 3, "": 4, "\x01ctl": 5, "ü": 6}
    store.put(CheckpointConfig("t1"), Checkpoint(id="c", thread_id="t1", step=0, state_data=state), {"k": 1}, {})
    tup = store.get_tuple(CheckpointConfig("t1"))
    assert tup.checkpoint.state_data == state
    assert tup.metadata == {"k": 1}
    assert tup.checkpoint.id == "c"


# -- forks, time travel, reset ----------------------------------------------------------


def test_forks_are_branches(store, git):
    for i in range(3):
        put(store, f"cp{i}", step=i)
    forked = fork_checkpoint(store, CheckpointConfig("t1", "cp1"), new_thread_id="t2")
    put(store, "t2-next", "t2", step=2)
    refs = git("for-each-ref", "--format=%(refname)", "refs/heads/").stdout.split()
    assert sorted(refs) == ["refs/heads/t1", "refs/heads/t2"]
    branches = [b.strip(" *") for b in git("branch", "--list").stdout.splitlines()]
    assert sorted(branches) == ["t1", "t2"]
    # the fork descends from its source, like a git branch
    git("merge-base", "--is-ancestor", store.resolve("cp1"), "t2")
    assert git("merge-base", "--is-ancestor", store.resolve("cp2"), "t2", check=False).returncode == 1
    # list crosses into the source thread's history, as git log does
    assert ids(store, "t2") == ["t2-next", forked.checkpoint_id, "cp1", "cp0"]
    assert ids(store, "t1") == ["cp2", "cp1", "cp0"]
    log = git("log", "--first-parent", "--format=%(trailers:key=Checkpoint-Id,valueonly)", "t2").stdout.split()
    assert log == ids(store, "t2")
    tup = store.get_tuple(CheckpointConfig("t2", forked.checkpoint_id))
    assert tup.parent_config == CheckpointConfig("t1", "cp1")
    assert tup.metadata["source"] == "fork"


def test_put_with_parent_id_on_another_thread_is_a_fork(store):
    put(store, "a0", "t1", 0)
    put(store, "a1", "t1", 1)
    put(store, "b0", "t2", 1, parent_id="a0")
    tup = store.get_tuple(CheckpointConfig("t2"))
    assert tup.parent_config == CheckpointConfig("t1", "a0")
    assert tup.checkpoint.parent_id == "a0"
    assert ids(store, "t2") == ["b0", "a0"]
    assert ids(store, "t1") == ["a1", "a0"]


def test_time_travel_keeps_superseded_line_and_survives_gc(repo_path):
    s = GitCheckpointStore(repo_path)
    try:
        for i in range(4):
            put(s, f"cp{i}", step=i, state={"x": i, "payload": f"value-{i}"})
        fork = fork_checkpoint(s, CheckpointConfig("t1", "cp1"))
        assert ids(s) == [fork.checkpoint_id, "cp1", "cp0"]
        everything = ids(s, superseded=True)
        assert everything[:3] == [fork.checkpoint_id, "cp1", "cp0"]
        assert "cp3" in everything and "cp2" in everything
        assert len(everything) == len(set(everything)) == 5
        superseded_refs = run_git(repo_path, "for-each-ref", "--format=%(refname) %(objectname)",
                                  SUPERSEDED).stdout.splitlines()
        assert len(superseded_refs) == 1
        assert superseded_refs[0].split()[1] == s.resolve("cp3")
    finally:
        s.close()
    run_git(repo_path, "gc", "--prune=now", "--quiet")
    run_git(repo_path, "reflog", "expire", "--expire=now", "--all")
    run_git(repo_path, "prune", "--expire=now")
    with GitCheckpointStore(repo_path, create=False) as s:
        assert ids(s)[1:] == ["cp1", "cp0"]
        assert s.get(CheckpointConfig("t1", "cp3")).state_data == {"x": 3, "payload": "value-3"}
        assert s.get(CheckpointConfig("t1", "cp2")).state_data == {"x": 2, "payload": "value-2"}
        assert {"cp3", "cp2"} <= set(ids(s, superseded=True))
    fsck = run_git(repo_path, "fsck", "--strict", check=False)
    assert fsck.returncode == 0, fsck.stderr


def test_put_with_older_parent_id_on_same_thread_is_time_travel_when_asked(store):
    for i in range(4):
        put(store, f"cp{i}", step=i)
    head = store.head("t1")
    # Not asked for: another writer moving the head looks the same, so it is a conflict.
    with pytest.raises(CheckpointConflictError, match="nothing was stored.*expected_head"):
        put(store, "retry", step=2, parent_id="cp1")
    assert store.head("t1") == head and store.get(CheckpointConfig("t1", "retry")) is None
    assert ids(store, superseded=True) == ["cp3", "cp2", "cp1", "cp0"]  # no trace: no superseded line either
    with pytest.raises(CheckpointConflictError):  # asked for, but from a head that is not the head
        store.put(CheckpointConfig("t1"), cp("retry", "t1", 2, None, "cp1"), {}, expected_head=store.head("t1")[::-1])
    store.put(CheckpointConfig("t1"), cp("retry", "t1", 2, None, "cp1"), {"source": "loop", "step": 2},
              expected_head=head)
    assert store.get(CheckpointConfig("t1")).id == "retry"
    assert ids(store) == ["retry", "cp1", "cp0"]
    everything = ids(store, superseded=True)
    assert everything[:3] == ["retry", "cp1", "cp0"] and {"cp3", "cp2"} <= set(everything)
    assert store.threads() == ["t1"]  # a superseded line is not a thread
    # a later put without parent_id continues from the new head
    put(store, "next", step=3)
    assert ids(store) == ["next", "retry", "cp1", "cp0"]


def test_reset(store, git):
    for i in range(4):
        put(store, f"cp{i}", step=i)
    put(store, "other", "t2", 0)
    returned = store.reset("t1", "cp1")
    assert returned == CheckpointConfig("t1", "cp1")
    assert store.get(CheckpointConfig("t1")).id == "cp1"
    assert store.head("t1") == store.resolve("cp1")
    assert ids(store) == ["cp1", "cp0"]
    assert {"cp3", "cp2"} <= set(ids(store, superseded=True))
    # a put after the reset continues from the new head
    put(store, "cp1b", step=2)
    assert ids(store) == ["cp1b", "cp1", "cp0"]
    assert store.get_tuple(CheckpointConfig("t1")).parent_config == CheckpointConfig("t1", "cp1")
    assert "cp3" in ids(store, superseded=True)
    # reset forward again onto the superseded line
    store.reset("t1", "cp3")
    assert ids(store) == ["cp3", "cp2", "cp1", "cp0"]
    assert "cp1b" in ids(store, superseded=True)
    with pytest.raises(UnknownCheckpointError):
        store.reset("t1", "nope")
    with pytest.raises(InvalidInputError):
        store.reset("t1", "other")  # another thread's checkpoint: fork it instead
    assert store.get(CheckpointConfig("t1")).id == "cp3"
    fsck = git("fsck", "--strict", check=False)
    assert fsck.returncode == 0, fsck.stderr


# -- re-put ------------------------------------------------------------------------------


def test_reput_identical_head_is_noop(store):
    checkpoint = cp("cp0", state={"a": [1, 2]})
    first = store.put(CheckpointConfig("t1"), checkpoint, {"source": "loop", "step": 0}, {})
    head = store.head("t1")
    again = store.put(CheckpointConfig("t1"), checkpoint, {"source": "loop", "step": 0}, {})
    assert again == first
    assert store.head("t1") == head
    assert ids(store) == ["cp0"]


def test_reput_identical_with_parent_id_is_noop(store):
    put(store, "cp0", step=0)
    put(store, "cp1", step=1, parent_id="cp0")
    head = store.head("t1")
    again = put(store, "cp1", step=1, parent_id="cp0")
    assert again == CheckpointConfig("t1", "cp1")
    assert store.head("t1") == head
    assert ids(store) == ["cp1", "cp0"]


def test_reput_different_content_is_conflict(store):
    put(store, "cp0", step=0, state={"a": 1})
    with pytest.raises(CheckpointConflictError):
        put(store, "cp0", step=0, state={"a": 2})
    with pytest.raises(CheckpointConflictError):
        put(store, "cp0", "t2", step=0, state={"a": 1})  # same id on another thread
    assert store.get(CheckpointConfig("t1")).state_data == {"a": 1}
    assert store.threads() == ["t1"]


def test_reput_identical_with_nan_is_noop(store):
    # NaN != NaN in Python, but the content (the stored bytes) is identical
    checkpoint = cp("cp0", state={"score": float("nan"), "ok": 1})
    store.put(CheckpointConfig("t1"), checkpoint, {}, {})
    head = store.head("t1")
    assert store.put(CheckpointConfig("t1"), checkpoint, {}, {}) == CheckpointConfig("t1", "cp0")
    assert store.head("t1") == head


@pytest.mark.parametrize("first,second", [(1, True), (1, 1.0), (0.0, -0.0), ({"a"}, frozenset({"a"}))],
                         ids=["int-vs-bool", "int-vs-float", "zero-vs-negzero", "set-vs-frozenset"])
def test_reput_with_equal_comparing_but_different_value_is_conflict(store, first, second):
    # Values round-trip exactly (type included), so these are different content even though
    # Python's == says equal: a silent no-op would leave the caller believing `second` is stored.
    put(store, "cp0", state={"v": first})
    with pytest.raises(CheckpointConflictError):
        put(store, "cp0", state={"v": second})
    stored = store.get(CheckpointConfig("t1")).state_data["v"]
    assert type(stored) is type(first)


# -- list arguments ---------------------------------------------------------------------


def test_list_before_and_limit(store):
    for i in range(5):
        put(store, f"cp{i}", step=i)
    assert ids(store, before="cp3") == ["cp2", "cp1", "cp0"]
    assert ids(store, before="cp3", limit=2) == ["cp2", "cp1"]
    assert ids(store, limit=0) == []
    assert ids(store, before="cp0") == []
    with pytest.raises(UnknownCheckpointError):
        list(store.list(CheckpointConfig("t1"), before="nope"))
    with pytest.raises(InvalidInputError):
        list(store.list(CheckpointConfig("t1"), limit=-1))
    with pytest.raises(InvalidInputError):
        list(store.list(CheckpointConfig("t1"), limit="3"))
    assert list(store.list(CheckpointConfig("empty"))) == []


# -- pending writes ---------------------------------------------------------------------


def test_put_writes_to_unknown_checkpoint_is_typed_error(store):
    with pytest.raises(UnknownThreadError):
        store.put_writes(CheckpointConfig("t1"), [("ch", 1)], "task")
    put(store, "cp0")
    with pytest.raises(UnknownCheckpointError):
        store.put_writes(CheckpointConfig("t1", "missing"), [("ch", 1)], "task")
    with pytest.raises(NotFoundError):
        store.put_writes(CheckpointConfig("t1", "missing"), [PendingWrite("t", "ch", 1)], "t")


def test_put_writes_upsert_per_task_channel_index(store):
    put(store, "cp0", step=0)
    put(store, "cp1", step=1)
    put(store, "cp2", step=2)
    cfg = CheckpointConfig("t1", "cp1")
    store.put_writes(cfg, [("c", 1), ("d", 2)], "task1")
    store.put_writes(cfg, [("c", 10)], "task1")  # same (task1, c, 0): replaced
    store.put_writes(cfg, [("c", 5)], "task2")  # other task: added
    store.put_writes(cfg, [("x", "first"), ("x", "second")], "task3")  # same channel, two indexes
    store.put_writes(cfg, [PendingWrite("task4", "p", {"k": [1]})], "ignored")
    writes = store.get_tuple(cfg).pending_writes
    assert sorted(writes, key=repr) == sorted([
        PendingWrite("task1", "c", 10), PendingWrite("task1", "d", 2), PendingWrite("task2", "c", 5),
        PendingWrite("task3", "x", "first"), PendingWrite("task3", "x", "second"),
        PendingWrite("task4", "p", {"k": [1]}),
    ], key=repr)
    # only returned for that checkpoint
    assert store.get_tuple(CheckpointConfig("t1", "cp0")).pending_writes is None
    assert store.get_tuple(CheckpointConfig("t1")).pending_writes is None
    assert all(t.pending_writes is None for t in store.list(CheckpointConfig("t1")) if t.checkpoint.id != "cp1")
    # list carries them too
    listed = {t.checkpoint.id: t.pending_writes for t in store.list(CheckpointConfig("t1"))}
    assert sorted(listed["cp1"], key=repr) == sorted(writes, key=repr)
    # writes do not move the thread or rewrite the checkpoint commit
    assert store.head("t1") == store.resolve("cp2")


def test_put_writes_bad_items_are_typed_errors(store):
    put(store, "cp0")
    with pytest.raises(InvalidInputError):
        store.put_writes(CheckpointConfig("t1"), ["not a write"], "task")
    with pytest.raises(InvalidInputError):
        store.put_writes(CheckpointConfig("t1"), [(1, 2)], "task")
    with pytest.raises(SerializationError):
        store.put_writes(CheckpointConfig("t1"), [("ch", object())], "task")
    assert store.get_tuple(CheckpointConfig("t1")).pending_writes is None


# -- delete -----------------------------------------------------------------------------


def test_delete_head(store):
    for i in range(3):
        put(store, f"cp{i}", step=i)
    store.delete(CheckpointConfig("t1"))
    assert store.get(CheckpointConfig("t1")).id == "cp1"
    assert ids(store) == ["cp1", "cp0"]
    assert store.get(CheckpointConfig("t1", "cp2")) is None
    put(store, "cp3", step=3)
    assert store.get_tuple(CheckpointConfig("t1")).parent_config == CheckpointConfig("t1", "cp1")


def test_delete_middle_reparents_children_and_keeps_ids(store, git):
    for i in range(4):
        put(store, f"cp{i}", step=i, state={"x": i, "keep": "same"})
    store.put_writes(CheckpointConfig("t1", "cp2"), [("ch", "w2")], "task")
    old_sha2 = store.resolve("cp2")
    store.delete(CheckpointConfig("t1", "cp1"))
    assert ids(store) == ["cp3", "cp2", "cp0"]
    tup2 = store.get_tuple(CheckpointConfig("t1", "cp2"))
    assert tup2.parent_config == CheckpointConfig("t1", "cp0")
    assert tup2.checkpoint.state_data == {"x": 2, "keep": "same"}
    assert tup2.pending_writes == [PendingWrite("task", "ch", "w2")]
    assert store.get_tuple(CheckpointConfig("t1", "cp3")).parent_config == CheckpointConfig("t1", "cp2")
    assert store.get(CheckpointConfig("t1", "cp1")) is None
    assert store.resolve("cp2") != old_sha2  # the commit was rewritten, the id is stable
    log = git("log", "--format=%(trailers:key=Checkpoint-Id,valueonly)", "t1").stdout.split()
    assert log == ["cp3", "cp2", "cp0"]
    fsck = git("fsck", "--strict", check=False)
    assert fsck.returncode == 0, fsck.stderr


def test_delete_only_checkpoint_removes_thread(store, git):
    put(store, "only", "solo")
    put(store, "k", "keep")
    store.delete(CheckpointConfig("solo", "only"))
    assert store.threads() == ["keep"]
    assert store.get(CheckpointConfig("solo")) is None
    assert list(store.list(CheckpointConfig("solo"))) == []
    assert store.head("solo") is None
    assert git("for-each-ref", "--format=%(refname)", "refs/heads/").stdout.split() == ["refs/heads/keep"]


def test_delete_when_another_thread_has_pending_writes(store):
    # Pending writes on checkpoints that the delete does not touch must not make it fail.
    put(store, "a0", "t1", 0)
    store.put_writes(CheckpointConfig("t1", "a0"), [("ch", 1)], "task")
    put(store, "b0", "t2", 0)
    store.delete(CheckpointConfig("t2", "b0"))
    assert store.threads() == ["t1"]
    assert store.get_tuple(CheckpointConfig("t1", "a0")).pending_writes == [PendingWrite("task", "ch", 1)]


def test_delete_on_same_thread_keeps_writes_of_older_checkpoints(store):
    put(store, "a0", "t1", 0)
    store.put_writes(CheckpointConfig("t1", "a0"), [("ch", "w0")], "task")
    put(store, "a1", "t1", 1)
    put(store, "a2", "t1", 2)
    store.delete(CheckpointConfig("t1", "a2"))  # the head: a0 is not rewritten
    assert ids(store) == ["a1", "a0"]
    store.delete(CheckpointConfig("t1", "a1"))
    assert ids(store) == ["a0"]
    assert store.get_tuple(CheckpointConfig("t1", "a0")).pending_writes == [PendingWrite("task", "ch", "w0")]


def test_delete_checkpoint_shared_by_a_fork_reparents_both_threads(store, git):
    for i in range(3):
        put(store, f"cp{i}", step=i, state={"i": i})
    fork = fork_checkpoint(store, CheckpointConfig("t1", "cp1"), new_thread_id="t2")
    put(store, "t2-a", "t2", step=2, state={"i": 20})
    store.delete(CheckpointConfig("t1", "cp1"))
    assert ids(store, "t1") == ["cp2", "cp0"]
    assert ids(store, "t2") == ["t2-a", fork.checkpoint_id, "cp0"]
    forked = store.get_tuple(CheckpointConfig("t2", fork.checkpoint_id))
    assert forked.parent_config == CheckpointConfig("t1", "cp0")
    assert forked.checkpoint.state_data == {"i": 1}  # the fork's own copy of the state
    assert store.get(CheckpointConfig("t2")).state_data == {"i": 20}
    assert store.threads() == ["t1", "t2"]
    fsck = git("fsck", "--strict", check=False)
    assert fsck.returncode == 0, fsck.stderr


def test_delete_on_superseded_line(store):
    for i in range(4):
        put(store, f"cp{i}", step=i)
    store.reset("t1", "cp1")
    store.delete(CheckpointConfig("t1", "cp2"))
    assert ids(store) == ["cp1", "cp0"]
    everything = ids(store, superseded=True)
    assert "cp2" not in everything and "cp3" in everything
    assert store.get_tuple(CheckpointConfig("t1", "cp3")).parent_config == CheckpointConfig("t1", "cp1")


def test_delete_unknown_is_typed_error(store):
    with pytest.raises(UnknownThreadError):
        store.delete(CheckpointConfig("nobody"))
    put(store, "cp0")
    with pytest.raises(UnknownCheckpointError):
        store.delete(CheckpointConfig("t1", "missing"))
    assert ids(store) == ["cp0"]


def test_delete_thread(store, git):
    for i in range(3):
        put(store, f"cp{i}", step=i)
    fork = fork_checkpoint(store, CheckpointConfig("t1", "cp1"), new_thread_id="t2")
    put(store, "solo", "t3")
    store.delete_thread("t3")
    assert store.threads() == ["t1", "t2"]
    # deleting the source thread keeps the checkpoints its fork shares
    store.delete_thread("t1")
    assert store.threads() == ["t2"]
    assert store.get(CheckpointConfig("t1")) is None
    assert ids(store, "t2") == [fork.checkpoint_id, "cp1", "cp0"]
    assert git("for-each-ref", "--format=%(refname)", "refs/heads/").stdout.split() == ["refs/heads/t2"]
    with pytest.raises(UnknownThreadError):
        store.delete_thread("t1")
    with pytest.raises(InvalidThreadIdError):
        store.delete_thread("")


def _all_object_contents(repo_path) -> bytes:
    return run_git(repo_path, "cat-file", "--batch-all-objects", "--batch", text=False).stdout


def _raw_files(repo_path) -> dict[str, bytes]:
    out = {}
    for root, _, files in os.walk(repo_path):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[path] = f.read()
    return out


def test_purge_makes_deleted_values_unrecoverable(store, repo_path):
    secret = "SECRET-MARKER-7f3c9e21-do-not-keep"
    kept = "KEPT-MARKER-5b8a01"
    put(store, "keep0", "keep", state={"v": kept})
    put(store, "s0", "secret", step=0, state={"v": "harmless"})
    put(store, "s1", "secret", step=1, state={"v": secret, "list": [secret] * 100},
        metadata={"source": "loop", "note": secret})
    store.put_writes(CheckpointConfig("secret", "s1"), [("ch", secret)], "task")
    put(store, "s2", "secret", step=2, state={"v": "after"})
    store.flush()
    before = _all_object_contents(repo_path)
    assert secret.encode() in before and kept.encode() in before  # the check can see values
    store.delete(CheckpointConfig("secret", "s1"))
    store.purge()
    after = _all_object_contents(repo_path)
    assert secret.encode() not in after
    assert kept.encode() in after
    for path, data in _raw_files(repo_path).items():
        assert secret.encode() not in data, path
    # what was not deleted is intact
    assert ids(store, "secret") == ["s2", "s0"]
    assert store.get(CheckpointConfig("keep")).state_data == {"v": kept}
    assert store.get(CheckpointConfig("secret", "s1")) is None
    # and the store still works
    put(store, "s3", "secret", step=3)
    assert ids(store, "secret") == ["s3", "s2", "s0"]
    fsck = run_git(repo_path, "fsck", "--strict", check=False)
    assert fsck.returncode == 0, fsck.stderr


def test_purge_after_delete_thread_and_time_travel_drop(store, repo_path):
    secret = "THREAD-SECRET-c0ffee-42"
    put(store, "a0", "t1", 0)
    put(store, "a1", "t1", 1, state={"v": secret})
    store.reset("t1", "a0")  # a1 is now on a superseded line
    put(store, "b0", "gone", 0, state={"v": secret + "-2"})
    store.delete_thread("gone")
    store.delete(CheckpointConfig("t1", "a1"))
    store.purge()
    assert secret.encode() not in _all_object_contents(repo_path)
    for path, data in _raw_files(repo_path).items():
        assert secret.encode() not in data, path
    assert ids(store, "t1", superseded=True) == ["a0"]


# -- lifecycle --------------------------------------------------------------------------


def test_reopen_persists_everything(repo_path):
    s = GitCheckpointStore(repo_path)
    five_puts(s)
    fork_checkpoint(s, CheckpointConfig("t1", "cp2"), new_thread_id="t2")
    fork_checkpoint(s, CheckpointConfig("t1", "cp3"))  # time travel on t1
    s.put_writes(CheckpointConfig("t1", "cp1"), [("ch", {"w": 1})], "task")
    put(s, "meta", "t3", metadata={"source": "input", "extra": [1, 2], "run_id": "r"})

    def snapshot(store):
        out = {"threads": store.threads()}
        for t in store.threads():
            out[t] = [(x.config, x.checkpoint.to_dict(), x.metadata, x.parent_config, x.pending_writes)
                      for x in store.list(CheckpointConfig(t), superseded=True)]
        return out

    before = snapshot(s)
    s.close()
    s.close()  # idempotent
    with GitCheckpointStore(repo_path, create=False) as again:
        assert snapshot(again) == before
        assert again.get_tuple(CheckpointConfig("t3")).metadata == {"source": "input", "extra": [1, 2], "run_id": "r"}


def test_context_manager_and_idempotent_close(repo_path):
    with GitCheckpointStore(repo_path) as s:
        put(s, "cp0")
        assert s.path == os.path.abspath(repo_path)
        assert s.durability is DurabilityMode.SYNC
    s.close()
    s.close()
    with pytest.raises(ValueError):
        with GitCheckpointStore(repo_path) as s2:
            put(s2, "cp1", step=1)
            raise ValueError("boom")  # the store still closes, the error propagates
    with GitCheckpointStore(repo_path) as s3:
        assert ids(s3) == ["cp1", "cp0"]


def test_fresh_store_has_no_recovery_report(store):
    assert not store.recovery


@pytest.mark.parametrize("mode", [DurabilityMode.ASYNC, DurabilityMode.EXIT])
def test_other_durability_modes_read_their_writes_and_persist(repo_path, mode):
    s = GitCheckpointStore(repo_path, durability=mode)
    try:
        assert s.durability is mode
        for i in range(3):
            put(s, f"cp{i}", step=i)
        assert ids(s) == ["cp2", "cp1", "cp0"]
        s.flush()
    finally:
        s.close()
    with GitCheckpointStore(repo_path, create=False) as again:
        assert ids(again) == ["cp2", "cp1", "cp0"]


_WRITER = r"""
import sys
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
path, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with GitCheckpointStore(path) as s:
    for i in range(n):
        s.put(CheckpointConfig(name), Checkpoint(id=f"{name}-{i}", thread_id=name, step=i,
              state_data={"i": i, "by": name}), {"source": "loop", "step": i}, {})
        s.put_writes(CheckpointConfig("shared", "base"), [("ch", i)], f"{name}-{i}")
"""


def test_processes_write_concurrently(repo_path):
    import subprocess
    import sys

    with GitCheckpointStore(repo_path) as s:
        put(s, "base", "shared")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(repo_path), f"p{k}", "8"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for k in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    with GitCheckpointStore(repo_path, create=False) as s:
        assert s.threads() == ["p0", "p1", "shared"]
        for k in range(2):
            assert ids(s, f"p{k}") == [f"p{k}-{i}" for i in range(7, -1, -1)]
        writes = s.get_tuple(CheckpointConfig("shared", "base")).pending_writes
        assert sorted(w.task_id for w in writes) == sorted(f"p{k}-{i}" for k in range(2) for i in range(8))
    fsck = run_git(repo_path, "fsck", "--strict", check=False)
    assert fsck.returncode == 0, fsck.stderr


# -- async ------------------------------------------------------------------------------


def test_async_methods_work(store):
    async def main():
        for i in range(3):
            r = await store.aput(CheckpointConfig("t1"), cp(f"cp{i}", step=i), {"source": "loop", "step": i}, {})
            assert r == CheckpointConfig("t1", f"cp{i}")
        tup = await store.aget_tuple(CheckpointConfig("t1"))
        assert tup.checkpoint.id == "cp2"
        got = await store.aget(CheckpointConfig("t1", "cp1"))
        assert got.id == "cp1"
        listed = await store.alist(CheckpointConfig("t1"), limit=2)
        assert isinstance(listed, list)
        assert [t.checkpoint.id for t in listed] == ["cp2", "cp1"]
        assert [t.checkpoint.id for t in await store.alist(CheckpointConfig("t1"), before="cp2")] == ["cp1", "cp0"]
        await store.aput_writes(CheckpointConfig("t1", "cp1"), [("ch", 1)], "task")
        assert (await store.aget_tuple(CheckpointConfig("t1", "cp1"))).pending_writes == [
            PendingWrite("task", "ch", 1)]
        await store.adelete(CheckpointConfig("t1"))
        assert (await store.aget(CheckpointConfig("t1"))).id == "cp1"
        with pytest.raises(UnknownCheckpointError):
            await store.alist(CheckpointConfig("t1"), before="nope")
        assert await store.aget(CheckpointConfig("nobody")) is None

    asyncio.run(main())


def test_async_methods_do_not_block_the_event_loop(store):
    big = {"messages": [{"role": "user", "content": "x" * 200, "i": i} for i in range(3000)]}

    async def main():
        ticks = 0
        stop = False

        async def ticker():
            nonlocal ticks
            while not stop:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        during = []
        for i in range(3):
            before = ticks
            state = {"messages": big["messages"] + [{"i": -i}], "i": i}
            await store.aput(CheckpointConfig("t1"), cp(f"cp{i}", step=i, state=state), {}, {})
            during.append(ticks - before)
        before = ticks
        await store.aget_tuple(CheckpointConfig("t1"))
        during.append(ticks - before)
        before = ticks
        await store.alist(CheckpointConfig("t1"))
        during.append(ticks - before)
        stop = True
        await task
        return during

    during = asyncio.run(main())
    assert all(n > 0 for n in during), during


# -- bad input --------------------------------------------------------------------------


class _NotAConfig:
    pass


@pytest.mark.parametrize("config", [{"thread_id": "t1"}, "t1", None, _NotAConfig(), ("t1", None)])
def test_non_checkpoint_config_is_typed_error(store, config):
    with pytest.raises(InvalidInputError):
        store.put(config, cp("cp0"), {}, {})
    with pytest.raises(InvalidInputError):
        store.get_tuple(config)
    with pytest.raises(InvalidInputError):
        list(store.list(config))


@pytest.mark.parametrize("thread", ["", 3, None, b"t1"])
def test_bad_thread_id_is_typed_error(store, thread):
    with pytest.raises(InvalidThreadIdError):
        store.put(CheckpointConfig(thread), Checkpoint(id="c", thread_id=thread, step=0, state_data={}), {}, {})
    with pytest.raises(InvalidThreadIdError):
        store.get_tuple(CheckpointConfig(thread))
    with pytest.raises(InvalidThreadIdError):
        list(store.list(CheckpointConfig(thread)))
    with pytest.raises(InvalidThreadIdError):
        store.put_writes(CheckpointConfig(thread), [("ch", 1)], "task")
    with pytest.raises(InvalidThreadIdError):
        store.delete(CheckpointConfig(thread))


@pytest.mark.parametrize("bad_id", [123, None, "", b"cp"])
def test_non_string_checkpoint_id_is_typed_error(store, bad_id):
    with pytest.raises(InvalidInputError):
        store.put(CheckpointConfig("t1"), Checkpoint(id=bad_id, thread_id="t1", step=0, state_data={}), {}, {})
    assert store.threads() == []


@pytest.mark.parametrize("bad_id", [123, b"cp", 1.5])
def test_non_string_config_checkpoint_id_is_typed_error(store, bad_id):
    put(store, "cp0")
    with pytest.raises(InvalidInputError):
        store.get_tuple(CheckpointConfig("t1", bad_id))
    with pytest.raises(InvalidInputError):
        store.resolve(bad_id)


def test_thread_mismatch_is_typed_error(store):
    with pytest.raises(InvalidInputError) as info:
        store.put(CheckpointConfig("t1"), cp("cp0", thread="t2"), {}, {})
    assert "t1" in str(info.value) and "t2" in str(info.value)
    assert store.threads() == []


@pytest.mark.parametrize("state", [None, [("a", 1)], "state", 3])
def test_non_mapping_state_is_typed_error(store, state):
    with pytest.raises(InvalidInputError) as info:
        store.put(CheckpointConfig("t1"), Checkpoint(id="c", thread_id="t1", step=0, state_data=state), {}, {})
    assert "state_data" in str(info.value)
    assert store.threads() == []


@pytest.mark.parametrize("key", [1, None, ("a",), b"a"])
def test_non_str_field_names_are_typed_error(store, key):
    with pytest.raises(InvalidInputError):
        store.put(CheckpointConfig("t1"), Checkpoint(id="c", thread_id="t1", step=0, state_data={key: 1}), {}, {})
    assert store.threads() == []


@pytest.mark.parametrize("meta", [["source", "loop"], "loop", 3])
def test_non_mapping_metadata_is_typed_error(store, meta):
    with pytest.raises(InvalidInputError):
        store.put(CheckpointConfig("t1"), cp("c"), meta, {})


@pytest.mark.parametrize("step", ["1", None, 1.0, True])
def test_non_int_step_is_typed_error(store, step):
    with pytest.raises(InvalidInputError):
        store.put(CheckpointConfig("t1"), Checkpoint(id="c", thread_id="t1", step=step, state_data={}), {}, {})


def test_not_a_checkpoint_is_typed_error(store):
    with pytest.raises(InvalidInputError):
        store.put(CheckpointConfig("t1"), {"id": "c", "thread_id": "t1", "step": 0, "state_data": {}}, {}, {})


def test_unknown_parent_id_is_typed_error(store):
    with pytest.raises(UnknownCheckpointError) as info:
        put(store, "c", parent_id="no-such-parent")
    assert "no-such-parent" in str(info.value)
    assert store.threads() == []


def test_errors_share_a_base_class():
    for exc in (InvalidInputError, InvalidThreadIdError, SerializationError, UnknownCheckpointError,
                UnknownThreadError, CheckpointConflictError, NotARepositoryError):
        assert issubclass(exc, QvcError)
    assert issubclass(InvalidInputError, ValueError)
    assert issubclass(UnknownCheckpointError, LookupError)


# -- opening ----------------------------------------------------------------------------


def test_create_false_on_missing_path(tmp_path):
    with pytest.raises(NotARepositoryError):
        GitCheckpointStore(tmp_path / "missing.qvc", create=False)
    assert not (tmp_path / "missing.qvc").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(NotARepositoryError):
        GitCheckpointStore(empty, create=False)


@pytest.mark.parametrize("create", [True, False])
def test_plain_file_is_not_a_repository(tmp_path, create):
    path = tmp_path / "plain.txt"
    path.write_bytes(b"just a file\n")
    with pytest.raises(NotARepositoryError):
        GitCheckpointStore(path, create=create)
    assert path.read_bytes() == b"just a file\n"


@pytest.mark.parametrize("create", [True, False])
def test_non_bare_work_tree_is_not_a_repository(tmp_path, create):
    work = tmp_path / "work"
    work.mkdir()
    (work / "README").write_text("hello\n")
    git_dir = work / ".git"
    run_git(None, "init", "-q", str(work))
    run_git(None, "-C", str(work), "add", "README")
    run_git(None, "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    assert run_git(git_dir, "rev-parse", "--is-bare-repository").stdout.strip() == "false"
    with pytest.raises(NotARepositoryError):
        GitCheckpointStore(work, create=create)
    with pytest.raises(NotARepositoryError):
        GitCheckpointStore(git_dir, create=create)
    assert (work / "README").read_text() == "hello\n"
    assert not (work / "qvc").exists() and not (git_dir / "qvc").exists()


def test_directory_with_unrelated_files_is_not_a_repository(tmp_path):
    d = tmp_path / "stuff"
    d.mkdir()
    (d / "notes.txt").write_text("x")
    with pytest.raises(NotARepositoryError):
        GitCheckpointStore(d)
    assert os.listdir(d) == ["notes.txt"]


def test_creates_a_bare_repository_git_accepts(repo_path):
    with GitCheckpointStore(repo_path) as s:
        put(s, "cp0")
    assert run_git(repo_path, "rev-parse", "--is-bare-repository").stdout.strip() == "true"
    assert Path(repo_path, "HEAD").exists()


# -- names ------------------------------------------------------------------------------


def test_checkpoint_ids_as_commit_sha_and_prefixes(store):
    put(store, "run-alpha-1", step=0)
    put(store, "run-beta-1", step=1)
    sha = store.resolve("run-alpha-1")
    assert re.fullmatch(r"[0-9a-f]{40}", sha)
    assert store.head("t1") == store.resolve("run-beta-1")
    for name in (sha, sha[:12], sha[:7]):
        assert store.resolve(name) == sha
        tup = store.get_tuple(CheckpointConfig("t1", name))
        assert tup.checkpoint.id == "run-alpha-1"
        assert tup.config == CheckpointConfig("t1", "run-alpha-1")
        assert store.get_tuple(CheckpointConfig("elsewhere", name)).checkpoint.id == "run-alpha-1"
    # unique id prefixes
    assert store.get(CheckpointConfig("t1", "run-al")).id == "run-alpha-1"
    assert store.get(CheckpointConfig("t1", "run-beta")).id == "run-beta-1"
    # accepted wherever an id is: list start, before, put_writes, parent_id, delete
    beta_sha = store.resolve("run-beta-1")
    assert ids(store, before=beta_sha[:10]) == ["run-alpha-1"]
    assert [t.checkpoint.id for t in store.list(CheckpointConfig("t1", beta_sha))] == ["run-beta-1", "run-alpha-1"]
    store.put_writes(CheckpointConfig("t1", sha[:10]), [("ch", 1)], "task")
    assert store.get_tuple(CheckpointConfig("t1", "run-alpha-1")).pending_writes == [PendingWrite("task", "ch", 1)]
    put(store, "fork-1", "t2", step=1, parent_id=sha[:10])
    assert store.get_tuple(CheckpointConfig("t2")).parent_config == CheckpointConfig("t1", "run-alpha-1")


def test_delete_accepts_commit_sha(store):
    put(store, "a0", "t1", 0)
    put(store, "b0", "t2", 1, parent_id="a0")
    store.delete(CheckpointConfig("t2", store.resolve("b0")[:10]))
    assert store.threads() == ["t1"]
    assert ids(store, "t1") == ["a0"]


def test_ambiguous_prefix_is_invalid_input(store):
    put(store, "run-gamma-1", step=0)
    put(store, "run-gamma-2", step=1)
    with pytest.raises(InvalidInputError) as info:
        store.resolve("run-gamma")
    assert "ambiguous" in str(info.value)
    with pytest.raises(InvalidInputError):
        store.get_tuple(CheckpointConfig("t1", "run-gamma"))
    with pytest.raises(UnknownCheckpointError):
        store.resolve("run-delta")
    assert store.get_tuple(CheckpointConfig("t1", "run-delta")) is None
    # an exact id wins even when it is also a prefix of another id
    put(store, "run", step=2)
    put(store, "run-extra", step=3)
    assert store.get(CheckpointConfig("t1", "run")).id == "run"


def test_calls_on_a_closed_store_raise(repo_path):
    from qvc import StoreClosedError

    s = GitCheckpointStore(repo_path)
    s.put(CheckpointConfig("t"), Checkpoint(id="a", thread_id="t", step=0, state_data={"x": 1}), {}, {})
    s.close()
    s.close()  # idempotent
    for call in (lambda: s.get(CheckpointConfig("t")), lambda: list(s.list(CheckpointConfig("t"))),
                 s.threads, lambda: s.put(CheckpointConfig("t"), Checkpoint(id="b", thread_id="t", step=1,
                                                                              state_data={}), {}, {})):
        with pytest.raises(StoreClosedError):
            call()


def test_durability_given_as_a_string_and_bad_values_are_typed_errors(tmp_path):
    from qvc import DurabilityMode, InvalidInputError

    with GitCheckpointStore(tmp_path / "a.qvc", durability="async") as s:
        assert s.durability is DurabilityMode.ASYNC
    with pytest.raises(InvalidInputError, match="durability"):
        GitCheckpointStore(tmp_path / "b.qvc", durability="fast")
    with pytest.raises(InvalidInputError, match="max_lag"):
        GitCheckpointStore(tmp_path / "c.qvc", durability="async", max_lag=-1)


def test_deleted_checkpoint_no_longer_resolves_by_commit_sha(store):
    for i in range(3):
        store.put(CheckpointConfig("t"), Checkpoint(id=f"c{i}", thread_id="t", step=i, state_data={"x": i}), {}, {})
    sha = store.resolve("c1")
    assert store.get(CheckpointConfig("t", sha)).id == "c1"
    store.delete(CheckpointConfig("t", "c1"))
    assert store.get(CheckpointConfig("t", sha)) is None  # the object stays until purge(), unreachable
    with pytest.raises(UnknownCheckpointError):
        store.resolve(sha)
