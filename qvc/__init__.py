"""qvc: a git-backed checkpoint repository for AI agent runs.

Each thread is a git branch and each checkpoint a commit whose tree holds the state, one
msgpack blob per field. See :class:`GitCheckpointStore` to start.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import TYPE_CHECKING, Any

from qvc.lazy import exports
from qvc.version import __version__  # noqa: F401  (qvc.__version__)

# Every public name is imported on first use (qvc.lazy), so ``import qvc`` and ``qvc.__version__``
# stay light and the CLI pays only for what a command uses. The module each name comes from:
_ERRORS = ("CheckpointConflictError", "CorruptionError", "DurabilityError", "InvalidInputError",
           "InvalidThreadIdError", "LocalChangesError", "NotARepositoryError", "NotFoundError", "PushRejectedError",
           "QvcError", "RemoteError", "RunOwnedError", "RunStateError", "SerializationError", "SignatureError",
           "StorageError", "StoreClosedError", "UnknownCheckpointError", "UnknownRemoteError", "UnknownRunError",
           "UnknownThreadError")
_TYPES = ("Checkpoint", "CheckpointConfig", "CheckpointId", "CheckpointMetadata", "CheckpointTuple",
          "DurabilityMode", "PendingWrite", "StateVersions")
# Agent runs (qvc.runs).
_RUNS = ("Cadence", "Message", "Run", "RunRecorder", "RunStatus", "Runs", "TimelineEntry", "ToolCall",
         "ToolExecution")
_HOMES: dict[str, str] = {
    **dict.fromkeys(_ERRORS, "qvc.errors"),
    **dict.fromkeys(_TYPES, "qvc.types"),
    **dict.fromkeys(_RUNS, "qvc.runs"),
    "RecoveryReport": "qvc.plumbing.leftovers",
    "fork_checkpoint": "qvc.qitos.fork", "list_fork_history": "qvc.qitos.fork",
    "DurabilityManager": "qvc.qitos.managers", "PendingWriteManager": "qvc.qitos.managers",
    "StateVersionTracker": "qvc.qitos.versioning",
    "CheckpointStore": "qvc.store.base",
    "GitCheckpointStore": "qvc.store.git_store",
}

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ imports these
    from importlib.machinery import ModuleSpec
    from types import ModuleType

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
        SignatureError,
        StorageError,
        StoreClosedError,
        UnknownCheckpointError,
        UnknownRemoteError,
        UnknownRunError,
        UnknownThreadError,
    )
    from qvc.plumbing.leftovers import RecoveryReport
    from qvc.qitos.fork import fork_checkpoint, list_fork_history
    from qvc.qitos.managers import DurabilityManager, PendingWriteManager
    from qvc.qitos.versioning import StateVersionTracker
    from qvc.runs import Cadence, Message, Run, RunRecorder, Runs, RunStatus, TimelineEntry, ToolCall, ToolExecution
    from qvc.store.base import CheckpointStore
    from qvc.store.git_store import GitCheckpointStore
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


__getattr__, __dir__ = exports(__name__, _HOMES)


# The composition root: the feature layer plugs into the store here, so the store never
# imports it. Every writable store runs replication (qvc.remotes.replication) while open.
def _replication(store: GitCheckpointStore):
    from qvc.remotes import replication  # deferred: `import qvc` does not load the remotes

    return replication.start(store)


_STORE_MODULE = "qvc.store.git_store"


def _plug_in(store_module: ModuleType) -> None:
    store_module.SERVICES.append(_replication)


class _WhenStoreLoads:
    """Plugs the services in right after :mod:`qvc.store.git_store` is first imported, by whichever
    module imports it, so that ``import qvc`` itself does not load the store (tens of milliseconds
    of every ``qvc --help``). A finder on ``sys.meta_path`` (duck-typed: ``importlib.abc`` alone costs
    10 ms to import). Steps aside (leaves ``sys.meta_path``) once it has done so."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> ModuleSpec | None:
        if fullname != _STORE_MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)  # the finders that would have found it
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader  # this module's own loader object: wrapping it touches no other module
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            _plug_in(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if _STORE_MODULE in sys.modules:  # imported before this package (it was re-imported)
    _plug_in(sys.modules[_STORE_MODULE])
else:
    sys.meta_path.insert(0, _WhenStoreLoads())


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


__all__ = [
    "Checkpoint", "CheckpointConfig", "CheckpointConflictError", "CheckpointId", "CheckpointMetadata",
    "CheckpointStore", "CheckpointTuple", "CorruptionError", "DurabilityError", "DurabilityManager",
    "DurabilityMode", "GitCheckpointStore", "InvalidInputError", "InvalidThreadIdError", "NotARepositoryError",
    "NotFoundError", "PendingWrite", "PendingWriteManager", "PushRejectedError", "QvcError", "RecoveryReport",
    "RemoteError", "RunOwnedError", "RunStateError", "SerializationError", "SignatureError", "StateVersionTracker",
    "StateVersions",
    "StoreClosedError", "StorageError", "LocalChangesError",
    "UnknownCheckpointError", "UnknownRemoteError", "UnknownRunError", "UnknownThreadError", "clone", "fetch", "push",
    "watch",
    "fork_checkpoint", "list_fork_history",
    "Cadence", "Message", "Run", "RunRecorder", "RunStatus", "Runs", "TimelineEntry", "ToolCall", "ToolExecution",
]
