"""What is made on first use, so that importing a module costs little: package attributes
(PEP 562's module ``__getattr__``) and regular expressions.

A package whose ``__init__`` offers names from heavy modules (``qvc``, ``qvc.runs``) maps each
name to the module that defines it; the module is imported when the name is first read, so
``import qvc`` stays light and the command line loads only what a command uses. ``from pkg import
X`` works as for any attribute. A module-level :class:`Pattern` compiles when first used (a
command loads dozens of modules and uses few of their patterns). Imports only the standard
library (layer 0).
"""

from __future__ import annotations

import importlib
import re
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


#: what a :class:`Pattern` offers of the compiled pattern
_PATTERN_API = ("match", "fullmatch", "search", "sub", "subn", "split", "findall", "finditer", "pattern", "flags",
                "groups", "groupindex")


class Pattern:
    """``re.compile(pattern, flags)``, compiled on first use. Then the compiled pattern's
    methods (:data:`_PATTERN_API`) are plain attributes of this object: a call costs what it
    costs on the compiled pattern. Two threads using it first may both compile it, harmlessly."""

    def __init__(self, pattern: str, flags: int = 0):
        self._source = (pattern, flags)

    def __getattr__(self, name: str) -> Any:
        if name not in _PATTERN_API:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        compiled = re.compile(*self._source)
        self.__dict__.update((n, getattr(compiled, n)) for n in _PATTERN_API)
        return getattr(compiled, name)

    def __repr__(self) -> str:
        return f"Pattern({self._source[0]!r})"
