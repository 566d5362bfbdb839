"""Forks and time travel as new checkpoints, over any :class:`~qvc.store.base.CheckpointStore`.

:func:`fork_checkpoint` copies a checkpoint into a new one whose parent it is (a new thread, or
time travel on the same thread), :func:`fork_thread` is the same for a named new thread that must
not exist yet (``qvc branch NEW CHECKPOINT``, ``POST /api/fork``), and :func:`list_fork_history`
walks a checkpoint's ancestors across forks. Every write goes through the store's ``put``.
QitOS's names for the first and last stay in :mod:`qvc.qitos.fork`. Imports: the store and below.
"""

from __future__ import annotations

import copy
import uuid
from typing import List, Optional

from qvc.errors import CheckpointConflictError, UnknownCheckpointError
from qvc.store.base import CheckpointStore
from qvc.store.git_store import GitCheckpointStore
from qvc.types import Checkpoint, CheckpointConfig, CheckpointTuple


def fork_checkpoint(store: CheckpointStore, config: CheckpointConfig,
                    new_thread_id: Optional[str] = None) -> CheckpointConfig:
    """Copy the addressed checkpoint into a new checkpoint whose parent it is.

    With ``new_thread_id`` this starts a new thread (a branch from that checkpoint).
    Without it, it is time travel on the same thread: the copy becomes the thread's head and
    the line it supersedes stays reachable. Returns the new checkpoint's config; durable when
    the store's ``put`` is (at once under SYNC). Raises :class:`UnknownCheckpointError` (a
    ``ValueError`` is what QitOS raised) if not found, and what ``put`` raises.
    """
    source = store.get_tuple(config)
    if source is None:
        raise UnknownCheckpointError(f"Checkpoint not found for config: {config}")
    src = source.checkpoint
    dest = new_thread_id or src.thread_id
    forked = Checkpoint(
        id=uuid.uuid4().hex, thread_id=dest, step=src.step, state_data=copy.deepcopy(src.state_data),
        state_versions=dict(src.state_versions), versions_seen=copy.deepcopy(src.versions_seen),
        pending_writes=[], parent_id=src.id, created_at=src.created_at, schema_version=src.schema_version,
    )
    metadata = {"source": "fork", "step": src.step, "run_id": source.metadata.get("run_id", "")}
    if new_thread_id:
        metadata["parents"] = {dest: src.id}
    if isinstance(store, GitCheckpointStore):  # time travel asked for: whatever the head is now, it is superseded
        return store.put(CheckpointConfig(thread_id=dest), forked, metadata, forked.state_versions,
                         expected_head=store.head(dest))
    return store.put(CheckpointConfig(thread_id=dest), forked, metadata, forked.state_versions)


def fork_thread(store: GitCheckpointStore, sha: str, new: str) -> CheckpointConfig:
    """Fork thread ``new`` from checkpoint commit ``sha``; returns the new head's config.

    Raises :class:`~qvc.errors.CheckpointConflictError` if ``new`` exists, and what
    :func:`fork_checkpoint` raises.
    """
    if store.head(new) is not None:
        raise CheckpointConflictError(f"thread {new!r} already exists")
    info = store.commit_info(sha)
    return fork_checkpoint(store, CheckpointConfig(info.thread_id or "", sha), new)


def list_fork_history(store: CheckpointStore, config: CheckpointConfig, max_depth: int = 100) -> List[CheckpointTuple]:
    """The addressed checkpoint and its ancestors through ``parent_config``, newest first (at most
    ``max_depth``). Reads only."""
    out: List[CheckpointTuple] = []
    seen = set()
    current = store.get_tuple(config)
    while current is not None and len(out) < max_depth and current.checkpoint.id not in seen:
        seen.add(current.checkpoint.id)
        out.append(current)
        current = store.get_tuple(current.parent_config) if current.parent_config else None
    return out
