"""Engine-side helpers with QitOS's names: ``DurabilityManager`` and ``PendingWriteManager``.

They wrap any :class:`~qvc.store.base.CheckpointStore`. With :class:`qvc.GitCheckpointStore`,
prefer the store's own ``durability`` setting, which is crash-safe; these managers exist so
that engines written against QitOS run unchanged.
"""

from __future__ import annotations

import atexit
import queue
import threading
from typing import Any, Dict, List, Optional, Tuple

from qvc.errors import DurabilityError
from qvc.store.base import CheckpointStore
from qvc.types import Checkpoint, CheckpointConfig, CheckpointMetadata, DurabilityMode, PendingWrite, StateVersions


class DurabilityManager:
    """Calls ``store.put`` now (SYNC), on a background thread (ASYNC) or at ``flush()`` (EXIT).

    ``put`` returns ``CheckpointConfig(thread_id, checkpoint.id)`` at once in every mode.
    A failed background put is raised by the next ``put`` or by ``flush()``, never dropped.
    """

    def __init__(self, store: CheckpointStore, mode: DurabilityMode = DurabilityMode.SYNC):
        self.store = store
        self.mode = mode
        self._buffer: List[Tuple[Any, ...]] = []
        self._queue: queue.Queue[Optional[Tuple[Any, ...]]] = queue.Queue()
        self._errors: List[BaseException] = []
        self._lock = threading.Lock()
        self._worker: Optional[threading.Thread] = None
        if mode is DurabilityMode.ASYNC:
            self._worker = threading.Thread(target=self._drain, name="qvc-durability", daemon=True)
            self._worker.start()
        if mode is DurabilityMode.EXIT:
            atexit.register(self._flush_quietly)

    def _drain(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                self._apply(item)
            finally:
                self._queue.task_done()

    def _apply(self, item: Tuple[Any, ...]) -> None:
        try:
            self.store.put(*item)
        except BaseException as exc:
            with self._lock:
                self._errors.append(exc)

    def _raise_errors(self) -> None:
        with self._lock:
            errors, self._errors = self._errors, []
        if errors:
            raise DurabilityError(f"{len(errors)} checkpoint put(s) failed: {errors[0]}") from errors[0]

    def put(self, config: CheckpointConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: StateVersions) -> CheckpointConfig:
        self._raise_errors()
        item = (config, checkpoint, metadata, new_versions)
        if self.mode is DurabilityMode.SYNC:
            return self.store.put(*item)
        if self.mode is DurabilityMode.ASYNC:
            self._queue.put(item)
        else:
            with self._lock:
                self._buffer.append(item)
        return CheckpointConfig(config.thread_id, checkpoint.id)

    def flush(self) -> None:
        """Write everything accepted so far (and flush the store if it can); raise failures."""
        with self._lock:
            buffered, self._buffer = self._buffer, []
        for item in buffered:
            self._apply(item)
        if self._worker is not None:
            self._queue.join()
        flush = getattr(self.store, "flush", None)
        if callable(flush):
            flush()
        self._raise_errors()

    def _flush_quietly(self) -> None:
        try:
            self.flush()
        except Exception:
            pass

    def shutdown(self) -> None:
        self.flush()
        if self._worker is not None:
            self._queue.put(None)
            self._worker.join()
            self._worker = None


class PendingWriteManager:
    """Tracks tool results per task and stores them as pending writes of a checkpoint.

    A result completed against a checkpoint that does not exist yet (the first step of a
    run) stays staged in memory until :meth:`commit_writes` attaches it to a checkpoint.
    """

    def __init__(self, store: CheckpointStore):
        self.store = store
        self._pending: Dict[str, PendingWrite] = {}
        self._staged: Dict[str, bool] = {}  # task id -> completed but not yet stored
        self._lock = threading.Lock()

    def begin_task(self, task_id: str, channel: str) -> None:
        with self._lock:
            self._pending[task_id] = PendingWrite(task_id, channel, None)
            self._staged.pop(task_id, None)

    def complete_task(self, task_id: str, value: Any, config: CheckpointConfig) -> None:
        """Record the task's result and store it against ``config`` if that checkpoint exists.

        Raises ``KeyError`` if the task was never begun.
        """
        with self._lock:
            if task_id not in self._pending:
                raise KeyError(f"task {task_id!r} was not begun")
            write = PendingWrite(task_id, self._pending[task_id].channel, value)
            self._pending[task_id] = write
            self._staged[task_id] = True
        if self.store.get_tuple(config) is not None:
            self._store([write], config)

    def _store(self, writes: List[PendingWrite], config: CheckpointConfig) -> None:
        for w in writes:
            self.store.put_writes(config, [w], task_id=w.task_id)
            with self._lock:
                self._staged[w.task_id] = False

    def get_pending(self, task_id: str) -> Any:
        with self._lock:
            write = self._pending.get(task_id)
        return None if write is None else write.value

    def commit_writes(self, config: CheckpointConfig) -> None:
        """Store every staged (completed, not yet stored) write against ``config``."""
        with self._lock:
            writes = [self._pending[t] for t, staged in self._staged.items() if staged]
        self._store(writes, config)

    def load_pending_from_store(self, config: CheckpointConfig) -> Dict[str, Any]:
        """``{task_id: value}`` of the writes stored against ``config``."""
        found = self.store.get_tuple(config)
        writes = (found.pending_writes or []) if found else []
        with self._lock:
            for w in writes:
                self._pending[w.task_id] = w
                self._staged[w.task_id] = False
        return {w.task_id: w.value for w in writes}

    def clear_task(self, task_id: str) -> None:
        with self._lock:
            self._pending.pop(task_id, None)
            self._staged.pop(task_id, None)

    def reset(self) -> None:
        with self._lock:
            self._pending.clear()
            self._staged.clear()
