"""Pending writes: one layout and one upsert loop for every writer of them.

A set of pending writes is a chain of commits under one ref; each commit's tree holds one blob
per write, named by its writer's key, plus ``.order``, a msgpack list of the keys in the order
they were first written. Two kinds of refs hold them:

* ``refs/qvc/writes/<checkpoint sha>``: the writes of a checkpoint commit
  (:meth:`~qvc.store.git_store.GitCheckpointStore.put_writes`).
* ``refs/qvc/writes/lg/<thread>/<key>``: writes keyed by a thread and a caller's key (the
  LangGraph adapter keys them by checkpoint id, since LangGraph may write them before the
  checkpoint's ``put`` finished). The ``lg/`` name is historical (the LangGraph saver was its
  first user) and is kept so that repositories written before stay readable as they are.

Readers tell the two apart by the key after ``refs/qvc/writes/`` (:func:`writes_commit`): a commit
SHA is the store's; any other key is an *opaque* writes ref, which readers carry like any ref
(push, fetch and clone take it in when its commit and tree read) and otherwise leave alone
(``qvc watch`` reports no event for it), without knowing whose layout it is.

Every upsert goes through :meth:`PendingWrites.upsert`, one compare-and-swap loop: read the
ref's tip, merge the new items into its tree (an item marked ``keep_first`` does not replace an
existing entry of its key; any other item does), commit on top, move the ref; on a conflict
merge again on top of the other writer's commit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

from qvc.codec import serde
from qvc.errors import CheckpointConflictError
from qvc.plumbing.objects import MODE_BLOB, commit_bytes, tree_bytes
from qvc.plumbing.pack import object_id
from qvc.store.refnames import WRITES, encode_thread

if TYPE_CHECKING:
    from qvc.plumbing.repository import Repository
    from qvc.store.history import History

_SHA = re.compile(r"[0-9a-f]{40}")
ORDER = ".order"
#: Writes keyed by thread and caller's key: ``<KEYED><encoded thread>/<encoded key>``.
KEYED = WRITES + "lg/"
RETRIES = 100


def writes_commit(key: str) -> Optional[str]:
    """The checkpoint commit SHA the writes ref keyed by ``key`` (the part of its name after the
    writes namespace) belongs to, or ``None`` for an opaque writes ref."""
    return key if _SHA.fullmatch(key) else None


def keyed_prefix(thread: str) -> str:
    """The ref prefix of every keyed pending-writes ref of ``thread``."""
    return f"{KEYED}{encode_thread(thread)}/"


def keyed_ref(thread: str, key: str) -> str:
    """The ref holding ``thread``'s pending writes under the caller's ``key`` (``%`` for an empty key)."""
    return keyed_prefix(thread) + (encode_thread(key) if key else "%")


def entry_key(*parts: str) -> str:
    """A tree-entry-safe key joined from ``parts`` (each escaped like a thread id, ``%`` if empty)."""
    return ".".join(encode_thread(p) if p else "%" for p in parts)


@dataclass(frozen=True)
class Item:
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

    def upsert(self, ref: str, items: Sequence[Item], message: str) -> None:
        """Merge ``items`` into the writes under ``ref`` and commit them, durably (per the
        repository's durability mode). Nothing is committed when no entry changes (a repeated
        ``keep_first`` write, or the same bytes again). Raises :class:`CheckpointConflictError`
        after :data:`RETRIES` conflicts with concurrent writers."""
        if not items:
            return
        for _ in range(RETRIES):
            with self._repo.transaction() as tx:
                old = tx.ref(ref)
                entries = dict(self._history.entries(self._history.commit(old))) if old else {}
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
                if not changed and old is not None:
                    return
                entries[ORDER] = (MODE_BLOB, tx.write("blob", serde.dumps(order)))
                tree = tx.write("tree", tree_bytes(entries))
                new = tx.write("commit", commit_bytes(tree.hex(), [old] if old else [], message)).hex()
                try:
                    tx.move_ref(ref, old, new)
                except CheckpointConflictError:
                    continue  # another writer upserted meanwhile: merge again on top of theirs
                return
        raise CheckpointConflictError(f"pending writes {ref}: too many concurrent writers")

    def read(self, tip: str) -> list[tuple[str, bytes]]:
        """``(key, stored bytes)`` of the writes commit ``tip``, in the order first written.
        Raises :class:`~qvc.errors.CorruptionError` if it does not read."""
        entries = self._history.entries(self._history.commit(tip))
        order = serde.loads(self._history.blob(entries[ORDER][1]), f"writes {tip[:12]}") if ORDER in entries else []
        keys = [k for k in order if k in entries] + sorted(k for k in entries if k != ORDER and k not in order)
        return [(k, self._history.blob(entries[k][1])) for k in keys]

    def at(self, ref: str) -> list[tuple[str, bytes]] | None:
        """What :meth:`read` gives for ``ref``'s tip, ``None`` if the ref does not exist."""
        tip = self._repo.ref(ref)
        return None if tip is None else self.read(tip)
