"""agno's daily metrics computed from the sessions and runs qvc keeps, stored in the repository.

``calculate_metrics`` does what agno's SQL databases do, with qvc's sessions and runs as the
tables: from the first day without a completed record (else the day of the first session) to
today, each day's sessions (by ``created_at``) are counted per user, with their runs (by the
run's ``model`` and ``model_provider``) and the token counts of ``session_data.session_metrics``,
through agno's own ``calculate_date_metrics``. The records are kept in the thread
``agno/metrics/daily``, one field per day, so a recalculation stores only the days it changed;
a record keeps its ``id`` and ``created_at`` when a day is computed again, as the SQL upsert does.
Writers in several processes merge by compare-and-swap.

Imports :mod:`qvc.store`, :mod:`qvc.types`, :mod:`qvc.runs` and the adapter's ``index``, ``sessions`` and
``runstore``.
"""

from __future__ import annotations

import threading
import time
from datetime import date, datetime, timedelta, timezone
from typing import Any, Dict, List, Optional, Tuple
from uuid import uuid4

from agno.db.in_memory.utils import calculate_date_metrics, fetch_all_sessions_data, get_dates_to_calculate_metrics_for
from agno.db.utils import metrics_starting_date_from_records

from qvc.errors import CheckpointConflictError
from qvc.integrations.agno.index import METRICS_THREAD
from qvc.integrations.agno.runstore import AgnoRunStore
from qvc.integrations.agno.sessions import AgnoSessionStore
from qvc.runs.ids import new_id
from qvc.store.git_store import GitCheckpointStore
from qvc.types import Checkpoint, CheckpointConfig

_RETRIES = 50


def _key(record: Dict[str, Any]) -> Tuple[str, str]:
    return (record.get("user_id") or "", record.get("aggregation_period") or "daily")


class AgnoMetrics:
    """The metrics table of an agno database over ``sessions`` and ``runs``, kept in ``store``."""

    def __init__(self, store: GitCheckpointStore, sessions: AgnoSessionStore, runs: AgnoRunStore):
        self.store = store
        self.sessions = sessions
        self.runs = runs
        self._lock = threading.RLock()

    def records(self) -> Dict[str, List[Dict[str, Any]]]:
        """Day (ISO) → the stored records of that day (dates as ISO strings)."""
        sha = self.store.head(METRICS_THREAD)
        if sha is None:
            return {}
        return {day: list(v) for day, v in self.store.read(sha).checkpoint.state_data.items() if isinstance(v, list)}

    def _session_rows(self, start: int, end: int) -> List[Dict[str, Any]]:
        """The sessions created in ``[start, end]`` with what the calculation reads of them and their runs."""
        out = []
        for session_id, sha in self.sessions.index.session_heads().items():
            created = self.sessions.summary(sha).get("created_at")
            if not isinstance(created, (int, float)) or created < start or created > end:
                continue
            row = self.sessions.read(session_id)
            if row is None:
                continue
            runs = [{"model": run.get("model"), "model_provider": run.get("model_provider")}
                    for run, _ in self.runs.session_runs(session_id)]
            out.append({"session_id": session_id, "user_id": row.get("user_id"), "runs": runs,
                        "session_data": row.get("session_data"), "created_at": row.get("created_at"),
                        "session_type": row.get("session_type")})
        return out

    def _first_session_day(self) -> Optional[date]:
        heads = self.sessions.index.session_heads().values()
        created = [c for c in (self.sessions.summary(sha).get("created_at") for sha in heads)
                   if isinstance(c, (int, float))]
        return datetime.fromtimestamp(min(created), tz=timezone.utc).date() if created else None

    def calculate(self) -> Optional[List[Dict[str, Any]]]:
        """Compute the records of every day without a completed one (agno's ``calculate_metrics``); store
        and return them. ``None`` when there is nothing to compute (no sessions, or every day done)."""
        with self._lock:
            stored = self.records()
            flat = [r for day in stored.values() for r in day]
            starting = metrics_starting_date_from_records(flat) if flat else None
            if starting is None:
                starting = self._first_session_day()
            if starting is None:
                return None
            days = get_dates_to_calculate_metrics_for(starting)
            if not days:
                return None
            start = int(datetime.combine(days[0], datetime.min.time()).replace(tzinfo=timezone.utc).timestamp())
            end = int(datetime.combine(days[-1] + timedelta(days=1), datetime.min.time())
                      .replace(tzinfo=timezone.utc).timestamp())
            by_day = fetch_all_sessions_data(sessions=self._session_rows(start, end), dates_to_process=days,
                                             start_timestamp=start)
            if not by_day:
                return None
            computed: Dict[str, List[Dict[str, Any]]] = {}
            for day in days:
                sessions_for_day = by_day.get(day.isoformat(), {})
                if not any(sessions_for_day.values()):
                    continue
                computed[day.isoformat()] = [dict(r, date=day.isoformat(), id=str(uuid4()))
                                             for r in calculate_date_metrics(day, sessions_for_day)]
            if not computed:
                return []
            return [_public(r, keep_owner=True) for r in self._store(computed)]

    def _store(self, computed: Dict[str, List[Dict[str, Any]]]) -> List[Dict[str, Any]]:
        """Upsert ``computed`` (day → records) by (user, day, period), merging with other writers."""
        for _ in range(_RETRIES):
            sha = self.store.head(METRICS_THREAD)
            state: Dict[str, Any] = {}
            step = 0
            if sha is not None:
                cp = self.store.read(sha).checkpoint
                state, step = dict(cp.state_data), cp.step + 1
            written = []
            for day, records in computed.items():
                old = {_key(r): r for r in state.get(day) or []}
                merged = dict(old)
                for record in records:
                    before = old.get(_key(record))
                    if before is not None:  # the SQL upsert keeps a record's id and created_at
                        record = dict(record, id=before.get("id"), created_at=before.get("created_at"))
                    merged[_key(record)] = record
                    written.append(record)
                state[day] = sorted(merged.values(), key=lambda r: _key(r))
            checkpoint = Checkpoint(id=new_id(), thread_id=METRICS_THREAD, step=step, state_data=state)
            metadata = {"source": "agno-metrics", "days": sorted(computed), "time": time.time()}
            try:
                self.store.put(CheckpointConfig(METRICS_THREAD), checkpoint, metadata, expected_head=sha)
            except CheckpointConflictError:
                continue
            return written
        raise CheckpointConflictError(f"thread {METRICS_THREAD!r}: moved by other writers {_RETRIES} times running")

    def get(self, starting_date: Optional[date] = None, ending_date: Optional[date] = None,
            user_id: Optional[str] = None) -> Tuple[List[Dict[str, Any]], Optional[int]]:
        """``(records, latest updated_at)`` as agno's ``get_metrics`` returns them (the unowned bucket's
        ``user_id`` as ``None``); ``([], None)`` when none match."""
        rows, latest = [], None
        for day, records in sorted(self.records().items()):
            when = date.fromisoformat(day)
            for record in records:
                if user_id is not None:
                    if record.get("user_id") != user_id:
                        continue
                    updated = record.get("updated_at")
                    latest = updated if latest is None or (updated is not None and updated > latest) else latest
                if (starting_date and when < starting_date) or (ending_date and when > ending_date):
                    continue
                rows.append(_public(record))
        if not rows:
            return [], None
        if user_id is None:
            stamps = [r.get("updated_at") for day in self.records().values() for r in day]
            latest = max((s for s in stamps if s is not None), default=None)
        return rows, latest


def _public(record: Dict[str, Any], keep_owner: bool = False) -> Dict[str, Any]:
    """A stored record as agno's SQL databases return a metrics row (``get_metrics`` gives the unowned
    bucket's ``user_id`` as ``None``, ``calculate_metrics`` as stored: ``keep_owner``)."""
    out = dict(record)
    out["date"] = date.fromisoformat(out["date"]) if isinstance(out.get("date"), str) else out.get("date")
    if out.get("user_id") == "" and not keep_owner:
        out["user_id"] = None
    return out
