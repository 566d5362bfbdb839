"""Reading history: commit parsing, the checkpoint-id index and state versions from tree diffs.

Everything here is derived from git objects and refs, so it is right for any history,
including one written by another process or tool; the caches only make it fast.

The checkpoint ids of every checkpoint on a ref are indexed durably in the staging database
(:meth:`qvc.plumbing.repository.Repository.indexed`): each write indexes the checkpoints it puts
on refs with its transaction, a walk of every ref completes the index once per generation (a
rewrite empties it), and each answer is checked against the commit itself.
"""

from __future__ import annotations

import os
import threading
from bisect import bisect_left
from collections import OrderedDict
from typing import TYPE_CHECKING, Iterator, NamedTuple

from qvc.errors import CorruptionError
from qvc.lazy import Pattern
from qvc.plumbing.objects import parse_tree
from qvc.store.format import HEADER, decode_header, parse_trailers
from qvc.store.refnames import WRITES, decode_name

if TYPE_CHECKING:
    from qvc.plumbing.repository import Repository
    from qvc.plumbing.transaction import Record, Transaction



class CommitInfo(NamedTuple):
    """What a commit says about its checkpoint, parsed without reading its tree."""

    hex: str
    tree: bytes
    parents: tuple[str, ...]
    time: int
    message: str
    checkpoint_id: str  # the Checkpoint-Id trailer, or the commit SHA for a foreign commit
    thread_id: str | None
    step: int | None

    @property
    def parent(self) -> str | None:
        return self.parents[0] if self.parents else None


_INTEGER = Pattern(r"-?[0-9]+")  # str.isdigit() also admits digits int() refuses, such as '²'


def parse_commit(hexid: str, data: bytes) -> CommitInfo:
    try:
        head, _, message = data.partition(b"\n\n")
        tree, parents, when = b"", [], 0
        for line in head.split(b"\n"):
            if line.startswith(b"tree "):
                tree = bytes.fromhex(line[5:].decode())
            elif line.startswith(b"parent "):
                parents.append(line[7:].decode())
            elif line.startswith(b"committer "):
                when = int(line.rsplit(b" ", 2)[1])
        text = message.decode("utf-8", "surrogateescape")
    except (ValueError, IndexError):
        raise CorruptionError(f"commit {hexid} is malformed") from None
    if len(tree) != 20:
        raise CorruptionError(f"commit {hexid} has no tree")
    trailers = parse_trailers(text)
    step = trailers.get("Step")
    return CommitInfo(hexid, tree, tuple(parents), when, text, trailers.get("Checkpoint-Id") or hexid,
                      trailers.get("Thread"), int(step) if step and _INTEGER.fullmatch(step) else None)


class LRU(OrderedDict):
    """A least-recently-stored cache bounded by entry count and, with ``weigh``, by total weight."""

    def __init__(self, size: int, max_weight: int | None = None, weigh=None):
        super().__init__()
        self._size = size
        self._max_weight = max_weight
        self._weigh = weigh
        self._weight = 0
        self._lock = threading.Lock()

    def put(self, key, value) -> None:
        with self._lock:
            self._put(key, value)

    def _put(self, key, value) -> None:
        if self._weigh is not None:
            w = self._weigh(value)
            if w > self._max_weight:  # too heavy to keep: and an older value must not stay behind
                old = self.pop(key, None)
                if old is not None:
                    self._weight -= self._weigh(old)
                return
            old = self.get(key)
            self._weight += w - (self._weigh(old) if old is not None else 0)
        self[key] = value
        self.move_to_end(key)
        while len(self) > self._size or (self._weigh is not None and self._weight > self._max_weight):
            _, dropped = self.popitem(last=False)
            if self._weigh is not None:
                self._weight -= self._weigh(dropped)

    def clear(self) -> None:
        with self._lock:
            super().clear()
            self._weight = 0


class ThreadIndex:
    """The checkpoints of one thread: every checkpoint commit of that thread reachable from its
    tips (its head and its superseded lines), by checkpoint id. Built by
    :meth:`History.thread_index`; callers must not mutate it. (A plain class, as
    :class:`qvc.plumbing.staging.Published` is, for start-up.)"""

    __slots__ = ("tips", "ids", "known", "latest")

    def __init__(self, tips: tuple[str, ...]) -> None:
        self.tips = tips
        self.ids: dict[str, str] = {}  # checkpoint id -> commit hex
        self.known: set[str] = set()  # every commit walked
        self.latest: str | None = None  # the largest checkpoint id


class History:
    """Caches over one repository's history (thread-safe, shared by the store's threads).

    A History follows every write made through its repository (it is one of the repository's
    listeners), so what this process writes is read back from memory; what other processes
    write is read from git on first use.
    """

    def __init__(self, repo: Repository):
        self.repo = repo
        self._lock = threading.RLock()
        self._commits = LRU(200_000)
        self._versions = LRU(20_000)
        self._trees = LRU(20_000)
        self._blobs = LRU(65536, 32 * 2**20, len)  # raw oid -> blob bytes
        self._by_id: dict[str, str] = {}
        self._indexed: set[str] = set()
        self._tips: dict[str, str] = {}
        # (what it was sorted from, the ids sorted, the SHAs sorted): for abbreviate()
        self._sorted: tuple[tuple, list[str], list[str]] | None = None
        self._generation: str | None = None  # the generation token the caches derive from
        self._threads = LRU(256)  # thread id -> ThreadIndex
        repo.listeners.append(self.observe)
        repo.commit_listeners.append(self._stage_ids)

    # -- commits ------------------------------------------------------------------------

    def commit(self, hexid: str) -> CommitInfo:
        info = self._commits.get(hexid)
        if info is None:
            info = parse_commit(hexid, self.repo.read(bytes.fromhex(hexid), "commit"))
            with self._lock:
                self._commits.put(hexid, info)
        return info

    def first_parents(self, hexid: str | None) -> Iterator[CommitInfo]:
        """The commit and its first parents, newest first (git log --first-parent)."""
        seen = set()
        while hexid is not None and hexid not in seen:
            seen.add(hexid)
            info = self.commit(hexid)
            yield info
            hexid = info.parent

    def tree(self, raw: bytes) -> dict[str, tuple[int, bytes]]:
        """A tree's entries (cached; callers must not mutate the result)."""
        found = self._trees.get(raw)
        if found is None:
            found = self.repo.read_tree(raw)
            self._trees.put(raw, found)
        return found

    def observe(self, record: Record) -> None:
        """Follow a committed write (a :attr:`Repository.listeners` callback): cache the blobs
        and trees it wrote, as written, and index its checkpoint commits.

        Reading them back through libgit2 would first have to discover the fresh pack (a
        rescan of the pack directory on every put).
        """
        if record.rewrote:  # what was derived from the old history goes
            self._drop_derived()
        for (kind, data), oid in zip(record.objects, record.oids, strict=True):
            if kind == "blob":
                self._blobs.put(oid, data)
            elif kind == "tree":
                self._trees.put(oid, parse_tree(data, oid))
        written, ids = record.derived if record.derived is not None else _checkpoints_on_refs(record)
        for info in written.values():
            self._commits.put(info.hex, info)
        with self._lock:
            if self._tips or self._by_id:
                # not marked walked (_indexed): a walk reaching them still goes on to their
                # parents, which another process may have written and no walk here saw
                self._by_id.update(ids)

    def _stage_ids(self, tx: Transaction) -> None:
        """Index the checkpoints ``tx`` puts on refs, with ``tx`` (a
        :attr:`Repository.commit_listeners` callback): those it wrote, and those behind refs it
        moved without writing their commits (a fetch), walked down to the ref's old value."""
        written, ids = tx.record.derived = _checkpoints_on_refs(tx.record)  # parsed once: observe() reuses it
        ids = list(ids)
        for name, old, new in tx.record.refs:
            if new is not None and new not in written and not name.startswith(WRITES):
                ids += self._checkpoints(self._walk_new(new, old))
        tx.index(ids)

    def _walk_new(self, tip: str, old: str | None) -> list[str]:
        """Commits reachable from ``tip`` down to (not including) ``old`` and its ancestors' walk."""
        out, stack, seen = [], [tip], {old}
        while stack:
            hexid = stack.pop()
            if hexid in seen:
                continue
            seen.add(hexid)
            try:
                info = self.commit(hexid)
            except CorruptionError:
                continue
            out.append(hexid)
            stack.extend(info.parents)
        return out

    def _checkpoints(self, commits: list[str]) -> list[tuple[str, str]]:
        """``(checkpoint id, sha)`` of those of ``commits`` that are checkpoints and read back."""
        out = []
        for hexid in commits:
            try:
                info = self.commit(hexid)
            except CorruptionError:
                continue
            if info.checkpoint_id != info.hex:
                out.append((info.checkpoint_id, hexid))
        return out

    # -- the durable checkpoint-id index (in the staging database) ----------------------------

    def _indexed_id(self, checkpoint_id: str) -> str | None | bool:
        """The commit the durable index gives ``checkpoint_id`` (checked against the commit),
        ``None`` if it has none, ``False`` if the index is not complete (it is completed first
        by a walk of every ref, unless the repository is read-only)."""
        found, complete = self.repo.indexed(checkpoint_id)
        if not complete:
            if self.repo.readonly:
                return False
            generation = self.repo.generation()  # before the walk: a rewrite after it fails the completion
            if not self.repo.complete_index(self._walk_all(), generation):
                return False
            found = self._by_id.get(checkpoint_id)  # what the walk found
        if found is not None:
            try:
                if self.commit(found).checkpoint_id == checkpoint_id:
                    return found
            except CorruptionError:
                pass
        return None

    def _walk_all(self) -> list[tuple[str, str]]:
        """``(checkpoint id, commit hex)`` of every commit reachable from a ref, read now (a build
        of the durable index: every ref is walked again, not only those that moved)."""
        with self._lock:
            self._tips.clear()
            self._indexed.clear()
            self._by_id.clear()
        self.refresh()
        with self._lock:
            return list(self._by_id.items())

    def known_blob(self, raw: bytes) -> bytes | None:
        """A blob's bytes if they are cached (written or read by this process), else ``None``;
        never reads the repository."""
        return self._blobs.get(raw)

    def blob(self, raw: bytes) -> bytes:
        """A blob's bytes (cached; blobs are immutable)."""
        data = self._blobs.get(raw)
        if data is None:
            data = self.repo.read(raw, "blob")
            self._blobs.put(raw, data)
        return data

    def entries(self, info: CommitInfo) -> dict[str, tuple[int, bytes]]:
        """The commit's root tree entries (cached; callers must not mutate the result)."""
        return self.tree(info.tree)

    # -- the checkpoint-id index ----------------------------------------------------------

    def _check_generation(self) -> None:
        """Drop what was derived in memory if the generation token changed since it was last
        seen (:meth:`Repository.generation`)."""
        token = self.repo.generation()
        if token != self._generation:
            self._drop_derived(token)

    def _drop_derived(self, generation: str | None | bool = False) -> None:
        """Forget what was derived from history in memory (ids, walked tips, thread indexes), after
        a rewrite; with ``generation``, remember it as the one now seen."""
        with self._lock:
            self._by_id.clear()
            self._indexed.clear()
            self._tips.clear()
            self._threads.clear()
            if generation is not False:
                self._generation = generation

    def thread_index(self, thread: str, tips: list[str]) -> ThreadIndex:
        """The index of ``thread``'s checkpoints reachable from ``tips`` (walking every parent, so
        both lines with superseded refs and older tree-shaped threads are covered). Built once, then
        extended while the tips only move forward; rebuilt after any rewrite (in any process)."""
        self._check_generation()
        key = tuple(tips)
        with self._lock:
            index = self._threads.get(thread)
            if index is not None and index.tips == key:
                return index
            if index is not None:
                fresh = [t for t in key if t not in index.known]
                stops = self._walk_thread(index, thread, fresh)
                if all(t in key or t in stops for t in index.tips):
                    index.tips = key  # every old tip is still reached: what it indexed still is
                    return index
            index = ThreadIndex(key)
            self._walk_thread(index, thread, list(key))
            self._threads.put(thread, index)
            return index

    def _walk_thread(self, index: ThreadIndex, thread: str, tips: list[str]) -> set[str]:
        """Add to ``index`` every commit reachable from ``tips`` it does not know; return the
        known commits met."""
        stops: set[str] = set()
        stack = list(tips)
        while stack:
            hexid = stack.pop()
            if hexid in index.known:
                stops.add(hexid)
                continue
            index.known.add(hexid)
            info = self.commit(hexid)
            if info.thread_id == thread and info.checkpoint_id != info.hex:
                index.ids.setdefault(info.checkpoint_id, hexid)
                if index.latest is None or info.checkpoint_id > index.latest:
                    index.latest = info.checkpoint_id
            stack.extend(info.parents)
        return stops

    def _index_from(self, tip: str) -> bool:
        """Index the commits reachable from ``tip``; whether every one of them read."""
        stack = [tip]
        whole = True
        while stack:
            hexid = stack.pop()
            if hexid in self._indexed:
                continue
            try:
                info = self.commit(hexid)
            except CorruptionError:
                whole = False  # fsck names it; lookups do not find it (nor what lies behind it)
                continue
            self._indexed.add(hexid)
            self._by_id.setdefault(info.checkpoint_id, hexid)
            stack.extend(info.parents)
        return whole

    def refresh(self) -> None:
        """Index every commit reachable from any ref whose tip moved since the last refresh (or
        whose last walk met a commit that did not read: walked again, in case it reads now).
        The refs are read as acknowledged (staged values over git's files)."""
        self._check_generation()
        with self._lock:
            for name, tip in self.repo.refs("refs/"):
                if name.startswith(WRITES) or self._tips.get(name) == tip:
                    continue
                if self._index_from(tip):
                    self._tips[name] = tip

    def lookup(self, checkpoint_id: str, *, refresh: bool = True) -> str | None:
        """The commit holding ``checkpoint_id`` (exact id): from what this process wrote or read,
        else the durable index (one query of the staging database), else, with ``refresh``, a walk
        of every ref whose tip moved. Without ``refresh`` a miss means the id is new to every qvc
        writer."""
        self._check_generation()
        hexid = self._by_id.get(checkpoint_id)
        if hexid is not None:
            return hexid
        found = self._indexed_id(checkpoint_id)
        if found:
            return found
        if found is False and not self._tips:
            self.refresh()
        hexid = self._by_id.get(checkpoint_id)
        if hexid is None and refresh:
            self.refresh()
            hexid = self._by_id.get(checkpoint_id)
        return hexid

    def reachable(self, hexid: str) -> bool:
        """Whether a commit is reachable from a ref (deleted checkpoints are not)."""
        self.refresh()
        return hexid in self._indexed

    def matches(self, prefix: str) -> set[str]:
        """Commits whose checkpoint id or SHA starts with ``prefix``."""
        self.refresh()
        with self._lock:
            found = {h for cid, h in self._by_id.items() if cid.startswith(prefix)}
            found |= {h for h in self._indexed if h.startswith(prefix.lower())}
        return found

    def abbreviate(self, checkpoint_id: str, minimum: int) -> str:
        """The shortest prefix of ``checkpoint_id``, at least ``minimum`` characters, that
        :meth:`matches` finds only its checkpoint's commit by (no other checkpoint id, and no
        commit SHA but its own, starts with it), as git abbreviates SHAs; the whole id when no
        shorter prefix is unique. The ids and SHAs compared are those indexed when this last
        refreshed; it refreshes first when it has not yet, or does not know ``checkpoint_id``."""
        if len(checkpoint_id) <= minimum:
            return checkpoint_id
        with self._lock:
            fresh = self._sorted is not None and checkpoint_id in self._by_id
        if not fresh:
            self.refresh()
        with self._lock:
            basis = (self._generation, len(self._by_id), len(self._indexed))
            if self._sorted is None or self._sorted[0] != basis:
                self._sorted = (basis, sorted(self._by_id), sorted(self._indexed))
            _, ids, shas = self._sorted
            own = self._by_id.get(checkpoint_id)
        shared = 0  # the longest prefix it shares with another id or SHA
        for keys, probe, mine in ((ids, checkpoint_id, checkpoint_id), (shas, checkpoint_id.lower(), own)):
            at = bisect_left(keys, probe)
            for other in keys[max(at - 1, 0):at + 2]:  # its neighbours in order share the most
                if other != mine:
                    shared = max(shared, len(os.path.commonprefix([other, probe])))
        return checkpoint_id[:max(minimum, shared + 1)]

    # -- state versions -------------------------------------------------------------------
    #
    # state_versions[field] counts the checkpoints on the first-parent chain, this one included,
    # in which the field was added or changed (its blob or tree id differs from the parent's).
    # qvc records the counts it derived in each commit's header together with the parent SHA
    # they were derived against; since a SHA pins the whole ancestry, the record is exact for
    # as long as the commit keeps that parent (a rebase or a rewrite makes it be ignored), and
    # reading a checkpoint does not walk its history.

    def _fields(self, info: CommitInfo) -> dict[str, bytes]:
        return {decode_name(n): raw for n, (_, raw) in self.entries(info).items() if n != HEADER}

    def _recorded(self, info: CommitInfo) -> dict[str, int] | None:
        entry = self.entries(info).get(HEADER)
        if entry is None:
            return None
        try:
            header, _ = decode_header(self.blob(entry[1]), f"checkpoint {info.hex[:12]} header")
        except CorruptionError:
            return None
        record = header.get("versions")
        if (isinstance(record, list) and len(record) == 2 and record[0] == info.parent
                and isinstance(record[1], dict)):
            return record[1]
        return None

    def counts(self, hexid: str) -> tuple[dict[str, int], dict[str, bytes]]:
        """(counts of every field ever on the chain, ids of the fields present) at a commit."""
        chain: list[CommitInfo] = []
        base: tuple[dict[str, int], dict[str, bytes]] | None = None
        for info in self.first_parents(hexid):
            base = self._versions.get(info.hex)
            if base is None:
                recorded = self._recorded(info)
                if recorded is not None:
                    base = (recorded, self._fields(info))
                    self._versions.put(info.hex, base)
            if base is not None:
                break
            chain.append(info)
        counts, ids = (dict(base[0]), base[1]) if base else ({}, {})
        for info in reversed(chain):
            fields = self._fields(info)
            for f, raw in fields.items():
                if ids.get(f) != raw:
                    counts[f] = counts.get(f, 0) + 1
            ids = fields
            self._versions.put(info.hex, (dict(counts), ids))
        return counts, ids

    def remember(self, hexid: str, counts: dict[str, int], ids: dict[str, bytes]) -> None:
        """Memoize the state versions just derived for commit ``hexid`` (a pure function of the
        commit and its ancestry, so right whether or not the commit ends up on a ref)."""
        self._versions.put(hexid, (dict(counts), ids))

    def versions(self, hexid: str) -> dict[str, int]:
        """``state_versions`` of a checkpoint: the counts of the fields it holds."""
        counts, ids = self.counts(hexid)
        missing = [f for f in ids if f not in counts]
        if missing:  # a hand-made tree next to a recorded header that does not know its fields
            raise CorruptionError(f"checkpoint {hexid[:12]}: its recorded versions lack field {missing[0]!r}")
        return {f: counts[f] for f in ids}

    def changed(self, hexid: str) -> list[str]:
        """Fields the checkpoint added or changed against its first parent."""
        info = self.commit(hexid)
        mine = self._fields(info)
        theirs = self._fields(self.commit(info.parent)) if info.parent else {}
        return [f for f, raw in mine.items() if theirs.get(f) != raw]


def _checkpoints_on_refs(record: Record) -> tuple[dict[str, CommitInfo], list[tuple[str, str]]]:
    """The commits ``record`` wrote (by SHA), and ``(checkpoint id, SHA)`` of those its ref moves
    put on a ref. An id is indexed only once its checkpoint is on a ref: a commit no move of the
    record reaches (an earlier try inside the same transaction) is not, so a later put stores it."""
    written = {}
    for (kind, data), oid in zip(record.objects, record.oids, strict=True):
        if kind == "commit":
            info = parse_commit(oid.hex(), data)
            written[info.hex] = info
    stack, reached, ids = [new for _, _, new in record.refs if new in written], set(), []
    while stack:
        hexid = stack.pop()
        if hexid in reached:
            continue
        reached.add(hexid)
        info = written[hexid]
        stack += [p for p in info.parents if p in written]
        if info.checkpoint_id != info.hex:  # a checkpoint (not pending writes)
            ids.append((info.checkpoint_id, info.hex))
    return written, ids
