"""How readers show a checkpoint of :class:`~qvc.integrations.strands.QvcStorage` or
:class:`~qvc.integrations.strands.QvcSessionManager`.

The checkpoints store what Strands writes (:mod:`.layout`). Readers (``qvc show``, ``qvc diff``,
``qvc log -p``, ``qvc blame``, ``qvc serve``) show instead:

- an agent's snapshot: ``scope``; ``messages`` in the shared conversation shape (below);
  ``system_prompt``, ``state`` (the agent's ``AgentState``), ``conversation_manager_state``,
  ``interrupt_state``, ``model_state`` and any other key of the snapshot's ``data`` as stored;
  ``app_data`` when set. The envelope's ``created_at`` and ``schema_version`` are bookkeeping and
  left out. A Graph's or Swarm's snapshot (``multiAgent``) shows its ``data`` keys as stored.
- a SessionRepository agent: ``agent`` (its id), ``messages`` (each ``SessionMessage`` as the
  message it stands for: its redaction when it has one, ``redacted`` then; ``time``: its
  ``created_at``; ``id``: its ``tracking_id``, else its ``message_id``), ``state``,
  ``conversation_manager_state``, ``internal_state``; a session or a Graph's state as stored.
- any other stored value: its JSON (``value``), text or bytes.

Messages: a user message's text as ``user``; its ``toolResult`` blocks as ``tool`` messages
answering ``tool_call_id`` (named after their call, ``error`` when their status is ``error``;
``<id>#<n>`` as ids when a message holds several); an assistant message's text, its ``toolUse``
blocks as ``tool_calls`` (``{"id", "name", "args"}``), its reasoning as ``thinking`` and the
model's ``usage`` (from the message's ``metadata``). Content other than text (images, documents,
citations) stays as Strands stores it (bytes as its base64 form).

Recognised by the metadata every checkpoint carries (``"source": "strands"``): declared in
``pyproject.toml`` as the ``qvc.viewers`` entry point ``source:strands``. Imports no Strands
(only :mod:`.layout` and :mod:`qvc.errors`), so a repository reads without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional

from qvc.errors import CorruptionError
from qvc.integrations.strands.layout import BYTES, ENVELOPE, TEXT, VALUE

if TYPE_CHECKING:
    from qvc.store.git_store import GitCheckpointStore

#: The registry key this viewer is declared under: the metadata ``source`` of every checkpoint.
VIEWER_KEY = "source:strands"
#: The envelope's keys that only say when and in what format a snapshot was written.
BOOKKEEPING = frozenset({"created_at", "schema_version", "data"})
#: The order an agent snapshot's fields are shown in (others follow, as stored).
AGENT_ORDER = ("system_prompt", "messages", "state", "conversation_manager_state", "interrupt_state", "model_state")


def view(store: GitCheckpointStore, sha: str, state: Dict[str, Any], *, plain: bool = False) -> Dict[str, Any]:
    """The checkpoint in commit ``sha`` (``state``, its ``state_data``) as people read it (see the
    module docstring); plain data whatever ``plain`` says. Raises
    :class:`~qvc.errors.CorruptionError` when its messages are not a list of messages."""
    if ENVELOPE in state:
        return _snapshot(sha, state)
    if isinstance(state.get("agent"), Mapping) and "messages" in state:
        out: Dict[str, Any] = {"agent": state["agent"].get("agent_id"),
                               "messages": _repository_messages(sha, state["messages"])}
        for name in ("state", "conversation_manager_state", "internal_state"):
            if name in state:
                out[name] = state[name]
        return out
    return {k: v for k, v in state.items() if k in (VALUE, TEXT, BYTES, "session", "state")} or dict(state)


def _snapshot(sha: str, state: Dict[str, Any]) -> Dict[str, Any]:
    envelope = state[ENVELOPE] if isinstance(state[ENVELOPE], Mapping) else {}
    out: Dict[str, Any] = {"scope": envelope.get("scope")}
    data = {k: v for k, v in state.items() if k != ENVELOPE}
    if envelope.get("scope") == "agent":
        conversation = data.get("conversation_manager_state")
        base = conversation.get("removed_message_count") if isinstance(conversation, Mapping) else 0
        for name in AGENT_ORDER:
            if name in data:
                value = data.pop(name)
                if name == "messages":
                    value = messages(sha, value, base if isinstance(base, int) else 0)
                elif name == "system_prompt" and isinstance(value, list):
                    value = text_of(value)  # Strands keeps it as content blocks
                out[name] = value
    out.update(data)
    for key, value in envelope.items():
        if key not in BOOKKEEPING and key != "scope" and value not in (None, {}, []):
            out[key] = value
    return out


def _repository_messages(sha: str, entries: Any) -> List[Dict[str, Any]]:
    if not isinstance(entries, list) or not all(isinstance(e, Mapping) for e in entries):
        raise CorruptionError(f"checkpoint {sha[:12]}: field 'messages' is not a list of session messages")
    shown = [e.get("redact_message") or e.get("message") or {} for e in entries]
    out = conversation(shown, [str(e.get("message_id")) for e in entries])
    by_id = {str(e.get("message_id")): e for e in entries}
    for m in out:
        entry = by_id.get(m.pop("_entry"))
        if entry is None:
            continue
        if entry.get("redact_message"):
            m["redacted"] = True
        if entry.get("created_at"):
            m["time"] = entry["created_at"]
    return out


def messages(sha: str, value: Any, base: int = 0) -> List[Dict[str, Any]]:
    """A snapshot's ``messages`` in the conversation shape (``base``: how many the conversation
    manager removed before the first, so a message without a tracking id keeps its number)."""
    if not isinstance(value, list) or not all(isinstance(m, Mapping) for m in value):
        raise CorruptionError(f"checkpoint {sha[:12]}: field 'messages' is not a list of messages")
    out = conversation(value, [str(base + i) for i in range(len(value))])
    for m in out:
        m.pop("_entry")
    return out


def conversation(messages: List[Mapping[str, Any]], numbers: List[str]) -> List[Dict[str, Any]]:
    """Strands messages as conversation-shape dicts (each with ``_entry``: its number in ``numbers``,
    for the caller to use and drop)."""
    names: Dict[Any, Any] = {}
    out: List[Dict[str, Any]] = []
    for message, number in zip(messages, numbers, strict=True):
        blocks = message.get("content")
        blocks = blocks if isinstance(blocks, list) else [{"text": blocks}] if isinstance(blocks, str) else []
        mid = message.get("tracking_id") or number
        made = [_assistant(message, blocks, mid, names)] if message.get("role") == "assistant" else \
            _user(message, blocks, mid, names)
        for m in made:
            m["_entry"] = number
        out += made
    return out


def _assistant(message: Mapping[str, Any], blocks: List[Any], mid: str, names: Dict[Any, Any]) -> Dict[str, Any]:
    shown, calls, thinking = [], [], []
    for block in blocks:
        if not isinstance(block, Mapping):
            shown.append(block)
        elif isinstance(block.get("toolUse"), Mapping):
            use = block["toolUse"]
            names[use.get("toolUseId")] = use.get("name")
            args = use.get("input")
            calls.append({"id": use.get("toolUseId"), "name": use.get("name"),
                          "args": dict(args) if isinstance(args, Mapping) else {"input": args}})
        elif isinstance(block.get("reasoningContent"), Mapping):
            text = (block["reasoningContent"].get("reasoningText") or {}).get("text")
            if text:
                thinking.append(text)
        else:
            shown.append(block)
    out: Dict[str, Any] = {"role": "assistant", "content": text_of(shown), "id": mid, "tool_calls": calls}
    if thinking:
        out["thinking"] = "\n".join(thinking)
    usage = (message.get("metadata") or {}).get("usage") if isinstance(message.get("metadata"), Mapping) else None
    if usage:
        out["usage"] = usage
    return out


def _user(message: Mapping[str, Any], blocks: List[Any], mid: str, names: Dict[Any, Any]) -> List[Dict[str, Any]]:
    results = [b["toolResult"] for b in blocks if isinstance(b, Mapping) and isinstance(b.get("toolResult"), Mapping)]
    rest = [b for b in blocks if not (isinstance(b, Mapping) and isinstance(b.get("toolResult"), Mapping))]
    role = message.get("role") if message.get("role") in ("user", "system") else "user"
    out: List[Dict[str, Any]] = []
    if rest or not results:
        out.append({"role": role, "content": text_of(rest), "id": mid})
    for i, result in enumerate(results):
        call = result.get("toolUseId")
        one: Dict[str, Any] = {"role": "tool", "content": _result_content(result.get("content")),
                               "id": mid if len(results) == 1 and not rest else f"{mid}#{i}", "tool_call_id": call}
        if names.get(call):
            one["name"] = names[call]
        if result.get("status") == "error":
            one["error"] = True
        out.append(one)
    return out


def _result_content(content: Any) -> Any:
    if isinstance(content, list) and len(content) == 1 and isinstance(content[0], Mapping) and "json" in content[0]:
        return content[0]["json"]
    return text_of(content if isinstance(content, list) else [] if content is None else [{"text": content}])


def text_of(blocks: List[Any]) -> Optional[Any]:
    """Content blocks as a message's content: their text joined when they are all text, else as they are."""
    if all(isinstance(b, Mapping) and set(b) == {"text"} and isinstance(b["text"], str) for b in blocks):
        return "".join(b["text"] for b in blocks)
    return list(blocks)
