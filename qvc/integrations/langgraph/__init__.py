"""LangGraph: ``QvcSaver``, a ``BaseCheckpointSaver`` over a qvc store (:mod:`.saver`), and how it
stores channel values (:mod:`.values`).

Needs the ``langgraph`` extra (``pip install "qvc[langgraph]"``).
"""

from qvc.integrations.langgraph.saver import QvcSaver, split_thread_name, thread_name
from qvc.integrations.langgraph.values import channel_values

__all__ = ["QvcSaver", "channel_values", "split_thread_name", "thread_name"]
