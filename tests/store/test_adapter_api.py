"""The store API adapters build on (the LangGraph saver is one): put_entries with a parent anywhere in
the thread, keyed pending writes, drop/prune/copy, and thread indexes that follow rewrites by
themselves. Real repositories on disk."""

from __future__ import annotations

from helpers import fsck, run_git

from qvc.codec import serde
from qvc.store.format import MODE_BLOB
from qvc.store.git_store import GitCheckpointStore
from qvc.store.writes import Item
from qvc.types import CheckpointConfig


def _put(store: GitCheckpointStore, thread: str, cid: str, value, parent_id: str | None = None) -> str:
    def entries_of(parent, write):
        return {"x": (MODE_BLOB, write("blob", serde.dumps(value)))}

    return store.put_entries(thread, {"id": cid, "thread_id": thread, "step": 0, "parent_id": parent_id}, {},
                             entries_of, parent_id=parent_id)


def test_a_fork_inside_a_thread_is_a_time_travel_with_a_superseded_line(tmp_path):
    repo = tmp_path / "r.qvc"
    with GitCheckpointStore(repo) as store:
        a = _put(store, "t", "a", 1)
        b = _put(store, "t", "b", 2, "a")
        c = _put(store, "t", "c", 3, "b")
        d = _put(store, "t", "d", 4, "a")  # forks from an inner checkpoint
        assert store.head("t") == d and store.commit_info(d).parents == (a,)
        assert run_git(repo, "for-each-ref", "--format=%(refname)", "refs/qvc/superseded/t/").stdout.split() == [
            f"refs/qvc/superseded/t/{c}"]
        index = store.thread_index("t")
        assert index.ids == {"a": a, "b": b, "c": c, "d": d} and index.latest == "d"
        assert [t.checkpoint.id for t in store.list(CheckpointConfig("t"), superseded=True)] == ["d", "a", "c", "b"]
        # re-put: the same content is a no-op, other content replaces the commit (descendants re-parented)
        assert _put(store, "t", "b", 2, "a") == b
        _put(store, "t", "b", 20, "a")
        index = store.thread_index("t")
        assert set(index.ids) == {"a", "b", "c", "d"} and index.ids["b"] != b
        assert store.commit_info(index.ids["c"]).parent == a and store.commit_info(index.ids["b"]).parent == a
        assert run_git(repo, "rev-list", "--min-parents=2", "--all").stdout.split() == []
    fsck(repo)


def test_keyed_writes_come_before_their_checkpoint_and_follow_the_upsert_rules(tmp_path):
    with GitCheckpointStore(tmp_path / "w.qvc") as store:
        store.put_checkpoint_writes("t", "c1", [Item("k1", b"first", keep_first=True), Item("k2", b"v1")], "m\n")
        store.put_checkpoint_writes("t", "c1", [Item("k1", b"second", keep_first=True), Item("k2", b"v2"),
                                                Item("k0", b"z")], "m\n")
        assert store.checkpoint_writes("t", "c1") == [("k1", b"first"), ("k2", b"v2"), ("k0", b"z")]
        assert store.checkpoint_writes("t", "other") == []
        _put(store, "t", "c1", 1)
        store.drop_checkpoints("t", [store.thread_index("t").ids["c1"]])
        assert store.head("t") is None and store.checkpoint_writes("t", "c1") == []


def test_thread_indexes_follow_rewrites_in_this_and_other_stores(tmp_path):
    repo = tmp_path / "i.qvc"
    with GitCheckpointStore(repo) as one, GitCheckpointStore(repo) as two:
        _put(one, "t", "a", 1)
        b = _put(one, "t", "b", 2, "a")
        _put(one, "t", "c", 3, "b")
        assert set(one.thread_index("t").ids) == set(two.thread_index("t").ids) == {"a", "b", "c"}
        two.drop_checkpoints("t", [b])  # no cache is forgotten by hand: listeners and the generation do it
        assert set(two.thread_index("t").ids) == {"a", "c"}
        assert set(one.thread_index("t").ids) == {"a", "c"}
        one.copy_threads([("t", "u")])
        assert set(two.thread_index("u").ids) == {"a", "c"}
        assert two.commit_info(two.head("u")).thread_id == "u"
        one.prune_thread("u")
        assert list(two.thread_index("u").ids) == ["c"]
        two.delete_threads(["t", "u", "missing"], missing_ok=True)
        assert one.thread_index("t") is None and one.thread_index("u") is None
    fsck(repo)


def test_rename_thread_carries_keyed_writes(tmp_path):
    repo = tmp_path / "n.qvc"
    with GitCheckpointStore(repo) as store:
        _put(store, "t", "a", 1)
        store.put_checkpoint_writes("t", "a", [Item("k", b"v")], "m\n")
        store.rename_thread("t", "u")
        assert store.checkpoint_writes("u", "a") == [("k", b"v")]
        assert store.checkpoint_writes("t", "a") == []
        assert store.thread_index("u").ids.keys() == {"a"}
    fsck(repo)


def _writes_refs(repo) -> list[str]:
    return run_git(repo, "for-each-ref", "--format=%(refname)", "refs/qvc/writes/").stdout.split()


def test_keyed_writes_of_every_checkpoint_share_one_ref_per_thread(tmp_path):
    repo = tmp_path / "one.qvc"
    ids = [f"c{i:03d}" for i in range(60)]
    with GitCheckpointStore(repo) as store:
        for i, cid in enumerate(ids):
            if i % 2:
                _put(store, "t", cid, i, ids[i - 1] if i else None)
            store.put_checkpoint_writes("t", cid, [Item("a", cid.encode()), Item("b", b"x", keep_first=True)], "m\n")
            if not i % 2:
                _put(store, "t", cid, i, ids[i - 1] if i else None)
        store.put_checkpoint_writes("t", ids[0], [Item("a", b"again")], "m\n")
        tip = run_git(repo, "rev-parse", "refs/qvc/writes/lg/t/%all").stdout.strip()
        store.put_checkpoint_writes("t", ids[0], [Item("a", b"again"), Item("b", b"y", keep_first=True)], "m\n")
        assert run_git(repo, "rev-parse", "refs/qvc/writes/lg/t/%all").stdout.strip() == tip  # nothing changed
        assert _writes_refs(repo) == ["refs/qvc/writes/lg/t/%all"]
        assert store.checkpoint_writes("t", ids[0]) == [("a", b"again"), ("b", b"x")]
        assert all(store.checkpoint_writes("t", c) == [("a", c.encode()), ("b", b"x")] for c in ids[1:])
        # each set under four fan-out levels, so an upsert rewrites a few small trees
        sets = [p for p in run_git(repo, "ls-tree", "-r", "-d", "--name-only", tip).stdout.split() if p.count("/") == 4]
        assert sorted(p.split("/")[4] for p in sets) == ids
        # no per-key ref of the thread (the old layout) is left: a read of a key without writes reads none
        assert ".nolegacy" in run_git(repo, "ls-tree", "--name-only", tip).stdout.split()
        assert store.checkpoint_writes("t", "no-such-checkpoint") == []
        # drop: those sets go, as a root commit (nothing dropped stays reachable through the ref)
        index = store.thread_index("t")
        store.drop_checkpoints("t", [index.ids[c] for c in ids[10:20]])
        assert [store.checkpoint_writes("t", c) for c in ids[10:20]] == [[]] * 10
        assert store.checkpoint_writes("t", ids[20]) == [("a", ids[20].encode()), ("b", b"x")]
        assert run_git(repo, "rev-list", "--count", "refs/qvc/writes/lg/t/%all").stdout.strip() == "1"
        # copy: the target reads the same; prune: only the latest checkpoint's writes stay
        store.copy_threads([("t", "u")])
        assert [store.checkpoint_writes("u", c) for c in ids] == [store.checkpoint_writes("t", c) for c in ids]
        store.prune_thread("u")
        assert [c for c in ids if store.checkpoint_writes("u", c)] == [ids[-1]]
        assert store.checkpoint_writes("t", ids[0]) == [("a", b"again"), ("b", b"x")]
        store.rename_thread("u", "v")
        assert store.checkpoint_writes("v", ids[-1]) == [("a", ids[-1].encode()), ("b", b"x")]
        assert _writes_refs(repo) == ["refs/qvc/writes/lg/t/%all", "refs/qvc/writes/lg/v/%all"]
        # dropping the last set deletes the ref
        store.drop_checkpoints("v", [store.thread_index("v").ids[ids[-1]]])
        store.delete_threads(["t"])
        assert _writes_refs(repo) == []
    fsck(repo)


def test_dropped_keyed_writes_are_erased_by_purge(tmp_path):
    repo = tmp_path / "p.qvc"
    with GitCheckpointStore(repo) as store:
        _put(store, "t", "a", 1)
        _put(store, "t", "b", 2, "a")
        store.put_checkpoint_writes("t", "a", [Item("k", b"secret-of-a")], "m\n")
        store.put_checkpoint_writes("t", "b", [Item("k", b"kept-of-b")], "m\n")
        store.drop_checkpoints("t", [store.thread_index("t").ids["a"]])
        store.purge()
        assert store.checkpoint_writes("t", "b") == [("k", b"kept-of-b")]
    secret = run_git(repo, "hash-object", "--stdin", input=b"secret-of-a", text=False).stdout.decode().strip()
    kept = run_git(repo, "hash-object", "--stdin", input=b"kept-of-b", text=False).stdout.decode().strip()
    assert run_git(repo, "cat-file", "-e", kept).returncode == 0
    assert run_git(repo, "cat-file", "-e", secret, check=False).returncode != 0
    fsck(repo)


_UPSERTER = """
import sys
from qvc.store.git_store import GitCheckpointStore
from qvc.store.writes import Item
name = sys.argv[2]
with GitCheckpointStore(sys.argv[1], create=False) as store:
    for i in range(40):
        store.put_checkpoint_writes("t", f"{name}{i}", [Item("w", f"{name}{i}".encode())], "m\\n")
        items = [Item(f"{name}{i}", b"v"), Item("first", name.encode(), keep_first=True)]
        store.put_checkpoint_writes("t", "shared", items, "m\\n")
"""


def test_concurrent_keyed_writes_from_two_processes_on_one_thread_all_land(tmp_path):
    import subprocess
    import sys

    from helpers import child_env

    repo = tmp_path / "c.qvc"
    GitCheckpointStore(repo).close()
    procs = [subprocess.Popen([sys.executable, "-c", _UPSERTER, str(repo), name], env=child_env())
             for name in ("p", "q")]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    with GitCheckpointStore(repo, create=False) as store:
        for name in ("p", "q"):
            assert [store.checkpoint_writes("t", f"{name}{i}") for i in range(40)] == [
                [("w", f"{name}{i}".encode())] for i in range(40)]
        shared = store.checkpoint_writes("t", "shared")
        assert sorted(k for k, _ in shared) == sorted(["first"] + [f"{n}{i}" for n in "pq" for i in range(40)])
        assert dict(shared)["first"] == (b"p" if shared[0][0] == "p0" else b"q")  # the first writer's, kept
        for name in ("p", "q"):  # each process's writes in the order it wrote them
            mine = [k for k, _ in shared if k.startswith(name)]
            assert mine == [f"{name}{i}" for i in range(40)]
    assert _writes_refs(repo) == ["refs/qvc/writes/lg/t/%all"]
    fsck(repo)


def test_a_keys_set_is_at_the_base4_digits_of_the_crc32_of_its_encoded_name():
    import zlib

    from qvc.store.writes import key_path, keyed_ref, thread_writes_ref

    for key, encoded in (("c1", "c1"), ("Run/1", "%52un%2F1"), ("", "%"), ("%all", "%25all")):
        crc = zlib.crc32(encoded.encode()) & 0xFF
        assert key_path(key) == (str(crc >> 6), str(crc >> 4 & 3), str(crc >> 2 & 3), str(crc & 3), encoded)
        assert keyed_ref("t", key) == f"refs/qvc/writes/lg/t/{encoded}" != thread_writes_ref("t")
    assert thread_writes_ref("a/b") == "refs/qvc/writes/lg/a%2Fb/%all"


def test_rewrites_move_a_threads_writes_ref_only_when_its_sets_change(tmp_path):
    repo = tmp_path / "m.qvc"

    def tip() -> str | None:
        out = run_git(repo, "for-each-ref", "--format=%(objectname)", "refs/qvc/writes/lg/t/%all").stdout.strip()
        return out or None

    with GitCheckpointStore(repo) as store:
        for i, cid in enumerate("abcd"):
            _put(store, "t", cid, i, "abcd"[i - 1] if i else None)
        store.put_checkpoint_writes("t", "b", [Item("k", b"b")], "m\n")
        store.put_checkpoint_writes("t", "d", [Item("k", b"d")], "m\n")
        before = tip()
        store.drop_checkpoints("t", [store.thread_index("t").ids["c"]])  # no writes: the ref stays
        assert tip() == before
        store.prune_thread("t")  # keeps d's set only: a root commit
        assert tip() != before and run_git(repo, "rev-list", "--count", tip()).stdout.strip() == "1"
        assert store.checkpoint_writes("t", "d") == [("k", b"d")] and store.checkpoint_writes("t", "b") == []
        after = tip()
        store.prune_thread("t")  # nothing left to drop
        assert tip() == after
        _put(store, "t", "e", 5, "d")
        store.prune_thread("t")  # the latest has no writes: the ref goes
        assert tip() is None and store.checkpoint_writes("t", "d") == []
    fsck(repo)
