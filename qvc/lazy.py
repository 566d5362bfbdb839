"""Package attributes imported on first use (PEP 562's module ``__getattr__``).

A package whose ``__init__`` offers names from heavy modules (``qvc``, ``qvc.runs``) maps each
name to the module that defines it; the module is imported when the name is first read, so
``import qvc`` stays light and the command line loads only what a command uses. ``from pkg import
X`` works as for any attribute. Imports only the standard library (layer 0).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Mapping


def exports(package: str, homes: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: its attribute ``X`` is attribute ``X`` of module
    ``homes[X]``, imported on first read and then kept in the package's namespace (the next read
    is a plain attribute). A name not in ``homes`` raises ``AttributeError`` as usual."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(homes))

    return __getattr__, __dir__
