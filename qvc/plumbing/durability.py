"""Durability modes and the machinery behind them.

=========  ==========================================================================
SYNC       When ``put`` (or any write) returns, the change is on stable storage: its
           journal record was flushed with ``fdatasync`` (one disk flush per call;
           concurrent calls share one).
ASYNC      ``put`` returns once the change is in the OS (it survives the process being
           killed). A background flusher makes it durable within ``max_lag`` seconds,
           in order. A failed flush is raised by the next call, ``flush()`` or ``close()``.
EXIT       Like ASYNC without the flusher: durable at ``flush()``, ``close()`` or
           interpreter exit (and, in practice, when the store publishes a batch to git's
           files, which flushes the journal first: see :meth:`Repository.publish
           <qvc.plumbing.repository.Repository.publish>`).
=========  ==========================================================================

``fsync=False`` turns every flush into a no-op (for throwaway repositories and tmpfs); the
modes then only differ in ordering. In every mode a killed process loses nothing that a
returned call wrote; only a power loss can cost ASYNC and EXIT their unflushed window.
"""

from __future__ import annotations

import os
import threading
from typing import Callable

from qvc.types import DurabilityMode

__all__ = ["DurabilityMode", "Worker", "harden"]


_libc = None


def harden(path: str, *, fsync: bool = True) -> None:
    """Flush every dirty file of the file system holding ``path`` to stable storage.

    Uses Linux's ``syncfs`` (one flush for all the loose objects and refs written since the
    last call) and falls back to ``os.sync()`` elsewhere.
    """
    if not fsync:
        return
    import ctypes  # here, not at import time: only writers flush

    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(None, use_errno=True)  # the C library this process already has loaded
        except OSError:
            _libc = False
    syncfs = getattr(_libc, "syncfs", None) if _libc else None
    if syncfs is None:
        os.sync()
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs failed: {os.strerror(err)}", path)
    finally:
        os.close(fd)


class Worker:
    """A daemon thread that runs ``task()`` within ``max_lag`` seconds after each ``poke()``.

    Pokes that arrive while it waits or runs are served by one more run. A failure is kept
    in ``error`` for the owner to surface. The owner stops it (:meth:`stop`); ``start=False``
    makes one that never runs, a stand-in that keeps an owner from starting a real one.
    """

    def __init__(self, task: Callable[[], None], max_lag: float, name: str = "qvc-flusher", *,
                 start: bool = True):
        self._task = task
        self._max_lag = max_lag
        self._wake = threading.Event()
        self._halt = threading.Event()  # cuts the wait for company short when stopping
        self._stop = False
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        if start:
            self._thread.start()

    def poke(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()  # before flushing: a poke that arrives meanwhile re-arms the loop
            if self._stop:
                return
            # Let pokes that arrive meanwhile share this run, but never wait past max_lag.
            if self._max_lag:
                self._halt.wait(self._max_lag / 2)
            try:
                self._task()
            except BaseException as exc:  # surfaced to the caller by the store
                self.error = exc

    def stop(self) -> None:
        """End the thread (after the run under way, if any) and wait for it. Idempotent."""
        self._stop = True
        self._halt.set()
        self._wake.set()
        if self._thread.ident is not None:  # started
            self._thread.join()
