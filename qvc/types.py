"""The checkpoint types, compatible with QitOS's ``qitos.checkpoint`` types."""

from __future__ import annotations

import copy
import enum
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Dict, List, NamedTuple, NewType, Optional, TypedDict

CheckpointId = NewType("CheckpointId", str)
StateVersions = Dict[str, int]


class DurabilityMode(enum.Enum):
    """When a write is on stable storage.

    ``SYNC``: on stable storage when the call returns (one disk flush; concurrent calls share
    it). ``ASYNC``: in the OS on return (a killed process loses nothing), durable within the
    store's ``max_lag`` seconds, in order. ``EXIT``: durable at ``flush()`` or ``close()``.
    :mod:`qvc.plumbing.durability` implements them.
    """

    SYNC = "sync"
    ASYNC = "async"
    EXIT = "exit"


@dataclass(frozen=True)
class CheckpointConfig:
    """Addresses a thread's latest checkpoint, or one checkpoint when ``checkpoint_id`` is set.

    ``checkpoint_id`` may be a checkpoint id, a commit SHA or a unique prefix of either.
    """

    thread_id: str
    checkpoint_id: Optional[CheckpointId] = None


class PendingWrite(NamedTuple):
    """An intermediate write of a task to a channel (LangGraph's ``(task_id, channel, value)``)."""

    task_id: str
    channel: str
    value: Any


class CheckpointMetadata(TypedDict, total=False):
    """Metadata of a checkpoint. Every key the caller gives is kept, not only these."""

    source: str
    step: int
    parents: Dict[str, str]
    run_id: str


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


@dataclass
class Checkpoint:
    """One point-in-time state of a thread."""

    id: CheckpointId
    thread_id: str
    step: int
    state_data: Dict[str, Any]
    state_versions: StateVersions = field(default_factory=dict)
    versions_seen: Dict[str, StateVersions] = field(default_factory=dict)
    pending_writes: List[PendingWrite] = field(default_factory=list)
    parent_id: Optional[CheckpointId] = None
    created_at: str = field(default_factory=_now)
    schema_version: str = "v2"

    def to_dict(self) -> Dict[str, Any]:
        return {
            "id": self.id,
            "thread_id": self.thread_id,
            "step": self.step,
            "state_data": self.state_data,
            "state_versions": dict(self.state_versions),
            "versions_seen": copy.deepcopy(self.versions_seen),
            "pending_writes": [
                {"task_id": w.task_id, "channel": w.channel, "value": w.value} for w in self.pending_writes
            ],
            "parent_id": self.parent_id,
            "created_at": self.created_at,
            "schema_version": self.schema_version,
        }

    @classmethod
    def from_dict(cls, payload: Dict[str, Any]) -> Checkpoint:
        return cls(
            id=payload["id"],
            thread_id=payload["thread_id"],
            step=payload["step"],
            state_data=payload["state_data"],
            state_versions=dict(payload.get("state_versions") or {}),
            versions_seen=dict(payload.get("versions_seen") or {}),
            pending_writes=[
                PendingWrite(w["task_id"], w["channel"], w.get("value"))
                for w in payload.get("pending_writes") or []
            ],
            parent_id=payload.get("parent_id"),
            created_at=payload.get("created_at", ""),
            schema_version=payload.get("schema_version", "v2"),
        )


class CheckpointTuple(NamedTuple):
    """A checkpoint with its address, metadata, parent address and pending writes."""

    config: CheckpointConfig
    checkpoint: Checkpoint
    metadata: CheckpointMetadata
    parent_config: Optional[CheckpointConfig] = None
    pending_writes: Optional[List[PendingWrite]] = None


class Head(NamedTuple):
    """What HEAD stands for: the current ``thread`` (``None`` when detached) and its ``commit``
    (``None`` while the thread has no checkpoints). Immutable; a named tuple, which costs a
    command's start-up a fifth of what a frozen dataclass does on CPython 3.11."""

    thread: Optional[str]
    commit: Optional[str]

    @property
    def detached(self) -> bool:
        return self.thread is None
