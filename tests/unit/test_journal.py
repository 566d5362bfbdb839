"""qvc.plumbing.journal, the reader of the journal-and-leases release's journals: record framing,
torn and corrupt tails, and orphan claims, on real files written the way that release wrote them.

That release's writer is gone; these tests write journals with a small writer of their own
(:func:`_journal_bytes`), checked byte for byte against a journal that release left
(tests/fixtures/old_release/dead-writer.tar.gz), and hold them with real processes.
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import struct
import subprocess
import sys
import tarfile
import zlib
from pathlib import Path

import msgpack
from helpers import child_env, examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qvc.plumbing.journal import MAGIC, SUFFIX, Record, claim_orphans, read_records

HEX = st.text(alphabet="0123456789abcdef", min_size=40, max_size=40)
OLD_RELEASE = Path(__file__).resolve().parents[1] / "fixtures" / "old_release"


# -- the old release's journal format, written here -----------------------------------------


def _payload(record: Record) -> bytes:
    """A record as the old release encoded it."""
    return msgpack.packb({"o": [[t, d] for t, d in record.objects], "r": [list(r) for r in record.refs],
                          "b": record.base, "s": record.seen}, use_bin_type=True)


def _frame(payload: bytes) -> bytes:
    return struct.pack("<II", len(payload), zlib.crc32(payload)) + payload


def _journal_bytes(records) -> bytes:
    return MAGIC + b"".join(_frame(_payload(r)) for r in records)


def _write_journal(path, records) -> list[int]:
    """Write a journal of ``records`` at ``path``; the file's size after each record."""
    ends, size = [], len(MAGIC)
    for r in records:
        size += len(_frame(_payload(r)))
        ends.append(size)
    Path(path).write_bytes(_journal_bytes(records))
    return ends


def _records(n: int) -> list[Record]:
    return [
        Record(objects=[("blob", b"data %d" % i + bytes(range(256)) * (i % 3)), ("tree", b"")],
               refs=[(f"refs/heads/t{i}", None if i == 0 else f"{i - 1:040x}", f"{i:040x}")],
               base=i % 2 == 0, seen={f"refs/heads/t{i}": [[1000 + i, 2000 + i], f"tok{i}", i]})
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


def test_the_test_writer_writes_a_journal_as_the_old_release_did(tmp_path):
    """The journal a killed writer of the old release left (its fixture): read, then written
    again by this file's writer, it comes out byte for byte the same."""
    with tarfile.open(OLD_RELEASE / "dead-writer.tar.gz") as tar:
        members = [m for m in tar.getmembers() if m.name.startswith("repo.qvc/qvc/journal/") and m.isfile()]
        assert len(members) == 1, [m.name for m in members]
        data = tar.extractfile(members[0]).read()
    assert re.fullmatch(r"\d+-[0-9a-f]{12}" + re.escape(SUFFIX), os.path.basename(members[0].name))
    path = tmp_path / "old.wal"
    path.write_bytes(data)
    records = list(read_records(str(path)))
    assert len(records) == 6  # make.py's five puts, after the record the open store began with
    assert all(r.refs for r in records) and any(r.objects for r in records)
    assert records[-1].refs[0][0] == "refs/heads/fresh"
    assert _journal_bytes(records) == data


# -- records -------------------------------------------------------------------------------


def test_a_record_reads_back_with_its_objects_refs_base_and_seen(tmp_path):
    record = Record(
        objects=[("blob", b"\x00\xff binary \n"), ("tree", b""), ("commit", b"tree " + b"a" * 40 + b"\n")],
        refs=[("refs/heads/a", None, "ab" * 20), ("refs/heads/b", "cd" * 20, None), ("refs/x", "ef" * 20, "01" * 20)],
        base=True,
        seen={"refs/heads/a": [[123, 456789], "token", 7], "refs/heads/b": [None, "token"],
              "qvc/generation": [None, "abc123"]},
    )
    path = tmp_path / "j.wal"
    _write_journal(path, [record])
    [back] = read_records(str(path))
    assert back == record
    assert back.objects[0] == ("blob", b"\x00\xff binary \n") and isinstance(back.objects[0][1], bytes)
    assert back.refs[1] == ("refs/heads/b", "cd" * 20, None)
    assert back.base is True
    assert back.seen["refs/heads/b"] == [None, "token"]  # written before lease serials: two items
    assert back.seen["qvc/generation"] == [None, "abc123"]


def test_an_empty_record_reads_back_empty_and_without_bookkeeping(tmp_path):
    path = tmp_path / "j.wal"
    _write_journal(path, [Record(), Record(objects=[("blob", b"x")])])
    empty, one = read_records(str(path))
    assert empty == Record()
    assert one.objects == [("blob", b"x")]
    assert one.stored == 0 and one.oids == []  # in-memory bookkeeping: never in a journal


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(objects=st.lists(st.tuples(st.sampled_from(["blob", "tree", "commit"]), st.binary(max_size=300)), max_size=6),
       refs=st.lists(st.tuples(st.text(min_size=1, max_size=30), st.none() | HEX, st.none() | HEX), max_size=5),
       base=st.booleans(),
       seen=st.dictionaries(st.text(max_size=20),
                            st.tuples(st.none() | st.tuples(st.integers(0, 2**63), st.integers(0, 2**63)),
                                      st.none() | st.text(max_size=16)).map(lambda t: [list(t[0]) if t[0] else None,
                                                                                       t[1]]),
                            max_size=4),
       copies=st.integers(1, 3))
def test_records_the_old_release_wrote_read_back_equal_property(tmp_path_factory, objects, refs, base, seen, copies):
    record = Record(objects, refs, base, seen)
    path = tmp_path_factory.mktemp("j") / "j.wal"
    _write_journal(path, [record] * copies)
    assert list(read_records(str(path))) == [record] * copies


def test_records_are_read_in_the_order_they_were_written(tmp_path):
    path = tmp_path / "j.wal"
    records = _records(5)
    ends = _write_journal(path, records)
    assert ends[-1] == os.path.getsize(path)
    with open(path, "rb") as f:
        assert f.read(len(MAGIC)) == MAGIC
    assert list(read_records(str(path))) == records
    path.write_bytes(MAGIC)  # a journal just created: no record yet
    assert list(read_records(str(path))) == []


# -- torn and corrupt tails ----------------------------------------------------------------


def test_a_truncated_last_record_is_ignored_and_earlier_ones_survive(tmp_path):
    records = _records(3)
    path = tmp_path / "j.wal"
    ends = _write_journal(path, records)
    whole = path.read_bytes()
    assert len(whole) == ends[-1]
    for cut in range(ends[1], ends[2]):  # every length inside the last frame, header included
        path.write_bytes(whole[:cut])
        assert list(read_records(str(path))) == records[:2], cut
    for cut in range(len(MAGIC), ends[0]):
        path.write_bytes(whole[:cut])
        assert list(read_records(str(path))) == [], cut


def test_a_flipped_byte_fails_the_crc_and_stops_reading_there(tmp_path):
    records = _records(3)
    path = tmp_path / "j.wal"
    ends = _write_journal(path, records)
    whole = path.read_bytes()

    def flipped(at: int) -> list[Record]:
        data = bytearray(whole)
        data[at] ^= 0x40
        path.write_bytes(bytes(data))
        return list(read_records(str(path)))

    assert flipped(ends[2] - 1) == records[:2]  # in the last payload
    assert flipped(ends[1] + 5) == records[:2]  # in the last frame's CRC field
    assert flipped(ends[0] + 20) == records[:1]  # in the middle record: the rest is not trusted
    assert flipped(0) == []  # the magic: not a journal


def test_garbage_after_the_records_is_ignored(tmp_path):
    records = _records(2)
    path = tmp_path / "j.wal"
    _write_journal(path, records)
    with open(path, "ab") as f:
        f.write(b"\xff\xff\xff\x7f" + b"\x00" * 4 + b"short")  # a frame claiming 2 GiB
    assert list(read_records(str(path))) == records
    # a frame whose CRC matches but whose payload is no record: also a stop, not an error
    path2 = tmp_path / "j2.wal"
    _write_journal(path2, records)
    with open(path2, "ab") as f:
        f.write(_frame(msgpack.packb([1, 2, 3])) * 2)
    assert list(read_records(str(path2))) == records


def test_a_file_without_the_magic_has_no_records(tmp_path):
    path = tmp_path / "x.wal"
    path.write_bytes(b"not a journal at all")
    assert list(read_records(str(path))) == []
    path.write_bytes(b"")
    assert list(read_records(str(path))) == []


# -- owners and orphans ------------------------------------------------------------------------

# A store of the old release: creates its journal locked under another name, renames it into
# place, holds the exclusive flock while open; "close" removes it as a clean close did.
_OWNER = r"""
import fcntl, os, sys
directory, data = sys.argv[1], bytes.fromhex(sys.argv[2])
path = os.path.join(directory, "%d-%s.wal" % (os.getpid(), os.urandom(6).hex()))
fd = os.open(path + ".new", os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_APPEND | os.O_CLOEXEC, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
os.write(fd, data)
os.fdatasync(fd)
os.rename(path + ".new", path)
print(path, flush=True)
if sys.stdin.readline().strip() == "close":
    os.unlink(path)
    os.close(fd)
    print("closed", flush=True)
"""


def _child_record(tag: str) -> Record:
    return Record(refs=[("refs/heads/child", None, tag * 40)])


def _spawn(directory: str, tag: str) -> tuple[subprocess.Popen, str]:
    """An old-release store owning a journal in ``directory`` that holds one record."""
    proc = subprocess.Popen([sys.executable, "-c", _OWNER, directory, _journal_bytes([_child_record(tag)]).hex()],
                            env=child_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    path = proc.stdout.readline().strip()
    assert path, f"owner {tag} did not start (rc {proc.poll()})"
    return proc, path


def _end(*procs: subprocess.Popen) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        for stream in (proc.stdin, proc.stdout):
            if stream is not None and not stream.closed:
                stream.close()


def _release(claimed) -> None:
    for _, fd in claimed:
        os.close(fd)


def test_claim_orphans_ignores_other_files_and_a_missing_directory(tmp_path):
    assert claim_orphans(str(tmp_path / "nowhere")) == []
    directory = tmp_path / "j"
    directory.mkdir()
    (directory / "notes.txt").write_bytes(b"x")
    (directory / f"123-abc{SUFFIX}.new").write_bytes(MAGIC)  # a journal whose creator died before the rename
    assert claim_orphans(str(directory)) == []


def test_a_journal_nobody_holds_is_an_orphan_and_the_claim_holds_its_lock(tmp_path):
    directory = tmp_path / "j"
    directory.mkdir()
    path = str(directory / f"99999-0123456789ab{SUFFIX}")
    records = _records(2)
    _write_journal(path, records)
    claimed = claim_orphans(str(directory))
    try:
        assert [p for p, _ in claimed] == [path]
        assert list(read_records(path)) == records
        assert not _can_lock(path)  # the returned fd holds the lock
        assert claim_orphans(str(directory)) == []  # so a second claim does not take it
    finally:
        _release(claimed)
    assert _can_lock(path)  # closing the claim's fd released it


def test_an_owned_journal_is_locked_and_not_claimed(tmp_path):
    directory = str(tmp_path / "j")
    os.makedirs(directory)
    owner, path = _spawn(directory, "o")
    try:
        assert not _can_lock(path)
        assert claim_orphans(directory) == []
        assert list(read_records(path)) == [_child_record("o")]  # readable while owned
    finally:
        _end(owner)


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
            _release(claimed)
        assert _can_lock(dead_path)  # closing the claim's fd released it
        alive.stdin.write("close\n")
        alive.stdin.flush()
        assert alive.stdout.readline().strip() == "closed"
        assert alive.wait(timeout=30) == 0
        assert not os.path.exists(alive_path)  # closed cleanly: there is nothing to claim
        again = claim_orphans(directory)
        try:
            assert [p for p, _ in again] == [dead_path]
        finally:
            _release(again)
    finally:
        _end(dead, alive)


def test_a_journal_left_by_a_process_that_exited_without_closing_is_an_orphan(tmp_path):
    directory = str(tmp_path / "j")
    os.makedirs(directory)
    proc, path = _spawn(directory, "e")
    try:
        proc.stdin.write("exit\n")  # not "close": the process ends with its journal still on disk
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
        claimed = claim_orphans(directory)
        try:
            assert [p for p, _ in claimed] == [path]
            assert list(read_records(path)) == [_child_record("e")]
        finally:
            _release(claimed)
    finally:
        _end(proc)


_LOOKER = r"""
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_SH)
print("looking", flush=True)
sys.stdin.readline()
time.sleep(0.2)  # still looking for a moment after being told to go: claim_orphans waits for it
"""


def test_a_process_only_looking_at_a_dead_journal_is_not_taken_for_its_owner(tmp_path):
    """A shared flock (another process testing whether the owner lives) is waited for, not
    taken for an owner: the journal is claimed once the looker lets go. One that keeps looking
    past the wait leaves the journal unclaimed for now, never taken from under it."""
    directory = str(tmp_path / "j")
    os.makedirs(directory)
    owner, path = _spawn(directory, "l")
    owner.send_signal(signal.SIGKILL)
    owner.wait(timeout=30)
    looker = subprocess.Popen([sys.executable, "-c", _LOOKER, path], env=child_env(), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert looker.stdout.readline().strip() == "looking"
        assert not _can_lock(path)
        assert claim_orphans(directory) == []  # looking past LOOKER_WAIT: left for a later claim
        looker.stdin.write("\n")  # lets go while claim_orphans waits for it
        looker.stdin.flush()
        claimed = claim_orphans(directory)
        try:
            assert [p for p, _ in claimed] == [path]
        finally:
            _release(claimed)
        assert looker.wait(timeout=30) == 0
    finally:
        _end(owner, looker)
