"""Which threads a repository has, from the branch names alone, and whether that may have changed.

For indexes kept over thread names (an adapter that finds its rows by name, like agno's): listing
the names costs one directory scan of ``refs/heads`` (plus ``packed-refs`` when it changed),
no ref file read (~7 ms for 11,000 branches), and each name is decoded once. A
:meth:`ThreadNames.signature` tells whether a listing is still current without listing again:
a stat of ``refs/heads`` and ``packed-refs`` (their identity, modification time and size change
whenever a branch is created, moved or deleted, by any process) and this process's ref moves
that git's files lack yet.

Imports :mod:`qvc.plumbing` (ref files) and :mod:`qvc.store`.
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING, Hashable, Optional

from qvc.plumbing.odb import RefReader
from qvc.store.refnames import HEADS, decode_thread

if TYPE_CHECKING:
    from qvc.store.git_store import GitCheckpointStore

#: A stat younger than this may hide a second change with the same timestamp (file times have a
#: clock tick's granularity): it is not trusted, as git does not trust "racily clean" files.
RACY_NS = 50_000_000


def _stat(path: str) -> Optional[tuple[int, int, int]]:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


class ThreadNames:
    """The thread ids of the repository a store has open, read from branch names (thread-safe).

    Reads only; sees other processes' branches as soon as their stores acknowledged them, and
    this process's own before they reach git's files.
    """

    def __init__(self, store: GitCheckpointStore) -> None:
        self._store = store
        self._reader = RefReader(store.path)
        self._lock = threading.Lock()
        self._decoded: dict[str, Optional[str]] = {}  # ref name -> thread id, decoded once

    def signature(self) -> Optional[Hashable]:
        """A token equal to an earlier one only if no branch was created, moved or deleted in
        between, by any process; ``None`` when a file changed too recently to tell (within
        :data:`RACY_NS`): then treat the names as changed. Take it *before* :meth:`threads`, so
        that a change during the listing shows in the next token."""
        path = self._store.path
        stats = (_stat(os.path.join(path, "refs", "heads")), _stat(os.path.join(path, "packed-refs")))
        own = frozenset(self._store.repository.unpublished(HEADS).items())
        now = time.time_ns()
        if any(st is not None and now - st[1] <= RACY_NS for st in stats):
            return None
        return (*stats, own)

    def threads(self) -> set[str]:
        """Every thread id, listed afresh (names are decoded once per process; a hashed long id
        costs one read of its head the first time)."""
        # Staged moves first (every store's): one published meanwhile is in git's files when they are read.
        own = self._store.repository.unpublished(HEADS)  # (None: a staged delete)
        names = (self._reader.names(HEADS) | set(own)) - {n for n, v in own.items() if v is None}
        with self._lock:
            for name in set(self._decoded) - names:
                del self._decoded[name]
            out = set()
            for name in names:
                if name not in self._decoded:
                    thread = decode_thread(name[len(HEADS):])
                    self._decoded[name] = thread if thread is not None else self._store.thread_of_ref(name)
                thread = self._decoded[name]
                if thread is not None:
                    out.add(thread)
            return out
