"""How readers show CrewAI's checkpoints (:mod:`.layout`); imports no CrewAI, so a repository reads
without it.

- A flow state (``source: crewai-flow``): ``flow`` (its id), ``method`` (the one that had just
  completed), ``pending_feedback`` (``true`` on a pause for human feedback) and ``state``, the
  state's fields as stored.
- A runtime checkpoint (``source: crewai-checkpoint``): ``branch``, ``parent`` (CrewAI's parent
  id), ``trigger`` (the event that wrote it), ``crewai_version``; ``entities``, each flow as its
  ``name``, ``state``, ``completed_methods`` and ``method_outputs``, each crew as its ``name``,
  ``inputs``, ``agents`` (roles) and ``tasks`` (``name``, ``description``, ``agent``, ``output``),
  each agent as its ``role`` and ``goal``; and ``events``, the event record's events in the order
  recorded (``type``, ``time``, and the flow, method, task, agent or tool they name). Models,
  memory, tracing and execution bookkeeping are left out.

Declared in ``pyproject.toml`` as the ``qvc.viewers`` entry points ``source:crewai-flow`` and
``source:crewai-checkpoint``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Mapping

from qvc.errors import CorruptionError

if TYPE_CHECKING:
    from qvc.store.git_store import GitCheckpointStore

#: What an event is shown with besides its type and time, when it has it.
_EVENT_KEYS = ("flow_name", "method_name", "task_name", "agent_role", "tool_name", "error")


def view_flow(store: GitCheckpointStore, sha: str, state: Dict[str, Any], *, plain: bool = False) -> Dict[str, Any]:
    """A flow-state checkpoint as people read it (see the module docstring)."""
    _, meta = store.header(sha)
    out: Dict[str, Any] = {"flow": meta.get("flow_uuid"), "method": meta.get("method")}
    if meta.get("op") == "pending_feedback":
        out["pending_feedback"] = True
    out["state"] = dict(state)
    return out


def view_checkpoint(store: GitCheckpointStore, sha: str, state: Dict[str, Any], *,
                    plain: bool = False) -> Dict[str, Any]:
    """A runtime checkpoint as people read it (see the module docstring). Raises
    :class:`~qvc.errors.CorruptionError` when ``entities`` is not a list."""
    entities = state.get("entities", [])
    if not isinstance(entities, list):
        raise CorruptionError(f"CrewAI checkpoint {sha[:12]}: field 'entities' is not a list")
    out: Dict[str, Any] = {"branch": state.get("branch"), "parent": state.get("parent_id"),
                           "trigger": state.get("trigger"), "crewai_version": state.get("crewai_version"),
                           "entities": [_entity(e) for e in entities if isinstance(e, Mapping)]}
    record = state.get("event_record")
    nodes = record.get("nodes") if isinstance(record, Mapping) else None
    if isinstance(nodes, Mapping):
        out["events"] = [_event(n["event"]) for n in nodes.values()
                         if isinstance(n, Mapping) and isinstance(n.get("event"), Mapping)]
    return out


def _entity(entity: Mapping[str, Any]) -> Dict[str, Any]:
    kind = entity.get("entity_type")
    if kind == "flow":
        out: Dict[str, Any] = {"type": "flow", "name": entity.get("name"), "state": entity.get("checkpoint_state")}
        out["completed_methods"] = sorted(entity.get("checkpoint_completed_methods") or [])
        out["method_outputs"] = entity.get("checkpoint_method_outputs") or []
        return out
    if kind == "crew":
        return {"type": "crew", "name": entity.get("name"), "inputs": entity.get("checkpoint_inputs"),
                "agents": [a.get("role") for a in entity.get("agents") or [] if isinstance(a, Mapping)],
                "tasks": [_task(t) for t in entity.get("tasks") or [] if isinstance(t, Mapping)]}
    if kind == "agent":
        return {"type": "agent", "role": entity.get("role"), "goal": entity.get("goal")}
    return {"type": kind}


def _task(task: Mapping[str, Any]) -> Dict[str, Any]:
    output = task.get("output")
    agent = task.get("agent")
    return {"name": task.get("name"), "description": task.get("description"),
            "agent": agent.get("role") if isinstance(agent, Mapping) else agent,
            "output": output.get("raw") if isinstance(output, Mapping) else output}


def _event(event: Mapping[str, Any]) -> Dict[str, Any]:
    out: Dict[str, Any] = {"type": event.get("type"), "time": event.get("timestamp")}
    for key in _EVENT_KEYS:
        if event.get(key) not in (None, ""):
            out[key] = event[key]
    return out

