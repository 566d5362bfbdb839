"""How readers show a history checkpoint of :class:`~qvc.integrations.agent_framework.QvcHistoryProvider`.

The checkpoint stores the framework's ``Message.to_dict()`` dicts (:mod:`.history_layout`); readers
(``qvc show``, ``qvc diff``, ``qvc log -p``, ``qvc blame``, ``qvc serve``) show instead:

- ``session``: the session id;
- ``messages``: the conversation in the shared shape, one entry per message: its ``role``, its text
  (the ``text`` contents joined; the other contents, images, reasoning, ..., as stored when there
  are any), its ``message_id`` as ``id``; an assistant message's ``function_call`` contents as
  ``tool_calls`` (``{"id": call_id, "name", "args"}``); a ``tool`` message as one entry per
  ``function_result`` content, answering ``tool_call_id``, named after its call, ``error`` when it
  carries an ``exception``; then ``author_name`` and ``additional_properties`` when set.

Recognised by the metadata every history checkpoint carries (``"source": "agent-framework-chat"``):
declared in ``pyproject.toml`` as the ``qvc.viewers`` entry point ``source:agent-framework-chat``.
Imports no framework (only :mod:`.history_layout`), so a repository reads without it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Dict, List, Mapping

from qvc.integrations.agent_framework.history_layout import MESSAGES, SESSION

if TYPE_CHECKING:
    from qvc.store.git_store import GitCheckpointStore

#: The registry key this viewer is declared under: the metadata ``source`` of history checkpoints.
KEY = "source:agent-framework-chat"

_ROLES = {"user", "assistant", "system", "tool"}


def view(store: GitCheckpointStore, sha: str, state: Dict[str, Any], *, plain: bool = False) -> Dict[str, Any]:
    """The history checkpoint in commit ``sha`` (``state``, its ``state_data``) as people read it
    (see the module docstring); plain data whatever ``plain`` says."""
    stored = state.get(MESSAGES)
    return {"session": state.get(SESSION), "messages": messages(stored if isinstance(stored, list) else [])}


def messages(stored: List[Any]) -> List[Dict[str, Any]]:
    """``Message.to_dict()`` dicts in the shared conversation shape (see the module docstring)."""
    names: Dict[Any, Any] = {}
    out: List[Dict[str, Any]] = []
    for m in stored:
        if isinstance(m, Mapping):
            out.extend(message_dicts(m, names))
        else:
            out.append({"role": "user", "content": m, "id": None})
    return out


def message_dicts(m: Mapping[str, Any], names: Dict[Any, Any]) -> List[Dict[str, Any]]:
    """One stored message as one or more entries of the shared shape (a tool message one per result);
    ``names`` maps the call ids seen so far to their tool names (filled here)."""
    role = m.get("role") if m.get("role") in _ROLES else "user"
    contents = [c for c in m.get("contents") or [] if isinstance(c, Mapping)]
    extra = {k: m[k] for k in ("author_name", "additional_properties") if m.get(k)}
    if m.get("role") not in _ROLES:
        extra["framework_role"] = m.get("role")
    results = [c for c in contents if c.get("type") == "function_result"]
    if role == "tool" and results:
        out = []
        for c in results:
            entry: Dict[str, Any] = {"role": "tool", "content": _result(c), "id": m.get("message_id"),
                                     "tool_call_id": c.get("call_id")}
            if names.get(c.get("call_id")):
                entry["name"] = names[c.get("call_id")]
            if c.get("exception"):
                entry["error"] = True
            out.append({**entry, **extra})
        return out
    calls = [c for c in contents if c.get("type") == "function_call"]
    rest = [c for c in contents if c.get("type") != "function_call"]
    entry = {"role": role, "content": _text(rest), "id": m.get("message_id")}
    if role == "assistant":
        entry["tool_calls"] = []
        for c in calls:
            names[c.get("call_id")] = c.get("name")
            entry["tool_calls"].append({"id": c.get("call_id"), "name": c.get("name"), "args": _args(c)})
    return [{**entry, **extra}]


def _text(contents: List[Mapping[str, Any]]) -> Any:
    """The contents' text joined when they are all text, else the contents as stored."""
    if all(c.get("type") == "text" and isinstance(c.get("text"), str) for c in contents):
        return "".join(c["text"] for c in contents)
    return [dict(c) for c in contents]


def _result(c: Mapping[str, Any]) -> Any:
    result = c.get("result")
    if c.get("exception") and result is None:
        return c.get("exception")
    return result if result is not None else _text([i for i in c.get("items") or [] if isinstance(i, Mapping)])


def _args(c: Mapping[str, Any]) -> Dict[str, Any]:
    """A call's arguments as a dict: JSON text decoded (kept as ``{"arguments": text}`` when it is not
    a JSON object), a mapping as it is."""
    raw = c.get("arguments")
    if isinstance(raw, Mapping):
        return dict(raw)
    if isinstance(raw, str):
        try:
            decoded = json.loads(raw)
        except ValueError:
            return {"arguments": raw}
        return decoded if isinstance(decoded, dict) else {"arguments": decoded}
    return {} if raw is None else {"arguments": raw}
