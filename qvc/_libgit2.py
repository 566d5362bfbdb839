"""pygit2, imported on first use.

Importing pygit2 costs about as much as a whole read-only ``qvc`` command (over 100 ms on
the machines we measured), so read-only stores (:mod:`qvc.odb`) never trigger it. Every qvc
module takes ``pygit2`` from here; the process-wide libgit2 setting qvc relies on is applied
by :func:`configured` before the first repository is opened through it.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from types import ModuleType


def _lazy(name: str) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ImportError(f"No module named {name!r}")
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


pygit2 = _lazy("pygit2")
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
