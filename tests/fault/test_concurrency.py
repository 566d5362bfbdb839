"""Concurrency: several processes and Python threads writing and reading one repository.

Workers are ``tests/fault/workers/concurrency_worker.py`` subprocesses (real processes, real repositories).
Sizes are modest: the suite is meant for 2 cores.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.heavy  # a kill, power-loss or fleet loop: left out of the quick tier

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import helpers  # noqa: E402
from helpers import child_env, fsck, run_git  # noqa: E402

from qvc import Checkpoint, CheckpointConfig, CheckpointConflictError, DurabilityMode, GitCheckpointStore  # noqa: E402

WORKER = HERE / "workers" / "concurrency_worker.py"
_spec = importlib.util.spec_from_file_location("qvc_tests_concurrency_worker", WORKER)
cwk = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cwk)








def spawn(*args: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, str(WORKER), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=child_env())
    line = proc.stdout.readline()
    if line.strip() != "READY":
        proc.kill()
        raise AssertionError(f"worker {args} did not start: {line}{proc.stderr.read()}")
    return proc


def go(*procs: subprocess.Popen) -> None:
    for p in procs:
        p.stdin.write("GO\n")
        p.stdin.flush()


def collect(proc: subprocess.Popen, timeout: float) -> list[str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(
            f"worker did not finish within {timeout} s (blocked?)\n{out[-2000:]}\n{err[-2000:]}") from None
    lines = out.splitlines()
    errors = [ln for ln in lines if ln.startswith("ERROR")]
    assert proc.returncode == 0 and not errors, f"worker failed ({proc.returncode}): {errors}\n{err[-3000:]}"
    return lines


def put(store, thread: str, cid: str, step: int, tag: str) -> None:
    """``helpers.put`` of the worker's state for ``tag`` (kept: readers check it the way the worker does)."""
    helpers.put(store, thread, cid, step, cwk.make_state(tag, cid, step),
                metadata={"source": "loop", "step": step, "tag": tag})


def line_ids(store, thread: str) -> list[str]:
    return [t.checkpoint.id for t in store.list(CheckpointConfig(thread))]


def check_outcome(store, thread: str, ok: list[str], conflicted: list[str]) -> None:
    """Every returned put is on the head's first-parent line, exactly as written; no conflicted one is."""
    line = line_ids(store, thread)
    on_line = set(line)
    assert len(line) == len(on_line)
    for cid in ok:
        tup = store.get_tuple(CheckpointConfig(thread, cid))
        assert tup is not None, f"put of {cid} returned but the checkpoint is gone (lost update)"
        assert cwk.check(tup) is None, cwk.check(tup)
        assert cid in on_line, f"put of {cid} returned but it is not on the first-parent line of {thread!r}"
    for cid in conflicted:
        assert cid not in on_line, f"put of {cid} raised CheckpointConflictError but is on the line"
        assert store.get_tuple(CheckpointConfig(thread, cid)) is None, (
            f"put of {cid} raised CheckpointConflictError but the checkpoint exists")
    assert sorted(on_line) == sorted(ok), (
        f"the line holds checkpoints whose put did not return: {sorted(on_line - set(ok))[:10]}")
    # parent links along the line are consistent: each checkpoint's parent is the next one
    tuples = list(store.list(CheckpointConfig(thread)))
    for newer, older in zip(tuples, tuples[1:], strict=False):
        assert newer.parent_config is not None and newer.parent_config.checkpoint_id == older.checkpoint.id


# -- (a) two processes, one thread -------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_two_processes_same_thread_never_lose_a_put(tmp_path, mode):
    path = tmp_path / "repo.qvc"
    GitCheckpointStore(path).close()
    n = 60
    procs = [spawn("writer", str(path), mode, "shared", str(n), tag) for tag in ("A", "B")]
    go(*procs)
    outs = [collect(p, 120) for p in procs]
    ok = [ln.split()[1] for out in outs for ln in out if ln.startswith("OK ")]
    conflicted = [ln.split()[1] for out in outs for ln in out if ln.startswith("CONFLICT ")]
    assert len(ok) + len(conflicted) == 2 * n
    print(f"{mode}: {len(ok)} returned, {len(conflicted)} conflicts")
    fsck(path)
    with GitCheckpointStore(path) as store:
        check_outcome(store, "shared", ok, conflicted)
        assert {cid[0] for cid in ok} == {"A", "B"}, "both writers should get puts through"


# -- (b) four processes, four threads ------------------------------------------------------------


def test_four_processes_four_threads_no_conflicts(tmp_path):
    path = tmp_path / "repo.qvc"
    GitCheckpointStore(path).close()
    n = 60
    tags = ["P0", "P1", "P2", "P3"]
    procs = [spawn("writer", str(path), "sync", f"thread-{tag}", str(n), tag) for tag in tags]
    t0 = time.monotonic()
    go(*procs)
    outs = [collect(p, 90) for p in procs]
    took = time.monotonic() - t0
    for tag, out in zip(tags, outs, strict=True):
        assert [ln for ln in out if ln.startswith("CONFLICT")] == [], f"{tag}: conflicts on its own thread"
        assert sum(ln.startswith("OK ") for ln in out) == n
    print(f"4 x {n} puts in {took:.2f} s; per process: {[out[-1] for out in outs]}")
    assert took < 60
    fsck(path)
    with GitCheckpointStore(path) as store:
        assert store.threads() == sorted(f"thread-{t}" for t in tags)
        for tag in tags:
            ok = [f"{tag}-{i:05d}" for i in range(n)]
            assert line_ids(store, f"thread-{tag}") == ok[::-1]
            check_outcome(store, f"thread-{tag}", ok, [])


# -- (c) Python threads sharing one store ----------------------------------------------------------


def _run_threads(target, count: int) -> list:
    errors: list = []

    def wrap(i):
        try:
            target(i)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=wrap, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        assert not t.is_alive(), "a Python thread is blocked"
    return errors


@pytest.mark.parametrize("mode", [DurabilityMode.SYNC, DurabilityMode.ASYNC])
def test_python_threads_different_threads(tmp_path, mode):
    path = tmp_path / "repo.qvc"
    n = 40
    with GitCheckpointStore(path, durability=mode) as store:
        def work(i):
            for k in range(n):
                put(store, f"pt{i}", f"T{i}-{k:05d}", k, f"T{i}")
                if k % 10 == 0:  # reads interleaved with other threads' writes
                    tup = store.get_tuple(CheckpointConfig(f"pt{i}"))
                    assert tup.checkpoint.id == f"T{i}-{k:05d}" and cwk.check(tup) is None

        errors = _run_threads(work, 4)
        assert errors == []
        for i in range(4):
            assert line_ids(store, f"pt{i}") == [f"T{i}-{k:05d}" for k in range(n)][::-1]
    fsck(path)
    with GitCheckpointStore(path) as store:
        for i in range(4):
            check_outcome(store, f"pt{i}", [f"T{i}-{k:05d}" for k in range(n)], [])


def test_python_threads_same_thread(tmp_path):
    path = tmp_path / "repo.qvc"
    n = 30
    ok, conflicted = [], []
    lock = threading.Lock()
    with GitCheckpointStore(path) as store:
        def work(i):
            for k in range(n):
                cid = f"S{i}-{k:05d}"
                try:
                    put(store, "same", cid, k, f"S{i}")
                except CheckpointConflictError:
                    with lock:
                        conflicted.append(cid)
                else:
                    with lock:
                        ok.append(cid)

        errors = _run_threads(work, 4)
        assert errors == []
        assert len(ok) + len(conflicted) == 4 * n
        check_outcome(store, "same", ok, conflicted)
    print(f"{len(ok)} returned, {len(conflicted)} conflicts")
    fsck(path)
    with GitCheckpointStore(path) as store:
        check_outcome(store, "same", ok, conflicted)


def test_racing_time_travels_from_one_head_keep_the_line_they_left(tmp_path):
    """Two writers travel back from the same head at once: one wins, and the line it left stays
    kept even when the loser had created the superseded ref the winner found (the loser used to
    remove it on its conflict, losing every acknowledged put of that line)."""
    path = tmp_path / "repo.qvc"
    stores = [GitCheckpointStore(path, durability=DurabilityMode.ASYNC) for _ in range(2)]
    try:
        first = stores[0]
        first.put(CheckpointConfig("t"), Checkpoint(id="root", thread_id="t", step=0, state_data={"x": 0}), {})
        acked = ["root"]
        for r in range(60):
            parent = first.get(CheckpointConfig("t")).id
            first.put(CheckpointConfig("t"), Checkpoint(id=f"line{r}", thread_id="t", step=1, state_data={"x": r},
                                                        parent_id=parent), {}, expected_head=first.head("t"))
            acked.append(f"line{r}")
            head = first.head("t")
            start = threading.Barrier(2)

            def travel(i, r=r, head=head, start=start):
                start.wait()
                cid = f"travel{r}-{i}"
                try:
                    stores[i].put(CheckpointConfig("t"), Checkpoint(id=cid, thread_id="t", step=1, state_data={"y": i},
                                                                    parent_id="root"), {}, expected_head=head)
                except CheckpointConflictError:
                    return
                acked.append(cid)

            assert _run_threads(travel, 2) == []
        kept = {t.checkpoint.id for t in first.list(CheckpointConfig("t"), superseded=True)}
        assert [cid for cid in acked if cid not in kept] == []
        assert len(acked) == 1 + 60 * 2  # exactly one travel of each pair won
    finally:
        for s in stores:
            s.close()
    fsck(path)


# -- (d) a reader process never sees a half checkpoint ------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "exit"])
def test_reader_process_sees_only_whole_checkpoints(tmp_path, mode):
    path = tmp_path / "repo.qvc"
    with GitCheckpointStore(path) as store:
        put(store, "rd", "W-seed", 0, "W")  # the reader always has something to read
    stop = tmp_path / "stop"
    reader = spawn("reader", str(path), "rd", str(stop))
    writer = spawn("writer", str(path), mode, "rd", "150", "W")
    go(reader, writer)
    try:
        wout = collect(writer, 120)
    finally:
        stop.touch()
    rout = collect(reader, 60)
    summary = json.loads(rout[-1])
    print(f"{mode}: reader did {summary['reads']} reads, saw {len(summary['steps'])} distinct heads")
    assert summary["errors"] == []
    assert summary["reads"] > 0
    assert len(summary["steps"]) >= 2, "the reader should observe the writer's progress"
    assert all(ln.startswith(("OK", "DONE")) for ln in wout)


# -- deletes racing puts on one thread ------------------------------------------------------------


def test_delete_racing_puts_on_the_same_thread(tmp_path):
    """One process puts on a thread while another deletes its head (by id) over and over.

    A returned put is either deleted by a returned delete or still on the line, intact. A
    delete that returned removed its checkpoint; one that raised CheckpointConflictError
    changed nothing (its checkpoint is still there, unless a later delete removed it).
    """
    path = tmp_path / "repo.qvc"
    with GitCheckpointStore(path) as store:
        put(store, "race", "R-root", 0, "R")
    writer = spawn("writer", str(path), "sync", "race", "80", "W")
    deleter = spawn("deleter", str(path), "race", "25")
    go(writer, deleter)
    wout = collect(writer, 120)
    dout = collect(deleter, 120)
    ok = [ln.split()[1] for ln in wout if ln.startswith("OK ")]
    conflicted = [ln.split()[1] for ln in wout if ln.startswith("CONFLICT ")]
    deleted = [ln.split()[1] for ln in dout if ln.startswith("DEL ")]
    del_conflicts = [ln.split()[1] for ln in dout if ln.startswith("DELCONFLICT ")]
    print(f"{len(ok)} puts returned, {len(conflicted)} conflicts; {len(deleted)} deletes, "
          f"{len(del_conflicts)} delete conflicts")
    fsck(path)
    with GitCheckpointStore(path) as store:
        line = line_ids(store, "race")
        assert line[-1] == "R-root"
        for cid in deleted:
            assert store.get_tuple(CheckpointConfig("race", cid)) is None, f"deleted {cid} is still there"
            assert cid not in line
        for cid in ok:
            if cid in deleted:
                continue
            tup = store.get_tuple(CheckpointConfig("race", cid))
            assert tup is not None, f"put of {cid} returned, nobody deleted it, but it is gone"
            assert cwk.check(tup) is None, cwk.check(tup)
            assert cid in line, f"put of {cid} returned, nobody deleted it, but it is not on the line"
        for cid in del_conflicts:
            if cid in deleted or cid not in ok:
                continue
            assert cid in line, f"delete of {cid} raised CheckpointConflictError but removed it"
        for cid in conflicted:
            assert cid not in line and store.get_tuple(CheckpointConfig("race", cid)) is None
        assert sorted(line) == sorted(set(ok) - set(deleted) | {"R-root"})
        tuples = list(store.list(CheckpointConfig("race")))
        for newer, older in zip(tuples, tuples[1:], strict=False):
            assert newer.parent_config.checkpoint_id == older.checkpoint.id


# -- pending writes from two processes onto one checkpoint ----------------------------------------


def test_two_processes_put_writes_same_checkpoint(tmp_path):
    path = tmp_path / "repo.qvc"
    with GitCheckpointStore(path) as store:
        put(store, "pw", "PW-00000", 0, "PW")
    n = 40
    procs = [spawn("writes", str(path), "pw", "PW-00000", str(n), tag) for tag in ("A", "B")]
    go(*procs)
    for p in procs:
        collect(p, 120)
    with GitCheckpointStore(path) as store:
        got = store.get_tuple(CheckpointConfig("pw", "PW-00000")).pending_writes or []
        have = {(w.task_id, w.channel): w.value for w in got}
        for tag in ("A", "B"):
            for i in range(n):
                assert have.get((f"{tag}-{i:04d}", "chan")) == {"tag": tag, "i": i}, (
                    f"acknowledged pending write {tag}-{i:04d} is missing ({len(have)} present)")
        assert len(got) == 2 * n
    fsck(path)


# -- recovery of one dead writer must not undo another process's acknowledged changes --------------


def _writer_then_die(path: Path, thread: str, n: int, tag: str) -> None:
    """A writer process puts n checkpoints on ``thread``, stays open, and is SIGKILLed later."""
    proc = spawn("writer", str(path), "sync", thread, str(n), tag, "--hold")
    go(proc)
    lines = []
    while not (line := proc.stdout.readline()).startswith("DONE"):
        assert line, f"writer died: {proc.stderr.read()}"
        lines.append(line)
    assert all(ln.startswith("OK") for ln in lines), lines
    return proc


def _kill(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()


def test_a_dead_writers_puts_do_not_resurrect_a_thread_deleted_later(tmp_path):
    path = tmp_path / "repo.qvc"
    GitCheckpointStore(path).close()
    proc = _writer_then_die(path, "doomed", 3, "D")
    try:
        with GitCheckpointStore(path) as store:  # another process deletes the thread: acknowledged
            store.delete_thread("doomed")
            assert "doomed" not in store.threads()
    finally:
        _kill(proc)  # then the first writer dies, after acknowledging doomed -> D-00002
    with GitCheckpointStore(path) as store:
        assert store.repository.staging.staged() == 0  # nothing of the dead writer's is left to publish
        assert "doomed" not in store.threads(), (
            f"a dead writer's acknowledged puts brought back a thread deleted later by another process "
            f"({store.recovery.summary()})")
        assert store.get_tuple(CheckpointConfig("doomed", "D-00001")) is None


DELETES_LATER = """
import sys
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore

store = GitCheckpointStore(sys.argv[1])
for n in range(3):
    store.put(CheckpointConfig("doomed"), Checkpoint(id=f"D-{n}", thread_id="doomed", step=n, state_data={"n": n}), {})
store.put(CheckpointConfig("other"), Checkpoint(id="O-0", thread_id="other", step=0, state_data={}), {})
store.flush()
print("READY", flush=True)
sys.stdin.readline()
store.delete_thread("other")  # its own delete, after another process deleted "doomed"
print("DONE", flush=True)
sys.stdin.readline()
"""


def test_dead_writers_own_later_delete_does_not_resurrect_a_thread_another_deleted(tmp_path):
    """A writer puts on a thread; another process deletes that thread; then the writer deletes
    something of its own and dies. Its later delete, which saw the other process's, must not
    bring its earlier puts back (the old engine's generation tokens once did: found by the model)."""
    path = tmp_path / "repo.qvc"
    GitCheckpointStore(path).close()
    proc = subprocess.Popen([sys.executable, "-c", DELETES_LATER, os.fspath(path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env())
    try:
        assert proc.stdout.readline().strip() == "READY", proc.stderr.read()[-3000:]
        with GitCheckpointStore(path) as store:
            store.delete_thread("doomed")
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "DONE", proc.stderr.read()[-3000:]
    finally:
        _kill(proc)
    with GitCheckpointStore(path) as store:
        assert store.repository.staging.staged() == 0
        assert store.threads() == [], f"a deleted thread came back ({store.recovery.summary()})"
        assert store.get_tuple(CheckpointConfig("doomed", "D-2")) is None


def test_a_dead_writers_put_does_not_resurrect_a_checkpoint_deleted_later(tmp_path):
    path = tmp_path / "repo.qvc"
    GitCheckpointStore(path).close()
    proc = _writer_then_die(path, "only", 1, "O")
    try:
        with GitCheckpointStore(path) as store:
            store.delete(CheckpointConfig("only", "O-00000"))  # its only checkpoint: the thread goes
            assert store.get_tuple(CheckpointConfig("only", "O-00000")) is None
    finally:
        _kill(proc)
    with GitCheckpointStore(path) as store:
        assert store.get_tuple(CheckpointConfig("only", "O-00000")) is None, (
            f"an acknowledged delete was undone by what a dead process had acknowledged before it "
            f"({store.recovery.summary()})")
        assert store.threads() == []


def test_a_dead_writers_puts_do_not_undo_anothers_later_move(tmp_path):
    """Another process moved the thread on (time travel back, then a new put): recovery keeps that."""
    path = tmp_path / "repo.qvc"
    GitCheckpointStore(path).close()
    proc = _writer_then_die(path, "moved", 3, "M")
    try:
        with GitCheckpointStore(path) as store:
            store.reset("moved", "M-00000")
            put(store, "moved", "N-00001", 1, "N")
    finally:
        _kill(proc)
    with GitCheckpointStore(path) as store:
        head = store.get_tuple(CheckpointConfig("moved"))
        assert head.checkpoint.id == "N-00001", (
            f"recovery moved the head back to {head.checkpoint.id} ({store.recovery.summary()})")


def _slow_put_then_die(path: Path, thread: str, cid: str, meanwhile, after) -> None:
    """A writer's put of ``cid`` on ``thread`` is acknowledged, and its publication to git's
    files is descheduled after it read what is staged, before it wrote anything; meanwhile
    another process runs ``meanwhile()`` (acknowledged); then the writer's publication goes on
    with what it read, ``after()`` runs, and the writer is SIGKILLed."""
    proc = spawn("slowput", str(path), thread, cid)
    try:
        go(proc)
        assert proc.stdout.readline().strip() == f"ACK {cid}", proc.stderr.read()
        assert proc.stdout.readline().strip() == "MOVED", proc.stderr.read()
        meanwhile()
        time.sleep(0.05)
        go(proc)  # resume: the late publication writes what it read before meanwhile()
        assert proc.stdout.readline().strip() == "PUBLISHED", proc.stderr.read()
        after()
    finally:
        _kill(proc)


def test_a_dead_writers_late_publication_does_not_undo_a_delete(tmp_path):
    """The dead writer's put was acknowledged before another process deleted that checkpoint,
    but its publication (begun before the delete) wrote git's files after it: neither that
    publication nor the next opener may move the ref forward again."""
    path = tmp_path / "repo.qvc"
    with GitCheckpointStore(path) as store:
        put(store, "t", "X", 0, "X")

    other = GitCheckpointStore(path)  # open before the writer starts its put

    def delete_it():
        assert other.get_tuple(CheckpointConfig("t")).checkpoint.id == "Y"
        other.delete(CheckpointConfig("t", "Y"))  # acknowledged: head back at X

    def still_deleted():  # whatever the late publication wrote to git's files
        assert other.get_tuple(CheckpointConfig("t")).checkpoint.id == "X"
        assert other.get_tuple(CheckpointConfig("t", "Y")) is None

    try:
        _slow_put_then_die(path, "t", "Y", delete_it, still_deleted)
    finally:
        other.close()
    with GitCheckpointStore(path) as store:
        head = store.get_tuple(CheckpointConfig("t")).checkpoint.id
        assert store.get_tuple(CheckpointConfig("t", "Y")) is None and head == "X", (
            f"a late publication undid an acknowledged delete: head {head} ({store.recovery.summary()})")
        assert run_git(path, "rev-parse", "refs/heads/t").stdout.strip() == store.head("t")  # git agrees
    fsck(path)


def test_a_dead_writers_late_publication_does_not_resurrect_a_thread(tmp_path):
    path = tmp_path / "repo.qvc"
    GitCheckpointStore(path).close()

    other = GitCheckpointStore(path)

    def delete_thread():
        other.delete_thread("n")

    def still_deleted():  # whatever the late publication wrote to git's files
        assert other.threads() == []

    try:
        _slow_put_then_die(path, "n", "Y", delete_thread, still_deleted)
    finally:
        other.close()
    with GitCheckpointStore(path) as store:
        assert store.threads() == [], (
            f"a late publication brought back a thread deleted by another process ({store.recovery.summary()})")
    assert run_git(path, "rev-parse", "-q", "--verify", "refs/heads/n", check=False).returncode != 0
    fsck(path)


# -- (e) lock files no store holds ----------------------------------------------------------------
# git's rule (issue 32): a lock file qvc did not create (git's, another program's) is never
# removed, however old, since its owner cannot be proved gone (a git process mid-update would
# lose its lock); opening, maintenance and writes leave it. A write to the ref it locks is
# acknowledged and read by qvc at once, stays staged for git (named once in a warning) and
# reaches git's files once the lock is gone. (A dead publisher's own locks are removed by the
# next one: tests/fault/test_staging_faults.py.)


def _foreign_lock(path: Path, thread: str, age: float = 3600.0) -> Path:
    lock = path / "refs" / "heads" / f"{thread}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("0123456789012345678901234567890123456789\n")
    old = time.time() - age
    os.utime(lock, (old, old))
    return lock


@pytest.mark.parametrize("age", [3600.0, 0.0])
def test_a_lock_no_store_holds_is_left_and_keeps_the_write_staged_for_git(tmp_path, caplog, age):
    path = tmp_path / "repo.qvc"
    with GitCheckpointStore(path) as store:
        put(store, "t", "L-00000", 0, "L")
        before = store.head("t")
    locks = [_foreign_lock(path, "t", age), _foreign_lock(path, "brand-new", age)]  # (no such thread yet)
    with GitCheckpointStore(path) as store:
        assert not store.recovery.locks_removed, store.recovery
        put(store, "t", "L-00001", 1, "L")  # acknowledged: the lock holds git's file, not the write
        put(store, "brand-new", "L-00002", 0, "L")
        store.flush()  # durable; git's files wait for the locks
        heads = {t: store.head(t) for t in ("t", "brand-new")}
        with GitCheckpointStore(path, readonly=True) as reader:  # every qvc reader sees the writes
            assert reader.get_tuple(CheckpointConfig("t")).checkpoint.id == "L-00001"
            assert reader.get_tuple(CheckpointConfig("brand-new")).checkpoint.id == "L-00002"
        assert run_git(path, "rev-parse", "refs/heads/t").stdout.strip() == before  # git: the old value
        assert run_git(path, "rev-parse", "-q", "--verify", "refs/heads/brand-new", check=False).returncode != 0
        for thread in ("t", "brand-new"):
            named = [r.getMessage() for r in caplog.records if f"refs/heads/{thread}.lock" in r.getMessage()]
            assert len(named) == 1 and "locked by another program" in named[0], named  # named once
        store.gc()  # maintenance leaves them too
        assert all(lock.exists() for lock in locks)
        assert store.get_tuple(CheckpointConfig("t")).checkpoint.id == "L-00001"
        for lock in locks:
            lock.unlink()  # what the user does once no other program runs
        store.flush()
        for thread, head in heads.items():
            assert run_git(path, "rev-parse", f"refs/heads/{thread}").stdout.strip() == head
        put(store, "t", "L-00003", 2, "L")
    with GitCheckpointStore(path) as store:
        assert line_ids(store, "t") == ["L-00003", "L-00001", "L-00000"]
        assert line_ids(store, "brand-new") == ["L-00002"]
    fsck(path)


def test_a_lock_no_store_holds_is_left_while_another_process_has_the_repository_open(tmp_path):
    path = tmp_path / "repo.qvc"
    with GitCheckpointStore(path) as store:
        put(store, "t", "L-00000", 0, "L")
    other = spawn("writer", str(path), "sync", "other", "1", "O")  # keeps the repository open, idle
    try:
        lock = _foreign_lock(path, "t")
        with GitCheckpointStore(path) as store:
            assert lock.exists() and not store.recovery.locks_removed, store.recovery
    finally:
        go(other)
        collect(other, 60)
    assert lock.exists()


def test_reader_finds_objects_while_other_processes_merge_packs(tmp_path):
    """A merge deletes small packs another process's libgit2 may have just scanned: lookups retry.

    The reader reads every new head of two writers that merge (and delete) their small packs
    every other publication, through both object readers (libgit2's, and the standard library's
    of read-only stores), until it has read heads across many merges it saw happen (a pack it
    listed gone later), or a generous deadline passes; a lookup that misses an object fails the
    read. No speed is asserted: a slow machine only reads fewer heads, never none after a
    merge. At the end every head read is read again: a merge never dropped one.
    """
    path = str(tmp_path / "repo.qvc")
    GitCheckpointStore(path).close()
    writers = [spawn("writer", path, "exit", f"b{k}", "100000", f"m{k}", "--small-merges") for k in range(2)]
    drains = [threading.Thread(target=w.stdout.read, daemon=True) for w in writers]  # a full pipe stops a writer
    store = GitCheckpointStore(path)
    readonly = GitCheckpointStore(path, readonly=True)
    pack_dir = os.path.join(path, "objects", "pack")
    seen: dict[str, bytes] = {}  # head -> its commit's tree id
    after_merge = 0  # heads read once a merge was seen
    merges = 0  # reads of the pack directory that found a pack listed before gone
    packs: set[str] = set()

    def read(head: str) -> bytes:
        trees = set()
        for repo in (store.repository, readonly.repository):
            commit = repo.read(bytes.fromhex(head), "commit")  # CorruptionError if it were "missing"
            tree = bytes.fromhex(commit.split(b"\n", 1)[0][5:].decode())
            repo.read_tree(tree)
            trees.add(tree)
        (tree,) = trees
        return tree

    try:
        try:
            for d in drains:
                d.start()
            go(*writers)
            deadline = time.monotonic() + 120.0  # generous: only a stuck writer gets near it
            k = 0
            while (merges < 8 or after_merge < 40) and time.monotonic() < deadline:
                assert all(w.poll() is None for w in writers), "a writer exited: " + " | ".join(
                    w.stderr.read() for w in writers if w.poll() is not None)
                k += 1
                now = {n for n in os.listdir(pack_dir) if n.endswith(".pack")}
                if packs - now:
                    merges += 1
                packs = now
                head = store.repository.ref(f"refs/heads/b{k % 2}")
                if head is None or head in seen:
                    continue
                seen[head] = read(head)
                after_merge += merges > 0
        finally:
            for w in writers:
                w.kill()
                w.wait()
            for d in drains:
                d.join(10)
        print(f"{len(seen)} heads read, {after_merge} of them after a merge; {merges} merges seen")
        # over whatever happened: merges were seen, heads were read after them, and none was missed
        assert merges and after_merge, f"no head read after a merge ({merges} merges seen, {len(seen)} heads read)"
        for head, tree in seen.items():
            assert read(head) == tree
    finally:
        readonly.close()
        store.close()
