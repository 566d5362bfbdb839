"""A checkpoint's state in a directory of JSON files, and back: ``qvc checkout --to DIR`` and
``qvc commit DIR``.

:func:`checkout_to_directory` writes a checkpoint's state into a directory (one JSON file per
field, :mod:`qvc.inspect.statefiles`) with a manifest naming the checkpoint it came from;
people edit, delete or add field files; :func:`commit_directory` stores the directory as a new
checkpoint on the current thread, a child of the checkpoint it came from when that is on the
current thread (so editing an older checkpoint is time travel), else of the thread's head.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from qvc.errors import CorruptionError, InvalidInputError, LocalChangesError, StorageError
from qvc.inspect.statefiles import local_changes, read_state, record_state, write_state
from qvc.store.format import HEADER
from qvc.store.refnames import decode_name
from qvc.types import Checkpoint, CheckpointConfig

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


@dataclass(frozen=True)
class CommittedDirectory:
    """The checkpoint :func:`commit_directory` stored."""

    thread: str
    id: str  # the new checkpoint id
    commit: str  # its commit (the thread's new head)
    step: int
    changed: list[str]  # fields added or changed against the parent, then fields dropped
    time_travel: bool  # the parent was not the thread's head: the newer line is kept as superseded


def checkout_to_directory(store: GitCheckpointStore, commit: str, directory: str | os.PathLike, *,
                          force: bool = False) -> CheckedOutDirectory:
    """Write the state of checkpoint commit ``commit`` (a full SHA: resolve names with
    :func:`qvc.store.revisions.parse_revision`) into ``directory``: one JSON file per field and
    the manifest (:func:`qvc.inspect.statefiles.write_state`), whose metadata names the checkpoint
    (``id``, ``thread``, ``step``, ``commit``) for :func:`commit_directory`.

    Nothing in the repository changes (HEAD does not move); ``store`` may be read-only. Each
    file is replaced atomically and fsynced, and the directory is fsynced, before this returns.
    ``directory`` is created if missing; an existing one must be empty or written by qvc before.
    Field files edited, deleted or added there since qvc wrote (or committed) them are local
    changes (:func:`qvc.inspect.statefiles.local_changes`): unless ``force``, they raise
    :class:`~qvc.errors.LocalChangesError` listing them, and nothing is written.
    Raises :class:`~qvc.errors.InvalidInputError` for a directory that holds other files or
    cannot be written, :class:`~qvc.errors.SerializationError` for state that JSON files cannot
    hold (nothing is written then), :class:`~qvc.errors.CorruptionError` if ``commit`` is missing
    or not a readable checkpoint. A damaged field (its blob does not read) is not written and is
    named in ``damaged``; the healthy ones are (a commit from the directory then drops it, unless
    a file for it is added).
    """
    damaged: dict[str, str] = {}
    cp = store.read(commit, damaged=damaged).checkpoint
    if not force:
        changed = local_changes(directory)
        if changed:
            raise LocalChangesError(
                f"your local changes to {len(changed)} file(s) in {os.fspath(directory)} would be overwritten: "
                f"{', '.join(changed)} (commit them with `qvc commit {os.fspath(directory)}`, or use --force)",
                changed)
    files = write_state(cp.state_data, directory, meta={"id": cp.id, "thread": cp.thread_id, "step": cp.step,
                                                        "commit": commit})
    return CheckedOutDirectory(os.path.abspath(directory), cp.id, cp.thread_id, cp.step, commit, files, damaged)


def commit_directory(store: GitCheckpointStore, directory: str | os.PathLike, message: str = "") -> CommittedDirectory:
    """Store the state in ``directory`` (as :func:`checkout_to_directory` wrote it, then edited) as a
    new checkpoint on the current thread, and move the thread's head to it.

    Its parent is the checkpoint the directory was written from (the manifest's ``commit``) when
    that is on the current thread, else the thread's head (none for a thread without checkpoints:
    step 0). Its step is the parent's plus one; its metadata is ``{"source": "update", "step",
    "message": message, "edited_from": <the manifest's id>}``. A parent older than the head is
    time travel: the newer line is kept as a superseded line (``time_travel`` in the result).
    Once stored, the directory's manifest names the new checkpoint
    (:func:`qvc.inspect.statefiles.record_state`), so the next commit from it builds on this one.

    Writes through :meth:`~qvc.store.git_store.GitCheckpointStore.put`, so the checkpoint is durable
    on return when the store's durability is SYNC (the default). Raises
    :class:`~qvc.errors.InvalidInputError` when HEAD is detached (nothing is read then) or for a
    directory that is missing, not written by qvc or holds malformed JSON (naming the file and
    line); :class:`~qvc.errors.SerializationError` for values that cannot be stored;
    :class:`~qvc.errors.CheckpointConflictError` (naming the thread) if another writer moved the
    thread after it was read here, and nothing is stored then;
    :class:`~qvc.errors.DurabilityError` if the flush fails; :class:`~qvc.errors.StorageError` (keeping
    the errno) for a full disk or another I/O error: nothing is stored then, or, if only the
    manifest could not be updated afterwards, its message says the checkpoint is stored.
    """
    head = store.current()
    if head.thread is None:
        raise InvalidInputError("HEAD is detached: `qvc checkout THREAD` (or `checkout -b NEW`) first")
    files: dict = {}
    state, meta = read_state(directory, files=files)
    base = meta.get("commit") if isinstance(meta.get("commit"), str) else None
    if base is not None:
        try:
            info = store.commit(base)
        except CorruptionError:  # not in this repository (or damaged): commit on the head
            base = None
        else:
            if info.thread_id != head.thread:
                base = None
    parent = base or head.commit
    pinfo = store.commit(parent) if parent else None
    step = (pinfo.step or 0) + 1 if pinfo else 0
    cid = uuid.uuid4().hex
    metadata = {"source": "update", "step": step, "message": message, "edited_from": meta.get("id")}
    checkpoint = Checkpoint(id=cid, thread_id=head.thread, step=step, state_data=state,
                            parent_id=pinfo.checkpoint_id if pinfo else None)
    store.put(CheckpointConfig(head.thread), checkpoint, metadata, expected_head=head.commit)
    sha = store.resolve(cid)
    try:
        record_state(directory, files, {"id": cid, "thread": head.thread, "step": step, "commit": sha})
    except StorageError as exc:  # stored all the same: say so, and what to do about the directory
        again = f"`qvc checkout {cid} --to {os.fspath(directory)} --force`"
        raise StorageError(f"checkpoint {cid} is stored on thread {head.thread!r}, but {exc} (free space, then "
                           f"{again})", exc.errno, exc.filename) from None
    changed = store.changed(sha)
    if parent:  # dropped fields changed too (store.changed lists only added and modified ones)
        now = store.tree_entries(sha)
        changed += [decode_name(n) for n in store.tree_entries(parent) if n != HEADER and n not in now]
    return CommittedDirectory(head.thread, cid, sha, step, changed, bool(head.commit and parent != head.commit))
