"""Finding agno runs and sessions without reading every thread: an in-memory index over the thread names.

A run is the thread ``run/<session_id>/<run_id>`` and a session ``agno/session/<session_id>``,
so the index only needs the names of the threads: which runs a session has, which session a run
id belongs to, and the head of each session (whose checkpoint metadata holds the columns a
listing filters and sorts on). It is built from one listing of the refs and then follows
writes two ways: this process's writes as a listener of the repository (each journal record
names the refs it moved), other processes' writes by a stat of the files that change whenever a
branch is created, moved or deleted (the ``refs/heads`` directory, ``packed-refs`` and the
history generation); when those changed, the next read lists the refs again.

Imports :mod:`qvc.store` and :mod:`qvc.runs`.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Dict, List, Optional, Set, Tuple

from qvc.runs.ids import THREAD_PREFIX
from qvc.store.git_store import GitCheckpointStore
from qvc.store.refnames import HEADS, decode_thread

#: Thread prefix of agno session rows.
SESSION_PREFIX = "agno/session/"


def session_thread(session_id: str) -> str:
    """The thread holding the row of session ``session_id``."""
    return SESSION_PREFIX + session_id


def _stat(path: str) -> Optional[Tuple[int, int, int]]:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


class ThreadIndex:
    """Run id → thread, session id → its run threads, session id → head commit (thread-safe)."""

    def __init__(self, store: GitCheckpointStore):
        self._store = store
        self._lock = threading.RLock()
        self._runs: Dict[str, str] = {}                  # run id -> thread
        self._session_runs: Dict[str, Set[str]] = {}     # session id -> run ids
        self._sessions: Dict[str, str] = {}              # session id -> head sha
        self._signature: Any = None
        self.listings = 0                                # how many times the refs were listed
        store.repository.listeners.append(self._observe)

    def _current_signature(self) -> Any:
        path = self._store.path
        return (_stat(os.path.join(path, "refs", "heads")), _stat(os.path.join(path, "packed-refs")),
                _stat(os.path.join(path, "qvc", "generation")))

    def _add(self, thread: str, sha: Optional[str]) -> None:
        if thread.startswith(SESSION_PREFIX):
            session = thread[len(SESSION_PREFIX):]
            if sha is None:
                self._sessions.pop(session, None)
            else:
                self._sessions[session] = sha
        elif thread.startswith(THREAD_PREFIX) and "/" in thread[len(THREAD_PREFIX):]:
            session, run_id = thread[len(THREAD_PREFIX):].rsplit("/", 1)
            if sha is None:
                if self._runs.get(run_id) == thread:
                    del self._runs[run_id]
                self._session_runs.get(session, set()).discard(run_id)
            else:
                self._runs[run_id] = thread
                self._session_runs.setdefault(session, set()).add(run_id)

    def _observe(self, record: Any) -> None:
        """Follow a write of this process (a repository listener)."""
        with self._lock:
            if self._signature is None:
                return
            for name, _old, new in record.refs:
                if name.startswith(HEADS):
                    thread = self._store.thread_of_ref(name) if new is not None else self._name(name)
                    if thread is not None:
                        self._add(thread, new)

    def _name(self, ref: str) -> Optional[str]:
        return decode_thread(ref[len(HEADS):])

    def refresh(self, force: bool = False) -> None:
        """List the refs again if another process may have moved one (or ``force``)."""
        with self._lock:
            signature = self._current_signature()
            if signature == self._signature and not force:
                return
            runs: Dict[str, str] = {}
            session_runs: Dict[str, Set[str]] = {}
            sessions: Dict[str, str] = {}
            self._runs, self._session_runs, self._sessions = runs, session_runs, sessions
            for name, sha in self._store.repository.refs(HEADS):
                thread = self._store.thread_of_ref(name)
                if thread is not None:
                    self._add(thread, sha)
            self._signature = signature
            self.listings += 1

    def run_thread(self, run_id: str) -> Optional[str]:
        """The thread of ``run_id``, or ``None``; lists the refs again only on a miss after a change."""
        self.refresh()
        with self._lock:
            thread = self._runs.get(run_id)
        if thread is not None and self._store.head(thread) is None:
            self.refresh(force=True)
            thread = self._runs.get(run_id)
        return thread

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
        """Session id → head commit of every agno session."""
        self.refresh()
        with self._lock:
            return dict(self._sessions)
