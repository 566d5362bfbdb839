"""The :class:`Runs` facade: finding and reading runs (through :mod:`qvc.runs.queries`) and their lifecycle:
start, continue (resume, take over, rewind), fork, regenerate and copy.

Imports :mod:`qvc.store`, :mod:`qvc.errors` and every other module of :mod:`qvc.runs` (``ids``,
``model``, ``boundaries``, ``codec``, ``ownership``, ``queries``, ``recorder``); none of them imports it.
"""

from __future__ import annotations

import copy
import os
import re
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence

from qvc.errors import InvalidInputError, RunOwnedError, RunStateError, UnknownCheckpointError, UnknownRunError
from qvc.logs import log
from qvc.runs.boundaries import ContinueFrom, resolve_continue_from, safe_truncation_index
from qvc.runs.codec import LoadedRun, decode
from qvc.runs.ids import check_id, check_run_id, new_id, parse_run_ref, thread_of
from qvc.runs.model import (
    Cadence,
    Message,
    Owner,
    OwnerStatus,
    Requirement,
    Run,
    RunStatus,
    RunSummary,
    Snapshot,
    TimelineEntry,
    parse_cadence,
)
from qvc.runs.ownership import RunLock, judge_owner, run_lock
from qvc.runs.queries import history as _history
from qvc.runs.queries import history_runs as _history_runs
from qvc.runs.queries import list_runs as _list_runs
from qvc.runs.queries import load_run, run_line, run_threads, view_at
from qvc.runs.queries import session_state as _session_state
from qvc.runs.queries import sessions as _sessions
from qvc.runs.queries import snapshot as _snapshot
from qvc.runs.queries import timeline as _timeline
from qvc.runs.recorder import RunRecorder
from qvc.store.git_store import GitCheckpointStore
from qvc.store.revisions import Revision, parse_revision

#: ``RUN@{N}``'s part after ``@``: the run's head N movements ago (its thread's reflog).
REFLOG = re.compile(r"\{\d+\}")


def run_revision(store: GitCheckpointStore, text: str) -> Optional[Revision]:
    """The checkpoint ``RUN@INDEX`` / ``RUN@CHECKPOINT_ID`` names, as a revision on the run's
    thread (``RUN`` alone: the run's head): the checkpoint ``qvc show RUN@INDEX`` says the run is
    shown as of (the boundary at that pair-safe index, else the last one before it). ``None``
    when ``text`` is not such a reference to a run of ``store``, so
    :func:`qvc.store.revisions.parse_revision` can take it as its ``names``. Raises
    :class:`InvalidInputError` for an index outside the run and
    :class:`~qvc.errors.UnknownCheckpointError` for a checkpoint id not in it. Reads only.
    """
    if not isinstance(text, str) or not text:
        return None
    if "@" not in text:  # a run id alone: the run's latest checkpoint, as `qvc show RUN` shows it
        run_id, at = text, None
    else:
        try:
            run_id, at = parse_run_ref(text)
        except InvalidInputError:
            return None
    runs = Runs(store)
    try:
        thread = runs.thread(run_id)
    except (UnknownRunError, InvalidInputError):
        return None
    if at is None:
        head = store.head(thread)
        return Revision(head, thread) if head is not None else None
    return Revision(store.resolve(runs.snapshot(run_id, at).checkpoint_id), thread)


class Runs:
    """Agent runs stored in a :class:`~qvc.GitCheckpointStore` (or a repository path, opened here).

    ``lease``: how long (seconds) after its last heartbeat an owner on *another* host counts as
    alive. Owners on this host are judged by their run lock, exactly.
    """

    def __init__(self, store: GitCheckpointStore | str | os.PathLike, *, lease: float = 60.0):
        self._own = not isinstance(store, GitCheckpointStore)
        self.store = GitCheckpointStore(store) if self._own else store
        if not isinstance(lease, (int, float)) or isinstance(lease, bool) or lease <= 0:
            raise InvalidInputError(f"lease must be a positive number of seconds, not {lease!r}")
        self.lease = float(lease)
        self._threads: Dict[str, str] = {}

    def close(self) -> None:
        """Close the store if this object opened it."""
        if self._own:
            self.store.close()

    def __enter__(self) -> Runs:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- finding runs -----------------------------------------------------------------------

    def thread(self, run_id: str) -> str:
        """The thread id of ``run_id``. Raises :class:`UnknownRunError`."""
        check_run_id(run_id)
        found = self._threads.get(run_id)
        if found is not None and self.store.head(found) is not None:
            return found
        matches = [t for _, r, t in run_threads(self.store) if r == run_id]
        if not matches:
            raise UnknownRunError(f"unknown run {run_id!r}")
        if len(matches) > 1:
            raise InvalidInputError(f"run id {run_id!r} is ambiguous: {', '.join(matches)}")
        self._threads[run_id] = matches[0]
        return matches[0]

    def _exists(self, run_id: str) -> bool:
        try:
            self.thread(run_id)
        except UnknownRunError:
            return False
        return True

    def sessions(self) -> List[str]:
        """Every session id with at least one run, sorted."""
        return _sessions(self.store)

    def get(self, run_id: str) -> Run:
        """The run as its latest checkpoint holds it. Raises :class:`UnknownRunError`."""
        return load_run(self.store, self.thread(run_id)).run

    def list_runs(self, session_id: Optional[str] = None) -> List[RunSummary]:
        """The runs (of one session, or all), oldest first. Raises :class:`UnknownRunError` for an unknown session."""
        return _list_runs(self.store, session_id)

    def history_runs(self, session_id: str, *, current_run_id: Optional[str] = None) -> List[Run]:
        """The runs of a session whose messages belong in the history of the next run, oldest first.

        Skipped: PENDING, PAUSED, CANCELLED, ERROR and REGENERATED runs, RUNNING runs other than
        ``current_run_id``, and any run a COMPLETED regeneration replaced (even before the
        source was marked REGENERATED).
        """
        return _history_runs(self.store, session_id, current_run_id=current_run_id)

    def history(self, session_id: str, *, current_run_id: Optional[str] = None,
                include_system: bool = False) -> List[Message]:
        """The messages of :meth:`history_runs`, in order (system messages left out unless asked).

        A fork whose source is also in the history contributes only what it added after the
        fork point, so a shared prefix appears once.
        """
        return _history(self.store, session_id, current_run_id=current_run_id, include_system=include_system)

    def session_state(self, session_id: str) -> Dict[str, Any]:
        """The session state of the latest history run of the session (``{}`` if none)."""
        return _session_state(self.store, session_id)

    # -- owners ------------------------------------------------------------------------------

    def _lock(self, thread: str) -> RunLock:
        return run_lock(self.store.path, thread)

    def _owner_status(self, thread: str, run: Run, locked_here: bool = False) -> OwnerStatus:
        """``locked_here``: the caller holds the run lock, so no owner on this host can hold it."""
        return judge_owner(run, self._lock(thread), self.lease, locked_here)

    def owner_status(self, run_id: str) -> OwnerStatus:
        """Whether the owner of a RUNNING run is alive (``live``), gone (``stale``), or there is none."""
        thread = self.thread(run_id)
        return self._owner_status(thread, load_run(self.store, thread).run)

    # -- timeline and snapshots -----------------------------------------------------------------

    def timeline(self, run_id: str, *, superseded: bool = True) -> List[TimelineEntry]:
        """The checkpoints of a run, oldest first: its current line, each checkpoint of a line left
        behind by continuing from an earlier boundary (``current=False``) right after the
        checkpoint it branched from (:func:`qvc.runs.queries.in_order`, the order every view shows).

        Each entry's ``id`` is the checkpoint id: stable, and accepted by :meth:`snapshot` and
        the store. Raises :class:`UnknownRunError`. Reads only.
        """
        return _timeline(self.store, self.thread(run_id), superseded=superseded)

    def snapshot(self, run_id: str, at: int | str | None = None) -> Snapshot:
        """The run as it was at a boundary: all of its state, not only a shorter message list.

        ``at`` is a message index in ``0..len(messages)`` of the latest checkpoint (snapped down
        to a pair-safe boundary; the result says which), a checkpoint id from :meth:`timeline`
        (any line, superseded ones included), or ``None`` for the latest. An index that is a
        checkpoint boundary gives that checkpoint's stored state (``exact``; the first
        checkpoint at that index). Between boundaries, messages and tools are cut from the
        latest line and the other fields are those of the last checkpoint before the index,
        or the run's initial ones before its first checkpoint (``exact`` is False). Never
        writes. Raises :class:`UnknownRunError`, :class:`UnknownCheckpointError` and
        :class:`InvalidInputError` (index out of range).
        """
        return _snapshot(self.store, self.thread(run_id), at)

    def show(self, ref: str) -> Snapshot | Run:
        """``RUN`` → the latest :class:`Run`; ``RUN@INDEX`` / ``RUN@CHECKPOINT_ID`` / ``RUN@{N}`` (the
        run's head N movements ago, from its thread's reflog, as git's ``BRANCH@{N}``) → a
        :class:`Snapshot`. Raises :class:`UnknownRunError`, and
        :class:`~qvc.errors.UnknownCheckpointError` naming the forms it takes."""
        run_id, at = parse_run_ref(ref)
        if at is None:
            return self.get(run_id)
        thread = self.thread(run_id)
        if isinstance(at, str) and REFLOG.fullmatch(at):
            at = self.store.commit_info(parse_revision(self.store, f"{thread}@{at}").commit).checkpoint_id
        try:
            return self.snapshot(run_id, at)
        except UnknownCheckpointError:
            raise UnknownCheckpointError(
                f"run {run_id!r} has no checkpoint {at!r} (after '@': a message index, a checkpoint id of the run "
                f"or a prefix of one, or {{N}} for its head N movements ago)") from None

    # -- recording ----------------------------------------------------------------------------

    def start(self, input: Any = None, *, session_id: Optional[str] = None, run_id: Optional[str] = None,
              system: Optional[str] = None, messages: Sequence[Message | Mapping] = (),
              session_state: Optional[Mapping[str, Any]] = None, agent_id: Optional[str] = None,
              user_id: Optional[str] = None, cadence: Cadence | str = Cadence.TOOL_BATCH,
              metadata: Optional[Mapping[str, Any]] = None,
              heartbeat_interval: Optional[float] = None) -> RunRecorder:
        """Start a run and return its recorder (which owns the run until it finishes or closes).

        The in-flight messages are ``system`` (as a system message), then ``messages``, then
        ``input`` as a user message. Nothing is written yet: the first checkpoint comes with
        the first tool batch (cadence permitting) or the terminal state. Raises
        :class:`InvalidInputError` for a bad id, cadence or message, or a run id in use.
        """
        cadence = parse_cadence(cadence)
        session_id = check_id(session_id, "session id") if session_id is not None else new_id()
        run_id = check_run_id(run_id) if run_id is not None else new_id()
        if self._exists(run_id):
            raise InvalidInputError(f"run {run_id!r} already exists")
        thread = thread_of(session_id, run_id)
        lock = self._lock(thread)
        if not lock.try_acquire():
            raise RunOwnedError(f"run {run_id!r} is being started by another process")
        run = Run(run_id=run_id, session_id=session_id, status=RunStatus.RUNNING, input=input, agent_id=agent_id,
                  user_id=user_id, cadence=cadence, session_state=dict(session_state or {}),
                  metadata=dict(metadata or {}), owner=Owner.me(),
                  initial_session_state=copy.deepcopy(dict(session_state or {})))
        try:
            rec = RunRecorder(self.store, thread, run, [], None, 0, lock, heartbeat_interval, self._mark_regenerated)
            if system is not None:
                rec.add_message(Message("system", system))
            rec.add_messages(messages)
            if input is not None:
                rec.add_message(Message("user", input))
        except BaseException:
            lock.release()
            raise
        return rec

    def _new_run(self, source: Run, run: Run, new_session: Optional[str], new_run_id: Optional[str]) -> Run:
        run.run_id = check_run_id(new_run_id) if new_run_id is not None else new_id()
        if self._exists(run.run_id):
            raise InvalidInputError(f"run {run.run_id!r} already exists")
        run.session_id = check_id(new_session, "session id") if new_session is not None else source.session_id
        run.created_at = time.time()
        return run

    def fork(self, run_id: str, at: ContinueFrom = "end", *, input: Any = None, new_run_id: Optional[str] = None,
             session_id: Optional[str] = None) -> Run:
        """A new PENDING run whose conversation is ``run_id``'s up to ``at`` (pair-safe), ``input`` appended.

        The fork records ``forked_from_run_id`` / ``forked_from_message_index`` and starts with
        fresh metrics; its first checkpoint's parent is the source checkpoint, so the two share
        their stored prefix. The source is not changed. Run it with :meth:`continue_run`.
        Raises :class:`UnknownRunError`, :class:`InvalidInputError`.
        """
        return self._fork_leg(run_id, at, input=input, new_run_id=new_run_id, session_id=session_id, own=False)

    def _fork_leg(self, run_id: str, at: ContinueFrom, *, input: Any, new_run_id: Optional[str],
                  session_id: Optional[str], own: bool, cadence: Optional[Cadence | str] = None,
                  reason: str = "fork", regenerate: Optional[Dict[str, Any]] = None,
                  heartbeat_interval: Optional[float] = None) -> Any:
        thread = self.thread(run_id)
        line = run_line(self.store, thread)
        latest = decode(line[-1]).run
        if regenerate:
            k = safe_truncation_index(latest.messages, regenerate["index"])
        else:
            k = resolve_continue_from(latest.messages, at)
        basis, run, segments, _ = view_at(line, k)
        run = copy.deepcopy(run)
        source_id = run.run_id
        self._new_run(latest, run, session_id, new_run_id)
        run.forked_from_run_id = source_id
        run.forked_from_message_index = k
        run.metrics = {}
        run.initial_session_state = copy.deepcopy(run.session_state)
        run.content = None
        run.error = None
        run.takeovers = []
        run.regenerated_by = None
        run.regenerated_from = None
        run.replace_original = True
        if cadence is not None:
            run.cadence = parse_cadence(cadence)
        if regenerate:
            run.regenerated_from = source_id
            run.replace_original = regenerate["replace_original"]
        new_thread = thread_of(run.session_id, run.run_id)
        lock = self._lock(new_thread)
        if not lock.try_acquire():
            raise RunOwnedError(f"run {run.run_id!r} is being created by another process")
        try:
            run.status = RunStatus.RUNNING if own else RunStatus.PENDING
            run.owner = Owner.me() if own else None
            rec = RunRecorder(self.store, new_thread, run, list(segments), basis.id, basis.step + 1, lock,
                              heartbeat_interval, self._mark_regenerated)
            if input is not None:
                rec.add_message(Message("user", input))
            if regenerate and regenerate.get("instructions") is not None:
                rec.add_message(Message("user", regenerate["instructions"],
                                        metadata={"kind": "additional_instructions"}))
            rec.put_checkpoint(reason, run.status)
        except BaseException:
            lock.release()
            raise
        self._threads[run.run_id] = new_thread
        if own:
            return rec
        lock.release()
        return load_run(self.store, new_thread).run

    def continue_run(self, run_id: str, input: Any = None, continue_from: ContinueFrom = "end", *,
                     fork: bool = False, requirements: Optional[Sequence[Requirement | Mapping]] = None,
                     cadence: Optional[Cadence | str] = None, new_run_id: Optional[str] = None,
                     heartbeat_interval: Optional[float] = None) -> RunRecorder:
        """Continue a run and return the recorder that owns the continuation.

        - RUNNING, ERROR, PAUSED and PENDING runs resume **in place** (same run id). A RUNNING
          run whose owner is alive raises :class:`RunOwnedError`; a stale owner is taken over
          and the takeover recorded. ``continue_from`` before the end rewinds the run: the cut
          becomes its head and the replaced tail stays reachable (never destroyed).
        - COMPLETED and REGENERATED runs, or ``fork=True``, continue in a **new run** forked at
          ``continue_from`` (``rec.run.forked_from_run_id`` says so).
        - CANCELLED runs raise :class:`RunStateError`.

        ``input`` is appended as a user message; a PAUSED run's ``requirements`` are resolved
        from ``requirements`` (matched by tool_call_id; all must end resolved, else
        :class:`RunStateError`). In place, a ``resume`` / ``takeover`` / ``rewind`` checkpoint is
        written before this returns (status RUNNING, the new owner). Raises
        :class:`UnknownRunError` and :class:`InvalidInputError` too.
        """
        thread = self.thread(run_id)
        head = load_run(self.store, thread)
        status = head.run.status
        if status is RunStatus.CANCELLED:
            raise RunStateError(f"run {run_id!r} was CANCELLED and cannot be continued; fork it instead")
        if fork or status in (RunStatus.COMPLETED, RunStatus.REGENERATED):
            return self._fork_leg(run_id, continue_from, input=input, new_run_id=new_run_id, session_id=None,
                                  own=True, cadence=cadence, heartbeat_interval=heartbeat_interval)
        lock = self._lock(thread)
        if not lock.try_acquire():
            owner = head.run.owner
            who = f"pid {owner.pid} on {owner.host}" if owner else "another process"
            raise RunOwnedError(f"run {run_id!r} is owned by {who}, which is alive (it holds the run lock)")
        try:
            return self._resume(thread, lock, input, continue_from, requirements, cadence, heartbeat_interval)
        except BaseException:
            lock.release()
            raise

    def _resume(self, thread: str, lock: RunLock, input: Any, continue_from: ContinueFrom,
                requirements: Optional[Sequence[Any]], cadence: Optional[Any],
                heartbeat_interval: Optional[float]) -> RunRecorder:
        line = run_line(self.store, thread)  # re-read under the lock
        head = decode(line[-1])
        run_id = head.run.run_id
        if head.run.status is RunStatus.CANCELLED:
            raise RunStateError(f"run {run_id!r} was CANCELLED and cannot be continued; fork it instead")
        if head.run.status in (RunStatus.COMPLETED, RunStatus.REGENERATED):
            raise RunStateError(f"run {run_id!r} became {head.run.status.value} meanwhile; continue it again to fork")
        takeover = None
        status = self._owner_status(thread, head.run, locked_here=True)
        if status.state == "live":
            raise RunOwnedError(f"run {run_id!r}: {status.reason}; refusing to take over a live run")
        if status.state == "stale":
            takeover = {"previous_owner": status.owner.to_dict(), "at": time.time(), "reason": status.reason,
                        "by": None}
        k = resolve_continue_from(head.run.messages, continue_from)
        if k < len(head.run.messages):
            basis, run, segments, _ = view_at(line, k)
            run = copy.deepcopy(run)
            reason = "rewind"
        else:
            basis, run, segments = head, head.run, head.segments
            reason = "takeover" if takeover else "resume"
        if requirements is not None or run.requirements:
            given = {r.tool_call_id: r for r in (Requirement.from_dict(x) for x in requirements or [])}
            run.requirements = [given.pop(r.tool_call_id, r) for r in run.requirements] + list(given.values())
            open_ = [r.tool_call_id for r in run.requirements if not r.resolved]
            if open_ and head.run.status is RunStatus.PAUSED:
                raise RunStateError(f"run {run_id!r} is PAUSED on unresolved requirements for tool calls "
                                    f"{', '.join(open_)}; pass them resolved in requirements=")
        run.owner = Owner.me()
        run.status = RunStatus.RUNNING
        run.error = None
        run.content = None
        if cadence is not None:
            run.cadence = parse_cadence(cadence)
        if takeover:
            takeover["by"] = run.owner.to_dict()
            run.takeovers = list(run.takeovers) + [takeover]
        rewinds = self.store.resolve(line[-1].config.checkpoint_id) if basis is not head else None
        rec = RunRecorder(self.store, thread, run, list(segments), basis.id, head.step + 1, lock, heartbeat_interval,
                          self._mark_regenerated, rewinds=rewinds)
        if input is not None:
            rec.add_message(Message("user", input))
        rec.put_checkpoint(reason, RunStatus.RUNNING, extra={"takeover": takeover} if takeover else None)
        return rec

    def regenerate(self, run_id: str, *, replace_original: bool = True, additional_instructions: Optional[str] = None,
                   new_run_id: Optional[str] = None, heartbeat_interval: Optional[float] = None) -> RunRecorder:
        """Redo only the final answer of a COMPLETED run, in a new run (tool exchanges are kept).

        The new run is forked just before the trailing assistant answer(s) and records
        ``regenerated_from``. With ``replace_original`` the source is marked REGENERATED (hidden
        from history) only once the new run COMPLETES, never before it exists; until then, and
        if the new run fails, the source stays visible. ``additional_instructions`` is appended
        as a user message. Raises :class:`RunStateError` unless the run is COMPLETED or
        REGENERATED, and :class:`UnknownRunError`.
        """
        head = load_run(self.store, self.thread(run_id)).run
        if head.status not in (RunStatus.COMPLETED, RunStatus.REGENERATED):
            raise RunStateError(f"only a COMPLETED run can be regenerated; run {run_id!r} is {head.status.value}")
        i = len(head.messages)
        while i > 0 and head.messages[i - 1].role == "assistant" and not head.messages[i - 1].tool_calls:
            i -= 1
        regen = {"index": i, "replace_original": bool(replace_original), "instructions": additional_instructions}
        return self._fork_leg(run_id, None, input=None, new_run_id=new_run_id, session_id=None, own=True,
                              reason="regenerate", regenerate=regen, heartbeat_interval=heartbeat_interval)

    def _mark_regenerated(self, source_id: str, by: str) -> None:
        thread = self.thread(source_id)
        lock = self._lock(thread)
        if not lock.try_acquire():
            log.warning("run %s is locked; it stays unmarked (history still hides it: %s replaced it)",
                        source_id, by)
            return
        try:
            head = load_run(self.store, thread)
            if head.run.status is RunStatus.REGENERATED:
                return
            run = head.run
            run.status = RunStatus.REGENERATED
            run.regenerated_by = by
            rec = RunRecorder(self.store, thread, run, list(head.segments), head.id, head.step + 1, lock, None,
                              self._mark_regenerated)
            rec.put_checkpoint("regenerated", RunStatus.REGENERATED)
        finally:
            lock.release()

    # -- copies -------------------------------------------------------------------------------

    def copy_run(self, run_id: str, *, session_id: Optional[str] = None, new_run_id: Optional[str] = None) -> Run:
        """A copy of a run's latest state as a new run (same status, no owner), sharing its stored data.

        The copy's first checkpoint has the source's head as parent. ``forked_from_session_id``
        is set when copying into another session. Raises :class:`UnknownRunError`.
        """
        return self._copy(load_run(self.store, self.thread(run_id)), session_id, new_run_id, {})

    def _copy(self, head: LoadedRun, session_id: Optional[str], new_run_id: Optional[str],
              mapping: Dict[str, str]) -> Run:
        run = copy.deepcopy(head.run)
        source = head.run
        self._new_run(source, run, session_id, new_run_id)
        run.created_at = source.created_at  # keeps the session's order
        if run.session_id != source.session_id:
            run.forked_from_session_id = source.forked_from_session_id or source.session_id
        for attr in ("forked_from_run_id", "regenerated_from", "regenerated_by"):
            value = getattr(run, attr)
            if value in mapping:
                setattr(run, attr, mapping[value])
        run.owner = None
        thread = thread_of(run.session_id, run.run_id)
        rec = RunRecorder(self.store, thread, run, list(head.segments), head.id, head.step + 1, None, None,
                          self._mark_regenerated)
        rec.put_checkpoint("copy", run.status)
        self._threads[run.run_id] = thread
        return load_run(self.store, thread).run

    def copy_session(self, session_id: str, new_session_id: Optional[str] = None) -> Dict[str, str]:
        """Copy every run of a session into a new session; returns ``{old run id: new run id}``.

        Lineage inside the session (forks, regenerations) is remapped to the new ids;
        ``forked_from_session_id`` names the root session. Each run's copy is one atomic
        checkpoint; a crash part-way leaves some runs copied. Raises :class:`UnknownRunError`.
        """
        source = [(s, t) for s, _, t in run_threads(self.store) if s == check_id(session_id, "session id")]
        if not source:
            raise UnknownRunError(f"session {session_id!r} has no runs")
        new_session_id = check_id(new_session_id, "session id") if new_session_id is not None else new_id()
        if new_session_id == session_id or any(s == new_session_id for s, _, _ in run_threads(self.store)):
            raise InvalidInputError(f"session {new_session_id!r} already has runs")
        heads = sorted((load_run(self.store, t) for _, t in source), key=lambda h: (h.run.created_at, h.run.run_id))
        mapping = {h.run.run_id: new_id() for h in heads}
        for h in heads:
            self._copy(h, new_session_id, mapping[h.run.run_id], mapping)
        return mapping
