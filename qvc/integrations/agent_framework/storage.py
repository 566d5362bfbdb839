"""``QvcCheckpointStorage``: Microsoft Agent Framework's workflow ``CheckpointStorage`` in a qvc repository.

``WorkflowBuilder(..., checkpoint_storage=QvcCheckpointStorage("workflows.qvc"))`` (or
``workflow.run(..., checkpoint_storage=...)``): every checkpoint the framework takes at a superstep
boundary is one commit on the workflow's thread (:mod:`.layout`), and a resume, in this process or
another, loads it back from the repository.

- **Parents.** A checkpoint's first parent is the checkpoint its ``previous_checkpoint_id`` names.
  When that is the thread's head (the usual case) the commit extends the thread; when it is an older
  checkpoint (``workflow.run(checkpoint_id=...)`` from an earlier superstep, then new supersteps) the
  new commit is qvc's **time travel**: the thread's head moves onto the new line and the line it left
  is kept as a superseded line, so no checkpoint is lost (``qvc log --all``, ``list_checkpoints``).
  A checkpoint that names no previous one (a fresh ``run`` of a new workflow object) extends the
  thread's head, as every qvc write without a parent does; so does one whose previous checkpoint is
  no longer in the repository (deleted). Its ``previous_checkpoint_id`` is kept as the framework gave
  it either way.
- **Writes.** Each ``save`` is one transaction and a compare-and-swap on the thread's head, tried
  again on the new head when another writer (a concurrent run of the same workflow, another
  process) moved it; durable on return in SYNC mode. The framework's runner logs a failed save and
  runs on: the storage also logs it at error level and records it where ``qvc status`` shows it.
- **Ids.** The checkpoint id is the framework's; saving an id again with the same content does
  nothing, with other content raises ``CheckpointConflictError`` (qvc never rewrites a checkpoint).
- **Reads.** ``load`` finds a checkpoint by its id anywhere in the repository; ``list_checkpoints``
  and ``list_checkpoint_ids`` give every checkpoint of the workflow still reachable, superseded lines
  included, oldest first by the framework's timestamps; ``get_latest`` is the thread's head.
- **Deletes** are qvc deletes (``GitCheckpointStore.delete``): the checkpoint's children are
  re-parented onto its parent (their ids and contents stay), and its bytes go at ``qvc gc --prune``.

Store calls run in a worker thread; a write runs to its end even when the awaiting task is
cancelled, so its outcome is known.

Imports the framework (``agent_framework``), :mod:`qvc.store`, :mod:`qvc.types`, :mod:`qvc.errors`,
:mod:`qvc.runs.failures`, :mod:`.layout` and :mod:`.codec`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple, TypeVar

from agent_framework import WorkflowCheckpoint

from qvc.errors import (
    AmbiguousNameError,
    CheckpointConflictError,
    InvalidInputError,
    QvcError,
    StoreClosedError,
    UnknownCheckpointError,
)
from qvc.integrations.agent_framework.codec import (
    CheckpointDecodingError,
    CheckpointEncodingError,
    CheckpointNotFoundError,
    InvalidCheckpointError,
    bookkeeping,
    check_checkpoint,
    decode_checkpoint,
    encode_checkpoint,
    is_workflow_checkpoint,
)
from qvc.integrations.agent_framework.layout import check_name, workflow_thread
from qvc.integrations.contention import pause
from qvc.runs.failures import record_failure
from qvc.store.git_store import GitCheckpointStore
from qvc.types import Checkpoint, CheckpointConfig, CheckpointTuple, DurabilityMode

_T = TypeVar("_T")
#: How often a save is tried again when another writer moved the workflow's head meanwhile.
_RETRIES = 50

log = logging.getLogger(__name__)

__all__ = ["CheckpointDecodingError", "CheckpointEncodingError", "CheckpointNotFoundError",
           "InvalidCheckpointError", "QvcCheckpointStorage"]


def _sort_key(timestamp: Any) -> Tuple[int, float]:
    """The framework's timestamps in order (ISO 8601; naive ones are UTC, as the framework reads them)."""
    if isinstance(timestamp, str):
        try:
            dt = datetime.fromisoformat(timestamp)
            return 0, (dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)).timestamp()
        except ValueError:
            pass
    return 1, 0.0


async def _in_thread(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` in the loop's default executor; when the awaiting task is cancelled, the call
    still runs to its end before the cancellation goes on (a write's outcome is never unknown)."""
    future = asyncio.get_running_loop().run_in_executor(None, functools.partial(fn, *args))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        while not future.done():
            try:
                await asyncio.wait([future])
            except asyncio.CancelledError:
                continue
        raise


class QvcCheckpointStorage:
    """The framework's ``CheckpointStorage`` protocol on a qvc repository (see the module docstring).

    ``QvcCheckpointStorage(path)`` opens (or creates) the repository at ``path`` and closes it in
    :meth:`close`; ``QvcCheckpointStorage(store=store)`` uses an open
    :class:`~qvc.GitCheckpointStore` and leaves it open (one repository shared with other adapters).
    ``durability`` is the store's: ``"sync"`` (the default: a checkpoint is on stable storage when
    ``save`` returns), ``"async"`` or ``"exit"``. ``allowed_checkpoint_types`` are the types, beyond
    the framework's safe set and its registered ones, that checkpoints may hold (``"module:qualname"``,
    as ``FileCheckpointStorage`` takes them).
    """

    def __init__(self, path: Any = "workflows.qvc", *, store: Optional[GitCheckpointStore] = None,
                 durability: DurabilityMode | str = DurabilityMode.SYNC,
                 allowed_checkpoint_types: Optional[Iterable[str]] = None) -> None:
        allowed = list(allowed_checkpoint_types or [])
        if not all(isinstance(t, str) and ":" in t for t in allowed):
            raise InvalidInputError(f"allowed_checkpoint_types are 'module:qualname' strings, not {allowed!r}")
        self._own = store is None
        self.store = store if store is not None else GitCheckpointStore(path, durability=durability)
        self.path = self.store.path
        self._allowed = frozenset(allowed)
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"QvcCheckpointStorage({self.path!r})"

    # -- the CheckpointStorage protocol ----------------------------------------------------------

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        """Store ``checkpoint`` (a snapshot of it as it is now) as one commit; returns its id. Durable on
        return in SYNC mode. Raises :class:`~.codec.InvalidCheckpointError` for something that is not a
        checkpoint, :class:`~.codec.CheckpointEncodingError` (naming the value's path) for a value that
        cannot be stored or would not load under the allowed types, both also the framework's
        ``WorkflowCheckpointException``; :class:`~qvc.errors.CheckpointConflictError` for an id stored
        with other content."""
        self._check_open()
        encoded = self._encode(checkpoint)  # on the caller's thread: the snapshot is taken now
        return await _in_thread(self._save_encoded, checkpoint, encoded)

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        """The checkpoint ``checkpoint_id`` (new objects). Raises :class:`CheckpointNotFoundError` (the
        framework's ``WorkflowCheckpointException``) when the repository has no workflow checkpoint with
        that id, :class:`~.codec.CheckpointDecodingError` when one does not decode."""
        return await _in_thread(self.load_sync, checkpoint_id)

    async def list_checkpoints(self, *, workflow_name: str) -> List[WorkflowCheckpoint]:
        """Every checkpoint of ``workflow_name`` still in the repository (its thread's line and the lines
        time travel left), oldest first by timestamp; new objects."""
        return await _in_thread(self.checkpoints, workflow_name)

    async def delete(self, checkpoint_id: str) -> bool:
        """Delete the checkpoint ``checkpoint_id`` as qvc deletes (children re-parented onto its parent,
        the bytes gone at ``qvc gc --prune``); ``False`` when there is none."""
        self._check_open()
        return await _in_thread(self.delete_sync, checkpoint_id)

    async def get_latest(self, *, workflow_name: str) -> Optional[WorkflowCheckpoint]:
        """The newest checkpoint of ``workflow_name`` (its thread's head), or ``None``."""
        return await _in_thread(self.latest, workflow_name)

    async def list_checkpoint_ids(self, *, workflow_name: str) -> List[str]:
        """The ids :meth:`list_checkpoints` lists, in the same order, without decoding the checkpoints."""
        return await _in_thread(self.checkpoint_ids, workflow_name)

    # -- the same, without an event loop ---------------------------------------------------------

    def save_sync(self, checkpoint: WorkflowCheckpoint) -> str:
        """:meth:`save` without the event loop."""
        self._check_open()
        return self._save_encoded(checkpoint, self._encode(checkpoint))

    def load_sync(self, checkpoint_id: str) -> WorkflowCheckpoint:
        """:meth:`load` without the event loop."""
        found = self._find(checkpoint_id)
        if found is None:
            raise CheckpointNotFoundError(f"No checkpoint found with ID {checkpoint_id}")
        return decode_checkpoint(checkpoint_id, self.store.read(found).checkpoint.state_data, self._allowed)

    def checkpoints(self, workflow_name: str) -> List[WorkflowCheckpoint]:
        """:meth:`list_checkpoints` without the event loop."""
        return [decode_checkpoint(t.checkpoint.id, t.checkpoint.state_data, self._allowed)
                for t in self._tuples(workflow_name)]

    def checkpoint_ids(self, workflow_name: str) -> List[str]:
        """:meth:`list_checkpoint_ids` without the event loop."""
        return [t.checkpoint.id for t in self._tuples(workflow_name)]

    def latest(self, workflow_name: str) -> Optional[WorkflowCheckpoint]:
        """:meth:`get_latest` without the event loop."""
        thread = workflow_thread(workflow_name)
        for t in self.store.list(CheckpointConfig(thread)):  # the head, unless another tool put something else there
            if self._mine(t, workflow_name):
                return decode_checkpoint(t.checkpoint.id, t.checkpoint.state_data, self._allowed)
        return None

    def delete_sync(self, checkpoint_id: str) -> bool:
        """:meth:`delete` without the event loop."""
        self._check_open()
        with self._lock:
            found = self._find(checkpoint_id)
            if found is None:
                return False
            thread = self.store.commit_info(found).thread_id
            self.store.delete(CheckpointConfig(thread, checkpoint_id))
            return True

    def thread(self, workflow_name: str) -> str:
        """The qvc thread of the workflow ``workflow_name``."""
        return workflow_thread(workflow_name)

    # -- reading and writing ---------------------------------------------------------------------

    def _check_open(self) -> None:
        if self.store.closed:
            raise StoreClosedError(f"{self!r} is closed")

    def _encode(self, checkpoint: Any) -> tuple:
        try:
            return encode_checkpoint(checkpoint, self._allowed)
        except (InvalidCheckpointError, CheckpointEncodingError) as exc:
            self._failed(checkpoint, exc)
            raise

    def _failed(self, checkpoint: Any, exc: QvcError) -> None:
        """The framework's runner only logs a failed save and runs on: say it here too, where
        ``qvc status`` reports it, so the gap in the workflow's history is not only in a log."""
        name = getattr(checkpoint, "workflow_name", None)
        log.error("qvc repository %s: saving checkpoint %s of workflow %r failed: %s", self.path,
                  getattr(checkpoint, "checkpoint_id", None), name, exc)
        try:
            record_failure(self.path, operation="agent-framework save", session_id=name if isinstance(name, str)
                           else None, cause=f"{type(exc).__name__}: {exc}")
        except OSError:
            pass

    def _save_encoded(self, checkpoint: WorkflowCheckpoint, encoded: tuple) -> str:
        cid, name = check_checkpoint(checkpoint)
        state, metadata, step = encoded
        thread = workflow_thread(name)
        prev = checkpoint.previous_checkpoint_id
        try:
            with self._lock:
                for attempt in range(_RETRIES):
                    head = self.store.head(thread)
                    parent = prev if prev is not None and self._find(prev) is not None else None
                    cp = Checkpoint(id=cid, thread_id=thread, step=step, state_data=state, parent_id=parent)
                    try:
                        self.store.put(CheckpointConfig(thread), cp, metadata, expected_head=head)
                        return cid
                    except CheckpointConflictError:
                        if self._find(cid) is not None:
                            raise  # the id is stored with other content: trying again changes nothing
                        pause(attempt)
                raise CheckpointConflictError(f"workflow {name!r}: other writers kept moving its thread's head")
        except QvcError as exc:
            self._failed(checkpoint, exc)
            raise

    def _find(self, checkpoint_id: Any) -> Optional[str]:
        """The commit of the workflow checkpoint ``checkpoint_id``, or ``None`` (an id only: not a
        commit SHA, a prefix, or a checkpoint another adapter wrote)."""
        if not isinstance(checkpoint_id, str) or not checkpoint_id:
            return None
        try:
            sha = self.store.resolve(checkpoint_id)
        except (UnknownCheckpointError, AmbiguousNameError, InvalidInputError):
            return None
        if self.store.commit_info(sha).checkpoint_id != checkpoint_id:
            return None
        return sha if is_workflow_checkpoint(self.store.tree_entries(sha)) else None

    @staticmethod
    def _mine(t: CheckpointTuple, workflow_name: str) -> bool:
        book = bookkeeping(t.checkpoint.state_data)
        return book is not None and book["workflow_name"] == workflow_name

    def _tuples(self, workflow_name: str) -> Sequence[CheckpointTuple]:
        """The workflow's checkpoints, oldest first by timestamp (ties: older on the line first)."""
        thread = workflow_thread(check_name(workflow_name))
        if self.store.head(thread) is None:
            return []
        found = [t for t in self.store.list(CheckpointConfig(thread), superseded=True) if self._mine(t, workflow_name)]
        found.reverse()
        return sorted(found, key=lambda t: _sort_key(bookkeeping(t.checkpoint.state_data).get("timestamp")))

    # -- the rest --------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the repository if this object opened it (idempotent)."""
        if self._own:
            self.store.close()

    def __enter__(self) -> QvcCheckpointStorage:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> QvcCheckpointStorage:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()
