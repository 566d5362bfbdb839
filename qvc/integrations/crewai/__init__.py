"""CrewAI: ``QvcFlowPersistence`` (flows' ``FlowPersistence``) and ``QvcCheckpointProvider`` (the
runtime-checkpoint ``BaseProvider``) on a qvc repository.

``@persist(QvcFlowPersistence("agent.qvc"))`` keeps each flow's states as the thread
``crewai/flow/<flow id>``; ``Flow(checkpoint=QvcCheckpointProvider("agent.qvc").config())`` keeps
CrewAI's runtime checkpoints as the threads ``crewai/checkpoint/<branch>`` (docs/crewai.md).
Modules: :mod:`.layout` (thread names and fields), :mod:`.persistence`, :mod:`.provider`,
:mod:`.viewer` (how qvc's readers show them). Needs the ``crewai`` extra
(``pip install "qvc[crewai]"``). The classes are imported on first use, so the viewer (``qvc show``)
reads a repository without loading CrewAI.
"""

from typing import Any

from qvc.integrations.crewai.layout import branch_of, branch_thread, flow_of, flow_thread

_PERSISTENCE = ("QvcFlowPersistence",)
_PROVIDER = ("QvcCheckpointProvider",)


def __getattr__(name: str) -> Any:
    if name in _PERSISTENCE:
        from qvc.integrations.crewai import persistence

        return getattr(persistence, name)
    if name in _PROVIDER:
        from qvc.integrations.crewai import provider

        return getattr(provider, name)
    raise AttributeError(f"module 'qvc.integrations.crewai' has no attribute {name!r}")


__all__ = ["QvcCheckpointProvider", "QvcFlowPersistence", "branch_of", "branch_thread", "flow_of", "flow_thread"]
