"""qvc.plumbing.refpack: the created-refs count, packed refs, compacted reflogs and the
commit-graph, on real repositories written by the store and read back by the real git."""

from __future__ import annotations

import math
import os
import threading

import pytest
from helpers import fsck, put, run_git

from qvc import CheckpointConfig, GitCheckpointStore
from qvc.plumbing import refpack
from qvc.plumbing.reflog import PACKED, read_reflog

SINGLE = ["t0", "t1", "t2", "t3", "a/b"]  # threads moved once: one-line reflogs
MULTI = "multi"  # a thread moved three times


def heads(path) -> dict[str, str]:
    """Every ref as the real git lists it (loose and packed alike)."""
    out = run_git(path, "show-ref").stdout.split("\n")
    return {name: sha for sha, name in (line.split(" ", 1) for line in out if line)}


def loose_heads(path) -> list[str]:
    return sorted(os.listdir(os.path.join(path, "refs", "heads")))


def reflog_files(path) -> list[str]:
    return sorted(os.listdir(os.path.join(path, "logs", "refs", "heads")))


@pytest.fixture
def repo(tmp_path) -> str:
    """A closed repository: the SINGLE threads with one checkpoint each, MULTI with three."""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        for n, thread in enumerate(SINGLE):
            put(store, thread, f"c{n}")
        for n in range(3):
            put(store, MULTI, f"m{n}")
    return str(path)


def ref_names(path) -> list[str]:
    return sorted(n for n in heads(path) if n.startswith("refs/heads/"))


# -- the created-refs count ----------------------------------------------------------------------------


def test_the_count_is_the_size_of_its_file_and_adds_up(repo):
    start = refpack.created(repo)
    assert start == len(SINGLE) + 1  # the store counted the threads it created
    assert refpack.note_created(repo, 0) == start
    assert refpack.note_created(repo, 3) == start + 3
    assert refpack.note_created(repo, 2) == start + 5
    assert refpack.created(repo) == os.path.getsize(os.path.join(repo, refpack.CREATED)) == start + 5


def test_no_count_file_counts_zero_and_noting_nothing_creates_none(tmp_path):
    path = tmp_path / "bare.git"
    run_git(None, "init", "-q", "--bare", str(path))
    os.mkdir(path / "qvc")
    assert refpack.created(str(path)) == 0
    assert refpack.note_created(str(path), 0) == 0
    assert not (path / refpack.CREATED).exists()


# -- pack_refs -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fsync", [True, False])
def test_pack_refs_moves_every_loose_ref_and_empties_the_count(repo, fsync):
    before = heads(repo)
    assert len(loose_heads(repo)) == len(SINGLE) + 1
    assert refpack.pack_refs(repo, fsync=fsync) is True
    assert loose_heads(repo) == []
    assert heads(repo) == before  # the same refs, the same commits, now in packed-refs
    packed = open(os.path.join(repo, "packed-refs")).read()
    assert all(name in packed for name in before)
    assert refpack.created(repo) == 0
    fsck(repo)
    with GitCheckpointStore(repo) as store:
        for n, thread in enumerate(SINGLE):
            assert store.get_tuple(CheckpointConfig(thread)).checkpoint.id == f"c{n}"
        assert [t.checkpoint.id for t in store.list(CheckpointConfig(MULTI))] == ["m2", "m1", "m0"]


def test_a_failed_pack_leaves_the_loose_refs_and_the_count(repo):
    count, before = refpack.created(repo), heads(repo)
    lock = os.path.join(repo, "packed-refs.lock")
    open(lock, "w").close()  # another packer holds packed-refs
    try:
        assert refpack.pack_refs(repo) is False
        assert len(loose_heads(repo)) == len(SINGLE) + 1
        assert refpack.created(repo) == count
        assert heads(repo) == before
    finally:
        os.unlink(lock)
    assert refpack.pack_refs(repo) is True  # the next store tries again and succeeds
    assert loose_heads(repo) == [] and refpack.created(repo) == 0


def test_pack_refs_while_a_store_writes_loses_no_ref_move(tmp_path):
    path = tmp_path / "r.qvc"
    threads = [f"w{n}" for n in range(4)]
    with GitCheckpointStore(path) as store:
        stop = threading.Event()
        errors: list[BaseException] = []

        def write() -> None:
            try:
                step = 0
                while not stop.is_set() and step < 200:
                    for thread in threads:
                        put(store, thread, f"{thread}-{step}", step)
                    step += 1
            except BaseException as exc:  # reported below
                errors.append(exc)

        writer = threading.Thread(target=write)
        writer.start()
        try:
            packs = [refpack.pack_refs(str(path)) for _ in range(5)]
        finally:
            stop.set()
            writer.join(120)
        assert not errors, errors
        assert all(packs)
        expected = {f"refs/heads/{t}": store.head(t) for t in threads}
    got = heads(path)
    assert {name: got[name] for name in expected} == expected
    fsck(path)


# -- compact_reflogs ---------------------------------------------------------------------------------------


def test_compact_reflogs_moves_one_line_reflogs_and_readers_see_the_same_history(repo):
    names = ref_names(repo)
    before = {name: read_reflog(repo, name) for name in names}
    with GitCheckpointStore(repo) as store:
        store_before = {t: store.reflog(t) for t in [*SINGLE, MULTI]}
    assert refpack.compact_reflogs(repo) == len(SINGLE)
    assert reflog_files(repo) == [MULTI]  # the three-line reflog stays a file
    shards = os.listdir(os.path.join(repo, PACKED))
    assert shards and sum(open(os.path.join(repo, PACKED, s), "rb").read().count(b"\t") for s in shards) >= len(SINGLE)
    assert {name: read_reflog(repo, name) for name in names} == before
    with GitCheckpointStore(repo) as store:
        assert {t: store.reflog(t) for t in [*SINGLE, MULTI]} == store_before
    assert not [n for n in loose_heads(repo) if n.endswith(".lock")]  # every ref lock released
    assert refpack.compact_reflogs(repo) == 0  # nothing left to move
    assert len(run_git(repo, "reflog", "show", f"refs/heads/{MULTI}").stdout.splitlines()) == 3
    fsck(repo)


def test_compact_reflogs_skips_a_ref_whose_lock_a_writer_holds(repo):
    lock = os.path.join(repo, "refs", "heads", "t1.lock")
    open(lock, "w").close()
    try:
        assert refpack.compact_reflogs(repo) == len(SINGLE) - 1
        assert reflog_files(repo) == [MULTI, "t1"]
        assert os.path.exists(lock)  # the writer's lock is the writer's
    finally:
        os.unlink(lock)
    assert refpack.compact_reflogs(repo) == 1
    assert reflog_files(repo) == [MULTI]
    assert len(read_reflog(repo, "refs/heads/t1")) == 1


def test_compact_reflogs_in_batches_flushed_with_one_syncfs(repo, monkeypatch):
    monkeypatch.setattr(refpack, "BATCH", 2)  # three batches for the five one-line reflogs
    monkeypatch.setattr(refpack, "FLUSH_EACH", 0)  # each batch flushes the file system once
    before = {name: read_reflog(repo, name) for name in ref_names(repo)}
    assert refpack.compact_reflogs(repo) == len(SINGLE)
    assert reflog_files(repo) == [MULTI]
    assert {name: read_reflog(repo, name) for name in ref_names(repo)} == before


def test_compact_reflogs_without_reflogs_moves_nothing(tmp_path):
    path = tmp_path / "bare.git"
    run_git(None, "init", "-q", "--bare", str(path))
    assert refpack.compact_reflogs(str(path)) == 0
    assert not (path / PACKED).exists()


def test_compact_reflogs_after_pack_refs_keeps_reflogs_of_packed_refs(repo):
    before = {name: read_reflog(repo, name) for name in ref_names(repo)}
    assert refpack.pack_refs(repo)
    assert refpack.compact_reflogs(repo) == len(SINGLE)
    assert {name: read_reflog(repo, name) for name in ref_names(repo)} == before


# -- the commit-graph ------------------------------------------------------------------------------------------


def test_commit_graph_is_due_without_one_and_then_after_a_quarter_of_the_refs(repo):
    assert refpack.graph_due(repo, 3) is True  # no graph yet (and 3 refs counted as packed since)
    assert os.path.getsize(os.path.join(repo, refpack.UNGRAPHED)) == 3
    assert refpack.pack_refs(repo)
    assert refpack.commit_graph(repo) is True
    assert os.path.exists(os.path.join(repo, refpack.GRAPH))
    assert os.path.getsize(os.path.join(repo, refpack.UNGRAPHED)) == 0  # the count was emptied
    run_git(repo, "commit-graph", "verify")
    # due again once the refs packed since reach 1/GRAPH_SHARE of packed-refs' estimate (64 bytes a ref)
    need = math.ceil(os.path.getsize(os.path.join(repo, "packed-refs")) / (refpack.GRAPH_SHARE * 64))
    assert need > 1
    assert [refpack.graph_due(repo, 1) for _ in range(need)] == [False] * (need - 1) + [True]
    assert refpack.commit_graph(repo, fsync=False) is True
    assert refpack.graph_due(repo, 0) is False
    assert run_git(repo, "rev-list", "--date-order", "-n", "2", "--all").stdout.count("\n") == 2
    fsck(repo)


def test_purge_rewrites_a_commit_graph_that_names_what_it_prunes(repo):
    """A commit-graph written while a thread was reachable names its commits; purge prunes them
    after a delete, and must not leave the graph naming them (``git fsck`` fails on it)."""
    assert refpack.pack_refs(repo) and refpack.commit_graph(repo)
    with GitCheckpointStore(repo) as store:
        store.delete_thread(MULTI)
        store.purge()
    run_git(repo, "commit-graph", "verify")
    fsck(repo)
