"""``QvcFlowPersistence``: CrewAI's ``FlowPersistence`` for flows, kept in a qvc repository.

``@persist(QvcFlowPersistence("agent.qvc"))`` on a flow or a method, or
``MyFlow(persistence=QvcFlowPersistence("agent.qvc"))``, or for every flow of the process
``set_flow_persistence_factory(lambda: persistence)`` (CrewAI's public setter): each flow (its
state's ``id``, CrewAI's ``flow_uuid``) is the thread ``crewai/flow/<flow_uuid>`` and each saved
state one checkpoint whose fields are the state's keys (:mod:`.layout`).

- ``save_state`` appends one checkpoint on the flow's thread (its parent: the thread's head at the
  moment of the write, so concurrent listeners of one flow each add theirs); durable on return in
  SYNC mode. ``load_state`` reads the head's fields.
- ``save_pending_feedback`` stores the state and the pending-feedback context in one transaction
  (the context as the thread's record); ``load_pending_feedback`` returns both until
  ``clear_pending_feedback`` empties the record (the checkpoints stay: the pause is history).
- ``delete_flow`` deletes the flow's thread (qvc's ``delete_thread``; commits stay until
  ``qvc gc --prune``).

It is a pydantic model, as CrewAI's stores are: a flow's checkpoint serializes it as
``{"persistence_type": "QvcFlowPersistence", "path": ..., "durability": ...}`` and CrewAI rebuilds
it from that (its registry of ``FlowPersistence`` subclasses by class name) once this module is
imported.

Imports CrewAI (``crewai.flow.persistence``), pydantic, :mod:`qvc.store`, :mod:`qvc.types`,
:mod:`qvc.errors` and :mod:`.layout`.
"""

from __future__ import annotations

import json
import threading
import uuid
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

from crewai.flow.persistence.base import FlowPersistence
from pydantic import BaseModel, Field, PrivateAttr

from qvc.errors import CheckpointConflictError, CorruptionError, InvalidInputError
from qvc.integrations.crewai._common import RepositoryOwner, json_default, state_fields
from qvc.integrations.crewai.layout import FLOW_SOURCE, flow_of, flow_thread
from qvc.store.git_store import GitCheckpointStore
from qvc.types import Checkpoint, CheckpointConfig, DurabilityMode

if TYPE_CHECKING:
    from crewai.flow.async_feedback.types import PendingFeedbackContext

#: How often a pending-feedback write is tried again when another writer changed the record meanwhile.
_RETRIES = 20


class QvcFlowPersistence(RepositoryOwner, FlowPersistence):
    """CrewAI's ``FlowPersistence`` on a qvc repository, the pending-feedback methods included (see
    the module docstring).

    ``QvcFlowPersistence(path)`` opens (or creates) the repository at ``path`` on first use and
    closes it in :meth:`close`; ``QvcFlowPersistence(store=store)`` uses an open
    :class:`~qvc.GitCheckpointStore` and leaves it open (one repository shared with other
    adapters). ``durability`` is the store's: ``"sync"`` (the default), ``"async"`` or ``"exit"``.
    """

    persistence_type: str = Field(default="QvcFlowPersistence")
    path: str = Field(default="flows.qvc", description="The qvc repository's path.")
    durability: str = Field(default=DurabilityMode.SYNC.value)

    _store: Optional[GitCheckpointStore] = PrivateAttr(default=None)
    _own: bool = PrivateAttr(default=True)
    _lock: Any = PrivateAttr(default_factory=threading.RLock)
    _cache: Dict[str, Tuple[str, Dict[str, Any]]] = PrivateAttr(default_factory=dict)


    # -- FlowPersistence -------------------------------------------------------------------------

    def init_db(self) -> None:
        """Open (or create) the repository."""
        self.store  # noqa: B018 - opening is the point

    def save_state(self, flow_uuid: str, method_name: str, state_data: Dict[str, Any] | BaseModel) -> None:
        """Store the flow's state after ``method_name`` completed: one checkpoint on the flow's
        thread. Raises :class:`~qvc.errors.InvalidInputError` for a bad id or state and
        :class:`~qvc.errors.SerializationError` for a state JSON cannot hold."""
        thread = flow_thread(flow_uuid)
        fields = state_fields(state_data, f"flow {flow_uuid!r}")
        store = self.store
        with self._lock:
            head = store.head(thread)
            checkpoint = Checkpoint(id=uuid.uuid4().hex, thread_id=thread, step=self._next_step(head),
                                    state_data=fields)
            store.put(CheckpointConfig(thread), checkpoint, self._metadata("save", flow_uuid, method_name))

    def load_state(self, flow_uuid: str) -> Optional[Dict[str, Any]]:
        """The flow's newest state (a new dict), or ``None`` for a flow never saved (or deleted)."""
        thread = flow_thread(flow_uuid)
        sha = self.store.head(thread)
        return None if sha is None else self._state(sha, thread)

    def save_pending_feedback(self, flow_uuid: str, context: PendingFeedbackContext,
                              state_data: Dict[str, Any] | BaseModel) -> None:
        """Store the state (one checkpoint, ``op: pending_feedback``) and the pending-feedback
        ``context`` as the flow's record, in one transaction."""
        thread = flow_thread(flow_uuid)
        fields = state_fields(state_data, f"flow {flow_uuid!r}")
        method = getattr(context, "method_name", None)
        try:
            context_data = json.loads(json.dumps(context.to_dict(), default=json_default))
        except (AttributeError, TypeError, ValueError) as exc:
            raise InvalidInputError(f"flow {flow_uuid!r}: the pending-feedback context does not serialize: {exc}") \
                from None
        store = self.store
        with self._lock:
            for _ in range(_RETRIES):
                record = store.thread_record(thread)
                head = store.head(thread)
                parent = store.commit_info(head).checkpoint_id if head else None
                checkpoint = Checkpoint(id=uuid.uuid4().hex, thread_id=thread, step=self._next_step(head),
                                        state_data=fields, parent_id=parent)
                data = json.dumps({"checkpoint": checkpoint.id, "context": context_data}).encode()
                metadata = self._metadata("pending_feedback", flow_uuid, method)
                try:
                    store.put_record(thread, data, expected=record, checkpoints=[(checkpoint, metadata)],
                                     head=checkpoint.id)
                    return
                except CheckpointConflictError:
                    continue
            raise CheckpointConflictError(f"flow {flow_uuid!r}: other writers kept changing its pending feedback")

    def load_pending_feedback(self, flow_uuid: str) -> Optional[Tuple[Dict[str, Any], PendingFeedbackContext]]:
        """``(state, context)`` of the flow's pending feedback, or ``None`` when none is pending."""
        from crewai.flow.async_feedback.types import PendingFeedbackContext

        thread = flow_thread(flow_uuid)
        record = self._record(thread)
        if record is None:
            return None
        state = self.store.read(self.store.resolve(record["checkpoint"])).checkpoint.state_data
        return state, PendingFeedbackContext.from_dict(record["context"])

    def clear_pending_feedback(self, flow_uuid: str) -> None:
        """Forget the flow's pending feedback (its record emptied; its checkpoints stay)."""
        thread = flow_thread(flow_uuid)
        store = self.store
        with self._lock:
            for _ in range(_RETRIES):
                record = store.thread_record(thread)
                if not record:
                    return
                head = store.head(thread)
                try:
                    store.put_record(thread, b"", expected=record, checkpoints=[],
                                     head=store.commit_info(head).checkpoint_id if head else None)
                    return
                except CheckpointConflictError:
                    continue
            raise CheckpointConflictError(f"flow {flow_uuid!r}: other writers kept changing its pending feedback")

    # -- beyond the interface --------------------------------------------------------------------

    def thread(self, flow_uuid: str) -> str:
        """The qvc thread of the flow ``flow_uuid``."""
        return flow_thread(flow_uuid)

    def flows(self) -> list:
        """The ids of every flow the repository holds, sorted."""
        return sorted(f for f in map(flow_of, self.store.threads()) if f is not None)

    def delete_flow(self, flow_uuid: str) -> None:
        """Delete the flow's thread and its pending feedback (qvc's ``delete_thread``: the commits stay
        until ``qvc gc --prune`` / ``purge``). Nothing happens for a flow never saved."""
        thread = flow_thread(flow_uuid)
        with self._lock:
            self.store.delete_threads([thread], missing_ok=True)
            self._cache.pop(thread, None)

    def close(self) -> None:
        """Close the repository if this object opened it (idempotent)."""
        with self._lock:
            if self._own and self._store is not None:
                self._store.close()

    def __enter__(self) -> QvcFlowPersistence:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- reading ---------------------------------------------------------------------------------

    def _next_step(self, head: Optional[str]) -> int:
        return 0 if head is None else (self.store.commit_info(head).step or 0) + 1

    @staticmethod
    def _metadata(op: str, flow_uuid: str, method: Optional[str]) -> Dict[str, Any]:
        return {"source": FLOW_SOURCE, "op": op, "flow_uuid": flow_uuid, "method": method}

    def _state(self, sha: str, thread: str) -> Dict[str, Any]:
        with self._lock:
            cached = self._cache.get(thread)
            if cached is None or cached[0] != sha:
                cached = (sha, self.store.read(sha).checkpoint.state_data)
                self._cache[thread] = cached
            return json.loads(json.dumps(cached[1]))  # a new dict each time: callers change it

    def _record(self, thread: str) -> Optional[Dict[str, Any]]:
        raw = self.store.thread_record(thread)
        if not raw:
            return None
        try:
            record = json.loads(raw)
        except ValueError:
            record = None
        if not isinstance(record, dict) or not isinstance(record.get("checkpoint"), str) \
                or not isinstance(record.get("context"), dict):
            raise CorruptionError(f"thread {thread!r}: its pending-feedback record does not read")
        return record
