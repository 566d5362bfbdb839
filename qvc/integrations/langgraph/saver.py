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
* A thread is the store's: a line of commits plus the lines time travel left under
  ``refs/qvc/superseded/<thread>/``. A commit's first parent is its LangGraph parent
  (``config``'s ``checkpoint_id`` at ``put``), or the head for a checkpoint without one. A
  checkpoint that forks from an inner one (replay, ``update_state``) is a time travel: the
  head's line is kept as a superseded line and the head moves to the new commit
  (:meth:`~qvc.store.git_store.GitCheckpointStore.put_entries`). Repositories written before
  kept that line as a second parent of the fork; both shapes read the same.
  ``get_tuple`` without an id returns the newest checkpoint by id; ``list`` returns every
  checkpoint of every line, newest first by id.
* Pending writes of checkpoint ``c`` of thread ``t`` are the store's keyed pending writes
  (:meth:`~qvc.store.git_store.GitCheckpointStore.put_checkpoint_writes`), one entry per
  ``(task_id, idx)``, upserted as LangGraph's savers do: a regular write is kept on a repeat
  (idempotent), a special channel's write (``WRITES_IDX_MAP``, negative ``idx``) replaces the
  earlier one. They are keyed by checkpoint id, not commit, because LangGraph may write them
  before the checkpoint's ``put`` finishes (durability ``"async"``).
* Deleting (``delete_thread``, ``delete_for_runs``, ``prune``) and ``copy_thread`` are the
  store's rewrites (:mod:`qvc.store.rewrite`); the data stays in the object store until
  :meth:`QvcSaver.purge`; copies share every channel blob with the source.

Metadata is kept whole (every key given, a caller's ``"writes"`` included) and read back as
LangGraph's own savers return it, tuples as lists. ``get_delta_channel_history`` (LangGraph's
``DeltaChannel``) walks the first parents natively and returns what the base class's generic
walk returns.

The saver is an adapter over :class:`~qvc.store.git_store.GitCheckpointStore`'s public API:
it maps LangGraph's calls and types onto the store's and serializes channel values with
LangGraph's serializer (:mod:`qvc.integrations.langgraph.values`); it has no write path,
index or pending-writes layout of its own.

Values are treated as immutable once checkpointed, as LangGraph treats unchanged channels:
with ``share_values=True`` (the default) the saver remembers the Python objects of the long
lists it stored or loaded, reuses their serialized form when the same object (``is``) comes
back at the same position in a later checkpoint, and returns those same objects from
``get_tuple``. So a growing conversation costs what it adds, not what it holds. A node that
mutates a checkpointed item in place (instead of returning an update) would have the mutation
missed; pass ``share_values=False`` to serialize and deserialize every item every time.

Durability: ``durability="sync"`` (the default) makes every ``put`` and ``put_writes``
durable on return; ``"async"`` and ``"exit"`` flush in the background or at ``close()``
(see docs/durability.md). This is independent of LangGraph's own ``durability`` option,
which decides when the graph calls the saver.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
from typing import Any, AsyncIterator, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

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

from qvc.codec import serde as qserde
from qvc.errors import CorruptionError, InvalidInputError, InvalidThreadIdError, SerializationError
from qvc.integrations.langgraph.values import ChannelValues
from qvc.store.format import HEADER, FieldEntry, escape_trailer
from qvc.store.git_store import GitCheckpointStore
from qvc.store.prefixes import owner_of
from qvc.store.refnames import decode_name, encode_name
from qvc.store.writes import KEYED, Item, entry_key
from qvc.types import DurabilityMode

__all__ = ["QvcSaver", "thread_name", "split_thread_name"]

#: Where pending writes live (the store's keyed writes): ``<WRITES_LG><encoded qvc thread>/%all``
#: (:mod:`qvc.store.writes`; ``<WRITES_LG><encoded qvc thread>/<encoded checkpoint id>`` before).
WRITES_LG = KEYED
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
        self._values = ChannelValues(self._store.history, share=share_values)

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
        """Make every write so far durable (see docs/durability.md)."""
        self._store.flush()

    def close(self) -> None:
        """Flush and release the repository. Idempotent."""
        self._store.close()

    def purge(self) -> None:
        """Drop deleted and pruned checkpoints from the object store for good (``git repack`` + ``prune``)."""
        self._store.purge()

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

    def _header(self, hexid: str) -> tuple[dict, dict, dict]:
        """``(qvc header, LangGraph checkpoint without channel_values, metadata)`` of a commit."""
        header, metadata = self._store.header(hexid)
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
        found = []
        for key, data in self._store.checkpoint_writes(name, checkpoint_id):
            task, channel, idx, value = qserde.loads(data, f"write {key} of {checkpoint_id}")
            if channels is not None and channel not in channels:
                continue
            found.append(((value["task_path"], task, idx),
                          (task, channel, self.serde.loads_typed((value["type"], value["value"])))))
        found.sort(key=lambda item: item[0])
        return [w for _, w in found]

    def _tuple(self, name: str, hexid: str, parts: tuple[dict, dict, dict] | None = None) -> CheckpointTuple:
        header, rest, metadata = parts or self._header(hexid)
        tid, ns = split_thread_name(name)
        checkpoint: dict = dict(rest)
        checkpoint["channel_values"] = {decode_name(n): self._values.load(self.serde, hexid, n, mode, raw)
                                        for n, (mode, raw) in self._store.tree_entries(hexid).items() if n != HEADER}
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
        self._store.raise_if_failed()
        name = thread_name(*_address(config))
        index = self._store.thread_index(name)
        if index is None:
            return None
        cid = config["configurable"].get("checkpoint_id") or index.latest
        hexid = index.ids.get(cid) if cid is not None else None
        return None if hexid is None else self._tuple(name, hexid)

    def _names(self, thread_id: str | None = None) -> list[str]:
        """The qvc threads of a LangGraph thread (every namespace), or every thread of the repository
        (the caller skips those QvcSaver did not write). A namespace's thread must be QvcSaver's:
        in a repository shared with other adapters, ``openai/session/x`` is no namespace of a
        LangGraph thread ``openai``."""
        if thread_id is None:
            return [name for name, _ in self._store.thread_heads() if name is not None]
        root = thread_name(thread_id)
        return [name for name, head in self._store.thread_heads()
                if name is not None and split_thread_name(name)[0] == thread_id
                and (name == root or self._ours(name, head))]

    def _ours(self, name: str, head: str) -> bool:
        """Whether the namespace thread ``name`` (at ``head``) is QvcSaver's: no other adapter's
        prefix, and a head written by QvcSaver (or one that does not read: a damaged thread of ours)."""
        if owner_of(name) is not None:
            return False
        try:
            return "langgraph" in self._store.header(head)[0]
        except CorruptionError:
            return True

    def list(self, config: Optional[RunnableConfig], *, filter: Optional[Dict[str, Any]] = None,
             before: Optional[RunnableConfig] = None, limit: Optional[int] = None) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first by checkpoint id: every checkpoint of every line of the thread.

        ``config`` ``None`` lists every thread; a config without ``checkpoint_ns`` lists every
        namespace of its thread; a ``checkpoint_id`` in it selects that checkpoint. ``filter``
        keeps checkpoints whose metadata equals each given key's value; ``before`` keeps ids
        smaller than its ``checkpoint_id``; ``limit`` caps the count.
        """
        self._store.raise_if_failed()
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
            index = self._store.thread_index(name)
            if index is None:
                continue
            for cid, hexid in list(index.ids.items()):  # a copy: another thread may extend the index
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
                if "langgraph" in self._store.header(hexid)[0]:
                    raise
                continue  # another adapter's or a plain qvc thread in the same repository: not LangGraph's
            if any(parts[2].get(k) != v for k, v in filter.items()):
                continue
            count += 1
            yield self._tuple(name, hexid, parts)

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
        self._store.raise_if_failed()
        name = thread_name(*_address(config))
        index = self._store.thread_index(name)
        collected: dict[str, list] = {ch: [] for ch in channels}
        seeds: dict[str, Any] = {}
        remaining = set(channels)
        cid = config["configurable"].get("checkpoint_id") or (index.latest if index else None)
        hexid = index.ids.get(cid) if (index is not None and cid is not None) else None
        parent_id = self._header(hexid)[0].get("parent_id") if hexid is not None else None
        while parent_id and remaining and index is not None and hexid is not None:
            first = self._store.commit_info(hexid).parent
            if first is None or self._store.commit_info(first).checkpoint_id != parent_id:
                first = index.ids.get(parent_id)  # a parent put after its child (kept as given)
            if first is None:
                break
            hexid = first
            for write in reversed(self._pending(name, parent_id, remaining)):
                collected[write[1]].append(write)
            entries = self._store.tree_entries(hexid)
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

    def _entries_of(self, values: dict, versions: dict,
                    new_versions: dict) -> Callable[[str | None, Callable[[str, bytes], bytes]], dict[str, FieldEntry]]:
        """The channels' tree entries against a parent, reusing its entries for channels
        unchanged since it (what :meth:`GitCheckpointStore.put_entries` asks for)."""

        def entries_of(parent: str | None, write: Callable[[str, bytes], bytes]) -> dict[str, FieldEntry]:
            p_entries: dict = self._store.tree_entries(parent) if parent is not None else {}
            p_versions: dict = (self._header(parent)[1].get("channel_versions") or {}) if parent is not None else {}
            entries: dict[str, FieldEntry] = {}
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

        return entries_of

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        """Store ``checkpoint`` as a commit on its thread; return the config that addresses it.

        Its parent is ``config``'s ``checkpoint_id`` (kept as given even if unknown). Channels
        not in ``new_versions`` whose version equals the parent's are not rewritten. Re-putting
        an id with the same content is a no-op; with other content the new one replaces it.
        Durable on return with ``durability="sync"``.
        """
        tid, ns = _address(config)
        cid = checkpoint.get("id") if isinstance(checkpoint, dict) else None
        if not isinstance(cid, str) or not cid:
            raise InvalidInputError(f"checkpoint['id'] must be a non-empty string, not {cid!r}")
        parent_id = config["configurable"].get("checkpoint_id")
        metadata = get_checkpoint_metadata(config, metadata)
        rest = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        step = metadata.get("step")
        lg: dict[str, Any] = {"thread_id": tid, "checkpoint_ns": ns, "checkpoint": rest}
        header = {"id": cid, "thread_id": thread_name(tid, ns),
                  "step": step if isinstance(step, int) and not isinstance(step, bool) else 0,
                  "parent_id": parent_id, "created_at": checkpoint.get("ts", ""), "langgraph": lg}
        entries_of = self._entries_of(dict(checkpoint.get("channel_values") or {}),
                                      dict(checkpoint.get("channel_versions") or {}), new_versions or {})
        plain_meta: dict = dict(metadata)
        for attempt in range(3):  # serialized once; what qvc's msgpack cannot hold goes through serde
            try:
                self._store.put_entries(header["thread_id"], header, plain_meta, entries_of, parent_id=parent_id,
                                        source=str(metadata.get("source", "")))
                return _config(tid, ns, cid)
            except SerializationError:
                if attempt == 0 and _unstorable(rest):  # e.g. legacy pending_sends holding Send objects
                    lg.pop("checkpoint")
                    lg["checkpoint_typed"] = list(self.serde.dumps_typed(rest))
                elif "metadata_typed" not in lg and _unstorable(plain_meta):
                    lg["metadata_typed"] = list(self.serde.dumps_typed(plain_meta))
                    plain_meta = {}
                else:
                    raise
        raise AssertionError("unreachable")

    def put_writes(self, config: RunnableConfig, writes: Sequence[Tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        """Store a task's intermediate writes for the checkpoint ``config`` names.

        Keyed by ``(task_id, idx)``, ``idx`` being the write's position or, for a special
        channel, its ``WRITES_IDX_MAP`` value: a repeated regular write is ignored, a special
        one replaces the earlier. Durable on return with ``durability="sync"``.
        """
        tid, ns = _address(config)
        cid = config["configurable"].get("checkpoint_id")
        if not isinstance(cid, str) or not cid:
            raise InvalidInputError("put_writes needs config['configurable']['checkpoint_id']")
        items = []
        for i, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, i)
            t, b = self.serde.dumps_typed(value)
            data = qserde.dumps([task_id, channel, idx, {"type": t, "value": bytes(b), "task_path": task_path}],
                                f"writes[{i}]")
            items.append(Item(f"{entry_key(task_id)}.{idx}", data, keep_first=idx >= 0))
        message = f"writes of task {escape_trailer(task_id)} for checkpoint {escape_trailer(cid)}\n"
        self._store.put_checkpoint_writes(thread_name(tid, ns), cid, items, message)

    # -- deleting, pruning, copying ----------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and pending write of ``thread_id``, in every namespace (no-op if none)."""
        self._store.delete_threads(self._names(str(thread_id)), missing_ok=True)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete every checkpoint whose ``metadata["run_id"]`` is in ``run_ids``, with its writes.

        Checkpoints that descended from a deleted one are kept (re-parented onto its parents);
        their ``parent_config`` still names the deleted id, as LangGraph's SQL savers leave it.
        """
        runs = {str(r) for r in run_ids}
        if not runs:
            return
        for name in self._names():
            index = self._store.thread_index(name)
            drop = []
            for hexid in (list(index.ids.values()) if index else []):
                try:
                    run = self._header(hexid)[2].get("run_id")
                except CorruptionError:
                    continue  # not a LangGraph checkpoint
                if run is not None and str(run) in runs:
                    drop.append(hexid)
            if drop:
                self._store.drop_checkpoints(name, drop)

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
            else:
                for name in self._names(str(thread_id)):
                    self._store.prune_thread(name)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint (ids, structure, metadata) and pending write of a thread, in every
        namespace, to another thread id. The copies share every channel blob with the source.

        No-op for a missing source; :class:`~qvc.errors.CheckpointConflictError` if the target
        already has checkpoints in a namespace being copied.
        """
        target = str(target_thread_id)
        pairs = [(name, thread_name(target, split_thread_name(name)[1])) for name in self._names(str(source_thread_id))]
        self._store.copy_threads(pairs, self._relabelled)

    def _relabelled(self, hexid: str, new: str) -> dict[str, Any]:
        """What changes in the header of ``hexid``'s checkpoint as a checkpoint of thread ``new``."""
        header, _ = self._store.header(hexid)
        tid, ns = split_thread_name(new)
        return {"langgraph": {**(header.get("langgraph") or {}), "thread_id": tid, "checkpoint_ns": ns}}

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


def _unstorable(value: Any) -> bool:
    """Whether qvc's msgpack cannot hold ``value`` (only asked after a put failed to serialize)."""
    try:
        qserde.dumps(value)
    except SerializationError:
        return True
    return False


def _take(iterator: Iterator[CheckpointTuple], n: int) -> List[CheckpointTuple]:
    out = []
    for item in iterator:
        out.append(item)
        if len(out) >= n:
            break
    return out
