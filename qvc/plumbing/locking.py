"""The lock protocol: every ``flock`` the plumbing takes, named and taken here.

A repository has three lock files under ``qvc/`` (see docs/durability.md, "The lock protocol"):

* ``qvc/lock``, the **maintenance lock**: writers hold it shared while they write (a
  transaction, a fetch); maintenance (recovery, gc, purge, merging the directory's packs) holds
  it exclusively, so no writer is mid-write then.
* ``qvc/gate``, the **gate**: a writer takes it shared for a moment on its way in; maintenance
  holds it exclusively first, so no new transaction begins while it waits for the writers
  already in.
* ``qvc/pack.lock``: a merge of packs holds it exclusively, so two merges never race.

The staging database's queue and publisher's turn (:mod:`qvc.plumbing.staging`) and the
journals of the journal-and-leases release (their owner held its journal exclusively while its
store was open) are locked with :func:`try_flock` and tested with :func:`flocked` too. The layers
above take their own locks (a clone's owner, a run's recorder) with
:func:`open_lock_file`, :func:`try_flock` and :func:`wait_flock` too: no other module calls
``flock``.

Imports nothing of qvc: the modules that use a lock sit above this one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from typing import Callable, Iterator

LOCK = "qvc/lock"
GATE = "qvc/gate"
PACK_LOCK = "qvc/pack.lock"  # flock: a merge of the directory's packs excludes stores merging their own

_excluding = threading.local()  # .depth: this thread holds a repository's exclusive lock


def excluding() -> bool:
    """Whether this Python thread holds some repository's exclusive lock (:meth:`LockProtocol.exclusive`)."""
    return bool(getattr(_excluding, "depth", 0))


def open_lock_file(path: str) -> int:
    """Open (creating it) a lock file; the descriptor is not inherited by child processes."""
    return os.open(path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o644)


def try_flock(fd: int, *, shared: bool = False) -> bool:
    """Take ``flock`` on ``fd`` without waiting; ``False`` if another holder excludes it."""
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def wait_flock(fd: int, *, shared: bool = False, timeout: float | None = None) -> bool:
    """Take ``flock`` on ``fd``, waiting for other holders to release it: without limit (``timeout``
    ``None``), else for up to ``timeout`` seconds (``0``: one try). ``False`` if the wait ran out."""
    if timeout is None:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        return True
    deadline, pause = time.monotonic() + timeout, 0.0001
    while not try_flock(fd, shared=shared):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(pause, left))  # a stopped holder never wakes us: look again, in short sleeps
        pause = min(pause * 2, 0.002)
    return True


class Busy(TimeoutError):
    """A lock was not had within the wait allowed (:meth:`LockProtocol.exclusive`): ``path`` names
    the lock file. The layers above raise it as :class:`qvc.errors.StorageError` (``EBUSY``)."""

    def __init__(self, path: str, waited: float):
        super().__init__(f"{path} was held by another process for over {waited:g} s")
        self.path = path


def unlock(fd: int) -> None:
    """Release this descriptor's ``flock``."""
    fcntl.flock(fd, fcntl.LOCK_UN)


def flocked(path: str) -> bool | None:
    """Whether some process holds a ``flock`` on ``path`` (this one included); ``None`` if
    there is no such file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return not try_flock(fd, shared=True)
    finally:
        os.close(fd)


class SharedFlock:
    """A shared ``flock`` on one file, held while any thread of this process needs it."""

    def __init__(self, path: str):
        self.fd = open_lock_file(path)
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


class LockProtocol:
    """The maintenance lock and the gate of one repository, as one store of this process takes them.

    A read-only store holds neither while it reads (it never writes, and works on a repository
    it cannot write), but may take them exclusively to recover.
    """

    def __init__(self, repo_path: str, *, readonly: bool):
        self.repo_path = repo_path
        self.readonly = readonly
        self.lock_path = os.path.join(repo_path, LOCK)
        self.gate_path = os.path.join(repo_path, GATE)
        self._lock = None if readonly else SharedFlock(self.lock_path)
        self._gate = None if readonly else SharedFlock(self.gate_path)
        self._local = threading.local()  # .exclusive: this thread holds this store's exclusive lock

    @property
    def excluding_here(self) -> bool:
        """Whether this Python thread holds this store's exclusive lock (writers are excluded:
        what it publishes needs no shared lock)."""
        return getattr(self._local, "exclusive", False)

    def shared(self) -> contextlib.AbstractContextManager[None]:
        """Hold the maintenance lock shared (publishing, packing): no maintenance meanwhile."""
        assert self._lock is not None, "a read-only store takes no shared lock"
        return self._lock.held()

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """Pass the gate (wait while maintenance holds it), then hold the maintenance lock shared."""
        assert self._gate is not None and self._lock is not None, "a read-only store does not write"
        self._gate.pass_through()
        with self._lock.held():
            yield

    @contextlib.contextmanager
    def exclusive(self, publish_first: Callable[[], None], *, wait: float | None = None) -> Iterator[int]:
        """Exclude every writer of every process; yield the maintenance lock's descriptor.

        ``publish_first`` (this process's writes, unless this thread already excludes) runs
        first; then the gate is closed (no new transaction starts) and the lock taken, once
        the writers already in are done. A subprocess that must stay covered by the lock even
        if this process dies (``git repack``) inherits the descriptor.

        ``wait`` bounds the wait for both (seconds; ``0``: try once; ``None``: no limit): past it,
        :class:`Busy` is raised before anything is held (a writer stopped mid-transaction holds
        the lock shared until it resumes or dies, and the closed gate would hold back every
        other writer meanwhile).
        """
        if not excluding():
            publish_first()  # this process's own writes first: they must not wait for the lock
        gate = -1
        try:  # a read-only store recovering closes the gate as well, where the file is there to lock
            gate = os.open(self.gate_path, (os.O_RDONLY if self.readonly else os.O_CREAT | os.O_RDWR) | os.O_CLOEXEC,
                           0o644)
        except OSError:
            if not self.readonly:
                raise
        fd = open_lock_file(self.lock_path)
        locked = False
        deadline = None if wait is None else time.monotonic() + wait
        try:
            if gate >= 0 and not wait_flock(gate, timeout=_left(deadline)):  # writers pass it: soon ours
                raise Busy(self.gate_path, wait or 0.0)
            if not wait_flock(fd, timeout=_left(deadline)):
                raise Busy(self.lock_path, wait or 0.0)  # (closing the gate's descriptor opens it again)
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

    @contextlib.contextmanager
    def try_exclusive(self) -> Iterator[bool]:
        """Hold the maintenance lock exclusively if no one holds it now (yields ``True``), else
        yield ``False`` at once. The gate is not closed: for work a busy repository can skip."""
        fd = open_lock_file(self.lock_path)
        try:
            yield try_flock(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        for flock in (self._lock, self._gate):
            if flock is not None:
                flock.close()


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


@contextlib.contextmanager
def pack_lock(repo_path: str) -> Iterator[None]:
    """Hold ``qvc/pack.lock`` exclusively (waiting for it): one merge of packs at a time."""
    fd = open_lock_file(os.path.join(repo_path, PACK_LOCK))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
