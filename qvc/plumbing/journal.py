"""The journals of the journal-and-leases release: read to migrate its repositories.

That release appended every change, as one record, to a journal file owned by the open store
(``qvc/journal/<pid>-<random>.wal``, held with an exclusive ``flock`` while the store was
open), and made it durable by flushing the journal. Today's write path
(:mod:`qvc.plumbing.staging`) keeps no journal; a repository that release left with a journal
whose owner died is replayed on open (:mod:`qvc.plumbing.recovery`). Records are framed with a
length and a CRC32, so a torn tail is ignored.
"""

from __future__ import annotations

import os
import struct
import time
import zlib
from typing import Iterator

import msgpack

from qvc.plumbing.locking import try_flock, unlock
from qvc.plumbing.transaction import GENERATION, Record

__all__ = ["GENERATION", "MAGIC", "SUFFIX", "Record", "claim_orphans", "read_records"]

MAGIC = b"QVCJ1\n"
_FRAME = struct.Struct("<II")
SUFFIX = ".wal"


def _decode(payload: bytes) -> Record:
    obj = msgpack.unpackb(payload, raw=False)
    return Record([(t, d) for t, d in obj["o"]], [(n, o, w) for n, o, w in obj["r"]], bool(obj.get("b")),
                  dict(obj.get("s") or {}))


def read_records(path: str) -> Iterator[Record]:
    """The records of a journal file, stopping silently at a torn or corrupt tail."""
    with open(path, "rb") as f:
        data = f.read()
    if not data.startswith(MAGIC):
        return
    pos = len(MAGIC)
    while pos + _FRAME.size <= len(data):
        length, crc = _FRAME.unpack_from(data, pos)
        payload = data[pos + _FRAME.size : pos + _FRAME.size + length]
        if len(payload) != length or zlib.crc32(payload) != crc:
            return
        try:
            yield _decode(payload)
        except Exception:  # a checksummed record we cannot parse: stop, as for a torn tail
            return
        pos += _FRAME.size + length


#: how long :func:`claim_orphans` waits for processes that only look at a dead journal (a
#: shared ``flock`` held for a moment, as :func:`qvc.plumbing.locking.flocked` takes it)
LOOKER_WAIT = 2.0


def _take(fd: int) -> bool:
    """Lock a journal exclusively; ``False`` if another process holds it so (its owner). Holders
    of a shared lock (a reader of another process testing whether the owner lives) are only
    looking: waited for, up to :data:`LOOKER_WAIT`, not taken for an owner."""
    deadline = time.monotonic() + LOOKER_WAIT
    delay = 0.0005
    while not try_flock(fd):
        if not try_flock(fd, shared=True) or time.monotonic() > deadline:
            return False
        unlock(fd)
        time.sleep(delay)
        delay = min(delay * 2, 0.02)
    return True


def claim_orphans(directory: str) -> list[tuple[str, int]]:
    """Journals whose owner is gone, each with an open fd holding its lock (close it when done)."""
    found = []
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return found
    for name in names:
        if not name.endswith(SUFFIX):
            continue
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        if not _take(fd):
            os.close(fd)  # a live store owns it
            continue
        if not os.path.exists(path):  # its owner closed and removed it while we opened it
            os.close(fd)
            continue
        found.append((path, fd))
    return found
