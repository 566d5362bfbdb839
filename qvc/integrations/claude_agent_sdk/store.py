"""``QvcSessionStore``: the Claude Agent SDK's ``SessionStore`` kept in a qvc repository.

``ClaudeAgentOptions(session_store=QvcSessionStore("runs.qvc"))``: the SDK mirrors each session's
transcript into the repository as it runs and resumes from it. A transcript (a ``SessionKey``)
is a thread (:mod:`.layout`); every ``append`` that adds entries is one checkpoint on it.

- ``append`` is idempotent by entry ``uuid``: entries whose ``uuid`` the transcript holds already
  (or that repeat one in the same batch) are left out, entries without one are always added; a
  batch of nothing new writes nothing. Each append is a compare-and-swap on the thread's head,
  tried again on the new head when another writer moved it, so two processes appending to one
  transcript lose nothing.
- A main transcript's checkpoints also keep the SDK's folded session summary
  (``fold_session_summary``), so ``list_session_summaries`` reads one field per session.
- ``delete`` deletes threads as qvc does (``GitCheckpointStore.delete_threads``): the branch
  goes, the commits stay until ``qvc gc --prune`` / ``purge``; a main transcript takes its
  subagents' threads with it.
- The first append of a session made by ``fork_session_via_store`` (its entries name the source
  in ``forkedFrom``) starts from the source's checkpoint that added the last forked entry: the
  fork's first commit has it as parent, so both share that history.

Store calls run in a worker thread (``anyio.to_thread``, which the SDK's own async code runs on);
a write runs to its end even when the awaiting task is cancelled, so its outcome is known.

Imports the SDK (``claude_agent_sdk``), anyio, :mod:`qvc.store`, :mod:`qvc.types`,
:mod:`qvc.errors`, :mod:`qvc.codec` and :mod:`.layout`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, List, Optional, TypeVar

import anyio.to_thread
from claude_agent_sdk import SessionStore, fold_session_summary

from qvc.codec import serde
from qvc.errors import (
    CheckpointConflictError,
    CorruptionError,
    InvalidInputError,
    QvcError,
    SerializationError,
    StoreClosedError,
)
from qvc.integrations.claude_agent_sdk.layout import (
    ENTRIES,
    KEY,
    SOURCE,
    SUMMARY,
    Key,
    check_key,
    key_of,
    project_prefix,
    thread_of,
)
from qvc.integrations.contention import pause
from qvc.runs.failures import record_failure
from qvc.store.git_store import GitCheckpointStore
from qvc.types import Checkpoint, CheckpointConfig, DurabilityMode

_T = TypeVar("_T")
Entry = Dict[str, Any]
#: How often an append is tried again when another writer moved the transcript's head meanwhile.
_RETRIES = 50

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Line:
    """A transcript as its head checkpoint holds it (commits never change: cached by SHA).
    ``entries`` and ``summary`` are shared, never handed out or changed."""

    sha: str
    checkpoint_id: str
    step: int
    entries: List[Entry]
    uuids: FrozenSet[str]
    summary: Optional[Dict[str, Any]]
    mtime: int


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _copy(value: _T) -> _T:
    """A deep copy of JSON data (msgpack's C code: several times faster than ``copy.deepcopy``)."""
    return serde.loads(serde.dumps(value))


def _plain(entries: Any, what: str) -> List[Entry]:
    """``entries`` as JSON holds them (the contract: they round-trip ``json.dumps``), each a new dict."""
    if not isinstance(entries, list):
        raise InvalidInputError(f"{what}: entries must be a list, not {type(entries).__name__}")
    try:
        out = json.loads(json.dumps(entries))
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{what}: an entry is not JSON: {exc}") from None
    for i, entry in enumerate(out):
        if not isinstance(entry, dict):
            raise InvalidInputError(f"{what}: entry {i} is not a JSON object")
    return out


def _uuids(entries: List[Entry]) -> FrozenSet[str]:
    return frozenset(u for e in entries if isinstance(u := e.get("uuid"), str))


class QvcSessionStore(SessionStore):
    """The Claude Agent SDK's ``SessionStore`` protocol on a qvc repository, every optional method
    included (see the module docstring).

    ``QvcSessionStore(path)`` opens (or creates) the repository at ``path`` and closes it in
    :meth:`close`; ``QvcSessionStore(store=store)`` uses an open
    :class:`~qvc.GitCheckpointStore` and leaves it open (one repository shared with other
    adapters). ``durability`` is the store's: ``"sync"`` (the default: an append is on stable
    storage when it returns), ``"async"`` or ``"exit"``.
    """

    def __init__(self, path: Any = "runs.qvc", *, store: Optional[GitCheckpointStore] = None,
                 durability: DurabilityMode | str = DurabilityMode.SYNC):
        self._own = store is None
        self.store = store if store is not None else GitCheckpointStore(path, durability=durability)
        self.path = self.store.path
        self._lock = threading.RLock()
        self._cache: Dict[str, _Line] = {}

    def __repr__(self) -> str:
        return f"QvcSessionStore({self.path!r})"

    # -- the SessionStore protocol ---------------------------------------------------------------

    async def append(self, key: Any, entries: List[Any]) -> None:
        """Append ``entries`` to the transcript ``key``: one checkpoint holding those it did not hold
        (by ``uuid``; none for an empty batch or one of duplicates). Durable on return in SYNC
        mode. Raises :class:`~qvc.errors.SerializationError` for an entry JSON cannot hold,
        :class:`~qvc.errors.InvalidInputError` for a bad key or a batch that is not a list of objects."""
        if isinstance(entries, list) and not entries:
            check_key(key)
            return
        await anyio.to_thread.run_sync(self.append_sync, key, entries)

    async def load(self, key: Any) -> Optional[List[Any]]:
        """Every entry of the transcript ``key``, oldest first, as appended (new objects); ``None``
        for a transcript never written (or deleted)."""
        k = check_key(key)
        return await anyio.to_thread.run_sync(self.entries, k)

    async def list_sessions(self, project_key: str) -> List[Dict[str, Any]]:
        """``{"session_id", "mtime"}`` of every session (main transcript) of ``project_key``;
        ``mtime`` is its last append's write time in epoch milliseconds."""
        return await anyio.to_thread.run_sync(self._list_sessions, project_key)

    async def list_session_summaries(self, project_key: str) -> List[Dict[str, Any]]:
        """``{"session_id", "mtime", "data"}`` of every session of ``project_key``: the summary the
        SDK's ``fold_session_summary`` folded over its appends, kept in its head checkpoint,
        stamped with the same ``mtime`` as :meth:`list_sessions`."""
        return await anyio.to_thread.run_sync(self._list_summaries, project_key)

    async def delete(self, key: Any) -> None:
        """Delete the transcript ``key``'s thread, and for a main transcript its subagents' threads
        too (one transaction). Nothing happens for a transcript that does not exist. The commits
        stay in the repository (reachable from forks that share them, else until ``qvc gc --prune``)."""
        k = check_key(key)
        self._check_open()
        await anyio.to_thread.run_sync(self._delete, k)

    async def list_subkeys(self, key: Any) -> List[str]:
        """The subpaths of the session ``key``'s other transcripts (its subagents'), sorted."""
        k = check_key(key, subpath=False)
        return await anyio.to_thread.run_sync(self._subkeys, k)

    # -- the same, without an event loop ---------------------------------------------------------

    def entries(self, key: Any) -> Optional[List[Entry]]:
        """:meth:`load` without the event loop."""
        line = self._read(thread_of(check_key(key)))
        return None if line is None else _copy(line.entries)

    def thread(self, key: Any) -> str:
        """The qvc thread of the transcript ``key``."""
        return thread_of(check_key(key))

    def append_sync(self, key: Any, entries: List[Any]) -> Optional[str]:
        """:meth:`append` without the event loop; returns the id of the checkpoint it wrote (``None``
        when there was nothing new)."""
        k = check_key(key)
        self._check_open()
        plain = _plain(entries, f"transcript {thread_of(k)!r}")
        if not plain:
            return None
        try:
            return self._append(k, plain)
        except QvcError as exc:
            # The SDK logs a failed append, tries it twice more, then drops the batch: say so where
            # qvc status shows it, so the gap in the mirror is not only in the agent's log.
            log.error("qvc repository %s: append to %s failed: %s", self.path, thread_of(k), exc)
            try:
                record_failure(self.path, operation="claude-agent-sdk append", session_id=k["session_id"],
                               cause=f"{type(exc).__name__}: {exc}")
            except OSError:
                pass
            raise

    # -- reading and writing ---------------------------------------------------------------------

    def _check_open(self) -> None:
        if self.store.closed:
            raise StoreClosedError(f"{self!r} is closed")

    def _read(self, thread: str) -> Optional[_Line]:
        """The transcript at its head now (``None``: no checkpoint)."""
        with self._lock:
            sha = self.store.head(thread)
            if sha is None:
                self._cache.pop(thread, None)
                return None
            cached = self._cache.get(thread)
            if cached is not None and cached.sha == sha:
                return cached
            header, meta = self.store.header(sha)
            fields = self.store.tree_entries(sha)
            what = f"transcript {thread!r} at {header.get('id')}"
            entries = self.store.field_value(sha, ENTRIES) if ENTRIES in fields else []
            if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
                raise CorruptionError(f"{what}: field {ENTRIES!r} is not a list of entries")
            summary = self.store.field_value(sha, SUMMARY) if SUMMARY in fields else None
            line = _Line(sha, header["id"], int(header.get("step") or 0), entries, _uuids(entries),
                         summary if isinstance(summary, dict) else None, self._mtime(sha, meta))
            self._cache[thread] = line
            return line

    def _mtime(self, sha: str, meta: Dict[str, Any]) -> int:
        mtime = meta.get("mtime")
        if isinstance(mtime, int) and not isinstance(mtime, bool):
            return mtime
        return self.store.commit_info(sha).time * 1000  # a checkpoint another tool made on the thread

    def _append(self, key: Key, plain: List[Entry]) -> Optional[str]:
        """Append the entries ``plain`` does not repeat to the transcript, as one checkpoint: a
        compare-and-swap on the head, tried again on the new head when another writer moved it."""
        thread = thread_of(key)
        with self._lock:
            for attempt in range(_RETRIES):
                line = self._read(thread)
                have = line.uuids if line else frozenset()
                new: List[Entry] = []
                seen: set = set()
                for entry in plain:
                    u = entry.get("uuid")
                    if isinstance(u, str):
                        if u in have or u in seen:
                            continue
                        seen.add(u)
                    new.append(entry)
                if not new:
                    return None
                entries = (line.entries if line else []) + new
                state: Dict[str, Any] = {KEY: dict(key), ENTRIES: entries}
                summary = None
                if "subpath" not in key:
                    prev = None if line is None or line.summary is None else \
                        {"session_id": key["session_id"], "mtime": line.mtime, "data": line.summary}
                    summary = fold_session_summary(prev, key, new)["data"]  # type: ignore[arg-type]
                    state[SUMMARY] = summary
                mtime = max(_now_ms(), line.mtime + 1) if line else _now_ms()
                metadata: Dict[str, Any] = {"source": SOURCE, "op": "append", **key, "added": len(new),
                                            "count": len(entries), "mtime": mtime}
                if len(new) < len(plain):
                    metadata["skipped"] = len(plain) - len(new)
                parent_id, step = None, line.step + 1 if line else 0
                if line is None and "subpath" not in key:
                    fork = self._fork_point(key, new)
                    if fork is not None:
                        parent_id, step = fork[0], fork[1] + 1
                        metadata.update(op="fork", forked_from={"session_id": fork[2], "checkpoint": fork[0]})
                elif "subpath" in key:
                    metadata["session_thread"] = thread_of({k: v for k, v in key.items() if k != "subpath"})
                checkpoint = Checkpoint(id=uuid.uuid4().hex, thread_id=thread, step=step, state_data=state,
                                        parent_id=parent_id)
                try:
                    self.store.put(CheckpointConfig(thread), checkpoint, metadata,
                                   expected_head=line.sha if line else None)
                except CheckpointConflictError:
                    self._cache.pop(thread, None)
                    pause(attempt)
                    continue
                sha = self.store.head(thread)
                if sha is not None and self.store.commit_info(sha).checkpoint_id == checkpoint.id:
                    self._cache[thread] = _Line(sha, checkpoint.id, step, entries, have | seen, summary, mtime)
                return checkpoint.id
            raise CheckpointConflictError(f"transcript {thread!r}: other writers kept moving its head")

    def _fork_point(self, key: Key, new: List[Entry]) -> Optional[tuple]:
        """``(checkpoint id, step, source session id)`` of the checkpoint a forked session starts
        from: its entries all name one source session of the same project in ``forkedFrom``, and
        the source's line has the checkpoint that added the last entry they name. Else ``None``."""
        marks = [e["forkedFrom"] for e in new if isinstance(e.get("forkedFrom"), dict)]
        sources = {m.get("sessionId") for m in marks}
        if len(sources) != 1:
            return None
        source = sources.pop()
        if not isinstance(source, str) or not source or source == key["session_id"]:
            return None
        src_thread = thread_of({"project_key": key["project_key"], "session_id": source})
        src = self._read(src_thread)
        last = marks[-1].get("messageUuid")
        at = next((i for i, e in enumerate(src.entries) if e.get("uuid") == last), None) if src else None
        if src is None or at is None:
            return None
        found = None
        for info in self.store.first_parents(src.sha):  # newest first: the oldest that holds entry `at`
            if info.thread_id != src_thread:
                break
            count = self.store.header(info.hex)[1].get("count")
            if not isinstance(count, int) or count <= at:
                break
            found = (info.checkpoint_id, info.step or 0, source)
        return found

    def _heads(self, project_key: str) -> List[tuple]:
        """``(session id, thread, head SHA)`` of every main transcript of ``project_key``."""
        if not isinstance(project_key, str) or not project_key:
            raise InvalidInputError(f"project_key must be a non-empty string, not {project_key!r}")
        start = project_prefix(project_key)
        out = []
        for thread in self.store.threads():
            if not thread.startswith(start):
                continue
            key = key_of(thread)
            if key is None or "subpath" in key or key["project_key"] != project_key:
                continue
            sha = self.store.head(thread)
            if sha is not None:
                out.append((key["session_id"], thread, sha))
        return out

    def _list_sessions(self, project_key: str) -> List[Dict[str, Any]]:
        return [{"session_id": sid, "mtime": self._mtime(sha, self.store.header(sha)[1])}
                for sid, _, sha in self._heads(project_key)]

    def _list_summaries(self, project_key: str) -> List[Dict[str, Any]]:
        out = []
        for sid, _, sha in self._heads(project_key):
            if SUMMARY not in self.store.tree_entries(sha):
                continue
            data = self.store.field_value(sha, SUMMARY)
            if isinstance(data, dict):
                out.append({"session_id": sid, "mtime": self._mtime(sha, self.store.header(sha)[1]),
                            "data": _copy(data)})
        return out

    def _subkeys(self, key: Key) -> List[str]:
        start = thread_of(key) + "/"
        found = (key_of(t) for t in self.store.threads() if t.startswith(start))
        return sorted(k["subpath"] for k in found if k is not None and "subpath" in k)

    def _delete(self, key: Key) -> None:
        thread = thread_of(key)
        with self._lock:
            targets = [thread]
            if "subpath" not in key:
                targets += [t for t in self.store.threads() if t.startswith(thread + "/")]
            self.store.delete_threads(targets, missing_ok=True)
            for t in targets:
                self._cache.pop(t, None)

    # -- the rest --------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the repository if this object opened it (idempotent)."""
        if self._own:
            self.store.close()

    def __enter__(self) -> QvcSessionStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
