"""A checkpoint's state in a directory of JSON files: ``qvc checkout --to DIR``.

:func:`checkout_to_directory` writes a checkpoint's state into a directory (one JSON file per
field, :mod:`qvc.readers.statefiles`) with a manifest naming the checkpoint it came from;
people edit, delete or add field files; :func:`qvc.edit.workdir.commit_directory` (the write
side, ``qvc commit DIR``) stores the directory back as a new checkpoint.

A checkpoint an adapter wrote in its framework's encoding (LangGraph's channels) is written
through the adapter's *editor* (:func:`qvc.store.viewers.editor_of`): its values as JSON a person
edits, the manifest naming the editor (``"editor"``) so the commit reads them back the same way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from qvc.errors import LocalChangesError
from qvc.readers.statefiles import field_filename, local_changes, untracked_files, write_state
from qvc.store.viewers import editor_of

if TYPE_CHECKING:
    from qvc.store.git_store import GitCheckpointStore


@dataclass(frozen=True)
class CheckedOutDirectory:
    """What :func:`checkout_to_directory` wrote."""

    directory: str  # absolute path
    id: str  # the checkpoint id
    thread: str
    step: int
    commit: str
    files: list[str]  # field file names written, in field order (the manifest not included)
    damaged: dict[str, str] = field(default_factory=dict)  # fields not written: their blob does not read (why)
    editor: str | None = None  # the header key of the editor that wrote the files (None: the stored values)
    notes: list[str] = field(default_factory=list)  # one line each: values kept in their stored encoding
    kept: list[str] = field(default_factory=list)  # *.json files qvc did not write, left there (added fields)


def checkout_to_directory(store: GitCheckpointStore, commit: str, directory: str | os.PathLike, *,
                          force: bool = False) -> CheckedOutDirectory:
    """Write the state of checkpoint commit ``commit`` (a full SHA: resolve names with
    :func:`qvc.store.revisions.parse_revision`) into ``directory``: one JSON file per field and
    the manifest (:func:`qvc.readers.statefiles.write_state`), whose metadata names the checkpoint
    (``id``, ``thread``, ``step``, ``commit``) for :func:`qvc.edit.workdir.commit_directory`, and
    the thread's ``head`` then (``qvc commit`` refuses to rewind what the thread gained since).

    Nothing in the repository changes (HEAD does not move); ``store`` may be read-only. Each
    file is replaced atomically and fsynced, and the directory is fsynced, before this returns.
    ``directory`` is created if missing; an existing one must be empty or written by qvc before.
    Field files edited or deleted there since qvc wrote (or committed) them, and files qvc did not
    write that a field's file would replace, are local changes the write would lose: unless
    ``force``, they raise :class:`~qvc.errors.LocalChangesError` listing them, and nothing is
    written. Files qvc did not write are never removed (as git keeps untracked files): those
    named ``*.json`` stay as fields added to a ``qvc commit``, listed in ``kept``.
    Raises :class:`~qvc.errors.InvalidInputError` for a directory that holds other files or
    cannot be written, :class:`~qvc.errors.SerializationError` for state that JSON files cannot
    hold (nothing is written then), :class:`~qvc.errors.CorruptionError` if ``commit`` is missing
    or not a readable checkpoint. A damaged field (its blob does not read) is not written and is
    named in ``damaged``; the healthy ones are (a commit from the directory then drops it, unless
    a file for it is added).

    An adapter's checkpoint is written through its editor (:func:`qvc.store.viewers.editor_of`):
    its values as JSON a person edits; values without an exact JSON form stay in their stored
    encoding, each named in one line of ``notes``. When the editor's framework is not installed,
    the stored values are written as they are, and ``notes`` says so.
    """
    damaged: dict[str, str] = {}
    cp = store.read(commit, damaged=damaged).checkpoint
    head = store.head(cp.thread_id) if cp.thread_id else None  # `qvc commit` tells a stale DIR by it
    meta = {"id": cp.id, "thread": cp.thread_id, "step": cp.step, "commit": commit, "head": head}
    state, notes, key = cp.state_data, [], None
    found = editor_of(store, commit)
    if found is not None and found[1] is None:
        notes.append(f"the {found[0]!r} values are written in their stored encoding: its editor does not import "
                     "here (is its framework installed?)")
    elif found is not None:
        key, editor = found
        editable = editor.to_files(store, commit, state)
        state, notes = editable.state, list(editable.notes)
        meta["editor"] = key
    if found is None and cp.thread_id and store.thread_record(cp.thread_id) is not None:
        notes.append(f"thread {cp.thread_id!r} keeps its head in the record its writer stores beside it: these are "
                     "the checkpoint's stored values, and `qvc commit` refuses an edit of them (its framework reads "
                     "the record, not a commit)")
    names = {field_filename(name) for name in state}
    untracked = set(untracked_files(directory))
    if not force:
        changed = [f for f in local_changes(directory) if f not in untracked or f in names]
        if changed:
            raise LocalChangesError(
                f"your local changes to {len(changed)} file(s) in {os.fspath(directory)} would be overwritten: "
                f"{', '.join(changed)} (commit them with `qvc commit {os.fspath(directory)}`, or use --force)",
                changed)
    files = write_state(state, directory, meta=meta)
    return CheckedOutDirectory(os.path.abspath(directory), cp.id, cp.thread_id, cp.step, commit, files, damaged,
                               key, notes, sorted(untracked - names))
