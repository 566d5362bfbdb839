"""``QvcSaver``: a LangGraph checkpoint saver backed by a qvc repository.

Install with ``pip install "qvc[langgraph]"``, then::

    from qvc.integrations.langgraph import QvcSaver

    with QvcSaver("agent.qvc") as saver:
        graph = builder.compile(checkpointer=saver)
        graph.invoke(inputs, {"configurable": {"thread_id": "t1"}})

How LangGraph's model maps onto the repository
==============================================

* A LangGraph ``(thread_id, checkpoint_ns)`` pair is one qvc thread, so one branch
  ``refs/heads/<thread>``. The qvc thread id is ``thread_id`` for the root namespace and
  ``thread_id + "/" + checkpoint_ns`` for a subgraph's, with ``%`` and ``/`` in ``thread_id``
  written as ``%25`` and ``%2F`` (so the mapping is reversible and never collides).
* A checkpoint is one commit in qvc's layout (:mod:`qvc.store.format`): a ``.qvc`` header blob plus
  one entry per channel. The header carries the checkpoint id, ``ts``, the channel versions
  and ``versions_seen`` exactly as given, the metadata, and the LangGraph parent id. A channel
  value is the pair ``serde.dumps_typed(value)`` of the saver's own ``serde``, stored as a
  msgpack ``[type, bytes]`` blob; a list longer than :data:`qvc.store.format.CHUNK` items is a tree
  of chunk blobs, each a msgpack list of such pairs (one per item), so appending to a long
  message list rewrites only its last chunk (:mod:`qvc.integrations.langgraph.values`).
* ``new_versions``: a channel that is not in ``new_versions`` and has the same version as in
  the parent checkpoint reuses the parent's tree entry (nothing is serialized or written).
* A thread is a tree. A commit's first parent is its LangGraph parent (``config``'s
  ``checkpoint_id`` at ``put``), or the previous head for a checkpoint without a parent. When
  a checkpoint forks from an older one (replay, ``update_state``), the previous head becomes
  a second parent, so the whole tree stays reachable from the branch: ``git log`` shows every
  checkpoint, ``git log --first-parent`` (and qvc's own readers) the current line.
  ``get_tuple`` without an id returns the newest checkpoint by id; ``list`` returns every
  checkpoint of the tree, newest first by id.
* Pending writes of checkpoint ``c`` of thread ``t`` are a commit under
  ``refs/qvc/writes/lg/<t>/<c>``, one blob per ``(task_id, idx)``, upserted as LangGraph's
  savers do: a regular write is kept on a repeat (idempotent), a special channel's write
  (``WRITES_IDX_MAP``, negative ``idx``) replaces the earlier one. They are keyed by
  checkpoint id, not commit, because LangGraph may write them before the checkpoint's ``put``
  finishes (durability ``"async"``).
* Deleting (``delete_thread``, ``delete_for_runs``, ``prune``) moves refs and rewrites the
  commits that descended from a deleted checkpoint; the data stays in the object store until
  :meth:`QvcSaver.purge`. ``copy_thread`` writes new commits and headers but shares every
  channel blob with the source.

Metadata is kept whole (every key given, a caller's ``"writes"`` included) and read back as
LangGraph's own savers return it, tuples as lists. ``get_delta_channel_history`` (LangGraph's
``DeltaChannel``) walks the first parents natively and returns what the base class's generic
walk returns.

The saver is an adapter over :class:`~qvc.store.git_store.GitCheckpointStore`: it writes only
through the repository's transaction, its checkpoint commits are the store's
(:meth:`~qvc.store.git_store.GitCheckpointStore.write_checkpoint`), and it reads through the
store's one :class:`~qvc.store.history.History`; what it adds is LangGraph's serialization of
channel values and its tree-shaped threads.

Values are treated as immutable once checkpointed, as LangGraph treats unchanged channels:
with ``share_values=True`` (the default) the saver remembers the Python objects of the long
lists it stored or loaded, reuses their serialized form when the same object (``is``) comes
back at the same position in a later checkpoint, and returns those same objects from
``get_tuple``. So a growing conversation costs what it adds, not what it holds. A node that
mutates a checkpointed item in place (instead of returning an update) would have the mutation
missed; pass ``share_values=False`` to serialize and deserialize every item every time.

Durability: ``durability="sync"`` (the default) makes every ``put`` and ``put_writes``
durable on return; ``"async"`` and ``"exit"`` flush in the background or at ``close()``
(see :mod:`qvc.plumbing.durability`). This is independent of LangGraph's own ``durability`` option,
which decides when the graph calls the saver.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import threading
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

try:
    from langgraph.checkpoint.base import DeltaChannelHistory
except ImportError:  # langgraph-checkpoint before 4.3 has no DeltaChannel: the same shape, untyped
    DeltaChannelHistory = Dict[str, Any]  # type: ignore[misc]

from qvc.errors import (
    CheckpointConflictError,
    CorruptionError,
    InvalidInputError,
    InvalidThreadIdError,
    SerializationError,
)
from qvc.integrations.langgraph.values import ChannelValues, Write
from qvc.plumbing.objects import Entry, commit_bytes, tree_bytes
from qvc.plumbing.repository import GENERATION, Repository, Transaction
from qvc.store import serde as qserde
from qvc.store.format import HEADER, decode_header, escape_trailer
from qvc.store.git_store import GitCheckpointStore
from qvc.store.history import LRU
from qvc.store.refnames import HEADS, WRITES, decode_name, decode_thread, encode_name, encode_thread, head_ref
from qvc.types import DurabilityMode

__all__ = ["QvcSaver", "thread_name", "split_thread_name"]

#: Where pending writes live: ``<WRITES_LG><encoded qvc thread>/<encoded checkpoint id>``.
WRITES_LG = WRITES + "lg/"
_ORDER = ".order"
_RETRIES = 100
_UNESCAPE = re.compile(r"%(25|2F)")


def thread_name(thread_id: str, checkpoint_ns: str = "") -> str:
    """The qvc thread id of a LangGraph ``(thread_id, checkpoint_ns)`` (see the module docstring)."""
    if not isinstance(thread_id, str) or not thread_id:
        raise InvalidThreadIdError(f"thread_id must be a non-empty string, not {thread_id!r}")
    tid = thread_id.replace("%", "%25").replace("/", "%2F")
    return tid if not checkpoint_ns else f"{tid}/{checkpoint_ns}"


def split_thread_name(name: str) -> tuple[str, str]:
    """The ``(thread_id, checkpoint_ns)`` a qvc thread id written by :func:`thread_name` stands for."""
    tid, _, ns = name.partition("/")
    return _UNESCAPE.sub(lambda m: "%" if m.group(1) == "25" else "/", tid), ns


def _enc(text: str) -> str:
    return encode_thread(text) if text else "%"


def _address(config: Any) -> tuple[str, str]:
    try:
        conf = config["configurable"]
    except (KeyError, TypeError):
        raise InvalidInputError("config must be a mapping with a 'configurable' mapping") from None
    thread = conf.get("thread_id")
    if thread is None:
        raise InvalidThreadIdError("config['configurable'] has no 'thread_id'")
    return str(thread), str(conf.get("checkpoint_ns") or "")


def _config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}}


@dataclass
class _Index:
    """The checkpoints of one qvc thread: every commit reachable from its head."""

    head: str
    generation: Any
    ids: Dict[str, str] = field(default_factory=dict)  # checkpoint id -> commit hex
    known: set = field(default_factory=set)  # every commit walked
    latest: Optional[str] = None  # the largest checkpoint id

    def add(self, cid: str) -> None:
        if self.latest is None or cid > self.latest:
            self.latest = cid


class QvcSaver(BaseCheckpointSaver[str]):
    """A LangGraph ``BaseCheckpointSaver`` that stores checkpoints in a qvc repository.

    Args:
        path: the repository directory (created if missing and ``create``).
        serde: LangGraph serializer for channel values, metadata extras and writes
            (default: LangGraph's ``JsonPlusSerializer``).
        durability: qvc's flush policy, ``"sync"`` (durable on return), ``"async"`` or ``"exit"``.
        fsync: ``False`` skips every flush (throwaway repositories).
        create: ``False`` raises :class:`~qvc.errors.NotARepositoryError` for a missing path.
        max_lag: ``"async"`` only: the longest a returned write waits for its flush (seconds).
        share_values: remember and reuse the objects of long lists (see the module docstring).

    Sync and async methods are both native; the async ones run the sync work in a worker
    thread, never on the event loop. Usable as a context manager (``with`` / ``async with``);
    :meth:`close` flushes. Errors are qvc's typed errors: :class:`~qvc.errors.InvalidInputError`
    for a malformed config or argument, :class:`~qvc.errors.CheckpointConflictError` when
    ``copy_thread``'s target exists, :class:`~qvc.errors.StoreClosedError` after ``close``.
    """

    def __init__(self, path: str | os.PathLike, *, serde: SerializerProtocol | None = None,
                 durability: DurabilityMode | str = DurabilityMode.SYNC, fsync: bool = True, create: bool = True,
                 max_lag: float = 0.05, share_values: bool = True) -> None:
        super().__init__(serde=serde)
        self._store = GitCheckpointStore(path, durability=durability, fsync=fsync, create=create, max_lag=max_lag)
        self._repo: Repository = self._store.repository
        self._history = self._store.history
        self._lock = threading.RLock()
        self._indexes: LRU = LRU(256)
        self._values = ChannelValues(self._history, share=share_values)

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def path(self) -> str:
        """The repository directory."""
        return self._store.path

    @property
    def store(self) -> GitCheckpointStore:
        """The qvc store over the same repository (threads written here read as qvc threads)."""
        return self._store

    def flush(self) -> None:
        """Make every write so far durable (see :mod:`qvc.plumbing.durability`)."""
        self._store.flush()

    def close(self) -> None:
        """Flush and release the repository. Idempotent."""
        self._store.close()

    def purge(self) -> None:
        """Drop deleted and pruned checkpoints from the object store for good (``git repack`` + ``prune``)."""
        self._store.purge()
        with self._lock:
            self._indexes.clear()

    def __enter__(self) -> QvcSaver:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> QvcSaver:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await asyncio.to_thread(self.close)

    def __repr__(self) -> str:
        return f"QvcSaver({self.path!r})"

    def get_next_version(self, current: str | int | float | None, channel: None = None) -> str:
        """The next channel version: a zero-padded counter and a random fraction, as strings compare."""
        if current is None:
            n = 0
        elif isinstance(current, str):
            n = int(current.split(".", 1)[0])
        else:
            n = int(current)
        return f"{n + 1:032}.{random.random():016}"

    # -- reading ----------------------------------------------------------------------------

    def _generation(self) -> Any:
        """Which generation of history the indexes were built for (a new one after any rewrite)."""
        return self._repo.file_identity(GENERATION)

    def _index(self, name: str, head: str | None) -> _Index | None:
        """The thread's checkpoint index for ``head`` (built once, then extended as the head moves)."""
        if head is None:
            return None
        generation = self._generation()
        with self._lock:
            index = self._indexes.get(name)
            if index is not None and index.generation == generation:
                if index.head == head:
                    return index
                if head not in index.known:
                    stops = self._walk(index, name, head)
                    if index.head in stops:  # the head moved forward: the old index still holds
                        index.head = head
                        return index
            index = _Index(head, generation)
            self._walk(index, name, head)
            self._indexes.put(name, index)
            return index

    def _walk(self, index: _Index, name: str, head: str) -> set[str]:
        """Add every commit reachable from ``head`` not yet in ``index``; return the known commits met."""
        stops: set[str] = set()
        stack = [head]
        while stack:
            hexid = stack.pop()
            if hexid in index.known:
                stops.add(hexid)
                continue
            index.known.add(hexid)
            info = self._history.commit(hexid)
            if info.thread_id == name:
                index.ids.setdefault(info.checkpoint_id, hexid)
                index.add(info.checkpoint_id)
            stack.extend(info.parents)
        return stops

    def _header(self, hexid: str) -> tuple[dict, dict, dict]:
        """``(qvc header, LangGraph checkpoint without channel_values, metadata)`` of a commit."""
        entries = self._history.entries(self._history.commit(hexid))
        if HEADER not in entries:
            raise CorruptionError(f"commit {hexid[:12]} is not a qvc checkpoint (no {HEADER} entry)")
        header, metadata = decode_header(self._history.blob(entries[HEADER][1]), f"checkpoint {hexid[:12]} header")
        lg = header.get("langgraph")
        if not isinstance(lg, dict):
            raise CorruptionError(f"checkpoint {hexid[:12]} was not written by QvcSaver (no LangGraph header)")
        if "checkpoint_typed" in lg:
            rest = self.serde.loads_typed(tuple(lg["checkpoint_typed"]))
        else:
            rest = lg.get("checkpoint") or {}
        if "metadata_typed" in lg:
            metadata = self.serde.loads_typed(tuple(lg["metadata_typed"]))
        else:
            metadata = _as_lists(metadata)  # as LangGraph's savers return it: its serde has no tuples
        return header, rest, metadata

    def _pending(self, name: str, checkpoint_id: str, channels: set[str] | None = None) -> list[tuple[str, str, Any]]:
        """The checkpoint's pending writes in ``writes_sort_key`` order (only those to ``channels``, if given)."""
        tip = self._repo.ref(_writes_ref(name, checkpoint_id))
        if tip is None:
            return []
        found = []
        for key, (_, raw) in self._history.entries(self._history.commit(tip)).items():
            if key == _ORDER:
                continue
            task, channel, idx, value = qserde.loads(self._history.blob(raw), f"write {key} of {checkpoint_id}")
            if channels is not None and channel not in channels:
                continue
            found.append(((value["task_path"], task, idx),
                          (task, channel, self.serde.loads_typed((value["type"], value["value"])))))
        found.sort(key=lambda item: item[0])
        return [w for _, w in found]

    def _tuple(self, name: str, hexid: str, parts: tuple[dict, dict, dict] | None = None) -> CheckpointTuple:
        header, rest, metadata = parts or self._header(hexid)
        tid, ns = split_thread_name(name)
        entries = self._history.entries(self._history.commit(hexid))
        checkpoint: dict = dict(rest)
        checkpoint["channel_values"] = {decode_name(n): self._values.load(self.serde, hexid, n, mode, raw)
                                        for n, (mode, raw) in entries.items() if n != HEADER}
        cid = header["id"]
        parent = header.get("parent_id")
        return CheckpointTuple(
            config=_config(tid, ns, cid),
            checkpoint=checkpoint,  # type: ignore[arg-type]
            metadata=metadata,  # type: ignore[arg-type]
            parent_config=_config(tid, ns, parent) if parent else None,
            pending_writes=self._pending(name, cid),
        )

    def get_tuple(self, config: RunnableConfig) -> Optional[CheckpointTuple]:
        """The checkpoint ``config`` names (its ``checkpoint_id``), else the thread's newest by id.

        ``None`` for an empty thread or an unknown id. ``pending_writes`` are in LangGraph's
        ``writes_sort_key`` order (task path, task id, index).
        """
        self._repo.raise_if_failed()
        tid, ns = _address(config)
        name = thread_name(tid, ns)
        index = self._index(name, self._repo.ref(head_ref(name)))
        if index is None:
            return None
        cid = config["configurable"].get("checkpoint_id") or index.latest
        hexid = index.ids.get(cid) if cid is not None else None
        return None if hexid is None else self._tuple(name, hexid)

    def _names(self, thread_id: str | None = None) -> list[str]:
        """The qvc threads of a LangGraph thread (every namespace), or of every thread."""
        out = []
        for ref, tip in self._repo.refs(HEADS):
            name = decode_thread(ref[len(HEADS):])
            if name is None:  # a long id: the full name is in the head commit
                name = self._history.commit(tip).thread_id
            if name is None or (thread_id is not None and split_thread_name(name)[0] != thread_id):
                continue
            out.append(name)
        return out

    def list(self, config: Optional[RunnableConfig], *, filter: Optional[Dict[str, Any]] = None,
             before: Optional[RunnableConfig] = None, limit: Optional[int] = None) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first by checkpoint id: every checkpoint of the thread's tree.

        ``config`` ``None`` lists every thread; a config without ``checkpoint_ns`` lists every
        namespace of its thread; a ``checkpoint_id`` in it selects that checkpoint. ``filter``
        keeps checkpoints whose metadata equals each given key's value; ``before`` keeps ids
        smaller than its ``checkpoint_id``; ``limit`` caps the count.
        """
        self._repo.raise_if_failed()
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
            raise InvalidInputError(f"limit must be a non-negative integer, not {limit!r}")
        wanted = None
        if config is None:
            names = self._names()
        else:
            tid, _ = _address(config)
            ns = config["configurable"].get("checkpoint_ns")
            names = [thread_name(tid, str(ns))] if ns is not None else self._names(tid)
            wanted = config["configurable"].get("checkpoint_id")
        before_id = before["configurable"].get("checkpoint_id") if before else None
        found = []
        for name in names:
            index = self._index(name, self._repo.ref(head_ref(name)))
            if index is None:
                continue
            for cid, hexid in index.ids.items():
                if (wanted is None or cid == wanted) and (before_id is None or cid < before_id):
                    found.append((cid, name, hexid))
        found.sort(reverse=True)
        return self._iter_list(found, filter or {}, limit)

    def _iter_list(self, found: list, filter: dict, limit: int | None) -> Iterator[CheckpointTuple]:
        count = 0
        for _, name, hexid in found:
            if limit is not None and count >= limit:
                return
            try:
                parts = self._header(hexid)
            except CorruptionError:
                if filter or not self._is_foreign(hexid):
                    raise
                continue  # a plain qvc thread in the same repository: not a LangGraph checkpoint
            if any(parts[2].get(k) != v for k, v in filter.items()):
                continue
            count += 1
            yield self._tuple(name, hexid, parts)

    def _is_foreign(self, hexid: str) -> bool:
        entries = self._history.entries(self._history.commit(hexid))
        header, _ = decode_header(self._history.blob(entries[HEADER][1]), f"checkpoint {hexid[:12]}")
        return "langgraph" not in header

    def get_delta_channel_history(self, *, config: RunnableConfig,
                                  channels: Sequence[str]) -> Mapping[str, DeltaChannelHistory]:
        """Per channel, the pending writes along the checkpoint's ancestors (oldest first) back to
        the nearest ancestor storing a value for it (its ``seed``), for LangGraph's ``DeltaChannel``.

        Returns exactly what ``BaseCheckpointSaver``'s generic walk returns, read natively: the
        walk follows the thread's first parents (the LangGraph parents) and decodes only the
        requested channels' writes and seeds. Empty ``channels``: an empty mapping.
        """
        if not channels:
            return {}
        self._repo.raise_if_failed()
        tid, ns = _address(config)
        name = thread_name(tid, ns)
        index = self._index(name, self._repo.ref(head_ref(name)))
        collected: dict[str, list] = {ch: [] for ch in channels}
        seeds: dict[str, Any] = {}
        remaining = set(channels)
        cid = config["configurable"].get("checkpoint_id") or (index.latest if index else None)
        hexid = index.ids.get(cid) if (index is not None and cid is not None) else None
        parent_id = self._header(hexid)[0].get("parent_id") if hexid is not None else None
        while parent_id and remaining:
            first = self._history.commit(hexid).parent
            if first is None or self._history.commit(first).checkpoint_id != parent_id:
                first = index.ids.get(parent_id)  # a parent put after its child (kept as given)
            if first is None:
                break
            hexid = first
            for write in reversed(self._pending(name, parent_id, remaining)):
                collected[write[1]].append(write)
            entries = self._history.entries(self._history.commit(hexid))
            for ch in list(remaining):
                entry = entries.get(encode_name(ch))
                if entry is not None:
                    seeds[ch] = self._values.load(self.serde, hexid, encode_name(ch), *entry)
                    remaining.discard(ch)
            parent_id = self._header(hexid)[0].get("parent_id")
        result: dict[str, DeltaChannelHistory] = {}
        for ch in channels:
            entry_out: DeltaChannelHistory = {"writes": list(reversed(collected[ch]))}
            if ch in seeds:
                entry_out["seed"] = seeds[ch]
            result[ch] = entry_out
        return result

    # -- writing ----------------------------------------------------------------------------

    def _fields(self, write: Write, parent: str | None, values: dict, versions: dict,
                new_versions: dict) -> dict[str, Entry]:
        """Tree entries of the channels, reusing the parent's for channels unchanged since it."""
        p_entries: dict = {}
        p_versions: dict = {}
        if parent is not None:
            p_entries = self._history.entries(self._history.commit(parent))
            p_versions = self._header(parent)[1].get("channel_versions") or {}
        entries: dict[str, Entry] = {}
        for ch in dict.fromkeys([*values, *versions]):
            if not isinstance(ch, str):
                raise InvalidInputError(f"channel names must be strings, not {ch!r}")
            ename = encode_name(ch)
            old = p_entries.get(ename)
            if (old is not None and ch not in new_versions and ch in versions and ch in p_versions
                    and p_versions[ch] == versions[ch]):
                entries[ename] = old
            elif ch in values:
                entries[ename] = self._values.entry(self.serde, write, values[ch], old)
        return entries

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        """Store ``checkpoint`` as a commit on its thread; return the config that addresses it.

        Its parent is ``config``'s ``checkpoint_id`` (kept as given even if unknown). Channels
        not in ``new_versions`` whose version equals the parent's are not rewritten. Re-putting
        an id with the same content is a no-op; with other content the new one replaces it.
        Durable on return with ``durability="sync"``.
        """
        tid, ns = _address(config)
        name = thread_name(tid, ns)
        cid = checkpoint.get("id") if isinstance(checkpoint, dict) else None
        if not isinstance(cid, str) or not cid:
            raise InvalidInputError(f"checkpoint['id'] must be a non-empty string, not {cid!r}")
        parent_id = config["configurable"].get("checkpoint_id")
        metadata = get_checkpoint_metadata(config, metadata)
        values = dict(checkpoint.get("channel_values") or {})
        versions = dict(checkpoint.get("channel_versions") or {})
        lg: dict[str, Any] = {"thread_id": tid, "checkpoint_ns": ns}
        rest = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        try:
            qserde.dumps(rest, "checkpoint")
            lg["checkpoint"] = rest
        except SerializationError:  # e.g. legacy pending_sends holding Send objects
            lg["checkpoint_typed"] = list(self.serde.dumps_typed(rest))
        plain_meta: dict = dict(metadata)
        try:
            qserde.dumps(plain_meta, "metadata")
        except SerializationError:
            lg["metadata_typed"] = list(self.serde.dumps_typed(plain_meta))
            plain_meta = {}
        step = metadata.get("step")
        step = step if isinstance(step, int) and not isinstance(step, bool) else 0
        base = {"id": cid, "thread_id": name, "step": step, "parent_id": parent_id,
                "created_at": checkpoint.get("ts", ""), "langgraph": lg}
        ref = head_ref(name)
        fields_for: dict[str | None, tuple[list[tuple[str, bytes]], dict]] = {}
        with self._repo.writing():  # no maintenance between the retries
            for _ in range(_RETRIES):
                with self._repo.transaction() as tx:
                    head = tx.ref(ref)
                    index = self._index(name, head)
                    existing = index.ids.get(cid) if index else None
                    parent = index.ids.get(parent_id) if (index and parent_id) else None
                    if parent not in fields_for:  # serialized once, whatever the retries
                        objects: list[tuple[str, bytes]] = []
                        fields = self._fields(lambda kind, data, out=objects: out.append((kind, data)), parent,
                                              values, versions, new_versions or {})
                        fields_for[parent] = (objects, fields)
                    objects, fields = fields_for[parent]
                    if existing is not None and self._same(existing, fields, base, plain_meta):
                        return _config(tid, ns, cid)
                    for kind, data in objects:
                        tx.write(kind, data)
                    first = parent or head
                    parents = [first] if first else []
                    if head is not None and first != head:
                        parents.append(head)  # a fork: the previous head stays reachable
                    new = self._store.write_checkpoint(tx, {**base}, plain_meta, fields, parents,
                                                       source=str(metadata.get("source", "")))
                    try:
                        tx.move_ref(ref, head, new)
                    except CheckpointConflictError:
                        continue  # another writer moved the thread: commit again on top of its head
                if existing is not None:
                    self._replace(name, new, existing)
                return _config(tid, ns, cid)
        raise CheckpointConflictError(f"thread {name!r}: too many concurrent writers")

    def _same(self, existing: str, fields: dict, base: dict, plain_meta: dict) -> bool:
        entries = self._history.entries(self._history.commit(existing))
        old_header, old_meta = decode_header(self._history.blob(entries[HEADER][1]), f"checkpoint {existing[:12]}")
        old_header.pop("versions", None)
        return ({n: e for n, e in entries.items() if n != HEADER} == fields
                and qserde.dumps([old_header, old_meta]) == qserde.dumps([base, plain_meta]))

    def _replace(self, name: str, new: str, existing: str) -> None:
        """After re-putting an id with new content: drop the old commit of that id from the thread."""
        ref = head_ref(name)
        with self._repo.transaction() as tx:
            tx.rewrite_history()
            head = tx.ref(ref)
            tip = self._rewrite(tx, name, head, {existing}, keep_id=new)
            tx.move_ref(ref, head, tip)
        self._forget(name)

    def put_writes(self, config: RunnableConfig, writes: Sequence[Tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        """Store a task's intermediate writes for the checkpoint ``config`` names.

        Keyed by ``(task_id, idx)``, ``idx`` being the write's position or, for a special
        channel, its ``WRITES_IDX_MAP`` value: a repeated regular write is ignored, a special
        one replaces the earlier. Durable on return with ``durability="sync"``.
        """
        tid, ns = _address(config)
        name = thread_name(tid, ns)
        cid = config["configurable"].get("checkpoint_id")
        if not isinstance(cid, str) or not cid:
            raise InvalidInputError("put_writes needs config['configurable']['checkpoint_id']")
        items = []
        for i, write in enumerate(writes):
            channel, value = write
            idx = WRITES_IDX_MAP.get(channel, i)
            t, b = self.serde.dumps_typed(value)
            data = qserde.dumps([task_id, channel, idx, {"type": t, "value": bytes(b), "task_path": task_path}],
                                f"writes[{i}]")
            items.append((f"{_enc(task_id)}.{idx}", idx >= 0, data))
        if not items:
            return
        ref = _writes_ref(name, cid)
        for _ in range(_RETRIES):
            with self._repo.transaction() as tx:
                old = tx.ref(ref)
                entries = dict(self._history.entries(self._history.commit(old))) if old else {}
                order = (qserde.loads(self._history.blob(entries[_ORDER][1]), "writes order")
                         if _ORDER in entries else [])
                changed = False
                for key, keep_first, data in items:
                    if keep_first and key in entries:
                        continue
                    entry = self._values.blob(tx.write, data, entries.get(key))
                    if entries.get(key) != entry:
                        entries[key] = entry
                        changed = True
                    if key not in order:
                        order.append(key)
                if not changed:
                    return
                entries[_ORDER] = self._values.blob(tx.write, qserde.dumps(order), entries.get(_ORDER))
                tree = tx.write("tree", tree_bytes(entries))
                message = f"writes of task {escape_trailer(task_id)} for checkpoint {escape_trailer(cid)}\n"
                new = tx.write("commit", commit_bytes(tree.hex(), [old] if old else [], message))
                try:
                    tx.move_ref(ref, old, new.hex())
                except CheckpointConflictError:
                    continue
                return
        raise CheckpointConflictError(f"writes of checkpoint {cid!r}: too many concurrent writers")

    # -- deleting, pruning, copying ----------------------------------------------------------

    def _forget(self, name: str) -> None:
        """Drop the thread's index after its history was rewritten (other processes learn it from
        the generation token the rewriting transaction wrote)."""
        with self._lock:
            self._indexes.pop(name, None)

    def _writes_refs(self, name: str) -> list[tuple[str, str]]:
        prefix = f"{WRITES_LG}{encode_thread(name)}/"
        return [(ref, tip) for ref, tip in self._repo.refs(prefix)]

    def _rewrite(self, tx: Transaction, name: str, head: str, drop: set[str], *, keep_id: str | None = None,
                 rename: tuple[str, str] | None = None) -> str | None:
        """Rewrite the thread's commits without those in ``drop``; return the new head (``None``: empty).

        A dropped commit's children get its parents instead; commits with unchanged parents
        keep their SHA unless ``rename`` (old, new qvc thread) rewrites every header.
        ``keep_id``'s commit becomes the head when several lines remain.
        """
        order: list[str] = []  # parents before children
        seen: set[str] = set()
        stack: list[tuple[str, bool]] = [(head, False)]
        while stack:
            hexid, done = stack.pop()
            if done:
                order.append(hexid)
                continue
            if hexid in seen:
                continue
            seen.add(hexid)
            stack.append((hexid, True))
            stack.extend((p, False) for p in self._history.commit(hexid).parents if p not in seen)
        mapped: dict[str, list[str]] = {}
        made: dict[str, tuple[str, list[str], str, int, str]] = {}  # new sha -> (tree, parents, msg, time, id)
        for hexid in order:
            info = self._history.commit(hexid)
            parents = list(dict.fromkeys(q for p in info.parents for q in mapped[p]))
            if hexid in drop:
                mapped[hexid] = parents
                continue
            if parents == list(info.parents) and rename is None:
                mapped[hexid] = [hexid]
                continue
            if rename is not None:
                new = self._store.rewrite_commit(tx, hexid, parents, thread=rename[1],
                                                 header_update=self._renamed_header(hexid, rename[1]))
            else:
                new = self._store.rewrite_commit(tx, hexid, parents)
            made[new] = (parents, info.checkpoint_id)
            mapped[hexid] = [new]
        tips = mapped[head]
        if len(tips) <= 1:
            return tips[0] if tips else None

        def cid_of(sha: str) -> str:
            return made[sha][1] if sha in made else self._history.commit(sha).checkpoint_id

        main = next((t for t in tips if t == keep_id), None) or max(tips, key=cid_of)
        parents = made[main][0] if main in made else list(self._history.commit(main).parents)
        parents = parents + [t for t in tips if t != main and t not in parents]
        tx.make_readable()  # ``main`` may be a commit of this transaction: it is read back
        return self._store.rewrite_commit(tx, main, parents)

    def _renamed_header(self, hexid: str, new: str) -> dict[str, Any]:
        """What changes in the header of ``hexid``'s checkpoint as a checkpoint of thread ``new``."""
        header, _ = self._store.header(hexid)
        tid, ns = split_thread_name(new)
        return {"langgraph": {**(header.get("langgraph") or {}), "thread_id": tid, "checkpoint_ns": ns}}

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and pending write of ``thread_id``, in every namespace (no-op if none)."""
        thread_id = str(thread_id)
        with self._repo.transaction() as tx:
            names = self._names(thread_id)
            if not names:
                return
            tx.rewrite_history()
            try:  # heads first: a crash part-way leaves only unreachable pending writes
                for name in names:
                    head = tx.ref(head_ref(name))
                    if head is not None:
                        tx.move_ref(head_ref(name), head, None)
                for name in names:
                    for ref, tip in self._writes_refs(name):
                        tx.move_ref(ref, tip, None)
            finally:
                for name in names:
                    self._forget(name)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete every checkpoint whose ``metadata["run_id"]`` is in ``run_ids``, with its writes.

        Checkpoints that descended from a deleted one are kept (re-parented onto its parents);
        their ``parent_config`` still names the deleted id, as LangGraph's SQL savers leave it.
        """
        runs = {str(r) for r in run_ids}
        if not runs:
            return
        with self._repo.writing():
            for name in self._names():
                head = self._repo.ref(head_ref(name))
                index = self._index(name, head)
                if index is None:
                    continue
                drop = {}
                for cid, hexid in index.ids.items():
                    try:
                        run = self._header(hexid)[2].get("run_id")
                    except CorruptionError:
                        continue  # not a LangGraph checkpoint
                    if run is not None and str(run) in runs:
                        drop[hexid] = cid
                if not drop:
                    continue
                try:
                    with self._repo.transaction() as tx:
                        tx.rewrite_history()
                        tip = self._rewrite(tx, name, head, set(drop))
                        tx.move_ref(head_ref(name), head, tip)
                        gone = {_writes_ref(name, cid) for cid in drop.values()}
                        for ref, wtip in self._writes_refs(name):
                            if ref in gone:
                                tx.move_ref(ref, wtip, None)
                finally:
                    self._forget(name)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Prune threads: ``"keep_latest"`` keeps only the newest checkpoint of each namespace
        (with its pending writes), ``"delete"`` deletes the threads. Missing threads are skipped.

        LangGraph's ``DeltaChannel`` (beta) is not supported by ``keep_latest``: its kept
        checkpoint would lose the ancestors its value is rebuilt from.
        """
        if strategy not in ("keep_latest", "delete"):
            raise InvalidInputError(f"strategy must be 'keep_latest' or 'delete', not {strategy!r}")
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            with self._repo.writing():
                for name in self._names(str(thread_id)):
                    head = self._repo.ref(head_ref(name))
                    index = self._index(name, head)
                    if index is None or index.latest is None:
                        continue
                    keep = index.ids[index.latest]
                    try:
                        with self._repo.transaction() as tx:
                            tx.rewrite_history()
                            new = keep
                            if self._history.commit(keep).parents:
                                new = self._store.rewrite_commit(tx, keep, [])
                            if new != head:
                                tx.move_ref(head_ref(name), head, new)
                            kept = _writes_ref(name, index.latest)
                            for ref, tip in self._writes_refs(name):
                                if ref != kept:
                                    tx.move_ref(ref, tip, None)
                    finally:
                        self._forget(name)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint (ids, structure, metadata) and pending write of a thread, in every
        namespace, to another thread id. The copies share every channel blob with the source.

        No-op for a missing source; :class:`~qvc.errors.CheckpointConflictError` if the target
        already has checkpoints in a namespace being copied.
        """
        source, target = str(source_thread_id), str(target_thread_id)
        with self._repo.transaction() as tx:
            plans = []
            for name in self._names(source):
                _, ns = split_thread_name(name)
                dest = thread_name(target, ns)
                if self._repo.ref(head_ref(dest)) is not None:
                    raise CheckpointConflictError(f"copy_thread: thread {target!r} already has checkpoints"
                                                  f"{f' in namespace {ns!r}' if ns else ''}")
                plans.append((name, dest))
            for name, dest in plans:
                head = tx.ref(head_ref(name))
                if head is None:
                    continue
                tip = self._rewrite(tx, name, head, set(), rename=(name, dest))
                tx.move_ref(head_ref(dest), None, tip)
                prefix = f"{WRITES_LG}{encode_thread(name)}/"
                for ref, wtip in self._writes_refs(name):
                    tx.move_ref(f"{WRITES_LG}{encode_thread(dest)}/{ref[len(prefix):]}", None, wtip)

    # -- async twins ------------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> Optional[CheckpointTuple]:
        """Async :meth:`get_tuple` (runs in a worker thread)."""
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(self, config: Optional[RunnableConfig], *, filter: Optional[Dict[str, Any]] = None,
                    before: Optional[RunnableConfig] = None,
                    limit: Optional[int] = None) -> AsyncIterator[CheckpointTuple]:
        """Async :meth:`list`: tuples are read in batches in a worker thread."""
        iterator = await asyncio.to_thread(self.list, config, filter=filter, before=before, limit=limit)
        while True:
            batch = await asyncio.to_thread(_take, iterator, 32)
            for item in batch:
                yield item
            if len(batch) < 32:
                return

    async def aget_delta_channel_history(self, *, config: RunnableConfig,
                                         channels: Sequence[str]) -> Mapping[str, DeltaChannelHistory]:
        """Async :meth:`get_delta_channel_history` (runs in a worker thread)."""
        return await asyncio.to_thread(lambda: self.get_delta_channel_history(config=config, channels=channels))

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        """Async :meth:`put` (runs in a worker thread)."""
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[Tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        """Async :meth:`put_writes` (runs in a worker thread)."""
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """Async :meth:`delete_thread` (runs in a worker thread)."""
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async :meth:`delete_for_runs` (runs in a worker thread)."""
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async :meth:`copy_thread` (runs in a worker thread)."""
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Async :meth:`prune` (runs in a worker thread)."""
        await asyncio.to_thread(lambda: self.prune(thread_ids, strategy=strategy))


def _as_lists(value: Any) -> Any:
    """``value`` with every tuple inside dicts and lists made a list, as a JSON or msgpack round trip gives."""
    if isinstance(value, dict):
        return {k: _as_lists(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_lists(v) for v in value]
    return value


def _writes_ref(name: str, checkpoint_id: str) -> str:
    return f"{WRITES_LG}{encode_thread(name)}/{_enc(checkpoint_id)}"


def _take(iterator: Iterator[CheckpointTuple], n: int) -> List[CheckpointTuple]:
    out = []
    for item in iterator:
        out.append(item)
        if len(out) >= n:
            break
    return out
