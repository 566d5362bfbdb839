"""How readers show what :class:`~qvc.integrations.google_adk.QvcSessionService` and
:class:`~qvc.integrations.google_adk.QvcArtifactService` store.

Declared in ``pyproject.toml`` as the ``qvc.viewers`` entry point ``google_adk`` (the header key
every checkpoint of the adapter carries), so ``qvc show``, ``qvc diff``, ``qvc log -p``, ``qvc
blame`` and ``qvc serve`` find it without naming ADK. A session checkpoint is shown as

- ``messages``: the session's events up to this checkpoint (its first-parent line: a forked
  session shows its source's events too) in the shared conversation shape: a user's text as
  ``user``, the model's text and function calls as ``assistant`` with ``tool_calls`` (``{"id",
  "name", "args"}``), each function response as a ``tool`` message (``tool_call_id``, ``name``,
  ``error`` when the response holds an ``error``; ``result``: the response itself when its text is
  not all of it), ``time`` from the event's timestamp, then ADK's
  ``author``, ``invocation_id`` and the event's non-empty ``state_delta`` / ``artifact_delta``;
  events without content (a rewind, an agent's end) are left out;
- ``state``: the session-scope state after it.

App and user state checkpoints show their ``state``; artifact versions their ``part``. Imports
:mod:`.layout` only (no ADK), so a repository reads the same where ADK is not installed.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Mapping

from qvc.integrations.google_adk import layout
from qvc.store.git_store import GitCheckpointStore


def view(store: GitCheckpointStore, sha: str, state: dict[str, Any], *, plain: bool = False) -> dict[str, Any]:
    """The checkpoint in commit ``sha`` (``state``: its stored fields) as people read it (see the
    module docstring); plain data whatever ``plain`` says."""
    kind = store.header(sha)[0].get(layout.HEADER_KEY)
    if kind != "session":
        return {k: v for k, v in state.items()}
    messages: list[dict[str, Any]] = []
    for event in layout.stored_events(store, sha):
        messages.extend(event_messages(event))
    return {"messages": messages, "state": state.get("state", {})}


def event_messages(event: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One stored ADK event (its JSON form, parsed) as messages in the shared conversation shape."""
    content = event.get("content") or {}
    parts = [p for p in content.get("parts") or () if isinstance(p, Mapping)]
    if not parts:
        return []
    extra: dict[str, Any] = {"author": event.get("author")}
    if event.get("invocation_id"):
        extra["invocation_id"] = event["invocation_id"]
    actions = event.get("actions") or {}
    for key in ("state_delta", "artifact_delta"):
        if actions.get(key):
            extra[key] = actions[key]
    when = event.get("timestamp")
    time = datetime.fromtimestamp(when, timezone.utc).isoformat() if isinstance(when, (int, float)) else None
    eid = event.get("id")
    texts = [p["text"] for p in parts if isinstance(p.get("text"), str) and not p.get("thought")]
    calls = [p["function_call"] for p in parts if isinstance(p.get("function_call"), Mapping)]
    responses = [p["function_response"] for p in parts if isinstance(p.get("function_response"), Mapping)]
    others = [p for p in parts if not ({"text", "function_call", "function_response"} & set(p))]
    out: list[dict[str, Any]] = []
    if texts or calls or others:
        role = "user" if content.get("role") == "user" and not calls else "assistant"
        body: Any = "".join(texts) if not others else [*({"text": t} for t in texts), *others]
        message: dict[str, Any] = {"role": role, "content": body, "id": eid}
        if role == "assistant":
            message["tool_calls"] = [{"id": c.get("id"), "name": c.get("name"), "args": c.get("args") or {}}
                                     for c in calls]
        out.append(message)
    for i, r in enumerate(responses):
        response = r.get("response")
        plain = isinstance(response, Mapping) and len(response) == 1 and isinstance(response.get("result"), str)
        text = response["result"] if plain else json.dumps(response, ensure_ascii=False, default=str)
        message = {"role": "tool", "content": text, "id": eid if len(responses) == 1 else f"{eid}#{i}",
                   "tool_call_id": r.get("id"), "name": r.get("name")}
        if isinstance(response, Mapping) and response.get("error"):
            message["error"] = True
        if not plain:
            message["result"] = response  # the response as ADK stores it: its text is not all of it
        out.append(message)
    for message in out:
        if time is not None:
            message["time"] = time
        message.update(extra)
    return out
