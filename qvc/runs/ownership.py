"""Run ownership: the run lock a recording process holds, and whether a RUNNING run's owner is alive.

The owning recorder holds an ``flock`` on ``<repo>/qvc/runs/<thread>.lock`` (a :class:`RunLock`);
the kernel drops it when the process dies, so an owner on this host is judged exactly. Owners on
other hosts are judged by their heartbeat against a lease. Imports :mod:`qvc.store.refnames` and
:mod:`qvc.runs.model`.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Optional

from qvc.plumbing.locking import open_lock_file, try_flock
from qvc.runs.model import OwnerStatus, Run, RunStatus
from qvc.store.refnames import encode_thread


class RunLock:
    """An exclusive ``flock`` on a run's lock file, held while a recorder owns the run."""

    def __init__(self, path: str):
        self.path = path
        self.fd: Optional[int] = None

    def try_acquire(self) -> bool:
        """Take the lock without waiting: True once held, False if another open lock holds it."""
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        while True:
            fd = open_lock_file(self.path)
            if not try_flock(fd):
                os.close(fd)
                return False
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:  # not a file a releasing owner unlinked meanwhile
                self.fd = fd
                return True
            os.close(fd)

    def held_elsewhere(self) -> bool:
        """Whether another open lock (any process, this one included) holds it."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            return not try_flock(fd)
        finally:
            os.close(fd)

    def release(self, unlink: bool = False) -> None:
        """Drop the lock if held (a no-op otherwise); ``unlink`` removes the lock file first."""
        if self.fd is None:
            return
        if unlink:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
        os.close(self.fd)
        self.fd = None


def run_lock(repo_path: str, thread: str) -> RunLock:
    """The (not yet acquired) run lock of ``thread`` in the repository at ``repo_path``."""
    return RunLock(os.path.join(repo_path, "qvc", "runs", encode_thread(thread) + ".lock"))


def judge_owner(run: Run, lock: RunLock, lease: float, locked_here: bool = False) -> OwnerStatus:
    """Whether ``run``'s owner is alive, given its run ``lock`` and the ``lease`` (seconds) for other hosts.

    ``locked_here``: the caller holds the run lock, so no owner on this host can hold it.
    """
    owner = run.owner
    if run.status is not RunStatus.RUNNING or owner is None:
        return OwnerStatus("none", owner, f"the run is {run.status.value}, not owned")
    if owner.host == socket.gethostname():
        if not locked_here and lock.held_elsewhere():
            return OwnerStatus("live", owner, f"pid {owner.pid} on {owner.host} holds the run lock")
        return OwnerStatus("stale", owner, f"pid {owner.pid} on {owner.host} is gone (run lock free)")
    age = time.time() - owner.heartbeat_at
    if age < lease:
        return OwnerStatus("live", owner, f"pid {owner.pid} on {owner.host} heartbeat {age:.0f}s ago "
                                          f"(lease {lease:.0f}s)")
    return OwnerStatus("stale", owner, f"pid {owner.pid} on {owner.host}: no heartbeat for {age:.0f}s "
                                       f"(lease {lease:.0f}s)")
