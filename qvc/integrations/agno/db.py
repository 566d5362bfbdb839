"""``QvcDb``: a qvc repository as an agno database (``agno.db.base.BaseDb``).

An agno user changes one line: ``Agent(db=QvcDb("runs.qvc"), checkpoint="tool-batch", ...)``.
Sessions (agent, team, workflow) and runs are stored in the repository
(:mod:`~qvc.integrations.agno.sessions`, :mod:`~qvc.integrations.agno.runstore`); runs are qvc
runs, so ``qvc runs``, ``qvc timeline``, ``qvc show``, ``qvc diff``, ``qvc log`` and ``qvc
serve`` show them. Metrics are computed from those sessions and runs and kept in the repository
too (:mod:`~qvc.integrations.agno.metrics`). Memories, knowledge, evals, traces, spans and
learnings are not kept in git: pass a second agno database as ``other=`` (``QvcDb(path,
other=SqliteDb(...))``) and every such call, and every other agno database method qvc does not
implement, goes to it. Without ``other`` those calls raise :class:`NotStoredError`, which names
what to pass.

**Identity.** ``db.id`` is derived from the repository's path (as ``SqliteDb`` derives its own
from its file), so AgentOS's ``db_id`` and the configs agno stores stay the same across
objects and restarts; ``to_dict()`` / :meth:`QvcDb.from_dict` (and
:func:`qvc.integrations.agno.config.db_from_dict`, which rebuilds agno's own types too)
round-trip the database.

**Failures are visible.** agno catches a database exception and only logs it, so a failed
write is logged here at error level with the repository path, recorded for ``qvc status``
(:mod:`qvc.runs.failures`: time, run, cause), then raised to agno.

Imports :mod:`qvc.store`, :mod:`qvc.errors`, :mod:`qvc.runs` and the adapter's modules.
"""

from __future__ import annotations

import abc
import logging
import os
import time
from datetime import date
from typing import Any, Callable, Dict, List, Optional, Tuple

from agno.db.base import BaseDb, SessionType
from agno.db.utils import deserialize_run, deserialize_session, filter_context_runs, validate_pagination
from agno.utils.string import generate_id

from qvc.errors import QvcError
from qvc.integrations.agno.index import ThreadIndex, run_index_thread
from qvc.integrations.agno.metrics import AgnoMetrics
from qvc.integrations.agno.runstore import AgnoRunStore
from qvc.integrations.agno.sessions import AgnoSessionStore, SessionOwnedError, attach_runs
from qvc.runs.failures import record_failure
from qvc.store.git_store import GitCheckpointStore
from qvc.types import DurabilityMode

log = logging.getLogger("qvc")

#: agno's database methods for what qvc does not keep in git, by kind; delegated to ``other=``.
DELEGATED: Dict[str, Tuple[str, ...]] = {
    "memories": ("clear_memories", "delete_user_memories", "delete_user_memory", "get_all_memory_topics",
                 "get_user_memories", "get_user_memory", "get_user_memory_stats", "upsert_memories",
                 "upsert_user_memory"),
    "knowledge": ("delete_knowledge_content", "get_knowledge_content", "get_knowledge_contents",
                  "upsert_knowledge_content"),
    "evals": ("create_eval_run", "delete_eval_runs", "get_eval_run", "get_eval_runs", "rename_eval_run"),
    "traces": ("get_trace", "get_trace_stats", "get_traces", "upsert_trace"),
    "spans": ("create_span", "create_spans", "get_span", "get_spans"),
    "learnings": ("delete_learning", "get_learning", "get_learnings", "upsert_learning"),
}
#: BaseDb methods never taken from ``other``.
_OWN_ONLY = frozenset({"to_dict", "from_dict", "close"})
#: ``to_dict()["type"]`` of :class:`QvcDb` (agno's ``db_from_dict`` knows only its own types: see :func:`db_from_dict`).
TYPE = "qvc"
#: ``to_dict()["type"]`` of :class:`~qvc.integrations.agno.AsyncQvcDb`.
ASYNC_TYPE = "qvc-async"
#: How often ``get_metrics`` recomputes the metrics first (at most), as agno's SQL databases do.
METRICS_REFRESH_S = 60


def repository_id(path: str) -> str:
    """The agno database id of the repository at ``path`` (an absolute path): a UUID derived from it, as
    ``SqliteDb`` derives its id from its file, so it is the same for every object and process."""
    return generate_id(f"qvc://{os.path.realpath(path)}")


class NotStoredError(QvcError):
    """An agno database call for data qvc does not keep (memories, knowledge, ...) with no ``other=`` database."""


def _kind_of(name: str) -> str:
    return next(kind for kind, names in DELEGATED.items() if name in names)


def _delegate(name: str) -> Callable[..., Any]:
    def method(self: QvcDb, *args: Any, **kwargs: Any) -> Any:
        if self.other is None:
            raise NotStoredError(
                f"QvcDb does not store {_kind_of(name)} ({name}); pass a second agno database for them: "
                f"QvcDb({self.path!r}, other=SqliteDb(db_file=...))")
        return getattr(self.other, name)(*args, **kwargs)

    method.__name__ = name
    method.__qualname__ = f"QvcDb.{name}"
    method.__doc__ = f"agno's ``{name}``, delegated to ``other=`` (:class:`NotStoredError` without it)."
    return method


class QvcDb(BaseDb):
    """An agno database whose sessions and runs live in the qvc repository at ``path`` (created if missing).

    ``durability``: ``"sync"`` (default: a checkpoint is on stable storage when agno's hook
    returns), ``"async"`` or ``"exit"`` (see :mod:`qvc.plumbing.durability`). ``other``: an agno
    database for memories, knowledge, evals, traces, spans, learnings and every method qvc does
    not implement (components, schedules, approvals, ...). ``store``: an open
    :class:`~qvc.GitCheckpointStore` to use instead of opening ``path``. ``id``: agno's id of
    this database (default: :func:`repository_id` of the repository's path).
    """

    def __init__(self, path: str | os.PathLike = "runs.qvc", *,
                 durability: DurabilityMode | str = DurabilityMode.SYNC, other: Optional[Any] = None,
                 store: Optional[GitCheckpointStore] = None, id: Optional[str] = None):
        self._own = store is None
        self.store = store if store is not None else GitCheckpointStore(path, durability=durability)
        super().__init__(id=id if id is not None else repository_id(self.store.path))
        self.path = self.store.path
        self.other = other
        self.index = ThreadIndex(self.store)
        self.runs = AgnoRunStore(self.store, self.index)
        self.sessions = AgnoSessionStore(self.store, self.index)
        self.metrics = AgnoMetrics(self.store, self.sessions, self.runs)
        self._metrics_refreshed_at = 0.0
        if other is not None:  # everything agno may call that qvc does not implement goes to other
            for name, value in vars(BaseDb).items():
                if callable(value) and not name.startswith("_") and name not in _IMPLEMENTED \
                        and name not in _OWN_ONLY and hasattr(other, name):
                    setattr(self, name, getattr(other, name))

    def __repr__(self) -> str:
        return f"QvcDb({self.path!r})"

    def close(self) -> None:
        """Close the repository if this database opened it (and ``other``, if it has ``close``)."""
        if self._own:
            self.store.close()
        if self.other is not None and callable(getattr(self.other, "close", None)):
            self.other.close()

    def to_dict(self) -> Dict[str, Any]:
        """agno's serialized form of this database: agno's keys (id, table names), ``type`` ``"qvc"``, the
        repository's ``path``, ``durability`` and ``other``'s own form. :meth:`from_dict` and
        :func:`qvc.integrations.agno.config.db_from_dict` rebuild it; agno's ``db_from_dict`` knows only
        its own types, so an agno component loaded from a stored config finds this database through its registry
        (``Registry(dbs=[db])``) by ``id``, which is the same for every object on the repository."""
        out = super().to_dict()
        out.update({"type": TYPE, "path": self.path, "durability": self.store.durability.value,
                    "other": self.other.to_dict() if self.other is not None and hasattr(self.other, "to_dict")
                    else None})
        return out

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> QvcDb:
        """The database :meth:`to_dict` described (``other`` rebuilt with agno's ``db_from_dict``)."""
        from agno.db.utils import db_from_dict

        return cls(data["path"], durability=data.get("durability") or DurabilityMode.SYNC, id=data.get("id"),
                   other=db_from_dict(data["other"]) if isinstance(data.get("other"), dict) else None)

    # -- failures -------------------------------------------------------------------------

    def _failed(self, operation: str, exc: BaseException, *, run_id: Optional[str] = None,
                session_id: Optional[str] = None) -> None:
        what = f"run {run_id}" if run_id else f"session {session_id}" if session_id else "the database"
        log.error("qvc: %s of %s failed in %s: %s: %s", operation, what, self.path, type(exc).__name__, exc)
        try:
            record_failure(self.path, operation=operation, run_id=run_id, session_id=session_id,
                           cause=f"{type(exc).__name__}: {exc}")
        except OSError as record_error:
            log.error("qvc: could not record that failure in %s: %s", self.path, record_error)

    # -- schema ---------------------------------------------------------------------------

    def table_exists(self, table_name: str) -> bool:
        """True for the session and runs tables (qvc keeps them); ``other``'s answer for the rest."""
        if table_name in (self.session_table_name, self.runs_table_name):
            return True
        if self.other is not None:
            return bool(self.other.table_exists(table_name))
        return False

    def get_latest_schema_version(self, table_name: str) -> str:
        """The schema version of a table: qvc's format is agno's current one for its own tables."""
        if self.other is not None and table_name not in (self.session_table_name, self.runs_table_name):
            return self.other.get_latest_schema_version(table_name)
        return self.default_schema_version

    def upsert_schema_version(self, table_name: str, version: str) -> None:
        """A no-op for qvc's tables (their format is versioned by qvc); ``other``'s for the rest."""
        if self.other is not None and table_name not in (self.session_table_name, self.runs_table_name):
            self.other.upsert_schema_version(table_name, version)

    # -- sessions -------------------------------------------------------------------------

    def _with_runs(self, row: Dict[str, Any], runs_limit: Optional[int] = None) -> Dict[str, Any]:
        runs = [run for run, _ in self.runs.session_runs(row["session_id"])]
        if runs_limit is not None:
            runs = filter_context_runs(runs)[-runs_limit:]
        return attach_runs(row, runs)

    def get_session(self, session_id: str, session_type: Optional[SessionType] = None, user_id: Optional[str] = None,
                    deserialize: Optional[bool] = True, runs_limit: Optional[int] = None) -> Any:
        """The session with its runs (the last ``runs_limit`` context runs if given), or ``None``."""
        row = self.sessions.read(session_id)
        if row is None or (user_id is not None and row.get("user_id") != user_id):
            return None
        row = self._with_runs(row, runs_limit)
        return deserialize_session(session_type, row) if deserialize else row

    def get_sessions(self, session_type: Optional[SessionType] = None, user_id: Optional[str] = None,
                     component_id: Optional[str] = None, session_name: Optional[str] = None,
                     start_timestamp: Optional[int] = None, end_timestamp: Optional[int] = None,
                     limit: Optional[int] = None, page: Optional[int] = None, sort_by: Optional[str] = None,
                     sort_order: Optional[str] = None, deserialize: Optional[bool] = True,
                     include_runs: bool = True) -> Any:
        """Sessions filtered, sorted and paged as agno's SQL databases do; ``(rows, total)`` without
        ``deserialize``. Reads only the sessions of the page (with their runs if ``include_runs``)."""
        validate_pagination(limit, page)
        ids, total = self.sessions.list(
            session_type=session_type.value if isinstance(session_type, SessionType) else session_type,
            user_id=user_id, component_id=component_id, session_name=session_name,
            start_timestamp=start_timestamp, end_timestamp=end_timestamp, sort_by=sort_by, sort_order=sort_order,
            limit=limit, page=page)
        rows = []
        for session_id in ids:
            row = self.sessions.read(session_id)
            if row is not None:
                rows.append(self._with_runs(row) if include_runs else attach_runs(row, None))
        if not deserialize:
            return rows, total
        return [deserialize_session(session_type, r) for r in rows]

    def upsert_session(self, session: Any, deserialize: Optional[bool] = True, *,
                       preserve_updated_at: bool = False) -> Any:
        """Store the session row (one checkpoint if a column changed); ``None`` if another user owns it."""
        session_id = getattr(session, "session_id", None)
        try:
            row = self.sessions.write(session, preserve_updated_at=preserve_updated_at)
        except SessionOwnedError as exc:
            self._failed("upsert_session", exc, session_id=session_id)
            return None
        except Exception as exc:
            self._failed("upsert_session", exc, session_id=session_id)
            raise
        if not deserialize:
            return attach_runs(row, [r if isinstance(r, dict) else r.to_dict() for r in session.runs or []])
        out = deserialize_session(None, attach_runs(row, None))
        out.runs = session.runs
        return out

    def upsert_sessions(self, sessions: List[Any], deserialize: Optional[bool] = True,
                        preserve_updated_at: bool = False) -> List[Any]:
        """:meth:`upsert_session` for each session (refused ones are left out)."""
        out = []
        for s in sessions or []:
            if s is None:
                continue
            result = self.upsert_session(s, deserialize=deserialize, preserve_updated_at=preserve_updated_at)
            if result is not None:
                out.append(result)
        return out

    def delete_session(self, session_id: str, user_id: Optional[str] = None) -> bool:
        """Delete the session and its runs; False if there is none (or it is another user's)."""
        row = self.sessions.read(session_id)
        if row is None or (user_id is not None and row.get("user_id") != user_id):
            return False
        try:
            for run_id in self.index.session_run_ids(session_id):
                self.runs.delete(run_id)
            if self.store.head(run_index_thread(session_id)) is not None:
                self.store.delete_thread(run_index_thread(session_id))
            return self.sessions.delete(session_id)
        except Exception as exc:
            self._failed("delete_session", exc, session_id=session_id)
            raise

    def delete_sessions(self, session_ids: List[str], user_id: Optional[str] = None) -> None:
        """:meth:`delete_session` for each id."""
        for session_id in session_ids or []:
            self.delete_session(session_id, user_id=user_id)

    def reassign_session_owner(self, session_id: str, *, previous_user_id: str, user_id: Optional[str]) -> bool:
        """Give the session to ``user_id`` if ``previous_user_id`` still owns it and none of its runs is
        PENDING, RUNNING or PAUSED (one compare-and-swap; a new checkpoint of the session). Returns whether
        it changed owner, as agno's SQL databases do; its runs keep their ``user_id``, as there."""
        try:
            return self.sessions.reassign(session_id, previous_user_id, user_id, self.runs.busy)
        except Exception as exc:
            self._failed("reassign_session_owner", exc, session_id=session_id)
            raise

    def rename_session(self, session_id: str, session_type: Optional[SessionType], session_name: str,
                       user_id: Optional[str] = None, deserialize: Optional[bool] = True) -> Any:
        """Set ``session_data.session_name`` (one checkpoint); ``None`` if there is no such session."""
        session = self.get_session(session_id, session_type, user_id=user_id, deserialize=True)
        if session is None:
            return None
        if session.session_data is None:
            session.session_data = {}
        session.session_data["session_name"] = session_name
        return self.upsert_session(session, deserialize=deserialize)

    # -- runs -----------------------------------------------------------------------------

    def upsert_run(self, run: Any, session_id: str, user_id: Optional[str] = None,
                   run_index: Optional[int] = None) -> None:
        """Store the run as its next checkpoint (only what changed since the last one); durable on return
        in SYNC mode. A failure is logged, recorded for ``qvc status`` and raised."""
        run_id = run.get("run_id") if isinstance(run, dict) else getattr(run, "run_id", None)
        try:
            self.runs.upsert(run, session_id, user_id=user_id, run_index=run_index)
        except Exception as exc:
            self._failed("upsert_run", exc, run_id=run_id, session_id=session_id)
            raise

    def cancel_pending_run(self, run_id: str, *, session_id: str, reason: str, user_id: Optional[str] = None,
                           expected_status: str = "PENDING") -> bool:
        """Cancel the run if it is still ``expected_status`` (``"PENDING"`` or ``"RUNNING"``) and ``user_id``'s
        or nobody's: a new checkpoint with status CANCELLED and ``reason`` as its content if it had none,
        as one compare-and-swap (a status another writer set meanwhile wins). Returns whether it was
        cancelled. :class:`~qvc.errors.InvalidInputError` (a ``ValueError``) for another ``expected_status``."""
        try:
            return self.runs.cancel(run_id, session_id, reason, user_id=user_id, expected_status=expected_status)
        except QvcError as exc:
            if not isinstance(exc, ValueError):
                self._failed("cancel_pending_run", exc, run_id=run_id, session_id=session_id)
            raise

    def get_run(self, run_id: str, deserialize: Optional[bool] = True) -> Any:
        """The run as last upserted, or ``None``; the row dict (``run_id``, ``session_id``, ``status``,
        ``run_data``, ...) without ``deserialize``."""
        found = self.runs.get(run_id)
        if found is None:
            return None
        return deserialize_run(found[1].get("run_type"), found[0]) if deserialize else _row(*found)

    def get_runs(self, session_id: Optional[str] = None, user_id: Optional[str] = None,
                 agent_id: Optional[str] = None, team_id: Optional[str] = None, workflow_id: Optional[str] = None,
                 status: Optional[Any] = None, limit: Optional[int] = None, page: Optional[int] = None,
                 sort_by: Optional[str] = None, sort_order: Optional[str] = None,
                 deserialize: Optional[bool] = True) -> Any:
        """Runs matching the filters (insertion order unless ``sort_by``); ``(rows, total)`` without ``deserialize``."""
        validate_pagination(limit, page)
        found = self.runs.session_runs(session_id) if session_id is not None else self.runs.all_runs()
        wanted = getattr(status, "value", status)
        rows = []
        for run, info in found:
            row = _row(run, info)
            if (user_id is not None and row["user_id"] != user_id) or \
                    (agent_id is not None and row["agent_id"] != agent_id) or \
                    (team_id is not None and row["team_id"] != team_id) or \
                    (workflow_id is not None and row["workflow_id"] != workflow_id) or \
                    (wanted is not None and row["status"] != wanted):
                continue
            rows.append(row)
        total = len(rows)
        if sort_by is not None and rows and sort_by in rows[0]:
            rows.sort(key=lambda r: (r[sort_by] is not None, str(r[sort_by]) if not isinstance(
                r[sort_by], (int, float)) else r[sort_by]), reverse=sort_order != "asc")
        if limit is not None:
            start = (page - 1) * limit if page else 0
            rows = rows[start:start + limit]
        if not deserialize:
            return rows, total
        return [deserialize_run(r["run_type"], r["run_data"]) for r in rows]

    def delete_run(self, run_id: str) -> bool:
        """Delete the run (its thread); checkpoints a fork shares stay. False if there is no such run."""
        try:
            return self.runs.delete(run_id)
        except Exception as exc:
            self._failed("delete_run", exc, run_id=run_id)
            raise

    def delete_runs(self, run_ids: List[str]) -> None:
        """:meth:`delete_run` for each id."""
        for run_id in run_ids or []:
            self.delete_run(run_id)


    # -- metrics ----------------------------------------------------------------------------

    def calculate_metrics(self) -> Optional[List[Dict[str, Any]]]:
        """Compute agno's daily metrics from the sessions and runs in the repository, for every day without a
        completed record, and store them (:mod:`~qvc.integrations.agno.metrics`); the records computed, or
        ``None`` when there was nothing to compute, as agno's SQL databases return them."""
        self._metrics_refreshed_at = time.time()
        try:
            return self.metrics.calculate()
        except Exception as exc:
            self._failed("calculate_metrics", exc)
            raise

    def get_metrics(self, starting_date: Optional[date] = None, ending_date: Optional[date] = None,
                    user_id: Optional[str] = None) -> Tuple[List[Dict[str, Any]], Optional[int]]:
        """``(records, latest updated_at)`` of the stored metrics in the date range (one user's with
        ``user_id``); recomputed first when this object last did so a minute ago or more, as agno's SQL
        databases do."""
        if time.time() - self._metrics_refreshed_at >= METRICS_REFRESH_S:
            try:
                self.calculate_metrics()
            except Exception as exc:  # as agno's SQL databases: stale metrics rather than none
                log.warning("qvc: could not refresh the metrics of %s before reading them: %s", self.path, exc)
        return self.metrics.get(starting_date, ending_date, user_id)


def _row(run: Dict[str, Any], info: Dict[str, Any]) -> Dict[str, Any]:
    """The runs-table row agno's SQL databases return for ``deserialize=False``."""
    return {"run_id": run.get("run_id"), "session_id": run.get("session_id"), "run_type": info.get("run_type"),
            "agent_id": run.get("agent_id"), "team_id": run.get("team_id"), "workflow_id": run.get("workflow_id"),
            "user_id": info.get("user_id"), "parent_run_id": run.get("parent_run_id"), "status": run.get("status"),
            "run_index": info.get("run_index"), "run_data": run, "created_at": run.get("created_at"),
            "updated_at": run.get("updated_at")}


for _kind, _names in DELEGATED.items():
    for _name in _names:
        setattr(QvcDb, _name, _delegate(_name))
abc.update_abstractmethods(QvcDb)

#: The agno database methods QvcDb answers itself (the others go to ``other=`` when it is given).
_IMPLEMENTED = frozenset(n for n in vars(QvcDb) if not n.startswith("_") and n not in
                         {name for names in DELEGATED.values() for name in names})
