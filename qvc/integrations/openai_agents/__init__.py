"""OpenAI Agents SDK: ``QvcSession``, the SDK's ``Session`` protocol on a qvc repository.

``Runner.run(agent, prompt, session=QvcSession("chat-1", "runs.qvc"))`` keeps the session in the
thread ``openai/session/chat-1``, one checkpoint per change of its items (docs/openai-agents.md).
Modules: :mod:`.layout` (items as checkpoint fields), :mod:`.session` (``QvcSession``),
:mod:`.viewer` (how qvc's readers show a session), :mod:`.scripted` (a scripted agent for offline
runs). Needs the ``openai-agents`` extra (``pip install "qvc[openai-agents]"``). ``QvcSession``
is imported on first use, so the viewer (``qvc show``) reads a repository without loading the SDK.
"""

from typing import Any

from qvc.integrations.openai_agents.layout import PREFIX, session_of, session_thread

_SESSION = ("CompactionSnapshot", "QvcSession")


def __getattr__(name: str) -> Any:
    if name in _SESSION:
        from qvc.integrations.openai_agents import session

        return getattr(session, name)
    raise AttributeError(f"module 'qvc.integrations.openai_agents' has no attribute {name!r}")


__all__ = ["PREFIX", "CompactionSnapshot", "QvcSession", "session_of", "session_thread"]
