"""QitOS compatibility: the helpers of the ``qitos.checkpoint`` API that are not store methods.

``fork_checkpoint`` / ``list_fork_history`` (:mod:`~qvc.qitos.fork`), ``DurabilityManager`` /
``PendingWriteManager`` (:mod:`~qvc.qitos.managers`) and ``StateVersionTracker``
(:mod:`~qvc.qitos.versioning`), all over any :class:`qvc.store.base.CheckpointStore`.
Imports: the store and below.
"""

from qvc.qitos.fork import fork_checkpoint, list_fork_history
from qvc.qitos.managers import DurabilityManager, PendingWriteManager
from qvc.qitos.versioning import StateVersionTracker

__all__ = ["DurabilityManager", "PendingWriteManager", "StateVersionTracker", "fork_checkpoint",
           "list_fork_history"]
