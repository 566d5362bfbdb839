"""How readers show a transcript checkpoint of :class:`~qvc.integrations.claude_agent_sdk.QvcSessionStore`.

A transcript checkpoint stores the Claude Code program's transcript lines as they are (field
``entries``, :mod:`.layout`). Readers (``qvc show``, ``qvc diff``, ``qvc log -p``, ``qvc blame``,
``qvc serve``) show instead:

- ``session``: the transcript's key (``project_key``, ``session_id``, ``subpath`` for a subagent's);
- ``title`` and ``tag``, when the session has them (from the SDK's folded summary);
- ``messages``: the conversation in the shared shape, one message per ``user``, ``assistant`` or
  ``system`` line (``id``: the line's ``uuid``): an assistant line's text, its ``tool_use`` blocks
  as ``tool_calls`` (``{"id", "name", "args"}``) and its thinking (``thinking``); a user line's
  ``tool_result`` blocks as ``tool`` messages answering ``tool_call_id``, named after their call,
  ``error`` when failed (``<uuid>#<n>`` as ids when a line holds several); then ``time`` (the
  line's timestamp), ``model``, and ``meta``, ``sidechain`` or ``compact_summary`` for lines the
  program marks so;
- ``events``: the other lines (titles, tags, attachments, queue operations, ...), each with its
  ``type``, ``id`` and ``time`` and the keys that are not bookkeeping.

Recognised by the metadata every transcript checkpoint carries (``"source": "claude-agent-sdk"``):
declared in ``pyproject.toml`` as the ``qvc.viewers`` entry point ``source:claude-agent-sdk``.
Imports no SDK (only :mod:`.layout` and :mod:`qvc.errors`), so a repository reads without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Tuple

from qvc.errors import CorruptionError
from qvc.integrations.claude_agent_sdk.layout import ENTRIES, KEY, SUMMARY

if TYPE_CHECKING:
    from qvc.store.git_store import GitCheckpointStore

#: The registry key this viewer is declared under: the metadata ``source`` of transcript checkpoints.
VIEWER_KEY = "source:claude-agent-sdk"

#: Keys of a transcript line that only say where and by what it was written.
BOOKKEEPING = frozenset({
    "uuid", "parentUuid", "logicalParentUuid", "timestamp", "sessionId", "cwd", "version", "gitBranch",
    "userType", "entrypoint", "isSidechain", "promptId", "requestId", "slug", "message", "type",
    "turnPosition", "turnPromptId", "turnOrigin", "rowSource", "sentAtMs", "promptSource", "permissionMode",
    "sourceToolAssistantUUID", "toolUseResult", "isMeta", "isCompactSummary",
})


def view(store: GitCheckpointStore, sha: str, state: Dict[str, Any], *, plain: bool = False) -> Dict[str, Any]:
    """The transcript checkpoint in commit ``sha`` (``state``, its ``state_data``) as people read it
    (see the module docstring); plain data whatever ``plain`` says. Raises
    :class:`~qvc.errors.CorruptionError` when ``entries`` is not a list of objects."""
    entries = state.get(ENTRIES, [])
    if not isinstance(entries, list) or not all(isinstance(e, Mapping) for e in entries):
        raise CorruptionError(f"transcript checkpoint {sha[:12]}: field {ENTRIES!r} is not a list of entries")
    out: Dict[str, Any] = {"session": state.get(KEY)}
    summary = state.get(SUMMARY)
    if isinstance(summary, Mapping):
        title = summary.get("custom_title") or summary.get("ai_title")
        if title:
            out["title"] = title
        if summary.get("tag"):
            out["tag"] = summary["tag"]
    out["messages"], events = conversation(entries)
    if events:
        out["events"] = events
    return out


def conversation(entries: List[Mapping[str, Any]]) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """Transcript lines as ``(messages, events)`` (see the module docstring)."""
    names: Dict[Any, Any] = {}
    messages: List[Dict[str, Any]] = []
    events: List[Dict[str, Any]] = []
    for entry in entries:
        kind = entry.get("type")
        message = entry.get("message")
        if kind == "assistant" and isinstance(message, Mapping):
            messages.append(_assistant(entry, message, names))
        elif kind == "user" and isinstance(message, Mapping):
            messages.extend(_user(entry, message, names))
        elif kind == "system":
            messages.append(_marks({"role": "system", "content": text_of(entry.get("content") or ""),
                                    "id": entry.get("uuid")}, entry))
        else:
            events.append(_event(entry))
    return messages, events


def _assistant(entry: Mapping[str, Any], message: Mapping[str, Any], names: Dict[Any, Any]) -> Dict[str, Any]:
    content = message.get("content")
    blocks = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
    shown, calls, thinking = [], [], []
    for block in blocks:
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind in ("tool_use", "server_tool_use", "mcp_tool_use"):
            names[block.get("id")] = block.get("name")
            args = block.get("input")
            calls.append({"id": block.get("id"), "name": block.get("name"),
                          "args": dict(args) if isinstance(args, Mapping) else {"input": args}})
        elif kind == "thinking":
            thinking.append(block.get("thinking") or "")
        elif kind != "redacted_thinking":
            shown.append(block)
    out: Dict[str, Any] = {"role": "assistant", "content": text_of(shown) if shown else "", "id": entry.get("uuid"),
                           "tool_calls": calls}
    if thinking:
        out["thinking"] = "\n".join(thinking)
    if message.get("model"):
        out["model"] = message["model"]
    return _marks(out, entry)


def _user(entry: Mapping[str, Any], message: Mapping[str, Any], names: Dict[Any, Any]) -> List[Dict[str, Any]]:
    content = message.get("content")
    if not isinstance(content, list):
        return [_marks({"role": "user", "content": text_of(content), "id": entry.get("uuid")}, entry)]
    results = [b for b in content if isinstance(b, Mapping) and b.get("type") == "tool_result"]
    rest = [b for b in content if not (isinstance(b, Mapping) and b.get("type") == "tool_result")]
    out: List[Dict[str, Any]] = []
    uid = entry.get("uuid")
    if rest:
        out.append(_marks({"role": "user", "content": text_of(rest), "id": uid}, entry))
    for i, block in enumerate(results):
        call = block.get("tool_use_id")
        one = {"role": "tool", "content": text_of(block.get("content")),
               "id": uid if len(results) == 1 and not rest else f"{uid}#{i}", "tool_call_id": call}
        if names.get(call):
            one["name"] = names[call]
        if block.get("is_error"):
            one["error"] = True
        out.append(_marks(one, entry))
    return out


def _marks(out: Dict[str, Any], entry: Mapping[str, Any]) -> Dict[str, Any]:
    if entry.get("timestamp"):
        out["time"] = entry["timestamp"]
    for key, name in (("isMeta", "meta"), ("isSidechain", "sidechain"), ("isCompactSummary", "compact_summary")):
        if entry.get(key) is True:
            out[name] = True
    return out


def _event(entry: Mapping[str, Any]) -> Dict[str, Any]:
    out: Dict[str, Any] = {"type": entry.get("type")}
    if entry.get("uuid"):
        out["id"] = entry["uuid"]
    if entry.get("timestamp"):
        out["time"] = entry["timestamp"]
    for key, value in entry.items():
        if key not in BOOKKEEPING and key not in out and value not in (None, "", [], {}):
            out[key] = value
    return out


def text_of(content: Any) -> Any:
    """A message's content: its text blocks joined when it has only text, else as it is."""
    if content is None:
        return ""
    if isinstance(content, list) and content and all(
            isinstance(b, Mapping) and b.get("type") == "text" and isinstance(b.get("text"), str) for b in content):
        return "".join(b["text"] for b in content)
    return content

