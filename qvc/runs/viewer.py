"""How readers show a run checkpoint: the run as a conversation, without its storage bookkeeping.

A run checkpoint (:mod:`qvc.runs`, and agno's runs, which :class:`~qvc.integrations.agno.QvcDb`
writes in the same format) stores its conversation as segments (``log.<n>``, ``sealed.<n>``) and
keeps bookkeeping beside it (the ``owner`` lease and its heartbeats, ``takeovers``). Readers
(``qvc show``, ``qvc diff``, ``qvc log -p``, ``qvc blame``, ``qvc serve``) show instead:

- ``messages``: the segments reassembled, each message in the shared conversation shape (``role``,
  ``content``, ``id``, ``tool_calls`` as ``{"id", "name", "args"}``, ``tool_call_id``, ``name`` and
  ``error`` of a tool result, ``time`` as ISO 8601), then the other keys the writer kept; a tool
  result whose stored result is not its message's text carries it as ``result``;
- ``status``, ``content``, ``error``, ``metrics``, ``session_state``;
- ``run``: who and what the run is (ids, input, lineage), without empty entries;
- ``requirements`` and ``regenerated_by`` when set, and agno's own run fields as ``agno``.

Recognised by the metadata every run checkpoint carries (``"source": "run"``): declared in
``pyproject.toml`` as the ``qvc.viewers`` entry point ``source:run`` (:mod:`qvc.store.viewers`).
``--raw`` readers skip viewers and show the stored fields. Imports :mod:`qvc.runs.codec`.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Dict, Mapping

from qvc.errors import CorruptionError, InvalidInputError
from qvc.runs.codec import segments_of

if TYPE_CHECKING:
    from qvc.store.git_store import GitCheckpointStore

#: The registry key this viewer is declared under: the metadata ``source`` of run checkpoints.
KEY = "source:run"

# Stored run fields shown as they are, in this order.
_SHOWN = ("status", "content", "error", "metrics", "session_state")
# Identity entries that are storage, not the run: how it checkpoints, how regenerations replace.
_IDENTITY_HIDDEN = {"cadence", "replace_original"}
# Message keys the shared shape shows under its own names, or that are a writer's bookkeeping.
_MESSAGE_SHAPED = {"role", "content", "id", "tool_calls", "tool_call_id", "tool_name", "tool_call_error",
                   "created_at", "agno_tool_calls", "agno_no_role", "agno_no_tool_call_id"}
# agno's run fields that are the adapter's bookkeeping.
_AGNO_HIDDEN = {"last_checkpoint_at_message_index"}


def view(store: GitCheckpointStore, sha: str, state: Dict[str, Any], *, plain: bool = False) -> Dict[str, Any]:
    """The run checkpoint in commit ``sha`` (``state``, its ``state_data``) as people read it (see the
    module docstring); plain data whatever ``plain`` says. A checkpoint whose metadata says
    ``"source": "run"`` but holds no run is shown as stored. Raises
    :class:`~qvc.errors.CorruptionError` when a segment does not decode."""
    ident = state.get("run")
    if not isinstance(ident, Mapping) or "run_id" not in ident:
        return state
    try:
        segments = segments_of(state, f"run checkpoint {sha[:12]}")
    except InvalidInputError as exc:
        raise CorruptionError(str(exc)) from None
    results = {t.get("tool_call_id"): t for s in segments for t in s.tools}
    out: Dict[str, Any] = {"run": _identity(ident)}
    out.update((name, state.get(name)) for name in _SHOWN)
    out["messages"] = [message_dict(m, results) for s in segments for m in s.messages]
    if state.get("requirements"):
        out["requirements"] = state["requirements"]
    if state.get("regenerated_by"):
        out["regenerated_by"] = state["regenerated_by"]
    agno = state.get("agno")
    if isinstance(agno, Mapping) and isinstance(agno.get("run"), Mapping):
        out["agno"] = {k: v for k, v in agno["run"].items() if k not in _AGNO_HIDDEN}
    return out


#: The run's storage records among the fields :func:`view` shows: who the run is (``run``) and
#: agno's copy of its run (``agno``). People's views show the run above its conversation and leave
#: these out of the state and diffs (:func:`qvc.store.viewers.records_of`); the JSON forms keep them.
view.records = ("run", "agno")  # type: ignore[attr-defined]
#: Metadata that is bookkeeping: a takeover checkpoint's record of the previous and new owner
#: (their lease tokens included), shown only raw (:func:`qvc.store.viewers.bookkeeping_of`).
view.hidden_metadata = ("takeover",)  # type: ignore[attr-defined]

#: A run's fields that are bookkeeping, in :meth:`~qvc.runs.Run.to_dict`: the owner lease (its token
#: included) and the takeovers. The conversation views (``qvc show RUN@N``, ``qvc serve``'s runs)
#: leave them out (:func:`shown_run`); ``--raw`` shows the stored checkpoint with them.
BOOKKEEPING = ("owner", "takeovers")


def shown_run(data: Mapping[str, Any]) -> Dict[str, Any]:
    """A run's ``to_dict()`` (or a snapshot's, whose ``"run"`` is one) without its
    :data:`BOOKKEEPING`: the run as people and the conversation views' JSON see it."""
    out = {k: v for k, v in data.items() if k not in BOOKKEEPING}
    if isinstance(out.get("run"), Mapping):
        out["run"] = {k: v for k, v in out["run"].items() if k not in BOOKKEEPING}
    return out


def run_fields(run: Any) -> Dict[str, Any]:
    """The fields of a :class:`~qvc.runs.Run` (a snapshot's, or a run's latest) as :func:`view`
    shows a run checkpoint's: ``run``, ``status``, ``content``, ``error``, ``metrics``,
    ``session_state``, ``messages`` (the shared conversation shape), and ``requirements`` and
    ``regenerated_by`` when set; what ``qvc show RUN@N --field NAME`` picks from."""
    results = {t.tool_call_id: t.to_dict() for t in run.tools}
    out: Dict[str, Any] = {"run": _identity(run.identity()), "status": run.status.value, "content": run.content,
                           "error": run.error, "metrics": run.metrics, "session_state": run.session_state,
                           "messages": [message_dict(m.to_dict(), results) for m in run.messages]}
    if run.requirements:
        out["requirements"] = [r.to_dict() for r in run.requirements]
    if run.regenerated_by:
        out["regenerated_by"] = run.regenerated_by
    return out


def message_dict(stored: Mapping[str, Any], results: Mapping[Any, Mapping[str, Any]]) -> Dict[str, Any]:
    """A stored run message in the shared conversation shape; ``results``: the run's tool
    executions by tool call id (a tool result's stored result, when it is not the message's text)."""
    role = stored.get("role")
    content = stored.get("content")
    out: Dict[str, Any] = {"role": role, "content": "" if content is None else content, "id": stored.get("id")}
    if role == "assistant":
        out["tool_calls"] = [{"id": c.get("id"), "name": c.get("name"), "args": c.get("arguments") or {}}
                             for c in stored.get("tool_calls") or () if isinstance(c, Mapping)]
    if stored.get("tool_call_id") is not None:
        out["tool_call_id"] = stored["tool_call_id"]
    if stored.get("tool_name"):
        out["name"] = stored["tool_name"]
    if stored.get("tool_call_error"):
        out["error"] = True
    when = stored.get("created_at")
    if isinstance(when, (int, float)) and not isinstance(when, bool):
        out["time"] = datetime.fromtimestamp(when, timezone.utc).isoformat()
    if role == "tool":
        execution = results.get(stored.get("tool_call_id"))
        if execution is not None and execution.get("result") is not None and execution.get("result") != content:
            out["result"] = execution["result"]
    for key, value in stored.items():  # what else the writer kept, when it says something
        if key not in _MESSAGE_SHAPED and value not in (None, False, "", {}, []):
            out[key] = value
    return out


def _identity(ident: Mapping[str, Any]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in ident.items():
        if key in _IDENTITY_HIDDEN or value in (None, "", {}, []):
            continue
        if key == "created_at" and isinstance(value, (int, float)):
            value = datetime.fromtimestamp(value, timezone.utc).isoformat()
        out[key] = value
    return out

