"""``QvcConversationStore``: pydantic-ai's ``ConversationStore`` over a qvc repository.

pydantic-ai 2.x keeps a conversation as a chain of immutable entries (one message each, linked
to the entry before it) and one mutable record (its head entry, usage, pending tool requests,
the branches it left, a revision). Here:

* an entry is a checkpoint, one commit: its id is the entry's id, its parent commit the parent
  entry's, its one field ``message`` the message as pydantic-ai's JSON form (plain data), its
  header key ``pydantic_ai`` what names the viewer (:mod:`.viewer`);
* the conversation ``C`` is the thread ``pydantic-ai/C``, whose head is the record's head entry;
  the record's other fields are the thread's record
  (:meth:`~qvc.store.git_store.GitCheckpointStore.put_record`), replaced with the head and the
  new entries in one transaction, as a compare-and-swap on the stored record: a stale
  ``expected_revision`` raises ``ConversationConflict`` and stores nothing;
* ``branch()`` (and a save that rewrites the history) moves the head back: the line it leaves
  is a superseded line; ``fork()`` makes a thread whose head is the source's entry (nothing
  copied) and whose first save is a qvc fork (a commit whose parent is on the source thread);
* ``delete`` deletes the thread and, by default, purges the repository
  (:meth:`~qvc.store.git_store.GitCheckpointStore.purge`): entries no other conversation reaches
  are gone for good, as the in-memory store drops them.

Entries are found by id through the store's checkpoint-id index. Imports pydantic-ai and
:mod:`qvc.store`; ``import qvc`` never imports this module.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import pydantic
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
)
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

from qvc.errors import CheckpointConflictError, InvalidInputError, UnknownCheckpointError
from qvc.store.git_store import GitCheckpointStore
from qvc.store.prefixes import register_prefix
from qvc.types import Checkpoint, DurabilityMode

#: The thread-name prefix of conversations: conversation ``C`` is thread ``pydantic-ai/C``.
PREFIX = register_prefix("pydantic-ai", "pydantic-ai/")
#: The header key of entry checkpoints (its value, the entry format), under which the viewer is declared.
HEADER_KEY = "pydantic_ai"
FORMAT = 1
#: The metadata ``source`` of entry checkpoints.
SOURCE = "pydantic-ai"

_RECORD = pydantic.TypeAdapter(ConversationRecord)


def _record_of(conversation_id: str, data: bytes) -> ConversationRecord:
    """The record stored as ``data`` in the thread of ``conversation_id``. The thread's name is
    the conversation's id: after ``qvc branch -m`` renamed the thread, the record (written
    under the old name) is read as the renamed conversation's, and the next save stores it so."""
    rec = _RECORD.validate_json(data)
    return rec if rec.conversation_id == conversation_id else dataclasses.replace(rec, conversation_id=conversation_id)


def conversation_thread(conversation_id: str) -> str:
    """The thread of conversation ``conversation_id``."""
    if not isinstance(conversation_id, str) or not conversation_id:
        raise InvalidInputError(f"conversation id must be a non-empty string, not {conversation_id!r}")
    return PREFIX + conversation_id


def conversation_of(thread: str) -> str | None:
    """The conversation id a thread holds, or ``None`` for a thread that is not a conversation's."""
    return thread[len(PREFIX):] if thread.startswith(PREFIX) and len(thread) > len(PREFIX) else None


def message_data(message: ModelMessage) -> dict[str, Any]:
    """A message as stored: pydantic-ai's JSON form, as plain data."""
    return ModelMessagesTypeAdapter.dump_python([message], mode="json")[0]


def message_of(data: Any) -> ModelMessage:
    """The message stored as :func:`message_data` gave it."""
    return ModelMessagesTypeAdapter.validate_python([data])[0]


class QvcConversationStore(ConversationStore):
    """A qvc repository as pydantic-ai's conversation store.

    Args:
        path: the repository (created if missing); or pass an open ``store``.
        store: an open :class:`~qvc.store.git_store.GitCheckpointStore` to use (not closed by
            :meth:`close`).
        durability: ``"sync"`` (default: a save is on stable storage when it returns),
            ``"async"`` or ``"exit"``, as the store's.
        purge_on_delete: after ``delete``, drop the deleted entries from the repository for
            good (``qvc purge``); ``False`` keeps them recoverable until the next purge.

    The five primitives run the store's calls in a worker thread (``asyncio.to_thread``), so an
    event loop is not blocked by a flush. Conflicts raise pydantic-ai's ``ConversationConflict``;
    other failures qvc's typed errors.
    """

    def __init__(self, path: str | os.PathLike | None = None, *, store: GitCheckpointStore | None = None,
                 durability: DurabilityMode | str = DurabilityMode.SYNC, purge_on_delete: bool = True):
        if (path is None) == (store is None):
            raise InvalidInputError("QvcConversationStore needs exactly one of a path or a store")
        self._own = store is None
        self.store = store if store is not None else GitCheckpointStore(path, durability=durability)
        self.purge_on_delete = purge_on_delete

    def close(self) -> None:
        """Close the repository if this object opened it (idempotent)."""
        if self._own:
            self.store.close()

    def __enter__(self) -> QvcConversationStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- the five primitives (and read_history) ---------------------------------------------

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        return await asyncio.to_thread(self.record, conversation_id)

    async def read_records(self, *, scope: str | None = None, limit: int | None = None) -> Sequence[ConversationRecord]:
        return await asyncio.to_thread(self.records, scope=scope, limit=limit)

    async def write_record(self, record: ConversationRecord, *, new_entries: Sequence[ConversationEntry] = (),
                           expected_revision: str | None) -> None:
        await asyncio.to_thread(self.write, record, new_entries, expected_revision)

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        await asyncio.to_thread(self.delete_conversation, conversation_id, expected_revision)

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        return await asyncio.to_thread(self.entry, entry_id)

    async def read_history(self, head_id: str | None, *, limit: int | None = None) -> list[ConversationEntry]:
        return await asyncio.to_thread(self.history, head_id, limit)

    # -- the same, synchronous ------------------------------------------------------------

    def record(self, conversation_id: str) -> ConversationRecord | None:
        """The stored record of ``conversation_id``, or ``None``."""
        data = self.store.thread_record(conversation_thread(conversation_id))
        return None if data is None else _record_of(conversation_id, data)

    def records(self, *, scope: str | None = None, limit: int | None = None) -> list[ConversationRecord]:
        """Every stored record (of ``scope``), newest ``updated_at`` first, at most ``limit``."""
        found = []
        for thread in self.store.record_threads():
            if conversation_of(thread) is None:
                continue
            data = self.store.thread_record(thread)
            if data is None:
                continue
            rec = _record_of(conversation_of(thread), data)
            if scope is None or rec.scope == scope:
                found.append(rec)
        found.sort(key=lambda r: r.updated_at, reverse=True)
        return found if limit is None else found[:limit]

    def write(self, record: ConversationRecord, new_entries: Sequence[ConversationEntry],
              expected_revision: str | None) -> None:
        """:meth:`write_record`: the new entries, the head and the record in one transaction."""
        thread = conversation_thread(record.conversation_id)
        stored = self.store.thread_record(thread)
        revision = _RECORD.validate_json(stored).revision if stored is not None else None
        if revision != expected_revision:
            raise ConversationConflict(record.conversation_id)
        steps: dict[str, int] = {}
        checkpoints = []
        try:
            for entry in new_entries:
                parent = entry.parent_id
                if parent is None:
                    step = 0
                elif parent in steps:
                    step = steps[parent] + 1
                else:
                    step = (self.store.commit_info(self.store.resolve(parent)).step or 0) + 1
                steps[entry.id] = step
                checkpoints.append((
                    Checkpoint(id=entry.id, thread_id=thread, step=step, parent_id=parent,
                               state_data={"message": message_data(entry.message)}),
                    {"source": SOURCE, "conversation_id": record.conversation_id, "kind": entry.kind,
                     "message_kind": entry.message.kind},
                ))
            self.store.put_record(thread, _RECORD.dump_json(record), expected=stored, checkpoints=checkpoints,
                                  head=record.head_id, header={HEADER_KEY: FORMAT})
        except (CheckpointConflictError, UnknownCheckpointError):
            # another writer's record, or an entry this one points at that a delete released
            raise ConversationConflict(record.conversation_id) from None

    def delete_conversation(self, conversation_id: str, expected_revision: str) -> None:
        """:meth:`delete_record`: the thread goes (compare-and-swap on the record), then, with
        ``purge_on_delete``, every entry no other conversation reaches."""
        thread = conversation_thread(conversation_id)
        stored = self.store.thread_record(thread)
        if stored is None or _RECORD.validate_json(stored).revision != expected_revision:
            raise ConversationConflict(conversation_id)
        try:
            self.store.delete_record(thread, expected=stored)
        except CheckpointConflictError:
            raise ConversationConflict(conversation_id) from None
        if self.purge_on_delete:
            self.store.purge()

    def entry(self, entry_id: str) -> ConversationEntry:
        """The entry ``entry_id``; ``LookupError`` if the repository has none with that id."""
        return self._entries(entry_id, 1)[0]

    def history(self, head_id: str | None, limit: int | None = None) -> list[ConversationEntry]:
        """The entries from the first up to ``head_id`` in order (the last ``limit`` of them):
        one walk of the head's first parents."""
        if head_id is None or limit == 0:
            return []
        out = self._entries(head_id, limit)
        out.reverse()
        return out

    def _entries(self, entry_id: str, limit: int | None) -> list[ConversationEntry]:
        """The entry ``entry_id`` and its ancestors, newest first, at most ``limit``."""
        try:
            sha = self.store.resolve(entry_id)
        except (UnknownCheckpointError, InvalidInputError):
            raise LookupError(entry_id) from None
        infos = []
        for info in self.store.first_parents(sha):
            infos.append(info)
            if limit is not None and len(infos) > limit:
                break
        if infos[0].checkpoint_id != entry_id:  # a prefix or a commit SHA, not an entry id
            raise LookupError(entry_id)
        out = []
        for i, info in enumerate(infos[:limit] if limit is not None else infos):
            parent = infos[i + 1].checkpoint_id if i + 1 < len(infos) else None
            out.append(ConversationEntry(id=info.checkpoint_id, parent_id=parent,
                                         message=message_of(self.store.field_value(info.hex, "message"))))
        return out


__all__ = ["HEADER_KEY", "PREFIX", "QvcConversationStore", "conversation_of", "conversation_thread"]
