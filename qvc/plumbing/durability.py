"""Durability modes, and flushing what git's files hold.

=========  ==========================================================================
SYNC       When ``put`` (or any write) returns, the change is on stable storage: its
           transaction committed to the staging database with ``synchronous=FULL``
           (one flush of its write-ahead log; :mod:`qvc.plumbing.staging`).
ASYNC      ``put`` returns once the change is committed (it survives the process being
           killed). A background flusher makes it durable within ``max_lag`` seconds,
           in order. A failed flush is raised by the next call, ``flush()`` or ``close()``.
EXIT       Like ASYNC without the flusher: durable at ``flush()``, ``close()`` or
           interpreter exit.
=========  ==========================================================================

``fsync=False`` turns every flush into a no-op (for throwaway repositories and tmpfs); the
modes then only differ in ordering. In every mode a killed process loses nothing that a
returned call wrote; only a power loss can cost ASYNC and EXIT their unflushed window.

Publication flushes the git files it writes before it deletes what it published from the
staging database. What else a process writes to git's files (HEAD, a reflog it rewrites, the
packs it merges, packed refs) is noted in the repository's :class:`DirtyPaths` (:func:`dirty`),
and :meth:`DirtyPaths.flush` flushes those files (``fdatasync``) and directories (``fsync``)
and nothing else. :func:`harden` (``syncfs``, the whole file system) stays for what other
programs wrote (``git`` run by maintenance or a fetch), whose files qvc cannot enumerate.
"""

from __future__ import annotations

import errno
import os
import threading
import weakref
from typing import Callable

from qvc.types import DurabilityMode

__all__ = ["FLUSH_EACH", "DirtyPaths", "DurabilityMode", "Worker", "dirty", "harden"]


_libc = None


def fsync_dir(path: str) -> None:
    """Flush directory ``path`` (the names created, renamed or removed in it)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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


#: at most this many files noted are flushed one by one (see :meth:`DirtyPaths.flush`)
FLUSH_EACH = 32


class DirtyPaths:
    """What this process wrote to one repository's files since they were last flushed.

    Writers call :meth:`wrote` for each file whose bytes they wrote or which they put in place
    (a rename, a create), :meth:`made_dirs` after creating directories, and :meth:`changed` for
    directories whose entries they removed or renamed. :meth:`flush` makes all of it durable.
    Thread-safe; noting costs a set insertion and no system call.
    """

    def __init__(self, root: str):
        self.root = root
        self._files: set[str] = set()
        self._dirs: set[str] = set()
        self._lock = threading.Lock()
        self._flushing = threading.Lock()

    def wrote(self, *paths: str) -> None:
        """Files whose contents were written, or which were created or renamed into place:
        their data and their directory entries are flushed."""
        with self._lock:
            for path in paths:
                self._files.add(path)
                self._dirs.add(os.path.dirname(path))

    def changed(self, *dirs: str) -> None:
        """Directories whose entries changed (an unlink, a rename out of them)."""
        with self._lock:
            self._dirs.update(dirs)

    def made_dirs(self, path: str) -> None:
        """``path`` may have just been created, with its parents (``os.makedirs``): every
        directory from it up to the repository's root holds a new entry, or may."""
        path = os.path.normpath(path)
        with self._lock:
            while path.startswith(self.root + os.sep):
                path = os.path.dirname(path)
                self._dirs.add(path)

    def __len__(self) -> int:
        """How many files and directories the next :meth:`flush` flushes."""
        return len(self._files) + len(self._dirs)

    def flush(self, *, fsync: bool = True) -> None:
        """Flush every file (``fdatasync``) and directory (``fsync``) noted since the last flush;
        durable on return. A file gone since (replaced, packed, deleted) is skipped: its
        directory is flushed, and whoever replaced it flushes what it wrote. A directory gone
        since (git removes emptied ref directories) is flushed as its nearest existing parent.
        More than :data:`FLUSH_EACH` files are flushed with one :func:`harden` of the whole
        file system instead (a store that moved hundreds of refs: one flush each would cost
        a journal commit each, 0.2 ms or more apiece, where one ``syncfs`` costs a few ms
        unless other programs left much unflushed).
        Raises ``OSError`` if a flush fails; the paths not yet flushed are kept for the next
        call. ``fsync=False`` forgets them (nothing is ever flushed then)."""
        with self._flushing:  # one flush at a time: a second waits and then finds the rest
            with self._lock:
                files, self._files = self._files, set()
                dirs, self._dirs = self._dirs, set()
            if not fsync:
                return
            if len(files) > FLUSH_EACH:
                try:  # one flush for all: a file flush each would cost more (a journal commit each)
                    harden(self.root)
                except BaseException:
                    with self._lock:
                        self._files.update(files)
                        self._dirs.update(dirs)
                    raise
                return
            files_left = sorted(files)
            dirs_left = sorted(dirs, key=lambda d: (d.count(os.sep), d))  # deepest last, flushed first
            try:
                while files_left:
                    _flush_file(files_left[-1])
                    files_left.pop()
                while dirs_left:  # an emptied directory git removed since is flushed as its parent
                    _flush_dir(dirs_left[-1], self.root)
                    dirs_left.pop()
            except BaseException:
                with self._lock:
                    self._files.update(files_left)
                    self._dirs.update(dirs_left)
                raise


def _flush_file(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # not a file qvc wrote (it writes no symlinks)
            return
        raise
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


def _flush_dir(path: str, root: str) -> None:
    while True:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            break
        except (FileNotFoundError, NotADirectoryError):
            parent = os.path.dirname(path)
            if parent == path or not parent.startswith(root):
                return
            path = parent
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_dirty: weakref.WeakValueDictionary[str, DirtyPaths] = weakref.WeakValueDictionary()
_dirty_lock = threading.Lock()


def dirty(repo_path: str) -> DirtyPaths:
    """The :class:`DirtyPaths` of the repository at ``repo_path`` (an absolute path) in this
    process: one per path, shared by every store of the process open there, and kept while
    one holds it (:class:`~qvc.plumbing.repository.Repository` does, from open to close)."""
    found = _dirty.get(repo_path)
    if found is None:
        with _dirty_lock:
            found = _dirty.get(repo_path)
            if found is None:
                found = _dirty[repo_path] = DirtyPaths(repo_path)
    return found


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
                if self._stop:  # the owner, stopping, does the last run itself
                    return
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
