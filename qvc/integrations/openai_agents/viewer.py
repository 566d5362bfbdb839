"""How readers show a session checkpoint of :class:`~qvc.integrations.openai_agents.QvcSession`.

A session checkpoint stores its items as segments (``items.<n>``) and sealed items (``sealed``,
see :mod:`.layout`). Readers (``qvc show``, ``qvc diff``, ``qvc log -p``, ``qvc blame``, ``qvc serve``)
show instead:

- ``session``: the session id;
- ``messages``: the session's Responses-API items in the shared conversation shape, one message
  per item: a message item by its role (``developer`` shown as ``system``) with its text (the
  ``input_text``/``output_text`` parts joined, else the parts as they are); a ``function_call``
  (or another tool call: ``computer_call``, ``web_search_call``, ...) as an assistant message
  with one entry in ``tool_calls`` (``{"id": call_id, "name", "args"}``); its output
  (``function_call_output``, ``*_output``) as a ``tool`` message answering ``tool_call_id``, named
  after its call; a ``reasoning`` item as an assistant message holding its summary; then the
  other keys of the item that are set (``type`` when it is not ``message``, ``status``, ...);
- ``paused_run``, when a paused run's ``RunState`` is saved: its agent, turn and the tool calls
  waiting for approval (the whole state is the stored ``run_state`` field, ``--raw``).

Recognised by the metadata every session checkpoint carries (``"source": "openai-agents"``):
declared in ``pyproject.toml`` as the ``qvc.viewers`` entry point ``source:openai-agents``.
Imports no SDK (only :mod:`.layout` and :mod:`qvc.errors`), so a repository reads without it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional

from qvc.integrations.openai_agents.layout import RUN_STATE, SESSION, Log

if TYPE_CHECKING:
    from qvc.store.git_store import GitCheckpointStore

#: The registry key this viewer is declared under: the metadata ``source`` of session checkpoints.
KEY = "source:openai-agents"

_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
_TEXT_PARTS = {"input_text", "output_text", "text", "summary_text", "reasoning_text"}
# Item keys the shared shape shows under its own names.
_SHAPED = {"role", "content", "id", "call_id", "name", "arguments", "output", "summary"}


def view(store: GitCheckpointStore, sha: str, state: Dict[str, Any], *, plain: bool = False) -> Dict[str, Any]:
    """The session checkpoint in commit ``sha`` (``state``, its ``state_data``) as people read it
    (see the module docstring); plain data whatever ``plain`` says. Raises
    :class:`~qvc.errors.CorruptionError` when a segment field is not a list of items."""
    items = Log.of(state, f"session checkpoint {sha[:12]}").items
    out: Dict[str, Any] = {"session": state.get(SESSION), "messages": messages(items)}
    paused = paused_run(state.get(RUN_STATE))
    if paused is not None:
        out["paused_run"] = paused
    return out


def messages(items: List[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """Responses-API input items in the shared conversation shape (see the module docstring)."""
    names: Dict[Any, Any] = {}
    return [message_dict(item, names) for item in items]


def message_dict(item: Mapping[str, Any], names: Optional[Dict[Any, Any]] = None) -> Dict[str, Any]:
    """One item in the shared conversation shape; ``names`` maps the call ids seen so far to their
    tool names (filled here), so an output is named after its call."""
    names = {} if names is None else names
    kind = item.get("type") or "message"
    out: Dict[str, Any]
    if kind == "message":
        role = _ROLES.get(item.get("role"), "user")
        out = {"role": role, "content": text_of(item.get("content")), "id": item.get("id")}
        if role == "assistant":
            out["tool_calls"] = []
        if item.get("role") not in _ROLES:
            out["sdk_role"] = item.get("role")
        elif item.get("role") == "developer":
            out["sdk_role"] = "developer"
    elif kind == "reasoning":
        out = {"role": "assistant", "content": text_of(item.get("summary") or item.get("content")),
               "id": item.get("id"), "tool_calls": []}
    elif kind.endswith("_output"):
        call = item.get("call_id") or item.get("id")
        out = {"role": "tool", "content": text_of(item.get("output")), "id": item.get("id"), "tool_call_id": call}
        if names.get(call):
            out["name"] = names[call]
    elif kind.endswith("_call") or "call_id" in item:
        call = item.get("call_id") or item.get("id")
        name = item.get("name") or (kind[:-len("_call")] if kind.endswith("_call") else kind)
        names[call] = name
        out = {"role": "assistant", "content": "", "id": item.get("id"),
               "tool_calls": [{"id": call, "name": name, "args": _args(item)}]}
    else:
        out = {"role": "assistant", "content": text_of(item.get("content")), "id": item.get("id"), "tool_calls": []}
    for key, value in item.items():  # what else the item says, when set
        if key in _SHAPED or (key == "type" and value == "message") or value in (None, "", [], {}):
            continue
        out.setdefault(key, value)
    return out


def text_of(content: Any) -> Any:
    """A message's content: its text parts joined when it has only text, else as it is."""
    if content is None:
        return ""
    if isinstance(content, list) and content and all(
            isinstance(p, Mapping) and p.get("type") in _TEXT_PARTS and isinstance(p.get("text"), str)
            and not p.get("annotations") for p in content):
        return "".join(p["text"] for p in content)
    return content


def _args(item: Mapping[str, Any]) -> Dict[str, Any]:
    """A tool call's arguments as a dict: a function call's JSON text decoded (kept as
    ``{"arguments": text}`` when it is not a JSON object), another call's action or input."""
    raw = item.get("arguments")
    if isinstance(raw, str):
        try:
            decoded = json.loads(raw)
        except ValueError:
            return {"arguments": raw}
        return decoded if isinstance(decoded, dict) else {"arguments": decoded}
    if isinstance(raw, Mapping):
        return dict(raw)
    for key in ("action", "input", "query", "queries"):
        if item.get(key) is not None:
            return {key: item[key]}
    return {}


def paused_run(data: Any) -> Optional[Dict[str, Any]]:
    """A saved ``RunState``'s summary: its agent, turn and pending approvals (``None`` without one)."""
    if not isinstance(data, Mapping):
        return None
    step = data.get("current_step") if isinstance(data.get("current_step"), Mapping) else {}
    pending = (step.get("data") or {}).get("interruptions") if step.get("type") == "next_step_interruption" else []
    approvals = []
    for p in pending or []:
        raw = p.get("raw_item") if isinstance(p, Mapping) else None
        if isinstance(raw, Mapping):
            approvals.append({"id": raw.get("call_id") or raw.get("id"), "name": p.get("tool_name") or raw.get("name"),
                              "args": _args(raw)})
    agent = data.get("current_agent")
    return {"agent": agent.get("name") if isinstance(agent, Mapping) else agent,
            "turn": data.get("current_turn"), "awaiting_approval": approvals,
            "schema_version": data.get("$schemaVersion")}
