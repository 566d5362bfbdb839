"""Run checkpoints: a :class:`~qvc.runs.model.Run` and its segments encoded as checkpoint state, and decoded back.

Also reads a :class:`~qvc.runs.model.TimelineEntry` from a checkpoint's metadata. Imports
:mod:`qvc.types`, :mod:`qvc.errors`, :mod:`qvc.runs.model` and :mod:`qvc.runs.segments`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence

from qvc.errors import InvalidInputError
from qvc.runs.model import Message, Owner, Requirement, Run, TimelineEntry, ToolExecution, parse_cadence, parse_status
from qvc.runs.segments import Segment, layout
from qvc.types import CheckpointTuple


@dataclass
class LoadedRun:
    """A decoded run checkpoint: its tuple, the :class:`Run` it holds and the segments of its line."""

    tuple: CheckpointTuple
    run: Run
    segments: List[Segment]

    @property
    def id(self) -> str:
        """The checkpoint id."""
        return self.tuple.checkpoint.id

    @property
    def step(self) -> int:
        """The checkpoint's step."""
        return self.tuple.checkpoint.step


def segments_of(state: Mapping[str, Any], what: str) -> List[Segment]:
    """The segments of a run checkpoint's ``state``, in order (sealed groups, then ``log.<n>``), without
    decoding the messages; :class:`InvalidInputError` names ``what`` for a field that is no segment."""
    segments: List[Segment] = []
    for name in sorted(k for k in state if k.startswith("sealed.")):
        segments.extend(Segment.load(s, f"{what} field {name}") for s in state[name])
    for name in sorted(k for k in state if k.startswith("log.")):
        segments.append(Segment.load(state[name], f"{what} field {name}"))
    return segments


def decode(tup: CheckpointTuple) -> LoadedRun:
    """The run a checkpoint holds (owner heartbeats folded in); :class:`InvalidInputError` if it holds none."""
    state = tup.checkpoint.state_data
    what = f"run checkpoint {tup.checkpoint.id}"
    ident = state.get("run")
    if not isinstance(ident, Mapping) or "run_id" not in ident:
        raise InvalidInputError(f"{what} on thread {tup.checkpoint.thread_id!r} is not a run checkpoint")
    segments = segments_of(state, what)
    owner = Owner.from_dict(state.get("owner"))
    if owner is not None:  # heartbeats are pending writes on the checkpoint
        for w in tup.pending_writes or []:
            if w.channel == "owner" and isinstance(w.value, Mapping) and w.value.get("token") == owner.token:
                owner.heartbeat_at = max(owner.heartbeat_at, float(w.value.get("heartbeat_at", 0)))
    run = Run(
        run_id=ident["run_id"], session_id=ident["session_id"], status=parse_status(state.get("status", "PENDING")),
        messages=[Message.from_dict(m) for s in segments for m in s.messages],
        tools=[ToolExecution.from_dict(t) for s in segments for t in s.tools],
        requirements=[Requirement.from_dict(r) for r in state.get("requirements") or []],
        session_state=state.get("session_state") or {}, metrics=state.get("metrics") or {},
        content=state.get("content"), input=ident.get("input"), agent_id=ident.get("agent_id"),
        user_id=ident.get("user_id"), cadence=parse_cadence(ident.get("cadence", "tool-batch")),
        created_at=ident.get("created_at") or 0.0, updated_at=tup.metadata.get("time"),
        forked_from_run_id=ident.get("forked_from_run_id"),
        forked_from_message_index=ident.get("forked_from_message_index"),
        forked_from_session_id=ident.get("forked_from_session_id"), regenerated_from=ident.get("regenerated_from"),
        replace_original=bool(ident.get("replace_original", True)), regenerated_by=state.get("regenerated_by"),
        owner=owner, error=state.get("error"), takeovers=list(state.get("takeovers") or []),
        metadata=dict(ident.get("metadata") or {}),
        initial_session_state=dict(ident.get("initial_session_state") or {}), checkpoint_id=tup.checkpoint.id,
    )
    return LoadedRun(tup, run, segments)


def encode_state(run: Run, segments: Sequence[Segment]) -> Dict[str, Any]:
    """The checkpoint state of ``run`` whose conversation is ``segments`` (the inverse of :func:`decode`)."""
    state: Dict[str, Any] = {
        "run": run.identity(), "status": run.status.value, "content": run.content,
        "session_state": run.session_state, "metrics": run.metrics,
        "requirements": [r.to_dict() for r in run.requirements],
        "owner": run.owner.to_dict() if run.owner else None, "error": run.error, "takeovers": run.takeovers,
        "regenerated_by": run.regenerated_by,
    }
    state.update(layout(segments))
    return state


def timeline_entry(tup: CheckpointTuple, head_id: Optional[str], current: bool) -> TimelineEntry:
    """The timeline entry of a run checkpoint, read from its metadata only (``head_id``: the run's head)."""
    md = tup.metadata
    return TimelineEntry(
        id=tup.checkpoint.id, run_id=md.get("run_id", ""), message_index=int(md.get("message_index", 0)),
        status=parse_status(md.get("status", "PENDING")), reason=str(md.get("reason", "")),
        created_at=float(md.get("time", 0.0)), role=md.get("role"), preview=str(md.get("preview", "")),
        is_latest=tup.checkpoint.id == head_id, current=current,
        parent_id=tup.parent_config.checkpoint_id if tup.parent_config else None)

