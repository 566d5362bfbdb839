"""Finding agno runs and sessions without reading every thread: an index over the thread names.

A run is the thread ``run/<session_id>/<run_id>`` and a session ``agno/session/<session_id>``,
so which runs a session has, which session a run id belongs to and which sessions exist are all
in the branch names. The index keeps those names and checks them against the repository with a
stat of ``refs/heads`` and ``packed-refs`` (their identity and modification time change whenever
a branch is created, moved or deleted, by any process; a stat younger than a clock tick is not
trusted, since a second change may share its timestamp); when they changed, it scans the branch names
again (:meth:`qvc.plumbing.odb.RefReader.names`: a directory scan, no ref file read; ~7 ms for
11,000 branches) and decodes only names it has not seen. A run found by id costs one ref read
(is its branch still there?); a session listing reads the head of each session (again only when a
branch moved), never a run.

Imports :mod:`qvc.plumbing`, :mod:`qvc.store` and :mod:`qvc.runs`.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Dict, List, Optional, Set, Tuple

from qvc.plumbing.odb import RefReader
from qvc.runs.ids import THREAD_PREFIX
from qvc.store.git_store import GitCheckpointStore
from qvc.store.refnames import HEADS, decode_thread

#: Thread prefix of agno session rows.
SESSION_PREFIX = "agno/session/"


def session_thread(session_id: str) -> str:
    """The thread holding the row of session ``session_id``."""
    return SESSION_PREFIX + session_id


#: A stat younger than this may hide a second change with the same timestamp (file times have a
#: clock tick's granularity): the index does not trust it, as git does not trust "racily clean" files.
RACY_NS = 50_000_000


def _stat(path: str) -> Optional[Tuple[int, int, int]]:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def _trusted(signature: Any) -> bool:
    """Whether nothing can change under ``signature`` without changing it (no stat is racily recent)."""
    now = time.time_ns()
    return all(st is None or now - st[1] > RACY_NS for st in signature[:2])


class ThreadIndex:
    """Run id → thread, session id → its run ids, and the set of sessions (thread-safe)."""

    def __init__(self, store: GitCheckpointStore):
        self._store = store
        self._reader = RefReader(store.path)
        self._lock = threading.RLock()
        self._threads: Dict[str, Optional[str]] = {}     # ref name -> thread (decoded once)
        self._runs: Dict[str, str] = {}                  # run id -> thread
        self._session_runs: Dict[str, Set[str]] = {}     # session id -> run ids
        self._sessions: Set[str] = set()
        self._signature: Any = None
        self._heads: Optional[Dict[str, str]] = None     # session id -> head, valid while the signature is
        self.scans = 0                                   # how many times the names were scanned

    def _current_signature(self) -> Any:
        path = self._store.path
        return (_stat(os.path.join(path, "refs", "heads")), _stat(os.path.join(path, "packed-refs")),
                frozenset(self._store.repository.unpublished(HEADS).items()))

    def _thread(self, name: str) -> Optional[str]:
        if name not in self._threads:
            thread = decode_thread(name[len(HEADS):])
            self._threads[name] = thread if thread is not None else self._store.thread_of_ref(name)
        return self._threads[name]

    def refresh(self, force: bool = False) -> None:
        """Scan the branch names again if a branch may have been created or deleted (or ``force``)."""
        with self._lock:
            signature = self._current_signature()
            if signature == self._signature and not force:
                return
            names = self._reader.names(HEADS) | {name for name, _ in signature[2]}  # and this process's unpublished
            runs: Dict[str, str] = {}
            session_runs: Dict[str, Set[str]] = {}
            sessions: Set[str] = set()
            for name in names:
                thread = self._thread(name)
                if thread is None:
                    continue
                if thread.startswith(SESSION_PREFIX):
                    sessions.add(thread[len(SESSION_PREFIX):])
                elif thread.startswith(THREAD_PREFIX) and "/" in thread[len(THREAD_PREFIX):]:
                    session, run_id = thread[len(THREAD_PREFIX):].rsplit("/", 1)
                    runs[run_id] = thread
                    session_runs.setdefault(session, set()).add(run_id)
            for name in set(self._threads) - names:
                del self._threads[name]
            self._runs, self._session_runs, self._sessions = runs, session_runs, sessions
            self._signature = signature if _trusted(signature) else None
            self._heads = None
            self.scans += 1

    def run_thread(self, run_id: str) -> Optional[str]:
        """The thread of ``run_id``, or ``None``: one ref read when the index knows the run, a scan otherwise."""
        with self._lock:
            thread = self._runs.get(run_id)
        if thread is not None and self._store.head(thread) is not None:
            return thread
        self.refresh()
        with self._lock:
            return self._runs.get(run_id)

    def session_run_ids(self, session_id: str) -> List[str]:
        """The run ids of ``session_id``."""
        self.refresh()
        with self._lock:
            return sorted(self._session_runs.get(session_id, ()))

    def all_run_ids(self) -> List[Tuple[str, str]]:
        """``(run id, thread)`` of every run."""
        self.refresh()
        with self._lock:
            return sorted(self._runs.items())

    def session_heads(self) -> Dict[str, str]:
        """Session id → head commit of every agno session (one ref read each)."""
        self.refresh()
        with self._lock:
            if self._heads is not None and self._signature is not None:
                return dict(self._heads)  # no branch moved since they were read
            signature = self._signature
            sessions = list(self._sessions)
        out = {}
        for session_id in sessions:
            sha = self._store.head(session_thread(session_id))
            if sha is not None:
                out[session_id] = sha
        with self._lock:
            if signature is not None and signature == self._signature == self._current_signature():
                self._heads = dict(out)
        return out
