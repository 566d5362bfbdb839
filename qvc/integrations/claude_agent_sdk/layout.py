"""How a Claude Agent SDK transcript is laid out in a qvc repository (no SDK import: the viewer reads it too).

A transcript, the SDK's ``SessionKey`` (``project_key``, ``session_id``, and for a subagent's
transcript a ``subpath``), is one thread:

- ``claude/session/<project_key>/<session_id>`` for a session's main transcript;
- ``claude/session/<project_key>/<session_id>/<subpath>`` for a subagent's
  (``.../subagents/agent-<id>``), so a session's subagents are the threads under its name.

``project_key`` and ``session_id`` are written with ``%`` as ``%25`` and ``/`` as ``%2F`` (the
SDK's own keys hold neither: a sanitized directory name, a UUID), so every name reads back as its
key; the subpath is written as it is.

Each checkpoint holds the transcript's fields:

- ``entries``: every entry (JSONL line) of the transcript, oldest first, exactly as appended (a list
  the store keeps in 64-entry chunks once it is longer, so an append writes its last chunk and the
  ones it adds);
- ``key``: the ``SessionKey`` (``project_key``, ``session_id``, ``subpath`` when set);
- ``summary``: main transcripts only, the SDK's incrementally folded session summary (its
  ``fold_session_summary`` output's ``data``, kept verbatim for ``list_session_summaries``).

Every checkpoint's metadata says ``"source": "claude-agent-sdk"`` (its viewer's key), the ``op``
(``append`` or ``fork``), ``added`` and ``entries`` (how many it added, how many the transcript
holds after it) and ``mtime`` (its write time in epoch milliseconds: what ``list_sessions`` reports).

Imports :mod:`qvc.errors` and :mod:`qvc.store.prefixes`.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Mapping, Optional

from qvc.errors import InvalidInputError
from qvc.store.prefixes import register_prefix

#: Thread names of transcripts: ``claude/session/<project_key>/<session_id>[/<subpath>]``.
PREFIX = register_prefix("claude-agent-sdk.sessions", "claude/session/")
#: The metadata ``source`` of every transcript checkpoint; its viewer is declared as ``source:claude-agent-sdk``.
SOURCE = "claude-agent-sdk"
#: Field names: the transcript's entries, its key, the folded summary (main transcripts).
ENTRIES, KEY, SUMMARY = "entries", "key", "summary"

Key = Dict[str, str]
_ESCAPED = re.compile(r"%(25|2F)")


def _escape(part: str) -> str:
    return part.replace("%", "%25").replace("/", "%2F")


def _unescape(part: str) -> str:
    return _ESCAPED.sub(lambda m: "%" if m.group(1) == "25" else "/", part)


def check_key(key: Any, *, subpath: bool = True) -> Key:
    """``key`` as a plain ``{"project_key", "session_id"[, "subpath"]}`` dict (an empty ``subpath``
    counts as none, the main transcript); :class:`InvalidInputError` for a key that is not a
    mapping of non-empty strings (or that has a subpath where none may be)."""
    if not isinstance(key, Mapping):
        raise InvalidInputError(f"a session key is a mapping (project_key, session_id[, subpath]), not {key!r}")
    out: Key = {}
    for name in ("project_key", "session_id"):
        value = key.get(name)
        if not isinstance(value, str) or not value:
            raise InvalidInputError(f"session key {name} must be a non-empty string, not {value!r}")
        out[name] = value
    sub = key.get("subpath")
    if sub is not None and sub != "":
        if not subpath:
            raise InvalidInputError(f"this call takes a session's key without a subpath, not {sub!r}")
        if not isinstance(sub, str):
            raise InvalidInputError(f"session key subpath must be a string, not {sub!r}")
        out["subpath"] = sub
    return out


def session_thread(project_key: str, session_id: str, subpath: Optional[str] = None) -> str:
    """The thread of a transcript (see the module docstring)."""
    key = check_key({"project_key": project_key, "session_id": session_id, "subpath": subpath})
    return thread_of(key)


def thread_of(key: Key) -> str:
    """The thread of a checked key (:func:`check_key`)."""
    name = f"{PREFIX}{_escape(key['project_key'])}/{_escape(key['session_id'])}"
    return f"{name}/{key['subpath']}" if key.get("subpath") else name


def project_prefix(project_key: str) -> str:
    """The common start of the threads of every transcript of ``project_key``."""
    return f"{PREFIX}{_escape(project_key)}/"


def key_of(thread: str) -> Optional[Key]:
    """The ``SessionKey`` a transcript thread stands for, else ``None``."""
    if not thread.startswith(PREFIX):
        return None
    parts = thread[len(PREFIX):].split("/", 2)
    if len(parts) < 2 or not parts[0] or not parts[1] or (len(parts) == 3 and not parts[2]):
        return None
    key: Key = {"project_key": _unescape(parts[0]), "session_id": _unescape(parts[1])}
    if len(parts) == 3:
        key["subpath"] = parts[2]
    return key
