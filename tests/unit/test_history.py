"""qvc.store.history through its public reads, checked against the real git on repositories qvc and git wrote."""

from __future__ import annotations

import subprocess
import sys

import helpers
import pytest
from helpers import child_env, examples, run_git
from hypothesis import given, settings
from hypothesis import strategies as st

from qvc import CheckpointConfig, GitCheckpointStore
from qvc.codec import serde
from qvc.errors import CorruptionError
from qvc.plumbing.objects import MODE_TREE
from qvc.store.format import HEADER
from qvc.store.history import LRU, History, parse_commit
from qvc.store.refnames import decode_name

WHO = ("-c", "user.name=Some One", "-c", "user.email=one@example.com")


def _msgs(n: int) -> list[dict]:
    return [{"role": "user", "content": f"m{i}"} for i in range(n)]


def _put(store, thread: str, cid: str, step: int, state: dict, parent_id: str | None = None) -> str:
    """``helpers.put``, returning the new head commit (kept: these tests address commits)."""
    helpers.put(store, thread, cid, step, state, parent_id=parent_id, metadata={"source": "loop"})
    return store.head(thread)


def _ls_tree(repo, treeish: str) -> dict[str, tuple[int, bytes]]:
    out = run_git(repo, "ls-tree", "-z", treeish).stdout
    entries = {}
    for item in filter(None, out.split("\0")):
        meta, name = item.split("\t", 1)
        mode, _, sha = meta.split()
        entries[name] = (int(mode, 8), bytes.fromhex(sha))
    return entries


def _foreign(repo, parents: list[str], entries: dict[str, tuple[int, bytes]], message: str) -> str:
    """A commit made by plain git (``mktree`` + ``commit-tree``), no qvc involved."""
    lines = "".join(f"{m:06o} {'tree' if m == MODE_TREE else 'blob'} {raw.hex()}\t{n}\n" for n, (m, raw) in
                    entries.items())
    tree = run_git(repo, "mktree", input=lines.encode(), text=False).stdout.decode().strip()
    args = [a for p in parents for a in ("-p", p)]
    return run_git(repo, *WHO, "commit-tree", tree, *args, "-m", message).stdout.strip()


def _blob(repo, value) -> bytes:
    sha = run_git(repo, "hash-object", "-w", "--stdin", input=serde.dumps(value), text=False).stdout.decode()
    return bytes.fromhex(sha.strip())


def _fields(repo, sha: str) -> dict[str, bytes]:
    return {decode_name(n): raw for n, (_, raw) in _ls_tree(repo, sha).items() if n != HEADER}


def _reference(repo, sha: str) -> tuple[dict[str, int], list[str]]:
    """(versions, changed) from scratch: diff every tree along ``git rev-list --first-parent``."""
    chain = run_git(repo, "rev-list", "--first-parent", "--reverse", sha).stdout.split()
    counts: dict[str, int] = {}
    prev: dict[str, bytes] = {}
    before: dict[str, bytes] = {}
    for c in chain:
        fields = _fields(repo, c)
        for f, raw in fields.items():
            if prev.get(f) != raw:
                counts[f] = counts.get(f, 0) + 1
        before, prev = prev, fields
    return {f: counts[f] for f in prev}, sorted(f for f, raw in prev.items() if before.get(f) != raw)


@pytest.fixture
def built(tmp_path):
    """A repository with puts, a chunked list, a removed and re-added field, a fork, a reset and
    commits by plain git (a merge and a commit on top of it), with a qvc put on top of those."""
    path = tmp_path / "r.qvc"
    shas = {}
    with GitCheckpointStore(path, fsync=False) as store:
        shas["c0"] = _put(store, "t", "c0", 0, {"msgs": _msgs(3), "n": 0, "gone": "x", "a/b": 1})
        shas["c1"] = _put(store, "t", "c1", 1, {"msgs": _msgs(70), "n": 1, "gone": "x", "a/b": 1})
        shas["c2"] = _put(store, "t", "c2", 2, {"msgs": _msgs(71), "n": 1, "a/b": 2})
        shas["c3"] = _put(store, "t", "c3", 3, {"msgs": _msgs(71), "n": 3, "a/b": 2, "gone": "back"})
        shas["f0"] = _put(store, "f", "f0", 2, {"msgs": _msgs(70), "n": 10, "gone": "x", "a/b": 1}, parent_id="c1")
        shas["f1"] = _put(store, "f", "f1", 3, {"msgs": _msgs(75), "n": 11, "gone": "x", "a/b": 1})
        store.reset("t", "c2")
        shas["c4"] = _put(store, "t", "c4", 3, {"msgs": _msgs(72), "n": 4, "a/b": 2})
        # plain git: a merge of t and f on top of c4 that edits a field and keeps c4's .qvc blob
        # (whose recorded versions name c4's parent, not this commit's), then one that drops .qvc
        entries = _ls_tree(path, shas["c4"])
        entries["n"] = (entries["n"][0], _blob(path, 99))
        shas["g0"] = _foreign(path, [shas["c4"], shas["f1"]], entries, "a merge made by git")
        entries = {n: e for n, e in entries.items() if n != HEADER}
        entries["extra"] = (0o100644, _blob(path, "new"))
        shas["g1"] = _foreign(path, [shas["g0"]], entries, "Step: 7\n\nnot a checkpoint, whatever it says")
        run_git(path, "update-ref", "refs/heads/foreign", shas["g1"])
        shas["q0"] = _put(store, "foreign", "q0", 8, {"msgs": _msgs(72), "n": 100, "a/b": 2, "extra": "new"})
        assert store.commit_info(shas["q0"]).parent == shas["g1"]
    return path, shas


# -- commits ---------------------------------------------------------------------------------------


def test_commit_parses_what_git_says_about_each_commit(built):
    path, shas = built
    with GitCheckpointStore(path, fsync=False) as store:
        history = History(store.repository)
        for name, sha in shas.items():
            info = history.commit(sha)
            fmt = run_git(path, "log", "-1", "--format=%T|%P|%ct", sha).stdout.strip().split("|")
            data = run_git(path, "cat-file", "commit", sha, text=False).stdout
            assert info.hex == sha
            assert info.tree.hex() == fmt[0]
            assert info.parents == tuple(fmt[1].split())
            assert info.parent == (fmt[1].split() or [None])[0]
            assert info.time == int(fmt[2])
            assert info.message == data.partition(b"\n\n")[2].decode()
            assert history.commit(sha) == info
            if name.startswith("g"):  # foreign: named by its SHA, no thread, and a stray "Step:" is not enough
                assert (info.checkpoint_id, info.thread_id) == (sha, None)
            else:
                assert info.checkpoint_id == name
                assert info.thread_id == {"c": "t", "f": "f", "q": "foreign"}[name[0]]
                assert info.step == {"c0": 0, "c1": 1, "c2": 2, "c3": 3, "c4": 3, "f0": 2, "f1": 3, "q0": 8}[name]
        assert history.commit(shas["g1"]).step == 7  # the trailer is read, whoever wrote it
        assert history.commit(shas["g0"]).step is None
        with pytest.raises(CorruptionError):
            history.commit("ab" * 20)  # no such object
        with pytest.raises(CorruptionError):
            history.commit(history.commit(shas["c0"]).tree.hex())  # a tree, not a commit


def test_first_parents_is_git_log_first_parent(built):
    path, shas = built
    with GitCheckpointStore(path, fsync=False) as store:
        history = History(store.repository)
        for sha in shas.values():
            want = run_git(path, "rev-list", "--first-parent", sha).stdout.split()
            assert [i.hex for i in history.first_parents(sha)] == want
        assert list(history.first_parents(None)) == []


def test_entries_tree_and_blob_are_what_git_stores(built):
    path, shas = built
    with GitCheckpointStore(path, fsync=False) as store:
        history = History(store.repository)
        for sha in shas.values():
            entries = history.entries(history.commit(sha))
            assert entries == _ls_tree(path, sha)
            for mode, raw in entries.values():
                if mode == MODE_TREE:
                    assert history.tree(raw) == _ls_tree(path, raw.hex())
                    for _, sub in history.tree(raw).values():
                        assert history.blob(sub) == run_git(path, "cat-file", "blob", sub.hex(), text=False).stdout
                else:
                    assert history.blob(raw) == run_git(path, "cat-file", "blob", raw.hex(), text=False).stdout
        assert serde.loads(history.blob(history.entries(history.commit(shas["g0"]))["n"][1])) == 99
        with pytest.raises(CorruptionError):
            history.blob(history.commit(shas["c0"]).tree)  # a tree is no blob
        with pytest.raises(CorruptionError):
            history.tree(b"\x01" * 20)


# -- versions -------------------------------------------------------------------------------------


def test_versions_and_changed_equal_a_from_scratch_tree_diff(built):
    path, shas = built
    every = run_git(path, "rev-list", "--all").stdout.split()
    assert set(shas.values()) <= set(every)
    with GitCheckpointStore(path, fsync=False) as store:
        history = History(store.repository)
        for sha in every:
            versions, changed = _reference(path, sha)
            assert history.versions(sha) == versions, sha
            assert sorted(history.changed(sha)) == changed, sha
            assert len(history.changed(sha)) == len(changed)
        # a fresh History, asked newest first (no memo from older commits), agrees too
        fresh = History(store.repository)
        for sha in reversed(every):
            assert fresh.versions(sha) == _reference(path, sha)[0]


def test_versions_worked_examples(built):
    path, shas = built
    with GitCheckpointStore(path, fsync=False) as store:
        history = History(store.repository)
        assert history.versions(shas["c0"]) == {"msgs": 1, "n": 1, "gone": 1, "a/b": 1}
        assert history.versions(shas["c3"]) == {"msgs": 3, "n": 3, "a/b": 2, "gone": 2}  # removed, then re-added
        assert history.versions(shas["f0"]) == {"msgs": 2, "n": 3, "gone": 1, "a/b": 1}
        assert sorted(history.changed(shas["c2"])) == ["a/b", "msgs"]  # "gone" was removed: not a change listed
        assert sorted(history.changed(shas["c0"])) == ["a/b", "gone", "msgs", "n"]
        assert sorted(history.changed(shas["c3"])) == ["gone", "n"]  # re-added counts as a change
        assert history.changed(shas["g0"]) == ["n"]
        assert sorted(history.changed(shas["g1"])) == ["extra"]
        assert history.changed(shas["f0"]) == ["n"]


def test_counts_keep_fields_no_longer_present(built):
    path, shas = built
    with GitCheckpointStore(path, fsync=False) as store:
        history = History(store.repository)
        counts, ids = history.counts(shas["c2"])
        assert counts == {"msgs": 3, "n": 2, "gone": 1, "a/b": 2}
        assert ids == _fields(path, shas["c2"]) and "gone" not in ids
        assert history.versions(shas["c2"]) == {f: counts[f] for f in ids}


def test_versions_match_what_the_store_reports(built):
    path, shas = built
    with GitCheckpointStore(path, fsync=False) as store:
        history = History(store.repository)
        for name in ("c0", "c1", "c2", "c3", "c4", "f0", "f1", "q0"):
            tup = store.get_tuple(CheckpointConfig({"c": "t", "f": "f", "q": "foreign"}[name[0]], name))
            assert dict(tup.checkpoint.state_versions) == history.versions(shas[name]), name


@pytest.mark.xfail(strict=True, reason="History trusts a commit's recorded versions whenever its first parent is "
                                       "the parent they were derived against, even when plain git rewrote the tree "
                                       "(an amend keeping the parent and the .qvc blob): a field reverted to the "
                                       "parent's value keeps the count of the change it no longer has")
def test_versions_of_a_git_amend_that_reverts_a_field(built):
    path, shas = built
    entries = _ls_tree(path, shas["c4"])  # .qvc kept: its recorded versions name c2, c4's parent
    entries["n"] = _ls_tree(path, shas["c2"])["n"]  # n back to c2's value
    amended = _foreign(path, [shas["c2"]], entries, "amended by git")
    run_git(path, "update-ref", "refs/heads/t", amended)
    with GitCheckpointStore(path, fsync=False) as store:
        assert History(store.repository).versions(amended) == _reference(path, amended)[0]


# -- the checkpoint-id index ------------------------------------------------------------------------


def _trailer_ids(repo) -> dict[str, str]:
    out = run_git(repo, "log", "--all", "--format=%H %(trailers:key=Checkpoint-Id,valueonly,separator=%x2C)").stdout
    found = {}
    for line in out.splitlines():
        sha, _, cid = line.partition(" ")
        found[cid or sha] = sha
    return found


def test_lookup_finds_every_checkpoint_git_sees(built):
    path, shas = built
    with GitCheckpointStore(path, fsync=False) as store:
        history = History(store.repository)
        ids = _trailer_ids(path)
        assert set(ids) == {n for n in shas if not n.startswith("g")} | {shas["g0"], shas["g1"]}
        for cid, sha in ids.items():
            assert history.lookup(cid) == sha
            assert history.reachable(sha)
        assert history.lookup(shas["c3"][:12]) is None  # exact ids only; prefixes are what matches() is for
        assert history.lookup("nope") is None
        assert not history.reachable("ab" * 20)


def test_matches_prefixes_of_ids_and_shas(built):
    path, shas = built
    with GitCheckpointStore(path, fsync=False) as store:
        history = History(store.repository)
        assert history.matches("c") >= {shas[n] for n in ("c0", "c1", "c2", "c3", "c4")}
        assert history.matches("f1") == {shas["f1"]} | _shas_starting(path, "f1")
        for sha in shas.values():
            assert sha in history.matches(sha[:8])
            assert sha in history.matches(sha[:8].upper())
            assert history.matches(sha) == {sha}
        assert history.matches("zz-no-such") == set()


_LATE = r"""
import sys
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
with GitCheckpointStore(sys.argv[1], fsync=False) as store:
    store.put(CheckpointConfig("late"), Checkpoint(id="late-1", thread_id="late", step=0, state_data={"x": 1}), {})
    store.put(CheckpointConfig("t"), Checkpoint(id="c5", thread_id="t", step=5, state_data={"n": 5}), {})
    print(store.head("late"), store.head("t"))
"""


def test_lookup_finds_ids_another_process_wrote_after_the_index_was_built(built):
    path, shas = built
    with GitCheckpointStore(path, fsync=False) as store:
        history = History(store.repository)
        assert history.lookup("c0") == shas["c0"]  # the index is built
        assert history.lookup("late-1") is None
        proc = subprocess.run([sys.executable, "-c", _LATE, str(path)], env=child_env(), capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        late, c5 = proc.stdout.split()
        assert late == run_git(path, "rev-parse", "refs/heads/late").stdout.strip()
        # the other store appended its checkpoint to the durable index: found without a walk
        assert history.lookup("late-1", refresh=False) == late
        assert history.lookup("late-1") == late
        assert history.lookup("c5") == c5
        assert history.reachable(late) and history.reachable(c5)
        assert history.matches("late") == {late}
        assert history.commit(c5).parent == shas["c4"]
        assert history.versions(c5) == _reference(path, c5)[0]
        assert history.changed(c5) == ["n"]  # and the other fields are removed


def test_an_index_built_across_a_delete_is_not_trusted(tmp_path):
    """A build reads the refs, then a delete moves them before the build marks its index
    complete: that index names the deleted checkpoint, so it must not be marked complete."""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path, fsync=False) as store:
        for i in range(3):
            _put(store, "t", f"d{i}", i, {"n": i})

        class DeleteAfterTheWalk(History):
            def refresh(self) -> None:
                super().refresh()
                if not hasattr(self, "deleted"):
                    self.deleted = True
                    store.delete(CheckpointConfig("t"))  # d2 goes, after this build read the refs

        store.repository.staging.forget_index()  # always safe: the next lookup walks the refs again
        DeleteAfterTheWalk(store.repository).lookup("d0")
        assert store.repository.indexed("d0")[1] is False  # a walk from before the delete: not trusted
        assert History(store.repository).lookup("d2") is None
        assert store.get_tuple(CheckpointConfig("any", "d2")) is None
        assert History(store.repository).lookup("d1") == store.head("t")
        assert store.repository.indexed("d1") == (store.head("t"), True)  # the next walk, after the delete, is


def _shas_starting(repo, prefix: str) -> set[str]:
    return {s for s in run_git(repo, "rev-list", "--all").stdout.split() if s.startswith(prefix)}


# -- deletes --------------------------------------------------------------------------------------


def test_delete_and_delete_thread_make_commits_unreachable_and_ids_miss(tmp_path):
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path, fsync=False) as store, GitCheckpointStore(path, fsync=False) as other:
        old = {}
        for i in range(4):
            old[f"d{i}"] = _put(store, "t", f"d{i}", i, {"n": i, "keep": "same", "m": _msgs(60 + 3 * i)})
        old["e0"] = _put(store, "e", "e0", 2, {"n": 20, "keep": "same"}, parent_id="d1")
        mine, theirs = History(store.repository), History(other.repository)  # theirs: not the deleting store's
        for history in (mine, theirs):
            for cid, sha in old.items():
                assert history.lookup(cid) == sha and history.reachable(sha)

        store.delete(CheckpointConfig("t", "d2"))
        new_d3 = store.head("t")
        assert new_d3 != old["d3"]
        for history in (mine, theirs):
            assert history.lookup("d2") is None
            assert not history.reachable(old["d2"])
            assert not history.reachable(old["d3"])  # re-parented: a new commit
            assert history.lookup("d3") == new_d3 and history.reachable(new_d3)
            assert history.commit(new_d3).parent == old["d1"]
            assert history.lookup("e0") == old["e0"] and history.lookup("d1") == old["d1"]
            assert history.matches("d") == {old["d0"], old["d1"], new_d3} | _shas_starting(path, "d")
            assert history.versions(new_d3) == _reference(path, new_d3)[0]
            assert sorted(history.changed(new_d3)) == _reference(path, new_d3)[1]

        store.delete_thread("e")
        for history in (mine, theirs):
            assert history.lookup("e0") is None
            assert not history.reachable(old["e0"])
            assert history.matches("e") == _shas_starting(path, "e")  # only SHAs that happen to start so
            assert history.reachable(old["d1"])  # shared with t: stays

        store.delete(CheckpointConfig("t"))  # the head
        for history in (mine, theirs):
            assert history.lookup("d3") is None and not history.reachable(new_d3)
            assert history.lookup("d1") == old["d1"]
        # (the rewrite records under refs/qvc/rewrites/ name deleted commits by SHA only; they are no checkpoints)
        reachable = run_git(path, "rev-list", "--exclude=refs/qvc/rewrites/*", "--all").stdout.split()
        assert set(reachable) == {old["d0"], old["d1"]}


# -- parse_commit -----------------------------------------------------------------------------------

TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


def _raw_commit(message: str, tree: str = TREE, extra: str = "") -> bytes:
    return (f"tree {tree}\n{extra}author a <a@b> 1700000000 +0100\ncommitter c <c@d> 1700000123 +0100\n\n"
            f"{message}").encode()


def test_parse_commit_reads_trailers_and_falls_back_to_the_sha():
    info = parse_commit("11" * 20, _raw_commit("subject\n\nCheckpoint-Id: x%0Ay\nThread: t%25\nStep: -3\n",
                                               extra=f"parent {'22' * 20}\nparent {'33' * 20}\n"))
    assert (info.checkpoint_id, info.thread_id, info.step) == ("x\ny", "t%", -3)
    assert info.parents == ("22" * 20, "33" * 20) and info.parent == "22" * 20
    assert info.time == 1700000123 and info.tree == bytes.fromhex(TREE)
    bare = parse_commit("44" * 20, _raw_commit("just a message\n"))
    assert (bare.checkpoint_id, bare.thread_id, bare.step, bare.parent) == ("44" * 20, None, None, None)
    assert parse_commit("55" * 20, _raw_commit("Step: soon\n")).step is None
    assert parse_commit("66" * 20, _raw_commit("Checkpoint-Id: \n")).checkpoint_id == "66" * 20


@pytest.mark.parametrize("data", [
    b"",
    b"author a <a@b> 1 +0000\n\nno tree",
    b"tree 12345\n\nshort tree",
    b"tree " + b"zz" * 20 + b"\n\nnot hex",
    b"tree " + TREE.encode() + b"\ncommitter c <c@d> soon +0000\n\nbad time",
])
def test_parse_commit_rejects_malformed_commits(data):
    with pytest.raises(CorruptionError, match="77" * 20):
        parse_commit("77" * 20, data)


def test_parse_commit_of_a_step_that_is_no_decimal_number():
    info = parse_commit("88" * 20, _raw_commit("Step: ²\n"))
    assert info.step is None


def test_lookup_survives_a_foreign_commit_with_an_odd_step_line(tmp_path):
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path, fsync=False) as store:
        c0 = _put(store, "t", "c0", 0, {"x": 1})
        odd = run_git(path, *WHO, "commit-tree", TREE, "-m", "notes\n\nStep: ²").stdout.strip()
        run_git(path, "update-ref", "refs/heads/notes", odd)
        history = History(store.repository)
        assert history.lookup("c0") == c0
        assert history.reachable(odd)


# -- LRU ---------------------------------------------------------------------------------------------


def test_lru_count_bound_evicts_the_least_recently_stored():
    cache = LRU(3)
    for k in "abcd":
        cache.put(k, k.upper())
    assert list(cache) == ["b", "c", "d"]
    cache.get("b")  # reading does not refresh: least recently *stored*
    cache.put("c", "C2")  # storing again does
    cache.put("e", "E")
    assert list(cache.items()) == [("d", "D"), ("c", "C2"), ("e", "E")]
    cache.clear()
    assert len(cache) == 0


def test_lru_weight_bound():
    cache = LRU(100, 10, len)
    for k, v in (("a", b"aaaa"), ("b", b"bbbb"), ("c", b"cc")):
        cache.put(k, v)
    assert list(cache) == ["a", "b", "c"]  # exactly at the bound
    cache.put("d", b"d")
    assert list(cache) == ["b", "c", "d"]
    cache.put("huge", b"x" * 11)  # heavier than the whole cache: not stored, nothing evicted
    assert list(cache) == ["b", "c", "d"]
    cache.put("b", b"b")  # a lighter value frees weight
    cache.put("e", b"eeeeee")
    assert list(cache.items()) == [("c", b"cc"), ("d", b"d"), ("b", b"b"), ("e", b"eeeeee")]
    cache.clear()
    for k in "0123456789":
        cache.put(k, b"1")
    assert len(cache) == 10  # clear() forgot the weight too


@settings(max_examples=examples(200), deadline=None)
@given(size=st.integers(1, 6), max_weight=st.integers(0, 20),
       ops=st.lists(st.tuples(st.integers(0, 8), st.binary(max_size=12)), max_size=40))
def test_lru_bounds_property(size, max_weight, ops):
    cache = LRU(size, max_weight, len)
    model: dict[int, bytes] = {}  # insertion order = store order
    for key, value in ops:
        if len(value) > max_weight:
            if key in model:
                continue  # see test_lru_an_overweight_put_does_not_leave_the_old_value
            cache.put(key, value)
        else:
            cache.put(key, value)
            model.pop(key, None)
            model[key] = value
            while len(model) > size or sum(map(len, model.values())) > max_weight:
                del model[next(iter(model))]
        assert list(cache.items()) == list(model.items())
        assert len(cache) <= size and sum(map(len, cache.values())) <= max_weight


def test_lru_an_overweight_put_does_not_leave_the_old_value():
    cache = LRU(10, 5, len)
    cache.put("k", b"old")
    cache.put("k", b"far too heavy")
    assert cache.get("k") in (None, b"far too heavy")
