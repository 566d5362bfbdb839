"""How readers show a LangGraph checkpoint: its channels decoded with LangGraph's serializer.

Declared in ``pyproject.toml`` as the ``qvc.viewers`` entry point ``langgraph`` (the key
:class:`~qvc.integrations.langgraph.QvcSaver` writes into its checkpoints' header), so
``qvc show``, ``qvc diff`` and ``qvc serve`` find it through :mod:`qvc.store.viewers` without
naming LangGraph; it is imported the first time such a checkpoint is shown.

Imports LangGraph (through :mod:`.values`) and :mod:`qvc.store`.
"""

from __future__ import annotations

from typing import Any

from qvc.integrations.langgraph.values import channel_values
from qvc.store.git_store import GitCheckpointStore

#: The header key of LangGraph checkpoints, under which this viewer is declared.
HEADER_KEY = "langgraph"


def view(store: GitCheckpointStore, sha: str, state: dict[str, Any]) -> dict[str, Any]:
    """The channel values of the LangGraph checkpoint in commit ``sha``, decoded
    (:func:`~qvc.integrations.langgraph.values.channel_values`; ``state``, the stored
    ``[type, bytes]`` pairs, is read again from ``sha``). Raises :class:`~qvc.errors.CorruptionError`."""
    return channel_values(store, sha)
