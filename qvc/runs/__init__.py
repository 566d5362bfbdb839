"""Agent runs on a qvc store: tool-batch checkpoints, crash recovery, continue, fork and a timeline.

A **run** is one agent loop: a conversation (``messages``, with assistant tool calls and tool
results linked by ``tool_call_id``), the tool executions, HITL requirements, the session state,
metrics, the final ``content`` and a :class:`RunStatus`. Each run is the thread
``run/<session_id>/<run_id>`` of a :class:`~qvc.GitCheckpointStore`; each checkpoint of the run
is one commit on it.

Recording (:meth:`Runs.start` returns a :class:`RunRecorder`)::

    runs = Runs(store)
    with runs.start("What is 6*7?", system="You are terse.", cadence="tool-batch") as rec:
        reply = model(rec.run.messages)            # the agent loop owns the model and the tools
        rec.add_message(reply)
        for call in reply.tool_calls:
            rec.tool_result(call, tools[call.name](**call.arguments))
        rec.after_tool_batch()                     # one checkpoint per batch (cadence permitting)
        rec.complete(model(rec.run.messages).content)

K tool batches give K+1 checkpoints (K after the batches, one terminal). An exception leaving
the ``with`` block writes an ERROR checkpoint holding every message recorded so far, including
the system and user messages when the failure comes before the first batch.

**Storage layout.** The small fields (``run`` identity and lineage, ``status``, ``content``,
``session_state``, ``metrics``, ``requirements``, ``owner``, ``error``, ``takeovers``) are one
blob each. The conversation is stored as *segments*: field ``log.<n>`` holds the messages and
tool executions that checkpoint ``n`` of the line added, so a checkpoint writes what its batch
added plus a tree and a commit, and forks share their prefix's blobs. A tool execution whose
result equals its tool message's content is stored once. Once a line has 128 segments, the
oldest 64 are sealed into one ``sealed.<n>`` field (written once), so the root tree stays small
on long runs.

**Ownership.** A RUNNING run has an :class:`Owner` (pid, host, start time, heartbeat). The owning
recorder holds an ``flock`` on ``<repo>/qvc/runs/<thread>.lock`` for as long as it records; the
kernel drops it when the process dies, so on the same host a crashed owner is told from a live
one exactly. Owners on other hosts are judged by their heartbeat (``lease`` seconds).
Continuing a RUNNING run whose owner is live raises :class:`~qvc.errors.RunOwnedError`; taking
over a stale one writes a ``takeover`` checkpoint recording the previous owner.

**Durability.** Every checkpoint is one ``put``: durable when it returns in the store's SYNC
mode (see :mod:`qvc.plumbing.durability`). A failed checkpoint raises; it is never swallowed.

**Time travel never destroys.** Continuing from an earlier boundary in place makes the cut
checkpoint the run's new head; the line it replaces stays reachable (``timeline`` lists it with
``current=False``). Cuts are pair-safe (:func:`safe_truncation_index`).
"""

from __future__ import annotations

import copy
import fcntl
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence

from qvc.errors import InvalidInputError, RunOwnedError, RunStateError, UnknownCheckpointError, UnknownRunError
from qvc.store.git_store import GitCheckpointStore
from qvc.store.refnames import encode_thread, superseded_prefix
from qvc.types import Checkpoint, CheckpointConfig, CheckpointTuple

log = logging.getLogger("qvc")

THREAD_PREFIX = "run/"
#: Segments per sealed group; a line seals its oldest group once it has 2 * GROUP segments.
GROUP = 64
PREVIEW_CHARS = 120
ContinueFrom = str | int | None


class RunStatus(str, Enum):
    """The status of a run. ``REGENERATED`` marks a run replaced by a regeneration."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    ERROR = "ERROR"
    REGENERATED = "REGENERATED"

    def __str__(self) -> str:
        return self.value


#: Runs whose messages never go into the history of later runs of the session.
HISTORY_SKIP = frozenset({RunStatus.PENDING, RunStatus.PAUSED, RunStatus.CANCELLED, RunStatus.ERROR,
                          RunStatus.REGENERATED})
TERMINAL = frozenset({RunStatus.COMPLETED, RunStatus.PAUSED, RunStatus.CANCELLED, RunStatus.ERROR})


class Cadence(str, Enum):
    """When a recorder checkpoints: terminal states only, after each tool batch, or after each tool call."""

    RUNS = "runs"
    TOOL_BATCH = "tool-batch"
    TOOLS = "tools"

    def __str__(self) -> str:
        return self.value


def _status(value: Any) -> RunStatus:
    try:
        return RunStatus(str(value))
    except ValueError:
        raise InvalidInputError(f"unknown run status {value!r}; expected one of "
                                f"{', '.join(s.value for s in RunStatus)}") from None


def _cadence(value: Any) -> Cadence:
    try:
        return Cadence(str(value))
    except ValueError:
        raise InvalidInputError(f"unknown checkpoint cadence {value!r}; expected 'runs', 'tool-batch' "
                                f"or 'tools'") from None


def _iso(ts: Optional[float]) -> Optional[str]:
    return None if ts is None else datetime.fromtimestamp(ts, timezone.utc).isoformat()


def _new_id() -> str:
    return uuid.uuid4().hex


# ----------------------------------------------------------------------------------------------
# the run model
# ----------------------------------------------------------------------------------------------


@dataclass
class ToolCall:
    """One tool call requested by an assistant message."""

    id: str
    name: str
    arguments: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolCall:
        if not isinstance(data, Mapping) or not isinstance(data.get("name"), str):
            raise InvalidInputError(f"a tool call needs a 'name' string, got {data!r}")
        call_id = data.get("id") or _new_id()
        args = data.get("arguments") or {}
        if not isinstance(args, Mapping):
            raise InvalidInputError(f"tool call {call_id!r}: arguments must be a mapping")
        return cls(str(call_id), data["name"], dict(args))


@dataclass
class Message:
    """A conversation message. A ``tool`` message answers the call named by ``tool_call_id``."""

    role: str
    content: Any = None
    tool_calls: List[ToolCall] = field(default_factory=list)
    tool_call_id: Optional[str] = None
    tool_name: Optional[str] = None
    tool_call_error: bool = False
    id: str = field(default_factory=_new_id)
    created_at: float = field(default_factory=time.time)
    metadata: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.role, str) or not self.role:
            raise InvalidInputError(f"message role must be a non-empty string, not {self.role!r}")
        if self.role == "tool" and not self.tool_call_id:
            raise InvalidInputError("a tool message needs the tool_call_id of the call it answers")
        self.tool_calls = [c if isinstance(c, ToolCall) else ToolCall.from_dict(c) for c in self.tool_calls or []]

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"id": self.id, "role": self.role, "created_at": self.created_at}
        if self.content is not None:
            out["content"] = self.content
        if self.tool_calls:
            out["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.tool_name is not None:
            out["tool_name"] = self.tool_name
        if self.tool_call_error:
            out["tool_call_error"] = True
        if self.metadata:
            out["metadata"] = self.metadata
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Message:
        if not isinstance(data, Mapping):
            raise InvalidInputError(f"a message must be a mapping or a Message, not {type(data).__name__}")
        return cls(role=data.get("role"), content=data.get("content"), tool_calls=list(data.get("tool_calls") or []),
                   tool_call_id=data.get("tool_call_id"), tool_name=data.get("tool_name"),
                   tool_call_error=bool(data.get("tool_call_error", False)), id=data.get("id") or _new_id(),
                   created_at=data.get("created_at") or time.time(), metadata=dict(data.get("metadata") or {}))

    @property
    def preview(self) -> str:
        """The first 120 characters of the content (or of the tool calls), on one line."""
        if self.content is not None:
            text = self.content if isinstance(self.content, str) else repr(self.content)
        elif self.tool_calls:
            text = "; ".join(f"{c.name}({', '.join(f'{k}={v!r}' for k, v in c.arguments.items())})"
                             for c in self.tool_calls)
        else:
            text = ""
        text = " ".join(text.split())
        return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS - 1] + "…"


@dataclass
class ToolExecution:
    """A tool call as it was executed: its arguments, result and whether it failed."""

    tool_call_id: str
    tool_name: str
    tool_args: Dict[str, Any] = field(default_factory=dict)
    result: Any = None
    tool_call_error: bool = False
    started_at: Optional[float] = None
    finished_at: Optional[float] = None

    def to_dict(self) -> Dict[str, Any]:
        return {"tool_call_id": self.tool_call_id, "tool_name": self.tool_name, "tool_args": self.tool_args,
                "result": self.result, "tool_call_error": self.tool_call_error, "started_at": self.started_at,
                "finished_at": self.finished_at}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolExecution:
        return cls(tool_call_id=data["tool_call_id"], tool_name=data.get("tool_name", ""),
                   tool_args=dict(data.get("tool_args") or {}), result=data.get("result"),
                   tool_call_error=bool(data.get("tool_call_error", False)), started_at=data.get("started_at"),
                   finished_at=data.get("finished_at"))


@dataclass
class Requirement:
    """A human-in-the-loop requirement a PAUSED run waits on (confirmation, input, external execution)."""

    tool_call_id: str
    kind: str = "confirmation"
    resolved: bool = False
    value: Any = None

    def to_dict(self) -> Dict[str, Any]:
        return {"tool_call_id": self.tool_call_id, "kind": self.kind, "resolved": self.resolved, "value": self.value}

    @classmethod
    def from_dict(cls, data: Requirement | Mapping[str, Any]) -> Requirement:
        if isinstance(data, Requirement):
            return data
        if not isinstance(data, Mapping) or not isinstance(data.get("tool_call_id"), str):
            raise InvalidInputError(f"a requirement needs a 'tool_call_id' string, got {data!r}")
        return cls(data["tool_call_id"], str(data.get("kind", "confirmation")), bool(data.get("resolved", False)),
                   data.get("value"))


@dataclass
class Owner:
    """The process recording a RUNNING run."""

    pid: int
    host: str
    started_at: float
    heartbeat_at: float
    token: str = field(default_factory=_new_id)

    def to_dict(self) -> Dict[str, Any]:
        return {"pid": self.pid, "host": self.host, "started_at": self.started_at,
                "heartbeat_at": self.heartbeat_at, "token": self.token}

    @classmethod
    def from_dict(cls, data: Optional[Mapping[str, Any]]) -> Optional[Owner]:
        if not data:
            return None
        return cls(int(data["pid"]), str(data["host"]), float(data["started_at"]), float(data["heartbeat_at"]),
                   str(data.get("token", "")))

    @classmethod
    def me(cls) -> Owner:
        now = time.time()
        return cls(os.getpid(), socket.gethostname(), now, now)


@dataclass
class Run:
    """A run as stored at one checkpoint (or as a recorder holds it in memory)."""

    run_id: str
    session_id: str
    status: RunStatus = RunStatus.PENDING
    messages: List[Message] = field(default_factory=list)
    tools: List[ToolExecution] = field(default_factory=list)
    requirements: List[Requirement] = field(default_factory=list)
    session_state: Dict[str, Any] = field(default_factory=dict)
    metrics: Dict[str, Any] = field(default_factory=dict)
    content: Any = None
    input: Any = None
    agent_id: Optional[str] = None
    user_id: Optional[str] = None
    cadence: Cadence = Cadence.TOOL_BATCH
    created_at: float = field(default_factory=time.time)
    updated_at: Optional[float] = None
    forked_from_run_id: Optional[str] = None
    forked_from_message_index: Optional[int] = None
    forked_from_session_id: Optional[str] = None
    regenerated_from: Optional[str] = None
    replace_original: bool = True
    regenerated_by: Optional[str] = None
    owner: Optional[Owner] = None
    error: Optional[Dict[str, Any]] = None
    takeovers: List[Dict[str, Any]] = field(default_factory=list)
    metadata: Dict[str, Any] = field(default_factory=dict)
    initial_session_state: Dict[str, Any] = field(default_factory=dict)
    checkpoint_id: Optional[str] = None

    @property
    def last_checkpoint_at_message_index(self) -> int:
        """The message count at the checkpoint this run was read from (keep ``messages[:n]``)."""
        return len(self.messages)

    def _identity(self) -> Dict[str, Any]:
        return {"run_id": self.run_id, "session_id": self.session_id, "agent_id": self.agent_id,
                "user_id": self.user_id, "input": self.input, "cadence": self.cadence.value,
                "created_at": self.created_at, "forked_from_run_id": self.forked_from_run_id,
                "forked_from_message_index": self.forked_from_message_index,
                "forked_from_session_id": self.forked_from_session_id, "regenerated_from": self.regenerated_from,
                "replace_original": self.replace_original, "metadata": self.metadata,
                "initial_session_state": self.initial_session_state}

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready dict of the whole run (values the caller stored are passed through)."""
        out = self._identity()
        out.update(status=self.status.value, messages=[m.to_dict() for m in self.messages],
                   tools=[t.to_dict() for t in self.tools], requirements=[r.to_dict() for r in self.requirements],
                   session_state=self.session_state, metrics=self.metrics, content=self.content,
                   updated_at=self.updated_at, regenerated_by=self.regenerated_by,
                   owner=self.owner.to_dict() if self.owner else None, error=self.error, takeovers=self.takeovers,
                   checkpoint_id=self.checkpoint_id,
                   last_checkpoint_at_message_index=self.last_checkpoint_at_message_index)
        return out


@dataclass
class RunSummary:
    """One line of :meth:`Runs.list_runs`."""

    run_id: str
    session_id: str
    status: RunStatus
    created_at: float
    updated_at: Optional[float]
    message_count: int
    checkpoint_id: str
    forked_from_run_id: Optional[str] = None
    regenerated_from: Optional[str] = None
    owner: Optional[Owner] = None

    def to_dict(self) -> Dict[str, Any]:
        return {"run_id": self.run_id, "session_id": self.session_id, "status": self.status.value,
                "created_at": self.created_at, "updated_at": self.updated_at, "message_count": self.message_count,
                "checkpoint_id": self.checkpoint_id, "forked_from_run_id": self.forked_from_run_id,
                "regenerated_from": self.regenerated_from, "owner": self.owner.to_dict() if self.owner else None}


@dataclass
class TimelineEntry:
    """One checkpoint of a run. ``id`` is the checkpoint id: stable, accepted by :meth:`Runs.snapshot`."""

    id: str
    run_id: str
    message_index: int
    status: RunStatus
    reason: str
    created_at: float
    role: Optional[str]
    preview: str
    is_latest: bool
    current: bool
    parent_id: Optional[str]

    @property
    def continue_from(self) -> int:
        return self.message_index

    def to_dict(self) -> Dict[str, Any]:
        return {"id": self.id, "run_id": self.run_id, "message_index": self.message_index,
                "continue_from": self.message_index, "status": self.status.value, "reason": self.reason,
                "created_at": self.created_at, "time": _iso(self.created_at), "role": self.role,
                "preview": self.preview, "is_latest": self.is_latest, "current": self.current,
                "parent_id": self.parent_id}


@dataclass
class Snapshot:
    """A run as it was at a boundary (see :meth:`Runs.snapshot`)."""

    run: Run
    checkpoint_id: str
    requested_index: int
    message_index: int
    exact: bool
    current: bool

    def to_dict(self) -> Dict[str, Any]:
        return {"checkpoint_id": self.checkpoint_id, "requested_index": self.requested_index,
                "message_index": self.message_index, "snapped": self.requested_index != self.message_index,
                "exact": self.exact, "current": self.current, "run": self.run.to_dict()}


@dataclass
class OwnerStatus:
    """Whether a run's owner is alive: ``state`` is ``"none"``, ``"live"`` or ``"stale"``."""

    state: str
    owner: Optional[Owner]
    reason: str

    def to_dict(self) -> Dict[str, Any]:
        return {"state": self.state, "owner": self.owner.to_dict() if self.owner else None, "reason": self.reason}


# ----------------------------------------------------------------------------------------------
# pair-safe cuts
# ----------------------------------------------------------------------------------------------


def safe_truncation_index(messages: Sequence[Message], k: int) -> int:
    """The largest boundary ``b <= k`` such that every tool call kept in ``messages[:b]`` is answered there.

    ``k <= 0`` and ``k >= len(messages)`` are returned unchanged. Otherwise the first message
    before ``k`` with a tool call (that has an id) whose result is missing or at or after ``k``
    is where the cut goes: that whole exchange is dropped. The boundary never moves forward.
    """
    if k <= 0 or k >= len(messages):
        return k
    answered = {m.tool_call_id: i for i, m in enumerate(messages) if m.role == "tool" and m.tool_call_id}
    for idx in range(k):
        for call in messages[idx].tool_calls:
            if not call.id:
                continue
            at = answered.get(call.id)
            if at is None or at >= k:
                return idx
    return k


def referenced_tool_call_ids(messages: Iterable[Message]) -> set:
    """Every tool call id a message names, as a call or as the call it answers."""
    out = set()
    for m in messages:
        if m.tool_call_id:
            out.add(m.tool_call_id)
        out.update(c.id for c in m.tool_calls)
    return out


def resolve_continue_from(messages: Sequence[Message], continue_from: ContinueFrom) -> int:
    """The pair-safe message index ``continue_from`` names.

    ``"end"`` (or ``None``) is ``len(messages)``; ``"last_user"`` keeps up to and including the
    last user message; an int counts messages to keep (negative: from the end). Raises
    :class:`InvalidInputError` for anything else, an index out of range, or ``"last_user"`` with
    no user message.
    """
    n = len(messages)
    if continue_from is None or continue_from == "end":
        return n
    if continue_from == "last_user":
        for i in range(n - 1, -1, -1):
            if messages[i].role == "user":
                return safe_truncation_index(messages, i + 1)
        raise InvalidInputError("continue_from='last_user': the run has no user message")
    if isinstance(continue_from, bool) or not isinstance(continue_from, int):
        raise InvalidInputError(f"continue_from must be 'end', 'last_user' or an int, not {continue_from!r}")
    k = continue_from + n if continue_from < 0 else continue_from
    if not 0 <= k <= n:
        raise InvalidInputError(f"continue_from={continue_from} is outside 0..{n} (the run has {n} messages)")
    return safe_truncation_index(messages, k)


# ----------------------------------------------------------------------------------------------
# segments: how the conversation is laid out in checkpoint fields
# ----------------------------------------------------------------------------------------------


class _Segment:
    """The messages and tool executions one checkpoint added (stored as field ``log.<n>``)."""

    __slots__ = ("messages", "tools", "_stored")

    def __init__(self, messages: List[Dict[str, Any]], tools: List[Dict[str, Any]],
                 stored: Optional[Dict[str, Any]] = None):
        self.messages = messages
        self.tools = tools
        self._stored = stored

    @classmethod
    def load(cls, stored: Any, what: str) -> _Segment:
        if not isinstance(stored, Mapping) or not isinstance(stored.get("messages", []), list):
            raise InvalidInputError(f"{what}: not a run segment")
        messages = list(stored.get("messages", []))
        contents = {m.get("tool_call_id"): m.get("content") for m in messages if m.get("role") == "tool"}
        tools = []
        for t in stored.get("tools", []):
            if t.get("result_in_message"):
                t = {k: v for k, v in t.items() if k != "result_in_message"}
                t["result"] = contents.get(t.get("tool_call_id"))
            tools.append(t)
        return cls(messages, tools, dict(stored))

    def stored(self) -> Dict[str, Any]:
        """The stored form: a tool result equal to its tool message's content is kept once."""
        if self._stored is None:
            contents = {m.get("tool_call_id"): m.get("content") for m in self.messages if m.get("role") == "tool"}
            tools = []
            for t in self.tools:
                result = t.get("result")
                if type(result) is str and contents.get(t.get("tool_call_id")) == result:
                    t = {k: v for k, v in t.items() if k != "result"}
                    t["result_in_message"] = True
                tools.append(t)
            self._stored = {"messages": self.messages, "tools": tools}
        return self._stored


def _layout(segments: Sequence[_Segment]) -> Dict[str, Any]:
    """State fields for a line's segments: sealed groups of GROUP, then one field per segment."""
    sealed = max(0, (len(segments) - GROUP) // GROUP)
    out: Dict[str, Any] = {}
    for g in range(sealed):
        out[f"sealed.{g * GROUP:08d}"] = [s.stored() for s in segments[g * GROUP:(g + 1) * GROUP]]
    for i in range(sealed * GROUP, len(segments)):
        out[f"log.{i:08d}"] = segments[i].stored()
    return out


def _cut(segments: Sequence[_Segment], k: int) -> List[_Segment]:
    """The segments holding ``messages[:k]``, tools pruned to the tool calls still referenced."""
    out: List[_Segment] = []
    n = 0
    for seg in segments:
        if n + len(seg.messages) <= k:
            out.append(seg)
            n += len(seg.messages)
            continue
        if k > n:
            out.append(_Segment(seg.messages[:k - n], seg.tools))
        break
    kept = [Message.from_dict(m) for s in out for m in s.messages]
    refs = referenced_tool_call_ids(kept)
    for i, seg in enumerate(out):
        tools = [t for t in seg.tools if t.get("tool_call_id") in refs]
        if len(tools) != len(seg.tools):
            out[i] = _Segment(seg.messages, tools)
    return [s for s in out if s.messages or s.tools]


# ----------------------------------------------------------------------------------------------
# decoding checkpoints
# ----------------------------------------------------------------------------------------------


@dataclass
class _Loaded:
    tuple: CheckpointTuple
    run: Run
    segments: List[_Segment]

    @property
    def id(self) -> str:
        return self.tuple.checkpoint.id

    @property
    def step(self) -> int:
        return self.tuple.checkpoint.step


def _decode(tup: CheckpointTuple) -> _Loaded:
    state = tup.checkpoint.state_data
    what = f"run checkpoint {tup.checkpoint.id}"
    ident = state.get("run")
    if not isinstance(ident, Mapping) or "run_id" not in ident:
        raise InvalidInputError(f"{what} on thread {tup.checkpoint.thread_id!r} is not a run checkpoint")
    segments: List[_Segment] = []
    for name in sorted(k for k in state if k.startswith("sealed.")):
        segments.extend(_Segment.load(s, f"{what} field {name}") for s in state[name])
    for name in sorted(k for k in state if k.startswith("log.")):
        segments.append(_Segment.load(state[name], f"{what} field {name}"))
    owner = Owner.from_dict(state.get("owner"))
    if owner is not None:  # heartbeats are pending writes on the checkpoint
        for w in tup.pending_writes or []:
            if w.channel == "owner" and isinstance(w.value, Mapping) and w.value.get("token") == owner.token:
                owner.heartbeat_at = max(owner.heartbeat_at, float(w.value.get("heartbeat_at", 0)))
    run = Run(
        run_id=ident["run_id"], session_id=ident["session_id"], status=_status(state.get("status", "PENDING")),
        messages=[Message.from_dict(m) for s in segments for m in s.messages],
        tools=[ToolExecution.from_dict(t) for s in segments for t in s.tools],
        requirements=[Requirement.from_dict(r) for r in state.get("requirements") or []],
        session_state=state.get("session_state") or {}, metrics=state.get("metrics") or {},
        content=state.get("content"), input=ident.get("input"), agent_id=ident.get("agent_id"),
        user_id=ident.get("user_id"), cadence=_cadence(ident.get("cadence", "tool-batch")),
        created_at=ident.get("created_at") or 0.0, updated_at=tup.metadata.get("time"),
        forked_from_run_id=ident.get("forked_from_run_id"),
        forked_from_message_index=ident.get("forked_from_message_index"),
        forked_from_session_id=ident.get("forked_from_session_id"), regenerated_from=ident.get("regenerated_from"),
        replace_original=bool(ident.get("replace_original", True)), regenerated_by=state.get("regenerated_by"),
        owner=owner, error=state.get("error"), takeovers=list(state.get("takeovers") or []),
        metadata=dict(ident.get("metadata") or {}),
        initial_session_state=dict(ident.get("initial_session_state") or {}), checkpoint_id=tup.checkpoint.id,
    )
    return _Loaded(tup, run, segments)


def _state(run: Run, segments: Sequence[_Segment]) -> Dict[str, Any]:
    state: Dict[str, Any] = {
        "run": run._identity(), "status": run.status.value, "content": run.content,
        "session_state": run.session_state, "metrics": run.metrics,
        "requirements": [r.to_dict() for r in run.requirements],
        "owner": run.owner.to_dict() if run.owner else None, "error": run.error, "takeovers": run.takeovers,
        "regenerated_by": run.regenerated_by,
    }
    state.update(_layout(segments))
    return state


def _entry(tup: CheckpointTuple, head_id: Optional[str], current: bool) -> TimelineEntry:
    md = tup.metadata
    return TimelineEntry(
        id=tup.checkpoint.id, run_id=md.get("run_id", ""), message_index=int(md.get("message_index", 0)),
        status=_status(md.get("status", "PENDING")), reason=str(md.get("reason", "")),
        created_at=float(md.get("time", 0.0)), role=md.get("role"), preview=str(md.get("preview", "")),
        is_latest=tup.checkpoint.id == head_id, current=current,
        parent_id=tup.parent_config.checkpoint_id if tup.parent_config else None)


# ----------------------------------------------------------------------------------------------
# the run lock
# ----------------------------------------------------------------------------------------------


class _RunLock:
    """An exclusive ``flock`` on a run's lock file, held while a recorder owns the run."""

    def __init__(self, path: str):
        self.path = path
        self.fd: Optional[int] = None

    def try_acquire(self) -> bool:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return False
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:  # not a file a releasing owner unlinked meanwhile
                self.fd = fd
                return True
            os.close(fd)

    def held_elsewhere(self) -> bool:
        """Whether another open lock (any process, this one included) holds it."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def release(self, unlink: bool = False) -> None:
        if self.fd is None:
            return
        if unlink:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
        os.close(self.fd)
        self.fd = None


# ----------------------------------------------------------------------------------------------
# the facade
# ----------------------------------------------------------------------------------------------


def _check_id(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInputError(f"{what} must be a non-empty string, not {value!r}")
    return value


def _check_run_id(value: Any) -> str:
    _check_id(value, "run id")
    if "/" in value or "@" in value:
        raise InvalidInputError(f"run id {value!r} must not contain '/' or '@'")
    return value


def thread_of(session_id: str, run_id: str) -> str:
    """The thread id of a run."""
    return f"{THREAD_PREFIX}{session_id}/{run_id}"


def parse_run_ref(ref: str) -> tuple:
    """Split ``RUN`` / ``RUN@MESSAGE_INDEX`` / ``RUN@CHECKPOINT_ID`` into ``(run_id, at)``.

    ``at`` is ``None``, an int or a checkpoint id string. Raises :class:`InvalidInputError`.
    """
    _check_id(ref, "run reference")
    run_id, sep, at = ref.partition("@")
    _check_run_id(run_id)
    if not sep:
        return run_id, None
    if not at:
        raise InvalidInputError(f"run reference {ref!r}: nothing after '@'")
    if at.lstrip("-").isdigit():
        return run_id, int(at)
    return run_id, at


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

    def _run_threads(self) -> Iterator[tuple]:
        for thread in self.store.threads():
            if thread.startswith(THREAD_PREFIX) and "/" in thread[len(THREAD_PREFIX):]:
                session, run_id = thread[len(THREAD_PREFIX):].rsplit("/", 1)
                yield session, run_id, thread

    def thread(self, run_id: str) -> str:
        """The thread id of ``run_id``. Raises :class:`UnknownRunError`."""
        _check_run_id(run_id)
        found = self._threads.get(run_id)
        if found is not None and self.store.head(found) is not None:
            return found
        matches = [t for _, r, t in self._run_threads() if r == run_id]
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
        return sorted({s for s, _, _ in self._run_threads()})

    def _load(self, thread: str, checkpoint_id: Optional[str] = None) -> _Loaded:
        tup = self.store.get_tuple(CheckpointConfig(thread, checkpoint_id))
        if tup is None:
            if checkpoint_id is not None:
                raise UnknownCheckpointError(f"unknown checkpoint {checkpoint_id!r}")
            raise UnknownRunError(f"run thread {thread!r} has no checkpoints")
        if tup.checkpoint.thread_id != thread:
            raise InvalidInputError(f"checkpoint {checkpoint_id!r} belongs to thread {tup.checkpoint.thread_id!r}, "
                                    f"not {thread!r}")
        return _decode(tup)

    def get(self, run_id: str) -> Run:
        """The run as its latest checkpoint holds it. Raises :class:`UnknownRunError`."""
        return self._load(self.thread(run_id)).run

    def list_runs(self, session_id: Optional[str] = None) -> List[RunSummary]:
        """The runs (of one session, or all), oldest first. Raises :class:`UnknownRunError` for an unknown session."""
        out = []
        for session, _, thread in self._run_threads():
            if session_id is not None and session != session_id:
                continue
            run = self._load(thread).run
            out.append(RunSummary(run.run_id, run.session_id, run.status, run.created_at, run.updated_at,
                                  len(run.messages), run.checkpoint_id or "", run.forked_from_run_id,
                                  run.regenerated_from, run.owner))
        if session_id is not None and not out:
            raise UnknownRunError(f"session {session_id!r} has no runs")
        return sorted(out, key=lambda r: (r.created_at, r.run_id))

    def _session_runs(self, session_id: str) -> List[Run]:
        runs = [self._load(t).run for s, _, t in self._run_threads() if s == session_id]
        return sorted(runs, key=lambda r: (r.created_at, r.run_id))

    def history_runs(self, session_id: str, *, current_run_id: Optional[str] = None) -> List[Run]:
        """The runs of a session whose messages belong in the history of the next run, oldest first.

        Skipped: PENDING, PAUSED, CANCELLED, ERROR and REGENERATED runs, RUNNING runs other than
        ``current_run_id``, and any run a COMPLETED regeneration replaced (even before the
        source was marked REGENERATED).
        """
        runs = self._session_runs(_check_id(session_id, "session id"))
        replaced = {r.regenerated_from for r in runs
                    if r.status is RunStatus.COMPLETED and r.regenerated_from and r.replace_original}
        return [r for r in runs
                if r.run_id not in replaced and r.status not in HISTORY_SKIP
                and (r.status is not RunStatus.RUNNING or r.run_id == current_run_id)]

    def history(self, session_id: str, *, current_run_id: Optional[str] = None,
                include_system: bool = False) -> List[Message]:
        """The messages of :meth:`history_runs`, in order (system messages left out unless asked).

        A fork whose source is also in the history contributes only what it added after the
        fork point, so a shared prefix appears once.
        """
        runs = self.history_runs(session_id, current_run_id=current_run_id)
        shown = {r.run_id for r in runs}
        out: List[Message] = []
        for r in runs:
            skip = r.forked_from_message_index or 0 if r.forked_from_run_id in shown else 0
            out.extend(m for m in r.messages[skip:] if include_system or m.role != "system")
        return out

    def session_state(self, session_id: str) -> Dict[str, Any]:
        """The session state of the latest history run of the session (``{}`` if none)."""
        runs = self.history_runs(session_id)
        return copy.deepcopy(runs[-1].session_state) if runs else {}

    # -- owners ------------------------------------------------------------------------------

    def _lock(self, thread: str) -> _RunLock:
        return _RunLock(os.path.join(self.store.path, "qvc", "runs", encode_thread(thread) + ".lock"))

    def _owner_status(self, thread: str, run: Run, locked_here: bool = False) -> OwnerStatus:
        """``locked_here``: the caller holds the run lock, so no owner on this host can hold it."""
        owner = run.owner
        if run.status is not RunStatus.RUNNING or owner is None:
            return OwnerStatus("none", owner, f"the run is {run.status.value}, not owned")
        if owner.host == socket.gethostname():
            if not locked_here and self._lock(thread).held_elsewhere():
                return OwnerStatus("live", owner, f"pid {owner.pid} on {owner.host} holds the run lock")
            return OwnerStatus("stale", owner, f"pid {owner.pid} on {owner.host} is gone (run lock free)")
        age = time.time() - owner.heartbeat_at
        if age < self.lease:
            return OwnerStatus("live", owner, f"pid {owner.pid} on {owner.host} heartbeat {age:.0f}s ago "
                                              f"(lease {self.lease:.0f}s)")
        return OwnerStatus("stale", owner, f"pid {owner.pid} on {owner.host}: no heartbeat for {age:.0f}s "
                                           f"(lease {self.lease:.0f}s)")

    def owner_status(self, run_id: str) -> OwnerStatus:
        """Whether the owner of a RUNNING run is alive (``live``), gone (``stale``), or there is none."""
        thread = self.thread(run_id)
        return self._owner_status(thread, self._load(thread).run)

    # -- timeline and snapshots -----------------------------------------------------------------

    def _line(self, thread: str, start: Optional[str] = None, stop: Iterable[str] = ()) -> List[CheckpointTuple]:
        """The run's checkpoints on the line from ``start`` (head), oldest first, not crossing into other runs."""
        stop = set(stop)
        out = []
        for tup in self.store.list(CheckpointConfig(thread, start)):
            if tup.checkpoint.thread_id != thread or tup.checkpoint.id in stop:
                break
            out.append(tup)
        return out[::-1]

    def timeline(self, run_id: str, *, superseded: bool = True) -> List[TimelineEntry]:
        """The checkpoints of a run, oldest first: its current line, then (``current=False``) the
        checkpoints of lines left behind by continuing from an earlier boundary.

        Each entry's ``id`` is the checkpoint id: stable, and accepted by :meth:`snapshot` and
        the store. Raises :class:`UnknownRunError`. Reads only.
        """
        thread = self.thread(run_id)
        line = self._line(thread)
        head = line[-1].checkpoint.id if line else None
        out = [_entry(t, head, True) for t in line]
        if superseded:
            seen = {t.checkpoint.id for t in line}
            tips = [tip for _, tip in self.store.repository.refs(superseded_prefix(thread))]
            extra: List[TimelineEntry] = []
            for tip in tips:
                for tup in self._line(thread, tip, seen):
                    seen.add(tup.checkpoint.id)
                    extra.append(_entry(tup, head, False))
            out += sorted(extra, key=lambda e: (e.created_at, e.message_index))
        return out

    def _view(self, thread: str, k: int, line: Optional[List[CheckpointTuple]] = None) -> tuple:
        """``(basis checkpoint, run, segments, exact)`` for the pair-safe index ``k`` on the current line."""
        line = line if line is not None else self._line(thread)
        latest = _decode(line[-1])
        if k >= len(latest.run.messages):
            return latest, latest.run, latest.segments, True
        index = [int(t.metadata.get("message_index", -1)) for t in line]
        if k in index:
            basis = _decode(line[index.index(k)])
            return basis, basis.run, basis.segments, True
        before = [t for t, i in zip(line, index, strict=True) if i < k]
        basis = _decode(before[-1] if before else line[0])
        segments = _cut(latest.segments, k)
        run = basis.run
        if not before:  # before the first checkpoint: the state the run started with
            run.session_state = copy.deepcopy(run.initial_session_state)
            run.metrics, run.content, run.error, run.takeovers = {}, None, None, []
        run.messages = [Message.from_dict(m) for s in segments for m in s.messages]
        run.tools = [ToolExecution.from_dict(t) for s in segments for t in s.tools]
        refs = referenced_tool_call_ids(run.messages)
        run.requirements = [r for r in run.requirements if r.tool_call_id in refs]
        return basis, run, segments, False

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
        thread = self.thread(run_id)
        if at is None or isinstance(at, str):
            loaded = self._load(thread, at)
            head = self.store.get_tuple(CheckpointConfig(thread))
            on_line = any(t.checkpoint.id == loaded.id for t in self._line(thread)) if head else False
            n = len(loaded.run.messages)
            return Snapshot(loaded.run, loaded.id, n, n, True, on_line)
        if isinstance(at, bool) or not isinstance(at, int):
            raise InvalidInputError(f"snapshot at must be a message index or a checkpoint id, not {at!r}")
        line = self._line(thread)
        latest_messages = _decode(line[-1]).run.messages
        if not 0 <= at <= len(latest_messages):
            raise InvalidInputError(f"message index {at} is outside 0..{len(latest_messages)}")
        k = safe_truncation_index(latest_messages, at)
        basis, run, _, exact = self._view(thread, k, line)
        return Snapshot(run, basis.id, at, k, exact, True)

    def show(self, ref: str) -> Snapshot | Run:
        """``RUN`` → the latest :class:`Run`; ``RUN@INDEX`` / ``RUN@CHECKPOINT_ID`` → a :class:`Snapshot`."""
        run_id, at = parse_run_ref(ref)
        return self.get(run_id) if at is None else self.snapshot(run_id, at)

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
        cadence = _cadence(cadence)
        session_id = _check_id(session_id, "session id") if session_id is not None else _new_id()
        run_id = _check_run_id(run_id) if run_id is not None else _new_id()
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
            rec = RunRecorder(self, thread, run, [], None, 0, lock, heartbeat_interval)
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
        run.run_id = _check_run_id(new_run_id) if new_run_id is not None else _new_id()
        if self._exists(run.run_id):
            raise InvalidInputError(f"run {run.run_id!r} already exists")
        run.session_id = _check_id(new_session, "session id") if new_session is not None else source.session_id
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
        line = self._line(thread)
        latest = _decode(line[-1]).run
        if regenerate:
            k = safe_truncation_index(latest.messages, regenerate["index"])
        else:
            k = resolve_continue_from(latest.messages, at)
        basis, run, segments, _ = self._view(thread, k, line)
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
            run.cadence = _cadence(cadence)
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
            rec = RunRecorder(self, new_thread, run, list(segments), basis.id, basis.step + 1, lock,
                              heartbeat_interval)
            if input is not None:
                rec.add_message(Message("user", input))
            if regenerate and regenerate.get("instructions") is not None:
                rec.add_message(Message("user", regenerate["instructions"],
                                        metadata={"kind": "additional_instructions"}))
            rec._put(reason, run.status)
        except BaseException:
            lock.release()
            raise
        self._threads[run.run_id] = new_thread
        if own:
            return rec
        lock.release()
        return self._load(new_thread).run

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
        head = self._load(thread)
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

    def _resume(self, thread: str, lock: _RunLock, input: Any, continue_from: ContinueFrom,
                requirements: Optional[Sequence[Any]], cadence: Optional[Any],
                heartbeat_interval: Optional[float]) -> RunRecorder:
        line = self._line(thread)  # re-read under the lock
        head = _decode(line[-1])
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
            basis, run, segments, _ = self._view(thread, k, line)
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
            run.cadence = _cadence(cadence)
        if takeover:
            takeover["by"] = run.owner.to_dict()
            run.takeovers = list(run.takeovers) + [takeover]
        rec = RunRecorder(self, thread, run, list(segments), basis.id, head.step + 1, lock, heartbeat_interval)
        if input is not None:
            rec.add_message(Message("user", input))
        rec._put(reason, RunStatus.RUNNING, extra={"takeover": takeover} if takeover else None)
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
        head = self._load(self.thread(run_id)).run
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
            head = self._load(thread)
            if head.run.status is RunStatus.REGENERATED:
                return
            run = head.run
            run.status = RunStatus.REGENERATED
            run.regenerated_by = by
            rec = RunRecorder(self, thread, run, list(head.segments), head.id, head.step + 1, lock, None)
            rec._put("regenerated", RunStatus.REGENERATED)
        finally:
            lock.release()

    # -- copies -------------------------------------------------------------------------------

    def copy_run(self, run_id: str, *, session_id: Optional[str] = None, new_run_id: Optional[str] = None) -> Run:
        """A copy of a run's latest state as a new run (same status, no owner), sharing its stored data.

        The copy's first checkpoint has the source's head as parent. ``forked_from_session_id``
        is set when copying into another session. Raises :class:`UnknownRunError`.
        """
        return self._copy(self._load(self.thread(run_id)), session_id, new_run_id, {})

    def _copy(self, head: _Loaded, session_id: Optional[str], new_run_id: Optional[str],
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
        rec = RunRecorder(self, thread, run, list(head.segments), head.id, head.step + 1, None, None)
        rec._put("copy", run.status)
        self._threads[run.run_id] = thread
        return self._load(thread).run

    def copy_session(self, session_id: str, new_session_id: Optional[str] = None) -> Dict[str, str]:
        """Copy every run of a session into a new session; returns ``{old run id: new run id}``.

        Lineage inside the session (forks, regenerations) is remapped to the new ids;
        ``forked_from_session_id`` names the root session. Each run's copy is one atomic
        checkpoint; a crash part-way leaves some runs copied. Raises :class:`UnknownRunError`.
        """
        source = [(s, t) for s, _, t in self._run_threads() if s == _check_id(session_id, "session id")]
        if not source:
            raise UnknownRunError(f"session {session_id!r} has no runs")
        new_session_id = _check_id(new_session_id, "session id") if new_session_id is not None else _new_id()
        if new_session_id == session_id or any(s == new_session_id for s, _, _ in self._run_threads()):
            raise InvalidInputError(f"session {new_session_id!r} already has runs")
        heads = sorted((self._load(t) for _, t in source), key=lambda h: (h.run.created_at, h.run.run_id))
        mapping = {h.run.run_id: _new_id() for h in heads}
        for h in heads:
            self._copy(h, new_session_id, mapping[h.run.run_id], mapping)
        return mapping


# ----------------------------------------------------------------------------------------------
# the recorder
# ----------------------------------------------------------------------------------------------


class RunRecorder:
    """Records one leg of a run: the agent loop adds messages and tool results, the recorder checkpoints.

    Get one from :meth:`Runs.start`, :meth:`Runs.continue_run` or :meth:`Runs.regenerate`. It
    owns the run (holds its lock) until :meth:`complete`, :meth:`pause`, :meth:`cancel`,
    :meth:`fail` or :meth:`close`. Messages and tool executions are append-only: add them
    through the recorder. ``run`` is the live, in-memory run; ``checkpoints`` lists the ids this
    recorder wrote. Every checkpoint method returns the new checkpoint id (or ``None`` when the
    cadence says no) once it is durable, and raises what :meth:`GitCheckpointStore.put` raises.
    """

    def __init__(self, runs: Runs, thread: str, run: Run, segments: List[_Segment], parent: Optional[str],
                 step: int, lock: Optional[_RunLock], heartbeat_interval: Optional[float]):
        self._runs = runs
        self.thread_id = thread
        self.run = run
        self._segments = segments
        self._persisted = (sum(len(s.messages) for s in segments), sum(len(s.tools) for s in segments))
        self._parent = parent
        self._step = step
        self._lock = lock
        self._since = self._persisted
        self.checkpoints: List[str] = []
        self.finished = False
        self._started = time.monotonic()
        self._beat_lock = threading.Lock()
        self._stop = threading.Event()
        self._beater: Optional[threading.Thread] = None
        if heartbeat_interval is not None:
            if not isinstance(heartbeat_interval, (int, float)) or heartbeat_interval <= 0:
                raise InvalidInputError(f"heartbeat_interval must be a positive number, not {heartbeat_interval!r}")
            self._beater = threading.Thread(target=self._beat, args=(float(heartbeat_interval),), daemon=True,
                                            name=f"qvc-heartbeat-{run.run_id}")
            self._beater.start()

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def cadence(self) -> Cadence:
        return self.run.cadence

    @property
    def last_checkpoint_id(self) -> Optional[str]:
        return self._parent

    def __repr__(self) -> str:
        return f"RunRecorder({self.run.run_id!r}, {self.run.status.value}, {len(self.run.messages)} messages)"

    # -- recording ----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self.finished:
            raise RunStateError(f"run {self.run.run_id!r} recorder is finished ({self.run.status.value})")

    def add_message(self, message: Message | Mapping[str, Any]) -> Message:
        """Append a message (in flight until the next checkpoint). Raises :class:`InvalidInputError`."""
        self._check_open()
        msg = message if isinstance(message, Message) else Message.from_dict(message)
        self.run.messages.append(msg)
        return msg

    def add_messages(self, messages: Iterable[Message | Mapping[str, Any]]) -> List[Message]:
        return [self.add_message(m) for m in messages]

    def add_tool_execution(self, execution: ToolExecution | Mapping[str, Any]) -> ToolExecution:
        """Append a tool execution (use :meth:`tool_result` to add its tool message too)."""
        self._check_open()
        te = execution if isinstance(execution, ToolExecution) else ToolExecution.from_dict(execution)
        self.run.tools.append(te)
        return te

    def tool_result(self, call: ToolCall | str, result: Any, *, error: bool = False,
                    tool_name: Optional[str] = None, started_at: Optional[float] = None) -> Message:
        """Record a tool call's result: a ``tool`` message answering ``call`` and a :class:`ToolExecution`.

        ``result`` is the message content as is when it is a string, else its ``repr``; the
        execution keeps ``result`` itself. ``error=True`` marks a failed call (the run goes on).
        """
        self._check_open()
        if isinstance(call, ToolCall):
            call_id, name, args = call.id, tool_name or call.name, call.arguments
        else:
            call_id, name, args = _check_id(call, "tool call id"), tool_name or "", {}
            for m in reversed(self.run.messages):
                found = next((c for c in m.tool_calls if c.id == call_id), None)
                if found is not None:
                    name, args = tool_name or found.name, found.arguments
                    break
        content = result if isinstance(result, str) else repr(result)
        msg = self.add_message(Message("tool", content, tool_call_id=call_id, tool_name=name, tool_call_error=error))
        self.add_tool_execution(ToolExecution(call_id, name, dict(args), result, error, started_at, time.time()))
        self.run.metrics["tool_calls"] = self.run.metrics.get("tool_calls", 0) + 1
        return msg

    def pending_tool_calls(self) -> List[ToolCall]:
        """The tool calls of the conversation that have no result yet (for example after resuming a
        run checkpointed per tool call in the middle of a batch)."""
        answered = {m.tool_call_id for m in self.run.messages if m.role == "tool"}
        return [c for m in self.run.messages for c in m.tool_calls if c.id not in answered]

    def add_metrics(self, **numbers: Any) -> None:
        """Add numbers to the run's metrics (``input_tokens=12``...)."""
        for key, value in numbers.items():
            self.run.metrics[key] = self.run.metrics.get(key, 0) + value

    # -- checkpoints --------------------------------------------------------------------------

    def _put(self, reason: str, status: RunStatus, extra: Optional[Mapping[str, Any]] = None) -> str:
        run = self.run
        pm, pt = self._persisted
        if len(run.messages) > pm or len(run.tools) > pt:
            self._segments.append(_Segment([m.to_dict() for m in run.messages[pm:]],
                                           [t.to_dict() for t in run.tools[pt:]]))
            self._persisted = (len(run.messages), len(run.tools))
        run.status = status
        now = time.time()
        if run.owner is not None:
            run.owner.heartbeat_at = now
        last = run.messages[-1] if run.messages else None
        checkpoint = Checkpoint(id=_new_id(), thread_id=self.thread_id, step=self._step,
                                state_data=_state(run, self._segments), parent_id=self._parent)
        metadata = {"source": "run", "run_id": run.run_id, "session_id": run.session_id, "status": status.value,
                    "reason": reason, "message_index": len(run.messages), "time": now,
                    "role": last.role if last else None, "preview": last.preview if last else ""}
        if extra:
            metadata.update(extra)
        with self._beat_lock:
            self._runs.store.put(CheckpointConfig(self.thread_id), checkpoint, metadata)
            self._parent = checkpoint.id
        self._step += 1
        self._since = self._persisted
        run.checkpoint_id = checkpoint.id
        run.updated_at = now
        self.checkpoints.append(checkpoint.id)
        return checkpoint.id

    def _new_since_checkpoint(self) -> bool:
        return (len(self.run.messages), len(self.run.tools)) != self._since

    def checkpoint(self, reason: str = "manual") -> str:
        """Write a RUNNING checkpoint now, whatever the cadence."""
        self._check_open()
        return self._put(reason, RunStatus.RUNNING)

    def after_tool_call(self) -> Optional[str]:
        """Call after each tool call's result is recorded: checkpoints with cadence ``tools``."""
        self._check_open()
        if self.run.cadence is Cadence.TOOLS and self._new_since_checkpoint():
            return self._put("tool", RunStatus.RUNNING)
        return None

    def after_tool_batch(self) -> Optional[str]:
        """Call after a tool batch's results are recorded, before the next model call: checkpoints
        with cadence ``tool-batch`` (and ``tools``, if the last call was not checkpointed yet)."""
        self._check_open()
        if self.run.cadence is not Cadence.RUNS and self._new_since_checkpoint():
            return self._put("tool-batch", RunStatus.RUNNING)
        return None

    def heartbeat(self) -> None:
        """Refresh the owner's heartbeat without a new checkpoint (a pending write on the latest one).

        Only needed for owners judged from another host (see :class:`Runs` ``lease``). A no-op
        before the first checkpoint or after the run finished.
        """
        with self._beat_lock:
            if self.finished or self._parent is None or self.run.owner is None or not self.checkpoints:
                return
            now = time.time()
            self._runs.store.put_writes(CheckpointConfig(self.thread_id, self._parent),
                                        [("owner", {"token": self.run.owner.token, "heartbeat_at": now})],
                                        task_id="qvc.heartbeat")

    def _beat(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.heartbeat()
            except Exception as exc:  # noqa: BLE001 - a heartbeat failure must not kill the run
                log.warning("run %s: heartbeat failed: %s", self.run.run_id, exc)

    # -- finishing ----------------------------------------------------------------------------

    def _finish(self, status: RunStatus, reason: str) -> Run:
        self._check_open()
        run = self.run
        owner, run.owner = run.owner, None
        run.metrics["duration"] = run.metrics.get("duration", 0.0) + (time.monotonic() - self._started)
        try:
            self._put(reason, status)
        except BaseException:
            run.owner = owner
            raise
        self.finished = True
        self._release(unlink=True)
        if (status is RunStatus.COMPLETED and run.regenerated_from and run.replace_original):
            self._runs._mark_regenerated(run.regenerated_from, run.run_id)
        return run

    def complete(self, content: Any = None) -> Run:
        """Finish COMPLETED with ``content`` (default: the last assistant message's content)."""
        if content is None:
            content = next((m.content for m in reversed(self.run.messages) if m.role == "assistant"), None)
        self.run.content = content
        return self._finish(RunStatus.COMPLETED, "end")

    def pause(self, requirements: Sequence[Requirement | Mapping[str, Any]]) -> Run:
        """Finish PAUSED, waiting on human-in-the-loop ``requirements`` (resolve them in ``continue_run``)."""
        self._check_open()
        self.run.requirements = [Requirement.from_dict(r) for r in requirements]
        return self._finish(RunStatus.PAUSED, "paused")

    def cancel(self, reason: Optional[str] = None) -> Run:
        """Finish CANCELLED (a cancelled run cannot be continued, only forked)."""
        self._check_open()
        self.run.error = {"type": "cancelled", "message": reason or ""}
        return self._finish(RunStatus.CANCELLED, "cancelled")

    def fail(self, error: BaseException | str) -> Run:
        """Finish ERROR: every message recorded so far is kept in the ERROR checkpoint."""
        self._check_open()
        if isinstance(error, BaseException):
            self.run.error = {"type": type(error).__name__, "message": str(error)}
        else:
            self.run.error = {"type": "error", "message": str(error)}
        return self._finish(RunStatus.ERROR, "error")

    def _release(self, unlink: bool = False) -> None:
        self._stop.set()
        if self._beater is not None and self._beater is not threading.current_thread():
            self._beater.join()
        if self._lock is not None:
            self._lock.release(unlink=unlink)

    def close(self) -> None:
        """Stop recording without finishing: in-flight messages are checkpointed (reason ``detach``),
        the run stays RUNNING and its lock is released, so :meth:`Runs.continue_run` can take it over.
        A no-op once finished."""
        if self.finished:
            return
        try:
            if self._new_since_checkpoint() or not self.checkpoints:
                self._put("detach", RunStatus.RUNNING)
        finally:
            self.finished = True
            self._release()

    def __enter__(self) -> RunRecorder:
        return self

    def __exit__(self, exc_type: Any, exc: Optional[BaseException], tb: Any) -> None:
        if self.finished:
            return
        if exc is None:
            self.close()
            return
        try:
            if exc_type is not None and exc_type.__name__ == "CancelledError":
                self.cancel(f"{exc_type.__name__}: {exc}")
            else:
                self.fail(exc)
        except Exception as flush_error:  # keep the original exception; say the flush failed
            log.error("run %s: the ERROR checkpoint failed: %s", self.run.run_id, flush_error)
            if hasattr(exc, "add_note"):
                exc.add_note(f"qvc: the ERROR checkpoint of run {self.run.run_id} failed: {flush_error!r}")
            self.finished = True
            self._release()


__all__ = [
    "Cadence", "HISTORY_SKIP", "Message", "Owner", "OwnerStatus", "Requirement", "Run", "RunRecorder", "RunStatus",
    "RunSummary", "Runs", "Snapshot", "TimelineEntry", "ToolCall", "ToolExecution", "parse_run_ref",
    "referenced_tool_call_ids", "resolve_continue_from", "safe_truncation_index", "thread_of",
]
