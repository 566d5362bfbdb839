"""How readers show a pydantic-ai entry checkpoint: the conversation up to that entry.

Each entry checkpoint (:class:`~qvc.integrations.pydantic_ai.QvcConversationStore`) holds one
message in pydantic-ai's JSON form. Readers (``qvc show``, ``qvc diff``, ``qvc log -p``, ``qvc
blame``, ``qvc serve``) show instead ``messages``: every message from the conversation's first
entry up to this one, in the shared conversation shape, so a diff between two entries says what
was added. A ``ModelRequest`` gives one message per part: a system prompt (``system``), a user
prompt (``user``), a tool return (``tool``, with ``tool_call_id`` and the tool's ``name``;
``error`` when its outcome is not a success) and a retry prompt (``tool`` answering its call, or
``user``, with ``error``); a ``ModelResponse`` gives one ``assistant`` message: its text parts as
``content``, its tool calls as ``tool_calls`` (``{"id", "name", "args"}``), then ``thinking``,
``model_name``, ``finish_reason`` and ``usage`` when set. A request's ``instructions`` ride on
its first message. Ids: a response's is its entry's id, a request part's ``<entry id>.<index>``.

Declared in ``pyproject.toml`` as the ``qvc.viewers`` entry point ``pydantic_ai`` (the header key
the adapter writes). Works on the stored plain data only: it imports neither pydantic-ai nor
anything of qvc but the store's types.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from qvc.errors import CorruptionError

if TYPE_CHECKING:
    from qvc.store.git_store import GitCheckpointStore

#: The header key of entry checkpoints, under which this viewer is declared.
HEADER_KEY = "pydantic_ai"

# Keys of a part or message shown under the shape's own names, or that are empty bookkeeping.
_PART_SHOWN = {"content", "timestamp", "part_kind", "tool_name", "tool_call_id", "outcome", "args", "id"}
_USAGE_ZERO = (0, 0.0, None, {}, [])


def view(store: GitCheckpointStore, sha: str, state: dict[str, Any], *, plain: bool = False) -> dict[str, Any]:
    """The conversation up to the entry in commit ``sha`` (see the module docstring), plain data
    whatever ``plain`` says. A checkpoint without a ``message`` field is shown as stored. Raises
    :class:`~qvc.errors.CorruptionError` when a stored message is not pydantic-ai's form."""
    if "message" not in state:
        return state
    line = []
    for info in store.first_parents(sha):
        if info.hex == sha:
            line.append((info.checkpoint_id, state["message"]))
            continue
        try:
            line.append((info.checkpoint_id, store.field_value(info.hex, "message")))
        except CorruptionError:
            raise
        except LookupError:  # not an entry: the conversation starts after it
            break
    messages: list[dict[str, Any]] = []
    for entry_id, message in reversed(line):
        messages.extend(shaped(entry_id, message))
    return {"messages": messages}


def shaped(entry_id: str, message: Any) -> list[dict[str, Any]]:
    """The stored message of entry ``entry_id`` as messages in the shared conversation shape."""
    if not isinstance(message, dict) or message.get("kind") not in ("request", "response"):
        raise CorruptionError(f"entry {entry_id}: not a pydantic-ai message")
    parts = message.get("parts") or []
    if message["kind"] == "response":
        return [_response(entry_id, message, parts)]
    out = [_request_part(f"{entry_id}.{i}", part) for i, part in enumerate(parts)]
    if message.get("instructions") and out:
        out[0]["instructions"] = message["instructions"]
    return out


def _request_part(part_id: str, part: dict[str, Any]) -> dict[str, Any]:
    kind = part.get("part_kind")
    content = part.get("content")
    if kind == "system-prompt":
        out: dict[str, Any] = {"role": "system", "content": content, "id": part_id}
    elif kind == "user-prompt":
        out = {"role": "user", "content": content if isinstance(content, (str, list)) else _text(content),
               "id": part_id}
    elif kind == "tool-return" or (kind == "retry-prompt" and part.get("tool_call_id")):
        out = {"role": "tool", "content": content if isinstance(content, (str, list)) else _text(content),
               "id": part_id, "tool_call_id": part.get("tool_call_id")}
        if part.get("tool_name"):
            out["name"] = part["tool_name"]
        if kind == "retry-prompt" or part.get("outcome") not in (None, "success"):
            out["error"] = True
    else:  # a retry answering no call, feedback, or a part kind of a later pydantic-ai
        out = {"role": "user", "content": content if isinstance(content, (str, list)) else _text(content),
               "id": part_id, "part_kind": kind}
        if kind == "retry-prompt":
            out["error"] = True
    if part.get("timestamp"):
        out["time"] = part["timestamp"]
    for key, value in part.items():
        if key not in _PART_SHOWN and value not in (None, {}, []):
            out[key] = value
    return out


def _response(entry_id: str, message: dict[str, Any], parts: list[dict[str, Any]]) -> dict[str, Any]:
    texts = [p.get("content") or "" for p in parts if p.get("part_kind") == "text"]
    calls = [{"id": p.get("tool_call_id"), "name": p.get("tool_name"), "args": _args(p.get("args"))}
             for p in parts if p.get("part_kind") in ("tool-call", "builtin-tool-call")]
    out: dict[str, Any] = {"role": "assistant", "content": "".join(texts), "id": entry_id, "tool_calls": calls}
    if message.get("timestamp"):
        out["time"] = message["timestamp"]
    thinking = [p.get("content") for p in parts if p.get("part_kind") == "thinking"]
    if thinking:
        out["thinking"] = "".join(t or "" for t in thinking)
    others = [p for p in parts if p.get("part_kind") not in ("text", "tool-call", "builtin-tool-call", "thinking")]
    if others:
        out["parts"] = others
    for key in ("model_name", "finish_reason", "provider_name"):
        if message.get(key):
            out[key] = message[key]
    usage = {k: v for k, v in (message.get("usage") or {}).items() if v not in _USAGE_ZERO}
    if usage:
        out["usage"] = usage
    return out


def _args(args: Any) -> dict[str, Any]:
    if isinstance(args, dict):
        return args
    if isinstance(args, str):
        try:
            parsed = json.loads(args)
        except ValueError:
            return {"_raw": args}
        return parsed if isinstance(parsed, dict) else {"_value": parsed}
    return {} if args is None else {"_value": args}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)
