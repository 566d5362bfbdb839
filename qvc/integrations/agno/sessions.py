"""agno session rows (agent, team and workflow sessions) as threads: one checkpoint per change of the row.

The session ``S`` is the thread ``agno/session/S``; each column of its row (``session_data``,
``agent_data``, ``metadata``, ``summary``, ...) is a field of the checkpoint, so a change to
one column stores one new blob, and every earlier version of the row stays in the thread's
history. The columns a listing filters and sorts on are also kept in the checkpoint's metadata
(read without the tree, cached by commit), so a page of sessions reads one small object per
session at most, and nothing of the runs. So is the time the session was first stored
(``inserted``), which orders a listing without ``sort_by`` as agno's SQL databases order their
rows: by insertion.

Imports :mod:`qvc.store`, :mod:`qvc.types`, :mod:`qvc.runs` and the adapter's ``codec`` and ``index``.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, List, Mapping, Optional

from qvc.errors import CheckpointConflictError, QvcError
from qvc.integrations.agno.codec import SESSION_COLUMNS, normalize, session_summary
from qvc.integrations.agno.index import ThreadIndex, session_thread
from qvc.runs.ids import check_id, new_id
from qvc.store.git_store import GitCheckpointStore
from qvc.types import Checkpoint, CheckpointConfig

#: Sort keys a session listing accepts (agno's session table columns); others are ignored, as agno's SQL
#: databases ignore them.
SORTABLE = frozenset(SESSION_COLUMNS) | {"session_name"}
#: How many times a compare-and-swap is retried when other writers keep moving the head.
_RETRIES = 50


class SessionOwnedError(QvcError):
    """An upsert of a session another user owns (agno's SQL databases refuse it and return ``None``)."""


class AgnoSessionStore:
    """The session rows of an agno database, kept in ``store`` (``index`` lists them)."""

    def __init__(self, store: GitCheckpointStore, index: ThreadIndex):
        self.store = store
        self.index = index
        self._lock = threading.RLock()
        self._summaries: Dict[str, Dict[str, Any]] = {}  # commit sha -> summary (commits never change)
        self._last: Dict[str, tuple] = {}  # thread -> (checkpoint id, step, row) this process last wrote

    def read(self, session_id: str) -> Optional[Dict[str, Any]]:
        """The stored row of ``session_id`` (every column), or ``None``."""
        if not isinstance(session_id, str) or not session_id:
            return None
        tup = self.store.get_tuple(CheckpointConfig(session_thread(session_id)))
        if tup is None:
            return None
        state = tup.checkpoint.state_data
        return {k: state.get(k) for k in SESSION_COLUMNS}

    def write(self, session: Any, *, preserve_updated_at: bool = False) -> Dict[str, Any]:
        """Upsert ``session`` (an agno ``Session``): one checkpoint if any column but ``updated_at`` changed.

        Returns the stored row. ``created_at`` is kept from the first write and ``updated_at`` is
        the time of the write (the session's own with ``preserve_updated_at``), as in agno's SQL
        databases. Raises :class:`SessionOwnedError` when the
        stored row belongs to another user, and what :meth:`GitCheckpointStore.put` raises.
        """
        from agno.db.base import SessionType
        from agno.session import AgentSession, TeamSession

        row = normalize(session.to_dict(include_runs=False))
        row.pop("runs", None)
        kind = SessionType.AGENT if isinstance(session, AgentSession) else \
            SessionType.TEAM if isinstance(session, TeamSession) else SessionType.WORKFLOW
        row["session_type"] = kind.value
        session_id = check_id(row.get("session_id"), "session id")
        thread = session_thread(session_id)
        with self._lock:
            head = self._head(thread)
            old = head[2] if head is not None else None
            now = int(time.time())
            if old is not None:
                if old.get("user_id") is not None and old["user_id"] != row.get("user_id"):
                    raise SessionOwnedError(f"session {session_id!r} belongs to user {old['user_id']!r}, not "
                                       f"{row.get('user_id')!r}")
                row["created_at"] = old.get("created_at")
            else:
                row["created_at"] = row.get("created_at") or now
            new = {k: row.get(k) for k in SESSION_COLUMNS}
            if old is not None and {k: v for k, v in new.items() if k != "updated_at"} == \
                    {k: v for k, v in old.items() if k != "updated_at"}:
                return old
            new["updated_at"] = row.get("updated_at") if preserve_updated_at and row.get("updated_at") is not None \
                else now if old is not None else row["created_at"]
            self._put(thread, session_id, head, new)
            return new

    def _put(self, thread: str, session_id: str, head: Optional[tuple], row: Dict[str, Any], *,
             expected_head: Any = None, cas: bool = False) -> None:
        """Store ``row`` as the next checkpoint of the session's thread (``head``: its current head, if any);
        with ``cas``, only if the thread's head is still the commit ``expected_head``."""
        now = time.time()
        summary = session_summary(row)
        summary["inserted"] = self._inserted(self.store.head(thread)) if head is not None else now
        metadata = {"source": "agno-session", "session_id": session_id, "time": now, "agno_session": summary}
        checkpoint = Checkpoint(id=new_id(), thread_id=thread, step=head[1] + 1 if head else 0, state_data=row)
        if cas:
            self.store.put(CheckpointConfig(thread), checkpoint, metadata, expected_head=expected_head)
        else:
            self.store.put(CheckpointConfig(thread), checkpoint, metadata)
        self._last[thread] = (checkpoint.id, checkpoint.step, row)

    def _inserted(self, sha: Optional[str]) -> float:
        """When the session whose head is the commit ``sha`` was first stored (kept in each checkpoint's
        summary; for a session written before that, the time of its first checkpoint)."""
        if sha is None:
            return time.time()
        found = self.summary(sha).get("inserted")
        if isinstance(found, (int, float)):
            return found
        root = sha
        for info in self.store.first_parents(sha):
            root = info.hex
        _, metadata = self.store.header(root)
        when = metadata.get("time")
        found = when if isinstance(when, (int, float)) else float(self.store.commit_info(root).time)
        self._summaries.setdefault(sha, {})["inserted"] = found
        return found

    def reassign(self, session_id: str, previous_user_id: Optional[str], user_id: Optional[str],
                 busy: Any) -> bool:
        """Give the session to ``user_id`` if its owner is still ``previous_user_id`` and ``busy(session_id)``
        is false (no pending, running or paused run), as one compare-and-swap on the session's head; the
        other columns, ``updated_at`` included, stay as they are (as agno's SQL databases do).

        Returns whether the owner changed. Retries when another writer moved the session meanwhile.
        """
        if not isinstance(session_id, str) or not session_id:
            return False
        thread = session_thread(session_id)
        with self._lock:
            for _ in range(_RETRIES):
                sha = self.store.head(thread)
                head = self._head(thread)
                if sha is None or head is None:
                    return False
                row = dict(head[2])
                if row.get("user_id") != previous_user_id or busy(session_id):
                    return False
                row["user_id"] = user_id
                try:
                    self._put(thread, session_id, head, row, expected_head=sha, cas=True)
                except CheckpointConflictError:
                    continue
                return True
        raise CheckpointConflictError(f"session {session_id!r}: moved by other writers {_RETRIES} times running")

    def _head(self, thread: str) -> Optional[tuple]:
        """``(checkpoint id, step, row)`` of the session's head (this process's last write when still the head)."""
        sha = self.store.head(thread)
        if sha is None:
            self._last.pop(thread, None)
            return None
        cached = self._last.get(thread)
        if cached is not None and self.store.commit_info(sha).checkpoint_id == cached[0]:
            return cached
        tup = self.store.get_tuple(CheckpointConfig(thread))
        if tup is None:
            return None
        return tup.checkpoint.id, tup.checkpoint.step, {k: tup.checkpoint.state_data.get(k) for k in SESSION_COLUMNS}

    def delete(self, session_id: str) -> bool:
        """Delete the session's thread; False if it has none."""
        with self._lock:
            if not isinstance(session_id, str) or not session_id or \
                    self.store.head(session_thread(session_id)) is None:
                return False
            self.store.delete_thread(session_thread(session_id))
            return True

    def summary(self, sha: str) -> Dict[str, Any]:
        """The listing columns of the session checkpoint in commit ``sha`` (cached)."""
        found = self._summaries.get(sha)
        if found is None:
            _, metadata = self.store.header(sha)
            found = dict(metadata.get("agno_session") or {})
            self._summaries[sha] = found
        return found

    def list(self, *, session_type: Optional[str] = None, user_id: Optional[str] = None,
             component_id: Optional[str] = None, session_name: Optional[str] = None,
             start_timestamp: Optional[int] = None, end_timestamp: Optional[int] = None,
             sort_by: Optional[str] = None, sort_order: Optional[str] = None,
             limit: Optional[int] = None, page: Optional[int] = None) -> tuple:
        """``(session ids of the page, total matching)``, filtered, sorted and paged as agno's SQL databases do.

        ``component_id`` matches the agent, team or workflow id of the type asked for (any, without
        a type); ``session_name`` is a substring of the session's name; timestamps bound
        ``created_at``. Sorting is by ``sort_by`` (descending unless ``sort_order="asc"``;
        ``updated_at`` falls back to ``created_at``), else in the order the sessions were first stored.
        """
        rows = []
        heads = self.index.session_heads()
        for session_id, sha in heads.items():
            s = self.summary(sha)
            if session_type is not None and s.get("session_type") != session_type:
                continue
            if user_id is not None and s.get("user_id") != user_id:
                continue
            if component_id is not None:
                keys = {"agent": ("agent_id",), "team": ("team_id",), "workflow": ("workflow_id",)}.get(
                    session_type or "", ("agent_id", "team_id", "workflow_id"))
                if all(s.get(k) != component_id for k in keys):
                    continue
            created = s.get("created_at")
            if start_timestamp is not None and (created is None or created < start_timestamp):
                continue
            if end_timestamp is not None and (created is None or created > end_timestamp):
                continue
            if session_name is not None and session_name not in (s.get("session_name") or ""):
                continue
            rows.append((session_id, s))
        total = len(rows)
        if sort_by is not None and sort_by in SORTABLE:
            def key(item: tuple) -> tuple:
                sid, s = item
                value = sid if sort_by == "session_id" else s.get(sort_by)
                if value is None and sort_by == "updated_at":
                    value = s.get("created_at")
                return (value is not None, _sortable(value), sid)
            rows.sort(key=key, reverse=sort_order != "asc")
        else:  # insertion order, as agno's SQL databases return rows without ORDER BY
            inserted = {sid: self._inserted(heads[sid]) for sid, _ in rows}
            rows.sort(key=lambda item: (inserted[item[0]], item[0]))
        if limit is not None:
            start = (page - 1) * limit if page else 0
            rows = rows[start:start + limit]
        return [sid for sid, _ in rows], total


def _sortable(value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, value, "")
    return (1, 0, "" if value is None else str(value))


def attach_runs(row: Mapping[str, Any], runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    """A copy of the session ``row`` with its ``runs`` (run dicts), as agno's databases return it."""
    out = dict(row)
    out["runs"] = runs
    return out
