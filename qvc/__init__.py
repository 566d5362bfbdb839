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
    QvcError,
    SerializationError,
    StoreClosedError,
    UnknownCheckpointError,
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

__all__ = [
    "Checkpoint", "CheckpointConfig", "CheckpointConflictError", "CheckpointId", "CheckpointMetadata",
    "CheckpointStore", "CheckpointTuple", "CorruptionError", "DurabilityError", "DurabilityManager",
    "DurabilityMode", "GitCheckpointStore", "InvalidInputError", "InvalidThreadIdError", "NotARepositoryError",
    "NotFoundError", "PendingWrite", "PendingWriteManager", "QvcError", "RecoveryReport", "SerializationError",
    "StateVersionTracker", "StateVersions", "StoreClosedError", "UnknownCheckpointError", "UnknownThreadError",
    "fork_checkpoint", "list_fork_history",
]
