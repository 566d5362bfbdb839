"""qvc's errors as Strands' own exception types too.

Strands' ``Storage`` protocol says a backend raises ``strands.types.exceptions.StorageError``
(its callers catch it: a search skips an entry that does not read), its session repositories
``SessionException``. qvc's adapters raise qvc's typed errors (:mod:`qvc.errors`). :func:`as_strands`
makes one error both: the qvc error's class is swapped for a subclass of it and of the Strands
type, made once per pair, so ``except InvalidInputError`` and ``except StorageError`` both catch it,
with its message, attributes and traceback unchanged.

Imports Strands' exceptions and :mod:`qvc.errors`.
"""

from __future__ import annotations

import threading
from typing import Dict, Tuple, Type, TypeVar

from strands.types.exceptions import SessionException, StorageError

from qvc.errors import QvcError

__all__ = ["SessionException", "StorageError", "as_strands"]

_E = TypeVar("_E", bound=QvcError)
_lock = threading.Lock()
_made: Dict[Tuple[type, type], type] = {}


def _both(cls: type, base: Type[Exception]) -> type:
    with _lock:
        made = _made.get((cls, base))
        if made is None:
            made = type(cls.__name__, (cls, base), {
                "__module__": cls.__module__, "__qualname__": cls.__qualname__,
                "__doc__": f"{cls.__doc__ or cls.__name__} (also Strands' {base.__name__})"})
            _made[(cls, base)] = made
        return made


def as_strands(exc: _E, base: Type[Exception] = StorageError) -> _E:
    """``exc``, now also an instance of ``base`` (Strands' ``StorageError`` or ``SessionException``)."""
    if not isinstance(exc, base):
        exc.__class__ = _both(type(exc), base)
    return exc
