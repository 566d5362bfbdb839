"""The transaction: the one write path of a repository (objects written, refs moved by compare-and-swap).

A :class:`Transaction` is one transaction of the repository's staging database
(:mod:`qvc.plumbing.staging`), which owns durability; it talks to its repository through
:class:`TransactionHost` and imports nothing of it.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from typing import Iterable, Protocol

from qvc.errors import CheckpointConflictError, CorruptionError
from qvc.plumbing.durability import dirty, fsync_dir
from qvc.plumbing.libgit2 import pygit2
from qvc.plumbing.reflog import ZERO, ReflogEntry
from qvc.plumbing.staging import StagedTransaction

#: the key of a rewrite's new generation token in :attr:`Record.seen`
GENERATION = "qvc/generation"


@dataclass
class Record:
    """What one transaction did, as its listeners learn it: objects written (type name, data)
    and refs moved (name, old, new). (The journal-and-leases release journaled the same record,
    :mod:`qvc.plumbing.journal`; ``base``, ``seen`` and ``stored`` are for reading its journals.)"""

    objects: list[tuple[str, bytes]] = field(default_factory=list)
    refs: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    base: bool = False  # a snapshot of ref values taken right after hardening
    #: ref name -> [identity (inode, mtime ns) of the ref's file, token in ``qvc/generation``,
    #: lease serial] just before the move (the serial only for a move under a lease, see
    #: :mod:`qvc.plumbing.leases`; records written before serials have two items); recovery
    #: uses it to tell a lost rename from a later writer's change. A delete also notes the
    #: token it is about to write, under ``qvc/generation``.
    seen: dict[str, list] = field(default_factory=dict)
    #: the generation token the moves were made under, as a 1-tuple (the token the transaction
    #: began with, or the one its rewrite started); ``None`` where unknown (an old journal's record)
    generation: tuple[str | None] | None = field(default=None, compare=False)
    #: what a commit listener derived from the record before the commit, for the listeners after
    #: it (the store's history keeps the commits it parsed and the checkpoint ids it indexed)
    derived: object = field(default=None, compare=False, repr=False)
    stored: int = field(default=0, compare=False)  # how many of ``objects`` are in the object store
    oids: list[bytes] = field(default_factory=list, compare=False)  # ids of ``objects``, when known

    @property
    def rewrote(self) -> bool:
        """Whether the transaction rewrote history (it wrote a new generation token)."""
        return GENERATION in self.seen


class TransactionHost(Protocol):
    """What a :class:`Transaction` needs of its repository (:class:`qvc.plumbing.repository.Repository`
    is the one implementation)."""

    path: str
    fsync: bool

    @property
    def git(self) -> pygit2.Repository:
        """This Python thread's ``pygit2.Repository``."""

    def logged(self, name: str) -> bool:
        """Whether git keeps a reflog for ref ``name``."""

    def ref(self, name: str) -> str | None:
        """The hex target of ref ``name`` (``None``: absent)."""

    def refs(self, prefix: str) -> Iterable[tuple[str, str]]:
        """``(name, hex target)`` of every ref under ``prefix``."""

    def publish(self) -> None:
        """Write what is staged to git's files."""

    def signed(self, commit: bytes) -> bytes:
        """``commit`` as the repository stores it (signed when it has a signing key)."""


class Transaction:
    """One change to a repository: objects written, then refs moved by compare-and-swap.

    Made by :meth:`Repository.transaction`, never directly. Every writer of qvc goes through
    one, so this class is the whole write path: it is one transaction of the staging database
    (:mod:`qvc.plumbing.staging`, which says what is durable when).

    * :meth:`write` adds an object and returns its id; this thread reads it at once.
    * :meth:`move_ref` moves a ref by compare-and-swap and raises
      :class:`~qvc.errors.CheckpointConflictError` if the ref is not at ``old``; this thread
      sees the move at once, every other reader once the transaction has committed.
    * The transaction commits when the ``with`` block exits normally (durable per the
      repository's mode; then each of :attr:`Repository.listeners` is called with the
      :attr:`record`, so caches follow writes); if the block raises, nothing it did is stored.
    * :meth:`rewrite_history` marks a change that deletes or rewrites history: the commit
      carries a new generation token (every process then rebuilds what it derived from
      history, and the checkpoint-id index is walked again) and is durable on return in
      every mode.

    A transaction is used by one Python thread; transactions do not nest.
    """

    def __init__(self, repo: TransactionHost, staged: StagedTransaction):
        self.repo = repo
        self.staged = staged
        self.record = Record(generation=(staged.generation,))
        self._token: str | None = None
        self._prepends: list[tuple[str, list[ReflogEntry]]] = []
        #: what the rewrites of this transaction are for (:meth:`rewrite_history`), in order
        self.why: list[str] = []

    def write(self, kind: str, data: bytes) -> bytes:
        """Add a git object (``"blob"``, ``"tree"`` or ``"commit"``) to the transaction; return its raw id.

        A commit is stored as :meth:`Repository.signed <qvc.plumbing.repository.Repository.signed>`
        makes it: with the repository's signature if it signs (any signature ``data`` carries is
        replaced), and :class:`~qvc.errors.SignatureError` if it must sign and cannot."""
        if kind == "commit":
            data = self.repo.signed(data)
        oid = self.staged.write(kind, data)
        self.record.objects.append((kind, data))
        self.record.oids.append(oid)
        return oid

    def ref(self, name: str) -> str | None:
        """The current hex target of ref ``name`` (``None`` if absent), this transaction's moves included."""
        return self.staged.ref(name)

    def refs(self, prefix: str) -> list[tuple[str, str]]:
        """``(name, hex target)`` of every ref under ``prefix``, this transaction's moves included."""
        return list(self.repo.refs(prefix))

    def move_ref(self, name: str, old: str | None, new: str | None, message: str | None = None) -> None:
        """Compare-and-swap ref ``name`` from ``old`` to ``new`` (``None``: absent; both ``None``: no-op).

        ``message`` is the reflog entry's cause (refs git keeps reflogs of). Raises
        :class:`~qvc.errors.CheckpointConflictError` if the ref is not at ``old`` (another
        writer moved it).
        """
        if old is None and new is None:
            return
        self.staged.move(name, old, new, (message or "qvc") if self.repo.logged(name) else None)
        self.record.refs.append((name, old, new))

    def index(self, ids: list[tuple[str, str]]) -> None:
        """Note ``(checkpoint id, commit sha)`` pairs this transaction stores in the staging
        database's id index, committed (and durable) with the transaction
        (:meth:`qvc.plumbing.staging.StagedTransaction.index`)."""
        if ids:
            self.staged.index(ids)

    def record_moves(self, moves: list[tuple[str, str | None, str | None]]) -> None:
        """Tell the listeners of ref moves that ``git`` made itself (a fetch updating
        remote-tracking refs): ``(name, old, new)`` each, already in git's files."""
        self.record.refs.extend(moves)

    def rewrite_history(self, why: str = "") -> None:
        """Mark this transaction as deleting or rewriting history (see the class docstring): call
        it after the reads that plan the rewrite and before its first ref move (the checkpoint-id
        index is emptied now, the first time only). ``why`` says what the rewrite is for, for the
        record the store keeps of it (:attr:`why`)."""
        if why and why not in self.why:
            self.why.append(why)
        if self._token is None:
            self._token = self.staged.rewrite()
            self.record.seen[GENERATION] = [None, self._token]
            self.record.generation = (self._token,)

    @property
    def rewrites(self) -> bool:
        """Whether :meth:`rewrite_history` was called."""
        return self._token is not None

    def prepend_reflog(self, name: str, entries: list[ReflogEntry]) -> None:
        """Put ``entries`` (newest first, as :meth:`Repository.reflog` gives them) before the
        reflog of ``name``, which this transaction must have moved: a renamed ref keeps its past.
        Done once the transaction has committed and its moves are published; a kill before
        that leaves the reflog without them, which no checkpoint needs."""
        self._prepends.append((name, entries))

    def _prepend_reflog(self, name: str, entries: list[ReflogEntry]) -> None:
        path = os.path.join(self.repo.path, "logs", name)
        with open(path, "rb") as f:
            tail = f.read()
        lines = [f"{e.old or ZERO} {e.new or ZERO} {e.who} {e.time} +0000\t{e.message}\n" for e in reversed(entries)]
        with open(path + ".qvc-rename", "wb") as f:
            f.write("".join(lines).encode() + tail)
        os.replace(path + ".qvc-rename", path)
        dirty(self.repo.path).wrote(path)

    def set_head(self, target: str) -> None:
        """Point HEAD at a ref name (``refs/heads/...``, possibly unborn) or detach it at a commit SHA
        (:meth:`Repository.set_head <qvc.plumbing.repository.Repository.set_head>` publishes the
        refs HEAD's reflog line names first).

        HEAD is not staged (git's files hold it at once, as libgit2 writes it): it is flushed on
        the spot (durable on return unless the repository was opened with ``fsync=False``)."""
        repo = self.repo
        head_unlocked(repo.path)
        log = os.path.join(repo.path, "logs", "HEAD")
        try:
            size = os.path.getsize(log)
        except OSError:
            size = None
        try:
            try:
                move = repo.git.set_head
                move(target if target.startswith("refs/") else pygit2.Oid(hex=target))
            except pygit2.GitError:
                if _head_readable(repo.path) and _head_resolves(repo):
                    raise
                # libgit2 reads the old HEAD (and the ref it names) first and refuses a garbled
                # one: write it anew, then move
                _write_head(repo.path, target)
                move(target if target.startswith("refs/") else pygit2.Oid(hex=target))
        except (OSError, pygit2.GitError):
            if size is not None:  # libgit2 may have logged the move that then failed (a full disk)
                with contextlib.suppress(OSError):
                    os.truncate(log, size)
            head_unlocked(repo.path)  # (taken meanwhile: named, as above)
            raise
        dirty(repo.path).wrote(log)  # libgit2 logged the move there
        if repo.fsync:
            fd = os.open(os.path.join(repo.path, "HEAD"), os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(repo.path)

    def finish(self) -> None:
        """After the commit (:meth:`Repository.transaction` calls it): prepend the reflog lines
        :meth:`prepend_reflog` was given, once git's files hold the moves."""
        if self._prepends:
            self.repo.publish()
            for name, entries in self._prepends:
                with contextlib.suppress(FileNotFoundError):  # published by now, unless another program holds its lock
                    self._prepend_reflog(name, entries)


def head_unlocked(path: str) -> None:
    """Raise :class:`CheckpointConflictError` naming ``HEAD.lock`` when another program holds it
    (git mid-update, or killed): HEAD cannot move, and the lock file is left for its owner, as git leaves it."""
    lock = os.path.join(path, "HEAD.lock")
    if os.path.lexists(lock):
        raise CheckpointConflictError(f"HEAD: locked by another program ({lock} exists; if no other program is "
                                      "running, remove it and try again)")


def _head_readable(path: str) -> bool:
    """Whether ``path``'s HEAD file names a ref or a commit, as git writes it."""
    try:
        with open(os.path.join(path, "HEAD"), "rb") as f:
            text = f.read().decode("utf-8", "replace").strip()
    except FileNotFoundError:
        return False
    return text.startswith("ref: refs/") or bool(re.fullmatch(r"[0-9a-f]{40}", text))


def _head_resolves(repo: TransactionHost) -> bool:
    """Whether the ref HEAD names (if any) reads: its file may hold garbage (``DamagedRefError``)."""
    with open(os.path.join(repo.path, "HEAD"), "rb") as f:
        text = f.read().decode("utf-8", "replace").strip()
    try:
        if text.startswith("ref: "):
            repo.ref(text[5:])
    except CorruptionError:
        return False
    return True


def _write_head(path: str, target: str) -> None:
    """Replace a missing or garbled HEAD with one naming ``target`` (a ref name or a commit SHA)."""
    tmp = os.path.join(path, f"HEAD.qvc-{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(f"ref: {target}\n" if target.startswith("refs/") else f"{target}\n")
    os.replace(tmp, os.path.join(path, "HEAD"))

