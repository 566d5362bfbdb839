"""The read paths of a repository with many threads: one pass over the refs, git ordering the log."""

from __future__ import annotations

import json
import subprocess
import sys

import helpers
from helpers import child_env

from qvc import GitCheckpointStore
from qvc.readers.log import log


def put(store, thread, cid, step, parent_id=None):
    """``helpers.put``; a put with a parent is a time travel, asked for (kept: it passes ``expected_head``)."""
    extra = {} if parent_id is None else {"expected_head": store.head(thread)}  # time travel, asked for
    return helpers.put(store, thread, cid, step, {"step": step, "status": "ok"}, parent_id=parent_id, metadata={},
                       **extra)


def test_thread_heads_and_a_limited_log_all_agree_with_the_full_walk(tmp_path):
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        for n in range(30):
            put(store, f"t{n:02d}", f"t{n:02d}-0", 0)
        for step in range(1, 6):
            put(store, "long", f"long-{step}", step)
        put(store, "long", "long-again", 3, parent_id="long-2")  # time travel: a superseded line
        put(store, "a/b", "ab-0", 0)
        heads = store.thread_heads()
        assert [t for t, _ in heads] == store.threads()
        assert all(store.head(t) == tip for t, tip in heads)
        full = list(log(store, all=True))
        assert any(e.superseded for e in full)
        for n in (1, 5, 12, len(full), len(full) + 3):
            limited = list(log(store, all=True, limit=n))
            assert [(e.commit, e.superseded, e.heads) for e in limited] == [
                (e.commit, e.superseded, e.heads) for e in full[:n]]
        position = {e.commit: i for i, e in enumerate(full)}
        for e in full:  # never a parent before its child
            assert all(position[p] > position[e.commit] for p in e.parents if p in position)
    proc = subprocess.run([sys.executable, "-m", "qvc", "--repo", str(path), "branch", "--json"], env=child_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert [row["thread"] for row in json.loads(proc.stdout)] == [t for t, _ in heads]
    proc = subprocess.run([sys.executable, "-m", "qvc", "--repo", str(path), "branch"], env=child_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.split() == [t for t, _ in heads], proc.stdout
