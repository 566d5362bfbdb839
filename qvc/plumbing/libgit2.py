"""pygit2, imported on first use.

Importing pygit2 costs about as much as a whole read-only ``qvc`` command (over 100 ms on
the machines we measured), so read-only stores (:mod:`qvc.plumbing.odb`) never trigger it. Every qvc
module takes ``pygit2`` from here; the process-wide libgit2 setting qvc relies on is applied
by :func:`configured` before the first repository is opened through it.
"""

from __future__ import annotations

import threading
from types import ModuleType
from typing import Any


class _Lazy:
    """Stands for a module and imports it at the first attribute access."""

    def __init__(self, name: str):
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        module = self._module
        if module is None:
            module = self._module = __import__(self._name)
        return getattr(module, attr)


pygit2: Any = _Lazy("pygit2")
_done = False
_lock = threading.Lock()


def configured() -> ModuleType:
    """pygit2, with strict object creation off (qvc writes every object itself before any ref
    points at it; libgit2's existence check would rescan the pack directory after each write)."""
    global _done
    if not _done:
        with _lock:
            if not _done:
                pygit2.option(pygit2.enums.Option.ENABLE_STRICT_OBJECT_CREATION, 0)
                _done = True
    return pygit2
