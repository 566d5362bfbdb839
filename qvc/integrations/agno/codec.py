"""agno rows as qvc checkpoint state: a ``RunOutput`` as a :mod:`qvc.runs` run checkpoint, a session row
as one field per column, and both back.

**Runs.** An agno run is stored in the format :mod:`qvc.runs` uses (so ``qvc runs``, ``qvc
timeline``, ``qvc show`` and ``qvc serve`` read it as any run): the conversation as segments
(``log.<n>``: the messages and tool executions that checkpoint added; earlier ones are the
parent's blobs), and ``run``, ``status``, ``content``, ``session_state`` and ``metrics`` as their
own fields. Each agno message is kept whole in its segment, with its tool calls also in the
``{id, name, arguments}`` form qvc reads (agno's own form is kept beside it, under
``agno_tool_calls``). Everything else of the ``RunOutput`` dict goes to one more field, ``agno``,
together with the order of ``run.tools`` (agno replaces that list when a run resumes, so the
segments hold every execution and ``agno.tool_order`` the list agno last wrote).

**Values** are what agno's SQL databases store: the row's dicts passed through agno's JSON
encoder (:func:`normalize`), so a row read back equals what ``SqliteDb`` returns, field by field.

Imports :mod:`qvc.runs` and agno.
"""

from __future__ import annotations

import json
import time
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from agno.db.utils import json_serializer

from qvc.runs.codec import segments_of
from qvc.runs.segments import Segment, layout
from qvc.types import CheckpointTuple

#: The ``RunOutput`` keys stored outside the ``agno`` field.
PULLED = ("messages", "tools", "content", "session_state", "metrics", "status")
#: Row columns of an agno session, each stored as its own field of the session's checkpoints.
SESSION_COLUMNS = ("session_id", "session_type", "agent_id", "team_id", "workflow_id", "user_id", "agent_data",
                   "team_data", "workflow_data", "session_data", "metadata", "summary", "created_at", "updated_at")
#: The columns a session listing filters and sorts on; kept in the checkpoint's metadata too.
SUMMARY_COLUMNS = ("session_type", "agent_id", "team_id", "workflow_id", "user_id", "created_at", "updated_at")


def normalize(value: Any) -> Any:
    """``value`` as agno's SQL databases store it: through agno's JSON encoder and back."""
    return json.loads(json_serializer(value))


# -- messages -----------------------------------------------------------------------------


def _arguments(raw: Any) -> Dict[str, Any]:
    if isinstance(raw, Mapping):
        return dict(raw)
    try:
        parsed = json.loads(raw) if isinstance(raw, str) and raw else {}
    except ValueError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {"arguments": raw}


def stored_message(message: Mapping[str, Any]) -> Dict[str, Any]:
    """An agno message dict as its segment keeps it: whole, tool calls also in qvc's form."""
    out = dict(message)
    calls = out.get("tool_calls")
    if calls:
        out["agno_tool_calls"] = calls
        qvc_calls = []
        for n, call in enumerate(calls):
            fn = call.get("function") if isinstance(call, Mapping) else None
            fn = fn if isinstance(fn, Mapping) else {}
            qvc_calls.append({"id": str(call.get("id") or f"call_{n}") if isinstance(call, Mapping) else f"call_{n}",
                              "name": str(fn.get("name") or (call.get("name") if isinstance(call, Mapping) else "")
                                          or "tool"),
                              "arguments": _arguments(fn.get("arguments"))})
        out["tool_calls"] = qvc_calls
    if not isinstance(out.get("role"), str) or not out.get("role"):
        out["role"] = "unknown"
        out["agno_no_role"] = message.get("role")
    if out["role"] == "tool" and not out.get("tool_call_id"):
        out["tool_call_id"] = "unknown"
        out["agno_no_tool_call_id"] = True
    return out


def agno_message(stored: Mapping[str, Any]) -> Dict[str, Any]:
    """The agno message dict a segment message holds (the inverse of :func:`stored_message`)."""
    out = dict(stored)
    if "agno_tool_calls" in out:
        out["tool_calls"] = out.pop("agno_tool_calls")
    if "agno_no_role" in out:
        role = out.pop("agno_no_role")
        if role is None:
            out.pop("role")
        else:
            out["role"] = role
    if out.pop("agno_no_tool_call_id", False):
        out.pop("tool_call_id", None)
    return out


# -- runs ---------------------------------------------------------------------------------


def segment_messages(segments: Sequence[Segment]) -> List[Dict[str, Any]]:
    """Every stored message of ``segments``, in order."""
    return [m for s in segments for m in s.messages]


def tool_pool(segments: Iterable[Segment]) -> Dict[str, Dict[str, Any]]:
    """The latest stored version of each tool execution, by tool_call_id."""
    pool: Dict[str, Dict[str, Any]] = {}
    for seg in segments:
        for t in seg.tools:
            pool[t.get("tool_call_id")] = t
    return pool


def common_prefix(old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]) -> int:
    """How many leading messages ``old`` and ``new`` share (equal as stored)."""
    n = 0
    for a, b in zip(old, new, strict=False):
        if a != b:
            break
        n += 1
    return n


def next_segments(base: Sequence[Segment], messages: Sequence[Dict[str, Any]],
                  tools: Sequence[Dict[str, Any]]) -> Tuple[List[Segment], List[Any]]:
    """``(segments, tool_order)`` for a run whose messages and tools are ``messages`` / ``tools`` (agno
    dicts, normalized), continuing ``base`` (segments holding a prefix of ``messages``).

    The new segment holds the messages after that prefix and each tool execution that is new or
    changed; ``tool_order`` names ``tools`` by tool_call_id (one without an id is kept inline).
    """
    segments = list(base)
    kept = sum(len(s.messages) for s in segments)
    pool = tool_pool(segments)
    fresh: List[Dict[str, Any]] = []
    order: List[Any] = []
    for t in tools:
        call_id = t.get("tool_call_id") if isinstance(t, Mapping) else None
        if not isinstance(call_id, str):
            order.append({"inline": t})
            continue
        order.append(call_id)
        if pool.get(call_id) != t:
            fresh.append(t)
            pool[call_id] = t
    new_messages = [stored_message(m) for m in messages[kept:]]
    if new_messages or fresh:
        segments.append(Segment(new_messages, fresh))
    return segments, order


def run_state(run: Dict[str, Any], segments: Sequence[Segment], tool_order: List[Any], *, run_type: str,
              run_index: Optional[int], user_id: Optional[str], session_id: str) -> Dict[str, Any]:
    """The checkpoint state of the normalized agno run dict ``run`` (the format of :mod:`qvc.runs`)."""
    rest = {k: v for k, v in run.items() if k not in PULLED}
    meta = {"run_type": run_type, "run_index": run_index, "user_id": user_id, "tool_order": tool_order,
            "present": [k for k in PULLED if k in run]}
    status = run.get("status") or "RUNNING"
    input_ = run.get("input")
    identity = {
        "run_id": run["run_id"], "session_id": session_id, "agent_id": run.get("agent_id") or run.get("team_id")
        or run.get("workflow_id"), "user_id": user_id, "input": input_.get("input_content")
        if isinstance(input_, Mapping) else input_, "cadence": "tool-batch", "created_at": run.get("created_at"),
        "forked_from_run_id": run.get("forked_from_run_id"),
        "forked_from_message_index": run.get("forked_from_message_index"),
        "forked_from_session_id": run.get("forked_from_session_id"), "regenerated_from": run.get("regenerated_from"),
        "replace_original": True, "metadata": {"framework": "agno", "run_type": run_type},
        "initial_session_state": {},
    }
    state: Dict[str, Any] = {
        "run": identity, "status": status, "content": run.get("content"),
        "session_state": run.get("session_state") or {}, "metrics": run.get("metrics") or {},
        "requirements": [], "owner": None, "error": None, "takeovers": [], "regenerated_by": None,
        "agno": {"row": meta, "run": rest},
    }
    if status == "ERROR":
        state["error"] = {"type": "agno", "message": str(run.get("content") or "")}
    state.update(layout(segments))
    return state


def run_metadata(run: Dict[str, Any], session_id: str, reason: str) -> Dict[str, Any]:
    """The checkpoint metadata :mod:`qvc.runs` reads for a timeline entry."""
    messages = run.get("messages") or []
    last = messages[-1] if messages else None
    preview = ""
    if last is not None:
        content = last.get("content")
        if content is None and last.get("tool_calls"):
            content = "; ".join(str((c.get("function") or {}).get("name")) for c in last["tool_calls"]
                                if isinstance(c, Mapping))
        preview = " ".join(str(content if content is not None else "").split())[:120]
    return {"source": "run", "run_id": run["run_id"], "session_id": session_id,
            "status": run.get("status") or "RUNNING", "reason": reason, "message_index": len(messages),
            "time": time.time(), "role": last.get("role") if last else None, "preview": preview, "framework": "agno"}


def agno_run(tup: CheckpointTuple) -> Optional[Tuple[Dict[str, Any], Dict[str, Any]]]:
    """``(run dict, row info)`` of an agno run checkpoint, or ``None`` for a run qvc.runs recorded itself."""
    state = tup.checkpoint.state_data
    extra = state.get("agno")
    if not isinstance(extra, Mapping):
        return None
    segments = segments_of(state, f"run checkpoint {tup.checkpoint.id}")
    row = dict(extra.get("row") or {})
    run = dict(extra.get("run") or {})
    present = set(row.get("present") or PULLED)
    pool = tool_pool(segments)
    values = {
        "messages": [agno_message(m) for m in segment_messages(segments)],
        "tools": [pool.get(t) if isinstance(t, str) else t.get("inline") for t in row.get("tool_order") or []],
        "content": state.get("content"), "session_state": state.get("session_state"),
        "metrics": state.get("metrics"), "status": state.get("status"),
    }
    for key in PULLED:
        if key in present:
            run[key] = values[key]
    return run, row


# -- sessions -----------------------------------------------------------------------------


def session_name(row: Mapping[str, Any]) -> Optional[str]:
    """The session's name (``session_data.session_name``), if any."""
    data = row.get("session_data")
    name = data.get("session_name") if isinstance(data, Mapping) else None
    return name if isinstance(name, str) else None


def session_summary(row: Mapping[str, Any]) -> Dict[str, Any]:
    """What a session listing filters and sorts on, kept in each session checkpoint's metadata."""
    out = {k: row.get(k) for k in SUMMARY_COLUMNS}
    out["session_name"] = session_name(row)
    return out
