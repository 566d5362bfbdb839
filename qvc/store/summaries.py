"""Checkpoint summaries: what reading a checkpoint needs besides its field values, kept per
thread in a derived file so that a list in a new process reads one file, not five objects a
checkpoint.

A :class:`Summary` is keyed by the checkpoint's commit SHA and holds only what that commit
determines: its first parent (and the parent's thread and checkpoint id), its header blob
(``.qvc``: header and metadata, still msgpack), its field entries (name, mode, blob or tree id)
and its state versions (a pure function of the commit and its ancestry, which the SHA pins). A
summary is therefore never stale: a head that moved, a time travel, a rewrite (``delete``,
``rename_thread``), a fetch or another process's put only make the walk from the refs (read
afresh on every call) reach SHAs the file does not hold, which are read from git and appended.
Nothing in the file is trusted to say which checkpoints a thread has; the refs say that.

``qvc/threads/<encoded thread>`` (``qvc.store.refnames.encode_thread``) holds the summaries a
list of that thread read: a magic line, then frames ``<u32 length><u32 CRC-32><msgpack record>``
(big-endian), appended with ``O_APPEND`` by any writable store and never fsynced. A reader stops
at the first frame that is short, fails its CRC or does not decode (a torn append, a power cut):
what follows is read from git, and the next store that appends rewrites the file whole (a
temporary file renamed over it), as it does when the file holds many summaries the thread's
lines no longer reach. Read-only stores read it but never write it. Deleting ``qvc/threads``
is always safe.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
import zlib
from typing import TYPE_CHECKING, NamedTuple

import msgpack

from qvc.errors import CorruptionError
from qvc.store.format import HEADER, decode_header
from qvc.store.history import LRU
from qvc.store.refnames import decode_name, encode_thread

if TYPE_CHECKING:
    from qvc.plumbing.repository import Repository
    from qvc.store.history import History

THREADS = "qvc/threads"  # one summary file per thread (see the module docstring)
MAGIC = b"qvc-summaries 1\n"
_FRAME = struct.Struct(">II")


class Summary(NamedTuple):
    """What commit ``sha`` says about its checkpoint, field values aside (immutable)."""

    sha: str
    parent: str | None  # first parent (hex)
    parent_thread: str  # the parent's thread id ("" if it records none)
    parent_id: str | None  # the parent's checkpoint id
    header: bytes  # the ``.qvc`` blob
    fields: tuple[tuple[str, int, bytes], ...]  # (encoded name, mode, raw id), in tree order
    versions: tuple[int, ...]  # state version of each field, aligned with ``fields``


def summarize(history: History, sha: str) -> Summary:
    """The summary of checkpoint commit ``sha``, read from git through ``history``'s caches.
    Raises :class:`CorruptionError` if the commit, its tree or its header does not read."""
    info = history.commit(sha)
    entries = history.entries(info)
    if HEADER not in entries:
        raise CorruptionError(f"commit {sha[:12]} is not a qvc checkpoint (no {HEADER} entry)")
    header = history.blob(entries[HEADER][1])
    decode_header(header, f"checkpoint {sha[:12]} header")  # a header that does not decode is not summarized
    versions = history.versions(sha)
    parent_thread, parent_id = "", None
    if info.parent is not None:
        pinfo = history.commit(info.parent)
        parent_thread, parent_id = pinfo.thread_id or "", pinfo.checkpoint_id
    fields = tuple((n, mode, raw) for n, (mode, raw) in entries.items() if n != HEADER)
    return Summary(sha, info.parent, parent_thread, parent_id, header, fields,
                   tuple(versions[decode_name(n)] for n, _, _ in fields))


def _encode(s: Summary) -> bytes:
    payload = msgpack.packb(
        [bytes.fromhex(s.sha), bytes.fromhex(s.parent) if s.parent else None, s.parent_thread, s.parent_id,
         s.header, [list(f) for f in s.fields], list(s.versions)],
        use_bin_type=True, unicode_errors="surrogateescape")
    return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload


def _decode(payload: bytes) -> Summary:
    """Raises ValueError, TypeError or AttributeError for a record that is not a summary (the
    CRC already vouches for the bytes: only their shape is checked)."""
    sha, parent, pthread, pid, header, fields, versions = msgpack.unpackb(
        payload, raw=False, use_list=False, unicode_errors="surrogateescape", strict_map_key=False)
    if len(sha) != 20 or len(fields) != len(versions) or type(header) is not bytes:
        raise ValueError("not a summary")
    return Summary(sha.hex(), parent.hex() if parent is not None else None, pthread, pid, header, fields, versions)


def parse(data: bytes) -> tuple[list[Summary], int, bool]:
    """``(summaries, bytes parsed, whole)`` of a summary file's bytes after its magic line: the
    frames up to the first bad one (``whole`` is false when one was found)."""
    out, pos, end = [], 0, len(data)
    while pos < end:
        if pos + 8 > end:
            return out, pos, False
        length, crc = _FRAME.unpack_from(data, pos)
        payload = data[pos + 8:pos + 8 + length]
        if length == 0 or len(payload) != length or zlib.crc32(payload) != crc:
            return out, pos, False
        try:
            out.append(_decode(payload))
        except (ValueError, TypeError, AttributeError, msgpack.UnpackException):
            return out, pos, False
        pos += 8 + length
    return out, pos, True


class _File:
    """What this process read of one thread's summary file."""

    __slots__ = ("ino", "offset", "shas", "torn")

    def __init__(self) -> None:
        self.ino: int | None = None
        self.offset = 0  # bytes of the file read (magic line included)
        self.shas: set[str] = set()  # summaries the file holds
        self.torn = False  # a bad frame or magic line: the next append rewrites the file


class Summaries:
    """The summaries a store read or derived (thread-safe): in memory, by SHA, and in the
    per-thread files (see the module docstring)."""

    def __init__(self, repo: Repository, history: History):
        self.repo = repo
        self.history = history
        self.dir = os.path.join(repo.path, THREADS)
        self._lock = threading.Lock()
        self._memory = LRU(100_000)  # sha -> Summary
        self._files: LRU = LRU(256)  # thread -> _File

    def known(self, sha: str) -> Summary | None:
        """The summary of ``sha`` if this process has it in memory (no I/O)."""
        return self._memory.get(sha)

    def get(self, sha: str) -> Summary:
        """The summary of ``sha``: from memory, else from git (then kept in memory)."""
        found = self._memory.get(sha)
        if found is None:
            found = summarize(self.history, sha)
            self._memory.put(sha, found)
        return found

    def _path(self, thread: str) -> str:
        return os.path.join(self.dir, encode_thread(thread))

    def load(self, thread: str) -> set[str]:
        """Read what the thread's file holds beyond what this process read of it (one ``stat``,
        and a read when it grew or was replaced) into memory; return the SHAs it holds."""
        with self._lock:
            state = self._files.get(thread)
            if state is None:
                state = _File()
                self._files.put(thread, state)
            try:
                fd = os.open(self._path(thread), os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                state.ino, state.offset, state.shas, state.torn = None, 0, set(), False
                return state.shas
            try:
                st = os.fstat(fd)
                if st.st_ino != state.ino or st.st_size < state.offset:
                    state.ino, state.offset, state.shas, state.torn = st.st_ino, 0, set(), False
                if st.st_size == state.offset or state.torn:
                    state.torn = state.torn or st.st_size < len(MAGIC)  # only a rename creates one, whole
                    return state.shas
                data = os.pread(fd, st.st_size - state.offset, state.offset)
            except OSError:
                return state.shas
            finally:
                os.close(fd)
            start = 0
            if state.offset == 0:
                if not data.startswith(MAGIC):
                    state.torn = True  # torn, not ours, or another version: replaced at the next append
                    return state.shas
                start = len(MAGIC)
            found, used, whole = parse(data[start:])
            state.offset += start + used
            state.torn = not whole and start + used < len(data)
            for s in found:
                self._memory.put(s.sha, s)
                state.shas.add(s.sha)
            return state.shas

    def save(self, thread: str, fresh: list[Summary], reached: set[str] | None = None) -> None:
        """Add ``fresh`` summaries to the thread's file (no-op in a read-only store; errors are
        ignored: the file is a cache). ``reached``, when the caller walked every line it lists,
        lets a file holding far more summaries than that be rewritten with those reached only."""
        if self.repo.readonly:
            return
        with self._lock:
            state = self._files.get(thread)
            if state is None:
                return  # not loaded: which summaries it holds is unknown
            fresh = [s for s in fresh if s.sha not in state.shas]
            shrink = reached is not None and len(state.shas) > 4 * len(reached) + 1024
            if not fresh and not state.torn and not shrink:
                return
            path = self._path(thread)
            try:
                if state.torn or state.ino is None or shrink:
                    keep = [s for s in (self._memory.get(h) for h in state.shas
                                        if reached is None or h in reached) if s is not None]
                    self._rewrite(path, state, keep + fresh)
                else:
                    data = b"".join(_encode(s) for s in fresh)
                    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
                    try:
                        if os.fstat(fd).st_ino != state.ino:
                            return  # replaced meanwhile: read again next time
                        os.write(fd, data)
                    finally:
                        os.close(fd)
                    state.shas.update(s.sha for s in fresh)
            except OSError:
                return

    def _rewrite(self, path: str, state: _File, summaries: list[Summary]) -> None:
        data = MAGIC + b"".join(_encode(s) for s in summaries)
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            except FileNotFoundError:
                os.makedirs(self.dir, exist_ok=True)
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, data)
                ino = os.fstat(fd).st_ino
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        state.ino, state.offset, state.torn = ino, len(data), False
        state.shas = {s.sha for s in summaries}
