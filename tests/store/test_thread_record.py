"""A thread's record (put_record, thread_record, delete_record, record_threads): new checkpoints, the
head and the record in one transaction, as a compare-and-swap on the record. What pydantic-ai's
conversation store builds on. Real repositories on disk."""

from __future__ import annotations

import pytest
from helpers import fsck, put, run_git

from qvc.errors import CheckpointConflictError, InvalidInputError, UnknownCheckpointError
from qvc.store.git_store import GitCheckpointStore
from qvc.types import Checkpoint, CheckpointConfig


def cp(thread: str, cid: str, parent: str | None, step: int = 0) -> tuple[Checkpoint, dict]:
    return Checkpoint(id=cid, thread_id=thread, step=step, parent_id=parent, state_data={"m": cid}), {"source": "t"}


def refs(repo) -> str:
    return run_git(repo, "for-each-ref").stdout


def test_checkpoints_head_and_record_in_one_compare_and_swap(tmp_path):
    repo = tmp_path / "r.qvc"
    with GitCheckpointStore(repo) as store:
        assert store.thread_record("t") is None
        made = store.put_record("t", b"r1", expected=None, checkpoints=[cp("t", "a", None), cp("t", "b", "a", 1)],
                                head="b", header={"mine": 1})
        assert store.head("t") == made["b"] and store.commit_info(made["b"]).parent == made["a"]
        assert store.thread_record("t") == b"r1" and store.header(made["a"])[0]["mine"] == 1
        assert [t.checkpoint.id for t in store.list(CheckpointConfig("t"))] == ["b", "a"]
        before = refs(repo)
        for expected in (None, b"other"):  # a stale record: nothing stored, not even the checkpoint's id
            with pytest.raises(CheckpointConflictError):
                store.put_record("t", b"r2", expected=expected, checkpoints=[cp("t", "c", "b")], head="c")
        with pytest.raises(CheckpointConflictError):  # an id that exists
            store.put_record("t", b"r2", expected=b"r1", checkpoints=[cp("t", "a", "b")], head="a")
        with pytest.raises(UnknownCheckpointError):
            store.put_record("t", b"r2", expected=b"r1", checkpoints=[cp("t", "c", "nope")], head="c")
        with pytest.raises(UnknownCheckpointError):
            store.put_record("t", b"r2", expected=b"r1", head="nope")
        with pytest.raises(InvalidInputError):
            store.put_record("t", "text", expected=b"r1", head="b")
        assert refs(repo) == before and store.resolve("b") == made["b"]
        with pytest.raises(UnknownCheckpointError):
            store.resolve("c")
        # a record change without checkpoints moves the head back: the line left is superseded
        store.put_record("t", b"r2", expected=b"r1", head="a")
        assert store.head("t") == made["a"] and store.thread_record("t") == b"r2"
        assert [t.checkpoint.id for t in store.list(CheckpointConfig("t"), superseded=True)] == ["a", "b"]
        new = store.put_record("t", b"r3", expected=b"r2", checkpoints=[cp("t", "c", "a", 1)], head="c")
        # back to the line left: it is the head's line again, no longer superseded
        store.put_record("t", b"r4", expected=b"r3", head="b")
        superseded = run_git(repo, "for-each-ref", "--format=%(objectname)", "refs/qvc/superseded/").stdout.split()
        assert superseded == [new["c"]]
    fsck(repo)


def test_a_fork_is_a_head_on_the_source_and_its_first_checkpoint_parented_there(tmp_path):
    repo = tmp_path / "r.qvc"
    with GitCheckpointStore(repo) as store:
        made = store.put_record("src", b"s", expected=None, checkpoints=[cp("src", "a", None)], head="a")
        store.put_record("fork", b"f1", expected=None, head="a")
        assert store.head("fork") == made["a"]
        mine = store.put_record("fork", b"f2", expected=b"f1", checkpoints=[cp("fork", "x", "a", 1)], head="x")
        assert store.commit_info(mine["x"]).parent == made["a"]
        run_git(repo, "merge-base", "--is-ancestor", made["a"], mine["x"])
        assert store.record_threads() == ["fork", "src"]
        store.put_record("empty", b"e", expected=None, head=None)  # a record without a head
        assert store.record_threads() == ["empty", "fork", "src"] and "empty" not in store.threads()
    fsck(repo)


def test_a_head_another_kind_of_writer_moved_is_kept_as_a_superseded_line(tmp_path):
    repo = tmp_path / "r.qvc"
    with GitCheckpointStore(repo) as store:
        store.put_record("t", b"r1", expected=None, checkpoints=[cp("t", "a", None)], head="a")
        plain = store.resolve(put(store, "t", "plain", 1).checkpoint_id)  # moves the head, not the record
        made = store.put_record("t", b"r2", expected=b"r1", checkpoints=[cp("t", "b", "a", 1)], head="b")
        assert store.head("t") == made["b"]
        superseded = run_git(repo, "for-each-ref", "--format=%(objectname)", "refs/qvc/superseded/").stdout.split()
        assert superseded == [plain]
    fsck(repo)


def test_delete_record_is_a_compare_and_swap(tmp_path):
    repo = tmp_path / "r.qvc"
    with GitCheckpointStore(repo) as store:
        made = store.put_record("t", b"r1", expected=None, checkpoints=[cp("t", "a", None), cp("t", "b", "a", 1)],
                                head="b")
        store.put_record("t", b"r2", expected=b"r1", head="a")  # leaves a superseded line
        store.put_record("f", b"f", expected=None, head="a")
        with pytest.raises(CheckpointConflictError):
            store.delete_record("t", expected=b"r1")
        assert store.head("t") == made["a"]
        store.delete_record("t", expected=b"r2")
        assert store.thread_record("t") is None and store.head("t") is None
        refs = run_git(repo, "for-each-ref", "--format=%(refname)", "refs/qvc/").stdout.split()
        assert [r.rpartition("/")[0] if r.startswith("refs/qvc/rewrites/") else r for r in refs] == [
            "refs/qvc/rewrites", "refs/qvc/writes/lg/f/%all"]  # the record of the delete, the fork's record
        with pytest.raises(CheckpointConflictError):
            store.delete_record("t", expected=b"r2")
        store.purge()
        run_git(repo, "cat-file", "-e", made["a"])  # the fork reaches it
        assert run_git(repo, "cat-file", "-e", made["b"], check=False).returncode != 0
        assert store.record_threads() == ["f"]
    fsck(repo)


@pytest.mark.parametrize("other", ["travel", "extend"])
def test_a_record_travel_racing_a_put_from_the_same_head_keeps_the_head_on_a_ref(tmp_path, monkeypatch, other):
    """Two Python threads of one store leave the same head H: a ``put_record`` travelling back to an
    older checkpoint, and a ``put`` with ``expected_head=H`` (travelling too, or extending H). The
    put_record pauses after it kept H's line, before its head move, while the put runs (or waits
    for it: transactions take turns). Whatever won, H stays on a ref: the put_record's rollback
    once removed the line it had kept even though the put had found that line and kept none of
    its own, leaving the acknowledged H on no ref (``git rev-list --all`` did not reach it)."""
    import threading

    from qvc.plumbing.transaction import Transaction

    repo = tmp_path / "r.qvc"
    with GitCheckpointStore(repo) as store:
        store.put_record("t", b"r1", expected=None, checkpoints=[cp("t", "a", None), cp("t", "b", "a", 1)], head="b")
        put(store, "t", "c", 2)
        head = store.head("t")
        paused, done = threading.Event(), threading.Event()
        move_ref = Transaction.move_ref

        def interleaved(tx, name, old, new, message=None):
            # The put_record's head move waits here, after it kept the line, for the put (1 s at most).
            if name == "refs/heads/t" and old == head and message and message.startswith("record:"):
                paused.set()
                done.wait(1)
            return move_ref(tx, name, old, new, message)

        monkeypatch.setattr(Transaction, "move_ref", interleaved)
        outcome: dict[str, object] = {}

        def record() -> None:
            try:
                outcome["record"] = store.put_record("t", b"r2", expected=b"r1", head="a")
            except CheckpointConflictError as exc:
                outcome["record"] = exc

        def other_put() -> None:
            parent = "a" if other == "travel" else None
            try:
                store.put(CheckpointConfig("t"), Checkpoint(id="d", thread_id="t", step=3, parent_id=parent,
                                                             state_data={"m": "d"}), {"source": "t"},
                          expected_head=head)
                outcome["put"] = "stored"
            except CheckpointConflictError as exc:
                outcome["put"] = exc
            done.set()

        first = threading.Thread(target=record)
        first.start()
        assert paused.wait(10)
        second = threading.Thread(target=other_put)
        second.start()
        first.join(30)
        second.join(30)
        monkeypatch.undo()
        assert (outcome["put"] == "stored") != (not isinstance(outcome["record"], Exception))  # one of them won
        kept = {t.checkpoint.id for t in store.list(CheckpointConfig("t"), superseded=True)}
        assert {"a", "b", "c"} <= kept
        assert ("d" in kept) == (outcome["put"] == "stored")
    assert head in run_git(repo, "rev-list", "--all").stdout.split()
    fsck(repo)
