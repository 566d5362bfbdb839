r"""Publication: what one store applied and git's files lack yet, and how it gets there.

A write is applied in memory first (this process reads it at once) and published to git's
files later (other processes and plain git see it then): objects wait in :class:`Publication`'s
pending set, ref moves in leases (:mod:`qvc.plumbing.leases`: the ref's git lock, held until
published). :meth:`Publication.publish` writes the pending objects as one pack, then each leased
ref (its reflog lines, then its value), releasing the leases; the publisher thread does this
about :data:`PUBLISH_LAG` after each write, once the records of the moves under a lease are
journaled. A delete is a lease too, published as git deletes a ref (:func:`delete_leased_ref`).
Durability is the journal's, not this module's: a move is journaled by the transaction that
made it.

Lock order: ``publish_mutex`` before ``state``, never after; the maintenance lock is held
shared (:class:`qvc.plumbing.locking.LockProtocol`) while git's files are written, unless
this thread holds it exclusively.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import threading
import time
from typing import Callable, Iterator

from qvc.errors import CheckpointConflictError
from qvc.plumbing import leases
from qvc.plumbing.backend import Backend
from qvc.plumbing.durability import Worker, dirty
from qvc.plumbing.journal import GENERATION, Journal, Record
from qvc.plumbing.leases import Lease
from qvc.plumbing.libgit2 import pygit2
from qvc.plumbing.locking import LockProtocol
from qvc.plumbing.packset import PackSet
from qvc.plumbing.reflog import ReflogEntry, head_branch, read_reflog
from qvc.plumbing.refpack import without_packed

LOCK_WAIT = 10.0  # how long a ref move waits for another writer's lock on the ref
#: how soon the publisher writes applied moves to git's files after a write (other processes
#: and plain git see a write within about this long; see :meth:`Publication.publish`)
PUBLISH_LAG = 0.01


log = logging.getLogger("qvc")


def file_identity(repo_path: str, name: str) -> list | None:
    """``[inode, mtime ns]`` of the file holding ref ``name`` (its loose file, else packed-refs)
    or of another file of the repository, ``None`` if there is none."""
    for rel in (name, "packed-refs") if name.startswith("refs/") else (name,):
        try:
            st = os.stat(os.path.join(repo_path, rel))
            return [st.st_ino, st.st_mtime_ns]
        except FileNotFoundError:
            continue
    return None


class GenerationWatch:
    """The token in ``qvc/generation``, read once, then confirmed by one ``stat`` per call.

    ``qvc/generation`` is only ever replaced by a rename (a delete, a rewrite, recovery
    finishing a killed delete). The watch keeps the file it read open, so no other file can
    take its inode number while it compares identities: an unchanged identity (device, inode,
    mtime, size) means the token read is still the current one. Thread-safe.
    """

    def __init__(self, repo_path: str):
        self._path = os.path.join(repo_path, GENERATION)
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._seen: tuple[tuple | None, str | None] = (None, None)

    def current(self) -> tuple[tuple | None, str | None]:
        """``(identity, token)`` of ``qvc/generation`` now; ``(None, None)`` when there is none.
        The identity changes whenever the token may have."""
        try:
            st = os.stat(self._path)
        except FileNotFoundError:
            if self._fd is not None or self._seen != (None, None):
                self._set(None, None, None)
            return None, None
        seen = self._seen
        if seen[0] == (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size):
            return seen
        try:
            fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            self._set(None, None, None)
            return None, None
        try:
            st = os.fstat(fd)
            data = b""
            while chunk := os.read(fd, 4096):
                data += chunk
        except BaseException:
            os.close(fd)
            raise
        token = data.decode("ascii", "replace").replace("\r\n", "\n").replace("\r", "\n")  # as text mode reads it
        identity = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
        self._set(fd, identity, token)
        return identity, token

    def _set(self, fd: int | None, identity: tuple | None, token: str | None) -> None:
        with self._lock:
            old, self._fd = self._fd, fd
            self._seen = (identity, token)
        if old is not None:
            os.close(old)

    def close(self) -> None:
        """Let go of the file held open (a later :meth:`current` reads it again)."""
        self._set(None, None, None)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def moved(name: str, old: str | None, current: str | None) -> CheckpointConflictError:
    """The conflict of a compare-and-swap of ``name`` that expected ``old`` and found ``current``."""
    if old is None:
        return CheckpointConflictError(f"{name}: created by another writer meanwhile")
    found = (current or "nothing")[:12]
    return CheckpointConflictError(f"{name}: moved by another writer (expected {old[:12]}, found {found})")


PACKED_REFS = "packed-refs"


def _create_lock(repo_path: str, path: str) -> None:
    """Create the lock file ``path`` exclusively (its directory too); ``OSError`` naming the
    lock when it exists (the callers' retry loops look for "lock" in the message)."""
    try:
        os.close(leases.open_creating_dirs(repo_path, path, os.O_WRONLY | os.O_EXCL | os.O_CLOEXEC))
    except FileExistsError:
        raise OSError(errno.EEXIST, "locked by another writer", path) from None


def _prune_dirs(root: str, name: str) -> None:
    """Remove the empty directories ``name`` (a ref) leaves under ``root`` (as git and libgit2
    do after a delete), keeping ``refs/<kind>``."""
    parts = name.split("/")[:-1]
    while len(parts) > 2:
        try:
            os.rmdir(os.path.join(root, *parts))
        except OSError:
            return
        parts.pop()


def delete_leased_ref(repo_path: str, name: str) -> None:
    """Delete ref ``name`` under the lease lock held on it (:mod:`qvc.plumbing.leases`: no one
    else moved the ref meanwhile), as git deletes a ref: under ``packed-refs.lock`` too, its
    ``packed-refs`` entry first, then its loose file and reflog, then the lock. A failure keeps
    the lease whole and a kill leaves it for a roll-forward, which deletes again (each step
    finds what an earlier try left). Waits out another writer's ``packed-refs.lock`` (held for
    milliseconds) up to :data:`LOCK_WAIT`, then raises ``OSError``.

    Holding ``packed-refs.lock`` is what keeps a concurrent ``git pack-refs`` (any store's
    packer, or git's) from reading the loose ref before the delete and writing it into
    ``packed-refs`` after: the deleted ref would come back with its old value. (libgit2 takes
    that lock only when the ref is packed already, so its delete is not used.)"""
    deadline = time.monotonic() + LOCK_WAIT
    delay = 0.0005
    while True:
        try:
            _delete_under_lock(repo_path, name)
            break
        except OSError as exc:
            if exc.errno != errno.EEXIST:  # (a full disk is no lock)
                raise
            if time.monotonic() > deadline:
                raise CheckpointConflictError(held_too_long(repo_path, PACKED_REFS)) from None
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
    # the ref's file and reflog are gone, and packed-refs was rewritten if it held the ref
    dirty(repo_path).wrote(os.path.join(repo_path, PACKED_REFS))
    dirty(repo_path).changed(os.path.dirname(os.path.join(repo_path, name)),
                             os.path.dirname(os.path.join(repo_path, "logs", name)))
    _prune_dirs(repo_path, name)
    _prune_dirs(os.path.join(repo_path, "logs"), name)


def _delete_under_lock(repo_path: str, name: str) -> None:
    """One try of :func:`delete_leased_ref`; ``OSError`` (``EEXIST``) when another writer holds
    ``packed-refs.lock``."""
    packed = os.path.join(repo_path, PACKED_REFS)
    _create_lock(repo_path, packed + ".lock")
    committed = False
    try:
        kept = without_packed(repo_path, name)
        if kept is not None:
            with open(packed + ".lock", "wb") as f:
                f.write(b"\n".join(kept))
            os.rename(packed + ".lock", packed)
            committed = True
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            os.unlink(os.path.join(repo_path, name))
        with contextlib.suppress(FileNotFoundError, NotADirectoryError, IsADirectoryError):
            os.unlink(os.path.join(repo_path, "logs", name))
    finally:
        if not committed:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(packed + ".lock")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(repo_path, name + ".lock"))


def held_too_long(repo_path: str, name: str) -> str:
    """The one line for a write that waited :data:`LOCK_WAIT` for ``name``'s lock (no qvc store's):
    it names the lock file and, as git does, leaves removing it to the user."""
    return (f"{name}: locked by another program for over {LOCK_WAIT:.0f} s ({os.path.join(repo_path, name)}.lock "
            "exists; if no other program is running, remove it and try again)")


class Publication:
    """One store's unpublished writes (pending objects, leased refs), its ref moves, and its publisher.

    ``journal`` gives the store's journal (created on first use: a lease names it, so it exists
    before any lease is taken); ``sync_journal`` flushes it if it exists. ``finish_dead_writer``
    rolls a dead store's lease on a ref forward (see :meth:`qvc.plumbing.repository.Repository.finish_dead_writer`)
    and says whether a lock that is no dead store's remains. ``after_publish`` runs after each
    publication, its locks let go (the store merges packs then).
    """

    def __init__(self, path: str, *, backend: Backend, packs: PackSet, locks: LockProtocol,
                 journal: Callable[[], Journal], sync_journal: Callable[[], None],
                 finish_dead_writer: Callable[[str], bool], after_publish: Callable[[], None],
                 generation_watch: GenerationWatch | None = None):
        self.path = path
        #: ``qvc/generation``, read once and then confirmed by a ``stat`` (each move records it)
        self.generation = generation_watch or GenerationWatch(path)
        self._backend = backend
        self._packs = packs
        self._locks = locks
        self._get_journal = journal
        self._sync_journal = sync_journal
        self._finish_dead_writer = finish_dead_writer
        self._after_publish = after_publish
        # Applied but not yet in git's files (see publish): objects by raw id, and leased refs.
        self._pending: dict[bytes, tuple[str, bytes]] = {}
        self._leases: dict[str, Lease] = {}
        self._serials = itertools.count(1)  # numbers this store's leases (see qvc.plumbing.leases)
        self._state = threading.RLock()  # guards both; held while publishing
        self._publish_mutex = threading.RLock()  # taken before _state, never after
        self._publisher: Worker | None = None  # started by the first deferred move
        self._touched: set[str] = set()  # refs this store moved (see move_ref and touched)
        self._touched_lock = threading.Lock()
        self._who: str | None = None  # the reflog identity (git's: user.name <user.email>)
        self._log_all: bool | None = None  # core.logAllRefUpdates

    # -- what is unpublished ------------------------------------------------------------

    def pending_object(self, raw: bytes) -> tuple[str, bytes] | None:
        """``(kind, data)`` of object ``raw`` if this store wrote it and has not published it yet."""
        return self._pending.get(raw)

    def leased(self, name: str) -> Lease | None:
        """This store's lease on ref ``name``, if it holds one (its value is the ref's, for this process)."""
        return self._leases.get(name)

    def has_unpublished(self) -> bool:
        """Whether git's files lack something this store applied (objects or ref moves)."""
        return bool(self._pending or self._leases)

    def has_leases(self) -> bool:
        """Whether this store holds a lease (a ref move git's files lack)."""
        return bool(self._leases)

    def unpublished(self, prefix: str) -> dict[str, str | None]:
        """Name → value of this store's leased refs under ``prefix``.

        Read without the state lock, as :meth:`leased` is (a publish holds it while it builds a
        pack, and a reader must not wait for that): the copy of the leases is taken at once, and
        :meth:`publish` writes a lease's ref file before it drops the lease, so a caller that reads
        git's files after this call finds each lease either here or there."""
        if not self._leases:
            return {}
        held = list(self._leases.items())  # one copy, made without letting another thread run
        return {n: lease.value for n, lease in held if n.startswith(prefix)}

    def touched(self) -> list[str]:
        """The refs this store moved, sorted (what a restarted journal records as its base)."""
        with self._touched_lock:
            return sorted(self._touched)

    def leased_reflog(self, name: str) -> list[ReflogEntry]:
        """The reflog of ``name`` from its files, with the moves of this store's lease on it
        (if it still holds one) before them, newest first."""
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

    # -- applying -----------------------------------------------------------------------

    def make_readable(self, record: Record) -> None:
        """Make the record's objects not yet stored readable: this process reads them at once,
        git's files get them at the next :meth:`publish` (not yet durable: that is the record's job)."""
        todo = record.objects[record.stored:]
        if not todo:
            return
        self._get_journal()  # created (its name made durable) before any of its moves reaches git's files
        with self._state:
            for oid, obj in zip(record.oids[record.stored:], todo, strict=True):
                self._pending.setdefault(oid, obj)
        record.stored = len(record.objects)

    def move_ref(self, record: Record, name: str, old: str | None, new: str | None,
                 message: str | None = None) -> None:
        """Compare-and-swap ``name`` from ``old`` to ``new`` for ``record`` (which it joins):
        under a lease, published once the record is journaled (a delete too). Raises
        :class:`CheckpointConflictError` if the ref is not at ``old`` or stays locked by
        another writer for over :data:`LOCK_WAIT` seconds."""
        if old is None and new is None:
            return
        self.make_readable(record)
        journal = self._get_journal()  # created (its name made durable) before any of its moves reaches git's files
        if old is not None and name not in self._touched:
            # Power-loss safety: before this process first moves an existing ref, make its
            # current value durable in the journal so recovery can always roll back to it.
            with self._touched_lock:
                if name not in self._touched:
                    # with what it saw (the file, the generation token), as every move notes it:
                    # a record naming no token would tell recovery nothing of later deletes, and
                    # a ref this write then deletes and dies before re-creating (a delete
                    # rewriting a superseded line) would not be restored
                    seen = {name: [file_identity(self.path, name), self.generation.current()[1]]}
                    journal.sync(journal.append(Record(refs=[(name, old, old)], seen=seen)))
        # The record is journaled after the refs move: its space is taken now, so a full disk
        # fails the write here, before any ref moved, and never between the move and the journal.
        journal.reserve(record.size_hint(more_refs=1))
        # Deletes too: in git's files only once the record is journaled (see publish), so a
        # writer killed before that leaves every ref it moved under a lease that rolls back.
        self._lease_move(record, name, old, new, message)
        with self._touched_lock:
            self._touched.add(name)
        record.refs.append((name, old, new))

    def _lease_move(self, record: Record, name: str, old: str | None, new: str | None, message: str | None) -> None:
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
                        raise moved(name, old, lease.value)
                    record.seen[name] = [lease.identity, self.generation.current()[1], lease.serial]
                    lease.unjournaled.add(id(record))
                    lease.value = new
                    lease.moves.append((old, new, why, time.time()))
                    break
                identity, gen = file_identity(self.path, name), self.generation.current()[1]
                serial = next(self._serials)
                fd = leases.take(self.path, name, os.path.basename(self._get_journal().path), serial)
                if fd is not None:
                    try:
                        current = self._backend.reader.ref(name, settle=False)  # under our lease: no one else moves it
                    except BaseException:
                        leases.drop(self.path, name, fd)
                        raise
                    if current != old:
                        leases.drop(self.path, name, fd)
                        raise moved(name, old, current)
                    self._leases[name] = Lease(fd, new, identity, [(old, new, why, time.time())], serial,
                                               {id(record)})
                    record.seen[name] = [identity, gen, serial]
                    break
            self.clear_stale_lock(name)  # another writer holds it: wait, unless it is a dead store's
            if time.monotonic() > deadline:
                if leases.holder(self.path, name) is None and os.path.lexists(leases.lock_path(self.path, name)):
                    raise CheckpointConflictError(held_too_long(self.path, name))
                raise CheckpointConflictError(f"{name}: locked by another writer for over {LOCK_WAIT:.0f} s")
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        if self._publisher is None:
            with self._state:
                if self._publisher is None:
                    self._publisher = Worker(self._publish_quietly, PUBLISH_LAG, name="qvc-publisher")

    def clear_stale_lock(self, name: str) -> None:
        """Finish ``name``'s lock when its writer is a dead store (``finish_dead_writer``); a
        live store's lease, git's lock and any other program's are never touched: their owner
        cannot be proved gone."""
        self._finish_dead_writer(name)

    # -- publishing ---------------------------------------------------------------------

    def publish(self, *, journaled_only: bool = False) -> None:
        """Write what this store has applied but git's files lack: every pending object, as one
        pack, then every leased ref (its reflog lines, then its value; a deleted ref is deleted),
        releasing the leases.

        ``journaled_only`` (the background publisher): leave the leases holding a move whose
        record is not journaled yet (a transaction still under way), so that a writer killed
        before its record leaves each of its moves under a lease that rolls back, never in
        git's files (a delete's first moves without its last ones). See
        :meth:`qvc.plumbing.repository.Repository.publish`. Raises ``OSError`` if a file cannot
        be written; what was not written stays pending and the next call retries.
        """
        if not (self._pending or self._leases) or self._backend.released:
            return
        with contextlib.ExitStack() as held:
            if not self._locks.excluding_here:  # else maintenance already excludes writers
                held.enter_context(self._locks.shared())
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
                        self._packs.write([obj for _, obj in objects], [oid for oid, _ in objects])
                        self._pending.clear()
                    if self._leases:
                        head = head_branch(self.path)
                        who = self._identity()
                        for name, lease in list(self._leases.items()):
                            if journaled_only and lease.unjournaled:
                                continue
                            if lease.value is None:
                                self._publish_delete(name, lease)
                            else:
                                leases.publish(self.path, name, lease, who, log=self._logged(name),
                                               head_too=name == head)
                            del self._leases[name]
        self._after_publish()

    def _publish_delete(self, name: str, lease: Lease) -> None:
        """Publish a lease that deletes its ref (:func:`delete_leased_ref`)."""
        delete_leased_ref(self.path, name)
        os.close(lease.fd)
        lease.fd = -1

    def journaled(self, record: Record) -> None:
        """Note that ``record`` is in the journal: the background publisher may now publish the
        leases holding its moves. Without the state lock (a publish holds it while it writes a
        pack; a put must not wait for that): a publisher that saw the lease held back skips it
        this once, and the poke that follows the journaling wakes it again."""
        for name, _, _ in record.refs:
            lease = self._leases.get(name)
            if lease is not None:
                lease.unjournaled.discard(id(record))

    def _publish_quietly(self) -> None:
        try:
            self.publish(journaled_only=True)
        except Exception as exc:  # kept pending: the next write, flush or close retries, and close reports it
            log.warning("qvc: writing %s's git files failed (retried later): %s", self.path, exc)

    def poke(self) -> None:
        """Wake the publisher (if it runs) when something is unpublished."""
        if self._publisher is not None and (self._pending or self._leases):
            self._publisher.poke()

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """Hold off every publication and every ref move of this store for the block (for
        :meth:`~qvc.plumbing.repository.Repository.harden`; locks taken in publish's order)."""
        with self._publish_mutex, self._state:
            yield

    def stop_publisher(self) -> None:
        """Stop and join the publisher; none starts after this (a move still running past the
        store's close wait finds a stand-in)."""
        with self._state:  # _lease_move starts the publisher under this lock, only while there is none
            publisher = self._publisher
            if publisher is None:  # a stand-in: a write still running past CLOSE_WAIT starts none
                self._publisher = Worker(self._publish_quietly, PUBLISH_LAG, name="qvc-publisher", start=False)
        if publisher is not None:
            publisher.stop()

    def drop_pending_objects(self) -> None:
        """Forget the pending objects (only those of transactions that failed before moving a
        ref may be dropped: nothing needs them)."""
        self._pending.clear()

    def _identity(self) -> str:
        """Who reflog lines name, as git and libgit2 do: ``user.name <user.email>``, else ``unknown``."""
        if self._who is None:
            try:
                sig = self._backend.git.default_signature
                self._who = f"{sig.name} <{sig.email}>"
            except (pygit2.GitError, KeyError, ValueError):
                self._who = "unknown <unknown>"
        return self._who

    def _logged(self, name: str) -> bool:
        """Whether git would keep a reflog for ``name`` (``core.logAllRefUpdates``, or an existing log)."""
        if self._log_all is None:
            try:
                self._log_all = bool(self._backend.git.config.get_bool("core.logAllRefUpdates"))
            except (KeyError, pygit2.GitError, ValueError):
                self._log_all = False
        if self._log_all and (name.startswith(leases.LOGGED) or name == "HEAD"):
            return True
        return os.path.exists(os.path.join(self.path, "logs", name))

