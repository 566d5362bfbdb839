"""``QvcCheckpointProvider``: CrewAI's runtime-checkpoint provider (``BaseProvider``) on a qvc repository.

CrewAI writes a checkpoint of its whole runtime state (crews, flows, agents, the event record)
when the events a ``CheckpointConfig`` names fire; each names its parent checkpoint and a branch.
Here a branch is a thread, ``crewai/checkpoint/<branch>`` (:mod:`.layout`), and each checkpoint a
commit that keeps CrewAI's own id:

- its git parent is the checkpoint CrewAI names as parent when the repository holds it: the
  branch's head (the usual next step), an older checkpoint of the branch (a resume from there: qvc
  time travel, the left line kept as a superseded line), or a checkpoint of another branch (a
  ``fork``: the new thread starts from it, sharing its history). A checkpoint without a parent
  (a new run), or whose parent another store holds, follows the branch's head, so a branch reads
  as one line; its metadata keeps CrewAI's ``parent_id`` as CrewAI gave it.
- ``prune(location, max_keep, branch=)`` keeps the newest ``max_keep`` checkpoints of the branch's
  line and drops the older ones of that line in one transaction
  (``GitCheckpointStore.drop_checkpoints``: kept checkpoints keep their ids and are re-parented
  onto what remains). It never drops the branch's head, so ``max_keep=0`` keeps the head alone: a
  resume of the branch always finds its newest checkpoint. Lines a resume from an older checkpoint
  left behind (superseded lines) are not pruned; checkpoints other branches were forked from stay
  readable from those branches.

``CheckpointConfig.provider`` accepts only CrewAI's ``JsonProvider`` or ``SqliteProvider``
(a union told apart by ``provider_type``), so this class is a ``JsonProvider`` subclass with
every method replaced; and since CrewAI restores a checkpoint by sniffing its location as a file
(``detect_provider``), :meth:`QvcCheckpointProvider.config` with ``restore_from=`` writes the
checkpoint's JSON to a file in a directory of the provider's and points CrewAI at it, named so
that CrewAI reads back the checkpoint's id and continues its lineage in the repository.
docs/crewai.md shows both.

Imports CrewAI (``crewai.state``), pydantic, :mod:`qvc.store`, :mod:`qvc.types`, :mod:`qvc.errors`
and :mod:`.layout`.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
import threading
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, List, Optional

from crewai.state.checkpoint_config import CheckpointConfig as CrewCheckpointConfig
from crewai.state.provider.json_provider import JsonProvider
from pydantic import Field, PrivateAttr

from qvc.errors import (
    CheckpointConflictError,
    InvalidInputError,
    SerializationError,
    UnknownCheckpointError,
)
from qvc.integrations.crewai._common import RepositoryOwner
from qvc.integrations.crewai.layout import CHECKPOINT_SOURCE, branch_of, branch_thread
from qvc.store.git_store import GitCheckpointStore
from qvc.types import Checkpoint, CheckpointConfig, DurabilityMode

#: How often a checkpoint is tried again when another writer moved its branch meanwhile.
_RETRIES = 50


def _new_id() -> str:
    """An id in CrewAI's own form: ``<UTC timestamp>_<8 hex>``."""
    return f"{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%S')}_{uuid.uuid4().hex[:8]}"


class QvcCheckpointProvider(RepositoryOwner, JsonProvider):
    """CrewAI's checkpoint provider on the qvc repository at ``path`` (see the module docstring).

    ``QvcCheckpointProvider(path)`` opens (or creates) the repository on first use and closes it in
    :meth:`close`; ``QvcCheckpointProvider(store=store)`` uses an open
    :class:`~qvc.GitCheckpointStore` and leaves it open. ``durability`` is the store's.

    A checkpoint's location is ``"<path>#<checkpoint id>"``; the ``location`` CrewAI passes in (the
    config's) must name this repository. Use :meth:`config` to make the ``CheckpointConfig``.
    """

    path: str = Field(default="checkpoints.qvc", description="The qvc repository's path.")
    durability: str = Field(default=DurabilityMode.SYNC.value)

    _store: Optional[GitCheckpointStore] = PrivateAttr(default=None)
    _own: bool = PrivateAttr(default=True)
    _lock: Any = PrivateAttr(default_factory=threading.RLock)
    _restore_dir: Optional[str] = PrivateAttr(default=None)


    # -- configuring CrewAI ----------------------------------------------------------------------

    def config(self, restore_from: Optional[str] = None, **fields: Any) -> CrewCheckpointConfig:
        """A ``CheckpointConfig`` that writes through this provider (``location``: the repository),
        with CrewAI's other fields (``on_events``, ``max_checkpoints``) as given. ``restore_from``
        (a checkpoint id, a location this provider returned, or a branch: its head) makes it the
        config a kickoff resumes from: ``flow.kickoff(from_checkpoint=provider.config(restore_from=...))``,
        ``Crew.from_checkpoint(...)`` (see :meth:`restore_path`)."""
        cfg = CrewCheckpointConfig(location=self.store.path, provider=self, **fields)
        if restore_from is not None:
            cfg.restore_from = self.restore_path(restore_from)
        return cfg

    def restore(self, entity: Any, ref: str, *, branch: Optional[str] = None, **fields: Any) -> Any:
        """``entity.from_checkpoint`` (a ``Flow`` or ``Crew`` class) of the checkpoint ``ref`` names,
        or ``entity.fork`` onto ``branch`` when given, with its ``checkpoint`` set to
        :meth:`config` (``fields``: CrewAI's ``on_events``, ``max_checkpoints``). A restored object
        otherwise keeps the config serialized in the checkpoint, whose provider CrewAI rebuilds as a
        plain ``JsonProvider`` writing files at the repository's path: call ``kickoff()`` on what
        this returns, or pass ``from_checkpoint=provider.config(restore_from=ref)`` to a kickoff."""
        cfg = self.config(restore_from=ref)
        restored = entity.fork(cfg, branch) if branch is not None else entity.from_checkpoint(cfg)
        restored.checkpoint = self.config(**fields)
        return restored

    def restore_path(self, ref: str, directory: Optional[str] = None) -> str:
        """Write the checkpoint ``ref`` names (see :meth:`config`) as the JSON file CrewAI restores
        from, ``<directory>/<id>_p-<parent>.json`` (default directory: one of the provider's, removed
        by :meth:`close`), and return its path. CrewAI reads the checkpoint's id back from the
        name, so the restored run's next checkpoint names it as parent."""
        sha = self._resolve(ref)
        read = self.store.read(sha)
        data = json.dumps(read.checkpoint.state_data)
        parent = read.metadata.get("parent_id") or "none"
        with self._lock:
            if directory is None:
                if self._restore_dir is None:
                    self._restore_dir = tempfile.mkdtemp(prefix="qvc-crewai-restore-")
                directory = self._restore_dir
        target = Path(directory) / f"{read.checkpoint.id}_p-{parent}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(data, encoding="utf-8")
        return str(target)

    # -- BaseProvider ----------------------------------------------------------------------------

    def checkpoint(self, data: str, location: str, *, parent_id: Optional[str] = None, branch: str = "main") -> str:
        """Store the serialized runtime state ``data`` as one checkpoint on ``branch`` (see the
        module docstring); returns its location, ``"<path>#<id>"``. Durable on return in SYNC mode.
        Raises :class:`~qvc.errors.InvalidInputError` for a location that is not this repository or
        a bad branch, :class:`~qvc.errors.SerializationError` for data that is not a JSON object."""
        self._check_location(location)
        thread = branch_thread(branch)
        if not isinstance(data, str):
            raise InvalidInputError(f"checkpoint data must be a str (CrewAI's serialized state), "
                                    f"not {type(data).__name__}")
        try:
            fields = json.loads(data)
        except ValueError as exc:
            raise SerializationError(f"checkpoint data is not JSON: {exc}") from None
        if not isinstance(fields, dict):
            raise SerializationError("checkpoint data is not a JSON object")
        if parent_id is not None and not isinstance(parent_id, str):
            raise InvalidInputError(f"parent_id must be a str or None, not {parent_id!r}")
        checkpoint_id = _new_id()
        store = self.store
        metadata: Dict[str, Any] = {"source": CHECKPOINT_SOURCE, "branch": branch, "parent_id": parent_id,
                                    "trigger": fields.get("trigger")}
        with self._lock:
            for _ in range(_RETRIES):
                head = store.head(thread)
                parent = self._known(parent_id)
                if parent is None or parent == head:
                    git_parent = head  # the branch's next step (or a new run on it)
                else:
                    git_parent = parent  # a resume from an older checkpoint, or a fork from another branch
                step = self._step(head, git_parent)
                checkpoint = Checkpoint(id=checkpoint_id, thread_id=thread, step=step, state_data=fields,
                                        parent_id=store.commit_info(git_parent).checkpoint_id if git_parent else None)
                try:
                    store.put(CheckpointConfig(thread), checkpoint, metadata, expected_head=head)
                except CheckpointConflictError:
                    continue
                return f"{store.path}#{checkpoint_id}"
            raise CheckpointConflictError(f"branch {branch!r}: other writers kept moving its head")

    async def acheckpoint(self, data: str, location: str, *, parent_id: Optional[str] = None,
                          branch: str = "main") -> str:
        """:meth:`checkpoint`, in a worker thread."""
        return await asyncio.to_thread(self.checkpoint, data, location, parent_id=parent_id, branch=branch)

    def prune(self, location: str, max_keep: int, *, branch: str = "main") -> int:
        """Keep the newest ``max_keep`` checkpoints of ``branch``'s line (its head always), drop the
        line's older ones (see the module docstring); returns how many were dropped.
        :class:`~qvc.errors.InvalidInputError` for a negative ``max_keep``."""
        self._check_location(location)
        if not isinstance(max_keep, int) or isinstance(max_keep, bool) or max_keep < 0:
            raise InvalidInputError(f"max_keep must be a non-negative integer, not {max_keep!r}")
        thread = branch_thread(branch)
        store = self.store
        with self._lock:
            for _ in range(_RETRIES):
                head = store.head(thread)
                if head is None:
                    return 0
                own = self._own_line(thread, head)  # newest first, the head first
                drop = own[max(max_keep, 1):]
                if not drop:
                    return 0
                try:
                    store.drop_checkpoints(thread, drop, keep=store.commit_info(head).checkpoint_id)
                except CheckpointConflictError:
                    continue
                return len(drop)
            raise CheckpointConflictError(f"branch {branch!r}: other writers kept moving its head")

    def extract_id(self, location: str) -> str:
        """The checkpoint id of a location ``"<path>#<id>"`` (a bare id is returned as it is)."""
        if not isinstance(location, str) or not location:
            raise InvalidInputError(f"a checkpoint location is a non-empty string, not {location!r}")
        return location.rsplit("#", 1)[-1]

    def from_checkpoint(self, location: str) -> str:
        """The serialized runtime state of the checkpoint ``location`` names (``"<path>#<id>"``, an
        id, or a branch: its head), as CrewAI parses it. Raises
        :class:`~qvc.errors.UnknownCheckpointError` when there is none."""
        return json.dumps(self.store.read(self._resolve(location)).checkpoint.state_data)

    async def afrom_checkpoint(self, location: str) -> str:
        """:meth:`from_checkpoint`, in a worker thread."""
        return await asyncio.to_thread(self.from_checkpoint, location)

    # -- beyond the interface --------------------------------------------------------------------

    def branches(self) -> List[str]:
        """Every CrewAI branch the repository holds, sorted."""
        return sorted(b for b in map(branch_of, self.store.threads()) if b is not None)

    def thread(self, branch: str) -> str:
        """The qvc thread of the CrewAI branch ``branch``."""
        return branch_thread(branch)

    def close(self) -> None:
        """Close the repository if this object opened it, and remove the files :meth:`restore_path`
        wrote in its own directory (idempotent)."""
        with self._lock:
            if self._restore_dir is not None:
                shutil.rmtree(self._restore_dir, ignore_errors=True)
                self._restore_dir = None
            if self._own and self._store is not None:
                self._store.close()

    def __enter__(self) -> QvcCheckpointProvider:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- helpers ---------------------------------------------------------------------------------

    def _check_location(self, location: Any) -> None:
        if not isinstance(location, (str, os.PathLike)) or not str(location):
            raise InvalidInputError(f"a checkpoint location is this repository's path, not {location!r}")
        if os.path.realpath(location) != os.path.realpath(self.store.path):
            raise InvalidInputError(f"{self!r} keeps checkpoints in {self.store.path}, not {str(location)!r}: "
                                    f"use provider.config() for the CheckpointConfig")

    def _known(self, checkpoint_id: Optional[str]) -> Optional[str]:
        """The commit of the checkpoint with exactly this id, if the repository holds it."""
        if not checkpoint_id:
            return None
        try:
            sha = self.store.resolve(checkpoint_id)
        except (UnknownCheckpointError, InvalidInputError):
            return None
        return sha if self.store.commit_info(sha).checkpoint_id == checkpoint_id else None

    def _step(self, head: Optional[str], parent: Optional[str]) -> int:
        """The branch's write counter: one more than its head's and the parent's (prune's order)."""
        steps = [self.store.commit_info(s).step or 0 for s in (head, parent) if s is not None]
        return max(steps) + 1 if steps else 0

    def _own_line(self, thread: str, head: str) -> List[str]:
        """The commits of the branch's own checkpoints on its line (not those of the branch it was
        forked from), newest first."""
        out = []
        for info in self.store.first_parents(head):
            if info.thread_id != thread:
                break
            out.append(info.hex)
        return out

    def _resolve(self, ref: str) -> str:
        """The commit of a location ``"<path>#<id>"``, a checkpoint id (or qvc's unique prefix or SHA),
        or a branch (its head). :class:`~qvc.errors.UnknownCheckpointError` if none."""
        if not isinstance(ref, str) or not ref:
            raise InvalidInputError(f"a checkpoint reference is a non-empty string, not {ref!r}")
        if "#" in ref:
            where, ref = ref.rsplit("#", 1)
            if where:
                self._check_location(where)
        store = self.store
        head = store.head(branch_thread(ref))
        if head is not None:
            return head
        return store.resolve(ref)
