"""QitOS's ``fork_checkpoint`` / ``list_fork_history``: its names for the store's fork primitive,
:mod:`qvc.store.fork`, kept so code written against ``qitos.checkpoint`` runs unchanged."""

from __future__ import annotations

from typing import List, Optional

from qvc.store import fork
from qvc.store.base import CheckpointStore
from qvc.types import CheckpointConfig, CheckpointTuple


def fork_checkpoint(store: CheckpointStore, config: CheckpointConfig,
                    new_thread_id: Optional[str] = None) -> CheckpointConfig:
    """Copy the addressed checkpoint into a new checkpoint whose parent it is: a new thread with
    ``new_thread_id``, else time travel on the same thread. See :func:`qvc.store.fork.fork_checkpoint`
    (the contract, and what it raises: :class:`~qvc.errors.UnknownCheckpointError` if not found)."""
    return fork.fork_checkpoint(store, config, new_thread_id)


def list_fork_history(store: CheckpointStore, config: CheckpointConfig, max_depth: int = 100) -> List[CheckpointTuple]:
    """The addressed checkpoint and its ancestors through ``parent_config``, newest first; see
    :func:`qvc.store.fork.list_fork_history`."""
    return fork.list_fork_history(store, config, max_depth)
