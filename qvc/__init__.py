"""qvc: a git-backed checkpoint repository for AI agent runs.

Each thread is a git branch and each checkpoint a commit whose tree holds the state, one
msgpack blob per field. See :class:`GitCheckpointStore` to start.
"""

from qvc.errors import (
    CheckpointConflictError,
    CorruptionError,
    DurabilityError,
    InvalidInputError,
    InvalidThreadIdError,
    LocalChangesError,
    NotARepositoryError,
    NotFoundError,
    PushRejectedError,
    QvcError,
    RemoteError,
    RunOwnedError,
    RunStateError,
    SerializationError,
    StorageError,
    StoreClosedError,
    UnknownCheckpointError,
    UnknownRemoteError,
    UnknownRunError,
    UnknownThreadError,
)
from qvc.plumbing.recovery import RecoveryReport
from qvc.qitos.fork import fork_checkpoint, list_fork_history
from qvc.qitos.managers import DurabilityManager, PendingWriteManager
from qvc.qitos.versioning import StateVersionTracker
from qvc.store.base import CheckpointStore
from qvc.store.git_store import SERVICES, GitCheckpointStore
from qvc.types import (
    Checkpoint,
    CheckpointConfig,
    CheckpointId,
    CheckpointMetadata,
    CheckpointTuple,
    DurabilityMode,
    PendingWrite,
    StateVersions,
)
from qvc.version import __version__  # noqa: F401  (qvc.__version__)

# Agent runs (qvc.runs) are imported on first use, so ``import qvc`` stays light.
_RUNS = ("Cadence", "Message", "Run", "RunRecorder", "RunStatus", "Runs", "TimelineEntry", "ToolCall",
         "ToolExecution")


# The composition root: the feature layer plugs into the store here, so the store never
# imports it. Every writable store runs replication (qvc.remotes.replication) while open.
def _replication(store: GitCheckpointStore):
    from qvc.remotes import replication  # deferred: `import qvc` does not load the remotes

    return replication.start(store)


SERVICES.append(_replication)


def clone(url: str, path, **options):
    """Clone the qvc repository at ``url`` into ``path``; see :func:`qvc.remotes.remote.clone`."""
    from qvc.remotes.remote import clone as _clone

    return _clone(url, path, **options)


def push(store: GitCheckpointStore, remote: str = "origin", threads=None, **options):
    """Push ``store``'s threads (default: all, with every qvc ref) to ``remote``; see
    :func:`qvc.remotes.remote.push` (returns a ``PushResult``; raises ``PushRejectedError``, ``RemoteError``)."""
    from qvc.remotes.remote import push as _push

    return _push(store, remote, threads, **options)


def fetch(store: GitCheckpointStore, remote: str = "origin", threads=None, **options):
    """Fetch a remote's threads (default: all) into ``store`` as ``REMOTE/THREAD``; see
    :func:`qvc.remotes.remote.fetch`."""
    from qvc.remotes.remote import fetch as _fetch

    return _fetch(store, remote, threads, **options)


def watch(store: GitCheckpointStore, threads=None, **options):
    """Follow ``store``'s repository live; see :func:`qvc.readers.watch.watch`."""
    from qvc.readers.watch import watch as _watch

    return _watch(store, threads, **options)


def __getattr__(name: str):
    if name in _RUNS:
        from qvc import runs

        return getattr(runs, name)
    raise AttributeError(f"module 'qvc' has no attribute {name!r}")


__all__ = [
    "Checkpoint", "CheckpointConfig", "CheckpointConflictError", "CheckpointId", "CheckpointMetadata",
    "CheckpointStore", "CheckpointTuple", "CorruptionError", "DurabilityError", "DurabilityManager",
    "DurabilityMode", "GitCheckpointStore", "InvalidInputError", "InvalidThreadIdError", "NotARepositoryError",
    "NotFoundError", "PendingWrite", "PendingWriteManager", "PushRejectedError", "QvcError", "RecoveryReport",
    "RemoteError", "RunOwnedError", "RunStateError", "SerializationError", "StateVersionTracker", "StateVersions",
    "StoreClosedError", "StorageError", "LocalChangesError",
    "UnknownCheckpointError", "UnknownRemoteError", "UnknownRunError", "UnknownThreadError", "clone", "fetch", "push",
    "watch",
    "fork_checkpoint", "list_fork_history",
    *_RUNS,
]
