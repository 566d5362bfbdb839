"""How ``qvc checkout --to DIR`` and ``qvc commit DIR`` edit a run checkpoint: as its conversation.

The files are the run as readers show it (:mod:`qvc.runs.viewer`): ``messages`` in the shared
conversation shape, ``status``, ``content``, ``error``, ``metrics``, ``session_state``, ``run``
(who and what the run is), and ``requirements``, ``regenerated_by`` and agno's ``agno`` when set;
never the storage (the ``log.<n>``/``sealed.<n>`` segments, the ``owner`` lease, ``takeovers``).

Committed back (:meth:`RunEditor.from_files`), the checkpoint stores what the checkpoint the files
came from (``origin``) stores, with each field edited replaced: a field left as it was is stored
exactly as there; messages edited from index ``k`` on keep the segments of the first ``k``
(:func:`qvc.runs.segments.cut`) and store the rest as one new segment, each message in the run's
stored form (``id``, ``role``, ``created_at`` from its ``time``, ``content``, ``tool_calls`` with
``arguments``, ``tool_call_id``, ``tool_name``, ``tool_call_error``, the other keys it carries).
The new checkpoint (``"source": "update"``) reads back as a run through the viewer of the
checkpoint it was made from.

Declared in ``pyproject.toml`` as the ``qvc.editors`` entry point ``source:run``, the key of the
runs viewer (:mod:`qvc.store.viewers`). Imports :mod:`qvc.runs` and :mod:`qvc.store`.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional

from qvc.errors import CorruptionError, InvalidInputError
from qvc.runs.codec import segments_of
from qvc.runs.ids import new_id
from qvc.runs.model import Message, parse_status
from qvc.runs.segments import Segment, cut, layout
from qvc.runs.viewer import view
from qvc.store.editing import Editable, Stored

if TYPE_CHECKING:
    from qvc.store.git_store import GitCheckpointStore

# Fields shown as they are stored (a changed one is stored as edited).
_PLAIN = ("status", "content", "error", "metrics", "session_state", "requirements", "regenerated_by")
# Keys of a message in the shared shape that the stored form keeps under other names, or drops.
_SHAPED = {"role", "content", "id", "tool_calls", "tool_call_id", "name", "error", "time", "result"}


class RunEditor:
    """The editor of run checkpoints (see the module docstring)."""

    def to_files(self, store: GitCheckpointStore, sha: str, state: Dict[str, Any]) -> Editable:
        """The run in commit ``sha`` as the runs viewer shows it; a checkpoint that holds no run
        (its ``run`` field missing) as stored."""
        return Editable(view(store, sha, state))

    def from_files(self, store: GitCheckpointStore, state: Dict[str, Any], *, thread: str,
                   parent: Optional[str], origin: Optional[str], step: int) -> Stored:
        """The edited run (``state``: the files as :meth:`to_files` wrote them, then edited) as the
        run checkpoint ``origin`` stores it with the edits made (see the module docstring).
        Raises :class:`~qvc.errors.InvalidInputError` when ``origin`` is not a run checkpoint of
        this repository, or for an edit a run cannot hold (a status no run has, messages that are
        not a list of messages, a tool result without the call it answers)."""
        if origin is None:
            raise InvalidInputError("these files are a run's, but the run checkpoint they were checked out from is "
                                    "not in this repository: nothing to edit")
        try:
            stored = store.read(origin).checkpoint.state_data
        except CorruptionError as exc:
            raise InvalidInputError(f"the run checkpoint the files came from does not read: {exc}") from None
        shown = view(store, origin, stored)
        if "run" not in stored or "messages" not in shown:
            raise InvalidInputError("the files were checked out from a checkpoint that holds no run")
        out = dict(stored)
        for name in _PLAIN:
            if state.get(name) != shown.get(name):
                out[name] = state.get(name)
        if out.get("status") != stored.get("status"):
            out["status"] = parse_status(out["status"]).value
        out["run"] = _merged(stored["run"], shown.get("run") or {}, state.get("run") or {}, "run")
        agno, edited = stored.get("agno"), state.get("agno")
        if isinstance(agno, Mapping) and isinstance(agno.get("run"), Mapping) and edited != shown.get("agno"):
            out["agno"] = {**agno, "run": _merged(agno["run"], shown.get("agno") or {}, edited or {}, "agno")}
        messages = state.get("messages", [])
        if messages != shown["messages"]:
            if not isinstance(messages, list) or not all(isinstance(m, Mapping) and isinstance(m.get("role"), str)
                                                         for m in messages):
                raise InvalidInputError("messages must be a list of messages, each with a role")
            kept = 0
            while kept < min(len(messages), len(shown["messages"])) and messages[kept] == shown["messages"][kept]:
                kept += 1
            segments = cut(segments_of(stored, f"run checkpoint {origin[:12]}"), kept)
            added = [_stored_message(m) for m in messages[kept:]]
            if added:
                segments.append(Segment(added, []))
            out = {k: v for k, v in out.items() if not k.startswith(("log.", "sealed."))}
            out.update(layout(segments))
        last = Message.from_dict(_stored_message(messages[-1])) if messages else None
        return Stored(state=out, header={}, metadata={  # what a run checkpoint's metadata says (its timeline)
            "run_id": out["run"].get("run_id"), "session_id": out["run"].get("session_id"),
            "status": out.get("status"), "reason": "edit", "message_index": len(messages), "time": time.time(),
            "role": last.role if last else None, "preview": last.preview if last else ""})


def _merged(stored: Mapping[str, Any], shown: Mapping[str, Any], edited: Any, name: str) -> Dict[str, Any]:
    """A stored record (``run``, agno's run) with the entries edited in its shown form replaced
    (``shown``: as the viewer showed it; entries it hides are kept)."""
    if not isinstance(edited, Mapping):
        raise InvalidInputError(f"{name} must be a JSON object, not {type(edited).__name__}")
    out = dict(stored)
    for key in set(shown) | set(edited):
        if key not in edited:
            out.pop(key, None)
        elif edited[key] != shown.get(key):
            out[key] = edited[key]
    return out


def _stored_message(message: Mapping[str, Any]) -> Dict[str, Any]:
    """A message of the shared conversation shape in a run's stored form (checked as a run's)."""
    out: Dict[str, Any] = {"id": message.get("id") or new_id(), "role": message["role"],
                           "created_at": _seconds(message.get("time"))}
    if message.get("content") not in (None, ""):
        out["content"] = message["content"]
    calls: List[Dict[str, Any]] = []
    for call in message.get("tool_calls") or ():
        if not isinstance(call, Mapping):
            raise InvalidInputError(f"a tool call must be a JSON object, not {call!r}")
        calls.append({"id": call.get("id") or new_id(), "name": call.get("name"), "arguments": call.get("args") or {}})
    if calls:
        out["tool_calls"] = calls
    if message.get("tool_call_id") is not None:
        out["tool_call_id"] = message["tool_call_id"]
    if message.get("name") and message["role"] == "tool":
        out["tool_name"] = message["name"]
    if message.get("error"):
        out["tool_call_error"] = True
    out.update((k, v) for k, v in message.items() if k not in _SHAPED)
    Message.from_dict(out)  # what a run cannot hold is refused here (InvalidInputError)
    return out


def _seconds(when: Any) -> float:
    """A message's ``time`` (ISO 8601) as Unix seconds; now when it has none."""
    if isinstance(when, str):
        try:
            return datetime.fromisoformat(when).timestamp()
        except ValueError:
            raise InvalidInputError(f"a message's time must be ISO 8601, not {when!r}") from None
    return time.time()


#: The editor ``qvc checkout --to`` and ``qvc commit`` use for run checkpoints.
EDITOR = RunEditor()
