"""A directory of state files stored back as a checkpoint: ``qvc commit DIR``.

The directory is one :func:`qvc.readers.workdir.checkout_to_directory` wrote (one JSON file per
field, :mod:`qvc.readers.statefiles`), then people edited: :func:`commit_directory` stores it as
a new checkpoint on the current thread, a child of the checkpoint it came from when that is on
the current thread (so editing an older checkpoint is time travel), else of the thread's head.
A directory an adapter's editor wrote (its manifest names the ``"editor"``) is read back through
that editor (:func:`qvc.store.viewers.editor_for`), so the checkpoint stores the adapter's
encoding and header and reads back through the adapter as its framework's objects.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from qvc.errors import CheckpointConflictError, CorruptionError, InvalidInputError, StorageError
from qvc.readers.statefiles import read_state, record_state
from qvc.store.format import HEADER
from qvc.store.git_store import UNCHECKED
from qvc.store.refnames import decode_name
from qvc.store.viewers import editor_for
from qvc.types import Checkpoint, CheckpointConfig

if TYPE_CHECKING:
    from qvc.store.git_store import GitCheckpointStore


@dataclass(frozen=True)
class CommittedDirectory:
    """The checkpoint :func:`commit_directory` stored."""

    thread: str
    id: str  # the new checkpoint id
    commit: str  # its commit (the thread's new head)
    step: int
    changed: list[str]  # fields added or changed against the parent, then fields dropped
    time_travel: bool  # the parent was not the thread's head: the newer line is kept as superseded


def commit_directory(store: GitCheckpointStore, directory: str | os.PathLike, message: str = "", *,
                     expected_head: str | None = UNCHECKED) -> CommittedDirectory:
    """Store the state in ``directory`` (as :func:`qvc.readers.workdir.checkout_to_directory` wrote
    it, then edited) as a new checkpoint on the current thread, and move the thread's head to it.

    Its parent is the checkpoint the directory was written from (the manifest's ``commit``) when
    that is on the current thread, else the thread's head (none for a thread without checkpoints:
    step 0). Its step is the parent's plus one; its metadata is ``{"source": "update", "step",
    "message": message, "edited_from": <the manifest's id>}``. A parent older than the head is
    time travel: the newer line is kept as a superseded line (``time_travel`` in the result).
    Once stored, the directory's manifest names the new checkpoint
    (:func:`qvc.readers.statefiles.record_state`), so the next commit from it builds on this one.

    A directory written through an adapter's editor (the manifest's ``editor``) is stored as that
    editor's :meth:`~qvc.store.editing.Editor.from_files` says: the adapter's encoding, header keys
    and checkpoint id, its metadata keys beside the ones above; values left as checked out are
    stored exactly as the checkpoint they came from stores them.

    ``expected_head`` is the current thread's head as the caller saw it (a commit SHA, ``None`` for a
    thread without checkpoints), when the caller decided on it (``qvc commit`` refuses a stale
    directory by it): the head is compared with it when the commit starts, and the store's
    compare-and-swap (``put(expected_head=)``) moves the head only from it, so the check and the
    write are one step and a checkpoint another writer adds in between is never rewound. Without
    it, the head read here is the one swapped.

    Writes through :meth:`~qvc.store.git_store.GitCheckpointStore.put`, so the checkpoint is durable
    on return when the store's durability is SYNC (the default). Raises
    :class:`~qvc.errors.InvalidInputError` when HEAD is detached (nothing is read then) or for a
    directory that is missing, not written by qvc or holds malformed JSON (naming the file and
    line), names an editor that does not import here, or holds a value its editor cannot read;
    :class:`~qvc.errors.SerializationError` for values that cannot be stored;
    :class:`~qvc.errors.CheckpointConflictError` (naming the thread) if another writer moved the
    thread after it was read here (or, with ``expected_head``, after the caller read it), and
    nothing is stored then;
    :class:`~qvc.errors.DurabilityError` if the flush fails; :class:`~qvc.errors.StorageError` (keeping
    the errno) for a full disk or another I/O error: nothing is stored then, or, if only the
    manifest could not be updated afterwards, its message says the checkpoint is stored.
    """
    head = store.current()
    if head.thread is None:
        raise InvalidInputError("HEAD is detached: `qvc checkout THREAD` (or `checkout -b NEW`) first")
    if expected_head is not UNCHECKED and head.commit != expected_head:
        was = expected_head[:12] if expected_head else "no checkpoints"
        now = head.commit[:12] if head.commit else "no checkpoints"
        raise CheckpointConflictError(f"thread {head.thread!r} was moved by another writer (expected {was}, found "
                                      f"{now}); nothing was stored")
    files: dict = {}
    state, meta = read_state(directory, files=files)
    key = meta.get("editor")
    editor = None
    if key is not None:
        editor = editor_for(key) if isinstance(key, str) else None
        if editor is None:
            raise InvalidInputError(f"{os.fspath(directory)} was written by the {key!r} editor, which does not "
                                    "import here (is its framework installed?); nothing was stored")
    base = meta.get("commit") if isinstance(meta.get("commit"), str) else None
    origin = None
    if base is not None:
        try:
            info = store.commit_info(base)
        except CorruptionError:  # not in this repository (or damaged): commit on the head
            base = None
        else:
            origin = base
            if info.thread_id != head.thread:
                base = None
    parent = base or head.commit
    pinfo = store.commit_info(parent) if parent else None
    step = (pinfo.step or 0) + 1 if pinfo else 0
    cid = uuid.uuid4().hex
    metadata = {"source": "update", "step": step, "message": message, "edited_from": meta.get("id")}
    header: dict = {}
    created: dict = {}
    if editor is not None:
        stored = editor.from_files(store, state, thread=head.thread, parent=parent, origin=origin, step=step)
        state, header, cid = stored.state, stored.header, stored.id or cid
        metadata = {**stored.metadata, **metadata}
        if stored.created_at is not None:
            created["created_at"] = stored.created_at
    checkpoint = Checkpoint(id=cid, thread_id=head.thread, step=step, state_data=state,
                            parent_id=pinfo.checkpoint_id if pinfo else None, **created)
    store.put(CheckpointConfig(head.thread), checkpoint, metadata, expected_head=head.commit, header=header)
    sha = store.resolve(cid)
    kept = {"id": cid, "thread": head.thread, "step": step, "commit": sha}
    if key is not None:
        kept["editor"] = key
    try:
        record_state(directory, files, kept)
    except StorageError as exc:  # stored all the same: say so, and what to do about the directory
        again = f"`qvc checkout {cid} --to {os.fspath(directory)} --force`"
        raise StorageError(f"checkpoint {cid} is stored on thread {head.thread!r}, but {exc} (free space, then "
                           f"{again})", exc.errno, exc.filename) from None
    changed = store.changed(sha)
    if parent:  # dropped fields changed too (store.changed lists only added and modified ones)
        now = store.tree_entries(sha)
        changed += [decode_name(n) for n in store.tree_entries(parent) if n != HEADER and n not in now]
    return CommittedDirectory(head.thread, cid, sha, step, changed, bool(head.commit and parent != head.commit))
