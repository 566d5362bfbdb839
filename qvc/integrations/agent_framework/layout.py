"""How Microsoft Agent Framework workflow checkpoints are laid out in a qvc repository (no framework
import: the viewer reads it too).

A workflow, by the name the framework keys its checkpoints with (``WorkflowCheckpoint.workflow_name``,
the ``WorkflowBuilder``'s ``name``), is one thread: ``maf/workflow/<workflow name>``, the name written
with ``%`` as ``%25`` and ``/`` as ``%2F`` so that every thread reads back as its name.

Each checkpoint (one superstep boundary) is one commit, its id the framework's ``checkpoint_id``, its
first parent the checkpoint the framework names as ``previous_checkpoint_id``. Its fields:

- ``messages``: the messages in flight between executors, ``{source executor id: [item, ...]}``; an
  item is ``{"message": {...}}`` for a ``WorkflowMessage`` (its fields: ``data``, ``source_id``,
  ``target_id``, ``type``, ``trace_contexts``, ``source_span_ids``, ``original_request_info_event``)
  and ``{"value": ...}`` for anything else;
- ``state/<key>``: one field per key of the workflow's shared state (what executors ``set_state``, and
  the framework's own ``_workflow_run_kwargs`` and the like), so a superstep writes only the keys it
  changed and a list that grows (a step's results) rewrites only its last 64-item chunk; the two
  keys the framework reserves are fields of their own: ``executor_states`` (``_executor_state``: each
  executor's ``on_checkpoint_save`` snapshot) and ``edge_state`` (``_edge_state``: partly filled
  fan-in buffers), each present only when the checkpoint has it;
- ``pending_requests``: the request-info events awaiting a response, ``{request id: item}``; an item is
  ``{"event": {attribute: value}}`` for a ``WorkflowEvent`` (its attributes as pickle would keep them)
  and ``{"value": ...}`` for anything else;
- ``iteration``: the superstep count (``iteration_count``);
- ``graph_signature``: the hash of the workflow graph (``graph_signature_hash``), which a resume checks;
- ``metadata``: the checkpoint's own ``metadata``;
- ``checkpoint``: bookkeeping, ``{"workflow_name", "previous_checkpoint_id", "timestamp", "version"}``.

A value is stored as it is when qvc's codec keeps it exactly (strings, numbers, booleans, ``None``,
bytes, lists, tuples, sets, dicts, datetimes); anything else (a dataclass, an enum, a pydantic model, a
framework object) is an *envelope* ``{"__pickled__": <pickle bytes>, "__type__": "module:qualname"}``,
the framework's own checkpoint encoding (``FileCheckpointStorage`` writes the same two keys, the bytes
as base64) and decoded as it decodes them, under its allow-list of types. A value whose shape the
layout does not expect (``messages`` that are not a dict of lists, say) is kept whole in a field
``raw_<name>`` instead.

Every checkpoint's metadata says ``"source": "agent-framework"`` (its viewer's key), the ``workflow``
name, the ``iteration``, the ``previous`` checkpoint id and the framework's ``timestamp``.

Imports :mod:`qvc.errors` and :mod:`qvc.store.prefixes`.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from qvc.errors import InvalidInputError
from qvc.store.prefixes import register_prefix

#: Thread names of workflows: ``maf/workflow/<workflow name>``.
PREFIX = register_prefix("agent-framework.workflows", "maf/workflow/")
#: The metadata ``source`` of every workflow checkpoint; its viewer is declared as ``source:agent-framework``.
SOURCE = "agent-framework"

#: Field names (see the module docstring).
MESSAGES, STATE, EXECUTOR_STATES, EDGE_STATE = "messages", "state/", "executor_states", "edge_state"
PENDING, ITERATION, GRAPH, METADATA, BOOKKEEPING = "pending_requests", "iteration", "graph_signature", "metadata", \
    "checkpoint"
#: The framework's reserved keys of the shared state, kept as fields of their own.
EXECUTOR_STATE_KEY, EDGE_STATE_KEY = "_executor_state", "_edge_state"
#: Where a value whose shape the layout does not expect is kept whole (``raw_state`` for the state).
RAW = "raw_"
RAW_STATE = "raw_state"

#: The envelope of a value only pickle keeps (the framework's own two marker keys).
PICKLED, TYPE = "__pickled__", "__type__"

_ESCAPED = re.compile(r"%(25|2F)")


def is_envelope(value: Any) -> bool:
    """Whether ``value`` is a stored pickle envelope."""
    return isinstance(value, dict) and len(value) == 2 and PICKLED in value and TYPE in value


def check_name(name: Any) -> str:
    """``name`` if it can name a workflow (a non-empty string), else :class:`InvalidInputError`."""
    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"workflow_name must be a non-empty string, not {name!r}")
    return name


def workflow_thread(workflow_name: str) -> str:
    """The thread of the workflow ``workflow_name``."""
    name = check_name(workflow_name)
    return PREFIX + name.replace("%", "%25").replace("/", "%2F")


def workflow_of(thread: str) -> Optional[str]:
    """The workflow name a workflow thread stands for, else ``None``."""
    if not thread.startswith(PREFIX) or len(thread) == len(PREFIX) or "/" in thread[len(PREFIX):]:
        return None
    return _ESCAPED.sub(lambda m: "%" if m.group(1) == "25" else "/", thread[len(PREFIX):])
