"""Durability modes (SYNC / ASYNC / EXIT, ``fsync=False``) over the staging database
(``qvc/staging.db`` and its write-ahead log ``staging.db-wal``, see qvc.plumbing.staging), what a
killed writer leaves, and an honest power-loss simulation: a SYNC writer is killed in the middle of
publishing its acknowledged puts to git's files, the git files that publication wrote and never
flushed are damaged the way a power loss can damage them (names lost, a ref emptied, zeroed, missing
or back at its previous value, a reflog line torn), and reopening must bring back every
acknowledged checkpoint, in qvc and in plain git.

SYNC's flush of the log at each commit is SQLite's own (``synchronous=FULL``, below Python): the
trace of tests/fault/test_powerloss.py reads it (``test_sync_put_ordering``), and its SYNC crash
states lose nothing acknowledged. ASYNC's and EXIT's flushes are Python's ``os.fdatasync`` of the
log, which :class:`SyncSpy` sees.
"""

from __future__ import annotations

import contextlib
import errno
import inspect
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pygit2  # noqa: E402
from helpers import child_env, fsck, run_git  # noqa: E402

import qvc.plumbing.durability  # noqa: E402
from qvc import Checkpoint, CheckpointConfig, DurabilityMode, GitCheckpointStore  # noqa: E402
from qvc.plumbing import durability  # noqa: E402
from qvc.plumbing.durability import DirtyPaths  # noqa: E402

WAL = "qvc/staging.db-wal"

# -- helpers -----------------------------------------------------------------------------------


def state_for(thread: str, cid: str, step: int) -> dict:
    return {"thread": thread, "cid": cid, "step": step, "messages": [f"{thread}-{j}" for j in range(step * 9 % 100)],
            "score": step * 1.5, "blob": cid.encode() * 3}


def put(store, thread: str, cid: str, step: int) -> None:
    # Kept apart from helpers.put: its source and state_for's are sent to child processes
    # (inspect.getsource), which do not import the test helpers.
    store.put(CheckpointConfig(thread), Checkpoint(id=cid, thread_id=thread, step=step,
                                                    state_data=state_for(thread, cid, step)), {"source": "test"})


def check(store, thread: str, cid: str, step: int) -> None:
    tup = store.get_tuple(CheckpointConfig(thread, cid))
    assert tup is not None, f"checkpoint {cid} of {thread!r} is gone"
    assert tup.checkpoint.step == step and tup.checkpoint.state_data == state_for(thread, cid, step), (
        f"checkpoint {cid} of {thread!r} reads back different")


def staged(path) -> int:
    """How many refs the staging database holds unpublished, as a read-only store (which creates
    and publishes nothing) sees it."""
    with GitCheckpointStore(path, readonly=True) as reader:
        return reader.repository.staging.staged()


def git_heads(path) -> dict[str, str]:
    """Thread name -> commit, as plain git reads git's files."""
    out = run_git(path, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads/").stdout
    return {name[len("refs/heads/"):]: sha for name, sha in (line.split() for line in out.splitlines())}


PROBE = """
import json, sys
from qvc import CheckpointConfig, GitCheckpointStore
path, thread, cid = sys.argv[1:4]
with GitCheckpointStore(path, readonly="--readonly" in sys.argv) as s:
    t = s.get_tuple(CheckpointConfig(thread, cid))
    print(json.dumps({"found": t is not None, "step": t and t.checkpoint.step,
                      "recovered": s.recovery.summary() if s.recovery else ""}))
"""


def probe(path, thread: str, cid: str, *, readonly: bool = False) -> dict:
    """What another process sees (it opens its own store, writable unless ``readonly``, and
    closes it; a writable store publishes what is staged when it opens)."""
    import json

    out = subprocess.run([sys.executable, "-c", PROBE, os.fspath(path), thread, cid,
                          *(["--readonly"] if readonly else [])], env=child_env(),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


WRITER = """
import os, signal, sys, time
from qvc import Checkpoint, CheckpointConfig, DurabilityMode, GitCheckpointStore
""" + inspect.getsource(state_for) + inspect.getsource(put) + """
path, mode, plan, max_lag = sys.argv[1:5]
quiet = "--no-publisher" in sys.argv or "--kill-mid-publication" in sys.argv
if quiet:  # no background publication: git's files get only the publications asked for below
    import qvc.plumbing.repository
    qvc.plumbing.repository.PUBLISH_LAG = qvc.plumbing.repository.EXIT_PUBLISH_LAG = 3600.0
store = GitCheckpointStore(path, durability=DurabilityMode(mode), max_lag=float(max_lag))
steps = {}
threads = plan.split(",")
for n, thread in enumerate(threads):
    if thread == "!":
        store.flush()
        print("FLUSHED", os.path.getsize(os.path.join(path, "qvc", "staging.db-wal")), flush=True)
        continue
    step = steps.get(thread, 0)
    steps[thread] = step + 1
    cid = f"{thread}-{step:04d}"
    put(store, thread, cid, step)
    if "--publish-each" in sys.argv and n < len(threads) - 1:
        store.repository.publish()  # each put's value reaches git's files (flushed), but the last
    print(f"ACK {thread} {cid} {step}", flush=True)
if "--kill-mid-publication" in sys.argv:
    # Killed once the publication has written every git file (pack, reflog lines, refs) and
    # before it flushes any of them (its first fsync/fdatasync of a file or directory of git's
    # that is not a pack written aside, nor qvc's own): the staged rows are still there, git's
    # files are as a power loss may leave them.
    # Every flush it made before is reported (SYNCED inode): what a power loss cannot damage.
    def trap(real):
        def wrapped(fd):
            rel = os.path.relpath(os.readlink(f"/proc/self/fd/{fd}"), os.path.realpath(path))
            if ".tmp-" not in rel and rel.split(os.sep)[0] != "qvc":
                os.kill(os.getpid(), signal.SIGKILL)
            done = real(fd)
            print(f"SYNCED {os.fstat(fd).st_ino}", flush=True)
            return done
        return wrapped
    os.fsync, os.fdatasync = trap(os.fsync), trap(os.fdatasync)
    store.repository.publish()
    print("NOT KILLED", flush=True)
    sys.exit(3)
if "--no-publisher" not in sys.argv:
    store.repository.publish()
print("IDLE", flush=True)
if "--exit" in sys.argv:
    sys.exit(0)  # a normal interpreter exit without close()
time.sleep(600)
"""


def run_writer(path, mode: str, plan: list[str], *, exit_normally: bool = False, max_lag: float = 0.05,
               flushes: list | None = None, publish_each: bool = False, no_publisher: bool = False,
               kill_mid_publication: bool = False, synced: set | None = None) -> list[tuple[str, str, int]]:
    """Run a writer subprocess; SIGKILL it once idle (store still open). Return its acknowledged puts.

    ``"!"`` in ``plan`` calls ``flush()``; ``flushes`` then receives (puts acknowledged before it,
    the size of the staging database's log after it). ``publish_each``: every put but the last
    is published to git's files before the next. ``no_publisher``: nothing is published in the
    background or at the end (what is acknowledged after the last flush is only in the
    database's log). ``kill_mid_publication``: the writer publishes after its puts and is killed
    by its first flush of a git file (nothing published is flushed, nothing staged is deleted);
    ``synced`` then receives the inodes of the files and directories that publication flushed
    before (a power loss leaves them as they are).
    """
    args = [sys.executable, "-c", WRITER, os.fspath(path), mode, ",".join(plan), str(max_lag)]
    if exit_normally:
        args.append("--exit")
    if publish_each:
        args.append("--publish-each")
    if no_publisher:
        args.append("--no-publisher")
    if kill_mid_publication:
        args.append("--kill-mid-publication")
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env())
    acked = []
    try:
        for line in proc.stdout:
            parts = line.split()
            if parts[0] == "ACK":
                acked.append((parts[1], parts[2], int(parts[3])))
            elif parts[0] == "SYNCED" and synced is not None:
                synced.add(int(parts[1]))
            elif parts[0] == "FLUSHED" and flushes is not None:
                flushes.append((len(acked), int(parts[1])))
            elif parts[0] in ("IDLE", "NOT"):
                break
    finally:
        if not exit_normally:
            proc.send_signal(signal.SIGKILL)
        rest, err = proc.communicate(timeout=60)
    assert len(acked) == len([t for t in plan if t != "!"]), f"writer failed: {err[-3000:]}"
    if exit_normally:
        assert proc.returncode == 0, err[-3000:]
    else:
        assert proc.returncode == -signal.SIGKILL, f"the writer was not killed ({proc.returncode}): {err[-3000:]}"
    return acked


class SyncSpy:
    """Records fdatasync/fsync/sync calls (Python's: SQLite's own are below it) per Python thread
    name, and syncfs calls via qvc.plumbing.durability; keeps the paths flushed by fdatasync/fsync
    in ``paths`` and every call as ``(kind, thread, path, started, ended)`` in ``log`` (times from
    ``time.monotonic``; ``ended`` is ``None`` while the call runs)."""

    def __init__(self, monkeypatch):
        self.calls: list[tuple[str, str]] = []
        self.paths: list[str] = []
        self.log: list[list] = []
        self._lock = threading.Lock()
        for name in ("fdatasync", "fsync"):
            real = getattr(os, name)
            monkeypatch.setattr(os, name, self._wrap(name, real))
        monkeypatch.setattr(os, "sync", self._wrap("sync", os.sync))
        real_harden = qvc.plumbing.durability.harden

        def harden(path, *, fsync=True):
            with self._lock:
                self.calls.append(("harden" if fsync else "harden-nofsync", threading.current_thread().name))
            return real_harden(path, fsync=fsync)

        for mod in ("qvc.plumbing.durability", "qvc.plumbing.repository", "qvc.plumbing.recovery",
                    "qvc.plumbing.maintenance"):
            m = sys.modules.get(mod)
            if m is not None and hasattr(m, "harden"):
                monkeypatch.setattr(m, "harden", harden)

    def _wrap(self, name, real):
        def wrapper(*args):
            path = None
            if args:
                with contextlib.suppress(OSError):
                    path = os.readlink(f"/proc/self/fd/{args[0]}")
            entry = [name, threading.current_thread().name, path, time.monotonic(), None]
            with self._lock:
                self.calls.append((name, entry[1]))
                if path is not None:
                    self.paths.append(path)
                self.log.append(entry)
            try:
                return real(*args)
            finally:
                entry[4] = time.monotonic()

        return wrapper

    def count(self, kind: str | tuple = ("fdatasync", "fsync", "sync", "harden"), thread: str | None = None) -> int:
        kinds = (kind,) if isinstance(kind, str) else kind
        with self._lock:
            return sum(1 for k, t in self.calls if k in kinds and (thread is None or t == thread))

    def flushes_of(self, path, *, since: float = 0.0) -> list[list]:
        """The calls that flushed the file ``path`` and started at ``since`` or later."""
        real = os.path.realpath(path)
        with self._lock:
            return [e for e in self.log if e[2] == real and e[3] >= since]

    def reset(self) -> None:
        with self._lock:
            self.calls.clear()


# -- SYNC --------------------------------------------------------------------------------------
# A SYNC put is durable when it returns: SQLite flushes the log inside COMMIT (below Python).
# tests/fault/test_powerloss.py::test_sync_put_ordering reads that flush off a system-call trace,
# and test_power_loss_states[sync] finds every acknowledged put after any power cut.


# -- ASYNC -------------------------------------------------------------------------------------


def test_async_visible_to_other_process_then_flush_makes_durable(tmp_path, monkeypatch):
    path = tmp_path / "repo.qvc"
    with GitCheckpointStore(path, durability=DurabilityMode.ASYNC, max_lag=1.0) as store:
        spy = SyncSpy(monkeypatch)
        put(store, "a", "a-0000", 0)
        assert spy.count("fdatasync", "MainThread") == 0, "ASYNC put flushed in the caller's thread"
        seen = probe(path, "a", "a-0000")  # the store is still open, nothing flushed on purpose
        assert seen["found"] and seen["step"] == 0, f"another process does not see an ASYNC put: {seen}"
        assert not seen["recovered"], f"another process recovered a live store's writes: {seen}"
        put(store, "b", "b-0000", 0)
        after = time.monotonic()
        store.flush()
        returned = time.monotonic()
        covering = [e for e in spy.flushes_of(path / WAL, since=after) if e[4] is not None and e[4] <= returned]
        assert covering, f"flush() returned without the log flushed after the last put: {spy.log}"
        check(store, "a", "a-0000", 0)


def test_async_flusher_makes_puts_durable_without_flush(tmp_path, monkeypatch):
    path = tmp_path / "repo.qvc"
    with GitCheckpointStore(path, durability=DurabilityMode.ASYNC, max_lag=0.1) as store:
        spy = SyncSpy(monkeypatch)
        for i in range(5):
            put(store, f"n{i}", f"n{i}-0000", 0)
        after = time.monotonic()
        assert spy.count("fdatasync", "MainThread") == 0, "ASYNC put flushed in the caller's thread"
        deadline = after + 1.5
        while not [e for e in spy.flushes_of(path / WAL, since=after) if e[4] is not None]:
            assert time.monotonic() < deadline, f"the flusher did not flush the log within ~1 s: {spy.log}"
            time.sleep(0.01)
        assert all(e[1] != "MainThread" for e in spy.flushes_of(path / WAL)), spy.log


@pytest.mark.parametrize("mode", [DurabilityMode.ASYNC, DurabilityMode.EXIT])
def test_flush_returns_only_once_the_log_is_flushed(tmp_path, monkeypatch, mode):
    """``flush()`` promises every acknowledged put durable on return, also while another thread
    (ASYNC's flusher, or another caller of ``flush()``) is flushing the log right then: it must
    not return before that flush has completed."""
    path = tmp_path / "repo.qvc"
    inside, done = threading.Event(), threading.Event()
    real = os.fdatasync

    def slow(fd):
        if threading.current_thread().name != "MainThread" and os.readlink(f"/proc/self/fd/{fd}").endswith(WAL):
            inside.set()
            time.sleep(0.5)  # a slow disk
            try:
                return real(fd)
            finally:
                done.set()
        return real(fd)

    with GitCheckpointStore(path, durability=mode, max_lag=0.05) as store:
        monkeypatch.setattr(os, "fdatasync", slow)
        put(store, "t", "t-0000", 0)
        if mode == DurabilityMode.EXIT:  # another thread of the program flushes
            other = threading.Thread(target=store.flush, name="other-flush")
            other.start()
        assert inside.wait(5), "nothing flushed the log"
        store.flush()
        flushed = done.is_set()
        if mode == DurabilityMode.EXIT:
            other.join()
        monkeypatch.setattr(os, "fdatasync", real)
    assert flushed, "flush() returned while the flush of the log covering the put was still running"


# -- EXIT --------------------------------------------------------------------------------------


def test_exit_mode_visible_soon_durable_at_close(tmp_path, monkeypatch):
    path = tmp_path / "repo.qvc"
    store = GitCheckpointStore(path, durability=DurabilityMode.EXIT)
    spy = SyncSpy(monkeypatch)
    try:
        for i in range(4):
            put(store, f"e{i}", f"e{i}-0000", 0)
        last_put = time.monotonic()
        main = threading.current_thread().name
        assert spy.count(thread=main) == 0, f"an EXIT-mode put flushed: {spy.calls}"
        seen = probe(path, "e3", "e3-0000", readonly=True)  # (a writable one would publish, and flush)
        assert seen["found"], "another process does not see an EXIT-mode put"
        time.sleep(0.3)
        # Only the publisher flushes before close: the git files it wrote (durable before it
        # deletes the staged rows), and the log just before, when it publishes (write-ahead: git's
        # files are never ahead of the log). Whether it published yet depends on the machine's
        # speed (EXIT_PUBLISH_LAG); the putting thread never flushes.
        assert {t for _, t in spy.calls} <= {"qvc-publisher"}, spy.calls
        closing = time.monotonic()
    finally:
        store.close()
    flushed_log = spy.flushes_of(path / WAL)
    assert {e[1] for e in flushed_log if e[3] < closing} <= {"qvc-publisher"}, spy.log
    assert {e[1] for e in flushed_log if e[3] >= closing} <= {main}, spy.log
    assert len([e for e in flushed_log if e[3] >= closing]) <= 1, f"close() flushed the log twice: {spy.log}"
    assert any(e[3] >= last_put for e in flushed_log), (
        f"the log was not flushed after the last put (by close, or by the publisher before it): {spy.log}")
    # every git file the store wrote was flushed (by the publisher, or at close), and the
    # directories holding them; never the whole file system
    assert spy.count("harden") == 0, f"a flush of the whole file system: {spy.calls}"
    flushed = set(spy.paths)
    real = os.path.realpath(path)
    wrote = [os.path.join(real, "objects", "pack", n) for n in os.listdir(path / "objects" / "pack")]
    wrote += [os.path.join(real, sub, "refs", "heads", f"e{i}") for i in range(4) for sub in ("", "logs")]
    # a pack's data is flushed under the name it is written as, before it is renamed into place
    missing = [w for w in wrote if os.path.normpath(w) not in flushed
               and not any(f.startswith(w + ".tmp-") for f in flushed)]
    assert not missing, f"not flushed: {missing}: {spy.paths}"
    for d in ("objects/pack", "refs/heads", "logs/refs/heads"):
        assert os.path.normpath(os.path.join(real, d)) in flushed, f"the directory {d!r} was not flushed"
    assert not (path / "qvc" / "journal").exists(), "a store of the staging database made a journal"
    assert staged(path) == 0, "close() left writes unpublished"
    with GitCheckpointStore(path) as again:
        assert not again.recovery, again.recovery.summary()
        for i in range(4):
            check(again, f"e{i}", f"e{i}-0000", 0)
    assert sorted(git_heads(path)) == [f"e{i}" for i in range(4)]


def test_exit_mode_flush_makes_durable(tmp_path, monkeypatch):
    path = tmp_path / "repo.qvc"
    with GitCheckpointStore(path, durability=DurabilityMode.EXIT) as store:
        spy = SyncSpy(monkeypatch)
        put(store, "x", "x-0000", 0)
        put(store, "x", "x-0001", 1)
        after = time.monotonic()
        assert not spy.flushes_of(path / WAL)
        store.flush()
        assert [e[1] for e in spy.flushes_of(path / WAL, since=after)] == ["MainThread"], spy.log
        assert staged(path) == 0, "flush() did not publish"


def test_exit_mode_durable_at_interpreter_exit(tmp_path):
    path = tmp_path / "repo.qvc"
    acked = run_writer(path, "exit", ["t", "u", "t"], exit_normally=True)
    assert staged(path) == 0, "the interpreter exited without closing the store (writes left unpublished)"
    assert not (path / "qvc" / "staging.db-wal").exists(), "the interpreter exited without closing the database"
    with GitCheckpointStore(path) as store:
        assert not store.recovery, store.recovery.summary()
        for thread, cid, step in acked:
            check(store, thread, cid, step)
    fsck(path)


# -- fsync=False -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", list(DurabilityMode))
def test_fsync_false_never_flushes_and_works(tmp_path, monkeypatch, mode):
    path = tmp_path / "repo.qvc"
    spy = SyncSpy(monkeypatch)
    with GitCheckpointStore(path, durability=mode, fsync=False) as store:
        for step in range(40):  # enough to merge small packs, if the store does that
            put(store, f"f{step % 3}", f"f-{step:04d}", step)
        store.flush()
        store.put_writes(CheckpointConfig("f0", "f-0000"), [("c", 1)], "task")
        store.delete(CheckpointConfig("f1"))
    assert spy.count(("fdatasync", "fsync", "sync", "harden")) == 0, f"fsync=False flushed: {spy.calls}"
    assert staged(path) == 0
    with GitCheckpointStore(path, fsync=False) as store:
        for step in range(40):
            if step != 37:
                check(store, f"f{step % 3}", f"f-{step:04d}", step)
        assert store.get_tuple(CheckpointConfig("f1", "f-0037")) is None
        assert store.get_tuple(CheckpointConfig("f0", "f-0000")).pending_writes == [("task", "c", 1)]
    fsck(path)


# -- another process, a killed writer ----------------------------------------------------------


def test_another_process_opening_meanwhile_takes_nothing_from_a_live_store(tmp_path):
    """Another process opens (and closes) the repository while a store writes: it sees the put,
    recovers nothing, and the store goes on writing; close is idempotent."""
    path = tmp_path / "repo.qvc"
    store = GitCheckpointStore(path)
    try:
        put(store, "j", "j-0000", 0)
        seen = probe(path, "j", "j-0000")
        assert seen["found"] and not seen["recovered"], seen
        put(store, "j", "j-0001", 1)
        check(store, "j", "j-0000", 0)
        check(store, "j", "j-0001", 1)
    finally:
        store.close()
    store.close()  # idempotent
    assert not (path / "qvc" / "journal").exists()
    with GitCheckpointStore(path) as again:
        assert not again.recovery, again.recovery.summary()
        assert again.get_tuple(CheckpointConfig("j")).checkpoint.id == "j-0001"


def test_a_half_created_journal_of_an_old_releases_dead_writer_is_removed_at_once(tmp_path):
    """Migration (qvc/plumbing/recovery.py): a store of the journal release killed while creating
    its journal left ``<pid>-<random>.wal.new``; the next open removes it at once when that process
    is gone, and leaves a live process's (it may be creating its journal right now)."""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        store.put(CheckpointConfig("t"), Checkpoint(id="a", thread_id="t", step=0, state_data={"n": 1}), {})
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True).stdout.strip()
    journal = path / "qvc" / "journal"
    journal.mkdir()  # as the old release left it
    dead, live = journal / f"{gone}-0123456789ab.wal.new", journal / f"{os.getpid()}-ba9876543210.wal.new"
    for leftover in (dead, live):
        leftover.write_bytes(b"QVCJ1\n")
    with GitCheckpointStore(path) as store:
        assert store.recovery.temp_files_removed >= 1
        assert not dead.exists() and live.exists()
        assert store.get_tuple(CheckpointConfig("t")).checkpoint.id == "a"
    live.unlink()


KILLED_WRITER = """
import os, signal, sys
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
""" + inspect.getsource(state_for) + inspect.getsource(put) + """
path, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = GitCheckpointStore(path)  # SYNC: each put is durable (in the staging database) when it returns
for step in range(n):
    thread = f"t{step % 3}"
    put(store, thread, f"{tag}-{step}", step)
    print(f"ACK {thread} {tag}-{step} {step}", flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # most often before the publisher (PUBLISH_LAG) writes git's files
"""


def _kill_writer(path, tag: str, n: int) -> list[tuple[str, str, int]]:
    proc = subprocess.run([sys.executable, "-c", KILLED_WRITER, os.fspath(path), tag, str(n)],
                          env=child_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    mine = [(p[1], p[2], int(p[3])) for p in (ln.split() for ln in proc.stdout.splitlines()) if p[0] == "ACK"]
    assert len(mine) == n, proc.stderr[-3000:]
    return mine


def test_a_killed_writers_staged_puts_are_read_everywhere_and_published_on_reopen(tmp_path):
    """A SYNC writer SIGKILLed right after its puts returned: a read-only store sees every one
    of them at once (staged or published), the next writable open publishes what is staged, and
    then plain git sees them too; a second open has nothing left to do."""
    path = tmp_path / "repo.qvc"
    GitCheckpointStore(path).close()
    for attempt in range(5):  # the writer's publisher may get there first: try for a kill before it
        acked = _kill_writer(path, f"k{attempt}", 5)
        if staged(path):
            break
    else:
        pytest.skip("the writer's publisher published before every kill")
    last = {thread: cid for thread, cid, _ in acked}
    with GitCheckpointStore(path, readonly=True) as reader:
        for thread, cid, step in acked:
            check(reader, thread, cid, step)
        for thread, cid in last.items():
            assert reader.get_tuple(CheckpointConfig(thread)).checkpoint.id == cid
    with GitCheckpointStore(path) as store:
        for thread, cid, step in acked:
            check(store, thread, cid, step)
        heads = {thread: store.head(thread) for thread in last}
    assert staged(path) == 0, "the open did not publish what the dead writer staged"
    assert {t: git_heads(path)[t] for t in last} == heads, "plain git does not see the acknowledged heads"
    with GitCheckpointStore(path) as store:
        assert not store.recovery, f"recovery ran twice: {store.recovery.summary()}"
    fsck(path)


def loose_objects(path) -> list[str]:
    objects = Path(path) / "objects"
    return [f"{d.name}/{f.name}" for d in objects.iterdir() if len(d.name) == 2 and d.is_dir() for f in d.iterdir()]


def test_dead_writers_objects_are_published_as_packs_not_loose_files(tmp_path):
    """30 SYNC writers, each SIGKILLed right after its puts returned (their objects often only
    staged): each open publishes what is staged as one pack, so no loose object is left, the
    packs stay few, and every acknowledged checkpoint reads back."""
    from qvc.plumbing.repository import MERGE_PACKS_AT

    path = tmp_path / "repo.qvc"
    GitCheckpointStore(path).close()
    acked: list[tuple[str, str, int]] = []
    left_staged = 0
    for kill in range(30):
        acked += _kill_writer(path, f"k{kill}", 4)
        left_staged += staged(path) > 0
        with GitCheckpointStore(path) as store:
            assert loose_objects(path) == [], f"kill {kill}: the open left loose objects"
            for thread, cid, step in acked:
                check(store, thread, cid, step)
        assert staged(path) == 0
    assert left_staged > 0, "no writer died before publishing: the test did not test the open's publication"
    assert len(list((path / "objects" / "pack").glob("*.idx"))) <= MERGE_PACKS_AT
    fsck(path)


# -- power loss in the middle of a publication ---------------------------------------------------


def _commits_by_cid(git: pygit2.Repository, ref: str) -> dict[str, str]:
    out = {}
    commit = git.references[ref].peel(pygit2.Commit)
    while commit is not None:
        for line in commit.message.splitlines():
            if line.startswith("Checkpoint-Id: "):
                out[line.split(": ", 1)[1].strip()] = str(commit.id)
        commit = commit.parents[0] if commit.parents else None
    return out


def _last_pack(path: Path, newest: str) -> Path:
    """The ``.idx`` of the pack holding commit ``newest`` (the last put's: the killed publication's)."""
    from qvc.plumbing.pack import read_index

    found = [idx for idx in (path / "objects" / "pack").glob("*.idx")
             if bytes.fromhex(newest) in {oid for oid, _ in read_index(str(idx))}]
    assert len(found) == 1, found
    return found[0]


def _power_loss(path: Path, acked, ref_damage: dict[str, str], pack_damage: str, synced: set[int]) -> None:
    """Damage what a power loss can damage among the git files the killed publication wrote and
    never flushed (files published before were flushed, and so are those whose inode is in
    ``synced``: they are left alone).

    Its pack's data was flushed before the pack was renamed into place, so only the names may
    be lost (unless ``objects/pack`` was flushed): ``pack_damage`` is ``"names"`` (.pack and .idx
    gone), ``"idx"`` (.idx gone) or ``"none"``. Each ref in ``ref_damage`` is ``"empty"`` (renamed,
    no data), ``"zeros"`` (renamed, its blocks never written: NULs), ``"missing"`` (a new ref
    whose rename never reached the disk), ``"previous"`` (the rename never reached the disk:
    back at the value before its last move) or ``"keep"``; its reflog's last line is torn in
    every case but ``"keep"``. A damage to a flushed file or directory entry is not made.
    """

    def flushed(p: Path) -> bool:
        return p.stat().st_ino in synced

    git = pygit2.Repository(os.fspath(path))
    cids: dict[str, str] = {}
    for thread in {t for t, _, _ in acked}:
        cids.update(_commits_by_cid(git, f"refs/heads/{thread}"))
    git.free()
    idx = _last_pack(path, cids[acked[-1][1]])
    if flushed(idx.parent):
        pack_damage = "none"
    if pack_damage in ("names", "idx"):
        idx.unlink()
    if pack_damage == "names":
        idx.with_suffix(".pack").unlink()
    for thread, how in ref_damage.items():
        ref = path / "refs" / "heads" / thread
        assert ref.exists(), f"the writer left {thread} in packed-refs; cannot damage its ref file"
        if how == "keep":
            continue
        log = path / "logs" / "refs" / "heads" / thread
        if not flushed(log):
            lines = log.read_bytes().splitlines(keepends=True)
            log.write_bytes(b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])
        if how in ("empty", "zeros") and flushed(ref) or how in ("missing", "previous") and flushed(ref.parent):
            continue
        if how == "empty":
            os.truncate(ref, 0)
        elif how == "zeros":
            ref.write_bytes(b"\0" * ref.stat().st_size)
        elif how == "missing":
            ref.unlink()
        elif how == "previous":
            mine = [cids[c] for t, c, _ in acked if t == thread]
            assert len(mine) >= 2
            before = ref.stat().st_mtime - 1  # the old file comes back with its older mtime
            ref.write_text(mine[-2] + "\n")
            os.utime(ref, (before, before))
        else:
            raise ValueError(how)


def _check_all_back(path, acked) -> None:
    """Reopen: every acknowledged checkpoint reads back, heads at the last ones, in qvc and in
    plain git, nothing left staged or locked, git fsck clean."""
    last = {thread: cid for thread, cid, _ in acked}
    with GitCheckpointStore(path) as store:
        print(store.recovery.summary() if store.recovery else "nothing recovered")
        for thread, cid, step in acked:
            check(store, thread, cid, step)
        heads = {}
        for thread, cid in last.items():
            head = store.get_tuple(CheckpointConfig(thread))
            assert head is not None and head.checkpoint.id == cid, (
                f"after power loss, {thread!r} is at {head and head.checkpoint.id}, not at its last "
                f"acknowledged (SYNC) checkpoint {cid}")
            heads[thread] = store.head(thread)
    assert staged(path) == 0, "the open left acknowledged writes unpublished"
    assert not list(path.glob("refs/**/*.lock")), "a lock was left"
    assert {t: git_heads(path).get(t) for t in last} == heads, "plain git does not see the acknowledged heads"
    fsck(path)


PLAN = ["t", "u", "t", "t", "u", "t", "u", "t", "t", "u", "t", "t"]


@pytest.mark.parametrize("ref_damage, pack_damage", [("missing", "names"), ("missing", "idx"), ("keep", "names"),
                                                      ("empty", "none"), ("zeros", "idx")])
def test_power_loss_mid_publication_new_refs(tmp_path, ref_damage, pack_damage):
    """Nothing published before the kill: the threads' refs are new, their files missing, empty
    or zeroed (or whole), the pack's names maybe lost. The staged rows bring all of it back."""
    path = tmp_path / "repo.qvc"
    synced: set[int] = set()
    acked = run_writer(path, "sync", PLAN, kill_mid_publication=True, synced=synced)
    _power_loss(path, acked, {"t": ref_damage, "u": ref_damage}, pack_damage, synced)
    _check_all_back(path, acked)


@pytest.mark.parametrize("damage", ["previous", "zeros", "empty", "keep"])
def test_power_loss_mid_publication_moved_refs(tmp_path, damage):
    """Every put but the last published (and flushed) on its own; the last publication is cut
    by a power loss: its ref back at its previous value, or renamed with its data lost (empty,
    or NULs as a file whose blocks were never written reads), or whole."""
    path = tmp_path / "repo.qvc"
    synced: set[int] = set()
    acked = run_writer(path, "sync", PLAN, publish_each=True, kill_mid_publication=True, synced=synced)
    _power_loss(path, acked, {"t": damage}, "names", synced)
    _check_all_back(path, acked)


def test_the_publication_that_finishes_a_killed_one_flushes_what_that_one_wrote(tmp_path, monkeypatch):
    """A publication killed after it renamed the refs and before it flushed them leaves git's
    files written and not durable, its rows staged. The next publication (this open) finds the
    refs at their staged values already; it must still flush them (the files and their
    directories) before it deletes the staged rows, or a power cut after it loses the
    acknowledged moves with no staged copy left."""
    path = tmp_path / "repo.qvc"
    acked = run_writer(path, "sync", PLAN, publish_each=True, kill_mid_publication=True)
    assert staged(path) > 0
    spy = SyncSpy(monkeypatch)
    with GitCheckpointStore(path) as store:
        assert store.repository.staging.staged() == 0
        check(store, *acked[-1])
    real = os.path.realpath(path)
    flushed = {os.path.normpath(p) for p in spy.paths}
    for needed in ("refs/heads/t", "refs/heads", "logs/refs/heads/t", "logs/refs/heads"):
        assert os.path.join(real, needed) in flushed, (
            f"{needed} was not flushed before the staged rows were deleted: {sorted(flushed)}")


def _dirs(path: Path) -> set[str]:
    return {os.path.relpath(top, path) for top, _, _ in os.walk(path)}


def test_a_publication_makes_the_directories_it_creates_durable(tmp_path, monkeypatch):
    """A publication that creates a directory (a first pending write: ``refs/qvc/writes/``; a
    first thread: ``logs/refs/heads/``) flushes the directory holding the new one's entry before
    the staged rows go, as it flushes the directories of the files it writes; else a power cut
    after it loses the new directory, and with it acknowledged refs no staged copy holds any
    more (tests/fault/test_powerloss.py shows those states)."""
    path = tmp_path / "repo.qvc"
    GitCheckpointStore(path).close()
    before = _dirs(path)
    spy = SyncSpy(monkeypatch)
    with GitCheckpointStore(path) as store:
        put(store, "t", "t-0000", 0)
        store.put_writes(CheckpointConfig("t", "t-0000"), [("c", 1)], "task")
        store.flush()
        assert store.repository.staging.staged() == 0
    made = sorted(d for d in _dirs(path) - before if d.startswith(("refs", "logs")))
    assert "refs/qvc/writes" in made, made
    real = os.path.realpath(path)
    flushed = {os.path.normpath(p) for p in spy.paths}
    missing = [d for d in made if os.path.normpath(os.path.join(real, os.path.dirname(d))) not in flushed]
    assert not missing, f"the directories holding the entries of new directories {missing} were never flushed"


def test_power_loss_async_keeps_what_flush_made_durable(tmp_path):
    """ASYNC: puts, flush(), more puts, then a power loss that loses the database's log past the
    flush (the flusher never ran since, nothing was published since).

    Everything acknowledged before flush() returned must come back; the later puts may be
    lost, but the repository must be consistent: each head at an acknowledged checkpoint
    that reads back, no older than the last flushed one.
    """
    path = tmp_path / "repo.qvc"
    flushes: list = []
    plan = ["t", "u", "t", "u", "t", "!", "t", "u", "t", "t"]
    acked = run_writer(path, "async", plan, max_lag=600.0, flushes=flushes, no_publisher=True)
    (n_durable, size), = flushes
    wal = path / WAL
    assert wal.stat().st_size > size, "the puts after flush() did not reach the log"
    with open(wal, "r+b") as f:  # the unflushed tail never reached the disk; a torn frame remains
        f.truncate(size + (wal.stat().st_size - size) // 3)
    with GitCheckpointStore(path) as store:
        print(store.recovery.summary() if store.recovery else "nothing recovered")
        for thread, cid, step in acked[:n_durable]:
            check(store, thread, cid, step)
        for thread in ("t", "u"):
            mine = [c for t, c, _ in acked if t == thread]
            floor = max(i for i, (t, _, _) in enumerate(acked[:n_durable]) if t == thread)
            head = store.get_tuple(CheckpointConfig(thread))
            assert head is not None, f"{thread!r} is gone after the power loss"
            assert head.checkpoint.id in mine, f"{thread!r} is at {head.checkpoint.id}, never acknowledged"
            assert mine.index(head.checkpoint.id) >= mine.index(acked[floor][1]), (
                f"{thread!r} is at {head.checkpoint.id}, older than its last flushed checkpoint {acked[floor][1]}")
            for tup in store.list(CheckpointConfig(thread)):  # the whole line reads back
                assert tup.checkpoint.state_data == state_for(thread, tup.checkpoint.id, tup.checkpoint.step)
    assert staged(path) == 0
    fsck(path)


# -- a failed flush ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [DurabilityMode.ASYNC, DurabilityMode.EXIT])
def test_failed_flush_is_sticky_until_reopen(tmp_path, monkeypatch, mode):
    """One fdatasync of the database's log fails (EIO). Linux may then drop the dirty pages and
    report success the next time, so nothing later may be promised durable: the failing call
    raises, every later put()/flush() raises DurabilityError, close() raises, and reopening
    finds what was durable before. (SYNC's flush is SQLite's own, inside COMMIT: a failure there
    fails the put itself, nothing acknowledged.)"""
    from qvc import DurabilityError

    path = tmp_path / "repo.qvc"
    store = GitCheckpointStore(path, durability=mode, max_lag=0.01)
    put(store, "t", "t-0000", 0)
    store.flush()
    real = os.fdatasync
    failures = {"left": 1}

    def flaky(fd):
        if failures["left"] and os.readlink(f"/proc/self/fd/{fd}").endswith(WAL):
            failures["left"] -= 1
            raise OSError(errno.EIO, "Input/output error")
        return real(fd)

    monkeypatch.setattr(os, "fdatasync", flaky)
    with pytest.raises((DurabilityError, OSError)):
        put(store, "t", "t-0001", 1)
        time.sleep(0.2)  # ASYNC: the flusher's flush fails meanwhile
        store.flush()
    assert failures["left"] == 0
    time.sleep(0.05)  # the disk "works" again
    with pytest.raises(DurabilityError):
        put(store, "t", "t-0002", 2)
        store.flush()
    with pytest.raises(DurabilityError):
        store.flush()
    with pytest.raises(DurabilityError):
        store.close()
    with GitCheckpointStore(path) as again:
        check(again, "t", "t-0000", 0)
    fsck(path)


# -- what hardening flushes (git files written outside publication) ---------------------------


def _noted(tmp_path) -> tuple[DirtyPaths, str, str]:
    """A DirtyPaths of ``tmp_path`` with a new file in new directories and an appended one noted."""
    root = os.path.realpath(tmp_path)
    dirty = DirtyPaths(root)
    deep = os.path.join(root, "logs", "refs", "heads")
    os.makedirs(deep)
    dirty.made_dirs(deep)
    new = os.path.join(deep, "t")
    with open(new, "wb") as f:
        f.write(b"line\n")
    old = os.path.join(root, "packed-refs")
    with open(old, "wb") as f:
        f.write(b"# pack-refs\n")
    dirty.wrote(new, old)
    return dirty, new, old


def test_dirty_paths_flush_exactly_what_was_noted(tmp_path, monkeypatch):
    dirty, new, old = _noted(tmp_path)
    root = dirty.root
    spy = SyncSpy(monkeypatch)
    dirty.flush()
    assert spy.count("harden") == 0
    assert sorted(spy.paths) == sorted([new, old, os.path.join(root, "logs", "refs", "heads"),
                                        os.path.join(root, "logs", "refs"), os.path.join(root, "logs"), root])
    assert spy.count("fdatasync") == 2 and spy.count("fsync") == 4, spy.calls
    spy.reset()
    spy.paths.clear()
    dirty.flush()
    assert spy.calls == [], "a second flush flushed again what the first made durable"


def test_dirty_paths_skip_files_gone_and_flush_the_parent_of_directories_gone(tmp_path, monkeypatch):
    dirty, new, old = _noted(tmp_path)
    os.unlink(new)  # packed since, or deleted
    os.rmdir(os.path.dirname(new))  # git removes emptied ref directories
    spy = SyncSpy(monkeypatch)
    dirty.flush()
    assert new not in spy.paths and old in spy.paths
    assert spy.paths.count(os.path.join(dirty.root, "logs", "refs")) == 2, spy.paths  # its own, and for heads/


def test_dirty_paths_many_files_are_flushed_with_one_syncfs(tmp_path, monkeypatch):
    dirty, _, _ = _noted(tmp_path)
    for i in range(durability.FLUSH_EACH):
        path = os.path.join(dirty.root, f"f{i}")
        open(path, "wb").close()
        dirty.wrote(path)
    spy = SyncSpy(monkeypatch)
    dirty.flush()
    assert spy.count("harden") == 1 and spy.count(("fdatasync", "fsync")) == 0, spy.calls
    spy.reset()
    dirty.flush()
    assert spy.calls == []


def test_dirty_paths_keep_what_a_failed_flush_did_not_flush(tmp_path, monkeypatch):
    dirty, new, old = _noted(tmp_path)
    real = os.fdatasync

    def failing(fd):
        raise OSError(errno.EIO, "injected")

    monkeypatch.setattr(os, "fdatasync", failing)
    with pytest.raises(OSError):
        dirty.flush()
    monkeypatch.setattr(os, "fdatasync", real)
    spy = SyncSpy(monkeypatch)
    dirty.flush()
    assert new in spy.paths and old in spy.paths and dirty.root in spy.paths, spy.paths


def test_dirty_paths_without_fsync_forget_and_never_flush(tmp_path, monkeypatch):
    dirty, _, _ = _noted(tmp_path)
    spy = SyncSpy(monkeypatch)
    dirty.flush(fsync=False)
    assert spy.calls == [] and len(dirty) == 0


def test_a_store_shares_its_dirty_paths_with_the_writers(tmp_path):
    """The writers find the collector by the repository's path (durability.dirty): one per path
    in a process, held by each open store."""
    with GitCheckpointStore(tmp_path / "repo.qvc", fsync=False) as store:
        assert durability.dirty(store.repository.path) is store.repository.dirty
        put(store, "t", "t-0000", 0)
        durability.dirty(store.repository.path).wrote(os.path.join(store.repository.path, "packed-refs"))
        assert len(store.repository.dirty) > 0  # what a writer noted, the store flushes (at close)


HARDENING_WRITER = """
import os, signal, sys, threading
from qvc import Checkpoint, CheckpointConfig, DurabilityMode, GitCheckpointStore
""" + inspect.getsource(state_for) + inspect.getsource(put) + """
path, mode = sys.argv[1:3]
store = GitCheckpointStore(path, durability=DurabilityMode(mode))
done = threading.Event()
lock = threading.Lock()

def writer(n):
    for step in range(25):
        put(store, f"h{n}", f"h{n}-{step:04d}", step)
        with lock:
            print(f"ACK h{n} h{n}-{step:04d} {step}", flush=True)

threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
for t in threads:
    t.start()
hardened = 0
while any(t.is_alive() for t in threads) or hardened < 3:
    store.repository.harden()
    hardened += 1
for t in threads:
    t.join()
print(f"HARDENED {hardened}", flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no close: what the last harden left must read back
"""


@pytest.mark.parametrize("mode", ["sync", "exit"])
def test_harden_while_writers_put_loses_no_move(tmp_path, mode):
    """Hardening (publish, then flush what this process wrote to git's files) racing four
    threads' puts, then a SIGKILL with no close: every acknowledged put reads back, heads at the
    last ones."""
    path = tmp_path / "repo.qvc"
    out = subprocess.run([sys.executable, "-c", HARDENING_WRITER, os.fspath(path), mode], env=child_env(),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == -signal.SIGKILL, out.stderr[-3000:]
    acked = [(p[1], p[2], int(p[3])) for p in (line.split() for line in out.stdout.splitlines()) if p[0] == "ACK"]
    assert len(acked) == 100 and "HARDENED" in out.stdout, out.stderr[-3000:]
    with GitCheckpointStore(path) as store:
        for thread, cid, step in acked:
            check(store, thread, cid, step)
        for n in range(4):
            assert store.get_tuple(CheckpointConfig(f"h{n}")).checkpoint.id == f"h{n}-0024"
    fsck(path)


