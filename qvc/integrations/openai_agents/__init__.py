"""OpenAI Agents SDK: ``QvcSession``, the SDK's ``Session`` protocol on a qvc repository.

``Runner.run(agent, prompt, session=QvcSession("chat-1", "runs.qvc"))`` keeps the session in the
thread ``openai/session/chat-1``, one checkpoint per change of its items (docs/openai-agents.md).
Modules: :mod:`.layout` (items as checkpoint fields), :mod:`.session` (``QvcSession``),
:mod:`.viewer` (how qvc's readers show a session), :mod:`.scripted` (a scripted agent for offline
runs). Needs the ``openai-agents`` extra (``pip install "qvc[openai-agents]"``).
"""

from qvc.integrations.openai_agents.layout import PREFIX, session_of, session_thread
from qvc.integrations.openai_agents.session import CompactionSnapshot, QvcSession

__all__ = ["PREFIX", "CompactionSnapshot", "QvcSession", "session_of", "session_thread"]
