"""Races between two live writers that tests/fault/test_crash.py::test_kill_one_writer_while_another_writes
found, each replayed here deterministically with real processes.

A delete racing ``git pack-refs`` (another store's packer, or git) must stay deleted.

``git pack-refs --all --prune`` takes ``packed-refs.lock``, reads every loose ref, and writes
them into ``packed-refs``. A delete that removes a loose ref in between, without taking
``packed-refs.lock`` (libgit2 takes it only for a ref that is packed already), is undone when
pack-refs commits: the deleted thread comes back with its old head. Found by
tests/fault/test_crash.py::test_kill_one_writer_while_another_writes (writer B's acknowledged
delete came back; its own read after a delete saw the deleted checkpoint).

Here the test process plays the part of pack-refs exactly as git does it, with the real lock
file, and a real qvc process deletes meanwhile.

An open while another process publishes a dead writer's acknowledged puts (stopped midway)
reads them, writes on them, and git's files hold them all once the publication is done.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading

from helpers import child_env, fsck, put, run_git

from qvc import CheckpointConfig, GitCheckpointStore

DELETER = """
import sys
from qvc import CheckpointConfig, GitCheckpointStore
store = GitCheckpointStore(sys.argv[1])
print("OPEN", flush=True)
sys.stdin.readline()  # once pack-refs runs
print("DELETING", flush=True)
store.delete(CheckpointConfig(sys.argv[2]))  # the thread's only checkpoint: its branch goes
print("DELETED", flush=True)
store.close()
"""


def _lines(proc: subprocess.Popen) -> queue.Queue:
    q: queue.Queue = queue.Queue()

    def pump() -> None:
        for line in proc.stdout:
            q.put(line.strip())
        q.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return q


def test_a_delete_during_pack_refs_is_not_undone_by_it(tmp_path):
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        put(store, "gone", "g0", 0, {"x": 0})
        put(store, "kept", "k0", 0, {"x": 1})
    head = (path / "refs/heads/gone").read_text().strip()
    assert len(head) == 40

    proc = subprocess.Popen([sys.executable, "-c", DELETER, os.fspath(path), "gone"], env=child_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = _lines(proc)
        assert lines.get(timeout=60) == "OPEN", proc.stderr.read()[-3000:]
        # pack-refs, first half: lock packed-refs, read the loose refs
        lock = path / "packed-refs.lock"
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        packed = (path / "packed-refs").read_bytes() if (path / "packed-refs").exists() else b""
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert lines.get(timeout=60) == "DELETING", proc.stderr.read()[-3000:]
        try:  # a delete that does not wait for packed-refs.lock is done by now
            early = lines.get(timeout=1.0)
        except queue.Empty:
            early = None
        # pack-refs, second half: write what it read into packed-refs and commit it
        os.write(fd, packed + f"{head} refs/heads/gone\n".encode())
        os.close(fd)
        os.rename(lock, path / "packed-refs")
        assert early in (None, "DELETED")
        rest = early
        while rest != "DELETED":
            rest = lines.get(timeout=60)
            assert rest is not None, proc.stderr.read()[-3000:]
        assert proc.wait(timeout=60) == 0, proc.stderr.read()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    # git, then qvc: the deleted thread stays deleted, the other one is untouched
    assert run_git(path, "rev-parse", "--verify", "-q", "refs/heads/gone", check=False).returncode != 0
    assert b"refs/heads/gone" not in (path / "packed-refs").read_bytes()
    fsck(path)
    with GitCheckpointStore(path) as store:
        assert store.get_tuple(CheckpointConfig("gone")) is None
        assert store.get_tuple(CheckpointConfig("kept")).checkpoint.id == "k0"


def test_a_delete_removes_a_packed_ref_and_keeps_the_others(tmp_path):
    """A thread head in ``packed-refs`` (and loose too, moved since it was packed) is deleted
    from both; the other packed refs are kept."""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        put(store, "a", "a0", 0, {"x": 0})
        put(store, "b", "b0", 0, {"x": 1})
        put(store, "c", "c0", 0, {"x": 2})
    run_git(path, "pack-refs", "--all", "--prune")
    with GitCheckpointStore(path) as store:
        put(store, "b", "b1", 1, {"x": 3})  # loose again, over its packed value
        store.delete(CheckpointConfig("b"))  # back to b0
        store.delete(CheckpointConfig("b"))  # the branch goes
        store.delete(CheckpointConfig("a"))
    assert run_git(path, "rev-parse", "--verify", "-q", "refs/heads/b", check=False).returncode != 0
    assert run_git(path, "rev-parse", "--verify", "-q", "refs/heads/a", check=False).returncode != 0
    assert not (path / "refs/heads/b").exists() and not (path / "packed-refs.lock").exists()
    assert b"refs/heads/c" in (path / "packed-refs").read_bytes()
    fsck(path)
    with GitCheckpointStore(path) as store:
        assert store.get_tuple(CheckpointConfig("a")) is None and store.get_tuple(CheckpointConfig("b")) is None
        assert store.get_tuple(CheckpointConfig("c")).checkpoint.id == "c0"


HOLDER = """
import sys, time
import qvc.plumbing.repository as repository
repository.PUBLISH_LAG = 3600.0  # never publishes: its puts stay committed in the staging database only
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
store = GitCheckpointStore(sys.argv[1], durability="sync")
for i in range(3):
    store.put(CheckpointConfig("t"), Checkpoint(id=f"held-{i}", thread_id="t", step=i, state_data={"i": i}), {})
print("IDLE", flush=True)
time.sleep(600)
"""

PUBLISHER = """
import sys
import qvc.plumbing.pack as pack
import qvc.plumbing.repository as repository
repository.PUBLISH_LAG = 3600.0  # publishes at its flush only
from qvc import Checkpoint, CheckpointConfig, CheckpointConflictError, GitCheckpointStore
store = GitCheckpointStore(sys.argv[1])
print("OPEN", flush=True)
sys.stdin.readline()  # once the holder is dead
try:  # on the dead writer's acknowledged puts
    store.put(CheckpointConfig("t"), Checkpoint(id="later", thread_id="t", step=3, state_data={"i": 3}), {})
    print("PUT", flush=True)
except CheckpointConflictError:
    print("CONFLICT", flush=True)
real, paused = pack.write, []
def write(*args, **kwargs):  # the pack of everything staged, the dead writer's objects too: pause there once
    if not paused:
        paused.append(True)
        print("PUBLISHING", flush=True)
        sys.stdin.readline()
    return real(*args, **kwargs)
pack.write = write
store.flush()
print("PUBLISHED", flush=True)
store.close()
"""


def test_an_open_while_another_process_publishes_a_dead_writers_puts_sees_and_keeps_them(tmp_path):
    """A writer dies with acknowledged puts committed and not published; another process puts
    on them and publishes them all, and is stopped midway (its pack not yet written). An open
    meanwhile neither waits for it nor takes its work for lost: it reads the dead writer's puts
    and the other's, writes on them, and once the publication is done git's files hold them
    all. (The old engine's open took the publishing process's hold on the dead writer's journal
    for a live store's and recovered nothing.)"""
    path = tmp_path / "r.qvc"
    GitCheckpointStore(path).close()
    publisher = subprocess.Popen([sys.executable, "-c", PUBLISHER, os.fspath(path)], env=child_env(), text=True,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    holder = None
    try:
        said = _lines(publisher)
        assert said.get(timeout=60) == "OPEN", publisher.stderr.read()[-3000:]
        # the holder writes only now: a store that opens publishes what is staged (here, nothing)
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, os.fspath(path)], env=child_env(), text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert holder.stdout.readline().strip() == "IDLE", holder.stderr.read()[-3000:]
        holder.kill()
        holder.wait()
        publisher.stdin.write("\n")
        publisher.stdin.flush()
        assert said.get(timeout=60) == "PUT", publisher.stderr.read()[-3000:]
        assert said.get(timeout=60) == "PUBLISHING", publisher.stderr.read()[-3000:]
        assert run_git(path, "rev-parse", "-q", "--verify", "refs/heads/t", check=False).returncode != 0  # not yet

        with GitCheckpointStore(path) as store:  # opens while the publication is stopped midway
            line = [t.checkpoint.id for t in store.list(CheckpointConfig("t"))]
            assert line == ["later", "held-2", "held-1", "held-0"], store.recovery
            assert store.get_tuple(CheckpointConfig("any", "held-2")).checkpoint.state_data == {"i": 2}
            put(store, "t", "mine", 4, {"i": 4})
            publisher.stdin.write("\n")  # the publication goes on (before this store's close publishes)
            publisher.stdin.flush()
            assert said.get(timeout=60) == "PUBLISHED", publisher.stderr.read()[-3000:]
        assert publisher.wait(timeout=60) == 0, publisher.stderr.read()[-3000:]
    finally:
        for proc in (holder, publisher):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    fsck(path)
    with GitCheckpointStore(path) as store:
        assert [t.checkpoint.id for t in store.list(CheckpointConfig("t"))] == [
            "mine", "later", "held-2", "held-1", "held-0"]
        assert store.repository.staging.staged() == 0
    log = run_git(path, "log", "--format=%H", "refs/heads/t").stdout.split()
    assert len(log) == 5  # git's files hold them all
    assert not (path / "qvc" / "journal").exists() and not list(path.glob("refs/**/*.lock"))
