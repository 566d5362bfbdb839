"""Claude Agent SDK: ``QvcSessionStore``, the SDK's ``SessionStore`` protocol on a qvc repository.

``ClaudeAgentOptions(session_store=QvcSessionStore("runs.qvc"))`` mirrors every session's
transcript into the repository: the thread ``claude/session/<project_key>/<session_id>`` (a
subagent's transcript: ``.../<session_id>/subagents/agent-<id>``), one checkpoint per append
(docs/claude-agent-sdk.md). Modules: :mod:`.layout` (thread names and fields), :mod:`.store`
(``QvcSessionStore``), :mod:`.viewer` (how qvc's readers show a transcript), :mod:`.scripted`
(a scripted model server on 127.0.0.1, so the SDK's real loop runs offline). Needs the
``claude-agent-sdk`` extra (``pip install "qvc[claude-agent-sdk]"``). ``QvcSessionStore`` is
imported on first use, so the viewer (``qvc show``) reads a repository without loading the SDK.
"""

from typing import Any

from qvc.integrations.claude_agent_sdk.layout import PREFIX, key_of, session_thread

_STORE = ("QvcSessionStore",)


def __getattr__(name: str) -> Any:
    if name in _STORE:
        from qvc.integrations.claude_agent_sdk import store

        return getattr(store, name)
    raise AttributeError(f"module 'qvc.integrations.claude_agent_sdk' has no attribute {name!r}")


__all__ = ["PREFIX", "QvcSessionStore", "key_of", "session_thread"]
