"""Editors' contract: what ``qvc checkout --to DIR`` and ``qvc commit DIR`` ask of an adapter.

An :class:`Editor` turns a checkpoint's stored values into values a person edits as JSON files
(:class:`Editable`) and the edited values back into what its adapter stores (:class:`Stored`).
Editors are found as viewers are (:mod:`qvc.store.viewers`: the ``qvc.editors`` entry-point group,
or :func:`~qvc.store.viewers.register_editor`); this module holds only the types, so that the
readers, which never edit, do not load them. Imports nothing of qvc's (the store only for type hints).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Protocol

if TYPE_CHECKING:
    from qvc.store.git_store import GitCheckpointStore


@dataclass(frozen=True)
class Editable:
    """A checkpoint's state as a person edits it: what :meth:`Editor.to_files` returns."""

    #: field -> the value its JSON file holds (written as :mod:`qvc.codec.tagged` JSON)
    state: dict[str, Any]
    #: one line each for the values kept in their stored encoding (they have no exact JSON form)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Stored:
    """Edited files as the adapter stores them: what :meth:`Editor.from_files` returns."""

    #: field -> the value as the store keeps it (what ``GitCheckpointStore.put`` writes)
    state: dict[str, Any]
    #: the adapter's own header keys for the new checkpoint (never the store's:
    #: :data:`~qvc.store.viewers.STORE_KEYS`)
    header: dict[str, Any]
    #: the new checkpoint's id, when the adapter's ids have a form of their own (else ``None``)
    id: Optional[str] = None
    #: its creation time (ISO 8601), when the adapter keeps one in its header (else ``None``)
    created_at: Optional[str] = None
    #: metadata keys the adapter's framework expects beside qvc's (``source``, ``step``, ...)
    metadata: dict[str, Any] = field(default_factory=dict)


class Editor(Protocol):
    """How ``qvc checkout --to`` / ``qvc commit`` turn an adapter's stored values into files a person
    edits and back. Both raise :class:`~qvc.errors.QvcError` subclasses for input they refuse."""

    def to_files(self, store: GitCheckpointStore, sha: str, state: dict[str, Any]) -> Editable:
        """The state of checkpoint commit ``sha`` (``state``: its ``state_data`` as the store read
        it, damaged fields left out) as values a person edits. A value without an exact editable
        form is kept in its stored encoding, named in :attr:`Editable.notes`: nothing is lost."""
        ...

    def from_files(self, store: GitCheckpointStore, state: dict[str, Any], *, thread: str,
                   parent: Optional[str], origin: Optional[str], step: int) -> Stored:
        """The values read from the files (``state``, as :meth:`to_files` wrote them, then edited)
        as the adapter stores them, for a new checkpoint at ``step`` on ``thread`` whose first
        parent is commit ``parent`` (``None``: the thread's first). ``origin`` is the commit the
        files were written from when the repository has it: a value left as it was written is
        stored exactly as ``origin`` stores it. Raises :class:`~qvc.errors.InvalidInputError` for
        an edit the framework cannot read."""
        ...
