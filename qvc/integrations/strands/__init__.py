"""Strands Agents: ``QvcStorage`` (the ``Storage`` protocol) and ``QvcSessionManager`` (a ``SessionRepository``) on qvc.

``SnapshotSessionManager("s1", storage=QvcStorage("agent.qvc"))`` keeps each agent's snapshots
(the latest one and the immutable history) as a thread, ``strands/session/<session>/agent/<agent>``,
one checkpoint per save; ``QvcSessionManager("s1", "agent.qvc")`` is Strands' per-message
``RepositorySessionManager`` (the ``FileSessionManager`` line) on a qvc repository,
``strands/repository/<session>[/agent/<agent>]`` (docs/strands.md). Modules: :mod:`.layout`
(thread names and fields), :mod:`.storage` (``QvcStorage``), :mod:`.repository`
(``QvcSessionRepository``, ``QvcSessionManager``), :mod:`.errors` (qvc's errors as Strands'),
:mod:`.viewer` (how qvc's readers show a session), :mod:`.scripted` (a scripted model and a tool,
so Strands' real agent loop runs offline). Needs the ``strands`` extra (``pip install
"qvc[strands]"``). The classes are imported on first use, so the viewer (``qvc show``) reads a
repository without loading Strands.
"""

from typing import Any

from qvc.integrations.strands.layout import PREFIX, place_of, repository_thread, snapshot_thread

_HOMES = {"QvcStorage": "storage", "QvcSessionRepository": "repository", "QvcSessionManager": "repository"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is not None:
        import importlib

        return getattr(importlib.import_module(f"qvc.integrations.strands.{home}"), name)
    raise AttributeError(f"module 'qvc.integrations.strands' has no attribute {name!r}")


__all__ = ["PREFIX", "QvcSessionManager", "QvcSessionRepository", "QvcStorage", "place_of", "repository_thread",
           "snapshot_thread"]
