"""A repository many short-lived writers used: dead writers' packs, many threads, packed refs.

Writers here are real processes, SIGKILLed once they acknowledged their puts; the parent then
checks that every acknowledged checkpoint is present and exact, that one clean store merges what
the dead ones left (packs stay few), and that ``git fsck --strict`` accepts the repository.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import helpers
import pytest
from helpers import child_env, fsck, run_git

from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
from qvc.plumbing import refpack
from qvc.plumbing.repository import MERGE_PACKS_AT

pytestmark = pytest.mark.heavy  # a kill, power-loss or fleet loop: left out of the quick tier

# Puts PUTS checkpoints on its own thread, acknowledging each, then waits to be killed.
WRITER = r"""
import sys, time
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore

path, thread, puts = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = GitCheckpointStore(path)
for i in range(puts):
    store.put(CheckpointConfig(thread), Checkpoint(id=f"{thread}-{i}", thread_id=thread, step=i,
                                                   state_data={"thread": thread, "i": i, "pad": "x" * i}), {})
    print(f"ACK {i}", flush=True)
time.sleep(600)
"""


def packs(path) -> int:
    return sum(1 for n in os.listdir(os.path.join(path, "objects", "pack")) if n.endswith(".pack"))


def kill_after_acks(path, thread: str, puts: int) -> None:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), thread, str(puts)], env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for i in range(puts):
            line = proc.stdout.readline()
            assert line == f"ACK {i}\n", f"{thread}: {line!r} {proc.stderr.read() if proc.poll() is not None else ''}"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        proc.stdout.close()
        proc.stderr.close()


def test_sixty_killed_writers_then_one_clean_store_leaves_few_packs(tmp_path):
    path = tmp_path / "r.qvc"
    GitCheckpointStore(path).close()
    writers, puts, parallel = 60, 3, 6
    names = [f"w{n:02d}" for n in range(writers)]
    errors: list[BaseException] = []

    def run(batch: list[str]) -> None:
        try:
            for name in batch:
                kill_after_acks(path, name, puts)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    workers = [threading.Thread(target=run, args=(names[i::parallel],)) for i in range(parallel)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors, errors[0]
    left = packs(path)  # what the last dead writers left (each open recovers and merges the earlier ones')
    with GitCheckpointStore(path) as store:
        store.put(CheckpointConfig("clean"), Checkpoint(id="clean-0", thread_id="clean", step=0,
                                                        state_data={"ok": True}), {})
    assert packs(path) <= 20, f"{packs(path)} packs left (dead writers left {left})"
    with GitCheckpointStore(path) as store:
        for name in names:
            line = list(store.list(CheckpointConfig(name)))
            assert [t.checkpoint.id for t in line] == [f"{name}-{i}" for i in reversed(range(puts))]
            assert [t.checkpoint.state_data for t in line] == [
                {"thread": name, "i": i, "pad": "x" * i} for i in reversed(range(puts))]
    fsck(path)


def test_merging_the_directorys_packs_while_others_read_and_write(tmp_path):
    """A store merging every small pack of the directory (other live stores' included) while
    another store keeps writing and reading its own checkpoints back: nothing goes missing."""
    path = tmp_path / "r.qvc"
    stop = threading.Event()
    failures: list[BaseException] = []
    with GitCheckpointStore(path, fsync=False) as writer, GitCheckpointStore(path, fsync=False) as merger:

        def write() -> None:
            try:
                i = 0
                while not stop.is_set() or i < 3 * MERGE_PACKS_AT:
                    writer.put(CheckpointConfig("w"), Checkpoint(id=f"w-{i}", thread_id="w", step=i,
                                                                 state_data={"i": i}), {})
                    back = max(0, i - 5)
                    assert writer.get_tuple(CheckpointConfig("w", f"w-{back}")).checkpoint.step == back
                    i += 1
            except BaseException as exc:
                failures.append(exc)

        t = threading.Thread(target=write)
        t.start()
        merged = 0
        for n in range(40):
            merger.put(CheckpointConfig("m"), Checkpoint(id=f"m-{n}", thread_id="m", step=n, state_data={"n": n}), {})
            merged += merger.repository.merge_small_packs()
        for _ in range(2000):  # a merge needs a moment with no write in flight (it never waits for one)
            if merged:
                break
            merged += merger.repository.merge_small_packs()
            time.sleep(0.001)
        stop.set()
        t.join()
        assert not failures, failures[0]
        assert merged > 0
        reader = GitCheckpointStore(path, readonly=True)
        try:
            assert len(list(reader.list(CheckpointConfig("w")))) >= 3 * MERGE_PACKS_AT
            assert [t.checkpoint.state_data["n"] for t in reader.list(CheckpointConfig("m"))] == list(range(39, -1, -1))
        finally:
            reader.close()
    assert packs(path) <= 20
    fsck(path)


def test_small_packs_git_wrote_merge_with_qvcs_and_kept_ones_stay(tmp_path):
    """``git gc`` leaves a small pack with deltas, a bitmap and a reverse index; later writers
    leave small packs of their own. The directory's merge takes git's pack too (its deltas
    copied, its side files removed with it) and leaves a ``.keep`` pack alone."""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        for i in range(6):
            store.put(CheckpointConfig("t"), Checkpoint(id=f"g-{i}", thread_id="t", step=i,
                                                        state_data={"log": "line of text\n" * (200 + i)}), {})
    run_git(path, "-c", "pack.writeReverseIndex=true", "gc", "-q")
    pack_dir = path / "objects" / "pack"
    gits = {p.stem for p in pack_dir.glob("*.pack")}
    assert len(gits) == 1 and list(pack_dir.glob("*.bitmap")) and list(pack_dir.glob("*.rev"))
    kept = None
    for n in range(MERGE_PACKS_AT + 1):
        with GitCheckpointStore(path) as store:  # each closes leaving its one small pack
            store.put(CheckpointConfig("t"), Checkpoint(id=f"q-{n}", thread_id="t", step=6 + n,
                                                        state_data={"log": "line of text\n" * (200 + n)}), {})
        if kept is None:
            kept = (set(p.stem for p in pack_dir.glob("*.pack")) - gits).pop()
            (pack_dir / f"{kept}.keep").write_text("")
    with GitCheckpointStore(path) as store:
        store.repository.merge_small_packs()  # if no closing store merged them already
        left = {p.stem for p in pack_dir.glob("*.pack")}
        assert kept in left and not (gits & left) and len(left) <= 3
        assert not list(pack_dir.glob("*.bitmap")) and not list(pack_dir.glob("*.rev"))
        ids = [t.checkpoint.id for t in store.list(CheckpointConfig("t"))]
        assert ids == [f"q-{n}" for n in reversed(range(MERGE_PACKS_AT + 1))] + [f"g-{i}" for i in reversed(range(6))]
    fsck(path)


def test_refs_are_packed_once_enough_threads_were_created(tmp_path):
    path = tmp_path / "r.qvc"
    count = refpack.PACK_REFS_AT + 4
    with GitCheckpointStore(path, durability="async") as store:
        for n in range(count):
            t = f"t{n:04d}"
            store.put(CheckpointConfig(t), Checkpoint(id=f"{t}-0", thread_id=t, step=0, state_data={"n": n}), {})
    # packed as the store went, each PACK_REFS_AT created refs; the rest wait for the next ones
    loose = [n for _, _, files in os.walk(path / "refs" / "heads") for n in files]
    assert len(loose) < refpack.PACK_REFS_AT and refpack.created(str(path)) < refpack.PACK_REFS_AT
    assert (path / "objects" / "info" / "commit-graphs").is_dir()  # generation numbers for `qvc log --all`
    packed = (path / "packed-refs").read_text()
    assert packed.count("refs/heads/t") == count - len(loose)
    with GitCheckpointStore(path) as store:
        assert len(store.threads()) == count
        store.put(CheckpointConfig("t0000"), Checkpoint(id="t0000-1", thread_id="t0000", step=1,
                                                        state_data={"n": -1}), {})
        assert [t.checkpoint.id for t in store.list(CheckpointConfig("t0000"))] == ["t0000-1", "t0000-0"]
        store.delete_thread("t0001")
        assert store.head("t0001") is None
    assert run_git(path, "rev-parse", "refs/heads/t0000").stdout.strip() != ""
    fsck(path)


def test_the_commit_graph_is_rewritten_geometrically(tmp_path):
    """Packing refs writes the commit-graph when there is none, then only once the refs packed
    since it was written reach 1/GRAPH_SHARE of all refs (so its writes cost O(n) overall)."""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path, fsync=False) as store:
        store.put(CheckpointConfig("t"), Checkpoint(id="c0", thread_id="t", step=0, state_data={}), {})
        head = store.head("t")
    repo = str(path)
    assert refpack.graph_due(repo, 1)  # no graph yet
    assert refpack.commit_graph(repo, fsync=False)
    assert (path / refpack.GRAPH).is_file()
    (path / "packed-refs").write_text("".join(f"{head} refs/heads/p{n:05d}\n" for n in range(1000)))
    due = -(-(path / "packed-refs").stat().st_size // (64 * refpack.GRAPH_SHARE))  # refs packed since, at least
    assert not refpack.graph_due(repo, due // 2)
    assert not refpack.graph_due(repo, due - due // 2 - 1)
    assert refpack.graph_due(repo, 1)  # the refs packed since the graph add up to enough
    assert refpack.commit_graph(repo, fsync=False)
    assert not refpack.graph_due(repo, due // 2)  # counted afresh once written
    assert run_git(path, "rev-parse", "refs/heads/p00999").stdout.strip() == head


@pytest.mark.parametrize("lost", [False, True])
def test_a_fresh_store_finds_ids_in_the_durable_index(tmp_path, lost):
    """The checkpoint-id index (in the staging database) survives the process (a fresh store's
    first put asks it once, walking nothing) and is walked again when it is marked incomplete."""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        for n in range(20):
            store.put(CheckpointConfig(f"t{n}"), Checkpoint(id=f"id-{n}", thread_id=f"t{n}", step=0,
                                                            state_data={"n": n}), {})
        assert store.repository.indexed("id-3") == (store.head("t3"), True)
        if lost:
            store.repository.staging.forget_index()
            assert store.repository.indexed("id-3")[1] is False
    with GitCheckpointStore(path) as store:
        # a re-put of an existing id is recognized, not stored twice
        store.put(CheckpointConfig("t3"), Checkpoint(id="id-3", thread_id="t3", step=0, state_data={"n": 3}), {})
        assert len(list(store.list(CheckpointConfig("t3")))) == 1
        assert store.resolve("id-7") == store.head("t7")
        assert store.repository.indexed("id-7") == (store.head("t7"), True)
    assert not (path / "qvc" / "ids").exists()  # (the file index of earlier releases is not made)


def test_one_line_reflogs_are_compacted_and_still_read(tmp_path):
    """Packing refs compacts the one-line reflogs of threads into qvc/reflogs: THREAD@{N} and
    `qvc reflog` read them back, later moves add to them, a deleted and re-created thread does
    not inherit them, and a ref a writer holds locked is left for next time."""
    from qvc.plumbing.reflog import PACKED
    from qvc.store.revisions import parse_revision

    path = tmp_path / "r.qvc"
    count = refpack.PACK_REFS_AT
    with GitCheckpointStore(path, durability="async") as store:
        for n in range(count):
            t = f"t{n:04d}"
            store.put(CheckpointConfig(t), Checkpoint(id=f"{t}-0", thread_id=t, step=0, state_data={"n": n}), {})
        store.put(CheckpointConfig("t0000"), Checkpoint(id="t0000-1", thread_id="t0000", step=1,
                                                        state_data={"n": 0.5}), {})
        first = store.head("t0001")
        store.flush()  # every ref in git's files (and its one-line reflog), then:
        (path / "refs" / "heads" / "t0002.lock").write_text("")  # a writer holds t0002
    (path / "refs" / "heads" / "t0002.lock").unlink()
    logs = path / "logs" / "refs" / "heads"
    assert sorted(os.listdir(logs)) == ["t0000", "t0002"]  # two entries; locked
    assert (path / PACKED).is_dir()
    with GitCheckpointStore(path) as store:
        log = store.reflog("t0001")
        assert [(e.old, e.new) for e in log] == [(None, first)]
        assert log[0].message.startswith("put: step 0 t0001-0")
        assert parse_revision(store, "t0001@{0}").commit == first
        store.put(CheckpointConfig("t0001"), Checkpoint(id="t0001-1", thread_id="t0001", step=1,
                                                        state_data={"n": 1.5}), {})
        second = store.head("t0001")
        assert [(e.old, e.new) for e in store.reflog("t0001")] == [(first, second), (None, first)]
        assert parse_revision(store, "t0001@{1}").commit == first
        assert len(store.reflog("t0000")) == 2 and len(store.reflog("t0002")) == 1
        store.delete_thread("t0003")
        assert store.reflog("t0003") == []
        store.put(CheckpointConfig("t0003"), Checkpoint(id="t0003-new", thread_id="t0003", step=0,
                                                        state_data={"again": True}), {})
        assert [e.new for e in store.reflog("t0003")] == [store.head("t0003")]
    proc = subprocess.run([sys.executable, "-m", "qvc", "--repo", str(path), "reflog", "--json", "t0001"],
                          env=child_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert [e["new"] for e in json.loads(proc.stdout)] == [second, first]
    fsck(path)


def test_many_reflogs_compact_in_batches_and_all_read_back(tmp_path, monkeypatch):
    """More one-line reflogs than one batch of locks (refpack.BATCH), compacted at once: every
    one is moved, its file removed, and each thread's reflog reads back exactly its one entry."""
    from qvc.plumbing.reflog import PACKED

    path = tmp_path / "r.qvc"
    monkeypatch.setattr(refpack, "BATCH", 256)
    count = 2 * refpack.BATCH + 37
    monkeypatch.setattr(refpack, "PACK_REFS_AT", 10**9)  # no packing as the store goes: all at once below
    with GitCheckpointStore(path, fsync=False, durability="async") as store:
        for n in range(count):
            t = f"t{n:04d}"
            store.put(CheckpointConfig(t), Checkpoint(id=f"{t}-0", thread_id=t, step=0, state_data={"n": n}), {})
        heads = {f"t{n:04d}": store.head(f"t{n:04d}") for n in range(count)}
    assert len(os.listdir(path / "logs" / "refs" / "heads")) == count
    assert refpack.compact_reflogs(str(path), fsync=False) == count
    assert os.listdir(path / "logs" / "refs" / "heads") == []
    assert len(os.listdir(path / PACKED)) > 200  # spread over the shards
    with GitCheckpointStore(path) as store:
        for t, head in heads.items():
            assert [(e.old, e.new) for e in store.reflog(t)] == [(None, head)], t
    fsck(path)


def test_a_compaction_cut_short_duplicates_entries_and_readers_take_them_once(tmp_path, monkeypatch):
    """A crash after the shards were flushed but before the reflog files were removed (here:
    the removal skipped) leaves each entry in its shard and its file; a later compaction
    appends it again. Readers see every entry exactly once, creations and later moves alike."""
    path = tmp_path / "r.qvc"
    real_unlink = os.unlink
    logs = os.path.join(str(path), "logs") + os.sep

    def crash_before_removing_logs():
        def unlink(p, *args, **kwargs):
            if not os.fspath(p).startswith(logs):
                real_unlink(p, *args, **kwargs)

        monkeypatch.setattr(os, "unlink", unlink)
        try:
            assert refpack.compact_reflogs(str(path), fsync=False) > 0
        finally:
            monkeypatch.setattr(os, "unlink", real_unlink)

    def put(store, t, step):  # helpers.put, returning the new head commit (the reflogs name commits)
        helpers.put(store, t, f"{t}-{step}", step, {"step": step}, metadata={})
        return store.head(t)

    threads = [f"t{n:02d}" for n in range(40)]
    with GitCheckpointStore(path, fsync=False) as store:
        first = {t: put(store, t, 0) for t in threads}
    expected = {t: [(None, first[t])] for t in threads}

    def check():
        with GitCheckpointStore(path) as store:
            for t in threads:
                assert [(e.old, e.new) for e in store.reflog(t)] == expected[t], t

    crash_before_removing_logs()
    check()
    assert refpack.compact_reflogs(str(path), fsync=False) == len(threads)  # appended again, files removed
    assert os.listdir(path / "logs" / "refs" / "heads") == []
    check()
    with GitCheckpointStore(path, fsync=False) as store:  # one more move each: a one-line file again
        for t in threads[:10]:
            second = put(store, t, 1)
            expected[t] = [(first[t], second)] + expected[t]
    crash_before_removing_logs()
    check()
    refpack.compact_reflogs(str(path), fsync=False)
    check()
    with GitCheckpointStore(path, fsync=False) as store:  # and a move after the duplicated entries
        for t in threads[:3]:
            third = put(store, t, 2)
            expected[t] = [(expected[t][0][1], third)] + expected[t]
    check()
    fsck(path)
