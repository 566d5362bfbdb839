"""Run, session and thread ids: checking them, making new ones, naming a run's thread, parsing ``RUN@AT``.

Imports only :mod:`qvc.errors` and the store's prefix registry (:mod:`qvc.store.prefixes`).
"""

from __future__ import annotations

import uuid
from typing import Any

from qvc.errors import InvalidInputError
from qvc.store.prefixes import register_prefix

#: Thread prefix of runs (registered: no other owner may claim it).
THREAD_PREFIX = register_prefix("runs", "run/")


def new_id() -> str:
    """A fresh random id (32 hex digits) for a run, session, message, owner token or checkpoint."""
    return uuid.uuid4().hex


def check_id(value: Any, what: str) -> str:
    """``value`` if it is a non-empty string, else :class:`InvalidInputError` naming it ``what``."""
    if not isinstance(value, str) or not value:
        raise InvalidInputError(f"{what} must be a non-empty string, not {value!r}")
    return value


def check_run_id(value: Any) -> str:
    """``value`` if it is a valid run id (non-empty, no ``/`` or ``@``), else :class:`InvalidInputError`."""
    check_id(value, "run id")
    if "/" in value or "@" in value:
        raise InvalidInputError(f"run id {value!r} must not contain '/' or '@'")
    return value


def thread_of(session_id: str, run_id: str) -> str:
    """The thread id of a run."""
    return f"{THREAD_PREFIX}{session_id}/{run_id}"


def parse_run_ref(ref: str) -> tuple:
    """Split ``RUN`` / ``RUN@MESSAGE_INDEX`` / ``RUN@CHECKPOINT_ID`` into ``(run_id, at)``.

    ``at`` is ``None``, an int or a checkpoint id string. Raises :class:`InvalidInputError`.
    """
    check_id(ref, "run reference")
    run_id, sep, at = ref.partition("@")
    check_run_id(run_id)
    if not sep:
        return run_id, None
    if not at:
        raise InvalidInputError(f"run reference {ref!r}: nothing after '@'")
    if at.lstrip("-").isdigit():
        return run_id, int(at)
    return run_id, at
