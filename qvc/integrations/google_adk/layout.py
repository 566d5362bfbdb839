"""How Google ADK's sessions and artifacts are laid out in a qvc repository (no ADK import).

Thread names, under the prefix ``adk/`` claimed in :mod:`qvc.store.prefixes` (each part escaped so
that a ``/`` in an app name, user id, session id or file name never splits it: ``%`` as ``%25``,
``/`` as ``%2F``)::

    adk/session/<app>/<user>/<session>          a session: one checkpoint per stored event
    adk/app/<app>                               the app's state (``app:`` keys, prefix stripped)
    adk/user/<app>/<user>                       one user's state (``user:`` keys)
    adk/artifact/<app>/<user>/s/<session>/<file>  a session's artifact: one checkpoint per version
    adk/artifact/<app>/<user>/u/<file>          a user-scoped (``user:``) artifact

A session's first checkpoint (step 0) holds ``state``, the session-scope state; each appended
event adds one checkpoint holding ``event`` (the event as ADK's SQL services store it:
``event.model_dump_json(exclude_none=True)``, parsed) and ``state`` (unchanged fields share
their blobs with the parent, so a checkpoint writes the event and, when the event changed it, the
state). Metadata: ``source`` ``"adk"`` and ``update_time`` (ADK's session update time). Every
checkpoint's header carries :data:`HEADER_KEY`, which names the viewer (:mod:`.viewer`).

This module reads and names; it imports only :mod:`qvc.store` and :mod:`qvc.errors`, so the
viewer works without ADK installed.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional

from qvc.store.git_store import GitCheckpointStore
from qvc.store.prefixes import register_prefix
from qvc.store.refnames import encode_name

#: The thread-name prefix this adapter owns.
PREFIX = register_prefix("google_adk", "adk/")
SESSION = PREFIX + "session/"
APP = PREFIX + "app/"
USER = PREFIX + "user/"
ARTIFACT = PREFIX + "artifact/"
#: The header key of every checkpoint this adapter writes; its value says what the thread is
#: (``"session"``, ``"app"``, ``"user"``, ``"artifact"``). The viewer is declared under it.
HEADER_KEY = "google_adk"
#: The metadata ``source`` of every checkpoint this adapter writes.
SOURCE = "adk"

_EVENT = encode_name("event")


def part(text: str) -> str:
    """One escaped component of a thread name."""
    return text.replace("%", "%25").replace("/", "%2F")


def unpart(text: str) -> str:
    """The inverse of :func:`part`."""
    return text.replace("%2F", "/").replace("%25", "%")


def session_thread(app_name: str, user_id: str, session_id: str) -> str:
    """The thread of one session."""
    return f"{SESSION}{part(app_name)}/{part(user_id)}/{part(session_id)}"


def split_session_thread(thread: str) -> Optional[tuple[str, str, str]]:
    """``(app_name, user_id, session_id)`` of a session thread, or ``None`` for any other name."""
    if not thread.startswith(SESSION):
        return None
    pieces = thread[len(SESSION):].split("/")
    if len(pieces) != 3:
        return None
    app, user, sid = (unpart(p) for p in pieces)
    return app, user, sid


def app_thread(app_name: str) -> str:
    """The thread of an app's state."""
    return f"{APP}{part(app_name)}"


def user_thread(app_name: str, user_id: str) -> str:
    """The thread of one user's state in an app."""
    return f"{USER}{part(app_name)}/{part(user_id)}"


def artifact_thread(app_name: str, user_id: str, filename: str, session_id: Optional[str]) -> str:
    """The thread of one artifact file: user-scoped for a ``user:`` name, else the session's."""
    base = f"{ARTIFACT}{part(app_name)}/{part(user_id)}/"
    if filename.startswith("user:"):
        return f"{base}u/{part(filename)}"
    return f"{base}s/{part(session_id or '')}/{part(filename)}"


def artifact_prefixes(app_name: str, user_id: str, session_id: Optional[str]) -> list[str]:
    """The thread-name prefixes of the artifacts a session sees: its own, then the user's."""
    base = f"{ARTIFACT}{part(app_name)}/{part(user_id)}/"
    out = [f"{base}s/{part(session_id)}/"] if session_id else []
    return out + [f"{base}u/"]


def event_commits(store: GitCheckpointStore, sha: str) -> list[tuple[str, tuple[int, bytes]]]:
    """``(commit, event entry)`` of every commit on the first-parent line ending at ``sha`` that
    added an event, oldest first. A commit whose ``event`` is its parent's (a fork's first
    checkpoint copies its source's) adds none."""
    line = [(info.hex, store.tree_entries(info.hex).get(_EVENT)) for info in store.first_parents(sha)]
    out = []
    for i, (commit, entry) in enumerate(line):
        older = line[i + 1][1] if i + 1 < len(line) else None
        if entry is not None and entry != older:
            out.append((commit, entry))
    out.reverse()
    return out


def stored_events(store: GitCheckpointStore, sha: str) -> Iterator[dict[str, Any]]:
    """The events (as stored: ADK's JSON form, parsed) the session line ending at ``sha`` holds,
    in the order they were appended."""
    for commit, entry in event_commits(store, sha):
        yield store.field_value(commit, "event", entry)


def scope_state(store: GitCheckpointStore, thread: str) -> dict[str, Any]:
    """The ``state`` field of the head of an app, user or session thread (``{}``: none yet)."""
    head = store.head(thread)
    return state_at(store, head) if head is not None else {}


def state_at(store: GitCheckpointStore, sha: str) -> dict[str, Any]:
    """The ``state`` field of checkpoint commit ``sha`` (``{}`` when it has none)."""
    entry = store.tree_entries(sha).get(encode_name("state"))
    return dict(store.field_value(sha, "state", entry)) if entry is not None else {}


def update_time(store: GitCheckpointStore, sha: str) -> float:
    """The ADK update time kept in checkpoint ``sha``'s metadata (0.0 when absent)."""
    value = store.header(sha)[1].get("update_time")
    return float(value) if isinstance(value, (int, float)) else 0.0
