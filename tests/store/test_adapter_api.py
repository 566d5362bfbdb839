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
