"""Reading runs from a store: finding run threads, loading checkpoints, listing, session history,
timelines and snapshots. Nothing here writes.

Each function takes the store (and, where a run is meant, its thread:
:meth:`~qvc.runs.Runs.thread` resolves a run id); :class:`~qvc.runs.Runs` exposes them as
methods. Imports :mod:`qvc.store`, :mod:`qvc.types`, :mod:`qvc.errors` and :mod:`qvc.runs.ids`,
``model``, ``boundaries``, ``segments`` and ``codec``.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, Iterable, Iterator, List, Optional

from qvc.errors import InvalidInputError, UnknownCheckpointError, UnknownRunError
from qvc.runs.boundaries import referenced_tool_call_ids, safe_truncation_index
from qvc.runs.codec import LoadedRun, decode, timeline_entry
from qvc.runs.ids import THREAD_PREFIX, check_id
from qvc.runs.model import HISTORY_SKIP, Message, Run, RunStatus, RunSummary, Snapshot, TimelineEntry, ToolExecution
from qvc.runs.segments import cut
from qvc.store.format import cut_note
from qvc.store.git_store import GitCheckpointStore
from qvc.store.refnames import superseded_prefix
from qvc.types import CheckpointConfig, CheckpointTuple

# -- finding runs ---------------------------------------------------------------------------


def run_threads(store: GitCheckpointStore) -> Iterator[tuple]:
    """Every run thread of the store, as ``(session_id, run_id, thread)``."""
    for thread in store.threads():
        if thread.startswith(THREAD_PREFIX) and "/" in thread[len(THREAD_PREFIX):]:
            session, run_id = thread[len(THREAD_PREFIX):].rsplit("/", 1)
            yield session, run_id, thread


def sessions(store: GitCheckpointStore) -> List[str]:
    """Every session id with at least one run, sorted."""
    return sorted({s for s, _, _ in run_threads(store)})


def load_run(store: GitCheckpointStore, thread: str, checkpoint_id: Optional[str] = None) -> LoadedRun:
    """The run checkpoint ``checkpoint_id`` (default: the head) of ``thread``, decoded.

    Raises :class:`UnknownRunError` (no checkpoints), :class:`UnknownCheckpointError` and
    :class:`InvalidInputError` (a checkpoint of another thread, or not a run checkpoint).
    """
    tup = store.get_tuple(CheckpointConfig(thread, checkpoint_id))
    if tup is None:
        if checkpoint_id is not None:
            raise UnknownCheckpointError(f"unknown checkpoint {checkpoint_id!r}")
        raise UnknownRunError(f"run thread {thread!r} has no checkpoints")
    if tup.checkpoint.thread_id != thread:
        raise InvalidInputError(f"checkpoint {checkpoint_id!r} belongs to thread {tup.checkpoint.thread_id!r}, "
                                f"not {thread!r}")
    return decode(tup)


def list_runs(store: GitCheckpointStore, session_id: Optional[str] = None) -> List[RunSummary]:
    """The runs (of one session, or all), oldest first; see :meth:`~qvc.runs.Runs.list_runs`."""
    out = []
    for session, _, thread in run_threads(store):
        if session_id is not None and session != session_id:
            continue
        run = load_run(store, thread).run
        out.append(RunSummary(run.run_id, run.session_id, run.status, run.created_at, run.updated_at,
                              len(run.messages), run.checkpoint_id or "", run.forked_from_run_id,
                              run.regenerated_from, run.owner))
    if session_id is not None and not out:
        raise UnknownRunError(f"session {session_id!r} has no runs")
    return sorted(out, key=lambda r: (r.created_at, r.run_id))


# -- session history ------------------------------------------------------------------------


def _session_runs(store: GitCheckpointStore, session_id: str) -> List[Run]:
    runs = [load_run(store, t).run for s, _, t in run_threads(store) if s == session_id]
    return sorted(runs, key=lambda r: (r.created_at, r.run_id))


def history_runs(store: GitCheckpointStore, session_id: str, *, current_run_id: Optional[str] = None) -> List[Run]:
    """The runs of a session that belong in the next run's history; see :meth:`~qvc.runs.Runs.history_runs`."""
    runs = _session_runs(store, check_id(session_id, "session id"))
    replaced = {r.regenerated_from for r in runs
                if r.status is RunStatus.COMPLETED and r.regenerated_from and r.replace_original}
    return [r for r in runs
            if r.run_id not in replaced and r.status not in HISTORY_SKIP
            and (r.status is not RunStatus.RUNNING or r.run_id == current_run_id)]


def history(store: GitCheckpointStore, session_id: str, *, current_run_id: Optional[str] = None,
            include_system: bool = False) -> List[Message]:
    """The messages of :func:`history_runs`, in order; see :meth:`~qvc.runs.Runs.history`."""
    runs = history_runs(store, session_id, current_run_id=current_run_id)
    shown = {r.run_id for r in runs}
    out: List[Message] = []
    for r in runs:
        skip = r.forked_from_message_index or 0 if r.forked_from_run_id in shown else 0
        out.extend(m for m in r.messages[skip:] if include_system or m.role != "system")
    return out


def session_state(store: GitCheckpointStore, session_id: str) -> Dict[str, Any]:
    """A copy of the session state of the latest history run of the session (``{}`` if none)."""
    runs = history_runs(store, session_id)
    return copy.deepcopy(runs[-1].session_state) if runs else {}


# -- timeline and snapshots -----------------------------------------------------------------


def run_line(store: GitCheckpointStore, thread: str, start: Optional[str] = None,
             stop: Iterable[str] = ()) -> List[CheckpointTuple]:
    """The run's checkpoints on the line from ``start`` (head), oldest first, not crossing into other runs."""
    stop = set(stop)
    out = []
    for tup in store.list(CheckpointConfig(thread, start)):
        if tup.checkpoint.thread_id != thread or tup.checkpoint.id in stop:
            break
        out.append(tup)
    return out[::-1]


def timeline(store: GitCheckpointStore, thread: str, *, superseded: bool = True) -> List[TimelineEntry]:
    """The checkpoints of the run on ``thread`` (:func:`in_order`); see :meth:`~qvc.runs.Runs.timeline`."""
    line = run_line(store, thread)
    head = line[-1].checkpoint.id if line else None
    out = [timeline_entry(t, head, True) for t in line]
    if line and line[0].parent_config is None:  # the run's first checkpoint, or where retention cut its line
        info = store.commit_info(store.resolve(line[0].checkpoint.id))
        out[0].cut = cut_note(info.message)
    if superseded:
        seen = {t.checkpoint.id for t in line}
        tips = [tip for _, tip in store.repository.refs(superseded_prefix(thread))]
        extra: List[TimelineEntry] = []
        for tip in tips:
            for tup in run_line(store, thread, tip, seen):
                seen.add(tup.checkpoint.id)
                extra.append(timeline_entry(tup, head, False))
        out = in_order(out + extra)
    _name(line, out, thread)
    return out


def in_order(entries: List[TimelineEntry]) -> List[TimelineEntry]:
    """A run's timeline entries in the one order every view shows them (``qvc timeline``, its
    ``--json``, ``qvc serve`` and its page): the current line oldest first, each superseded
    checkpoint (``current=False``) right after the checkpoint of the current line its line
    branched from, oldest first, so none comes after the latest as if it were newer; superseded
    checkpoints whose line joins none come first."""
    by_id = {e.id: e for e in entries}
    groups: Dict[str, List[TimelineEntry]] = {}
    before: List[TimelineEntry] = []
    for e in entries:
        if e.current:
            continue
        at, hops = e.parent_id, 0
        while at in by_id and not by_id[at].current and hops <= len(entries):
            at, hops = by_id[at].parent_id, hops + 1
        if at in by_id and by_id[at].current:
            groups.setdefault(at, []).append(e)
        else:
            before.append(e)

    def when(e: TimelineEntry) -> tuple:
        return e.created_at, e.message_index

    out = sorted(before, key=when)
    for e in entries:
        if e.current:
            out += [e, *sorted(groups.get(e.id, ()), key=when)]
    return out


def basis_of(line: List[CheckpointTuple], k: int, total: int) -> tuple:
    """``(checkpoint tuple, exact)``: the checkpoint of the current ``line`` the run is shown from at
    pair-safe message index ``k`` (``total``: the messages of the line's head), as
    ``qvc show RUN@k`` resolves it: the head from ``total`` on, else the first checkpoint at
    ``k``, else the last one before it (``exact`` ``False``), else the line's first."""
    if k >= total:
        return line[-1], True
    index = [int(t.metadata.get("message_index", -1)) for t in line]
    if k in index:
        return line[index.index(k)], True
    before = [t for t, i in zip(line, index, strict=True) if i < k]
    return (before[-1] if before else line[0]), False


def view_at(line: List[CheckpointTuple], k: int) -> tuple:
    """``(basis checkpoint, run, segments, exact)`` for the pair-safe index ``k`` on the current ``line``."""
    latest = decode(line[-1])
    if k >= len(latest.run.messages):
        return latest, latest.run, latest.segments, True
    tup, exact = basis_of(line, k, len(latest.run.messages))
    basis = decode(tup)
    if exact:
        return basis, basis.run, basis.segments, True
    before = int(tup.metadata.get("message_index", -1)) < k  # else: before the line's first checkpoint
    segments = cut(latest.segments, k)
    run = basis.run
    if not before:  # before the first checkpoint: the state the run started with
        run.session_state = copy.deepcopy(run.initial_session_state)
        run.metrics, run.content, run.error, run.takeovers = {}, None, None, []
    run.messages = [Message.from_dict(m) for s in segments for m in s.messages]
    run.tools = [ToolExecution.from_dict(t) for s in segments for t in s.tools]
    refs = referenced_tool_call_ids(run.messages)
    run.requirements = [r for r in run.requirements if r.tool_call_id in refs]
    return basis, run, segments, False


def numbers(store: GitCheckpointStore, thread: str) -> Dict[str, tuple]:
    """The one numbering of the run's checkpoints that ``qvc log``, ``qvc timeline``, ``qvc show``
    and ``qvc serve`` share: checkpoint id -> ``(n, name)`` for every checkpoint of the run,
    superseded lines included. ``n`` is the checkpoint's message index (the messages the run
    holds there, what ``RUN@n`` counts); ``name`` is ``RUN@n`` when ``qvc show RUN@n``
    (:func:`basis_of`) names this very checkpoint, else ``RUN@<checkpoint id>`` (a second
    checkpoint at the same index, or one on a line time travel left). Reads only."""
    return {e.id: (e.message_index, e.name) for e in timeline(store, thread)}


def _name(line: List[CheckpointTuple], entries: List[TimelineEntry], thread: str) -> None:
    """Set each entry's ``name`` (see :func:`numbers`); ``line``: the run's current line."""
    if not line:
        return
    run_id = str(line[-1].metadata.get("run_id") or thread.rsplit("/", 1)[-1])
    latest = decode(line[-1]).run.messages
    for e in entries:
        n = e.message_index
        named = None
        if 0 <= n <= len(latest):
            named = basis_of(line, safe_truncation_index(latest, n), len(latest))[0].checkpoint.id
        e.name = f"{run_id}@{n}" if named == e.id else f"{run_id}@{e.id}"


def snapshot(store: GitCheckpointStore, thread: str, at: int | str | None = None) -> Snapshot:
    """The run on ``thread`` as it was at a boundary; see :meth:`~qvc.runs.Runs.snapshot`."""
    if at is None or isinstance(at, str):
        loaded = load_run(store, thread, at)
        head = store.get_tuple(CheckpointConfig(thread))
        on_line = any(t.checkpoint.id == loaded.id for t in run_line(store, thread)) if head else False
        n = len(loaded.run.messages)
        return Snapshot(loaded.run, loaded.id, n, n, True, on_line)
    if isinstance(at, bool) or not isinstance(at, int):
        raise InvalidInputError(f"snapshot at must be a message index or a checkpoint id, not {at!r}")
    line = run_line(store, thread)
    latest_messages = decode(line[-1]).run.messages
    if not 0 <= at <= len(latest_messages):
        raise InvalidInputError(f"message index {at} is outside 0..{len(latest_messages)}")
    k = safe_truncation_index(latest_messages, at)
    basis, run, _, exact = view_at(line, k)
    return Snapshot(run, basis.id, at, k, exact, True)
