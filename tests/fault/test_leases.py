"""Acknowledged writes not yet in git's files, with real processes and real git.

A put is acknowledged once its staging transaction committed (``qvc/staging.db``); git's files
get it when someone publishes (the writer's background publisher, ``flush``, ``close``, the next
open, ``qvc gc``, a write of any store). These tests check the promises that rest on it when the
writer stops publishing, dies before publishing or is killed while it publishes: other processes
see its puts at once and build on them, plain git sees them once anyone published, nothing
acknowledged is lost whatever happens meanwhile (deletes, ``pack-refs``, maintenance), a dead
publisher's lock is finished by the next publisher, and a lock another program holds is never
deleted.

(This file tested the old engine's ref leases. What it promised that the staging tests cover:
git cannot move a leased ref -> plain git moving a staged ref keeps both values,
tests/unit/test_staging.py::test_plain_git_moving_a_staged_ref_keeps_both_values; two live
processes never fork a thread silently -> tests/fault/test_concurrency.py::
test_two_processes_same_thread_never_lose_a_put and tests/fault/test_staging_faults.py::
test_processes_writing_one_ref_lose_no_acknowledged_move; a stuck writer costs a reader one wait
-> a stopped writer costs nothing, tests/fault/test_frozen_writer.py and
test_staging_faults.py::test_a_stopped_writer_hides_nothing_and_blocks_no_one; a recovery
killed midway -> test_staging_faults.py::test_a_publication_killed_anywhere_is_finished_by_the_next_publisher.)
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time

import helpers
import pytest
from helpers import child_env, fsck, git_env

from qvc import Checkpoint, CheckpointConfig, CheckpointConflictError, GitCheckpointStore
from qvc.plumbing import leases, repository

#: a writer that acknowledges three puts on thread t (and, with --writes, pending writes: a new
#: ref) and then idles; its background publisher waits argv[3] seconds after a write
HOLDER = """
import sys, time
import qvc.plumbing.repository as repository
repository.PUBLISH_LAG = float(sys.argv[3])  # how long this writer keeps its puts out of git's files
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
store = GitCheckpointStore(sys.argv[1], durability=sys.argv[2])
for i in range(3):
    cid = f"held-{i}"
    store.put(CheckpointConfig("t"), Checkpoint(id=cid, thread_id="t", step=i, state_data={"i": i}), {})
    print(f"ACK {cid}", flush=True)
if "--writes" in sys.argv:  # pending writes of the last checkpoint: a new ref
    store.put_writes(CheckpointConfig("t", cid), [("ch", "v")], "task")
    print("ACK writes", flush=True)
print("IDLE", flush=True)
time.sleep(600)
"""


def _put(store, thread, cid, step, parent=None):
    """``helpers.put`` with empty metadata (kept: the reflog then says "put", which tests read)."""
    helpers.put(store, thread, cid, step, {"cid": cid}, parent_id=parent, metadata={})


def _holder(path, mode="sync", lag=600.0, writes=False) -> tuple[subprocess.Popen, list[str]]:
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
    """Plain git on git's files as they are (no publication first, unlike ``helpers.run_git``)."""
    return subprocess.run(["git", *args], env=git_env(path), capture_output=True, text=True, timeout=60)


def _git_head(path, ref="refs/heads/t") -> str:
    return _git(path, "rev-parse", "-q", "--verify", ref).stdout.strip()


def _ids(store, thread="t", **kwargs) -> list[str]:
    return [t.checkpoint.id for t in store.list(CheckpointConfig(thread), **kwargs)]


def _staged(store) -> int:
    return store.repository.staging.staged()


def test_another_process_and_git_see_an_async_put_without_a_flush(tmp_path):
    """Another process reads an ASYNC writer's puts at once; plain git reads them once the
    writer's own background publisher ran, without a flush or a close."""
    path = tmp_path / "r.qvc"
    GitCheckpointStore(path).close()
    proc, acked = _holder(path, mode="async", lag=0.01)
    try:
        with GitCheckpointStore(path, readonly=True) as reader:
            assert reader.get_tuple(CheckpointConfig("t")).checkpoint.id == acked[-1]
        deadline = time.monotonic() + 30
        while len(_git(path, "log", "--format=%s", "refs/heads/t").stdout.splitlines()) != 3:
            assert time.monotonic() < deadline, "the writer's puts never reached git's files"
            time.sleep(0.01)
    finally:
        proc.kill()
        proc.wait()
    fsck(path)


def test_a_store_open_all_along_sees_and_builds_on_a_dead_writers_unpublished_puts(tmp_path):
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as mine:  # open before the other writer dies: it publishes nothing then
        _put(mine, "t", "base", 0)
        mine.flush()
        base = mine.head("t")
        # this store's own publisher runs a cycle PUBLISH_LAG after its write, and a cycle publishes
        # whatever is staged: let it pass before the other writer stages its puts
        time.sleep(3 * repository.PUBLISH_LAG)
        proc, acked = _holder(path)  # builds on "base", keeps its three puts out of git's files
        proc.kill()
        proc.wait()
        assert _git_head(path) == base  # not published
        assert _ids(mine) == ["held-2", "held-1", "held-0", "base"]  # yet read at once
        with pytest.raises(CheckpointConflictError):  # the thread moved: expecting base conflicts
            mine.put(CheckpointConfig("t"), Checkpoint(id="mine", thread_id="t", step=1, state_data={}), {},
                     expected_head=base)
        _put(mine, "t", "after", 4)
        assert _ids(mine)[:2] == ["after", "held-2"]
    with GitCheckpointStore(path) as reopened:
        assert _ids(reopened) == ["after", "held-2", "held-1", "held-0", "base"]
        assert _staged(reopened) == 0
    assert _git_head(path) == _git(path, "rev-parse", "refs/heads/t").stdout.strip() != base
    assert not (path / "qvc" / "journal").exists()
    fsck(path)


KILLED_AFTER_COMMIT = """
import os, signal, sys
import qvc.plumbing.repository as repository
repository.PUBLISH_LAG = 3600.0  # its puts stay out of git's files
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
s = GitCheckpointStore(sys.argv[1], durability="async")
s.put(CheckpointConfig("t"), Checkpoint(id="kept", thread_id="t", step=0, state_data={"x": 0}), {})
print("ACK", flush=True)
s.put(CheckpointConfig("t"), Checkpoint(id="lost", thread_id="t", step=1, state_data={"x": 1}), {})
os.kill(os.getpid(), signal.SIGKILL)  # committed, before its caller heard of it
"""


@pytest.mark.parametrize("finisher", ["put", "gc"])
def test_a_retry_of_a_put_killed_after_its_commit_stores_nothing_twice(tmp_path, finisher):
    """A writer killed once its put committed, before it returned (and before publishing): the
    caller retries that put (same id, same content). The retry must find it, whoever published
    it meanwhile (another store's put, or maintenance), and store nothing twice."""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as mine:  # open before the other writer dies: it publishes nothing then
        _put(mine, "u", "other", 0)
        proc = subprocess.run([sys.executable, "-c", KILLED_AFTER_COMMIT, os.fspath(path)], env=child_env(),
                              capture_output=True, text=True, timeout=60)
        assert proc.stdout.split() == ["ACK"] and proc.returncode == -9, proc.stderr[-3000:]
        if finisher == "put":
            _put(mine, "t", "after", 2)  # publishes the dead writer's puts with its own
        else:
            mine.gc()
        line = ["after", "lost", "kept"] if finisher == "put" else ["lost", "kept"]
        assert _ids(mine) == line
        mine.put(CheckpointConfig("t"), Checkpoint(id="lost", thread_id="t", step=1, state_data={"x": 1}), {})
        assert _ids(mine) == line
    with GitCheckpointStore(path) as reopened:
        assert _ids(reopened) == line
    assert len(_git(path, "log", "--format=%H", "refs/heads/t").stdout.split()) == len(line)
    fsck(path)


def test_a_reader_and_a_writer_see_another_processs_puts_before_they_are_published(tmp_path):
    path = tmp_path / "r.qvc"
    GitCheckpointStore(path).close()
    proc, acked = _holder(path)  # alive, never publishing
    try:
        with GitCheckpointStore(path, readonly=True) as reader:
            assert _ids(reader) == list(reversed(acked))
        assert _git_head(path) == ""
        with GitCheckpointStore(path) as mine:  # a put reads the head the same way: no conflict
            _put(mine, "t", "mine", 9)
            assert _ids(mine) == ["mine", *reversed(acked)]
    finally:
        proc.kill()
        proc.wait()
    fsck(path)


@pytest.mark.parametrize("mode", ["sync", "async", "exit"])
def test_a_writer_killed_before_publishing_loses_nothing(tmp_path, mode):
    path = tmp_path / "r.qvc"
    proc, acked = _holder(path, mode=mode)
    proc.kill()
    proc.wait()
    assert _git_head(path) == ""
    with GitCheckpointStore(path) as store:  # the open publishes them
        assert _ids(store) == list(reversed(acked))
        assert _staged(store) == 0
        assert [e.message.split(":")[0] for e in store.reflog("t")] == ["put"] * 3
    assert len(_git(path, "log", "--format=%H", "refs/heads/t").stdout.split()) == 3
    assert len(_git(path, "reflog", "show", "--format=%H", "refs/heads/t").stdout.split()) == 3  # each line once
    fsck(path)


def test_a_dead_writers_unpublished_new_ref_comes_back_whatever_was_deleted_elsewhere(tmp_path):
    """A SYNC writer dies with a ref it created (pending writes) committed and not published,
    after another process deleted something else (a history rewrite): the ref is there."""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        _put(store, "other", "o-0", 0)
    proc, acked = _holder(path, writes=True)  # acknowledged durable, never published by it
    try:
        with GitCheckpointStore(path) as other:
            other.delete_thread("other")  # (publishes everything staged, the writer's too)
    finally:
        proc.kill()
        proc.wait()
    with GitCheckpointStore(path) as store:
        head = store.get_tuple(CheckpointConfig("t"))
        assert head is not None and head.checkpoint.id == acked[-1]
        assert [(w.channel, w.value) for w in head.pending_writes or []] == [("ch", "v")]
        assert store.threads() == ["t"]
    fsck(path)


def test_an_old_releases_dead_lease_over_a_torn_ref_does_not_stop_the_open(tmp_path):
    """A power cut kept a ref's rename but not its content, next to a lease lock the old
    (journal-and-leases) release left: opening removes that lock (nothing to roll forward from)
    instead of failing on the ref."""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        _put(store, "t", "a", 0)
    (path / "qvc" / "journal").mkdir()  # a repository the old release wrote
    (path / "refs" / "heads" / "t").write_bytes(b"qvc lease 1-deadbeef.wal")  # torn: no sha
    (path / "refs" / "heads" / "t.lock").write_bytes(leases.TAG + b"1-0123456789ab.wal\n")
    with GitCheckpointStore(path) as store:
        assert "refs/heads/t.lock" in store.recovery.locks_removed
    assert not (path / "refs" / "heads" / "t.lock").exists()


MID_PUBLISH = """
import os, signal, sys
real = os.rename
def rename(src, dst, *a, **k):  # SIGKILL this process as it renames its lock over the pending-writes ref
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


def _killed_publishing_a_new_ref(path) -> os.PathLike:
    """Run MID_PUBLISH; return the lock on the pending-writes ref it left (its own, noted)."""
    proc = subprocess.run([sys.executable, "-c", MID_PUBLISH, os.fspath(path)], env=child_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["ACKED"] and proc.returncode == -9, proc.stderr[-3000:]
    [lock] = (path / "refs" / "qvc" / "writes").glob("*.lock")
    assert str(lock) in (path / "qvc" / "publishing").read_text()  # the dead publisher noted it as its own
    return lock


def test_a_writer_killed_while_it_publishes_a_new_ref_loses_nothing(tmp_path):
    """The publisher dies holding its lock on a new ref (pending writes), before the rename; a
    store open all along writes and deletes meanwhile. The acknowledged pending write is read
    all along and published, and the dead publisher's lock is removed by the next publisher."""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as other:
        _put(other, "u", "b", 0)
        lock = _killed_publishing_a_new_ref(path)
        t = other.get_tuple(CheckpointConfig("t"))
        assert t.checkpoint.id == "a" and [(w.channel, w.value) for w in t.pending_writes] == [("ch", 1)]
        _put(other, "u", "b2", 1)
        other.delete(CheckpointConfig("u"))  # a history rewrite since; its publication finishes the dead one's
        assert not lock.exists()
    with GitCheckpointStore(path) as store:
        t = store.get_tuple(CheckpointConfig("t"))
        assert t.checkpoint.id == "a" and [(w.channel, w.value) for w in t.pending_writes] == [("ch", 1)]
        assert _staged(store) == 0
    assert _git(path, "for-each-ref", "refs/qvc/writes/").stdout.strip()
    assert not list((path / "refs" / "qvc" / "writes").glob("*.lock"))
    fsck(path)


def test_a_lock_another_program_took_over_is_left_and_the_open_goes_on(tmp_path, caplog):
    """As above, but the dead publisher's lock is then another program's (written again, as
    git's lock is just after git creates it: no longer the file the publisher noted): opening
    goes on, reads the acknowledged pending write, names the ref in a warning and never deletes
    the lock; the ref reaches git's files once the lock's owner is done."""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as other:
        _put(other, "u", "b", 0)
    lock = _killed_publishing_a_new_ref(path)
    time.sleep(0.01)
    lock.write_bytes(b"")  # another program's now
    with GitCheckpointStore(path) as store:
        t = store.get_tuple(CheckpointConfig("t"))
        assert t.checkpoint.id == "a" and [(w.channel, w.value) for w in t.pending_writes] == [("ch", 1)]
        assert lock.exists() and lock.read_bytes() == b""
        assert any("locked by another program" in r.getMessage() for r in caplog.records)
    assert lock.exists()
    assert not _git(path, "for-each-ref", "refs/qvc/writes/").stdout.strip()  # git: not yet
    lock.unlink()  # its owner is done
    with GitCheckpointStore(path) as store:
        assert _staged(store) == 0
    assert _git(path, "for-each-ref", "refs/qvc/writes/").stdout.strip()
    fsck(path)


def _rewrite_packed_refs(path, how: str, store=None) -> None:
    """Rewrite ``packed-refs`` (a new file: new inode, new mtime) without moving thread t."""
    before = os.stat(path / "packed-refs")
    time.sleep(0.02)  # past the file system clock's tick: the new file is newer
    if how == "qvc-delete":  # another store deletes an unrelated packed thread
        store.delete_thread("u")
    elif how == "git-delete":
        assert _git(path, "update-ref", "-d", "refs/heads/u").returncode == 0
    else:  # git's own pack-refs (qvc gc runs it)
        assert _git(path, "pack-refs", "--all", "--prune").returncode == 0
    after = os.stat(path / "packed-refs")
    assert (after.st_ino, after.st_mtime_ns) != (before.st_ino, before.st_mtime_ns)


@pytest.mark.parametrize("how, finisher", [("qvc-delete", "put"), ("git-delete", "put"), ("pack-refs", "put"),
                                           ("git-delete", "reopen"), ("pack-refs", "reopen")])
def test_a_dead_writers_puts_survive_packed_refs_rewritten_before_they_are_published(tmp_path, how, finisher):
    """A thread only in ``packed-refs``; a SYNC writer's puts on it are acknowledged and the
    writer is killed before it publishes; ``packed-refs`` is rewritten (by another store's
    delete, plain git's delete or ``pack-refs``); then a store open all along puts on the
    thread, or the next open publishes. Nothing acknowledged is lost. (The old engine judged a
    dead writer's lease by packed-refs' identity and lost the puts this way.)"""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        _put(store, "t", "base", 0)
        _put(store, "u", "u-0", 0)
    assert _git(path, "pack-refs", "--all", "--prune").returncode == 0
    assert not (path / "refs" / "heads" / "t").exists()
    mine = GitCheckpointStore(path) if finisher == "put" else None  # open before the writer dies
    try:
        proc, acked = _holder(path)
        proc.kill()
        proc.wait()
        _rewrite_packed_refs(path, how, mine)
        expected = [*reversed(acked), "base"]
        if mine is not None:
            _put(mine, "t", "mine", 4)
            expected = ["mine", *expected]
            assert _ids(mine) == expected
    finally:
        if mine is not None:
            mine.close()
    with GitCheckpointStore(path) as reopened:
        assert _ids(reopened) == expected
        assert _staged(reopened) == 0
    assert len(_git(path, "log", "--format=%H", "refs/heads/t").stdout.split()) == len(expected)
    fsck(path)


TRAVELLER = """
import sys, time
import qvc.plumbing.repository as repository
repository.PUBLISH_LAG = 3600.0  # keeps its time travel (the head and the superseded line) out of git's files
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
store = GitCheckpointStore(sys.argv[1], durability="sync")
store.put(CheckpointConfig("b"), Checkpoint(id="back", thread_id="b", step=9, parent_id="b0", state_data={"x": 9}),
          {}, expected_head=store.head("b"))
print("ACK", flush=True)
time.sleep(600)
"""


def test_a_delete_rewrites_the_superseded_line_a_dead_writers_time_travel_left(tmp_path):
    """A writer travels back on thread b (the superseded line, holding b1 and b2, is a new ref)
    and is killed before publishing; a store open all along puts on b and deletes b1. The delete
    must rewrite that line too, though git's files do not have it yet. (The old engine listed
    git's files, and the next recovery restored the line with the deleted checkpoint on it:
    found by the model-based test.)"""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as mine:  # open before the writer dies: it publishes nothing then
        for n in range(3):
            _put(mine, "b", f"b{n}", n)
        mine.flush()
        proc = subprocess.Popen([sys.executable, "-c", TRAVELLER, os.fspath(path)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=child_env())
        try:
            assert proc.stdout.readline().strip() == "ACK", proc.stderr.read()[-3000:]
        finally:
            proc.kill()
            proc.wait()
        assert not _git(path, "for-each-ref", "refs/qvc/").stdout.strip() or "superseded" not in _git(
            path, "for-each-ref", "refs/qvc/").stdout  # the line is not in git's files
        _put(mine, "b", "after", 10)  # on the dead writer's travel
        assert _ids(mine, "b") == ["after", "back", "b0"]
        mine.delete(CheckpointConfig("b", "b1"))
        assert mine.get_tuple(CheckpointConfig("b", "b1")) is None
        assert set(_ids(mine, "b", superseded=True)) == {"after", "back", "b0", "b2"}
    with GitCheckpointStore(path) as reopened:
        assert reopened.get_tuple(CheckpointConfig("b", "b1")) is None
        assert set(_ids(reopened, "b", superseded=True)) == {"after", "back", "b0", "b2"}
    fsck(path)


CUT_SHORT = """
import os, signal, sys
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
s = GitCheckpointStore(sys.argv[1])
real = os.rename
def rename(src, dst, *a, **k):  # SIGKILL this process as it renames its lock over thread t's ref
    if str(src).endswith("/refs/heads/t.lock"):
        os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst, *a, **k)
os.rename = rename
s.put(CheckpointConfig("t"), Checkpoint(id="a", thread_id="t", step=1, state_data={"x": 1}), {})
print("ACKED", flush=True)
s.flush()
"""


@pytest.mark.parametrize("finisher", ["put", "gc"])
def test_a_running_store_completes_a_publication_a_kill_cut_short(tmp_path, finisher):
    """The publisher dies holding its lock on thread t while another store is open: that
    store's next put (or ``gc``) completes the publication and removes the dead publisher's
    lock (provably its: the file it noted), and builds on the acknowledged put (never on the
    older head git's files still hold). No lock is removed for its age (git's rule)."""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        _put(store, "t", "base", 0)
    with GitCheckpointStore(path) as other:  # open before the writer dies: it publishes nothing then
        base = _git_head(path)
        proc = subprocess.run([sys.executable, "-c", CUT_SHORT, os.fspath(path)], env=child_env(),
                              capture_output=True, text=True, timeout=60)
        assert proc.stdout.split() == ["ACKED"] and proc.returncode == -9, proc.stderr[-3000:]
        lock = path / "refs" / "heads" / "t.lock"
        assert lock.exists() and _git_head(path) == base
        assert str(lock) in (path / "qvc" / "publishing").read_text()  # noted as the dead publisher's own
        assert _ids(other) == ["a", "base"]
        if finisher == "put":
            _put(other, "t", "mine", 2)
            other.flush()  # (its background publisher would, a moment later)
            line = ["mine", "a", "base"]
        else:
            other.gc()
            line = ["a", "base"]
        assert _ids(other) == line
        assert not lock.exists()
    with GitCheckpointStore(path) as reopened:
        assert _ids(reopened) == line
    assert len(_git(path, "log", "--format=%H", "refs/heads/t").stdout.split()) == len(line)
    fsck(path)


def test_a_retry_after_a_time_travel_conflict_stores_the_checkpoint(tmp_path):
    """A time-travel put that meets another process's moves raises CheckpointConflictError
    ("nothing was stored"); the documented retry with the same id and content must then store
    it. (The conflicting put once entered its id in the id index, so the retry took itself for
    a re-put of an existing checkpoint, reported success and stored nothing.)"""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        _put(store, "t", "base-0", 0)
        _put(store, "t", "base-1", 1)
    with GitCheckpointStore(path) as mine:
        stale = mine.head("t")
        proc, acked = _holder(path)  # builds on base-1, never publishes
        proc.kill()
        proc.wait()
        travel = Checkpoint(id="tt", thread_id="t", step=1, parent_id="base-0", state_data={"cid": "tt"})
        with pytest.raises(CheckpointConflictError):  # the thread moved: the dead writer's puts
            mine.put(CheckpointConfig("t"), travel, {}, expected_head=stale)
        head = mine.head("t")
        assert mine.get_tuple(CheckpointConfig("t", head)).checkpoint.id == acked[-1]
        assert mine.get_tuple(CheckpointConfig("t", "tt")) is None  # nothing was stored
        mine.put(CheckpointConfig("t"), travel, {}, expected_head=head)  # the retry
        assert _ids(mine) == ["tt", "base-0"]
        assert set(acked) <= set(_ids(mine, superseded=True))
    with GitCheckpointStore(path) as reopened:
        assert reopened.get_tuple(CheckpointConfig("t")).checkpoint.id == "tt"
        assert set(acked) <= set(_ids(reopened, superseded=True))
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


def test_a_thread_deleted_after_a_writers_put_stays_deleted_when_the_writer_dies(tmp_path):
    """A writer puts on thread d; another process deletes d (a history rewrite); the writer then
    writes elsewhere and is killed. d must not come back (the old engine's recovery counted any
    generation token the writer had seen as proof that nobody deleted since its move)."""
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
        assert store.threads() == ["e"], store.recovery.summary()
        assert store.get_tuple(CheckpointConfig("d", "d-0")) is None
        assert _staged(store) == 0
    fsck(path)


def test_maintenance_sees_and_publishes_what_a_live_writer_acknowledged(tmp_path):
    """A live writer that publishes nothing (a long lag), acknowledged puts: while maintenance
    holds the exclusive lock (``qvc/lock``, where no store writes), a reader reads them; a store
    that takes the lock itself (:meth:`Repository.exclusive`, as gc and purge do) publishes them
    first, so git's files hold them under it. (The old engine's reads under that lock waited in
    vain for a lease no one could publish, and once remembered the writer as stuck for good.)"""
    path = tmp_path / "r.qvc"
    GitCheckpointStore(path).close()
    with GitCheckpointStore(path) as maintenance:  # open before the writer's puts: it publishes nothing then
        proc, acked = _holder(path)
        try:
            lock = os.open(path / "qvc" / "lock", os.O_RDWR)
            try:  # held exclusively, as maintenance holds it
                fcntl.flock(lock, fcntl.LOCK_EX)
                with GitCheckpointStore(path, readonly=True) as reader:
                    assert reader.get_tuple(CheckpointConfig("t")).checkpoint.id == acked[-1]
                assert _git_head(path) == ""
            finally:
                os.close(lock)
            with maintenance.repository.exclusive():
                assert _git_head(path) == maintenance.head("t")
                assert maintenance.get_tuple(CheckpointConfig("t")).checkpoint.id == acked[-1]
                assert _staged(maintenance) == 0
        finally:
            proc.kill()
            proc.wait()
    fsck(path)


def test_a_killed_writer_leaves_nothing_to_recover_in_a_new_repository(tmp_path):
    """A writer SIGKILLed after acknowledged puts leaves no journal, no lease lock and no lock
    file at all in a repository of this release: nothing for the next opener to recover."""
    path = tmp_path / "r.qvc"
    proc, acked = _holder(path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (path / "qvc" / "journal").exists()
    assert not list(path.glob("refs/**/*.lock")) and not (path / "packed-refs.lock").exists()
    with GitCheckpointStore(path) as store:
        assert not store.recovery, store.recovery.summary()
        assert _ids(store) == list(reversed(acked))
    fsck(path)
