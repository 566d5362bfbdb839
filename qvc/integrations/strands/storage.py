"""``QvcStorage``: Strands Agents' ``Storage`` protocol kept in a qvc repository.

``SnapshotSessionManager("s1", storage=QvcStorage("agent.qvc"))`` (or ``Agent(storage=QvcStorage(...))``
with a ``SnapshotSessionManager`` of no storage of its own) keeps each agent's snapshots as a thread:
every save of ``snapshot_latest.json`` and every immutable history entry is a checkpoint on its line,
whose fields are the agent's messages, state, conversation manager state and the rest of the
snapshot (:mod:`.layout`). Any other key a Strands subsystem stores (the context manager's stash,
memory) is a thread of its own, each write a checkpoint.

- ``write`` is one checkpoint, durable on return in SYNC mode, added to the thread's head in one
  transaction (two processes writing at once lose nothing: both saves are on the line, and the
  last one is the latest). The bytes read back are the bytes written. A snapshot's messages are
  stored one blob each (:mod:`.entries`): a save writes the messages it adds.
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

Imports Strands (``strands.storage``, its exceptions), :mod:`qvc.store`, :mod:`qvc.types`,
:mod:`qvc.errors`, :mod:`.layout`, :mod:`.entries` and :mod:`.errors`.
"""

from __future__ import annotations

import asyncio
import builtins
import copy
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar

from strands.storage.search.keyword import KeywordSearchStrategy
from strands.storage.storage import StorageSearchResult
from strands.types.exceptions import StorageError

from qvc.errors import (
    CheckpointConflictError,
    CorruptionError,
    InvalidInputError,
    QvcError,
    SerializationError,
    StoreClosedError,
    UnknownCheckpointError,
)
from qvc.integrations.contention import pause
from qvc.integrations.strands.entries import field_entries, header, next_step
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
from qvc.types import CheckpointConfig, DurabilityMode

_T = TypeVar("_T")
#: How often a delete is tried again when another writer rewrote one of its threads meanwhile.
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
        self._prefix = ""
        self._flushing: set = set()

    def __repr__(self) -> str:
        return f"QvcStorage({self.path!r}" + (f", namespace {self._prefix[:-1]!r})" if self._prefix else ")")

    def namespace(self, prefix: str) -> QvcStorage:
        """A view of this storage whose keys are under ``prefix`` (``"team"``: ``team/<key>``), as
        Strands' own backends give one (``Agent(storage=storage.namespace("team"))``): it shares
        the repository, and ``list`` and ``search`` see and name only its keys, without the prefix.
        Views compose; closing one does nothing (close the storage it came from)."""
        scoped = self._checked(normalize_prefix, prefix).rstrip("/")
        view = copy.copy(self)
        view._own = False
        view._prefix = f"{self._prefix}{scoped}/" if scoped else self._prefix
        return view

    # -- the Storage protocol ------------------------------------------------------------------------

    async def write(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` (one checkpoint; see the module docstring). Durable on return
        in SYNC mode. Raises :class:`~qvc.errors.InvalidInputError` for a bad key or data that is
        not bytes (both also Strands' ``StorageError``)."""
        await self._call(self.write_sync, key, data)
        if self._search_strategy is not None:
            try:
                await self._search_strategy.index(self, self._key(key)[len(self._prefix):], bytes(data))
            except Exception as exc:
                raise StorageError(f"wrote {key!r} but indexing it failed") from exc

    async def read(self, key: str) -> Optional[bytes]:
        """The bytes last written under ``key``, or ``None`` if none (or deleted)."""
        return await self._call(self.read_sync, key)

    async def delete(self, key: str) -> None:
        """Delete ``key`` (a no-op for a key that does not exist); see the module docstring. Deletes
        awaited together on one event loop are done together."""
        full = self._key(key)
        loop = asyncio.get_running_loop()
        done: asyncio.Future = loop.create_future()
        with self._lock:
            batch = self._batches.get(loop)
            if batch is None:
                # Flushed from a callback of the loop's own, after the tasks ready now (the other
                # deletes of a gather) joined: a cancelled caller cannot leave the others waiting.
                batch = self._batches[loop] = []
                loop.call_soon(self._flush, loop)
            batch.append((full, done))  # full keys: views of one storage share the batch
        await done

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            taken = self._batches.pop(loop)

        async def delete() -> None:
            try:
                await self._call(self._delete_full, [k for k, _ in taken])
            except BaseException as exc:
                for _, fut in taken:
                    if not fut.done():
                        fut.set_exception(exc)
            else:
                for _, fut in taken:
                    if not fut.done():
                        fut.set_result(None)

        task = loop.create_task(delete())
        self._flushing.add(task)  # held until done: the loop keeps only a weak reference
        task.add_done_callback(self._flushing.discard)

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
        k = self._key(key)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise as_strands(InvalidInputError(f"storage value of {k!r} must be bytes, not {type(data).__name__}"))
        self._check_open()
        return self._guard(self._write, k, bytes(data))

    def read_sync(self, key: str) -> Optional[bytes]:
        """:meth:`read` without the event loop."""
        k = self._key(key)
        return self._guard(self._read, k)

    def delete_sync(self, keys: Sequence[str]) -> None:
        """Delete ``keys`` together (see the module docstring); keys that do not exist are skipped."""
        self._delete_full([self._key(k) for k in keys])

    def _delete_full(self, keys: List[str]) -> None:
        self._check_open()
        self._guard(self._delete, keys)

    def list_sync(self, query: str = "") -> builtins.list[str]:
        """:meth:`list` without the event loop."""
        prefix = self._prefix + self._checked(normalize_prefix, query)
        return [k[len(self._prefix):] for k in self._guard(self._list, prefix)]

    def thread(self, key: str) -> str:
        """The qvc thread that holds ``key``."""
        return place_of(self._key(key)).thread

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
        cid = uuid.uuid4().hex
        for _ in range(2):
            # One transaction: the new checkpoint goes on the thread's head as it is then (another
            # writer's save before it stays on the line, before this one).
            try:
                self.store.put_entries(thread, header(cid, next_step(self.store, thread)), metadata,
                                       lambda parent, write, fields=fields: field_entries(
                                           self.store, fields, parent or self.store.head(thread), write),
                                       source=SOURCE)
                return cid
            except SerializationError:
                as_text = text_fields(data)
                if fields == as_text:
                    raise
                fields = as_text  # JSON the store cannot hold as values (a lone surrogate): as text
        raise AssertionError("unreachable")

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
        head = self.store.head(place.thread)
        index = self._indexes.get(place.thread)
        if head is not None and (index is None or index.head != head):
            # The newest write of the key, walking back from the head: one step for the latest
            # snapshot (its save is usually the head), not the whole line an index reads.
            for info in self.store.first_parents(head):
                if info.thread_id != place.thread:
                    break
                if snapshot_id_of(_key_of(self.store.header(info.hex)[1]) or "") == place.snapshot_id:
                    return info.hex
                if index is not None and info.hex == index.head:
                    break  # older than this, the index knows
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
                    pause(attempt)
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

    def _key(self, key: Any) -> str:
        """``key`` normalized, under this view's namespace."""
        return self._prefix + self._checked(normalize_key, key)

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
