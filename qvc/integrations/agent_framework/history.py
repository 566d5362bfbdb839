"""``QvcHistoryProvider``: Microsoft Agent Framework's agent-side ``HistoryProvider`` on a qvc repository.

``Agent(client, context_providers=[QvcHistoryProvider("agent.qvc")])``: every ``AgentSession``'s
conversation is the thread ``maf/chat/<session id>`` (:mod:`.history_layout`), each save of messages
one commit holding the messages as the framework's ``Message.to_dict()`` writes them. A new process
resumes a conversation from the repository alone: ``agent.create_session(session_id="...")`` (or
``AgentSession.from_dict``) and the next ``agent.run`` loads the history from qvc.

- ``get_messages(session_id, *, state=None)`` reads the thread's head (``[]`` before the first save).
- ``save_messages(session_id, messages, *, state=None)`` appends the messages not stored yet (a message
  whose ``message_id`` is stored already, or a replay of the whole stored history at the start of
  ``messages``, is not stored twice): one checkpoint, a compare-and-swap on the thread's head, tried
  again on the new head when another writer moved it; durable on return in SYNC mode. The framework
  saves once per run (inputs and responses, after ``before_run`` loaded the history), or once per
  model call with ``Agent(..., require_per_service_call_history_persistence=True)``: then every tool
  step of a run is a commit of its own.
- :meth:`QvcHistoryProvider.replace` writes a new list (a compaction of the framework's), the older
  ones kept in the thread's history; :meth:`QvcHistoryProvider.clear` is a qvc delete of the thread
  (``delete_thread``; the bytes go at ``qvc gc --prune``). :meth:`QvcHistoryProvider.sessions` lists
  the sessions kept.

Store calls run in a worker thread; a write runs to its end even when the awaiting task is
cancelled, so its outcome is known.

Imports the framework (``agent_framework``), :mod:`qvc.store`, :mod:`qvc.types`, :mod:`qvc.errors` and
:mod:`.history_layout`.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from typing import Any, Callable, ClassVar, Dict, List, Optional, Sequence, Tuple

from agent_framework import HistoryProvider, Message

from qvc.errors import (
    CheckpointConflictError,
    CorruptionError,
    InvalidInputError,
    SerializationError,
    StoreClosedError,
    UnknownThreadError,
)
from qvc.integrations.agent_framework.history_layout import (
    MESSAGES,
    SESSION,
    SOURCE,
    chat_session_of,
    chat_thread,
    session_id_of,
)
from qvc.integrations.blocking import finish
from qvc.integrations.contention import pause
from qvc.store.git_store import GitCheckpointStore
from qvc.types import Checkpoint, CheckpointConfig, DurabilityMode

#: How often a save is tried again when another writer moved the session's head meanwhile.
_RETRIES = 50

__all__ = ["QvcHistoryProvider"]

Plain = Dict[str, Any]


def _plain(messages: Sequence[Any], what: str) -> List[Plain]:
    """``messages`` (``Message`` objects or their dicts) as JSON holds them."""
    out = []
    for i, m in enumerate(messages):
        if isinstance(m, Message):
            m = m.to_dict()
        if not isinstance(m, dict):
            raise InvalidInputError(f"{what}: message {i} is not a Message, but {type(m).__name__}")
        out.append(m)
    try:
        return json.loads(json.dumps(out))
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{what}: a message is not JSON: {exc}") from None


def _new(existing: List[Plain], incoming: List[Plain]) -> List[Plain]:
    """The messages of ``incoming`` not stored yet: after a replay of the whole stored history at its
    start, and without those whose ``message_id`` is stored already."""
    if existing and incoming[:len(existing)] == existing:
        incoming = incoming[len(existing):]
    ids = {m.get("message_id") for m in existing if m.get("message_id")}
    return [m for m in incoming if not (m.get("message_id") and m.get("message_id") in ids)]


class QvcHistoryProvider(HistoryProvider):
    """The framework's ``HistoryProvider`` on a qvc repository (see the module docstring).

    ``QvcHistoryProvider(path)`` opens (or creates) the repository at ``path`` and closes it in
    :meth:`close`; ``QvcHistoryProvider(store=store)`` uses an open :class:`~qvc.GitCheckpointStore`
    and leaves it open. ``durability`` is the store's (``"sync"``, the default: every save is durable
    when it returns; ``"async"``; ``"exit"``). ``source_id``, ``load_messages``, ``store_inputs``,
    ``store_context_messages``, ``store_context_from`` and ``store_outputs`` as the framework's
    ``HistoryProvider`` takes them; ``skip_excluded`` as ``InMemoryHistoryProvider``'s (leave out
    messages a ``CompactionProvider`` marked ``_excluded``).
    """

    DEFAULT_SOURCE_ID: ClassVar[str] = "qvc_history"

    def __init__(self, path: Any = "agent.qvc", *, store: Optional[GitCheckpointStore] = None,
                 durability: DurabilityMode | str = DurabilityMode.SYNC, source_id: Optional[str] = None,
                 load_messages: bool = True, store_inputs: bool = True, store_context_messages: bool = False,
                 store_context_from: Optional[set] = None, store_outputs: bool = True,
                 skip_excluded: bool = False) -> None:
        super().__init__(source_id or self.DEFAULT_SOURCE_ID, load_messages=load_messages, store_inputs=store_inputs,
                         store_context_messages=store_context_messages, store_context_from=store_context_from,
                         store_outputs=store_outputs)
        self.skip_excluded = skip_excluded
        self._own = store is None
        self.store = store if store is not None else GitCheckpointStore(path, durability=durability)
        self.path = self.store.path
        self._lock = threading.RLock()
        self._cache: Dict[str, Tuple[str, int, List[Plain]]] = {}

    def __repr__(self) -> str:
        return f"QvcHistoryProvider({str(self.path)!r})"

    # -- the HistoryProvider protocol ----------------------------------------------------------

    async def get_messages(self, session_id: Optional[str], *, state: Optional[Dict[str, Any]] = None,
                           **kwargs: Any) -> List[Message]:
        """The session's stored messages, oldest first (``[]`` before its first save)."""
        messages = [Message.from_dict(m) for m in await asyncio.to_thread(self.message_dicts, session_id)]
        if self.skip_excluded:
            messages = [m for m in messages if not m.additional_properties.get("_excluded", False)]
        return messages

    async def save_messages(self, session_id: Optional[str], messages: Sequence[Message], *,
                            state: Optional[Dict[str, Any]] = None, **kwargs: Any) -> None:
        """Append the messages not stored yet: one checkpoint (none when all are stored already)."""
        self._check_open()
        sid = session_id_of(session_id)
        if not messages:
            return
        plain = _plain(messages, f"session {sid!r}")

        def change(existing: List[Plain]):
            added = _new(existing, plain)
            return (existing + added, {"added": len(added)}) if added else None
        await finish(self._change, sid, "save", change)

    # -- beyond the protocol -------------------------------------------------------------------

    async def replace(self, session_id: Optional[str], messages: Sequence[Message]) -> None:
        """Make ``messages`` the session's whole history (a compaction): one checkpoint; the messages
        it drops stay in the thread's history."""
        self._check_open()
        sid = session_id_of(session_id)
        plain = _plain(messages, f"session {sid!r}")
        await finish(self._change, sid, "replace",
                     lambda existing: None if existing == plain else (plain, {"replaced": len(existing)}))

    async def clear(self, session_id: Optional[str]) -> None:
        """Forget the session's history: a qvc delete of its thread (nothing for an unknown one)."""
        self._check_open()
        await finish(self._clear, session_id_of(session_id))

    def _clear(self, sid: str) -> None:
        with self._lock:
            self._cache.pop(sid, None)
            try:
                self.store.delete_thread(chat_thread(sid))
            except UnknownThreadError:
                pass

    def sessions(self) -> List[str]:
        """The ids of the sessions whose history the repository keeps, sorted."""
        return sorted(s for s in map(chat_session_of, self.store.threads()) if s is not None)

    def message_dicts(self, session_id: Optional[str]) -> List[Plain]:
        """The session's stored messages as ``Message.to_dict()`` dicts (new ones), without the event loop."""
        return json.loads(json.dumps(self._read(session_id_of(session_id))[2]))

    def head(self, session_id: Optional[str]) -> Optional[str]:
        """The checkpoint id of the session's newest checkpoint, or ``None``."""
        sha = self.store.head(chat_thread(session_id))
        return self.store.commit_info(sha).checkpoint_id if sha else None

    def _check_open(self) -> None:
        if self.store.closed:
            raise StoreClosedError(f"{self!r} is closed")

    def _read(self, sid: str) -> Tuple[Optional[str], int, List[Plain]]:
        """``(head SHA, step, messages)`` of the session now (``(None, -1, [])``: no checkpoint yet)."""
        with self._lock:
            sha = self.store.head(chat_thread(sid))
            if sha is None:
                return None, -1, []
            cached = self._cache.get(sid)
            if cached is not None and cached[0] == sha:
                return cached
            t = self.store.read(sha)
            messages = t.checkpoint.state_data.get(MESSAGES, [])
            if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
                raise CorruptionError(f"session {sid!r} at {t.checkpoint.id}: field {MESSAGES!r} is not a list "
                                      "of messages")
            self._cache[sid] = (sha, t.checkpoint.step, messages)
            return self._cache[sid]

    def _change(self, sid: str, op: str, change: Callable[[List[Plain]], Any]) -> None:
        """Apply ``change(messages) -> (messages, metadata)`` (or ``None``: nothing to write) to the
        session's head as one checkpoint, a compare-and-swap on the head, tried again on the new head
        when another writer moved it."""
        thread = chat_thread(sid)
        with self._lock:
            for attempt in range(_RETRIES):
                sha, step, existing = self._read(sid)
                planned = change(existing)
                if planned is None:
                    return
                messages, extra = planned
                checkpoint = Checkpoint(id=uuid.uuid4().hex, thread_id=thread, step=step + 1,
                                        state_data={SESSION: sid, MESSAGES: messages})
                metadata = {"source": SOURCE, "session_id": sid, "op": op, "messages": len(messages),
                            "time": time.time(), **extra}
                try:
                    self.store.put(CheckpointConfig(thread), checkpoint, metadata, expected_head=sha)
                except CheckpointConflictError:
                    self._cache.pop(sid, None)
                    pause(attempt)
                    continue
                return
            raise CheckpointConflictError(f"session {sid!r}: other writers kept moving its head")

    def close(self) -> None:
        """Close the repository if this provider opened it (idempotent)."""
        if self._own:
            self.store.close()

    def __enter__(self) -> QvcHistoryProvider:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
