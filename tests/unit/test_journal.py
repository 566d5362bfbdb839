"""qvc.plumbing.journal: record framing, torn tails, durability, locking and orphan claims, on real files."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import threading
import zlib

import msgpack
import pytest
from helpers import child_env, examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qvc.plumbing.journal import MAGIC, SUFFIX, Journal, Record, claim_orphans, read_records

HEX = st.text(alphabet="0123456789abcdef", min_size=40, max_size=40)


def _records(n: int) -> list[Record]:
    return [
        Record(objects=[("blob", b"data %d" % i + bytes(range(256)) * (i % 3)), ("tree", b"")],
               refs=[(f"refs/heads/t{i}", None if i == 0 else f"{i - 1:040x}", f"{i:040x}")],
               base=i % 2 == 0, seen={f"refs/heads/t{i}": [[1000 + i, 2000 + i], f"tok{i}"]})
        for i in range(n)
    ]


def _can_lock(path) -> bool:
    """Whether a new open file description can take the exclusive flock of ``path`` right now."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    finally:
        os.close(fd)


# -- Record ------------------------------------------------------------------------------


def test_record_round_trip_keeps_objects_refs_base_and_seen():
    record = Record(
        objects=[("blob", b"\x00\xff binary \n"), ("tree", b""), ("commit", b"tree " + b"a" * 40 + b"\n")],
        refs=[("refs/heads/a", None, "ab" * 20), ("refs/heads/b", "cd" * 20, None), ("refs/x", "ef" * 20, "01" * 20)],
        base=True,
        seen={"refs/heads/a": [[123, 456789], "token"], "qvc/generation": [None, "abc123"]},
    )
    back = Record.decode(record.encode())
    assert back == record
    assert back.objects[0] == ("blob", b"\x00\xff binary \n") and isinstance(back.objects[0][1], bytes)
    assert back.refs[1] == ("refs/heads/b", "cd" * 20, None)
    assert back.base is True
    assert back.seen["qvc/generation"] == [None, "abc123"]


def test_empty_record_round_trips_and_bookkeeping_fields_are_not_encoded():
    assert Record.decode(Record().encode()) == Record()
    record = Record(objects=[("blob", b"x")], stored=1, oids=[b"\x01" * 20])
    back = Record.decode(record.encode())
    assert back.objects == record.objects
    assert back.stored == 0 and back.oids == []  # in-memory bookkeeping only


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(objects=st.lists(st.tuples(st.sampled_from(["blob", "tree", "commit"]), st.binary(max_size=300)), max_size=6),
       refs=st.lists(st.tuples(st.text(min_size=1, max_size=30), st.none() | HEX, st.none() | HEX), max_size=5),
       base=st.booleans(),
       seen=st.dictionaries(st.text(max_size=20),
                            st.tuples(st.none() | st.tuples(st.integers(0, 2**63), st.integers(0, 2**63)),
                                      st.none() | st.text(max_size=16)).map(lambda t: [list(t[0]) if t[0] else None,
                                                                                       t[1]]),
                            max_size=4))
def test_record_round_trip_property(objects, refs, base, seen):
    record = Record(objects, refs, base, seen)
    assert Record.decode(record.encode()) == record


# -- appending and reading ---------------------------------------------------------------


def test_journal_appends_records_in_order_and_reads_them_back(tmp_path):
    directory = tmp_path / "journal"
    journal = Journal(str(directory))
    try:
        name = os.path.basename(journal.path)
        assert os.path.dirname(journal.path) == str(directory)
        assert name.startswith(f"{os.getpid()}-") and name.endswith(SUFFIX)
        assert os.listdir(directory) == [name]  # the locked-under-another-name temp file is gone
        assert list(read_records(journal.path)) == []
        records = _records(5)
        seqs = [journal.append(r) for r in records]
        assert seqs == [1, 2, 3, 4, 5]
        assert journal.appended == 5
        assert journal.size == os.path.getsize(journal.path)
        with open(journal.path, "rb") as f:
            assert f.read(len(MAGIC)) == MAGIC
        assert list(read_records(journal.path)) == records
    finally:
        journal.close(remove=True)


def test_appended_records_are_visible_to_another_handle_before_and_after_sync(tmp_path):
    journal = Journal(str(tmp_path / "j"))
    try:
        first, second = _records(2)
        journal.append(first)
        # One write() per record: another reader sees it at once, even before the flush.
        assert list(read_records(journal.path)) == [first]
        assert journal.durable == 0
        seq = journal.append(second)
        assert journal.sync() is None
        assert journal.durable == journal.appended == seq == 2
        with open(journal.path, "rb") as other:  # an independent handle on the file
            data = other.read()
        assert len(data) == journal.size
        assert data.startswith(MAGIC)
        assert list(read_records(journal.path)) == [first, second]
        journal.sync()  # nothing new: returns at once
        assert journal.durable == 2
    finally:
        journal.close(remove=True)


def test_sync_upto_covers_at_least_the_requested_record(tmp_path):
    journal = Journal(str(tmp_path / "j"))
    try:
        for r in _records(3):
            journal.append(r)
        journal.sync(2)
        assert journal.durable >= 2
        journal.sync()
        assert journal.durable == 3
    finally:
        journal.close(remove=True)


def test_one_flush_covers_every_record_appended_before_it(tmp_path):
    """Group commit: a sync for the first record makes the two appended after it durable too,
    so their own syncs return without another flush."""
    journal = Journal(str(tmp_path / "j"))
    try:
        seqs = [journal.append(r) for r in _records(3)]
        journal.sync(seqs[0])
        assert journal.durable == 3
        journal.sync(seqs[2])  # nothing left to flush
        assert journal.durable == 3
    finally:
        journal.close(remove=True)


_SHARED_FLUSHES = """
import sys, threading
from qvc.plumbing.journal import Journal, Record
journal = Journal(sys.argv[1])
barrier = threading.Barrier(8)
def worker(t):
    barrier.wait()
    for i in range(40):
        seq = journal.append(Record(refs=[("refs/heads/w%d" % t, None, "%040x" % i)]))
        journal.sync(seq)
        assert journal.durable >= seq
threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
for th in threads:
    th.start()
for th in threads:
    th.join()
assert journal.durable == journal.appended == 320
journal.close(remove=True)
print("OK")
"""


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_eight_threads_share_flushes(tmp_path):
    """Eight threads of one process appending and syncing at once (a real process, its
    ``fdatasync`` calls counted by ``strace``): every sync returns with its record durable,
    and the flushes number fewer than the syncs, since a flush covers every record appended
    before it started and the threads that appended meanwhile share the next one."""
    log = tmp_path / "strace.log"
    proc = subprocess.run(["strace", "-f", "-qq", "-e", "trace=fdatasync", "-o", str(log), sys.executable, "-c",
                           _SHARED_FLUSHES, str(tmp_path / "j")], env=child_env(), capture_output=True, text=True,
                          timeout=120)
    if proc.returncode != 0 and "ptrace" in proc.stderr:
        pytest.skip(f"strace cannot trace here: {proc.stderr.strip()[:200]}")
    assert proc.returncode == 0 and proc.stdout.strip() == "OK", proc.stderr[-2000:]
    journal_flushes = [line for line in log.read_text().splitlines()
                       if "fdatasync(" in line and "= 0" in line]
    assert 0 < len(journal_flushes) < 320, f"{len(journal_flushes)} flushes for 320 syncs"


def test_sync_without_fsync_still_advances_durable(tmp_path):
    journal = Journal(str(tmp_path / "j"), fsync=False)
    try:
        journal.append(Record())
        journal.sync()
        assert journal.durable == 1
    finally:
        journal.close(remove=True)


def test_concurrent_appends_and_syncs_never_interleave_frames(tmp_path):
    journal = Journal(str(tmp_path / "j"))
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            for i in range(25):
                seq = journal.append(Record(refs=[(f"refs/heads/w{t}", None, f"{i:040x}")]))
                journal.sync(seq)
                assert journal.durable >= seq
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    try:
        assert errors == []
        records = list(read_records(journal.path))
        assert len(records) == 200 and journal.appended == 200
        for t in range(8):
            mine = [int(r.refs[0][2], 16) for r in records if r.refs[0][0] == f"refs/heads/w{t}"]
            assert mine == list(range(25))  # each thread's records in its order
    finally:
        journal.close(remove=True)


# -- torn and corrupt tails ----------------------------------------------------------------


def _journal_with(tmp_path, records) -> tuple[str, list[int]]:
    """A closed (kept) journal holding ``records``, and the file size after each record."""
    journal = Journal(str(tmp_path / "j"))
    ends = []
    for r in records:
        journal.append(r)
        ends.append(journal.size)
    journal.sync()
    journal.close(remove=False)
    return journal.path, ends


def test_a_truncated_last_record_is_ignored_and_earlier_ones_survive(tmp_path):
    records = _records(3)
    path, ends = _journal_with(tmp_path, records)
    with open(path, "rb") as f:
        whole = f.read()
    assert len(whole) == ends[-1]
    for cut in range(ends[1], ends[2]):  # every length inside the last frame, header included
        with open(path, "wb") as f:
            f.write(whole[:cut])
        assert list(read_records(path)) == records[:2], cut
    for cut in range(len(MAGIC), ends[0]):
        with open(path, "wb") as f:
            f.write(whole[:cut])
        assert list(read_records(path)) == [], cut


def test_a_flipped_byte_fails_the_crc_and_stops_reading_there(tmp_path):
    records = _records(3)
    path, ends = _journal_with(tmp_path, records)
    with open(path, "rb") as f:
        whole = f.read()

    def flipped(at: int) -> list[Record]:
        data = bytearray(whole)
        data[at] ^= 0x40
        with open(path, "wb") as f:
            f.write(bytes(data))
        return list(read_records(path))

    assert flipped(ends[2] - 1) == records[:2]  # in the last payload
    assert flipped(ends[1] + 5) == records[:2]  # in the last frame's CRC field
    assert flipped(ends[0] + 20) == records[:1]  # in the middle record: the rest is not trusted
    assert flipped(0) == []  # the magic: not a journal


def test_garbage_after_the_records_is_ignored(tmp_path):
    records = _records(2)
    path, _ = _journal_with(tmp_path, records)
    with open(path, "ab") as f:
        f.write(b"\xff\xff\xff\x7f" + b"\x00" * 4 + b"short")  # a frame claiming 2 GiB
    assert list(read_records(path)) == records
    # a frame whose CRC matches but whose payload is no record: also a stop, not an error
    payload = msgpack.packb([1, 2, 3])
    path2, _ = _journal_with(tmp_path / "b", records)
    with open(path2, "ab") as f:
        f.write(len(payload).to_bytes(4, "little") + zlib.crc32(payload).to_bytes(4, "little") + payload)
        f.write(len(payload).to_bytes(4, "little") + zlib.crc32(payload).to_bytes(4, "little") + payload)
    assert list(read_records(path2)) == records


def test_a_file_without_the_magic_has_no_records(tmp_path):
    path = tmp_path / "x.wal"
    path.write_bytes(b"not a journal at all")
    assert list(read_records(str(path))) == []
    path.write_bytes(b"")
    assert list(read_records(str(path))) == []


# -- restart and close -----------------------------------------------------------------------


def test_restart_keeps_only_the_base_and_later_appends_follow_it(tmp_path):
    journal = Journal(str(tmp_path / "j"))
    try:
        for r in _records(4):
            journal.append(r)
        base = Record(refs=[("refs/heads/t", None, "ab" * 20)], base=True)
        journal.restart(base)
        assert list(read_records(journal.path)) == [base]
        assert journal.size == os.path.getsize(journal.path)
        assert journal.durable == journal.appended
        later = Record(objects=[("blob", b"after")])
        seq = journal.append(later)
        assert seq == 5  # sequence numbers go on
        journal.sync(seq)
        assert list(read_records(journal.path)) == [base, later]
        assert journal.size == os.path.getsize(journal.path)
        journal.restart(Record(base=True))
        assert list(read_records(journal.path)) == [Record(base=True)]
    finally:
        journal.close(remove=True)


def test_close_remove_deletes_the_file_and_is_idempotent(tmp_path):
    journal = Journal(str(tmp_path / "j"))
    journal.append(Record())
    path = journal.path
    journal.close(remove=True)
    assert not os.path.exists(path)
    journal.close(remove=True)  # a second close is a no-op
    journal.close(remove=False)
    assert os.listdir(tmp_path / "j") == []


def test_close_keep_leaves_the_records_and_releases_the_lock(tmp_path):
    directory = str(tmp_path / "j")
    journal = Journal(directory)
    records = _records(2)
    for r in records:
        journal.append(r)
    journal.sync()
    assert not _can_lock(journal.path)
    journal.close(remove=False)
    assert os.path.exists(journal.path)
    assert list(read_records(journal.path)) == records
    assert _can_lock(journal.path)
    claimed = claim_orphans(directory)
    try:
        assert [p for p, _ in claimed] == [journal.path]  # an unlocked journal is an orphan
    finally:
        for _, fd in claimed:
            os.close(fd)


# -- locks and orphans -----------------------------------------------------------------------


def test_an_open_journal_is_locked_and_not_claimed(tmp_path):
    directory = str(tmp_path / "j")
    journal = Journal(directory)
    try:
        assert not _can_lock(journal.path)
        assert claim_orphans(directory) == []
    finally:
        journal.close(remove=True)


def test_claim_orphans_ignores_other_files_and_a_missing_directory(tmp_path):
    assert claim_orphans(str(tmp_path / "nowhere")) == []
    directory = tmp_path / "j"
    directory.mkdir()
    (directory / "notes.txt").write_bytes(b"x")
    (directory / f"123-abc{SUFFIX}.new").write_bytes(MAGIC)  # a journal whose creator died before the rename
    assert claim_orphans(str(directory)) == []


_CHILD = r"""
import sys
from qvc.plumbing.journal import Journal, Record
journal = Journal(sys.argv[1])
journal.append(Record(refs=[("refs/heads/child", None, sys.argv[2] * 40)]))
journal.sync()
print(journal.path, flush=True)
if sys.stdin.readline().strip() == "close":
    journal.close(remove=True)
    print("closed", flush=True)
"""


def _spawn(directory: str, tag: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, directory, tag], env=child_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    path = proc.stdout.readline().strip()
    assert path, f"child {tag} did not start (rc {proc.poll()})"
    return proc, path


def test_claim_orphans_takes_only_journals_whose_owner_is_gone(tmp_path):
    directory = str(tmp_path / "j")
    os.makedirs(directory)
    dead, dead_path = _spawn(directory, "d")
    alive, alive_path = _spawn(directory, "a")
    try:
        assert claim_orphans(directory) == []  # both owners alive: nothing to claim
        dead.send_signal(signal.SIGKILL)
        dead.wait(timeout=30)
        claimed = claim_orphans(directory)
        try:
            assert [p for p, _ in claimed] == [dead_path]
            assert [r.refs for r in read_records(dead_path)] == [[("refs/heads/child", None, "d" * 40)]]
            # the returned fd holds the lock: nobody else (not even another claim) takes it meanwhile
            assert not _can_lock(dead_path)
            assert claim_orphans(directory) == []
            assert not _can_lock(alive_path)  # still its live owner's
        finally:
            for _, fd in claimed:
                os.close(fd)
        assert _can_lock(dead_path)  # closing the claim's fd released it
        alive.stdin.write("close\n")
        alive.stdin.flush()
        assert alive.stdout.readline().strip() == "closed"
        assert alive.wait(timeout=30) == 0
        assert not os.path.exists(alive_path)  # closed with remove: there is nothing to claim
        again = claim_orphans(directory)
        try:
            assert [p for p, _ in again] == [dead_path]
        finally:
            for _, fd in again:
                os.close(fd)
    finally:
        for proc in (dead, alive):
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
            proc.stdin.close()
            proc.stdout.close()


def test_a_journal_left_by_a_process_that_exited_without_closing_is_an_orphan(tmp_path):
    directory = str(tmp_path / "j")
    os.makedirs(directory)
    proc, path = _spawn(directory, "e")
    proc.stdin.write("exit\n")  # not "close": the process ends with its journal still on disk
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0
    proc.stdout.close()
    claimed = claim_orphans(directory)
    try:
        assert [p for p, _ in claimed] == [path]
        assert len(list(read_records(path))) == 1
    finally:
        for _, fd in claimed:
            os.close(fd)


@pytest.mark.parametrize("fsync", [True, False])
def test_journal_directory_is_created(tmp_path, fsync):
    directory = tmp_path / "a" / "b"
    journal = Journal(str(directory), fsync=fsync)
    try:
        assert directory.is_dir() and os.path.exists(journal.path)
    finally:
        journal.close(remove=True)
