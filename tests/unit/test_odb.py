"""The libgit2-free reader (qvc.plumbing.odb) and read-only stores: same answers as libgit2, on every layout."""

from __future__ import annotations

import os
import subprocess
import sys

import pygit2
import pytest
from helpers import child_env, run_git

from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore, InvalidInputError
from qvc.errors import CorruptionError, NotARepositoryError
from qvc.plumbing.odb import ObjectMissing, ObjectReader


def _fill(path) -> None:
    with GitCheckpointStore(path, fsync=False) as store:
        messages = []
        for i in range(150):  # > 64 items: a chunked list; growing, so `git gc` finds deltas
            messages.append({"role": "user", "content": f"message {i} " + "lorem ipsum " * (i % 7)})
            store.put(CheckpointConfig("t"), Checkpoint(id=f"c{i}", thread_id="t", step=i, state_data={
                "messages": list(messages), "blob": bytes(range(i % 256)) * 50, "n": i, "s": {1, 2, i}}),
                {"source": "loop"})
            if i % 40 == 0:
                store.put_writes(CheckpointConfig("t", f"c{i}"), [("ch", {"i": i})], f"task{i}")
        from qvc import fork_checkpoint

        fork_checkpoint(store, CheckpointConfig("t", "c10"), "fork/a b")
        store.reset("t", "c120")


def _same_as_libgit2(path) -> int:
    reader = ObjectReader(os.fspath(path))
    git = pygit2.Repository(os.fspath(path))
    try:
        n = 0
        for oid in git.odb:
            kind, data = reader.read(oid.raw)
            want_kind, want = git.odb.read(oid)
            assert (kind, data) == (int(want_kind), want), oid
            n += 1
        refs = {r.name: str(r.target) for r in git.references.iterator()
                if r.type == pygit2.enums.ReferenceType.DIRECT}
        assert dict(reader.refs("refs/")) == refs
        for name, target in refs.items():
            assert reader.ref(name) == target
        assert reader.ref("refs/heads/nope") is None
        return n
    finally:
        reader.close()
        git.free()


@pytest.mark.parametrize("layout", ["as written", "git gc", "git gc --aggressive", "loose"])
def test_reader_reads_what_libgit2_reads(tmp_path, layout):
    path = tmp_path / "r.qvc"
    _fill(path)
    if layout == "git gc":
        run_git(path, "gc", "-q")
    elif layout == "git gc --aggressive":
        run_git(path, "gc", "-q", "--aggressive")  # deep OFS_DELTA chains
        verify = run_git(path, "verify-pack", "-v", *map(str, (path / "objects" / "pack").glob("*.idx"))).stdout
        assert "chain length = 2" in verify  # there really are deltas to resolve
    elif layout == "loose":
        for pack in (path / "objects" / "pack").glob("*.pack"):
            data = pack.read_bytes()
            os.rename(pack, pack.with_suffix(".old"))
            os.unlink(pack.with_suffix(".idx"))
            run_git(path, "unpack-objects", "-q", input=data, text=False)
    assert _same_as_libgit2(path) > 300


def test_reader_sees_packs_that_appear_and_misses_honestly(tmp_path):
    path = tmp_path / "r.qvc"
    GitCheckpointStore(path).close()
    reader = ObjectReader(os.fspath(path))
    with pytest.raises(ObjectMissing):
        reader.read(b"\x01" * 20)
    with GitCheckpointStore(path) as store:  # a pack written after the reader scanned
        store.put(CheckpointConfig("t"), Checkpoint(id="x", thread_id="t", step=0, state_data={"a": 1}), {})
        head = store.head("t")
    kind, data = reader.read(bytes.fromhex(head))
    assert kind == 1 and data.startswith(b"tree ")
    reader.close()


def test_reader_head_symbolic_and_detached(tmp_path):
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        store.put(CheckpointConfig("t"), Checkpoint(id="x", thread_id="t", step=0, state_data={"a": 1}), {})
        store.flush()  # a file reader of the writing process itself sees what is published
        assert ObjectReader(os.fspath(path)).head() == ("refs/heads/main", None)
        store.checkout("t")
        assert ObjectReader(os.fspath(path)).head() == ("refs/heads/t", store.head("t"))
        store.checkout(commit=store.head("t"))
        assert ObjectReader(os.fspath(path)).head() == (None, store.head("t"))
        run_git(path, "pack-refs", "--all", "--prune")  # packed refs only now
        assert ObjectReader(os.fspath(path)).ref("refs/heads/t") == store.head("t")


def test_reader_rejects_damaged_refs_and_objects(tmp_path):
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        store.put(CheckpointConfig("t"), Checkpoint(id="x", thread_id="t", step=0, state_data={"a": 1}), {})
    (path / "refs" / "heads" / "t").write_text("not a sha\n")
    with pytest.raises(CorruptionError):
        ObjectReader(os.fspath(path)).ref("refs/heads/t")
    loose = path / "objects" / "ab"
    loose.mkdir(exist_ok=True)
    (loose / ("cd" * 19)).write_bytes(b"garbage")
    with pytest.raises(CorruptionError):
        ObjectReader(os.fspath(path)).read(bytes.fromhex("ab" + "cd" * 19))


def test_readonly_store_answers_like_a_writing_store(tmp_path):
    path = tmp_path / "r.qvc"
    _fill(path)
    run_git(path, "gc", "-q", "--aggressive")
    with GitCheckpointStore(path) as rw, GitCheckpointStore(path, readonly=True) as ro:
        assert ro.threads() == rw.threads()
        for thread in rw.threads():
            a = list(rw.list(CheckpointConfig(thread), superseded=True))
            b = list(ro.list(CheckpointConfig(thread), superseded=True))
            assert a == b and len(a) > 1
        assert ro.get_tuple(CheckpointConfig("t", "c40")) == rw.get_tuple(CheckpointConfig("t", "c40"))
        assert ro.resolve("c7") == rw.resolve("c7")
        with pytest.raises(InvalidInputError, match="read-only"):
            ro.put(CheckpointConfig("t"), Checkpoint(id="new", thread_id="t", step=1, state_data={}), {})
        with pytest.raises(InvalidInputError, match="read-only"):
            ro.delete_thread("t")


def test_readonly_never_creates(tmp_path):
    with pytest.raises(NotARepositoryError):
        GitCheckpointStore(tmp_path / "absent.qvc", readonly=True)
    assert not (tmp_path / "absent.qvc").exists()


def test_reading_does_not_load_libgit2(tmp_path):
    """What makes read-only CLI commands fast: pygit2's extension is never imported."""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        store.put(CheckpointConfig("t"), Checkpoint(id="x", thread_id="t", step=0, state_data={"a": 1}), {})
    code = ("import sys; from qvc import GitCheckpointStore, CheckpointConfig; "
            f"s = GitCheckpointStore({os.fspath(path)!r}, readonly=True); "
            "assert s.get(CheckpointConfig('t')).state_data == {'a': 1}; s.close(); "
            "print('pygit2._pygit2' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_readonly_store_writes_nothing(tmp_path):
    """Not even its lock file: a read-only store works on a repository it may not write."""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        store.put(CheckpointConfig("t"), Checkpoint(id="x", thread_id="t", step=0, state_data={"a": 1}), {})
    (path / "qvc" / "lock").unlink()
    before = sorted(p.relative_to(path) for p in path.rglob("*"))
    with GitCheckpointStore(path, readonly=True) as ro:
        assert ro.get(CheckpointConfig("t")).state_data == {"a": 1}
        assert ro.current().thread == "main"
    assert sorted(p.relative_to(path) for p in path.rglob("*")) == before


@pytest.mark.parametrize("packed", [False, True])
def test_refs_under_a_prefix_are_what_libgit2_lists_as_direct_refs(tmp_path, packed):
    """A writing store lists refs from the files (only the prefix's directories, and packed-refs
    by bisection): the same direct refs libgit2 lists, never a symbolic one, nothing beside the prefix."""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path, fsync=False) as store:
        for thread in ("a", "ab", "b/c", "b/d", "c"):
            store.put(CheckpointConfig(thread), Checkpoint(id=f"id-{thread}", thread_id=thread, step=0,
                                                           state_data={"n": 1}), {})
    tip = run_git(path, "rev-parse", "refs/heads/a").stdout.strip()
    run_git(path, "update-ref", "refs/remotes/origin/a", tip)
    run_git(path, "symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/a")
    if packed:
        run_git(path, "pack-refs", "--all")
    git = pygit2.Repository(os.fspath(path))
    direct = pygit2.enums.ReferenceType.DIRECT
    try:
        with GitCheckpointStore(path) as store:
            for prefix in ("refs/heads/", "refs/heads/a", "refs/heads/b/", "refs/remotes/", "refs/", "refs/nothere/"):
                expected = sorted((r.name, str(r.target)) for r in git.references.iterator()
                                  if r.name.startswith(prefix) and r.type == direct)
                assert sorted(store.repository.refs(prefix)) == expected, prefix
    finally:
        git.free()
