"""A checkpoint's tree entries as the Strands adapter stores them, for ``GitCheckpointStore.put_entries``.

Each field is a blob of its msgpack value, as the store's ``put`` writes one, except a list of
messages: it is stored as a list in chunks (``qvc.store.format.list_entry``) of **one message
each**, so a save that adds a message writes that message's blob and the list's tree, not the
messages before it (the store's own ``put`` keeps 64 to a chunk and rewrites the last chunk,
up to 64 messages, on every save). Readers decode it as any chunked list: the chunks' items in
order. A message's blob is the same wherever it is (content addressed): one already in the
parent's list is not written again, even when the conversation manager dropped the messages
before it. Field values unchanged since the parent keep the parent's entry.

Imports :mod:`qvc.codec`, :mod:`qvc.store.format`, :mod:`qvc.store.refnames`, :mod:`qvc.types` and
the store for types.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Optional

from qvc.codec import serde
from qvc.store.format import FieldEntry, blob_entry, chunks_of, list_entry
from qvc.store.refnames import encode_name
from qvc.types import Checkpoint

if TYPE_CHECKING:
    from qvc.store.git_store import GitCheckpointStore

Write = Callable[[str, bytes], Any]


def _nowhere(kind: str, data: bytes) -> None:
    """A write that stores nothing: :func:`blob_entry` through it only names a blob."""


def field_entries(store: GitCheckpointStore, state: Dict[str, Any], parent: Optional[str], write: Write, *,
                  per_item: Iterable[str] = ("messages",)) -> Dict[str, FieldEntry]:
    """The tree entries of ``state`` (field name to value) against the commit ``parent`` (``None``:
    none), writing through ``write`` only the objects the parent does not hold; a non-empty list
    in a field named in ``per_item`` one chunk per item (see the module docstring). Raises
    :class:`~qvc.errors.SerializationError` (naming the field path) for a value msgpack cannot hold."""
    p_entries = store.tree_entries(parent) if parent is not None else {}
    lists = set(per_item)
    out: Dict[str, FieldEntry] = {}
    for name, value in state.items():
        ename = encode_name(name)
        old = p_entries.get(ename)
        if name in lists and type(value) is list and value:
            known = set(chunks_of(store.history.tree, old))
            chunks = []
            for i, item in enumerate(value):
                data = serde.dumps([item], f'state_data["{name}"][{i}]')
                entry = blob_entry(_nowhere, data, None)
                if entry not in known:
                    write("blob", data)
                chunks.append(entry)
            out[ename] = list_entry(write, chunks, old)
        else:
            out[ename] = blob_entry(write, serde.dumps(value, f'state_data["{name}"]'), old)
    return out


def header(checkpoint_id: str, step: int) -> Dict[str, Any]:
    """A new checkpoint's header with the store's keys as its ``put`` writes them (for ``put_entries``)."""
    made = Checkpoint(id=checkpoint_id, thread_id="", step=step, state_data={})
    return {"id": made.id, "step": made.step, "parent_id": None, "created_at": made.created_at,
            "schema_version": made.schema_version, "versions_seen": {}, "pending_writes": []}


def next_step(store: GitCheckpointStore, thread: str) -> int:
    """The step of a checkpoint added to ``thread`` now: its head's plus one (0 for a new thread)."""
    head = store.head(thread)
    return (store.commit_info(head).step or 0) + 1 if head else 0
