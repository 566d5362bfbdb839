"""``QvcSession``: an OpenAI Agents SDK session (the SDK's ``Session`` protocol) kept in a qvc repository.

``Runner.run(agent, prompt, session=QvcSession("chat-1", "runs.qvc"))``: the session is the
thread ``openai/session/chat-1``; every change of its items is one checkpoint on that thread.

- ``add_items`` writes one checkpoint holding only the items it added (a segment, see
  :mod:`.layout`); earlier segments are the parent's blobs.
- ``pop_item`` and ``clear_session`` write a checkpoint too (the line shortened, or emptied): the
  items they removed stay in the thread's history, nothing is rewritten.
- The compaction hook the SDK's ``OpenAIResponsesCompactionSession`` looks for replaces the
  newest items as a compare-and-swap on the thread's head.
- :meth:`QvcSession.fork` branches a new session off any point of the history (a qvc fork: the
  new thread's first checkpoint has the source's checkpoint as parent).
- :meth:`QvcSession.save_state` / :meth:`QvcSession.load_state` keep a paused run's
  ``RunState`` (a tool call waiting for a human's approval) in the same thread, so
  ``Runner.run(agent, state, session=...)`` resumes from the repository after a crash.

Store calls run in a worker thread (``asyncio.to_thread``), as ``SQLiteSession``'s do, and a
mutation runs to its end even when the awaiting task is cancelled, so its outcome is known.

Imports the SDK (``agents``), :mod:`qvc.store`, :mod:`qvc.types`, :mod:`qvc.errors` and :mod:`.layout`.
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Dict, List, Optional

from agents import RunState, SessionSettings
from agents.memory.session_settings import coerce_session_settings, resolve_session_limit

from qvc.errors import (
    CheckpointConflictError,
    InvalidInputError,
    SerializationError,
    StoreClosedError,
    UnknownThreadError,
)
from qvc.integrations.blocking import finish
from qvc.integrations.contention import pause
from qvc.integrations.openai_agents.layout import RUN_STATE, SESSION, SOURCE, Item, Log, session_thread
from qvc.store.git_store import GitCheckpointStore
from qvc.types import Checkpoint, CheckpointConfig, DurabilityMode

#: The Session protocol's methods (a subclass overriding one gets no compaction hook).
_PROTOCOL = ("get_items", "add_items", "pop_item", "clear_session")
#: How often a write is tried again when another writer moved the session's head meanwhile.
_RETRIES = 50


@dataclass(frozen=True)
class _Line:
    """The session as its head checkpoint holds it (commits never change: cached by SHA)."""

    sha: str
    checkpoint_id: str
    step: int
    log: Log
    run_state: Optional[Dict[str, Any]]

    @property
    def items(self) -> List[Item]:
        return self.log.items


@dataclass(frozen=True)
class CompactionSnapshot:
    """What the SDK's compaction hook (``_get_compaction_snapshot``) returns: the newest ``items``,
    whether they are the whole history (``complete``), and ``replace_suffix(start, output)``, which
    replaces ``items[start:]`` by ``output`` only if the session did not change since (a
    compare-and-swap on the thread's head; ``False`` when it did)."""

    items: List[Item]
    complete: bool
    replace_suffix: Callable[[int, List[Item]], Awaitable[bool]]


def _plain(items: List[Any], what: str) -> List[Item]:
    """``items`` as JSON holds them (what ``SQLiteSession`` stores and gives back), each a new dict."""
    if not isinstance(items, list):
        raise InvalidInputError(f"{what}: items must be a list, not {type(items).__name__}")
    try:
        out = json.loads(json.dumps(items))
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{what}: an item is not JSON: {exc}") from None
    for i, item in enumerate(out):
        if not isinstance(item, dict):
            raise InvalidInputError(f"{what}: item {i} is not a mapping")
    return out


def _usage(wrapper: Any) -> Optional[Dict[str, int]]:
    """The run's usage so far from the SDK's ``RunContextWrapper``, when it passed one."""
    usage = getattr(wrapper, "usage", None)
    if usage is None:
        return None
    out = {k: getattr(usage, k, None) for k in ("requests", "input_tokens", "output_tokens", "total_tokens")}
    return {k: v for k, v in out.items() if isinstance(v, int)}


class QvcSession:
    """The OpenAI Agents SDK's ``Session`` protocol on a qvc repository (see the module docstring).

    ``QvcSession(session_id, path)`` opens (or creates) the repository at ``path`` and closes it
    in :meth:`close`; ``QvcSession(session_id, store=store)`` uses an open
    :class:`~qvc.GitCheckpointStore` and leaves it open (several sessions on one repository).
    ``durability`` is the store's (``"sync"``, the default: every write is durable when its
    call returns; ``"async"``; ``"exit"``). ``session_settings`` as the SDK's sessions take it
    (``limit``: the default number of items ``get_items`` returns).
    """

    session_settings: Optional[SessionSettings] = None

    def __init__(self, session_id: str, path: Any = "runs.qvc", *, store: Optional[GitCheckpointStore] = None,
                 durability: DurabilityMode | str = DurabilityMode.SYNC,
                 session_settings: SessionSettings | Dict[str, Any] | None = None):
        self.thread = session_thread(session_id)
        self.session_id = session_id
        self.session_settings = coerce_session_settings(session_settings) if session_settings is not None \
            else SessionSettings()
        self._own = store is None
        self.store = store if store is not None else GitCheckpointStore(path, durability=durability)
        self.path = self.store.path
        self._lock = threading.RLock()
        self._cache: Optional[_Line] = None

    def __repr__(self) -> str:
        return f"QvcSession({self.session_id!r}, {self.path!r})"

    # -- the Session protocol ------------------------------------------------------------------

    async def get_items(self, limit: Optional[int] = None, *, wrapper: Any = None) -> List[Item]:
        """The session's items, oldest first: all, or the newest ``limit`` (default: the session
        settings' ``limit``). A limit of 0 gives none, a negative one all (as ``SQLiteSession``)."""
        limit = resolve_session_limit(limit, self.session_settings)
        return await asyncio.to_thread(self.items, limit)

    async def add_items(self, items: List[Item], *, wrapper: Any = None) -> None:
        """Append ``items``: one checkpoint holding them (none for an empty list). Durable on return
        in SYNC mode. Raises :class:`~qvc.errors.SerializationError` for an item JSON cannot hold."""
        self._check_open()
        if not items:
            return
        plain = _plain(items, f"session {self.session_id!r}")
        extra = {"usage": u} if (u := _usage(wrapper)) else {}
        await finish(self._change, "add", lambda line: (_log(line).add(plain), _state(line), extra, None))

    async def pop_item(self, *, wrapper: Any = None) -> Optional[Item]:
        """Remove and return the newest item (``None`` when there is none): a checkpoint without it;
        the item stays in the thread's history."""
        self._check_open()

        def change(line: Optional[_Line]):
            items = line.items if line else []
            if not items:
                return None
            return line.log.cut(len(items) - 1), line.run_state, {"popped": _kind(items[-1])}, items[-1]
        return copy.deepcopy(await finish(self._change, "pop", change))

    async def clear_session(self, *, wrapper: Any = None) -> None:
        """Remove every item (and a saved paused run): a checkpoint of an empty session, the
        history kept. Nothing is written for a session that is empty already."""
        self._check_open()

        def change(line: Optional[_Line]):
            if line is None or (not len(line.log) and line.run_state is None):
                return None
            return Log(), None, {"cleared": len(line.log)}, None
        await finish(self._change, "clear", change)

    # -- the compaction hook -------------------------------------------------------------------

    async def _get_compaction_snapshot(self, limit: int, *,
                                       prune_prefix: Optional[Callable[[Item], bool]] = None
                                       ) -> Optional[CompactionSnapshot]:
        """The hook the SDK's ``OpenAIResponsesCompactionSession`` calls on the session it wraps:
        the newest ``limit`` items and a ``replace_suffix`` that swaps them for the compacted output
        only if the session's head is still the one read here (no write was lost in between).
        ``prune_prefix`` drops the leading items it accepts from the older history in the same write.
        ``None`` (the SDK then uses the protocol's methods) for a subclass that overrides one of
        them: the swap would bypass what the override does (as ``SQLiteSession`` does too)."""
        if any(getattr(type(self), name) is not getattr(QvcSession, name) for name in _PROTOCOL):
            return None
        line = await asyncio.to_thread(self._read)
        everything = line.items if line else []
        items = everything[-limit:] if limit > 0 else []
        base = len(everything) - len(items)
        seen = line.sha if line else None

        async def replace_suffix(start: int, output: List[Item]) -> bool:
            if not 0 <= start < len(items):
                return False
            plain = _plain(output, f"session {self.session_id!r}: compaction")

            def change(now: Optional[_Line]):
                if (now.sha if now else None) != seen:
                    raise _Stale
                keep = base + start
                log = now.log.cut(keep)
                if prune_prefix is not None:
                    prefix = log.items
                    dropped = 0
                    while dropped < len(prefix) and prune_prefix(prefix[dropped]):
                        dropped += 1
                    if dropped:
                        log = Log().add(prefix[dropped:]) if dropped < len(prefix) else Log()
                return log.add(plain) if plain else log, now.run_state, {"replaced": len(now.log) - keep}, True

            try:
                return await finish(self._change, "compact", change, False)
            except _Stale:
                return False

        return CompactionSnapshot(copy.deepcopy(items), base == 0, replace_suffix)

    # -- paused runs ---------------------------------------------------------------------------

    async def save_state(self, state: Any, **to_json: Any) -> None:
        """Keep a paused run's ``RunState`` (``result.to_state()``; or its ``to_json()`` dict or
        ``to_string()`` text) in the session's thread: one checkpoint, the items unchanged.
        ``to_json`` goes to ``RunState.to_json`` (``context_serializer=...``, ``strict_context=...``)."""
        self._check_open()
        if isinstance(state, str):
            data = json.loads(state)
        elif isinstance(state, dict):
            data = state
        elif callable(getattr(state, "to_json", None)):
            data = state.to_json(**to_json)
        else:
            raise InvalidInputError(f"save_state: not a RunState, nor its JSON: {type(state).__name__}")
        data = json.loads(json.dumps(data))
        await finish(self._change, "save-state", lambda line: (_log(line), data, {}, None))

    async def load_state(self, agent: Any, **from_json: Any) -> Optional[RunState]:
        """The saved paused run as a ``RunState`` for ``agent`` (the run's starting agent), or
        ``None``. ``from_json`` goes to ``RunState.from_json`` (``context_deserializer=...``)."""
        line = await asyncio.to_thread(self._read)
        if line is None or line.run_state is None:
            return None
        return await RunState.from_json(agent, copy.deepcopy(line.run_state), **from_json)

    async def discard_state(self) -> None:
        """Forget the saved paused run (once it resumed): a checkpoint without it. Nothing is
        written when none is saved."""
        def change(line: Optional[_Line]):
            if line is None or line.run_state is None:
                return None
            return line.log, None, {}, None
        await finish(self._change, "discard-state", change)

    # -- branching -----------------------------------------------------------------------------

    async def fork(self, new_session_id: str, *, at: Optional[int] = None, turn: Optional[int] = None) -> QvcSession:
        """A new session ``new_session_id`` holding this one's first ``at`` items (default: all), or
        the items before its ``turn``-th user message (1-based, as ``AdvancedSQLiteSession``'s
        ``create_branch_from_turn``). A qvc fork: the new thread's first checkpoint has as parent
        the newest checkpoint of this session's line that held exactly those items (or fewer, when
        none did), so both share that history. Returns the new session, on the same store.
        Raises :class:`~qvc.errors.CheckpointConflictError` if the new session exists and
        :class:`~qvc.errors.InvalidInputError` for a point outside the history."""
        await finish(self._fork, new_session_id, at, turn)
        return QvcSession(new_session_id, store=self.store, session_settings=self.session_settings)

    def _fork(self, new_session_id: str, at: Optional[int], turn: Optional[int]) -> None:
        new_thread = session_thread(new_session_id)
        with self._lock:
            line = self._read()
            if line is None:
                raise UnknownThreadError(f"session {self.session_id!r} has no history to fork")
            items = line.items
            if at is not None and turn is not None:
                raise InvalidInputError("fork: give at= or turn=, not both")
            keep = len(items) if at is None else at
            if turn is not None:
                users = [i for i, item in enumerate(items) if _kind(item) == "message:user"]
                if isinstance(turn, bool) or not isinstance(turn, int) or not 1 <= turn <= len(users):
                    raise InvalidInputError(f"fork: turn {turn!r} is not one of the session's "
                                            f"{len(users)} user turns")
                keep = users[turn - 1]
            if isinstance(keep, bool) or not isinstance(keep, int) or not 0 <= keep <= len(items):
                raise InvalidInputError(f"fork: at={at!r} is not between 0 and {len(items)} items")
            if self.store.head(new_thread) is not None:
                raise CheckpointConflictError(f"session {new_session_id!r} already exists")
            parent = self._fork_point(line, items[:keep])
            state = {SESSION: new_session_id, **line.log.cut(keep).fields()}
            checkpoint = Checkpoint(id=uuid.uuid4().hex, thread_id=new_thread, step=parent[1] + 1,
                                    state_data=state, parent_id=parent[0])
            metadata = {"source": SOURCE, "session_id": new_session_id, "op": "fork", "items": keep,
                        "forked_from": self.session_id, "time": time.time()}
            self.store.put(CheckpointConfig(new_thread), checkpoint, metadata, expected_head=None)

    def _fork_point(self, line: _Line, wanted: List[Item]) -> tuple:
        """``(checkpoint id, step)`` of the newest checkpoint of the line that held ``wanted``'s
        first items and no others than ``wanted`` (the line's oldest when none did)."""
        last = (line.checkpoint_id, line.step)
        for t in self.store.list(CheckpointConfig(self.thread)):
            last = (t.checkpoint.id, t.checkpoint.step)
            n = t.metadata.get("items")
            if isinstance(n, int) and n <= len(wanted) and \
                    Log.of(t.checkpoint.state_data, t.checkpoint.id).items == wanted[:n]:
                return last
        return last

    # -- reading and writing -------------------------------------------------------------------

    def items(self, limit: Optional[int] = None) -> List[Item]:
        """:meth:`get_items` without the event loop: the items (new dicts), all or the newest ``limit``."""
        line = self._read()
        items = line.items if line else []
        if limit is not None and limit >= 0:
            items = items[-limit:] if limit else []
        return copy.deepcopy(items)

    def _check_open(self) -> None:
        if self.store.closed:
            raise StoreClosedError(f"{self!r} is closed")

    def _read(self) -> Optional[_Line]:
        """The session at its head now (``None``: no checkpoint yet)."""
        with self._lock:
            sha = self.store.head(self.thread)
            if sha is None:
                return None
            cached = self._cache
            if cached is not None and cached.sha == sha:
                return cached
            t = self.store.read(sha)
            state = t.checkpoint.state_data
            line = _Line(sha, t.checkpoint.id, t.checkpoint.step,
                         Log.of(state, f"session {self.session_id!r} at {t.checkpoint.id}"), state.get(RUN_STATE))
            self._cache = line
            return line

    def _change(self, op: str, change: Callable[[Optional[_Line]], Any], retry: bool = True) -> Any:
        """Apply ``change(line) -> (log, run_state, metadata, result)`` (or ``None``: nothing to
        write) to the head as one checkpoint, a compare-and-swap on the head: tried again on the
        new head when another writer moved it (unless ``retry`` is false). Returns ``result``."""
        with self._lock:
            for attempt in range(_RETRIES if retry else 1):
                line = self._read()
                planned = change(line)
                if planned is None:
                    return None
                log, run_state, extra, result = planned
                state: Dict[str, Any] = {SESSION: self.session_id, **log.fields()}
                if run_state is not None:
                    state[RUN_STATE] = run_state
                checkpoint = Checkpoint(id=uuid.uuid4().hex, thread_id=self.thread,
                                        step=line.step + 1 if line else 0, state_data=state)
                metadata = {"source": SOURCE, "session_id": self.session_id, "op": op, "items": len(log),
                            "time": time.time(), **extra}
                try:
                    self.store.put(CheckpointConfig(self.thread), checkpoint, metadata,
                                   expected_head=line.sha if line else None)
                except CheckpointConflictError:
                    self._cache = None
                    if retry:
                        pause(attempt)
                        continue
                    raise _Stale from None
                sha = self.store.head(self.thread)
                if sha is not None and self.store.commit_info(sha).checkpoint_id == checkpoint.id:
                    self._cache = _Line(sha, checkpoint.id, checkpoint.step, log, run_state)
                return result
            raise CheckpointConflictError(f"session {self.session_id!r}: other writers kept moving its head")

    def head(self) -> Optional[str]:
        """The checkpoint id of the session's newest checkpoint, or ``None``."""
        line = self._read()
        return line.checkpoint_id if line else None

    def close(self) -> None:
        """Close the repository if this session opened it (idempotent)."""
        if self._own:
            self.store.close()

    def __enter__(self) -> QvcSession:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _Stale(Exception):
    """The session's head moved since the compaction snapshot was read."""


def _log(line: Optional[_Line]) -> Log:
    return line.log if line else Log()


def _state(line: Optional[_Line]) -> Optional[Dict[str, Any]]:
    return line.run_state if line else None


def _kind(item: Item) -> str:
    kind = item.get("type") or "message"
    return f"message:{item.get('role')}" if kind == "message" else str(kind)
