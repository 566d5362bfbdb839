"""qvc's write-ahead journal: how a put becomes durable with one flush.

Every change qvc makes to the object store and refs is also appended, as one record, to a
journal file owned by the open store (``qvc/journal/<pid>-<random>.wal``, held with an
exclusive ``flock`` while the store is open). Git files are written without fsync; durability
comes from flushing the journal (``fdatasync``), which costs one disk flush no matter how many
objects a checkpoint creates. When the journal grows past a limit, and when the store closes,
the git files are hardened with ``syncfs`` and the journal starts over.

A journal whose owner died (its ``flock`` can be taken) is replayed on the next open, see
:mod:`qvc.plumbing.recovery`. Records are framed with a length and a CRC32, so a torn tail is ignored.
"""

from __future__ import annotations

import errno
import os
import struct
import sys
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Iterator

import msgpack

from qvc.plumbing.locking import try_flock, unlock

MAGIC = b"QVCJ1\n"
GENERATION = "qvc/generation"  # replaced whenever history is deleted or rewritten (see Repository)
_FALLOC_FL_KEEP_SIZE = 1


def _libc_fallocate():
    """libc's ``fallocate`` (Linux), or ``None`` where there is none."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = libc.fallocate
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    fn.restype = ctypes.c_int
    return fn


_fallocate = _libc_fallocate() if sys.platform.startswith("linux") else None
_FRAME = struct.Struct("<II")
SUFFIX = ".wal"


@dataclass
class Record:
    """One atomic change: objects written (type name, data) and refs moved (name, old, new)."""

    objects: list[tuple[str, bytes]] = field(default_factory=list)
    refs: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    base: bool = False  # a snapshot of ref values taken right after hardening
    #: ref name -> [identity (inode, mtime ns) of the ref's file, token in ``qvc/generation``,
    #: lease serial] just before the move (the serial only for a move under a lease, see
    #: :mod:`qvc.plumbing.leases`; records written before serials have two items); recovery
    #: uses it to tell a lost rename from a later writer's change. A delete also notes the
    #: token it is about to write, under ``qvc/generation``.
    seen: dict[str, list] = field(default_factory=dict)
    stored: int = field(default=0, compare=False)  # how many of ``objects`` are in the object store
    oids: list[bytes] = field(default_factory=list, compare=False)  # ids of ``objects``, when known

    def size_hint(self, more_refs: int = 0) -> int:
        """An upper bound of the bytes :meth:`Journal.append` writes for this record with
        ``more_refs`` more ref moves (and their ``seen`` entries), without encoding it."""
        objects = sum(len(d) + 16 for _, d in self.objects)
        refs = sum(len(n) + 100 for n, _, _ in self.refs) + more_refs * 400
        seen = sum(len(n) + 200 for n in self.seen)
        return _FRAME.size + 64 + objects + refs + seen

    def encode(self) -> bytes:
        return msgpack.packb(
            {"o": [[t, d] for t, d in self.objects], "r": [list(r) for r in self.refs], "b": self.base,
             "s": self.seen},
            use_bin_type=True,
        )

    @classmethod
    def decode(cls, payload: bytes) -> Record:
        obj = msgpack.unpackb(payload, raw=False)
        return cls([(t, d) for t, d in obj["o"]], [(n, o, w) for n, o, w in obj["r"]], bool(obj.get("b")),
                   dict(obj.get("s") or {}))


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Journal:
    """An append-only, group-committed journal file (thread-safe)."""

    def __init__(self, directory: str, *, fsync: bool = True):
        os.makedirs(directory, exist_ok=True)
        self.directory = directory
        self.path = os.path.join(directory, f"{os.getpid()}-{os.urandom(6).hex()}{SUFFIX}")
        self._fsync = fsync
        # Created and locked under another name, then renamed: a journal is never seen unlocked,
        # so another process's recovery cannot take a starting store's journal for an orphan.
        tmp = self.path + ".new"
        self._fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_APPEND | os.O_CLOEXEC, 0o644)
        try:
            if not try_flock(self._fd):  # a new file no one else opened: never happens
                raise BlockingIOError(errno.EWOULDBLOCK, os.strerror(errno.EWOULDBLOCK), tmp)
            if os.write(self._fd, MAGIC) != len(MAGIC):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), tmp)
            os.rename(tmp, self.path)
        except BaseException:  # a full disk: leave nothing behind
            os.close(self._fd)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        if fsync:
            # The name is durable before the store changes any git file: after a power loss,
            # recovery runs only if it finds the journal, and only recovery repairs the torn
            # packs and refs the store's unflushed git writes can leave.
            fsync_dir(directory)
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._appended = 0  # sequence number of the last record written to the OS
        self._durable = 0  # sequence number of the last record known to be on stable storage
        self._size = len(MAGIC)
        self._reserved = 0  # the file's blocks are allocated up to this offset (see reserve)
        self.failed: OSError | None = None  # a failed flush: nothing later is promised durable

    @property
    def size(self) -> int:
        return self._size

    @property
    def appended(self) -> int:
        return self._appended

    @property
    def durable(self) -> int:
        return self._durable

    def reserve(self, nbytes: int) -> None:
        """Allocate disk space for the next ``nbytes`` appended (beyond the end, the size kept),
        so that appending them cannot fail for want of space: a writer reserves its record
        before it moves refs, and a full disk fails the write before anything changed.

        Raises :class:`OSError` (``ENOSPC``) when the file system cannot give the space; a
        no-op where ``fallocate`` is missing or the file system does not support it.
        """
        with self._lock:
            if _fallocate is None or self._size + nbytes <= self._reserved:
                return
            import ctypes

            want = max(nbytes, 1 << 16)  # a little ahead, so most records reserve nothing
            if _fallocate(self._fd, _FALLOC_FL_KEEP_SIZE, self._size, want) != 0:
                err = ctypes.get_errno()
                if err in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                    return  # this file system cannot: best effort
                if _fallocate(self._fd, _FALLOC_FL_KEEP_SIZE, self._size, nbytes) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, os.strerror(err), self.path)
                want = nbytes
            self._reserved = self._size + want

    def append(self, record: Record) -> int:
        """Write ``record`` to the OS (one ``write``, unless the disk is full); return its sequence number.

        Raises :class:`OSError` if it cannot be written whole; the journal is then as it was."""
        payload = record.encode()
        frame = _FRAME.pack(len(payload), zlib.crc32(payload)) + payload
        with self._lock:
            view, done = memoryview(frame), 0
            try:
                while done < len(frame):
                    done += os.write(self._fd, view[done:])
            except OSError as exc:
                if done:  # a full disk took part of the frame: cut it, so later records are not behind a torn one
                    try:
                        os.ftruncate(self._fd, self._size)
                        self._reserved = 0
                    except OSError:
                        self.failed = exc  # records after a torn one would be unreadable: no more promises
                raise
            self._size += len(frame)
            self._appended += 1
            return self._appended

    def sync(self, upto: int | None = None) -> None:
        """Make every record up to ``upto`` (default: all) durable; concurrent callers share one flush."""
        if self.failed is not None:
            raise self.failed
        target = self._appended if upto is None else upto
        if self._durable >= target:
            return
        with self._sync_lock:
            if self._durable >= target:
                return
            covered = self._appended
            if self._fsync:
                try:
                    os.fdatasync(self._fd)
                except OSError as exc:
                    self.failed = exc  # Linux may have dropped the pages: never report success again
                    raise
            self._durable = max(self._durable, covered)

    def restart(self, base: Record) -> None:
        """After the git files were hardened: drop every record and keep only ``base``."""
        with self._lock, self._sync_lock:
            os.ftruncate(self._fd, len(MAGIC))
            self._reserved = 0
            payload = base.encode()
            os.write(self._fd, _FRAME.pack(len(payload), zlib.crc32(payload)) + payload)
            self._size = len(MAGIC) + _FRAME.size + len(payload)
            if self._fsync:
                os.fdatasync(self._fd)
            self._durable = self._appended

    def close(self, *, remove: bool) -> None:
        """Close the file; ``remove`` only once everything it recorded has been hardened."""
        if self._fd < 0:
            return
        if remove:
            os.unlink(self.path)
            if self._fsync:
                fsync_dir(self.directory)
        os.close(self._fd)
        self._fd = -1


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
            yield Record.decode(payload)
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
