"""Deferred publication (ASYNC and EXIT stores) and ref leases, with real processes and real git.

An ASYNC or EXIT store applies a put at once for itself, holds the thread's git lock (a lease)
and writes git's files in batches (``qvc.plumbing.leases``). These tests check the promises
that rest on it: other processes and plain git see a put without a flush, nobody (qvc or git)
moves a leased ref, two processes never fork a thread silently, and a writer killed while
holding a lease loses nothing it acknowledged, also when another writer is running.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time

import helpers
import pytest
from helpers import child_env, fsck, git_env

from qvc import Checkpoint, CheckpointConfig, CheckpointConflictError, GitCheckpointStore
from qvc.plumbing import leases, publication

HOLDER = """
import sys, time
import qvc.plumbing.publication as publication
publication.PUBLISH_LAG = float(sys.argv[3])  # how long this writer keeps its puts to itself
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
store = GitCheckpointStore(sys.argv[1], durability=sys.argv[2])
parent = None
for i in range(3):
    cid = f"held-{i}"
    store.put(CheckpointConfig("t"), Checkpoint(id=cid, thread_id="t", step=i, state_data={"i": i}), {})
    print(f"ACK {cid}", flush=True)
if "--writes" in sys.argv:  # pending writes of the last checkpoint: a new ref, leased too
    store.put_writes(CheckpointConfig("t", cid), [("ch", "v")], "task")
    print("ACK writes", flush=True)
print("IDLE", flush=True)
time.sleep(600)
"""


def _put(store, thread, cid, step, parent=None):
    """``helpers.put`` with empty metadata (kept: the reflog then says "put", which tests read)."""
    helpers.put(store, thread, cid, step, {"cid": cid}, parent_id=parent, metadata={})


def _holder(path, mode="async", lag=600.0, writes=False) -> tuple[subprocess.Popen, list[str]]:
    args = [sys.executable, "-c", HOLDER, os.fspath(path), mode, str(lag)] + (["--writes"] if writes else [])
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env())
    acked = []
    for line in proc.stdout:
        if line.startswith("ACK writes"):
            continue
        if line.startswith("ACK"):
            acked.append(line.split()[1])
        elif line.startswith("IDLE"):
            return proc, acked
    raise AssertionError(f"the writer failed: {proc.stderr.read()[-3000:]}")


def _git(path, *args) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], env=git_env(path), capture_output=True, text=True, timeout=60)


def test_another_process_and_git_see_an_async_put_without_a_flush(tmp_path):
    path = tmp_path / "r.qvc"
    GitCheckpointStore(path).close()
    proc, acked = _holder(path, lag=publication.PUBLISH_LAG)
    try:
        deadline = time.monotonic() + 30
        while True:  # published by the writer's own thread, about PUBLISH_LAG after the put
            with GitCheckpointStore(path, readonly=True) as reader:
                head = reader.get_tuple(CheckpointConfig("t"))
            if head is not None and head.checkpoint.id == acked[-1]:
                break
            assert time.monotonic() < deadline, "the writer's puts never reached git's files"
            time.sleep(0.01)
        shown = _git(path, "log", "--format=%s", "refs/heads/t")
        assert shown.returncode == 0 and len(shown.stdout.splitlines()) == 3, shown
    finally:
        proc.kill()
        proc.wait()


def test_a_leased_ref_is_locked_for_git_until_published(tmp_path, monkeypatch):
    monkeypatch.setattr(publication, "PUBLISH_LAG", 600.0)
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path, durability="exit") as store:
        _put(store, "t", "a", 0)
        first = store.head("t")
        _put(store, "t", "b", 1)
        assert _git(path, "rev-parse", "-q", "--verify", "refs/heads/t").returncode != 0  # not in git's files yet
        moved = _git(path, "update-ref", "refs/heads/t", first)
        assert moved.returncode != 0 and ".lock" in moved.stderr  # git's own compare-and-swap lock
        store.flush()
        assert _git(path, "rev-parse", "refs/heads/t").stdout.strip() == store.head("t")
        log = _git(path, "reflog", "show", "--format=%gs", "refs/heads/t").stdout.splitlines()
        assert [entry.split(":")[0] for entry in log] == ["put", "put"]
        assert [e.message for e in store.reflog("t")] == log
    fsck(path)


def test_a_writer_meeting_a_dead_writers_lease_rolls_it_forward(tmp_path):
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as mine:  # open before the other writer dies: its open recovers nothing
        _put(mine, "t", "base", 0)
        base = mine.head("t")
        proc, acked = _holder(path)  # builds on "base" and keeps its three puts to itself
        proc.kill()
        proc.wait()
        assert mine.head("t") == base  # not published: a running reader does not see them yet
        with pytest.raises(CheckpointConflictError):  # the thread moved: the dead writer's puts are there
            _put(mine, "t", "mine", 1, parent="base")
        assert [t.checkpoint.id for t in mine.list(CheckpointConfig("t"))] == ["held-2", "held-1", "held-0", "base"]
        _put(mine, "t", "after", 4)
        assert [t.checkpoint.id for t in mine.list(CheckpointConfig("t"))][:2] == ["after", "held-2"]
    with GitCheckpointStore(path) as reopened:  # the dead writer's journal is replayed: nothing changes
        assert reopened.recovery.journals_replayed == 1
        assert [t.checkpoint.id for t in reopened.list(CheckpointConfig("t"))][:2] == ["after", "held-2"]
    fsck(path)


KILLED_BEFORE_INDEXING = """
import os, signal, sys
import qvc.plumbing.publication as publication
publication.PUBLISH_LAG = 600.0  # keeps its puts to itself: the thread stays leased
from qvc.store import history
real = history.History.observe
armed = False
def observe(self, record):  # SIGKILL this process once "lost" is journaled, before it is indexed
    if armed:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, record)
history.History.observe = observe
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
s = GitCheckpointStore(sys.argv[1], durability="async")
s.put(CheckpointConfig("t"), Checkpoint(id="kept", thread_id="t", step=0, state_data={"x": 0}), {})
print("ACK", flush=True)
armed = True
s.put(CheckpointConfig("t"), Checkpoint(id="lost", thread_id="t", step=1, state_data={"x": 1}), {})
"""


@pytest.mark.parametrize("adopter", ["put", "gc"])
def test_a_retry_of_a_put_killed_in_flight_after_another_writer_adopted_it_stores_nothing_twice(tmp_path, adopter):
    """A writer killed after journaling a put but before indexing its id leaves a lease that the
    next writer (or maintenance) rolls forward. Retrying that put (same id, same content) must
    find it: the adopter indexes what it rolled forward (the retry once appended a second "lost")."""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as mine:  # open before the other writer dies: its open recovers nothing
        _put(mine, "u", "other", 0)
        proc = subprocess.run([sys.executable, "-c", KILLED_BEFORE_INDEXING, os.fspath(path)], env=child_env(),
                              capture_output=True, text=True, timeout=60)
        assert proc.stdout.split() == ["ACK"] and proc.returncode == -9, proc.stderr[-3000:]
        if adopter == "put":
            _put(mine, "t", "after", 2)  # meets the dead writer's lease and rolls it forward
        else:
            mine.gc()
        line = ["after", "lost", "kept"] if adopter == "put" else ["lost", "kept"]
        assert [t.checkpoint.id for t in mine.list(CheckpointConfig("t"))] == line
        mine.put(CheckpointConfig("t"), Checkpoint(id="lost", thread_id="t", step=1, state_data={"x": 1}), {})
        assert [t.checkpoint.id for t in mine.list(CheckpointConfig("t"))] == line
    with GitCheckpointStore(path) as reopened:
        assert [t.checkpoint.id for t in reopened.list(CheckpointConfig("t"))] == line
    fsck(path)


def test_a_reader_waits_for_another_process_to_publish_what_it_acknowledged(tmp_path):
    path = tmp_path / "r.qvc"
    GitCheckpointStore(path).close()
    proc, acked = _holder(path, lag=0.5)  # publishes about half a second after its puts
    try:
        with GitCheckpointStore(path, readonly=True) as reader:  # reads as git's files are
            assert [t.checkpoint.id for t in reader.list(CheckpointConfig("t"))] == list(reversed(acked))
        with GitCheckpointStore(path) as mine:  # a put reads the head the same way: no conflict
            _put(mine, "t", "mine", 9)
            assert [t.checkpoint.id for t in mine.list(CheckpointConfig("t"))] == ["mine", *reversed(acked)]
    finally:
        proc.kill()
        proc.wait()
    fsck(path)


def test_two_live_processes_on_one_thread_never_fork_it_silently(tmp_path, monkeypatch):
    path = tmp_path / "r.qvc"
    GitCheckpointStore(path).close()
    proc, acked = _holder(path, lag=1.0)  # publishes about a second after its puts
    monkeypatch.setattr(leases, "SETTLE_WAIT", 0.05)  # this reader gives up waiting and reads the old head
    try:
        with GitCheckpointStore(path) as mine:
            with pytest.raises(CheckpointConflictError):  # waits for the lease, then finds the thread moved
                _put(mine, "t", "mine", 9)
            _put(mine, "t", "mine", 9)  # a retry builds on what the other writer published
            assert [t.checkpoint.id for t in mine.list(CheckpointConfig("t"))] == ["mine", *reversed(acked)]
    finally:
        proc.kill()
        proc.wait()
    fsck(path)


@pytest.mark.parametrize("mode", ["async", "exit"])
def test_a_writer_killed_holding_its_lease_loses_nothing(tmp_path, mode):
    path = tmp_path / "r.qvc"
    proc, acked = _holder(path, mode=mode)
    proc.kill()
    proc.wait()
    with GitCheckpointStore(path) as store:
        assert store.recovery.journals_replayed == 1
        assert [t.checkpoint.id for t in store.list(CheckpointConfig("t"))] == list(reversed(acked))
        assert [e.message.split(":")[0] for e in store.reflog("t")][0] == "recovery"
    fsck(path)


def test_a_dead_writers_leased_new_ref_comes_back_whatever_was_deleted_elsewhere(tmp_path):
    """A SYNC writer dies holding the lease of a ref it created (pending writes), after another
    process deleted something else (a new generation token): recovery still restores the ref,
    since no one else can have deleted a ref leased to the dead writer."""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        _put(store, "other", "o-0", 0)
    proc, acked = _holder(path, mode="sync", writes=True)  # acknowledged durable, never published
    try:
        with GitCheckpointStore(path) as other:
            other.delete_thread("other")
    finally:
        proc.kill()
        proc.wait()
    with GitCheckpointStore(path) as store:
        assert store.recovery.journals_replayed == 1
        head = store.get_tuple(CheckpointConfig("t"))
        assert head is not None and head.checkpoint.id == acked[-1]
        assert [(w.channel, w.value) for w in head.pending_writes or []] == [("ch", "v")], store.recovery.summary()
        assert store.threads() == ["t"]
    fsck(path)


def test_a_stuck_writer_costs_a_reader_one_wait(tmp_path, monkeypatch):
    """A live writer that never publishes (stopped, stuck, or a long lag): the reader waits for
    its lease once, then reads what git's files hold without waiting again."""
    path = tmp_path / "r.qvc"
    GitCheckpointStore(path).close()
    proc, _ = _holder(path)  # holds its lease on t for 600 s
    sleeps = []
    real_sleep = time.sleep
    monkeypatch.setattr(leases, "SETTLE_WAIT", 0.2)
    monkeypatch.setattr(leases.time, "sleep", lambda s: (sleeps.append(s), real_sleep(s)))
    try:
        with GitCheckpointStore(path, readonly=True) as reader:
            assert reader.get_tuple(CheckpointConfig("t")) is None  # waited, then read the files
            waited = len(sleeps)
            assert waited > 0
            assert reader.get_tuple(CheckpointConfig("t")) is None
            assert list(reader.list(CheckpointConfig("t"))) == []
            assert len(sleeps) == waited  # the same lease is not waited for again
    finally:
        proc.kill()
        proc.wait()


def test_a_dead_lease_over_a_torn_ref_does_not_stop_the_open(tmp_path):
    """A power cut kept a ref's rename but not its content, next to a dead store's lease lock:
    opening removes the lock (nothing to roll forward from) instead of failing on the ref."""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        _put(store, "t", "a", 0)
    (path / "refs" / "heads" / "t").write_bytes(b"qvc lease 1-deadbeef.wal")  # torn: no sha
    (path / "refs" / "heads" / "t.lock").write_bytes(leases.TAG + b"1-0123456789ab.wal\n")
    with GitCheckpointStore(path) as store:
        assert "refs/heads/t.lock" in store.recovery.locks_removed
    assert not (path / "refs" / "heads" / "t.lock").exists()


MID_PUBLISH = """
import os, signal, sys
real = os.rename
def rename(src, dst, *a, **k):  # SIGKILL this process as it renames a pending-writes lease over its ref
    if str(src).endswith(".lock") and "/refs/qvc/writes/" in str(src):
        os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst, *a, **k)
os.rename = rename
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
s = GitCheckpointStore(sys.argv[1])
s.put(CheckpointConfig("t"), Checkpoint(id="a", thread_id="t", step=0, state_data={"x": 1}), {})
s.put_writes(CheckpointConfig("t", "a"), [("ch", 1)], "task")
print("ACKED", flush=True)
s.flush()
"""


def test_a_writer_killed_while_it_publishes_a_new_ref_loses_nothing(tmp_path):
    """The lease's lock already holds the ref's value (no longer its tag) when the writer dies
    before the rename; another store is open, so that lock is not simply old enough to go, and
    it deletes something meanwhile. Opening restores the acknowledged pending write (the lock
    shows whose lease it was) instead of failing on the lock."""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as other:
        _put(other, "u", "b", 0)
        proc = subprocess.run([sys.executable, "-c", MID_PUBLISH, os.fspath(path)], env=child_env(),
                              capture_output=True, text=True, timeout=60)
        assert proc.stdout.split() == ["ACKED"] and proc.returncode == -9, proc.stderr[-3000:]
        locks = list((path / "refs" / "qvc" / "writes").glob("*.lock"))
        assert len(locks) == 1 and not locks[0].read_bytes().startswith(leases.TAG)
        _put(other, "u", "b2", 1)
        other.delete(CheckpointConfig("u"))  # a delete since: the generation rule alone would not restore it
        with GitCheckpointStore(path) as store:
            assert store.recovery.journals_replayed == 1
            t = store.get_tuple(CheckpointConfig("t"))
            assert t.checkpoint.id == "a" and [(w.channel, w.value) for w in t.pending_writes] == [("ch", 1)]
        assert not list((path / "refs" / "qvc" / "writes").glob("*.lock"))
    fsck(path)


def test_recovery_leaves_a_ref_locked_by_another_writer_and_opens(tmp_path, caplog):
    """The dead writer's new ref is locked by someone else (git's own lock: no tag, no value of
    the dead writer's) when the journal is replayed: the open goes on, names the ref in a
    warning and leaves the ref to the lock's holder."""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as other:
        _put(other, "u", "b", 0)
        proc = subprocess.run([sys.executable, "-c", MID_PUBLISH, os.fspath(path)], env=child_env(),
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == -9, proc.stderr[-3000:]
        [lock] = (path / "refs" / "qvc" / "writes").glob("*.lock")
        lock.write_bytes(b"")  # as git's lock is just after it creates it
        with GitCheckpointStore(path) as store:
            assert store.recovery.journals_replayed == 1
            assert store.get_tuple(CheckpointConfig("t")).checkpoint.id == "a"
        assert lock.exists()
        assert any("is locked by another writer" in r.getMessage() for r in caplog.records)


def _packed_only(path) -> None:
    """Leave every ref only in ``packed-refs``, as ``qvc gc`` does."""
    assert _git(path, "pack-refs", "--all", "--prune").returncode == 0
    assert not (path / "refs" / "heads" / "t").exists()


def _rewrite_packed_refs(path, how: str, store=None) -> None:
    """Rewrite ``packed-refs`` (a new file: new inode, new mtime) without moving thread t."""
    before = os.stat(path / "packed-refs")
    time.sleep(0.02)  # past the file system clock's tick: the new file is newer
    if how == "delete":  # another store deletes an unrelated packed thread
        store.delete_thread("u")
    else:  # git's own pack-refs (qvc gc runs it) while the dead writer's lease is in place
        assert _git(path, "pack-refs", "--all", "--prune").returncode == 0
    after = os.stat(path / "packed-refs")
    assert (after.st_ino, after.st_mtime_ns) != (before.st_ino, before.st_mtime_ns)


@pytest.mark.parametrize("how", ["delete", "pack-refs"])
def test_a_dead_writers_lease_survives_packed_refs_rewritten_before_the_next_put(tmp_path, how):
    """A thread only in ``packed-refs``; a SYNC writer puts (acknowledged) and is killed before
    it publishes; ``packed-refs`` is rewritten; the next put on the thread, by a store open all
    along, must first roll the dead writer's puts forward and build on them. (The put used to
    judge the lease by packed-refs' identity, drop it, and build on the old head: the
    acknowledged puts were on no line.)"""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        _put(store, "t", "base", 0)
        _put(store, "u", "u-0", 0)
    _packed_only(path)
    with GitCheckpointStore(path) as mine:  # open before the writer dies: its open recovers nothing
        proc, acked = _holder(path, mode="sync")
        proc.kill()
        proc.wait()
        assert leases.holder(os.fspath(path), "refs/heads/t") is not None  # died holding its lease
        _rewrite_packed_refs(path, how, mine)
        _put(mine, "t", "mine", 4)  # builds on the dead writer's puts, rolled forward first
        assert [t.checkpoint.id for t in mine.list(CheckpointConfig("t"))] == ["mine", *reversed(acked), "base"]
    with GitCheckpointStore(path) as reopened:
        assert [t.checkpoint.id for t in reopened.list(CheckpointConfig("t"))] == ["mine", *reversed(acked), "base"]
    fsck(path)


def _dead_writer_on_a_packed_thread(path) -> list[str]:
    """Threads t and u only in ``packed-refs``; a SYNC writer's three puts on t acknowledged, and
    the writer killed holding its lease. Returns the puts' ids."""
    with GitCheckpointStore(path) as store:
        _put(store, "t", "base", 0)
        _put(store, "u", "u-0", 0)
    _packed_only(path)
    proc, acked = _holder(path, mode="sync")
    proc.kill()
    proc.wait()
    return acked


def test_recovery_rolls_a_dead_lease_forward_after_packed_refs_was_rewritten(tmp_path):
    """The same, found by the next open's recovery: ``packed-refs`` rewritten by plain git
    after the writer died (newer than the file the writer saw) does not make recovery take the
    packed value for a later writer's."""
    path = tmp_path / "r.qvc"
    acked = _dead_writer_on_a_packed_thread(path)
    time.sleep(0.02)
    assert _git(path, "update-ref", "-d", "refs/heads/u").returncode == 0  # git rewrites packed-refs
    with GitCheckpointStore(path) as store:
        assert store.recovery.journals_replayed == 1
        assert [t.checkpoint.id for t in store.list(CheckpointConfig("t"))] == [*reversed(acked), "base"]
    fsck(path)


KILLED_RECOVERING = """
import os, signal, sys
from qvc.plumbing.repository import Repository
real = Repository.ref
def ref(self, name, **kwargs):  # SIGKILL this process as its recovery reads thread t to restore it
    if name == "refs/heads/t":
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, name, **kwargs)
Repository.ref = ref
from qvc import GitCheckpointStore
GitCheckpointStore(sys.argv[1])
"""


@pytest.mark.parametrize("how", ["delete-other", "pack-refs"])
def test_a_recovery_killed_midway_leaves_the_dead_writers_lease_to_decide(tmp_path, how):
    """A SYNC writer dies holding its lease on a packed thread; the open that recovers it is
    killed too, as it comes to restore the ref; then ``packed-refs`` is rewritten. The next
    recovery must still roll the acknowledged puts forward. (The first recovery used to remove
    the lease's lock before restoring the ref; the next one, without the lease's serial,
    judged by packed-refs' newer file and left the ref at the old head: the kill-during-gc
    loop lost acknowledged puts this way.)"""
    path = tmp_path / "r.qvc"
    acked = _dead_writer_on_a_packed_thread(path)
    killed = subprocess.run([sys.executable, "-c", KILLED_RECOVERING, os.fspath(path)], env=child_env(),
                            capture_output=True, text=True, timeout=60)
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert leases.holder(os.fspath(path), "refs/heads/t") is not None  # the lease is still there to decide
    before = os.stat(path / "packed-refs")
    time.sleep(0.02)  # past the file system clock's tick: the new file is newer
    # plain git rewrites packed-refs without moving t (qvc gc's pack-refs, or a delete of another thread)
    args = ("pack-refs", "--all", "--prune") if how == "pack-refs" else ("update-ref", "-d", "refs/heads/u")
    assert _git(path, *args).returncode == 0
    assert os.stat(path / "packed-refs").st_mtime_ns != before.st_mtime_ns
    with GitCheckpointStore(path) as store:
        assert [t.checkpoint.id for t in store.list(CheckpointConfig("t"))] == [*reversed(acked), "base"]
    assert not (path / "refs" / "heads" / "t.lock").exists()
    fsck(path)


TRAVELLER = """
import sys, time
import qvc.plumbing.publication as publication
publication.PUBLISH_LAG = 600.0  # keeps its time travel (the head and the superseded line) to itself
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
store = GitCheckpointStore(sys.argv[1], durability="sync")
store.put(CheckpointConfig("b"), Checkpoint(id="back", thread_id="b", step=9, parent_id="b0", state_data={"x": 9}),
          {}, expected_head=store.head("b"))
print("ACK", flush=True)
time.sleep(600)
"""


def test_a_delete_rewrites_the_superseded_line_a_dead_writers_time_travel_left(tmp_path):
    """A writer travels back on thread b (the superseded line, holding b1, is a new ref under
    its lease) and is killed before publishing; a store open all along puts on b (rolling the
    head's lease forward) and deletes b1. The delete must rewrite that line too: it lists the
    refs it rewrites only after rolling forward the dead writer's leases under them. (It listed
    git's files, where the line was not yet, and the next recovery restored the line with the
    deleted checkpoint on it: found by the model-based test.)"""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as mine:  # open before the writer dies: its open recovers nothing
        for n in range(3):
            _put(mine, "b", f"b{n}", n)
        proc = subprocess.Popen([sys.executable, "-c", TRAVELLER, os.fspath(path)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=child_env())
        try:
            assert proc.stdout.readline().strip() == "ACK", proc.stderr.read()[-3000:]
        finally:
            proc.kill()
            proc.wait()
        _put(mine, "b", "after", 10)  # on the dead writer's travel, rolled forward first
        assert [t.checkpoint.id for t in mine.list(CheckpointConfig("b"))] == ["after", "back", "b0"]
        mine.delete(CheckpointConfig("b", "b1"))
        assert mine.get_tuple(CheckpointConfig("b", "b1")) is None
        assert set(t.checkpoint.id for t in mine.list(CheckpointConfig("b"), superseded=True)) == {
            "after", "back", "b0", "b2"}
    with GitCheckpointStore(path) as reopened:  # the dead writer's journal replayed
        assert reopened.recovery.journals_replayed == 1
        assert reopened.get_tuple(CheckpointConfig("b", "b1")) is None
        assert set(t.checkpoint.id for t in reopened.list(CheckpointConfig("b"), superseded=True)) == {
            "after", "back", "b0", "b2"}
    fsck(path)


CUT_SHORT = """
import os, signal, sys
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
s = GitCheckpointStore(sys.argv[1])
real = os.rename
def rename(src, dst, *a, **k):  # SIGKILL this process as it renames thread t's lease over the ref
    if str(src).endswith("/refs/heads/t.lock"):
        os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst, *a, **k)
os.rename = rename
s.put(CheckpointConfig("t"), Checkpoint(id="a", thread_id="t", step=1, state_data={"x": 1}), {})
print("ACKED", flush=True)
s.flush()
"""


def test_a_running_store_completes_a_publication_a_kill_cut_short(tmp_path):
    """The dead writer's lock holds the value it was publishing (no tag any more) when another
    store, open all along, puts on the thread: that store completes the publication (as the
    dead writer was about to) instead of removing the lock as git's stale one and building on
    the old head, which lost the acknowledged put."""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        _put(store, "t", "base", 0)
    with GitCheckpointStore(path) as other:
        proc = subprocess.run([sys.executable, "-c", CUT_SHORT, os.fspath(path)], env=child_env(),
                              capture_output=True, text=True, timeout=60)
        assert proc.stdout.split() == ["ACKED"] and proc.returncode == -9, proc.stderr[-3000:]
        lock = path / "refs" / "heads" / "t.lock"
        assert not lock.read_bytes().startswith(leases.TAG)
        old = time.time() - 30
        os.utime(lock, (old, old))  # long dead: older than git's own stale locks
        _put(other, "t", "mine", 2)  # on the dead writer's put, completed first
        assert [t.checkpoint.id for t in other.list(CheckpointConfig("t"))] == ["mine", "a", "base"]
    assert not lock.exists()
    fsck(path)


def test_a_retry_after_a_time_travel_conflict_stores_the_checkpoint(tmp_path, monkeypatch):
    """A time-travel put that meets another writer's move raises CheckpointConflictError
    ("nothing was stored"); the documented retry with the same id and content must then store
    it. (The conflicting put had already entered its id in the id index, so the retry took
    itself for a re-put of an existing checkpoint, reported success and stored nothing.)"""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        _put(store, "t", "base-0", 0)
        _put(store, "t", "base-1", 1)
    proc, acked = _holder(path, mode="sync", lag=600.0)  # builds on base-1, keeps its lease
    monkeypatch.setattr(leases, "SETTLE_WAIT", 0.05)  # gives up waiting and reads the old head
    monkeypatch.setattr(publication, "LOCK_WAIT", 0.3)
    try:
        with GitCheckpointStore(path) as mine:
            stale = mine.head("t")
            travel = Checkpoint(id="tt", thread_id="t", step=1, parent_id="base-0", state_data={"cid": "tt"})
            with pytest.raises(CheckpointConflictError):  # the thread is locked by the other writer
                mine.put(CheckpointConfig("t"), travel, {}, expected_head=stale)
            proc.kill()
            proc.wait()
            with pytest.raises(CheckpointConflictError):  # the thread moved: the dead writer's puts
                mine.put(CheckpointConfig("t"), travel, {}, expected_head=stale)
            head = mine.head("t")
            assert mine.get_tuple(CheckpointConfig("t", head)).checkpoint.id == acked[-1]
            assert mine.get_tuple(CheckpointConfig("t", "tt")) is None  # nothing was stored
            mine.put(CheckpointConfig("t"), travel, {}, expected_head=head)  # the retry
            assert [t.checkpoint.id for t in mine.list(CheckpointConfig("t"))] == ["tt", "base-0"]
            superseded = [t.checkpoint.id for t in mine.list(CheckpointConfig("t"), superseded=True)]
            assert set(acked) <= set(superseded)
        with GitCheckpointStore(path) as reopened:
            assert reopened.get_tuple(CheckpointConfig("t")).checkpoint.id == "tt"
    finally:
        proc.kill()
        proc.wait()
    fsck(path)


LATER_WRITE = """
import sys, time
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
s = GitCheckpointStore(sys.argv[1])
s.put(CheckpointConfig("d"), Checkpoint(id="d-0", thread_id="d", step=0, state_data={"x": 1}), {})
s.flush()
print("READY", flush=True)
sys.stdin.readline()
s.put(CheckpointConfig("e"), Checkpoint(id="e-0", thread_id="e", step=0, state_data={"x": 2}), {})
s.flush()
print("ACK", flush=True)
time.sleep(600)
"""


def test_recovery_does_not_bring_back_a_thread_deleted_after_the_dead_writers_move(tmp_path):
    """A writer puts on thread d; another process deletes d (a new generation token); the writer
    then writes elsewhere (so its journal has seen the new token) and is killed. Recovery must
    not restore d: the token its later write saw says nothing about d (it used to count any
    token the writer had seen)."""
    path = tmp_path / "r.qvc"
    GitCheckpointStore(path).close()
    proc = subprocess.Popen([sys.executable, "-c", LATER_WRITE, os.fspath(path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env())
    try:
        assert proc.stdout.readline().strip() == "READY", proc.stderr.read()[-3000:]
        with GitCheckpointStore(path) as other:
            other.delete_thread("d")
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "ACK", proc.stderr.read()[-3000:]
    finally:
        proc.kill()
        proc.wait()
    with GitCheckpointStore(path) as store:
        assert store.recovery.journals_replayed == 1
        assert store.threads() == ["e"], store.recovery.summary()
        assert store.get_tuple(CheckpointConfig("d", "d-0")) is None
    fsck(path)


def test_gc_completes_a_publication_a_kill_cut_short_instead_of_dropping_it(tmp_path):
    """``qvc gc`` meets the dead writer's lock holding the value it was publishing: it completes
    the publication, where it used to remove the lock as stale and then pack the refs, after
    which recovery found ``packed-refs`` newer than the file the writer saw and left the ref on
    the old head (the acknowledged put on no line)."""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        _put(store, "t", "base", 0)
    with GitCheckpointStore(path) as other:  # open before the writer dies: its open recovers nothing
        proc = subprocess.run([sys.executable, "-c", CUT_SHORT, os.fspath(path)], env=child_env(),
                              capture_output=True, text=True, timeout=60)
        assert proc.stdout.split() == ["ACKED"] and proc.returncode == -9, proc.stderr[-3000:]
        assert (path / "refs" / "heads" / "t.lock").exists()
        other.gc()
        assert [t.checkpoint.id for t in other.list(CheckpointConfig("t"))] == ["a", "base"]
    with GitCheckpointStore(path) as reopened:
        assert [t.checkpoint.id for t in reopened.list(CheckpointConfig("t"))] == ["a", "base"]
    fsck(path)


def test_a_lease_waited_for_under_the_exclusive_lock_is_waited_for_again(tmp_path, monkeypatch):
    """A read under the exclusive lock (``qvc/lock``, held by maintenance), where no
    store can publish (publishing holds that lock shared): its wait for a live writer's lease
    is in vain, yet says nothing about the writer. The lease must not be remembered as a stuck
    writer's (:data:`qvc.plumbing.leases._UNPUBLISHED`): it was, and every later read of this
    process skipped it and missed the acknowledged put it publishes a moment later."""
    path = tmp_path / "r.qvc"
    GitCheckpointStore(path).close()
    proc, acked = _holder(path, lag=1.0)  # publishes about a second after its puts
    try:
        with GitCheckpointStore(path, readonly=True) as reader:
            repo = reader.repository
            monkeypatch.setattr(leases, "SETTLE_WAIT", 0.1)
            lock = os.open(path / "qvc" / "lock", os.O_RDWR)
            try:  # held exclusively, as maintenance holds it: the writer cannot publish
                fcntl.flock(lock, fcntl.LOCK_EX)
                assert reader.get_tuple(CheckpointConfig("t")) is None  # waited in vain, read the files
                assert leases.foreign(repo.path, ["refs/heads/t"]) == ["refs/heads/t"]  # still waited for
            finally:
                os.close(lock)
            monkeypatch.setattr(leases, "SETTLE_WAIT", 5.0)
            head = reader.get_tuple(CheckpointConfig("t"))  # waits for the writer, free to publish now
            assert head is not None and head.checkpoint.id == acked[-1]
    finally:
        proc.kill()
        proc.wait()


def test_a_read_only_store_lets_writers_publish_before_it_takes_the_exclusive_lock(tmp_path, monkeypatch):
    """A read-only open that recovers takes the exclusive lock as a writer's open does: the gate
    closed first, other stores' leases published, then the lock. (It took the lock at once, and
    its recovery's reads then waited in vain for leases no one could publish meanwhile.)"""
    path = tmp_path / "r.qvc"
    GitCheckpointStore(path).close()
    proc, acked = _holder(path, lag=1.0)  # publishes about a second after its puts
    monkeypatch.setattr(leases, "SETTLE_WAIT", 30.0)  # a loaded machine: wait for it as long as it takes
    try:
        with GitCheckpointStore(path, readonly=True) as reader:
            repo = reader.repository
            with repo.exclusive():
                assert leases.foreign(repo.path, ["refs/heads/t"]) == []  # published before we got the lock
                assert _git(path, "rev-parse", "refs/heads/t").stdout.strip() == reader.head("t")
                assert reader.get_tuple(CheckpointConfig("t")).checkpoint.id == acked[-1]
    finally:
        proc.kill()
        proc.wait()
