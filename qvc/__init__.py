"""qvc: a git-backed checkpoint repository for AI agent runs.

Each thread is a git branch and each checkpoint a commit whose tree holds the state, one
msgpack blob per field. See :class:`GitCheckpointStore` to start.
"""

from .base import CheckpointStore
from .durability import DurabilityMode
from .errors import (
    CheckpointConflictError,
    CorruptionError,
    DurabilityError,
    InvalidInputError,
    InvalidThreadIdError,
    NotARepositoryError,
    NotFoundError,
    PushRejectedError,
    QvcError,
    RemoteError,
    RunOwnedError,
    RunStateError,
    SerializationError,
    StoreClosedError,
    UnknownCheckpointError,
    UnknownRemoteError,
    UnknownRunError,
    UnknownThreadError,
)
from .fork import fork_checkpoint, list_fork_history
from .managers import DurabilityManager, PendingWriteManager
from .recovery import RecoveryReport
from .store import GitCheckpointStore
from .types import (
    Checkpoint,
    CheckpointConfig,
    CheckpointId,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    StateVersions,
)
from .versioning import StateVersionTracker

__version__ = "0.1.0"

# Agent runs (qvc.runs) are imported on first use, so ``import qvc`` stays light.
_RUNS = ("Cadence", "Message", "Run", "RunRecorder", "RunStatus", "Runs", "TimelineEntry", "ToolCall",
         "ToolExecution")


def clone(url: str, path, **options):
    """Clone the qvc repository at ``url`` into ``path``; see :func:`qvc.remote.clone`."""
    from .remote import clone as _clone

    return _clone(url, path, **options)


def __getattr__(name: str):
    if name in _RUNS:
        from . import runs

        return getattr(runs, name)
    raise AttributeError(f"module 'qvc' has no attribute {name!r}")


__all__ = [
    "Checkpoint", "CheckpointConfig", "CheckpointConflictError", "CheckpointId", "CheckpointMetadata",
    "CheckpointStore", "CheckpointTuple", "CorruptionError", "DurabilityError", "DurabilityManager",
    "DurabilityMode", "GitCheckpointStore", "InvalidInputError", "InvalidThreadIdError", "NotARepositoryError",
    "NotFoundError", "PendingWrite", "PendingWriteManager", "PushRejectedError", "QvcError", "RecoveryReport",
    "RemoteError", "RunOwnedError", "RunStateError", "SerializationError", "StateVersionTracker", "StateVersions",
    "StoreClosedError",
    "UnknownCheckpointError", "UnknownRemoteError", "UnknownRunError", "UnknownThreadError", "clone",
    "fork_checkpoint", "list_fork_history",
    *_RUNS,
]
