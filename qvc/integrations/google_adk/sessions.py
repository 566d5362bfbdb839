"""``QvcSessionService``: Google ADK's session service (``BaseSessionService``) over a qvc repository.

``Runner(..., session_service=QvcSessionService("runs.qvc"))``. A session is a thread, each stored
event one checkpoint holding what it added (:mod:`.layout`); app and user state live in threads of
their own that every session of the app or user reads, written in the same store transaction as
the event (:meth:`~qvc.store.git_store.GitCheckpointStore.put_many`). ``append_event`` follows ADK's
rules: a partial event is returned unstored; ``temp:`` keys reach the caller's session but are not
stored; a stale session object (another writer stored an event after it was read) is refused with
ADK's ``StaleSessionError``; a deleted one with ``SessionNotFoundError``.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import os
import threading
import time
import uuid
from typing import Any, Optional

from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig, ListSessionsResponse
from google.adk.sessions.session import Session
from google.adk.sessions.state import State
from pydantic_core import to_jsonable_python

from qvc.errors import CheckpointConflictError, InvalidInputError
from qvc.integrations.google_adk import layout
from qvc.store.git_store import GitCheckpointStore, PutRequest
from qvc.types import Checkpoint, CheckpointConfig, DurabilityMode

logger = logging.getLogger(__name__)

_RETRIES = 50  # concurrent writers of one app's or user's state: re-read and merge again


def split_delta(delta: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """``(app, user, session)`` parts of a state delta, prefixes stripped, ``temp:`` keys dropped,
    values made JSON-safe as ADK's SQL services make them (a value that does not serialize is
    stored as its text, with a warning)."""
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    session: dict[str, Any] = {}
    for key, value in (delta or {}).items():
        if key.startswith(State.APP_PREFIX):
            app[key[len(State.APP_PREFIX):]] = value
        elif key.startswith(State.USER_PREFIX):
            user[key[len(State.USER_PREFIX):]] = value
        elif not key.startswith(State.TEMP_PREFIX):
            session[key] = value
    return _json_safe(app), _json_safe(user), _json_safe(session)


def _json_safe(state: dict[str, Any]) -> dict[str, Any]:
    if not state:
        return {}
    try:
        return to_jsonable_python(state)
    except Exception:  # noqa: BLE001 - ADK stores such values as their text, and so do we
        logger.warning("session state holds values that are not JSON-serializable; storing their text")
        return to_jsonable_python(state, fallback=str)


def merged_state(app: dict[str, Any], user: dict[str, Any], session: dict[str, Any]) -> dict[str, Any]:
    """The state a ``Session`` shows: session keys, then ``app:`` and ``user:`` keys with prefixes."""
    out = copy.deepcopy(session)
    out.update({State.APP_PREFIX + k: v for k, v in app.items()})
    out.update({State.USER_PREFIX + k: v for k, v in user.items()})
    return out


def event_from_stored(stored: dict[str, Any]) -> Event:
    """An ``Event`` from its stored form (ADK's JSON, parsed), read as ADK's SQL services read it."""
    return Event.model_validate_json(json.dumps(stored))


def event_to_stored(event: Event) -> dict[str, Any]:
    """The stored form of an ``Event``: ``model_dump_json(exclude_none=True)``, parsed."""
    return json.loads(event.model_dump_json(exclude_none=True))


class QvcSessionService(BaseSessionService):
    """ADK sessions in a qvc repository (see the module docstring).

    ``path`` is the repository (created if missing); ``store`` an open
    :class:`~qvc.store.git_store.GitCheckpointStore` to use instead (not closed by :meth:`close`).
    ``durability`` is the store's (``"sync"``: an event is on stable storage when
    ``append_event`` returns). The store's calls run in a worker thread (``asyncio.to_thread``).
    """

    def __init__(self, path: str | os.PathLike | None = None, *, store: Optional[GitCheckpointStore] = None,
                 durability: DurabilityMode | str = DurabilityMode.SYNC) -> None:
        if (path is None) == (store is None):
            raise InvalidInputError("QvcSessionService: give a repository path or an open store, not both")
        self._owned = store is None
        self.store: GitCheckpointStore = store if store is not None else GitCheckpointStore(path, durability=durability)
        self._locks: dict[str, threading.Lock] = {}  # per session thread: this process's appends one at a time
        self._locks_lock = threading.Lock()

    # -- the interface -----------------------------------------------------------------------

    async def create_session(self, *, app_name: str, user_id: str, state: Optional[dict[str, Any]] = None,
                             session_id: Optional[str] = None) -> Session:
        """A new session with ``state`` (``app:``/``user:`` keys go to the app's and user's state);
        ``session_id`` is generated when not given. Raises ADK's ``AlreadyExistsError`` for a taken id."""
        return await asyncio.to_thread(self._create, app_name, user_id, state, session_id)

    async def get_session(self, *, app_name: str, user_id: str, session_id: str,
                          config: Optional[GetSessionConfig] = None) -> Optional[Session]:
        """The session with its events (ordered by timestamp, then as appended; ``config`` keeps
        the ``num_recent_events`` newest and those at or after ``after_timestamp``), or ``None``."""
        return await asyncio.to_thread(self._get, app_name, user_id, session_id, config)

    async def list_sessions(self, *, app_name: str, user_id: Optional[str] = None) -> ListSessionsResponse:
        """The app's sessions (one user's, or every user's for ``None``), without events, oldest
        update first."""
        return await asyncio.to_thread(self._list, app_name, user_id)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete a session's thread (no-op when unknown). Its data stays in the repository until
        ``qvc purge``."""
        await asyncio.to_thread(self._delete, app_name, user_id, session_id)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The user's state in the app, prefixes stripped (``{}`` when none)."""
        return await asyncio.to_thread(layout.scope_state, self.store, layout.user_thread(app_name, user_id))

    async def append_event(self, session: Session, event: Event) -> Event:
        """Store ``event`` in ``session`` (ADK's rules: see the module docstring) and apply it to the
        caller's ``session``; returns the event."""
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        await asyncio.to_thread(self._append, session, event)
        return self._commit_event_to_session(session, event)

    async def fork_session(self, *, app_name: str, user_id: str, session_id: str, new_session_id: str,
                           event_id: Optional[str] = None) -> Session:
        """A new session ``new_session_id`` holding ``session_id``'s events up to ``event_id``
        (inclusive; all when ``None``) and the session state then: a qvc fork, whose history is the
        source's commits. Raises ``AlreadyExistsError`` for a taken id and ``SessionNotFoundError``
        for an unknown session or event."""
        await asyncio.to_thread(self._fork, app_name, user_id, session_id, new_session_id, event_id)
        found = await self.get_session(app_name=app_name, user_id=user_id, session_id=new_session_id)
        assert found is not None
        return found

    async def close(self) -> None:
        """Close the store if this service opened it (idempotent)."""
        if self._owned:
            await asyncio.to_thread(self.store.close)

    # -- the work, in a worker thread ------------------------------------------------------------

    def _resolve(self, app_name: str, user_id: str, session_id: str) -> str:
        """The session id as stored: ``session_id``, or its stripped form when only that exists
        (ADK's SQLite service strips padded ids)."""
        if session_id and session_id != session_id.strip():
            if self.store.head(layout.session_thread(app_name, user_id, session_id)) is None:
                return session_id.strip()
        return session_id

    def _scope_puts(self, app_name: str, user_id: str, app_delta: dict, user_delta: dict,
                    metadata: dict) -> tuple[list[PutRequest], dict, dict]:
        """The app and user state checkpoints for the deltas, and the app and user states after them."""
        puts = []
        states = []
        for kind, thread, delta in (("app", layout.app_thread(app_name), app_delta),
                                    ("user", layout.user_thread(app_name, user_id), user_delta)):
            head = self.store.head(thread)
            state = layout.state_at(self.store, head) if head is not None else {}
            if delta:
                state.update(delta)
                step = self.store.commit_info(head).step + 1 if head is not None else 0
                puts.append(PutRequest(CheckpointConfig(thread),
                                       Checkpoint(id=uuid.uuid4().hex, thread_id=thread, step=step,
                                                  state_data={"state": state}),
                                       dict(metadata), head, {layout.HEADER_KEY: kind}))
            states.append(state)
        return puts, states[0], states[1]

    def _create(self, app_name: str, user_id: str, state: Optional[dict[str, Any]],
                session_id: Optional[str]) -> Session:
        sid = self._resolve(app_name, user_id, session_id) if session_id else ""
        sid = sid or str(uuid.uuid4())  # none given, or only blanks
        thread = layout.session_thread(app_name, user_id, sid)
        app_delta, user_delta, session_state = split_delta(state or {})
        now = time.time()
        meta = {"source": layout.SOURCE, "update_time": now}
        for _ in range(_RETRIES):
            if self.store.head(thread) is not None:
                raise AlreadyExistsError(f"Session with id {sid} already exists.")
            puts, app_state, user_state = self._scope_puts(app_name, user_id, app_delta, user_delta, meta)
            root = Checkpoint(id=uuid.uuid4().hex, thread_id=thread, step=0, state_data={"state": session_state})
            puts.append(PutRequest(CheckpointConfig(thread), root, {**meta, "create_time": now}, None,
                                   {layout.HEADER_KEY: "session"}))
            try:
                self.store.put_many(puts)
            except CheckpointConflictError:
                continue  # the session was created meanwhile, or app/user state moved: look again
            return Session(app_name=app_name, user_id=user_id, id=sid, events=[], last_update_time=now,
                           state=merged_state(app_state, user_state, session_state))
        raise CheckpointConflictError(f"session {sid!r}: too many concurrent writers")

    def _get(self, app_name: str, user_id: str, session_id: str,
             config: Optional[GetSessionConfig]) -> Optional[Session]:
        sid = self._resolve(app_name, user_id, session_id)
        head = self.store.head(layout.session_thread(app_name, user_id, sid))
        if head is None:
            return None
        events: list[Event] = []
        if config is None or config.num_recent_events != 0:
            events = [event_from_stored(e) for e in layout.stored_events(self.store, head)]
            events.sort(key=lambda e: e.timestamp)  # stable: ties keep the order appended
            if config is not None and config.after_timestamp:
                events = [e for e in events if e.timestamp >= config.after_timestamp]
            if config is not None and config.num_recent_events is not None:
                events = events[-config.num_recent_events:]
        return Session(app_name=app_name, user_id=user_id, id=sid, events=events,
                       last_update_time=layout.update_time(self.store, head),
                       state=merged_state(layout.scope_state(self.store, layout.app_thread(app_name)),
                                          layout.scope_state(self.store, layout.user_thread(app_name, user_id)),
                                          layout.state_at(self.store, head)))

    def _list(self, app_name: str, user_id: Optional[str]) -> ListSessionsResponse:
        prefix = layout.SESSION + layout.part(app_name) + "/"
        if user_id is not None:
            prefix += layout.part(user_id) + "/"
        app_state = layout.scope_state(self.store, layout.app_thread(app_name))
        users: dict[str, dict] = {}
        found = []
        for thread, head in self.store.thread_heads():
            names = layout.split_session_thread(thread) if thread.startswith(prefix) else None
            if names is None:
                continue
            _, user, sid = names
            if user not in users:
                users[user] = layout.scope_state(self.store, layout.user_thread(app_name, user))
            found.append(Session(app_name=app_name, user_id=user, id=sid, events=[],
                                 last_update_time=layout.update_time(self.store, head),
                                 state=merged_state(app_state, users[user], layout.state_at(self.store, head))))
        found.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=found)

    def _delete(self, app_name: str, user_id: str, session_id: str) -> None:
        thread = layout.session_thread(app_name, user_id, self._resolve(app_name, user_id, session_id))
        if self.store.head(thread) is not None:
            self.store.delete_thread(thread)

    def _append(self, session: Session, event: Event) -> None:
        thread = layout.session_thread(session.app_name, session.user_id, session.id)
        with self._locks_lock:
            lock = self._locks.setdefault(thread, threading.Lock())
        with lock:  # the stale check and the write see this process's earlier appends done
            self._append_locked(thread, session, event)
            session.last_update_time = event.timestamp

    def _append_locked(self, thread: str, session: Session, event: Event) -> None:
        app_delta, user_delta, session_delta = split_delta(event.actions.state_delta if event.actions else {})
        stored = event_to_stored(event)
        meta = {"source": layout.SOURCE, "update_time": event.timestamp}
        for _ in range(_RETRIES):
            head = self.store.head(thread)
            if head is None:
                raise SessionNotFoundError(f"Session {session.id} not found.")
            if layout.update_time(self.store, head) > session.last_update_time:
                raise StaleSessionError("The session was modified in storage since it was read (its last_update_time "
                                        "is older than the stored update time): get the session again.")
            puts, _, _ = self._scope_puts(session.app_name, session.user_id, app_delta, user_delta, meta)
            state = layout.state_at(self.store, head)
            state.update(session_delta)
            step = self.store.commit_info(head).step + 1
            cp = Checkpoint(id=uuid.uuid4().hex, thread_id=thread, step=step,
                            state_data={"state": state, "event": stored})
            puts.append(PutRequest(CheckpointConfig(thread), cp, meta, head, {layout.HEADER_KEY: "session"}))
            try:
                self.store.put_many(puts)
                return
            except CheckpointConflictError:
                continue  # another writer stored meanwhile: the stale check decides on the next round
        raise CheckpointConflictError(f"session {session.id!r}: too many concurrent writers")

    def _fork(self, app_name: str, user_id: str, session_id: str, new_session_id: str, event_id: Optional[str]) -> None:
        source = layout.session_thread(app_name, user_id, session_id)
        target = layout.session_thread(app_name, user_id, new_session_id)
        head = self.store.head(source)
        if head is None:
            raise SessionNotFoundError(f"Session {session_id} not found.")
        if self.store.head(target) is not None:
            raise AlreadyExistsError(f"Session with id {new_session_id} already exists.")
        at = head
        if event_id is not None:
            at = next((c for c, _ in layout.event_commits(self.store, head)
                       if self.store.field_value(c, "event").get("id") == event_id), None)
            if at is None:
                raise SessionNotFoundError(f"Session {session_id} has no event {event_id!r}.")
        info = self.store.commit_info(at)
        copy = Checkpoint(id=uuid.uuid4().hex, thread_id=target, step=info.step or 0,
                          state_data=self.store.read(at).checkpoint.state_data, parent_id=info.checkpoint_id)
        meta = {"source": layout.SOURCE, "update_time": time.time(), "forked_from": session_id}
        try:  # a parent on another thread, into a thread without checkpoints: a fork sharing the source's commits
            self.store.put(CheckpointConfig(target), copy, meta, expected_head=None,
                           header={layout.HEADER_KEY: "session"})
        except CheckpointConflictError:
            raise AlreadyExistsError(f"Session with id {new_session_id} already exists.") from None
