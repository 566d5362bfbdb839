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

:class:`Repository` opens and closes a repository and composes the parts, each of which owns
its state: the reads (:mod:`qvc.plumbing.backend`: libgit2, or a read-only backend without
it), the pack set and its packer (:mod:`qvc.plumbing.packset`), publication, leases and ref
moves (:mod:`qvc.plumbing.publication`), the locks (:mod:`qvc.plumbing.locking`), and the
journal with the durability mode (here). :class:`Transaction` (:mod:`qvc.plumbing.transaction`)
uses it through :class:`~qvc.plumbing.transaction.TransactionHost`.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import weakref
from typing import Callable, Iterator, TypeVar

from qvc.errors import (
    CorruptionError,
    DurabilityError,
    InvalidInputError,
    NotARepositoryError,
    StorageError,
    StoreClosedError,
    errno_in,
)
from qvc.plumbing import launcher, leases, pack, recovery, refpack
from qvc.plumbing.backend import MISS_RETRIES, QVC_DIR, Backend, GitBackend, ReadOnlyBackend
from qvc.plumbing.durability import DirtyPaths, DurabilityMode, Worker, dirty
from qvc.plumbing.journal import GENERATION, Journal, Record, fsync_dir
from qvc.plumbing.libgit2 import configured, pygit2
from qvc.plumbing.locking import EXCLUSIVE_TRIES, PACK_LOCK, LockProtocol, excluding
from qvc.plumbing.objects import TYPE_NAMES, TYPES, parse_tree
from qvc.plumbing.packset import CONSOLIDATE_AT, MERGE_PACKS_AT, SMALL_PACK, PackSet
from qvc.plumbing.publication import LOCK_WAIT, PUBLISH_LAG, GenerationWatch, Publication, file_identity
from qvc.plumbing.reflog import ReflogEntry, read_reflog
from qvc.plumbing.transaction import Transaction, TransactionHost

log = logging.getLogger("qvc")
FORMAT_KEY = "qvc.format"
JOURNAL_LIMIT = 64 * 2**20
CLOSE_WAIT = 2 * LOCK_WAIT  # how long close() waits for writes other threads began before it
T = TypeVar("T")

#: names that moved to the modules owning them and stay importable from here
__all__ = [
    "CLOSE_WAIT", "CONSOLIDATE_AT", "EXCLUSIVE_TRIES", "FORMAT_KEY", "GENERATION", "JOURNAL_LIMIT", "LOCK_WAIT",
    "MERGE_PACKS_AT", "MISS_RETRIES", "PACK_LOCK", "PUBLISH_LAG", "QVC_DIR", "SMALL_PACK", "Repository",
    "Transaction", "TransactionHost", "publish_open",
]

_open_repos: weakref.WeakSet[Repository] = weakref.WeakSet()
_writers: dict[str, int] = {}  # open writable repositories per path: how a reader knows it has peers


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


def _create(path: str, *, fsync: bool = True) -> None:
    """Create a bare repository at ``path`` atomically (built aside, then renamed into place);
    with ``fsync``, durable on return (a store's flushes cover only the files it writes)."""
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
        mark_blobs(tmp)
        os.makedirs(os.path.join(tmp, QVC_DIR, "journal"))
        if fsync:
            _flush_tree(tmp)
        os.rename(tmp, path)
        if fsync:
            fsync_dir(parent)
    except (OSError, pygit2.GitError) as exc:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)  # nothing left behind (a full disk still lets us delete)
        if os.path.isdir(path) and os.listdir(path):
            return  # another process created it first; opening it will validate it
        raise StorageError.of(exc, path, "cannot create repository") from None


#: how plain git shows a qvc repository's blobs (msgpack): every path has the ``qvc`` diff driver
#: (``info/attributes``), which is binary (the repository's config), so ``git log -p``, ``git show``
#: and ``git diff`` print "Binary files differ"; a user who wants JSON adds one line to the config,
#: ``git config diff.qvc.textconv "qvc cat-blob"`` (docs/format.md). qvc's own git runs never use a
#: textconv the repository names (:mod:`qvc.plumbing.launcher`).
ATTRIBUTES_LINE = "* diff=qvc"
DIFF_BINARY = "diff.qvc.binary"


def _user_decided(line: str) -> bool:
    """Whether an ``info/attributes`` line already says how git diffs every path (``* -diff``,
    ``* diff=json``, ...): then it is the user's choice, and qvc adds nothing."""
    parts = line.split()
    return len(parts) > 1 and parts[0] == "*" and any(a.lstrip("-!").split("=")[0] == "diff" for a in parts[1:])


def mark_blobs(path: str) -> bool:
    """Mark the blobs of the repository at ``path`` as binary for plain git (see
    :data:`ATTRIBUTES_LINE`), unless its ``info/attributes`` already has a line for every path's
    diff: then nothing changes. Only adds: a user's own lines and settings are kept, and an
    existing ``diff.qvc.binary`` is left as it is. The config is written before the attributes
    (a kill in between leaves a setting nothing uses) and the attributes file is replaced
    whole by a rename. Returns whether it changed anything."""
    attributes = os.path.join(path, "info", "attributes")
    try:
        with open(attributes, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except FileNotFoundError:
        text = ""
    if any(_user_decided(line) for line in text.splitlines()):
        return False
    config = configured().Config(os.path.join(path, "config"))
    try:
        config[DIFF_BINARY]
    except KeyError:
        config[DIFF_BINARY] = True
    os.makedirs(os.path.dirname(attributes), exist_ok=True)
    tmp = f"{attributes}.qvc-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text + ("\n" if text and not text.endswith("\n") else "") + ATTRIBUTES_LINE + "\n")
    os.replace(tmp, attributes)
    return True


#: what a new repository needs on stable storage to open as one (git's HEAD, objects/ and refs/,
#: qvc's format key in config, the journal's directory); the rest init writes (description,
#: hooks/, info/) git does without
_ESSENTIAL_FILES = ("HEAD", "config")
_ESSENTIAL_DIRS = ("objects/pack", "objects", "refs/heads", "refs", f"{QVC_DIR}/journal", QVC_DIR, "")


def _flush_tree(top: str) -> None:
    """Flush what a repository just built at ``top`` needs to open (files, then directories)."""
    for name in _ESSENTIAL_FILES:
        fd = os.open(os.path.join(top, name), os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)
    for name in _ESSENTIAL_DIRS:
        fsync_dir(os.path.join(top, name))


class Repository:
    """A qvc repository on disk. Use one instance per process (or per store).

    Composes the parts that own the state (see the module docstring): :attr:`backend`,
    :attr:`locks`, :attr:`packs` and :attr:`publication`. Callers use the methods here.
    """

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
        if not os.path.exists(self.path) or (os.path.isdir(self.path) and not os.listdir(self.path)):
            if not create or readonly:
                raise NotARepositoryError(f"{self.path}: no such qvc repository")
            if os.path.isdir(self.path):
                os.rmdir(self.path)
            _create(self.path, fsync=fsync)
        self.readonly = readonly
        if readonly:
            ReadOnlyBackend.check(self.path)
            backend: Backend = ReadOnlyBackend(self.path)
        else:
            backend = GitBackend(self.path, GitBackend.check(self.path))  # libgit2's repository opened once
        self.qvc_dir = os.path.join(self.path, QVC_DIR)
        if not readonly:
            os.makedirs(os.path.join(self.qvc_dir, "journal"), exist_ok=True)
        #: how objects and refs are read from git's files
        self.backend: Backend = backend
        self._local = threading.local()  # .admitted: writes of this thread close() waits for
        #: the maintenance lock and the gate (read-only stores never write, so hold neither)
        self.locks = LockProtocol(self.path, readonly=readonly)
        self._harden_lock = threading.Lock()
        #: what this process wrote to git's files since they were last hardened (see :meth:`harden`)
        self.dirty: DirtyPaths = dirty(self.path)
        self.pack_dir = self.backend.pack_dir
        #: the packs this store wrote and merged, and the packer thread
        self.packs = PackSet(self.path, self.locks, fsync=fsync, closing=lambda: self._closed,
                             also=self._pack_refs_if_due)
        #: what this store applied and git's files lack yet, its ref moves, and the publisher
        #: ``qvc/generation`` read once, then confirmed by one ``stat`` per call (moves record it,
        #: and what is derived from history follows it)
        self.generation_watch = GenerationWatch(self.path)
        self.publication = Publication(self.path, backend=self.backend, packs=self.packs, locks=self.locks,
                                       journal=lambda: self.journal, sync_journal=self._sync_journal,
                                       finish_dead_writer=self.finish_dead_writer,
                                       after_publish=self._maintain_soon, generation_watch=self.generation_watch)
        self._calls = threading.Condition()  # guards _running and the change of _closed to True
        self._running = 0  # writes and flushes under way (see _admitted): close waits for them
        # Recovery takes the exclusive lock (pausing writers) only when a quick look finds work.
        if not readonly:
            try:
                mark_blobs(self.path)  # repositories made before qvc marked them
            except (OSError, pygit2.GitError) as exc:  # a read-only file system: plain git shows bytes
                log.warning("qvc: cannot mark %s's blobs as binary for git: %s", self.path, exc)
        self.recovery = recovery.RecoveryReport()
        if recovery.needed(self):
            with self.exclusive():
                self.recovery = recovery.recover(self)
        if self.recovery:
            log.warning("qvc: recovered %s: %s", self.path, self.recovery.summary())
        self._journal: Journal | None = None  # created by the first write: readers leave no trace
        self._journal_mutex = threading.Lock()
        self._flusher = Worker(self._sync_journal, max_lag) if durability is DurabilityMode.ASYNC else None
        #: called with each record after it is journaled (and, in SYNC mode, durable); must not block
        self.listeners: list[Callable[[Record], None]] = []
        #: called when a transaction marks itself as rewriting history (:meth:`Transaction.rewrite_history`),
        #: before it moves its first ref: what is derived from history and kept on disk (the
        #: checkpoint-id index) is retired here, so a rewriter killed before it finishes leaves
        #: nothing that names what it deleted
        self.rewrite_listeners: list[Callable[[], None]] = []
        #: called with the refs this process moved for dead writers while running (adopting their
        #: leases), as ``{name: (value before, value after)}``: what is derived from history (the
        #: checkpoint-id index) learns of commits whose writer died before its listeners ran.
        #: What recovery on open moved is in :attr:`recovery` (``moved``).
        self.recovery_listeners: list[Callable[[dict[str, tuple[str | None, str | None]]], None]] = []
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

    # -- git access ---------------------------------------------------------------------

    @property
    def git(self) -> pygit2.Repository:
        """This Python thread's ``pygit2.Repository``."""
        return self.backend.git

    def read(self, raw: bytes, kind: str | None = None) -> bytes:
        """An object's data; :class:`CorruptionError` if it is missing, unreadable or not ``kind``."""
        pending = self.publication.pending_object(raw)
        if pending is not None:
            otype, data = TYPES[pending[0]], pending[1]
        else:
            otype, data = self.backend.read(raw)
        if kind is not None and otype != TYPES[kind]:
            raise CorruptionError(f"object {raw.hex()} is a {TYPE_NAMES.get(otype, otype)}, expected a {kind}")
        return data

    def retry_on_miss(self, lookup: Callable[[], T]) -> T:
        """Run a libgit2 object lookup, looking again while the pack directory keeps changing
        (:meth:`qvc.plumbing.backend.Backend.retry_on_miss`)."""
        return self.backend.retry_on_miss(lookup)

    def read_tree(self, raw: bytes) -> dict[str, tuple[int, bytes]]:
        """A tree's entries as ``{name: (mode, raw oid)}``."""
        return parse_tree(self.read(raw, "tree"), raw)

    hash = staticmethod(pack.object_id)

    def has(self, raw: bytes, *, published: bool = False) -> bool:
        """Whether the repository has object ``raw`` whole: in git's files, or (unless
        ``published``: what other processes can read) written by this process and not yet published."""
        if not published and self.publication.pending_object(raw) is not None:
            return True
        try:
            self.backend.read(raw)
            return True
        except CorruptionError:
            return False

    def make_readable(self, record: Record) -> None:
        """Make the record's objects not yet stored readable: this process reads them at once,
        git's files get them at the next :meth:`publish` (not yet durable: that is the record's job)."""
        self.publication.make_readable(record)

    def consolidate(self) -> None:
        """Merge the small packs this store wrote into one (:meth:`qvc.plumbing.packset.PackSet.consolidate`)."""
        self.packs.consolidate()

    def merge_small_packs(self, *, locked: bool = False) -> int:
        """Merge the directory's small packs into one once it holds ``MERGE_PACKS_AT`` of them;
        return how many were merged (:meth:`qvc.plumbing.packset.PackSet.merge_small_packs`:
        ``locked`` says the caller holds the exclusive maintenance lock)."""
        return self.packs.merge_small_packs(locked=locked)

    # -- refs -------------------------------------------------------------------------

    def ref(self, name: str, *, settle: bool = True) -> str | None:
        """The hex target of ``name``, or ``None`` when it does not exist (this process's
        unpublished moves included). With ``settle``, another live store's lease on it is
        waited for first (:func:`qvc.plumbing.leases.settle`); without, git's files are read
        as they are (for who holds or is finishing that lease)."""
        lease = self.publication.leased(name)
        if lease is not None:
            return lease.value
        self._ensure_usable()
        self.catch_up()
        return self.backend.reader.ref(name, settle=settle)

    def catch_up(self) -> None:
        """Publish what this process's other repositories open at this path have not yet
        written to git's files, so that this one reads their writes at once (as their own
        readers do). A no-op without such peers, and while this thread holds an exclusive
        lock (:meth:`exclusive` published them before taking it, and they cannot write meanwhile)."""
        if _writers.get(self.path, 0) > (0 if self.readonly else 1) and not excluding():
            for repo in list(_open_repos):
                if repo is not self and repo.path == self.path and repo.publication.has_unpublished():
                    repo.publish()

    def refs(self, prefix: str) -> Iterator[tuple[str, str]]:
        """``(name, hex target)`` of every ref under ``prefix`` (this process's unpublished moves included)."""
        self._ensure_usable()
        mine = self.unpublished(prefix)  # before git's files: a lease published meanwhile is on disk by then
        found = self.backend.refs(prefix)
        if mine:  # (a value of None: deleted under a lease)
            found = [(n, v) for n, v in ((n, mine.pop(n) if n in mine else v) for n, v in found) if v is not None]
            found += [(n, v) for n, v in sorted(mine.items()) if v is not None]
        yield from found

    def damaged_refs(self, prefix: str) -> list[tuple[str, str]]:
        """``(name, why)`` of every ref file under ``prefix`` that holds no ref (:meth:`refs` skips them)."""
        return self.backend.reader.damaged(prefix)

    def unpublished(self, prefix: str) -> dict[str, str | None]:
        """Name → value of this process's ref moves under ``prefix`` that git's files lack yet
        (other repositories open at this path are published first, see :meth:`catch_up`): what
        a reader of ref files (:class:`qvc.plumbing.odb.RefReader`) must add to see them."""
        self.catch_up()
        return self.publication.unpublished(prefix)

    def apply_move(self, record: Record, name: str, old: str | None, new: str | None,
                   message: str | None = None) -> None:
        """Compare-and-swap ref ``name`` for ``record``, which the move joins
        (:meth:`qvc.plumbing.publication.Publication.move_ref`; :meth:`Transaction.move_ref` is
        how callers move refs)."""
        self.publication.move_ref(record, name, old, new, message)

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
        self.publication.publish()

    def _maintain_soon(self) -> None:
        """After a publication: wake the packer if small packs or created refs are due."""
        self.packs.poke(self._created >= refpack.PACK_REFS_AT)

    # -- HEAD and reflogs ---------------------------------------------------------------

    def head_ref(self) -> tuple[str | None, str | None]:
        """``(ref name, commit)`` HEAD stands for: ``(name, None)`` on an unborn branch,
        ``(None, commit)`` when detached."""
        self.catch_up()
        return self.backend.head(self.ref)

    def reflog(self, name: str) -> list[ReflogEntry]:
        """The reflog of ``name`` (e.g. a thread's branch), newest first; ``[]`` if it has none.

        Parsed leniently: a line torn by a crash is skipped, not an error. Includes entries
        compacted into ``qvc/reflogs`` (:mod:`qvc.plumbing.reflog`), as long as the ref exists,
        and this process's moves not yet published.
        """
        if self.publication.leased(name) is None:
            self.catch_up()
            leases.settle(self.path, (name,))
            entries = read_reflog(self.path, name)
            if entries and not os.path.exists(os.path.join(self.path, "logs", name)) and self.ref(name) is None:
                return []  # compacted entries of a ref deleted since
            return entries
        return self.publication.leased_reflog(name)

    def file_identity(self, name: str) -> list | None:
        """``[inode, mtime ns]`` of the file holding ref ``name`` (its loose file, else packed-refs)
        or of another file of the repository, ``None`` if there is none."""
        return file_identity(self.path, name)

    def generation(self) -> str | None:
        """The token in ``qvc/generation`` (replaced by every delete), ``None`` if there is none yet."""
        return self.generation_watch.current()[1]

    def locked_refs(self, prefix: str) -> list[str]:
        """The refs under ``prefix`` that have a lock file now (any store's lease, or git's own)."""
        return [n[:-5] for n in self.backend.reader.walk(prefix) if n.endswith(".lock")]

    def finish_dead_writer(self, name: str) -> bool:
        """Before a writer reads or moves ref ``name``: if a dead store left its lease on it,
        roll that lease forward (:func:`qvc.plumbing.recovery.adopt_lease`), or complete its
        publication if a kill cut it short (:func:`qvc.plumbing.recovery.finish_publication`),
        so that the writer builds on everything the dead store acknowledged. Returns whether
        the ref has a lock that is no dead store's (git's own, or a live store's lease).
        Costs one ``stat`` when the ref has no lock."""
        lock = leases.lock_path(self.path, name)
        if self.publication.leased(name) is not None or not os.path.lexists(lock):
            return False
        self._finish_dead(name)
        return os.path.lexists(lock)

    def finish_dead_writers(self, prefix: str) -> int:
        """:meth:`finish_dead_writer` for every ref under ``prefix`` that has a lock file (one
        walk of the ref directories), so that what is read next holds every store's acknowledged
        moves, dead ones' included (a walk building an index must not read the refs a dead
        delete rewrote as they were before it). Returns how many dead leases or cut-short
        publications it finished. Holds the maintenance lock shared meanwhile, as a transaction
        or a publication does (so never beside a recovery, which may be claiming the same
        journals); a no-op in a read-only store."""
        names = [] if self.readonly else self.locked_refs(prefix)
        if not names:
            return 0
        with contextlib.ExitStack() as held:
            if not self.locks.excluding_here:  # (else maintenance already excludes writers)
                held.enter_context(self.locks.shared())
            return sum(1 for name in names if self.publication.leased(name) is None and self._finish_dead(name))

    def _finish_dead(self, name: str) -> bool:
        """Roll forward a dead store's lease on ``name``, or complete its publication cut short;
        whether it did (``False``: no lock, or one a live store or git holds)."""
        holder = leases.holder(self.path, name)
        if holder is None:
            return recovery.finish_publication(self, name)
        if recovery.journal_alive(self, holder):
            return False
        moved: dict[str, tuple[str | None, str | None]] = {}
        done = recovery.adopt_lease(self, name, holder, moved)
        self.recovered(moved)
        return done

    def recovered(self, moved: dict[str, tuple[str | None, str | None]]) -> None:
        """Tell :attr:`recovery_listeners` of refs this process moved for dead writers (``moved``
        as :attr:`RecoveryReport.moved <qvc.plumbing.recovery.RecoveryReport.moved>`); nothing
        if it is empty."""
        if moved:
            for listener in self.recovery_listeners:
                listener(moved)

    # -- durability -------------------------------------------------------------------

    def rewriting(self) -> None:
        """Tell :attr:`rewrite_listeners` that a transaction is about to rewrite history.
        :meth:`Transaction.rewrite_history` calls it; nothing else should."""
        for listener in self.rewrite_listeners:
            listener()

    def commit_record(self, record: Record) -> None:
        """Journal ``record``, apply the durability mode (SYNC: durable on return), tell the
        listeners. :meth:`Transaction.finish` calls it; nothing else should."""
        try:
            self.make_readable(record)
            seq = self.journal.append(record)
        finally:  # (also when that failed: its moves are not held back for good)
            self.publication.journaled(record)
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
        else:
            self.publication.poke()

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
                with self.locks.shared():
                    if refpack.pack_refs(self.path, fsync=self.fsync):
                        refpack.compact_reflogs(self.path, fsync=self.fsync)
                        if refpack.graph_due(self.path, due):
                            refpack.commit_graph(self.path, fsync=self.fsync)
        except Exception as exc:  # harmless: loose refs stay readable, a later store packs them
            log.warning("qvc: packing refs in %s failed: %s", self.path, exc)

    def _pack_refs_if_due(self) -> None:
        """The packer's second task: pack the refs this store created once
        :data:`~qvc.plumbing.refpack.PACK_REFS_AT` of them are published, so that a store
        creating many threads pays for packing them as it goes, not all at once in ``close()``
        (removing thousands of loose files takes seconds on some disks)."""
        if self._created >= refpack.PACK_REFS_AT:
            self._pack_refs_quietly()

    def harden(self) -> None:
        """Publish, flush the git files themselves and restart the journal (it is then redundant).

        Flushes what this process wrote to git's files since the last harden (:attr:`dirty`:
        packs, ref files, reflogs and the directories holding them; see
        :class:`~qvc.plumbing.durability.DirtyPaths`), not the whole file system. Raises
        ``OSError`` if a flush fails (the journal is then kept as it is)."""
        # no move may slip between the publish and the restart (publication's locks first, as publish takes them)
        with self._harden_lock, self.publication.frozen():
            self.publish()
            self.dirty.flush(fsync=self.fsync)
            names = self.publication.touched()
            token = self.generation_watch.current()[1]  # noted as each move notes it (see Publication.move_ref)
            self.journal.restart(Record(refs=[(n, None, self.ref(n)) for n in names], base=True,
                                        seen={n: [file_identity(self.path, n), token] for n in names}))

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
                    tx.finish()
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
        with self.locks.writing(), self._admitted():  # counted past the gate: close() never waits out a gc
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
        See :meth:`qvc.plumbing.locking.LockProtocol.exclusive`.
        """
        with self.locks.exclusive(lambda: publish_open(self.path), lambda: self.locked_refs("refs/"),
                                  lambda locks: leases.foreign(self.path, locks),
                                  lambda held: leases.settle(self.path, held)) as fd:
            yield fd

    def _ensure_usable(self) -> None:  # reads work during recovery in __init__, not after close
        if self.backend.released:
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
                log.warning("qvc: closing %s while %d write(s) still run", self.path, self._running - mine)
        _open_repos.discard(self)
        if not self.readonly:
            _writers[self.path] -= 1
        error = None
        if self._flusher is not None:
            self._flusher.stop()
            error = self._flusher.error
        self.publication.stop_publisher()
        try:
            self.publish()
        except OSError as exc:  # the journal has it all: kept, the next open replays it
            if self.publication.has_leases():
                error = error or exc
            else:  # only objects of transactions that failed before moving a ref: nothing needs them
                self.publication.drop_pending_objects()
        self.packs.stop()  # _closed is set: no packer starts after this (see PackSet.poke)
        journal = self._journal
        if journal is not None:  # else this store never wrote: nothing to flush
            error = error or journal.failed
            self.packs.consolidate_quietly()
            try:
                self.merge_small_packs()
            except Exception as exc:  # harmless: they stay, and a later close merges them
                log.warning("qvc: merging packs in %s failed: %s", self.path, exc)
            self._pack_refs_quietly()
            try:
                journal.sync()
                self.dirty.flush(fsync=self.fsync)  # git's files this process wrote: then the journal may go
                # After a failed flush the journal is the only trustworthy record: keep it for replay.
                journal.close(remove=error is None)
            except OSError as exc:
                error = error or exc
                journal.close(remove=False)  # keep it: the next open replays it
        if journal is not None:
            leases.OWN.discard(os.path.basename(journal.path))
        self.locks.close()
        self.backend.close()
        self.generation_watch.close()
        self._local = threading.local()
        if error is not None:
            raise DurabilityError(f"{self.path}: flush failed: {error}") from error
