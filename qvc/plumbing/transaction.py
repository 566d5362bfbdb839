"""The transaction: the one write path of a repository (objects written, refs moved by compare-and-swap).

:class:`Transaction` talks to its repository through :class:`TransactionHost`, the few public
methods of :class:`qvc.plumbing.repository.Repository` a write needs; it imports nothing of it
(``Repository`` below names that class).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from typing import Iterable, Protocol

from qvc.errors import CorruptionError
from qvc.plumbing import pack
from qvc.plumbing.durability import dirty
from qvc.plumbing.journal import GENERATION, Record, fsync_dir
from qvc.plumbing.libgit2 import pygit2
from qvc.plumbing.reflog import ZERO, ReflogEntry


class TransactionHost(Protocol):
    """What a :class:`Transaction` needs of its repository (:class:`qvc.plumbing.repository.Repository`
    is the one implementation)."""

    path: str
    fsync: bool

    @property
    def git(self) -> pygit2.Repository:
        """This Python thread's ``pygit2.Repository``."""

    def make_readable(self, record: Record) -> None:
        """Make the record's objects readable by this process now (published later)."""

    def apply_move(self, record: Record, name: str, old: str | None, new: str | None,
                   message: str | None = None) -> None:
        """Compare-and-swap ref ``name`` for ``record`` (it joins the record's moves)."""

    def commit_record(self, record: Record) -> None:
        """Journal ``record``, apply the durability mode, tell the listeners."""

    def rewriting(self) -> None:
        """Tell the rewrite listeners that this transaction is about to rewrite history."""

    def finish_dead_writer(self, name: str) -> bool:
        """Roll a dead store's lease on ``name`` forward."""

    def ref(self, name: str) -> str | None:
        """The hex target of ref ``name`` (``None``: absent)."""

    def refs(self, prefix: str) -> Iterable[tuple[str, str]]:
        """``(name, hex target)`` of every ref under ``prefix``."""

    def finish_dead_writers(self, prefix: str) -> int:
        """Roll forward every dead store's lease under ``prefix``; how many."""

    def publish(self) -> None:
        """Write what this process applied to git's files."""

    def flush(self) -> None:
        """Make every write so far durable and published."""


class Transaction:
    """One journaled change to a repository: objects written, then refs moved by compare-and-swap.

    Made by :meth:`Repository.transaction`, never directly. Every writer of qvc goes through
    one, so this class is the whole write path: what it does on disk is decided here.

    * :meth:`write` adds an object and returns its id. This process can read the objects from
      the transaction's first ref move (or :meth:`make_readable`) on; git's files get them, as one pack
      shared with other writes, when the repository publishes (:meth:`Repository.publish`), always
      before any ref that needs them, so no ref on disk ever points at an object that is not there.
    * :meth:`move_ref` moves a ref by compare-and-swap; it takes effect at once for this process
      (readers see it) and raises :class:`~qvc.errors.CheckpointConflictError` if the ref is
      not at ``old``. The move holds a lease on the ref (its git lock) until it is published,
      about :data:`~qvc.plumbing.publication.PUBLISH_LAG` later, so no other process or git moves it meanwhile; other
      processes' readers of the ref wait for that (:func:`qvc.plumbing.leases.settle`), so they
      see it once the transaction returned. A delete (``new=None``) is a move under a lease too;
      the background publisher publishes a lease only once the record of its moves is journaled,
      and a transaction that deleted a ref publishes before it returns.
    * At the end of the ``with`` block, also when it raises, a transaction that moved a ref
      is appended to the journal as one record and the
      repository's durability mode applies: in SYNC mode the change is on stable storage when
      the block exits, in ASYNC within the repository's ``max_lag``, in EXIT at flush or close.
      Then each of :attr:`Repository.listeners` is called with the record (caches follow
      writes this way). A transaction that moved no ref leaves no trace but unreferenced
      objects (removed by ``qvc purge``).
    * :meth:`rewrite_history` marks a change that deletes or rewrites history: at once each of
      :attr:`Repository.rewrite_listeners` is called (what is derived from history and kept on
      disk is retired before any ref moves); at the end the record (if it moved a ref) is
      flushed in every mode, then ``qvc/generation`` gets a new token, which tells every process
      to rebuild what it derived from history.

    A transaction is used by one Python thread. Ref moves are not undone when the block raises:
    what was applied is journaled, so recovery can always roll a crash forward or back.
    """

    def __init__(self, repo: TransactionHost):
        self.repo = repo
        self.record = Record()
        self._token: str | None = None
        self._prepends: list[tuple[str, list[ReflogEntry]]] = []

    def write(self, kind: str, data: bytes) -> bytes:
        """Add a git object (``"blob"``, ``"tree"`` or ``"commit"``) to the transaction; return its raw id."""
        oid = pack.object_id(kind, data)
        self.record.objects.append((kind, data))
        self.record.oids.append(oid)
        return oid

    def make_readable(self) -> None:
        """Make the objects added so far readable by this process now, before any ref moves
        (not yet in git's files: see :meth:`Repository.publish`; not yet durable: that comes
        with the record)."""
        self.repo.make_readable(self.record)

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
        self.repo.finish_dead_writers(prefix)
        return list(self.repo.refs(prefix))

    def move_ref(self, name: str, old: str | None, new: str | None, message: str | None = None) -> None:
        """Compare-and-swap ref ``name`` from ``old`` to ``new`` (``None``: absent; both ``None``: no-op).

        ``message`` is the reflog entry's cause (thread branches keep reflogs). Raises
        :class:`~qvc.errors.CheckpointConflictError` if the ref is not at ``old`` (another
        writer moved it) or stays locked by another writer for over ``LOCK_WAIT`` seconds.
        """
        self.repo.apply_move(self.record, name, old, new, message)

    def record_moves(self, moves: list[tuple[str, str | None, str | None]]) -> None:
        """Journal ref moves that ``git`` made while this transaction held the lock (a fetch
        updating remote-tracking refs): ``(name, old, new)`` each, already applied. They join
        this transaction's record, so durability and the listeners treat them as its own."""
        self.record.refs.extend(moves)

    def rewrite_history(self) -> None:
        """Mark this transaction as deleting or rewriting history (see the class docstring): call
        it after the reads that plan the rewrite and before its first ref move, since the rewrite
        listeners run now (the first time only).

        The new generation token is noted in the record, so recovery knows it as this writer's."""
        if self._token is None:
            self._token = os.urandom(8).hex()
            self.record.seen[GENERATION] = [None, self._token]
            self.repo.rewriting()

    def prepend_reflog(self, name: str, entries: list[ReflogEntry]) -> None:
        """Put ``entries`` (newest first, as :meth:`Repository.reflog` gives them) before the
        reflog of ``name``, which this transaction must have moved: a renamed ref keeps its past.
        Done as the transaction ends, once its record is journaled and its moves published
        (nothing of a transaction reaches git's files before its record); a kill before that
        leaves the reflog without them, which no checkpoint needs."""
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
        """End the transaction (:meth:`Repository.transaction` calls it when the block exits,
        also when it raises): journal the record, apply the durability mode, tell the listeners,
        replace the generation token if :meth:`rewrite_history` was called, and prepend the
        reflog lines :meth:`prepend_reflog` was given."""
        if not self.record.refs:  # nothing moved (a rewrite that failed first included): no trace
            return
        self.repo.commit_record(self.record)
        if self._token is None and any(new is None for _, _, new in self.record.refs):
            # a delete is in git's files on return (a rewrite's flush below does it); journaled
            # already, so a failure here (a full disk) is left to the publisher's next try
            with contextlib.suppress(OSError):
                self.repo.publish()
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
            dirty(self.repo.path).wrote(path)
        if self._prepends:
            self.repo.publish()  # (a rewrite's flush did already: then a no-op)
            for name, entries in self._prepends:
                self._prepend_reflog(name, entries)


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

