"""The checkpoint store: qvc's on-disk format over the plumbing, and ``GitCheckpointStore``.

Modules: :mod:`~qvc.store.format` (how a checkpoint is laid out in git objects),
:mod:`~qvc.store.refnames` (which refs mean what; values are msgpack, :mod:`qvc.codec.serde`),
:mod:`~qvc.store.history` (cached reads of commits and trees), :mod:`~qvc.store.revisions`
(names to commits), :mod:`~qvc.store.discovery` (finding a repository), :mod:`~qvc.store.base`
(the abstract ``CheckpointStore`` API) and :mod:`~qvc.store.git_store` (the store itself).
Imports: the plumbing, ``qvc.codec``, ``qvc.errors`` and ``qvc.types`` only.
"""

from qvc.store.git_store import CommitInfo, GitCheckpointStore

__all__ = ["CommitInfo", "GitCheckpointStore"]
