"""How an agent session's conversation history is laid out in a qvc repository (no framework import:
the viewer reads it too).

An ``AgentSession``'s history, kept by :class:`~qvc.integrations.agent_framework.QvcHistoryProvider`,
is one thread: ``maf/chat/<session id>``, the id written with ``%`` as ``%25`` and ``/`` as ``%2F``
so that every thread reads back as its session id (a ``None`` session id, which the framework passes
for a run without a session, is the session ``default``).

Each save of messages (one agent run, or one model call with the agent's
``require_per_service_call_history_persistence=True``) is one checkpoint. Its fields:

- ``session``: the session id;
- ``messages``: every message of the session so far, oldest first, each as the framework's own
  ``Message.to_dict()`` writes it (``{"type": "message", "role", "contents": [...], "author_name",
  "message_id", "additional_properties"}``) and ``Message.from_dict`` reads it back. The store keeps
  a list field as a tree of 64-item chunks, so a save rewrites only the chunk it appended to.

Every checkpoint's metadata says ``"source": "agent-framework-chat"`` (its viewer's key), the
``session_id``, the ``op`` (``save``, ``replace``) and the number of ``messages``, ``added`` by it.

Imports :mod:`qvc.errors` and :mod:`qvc.store.prefixes`.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from qvc.errors import InvalidInputError
from qvc.store.prefixes import register_prefix

#: Thread names of agent sessions' histories: ``maf/chat/<session id>``.
PREFIX = register_prefix("agent-framework.chat", "maf/chat/")
#: The metadata ``source`` of every history checkpoint; its viewer is declared as ``source:agent-framework-chat``.
SOURCE = "agent-framework-chat"
#: The session id the framework's ``None`` (a run without a session) is kept under.
DEFAULT_SESSION = "default"
#: Field names (see the module docstring).
SESSION, MESSAGES = "session", "messages"

_ESCAPED = re.compile(r"%(25|2F)")


def session_id_of(session_id: Any) -> str:
    """The session id a history is kept under: ``session_id``, or ``default`` for ``None``;
    :class:`InvalidInputError` for anything else than a non-empty string."""
    if session_id is None:
        return DEFAULT_SESSION
    if not isinstance(session_id, str) or not session_id:
        raise InvalidInputError(f"session_id must be a non-empty string or None, not {session_id!r}")
    return session_id


def chat_thread(session_id: Optional[str]) -> str:
    """The thread of the history of session ``session_id``."""
    return PREFIX + session_id_of(session_id).replace("%", "%25").replace("/", "%2F")


def chat_session_of(thread: str) -> Optional[str]:
    """The session id a history thread stands for, else ``None``."""
    if not thread.startswith(PREFIX) or len(thread) == len(PREFIX) or "/" in thread[len(PREFIX):]:
        return None
    return _ESCAPED.sub(lambda m: "%" if m.group(1) == "25" else "/", thread[len(PREFIX):])
