"""``QvcStorage``: Strands Agents' ``Storage`` protocol kept in a qvc repository.

``SnapshotSessionManager("s1", storage=QvcStorage("agent.qvc"))`` (or ``Agent(storage=QvcStorage(...))``
with a ``SnapshotSessionManager`` of no storage of its own) keeps each agent's snapshots as a thread:
every save of ``snapshot_latest.json`` and every immutable history entry is a checkpoint on its line,
whose fields are the agent's messages, state, conversation manager state and the rest of the
snapshot (:mod:`.layout`). Any other key a Strands subsystem stores (the context manager's stash,
memory) is a thread of its own, each write a checkpoint.

- ``write`` is one checkpoint, durable on return in SYNC mode; a compare-and-swap on the thread's
  head, tried again on the new head when another writer moved it (two processes lose nothing).
  The bytes read back are the bytes written.
- ``delete`` is qvc's: a key that is a whole thread deletes the thread (``delete_threads``); an
  immutable entry, or ``snapshot_latest.json`` while immutable entries remain, drops the checkpoints
  that wrote it from the line (``drop_checkpoints``: their children re-parented). Deletes started
  together on one event loop (``SnapshotSessionManager.delete_session`` gathers one per key) are
  done together: a session's threads go in one transaction. The commits stay until ``qvc gc
  --prune`` / ``purge``.
- ``list`` gives the keys under a prefix, sorted; ``search`` is Strands' keyword search over them
  (or the ``search_strategy`` given).
- :meth:`QvcStorage.fork_session` starts a new session from one's latest snapshot or an
  immutable one: its threads' first checkpoints have the source's as parents (qvc's fork).

Errors are qvc's typed errors that are also Strands' ``StorageError`` (:mod:`.errors`).
Store calls run in a worker thread (``asyncio.to_thread``); a write runs to its end even when the
awaiting task is cancelled.

Imports Strands (``strands.storage``), :mod:`qvc.store`, :mod:`qvc.types`, :mod:`qvc.errors` and
:mod:`.layout`.
"""

from __future__ import annotations

import asyncio
import builtins
import random
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar

from strands.storage.search.keyword import KeywordSearchStrategy
from strands.storage.storage import StorageSearchResult

from qvc.errors import (
    CheckpointConflictError,
    CorruptionError,
    InvalidInputError,
    QvcError,
    SerializationError,
    StoreClosedError,
    UnknownCheckpointError,
)
from qvc.integrations.strands.errors import as_strands
from qvc.integrations.strands.layout import (
    DEFAULT_NAMESPACE,
    PREFIX,
    SOURCE,
    Place,
    decode_value,
    encode_value,
    normalize_key,
    normalize_prefix,
    place_of,
    place_of_thread,
    snapshot_id_of,
    snapshot_thread,
    text_fields,
)
from qvc.store.fork import fork_checkpoint
from qvc.store.git_store import GitCheckpointStore
from qvc.types import Checkpoint, CheckpointConfig, DurabilityMode

_T = TypeVar("_T")
#: How often a write is tried again when another writer moved the thread's head meanwhile.
_RETRIES = 50
#: How many values read back are kept decoded (by commit: commits never change).
_KEPT = 64


@dataclass(frozen=True)
class _Index:
    """A snapshot thread's keys as its line holds them at ``head``: the commits that wrote
    ``snapshot_latest.json`` and those that wrote each immutable entry, newest first. Never changed:
    a new head gets a new index."""

    head: str
    latest: Tuple[str, ...]
    entries: Dict[str, Tuple[str, ...]]


def _key_of(meta: Dict[str, Any]) -> Optional[str]:
    key = meta.get("key") if meta.get("source") == SOURCE else None
    return key if isinstance(key, str) else None


class QvcStorage:
    """Strands Agents' ``Storage`` protocol (``write``, ``read``, ``delete``, ``list``, ``search``)
    on a qvc repository (see the module docstring).

    ``QvcStorage(path)`` opens (or creates) the repository at ``path`` and closes it in
    :meth:`close`; ``QvcStorage(store=store)`` uses an open :class:`~qvc.GitCheckpointStore` and
    leaves it open (one repository shared with other adapters). ``durability`` is the store's:
    ``"sync"`` (the default: a write is on stable storage when it returns), ``"async"`` or
    ``"exit"``. ``search_strategy`` is a Strands ``SearchStrategy`` ``search`` delegates to (and
    that ``write`` indexes with), as Strands' own backends take it; default: keyword search.
    """

    def __init__(self, path: Any = "agent.qvc", *, store: Optional[GitCheckpointStore] = None,
                 durability: DurabilityMode | str = DurabilityMode.SYNC, search_strategy: Any = None):
        self._own = store is None
        self.store = store if store is not None else GitCheckpointStore(path, durability=durability)
        self.path = self.store.path
        self._search_strategy = search_strategy
        self._lock = threading.RLock()
        self._indexes: Dict[str, _Index] = {}
        self._values: OrderedDict[str, bytes] = OrderedDict()
        self._batches: Dict[asyncio.AbstractEventLoop, List[Tuple[str, asyncio.Future]]] = {}

    def __repr__(self) -> str:
        return f"QvcStorage({self.path!r})"

    # -- the Storage protocol ------------------------------------------------------------------------

    async def write(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` (one checkpoint; see the module docstring). Durable on return
        in SYNC mode. Raises :class:`~qvc.errors.InvalidInputError` for a bad key or data that is
        not bytes (both also Strands' ``StorageError``)."""
        await self._call(self.write_sync, key, data)
        if self._search_strategy is not None:
            try:
                await self._search_strategy.index(self, normalize_key(key), bytes(data))
            except Exception as exc:
                raise as_strands(CorruptionError(f"wrote {key!r} but its search index failed: {exc}")) from exc

    async def read(self, key: str) -> Optional[bytes]:
        """The bytes last written under ``key``, or ``None`` if none (or deleted)."""
        return await self._call(self.read_sync, key)

    async def delete(self, key: str) -> None:
        """Delete ``key`` (a no-op for a key that does not exist); see the module docstring. Deletes
        awaited together on one event loop are done together."""
        self._checked(normalize_key, key)
        loop = asyncio.get_running_loop()
        done: asyncio.Future = loop.create_future()
        with self._lock:
            batch = self._batches.get(loop)
            first = batch is None
            if first:
                batch = self._batches[loop] = []
            batch.append((key, done))
        if first:
            await asyncio.sleep(0)  # the other deletes of a gather join this batch
            with self._lock:
                taken = self._batches.pop(loop)
            try:
                await self._call(self.delete_sync, [k for k, _ in taken])
            except BaseException as exc:
                for _, fut in taken:
                    if not fut.done():
                        fut.set_exception(exc)
            else:
                for _, fut in taken:
                    if not fut.done():
                        fut.set_result(None)
        await done

    async def list(self, query: str = "") -> builtins.list[str]:
        """Every key starting with ``query`` (a prefix; empty: every key), sorted."""
        return await self._call(self.list_sync, query)

    async def search(self, query: str) -> builtins.list[StorageSearchResult]:
        """Keys whose key and value match ``query``, best first: the ``search_strategy`` given,
        else Strands' keyword search (token overlap)."""
        if self._search_strategy is not None:
            return await self._search_strategy.search(self, query)
        return await KeywordSearchStrategy().search(self, query)

    # -- the same, without an event loop -----------------------------------------------------------

    def write_sync(self, key: str, data: bytes) -> str:
        """:meth:`write` without the event loop; returns the id of the checkpoint written."""
        k = self._checked(normalize_key, key)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise as_strands(InvalidInputError(f"storage value of {k!r} must be bytes, not {type(data).__name__}"))
        self._check_open()
        return self._guard(self._write, k, bytes(data))

    def read_sync(self, key: str) -> Optional[bytes]:
        """:meth:`read` without the event loop."""
        k = self._checked(normalize_key, key)
        return self._guard(self._read, k)

    def delete_sync(self, keys: Sequence[str]) -> None:
        """Delete ``keys`` together (see the module docstring); keys that do not exist are skipped."""
        checked = [self._checked(normalize_key, k) for k in keys]
        self._check_open()
        self._guard(self._delete, checked)

    def list_sync(self, query: str = "") -> builtins.list[str]:
        """:meth:`list` without the event loop."""
        prefix = self._checked(normalize_prefix, query)
        return self._guard(self._list, prefix)

    def thread(self, key: str) -> str:
        """The qvc thread that holds ``key``."""
        return place_of(self._checked(normalize_key, key)).thread

    def fork_session(self, session_id: str, new_session_id: str, *, snapshot_id: Optional[str] = None,
                     namespace: str = DEFAULT_NAMESPACE) -> builtins.list[str]:
        """Start session ``new_session_id`` from session ``session_id``: each of its agents' (and
        orchestrators') newest ``snapshot_latest.json`` (or, with ``snapshot_id``, the agent's
        immutable entry of that id, and only that agent) becomes the new session's
        ``snapshot_latest.json``, a checkpoint whose parent is the source's (qvc's fork: the new
        threads share the source's history). Returns the new threads. A ``SnapshotSessionManager``
        of ``new_session_id`` on this storage resumes there. Raises
        :class:`~qvc.errors.UnknownCheckpointError` if there is nothing to fork and
        :class:`~qvc.errors.CheckpointConflictError` if the new session has snapshots already."""
        self._check_open()
        return self._guard(self._fork_session, session_id, new_session_id, snapshot_id, namespace)

    # -- writing ---------------------------------------------------------------------------------------

    def _write(self, key: str, data: bytes) -> str:
        place = place_of(key)
        fields = encode_value(data)
        metadata: Dict[str, Any] = {"source": SOURCE, "op": "write", "key": key, "bytes": len(data)}
        if place.snapshot:
            metadata.update(session_id=place.session_id, scope=place.scope, scope_id=place.scope_id)
            if place.snapshot_id is not None:
                metadata["snapshot_id"] = place.snapshot_id
        thread = place.thread
        with self._lock:
            for attempt in range(_RETRIES):
                head = self.store.head(thread)
                step = (self.store.commit_info(head).step or 0) + 1 if head else 0
                checkpoint = Checkpoint(id=uuid.uuid4().hex, thread_id=thread, step=step, state_data=fields)
                try:
                    self.store.put(CheckpointConfig(thread), checkpoint, metadata, expected_head=head)
                except SerializationError:
                    as_text = text_fields(data)
                    if fields == as_text:
                        raise
                    fields = as_text  # JSON the store cannot hold as values (a lone surrogate): as text
                    continue
                except CheckpointConflictError:
                    # A random pause, growing: two writers that keep meeting stop meeting in step.
                    time.sleep(random.uniform(0, 0.001 * 2 ** min(attempt, 6)))
                    continue
                return checkpoint.id
        raise CheckpointConflictError(f"storage key {key!r}: other writers kept moving thread {thread!r}")

    # -- reading ---------------------------------------------------------------------------------------

    def _index(self, thread: str) -> Optional[_Index]:
        """The snapshot thread's index at its head now (``None``: no checkpoint)."""
        head = self.store.head(thread)
        if head is None:
            self._indexes.pop(thread, None)
            return None
        old = self._indexes.get(thread)
        if old is not None and old.head == head:
            return old
        walked: List[Tuple[str, Optional[str]]] = []  # (sha, key written), newest first
        met = False
        for info in self.store.first_parents(head):
            if old is not None and info.hex == old.head:
                met = True
                break
            if info.thread_id != thread:
                break  # a fork's source: its keys are the source session's
            walked.append((info.hex, _key_of(self.store.header(info.hex)[1])))
        latest: List[str] = []
        entries: Dict[str, List[str]] = {}
        for sha, key in walked:
            snap = snapshot_id_of(key) if key else None
            if snap is None:  # snapshot_latest.json, or a checkpoint another tool made (an edit, a fork)
                latest.append(sha)
            else:
                entries.setdefault(snap, []).append(sha)
        if met and old is not None:
            latest += old.latest
            for snap, shas in old.entries.items():
                entries.setdefault(snap, []).extend(shas)
        index = _Index(head, tuple(latest), {s: tuple(v) for s, v in entries.items()})
        self._indexes[thread] = index
        return index

    def _sha_of(self, place: Place) -> Optional[str]:
        if not place.snapshot:
            return self.store.head(place.thread)
        index = self._index(place.thread)
        if index is None:
            return None
        shas = index.latest if place.snapshot_id is None else index.entries.get(place.snapshot_id)
        return shas[0] if shas else None

    def _read(self, key: str) -> Optional[bytes]:
        with self._lock:
            sha = self._sha_of(place_of(key))
            if sha is None:
                return None
            value = self._values.get(sha)
            if value is not None:
                self._values.move_to_end(sha)
                return value
            found = self.store.get_tuple(CheckpointConfig(place_of(key).thread, sha))
            if found is None:
                raise CorruptionError(f"storage key {key!r}: commit {sha[:12]} does not read")
            state = found.checkpoint.state_data
            try:
                value = decode_value(state)
            except (ValueError, KeyError, TypeError) as exc:
                raise CorruptionError(f"storage key {key!r} (commit {sha[:12]}): {exc}") from None
            self._values[sha] = value
            if len(self._values) > _KEPT:
                self._values.popitem(last=False)
            return value

    def _keys_of(self, place: Place) -> List[str]:
        if not place.snapshot:
            return [place.directory] if self.store.head(place.thread) else []
        index = self._index(place.thread)
        if index is None:
            return []
        return ([place.key()] if index.latest else []) + [place.key(s) for s in index.entries]

    def _list(self, prefix: str) -> List[str]:
        found: List[str] = []
        with self._lock:
            for thread in self.store.threads():
                if not thread.startswith(PREFIX):
                    continue
                place = place_of_thread(thread)
                if place is None:
                    continue
                where = place.directory
                if not (where.startswith(prefix) or (place.snapshot and prefix.startswith(where))):
                    continue
                found += [k for k in self._keys_of(place) if k.startswith(prefix)]
        return sorted(found)

    # -- deleting --------------------------------------------------------------------------------------

    def _delete(self, keys: List[str]) -> None:
        by_thread: Dict[str, Tuple[Place, set]] = {}
        for key in keys:
            place = place_of(key)
            by_thread.setdefault(place.thread, (place, set()))[1].add(place.snapshot_id or "")
        with self._lock:
            for attempt in range(_RETRIES):
                whole, drops = [], []
                for thread, (place, which) in by_thread.items():
                    if not place.snapshot:
                        whole.append(thread)
                        continue
                    index = self._index(thread)
                    if index is None:
                        continue
                    present = ({""} if index.latest else set()) | set(index.entries)
                    if not present & which:
                        continue
                    if present <= which:
                        whole.append(thread)
                    else:
                        shas = [*index.latest] if "" in which else []
                        shas += [sha for snap in which - {""} for sha in index.entries.get(snap, ())]
                        drops.append((thread, shas))
                try:
                    for thread, shas in drops:
                        self.store.drop_checkpoints(thread, shas)
                    if whole:
                        self.store.delete_threads(whole, missing_ok=True)
                except CheckpointConflictError:
                    time.sleep(random.uniform(0, 0.001 * 2 ** min(attempt, 6)))
                    continue
                for thread in by_thread:
                    self._indexes.pop(thread, None)
                return
        raise CheckpointConflictError(f"deleting {len(keys)} storage key(s): other writers kept moving their threads")

    # -- forks -----------------------------------------------------------------------------------------

    def _fork_session(self, session_id: str, new_session_id: str, snapshot_id: Optional[str],
                      namespace: str) -> List[str]:
        snapshot_thread(session_id, "agent", "x", namespace)  # checks the ids
        snapshot_thread(new_session_id, "agent", "x", namespace)
        sources = []
        with self._lock:
            for thread in self.store.threads():
                place = place_of_thread(thread)
                if place is None or not place.snapshot or place.namespace != namespace or \
                        place.session_id != session_id:
                    continue
                index = self._index(thread)
                shas = () if index is None else (index.latest if snapshot_id is None else
                                                 index.entries.get(snapshot_id, ()))
                if shas:
                    target = snapshot_thread(new_session_id, place.scope, place.scope_id, namespace)  # type: ignore
                    sources.append((shas[0], target))
            if not sources:
                what = f"immutable snapshot {snapshot_id!r}" if snapshot_id else "a latest snapshot"
                raise UnknownCheckpointError(f"session {session_id!r} has no {what} to fork")
            for _, target in sources:
                if self.store.head(target) is not None:
                    raise CheckpointConflictError(f"session {new_session_id!r} has snapshots already ({target!r})")
            made = []
            for sha, target in sources:
                info = self.store.commit_info(sha)
                fork_checkpoint(self.store, CheckpointConfig(info.thread_id or "", info.checkpoint_id),
                                new_thread_id=target)
                made.append(target)
            return made

    # -- the rest --------------------------------------------------------------------------------------

    async def _call(self, fn: Callable[..., _T], *args: Any) -> _T:
        return await asyncio.to_thread(fn, *args)

    @staticmethod
    def _checked(check: Callable[[Any], str], value: Any) -> str:
        try:
            return check(value)
        except QvcError as exc:
            raise as_strands(exc) from None

    def _guard(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)``, its qvc errors also Strands' ``StorageError``."""
        try:
            return fn(*args)
        except QvcError as exc:
            raise as_strands(exc) from exc.__cause__

    def _check_open(self) -> None:
        if self.store.closed:
            raise as_strands(StoreClosedError(f"{self!r} is closed"))

    def close(self) -> None:
        """Close the repository if this object opened it (idempotent)."""
        if self._own:
            self.store.close()

    def __enter__(self) -> QvcStorage:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
