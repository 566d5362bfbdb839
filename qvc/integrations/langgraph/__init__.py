"""LangGraph: ``QvcSaver``, a ``BaseCheckpointSaver`` over a qvc store (:mod:`.saver`), and how it
stores channel values (:mod:`.values`).

Needs the ``langgraph`` extra (``pip install "qvc[langgraph]"``). The names below are imported
on first use, so the viewer (:mod:`.viewer`) reads a repository LangGraph wrote on a machine
without LangGraph (from the values' serialized form, :mod:`.serialized`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["QvcSaver", "channel_values", "split_thread_name", "thread_name"]


def __getattr__(name: str) -> Any:
    if name == "channel_values":
        from qvc.integrations.langgraph import values

        return values.channel_values
    if name in __all__:
        from qvc.integrations.langgraph import saver

        return getattr(saver, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
