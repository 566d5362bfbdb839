r"""The repository plumbing: a bare git repository, qvc's journal, objects and CAS refs.

This layer knows nothing about checkpoints. Every change goes through one
:class:`Transaction` (``with repo.transaction() as tx:``): it writes git objects and moves
refs, records the change in the journal (:mod:`qvc.plumbing.journal`), applies the durability
mode (:mod:`qvc.plumbing.durability`) and tells the listeners. Ref moves are compare-and-swap:
a ref moved by someone else since it was read raises
:class:`~qvc.errors.CheckpointConflictError`, never a lost update.

Concurrency: any number of Python threads and processes may write at once. Each Python
thread gets its own ``pygit2.Repository`` (libgit2 objects are not thread-safe); writers pass
a shared ``flock`` on ``qvc/gate`` and hold one on ``qvc/lock`` while they write (their
publishers only the latter), and maintenance (recovery, gc, purge) takes both exclusively
(:meth:`Repository.exclusive`).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import itertools
import os
import threading
import time
import weakref
from typing import Callable, Iterator, TypeVar

from qvc.errors import (
    CheckpointConflictError,
    CorruptionError,
    DurabilityError,
    InvalidInputError,
    NotARepositoryError,
    StorageError,
    StoreClosedError,
    errno_in,
)
from qvc.plumbing import launcher, leases, pack, recovery, refpack
from qvc.plumbing.durability import DurabilityMode, Worker, harden
from qvc.plumbing.journal import GENERATION, Journal, Record, fsync_dir
from qvc.plumbing.leases import Lease
from qvc.plumbing.libgit2 import configured, pygit2
from qvc.plumbing.objects import TYPE_NAMES, TYPES, parse_tree
from qvc.plumbing.odb import ObjectReader, RefReader
from qvc.plumbing.reflog import ZERO, ReflogEntry, read_reflog


def _warn(message: str, *args: object) -> None:
    import logging  # only when there is something to say

    logging.getLogger("qvc").warning(message, *args)


QVC_DIR = "qvc"
FORMAT_KEY = "qvc.format"
JOURNAL_LIMIT = 64 * 2**20
CONSOLIDATE_AT = 32  # small packs this store wrote before they are merged into one
MERGE_PACKS_AT = 16  # small packs in the directory (any writer's, dead or alive) before they are merged
#: packs git marks as not to be merged away: kept, a partial clone's, cruft (unreachable objects' times)
_NOT_MERGED = (".keep", ".promisor", ".mtimes")
SMALL_PACK = 4 * 2**20
PACK_LOCK = "qvc/pack.lock"  # flock: a merge of the directory's packs excludes stores merging their own
LOCK_WAIT = 10.0
CLOSE_WAIT = 2 * LOCK_WAIT  # how long close() waits for writes other threads began before it
EXCLUSIVE_TRIES = 8  # rounds of waiting for other stores' leases to be published under the gate
T = TypeVar("T")
MISS_RETRIES = 8  # lookups of an object while other stores keep merging packs
#: how soon the publisher writes applied moves to git's files after a write (other processes
#: and plain git see a write within about this long; see :meth:`Repository.publish`)
PUBLISH_LAG = 0.01

_open_repos: weakref.WeakSet[Repository] = weakref.WeakSet()
_writers: dict[str, int] = {}  # open writable repositories per path: how a reader knows it has peers
_excluding = threading.local()  # .depth: this thread holds a repository's exclusive lock


@atexit.register
def _flush_at_exit() -> None:  # EXIT mode's promise; harmless for the others
    for repo in list(_open_repos):
        with contextlib.suppress(Exception):
            repo.close()


def publish_open(path: str | os.PathLike) -> None:
    """Publish (:meth:`Repository.publish`) the writes of every repository this process has
    open at ``path``: what a program does before it hands the repository to plain ``git``.
    Every ``git`` qvc runs (:mod:`qvc.plumbing.launcher`) is preceded by this."""
    path = os.path.abspath(os.fspath(path))
    for repo in list(_open_repos):
        if repo.path == path and not repo.readonly and not repo.closed:
            repo.publish()


launcher.BEFORE_GIT.append(publish_open)


def _create(path: str) -> None:
    """Create a bare repository at ``path`` atomically (built aside, then renamed into place)."""
    parent = os.path.dirname(path) or "."
    import tempfile

    try:
        os.makedirs(parent, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".qvc-init-", dir=parent)
    except OSError as exc:
        raise StorageError.of(exc, path, "cannot create repository") from None
    try:
        repo = configured().init_repository(tmp, bare=True, initial_head="main")
        repo.config[FORMAT_KEY] = "1"
        repo.config["core.logAllRefUpdates"] = "true"  # reflogs of threads: `qvc reflog`
        repo.config["gc.auto"] = "0"
        repo.config["receive.denyNonFastForwards"] = "false"
        repo.free()
        os.makedirs(os.path.join(tmp, QVC_DIR, "journal"))
        os.rename(tmp, path)
    except (OSError, pygit2.GitError) as exc:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)  # nothing left behind (a full disk still lets us delete)
        if os.path.isdir(path) and os.listdir(path):
            return  # another process created it first; opening it will validate it
        raise StorageError.of(exc, path, "cannot create repository") from None


class _SharedFlock:
    """A shared ``flock`` on one file, held while any thread of this process needs it."""

    def __init__(self, path: str):
        self.fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o644)
        self._count = 0
        self._mutex = threading.Lock()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        with self._mutex:
            if self._count == 0:
                fcntl.flock(self.fd, fcntl.LOCK_SH)
            self._count += 1
        try:
            yield
        finally:
            with self._mutex:
                self._count -= 1
                if self._count == 0:
                    fcntl.flock(self.fd, fcntl.LOCK_UN)

    def pass_through(self) -> None:
        """Take the lock shared and give it back: wait while someone holds it exclusively."""
        fcntl.flock(self.fd, fcntl.LOCK_SH)
        fcntl.flock(self.fd, fcntl.LOCK_UN)

    def close(self) -> None:
        os.close(self.fd)


class Repository:
    """A qvc repository on disk. Use one instance per process (or per store)."""

    def __init__(self, path: str | os.PathLike, *, create: bool = True,
                 durability: DurabilityMode = DurabilityMode.SYNC, fsync: bool = True,
                 max_lag: float = 0.05, journal_limit: int = JOURNAL_LIMIT, readonly: bool = False):
        self.path = os.path.abspath(os.fspath(path))
        try:
            durability = DurabilityMode(durability.lower() if isinstance(durability, str) else durability)
        except ValueError:
            raise InvalidInputError(f"durability must be a DurabilityMode or one of 'sync', 'async', "
                                    f"'exit', not {durability!r}") from None
        if not isinstance(max_lag, (int, float)) or max_lag < 0:
            raise InvalidInputError(f"max_lag must be a non-negative number of seconds, not {max_lag!r}")
        self.durability = durability
        self.fsync = fsync
        self._journal_limit = journal_limit
        self._closed = True
        self._released = False
        if not os.path.exists(self.path) or (os.path.isdir(self.path) and not os.listdir(self.path)):
            if not create or readonly:
                raise NotARepositoryError(f"{self.path}: no such qvc repository")
            if os.path.isdir(self.path):
                os.rmdir(self.path)
            _create(self.path)
        self.readonly = readonly
        self._check()
        self.qvc_dir = os.path.join(self.path, QVC_DIR)
        if not readonly:
            os.makedirs(os.path.join(self.qvc_dir, "journal"), exist_ok=True)
        self._reader = None
        if readonly:
            self._reader = ObjectReader(self.path)
        self._refs = self._reader or RefReader(self.path)
        self._local = threading.local()
        self._gits: list[pygit2.Repository] = []
        self._gits_lock = threading.Lock()
        self._lock_path = os.path.join(self.qvc_dir, "lock")
        self._gate_path = os.path.join(self.qvc_dir, "gate")
        # read-only stores never write, so they need no lock (and work on a repository they cannot write)
        self._lock = None if readonly else _SharedFlock(self._lock_path)
        self._gate = None if readonly else _SharedFlock(self._gate_path)
        self._touched: set[str] = set()
        self._touched_lock = threading.Lock()
        self._harden_lock = threading.Lock()
        self.pack_dir = os.path.join(self.path, "objects", "pack")
        self._small_packs: list[str] = []  # packs of single writes, not yet merged
        self._merged: list[str] = []  # packs this store merged
        self._packs_lock = threading.Lock()
        self._consolidate_lock = threading.Lock()
        # Applied but not yet in git's files (see publish): objects by raw id, and leased refs.
        self._pending: dict[bytes, tuple[str, bytes]] = {}
        self._leases: dict[str, Lease] = {}
        self._serials = itertools.count(1)  # numbers this store's leases (see qvc.plumbing.leases)
        self._state = threading.RLock()  # guards both; held while publishing
        self._publish_mutex = threading.RLock()  # taken before _state, never after
        self._publisher: Worker | None = None  # started by the first deferred move
        self._workers_lock = threading.Lock()  # guards starting the packer (see close)
        self._calls = threading.Condition()  # guards _running and the change of _closed to True
        self._running = 0  # writes and flushes under way (see _admitted): close waits for them
        self._who: str | None = None  # the reflog identity (git's: user.name <user.email>)
        self._log_all: bool | None = None  # core.logAllRefUpdates
        # Recovery takes the exclusive lock (pausing writers) only when a quick look finds work.
        self.recovery = recovery.RecoveryReport()
        if recovery.needed(self):
            with self.exclusive():
                self.recovery = recovery.recover(self)
        if self.recovery:
            _warn("qvc: recovered %s: %s", self.path, self.recovery.summary())
        self._journal: Journal | None = None  # created by the first write: readers leave no trace
        self._journal_mutex = threading.Lock()
        self._flusher = Worker(self._sync_journal, max_lag) if durability is DurabilityMode.ASYNC else None
        self._packer: Worker | None = None  # started on first need
        #: called with each record after it is journaled (and, in SYNC mode, durable); must not block
        self.listeners: list[Callable[[Record], None]] = []
        self._created = 0  # refs this store created: a hint for packing refs (qvc.plumbing.refpack)
        self.listeners.append(self._count_created)
        self._closed = False
        _open_repos.add(self)
        if not readonly:
            _writers[self.path] = _writers.get(self.path, 0) + 1

    @property
    def journal(self) -> Journal:
        """This store's journal, created on first use."""
        journal = self._journal
        if journal is None:
            with self._journal_mutex:
                if self._journal is None:
                    self._journal = Journal(os.path.join(self.qvc_dir, "journal"), fsync=self.fsync)
                    leases.OWN.add(os.path.basename(self._journal.path))
                journal = self._journal
        return journal

    def _sync_journal(self) -> None:
        if self._journal is not None:
            self._journal.sync()

    def _check(self) -> None:
        if self.readonly:  # no libgit2 here: look for the parts of a bare repository
            for part, isdir in (("HEAD", False), ("objects", True), ("refs", True), (QVC_DIR, True)):
                where = os.path.join(self.path, part)
                if not (os.path.isdir(where) if isdir else os.path.isfile(where)):
                    raise NotARepositoryError(f"{self.path}: not a qvc repository (no {part})")
            return
        try:
            git = configured().Repository(self.path)
        except (pygit2.GitError, KeyError, OSError) as exc:
            raise NotARepositoryError(f"{self.path}: not a qvc repository ({exc})") from None
        try:
            if not git.is_bare:
                raise NotARepositoryError(f"{self.path}: not a qvc repository (a git work tree, not a bare repository)")
        finally:
            git.free()

    # -- git access ---------------------------------------------------------------------

    @property
    def git(self) -> pygit2.Repository:
        """This Python thread's ``pygit2.Repository``."""
        git = getattr(self._local, "git", None)
        if git is None:
            if self._released:
                raise StoreClosedError(f"{self.path}: the store is closed")
            git = configured().Repository(self.path)
            self._local.git = git
            with self._gits_lock:
                self._gits.append(git)
        return git

    def read(self, raw: bytes, kind: str | None = None) -> bytes:
        """An object's data; :class:`CorruptionError` if it is missing, unreadable or not ``kind``."""
        pending = self._pending.get(raw)
        if pending is not None:
            otype, data = TYPES[pending[0]], pending[1]
        else:
            otype, data = self._read_files(raw)
        if kind is not None and otype != TYPES[kind]:
            raise CorruptionError(f"object {raw.hex()} is a {TYPE_NAMES.get(otype, otype)}, expected a {kind}")
        return data

    def _read_files(self, raw: bytes) -> tuple[int, bytes]:
        """``(type, data)`` of an object from git's files (not this process's unpublished writes)."""
        if self._reader is not None:
            try:
                otype, data = self._reader.read(raw)
            except KeyError:
                raise CorruptionError(f"object {raw.hex()} is missing") from None
        else:
            oid = pygit2.Oid(raw=raw)
            for fresh in (False, True):
                try:
                    otype, data = self.retry_on_miss(lambda: self.git.odb.read(oid))
                    break
                except KeyError:
                    if fresh:
                        raise CorruptionError(f"object {oid} is missing") from None
                except (pygit2.GitError, OSError, ValueError) as exc:
                    if fresh:
                        raise CorruptionError(f"object {oid} is unreadable: {exc}") from None
                # Before calling it lost: this thread's libgit2 may hold a pack list from before
                # another store merged, repacked or recovery removed packs. Look once more afresh.
                self._reopen_git()
        return otype, data

    def _reopen_git(self) -> None:
        """Give this Python thread a new ``pygit2.Repository`` (a fresh view of the packs)."""
        old = getattr(self._local, "git", None)
        git = configured().Repository(self.path)
        self._local.git = git
        with self._gits_lock:
            self._gits.append(git)
            if old is not None and old in self._gits:
                self._gits.remove(old)
                old.free()  # qvc keeps no libgit2 objects between calls

    def retry_on_miss(self, lookup: Callable[[], T]) -> T:
        """Run a libgit2 object lookup, looking again while the pack directory keeps changing.

        libgit2 rescans the pack directory once on a miss. Another store merging its small
        packs can delete one between that scan and the lookup, hiding objects that now sit in
        the merged pack the scan did not see. A miss counts only once the directory held still.
        """
        try:
            return lookup()  # the hot path: no directory listing unless the object is missing
        except KeyError:
            before = sorted(os.listdir(self.pack_dir))
        for _ in range(MISS_RETRIES):
            try:
                return lookup()  # libgit2 rescans the directory (as it is now, or newer) first
            except KeyError:
                now = sorted(os.listdir(self.pack_dir))
                if now == before:
                    raise
                before = now
        return lookup()

    def read_tree(self, raw: bytes) -> dict[str, tuple[int, bytes]]:
        """A tree's entries as ``{name: (mode, raw oid)}``."""
        return parse_tree(self.read(raw, "tree"), raw)

    hash = staticmethod(pack.object_id)

    def has(self, raw: bytes, *, published: bool = False) -> bool:
        """Whether the repository has object ``raw`` whole: in git's files, or (unless
        ``published``: what other processes can read) written by this process and not yet published."""
        if raw in self._pending and not published:
            return True
        try:
            self._read_files(raw)
            return True
        except CorruptionError:
            return False

    def _store_objects(self, record: Record) -> None:
        """Make the record's objects not yet stored readable: this process reads them at once,
        git's files get them at the next :meth:`publish` (not yet durable: that is the record's job)."""
        todo = record.objects[record.stored:]
        if not todo:
            return
        _ = self.journal  # created (its name made durable) before any of its moves reaches git's files
        with self._state:
            for oid, obj in zip(record.oids[record.stored:], todo, strict=True):
                self._pending.setdefault(oid, obj)
        record.stored = len(record.objects)

    def consolidate(self) -> None:
        """Merge the small packs this store wrote into one; merge those in turn.

        Tiered like git's geometric repack: CONSOLIDATE_AT small packs become one, and
        CONSOLIDATE_AT merged packs become one, so a long run keeps few packs. Each merged pack
        is flushed to stable storage before the packs it replaces are removed.
        """
        with self._consolidate_lock, self._lock.held(), self._pack_lock():
            with self._packs_lock:
                small, self._small_packs = self._small_packs, []
            # git maintenance (qvc purge, git gc) may have repacked some of them already
            small = [b for b in small if os.path.exists(b + ".idx")]
            self._merged = [b for b in self._merged if os.path.exists(b + ".idx")]
            if len(small) == 1:
                with self._packs_lock:
                    self._small_packs[:0] = small
                return
            if small:
                self._merged.append(self._merge(small))
            if len(self._merged) >= CONSOLIDATE_AT:
                self._merged = [self._merge(self._merged)]

    def merge_small_packs(self, *, locked: bool = False) -> int:
        """Merge the directory's small packs into one once it holds ``MERGE_PACKS_AT`` of them;
        return how many were merged.

        Whoever wrote them: stores that closed (each leaves its last pack), writers killed
        before they merged their own, and so on. Runs under the exclusive maintenance lock, so
        no qvc writer is mid-write (``locked``: the caller, recovery, holds it; otherwise it is
        tried without waiting, and a busy repository is merged by a later close). Readers may
        run: the merged pack is on stable storage before the packs it replaces are removed,
        and a reader that misses an object looks again once the directory holds still
        (:meth:`retry_on_miss`). Packs with ``REF_DELTA`` entries (a fetch's completed thin
        pack) and torn ones are left alone (``qvc gc`` repacks everything; recovery removes torn packs).
        """
        if not locked:
            fd = os.open(self._lock_path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o644)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return 0
                return self.merge_small_packs(locked=True)
            finally:
                os.close(fd)
        with self._consolidate_lock, self._pack_lock():
            small = []
            for name in os.listdir(self.pack_dir):
                base = os.path.join(self.pack_dir, name[:-4])
                if not name.endswith(".idx") or any(os.path.exists(base + ext) for ext in _NOT_MERGED):
                    continue
                with contextlib.suppress(OSError):
                    if os.path.getsize(base + ".pack") < SMALL_PACK:
                        small.append(base)
            if len(small) < MERGE_PACKS_AT:
                return 0
            small = [b for b in sorted(small) if pack.mergeable(b)]
            if len(small) < 2:
                return 0
            merged = self._merge(small)
            gone = set(small) - {merged}
            with self._packs_lock:
                self._small_packs = [b for b in self._small_packs if b not in gone]
            self._merged = [b for b in self._merged if b not in gone and b != merged] + [merged]
            return len(small)

    @contextlib.contextmanager
    def _pack_lock(self) -> Iterator[None]:
        fd = os.open(os.path.join(self.path, PACK_LOCK), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _merge(self, bases: list[str]) -> str:
        merged = pack.merge(self.pack_dir, bases, fsync=self.fsync)
        if self.fsync:
            fsync_dir(self.pack_dir)
        for base in bases:
            if base != merged:
                # the index first (readers find packs by it), then the pack, then what git keeps
                # next to packs it wrote (bitmap, reverse index)
                for ext in (".idx", ".pack", ".bitmap", ".rev"):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(base + ext)
        return merged

    # -- refs -------------------------------------------------------------------------

    def ref(self, name: str, *, settle: bool = True) -> str | None:
        """The hex target of ``name``, or ``None`` when it does not exist (this process's
        unpublished moves included). With ``settle``, another live store's lease on it is
        waited for first (:func:`qvc.plumbing.leases.settle`); without, git's files are read
        as they are (for who holds or is finishing that lease)."""
        lease = self._leases.get(name)
        if lease is not None:
            return lease.value
        self._ensure_usable()
        self.catch_up()
        return self._refs.ref(name, settle=settle)

    def catch_up(self) -> None:
        """Publish what this process's other repositories open at this path have not yet
        written to git's files, so that this one reads their writes at once (as their own
        readers do). A no-op without such peers, and while this thread holds an exclusive
        lock (:meth:`exclusive` published them before taking it, and they cannot write meanwhile)."""
        if _writers.get(self.path, 0) > (0 if self.readonly else 1) and not getattr(_excluding, "depth", 0):
            for repo in list(_open_repos):
                if repo is not self and repo.path == self.path and (repo._pending or repo._leases):
                    repo.publish()

    def refs(self, prefix: str) -> Iterator[tuple[str, str]]:
        """``(name, hex target)`` of every ref under ``prefix`` (this process's unpublished moves included)."""
        self._ensure_usable()
        mine = self.unpublished(prefix)  # before git's files: a lease published meanwhile is on disk by then
        if self._reader is not None:
            found = list(self._reader.refs(prefix))
        else:
            self._refs.loose_names(prefix)  # waits for other stores' leases under prefix (see leases.settle)
            direct = pygit2.enums.ReferenceType.DIRECT
            try:  # read them all first: callers read objects meanwhile, which may reopen self.git
                found = [(ref.name, str(ref.target)) for ref in self.git.references.iterator()
                         if ref.name.startswith(prefix) and ref.type == direct]
            except pygit2.GitError as exc:
                raise CorruptionError(f"{self.path}: refs are unreadable: {exc}") from None
        if mine:
            found = [(n, mine.pop(n) if n in mine else v) for n, v in found]
            found += [(n, v) for n, v in sorted(mine.items()) if v is not None]
        yield from found

    def unpublished(self, prefix: str) -> dict[str, str | None]:
        """Name → value of this process's ref moves under ``prefix`` that git's files lack yet
        (other repositories open at this path are published first, see :meth:`catch_up`): what
        a reader of ref files (:class:`qvc.plumbing.odb.RefReader`) must add to see them."""
        self.catch_up()
        if not self._leases:
            return {}
        with self._state:
            return {n: lease.value for n, lease in self._leases.items() if n.startswith(prefix)}

    def _move_ref(self, record: Record, name: str, old: str | None, new: str | None,
                  message: str | None = None) -> None:
        self._store_objects(record)
        _ = self.journal  # created (its name made durable) before any of its moves reaches git's files
        if old is not None and name not in self._touched:
            # Power-loss safety: before this process first moves an existing ref, make its
            # current value durable in the journal so recovery can always roll back to it.
            with self._touched_lock:
                if name not in self._touched:
                    self.journal.sync(self.journal.append(Record(refs=[(name, old, old)])))
        # The record is journaled after the refs move: its space is taken now, so a full disk
        # fails the write here, before any ref moved, and never between the move and the journal.
        self.journal.reserve(record.size_hint(more_refs=1))
        if new is None:
            self.publish()  # deletes are never deferred: git's files first catch up with this process
            self._move_now(record, name, old, new, message)
        else:
            self._lease_move(record, name, old, new, message)
        with self._touched_lock:
            self._touched.add(name)
        record.refs.append((name, old, new))

    def _lease_move(self, record: Record, name: str, old: str | None, new: str, message: str | None) -> None:
        """Move ``name`` under this process's lease on it (see :mod:`qvc.plumbing.leases`), taking
        the lease first if needed; git's files get the move at the next :meth:`publish`."""
        why = message or "qvc"
        deadline = time.monotonic() + LOCK_WAIT
        delay = 0.0005
        while True:
            with self._state:
                lease = self._leases.get(name)
                if lease is not None:
                    if lease.value != old:
                        raise self._moved(name, old, lease.value)
                    record.seen[name] = [lease.identity, self.generation(), lease.serial]
                    lease.value = new
                    lease.moves.append((old, new, why, time.time()))
                    break
                identity, generation, serial = self.file_identity(name), self.generation(), next(self._serials)
                fd = leases.take(self.path, name, os.path.basename(self.journal.path), serial)
                if fd is not None:
                    try:
                        current = self._refs.ref(name, settle=False)  # under our lease: no one else moves it
                    except BaseException:
                        leases.drop(self.path, name, fd)
                        raise
                    if current != old:
                        leases.drop(self.path, name, fd)
                        raise self._moved(name, old, current)
                    self._leases[name] = Lease(fd, new, identity, [(old, new, why, time.time())], serial)
                    record.seen[name] = [identity, generation, serial]
                    break
            self._clear_stale_lock(name)  # another writer holds it: wait, unless it is a stale or dead one's
            if time.monotonic() > deadline:
                raise CheckpointConflictError(f"{name}: locked by another writer for over {LOCK_WAIT:.0f} s")
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        if self._publisher is None:
            with self._state:
                if self._publisher is None:
                    self._publisher = Worker(self._publish_quietly, PUBLISH_LAG, name="qvc-publisher")

    @staticmethod
    def _moved(name: str, old: str | None, current: str | None) -> CheckpointConflictError:
        if old is None:
            return CheckpointConflictError(f"{name}: created by another writer meanwhile")
        found = (current or "nothing")[:12]
        return CheckpointConflictError(f"{name}: moved by another writer (expected {old[:12]}, found {found})")

    def _move_now(self, record: Record, name: str, old: str | None, new: str | None, message: str | None) -> None:
        """Move ``name`` in git's files at once, by compare-and-swap under git's ref lock."""
        deadline = time.monotonic() + LOCK_WAIT
        delay = 0.0005
        while True:
            record.seen[name] = [self.file_identity(name), self.generation()]
            try:
                self._cas(name, old, new, message)
                break
            except (OSError, pygit2.GitError) as exc:  # another writer holds the ref's lock file
                if "lock" not in str(exc):
                    raise
                self._clear_stale_lock(name)
                if time.monotonic() > deadline:
                    raise CheckpointConflictError(
                        f"{name}: locked by another writer for over {LOCK_WAIT:.0f} s") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.05)

    # -- publishing ---------------------------------------------------------------------

    def publish(self) -> None:
        """Write what this process has applied but git's files lack: every pending object, as one
        pack, then every leased ref (its reflog lines, then its value), releasing the leases.

        Until then the writing process reads its writes at once and other processes (and plain
        git) see the refs' previous values; the publisher thread does this about
        :data:`PUBLISH_LAG` after each write, and :meth:`flush`, :meth:`close`, maintenance and
        every ``git`` run on the repository (:mod:`qvc.plumbing.launcher`) do it first.
        Durability is the journal's, not this. Raises ``OSError`` if a file cannot be written
        (a full disk, say); what was not written stays pending and the next call retries.
        """
        if not (self._pending or self._leases) or self._released:
            return
        with contextlib.ExitStack() as held:
            if not getattr(self._local, "exclusive", False):  # else maintenance already excludes writers
                held.enter_context(self._lock.held())
            with self._publish_mutex:
                # The journal first: git's files are written without a flush and a batch holds
                # several writes, whose renames a power cut may keep in any subset; recovery
                # rolls such a mix forward to the journal's end, so that end must be on disk.
                # Flushed before the state lock is taken, so that puts go on meanwhile; under
                # it, only what they appended since (usually nothing: a no-op) is flushed.
                self._sync_journal()
                with self._state:
                    self._sync_journal()
                    if self._pending:
                        objects = list(self._pending.items())
                        base = pack.write(self.pack_dir, [obj for _, obj in objects], [oid for oid, _ in objects])
                        with self._packs_lock:
                            self._small_packs.append(base)
                        self._pending.clear()
                    if self._leases:
                        head = self._head_target()
                        who = self._identity()
                        for name in list(self._leases):
                            leases.publish(self.path, name, self._leases[name], who, log=self._logged(name),
                                           head_too=name == head)
                            del self._leases[name]
        self._consolidate_soon()

    def _consolidate_soon(self) -> None:
        if len(self._small_packs) >= CONSOLIDATE_AT or self._created >= refpack.PACK_REFS_AT:
            # Runs after publish() let go of its locks, in any thread that published: one
            # packer, started under the lock and never once close() began (close stops it).
            with self._workers_lock:
                if self._packer is None and not self._closed:
                    self._packer = Worker(self._maintain_quietly, 0.0, name="qvc-packer")
                packer = self._packer
            if packer is not None:
                packer.poke()

    def _publish_quietly(self) -> None:
        try:
            self.publish()
        except Exception as exc:  # kept pending: the next write, flush or close retries, and close reports it
            _warn("qvc: writing %s's git files failed (retried later): %s", self.path, exc)

    def _head_target(self) -> str | None:
        """The ref HEAD names (read from its file), or ``None``."""
        try:
            with open(os.path.join(self.path, "HEAD"), "rb") as f:
                data = f.read(4096)
        except OSError:
            return None
        return data[5:].strip().decode("utf-8", "replace") if data.startswith(b"ref: ") else None

    def _identity(self) -> str:
        """Who reflog lines name, as git and libgit2 do: ``user.name <user.email>``, else ``unknown``."""
        if self._who is None:
            try:
                sig = self.git.default_signature
                self._who = f"{sig.name} <{sig.email}>"
            except (pygit2.GitError, KeyError, ValueError):
                self._who = "unknown <unknown>"
        return self._who

    def _logged(self, name: str) -> bool:
        """Whether git would keep a reflog for ``name`` (``core.logAllRefUpdates``, or an existing log)."""
        if self._log_all is None:
            try:
                self._log_all = bool(self.git.config.get_bool("core.logAllRefUpdates"))
            except (KeyError, pygit2.GitError, ValueError):
                self._log_all = False
        if self._log_all and (name.startswith(leases.LOGGED) or name == "HEAD"):
            return True
        return os.path.exists(os.path.join(self.path, "logs", name))

    def _cas(self, name: str, old: str | None, new: str | None, message: str | None) -> None:
        git = self.git
        refs = git.references
        if old is None:
            if new is None:
                return
            # Not references.create(force=False): libgit2 checks for an existing ref before it
            # takes the lock, so two creators can both succeed and the second overwrites the
            # first. Check under the ref's own lock instead.
            with git.transaction() as tx:
                tx.lock_ref(name)
                if refs.get(name) is not None:
                    raise self._moved(name, None, None)
                tx.set_target(name, pygit2.Oid(hex=new), message=message or "qvc")
            return
        ref = refs.get(name)
        current = None if ref is None else str(ref.target)
        if current != old:
            raise self._moved(name, old, current)
        try:
            if new is None:
                ref.delete()
            else:
                ref.set_target(pygit2.Oid(hex=new), message or "qvc")
        except pygit2.GitError as exc:
            if "does not match" in str(exc) or "not found" in str(exc):
                raise CheckpointConflictError(f"{name}: moved by another writer meanwhile") from None
            raise

    # -- HEAD and reflogs ---------------------------------------------------------------

    def head_ref(self) -> tuple[str | None, str | None]:
        """``(ref name, commit)`` HEAD stands for: ``(name, None)`` on an unborn branch,
        ``(None, commit)`` when detached."""
        self.catch_up()
        if self._reader is not None:
            return self._reader.head()
        try:
            head = self.git.references.get("HEAD")
        except (pygit2.GitError, ValueError) as exc:
            raise CorruptionError(f"{self.path}: HEAD is unreadable: {exc}") from None
        if head is None:
            raise CorruptionError(f"{self.path}: HEAD is missing")
        if head.type == pygit2.enums.ReferenceType.SYMBOLIC:
            name = head.target
            return name, self.ref(name)
        return None, str(head.target)

    def reflog(self, name: str) -> list[ReflogEntry]:
        """The reflog of ``name`` (e.g. a thread's branch), newest first; ``[]`` if it has none.

        Parsed leniently: a line torn by a crash is skipped, not an error. Includes entries
        compacted into ``qvc/reflogs`` (:mod:`qvc.plumbing.reflog`), as long as the ref exists,
        and this process's moves not yet published.
        """
        if name not in self._leases:
            self.catch_up()
            leases.settle(self.path, (name,))
            entries = read_reflog(self.path, name)
            if entries and not os.path.exists(os.path.join(self.path, "logs", name)) and self.ref(name) is None:
                return []  # compacted entries of a ref deleted since
            return entries
        with self._state:  # not while a publish moves the lines from memory to the file
            entries = read_reflog(self.path, name)
            lease = self._leases.get(name)
            if lease is not None and lease.moves and self._logged(name):
                if lease.moves[0][0] is None:  # created under this lease: what the files hold is an earlier life's
                    entries = []
                who = self._identity()
                entries[:0] = [ReflogEntry(old, new, int(when), who, why)
                               for old, new, why, when in reversed(lease.moves)]
        return entries

    def file_identity(self, name: str) -> list | None:
        """``[inode, mtime ns]`` of the file holding ref ``name`` (its loose file, else packed-refs)
        or of another file of the repository, ``None`` if there is none."""
        for rel in (name, "packed-refs") if name.startswith("refs/") else (name,):
            try:
                st = os.stat(os.path.join(self.path, rel))
                return [st.st_ino, st.st_mtime_ns]
            except FileNotFoundError:
                continue
        return None

    def generation(self) -> str | None:
        """The token in ``qvc/generation`` (replaced by every delete), ``None`` if there is none yet."""
        try:
            with open(os.path.join(self.path, GENERATION), encoding="ascii", errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def locked_refs(self, prefix: str) -> list[str]:
        """The refs under ``prefix`` that have a lock file now (any store's lease, or git's own)."""
        return [n[:-5] for n in self._refs.walk(prefix) if n.endswith(".lock")]

    def finish_dead_writer(self, name: str) -> bool:
        """Before a writer reads or moves ref ``name``: if a dead store left its lease on it,
        roll that lease forward (:func:`qvc.plumbing.recovery.adopt_lease`), or complete its
        publication if a kill cut it short (:func:`qvc.plumbing.recovery.finish_publication`),
        so that the writer builds on everything the dead store acknowledged. Returns whether
        the ref has a lock that is no dead store's (git's own, or a live store's lease).
        Costs one ``stat`` when the ref has no lock."""
        if name in self._leases or not os.path.lexists(leases.lock_path(self.path, name)):
            return False
        holder = leases.holder(self.path, name)
        if holder is not None:
            if not recovery.journal_alive(self, holder):
                recovery.adopt_lease(self, name, holder)
            return os.path.lexists(leases.lock_path(self.path, name))
        return not recovery.finish_publication(self, name)

    def _clear_stale_lock(self, name: str, older_than: float = LOCK_WAIT / 2) -> None:
        """Remove ``name``'s lock when its writer is gone: a dead store's is finished
        (:meth:`finish_dead_writer`), git's own goes once it is ``older_than`` seconds old; a
        live store's lease is never touched."""
        if not self.finish_dead_writer(name) or leases.holder(self.path, name) is not None:
            return
        lock = os.path.join(self.path, name + ".lock")
        with contextlib.suppress(OSError):
            if time.time() - os.stat(lock).st_mtime > older_than:
                os.unlink(lock)
                _warn("qvc: removed stale lock %s", lock)

    # -- durability -------------------------------------------------------------------

    def _commit(self, record: Record) -> None:
        """Journal ``record``, apply the durability mode (SYNC: durable on return), tell the listeners."""
        self._store_objects(record)
        seq = self.journal.append(record)
        if self.durability is DurabilityMode.SYNC:
            try:
                self.journal.sync(seq)
            except OSError as exc:
                raise DurabilityError(f"{self.path}: flush failed ({exc}); the write is not durable") from exc
        elif self._flusher is not None:
            self._flusher.poke()
        for listener in self.listeners:
            listener(record)
        if self.journal.size > self._journal_limit:
            self.harden()
        elif self._publisher is not None and (self._pending or self._leases):
            self._publisher.poke()

    def _count_created(self, record: Record) -> None:
        self._created += sum(1 for _, old, new in record.refs if old is None and new is not None)

    def _pack_refs_quietly(self) -> None:
        """Add this store's created refs to the shared count; once it is due, pack the refs,
        compact the one-line reflogs of threads and, when due, write the commit-graph
        (:mod:`qvc.plumbing.refpack`)."""
        created, self._created = self._created, 0
        try:
            due = refpack.note_created(self.path, created)
            if due >= refpack.PACK_REFS_AT:
                with self._lock.held():
                    if refpack.pack_refs(self.path, fsync=self.fsync):
                        refpack.compact_reflogs(self.path, fsync=self.fsync)
                        if refpack.graph_due(self.path, due):
                            refpack.commit_graph(self.path, fsync=self.fsync)
        except Exception as exc:  # harmless: loose refs stay readable, a later store packs them
            _warn("qvc: packing refs in %s failed: %s", self.path, exc)

    def _maintain_quietly(self) -> None:
        """The packer's task: merge this store's small packs, and pack the refs it created
        once :data:`~qvc.plumbing.refpack.PACK_REFS_AT` of them are published, so that a store
        creating many threads pays for packing them as it goes, not all at once in ``close()``
        (removing thousands of loose files takes seconds on some disks)."""
        if len(self._small_packs) >= CONSOLIDATE_AT:
            self._consolidate_quietly()
        if self._created >= refpack.PACK_REFS_AT:
            self._pack_refs_quietly()

    def _consolidate_quietly(self) -> None:
        try:
            self.consolidate()
        except Exception as exc:  # harmless: the small packs stay and are merged later
            _warn("qvc: merging small packs in %s failed: %s", self.path, exc)

    def harden(self) -> None:
        """Publish, flush the git files themselves and restart the journal (it is then redundant)."""
        # no move may slip between the publish and the restart (the mutex first, as publish takes them)
        with self._harden_lock, self._publish_mutex, self._state:
            self.publish()
            harden(self.path, fsync=self.fsync)
            with self._touched_lock:
                names = sorted(self._touched)
            self.journal.restart(Record(refs=[(n, None, self.ref(n)) for n in names], base=True))

    def raise_if_failed(self) -> None:
        """Raise an earlier failed flush (in the background or not) as :class:`DurabilityError`.

        Sticky: after a failed flush nothing later can be promised durable (Linux may drop the
        dirty pages and report success next time), so every call raises until the store is
        reopened, which replays the journal.
        """
        exc = self._journal.failed if self._journal is not None else None
        if exc is None and self._flusher is not None:
            exc = self._flusher.error
        if exc is not None:
            raise DurabilityError(f"{self.path}: a flush failed ({exc}); reopen the store") from exc

    def flush(self) -> None:
        """Make every write so far durable (already so in SYNC mode) and visible to other
        processes and to plain git (:meth:`publish`). Raises :class:`DurabilityError` if either fails."""
        with self._admitted():
            self.raise_if_failed()
            try:
                self._sync_journal()
                self.publish()
            except OSError as exc:
                raise DurabilityError(f"{self.path}: flush failed ({exc}); reopen the store") from exc

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """The one way to change a repository: ``with repo.transaction() as tx: ...``.

        See :class:`Transaction`. Holds the shared maintenance lock (as :meth:`writing`) for the
        block. Raises :class:`~qvc.errors.StorageError` (keeping the errno) when the file system
        fails a write (a full disk: nothing is acknowledged then, and writes work again once
        space is freed), :class:`~qvc.errors.InvalidInputError` on a read-only repository,
        :class:`~qvc.errors.StoreClosedError` once closed, and :class:`~qvc.errors.DurabilityError`
        after an earlier failed flush or when this transaction's own flush fails.
        """
        with self.writing():
            tx = Transaction(self)
            try:
                try:
                    yield tx
                finally:
                    tx._finish()
            except StorageError:
                raise
            except OSError as exc:  # a full disk, an I/O error: what was acknowledged before stays
                raise StorageError.of(exc, self.path) from exc
            except pygit2.GitError as exc:
                if errno_in(str(exc)) is None:
                    raise
                raise StorageError.of(exc, self.path) from exc

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the shared maintenance lock (no recovery, gc or purge meanwhile, in any process);
        surfaces earlier flush failures first. Changes themselves go through :meth:`transaction`;
        this alone suits work that must exclude maintenance while it reads or runs ``git``.
        :meth:`close` waits for the block to end."""
        if not getattr(self._local, "admitted", 0):  # else nested in a write that close() waits for
            self._ensure_open()
        if self.readonly:
            raise InvalidInputError(f"{self.path}: opened read-only")
        self.raise_if_failed()
        self._gate.pass_through()
        with self._lock.held(), self._admitted():  # counted past the gate: close() never waits out a gc
            yield

    @contextlib.contextmanager
    def _admitted(self) -> Iterator[None]:
        """Count a write or flush while it runs, so that :meth:`close` waits for it; raise
        :class:`StoreClosedError` once close began, except in a thread already admitted (a
        transaction's own flush completes)."""
        depth = getattr(self._local, "admitted", 0)
        with self._calls:
            if not depth:
                self._ensure_open()
            self._running += 1
        self._local.admitted = depth + 1
        try:
            yield
        finally:
            self._local.admitted = depth
            with self._calls:
                self._running -= 1
                self._calls.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[int]:
        """Exclude every writer of every process (for recovery and maintenance).

        Publishes this process's writes first; then closes the gate (``qvc/gate``: no new
        transaction starts) and lets other processes' stores publish their leases, since git
        refuses to touch a locked ref; then takes the lock (``qvc/lock``). Yields the lock's
        file descriptor: a subprocess that must stay covered by the lock even if this process
        dies (``git repack``) inherits it, and the lock then lasts until the subprocess exits.
        """
        if not getattr(_excluding, "depth", 0):
            publish_open(self.path)  # this process's own writes first: they must not wait for the lock
        gate = -1
        try:  # a read-only store recovering closes the gate as well, where the file is there to lock
            gate = os.open(self._gate_path, (os.O_RDONLY if self.readonly else os.O_CREAT | os.O_RDWR) | os.O_CLOEXEC,
                           0o644)
        except OSError:
            if not self.readonly:
                raise
        fd = os.open(self._lock_path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o644)
        locked = False
        try:
            if gate >= 0:
                # Writers pass the gate on their way in, so it is soon ours, and then no new
                # transaction (only they take leases) begins. The leases other processes'
                # stores still hold are published before we go on (publishing needs only the
                # shared lock), since git refuses to touch a locked ref.
                fcntl.flock(gate, fcntl.LOCK_EX)
            for _ in range(EXCLUSIVE_TRIES):
                fcntl.flock(fd, fcntl.LOCK_EX)
                locks = self.locked_refs("refs/")
                held = leases.foreign(self.path, locks) if locks and gate >= 0 else []
                if not held:
                    break
                fcntl.flock(fd, fcntl.LOCK_UN)
                leases.settle(self.path, held)
            else:
                fcntl.flock(fd, fcntl.LOCK_EX)  # leases of a store that does not publish: git may refuse them
            locked = self._local.exclusive = True
            _excluding.depth = getattr(_excluding, "depth", 0) + 1
            yield fd
        finally:
            if locked:
                _excluding.depth -= 1
            self._local.exclusive = False
            os.close(fd)
            if gate >= 0:
                os.close(gate)

    def _ensure_usable(self) -> None:  # reads work during recovery in __init__, not after close
        if self._released:
            raise StoreClosedError(f"{self.path}: the store is closed")

    def _ensure_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"{self.path}: the store is closed")

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Flush, harden and release everything. Idempotent. Raises a pending flush failure.

        Writes and flushes other threads began before are waited for (up to :data:`CLOSE_WAIT`
        seconds), so what they acknowledge is published with the rest; later ones raise
        :class:`StoreClosedError`. Every worker thread of the store is stopped and joined."""
        with self._calls:
            if self._closed:
                return
            self._closed = True  # under the lock: no write is admitted after this (see _admitted)
            mine = getattr(self._local, "admitted", 0)  # closed from within a write of this thread
            if not self._calls.wait_for(lambda: self._running <= mine, timeout=CLOSE_WAIT):
                _warn("qvc: closing %s while %d write(s) still run", self.path, self._running - mine)
        _open_repos.discard(self)
        if not self.readonly:
            _writers[self.path] -= 1
        error = None
        if self._flusher is not None:
            self._flusher.stop()
            error = self._flusher.error
        with self._state:  # _lease_move starts the publisher under this lock, only while there is none
            publisher = self._publisher
            if publisher is None:  # a stand-in: a write still running past CLOSE_WAIT starts none
                self._publisher = Worker(self._publish_quietly, PUBLISH_LAG, name="qvc-publisher", start=False)
        if publisher is not None:
            publisher.stop()
        try:
            self.publish()
        except OSError as exc:  # the journal has it all: kept, the next open replays it
            if self._leases:
                error = error or exc
            else:  # only objects of transactions that failed before moving a ref: nothing needs them
                self._pending.clear()
        with self._workers_lock:  # _closed is set: no packer starts after this (see _consolidate_soon)
            packer = self._packer
        if packer is not None:
            packer.stop()
        journal = self._journal
        if journal is not None:  # else this store never wrote: nothing to flush
            error = error or journal.failed
            self._consolidate_quietly()
            try:
                self.merge_small_packs()
            except Exception as exc:  # harmless: they stay, and a later close merges them
                _warn("qvc: merging packs in %s failed: %s", self.path, exc)
            self._pack_refs_quietly()
            try:
                journal.sync()
                harden(self.path, fsync=self.fsync)
                # After a failed flush the journal is the only trustworthy record: keep it for replay.
                journal.close(remove=error is None)
            except OSError as exc:
                error = error or exc
                journal.close(remove=False)  # keep it: the next open replays it
        if journal is not None:
            leases.OWN.discard(os.path.basename(journal.path))
        for flock in (self._lock, self._gate):
            if flock is not None:
                flock.close()
        if self._reader is not None:
            self._reader.close()
        with self._gits_lock:
            for git in self._gits:
                git.free()
            self._gits.clear()
        self._local = threading.local()
        self._released = True
        if error is not None:
            raise DurabilityError(f"{self.path}: flush failed: {error}") from error


class Transaction:
    """One journaled change to a repository: objects written, then refs moved by compare-and-swap.

    Made by :meth:`Repository.transaction`, never directly. Every writer of qvc goes through
    one, so this class is the whole write path: what it does on disk is decided here.

    * :meth:`write` adds an object and returns its id. This process can read the objects from
      the transaction's first ref move (or :meth:`store`) on; git's files get them, as one pack
      shared with other writes, when the repository publishes (:meth:`Repository.publish`), always
      before any ref that needs them, so no ref on disk ever points at an object that is not there.
    * :meth:`move_ref` moves a ref by compare-and-swap; it takes effect at once for this process
      (readers see it) and raises :class:`~qvc.errors.CheckpointConflictError` if the ref is
      not at ``old``. The move holds a lease on the ref (its git lock) until it is published,
      about :data:`PUBLISH_LAG` later, so no other process or git moves it meanwhile; other
      processes' readers of the ref wait for that (:func:`qvc.plumbing.leases.settle`), so they
      see it once the transaction returned. A delete (``new=None``) is published at once.
    * At the end of the ``with`` block, also when it raises, a transaction that moved a ref
      is appended to the journal as one record and the
      repository's durability mode applies: in SYNC mode the change is on stable storage when
      the block exits, in ASYNC within the repository's ``max_lag``, in EXIT at flush or close.
      Then each of :attr:`Repository.listeners` is called with the record (caches follow
      writes this way). A transaction that moved no ref leaves no trace but unreferenced
      objects (removed by ``qvc purge``).
    * :meth:`rewrite_history` marks a change that deletes or rewrites history: at the end the
      record (if it moved a ref) is flushed in every mode, then ``qvc/generation`` gets a new
      token, which tells every process to rebuild what it derived from history.

    A transaction is used by one Python thread. Ref moves are not undone when the block raises:
    what was applied is journaled, so recovery can always roll a crash forward or back.
    """

    def __init__(self, repo: Repository):
        self.repo = repo
        self.record = Record()
        self._token: str | None = None

    def write(self, kind: str, data: bytes) -> bytes:
        """Add a git object (``"blob"``, ``"tree"`` or ``"commit"``) to the transaction; return its raw id."""
        oid = pack.object_id(kind, data)
        self.record.objects.append((kind, data))
        self.record.oids.append(oid)
        return oid

    def store(self) -> None:
        """Make the objects added so far readable by this process now, before any ref moves
        (not yet in git's files: see :meth:`Repository.publish`; not yet durable: that comes
        with the record)."""
        self.repo._store_objects(self.record)

    def ref(self, name: str) -> str | None:
        """The current hex target of ref ``name`` (``None`` if absent), as :meth:`Repository.ref`,
        once a dead store's lease on it is rolled forward (:meth:`Repository.finish_dead_writer`):
        what a write compares against includes everything any store acknowledged."""
        self.repo.finish_dead_writer(name)
        return self.repo.ref(name)

    def refs(self, prefix: str) -> list[tuple[str, str]]:
        """``(name, hex target)`` of every ref under ``prefix``, as :meth:`Repository.refs`, once
        every dead store's lease under ``prefix`` is rolled forward (:meth:`Repository.finish_dead_writer`):
        a change that rewrites or deletes the refs it lists reaches those a dead store
        acknowledged but never published (the superseded line its time travel created, say)."""
        for name in self.repo.locked_refs(prefix):
            self.repo.finish_dead_writer(name)
        return list(self.repo.refs(prefix))

    def move_ref(self, name: str, old: str | None, new: str | None, message: str | None = None) -> None:
        """Compare-and-swap ref ``name`` from ``old`` to ``new`` (``None``: absent; both ``None``: no-op).

        ``message`` is the reflog entry's cause (thread branches keep reflogs). Raises
        :class:`~qvc.errors.CheckpointConflictError` if the ref is not at ``old`` (another
        writer moved it) or stays locked by another writer for over ``LOCK_WAIT`` seconds.
        """
        self.repo._move_ref(self.record, name, old, new, message)

    def record_moves(self, moves: list[tuple[str, str | None, str | None]]) -> None:
        """Journal ref moves that ``git`` made while this transaction held the lock (a fetch
        updating remote-tracking refs): ``(name, old, new)`` each, already applied. They join
        this transaction's record, so durability and the listeners treat them as its own."""
        self.record.refs.extend(moves)

    def rewrite_history(self) -> None:
        """Mark this transaction as deleting or rewriting history (see the class docstring).

        The new generation token is noted in the record, so recovery knows it as this writer's."""
        if self._token is None:
            self._token = os.urandom(8).hex()
            self.record.seen[GENERATION] = [None, self._token]

    def prepend_reflog(self, name: str, entries: list[ReflogEntry]) -> None:
        """Put ``entries`` (newest first, as :meth:`Repository.reflog` gives them) before the
        reflog of ``name``, which this transaction must have moved: a renamed ref keeps its past."""
        self.repo.publish()
        path = os.path.join(self.repo.path, "logs", name)
        with open(path, "rb") as f:
            tail = f.read()
        lines = [f"{e.old or ZERO} {e.new or ZERO} {e.who} {e.time} +0000\t{e.message}\n" for e in reversed(entries)]
        with open(path + ".qvc-rename", "wb") as f:
            f.write("".join(lines).encode() + tail)
        os.replace(path + ".qvc-rename", path)

    def set_head(self, target: str) -> None:
        """Point HEAD at a ref name (``refs/heads/...``, possibly unborn) or detach it at a commit SHA.

        HEAD is not journaled: it is flushed on the spot (durable on return unless the
        repository was opened with ``fsync=False``)."""
        repo = self.repo
        log = os.path.join(repo.path, "logs", "HEAD")
        try:
            size = os.path.getsize(log)
        except OSError:
            size = None
        try:
            if target.startswith("refs/"):
                repo.git.set_head(target)
            else:
                repo.git.set_head(pygit2.Oid(hex=target))
        except (OSError, pygit2.GitError):
            if size is not None:  # libgit2 may have logged the move that then failed (a full disk)
                with contextlib.suppress(OSError):
                    os.truncate(log, size)
            raise
        if repo.fsync:
            fd = os.open(os.path.join(repo.path, "HEAD"), os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(repo.path)

    def _finish(self) -> None:
        if not self.record.refs:  # nothing moved (a rewrite that failed first included): no trace
            return
        self.repo._commit(self.record)
        if self._token is not None:
            # Durable first, in every mode: a power cut must never keep the new token and lose
            # the record naming it, or recovery would take this delete for a later writer's and
            # leave the refs journalled before unrestored.
            self.repo.flush()
            path = os.path.join(self.repo.path, GENERATION)
            tmp = f"{path}.{os.getpid()}.{threading.get_ident()}"
            with open(tmp, "w") as f:
                f.write(self._token)
            os.replace(tmp, path)
