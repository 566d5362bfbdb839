"""How CrewAI's flow states and checkpoints are laid out in a qvc repository (no CrewAI import: the
viewer reads it too).

Flow states (:class:`~qvc.integrations.crewai.QvcFlowPersistence`): a flow, by its state's id
(CrewAI's ``flow_uuid``), is the thread ``crewai/flow/<flow_uuid>``; each ``save_state`` is one
checkpoint whose fields are the state's top-level keys, as CrewAI's SQLite store would read them
back (JSON values: models dumped, sets and tuples as lists, datetimes as ISO strings). Its metadata
says ``"source": "crewai-flow"``, the ``op`` (``save`` or ``pending_feedback``), the ``method`` that
just completed and the ``flow_uuid``. A flow paused for human feedback keeps the pending context as
its thread's record (:meth:`~qvc.GitCheckpointStore.put_record`): JSON
``{"checkpoint": id, "context": PendingFeedbackContext.to_dict()}``, ``b""`` once cleared.

Runtime checkpoints (:class:`~qvc.integrations.crewai.QvcCheckpointProvider`): a CrewAI branch is
the thread ``crewai/checkpoint/<branch>`` (``main``, ``fork/<id>_<hex>``, or the user's label);
each checkpoint keeps CrewAI's own id (``<UTC timestamp>_<8 hex>``) as its qvc checkpoint id, and
its fields are the top-level keys of CrewAI's serialized ``RuntimeState`` (``crewai_version``,
``parent_id``, ``branch``, ``entities``, ``event_record``, ``trigger``). Its metadata says
``"source": "crewai-checkpoint"``, the ``branch``, CrewAI's ``parent_id`` and the ``trigger``.

``%`` in a flow id is written ``%25`` and ``/`` ``%2F``, so every thread name reads back as its id.

Imports :mod:`qvc.errors` and :mod:`qvc.store.prefixes`.
"""

from __future__ import annotations

import re
from typing import Optional

from qvc.errors import InvalidInputError
from qvc.store.prefixes import register_prefix

#: Thread names of flows: ``crewai/flow/<flow_uuid>``.
FLOW_PREFIX = register_prefix("crewai.flows", "crewai/flow/")
#: Thread names of runtime-checkpoint branches: ``crewai/checkpoint/<branch>``.
CHECKPOINT_PREFIX = register_prefix("crewai.checkpoints", "crewai/checkpoint/")
#: The metadata ``source`` of flow-state checkpoints (viewer ``source:crewai-flow``).
FLOW_SOURCE = "crewai-flow"
#: The metadata ``source`` of runtime checkpoints (viewer ``source:crewai-checkpoint``).
CHECKPOINT_SOURCE = "crewai-checkpoint"

_ESCAPED = re.compile(r"%(25|2F)")


def _escape(part: str) -> str:
    return part.replace("%", "%25").replace("/", "%2F")


def _unescape(part: str) -> str:
    return _ESCAPED.sub(lambda m: "%" if m.group(1) == "25" else "/", part)


def flow_thread(flow_uuid: str) -> str:
    """The thread of the flow whose state id is ``flow_uuid``; :class:`InvalidInputError` for an
    id that is not a non-empty string."""
    if not isinstance(flow_uuid, str) or not flow_uuid:
        raise InvalidInputError(f"a flow id (flow_uuid) is a non-empty string, not {flow_uuid!r}")
    return FLOW_PREFIX + _escape(flow_uuid)


def flow_of(thread: str) -> Optional[str]:
    """The flow id a flow thread stands for, else ``None``."""
    if not thread.startswith(FLOW_PREFIX) or len(thread) == len(FLOW_PREFIX):
        return None
    return _unescape(thread[len(FLOW_PREFIX):])


def branch_thread(branch: str) -> str:
    """The thread of the CrewAI checkpoint branch ``branch``; :class:`InvalidInputError` for a
    branch that is not a non-empty string."""
    if not isinstance(branch, str) or not branch:
        raise InvalidInputError(f"a checkpoint branch is a non-empty string, not {branch!r}")
    return CHECKPOINT_PREFIX + branch


def branch_of(thread: str) -> Optional[str]:
    """The CrewAI branch a checkpoint thread stands for, else ``None``."""
    if not thread.startswith(CHECKPOINT_PREFIX) or len(thread) == len(CHECKPOINT_PREFIX):
        return None
    return thread[len(CHECKPOINT_PREFIX):]
