"""pydantic-ai: ``QvcConversationStore``, a qvc repository as pydantic-ai's ``ConversationStore``.

``store = QvcConversationStore("runs.qvc")``; ``conv = await store.load(cid) or
Conversation(conversation_id=cid)``; ``result = await agent.run(prompt, conversation=conv)``;
``await store.save(result)``. Each message is an entry checkpoint, each conversation a thread
``pydantic-ai/<id>`` (:mod:`.store`); readers show it as a conversation (:mod:`.viewer`). Needs
the ``pydantic-ai`` extra (``pip install "qvc[pydantic-ai]"``).
"""

from qvc.integrations.pydantic_ai.store import PREFIX, QvcConversationStore, conversation_of, conversation_thread

__all__ = ["PREFIX", "QvcConversationStore", "conversation_of", "conversation_thread"]
