"""Microsoft Agent Framework: ``QvcCheckpointStorage``, the workflow ``CheckpointStorage`` on a qvc repository.

``WorkflowBuilder(..., checkpoint_storage=QvcCheckpointStorage("workflows.qvc"))`` keeps every
checkpoint the framework takes at a superstep boundary in the repository: a workflow (by the name
the framework keys checkpoints with) is the thread ``maf/workflow/<name>``, each checkpoint one
commit whose parent is the checkpoint it names as previous (docs/agent-framework.md). Modules:
:mod:`.layout` (thread names and fields), :mod:`.codec` (a checkpoint as fields and back),
:mod:`.storage` (``QvcCheckpointStorage``), :mod:`.viewer` (how qvc's readers show a checkpoint),
:mod:`.scripted` (a small workflow of plain executors that runs offline, for the sample, tests and
benchmark). Needs the ``agent-framework`` extra (``pip install "qvc[agent-framework]"``).
``QvcCheckpointStorage`` is imported on first use, so the viewer (``qvc show``) reads a repository
without loading the framework.

Agent-side: ``Agent(client, context_providers=[QvcHistoryProvider("agent.qvc")])`` keeps each
``AgentSession``'s conversation as the thread ``maf/chat/<session id>``, one commit per save of
messages (:mod:`.history_layout`, :mod:`.history`, :mod:`.history_viewer`).
"""

from typing import Any

from qvc.integrations.agent_framework.history_layout import PREFIX as CHAT_PREFIX
from qvc.integrations.agent_framework.history_layout import chat_session_of, chat_thread
from qvc.integrations.agent_framework.layout import PREFIX, workflow_of, workflow_thread

_STORAGE = ("QvcCheckpointStorage", "CheckpointNotFoundError", "CheckpointEncodingError", "CheckpointDecodingError",
            "InvalidCheckpointError")


def __getattr__(name: str) -> Any:
    if name in _STORAGE:
        from qvc.integrations.agent_framework import storage

        return getattr(storage, name)
    if name == "QvcHistoryProvider":
        from qvc.integrations.agent_framework import history

        return history.QvcHistoryProvider
    raise AttributeError(f"module 'qvc.integrations.agent_framework' has no attribute {name!r}")


__all__ = ["CHAT_PREFIX", "PREFIX", "QvcCheckpointStorage", "QvcHistoryProvider", "chat_session_of", "chat_thread",
           "CheckpointNotFoundError", "CheckpointEncodingError",
           "CheckpointDecodingError", "InvalidCheckpointError", "workflow_of", "workflow_thread"]
