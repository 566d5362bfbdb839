"""The durable checkpoint-id index.

The index maps every checkpoint id on a ref to its commit, so that no process has to read every
commit of the repository before its first put (which checks that the id is new) or its first
lookup of a checkpoint by id. It is derived data: deleting ``qvc/ids`` is always safe.

Layout: ``qvc/ids/<generation>.log``, one append-only file of ``<commit sha> <checkpoint id>``
lines per generation (the token the staging database keeps, :meth:`qvc.plumbing.staging.Staging.generation`),
so its size follows the index's size.
Each process reads it once into memory and then reads only the bytes appended since (a ``stat``
of the log, then a ``pread`` of its tail); it keeps the log open, so the inode it follows is
never reused for another file while it compares inode numbers.

* Every store appends the checkpoint commits it writes (:meth:`History.observe
  <qvc.store.history.History.observe>`), and the tips of refs its transactions moved without
  writing their commits (``qvc fetch``), walked down to the ref's previous value, after the
  commit. What a writer killed before that append stored is in the staging database's own id
  index, written with its transaction (:meth:`History._stage_ids
  <qvc.store.history.History._stage_ids>`), which a lookup asks when the log misses. A store
  that migrated a repository of the journal-and-leases release appends the history of each ref
  a replayed journal moved that still points where the journal left it.
* The log *is* the completeness marker: it exists only once a build finished. A build (one at a
  time, under ``qvc/ids/build.lock``) creates ``<generation>.building`` first, then walks every
  ref's history and appends what it finds, then renames the file to ``<generation>.log``.
  Writers append to the log, else to the file being built (never creating either), and only
  after their refs moved, checking by a stat after the move that the log they hold open is
  still the one at its path: a write either moved its ref before the walk read the refs (the
  walk finds it) or appends to the file being built or to the finished log. ``delete`` and other
  history rewrites start a new generation, so an index never names a deleted checkpoint; old
  generations' logs (and the shard directories of the layout before this one) are removed by
  the next build. Before a delete moves a ref it removes the current log and any ``building``
  file (:meth:`IdIndex.forget`), so a build that read the refs before the delete moved them
  cannot rename its file into the log; the delete and its new token commit together.
* The last line naming an id wins; each answer is checked against the commit itself (by the
  caller); a line torn by a crash is skipped.
* Commits that reach the repository without qvc (``git push`` into it) are not appended; a
  lookup by id that misses the index walks every ref (and finds them), while a put's check that
  its id is new trusts the index.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import threading
import zlib
from typing import Callable

from qvc.plumbing.durability import dirty, fsync_dir
from qvc.plumbing.locking import open_lock_file, wait_flock

IDS = "qvc/ids"  # the durable checkpoint-id index (see the module docstring)
LOG = ".log"
BUILDING = ".building"  # a build in progress; a delete removes it, so that build is not trusted
_LOCK = "build.lock"
_TOKEN = re.compile(r"[0-9A-Za-z]{1,64}")
_LINE = re.compile(rb"^([0-9a-f]{40}) (.*)$", re.MULTILINE)
_HEX = re.compile(rb"[0-9a-f]{40}")
#: a first read of the log longer than this is searched as bytes, not parsed, for the first
#: RAW_LOOKUPS lookups (parsing 10,000 lines costs a few milliseconds; a search, tens of µs)
RAW_MIN, RAW_LOOKUPS = 64 * 1024, 64


def token_name(generation: str | None) -> str:
    """The file-name-safe form of a generation token (``"0"`` when there is none yet)."""
    generation = generation or "0"
    if _TOKEN.fullmatch(generation):
        return generation
    return f"x{zlib.crc32(generation.encode('utf-8', 'surrogateescape')):08x}"  # not written by qvc


class IdIndex:
    """One process's view of the durable checkpoint-id index (see the module docstring).

    Lookups are answered from memory after one ``stat`` of the current generation's log (plus a
    ``pread`` of what other processes appended since). Every method is thread-safe and never
    raises :class:`OSError`: the index is a cache, and what cannot be read or written is simply
    not used (lookups then walk the refs).
    """

    def __init__(self, repo_path: str, *, readonly: bool = False, fsync: bool = True):
        self.root = os.path.join(repo_path, IDS)
        self._dirty = dirty(repo_path)  # what the store's close flushes (appends are not flushed here)
        self._readonly = readonly
        self._fsync = fsync
        self._lock = threading.Lock()
        self._token: str | None = None  # the generation followed
        self._fd: int | None = None  # its log, held open
        self._ino: tuple[int, int] | None = None
        self._offset = 0  # bytes of the log read
        self._map: dict[str, str] = {}  # checkpoint id -> commit hex, from the last line naming it
        self._older: dict[str, list[str]] = {}  # checkpoint id -> earlier lines' commits, oldest first
        # The log's first read, kept as bytes and searched until it has answered RAW_LOOKUPS
        # lookups: a process that puts once (a CLI command, a fresh worker) never parses the log.
        self._raw = b""
        self._raw_lookups = 0

    # -- reading ------------------------------------------------------------------------

    def find(self, checkpoint_id: str, token: str,
             walk: Callable[[], list[tuple[str, str]]]) -> list[str] | None:
        """The commits the index of generation ``token`` gives ``checkpoint_id``, the last line's
        first (to be checked against the commits by the caller); ``[]`` if it names none; ``None``
        if there is no complete index to ask. Without one (and unless read-only) it builds it
        first, from ``walk()``: every ``(checkpoint id, commit hex)`` on a ref, read after the
        build started (see :meth:`build`)."""
        with self._lock:  # followed and asked at once: a forget in another thread cannot come between
            if self._follow(token):
                return self._candidates(checkpoint_id)
        if self._readonly or not self.build(token, walk):
            return None
        with self._lock:
            return self._candidates(checkpoint_id) if self._follow(token) else None

    def _candidates(self, checkpoint_id: str) -> list[str]:
        last = self._map.get(checkpoint_id)
        found = [] if last is None else [last, *reversed(self._older.get(checkpoint_id, ()))]
        if self._raw:  # lines older than every line in the map
            found += self._search_raw(checkpoint_id)
            self._raw_lookups += 1
            if self._raw_lookups >= RAW_LOOKUPS:
                self._absorb_raw()
        return found

    def _search_raw(self, checkpoint_id: str) -> list[str]:
        """The commits the lines of :attr:`_raw` naming ``checkpoint_id`` give, the last first."""
        data, out = self._raw, []
        needle = b" " + checkpoint_id.encode("utf-8", "surrogateescape") + b"\n"
        end = len(data)
        while (at := data.rfind(needle, 0, end)) >= 0:
            start = data.rfind(b"\n", 0, at) + 1
            if at - start == 40 and _HEX.fullmatch(data, start, at):
                out.append(data[start:at].decode())
            end = at
        return out

    def _absorb_raw(self) -> None:
        """Parse :attr:`_raw` into the map, under the lines read or appended since (newer)."""
        newer = [(cid, [*self._older.get(cid, ()), last]) for cid, last in self._map.items()]
        self._map, self._older = {}, {}
        self._parse(self._raw)
        self._raw = b""
        for cid, commits in newer:
            for hexid in commits:
                self._note(cid, hexid)

    def _follow(self, token: str) -> bool:
        """Bring the in-memory index up to the log of ``token``; ``False`` if there is none."""
        path = os.path.join(self.root, token + LOG)
        try:
            st = os.stat(path)
            if token != self._token or (st.st_dev, st.st_ino) != self._ino:
                self._reset()
                try:
                    fd = os.open(path, (os.O_RDONLY if self._readonly else os.O_RDWR | os.O_APPEND) | os.O_CLOEXEC)
                except PermissionError:
                    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                self._fd, self._token = fd, token
                st = os.fstat(fd)  # the file at the path now (or one removed meanwhile: the next stat says)
                self._ino = (st.st_dev, st.st_ino)
            if st.st_size > self._offset:
                data = os.pread(self._fd, st.st_size - self._offset, self._offset)
                end = data.rfind(b"\n") + 1  # a line still being written is read next time
                if self._offset == 0 and not self._map and end > RAW_MIN:
                    self._raw, self._raw_lookups = data[:end], 0
                else:
                    self._parse(data[:end])
                self._offset += end
            return True
        except OSError:
            self._reset()
            return False

    def _parse(self, data: bytes) -> None:
        for sha, cid in _LINE.findall(data):
            self._note(cid.decode("utf-8", "surrogateescape"), sha.decode())

    def _note(self, checkpoint_id: str, hexid: str) -> None:
        last = self._map.get(checkpoint_id)
        if last is not None and last != hexid:
            self._older.setdefault(checkpoint_id, []).append(last)
        self._map[checkpoint_id] = hexid

    def _reset(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = self._token = self._ino = None
        self._offset = 0
        self._map = {}
        self._older = {}
        self._raw = b""

    # -- writing ------------------------------------------------------------------------

    def append(self, pairs: list[tuple[str, str]], token: str) -> None:
        """Append ``(checkpoint id, commit hex)`` lines to generation ``token``'s index: to its
        log, else to the file being built, in one write; to neither if there is none (the next
        build walks the refs). Call it only after the refs naming the commits moved."""
        pairs = [(cid, hexid) for cid, hexid in pairs if "\n" not in cid]  # trailers never hold one: no forged line
        data = b"".join(f"{hexid} {cid}\n".encode("utf-8", "surrogateescape") for cid, hexid in pairs)
        if not data or self._readonly:
            return
        log = os.path.join(self.root, token + LOG)
        with self._lock:
            try:
                st = os.stat(log)
                if self._fd is not None and token == self._token and (st.st_dev, st.st_ino) == self._ino:
                    os.write(self._fd, data)
                    self._dirty.wrote(log)
                    end = os.lseek(self._fd, 0, os.SEEK_CUR)
                    if end - len(data) == self._offset:  # nothing else came between: known as written
                        for cid, hexid in pairs:
                            self._note(cid, hexid)
                        self._offset = end
                    return
            except OSError:
                pass
        # The log this process does not follow, else the file being built, else the log again
        # (the build may have renamed its file between the first two tries).
        for name in (log, os.path.join(self.root, token + BUILDING), log):
            try:
                fd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                os.write(fd, data)
                self._dirty.wrote(name)
            except OSError:
                pass
            finally:
                os.close(fd)
            return

    def forget(self, token: str) -> None:
        """Make the next lookup (in any process) rebuild generation ``token``'s index from the
        refs: remove its log and any file being built (a build running meanwhile, which may have
        read the refs before the caller moves them, then cannot complete), durably when the
        repository fsyncs. Called before a delete or rewrite moves refs."""
        for suffix in (LOG, BUILDING):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.root, token + suffix))
        with self._lock:
            self._reset()
        with contextlib.suppress(OSError):
            if self._fsync:
                fsync_dir(self.root)

    def build(self, token: str, walk: Callable[[], list[tuple[str, str]]]) -> bool:
        """Build generation ``token``'s index from ``walk()`` (every checkpoint on a ref, read
        now); ``True`` once its log exists (built here or by another builder meanwhile).

        One builder at a time (``qvc/ids/build.lock``). The file being built is created before
        ``walk`` reads the refs, so a writer whose ref moves after that read appends to it. It
        becomes the log by a rename, which fails if a delete removed it meanwhile
        (:meth:`forget`): an index whose walk read the refs before the delete moved them is
        never trusted. Other generations' files (and the old layout's shard directories) are
        removed once the log exists.
        """
        log, building = (os.path.join(self.root, token + s) for s in (LOG, BUILDING))
        try:
            os.makedirs(self.root, exist_ok=True)
            lock = open_lock_file(os.path.join(self.root, _LOCK))
        except OSError:
            return False
        try:
            wait_flock(lock)
            if os.path.exists(log):
                return True  # another builder finished meanwhile
            with contextlib.suppress(FileNotFoundError):
                os.unlink(building)  # a killed builder's
            fd = os.open(building, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o644)
            try:
                data = b"".join(f"{hexid} {cid}\n".encode("utf-8", "surrogateescape")
                                for cid, hexid in walk() if "\n" not in cid)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            try:
                os.rename(building, log)
            except FileNotFoundError:
                return False  # a delete forgot this index meanwhile: lookups walk the refs
            self._dirty.made_dirs(self.root)
            self._dirty.wrote(log)
            for name in os.listdir(self.root):  # earlier generations' indexes, in any layout
                if name not in (token + LOG, _LOCK):
                    path = os.path.join(self.root, name)
                    if os.path.isdir(path):
                        shutil.rmtree(path, ignore_errors=True)
                    else:
                        with contextlib.suppress(OSError):
                            os.unlink(path)
            return True
        except OSError:
            return False
        finally:
            os.close(lock)

    def close(self) -> None:
        """Let go of the log held open (a later lookup reads it again)."""
        with self._lock:
            self._reset()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
