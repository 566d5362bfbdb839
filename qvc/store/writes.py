"""Pending writes: one layout and one upsert loop for every writer of them.

A set of pending writes is a tree holding one blob per write, named by its writer's key, plus
``.order``, a msgpack list of the keys in the order they were first written. Two kinds of refs
hold them, each a chain of commits (one per upsert that changed something):

* ``refs/qvc/writes/<checkpoint sha>``: the writes of a checkpoint commit
  (:meth:`~qvc.store.git_store.GitCheckpointStore.put_writes`); the commit's tree is the set.
* ``refs/qvc/writes/lg/<thread>/%all``: every set of writes keyed by the thread and a caller's
  key (the LangGraph adapter keys them by checkpoint id, since LangGraph may write them before
  the checkpoint's ``put`` finished). The commit's tree holds each key's set at
  :func:`key_path`: ``<d1>/<d2>/<d3>/<d4>/<encoded key>/``, the ``d`` the base-4 digits of
  ``crc32(encoded key) & 0xFF``, most significant first, so an upsert rewrites six small trees
  (four of at most four entries, the one holding the key's set among those of the same digits,
  and the set) however many keys the thread has (the ids of unchanged siblings are what an
  upsert pays in bytes: four levels of four pay fewer than two of sixteen), and the ref keeps
  its lease from one upsert to the next. ``%all`` is no encoded key (keys escape ``%`` as ``%25``).
  The ``lg/`` name is historical (the LangGraph saver was its first user).

Repositories written before kept one ref per key, ``refs/qvc/writes/lg/<thread>/<encoded key>``
(:func:`keyed_ref`), whose commit's tree is the set. They stay readable: a key's writes are
its subtree in the thread's ref, else its own ref; the first upsert of such a key moves its
set into the thread's ref and deletes its own ref in the same transaction. An upsert that finds
no per-key ref of the thread left adds an empty blob :data:`NO_LEGACY` to the root of the
thread's tree, after which a read of a key without writes reads no per-key ref (this version
never writes one again).

Readers tell the kinds apart by the key after ``refs/qvc/writes/`` (:func:`writes_commit`): a commit
SHA is the store's; any other key is an *opaque* writes ref, which readers carry like any ref
(push, fetch and clone take it in when its commit and tree read) and otherwise leave alone
(``qvc watch`` reports no event for it), without knowing whose layout it is. What a reader
shows, counts or checks as pending writes it reads through the store, in both layouts
(:meth:`~qvc.store.git_store.GitCheckpointStore.checkpoint_pending_writes`, ``write_sets``,
``write_set``: :class:`WriteSet`); a keyed ref's thread record (:data:`RECORD`) is none.

Every upsert goes through :meth:`PendingWrites.upsert`, one compare-and-swap loop: read the
ref's tip, merge the new items into its set (an item marked ``keep_first`` does not replace an
existing entry of its key; any other item does), commit on top, move the ref; on a conflict
merge again on top of the other writer's commit. Rewrites that drop sets
(:meth:`PendingWrites.drop_keyed`, :meth:`PendingWrites.keep_keyed`) commit a root commit
instead, so that the dropped writes are unreachable (and ``qvc purge`` erases them).
"""

from __future__ import annotations

import functools
import zlib
from typing import TYPE_CHECKING, Callable, Collection, NamedTuple, Optional, Sequence

from qvc.codec import serde
from qvc.lazy import Pattern
from qvc.plumbing.objects import MODE_BLOB, MODE_TREE, Entry, commit_bytes, tree_bytes
from qvc.plumbing.pack import object_id
from qvc.store.refnames import WRITES, decode_thread, encode_thread

if TYPE_CHECKING:
    from qvc.plumbing.repository import Repository, Transaction
    from qvc.store.history import History

_SHA = Pattern(r"[0-9a-f]{40}")
ORDER = ".order"
#: Writes keyed by thread and caller's key: ``<KEYED><encoded thread>/<ALL>``.
KEYED = WRITES + "lg/"
#: The name, under a thread's :func:`keyed_prefix`, of the ref holding all its keyed writes.
ALL = "%all"
#: An empty blob at the root of a thread writes ref's tree: the thread has no per-key refs left.
NO_LEGACY = ".nolegacy"
#: A blob at the root of a thread writes ref's tree: the thread's *record*, bytes an adapter keeps
#: beside the thread's head and moves with it (:meth:`~qvc.store.git_store.GitCheckpointStore.put_record`).
RECORD = ".record"
#: Fan-out of a thread writes ref's tree: ``LEVELS`` levels of ``1 << BITS`` subtrees each.
BITS, LEVELS = 2, 4

Tree = dict[str, Entry]


def writes_commit(key: str) -> Optional[str]:
    """The checkpoint commit SHA the writes ref keyed by ``key`` (the part of its name after the
    writes namespace) belongs to, or ``None`` for an opaque writes ref."""
    return key if _SHA.fullmatch(key) else None


def keyed_prefix(thread: str) -> str:
    """The ref prefix of every keyed pending-writes ref of ``thread`` (its :func:`thread_writes_ref`
    and the per-key refs of repositories written before). Raises
    :class:`~qvc.errors.InvalidThreadIdError` for what cannot be a thread id."""
    return _keyed_prefix(thread) if isinstance(thread, str) else f"{KEYED}{encode_thread(thread)}/"


@functools.lru_cache(maxsize=1024)  # every read and write of keyed writes encodes its thread
def _keyed_prefix(thread: str) -> str:
    return f"{KEYED}{encode_thread(thread)}/"


def thread_writes_ref(thread: str) -> str:
    """The ref holding every set of ``thread``'s keyed pending writes (see the module docstring)."""
    return keyed_prefix(thread) + ALL


def keyed_ref(thread: str, key: str) -> str:
    """The per-key ref that held ``thread``'s pending writes under the caller's ``key`` in
    repositories written before :func:`thread_writes_ref` (``%`` for an empty key). Read and
    cleaned up, never written."""
    return keyed_prefix(thread) + key_path(key)[-1]


def key_path(key: str) -> tuple[str, ...]:
    """Where the set of writes under the caller's ``key`` lives in a :func:`thread_writes_ref` tree:
    :data:`LEVELS` fan-out levels named by the digits (:data:`BITS` bits each, most significant
    first) of ``crc32(encoded key) & 0xFF``, then the encoded key (``%`` for an empty key).
    Raises :class:`~qvc.errors.InvalidThreadIdError` for a key that is no string."""
    if not isinstance(key, str):
        encode_thread(key)  # raises
    return _key_path(key)


@functools.lru_cache(maxsize=4096)  # a thread's recent checkpoint ids, read and written again and again
def _key_path(key: str) -> tuple[str, ...]:
    name = encode_thread(key) if key else "%"
    crc = zlib.crc32(name.encode()) & 0xFF
    mask = (1 << BITS) - 1
    return (*(f"{crc >> (BITS * (LEVELS - 1 - i)) & mask:x}" for i in range(LEVELS)), name)


def key_of(name: str) -> str | None:
    """The caller's key a set's name in a thread writes tree (the last of its :func:`key_path`)
    stands for, ``None`` when the name does not say (a hashed long key)."""
    return "" if name == "%" else decode_thread(name)


class WriteSet(NamedTuple):
    """Where one set of pending writes is, in either layout (see the module docstring):
    :meth:`~qvc.store.git_store.GitCheckpointStore.write_sets` finds them,
    :meth:`~qvc.store.git_store.GitCheckpointStore.write_set` reads one."""

    ref: str  #: the writes ref holding it
    tip: str  #: the ref's commit as it was found
    path: tuple[str, ...]  #: where in the commit's tree (``()``: the tree is the set)
    commit: str | None  #: the checkpoint commit, for the store's per-commit writes
    thread: str | None  #: for keyed writes: the thread (``None`` if the ref name does not say)
    key: str | None  #: for keyed writes: the caller's key, a checkpoint id (``None`` likewise)

    @property
    def where(self) -> str:
        """The set as people name it: its checkpoint (commit, or thread and id) and its ref."""
        if self.commit is not None:
            return f"pending writes of commit {self.commit[:12]} ({self.ref})"
        at = f" at {'/'.join(self.path)}" if self.path else ""
        return (f"pending writes of thread {self.thread!r} checkpoint {self.key if self.key is not None else '?'} "
                f"({self.ref}{at})")


def entry_key(*parts: str) -> str:
    """A tree-entry-safe key joined from ``parts`` (each escaped like a thread id, ``%`` if empty)."""
    return ".".join(encode_thread(p) if p else "%" for p in parts)


class Item(NamedTuple):
    """One pending write to upsert: its tree entry name, its stored bytes, and whether an
    existing entry of the same key wins (``keep_first``) or is replaced."""

    key: str
    data: bytes
    keep_first: bool = False


class PendingWrites:
    """Reads and upserts pending-writes commits of one repository (thread-safe)."""

    def __init__(self, repo: Repository, history: History):
        self._repo = repo
        self._history = history

    def upsert(self, ref: str, items: Sequence[Item], message: str, *, path: Sequence[str] = (),
               legacy: str | None = None) -> None:
        """Merge ``items`` into the set of writes at ``path`` (tree names, ``()``: the root) in
        ``ref``'s tree and commit them, durably (per the repository's durability mode). When
        ``ref`` has no set at ``path``, the set starts as the tree of ref ``legacy`` (if given
        and present), which is then deleted in the same transaction. Nothing is committed when no
        entry changes (a repeated ``keep_first`` write, or the same bytes again). The ref is read
        and moved in one transaction: no other writer comes between."""
        if not items:
            return
        with self._repo.transaction() as tx:
            old = tx.ref(ref)
            root = self._history.entries(self._history.commit(old)) if old else {}
            if legacy is not None and NO_LEGACY not in root and not any(
                    name != ref for name, _ in tx.refs(ref[:ref.rindex("/") + 1])):
                root = {**root, NO_LEGACY: (MODE_BLOB, tx.write("blob", b""))}
            current = self._subtree(root, path)
            legacy_tip = None
            if current is None and legacy is not None:
                legacy_tip = tx.ref(legacy)
                if legacy_tip is not None:
                    current = self._history.entries(self._history.commit(legacy_tip))
            entries = dict(current) if current is not None else {}
            order = serde.loads(self._history.blob(entries[ORDER][1]), "writes order") if ORDER in entries else []
            changed = False
            for item in items:
                if item.keep_first and item.key in entries:
                    continue
                entry = (MODE_BLOB, object_id("blob", item.data))
                if entries.get(item.key) != entry:
                    tx.write("blob", item.data)
                    entries[item.key] = entry
                    changed = True
                if item.key not in order:
                    order.append(item.key)
            if not changed and current is not None:
                return
            entries[ORDER] = (MODE_BLOB, tx.write("blob", serde.dumps(order)))
            tree = self._put(tx, root, path, (MODE_TREE, tx.write("tree", tree_bytes(entries))))
            assert tree is not None
            new = tx.write("commit", commit_bytes(tree[1].hex(), [old] if old else [], message)).hex()
            tx.move_ref(ref, old, new)
            if legacy_tip is not None:  # after the set is on ref: a crash between keeps both
                tx.move_ref(legacy, legacy_tip, None)

    def drop_keyed(self, tx: Transaction, ref: str, paths: Collection[tuple[str, ...]], message: str, *,
                   squash: bool = False) -> None:
        """In the rewrite ``tx``, remove the key sets at ``paths`` (:func:`key_path`) from the thread
        writes ref ``ref`` (:func:`thread_writes_ref`) as a new root commit (the dropped writes become
        unreachable); delete ``ref`` if no set is left. Nothing moves when none of them is there,
        unless ``squash``: then the ref's history goes too (a root commit of its tree)."""
        self._rewrite(tx, ref, message, lambda root: self._without(tx, root, list(paths), {NO_LEGACY}), squash)

    def keep_keyed(self, tx: Transaction, ref: str, path: tuple[str, ...], message: str) -> None:
        """In the rewrite ``tx``, keep only the key set at ``path`` in the thread writes ref ``ref``,
        as :meth:`drop_keyed` drops (the ref goes if that set is not there either)."""

        def only(root: Entry) -> Entry | None:
            found = self._subtree(self._history.tree(root[1]), path[:-1])
            entry = None if found is None else found.get(path[-1])
            return None if entry is None or entry[0] != MODE_TREE else self._put(tx, {}, path, entry)

        self._rewrite(tx, ref, message, only)

    def _rewrite(self, tx: Transaction, ref: str, message: str, edit: Callable[[Entry], Entry | None],
                 squash: bool = False) -> None:
        """Move ``ref`` to a root commit of ``edit(its tree)`` (``None``: delete it); no move when
        the tree stays (with ``squash``: when it stays and the ref's commit is a root already)."""
        old = tx.ref(ref)
        if old is None:
            return
        info = self._history.commit(old)
        root: Entry = (MODE_TREE, info.tree)
        tree = edit(root)
        if tree == root and not (squash and info.parents):
            return
        new = None if tree is None else tx.write("commit", commit_bytes(tree[1].hex(), [], message)).hex()
        tx.move_ref(ref, old, new)

    def record_at(self, tip: str | None) -> bytes | None:
        """The thread record (:data:`RECORD`) in the thread writes commit ``tip`` (``None``: no
        commit, or none recorded). Raises :class:`~qvc.errors.CorruptionError` if it does not read."""
        if tip is None:
            return None
        entry = self._history.entries(self._history.commit(tip)).get(RECORD)
        return None if entry is None or entry[0] != MODE_BLOB else self._history.blob(entry[1])

    def stage_record(self, tx: Transaction, tip: str | None, data: bytes, message: str) -> str:
        """Write into ``tx`` a commit on top of the thread writes commit ``tip`` (``None``: a root
        commit) whose tree is ``tip``'s with the thread record set to ``data``; return its SHA.
        Moves no ref: the caller moves the thread writes ref, with the thread's head."""
        root = dict(self._history.entries(self._history.commit(tip))) if tip else {}
        root[RECORD] = (MODE_BLOB, tx.write("blob", data))
        tree = tx.write("tree", tree_bytes(root))
        return tx.write("commit", commit_bytes(tree.hex(), [tip] if tip else [], message)).hex()

    def read(self, tip: str) -> list[tuple[str, bytes]]:
        """``(key, stored bytes)`` of the writes commit ``tip``, in the order first written.
        Raises :class:`~qvc.errors.CorruptionError` if it does not read."""
        return self._read_set(self._history.entries(self._history.commit(tip)), tip[:12])

    def at(self, ref: str) -> list[tuple[str, bytes]] | None:
        """What :meth:`read` gives for ``ref``'s tip, ``None`` if the ref does not exist."""
        tip = self._repo.ref(ref)
        return None if tip is None else self.read(tip)

    def keyed(self, ref: str, path: Sequence[str], legacy: str) -> list[tuple[str, bytes]] | None:
        """What :meth:`read` gives for the set at ``path`` in ``ref``'s tree, else for ref
        ``legacy``'s tip; ``None`` if neither exists."""
        tip = self._repo.ref(ref)
        if tip is not None:
            root = self._history.entries(self._history.commit(tip))
            found = self._subtree(root, path)
            if found is not None:
                return self._read_set(found, f"{tip[:12]}:{'/'.join(path)}")
            if NO_LEGACY in root:
                return None
        return self.at(legacy)

    def key_sets(self, tip: str) -> list[tuple[str, ...]]:
        """The :func:`key_path` of every set of writes in the thread writes commit ``tip``, sorted
        (the thread's record and other root blobs are no sets). Raises
        :class:`~qvc.errors.CorruptionError` if its trees do not read."""
        found: list[tuple[str, ...]] = []

        def walk(tree: Tree, path: tuple[str, ...]) -> None:
            for name in sorted(tree):
                mode, raw = tree[name]
                if mode != MODE_TREE:
                    continue
                if len(path) < LEVELS:
                    walk(self._history.tree(raw), (*path, name))
                else:
                    found.append((*path, name))

        walk(self._history.entries(self._history.commit(tip)), ())
        return found

    def read_at(self, tip: str, path: Sequence[str]) -> list[tuple[str, bytes]]:
        """What :meth:`read` gives for the set at ``path`` in the commit ``tip``'s tree (``()``:
        the tree itself), ``[]`` if there is none. Raises :class:`~qvc.errors.CorruptionError`."""
        found = self._subtree(self._history.entries(self._history.commit(tip)), path)
        return [] if found is None else self._read_set(found, f"{tip[:12]}:{'/'.join(path)}" if path else tip[:12])

    def _read_set(self, entries: Tree, where: str) -> list[tuple[str, bytes]]:
        order = serde.loads(self._history.blob(entries[ORDER][1]), f"writes {where}") if ORDER in entries else []
        keys = [k for k in order if k in entries] + sorted(k for k in entries if k != ORDER and k not in order)
        return [(k, self._history.blob(entries[k][1])) for k in keys]

    def _subtree(self, tree: Tree, path: Sequence[str]) -> Tree | None:
        """The tree at ``path`` under ``tree`` (``tree`` itself for ``()``), ``None`` if absent."""
        for name in path:
            entry = tree.get(name)
            if entry is None or entry[0] != MODE_TREE:
                return None
            tree = self._history.tree(entry[1])
        return tree

    def _put(self, tx: Transaction, tree: Tree, path: Sequence[str], value: Entry | None) -> Entry | None:
        """Write into ``tx`` the trees of ``tree`` with ``value`` at ``path`` (``None``: removed,
        with every tree it leaves empty); return the new root's entry (``None``: empty)."""
        if not path:
            return value
        entries = dict(tree)
        name = path[0]
        child = entries.get(name)
        sub = self._history.tree(child[1]) if child is not None and child[0] == MODE_TREE else {}
        new = self._put(tx, sub, path[1:], value)
        if new is None:
            entries.pop(name, None)
        else:
            entries[name] = new
        return (MODE_TREE, tx.write("tree", tree_bytes(entries))) if entries else None

    def _without(self, tx: Transaction, entry: Entry, paths: list[tuple[str, ...]],
                 alone: Collection[str] = ()) -> Entry | None:
        """The tree ``entry`` without what is at ``paths`` (and the trees that leaves empty), written
        into ``tx`` where it changed; ``entry`` itself if nothing is there (``None``: nothing left
        but names in ``alone``). Reads only the trees along ``paths``."""
        tree = dict(self._history.tree(entry[1]))
        groups: dict[str, list[tuple[str, ...]]] = {}
        for p in paths:
            groups.setdefault(p[0], []).append(p[1:])
        changed = False
        for name, rest in groups.items():
            child = tree.get(name)
            if child is None or child[0] != MODE_TREE:
                continue
            new = None if any(not r for r in rest) else self._without(tx, child, rest)
            if new != child:
                changed = True
                if new is None:
                    del tree[name]
                else:
                    tree[name] = new
        if not changed:
            return entry
        return (MODE_TREE, tx.write("tree", tree_bytes(tree))) if set(tree) - set(alone) else None
