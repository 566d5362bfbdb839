"""The checkpoint store: qvc's on-disk format over the plumbing, and ``GitCheckpointStore``.

Modules: :mod:`~qvc.store.format` (how a checkpoint is laid out in git objects),
:mod:`~qvc.store.refnames` (which refs mean what; values are msgpack, :mod:`qvc.codec.serde`),
:mod:`~qvc.store.history` (cached reads of commits and trees), :mod:`~qvc.store.revisions`
(names to commits), :mod:`~qvc.store.discovery` (finding a repository), :mod:`~qvc.store.base`
(the abstract ``CheckpointStore`` API) and :mod:`~qvc.store.git_store` (the store itself).
Imports: the plumbing, ``qvc.codec``, ``qvc.errors`` and ``qvc.types`` only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qvc.lazy import exports

# Imported on first use (qvc.lazy): a reader of one module (qvc.store.format, say) does not load the store.
__getattr__, __dir__ = exports(__name__, {"CommitInfo": "qvc.store.history",
                                          "GitCheckpointStore": "qvc.store.git_store"})

if TYPE_CHECKING:
    from qvc.store.git_store import GitCheckpointStore
    from qvc.store.history import CommitInfo

__all__ = ["CommitInfo", "GitCheckpointStore"]
