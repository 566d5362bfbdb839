"""Thread-name prefixes: which part of a repository's thread names each owner writes.

A feature or adapter that names threads itself (runs write ``run/<session>/<run>``, agno's
sessions ``agno/session/<session>``) claims its prefix here, once, when its module is imported:
``PREFIX = register_prefix("runs", "run/")``. Two owners never share names: a prefix equal to,
or a prefix of, another owner's is refused with :class:`PrefixCollisionError`, so a thread
name has at most one owner (:func:`owner_of`). Thread names outside every prefix are the
user's own (a LangGraph ``thread_id``, a thread made with ``qvc``'s command line).

The registry lives in this process only and knows the owners whose modules are imported;
nothing about it is stored in a repository, and the names it governs never change (repositories
written before it read the same).

Imports only :mod:`qvc.errors`.
"""

from __future__ import annotations

import threading
from typing import Optional

from qvc.errors import InvalidInputError, QvcError


class PrefixCollisionError(QvcError):
    """Two owners claimed thread-name prefixes that overlap (one equals or starts the other)."""


_lock = threading.Lock()
_owners: dict[str, str] = {}  # prefix -> owner


def register_prefix(owner: str, prefix: str) -> str:
    """Claim thread names starting with ``prefix`` for ``owner``; returns ``prefix``.

    Registering the same ``(owner, prefix)`` again does nothing (a module imported twice). An
    owner may hold several prefixes. Raises :class:`PrefixCollisionError` when ``prefix`` equals,
    starts or starts with another owner's prefix, and :class:`~qvc.errors.InvalidInputError`
    when ``owner`` or ``prefix`` is not a non-empty string.
    """
    for value, what in ((owner, "owner"), (prefix, "prefix")):
        if not isinstance(value, str) or not value:
            raise InvalidInputError(f"thread-name {what} must be a non-empty string, not {value!r}")
    with _lock:
        for other, other_owner in _owners.items():
            if other_owner == owner or not (other.startswith(prefix) or prefix.startswith(other)):
                continue
            how = "is already" if other == prefix else f"overlaps {other!r},"
            raise PrefixCollisionError(
                f"{owner!r} cannot claim thread names starting with {prefix!r}: {prefix!r} {how} "
                f"claimed by {other_owner!r}; a thread name would have two owners")
        _owners[prefix] = owner
    return prefix


def owner_of(thread: str) -> Optional[str]:
    """The owner whose prefix ``thread`` starts with, or ``None`` (a name of the user's own)."""
    with _lock:
        for prefix, owner in _owners.items():
            if thread.startswith(prefix):
                return owner
    return None


def prefixes() -> dict[str, str]:
    """Every registered prefix and its owner (a copy)."""
    with _lock:
        return dict(_owners)
