"""A writer frozen (SIGSTOP) *inside* its transaction, holding the writers' queue
(``qvc/staging.queue``) and the maintenance lock (``qvc/lock``) shared: readers never wait for
it, and other writers wait for it no longer than the store's ``write_wait`` (docs/durability.md,
"Writers, readers and maintenance").

Found by a user trial: with a temporary file of an interrupted ``git fetch`` under ``objects/``
(``tmp_pack_*``, older than ``leftovers.STALE_SECONDS``), every open ran recovery, which closed
the gate and waited without limit for the frozen writer's shared lock: ``qvc log`` and ``qvc
status`` never returned, and every other writer queued behind the gate. Without it, a put of
another process waited in the queue forever.

The frozen writer is a real process: it puts a checkpoint (acknowledged, left staged), then
opens a transaction through the store's repository, says so, and stops itself before
committing. Every other party is a subprocess run with a
timeout, so that a regression fails instead of hanging.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from helpers import child_env, fsck

from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore

FROZEN = """
import os, signal, sys
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
store = GitCheckpointStore(sys.argv[1], durability="exit")  # publishes seldom: the put stays staged
store.put(CheckpointConfig("t"), Checkpoint(id="acked", thread_id="t", step=1, parent_id="base",
          state_data={"m": "acked"}), {"source": "loop"})
with store.repository.transaction() as tx:
    print("IN", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)  # frozen holding qvc/lock (shared) and qvc/staging.queue
"""

#: a put on a thread of its own, in another process, with a short write_wait
PUT = """
import sys
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
from qvc.errors import StorageError
with GitCheckpointStore(sys.argv[1], write_wait=float(sys.argv[2])) as store:
    try:
        store.put(CheckpointConfig(sys.argv[3]), Checkpoint(id=sys.argv[3] + "-1", thread_id=sys.argv[3], step=0,
                  state_data={"m": 1}), {"source": "loop"})
        print("PUT")
    except StorageError as exc:
        print("BUSY", exc.errno, exc)
    print("HEAD", store.head(sys.argv[3]))
"""

THREADS = """
import sys, threading
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
from qvc.errors import StorageError
got = []
with GitCheckpointStore(sys.argv[1], durability="async", write_wait=float(sys.argv[2])) as store:
    def put(k):
        try:
            store.put(CheckpointConfig(f"w{k}"), Checkpoint(id=f"w{k}-1", thread_id=f"w{k}", step=0,
                      state_data={"m": k}), {"source": "loop"})
            got.append("PUT")
        except StorageError as exc:
            got.append(f"BUSY {exc.errno}")
    threads = [threading.Thread(target=put, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(" ".join(sorted(got)))
"""

GC = """
import sys
from qvc import GitCheckpointStore
from qvc.errors import StorageError
with GitCheckpointStore(sys.argv[1], write_wait=float(sys.argv[2])) as store:
    try:
        store.gc()
        print("GC")
    except StorageError as exc:
        print("BUSY", exc.errno, exc)
"""

READ = """
import sys
from qvc import CheckpointConfig, GitCheckpointStore
with GitCheckpointStore(sys.argv[1], readonly=sys.argv[2] == "ro", write_wait=3600) as s:
    print(s.get_tuple(CheckpointConfig("t")).checkpoint.id)
"""


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def _python(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=child_env(), timeout=timeout)


def _qvc(repo, *args: str) -> subprocess.CompletedProcess:
    return _python("-m", "qvc", "--repo", str(repo), *args)


@pytest.fixture
def frozen(tmp_path):
    """A repository with a checkpoint on thread t, a second one staged, and a writer frozen inside its
    transaction."""
    repo = tmp_path / "r.qvc"
    with GitCheckpointStore(repo) as store:
        store.put(CheckpointConfig("t"), Checkpoint(id="base", thread_id="t", step=0, state_data={"m": "base"}),
                  {"source": "loop"})
    writer = subprocess.Popen([sys.executable, "-c", FROZEN, str(repo)], stdout=subprocess.PIPE, text=True,
                              env=child_env())
    try:
        assert writer.stdout.readline().strip() == "IN"
        deadline = time.monotonic() + 30
        while not _stopped(writer.pid):
            assert time.monotonic() < deadline, "the writer did not stop"
            time.sleep(0.01)
        yield repo, writer
    finally:
        writer.kill()
        writer.wait(30)


def _stale_fetch_leftover(repo) -> str:
    """What an interrupted ``git fetch`` leaves: a temporary pack a minute old."""
    path = os.path.join(repo, "objects", "pack", "tmp_pack_leftover")
    with open(path, "wb") as f:
        f.write(b"PACK")
    old = time.time() - 60
    os.utime(path, (old, old))
    return path


def test_readers_never_wait_for_a_writer_frozen_mid_transaction(frozen):
    repo, writer = frozen
    leftover = _stale_fetch_leftover(repo)
    log = _qvc(repo, "log", "--oneline", "-n", "1", "t")
    assert log.returncode == 0 and log.stdout.strip(), log.stderr
    status = _qvc(repo, "status")
    assert status.returncode == 0, status.stderr
    assert "acked" in _qvc(repo, "log", "t").stdout  # the staged put, acknowledged before the freeze
    # a writable open waits for the repair a moment, then leaves it; and publishing what is staged
    # (as every writable open does) leaves its rows for later rather than wait in the queue
    for mode in ("ro", "rw"):
        read = _python("-c", READ, str(repo), mode)
        assert read.stdout.strip() == "acked", read.stderr
    # and no one was left queued behind a closed gate: a put of another process goes through
    # the gate and reaches the queue, where it waits its write_wait for the frozen writer
    put = _python("-c", PUT, str(repo), "1", "u")
    assert put.stdout.splitlines()[0].startswith("BUSY"), put.stdout + put.stderr
    assert os.path.exists(leftover)  # the repair was left for later, not done beside the writer
    writer.kill()
    writer.wait(30)
    with GitCheckpointStore(repo) as store:  # the writer is gone: the next open repairs
        assert store.recovery.temp_files_removed == 1
        assert store.get_tuple(CheckpointConfig("t")).checkpoint.id == "acked"
    assert not os.path.exists(leftover)
    fsck(repo)


def test_a_writer_frozen_mid_transaction_blocks_other_writers_only_for_write_wait(frozen):
    repo, writer = frozen
    put = _python("-c", PUT, str(repo), "2", "u")
    busy, head = put.stdout.splitlines()
    assert busy.startswith("BUSY 16") and "qvc/staging.queue" in busy, put.stdout + put.stderr  # EBUSY
    assert head == "HEAD None"  # nothing stored
    # an ASYNC store's threads queue behind one another in the process, and each gives up by its
    # own deadline (they do not wait write_wait in turn)
    threads = _python("-c", THREADS, str(repo), "2")
    assert threads.stdout.split("\n")[0] == "BUSY 16 BUSY 16 BUSY 16", threads.stdout + threads.stderr
    gc = _python("-c", GC, str(repo), "1")
    assert gc.stdout.startswith("BUSY 16") and "qvc/lock" in gc.stdout, gc.stdout + gc.stderr
    # the same put goes through once the frozen writer is gone (its transaction with it)
    writer.kill()
    writer.wait(30)
    put = _python("-c", PUT, str(repo), "2", "u")
    done, head = put.stdout.splitlines()
    assert done == "PUT" and head != "HEAD None", put.stdout + put.stderr
    with GitCheckpointStore(repo, readonly=True) as store:
        assert store.get_tuple(CheckpointConfig("u")).checkpoint.id == "u-1"
        assert store.get_tuple(CheckpointConfig("t")).checkpoint.id == "acked"
    fsck(repo)
