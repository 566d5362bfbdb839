"""Finding agno runs and sessions without reading every thread: an index over the thread names.

A run is the thread ``run/<session_id>/<run_id>`` and a session ``agno/session/<session_id>``,
so which runs a session has, which session a run id belongs to and which sessions exist are all
in the branch names. The index keeps those names and checks them against the repository with a
:meth:`qvc.store.threadnames.ThreadNames.signature` (a stat of the branch files: it changes
whenever a branch is created, moved or deleted, by any process); when they changed, it lists the
thread names again (:meth:`~qvc.store.threadnames.ThreadNames.threads`: a directory scan, no ref
file read) and sorts them into runs and sessions. A run found by id costs one ref read (is its
branch still there?); a session listing reads the head of each session (again only when a
branch moved), never a run.

Imports :mod:`qvc.store` and :mod:`qvc.runs`.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional, Set, Tuple

from qvc.runs.ids import THREAD_PREFIX
from qvc.store.git_store import GitCheckpointStore
from qvc.store.prefixes import register_prefix
from qvc.store.threadnames import RACY_NS as RACY_NS  # where it was before the store had it
from qvc.store.threadnames import ThreadNames

#: Thread prefix of agno session rows (registered: no other owner may claim it).
SESSION_PREFIX = register_prefix("agno.sessions", "agno/session/")
#: Thread prefix of each session's run-index counter (the next ``run_index`` to give a run stored
#: without one), advanced by compare-and-swap so concurrent writers never give one index twice.
RUN_INDEX_PREFIX = register_prefix("agno.run-index", "agno/run-index/")
#: The thread holding the daily metrics agno's ``calculate_metrics`` computes from the sessions and runs.
METRICS_THREAD = register_prefix("agno.metrics", "agno/metrics/") + "daily"


def session_thread(session_id: str) -> str:
    """The thread holding the row of session ``session_id``."""
    return SESSION_PREFIX + session_id


def run_index_thread(session_id: str) -> str:
    """The thread holding the run-index counter of session ``session_id``."""
    return RUN_INDEX_PREFIX + session_id


class ThreadIndex:
    """Run id → thread, session id → its run ids, and the set of sessions (thread-safe)."""

    def __init__(self, store: GitCheckpointStore):
        self._store = store
        self._names = ThreadNames(store)
        self._lock = threading.RLock()
        self._runs: Dict[str, str] = {}                  # run id -> thread
        self._session_runs: Dict[str, Set[str]] = {}     # session id -> run ids
        self._sessions: Set[str] = set()
        self._signature: Any = None
        self._heads: Optional[Dict[str, str]] = None     # session id -> head, valid while the signature is
        self.scans = 0                                   # how many times the names were scanned

    def refresh(self, force: bool = False) -> None:
        """Scan the branch names again if a branch may have been created or deleted (or ``force``)."""
        with self._lock:
            signature = self._names.signature()  # before the listing: a change during it shows next time
            if signature is not None and signature == self._signature and not force:
                return
            runs: Dict[str, str] = {}
            session_runs: Dict[str, Set[str]] = {}
            sessions: Set[str] = set()
            for thread in self._names.threads():
                if thread.startswith(SESSION_PREFIX):
                    sessions.add(thread[len(SESSION_PREFIX):])
                elif thread.startswith(THREAD_PREFIX) and "/" in thread[len(THREAD_PREFIX):]:
                    session, run_id = thread[len(THREAD_PREFIX):].rsplit("/", 1)
                    runs[run_id] = thread
                    session_runs.setdefault(session, set()).add(run_id)
            self._runs, self._session_runs, self._sessions = runs, session_runs, sessions
            self._signature = signature
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
            if signature is not None and signature == self._signature == self._names.signature():
                self._heads = dict(out)
        return out
