"""The staging database (qvc.plumbing.staging): transactions, readers, publication to git's files.
Real SQLite databases and real git repositories; plain git checks what is published."""

from __future__ import annotations

import sqlite3
import threading

import pygit2
import pytest
from helpers import run_git, staged_commit

from qvc.errors import CheckpointConflictError, QvcError, StoreClosedError
from qvc.plumbing.staging import DB, Staging

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


@pytest.fixture
def repo(tmp_path):
    path = tmp_path / "r.git"
    pygit2.init_repository(str(path), bare=True)
    return path


def stage(staging: Staging, ref: str, text: str, message: str | None = "put") -> str:
    with staging.transaction() as tx:
        head = tx.ref(ref)
        new = staged_commit(tx, head, text)
        tx.move(ref, head, new, message)
    return new


def test_a_transaction_is_visible_to_every_later_reader_before_publication(repo):
    writer, reader = Staging(repo), Staging(repo, readonly=True)
    try:
        first = stage(writer, "refs/heads/t", "one")
        assert reader.ref("refs/heads/t") == first
        assert reader.object(bytes.fromhex(first))[0] == "commit"
        assert run_git(repo, "for-each-ref").stdout == ""  # git's files do not have it yet
        assert reader.refs("refs/heads/") == [("refs/heads/t", first)]
    finally:
        writer.close()
        reader.close()


def test_a_conflicting_move_stores_nothing(repo):
    staging = Staging(repo)
    try:
        first = stage(staging, "refs/heads/t", "one")
        with pytest.raises(CheckpointConflictError, match="created by another writer"):
            with staging.transaction() as tx:
                orphan = staged_commit(tx, None, "lost race")
                tx.move("refs/heads/other", None, orphan, "put")
                tx.move("refs/heads/t", None, orphan, "put")  # expected absent, found first
        assert staging.ref("refs/heads/t") == first
        assert staging.ref("refs/heads/other") is None  # the whole transaction rolled back
        assert staging.object(bytes.fromhex(orphan)) is None
        with pytest.raises(CheckpointConflictError, match="moved by another writer"):
            with staging.transaction() as tx:
                tx.move("refs/heads/t", "0" * 40, first)
    finally:
        staging.close()


def test_publication_writes_git_files_that_plain_git_reads(repo):
    staging = Staging(repo)
    try:
        shas = [stage(staging, "refs/heads/t", f"step {i}", f"put {i}") for i in range(3)]
        stage(staging, "refs/heads/u", "u")
        with staging.transaction() as tx:
            tx.move("refs/heads/u", staging.ref("refs/heads/u"), None)  # staged and deleted again
        done = staging.publish()
        assert done.refs == ["refs/heads/t", "refs/heads/u"] and done.objects >= 5
        assert staging.staged() == 0
        assert run_git(repo, "rev-parse", "refs/heads/t").stdout.strip() == shas[-1]
        assert run_git(repo, "rev-list", "refs/heads/t").stdout.split() == shas[::-1]
        assert "refs/heads/u" not in run_git(repo, "for-each-ref").stdout
        log = run_git(repo, "reflog", "show", "--format=%gs", "refs/heads/t").stdout.split("\n")
        assert log[:3] == ["put 2", "put 1", "put 0"]
        run_git(repo, "fsck", "--strict")
        assert staging.publish().refs == []  # nothing left: a no-op
    finally:
        staging.close()


def test_publications_in_turn_extend_the_line(repo):
    staging = Staging(repo)
    try:
        first = stage(staging, "refs/heads/t", "one")
        staging.publish()
        second = stage(staging, "refs/heads/t", "two")
        assert staging.publish().refs == ["refs/heads/t"]
        third = stage(staging, "refs/heads/t", "three")
        assert staging.ref("refs/heads/t") == third
        staging.publish()
        assert run_git(repo, "rev-list", "refs/heads/t").stdout.split() == [third, second, first]
    finally:
        staging.close()


def test_plain_git_moving_a_staged_ref_keeps_both_values(repo):
    staging = Staging(repo)
    try:
        first = stage(staging, "refs/heads/t", "one")
        staging.publish()
        staged = stage(staging, "refs/heads/t", "staged")
        # plain git moves the ref under the staged write (to a commit of its own)
        theirs = run_git(repo, "-c", "user.name=u", "-c", "user.email=u@u", "commit-tree", EMPTY_TREE,
                         "-p", first, "-m", "git's own").stdout.strip()
        run_git(repo, "update-ref", "refs/heads/t", theirs)
        done = staging.publish()
        assert done.displaced == [f"refs/qvc/displaced/heads/t/{theirs}"]
        assert run_git(repo, "rev-parse", "refs/heads/t").stdout.strip() == staged
        assert run_git(repo, "rev-parse", done.displaced[0]).stdout.strip() == theirs
        run_git(repo, "fsck", "--strict")
    finally:
        staging.close()


def test_a_lock_another_program_holds_is_never_removed(repo):
    staging = Staging(repo, lock_wait=0.2)
    try:
        stage(staging, "refs/heads/t", "one")
        lock = repo / "refs" / "heads" / "t.lock"
        lock.write_text("git is updating this ref\n")
        done = staging.publish()
        assert done.blocked == ["refs/heads/t"] and done.refs == []
        assert lock.read_text() == "git is updating this ref\n"
        assert staging.staged() == 1  # still staged, still read
        lock.unlink()  # its owner is done
        assert staging.publish().refs == ["refs/heads/t"]
    finally:
        staging.close()


@pytest.mark.parametrize("torn", [b"", b"\0" * 41], ids=["empty", "zeroed"])
def test_a_ref_file_a_power_cut_left_empty_is_written_over_and_garbage_is_not(repo, torn):
    """A rename whose data never reached the disk leaves the ref's file empty or zeroed: the
    acknowledged value is written over it. A file holding anything else that is no ref is
    someone's: left for ``qvc fsck``, the ref staged meanwhile."""
    staging = Staging(repo)
    try:
        first = stage(staging, "refs/heads/t", "one")
        staging.publish()
        ref = repo / "refs" / "heads" / "t"
        second = stage(staging, "refs/heads/t", "two")
        ref.write_bytes(torn)
        assert staging.publish().refs == ["refs/heads/t"]
        assert run_git(repo, "rev-parse", "refs/heads/t").stdout.strip() == second != first
        third = stage(staging, "refs/heads/t", "three")
        ref.write_bytes(b"not a ref\n")
        assert staging.publish().blocked == ["refs/heads/t"]
        assert ref.read_bytes() == b"not a ref\n" and staging.ref("refs/heads/t") == third
    finally:
        staging.close()


def test_threads_of_one_store_serialize_and_lose_no_move(repo):
    staging = Staging(repo)
    acked: list[str] = []
    lock = threading.Lock()

    def work(n: int) -> None:
        for i in range(25):
            while True:
                try:
                    new = stage(staging, "refs/heads/shared", f"{n}-{i}")
                    break
                except CheckpointConflictError:
                    continue
            with lock:
                acked.append(new)

    try:
        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        staging.publish()
        line = run_git(repo, "rev-list", "refs/heads/shared").stdout.split()
        assert sorted(line) == sorted(acked) and len(line) == 100
    finally:
        staging.close()


@pytest.mark.parametrize("mode", ["sync", "async", "exit"])
def test_every_mode_keeps_what_it_acknowledged_across_a_reopen(repo, mode):
    staging = Staging(repo, mode=mode)
    first = stage(staging, "refs/heads/t", "one")
    with staging.transaction() as tx:
        tx.index([("checkpoint-1", first)])
    staging.flush()
    staging.close()
    again = Staging(repo, mode=mode)
    try:
        assert again.ref("refs/heads/t") == first
        assert again.indexed("checkpoint-1") == (first, False)  # not complete: no walk made it so
        with again.transaction() as tx:
            tx.rewrite()  # a rewrite of history empties the index (its refs are walked again)
        assert again.indexed("checkpoint-1") == (None, False)
    finally:
        again.close()
    assert (repo / DB).exists()


def test_the_id_index_is_complete_from_a_walk_until_the_next_rewrite(repo):
    staging = Staging(repo)
    try:
        first = stage(staging, "refs/heads/t", "one")
        generation = staging.generation()
        assert staging.complete_index([("checkpoint-1", first)], generation)
        assert staging.indexed("checkpoint-1") == (first, True)
        assert staging.indexed("checkpoint-2") == (None, True)  # complete: a miss means new
        with staging.transaction() as tx:
            tx.index([("checkpoint-2", first)])  # what a write indexes keeps it complete
        assert staging.indexed("checkpoint-2") == (first, True)
        with staging.transaction() as tx:
            tx.rewrite()
            assert not staging.complete_index([("checkpoint-1", first)], tx.generation)  # mid-rewrite: no
        assert staging.indexed("checkpoint-1") == (None, False)
        assert not staging.complete_index([("checkpoint-1", first)], generation)  # a walk from before the rewrite
        assert staging.indexed("checkpoint-1") == (None, False)
        assert staging.complete_index([], staging.generation())
        staging.forget_index()  # refs moved outside a transaction: walk again
        assert staging.indexed("checkpoint-2") == (None, False)
    finally:
        staging.close()


def test_threads_of_a_sync_store_commit_as_one_group(repo):
    """A thread whose transaction arrives while another's runs joins its group: one SQLite
    transaction (the same sequence number), each member in its own savepoint. A member that
    raises (here, a compare-and-swap that loses to the member before it) stores nothing; the
    others commit, and no reader sees a member before the group's flushed commit."""
    staging, reader = Staging(repo, mode="sync"), Staging(repo, readonly=True)
    try:
        base = stage(staging, "refs/heads/t", "base")
        seqs, errors = {}, {}

        def second() -> None:
            try:
                with staging.transaction() as tx:  # arrives while the first's body runs: joins its group
                    seqs["second"] = tx.seq
                    tx.move("refs/heads/t", base, staged_commit(tx, base, "second"), "put")
            except CheckpointConflictError as exc:
                errors["second"] = exc

        def third() -> None:
            with staging.transaction() as tx:
                seqs["third"] = tx.seq
                tx.move("refs/heads/u", None, staged_commit(tx, None, "third"), "put")

        with staging.transaction() as tx:
            seqs["first"] = tx.seq
            first = staged_commit(tx, base, "first")
            tx.move("refs/heads/t", base, first, "put")
            threads = [threading.Thread(target=second), threading.Thread(target=third)]
            for t in threads:
                t.start()
            while staging._arrivals < 3:  # both are waiting for this body to end (white box)
                threading.Event().wait(0.001)
            assert reader.ref("refs/heads/t") == base  # not committed yet
        for t in threads:
            t.join()
        assert seqs["first"] == seqs["second"] == seqs["third"]  # one group, one commit
        assert "moved by another writer" in str(errors["second"])  # it saw the first member's move
        assert reader.ref("refs/heads/t") == first  # the first member's write, not the second's
        assert reader.ref("refs/heads/u") is not None
        assert stage(staging, "refs/heads/t", "after") != first  # the next group, a new transaction
    finally:
        staging.close()
        reader.close()


def test_bad_use_is_a_clear_error(repo, tmp_path):
    with pytest.raises(QvcError, match="durability mode"):
        Staging(repo, mode="sometimes")
    reader = Staging(repo, readonly=True)
    assert reader.ref("refs/heads/t") is None and reader.staged() == 0  # no database: nothing staged
    with pytest.raises(QvcError, match="read-only"):
        with reader.transaction():
            pass
    staging = Staging(repo)
    staging.close()
    with pytest.raises(QvcError, match="closed"):
        with staging.transaction():
            pass


def test_transactions_do_not_nest_and_a_failed_one_leaves_the_next_free(repo):
    staging = Staging(repo)
    try:
        with staging.transaction():
            with pytest.raises(QvcError, match="already open"):
                with staging.transaction():
                    pass
            with pytest.raises(QvcError, match="inside a transaction"):
                staging.publish()
        with pytest.raises(RuntimeError):
            with staging.transaction() as tx:
                tx.write("blob", b"rolled back")
                raise RuntimeError("the caller failed midway")
        assert stage(staging, "refs/heads/t", "after")  # neither the queue nor SQLite stayed locked
    finally:
        staging.close()


def test_a_rewrite_changes_the_generation_every_reader_sees(repo):
    staging, reader = Staging(repo), Staging(repo, readonly=True)
    try:
        assert staging.generation() is None
        with staging.transaction() as tx:
            token = tx.rewrite()
        assert reader.generation() == token
        with staging.transaction() as tx:
            assert tx.rewrite() != token
    finally:
        staging.close()
        reader.close()


def test_staged_reflog_lines_read_newest_first(repo):
    staging = Staging(repo)
    try:
        first = stage(staging, "refs/heads/t", "one", "put 1")
        second = stage(staging, "refs/heads/t", "two", "put 2")
        with staging.transaction() as tx:
            tx.move("refs/heads/quiet", None, first)  # no message: no reflog line
        entries = staging.reflog("refs/heads/t")
        assert [(e.old, e.new, e.message) for e in entries] == [(first, second, "put 2"), (None, first, "put 1")]
        assert staging.reflog("refs/heads/quiet") == []
        staging.publish()
        assert staging.reflog("refs/heads/t") == []  # git's file holds them now
    finally:
        staging.close()


def test_exclusive_holds_writers_back_after_publishing(repo):
    staging = Staging(repo)
    try:
        stage(staging, "refs/heads/t", "one")
        entered, done = threading.Event(), threading.Event()
        order: list[str] = []

        def writer() -> None:
            entered.wait()
            stage(staging, "refs/heads/u", "waited")
            order.append("writer")
            done.set()

        thread = threading.Thread(target=writer)
        thread.start()
        with staging.exclusive():
            assert staging.staged() == 0 and "refs/heads/t" in run_git(repo, "for-each-ref").stdout
            entered.set()
            assert not done.wait(0.3)  # held back in the queue
            stage(staging, "refs/heads/v", "mine")  # this thread still writes
            order.append("maintenance")
        thread.join(10)
        assert order == ["maintenance", "writer"]
    finally:
        staging.close()


def test_a_ref_staged_again_while_it_is_published_is_not_taken_for_another_programs_move(repo):
    """The publisher's snapshot holds a move; a writer stages the next one before the publisher
    deletes its rows: that row stays, and builds on the value published (not on git's value when
    it was first staged), so the next publication finds git's file where the chain says."""
    staging = Staging(repo)
    try:
        first = stage(staging, "refs/heads/t", "one")
        staged = []
        real = staging._append_reflog

        def meanwhile(name, lines):  # inside the publication, after its snapshot: a writer stages again
            if not staged:
                import threading as _t

                worker = _t.Thread(target=lambda: staged.append(stage(staging, "refs/heads/t", "two")))
                worker.start()
                worker.join()
            return real(name, lines)

        staging._append_reflog = meanwhile
        staging.publish()
        staging._append_reflog = real
        assert run_git(repo, "rev-parse", "refs/heads/t").stdout.strip() == first
        done = staging.publish()
        assert done.displaced == [] and done.refs == ["refs/heads/t"]
        assert run_git(repo, "rev-list", "refs/heads/t").stdout.split() == [staged[0], first]
    finally:
        staging.close()


def test_erase_leaves_no_published_byte_in_the_database_files(repo):
    """What purge relies on: a secret staged, published and then erased is in none of the
    database's files (the WAL is cut to nothing, freed pages are overwritten and vacuumed)."""
    secret = b"SECRET-5b1e-never-keep-me"
    staging = Staging(repo)
    try:
        with staging.transaction() as tx:
            blob = tx.write("blob", secret * 100)
            tree = tx.write("tree", b"100644 s\0" + blob).hex()
            body = f"tree {tree}\nauthor t <t@t> 0 +0000\ncommitter t <t@t> 0 +0000\n\nsecret\n".encode()
            tx.move("refs/heads/t", None, tx.write("commit", body).hex(), "put")
        staging.publish()
        staging.erase()
        for name in ("staging.db", "staging.db-wal"):
            path = repo / "qvc" / name
            assert not path.exists() or secret not in path.read_bytes(), name
        assert stage(staging, "refs/heads/t", "after")  # and it goes on working
    finally:
        staging.close()


def test_an_explicit_publish_waits_for_the_publisher_at_work(repo):
    import fcntl
    import os

    staging = Staging(repo, lock_wait=5)
    try:
        first = stage(staging, "refs/heads/t", "one")
        turn = os.open(repo / "qvc" / "publish.lock", os.O_RDWR | os.O_CREAT)
        fcntl.flock(turn, fcntl.LOCK_EX)  # another publisher at work
        assert staging.publish(wait=False).busy  # the background publisher's way: skip
        release = threading.Timer(0.3, lambda: os.close(turn))
        release.start()
        done = staging.publish()  # what flush, close and a git run do: wait, then publish
        release.join()
        assert not done.busy and done.refs == ["refs/heads/t"]
        assert run_git(repo, "rev-parse", "refs/heads/t").stdout.strip() == first
    finally:
        staging.close()


def test_the_branch_head_names_gets_its_reflog_lines_in_heads_too(repo):
    staging = Staging(repo)
    try:
        run_git(repo, "symbolic-ref", "HEAD", "refs/heads/t")
        stage(staging, "refs/heads/t", "one", "put one")
        stage(staging, "refs/heads/u", "other", "put other")
        staging.publish()
        assert run_git(repo, "reflog", "show", "--format=%gs", "HEAD").stdout.split("\n")[0] == "put one"
        assert "put other" not in run_git(repo, "reflog", "show", "--format=%gs", "HEAD").stdout
    finally:
        staging.close()


def test_inside_a_transaction_the_generation_is_the_one_it_began_with(repo):
    staging = Staging(repo)
    try:
        with staging.transaction() as tx:
            before = tx.rewrite()
        with staging.transaction() as tx:
            tx.rewrite()
            assert staging.generation() == before  # derived data built meanwhile is not under the new token
        assert staging.generation() != before
        assert staging.staged_refs("refs/") == {} and staging.failed is None
    finally:
        staging.close()
    with pytest.raises(StoreClosedError):
        staging.ref("refs/heads/t")


@pytest.mark.parametrize("mode", ["async", "exit"])
def test_async_flushes_the_log_within_max_lag_and_exit_at_flush(repo, monkeypatch, mode):
    """ASYNC: a commit's WAL is flushed (``fdatasync``) by the background flusher within
    ``max_lag``, never in the caller's thread; EXIT: only at ``flush()``."""
    import os
    import time

    flushed: list[tuple[str, str]] = []
    real = os.fdatasync

    def spy(fd: int) -> None:
        flushed.append((os.readlink(f"/proc/self/fd/{fd}"), threading.current_thread().name))
        real(fd)

    monkeypatch.setattr(os, "fdatasync", spy)
    staging = Staging(repo, mode=mode, max_lag=0.2)
    try:
        stage(staging, "refs/heads/t", "one")
        wal = str(repo / "qvc" / "staging.db-wal")
        if mode == "async":
            deadline = time.monotonic() + 5
            while not any(path == wal for path, _ in flushed) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert [t for path, t in flushed if path == wal] and all(
                t != "MainThread" for path, t in flushed if path == wal)
        else:
            time.sleep(0.3)
            assert not [p for p, _ in flushed if p == wal]
            staging.flush()
            assert [t for p, t in flushed if p == wal] == ["MainThread"]
    finally:
        staging.close()


def test_a_first_write_waits_while_another_process_makes_the_database(repo):
    """Writers of processes started together: one creates the database, and a second one's
    switch to WAL meets it holding its first write lock. SQLite then answers "database is
    locked" at once, without its busy handler (waiting could deadlock it); the writer waits
    and tries again, as for any lock, instead of failing the put (seen 1 in 90 first puts)."""
    db_path = repo / DB
    db_path.parent.mkdir(parents=True, exist_ok=True)
    other = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)  # not yet in WAL mode ...
    other.execute("CREATE TABLE made_first (x)")
    other.execute("BEGIN IMMEDIATE")  # ... whose maker holds the write lock for a moment
    other.execute("INSERT INTO made_first VALUES (1)")
    threading.Timer(0.3, other.commit).start()
    staging = Staging(repo)
    try:
        first = stage(staging, "refs/heads/t", "one")
        assert staging.ref("refs/heads/t") == first
    finally:
        staging.close()
        other.close()
