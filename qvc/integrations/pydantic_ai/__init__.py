"""pydantic-ai: ``QvcConversationStore``, a qvc repository as pydantic-ai's ``ConversationStore``.

``store = QvcConversationStore("runs.qvc")``; ``conv = await store.load(cid) or
Conversation(conversation_id=cid)``; ``result = await agent.run(prompt, conversation=conv)``;
``await store.save(result)``. Each message is an entry checkpoint, each conversation a thread
``pydantic-ai/<id>`` (:mod:`.store`); readers show it as a conversation (:mod:`.viewer`). Needs
the ``pydantic-ai`` extra (``pip install "qvc[pydantic-ai]"``).

The names below are imported on first use, so the viewer (which needs no pydantic-ai) shows a
conversation on a machine without pydantic-ai installed.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PREFIX", "QvcConversationStore", "conversation_of", "conversation_thread"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from qvc.integrations.pydantic_ai import store

        return getattr(store, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
