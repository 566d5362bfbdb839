"""The run model: statuses, cadences, messages, tool calls and executions, requirements, owners, the
:class:`Run` itself and the result types the queries return (summaries, timeline entries, snapshots,
owner statuses), each with its JSON form (``to_dict`` / ``from_dict``).

Imports :mod:`qvc.errors` and :mod:`qvc.runs.ids`.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from typing import Any, Dict, List, Mapping, Optional

from qvc.errors import InvalidInputError
from qvc.runs.ids import new_id

PREVIEW_CHARS = 120


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


def parse_status(value: Any) -> RunStatus:
    """``value`` as a :class:`RunStatus`; :class:`InvalidInputError` if it names none."""
    try:
        return RunStatus(str(value))
    except ValueError:
        raise InvalidInputError(f"unknown run status {value!r}; expected one of "
                                f"{', '.join(s.value for s in RunStatus)}") from None


def parse_cadence(value: Any) -> Cadence:
    """``value`` as a :class:`Cadence`; :class:`InvalidInputError` if it names none."""
    try:
        return Cadence(str(value))
    except ValueError:
        raise InvalidInputError(f"unknown checkpoint cadence {value!r}; expected 'runs', 'tool-batch' "
                                f"or 'tools'") from None


def _iso(ts: Optional[float]) -> Optional[str]:
    return None if ts is None else datetime.fromtimestamp(ts, timezone.utc).isoformat()


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
        call_id = data.get("id") or new_id()
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
    id: str = field(default_factory=new_id)
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
                   tool_call_error=bool(data.get("tool_call_error", False)), id=data.get("id") or new_id(),
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
    token: str = field(default_factory=new_id)

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

    def identity(self) -> Dict[str, Any]:
        """The run's identity and lineage: the fields fixed when the run is created (its ``run`` blob)."""
        return {"run_id": self.run_id, "session_id": self.session_id, "agent_id": self.agent_id,
                "user_id": self.user_id, "input": self.input, "cadence": self.cadence.value,
                "created_at": self.created_at, "forked_from_run_id": self.forked_from_run_id,
                "forked_from_message_index": self.forked_from_message_index,
                "forked_from_session_id": self.forked_from_session_id, "regenerated_from": self.regenerated_from,
                "replace_original": self.replace_original, "metadata": self.metadata,
                "initial_session_state": self.initial_session_state}

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready dict of the whole run (values the caller stored are passed through)."""
        out = self.identity()
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
    #: the name ``qvc show`` resolves to this checkpoint: ``RUN@n`` (``n``: the message index), else
    #: ``RUN@<checkpoint id>`` (:func:`qvc.runs.queries.numbers`); set by the timeline
    name: str = ""
    #: on the first checkpoint of a line that retention cut: what it removed before it
    #: (:func:`qvc.store.format.cut_note`); set by the timeline
    cut: Optional[str] = None

    @property
    def continue_from(self) -> int:
        return self.message_index

    def to_dict(self) -> Dict[str, Any]:
        return {"id": self.id, "n": self.message_index, "name": self.name, "run_id": self.run_id,
                "message_index": self.message_index,
                "continue_from": self.message_index, "status": self.status.value, "reason": self.reason,
                "created_at": self.created_at, "time": _iso(self.created_at), "role": self.role,
                "preview": self.preview, "is_latest": self.is_latest, "current": self.current,
                "parent_id": self.parent_id, "cut": self.cut}


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

