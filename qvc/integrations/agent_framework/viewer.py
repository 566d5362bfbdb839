"""How readers show a workflow checkpoint of :class:`~qvc.integrations.agent_framework.QvcCheckpointStorage`.

A checkpoint's fields (:mod:`.layout`) are shown as a superstep of the workflow (``qvc show``,
``qvc diff``, ``qvc log -p``, ``qvc blame``, ``qvc serve``):

- ``workflow``: its name; ``iteration``: the superstep count; ``time``: the framework's timestamp;
- ``messages``: the messages in flight, one dict each, ``{"from", "to", "data"}`` (and ``"type":
  "response"`` for a response to a request);
- ``state``: the shared state; the framework's own keys (``_workflow_run_kwargs``, ...) only when
  they hold something;
- ``executors``: each executor's saved state; ``edges``: partly filled fan-in buffers, if any;
- ``pending_requests``: the requests awaiting a response, ``{"id", "from", "data", "request_type",
  "response_type"}``;
- ``metadata``: the checkpoint's own, when it has any;
- ``previous_checkpoint_id``: only when it is not the commit's parent (a run that started afresh on a
  workflow's thread names none; a deleted previous checkpoint).

A value only pickle keeps is shown as ``{"pickled": "module:qualname", "bytes": N}``: the viewer
never unpickles. The graph signature is left out (bookkeeping; ``--raw`` shows every field as stored).

Recognised by the metadata every workflow checkpoint carries (``"source": "agent-framework"``):
declared in ``pyproject.toml`` as the ``qvc.viewers`` entry point ``source:agent-framework``.
Imports no framework (only :mod:`.layout`), so a repository reads without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Mapping

from qvc.integrations.agent_framework.layout import (
    BOOKKEEPING,
    EDGE_STATE,
    EXECUTOR_STATES,
    ITERATION,
    MESSAGES,
    METADATA,
    PENDING,
    PICKLED,
    RAW,
    RAW_STATE,
    STATE,
    TYPE,
    is_envelope,
)

if TYPE_CHECKING:
    from qvc.store.git_store import GitCheckpointStore

#: The registry key this viewer is declared under: the metadata ``source`` of workflow checkpoints.
VIEWER_KEY = "source:agent-framework"


def view(store: GitCheckpointStore, sha: str, state: Dict[str, Any], *, plain: bool = False) -> Dict[str, Any]:
    """The workflow checkpoint in commit ``sha`` (``state``, its ``state_data``) as people read it (see
    the module docstring); plain data whatever ``plain`` says."""
    book = state.get(BOOKKEEPING) if isinstance(state.get(BOOKKEEPING), Mapping) else {}
    out: Dict[str, Any] = {"workflow": book.get("workflow_name"), "iteration": shown(state.get(ITERATION)),
                           "time": shown(book.get("timestamp"))}
    if MESSAGES in state:
        out["messages"] = messages(state[MESSAGES])
    if RAW_STATE not in state:
        out["state"] = {name[len(STATE):]: shown(v) for name, v in state.items()
                        if name.startswith(STATE) and not (name[len(STATE):].startswith("_") and v in ({}, [], None))}
    if EXECUTOR_STATES in state:
        out["executors"] = shown(state[EXECUTOR_STATES])
    if EDGE_STATE in state:
        out["edges"] = shown(state[EDGE_STATE])
    if PENDING in state:
        out["pending_requests"] = requests(state[PENDING])
    for name, value in state.items():
        if name.startswith(RAW):
            out[name[len(RAW):]] = shown(value)
    if state.get(METADATA) not in (None, {}):
        out["metadata"] = shown(state[METADATA])
    prev = book.get("previous_checkpoint_id")
    parent = store.commit_info(sha).parent
    if prev != (store.commit_info(parent).checkpoint_id if parent else None):
        out["previous_checkpoint_id"] = prev
    return out


def shown(value: Any) -> Any:
    """A stored value as plain data: envelopes as ``{"pickled": type, "bytes": size}``."""
    if isinstance(value, dict):
        if is_envelope(value):
            data = value[PICKLED]
            return {"pickled": value[TYPE], "bytes": len(data) if isinstance(data, bytes) else len(data) * 3 // 4}
        return {k: shown(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shown(v) for v in value]
    if isinstance(value, tuple):
        return tuple(shown(v) for v in value)
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    return value


def messages(value: Any) -> List[Any]:
    """The ``messages`` field as one dict per message in flight, in order."""
    if not isinstance(value, Mapping):
        return [shown(value)]
    out: List[Any] = []
    for source, items in value.items():
        for item in items if isinstance(items, list) else [items]:
            message = item.get("message") if isinstance(item, Mapping) else None
            if isinstance(message, Mapping):
                one = {"from": message.get("source_id", source), "to": message.get("target_id"),
                       "data": shown(message.get("data"))}
                if message.get("type") not in (None, "standard"):
                    one["type"] = message["type"]
                if message.get("original_request_info_event") is not None:
                    one["request"] = shown(message["original_request_info_event"])
                out.append(one)
            else:
                out.append({"from": source, "data": shown(item.get("value") if isinstance(item, Mapping) else item)})
    return out


def requests(value: Any) -> List[Any]:
    """The ``pending_requests`` field as one dict per pending request."""
    if not isinstance(value, Mapping):
        return [shown(value)]
    out: List[Any] = []
    for rid, item in value.items():
        event = item.get("event") if isinstance(item, Mapping) else None
        if isinstance(event, Mapping):
            one: Dict[str, Any] = {"id": event.get("_request_id", rid), "from": event.get("_source_executor_id"),
                                   "data": shown(event.get("data"))}
            about = item.get("about")
            if isinstance(about, Mapping):
                one.update({k: v for k, v in about.items() if k in ("request_type", "response_type")})
            if event.get("type") not in (None, "request_info"):
                one["type"] = event["type"]
            out.append(one)
        else:
            out.append({"id": rid, "data": shown(item.get("value") if isinstance(item, Mapping) else item)})
    return out
