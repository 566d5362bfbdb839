"""qvc.store.idindex: the durable checkpoint-id index (one log a generation), and the generation
token read once, on real repositories, with real processes where a second process matters."""

from __future__ import annotations

import os
import subprocess
import sys
import zlib

import helpers
import pytest
from helpers import child_env

from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
from qvc.errors import CheckpointConflictError
from qvc.store.history import History
from qvc.store.idindex import IDS, IdIndex, token_name


def _put(store, thread: str, cid: str, step: int) -> str:
    helpers.put(store, thread, cid, step, {"n": step})
    return store.head(thread)


def _logs(path) -> list[str]:
    return sorted(n for n in os.listdir(path / IDS) if n.endswith(".log"))


def _token(path) -> str:
    return token_name(_staged_token(path))


def test_the_index_is_one_log_that_grows_with_the_index(tmp_path):
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path, fsync=False) as store:
        shas = {f"c{i}": _put(store, "t", f"c{i}", i) for i in range(30)}
        assert History(store.repository).lookup("c0") == shas["c0"]  # builds it
    assert _logs(path) == [_token(path) + ".log"]
    assert set(os.listdir(path / IDS)) == {"build.lock", _token(path) + ".log"}
    lines = (path / IDS / _logs(path)[0]).read_bytes().splitlines()
    assert {line.decode() for line in lines} == {f"{sha} {cid}" for cid, sha in shas.items()}


def test_forget_removes_the_log_and_the_next_lookup_rebuilds_it(tmp_path):
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path, fsync=False) as store:
        shas = {f"c{i}": _put(store, "t", f"c{i}", i) for i in range(5)}
        history = History(store.repository)
        assert history.lookup("c1", refresh=False) == shas["c1"]
        history.forget_index()
        assert _logs(path) == []  # no index: not trusted by any process
        assert History(store.repository).lookup("c3", refresh=False) == shas["c3"]  # rebuilt from the refs
        assert _logs(path) == [_token(path) + ".log"]
        assert history.lookup("c4", refresh=False) == shas["c4"]  # the first follows the new log


_APPEND = r"""
import sys
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
with GitCheckpointStore(sys.argv[1], fsync=False) as store:
    for i in range(int(sys.argv[2])):
        store.put(CheckpointConfig("other"), Checkpoint(id=f"o{i}", thread_id="other", step=i,
                                                        state_data={"i": i}), {})
    print(store.head("other"))
"""


def test_another_process_appends_are_followed_from_the_tail(tmp_path):
    """A process that read the log reads only what another process appended since, and finds
    those ids without a walk of the refs."""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path, fsync=False) as store:
        mine = _put(store, "t", "mine", 0)
        index = IdIndex(str(path))
        token = _token(path)
        history = History(store.repository)
        assert index.find("mine", token, history._walk_all) == [mine]
        size = os.path.getsize(path / IDS / (token + ".log"))
        proc = subprocess.run([sys.executable, "-c", _APPEND, str(path), "20"], env=child_env(),
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr

        def refuse() -> list:
            raise AssertionError("no rebuild: the log exists")

        assert os.path.getsize(path / IDS / (token + ".log")) > size
        assert index.find("o19", token, refuse) == [proc.stdout.strip()]
        assert index.find("mine", token, refuse) == [mine]
        assert index.find("nope", token, refuse) == []
        assert history.lookup("o7", refresh=False) == store.resolve("o7")


def test_the_last_line_wins_and_torn_lines_are_skipped(tmp_path):
    root = tmp_path / IDS
    root.mkdir(parents=True)
    a, b, c = "a" * 40, "b" * 40, "c" * 40
    (root / "0.log").write_bytes(f"{a} x\n{b} y\n{c} x\n{a[:17]}".encode() + f"{b} z\n{a} w".encode())
    index = IdIndex(str(tmp_path))
    assert index.find("x", "0", list) == [c, a]  # the caller checks them against the commits, in this order
    assert index.find("y", "0", list) == [b]
    assert index.find("z", "0", list) == []  # its line was glued to a torn one
    assert index.find("w", "0", list) == []  # not ended yet: read once its newline is there
    with open(root / "0.log", "ab") as f:
        f.write(b"\n")
    assert index.find("w", "0", list) == [a]


def test_a_build_a_delete_forgot_is_not_completed(tmp_path):
    path = tmp_path / "r.qvc"
    index = IdIndex(str(path))

    def walk() -> list[tuple[str, str]]:
        index.forget("0")  # a delete starts while the build walks
        return [("x", "a" * 40)]

    assert not index.build("0", walk)
    assert _logs(path) == []
    assert index.find("x", "0", list) == []  # the next build completes (here from an empty walk)


_KILLED_DELETE = r"""
import os, sys
from qvc import CheckpointConfig, GitCheckpointStore
real = os.link
def link(src, dst, *a, **k):
    if str(dst).endswith(".lock"):
        os._exit(9)  # killed once the delete committed, before git's files hold it
    return real(src, dst, *a, **k)
os.link = link
store = GitCheckpointStore(sys.argv[1], fsync=False)
store.delete(CheckpointConfig("t", "d2"))
"""


def _staged_token(path) -> str | None:
    from qvc.plumbing.staging import Staging

    staging = Staging(path, readonly=True)
    try:
        return staging.generation()
    finally:
        staging.close()


def test_a_killed_delete_leaves_no_index_naming_what_it_deleted(tmp_path):
    """The delete and its new generation token are one transaction: killed after it committed
    and before any git file moved, every index built before it is stale, and a new one is built
    from the refs as the delete left them."""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path, fsync=False) as store:
        shas = {f"d{i}": _put(store, "t", f"d{i}", i) for i in range(3)}
        before = _staged_token(path)
        assert History(store.repository).lookup("d2", refresh=False) == shas["d2"]  # the index names it
        proc = subprocess.run([sys.executable, "-c", _KILLED_DELETE, str(path)], env=child_env(),
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 9, proc.stderr
        assert _staged_token(path) != before  # committed with the delete
        fresh = History(store.repository)
        assert fresh.lookup("d2", refresh=False) is None  # rebuilt from the refs as the delete left them
        assert fresh.lookup("d1", refresh=False) == shas["d1"]
    with GitCheckpointStore(path, fsync=False) as store:  # recovery finishes the delete's generation
        assert store.get_tuple(CheckpointConfig("any", "d2")) is None
        assert History(store.repository).lookup("d2") is None


def test_a_repository_with_the_old_shard_layout_reads_identically(tmp_path):
    """The layout before this one (``qvc/ids/<generation>/<xx>`` shards and a ``complete``
    marker) is not used: the log is built on first need and the old directory removed."""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path, fsync=False) as store:
        shas = {f"c{i}": _put(store, f"t{i % 3}", f"c{i}", i // 3) for i in range(12)}
    token = _token(path)
    for name in os.listdir(path / IDS):
        os.unlink(path / IDS / name)
    old = path / IDS / token
    old.mkdir()
    for cid, sha in list(shas.items())[:6]:  # an old index that misses half the ids: never trusted
        shard = f"{zlib.crc32(cid.encode()) & 0xFF:02x}"
        with open(old / shard, "a") as f:
            f.write(f"{sha} {cid}\n")
    (old / "complete").write_text("6\n")
    with GitCheckpointStore(path, fsync=False) as store:
        for i in (9, 11):  # a re-put (of a head) of an id only the refs know is recognized, not stored twice
            helpers.put(store, f"t{i % 3}", f"c{i}", i // 3, {"n": i // 3})
        assert {cid: store.resolve(cid) for cid in shas} == shas
        assert [len(list(store.list(CheckpointConfig(f"t{t}")))) for t in range(3)] == [4, 4, 4]
    assert set(os.listdir(path / IDS)) == {"build.lock", token + ".log"}


def test_a_writer_appending_during_a_build_is_in_the_log(tmp_path):
    """A writer whose ref moved after the build's walk read the refs appends to the file being
    built, so the finished log holds its line."""
    index, writer = IdIndex(str(tmp_path)), IdIndex(str(tmp_path))

    def walk() -> list[tuple[str, str]]:
        writer.append([("late", "b" * 40)], "0")  # moved after the walk read the refs
        return [("early", "a" * 40)]

    assert index.build("0", walk)
    assert index.find("late", "0", list) == ["b" * 40]
    assert index.find("early", "0", list) == ["a" * 40]


def test_a_log_rebuilt_by_another_index_replaces_what_was_read(tmp_path):
    first, second = IdIndex(str(tmp_path)), IdIndex(str(tmp_path))
    assert first.find("gone", "0", lambda: [("gone", "a" * 40)]) == ["a" * 40]
    second.forget("0")  # a delete, in another process
    assert second.find("kept", "0", lambda: [("kept", "c" * 40)]) == ["c" * 40]
    assert first.find("gone", "0", list) == []  # not the deleted line it had read
    assert first.find("kept", "0", list) == ["c" * 40]


def test_a_long_log_is_searched_as_read_then_parsed_and_answers_the_same(tmp_path):
    """A first read longer than RAW_MIN is searched as bytes (no parse for a process that puts
    once), and parsed after RAW_LOOKUPS lookups; either way the last line naming an id comes
    first, and lines appended since come before the log's."""
    from qvc.store import idindex

    root = tmp_path / "r.qvc"
    os.makedirs(root / IDS)
    sha = [f"{i:040x}" for i in range(3000)]
    lines = [f"{sha[i]} id-{i}\n" for i in range(2500)] + [f"{sha[2600]} id-7\n", "torn line\n"]
    (root / IDS / "g.log").write_text("".join(lines))
    assert len("".join(lines)) > idindex.RAW_MIN
    index = IdIndex(str(root), fsync=False)
    assert index.find("id-7", "g", list) == [sha[2600], sha[7]]
    assert index._raw  # searched, not parsed
    index.append([("id-9", sha[2700]), ("new", sha[2800])], "g")
    assert index.find("id-9", "g", list) == [sha[2700], sha[9]]
    assert index.find("new", "g", list) == [sha[2800]]
    assert index.find("id-2499", "g", list) == [sha[2499]]
    assert index.find("absent", "g", list) == [] and index.find("id-2", "g", list) == [sha[2]]
    for _ in range(idindex.RAW_LOOKUPS):
        index.find("id-1", "g", list)
    assert not index._raw  # parsed now, under what came after
    assert index.find("id-7", "g", list) == [sha[2600], sha[7]]
    assert index.find("id-9", "g", list) == [sha[2700], sha[9]]
    assert index.find("new", "g", list) == [sha[2800]] and index.find("absent", "g", list) == []


_UNINDEXED_PUT = r"""
import sys
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
from qvc.store.idindex import IdIndex
IdIndex.append = lambda self, *args, **kwargs: None  # as a writer killed before its append to the index
with GitCheckpointStore(sys.argv[1], fsync=False) as store:
    store.put(CheckpointConfig("t"), Checkpoint(id="w", thread_id="t", step=1, state_data={"n": 1}), {})
"""


def test_a_checkpoint_another_process_left_unindexed_is_found_after_a_put_on_it(tmp_path):
    """A process that walked the refs once, then put a checkpoint on top of one another process
    wrote but never indexed (killed between its ref move and its append), still finds the
    other's checkpoint by id: its own put does not stop the walk short of what lies below."""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path, fsync=False) as store:
        _put(store, "t", "a0", 0)
        assert store.get_tuple(CheckpointConfig("t", "nope")) is None  # a walk of every ref, and the log built
        proc = subprocess.run([sys.executable, "-c", _UNINDEXED_PUT, str(path)], env=child_env(),
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert all(not line.endswith(b" w") for line in (path / IDS / _logs(path)[0]).read_bytes().splitlines())
        _put(store, "t", "c", 2)
        assert store.get_tuple(CheckpointConfig("t", "c")).parent_config.checkpoint_id == "w"
        found = store.get_tuple(CheckpointConfig("t", "w"))
        assert found is not None and found.checkpoint.state_data == {"n": 1}


_KILLED_BEFORE_THE_LOG = r"""
import sys
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
from qvc.store.idindex import IdIndex
def killed(*a, **k):
    import os
    os._exit(9)  # killed once the put committed, before its id reached the index log
store = GitCheckpointStore(sys.argv[1], fsync=False)
store.put(CheckpointConfig("t"), Checkpoint(id="d0", thread_id="t", step=0, state_data={"n": 0}), {})
store.resolve("d0")  # the log is built, so the next put appends to it
IdIndex.append = killed
store.put(CheckpointConfig("t"), Checkpoint(id="d1", thread_id="t", step=1, state_data={"n": 1}), {})
"""


def test_an_id_a_killed_writer_stored_is_known_to_the_next_put(tmp_path):
    """The id index log is appended after the commit; the staging database's index is stored
    with it. A put of the same id after the kill (an agent retrying its step) finds it: the same
    content is a no-op, other content a conflict; never a second commit with that id."""
    path = tmp_path / "r.qvc"
    GitCheckpointStore(path).close()
    proc = subprocess.run([sys.executable, "-c", _KILLED_BEFORE_THE_LOG, str(path)], env=child_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 9, proc.stderr
    with GitCheckpointStore(path, fsync=False) as store:
        head = store.head("t")
        store.put(CheckpointConfig("t"), Checkpoint(id="d1", thread_id="t", step=1, state_data={"n": 1}), {})
        assert store.head("t") == head
        with pytest.raises(CheckpointConflictError, match="already exists"):
            store.put(CheckpointConfig("t"), Checkpoint(id="d1", thread_id="t", step=1, state_data={"n": 2}), {})
        assert [t.checkpoint.id for t in store.list(CheckpointConfig("t"))] == ["d1", "d0"]


def test_a_put_whose_log_append_comes_after_another_stores_delete_does_not_index_what_it_deleted(tmp_path):
    """Another store's delete commits between a put's commit and the put's append to the id index
    (and a lookup there builds the new generation's log): the put's id goes into no index, so
    the deleted checkpoint is not found, and putting it again stores it."""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path, fsync=False) as a, GitCheckpointStore(path, fsync=False) as b:
        _put(a, "keep", "k0", 0)
        _put(a, "t", "x0", 0)
        done = []

        def delete_first(record) -> None:
            if not done and any(name == "refs/heads/t" for name, _, _ in record.refs):
                done.append(True)
                b.delete_thread("t")
                assert b.get_tuple(CheckpointConfig("any", "k0")) is not None  # builds the new log

        a.repository.listeners.insert(0, delete_first)
        _put(a, "t", "x1", 1)
        assert done
    with GitCheckpointStore(path, fsync=False) as c:
        assert c.get_tuple(CheckpointConfig("any", "x1")) is None
        assert History(c.repository).lookup("x1", refresh=False) is None
        _put(c, "t", "x1", 0)
        assert [t.checkpoint.id for t in c.list(CheckpointConfig("t"))] == ["x1"]
