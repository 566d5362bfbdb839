"""agno runs as qvc runs: each ``upsert_run`` is one checkpoint (commit) of the run's thread storing what
it added; reading a run back gives the ``RunOutput`` dict agno wrote.

How an upsert finds its parent, so agno's operations become git's:

- the run's stored messages are a prefix of the new ones (a tool batch, the terminal write, a
  resume): the parent is the head, and the new segment holds only the messages after it;
- they are not (agno cut the run in place: ``continue_from`` on a RUNNING, ERROR or PAUSED
  run): the parent is the latest checkpoint of the run's line whose messages are a prefix, so
  the head moves back there and the old tail stays reachable as a superseded line;
- a new run with ``forked_from_run_id`` (a fork, ``continue_from`` on a COMPLETED run,
  ``regenerate``): the parent is the source's checkpoint at the fork point, so the two runs
  share those commits and blobs.

A new run needs its session (agno's SQL databases refuse it with a foreign-key error:
:class:`UnknownSessionError` here). Its ``run_index`` is the one agno passes, else the run's own
``run_index``, else the next free index of the session, taken from the session's counter thread
(``agno/run-index/<session>``) by compare-and-swap, so writers in several objects or processes
never give one index twice.

Imports :mod:`qvc.store`, :mod:`qvc.types`, :mod:`qvc.runs` and the adapter's ``codec`` and ``index``.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple

from agno.db.utils import get_run_type

from qvc.errors import CheckpointConflictError, InvalidInputError, NotFoundError
from qvc.integrations.agno.codec import (
    agno_run,
    common_prefix,
    next_segments,
    normalize,
    run_metadata,
    run_state,
    segment_messages,
    stored_message,
)
from qvc.integrations.agno.index import ThreadIndex, run_index_thread, session_thread
from qvc.runs.codec import segments_of
from qvc.runs.ids import check_id, check_run_id, new_id, thread_of
from qvc.runs.queries import run_line
from qvc.runs.segments import Segment, cut
from qvc.store.git_store import GitCheckpointStore
from qvc.types import Checkpoint, CheckpointConfig, CheckpointTuple

#: How many times a compare-and-swap is retried when other writers keep moving the head.
_RETRIES = 50
#: ``upsert(expected_head=...)`` not given: the run's head is not checked.
_UNCHECKED: Any = object()
#: The statuses agno's run recovery may cancel (``cancel_pending_run``).
CANCELLABLE = ("PENDING", "RUNNING")

_REASONS = {"COMPLETED": "end", "ERROR": "error", "PAUSED": "paused", "CANCELLED": "cancelled",
            "REGENERATED": "regenerated", "PENDING": "pending"}


class UnknownSessionError(NotFoundError):
    """A new run for a session that is not stored (agno's SQL databases refuse it: a foreign key)."""


class AgnoRunStore:
    """The runs of an agno database kept as qvc runs in ``store`` (``index`` finds their threads)."""

    def __init__(self, store: GitCheckpointStore, index: ThreadIndex):
        self.store = store
        self.index = index
        self._lock = threading.RLock()
        self._last: Dict[str, _Point] = {}  # thread -> the checkpoint this process last wrote there

    # -- reading ------------------------------------------------------------------------

    def load(self, thread: str) -> Optional[Tuple[Dict[str, Any], Dict[str, Any]]]:
        """``(run dict, row info)`` of the run on ``thread`` (its head), or ``None``."""
        tup = self.store.get_tuple(CheckpointConfig(thread))
        return agno_run(tup) if tup is not None else None

    def get(self, run_id: str) -> Optional[Tuple[Dict[str, Any], Dict[str, Any]]]:
        """``(run dict, row info)`` of ``run_id``, or ``None`` if there is no such agno run."""
        if not isinstance(run_id, str) or not run_id:
            return None
        thread = self.index.run_thread(run_id)
        return self.load(thread) if thread is not None else None

    def session_runs(self, session_id: str) -> List[Tuple[Dict[str, Any], Dict[str, Any]]]:
        """The agno runs of a session in insertion order (``run_index``, then ``created_at``, ``run_id``)."""
        out = []
        for run_id in self.index.session_run_ids(session_id):
            found = self.load(thread_of(session_id, run_id))
            if found is not None:
                out.append(found)
        return sorted(out, key=_order)

    def all_runs(self) -> List[Tuple[Dict[str, Any], Dict[str, Any]]]:
        """Every agno run of the repository, in insertion order within each session."""
        out = []
        for _, thread in self.index.all_run_ids():
            found = self.load(thread)
            if found is not None:
                out.append(found)
        return sorted(out, key=lambda r: (r[0].get("session_id") or "",) + _order(r))

    # -- writing ------------------------------------------------------------------------

    def upsert(self, run: Any, session_id: str, user_id: Optional[str] = None,
               run_index: Optional[int] = None, *, expected_head: Any = _UNCHECKED,
               run_type: Optional[str] = None) -> Optional[str]:
        """Store ``run`` (a ``RunOutput``, ``TeamRunOutput``, ``WorkflowRunOutput`` or its dict) as the next
        checkpoint of its run; returns the checkpoint id, or ``None`` when nothing changed.

        ``expected_head``: store only if the run's head is still that commit (a compare-and-swap;
        :class:`CheckpointConflictError` otherwise). Durable on return in the store's SYNC mode.
        Raises :class:`InvalidInputError` for a run without a valid ``run_id``,
        :class:`UnknownSessionError` for a new run of a session that is not stored, and what
        :meth:`GitCheckpointStore.put` raises.
        """
        run_type = run_type or get_run_type(run)
        data = normalize(run if isinstance(run, Mapping) else run.to_dict())
        run_id = check_run_id(data.get("run_id"))
        session_id = check_id(session_id, "session id")
        thread = thread_of(session_id, run_id)
        messages = data.get("messages") or []
        new = [stored_message(m) for m in messages]
        with self._lock:
            sha = self.store.head(thread)
            if expected_head is not _UNCHECKED and sha != expected_head:
                raise CheckpointConflictError(f"run {run_id!r}: moved by another writer")
            head = self._head(thread, sha)
            if head is None and self.store.head(session_thread(session_id)) is None:
                raise UnknownSessionError(f"run {run_id!r}: session {session_id!r} is not stored in {self.store.path}; "
                                          f"store the session first (upsert_session), as agno's SQL databases require")
            if head is not None:
                extra = head.state.get("agno")
                row = extra.get("row") or {} if isinstance(extra, Mapping) else {}
                if row.get("run_index") is not None:  # kept from the first write, as agno's SQL databases do
                    run_index = row["run_index"]
                basis, base, reason = self._basis_in_place(thread, head, new)
                step = head.step + 1
            else:
                if run_index is None and isinstance(data.get("run_index"), int):
                    run_index = data["run_index"]
                if run_index is None:
                    run_index = self._allocate_index(session_id, run_id)
                basis, base, reason = self._basis_of_fork(data, new)
                step = basis.step + 1 if basis is not None else 0
            segments, order = next_segments(base, messages, data.get("tools") or [])
            state = run_state(data, segments, order, run_type=run_type, run_index=run_index, user_id=user_id,
                              session_id=session_id)
            if head is not None and basis is head and state == head.state:
                return None
            status = data.get("status") or "RUNNING"
            if reason is None:
                reason = _REASONS.get(status) or ("tool-batch" if len(messages) > _count(base) else "resume")
            checkpoint = Checkpoint(id=new_id(), thread_id=thread, step=step, state_data=state,
                                    parent_id=basis.id if basis is not None else None)
            if (head is not None and basis is not head) or expected_head is not _UNCHECKED:
                # agno cut the run back (time travel, as asked), or the caller wants a compare-and-swap
                self.store.put(CheckpointConfig(thread), checkpoint, run_metadata(data, session_id, reason),
                               expected_head=sha)
            else:
                self.store.put(CheckpointConfig(thread), checkpoint, run_metadata(data, session_id, reason))
            self._last[thread] = _Point(checkpoint.id, step, segments, state)
            return checkpoint.id

    def _head(self, thread: str, sha: Optional[str]) -> Optional[_Point]:
        """The head of ``thread``, whose commit is ``sha`` (from this process's last write to it
        when that is still the head)."""
        if sha is None:
            self._last.pop(thread, None)
            return None
        cached = self._last.get(thread)
        if cached is not None and self.store.commit_info(sha).checkpoint_id == cached.id:
            return cached
        tup = self.store.get_tuple(CheckpointConfig(thread, sha))
        return _Point.of(tup) if tup is not None else None

    def _next_index(self, session_id: str) -> int:
        indexes = [row.get("run_index") for _, row in self.session_runs(session_id)]
        return max((i for i in indexes if isinstance(i, int)), default=-1) + 1

    def _allocate_index(self, session_id: str, run_id: str) -> int:
        """The next free ``run_index`` of the session, taken by compare-and-swap on its counter thread: at
        least the counter and one more than every stored run's index."""
        thread = run_index_thread(session_id)
        for _ in range(_RETRIES):
            sha = self.store.head(thread)
            counter, step = 0, 0
            if sha is not None:
                cp = self.store.read(sha).checkpoint
                counter, step = int(cp.state_data.get("next") or 0), cp.step + 1
            given = max(counter, self._next_index(session_id))
            checkpoint = Checkpoint(id=new_id(), thread_id=thread, step=step,
                                    state_data={"next": given + 1, "run_id": run_id})
            metadata = {"source": "agno-run-index", "session_id": session_id, "run_id": run_id, "run_index": given,
                        "time": time.time()}
            try:
                self.store.put(CheckpointConfig(thread), checkpoint, metadata, expected_head=sha)
            except CheckpointConflictError:
                continue
            return given
        raise CheckpointConflictError(f"session {session_id!r}: its run index moved {_RETRIES} times running")

    def cancel(self, run_id: str, session_id: str, reason: str, user_id: Optional[str] = None,
               expected_status: str = "PENDING") -> bool:
        """Cancel the run if it is still ``expected_status`` (PENDING or RUNNING) and is ``user_id``'s or nobody's,
        as one compare-and-swap on its head: a new checkpoint with status CANCELLED and, if the run had no
        content, ``reason`` as content. Returns whether it was cancelled (a run another writer moved
        meanwhile is read again)."""
        if expected_status not in CANCELLABLE:
            raise InvalidInputError(f"only a PENDING or RUNNING run can be cancelled, not {expected_status!r}")
        if not all(isinstance(v, str) and v for v in (run_id, session_id)):
            return False
        thread = thread_of(session_id, run_id)
        with self._lock:
            for _ in range(_RETRIES):
                sha = self.store.head(thread)
                if sha is None:
                    return False
                found = agno_run(self.store.get_tuple(CheckpointConfig(thread, sha)))
                if found is None:
                    return False
                run, row = found
                owner = row.get("user_id")
                if run.get("status") != expected_status or (owner is not None and owner != user_id):
                    return False
                run["status"] = "CANCELLED"
                if run.get("content") in (None, ""):
                    run["content"] = reason
                try:
                    self.upsert(run, session_id, user_id=owner, expected_head=sha, run_type=row.get("run_type"))
                except CheckpointConflictError:
                    continue
                return True
        raise CheckpointConflictError(f"run {run_id!r}: moved by other writers {_RETRIES} times running")

    def busy(self, session_id: str) -> bool:
        """Whether a run of the session is PENDING, RUNNING or PAUSED."""
        return any(run.get("status") in ("PENDING", "RUNNING", "PAUSED") for run, _ in self.session_runs(session_id))

    def _basis_in_place(self, thread: str, head: _Point, new: List[Dict[str, Any]]) -> Tuple[Any, list, Any]:
        old = segment_messages(head.segments)
        if common_prefix(old, new) == len(old):
            return head, head.segments, None
        line = run_line(self.store, thread)  # agno cut the run: back to the last checkpoint it still extends
        for tup in reversed(line[:-1]):
            point = _Point.of(tup)
            msgs = segment_messages(point.segments)
            if common_prefix(msgs, new) == len(msgs):
                return point, point.segments, "rewind"
        first = _Point.of(line[0])
        return first, cut(first.segments, common_prefix(segment_messages(first.segments), new)), "rewind"

    def _basis_of_fork(self, data: Dict[str, Any], new: List[Dict[str, Any]]) -> Tuple[Any, list, Any]:
        source = data.get("forked_from_run_id") or data.get("regenerated_from")
        thread = self.index.run_thread(source) if isinstance(source, str) and source else None
        if thread is None:
            return None, [], None
        reason = "regenerate" if data.get("regenerated_from") else "fork"
        for tup in reversed(run_line(self.store, thread)):
            point = _Point.of(tup)
            msgs = segment_messages(point.segments)
            if msgs and common_prefix(msgs, new) == len(msgs):
                return point, point.segments, reason
        return None, [], reason

    def delete(self, run_id: str) -> bool:
        """Delete the run's thread (its checkpoints shared with forks stay); False if there is no such run."""
        with self._lock:
            thread = self.index.run_thread(run_id) if isinstance(run_id, str) and run_id else None
            if thread is None:
                return False
            self.store.delete_thread(thread)
            return True


class _Point:
    """A run checkpoint as the writer needs it: id, step, segments and state."""

    __slots__ = ("id", "step", "segments", "state")

    def __init__(self, id: str, step: int, segments: List[Segment], state: Dict[str, Any]):
        self.id, self.step, self.segments, self.state = id, step, segments, state

    @classmethod
    def of(cls, tup: CheckpointTuple) -> _Point:
        cp = tup.checkpoint
        return cls(cp.id, cp.step, segments_of(cp.state_data, f"run checkpoint {cp.id}"), cp.state_data)


def _count(segments: list) -> int:
    return sum(len(s.messages) for s in segments)


def _order(found: Tuple[Dict[str, Any], Dict[str, Any]]) -> tuple:
    run, row = found
    index = row.get("run_index")
    return (index is None, index if isinstance(index, int) else 0, run.get("created_at") or 0, run.get("run_id") or "")

