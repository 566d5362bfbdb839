"""The abstract checkpoint store, compatible with QitOS's ``CheckpointStore``.

Subclasses implement the five sync methods. The async twins run them in a worker thread
(``asyncio.to_thread``), so they never block the event loop.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Iterator, List, Optional, Sequence

from qvc.types import Checkpoint, CheckpointConfig, CheckpointMetadata, CheckpointTuple, PendingWrite, StateVersions


async def _in_thread(fn, *args: Any) -> Any:
    import asyncio  # imported on first use: it costs a tenth of a second at start-up

    return await asyncio.to_thread(fn, *args)


class CheckpointStore(ABC):
    """Stores checkpoints of threads; see :class:`qvc.GitCheckpointStore` for the git-backed one."""

    @abstractmethod
    def put(self, config: CheckpointConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: StateVersions) -> CheckpointConfig:
        """Store ``checkpoint``; return ``CheckpointConfig(thread_id, checkpoint.id)``."""

    @abstractmethod
    def get_tuple(self, config: CheckpointConfig) -> Optional[CheckpointTuple]:
        """The addressed checkpoint (the thread's latest without an id), or ``None``."""

    @abstractmethod
    def list(self, config: CheckpointConfig, *, limit: Optional[int] = None,
             before: Optional[str | CheckpointConfig] = None) -> Iterator[CheckpointTuple]:
        """The thread's checkpoints, newest first (after ``before``: a checkpoint id, or a config naming one)."""

    @abstractmethod
    def put_writes(self, config: CheckpointConfig, writes: Sequence[PendingWrite], task_id: str) -> None:
        """Attach intermediate writes to the addressed checkpoint."""

    @abstractmethod
    def delete(self, config: CheckpointConfig) -> None:
        """Delete the addressed checkpoint."""

    def session_capabilities(self) -> frozenset:
        """QitOS's optional Session protocol: qvc offers none of its capabilities (empty set)."""
        return frozenset()

    def get(self, config: CheckpointConfig) -> Optional[Checkpoint]:
        found = self.get_tuple(config)
        return None if found is None else found.checkpoint

    async def aput(self, config: CheckpointConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: StateVersions) -> CheckpointConfig:
        return await _in_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aget_tuple(self, config: CheckpointConfig) -> Optional[CheckpointTuple]:
        return await _in_thread(self.get_tuple, config)

    async def aget(self, config: CheckpointConfig) -> Optional[Checkpoint]:
        return await _in_thread(self.get, config)

    async def alist(self, config: CheckpointConfig, *, limit: Optional[int] = None,
                    before: Optional[str] = None, **kwargs: Any) -> List[CheckpointTuple]:
        return await _in_thread(lambda: list(self.list(config, limit=limit, before=before, **kwargs)))

    async def aput_writes(self, config: CheckpointConfig, writes: Sequence[PendingWrite], task_id: str) -> None:
        await _in_thread(self.put_writes, config, writes, task_id)

    async def adelete(self, config: CheckpointConfig) -> None:
        await _in_thread(self.delete, config)
