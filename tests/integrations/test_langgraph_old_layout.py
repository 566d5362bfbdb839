"""Repositories written by the saver before it became an adapter over the store keep reading.

That saver kept a fork inside a thread (replay, ``update_state``) as a merge commit: the first
parent the forked-from checkpoint, the second the previous head, no superseded ref. Its pending
writes lived under one ref per checkpoint, ``refs/qvc/writes/lg/<thread>/<checkpoint id>``
(the store's keyed writes kept that layout until they moved into one ref per thread,
``refs/qvc/writes/lg/<thread>/%all``). The fixture below writes a thread with today's saver,
then turns its fork into that old shape with plain ``git`` (the same tree and message, the old
head as second parent, the superseded ref gone) and its pending writes into per-checkpoint
refs, and checks that the new saver reads it identically and keeps writing, forking, deleting,
copying and pruning on top of it.
"""

from __future__ import annotations

import os
import subprocess
from datetime import datetime, timezone

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from helpers import fsck, qvc_json, run_git  # noqa: E402
from langgraph.checkpoint.base.id import uuid6  # noqa: E402

from qvc.integrations.langgraph import QvcSaver  # noqa: E402


def _cp(values: dict, versions: dict | None = None) -> dict:
    return {"v": 1, "id": str(uuid6(clock_seq=-1)), "ts": datetime.now(timezone.utc).isoformat(),
            "channel_values": values,
            "channel_versions": versions if versions is not None else dict.fromkeys(values, 1),
            "versions_seen": {}, "updated_channels": None}


def _cfg(thread: str, cid: str | None = None) -> dict:
    conf = {"thread_id": thread, "checkpoint_ns": ""}
    if cid is not None:
        conf["checkpoint_id"] = cid
    return {"configurable": conf}


def _seen(saver: QvcSaver, thread: str) -> list:
    return [(t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes)
            for t in saver.list({"configurable": {"thread_id": thread}})]


def _old_shape(repo) -> str:
    """Turn the thread ``t``'s fork (the head, with one superseded line) into the old saver's
    merge commit; return its SHA."""
    lines = run_git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/qvc/superseded/t/").stdout.split()
    assert len(lines) == 2
    ref, old_head = lines
    head = run_git(repo, "rev-parse", "refs/heads/t").stdout.strip()
    tree = run_git(repo, "rev-parse", f"{head}^{{tree}}").stdout.strip()
    first = run_git(repo, "rev-parse", f"{head}^1").stdout.strip()
    message = run_git(repo, "log", "-1", "--format=%B", head).stdout
    env = {**os.environ, "GIT_AUTHOR_NAME": "qvc", "GIT_AUTHOR_EMAIL": "qvc@localhost",
           "GIT_COMMITTER_NAME": "qvc", "GIT_COMMITTER_EMAIL": "qvc@localhost"}
    merge = subprocess.run(["git", f"--git-dir={repo}", "commit-tree", tree, "-p", first, "-p", old_head],
                           input=message, text=True, capture_output=True, check=True, env=env).stdout.strip()
    run_git(repo, "update-ref", "refs/heads/t", merge, head)
    run_git(repo, "update-ref", "-d", ref, old_head)
    return merge


def _old_writes(repo, thread: str = "t") -> list[str]:
    """Turn the thread's one pending-writes ref into one ref per checkpoint, as the old layout kept
    them (a commit whose tree is the checkpoint's set); return the old refs' names."""
    one = f"refs/qvc/writes/lg/{thread}/%all"
    tip = run_git(repo, "rev-parse", one).stdout.strip()
    names = []
    for line in run_git(repo, "ls-tree", "-r", "-d", tip).stdout.splitlines():
        meta, path = line.split("\t")
        if path.count("/") != 4:
            continue  # a fan-out level
        tree = meta.split()[2]
        env = {**os.environ, "GIT_AUTHOR_NAME": "qvc", "GIT_AUTHOR_EMAIL": "qvc@localhost",
               "GIT_COMMITTER_NAME": "qvc", "GIT_COMMITTER_EMAIL": "qvc@localhost"}
        commit = subprocess.run(["git", f"--git-dir={repo}", "commit-tree", tree], input="old writes\n", text=True,
                                capture_output=True, check=True, env=env).stdout.strip()
        name = f"refs/qvc/writes/lg/{thread}/{path.split('/')[4]}"
        run_git(repo, "update-ref", name, commit, "")
        names.append(name)
    run_git(repo, "update-ref", "-d", one, tip)
    return names


def _readers_see(repo, expected: list) -> None:
    """``qvc show --json`` lists each checkpoint's pending writes (``expected``: ``(config, writes)``),
    ``qvc status`` counts the checkpoints that have some and ``qvc fsck`` decodes each set, in
    either layout (real ``qvc`` processes)."""
    for config, writes in expected:
        shown = qvc_json("--repo", str(repo), "show", config["configurable"]["checkpoint_id"])["pending_writes"]
        assert [(w["task"], w["channel"], w["value"]) for w in shown] == writes
    assert qvc_json("--repo", str(repo), "status")["pending_writes"] == sum(1 for _, w in expected if w)
    report = qvc_json("--repo", str(repo), "fsck")
    assert report["ok"] and report["pending_writes"] == sum(1 for _, w in expected if w), report


def _writes_refs(repo) -> list[str]:
    return run_git(repo, "for-each-ref", "--format=%(refname)", "refs/qvc/writes/lg/").stdout.split()


def test_a_repository_of_the_old_saver_reads_and_writes_the_same(tmp_path) -> None:
    repo = tmp_path / "old.qvc"
    with QvcSaver(repo) as saver:
        c1 = saver.put(_cfg("t"), _cp({"n": 1}), {"run_id": "r1", "step": 0}, {"n": 1})
        c2 = saver.put(c1, _cp({"n": 2}, {"n": 2}), {"run_id": "r2", "step": 1}, {"n": 2})
        saver.put(c2, _cp({"n": 3}, {"n": 3}), {"run_id": "r2", "step": 2}, {"n": 3})
        saver.put_writes(c2, [("n", 20)], "task-a")
        fork = saver.put(c1, _cp({"n": 4}, {"n": 4}), {"run_id": "r3", "step": 1}, {"n": 4})
        saver.put_writes(fork, [("n", 40)], "task-b")
        before = _seen(saver, "t")
        newest = saver.get_tuple(_cfg("t"))
    assert len(before) == 4
    merge = _old_shape(repo)
    assert _writes_refs(repo) == ["refs/qvc/writes/lg/t/%all"]
    _old_writes(repo)
    assert run_git(repo, "rev-list", "--min-parents=2", "--all").stdout.split() == [merge]
    assert not run_git(repo, "for-each-ref", "refs/qvc/superseded/").stdout.strip()
    assert len(run_git(repo, "for-each-ref", "refs/qvc/writes/lg/").stdout.split("\n")) - 1 == 2
    fsck(repo)

    with QvcSaver(repo, create=False) as saver:
        assert _seen(saver, "t") == before  # the tree-shaped thread reads as the lines did
        assert saver.get_tuple(_cfg("t")) == newest
        # keep writing on it: extend the head, fork from an inner checkpoint (now a superseded line)
        c5 = saver.put(fork, _cp({"n": 5}, {"n": 5}), {"run_id": "r3", "step": 2}, {"n": 5})
        saver.put(c2, _cp({"n": 6}, {"n": 6}), {"run_id": "r4", "step": 2}, {"n": 6})
        assert len(_seen(saver, "t")) == 6
        # c2 was reachable only through the merge's second parent: forking from it is a time travel
        assert run_git(repo, "rev-list", "--min-parents=2", "--all").stdout.split() == [merge]
        c5_sha = saver.store.thread_index("t").ids[c5["configurable"]["checkpoint_id"]]
        assert run_git(repo, "for-each-ref", "--format=%(refname)", "refs/qvc/superseded/t/").stdout.split() == [
            f"refs/qvc/superseded/t/{c5_sha}"]
        fsck(repo)
        # rewrites go through the merge commit
        saver.delete_for_runs(["r2"])
        left = _seen(saver, "t")
        assert sorted(m["run_id"] for _, _, m, _, _ in left) == ["r1", "r3", "r3", "r4"]
        assert saver.get_tuple(c2) is None
        assert not any(w for *_, w in left if w == [("task-a", "n", 20)])
        assert [w for c, *_, w in left if c["configurable"]["checkpoint_id"] == fork["configurable"]["checkpoint_id"]
                ] == [[("task-b", "n", 40)]]
        fsck(repo)
        saver.copy_thread("t", "copy")
        assert [(x[1], x[2], x[4]) for x in _seen(saver, "copy")] == [(x[1], x[2], x[4]) for x in _seen(saver, "t")]
        saver.prune(["t"])
        assert [c["configurable"]["checkpoint_id"] for c, *_ in _seen(saver, "t")] == [
            max(c["configurable"]["checkpoint_id"] for c, *_ in left)]
        fsck(repo)


def test_per_checkpoint_writes_refs_read_move_and_rewrite_with_the_new_layout(tmp_path) -> None:
    repo = tmp_path / "mixed.qvc"
    with QvcSaver(repo) as saver:
        c1 = saver.put(_cfg("t"), _cp({"n": 1}), {"run_id": "r1", "step": 0}, {"n": 1})
        c2 = saver.put(c1, _cp({"n": 2}, {"n": 2}), {"run_id": "r2", "step": 1}, {"n": 2})
        c3 = saver.put(c2, _cp({"n": 3}, {"n": 3}), {"run_id": "r3", "step": 2}, {"n": 3})
        saver.put_writes(c1, [("n", 10), ("m", 11)], "task-a")
        saver.put_writes(c2, [("n", 20)], "task-a")
    old = _old_writes(repo)
    assert sorted(old) == sorted(f"refs/qvc/writes/lg/t/{c['configurable']['checkpoint_id']}" for c in (c1, c2))
    fsck(repo)
    _readers_see(repo, [(c1, [("task-a", "n", 10), ("task-a", "m", 11)]), (c2, [("task-a", "n", 20)]), (c3, [])])

    with QvcSaver(repo, create=False) as saver:
        assert saver.get_tuple(c1).pending_writes == [("task-a", "n", 10), ("task-a", "m", 11)]
        # a write to a checkpoint kept in the old layout merges into its set, which moves to the thread's ref
        saver.put_writes(c2, [("n", 21)], "task-a")  # a regular write: the first one stays
        saver.put_writes(c2, [("m", 22)], "task-b")
        saver.put_writes(c3, [("n", 30)], "task-c")
        assert saver.get_tuple(c2).pending_writes == [("task-a", "n", 20), ("task-b", "m", 22)]
        assert saver.get_tuple(c3).pending_writes == [("task-c", "n", 30)]
        # c1's set in its own ref, c2's and c3's in the thread's: the readers see all three
        _readers_see(repo, [(c1, [("task-a", "n", 10), ("task-a", "m", 11)]),
                            (c2, [("task-a", "n", 20), ("task-b", "m", 22)]), (c3, [("task-c", "n", 30)])])
        assert _writes_refs(repo) == sorted([old[0] if c1["configurable"]["checkpoint_id"] in old[0] else old[1],
                                             "refs/qvc/writes/lg/t/%all"])
        before = _seen(saver, "t")
        saver.copy_thread("t", "copy")
        assert [(x[1], x[2], x[4]) for x in _seen(saver, "copy")] == [(x[1], x[2], x[4]) for x in before]
        saver.store.rename_thread("copy", "moved")
        assert [(x[1], x[2], x[4]) for x in _seen(saver, "moved")] == [(x[1], x[2], x[4]) for x in before]
        assert not any("/copy/" in r for r in _writes_refs(repo))
        saver.delete_for_runs(["r1"])  # c1's writes, in the old layout, go with it
        assert not any(c1["configurable"]["checkpoint_id"] in r for r in _writes_refs(repo) if "/t/" in r)
        assert [x[4] for x in _seen(saver, "t")] == [[("task-c", "n", 30)], [("task-a", "n", 20), ("task-b", "m", 22)]]
        saver.prune(["moved"])  # only the latest's writes stay, in either layout
        assert [x[4] for x in _seen(saver, "moved")] == [[("task-c", "n", 30)]]
        assert [r for r in _writes_refs(repo) if "/moved/" in r] == ["refs/qvc/writes/lg/moved/%all"]
        saver.delete_thread("moved")
        assert _writes_refs(repo) == ["refs/qvc/writes/lg/t/%all"]
        fsck(repo)
