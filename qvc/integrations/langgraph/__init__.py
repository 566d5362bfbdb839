"""LangGraph: ``QvcSaver``, a ``BaseCheckpointSaver`` over a qvc store (see :mod:`.saver`).

Needs the ``langgraph`` extra (``pip install "qvc[langgraph]"``).
"""

from qvc.integrations.langgraph.saver import QvcSaver, channel_values, split_thread_name, thread_name

__all__ = ["QvcSaver", "channel_values", "split_thread_name", "thread_name"]
