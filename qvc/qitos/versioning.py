"""``StateVersionTracker``: per-field version counters kept by an agent loop (QitOS-compatible).

The store does not need it: :class:`qvc.GitCheckpointStore` derives ``state_versions`` from
tree diffs. It is here for engines that track versions themselves.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, Iterable, Optional

from qvc.types import StateVersions

_MISSING = object()


class StateVersionTracker:
    """Monotonic version numbers per state field (thread-safe)."""

    def __init__(self, initial: Optional[StateVersions] = None):
        self._versions: Dict[str, int] = dict(initial or {})
        self._lock = threading.Lock()

    def bump(self, field: str) -> int:
        with self._lock:
            self._versions[field] = self._versions.get(field, 0) + 1
            return self._versions[field]

    def bump_all(self, fields: Iterable[str]) -> StateVersions:
        """Bump each field; return only the new versions of those fields."""
        return {f: self.bump(f) for f in fields}

    def bump_from_diff(self, before: Dict[str, Any], after: Dict[str, Any]) -> StateVersions:
        """Bump fields added, changed (``!=``) or removed between two state dicts."""
        changed = [k for k, v in after.items() if before.get(k, _MISSING) != v]
        changed += [k for k in before if k not in after]
        return self.bump_all(changed)

    def snapshot(self) -> StateVersions:
        with self._lock:
            return dict(self._versions)

    def get(self, field: str) -> int:
        with self._lock:
            return self._versions.get(field, 0)

    def apply_versions(self, versions: StateVersions) -> None:
        with self._lock:
            self._versions = dict(versions)
