"""How readers show a LangGraph checkpoint: its channels decoded with LangGraph's serializer.

Declared in ``pyproject.toml`` as the ``qvc.viewers`` entry point ``langgraph`` (the key
:class:`~qvc.integrations.langgraph.QvcSaver` writes into its checkpoints' header), so
``qvc show``, ``qvc diff`` and ``qvc serve`` find it through :mod:`qvc.store.viewers` without
naming LangGraph; it is imported the first time such a checkpoint is shown.

Imports LangGraph (through :mod:`.values`) and :mod:`qvc.store`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from qvc.integrations.langgraph.values import channel_values
from qvc.store.git_store import GitCheckpointStore

#: The header key of LangGraph checkpoints, under which this viewer is declared.
HEADER_KEY = "langgraph"


def view(store: GitCheckpointStore, sha: str, state: dict[str, Any], *, plain: bool = False) -> dict[str, Any]:
    """The channel values of the LangGraph checkpoint in commit ``sha``, decoded
    (:func:`~qvc.integrations.langgraph.values.channel_values`; ``state``, the stored
    ``[type, bytes]`` pairs, is read again from ``sha``). With ``plain``, pydantic models (LangChain
    messages among them) are their ``model_dump(mode="json")`` and dataclasses their fields, so a
    JSON form holds them. Raises :class:`~qvc.errors.CorruptionError`."""
    values = channel_values(store, sha)
    return {name: _plain(value) for name, value in values.items()} if plain else values


def _plain(value: Any) -> Any:
    """``value`` with the framework objects inside dicts, lists and tuples made plain data."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        return _plain(dump(mode="json"))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(dataclasses.asdict(value))
    return value
