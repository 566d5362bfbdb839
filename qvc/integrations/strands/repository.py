"""``QvcSessionManager`` / ``QvcSessionRepository``: Strands Agents' ``SessionRepository`` kept in a qvc repository.

``Agent(session_manager=QvcSessionManager("s1", "agent.qvc"))`` in place of
``FileSessionManager("s1", storage_dir=...)``: Strands' ``RepositorySessionManager`` (each message
appended as it is added, the agent's state synced after each invocation) over a qvc repository.
``QvcSessionRepository`` is the repository alone, for ``RepositorySessionManager(session_id,
session_repository=...)``. A session is a thread, each of its agents (and Graphs or Swarms) a
thread under it (:mod:`.layout`); every call that writes is one checkpoint, whose fields are the
session, or the agent's state, conversation manager state, internal state and messages.

What each call does, as Strands' ``FileSessionManager`` does it: ``create_session`` refuses a
session that exists; ``create_agent`` writes the agent (its messages stay); ``update_agent`` and
``update_message`` refuse what does not exist and keep its ``created_at``; ``create_message``
writes the message under its ``message_id`` (replacing one of the same id); ``list_messages``
returns them in ``message_id`` order. ``delete_session`` deletes the session's threads (qvc's
delete: the commits stay until ``qvc gc --prune``). A call that writes reads the thread's head and
writes its checkpoint in one transaction of the store, so two processes writing one session lose
nothing; messages are stored one blob each (:mod:`.entries`), so appending one writes that
message, not those before it. Errors are qvc's typed errors that are also Strands'
``SessionException`` (:mod:`.errors`).

Imports Strands (``strands.session``, ``strands.types``), :mod:`qvc.store`, :mod:`qvc.types`,
:mod:`qvc.errors` and :mod:`.layout`.
"""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar

from strands.session.repository_session_manager import RepositorySessionManager
from strands.session.session_repository import SessionRepository
from strands.types.session import Session, SessionAgent, SessionMessage

from qvc.errors import (
    CheckpointConflictError,
    CorruptionError,
    InvalidInputError,
    QvcError,
    SerializationError,
    StoreClosedError,
    UnknownThreadError,
)
from qvc.integrations.strands.entries import field_entries, header, next_step
from qvc.integrations.strands.errors import SessionException, as_strands
from qvc.integrations.strands.layout import SOURCE, repository_thread
from qvc.store.git_store import GitCheckpointStore
from qvc.types import CheckpointConfig, DurabilityMode

_T = TypeVar("_T")
State = Dict[str, Any]
#: The keys of ``SessionAgent.to_dict()`` kept as fields of their own (the rest go in ``agent``),
#: and the field each goes to.
_AGENT_FIELDS = {"state": "state", "conversation_manager_state": "conversation_manager_state",
                 "_internal_state": "internal_state"}


def _plain(value: Any, what: str) -> Any:
    """``value`` as JSON holds it (what Strands' file repository writes and reads back)."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{what} is not JSON: {exc}") from None


def _guarded(fn: Callable[..., _T]) -> Callable[..., _T]:
    """The repository call ``fn``, its qvc errors also Strands' ``SessionException``."""
    def call(self: QvcSessionRepository, *args: Any, **kwargs: Any) -> _T:
        try:
            return fn(self, *args, **kwargs)
        except QvcError as exc:
            raise as_strands(exc, SessionException) from exc.__cause__
    call.__name__, call.__qualname__, call.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
    return call


class QvcSessionRepository(SessionRepository):
    """Strands Agents' ``SessionRepository`` on a qvc repository (see the module docstring).

    ``QvcSessionRepository(path)`` opens (or creates) the repository at ``path`` and closes it in
    :meth:`close`; ``store=`` uses an open :class:`~qvc.GitCheckpointStore` and leaves it open.
    ``durability`` is the store's (``"sync"``, the default: a call is durable when it returns).
    """

    def __init__(self, path: Any = "agent.qvc", *, store: Optional[GitCheckpointStore] = None,
                 durability: DurabilityMode | str = DurabilityMode.SYNC):
        self._own = store is None
        self.store = store if store is not None else GitCheckpointStore(path, durability=durability)
        self.path = self.store.path
        self._lock = threading.RLock()
        self._cache: Dict[str, Tuple[str, State]] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r})"

    # -- sessions --------------------------------------------------------------------------------------

    @_guarded
    def create_session(self, session: Session, **kwargs: Any) -> Session:
        """Store a new session; :class:`~qvc.errors.CheckpointConflictError` if it exists."""
        thread = repository_thread(session.session_id)
        if self._state(thread) is not None:
            raise CheckpointConflictError(f"session {session.session_id!r} already exists")
        try:
            self._write(thread, lambda old: {"session": _plain(session.to_dict(), "the session")},
                        {"op": "create_session", "session_id": session.session_id}, new=True)
        except CheckpointConflictError:
            raise CheckpointConflictError(f"session {session.session_id!r} already exists") from None
        return session

    @_guarded
    def read_session(self, session_id: str, **kwargs: Any) -> Optional[Session]:
        """The session, or ``None``."""
        found = self._state(repository_thread(session_id))
        return None if found is None else Session.from_dict(self._field(found, "session", dict))

    @_guarded
    def delete_session(self, session_id: str, **kwargs: Any) -> None:
        """Delete the session's threads (its agents' and multi-agents' too), in one transaction;
        :class:`~qvc.errors.UnknownThreadError` if it does not exist."""
        base = repository_thread(session_id)
        self._check_open()
        with self._lock:
            threads = [t for t in self.store.threads() if t == base or t.startswith(base + "/")]
            if base not in threads:
                raise UnknownThreadError(f"session {session_id!r} does not exist")
            self.store.delete_threads(threads, missing_ok=True)
            for t in threads:
                self._cache.pop(t, None)

    # -- agents ----------------------------------------------------------------------------------------

    @_guarded
    def create_agent(self, session_id: str, session_agent: SessionAgent, **kwargs: Any) -> None:
        """Store the agent (its messages, if it had some, stay)."""
        thread = repository_thread(session_id, "agent", session_agent.agent_id)
        fields = self._agent_fields(session_agent)
        self._write(thread, lambda old: {**fields, "messages": old.get("messages", []) if old else []},
                    {"op": "create_agent", "session_id": session_id, "agent_id": session_agent.agent_id})

    @_guarded
    def read_agent(self, session_id: str, agent_id: str, **kwargs: Any) -> Optional[SessionAgent]:
        """The agent, or ``None``."""
        found = self._state(repository_thread(session_id, "agent", agent_id))
        if found is None:
            return None
        env = dict(self._field(found, "agent", dict))
        for key, name in _AGENT_FIELDS.items():
            env[key] = found[1].get(name, {})
        return SessionAgent.from_dict(env)

    @_guarded
    def update_agent(self, session_id: str, session_agent: SessionAgent, **kwargs: Any) -> None:
        """Store the agent anew, its ``created_at`` kept; :class:`~qvc.errors.UnknownThreadError` if
        it does not exist."""
        thread = repository_thread(session_id, "agent", session_agent.agent_id)

        def update(old: Optional[State]) -> State:
            if old is None:
                raise UnknownThreadError(f"agent {session_agent.agent_id!r} in session {session_id!r} does not exist")
            created = (old.get("agent") or {}).get("created_at")
            if created:
                session_agent.created_at = created
            return {**self._agent_fields(session_agent), "messages": old.get("messages", [])}

        self._write(thread, update, {"op": "update_agent", "session_id": session_id,
                                     "agent_id": session_agent.agent_id})

    @staticmethod
    def _agent_fields(session_agent: SessionAgent) -> State:
        env = _plain(session_agent.to_dict(), f"agent {session_agent.agent_id!r}")
        fields = {name: env.pop(key, {}) for key, name in _AGENT_FIELDS.items()}
        return {"agent": env, **fields}

    # -- messages --------------------------------------------------------------------------------------

    @_guarded
    def create_message(self, session_id: str, agent_id: str, session_message: SessionMessage, **kwargs: Any) -> None:
        """Store the message under its ``message_id`` (replacing one of that id);
        :class:`~qvc.errors.UnknownThreadError` if the agent does not exist."""
        thread = repository_thread(session_id, "agent", agent_id)
        mid = self._message_id(session_message)
        entry = _plain(session_message.to_dict(), f"message {mid}")
        self._write(thread, lambda old: self._with_message(old, entry, session_id, agent_id, replace_only=False),
                    {"op": "create_message", "session_id": session_id, "agent_id": agent_id, "message_id": mid})

    @_guarded
    def read_message(self, session_id: str, agent_id: str, message_id: int, **kwargs: Any) -> Optional[SessionMessage]:
        """The message of that id, or ``None``."""
        found = self._state(repository_thread(session_id, "agent", agent_id))
        if found is None:
            return None
        messages = self._field(found, "messages", list)
        at = self._find(messages, message_id)
        return None if at is None else SessionMessage.from_dict(messages[at])

    @_guarded
    def update_message(self, session_id: str, agent_id: str, session_message: SessionMessage, **kwargs: Any) -> None:
        """Replace the message of its ``message_id``, its ``created_at`` kept (a guardrail's
        redaction); :class:`~qvc.errors.UnknownThreadError` if it does not exist."""
        thread = repository_thread(session_id, "agent", agent_id)
        mid = self._message_id(session_message)

        def update(old: Optional[State]) -> State:
            at = None if old is None else self._find(old.get("messages") or [], mid)
            if old is None or at is None:
                raise UnknownThreadError(f"message {mid} of agent {agent_id!r} in session {session_id!r} "
                                         f"does not exist")
            created = old["messages"][at].get("created_at")
            if created:
                session_message.created_at = created
            entry = _plain(session_message.to_dict(), f"message {mid}")
            return self._with_message(old, entry, session_id, agent_id, replace_only=True)

        self._write(thread, update, {"op": "update_message", "session_id": session_id, "agent_id": agent_id,
                                     "message_id": mid})

    @_guarded
    def list_messages(self, session_id: str, agent_id: str, limit: Optional[int] = None, offset: int = 0,
                      **kwargs: Any) -> List[SessionMessage]:
        """The agent's messages in ``message_id`` order, from ``offset``, at most ``limit``;
        :class:`~qvc.errors.UnknownThreadError` if the agent does not exist."""
        for name, value in (("offset", offset), ("limit", limit)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise InvalidInputError(f"{name} must be a non-negative integer, not {value!r}")
        found = self._state(repository_thread(session_id, "agent", agent_id))
        if found is None:
            raise UnknownThreadError(f"agent {agent_id!r} in session {session_id!r} does not exist")
        messages = self._field(found, "messages", list)
        chosen = messages[offset:] if limit is None else messages[offset:offset + limit]
        return [SessionMessage.from_dict(m) for m in chosen]

    @staticmethod
    def _message_id(session_message: SessionMessage) -> int:
        mid = session_message.message_id
        if not isinstance(mid, int) or isinstance(mid, bool):
            raise InvalidInputError(f"message_id must be an integer, not {mid!r}")
        return mid

    @staticmethod
    def _find(messages: List[Any], message_id: int) -> Optional[int]:
        if 0 <= message_id < len(messages) and messages[message_id].get("message_id") == message_id:
            return message_id  # ids are usually positions
        return next((i for i, m in enumerate(messages) if m.get("message_id") == message_id), None)

    def _with_message(self, old: Optional[State], entry: Dict[str, Any], session_id: str, agent_id: str, *,
                      replace_only: bool) -> State:
        if old is None:
            raise UnknownThreadError(f"agent {agent_id!r} in session {session_id!r} does not exist")
        messages = list(old.get("messages") or [])
        mid = entry["message_id"]
        at = self._find(messages, mid)
        if at is not None:
            messages[at] = entry
        elif replace_only:
            raise UnknownThreadError(f"message {mid} of agent {agent_id!r} in session {session_id!r} does not exist")
        elif not messages or messages[-1].get("message_id", -1) < mid:
            messages.append(entry)
        else:
            messages.append(entry)
            messages.sort(key=lambda m: m.get("message_id", -1))
        return {**old, "messages": messages}

    # -- Graphs and Swarms -----------------------------------------------------------------------------

    @_guarded
    def create_multi_agent(self, session_id: str, multi_agent: Any, **kwargs: Any) -> None:
        """Store a Graph's or Swarm's state (``serialize_state()``)."""
        state = _plain(multi_agent.serialize_state(), f"multi-agent {multi_agent.id!r}")
        self._write(repository_thread(session_id, "multi_agent", multi_agent.id), lambda old: {"state": state},
                    {"op": "create_multi_agent", "session_id": session_id, "multi_agent_id": multi_agent.id})

    @_guarded
    def read_multi_agent(self, session_id: str, multi_agent_id: str, **kwargs: Any) -> Optional[Dict[str, Any]]:
        """A Graph's or Swarm's state as stored, or ``None``."""
        found = self._state(repository_thread(session_id, "multi_agent", multi_agent_id))
        return None if found is None else self._field(found, "state", dict)

    @_guarded
    def update_multi_agent(self, session_id: str, multi_agent: Any, **kwargs: Any) -> None:
        """Store a Graph's or Swarm's state anew; :class:`~qvc.errors.UnknownThreadError` if none was."""
        state = _plain(multi_agent.serialize_state(), f"multi-agent {multi_agent.id!r}")

        def update(old: Optional[State]) -> State:
            if old is None:
                raise UnknownThreadError(f"multi-agent {multi_agent.id!r} in session {session_id!r} does not exist")
            return {"state": state}

        self._write(repository_thread(session_id, "multi_agent", multi_agent.id), update,
                    {"op": "update_multi_agent", "session_id": session_id, "multi_agent_id": multi_agent.id})

    # -- reading and writing ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self.store.closed:
            raise StoreClosedError(f"{self!r} is closed")

    def _state(self, thread: str) -> Optional[Tuple[str, State]]:
        """``(head SHA, fields)`` of the thread's head now (``None``: no checkpoint). The fields are
        shared: never changed, never handed out."""
        with self._lock:
            sha = self.store.head(thread)
            if sha is None:
                self._cache.pop(thread, None)
                return None
            cached = self._cache.get(thread)
            if cached is not None and cached[0] == sha:
                return cached
            found = self.store.get_tuple(CheckpointConfig(thread, sha))
            if found is None:
                raise CorruptionError(f"thread {thread!r}: its head {sha[:12]} does not read")
            self._cache[thread] = (sha, found.checkpoint.state_data)
            return self._cache[thread]

    @staticmethod
    def _field(found: Tuple[str, State], name: str, kind: type) -> Any:
        value = found[1].get(name)
        if not isinstance(value, kind):
            raise CorruptionError(f"checkpoint {found[0][:12]}: field {name!r} is not a {kind.__name__}")
        return json.loads(json.dumps(value))  # the caller's copy

    def _fields_at(self, thread: str, sha: str) -> State:
        """The fields of the thread's checkpoint commit ``sha`` (shared: never changed)."""
        cached = self._cache.get(thread)
        if cached is not None and cached[0] == sha:
            return cached[1]
        found = self.store.get_tuple(CheckpointConfig(thread, sha))
        if found is None:
            raise CorruptionError(f"thread {thread!r}: commit {sha[:12]} does not read")
        return found.checkpoint.state_data

    def _write(self, thread: str, update: Callable[[Optional[State]], State], metadata: Dict[str, Any], *,
               new: bool = False) -> str:
        """One checkpoint on ``thread`` holding ``update(fields at the head)`` (``None``: no head;
        ``new``: there must be none, else :class:`~qvc.errors.CheckpointConflictError`), read and
        written in one transaction of the store (``put_entries``), so no other process writes
        between; messages one blob each (:mod:`.entries`)."""
        self._check_open()
        metadata = {"source": SOURCE, **metadata}
        cid = uuid.uuid4().hex
        made: Dict[str, Any] = {}

        def entries_of(parent: Optional[str], write: Callable[[str, bytes], Any]) -> Dict[str, Any]:
            head = parent or self.store.head(thread)  # read inside the transaction: no writer moves it now
            if new and head is not None:
                raise CheckpointConflictError(f"thread {thread!r} exists")
            made["fields"] = fields = update(self._fields_at(thread, head) if head else None)
            return field_entries(self.store, fields, head, write)

        with self._lock:
            sha = self.store.put_entries(thread, header(cid, next_step(self.store, thread)), metadata, entries_of,
                                         source=SOURCE)
            self._cache[thread] = (sha, made["fields"])
        return cid

    # -- the rest --------------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the repository if this object opened it (idempotent)."""
        if self._own:
            self.store.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class QvcSessionManager(RepositorySessionManager, QvcSessionRepository):
    """Strands' ``RepositorySessionManager`` on its own :class:`QvcSessionRepository`, as
    ``FileSessionManager`` is on files: ``QvcSessionManager(session_id, path)`` (or ``store=``,
    ``durability=`` as the repository takes them). Creates the session if the repository does not
    hold it; raises as :class:`QvcSessionRepository` does."""

    def __init__(self, session_id: str, path: Any = "agent.qvc", *, store: Optional[GitCheckpointStore] = None,
                 durability: DurabilityMode | str = DurabilityMode.SYNC, **kwargs: Any):
        QvcSessionRepository.__init__(self, path, store=store, durability=durability)
        try:
            RepositorySessionManager.__init__(self, session_id=session_id, session_repository=self, **kwargs)
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        return f"QvcSessionManager({self.session_id!r}, {self.path!r})"
