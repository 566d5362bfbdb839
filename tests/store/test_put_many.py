"""``GitCheckpointStore.put_many``: several threads' checkpoints in one transaction, all or nothing."""

from __future__ import annotations

import threading

import pytest
from helpers import fsck, put

from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
from qvc.errors import CheckpointConflictError, InvalidInputError
from qvc.store.git_store import PutRequest


def request(thread: str, cid: str, state: dict, **kw) -> PutRequest:
    return PutRequest(CheckpointConfig(thread), Checkpoint(id=cid, thread_id=thread, step=0, state_data=state),
                      {"source": "loop"}, **kw)


def test_every_thread_moves_in_one_call(store, repo_path):
    put(store, "a", "a0")
    out = store.put_many([request("a", "a1", {"x": 1}, expected_head=store.head("a")),
                          request("b", "b0", {"y": 1}, expected_head=None)])
    assert out == [CheckpointConfig("a", "a1"), CheckpointConfig("b", "b0")]
    assert store.get(CheckpointConfig("a")).state_data == {"x": 1}
    assert store.get_tuple(CheckpointConfig("a")).parent_config.checkpoint_id == "a0"
    assert store.get(CheckpointConfig("b")).state_data == {"y": 1}
    # the same requests again: no-ops, as put's re-puts are
    head_a = store.head("a")
    store.put_many([request("a", "a1", {"x": 1}), request("b", "b0", {"y": 1})])
    assert store.head("a") == head_a
    store.close()
    fsck(repo_path)
    with GitCheckpointStore(repo_path) as again:  # durable, and read by a fresh store
        assert again.get(CheckpointConfig("b")).state_data == {"y": 1}


def test_a_conflict_on_any_thread_stores_nothing(store):
    put(store, "a", "a0")
    put(store, "b", "b0")
    heads = {t: store.head(t) for t in ("a", "b")}
    with pytest.raises(CheckpointConflictError, match="'b'"):
        store.put_many([request("a", "a1", {"x": 1}, expected_head=heads["a"]),
                        request("b", "b1", {"y": 1}, expected_head=None)])
    assert {t: store.head(t) for t in ("a", "b")} == heads
    # nothing was taken: the same ids store once the conflict is gone
    store.put_many([request("a", "a1", {"x": 1}, expected_head=heads["a"]),
                    request("b", "b1", {"y": 1}, expected_head=heads["b"])])
    assert store.get(CheckpointConfig("b")).id == "b1"


def test_racing_batches_never_half_apply(store):
    """Batches on the same two threads from several threads: each batch moved both heads or none."""
    put(store, "a", "a-0", state={"n": 0})
    put(store, "b", "b-0", state={"n": 0})
    wins: list[int] = []

    def writer(w: int) -> None:
        for i in range(15):
            ha, hb = store.head("a"), store.head("b")
            try:
                store.put_many([request("a", f"a-{w}-{i}", {"n": w * 100 + i}, expected_head=ha),
                                request("b", f"b-{w}-{i}", {"n": w * 100 + i}, expected_head=hb)])
                wins.append(w * 100 + i)
            except CheckpointConflictError:
                pass

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    line_a = [t.checkpoint.state_data["n"] for t in store.list(CheckpointConfig("a"))]
    line_b = [t.checkpoint.state_data["n"] for t in store.list(CheckpointConfig("b"))]
    assert line_a == line_b and sorted(line_a[:-1]) == sorted(wins)


def test_what_a_batch_cannot_do(store):
    put(store, "a", "a0")
    put(store, "a", "a1")
    with pytest.raises(InvalidInputError, match="different thread"):
        store.put_many([request("a", "x", {}), request("a", "y", {})])
    cp = Checkpoint(id="z", thread_id="a", step=1, state_data={}, parent_id="a0")  # not the head: time travel
    with pytest.raises(InvalidInputError, match="only extends"):
        store.put_many([PutRequest(CheckpointConfig("a"), cp, {})])
    assert store.get(CheckpointConfig("a")).id == "a1"


BATCHER = """
import sys
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
from qvc.errors import CheckpointConflictError
from qvc.store.git_store import PutRequest
w = int(sys.argv[2])
with GitCheckpointStore(sys.argv[1]) as store:
    for i in range(20):
        heads = {t: store.head(t) for t in ("a", "b")}
        reqs = [PutRequest(CheckpointConfig(t), Checkpoint(id=f"{t}-{w}-{i}", thread_id=t, step=0,
                                                           state_data={"n": w * 100 + i}), {}, heads[t])
                for t in ("a", "b")]
        try:
            store.put_many(reqs)
            print("won", w * 100 + i, flush=True)
        except CheckpointConflictError:
            pass
"""


def test_racing_batches_of_processes_never_half_apply(repo_path):
    import subprocess
    import sys

    from helpers import child_env

    with GitCheckpointStore(repo_path) as store:
        put(store, "a", "a-0", state={"n": 0})
        put(store, "b", "b-0", state={"n": 0})
    procs = [subprocess.Popen([sys.executable, "-c", BATCHER, str(repo_path), str(w)], env=child_env(),
                              stdout=subprocess.PIPE, text=True) for w in range(1, 4)]
    wins = [int(line.split()[1]) for p in procs for line in p.communicate(timeout=120)[0].splitlines()]
    assert all(p.returncode == 0 for p in procs)
    with GitCheckpointStore(repo_path) as store:
        line_a = [t.checkpoint.state_data["n"] for t in store.list(CheckpointConfig("a"))]
        line_b = [t.checkpoint.state_data["n"] for t in store.list(CheckpointConfig("b"))]
    assert line_a == line_b and sorted(line_a[:-1]) == sorted(wins)
    fsck(repo_path)
