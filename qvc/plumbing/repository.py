r"""The repository plumbing: a bare git repository, its staging database, objects and CAS refs.

This layer knows nothing about checkpoints. Every change goes through one
:class:`Transaction` (``with repo.transaction() as tx:``): it writes git objects and moves
refs, as one transaction of the staging database (:mod:`qvc.plumbing.staging`), which owns
durability until git's files hold the change, and then tells the listeners. Ref moves are
compare-and-swap: a ref moved by someone else since it was read raises
:class:`~qvc.errors.CheckpointConflictError`, never a lost update.

Concurrency: any number of Python threads and processes may write at once; their transactions
take turns (SQLite's write lock, behind a fair queue), each for the length of one transaction.
Each Python thread gets its own ``pygit2.Repository`` (libgit2 objects are not thread-safe);
writers hold a shared ``flock`` on ``qvc/lock`` (after passing ``qvc/gate``) while they write,
and maintenance (recovery, gc, purge) takes both exclusively (:meth:`Repository.exclusive`).

:class:`Repository` opens and closes a repository and composes the parts, each of which owns
its state: the reads (:mod:`qvc.plumbing.backend`: libgit2, or a read-only backend without
it), the pack set and its packer (:mod:`qvc.plumbing.packset`), the staging database and its
publication to git's files (:mod:`qvc.plumbing.staging`), and the locks
(:mod:`qvc.plumbing.locking`). :class:`Transaction` (:mod:`qvc.plumbing.transaction`) uses it
through :class:`~qvc.plumbing.transaction.TransactionHost`.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import threading
import uuid
import weakref
from typing import TYPE_CHECKING, Callable, Iterator, TypeVar

from qvc.errors import (
    CorruptionError,
    DurabilityError,
    InvalidInputError,
    NotARepositoryError,
    SignatureError,
    StorageError,
    StoreClosedError,
    errno_in,
)
from qvc.lazy import exports
from qvc.logs import log
from qvc.plumbing import leftovers, pack, refpack
from qvc.plumbing.backend import MISS_RETRIES, QVC_DIR, Backend, GitBackend, ReadOnlyBackend
from qvc.plumbing.durability import DirtyPaths, DurabilityMode, Worker, dirty, fsync_dir
from qvc.plumbing.libgit2 import configured, pygit2
from qvc.plumbing.locking import PACK_LOCK, Busy, LockProtocol
from qvc.plumbing.objects import TYPE_NAMES, TYPES, parse_tree
from qvc.plumbing.packset import CONSOLIDATE_AT, MERGE_PACKS_AT, SMALL_PACK, PackSet
from qvc.plumbing.reflog import ReflogEntry, read_reflog
from qvc.plumbing.staging import OPEN_WAIT, Staging

if TYPE_CHECKING:
    from qvc.plumbing.signing import Signer
    from qvc.plumbing.transaction import Record, Transaction

FORMAT_KEY = "qvc.format"
LOGGED = ("refs/heads/", "refs/remotes/", "refs/notes/")  # what core.logAllRefUpdates keeps reflogs of
CLOSE_WAIT = 20.0  # how long close() waits for writes other threads began before it
#: how soon the background publisher writes what a write staged to git's files (SYNC; ASYNC
#: waits ``max_lag`` at least, EXIT :data:`EXIT_PUBLISH_LAG`). qvc's readers see a write at its
#: commit, whatever this is; a longer lag batches more writes per pack and per flush of git's files.
PUBLISH_LAG = 0.2
EXIT_PUBLISH_LAG = 2.0
#: how long a writable open waits for the exclusive lock to clean up what killed processes left
#: (temporary files, a damaged pack index); past it the cleanup is left to a later opener (a
#: writer stopped mid-transaction holds the lock shared). A read-only open only tries it once.
RECOVERY_WAIT = 1.0
#: the repository's configuration keys for signing (git's config file of the repository):
#: the signing key's path (relative: to the repository), and whether commits must be signed
SIGNING_KEY = "qvc.signingKey"
REQUIRE_SIGNATURES = "qvc.requireSignatures"
#: the environment variable naming the signing key (before the repository's configuration)
SIGNING_KEY_ENV = "QVC_SIGNING_KEY"
#: this repository's random id, made with it (:attr:`Repository.id`)
ID_KEY = "qvc.id"
T = TypeVar("T")

#: names that moved to the modules owning them and stay importable from here
__all__ = [
    "CLOSE_WAIT", "CONSOLIDATE_AT", "FORMAT_KEY", "MERGE_PACKS_AT", "MISS_RETRIES", "PACK_LOCK", "PUBLISH_LAG",
    "QVC_DIR", "SMALL_PACK", "Repository", "Transaction", "publish_open",
]
# Transaction loads with the first write (a reader never needs it)
__getattr__, __dir__ = exports(__name__, {"Transaction": "qvc.plumbing.transaction"})

_open_repos: weakref.WeakSet[Repository] = weakref.WeakSet()


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


def _publish_before_git() -> None:
    """Have every ``git`` qvc runs publish this process's open stores first (see :func:`publish_open`),
    from the first writable store on: a process that only reads has nothing to publish, and does not
    load the launcher (start-up speed)."""
    from qvc.plumbing import launcher  # deferred: a reading process never runs git through it

    if publish_open not in launcher.BEFORE_GIT:
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
        repo.config[ID_KEY] = uuid.uuid4().hex[:16]
        repo.free()
        mark_blobs(tmp)
        os.makedirs(os.path.join(tmp, QVC_DIR))
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
#: qvc's format key in config, qvc's directory); the rest init writes (description,
#: hooks/, info/) git does without
_ESSENTIAL_FILES = ("HEAD", "config")
_ESSENTIAL_DIRS = ("objects/pack", "objects", "refs/heads", "refs", QVC_DIR, "")


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
    :attr:`locks`, :attr:`packs` and :attr:`staging`. Callers use the methods here.
    """

    def __init__(self, path: str | os.PathLike, *, create: bool = True,
                 durability: DurabilityMode = DurabilityMode.SYNC, fsync: bool = True,
                 max_lag: float = 0.05, readonly: bool = False, signing_key: str | os.PathLike | None = None,
                 write_wait: float = OPEN_WAIT):
        self.path = os.path.abspath(os.fspath(path))
        try:
            durability = DurabilityMode(durability.lower() if isinstance(durability, str) else durability)
        except ValueError:
            raise InvalidInputError(f"durability must be a DurabilityMode or one of 'sync', 'async', "
                                    f"'exit', not {durability!r}") from None
        if not isinstance(max_lag, (int, float)) or max_lag < 0:
            raise InvalidInputError(f"max_lag must be a non-negative number of seconds, not {max_lag!r}")
        if isinstance(write_wait, bool) or not isinstance(write_wait, (int, float)) or not 0 <= write_wait < 1e9:
            raise InvalidInputError(f"write_wait must be a non-negative number of seconds, not {write_wait!r}")
        #: how long a write waits for other writers (the writers' queue) and maintenance for them
        self.write_wait = float(write_wait)
        self.durability = durability
        self.fsync = fsync
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
            os.makedirs(self.qvc_dir, exist_ok=True)
            _publish_before_git()
        #: how objects and refs are read from git's files
        self.backend: Backend = backend
        self._id: str | None = None
        #: whether commits must be signed (:meth:`signed`); a read-only repository writes none
        self.signatures_required = False
        self._explicit_key = signing_key
        self._signing_key: str | None = None  # the key file :attr:`signer` loads
        self._signer: Signer | None = None
        if not readonly:
            try:
                self._signing_key, self.signatures_required = self._signing(signing_key)
                if signing_key is not None:
                    _ = self.signer  # a key the caller gave fails the opening; one configured, the first write
            except BaseException:
                backend.close()
                raise
        self._local = threading.local()  # .admitted: writes of this thread close() waits for
        #: the maintenance lock and the gate (read-only stores never write, so hold neither)
        self.locks = LockProtocol(self.path, readonly=readonly)
        #: what this process wrote to git's files outside publication (see :meth:`harden`)
        self.dirty: DirtyPaths = dirty(self.path)
        self.pack_dir = self.backend.pack_dir
        #: the packs this store merged, and the packer thread
        self.packs = PackSet(self.path, self.locks, fsync=fsync, closing=lambda: self._closed,
                             also=self._pack_refs_if_due)
        self._calls = threading.Condition()  # guards _running and the change of _closed to True
        self._running = 0  # writes and flushes under way (see _admitted): close waits for them
        if not readonly:
            try:
                mark_blobs(self.path)  # repositories made before qvc marked them
            except (OSError, pygit2.GitError) as exc:  # a read-only file system: plain git shows bytes
                log.warning("qvc: cannot mark %s's blobs as binary for git: %s", self.path, exc)
        #: every acknowledged write until git's files hold it (:mod:`qvc.plumbing.staging`)
        try:
            self.staging = Staging(self.path, mode=durability.value, fsync=fsync, max_lag=max_lag, readonly=readonly,
                                   write_wait=self.write_wait)
        except StorageError:
            self.backend.close()
            self.locks.close()
            raise
        self._who: str | None = None
        self._log_all: bool | None = None
        # Opening: a repository written by the journal-and-leases release is migrated (its
        # journals replayed, its leases rolled forward) and damaged pack indexes are rebuilt,
        # under the exclusive lock; then what is staged is published.
        self.recovery = leftovers.RecoveryReport()
        if leftovers.needed(self):
            self._recover()
        # A publication flushes the log first (write-ahead): in EXIT mode, whose writes are durable
        # at flush or close, the background publisher runs seldom, so that a run pays that flush
        # about once a second rather than once a write.
        self._publish_lag = {DurabilityMode.SYNC: PUBLISH_LAG, DurabilityMode.ASYNC: max(PUBLISH_LAG, max_lag)}.get(
            durability, EXIT_PUBLISH_LAG)
        self._publisher: Worker | None = None  # started by the first write (a reader starts no thread)
        self._publisher_lock = threading.Lock()
        #: called with each record after its transaction committed (durable per the mode); must not block
        self.listeners: list[Callable[[Record], None]] = []
        #: called with each transaction just before it commits (after its last move): what must be
        #: stored with it, atomically (the checkpoint ids it stores), is added here
        self.commit_listeners: list[Callable[[Transaction], None]] = []
        self._created = 0  # refs this store created: a hint for packing refs (qvc.plumbing.refpack)
        self._wrote = False
        self.listeners.append(self._count_created)
        self._closed = False
        _open_repos.add(self)
        if not readonly:
            with self.locks.writing():  # maintenance under way (a killed purge's git, say) ends first
                pass
            if self.staging.staged():
                self._publish_quietly()  # what an earlier process acknowledged and did not publish

    # -- git access ---------------------------------------------------------------------

    @property
    def git(self) -> pygit2.Repository:
        """This Python thread's ``pygit2.Repository``."""
        return self.backend.git

    def read(self, raw: bytes, kind: str | None = None) -> bytes:
        """An object's data; :class:`CorruptionError` if it is missing, unreadable or not ``kind``."""
        self._ensure_usable()
        if self.readonly:
            # A reader mostly reads what is published: git's files first, the staging database
            # on a miss, then git's again (published, and its row deleted, in between).
            try:
                otype, data = self.backend.read(raw)
            except CorruptionError:
                staged = self.staging.object(raw)
                otype, data = (TYPES[staged[0]], staged[1]) if staged is not None else self.backend.read(raw)
        elif (staged := self.staging.object(raw)) is not None:
            otype, data = TYPES[staged[0]], staged[1]
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
        ``published``: what plain git can read) staged."""
        self._ensure_usable()
        if not published and self.staging.object(raw) is not None:
            return True
        try:
            self.backend.read(raw)
            return True
        except CorruptionError:
            return False

    def staged(self, raw: bytes) -> bool:
        """Whether object ``raw`` is staged (maybe not yet in git's files: what a libgit2 walk
        must have published first)."""
        self._ensure_usable()
        return self.staging.object(raw) is not None

    def consolidate(self) -> None:
        """Merge the small packs this store wrote into one (:meth:`qvc.plumbing.packset.PackSet.consolidate`)."""
        self.packs.consolidate()

    def merge_small_packs(self, *, locked: bool = False) -> int:
        """Merge the directory's small packs into one once it holds ``MERGE_PACKS_AT`` of them;
        return how many were merged (:meth:`qvc.plumbing.packset.PackSet.merge_small_packs`:
        ``locked`` says the caller holds the exclusive maintenance lock)."""
        return self.packs.merge_small_packs(locked=locked)

    # -- refs -------------------------------------------------------------------------

    def ref(self, name: str) -> str | None:
        """The hex target of ``name`` as every store acknowledged it (staged, else git's files),
        or ``None`` when it does not exist. Never waits."""
        self._ensure_usable()
        return self.staging.ref(name)

    def refs(self, prefix: str) -> Iterator[tuple[str, str]]:
        """``(name, hex target)`` of every ref under ``prefix`` (staged values over git's)."""
        self._ensure_usable()
        yield from self.staging.refs(prefix)

    def damaged_refs(self, prefix: str) -> list[tuple[str, str]]:
        """``(name, why)`` of every ref file under ``prefix`` that holds no ref (:meth:`refs` skips them)."""
        return self.backend.reader.damaged(prefix)

    def unpublished(self, prefix: str) -> dict[str, str | None]:
        """Name → value of the staged refs under ``prefix`` that git's files lack yet (``None``:
        deleted): what a reader of ref files (:class:`qvc.plumbing.odb.RefReader`) must add."""
        return self.staging.staged_refs(prefix)

    def indexed(self, checkpoint_id: str) -> tuple[str | None, bool]:
        """``(commit, complete)``: the commit the checkpoint-id index of the staging database
        names for ``checkpoint_id`` (``None`` if none), and whether the index is complete (a
        miss then means the id is on no ref): :meth:`qvc.plumbing.staging.Staging.indexed`."""
        self._ensure_usable()
        return self.staging.indexed(checkpoint_id)

    def complete_index(self, ids: list[tuple[str, str]], generation: str | None) -> bool:
        """Complete the checkpoint-id index with ``ids`` (every checkpoint on a ref, walked under
        ``generation``), in this thread's open transaction if any; ``False`` if a rewrite came
        between (:meth:`qvc.plumbing.staging.Staging.complete_index`)."""
        self._ensure_usable()
        if self.readonly:
            return False
        try:
            return self.staging.complete_index(ids, generation)
        except StorageError:  # (a full disk) derived data: lookups walk the refs meanwhile
            if self.staging.in_transaction():
                raise  # the write it is part of fails whole (SQLite may have rolled it back)
            return False

    @property
    def signer(self) -> Signer | None:
        """What signs every commit this repository writes (``None``: they are unsigned): the key
        given when it was opened, else ``$QVC_SIGNING_KEY``, else :data:`SIGNING_KEY`, loaded at
        first use. Raises :class:`InvalidInputError` naming a key file that does not load
        (:func:`qvc.plumbing.signing.load_signer`): for a configured key, at the first write."""
        if self._signer is None and self._signing_key is not None:
            from qvc.plumbing.signing import load_signer  # deferred: only a signing store loads cryptography

            self._signer = load_signer(self._signing_key)
        return self._signer

    @property
    def id(self) -> str:
        """This repository's random id, made when it was created (config ``qvc.id``; a clone makes
        its own): it names the refs each replica writes for itself, so that replicas pushing to
        one server never write the same ref. ``"local"`` for a repository made before ids were."""
        if self._id is None:
            config = self.backend.git.config
            self._id = config[ID_KEY] if ID_KEY in config else "local"
        return self._id

    def _signing(self, key: str | os.PathLike | None) -> tuple[str | None, bool]:
        """The signing key's file (``key``, else ``$QVC_SIGNING_KEY``, else :data:`SIGNING_KEY`)
        and whether :data:`REQUIRE_SIGNATURES` is set."""
        config = self.backend.git.config
        try:
            required = REQUIRE_SIGNATURES in config and config.get_bool(REQUIRE_SIGNATURES)
        except pygit2.GitError as exc:
            raise InvalidInputError(f"{self.path}/config: {REQUIRE_SIGNATURES}: {exc}") from None
        if key is None:
            key = os.environ.get(SIGNING_KEY_ENV) or None
        if key is None and SIGNING_KEY in config:
            key = self._configured_key(config[SIGNING_KEY])
        return (None if key is None else os.path.expanduser(os.fspath(key))), required

    def _configured_key(self, value: str) -> str:
        """The key file :data:`SIGNING_KEY` names (``~`` expanded; relative: to the repository)."""
        return os.path.join(self.path, os.path.expanduser(value))

    def signed(self, commit: bytes) -> bytes:
        """``commit`` (a commit object) as this repository stores it: signed by :attr:`signer`
        in git's SSH signature format (a signature it carries is replaced), or as it is without a
        signer. Raises :class:`SignatureError` when the repository requires signatures
        (:data:`REQUIRE_SIGNATURES`) and has no signer: nothing of the write is stored."""
        signer = self.signer
        if signer is None:
            if self.signatures_required:
                raise SignatureError(f"{self.path} requires signed checkpoints ({REQUIRE_SIGNATURES}) and no signing "
                                     f"key is set (${SIGNING_KEY_ENV}, {SIGNING_KEY} or signing_key=); nothing stored")
            return commit
        from qvc.plumbing.signing import sign_commit, split_signature  # deferred: start-up speed

        return sign_commit(split_signature(commit)[0], signer)

    def logged(self, name: str) -> bool:
        """Whether git keeps a reflog for ``name`` (``core.logAllRefUpdates``, or an existing log)."""
        if self._log_all is None:
            try:
                self._log_all = bool(self.backend.git.config.get_bool("core.logAllRefUpdates"))
            except (KeyError, pygit2.GitError, ValueError):
                self._log_all = False
        if self._log_all and (name.startswith(LOGGED) or name == "HEAD"):
            return True
        return os.path.exists(os.path.join(self.path, "logs", name))

    def set_head(self, target: str) -> None:
        """Point HEAD at ``target`` (a ref name, possibly unborn, or a commit SHA to detach at),
        durably, in a transaction of its own (:meth:`Transaction.set_head`). HEAD's reflog line
        (``checkout: moving from A to B``) is libgit2's, read from git's files: the refs it names
        are published first when they are staged."""
        with contextlib.suppress(CorruptionError):  # (a garbled HEAD: set_head writes it anew)
            staged = self.unpublished("refs/")
            if target in staged or self.head_ref()[0] in staged:
                self.publish()
        with self.transaction() as tx:
            tx.set_head(target)

    @property
    def staging_log(self) -> str:
        """The file every acknowledged write modifies when it commits (it may not exist yet): a
        change there is the earliest hint that a ref moved, before git's files have it."""
        return self.staging.log_path

    # -- publishing ---------------------------------------------------------------------

    def publish(self) -> None:
        """Write what is staged (by any store) to git's files: :meth:`qvc.plumbing.staging.Staging.publish`.

        The background publisher does it about :data:`PUBLISH_LAG` after each write, and
        :meth:`flush`, :meth:`close`, maintenance and every ``git`` run on the repository
        (:mod:`qvc.plumbing.launcher`) do it first. Inside a transaction of this thread it does
        nothing (what libgit2 reads there is what git's files held). Raises ``OSError`` if a file
        cannot be written; what was not written stays staged and the next call retries."""
        self._publish(wait=True)

    def _publish(self, *, wait: bool) -> None:
        if self.readonly or self.backend.released or self.staging.in_transaction():
            return
        done = self.staging.publish(wait=wait)
        if done.pack is not None:
            self.packs.add(done.pack)
            self._wrote = True  # (what dead writers staged, too): close merges small packs
        if done.refs or done.pack is not None:
            self.packs.poke(self._created >= refpack.PACK_REFS_AT)

    def _publish_quietly(self) -> None:
        try:
            self._publish(wait=False)
        except Exception as exc:  # staged still: the next write, flush or close retries
            log.warning("qvc: writing %s's git files failed (retried later): %s", self.path, exc)

    # -- HEAD and reflogs ---------------------------------------------------------------

    def head_ref(self) -> tuple[str | None, str | None]:
        """``(ref name, commit)`` HEAD stands for: ``(name, None)`` on an unborn branch,
        ``(None, commit)`` when detached."""
        return self.backend.head(self.ref)

    def reflog(self, name: str) -> list[ReflogEntry]:
        """The reflog of ``name`` (e.g. a thread's branch), newest first; ``[]`` if it has none.

        Parsed leniently: a line torn by a crash is skipped, not an error. Includes entries
        compacted into ``qvc/reflogs`` (:mod:`qvc.plumbing.reflog`), as long as the ref exists,
        and the staged moves not yet published.
        """
        staged = self.staging.reflog(name)
        entries = read_reflog(self.path, name)
        if entries and not os.path.exists(os.path.join(self.path, "logs", name)) and self.ref(name) is None:
            entries = []  # compacted entries of a ref deleted since
        while staged and entries and staged[-1] == entries[0]:
            staged.pop()  # being published: in the file already
        if staged and entries and staged[-1].old != entries[0].new:
            entries = []  # the staged moves start a new life of the ref (created again): not its past
        return staged + entries

    def file_identity(self, name: str) -> list | None:
        """``[inode, mtime ns]`` of the file holding ref ``name`` (its loose file, else packed-refs)
        or of another file of the repository, ``None`` if there is none."""
        from qvc.plumbing.recovery import file_identity  # deferred: only recovery asks

        return file_identity(self.path, name)

    def generation(self) -> str | None:
        """The token of the last transaction that rewrote history, ``None`` if none did yet."""
        return self.staging.generation()

    def config(self) -> dict[str, str]:
        """The repository's own configuration (its ``config`` file, not the user's), as
        ``{name: value}`` with git's lower-case section and key names; the last value of a key
        set several times. A read-only store reads it too (as ``git config`` reads without a lock)."""
        path = os.path.join(self.path, "config")
        try:
            config = configured().Config(path)
            return {entry.name: entry.value for entry in config}
        except pygit2.GitError as exc:
            if os.path.isfile(path):
                from qvc.plumbing.launcher import unreadable_config  # deferred: start-up speed

                raise unreadable_config(path, exc) from None
            raise

    def set_config(self, name: str, value: str | None) -> None:
        """Set ``name`` to ``value`` in the repository's ``config`` file (``None``: remove it; no
        error when it was not set), as ``git config --local`` does, under git's lock on the file;
        flushed (file and directory) before it returns. A :data:`SIGNING_KEY` that does not load
        is refused (:class:`InvalidInputError`) and nothing is written.
        Raises :class:`InvalidInputError` for a name git refuses or a read-only repository."""
        config = self._own_config()
        if name.lower() == SIGNING_KEY.lower() and value is not None:
            from qvc.plumbing.signing import load_signer  # deferred: only a signing key loads cryptography

            load_signer(self._configured_key(value))  # a key that does not load is refused: nothing written
        try:
            if value is None:
                if name in config:
                    del config[name]
            else:
                config[name] = value
        except (pygit2.GitError, ValueError) as exc:
            raise InvalidInputError(f"config {name}: {exc}") from None
        self.dirty.wrote(os.path.join(self.path, "config"))  # a torn config would not open: flushed now
        self.dirty.flush(fsync=self.fsync)
        if name.lower() in (SIGNING_KEY.lower(), REQUIRE_SIGNATURES.lower()):
            key, self.signatures_required = self._signing(self._explicit_key)
            if key != self._signing_key:
                self._signing_key, self._signer = key, None

    def _own_config(self):
        if self.readonly:
            raise InvalidInputError(f"{self.path}: the store is read-only")
        return configured().Config(os.path.join(self.path, "config"))

    def locked_refs(self, prefix: str) -> list[str]:
        """The refs under ``prefix`` that have a lock file now (git's own, or another program's)."""
        return [n[:-5] for n in self.backend.reader.walk(prefix) if n.endswith(".lock")]

    def recovered(self, moved: dict[str, tuple[str | None, str | None]]) -> None:
        """Note that recovery moved refs outside any transaction (``moved`` as
        :attr:`RecoveryReport.moved <qvc.plumbing.recovery.RecoveryReport.moved>`; nothing if it
        is empty): the checkpoint-id index is walked again at its next use."""
        if moved and not self.readonly:
            self.staging.forget_index()

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
        :data:`~qvc.plumbing.refpack.PACK_REFS_AT` of them are published."""
        if self._created >= refpack.PACK_REFS_AT:
            self._pack_refs_quietly()

    def harden(self) -> None:
        """Publish, and flush what this process wrote to git's files outside publication (which
        flushes its own). Raises ``OSError`` if a flush fails."""
        self.publish()
        self.dirty.flush(fsync=self.fsync)

    def raise_if_failed(self) -> None:
        """Raise an earlier failed flush as :class:`DurabilityError`.

        Sticky: after a failed flush nothing later can be promised durable (Linux may drop the
        dirty pages and report success next time), so every call raises until the store is
        reopened.
        """
        exc = self.staging.failed
        if exc is not None:
            raise DurabilityError(f"{self.path}: a flush failed ({exc}); reopen the store") from exc

    def flush(self) -> None:
        """Make every write so far durable (already so in SYNC mode) and visible to plain git
        (:meth:`publish`). Raises :class:`DurabilityError` if either fails."""
        with self._admitted():
            self.raise_if_failed()
            try:
                self.publish()  # which flushes the log first, when it has anything to write
                self.staging.flush()  # (the rest: nothing, unless a write came in meanwhile)
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
        after an earlier failed flush.
        """
        from qvc.plumbing.transaction import Transaction  # deferred: start-up speed (readers never write)

        with self.writing():
            if self._who is None:
                self.staging.who = self._identity()
            try:
                with self.staging.transaction() as staged:
                    tx = Transaction(self, staged)
                    yield tx
                    for listener in self.commit_listeners:
                        listener(tx)
                if tx.rewrites:
                    self.staging.flush()  # a rewrite is durable on return in every mode
            except StorageError:
                raise
            except OSError as exc:  # a full disk, an I/O error: what was acknowledged before stays
                raise StorageError.of(exc, self.path) from exc
            except pygit2.GitError as exc:
                if errno_in(str(exc)) is None:
                    raise
                raise StorageError.of(exc, self.path) from exc
            if not tx.record.refs:
                return
            self._wrote = True
            for listener in self.listeners:
                listener(tx.record)
            if tx.rewrites or any(new is None for _, _, new in tx.record.refs):
                with contextlib.suppress(OSError):  # a delete is in git's files on return (unless a lock holds it)
                    self.publish()
            tx.finish()
            self._poke_publisher()

    def _poke_publisher(self) -> None:
        """Wake the background publisher, starting it on the first write."""
        if self._publisher is None:
            with self._publisher_lock:
                if self._publisher is None:
                    self._publisher = Worker(self._publish_quietly, self._publish_lag, name="qvc-publisher")
        self._publisher.poke()

    def _identity(self) -> str:
        """Who reflog lines name, as git and libgit2 do: ``user.name <user.email>``, else ``unknown``."""
        if self._who is None:
            try:
                sig = self.backend.git.default_signature
                self._who = f"{sig.name} <{sig.email}>"
            except (pygit2.GitError, KeyError, ValueError):
                self._who = "unknown <unknown>"
        return self._who

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

    def _recover(self) -> None:
        """Repair what :func:`leftovers.needed` found, under the exclusive lock, if it can be had
        without waiting on a writer: a read-only open tries once, a writable one waits up to
        :data:`RECOVERY_WAIT`. A writer stopped mid-transaction holds the lock shared; the
        repair is then left to a later opener (readers never wait), except a migration of the
        journal-and-leases release, without which a writer must not write
        (:class:`StorageError`, ``EBUSY``)."""
        from qvc.plumbing import recovery  # deferred: start-up speed (a clean open loads none of it)

        with contextlib.ExitStack() as held:
            try:
                held.enter_context(self.exclusive(wait=0 if self.readonly else min(RECOVERY_WAIT, self.write_wait)))
            except StorageError as exc:
                if exc.errno != errno.EBUSY or (not self.readonly and leftovers.migrating(self)):
                    raise
                log.info("qvc: %s: repairs left to a later opener (%s)", self.path, exc)
                return
            self.recovery = recovery.recover(self)
            self.recovered(self.recovery.moved)
        if self.recovery:
            log.warning("qvc: recovered %s: %s", self.path, self.recovery.summary())

    @contextlib.contextmanager
    def exclusive(self, *, wait: float | None = None) -> Iterator[int]:
        """Exclude every writer of every process (for recovery and maintenance).

        Publishes what is staged; closes the gate (``qvc/gate``: no new transaction starts) and
        takes the lock (``qvc/lock``), once the transactions under way ended; publishes again
        (what they committed meanwhile), so git's files hold every acknowledged write. Yields
        the lock's file descriptor: a subprocess that must stay covered by the lock even if
        this process dies (``git repack``) inherits it, and the lock then lasts until the
        subprocess exits. See :meth:`qvc.plumbing.locking.LockProtocol.exclusive`.

        Waits up to ``wait`` seconds (default :attr:`write_wait`) for the gate and the lock, then
        raises :class:`StorageError` (``EBUSY``, naming the lock), holding nothing: a writer
        stopped mid-transaction holds the lock until it resumes or dies.
        """
        wait = self.write_wait if wait is None else wait
        with contextlib.ExitStack() as held:
            try:
                fd = held.enter_context(self.locks.exclusive(lambda: publish_open(self.path), wait=wait))
            except Busy as busy:
                raise StorageError(f"{self.path}: cannot exclude writers: {os.path.relpath(busy.path, self.path)} "
                                   f"is held by another process for over {wait:g} s (a writer stopped or hung "
                                   "inside its transaction?)", errno.EBUSY, busy.path) from None
            if not self.readonly and getattr(self, "staging", None) is not None:
                self.staging.publish()
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
        """Flush, publish and release everything. Idempotent. Raises a pending flush failure.

        Writes and flushes other threads began before are waited for (up to :data:`CLOSE_WAIT`
        seconds), so what they acknowledge is flushed with the rest; later ones raise
        :class:`StoreClosedError`. Every worker thread of the store is stopped and joined.
        What cannot be published now (a full disk, another program's lock) stays staged,
        durable, for the next opener."""
        with self._calls:
            if self._closed:
                return
            self._closed = True  # under the lock: no write is admitted after this (see _admitted)
            mine = getattr(self._local, "admitted", 0)  # closed from within a write of this thread
            if not self._calls.wait_for(lambda: self._running <= mine, timeout=CLOSE_WAIT):
                log.warning("qvc: closing %s while %d write(s) still run", self.path, self._running - mine)
        _open_repos.discard(self)
        error: BaseException | None = None
        with self._publisher_lock:
            if self._publisher is not None:
                self._publisher.stop()
            self._publisher = Worker(self._publish_quietly, 0, start=False)  # none starts after close
        try:
            self.publish()
        except OSError as exc:  # staged and durable: the next opener publishes it
            log.warning("qvc: %s: publishing at close failed (the next open retries): %s", self.path, exc)
        self.packs.stop()  # _closed is set: no packer starts after this (see PackSet.poke)
        if self._wrote:
            self.packs.consolidate_quietly()
            try:
                self.merge_small_packs()
            except Exception as exc:  # harmless: they stay, and a later close merges them
                log.warning("qvc: merging packs in %s failed: %s", self.path, exc)
            self._pack_refs_quietly()
            try:
                self.dirty.flush(fsync=self.fsync)
            except OSError as exc:
                error = exc
        try:
            self.staging.close()
        except StorageError as exc:
            error = error or exc
        self.locks.close()
        self.backend.close()
        self._local = threading.local()
        if error is not None:
            raise DurabilityError(f"{self.path}: flush failed: {error}") from error
