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
list of that thread read, and the field blobs they name up to :data:`INLINE_MAX` bytes (blobs
are immutable too: a cold list then reads no object from git for them): a magic line, then
frames ``<u32 length><u32 CRC-32><payload>`` (big-endian; a kind byte and a msgpack array of
summaries or of blobs),
appended with ``O_APPEND`` by any writable store and never fsynced. A reader stops
at the first frame that is short, fails its CRC or does not decode (a torn append, a power cut):
what follows is read from git, and the next store that appends rewrites the file whole (a
temporary file renamed over it), as it does when the file holds many summaries the thread's
lines no longer reach. Read-only stores read it but never write it. Deleting ``qvc/threads``
is always safe.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import struct
import threading
import zlib
from typing import TYPE_CHECKING, Any, NamedTuple

import msgpack

from qvc.errors import CorruptionError, QvcError
from qvc.plumbing.objects import MODE_BLOB
from qvc.store.format import HEADER, decode_header
from qvc.store.history import LRU
from qvc.store.refnames import decode_name, encode_thread

if TYPE_CHECKING:
    from qvc.plumbing.repository import Repository
    from qvc.store.history import History

THREADS = "qvc/threads"  # one summary file per thread (see the module docstring)
MAGIC = b"qvc-summaries 1\n"
SUMMARIES = b"S"  # a frame of summaries: ``S``, a msgpack array of summary records
BLOBS = b"B"  # a frame of field blobs: ``B``, a msgpack array ``[id, bytes, id, bytes, ...]``
INLINE_MAX = 16 * 1024  # larger field blobs are read from git
FILE_MAX = 32 * 2**20  # no blob frames are added past this size
MEMORY_MAX = 50_000  # summaries kept in memory
_FRAME_MAX = 64 * 2**20  # no frame is longer (a length past it is garbage)
BLOBS_MAX = 64 * 2**20  # bytes of blobs read from the files kept in memory
VALUES_MAX, VALUES_BYTES = 65536, 16 * 2**20  # decoded immutable values kept in memory
_FRAME = struct.Struct(">II")


#: What ``Summaries.values.get(raw, MISSING)`` gives for a blob whose decoded value is not kept.
MISSING: Any = object()
# Decoded values of these types are shared between the tuples that hold them: nothing can
# change them in place, so a caller cannot alter what another read returns.
_IMMUTABLE = frozenset({str, bytes, int, float, bool, type(None), complex, _dt.datetime, _dt.date, _dt.time,
                        _dt.timedelta})


def _weight(value: Any) -> int:
    return len(value) if type(value) in (str, bytes) else 64


class Summary(NamedTuple):
    """What commit ``sha`` says about its checkpoint, field values aside (immutable)."""

    sha: str
    parent: str | None  # first parent (hex)
    parent_thread: str  # the parent's thread id ("" if it records none)
    parent_id: str | None  # the parent's checkpoint id
    header: bytes  # the ``.qvc`` blob
    fields: tuple[tuple[str, int, bytes], ...]  # (encoded name, mode, raw id), in tree order
    versions: tuple[int, ...]  # state version of each field, aligned with ``fields``
    names: tuple[str, ...]  # each field's name, decoded (derived from ``fields``; not stored)


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
    names = tuple(decode_name(n) for n, _, _ in fields)
    return Summary(sha, info.parent, parent_thread, parent_id, header, fields, tuple(versions[n] for n in names),
                   names)


def _record(s: Summary) -> list:
    return [bytes.fromhex(s.sha), bytes.fromhex(s.parent) if s.parent else None, s.parent_thread, s.parent_id,
            s.header, [list(f) for f in s.fields], list(s.versions)]


def _frame(kind: bytes, items: list) -> bytes:
    payload = kind + msgpack.packb(items, use_bin_type=True, unicode_errors="surrogateescape")
    return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload


def _frames(kind: bytes, items: list, size: int) -> list[bytes]:
    """``items`` in frames of ``kind``, ``size`` items each at most."""
    return [_frame(kind, items[i:i + size]) for i in range(0, len(items), size)]


def encode(summaries: list[Summary]) -> bytes:
    """The summary frames of ``summaries``."""
    return b"".join(_frames(SUMMARIES, [_record(s) for s in summaries], 1024))


def _summary(record: tuple) -> Summary:
    """Raises ValueError, TypeError or AttributeError for a record that is not a summary (the
    frame's CRC already vouches for the bytes: only their shape is checked)."""
    sha, parent, pthread, pid, header, fields, versions = record
    if len(sha) != 20 or len(fields) != len(versions) or type(header) is not bytes:
        raise ValueError("not a summary")
    return Summary(sha.hex(), parent.hex() if parent is not None else None, pthread, pid, header, fields, versions,
                   tuple(decode_name(n) for n, _, _ in fields))


def parse(data: bytes) -> tuple[list[Summary], list[tuple[bytes, bytes]], int, bool]:
    """``(summaries, blobs, bytes parsed, whole)`` of a summary file's bytes after its magic
    line: the frames up to the first bad one (``whole`` is false when one was found). A last
    frame cut short is not parsed but not bad either: it may be an append still being written
    (if a crash cut it, the next append makes it bad)."""
    out: list[Summary] = []
    blobs: list[tuple[bytes, bytes]] = []
    pos, end = 0, len(data)
    view = memoryview(data)
    while pos < end:
        if pos + 8 > end:
            return out, blobs, pos, True
        length, crc = _FRAME.unpack_from(data, pos)
        start, pos = pos, pos + 8 + length
        if pos > end and length <= _FRAME_MAX:
            return out, blobs, start, True
        payload = view[start + 8:pos]
        if length < 2 or pos > end or zlib.crc32(payload) != crc:
            return out, blobs, start, False
        kind = data[start + 8:start + 9]
        try:
            items = msgpack.unpackb(payload[1:], raw=False, use_list=False, unicode_errors="surrogateescape",
                                    strict_map_key=False)
            if kind == SUMMARIES:
                out += [_summary(r) for r in items]
            elif kind == BLOBS:
                it = iter(items)
                blobs += zip(it, it, strict=True)
            else:
                raise ValueError("unknown frame")
        except (ValueError, TypeError, AttributeError, msgpack.UnpackException):
            return out, blobs, start, False
    return out, blobs, pos, True


class _File:
    """What this process read of one thread's summary file."""

    __slots__ = ("ino", "offset", "shas", "blobs", "torn", "partial")

    def __init__(self) -> None:
        self.ino: int | None = None
        self.offset = 0  # bytes of the file read (magic line included)
        self.shas: set[str] = set()  # summaries the file holds
        self.blobs: set[bytes] = set()  # field blobs the file holds
        self.torn = False  # a bad frame or magic line: the next append rewrites the file
        self.partial = False  # the last frame read was cut short (being appended, or torn)

    def reset(self, ino: int | None) -> None:
        self.ino, self.offset, self.shas, self.blobs, self.torn, self.partial = ino, 0, set(), set(), False, False


class Summaries:
    """The summaries a store read or derived (thread-safe): in memory, by SHA, and in the
    per-thread files (see the module docstring)."""

    def __init__(self, repo: Repository, history: History):
        self.repo = repo
        self.history = history
        self.dir = os.path.join(repo.path, THREADS)
        self._lock = threading.Lock()
        self._memory: dict[str, Summary] = {}  # sha -> Summary (emptied past MEMORY_MAX)
        self._files: LRU = LRU(256)  # thread -> _File
        #: raw blob id -> its decoded value, for immutable values only (:meth:`remember_value`);
        #: ``values.get(raw, MISSING)`` reads it.
        self.values: dict[bytes, Any] = {}
        self._value_bytes = 0
        #: raw blob id -> the blob's bytes, as the summary files held them (emptied past
        #: BLOBS_MAX bytes); ``blobs.get(raw)`` reads it.
        self.blobs: dict[bytes, bytes] = {}
        #: commit sha -> ``(CheckpointConfig, parent CheckpointConfig or None)`` of its tuples
        #: (:meth:`remember_configs`).
        self.configs: dict[str, tuple] = {}
        self._blob_bytes = 0

    def remember_configs(self, sha: str, configs: tuple) -> None:
        """Keep the (frozen) ``(config, parent config)`` of the checkpoint in commit ``sha``."""
        if len(self.configs) >= MEMORY_MAX:
            self.configs.clear()
        self.configs[sha] = configs

    def remember_value(self, raw: bytes, value: Any) -> None:
        """Keep the decoded value of field blob ``raw`` if nothing can change it in place (a
        str, bytes, number, ``None``, date or time); blobs are immutable, so it stays right."""
        if type(value) in _IMMUTABLE:
            weight = _weight(value)
            if weight > VALUES_BYTES // 16:
                return
            if len(self.values) >= VALUES_MAX or self._value_bytes + weight > VALUES_BYTES:
                self.values.clear()  # a cache: what is dropped is decoded again
                self._value_bytes = 0
            self.values[raw] = value
            self._value_bytes += weight

    def known(self, sha: str) -> Summary | None:
        """The summary of ``sha`` if this process has it in memory (no I/O)."""
        return self._memory.get(sha)

    def get(self, sha: str) -> Summary:
        """The summary of ``sha``: from memory, else from git (then kept in memory)."""
        found = self._memory.get(sha)
        if found is None:
            found = summarize(self.history, sha)
            self._remember([found])
        return found

    def _remember(self, summaries: list[Summary]) -> None:
        memory = self._memory
        if len(memory) + len(summaries) > MEMORY_MAX:
            memory.clear()  # a cache: what is dropped is read again from the files or git
        for s in summaries:
            memory[s.sha] = s

    def drop(self) -> None:
        """Forget every summary and blob, in memory and on disk (``qvc/threads`` is removed):
        :meth:`~qvc.store.git_store.GitCheckpointStore.purge` runs it, since the files copy
        headers and field blobs of checkpoints that may since have been deleted."""
        with self._lock:
            self._memory.clear()
            self.configs.clear()
            self._files.clear()
            self.blobs.clear()
            self._blob_bytes = 0
            self.values.clear()
            self._value_bytes = 0
            import shutil  # deferred: start-up speed (a rebuild is rare)

            shutil.rmtree(self.dir, ignore_errors=True)

    def _path(self, thread: str) -> str:
        return os.path.join(self.dir, encode_thread(thread))

    def load(self, thread: str) -> set[str]:
        """Read what the thread's file holds beyond what this process read of it (one ``open``,
        and a read when it grew or was replaced) into memory; return the SHAs it holds."""
        with self._lock:
            state = self._files.get(thread)
            if state is None:
                state = _File()
                self._files.put(thread, state)
            return self._load(thread, state)

    def _load(self, thread: str, state: _File) -> set[str]:
        """:meth:`load` of ``state``, the lock held."""
        try:
            fd = os.open(self._path(thread), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            state.reset(None)
            return state.shas
        try:
            st = os.fstat(fd)
            if st.st_ino != state.ino or st.st_size < state.offset:
                state.reset(st.st_ino)
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
        found, blobs, used, whole = parse(data[start:] if start else data)
        state.offset += start + used
        state.torn = not whole
        state.partial = whole and start + used < len(data)
        self._remember(found)
        state.shas.update(s.sha for s in found)
        if blobs:
            size = sum(len(b) for _, b in blobs)
            if self._blob_bytes + size > BLOBS_MAX:
                self.blobs.clear()
                self._blob_bytes = 0
            self.blobs.update(blobs)
            self._blob_bytes += size
            state.blobs.update(raw for raw, _ in blobs)
        return state.shas

    def _blob_frames(self, summaries: list[Summary], state: _File, budget: int) -> bytes:
        """Frames of the field blobs of ``summaries`` that the file lacks and this process has
        (read for the list that summarized them), each at most :data:`INLINE_MAX` bytes, while
        the file stays under :data:`FILE_MAX`."""
        items: list[bytes] = []
        added: set[bytes] = set()
        for s in summaries:
            for _, mode, raw in s.fields:
                if mode != MODE_BLOB or raw in state.blobs or raw in added:
                    continue
                data = self.blobs.get(raw)
                if data is None:
                    data = self.history.known_blob(raw)
                if data is None or len(data) > INLINE_MAX or budget < len(data):
                    continue
                budget -= len(data) + 24
                added.add(raw)
                items += (raw, data)
        state.blobs |= added
        return b"".join(_frames(BLOBS, items, 2048))

    def save(self, thread: str, fresh: list[Summary], reached: set[str] | None = None, *,
             generation: str | None = None) -> None:
        """Add ``fresh`` summaries, and the field blobs they name that this process has read, to
        the thread's file (no-op in a read-only store; errors are ignored: the file is a cache).
        ``reached``, when the caller walked every line it lists, lets a file holding far more
        summaries than that be rewritten with those reached only. ``generation`` is
        ``qvc/generation`` as the caller read it before it read the refs it walked: if a delete
        replaced it since, nothing is saved (what was walked may be what the delete removed, and
        a purge must not find it written back). The check and the write hold the shared
        maintenance lock, so a purge (under the exclusive one) is wholly before or after them."""
        if self.repo.readonly:
            return
        try:
            with self.repo.writing():
                if self.repo.generation() != generation:
                    return
                self._save(thread, fresh, reached)
        except QvcError:
            return  # a failed flush, a closed store: the file is only a cache

    def _save(self, thread: str, fresh: list[Summary], reached: set[str] | None) -> None:
        with self._lock:
            state = self._files.get(thread)
            if state is None:
                return  # not loaded: which summaries it holds is unknown
            if state.partial:  # finished by now, unless a crash cut it: then it is torn
                self._load(thread, state)
                state.torn = state.torn or state.partial
            fresh = [s for s in fresh if s.sha not in state.shas]
            shrink = reached is not None and len(state.shas) > 4 * len(reached) + 1024
            if not fresh and not state.torn and not shrink:
                return
            path = self._path(thread)
            try:
                if state.torn or state.ino is None or shrink:
                    # only what the refs reach now: never what a delete (then purge) removed
                    keep = [s for s in (self._memory.get(h) for h in state.shas if h in reached)
                            if s is not None] if reached is not None else []
                    self._rewrite(path, state, keep + fresh)
                else:
                    data = self._blob_frames(fresh, state, FILE_MAX - state.offset) + encode(fresh)
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
        state.blobs = set()
        data = MAGIC + self._blob_frames(summaries, state, FILE_MAX) + encode(summaries)
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
            state.reset(state.ino)
            state.torn = True
            raise
        state.ino, state.offset, state.torn = ino, len(data), False
        state.shas = {s.sha for s in summaries}
