"""Viewers: how readers show people the values an adapter stored in its framework's own encoding.

A checkpoint written by an adapter may hold state only its framework decodes (LangGraph's
channels are its serializer's typed bytes). Readers (``qvc show``, ``qvc diff``, ``qvc serve``)
never import an adapter: they call :func:`view_state`, which hands the checkpoint to the viewer
registered for it, the way :data:`qvc.store.git_store.SERVICES` plugs services into the store.

A viewer is registered under a *header key*: a key the adapter writes into its checkpoints'
header (:meth:`~qvc.store.git_store.GitCheckpointStore.header`) beside the store's own, such as
``"langgraph"``; or, for writers that store through the store's ``put`` (which writes no header
keys but the store's), under ``"source:<name>"`` for checkpoints whose metadata's ``source`` is
``<name>`` (:mod:`qvc.runs` and agno's runs write ``"source": "run"``: ``"source:run"``). Header
keys are looked up first. It comes from either

- the ``qvc.viewers`` entry-point group (name: the header key, value: ``module:function``), read
  the first time a checkpoint carries a key the store does not write, and its module imported
  the first time a checkpoint carries that key; so ``import qvc`` imports no framework, and a
  package outside qvc can add a viewer by declaring one; or
- :func:`register_viewer`, which takes precedence.

A viewer whose module does not import (its framework is not installed) counts as none: the
stored values are shown as they are. Imports nothing of qvc (the store only for type hints).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:
    from qvc.store.git_store import GitCheckpointStore

#: The entry-point group viewers are declared in (``[project.entry-points."qvc.viewers"]``).
GROUP = "qvc.viewers"

#: ``viewer(store, sha, state, plain=False) -> state to show``: ``state`` is the checkpoint's
#: ``state_data`` as the store read it; the viewer returns the fields people should see (a new
#: dict), or raises :class:`~qvc.errors.CorruptionError` when they do not decode. With
#: ``plain=True`` (the JSON forms: ``--json``, ``qvc serve``) the values are plain data a JSON
#: form holds (dicts, lists, strings, numbers, ...), not the framework's objects.
Viewer = Callable[..., "dict[str, Any]"]

#: Header keys :class:`~qvc.store.git_store.GitCheckpointStore` writes itself: no viewer is looked
#: up for them (a checkpoint with only these never reads the entry points).
STORE_KEYS = frozenset({"id", "thread_id", "step", "parent_id", "created_at", "schema_version",
                        "versions_seen", "pending_writes", "versions"})
#: Metadata ``source`` values of plain checkpoints (qvc's ``put``, ``qvc commit``, forks, and the
#: ``input``/``loop`` steps LangGraph names, whose checkpoints have a header key): no viewer is
#: looked up for them, so showing one never reads the entry points.
STORE_SOURCES = frozenset({"", "put", "update", "fork", "commit", "input", "loop"})

_lock = threading.Lock()
_registered: dict[str, Viewer] = {}
_loaded: dict[str, Optional[Viewer]] = {}  # entry points imported (None: their module did not)
_declared: Optional[dict[str, Any]] = None  # header key -> entry point, read once


def register_viewer(key: str, viewer: Viewer) -> None:
    """Show checkpoints whose header carries ``key`` through ``viewer`` (replacing a declared one)."""
    with _lock:
        _registered[key] = viewer


def viewer_for(key: str) -> Optional[Viewer]:
    """The viewer for header key ``key``: registered, else declared in :data:`GROUP` (imported
    now, once), else ``None`` (also when its module does not import)."""
    global _declared
    with _lock:
        if key in _registered:
            return _registered[key]
        if key in _loaded:
            return _loaded[key]
        if _declared is None:
            from importlib.metadata import entry_points  # deferred: ~40 ms, only once a checkpoint needs it

            _declared = {}
            for ep in entry_points(group=GROUP):
                _declared.setdefault(ep.name, ep)
        ep = _declared.get(key)
        if ep is None:
            return None
        try:
            viewer = ep.load()
        except ImportError:  # the framework is not installed: show the stored values
            viewer = None
        _loaded[key] = viewer
        return viewer


def view_state(store: GitCheckpointStore, sha: str, state: dict[str, Any], *, plain: bool = False) -> dict[str, Any]:
    """The state of checkpoint commit ``sha`` to show people: ``state`` (its ``state_data``) as
    the viewer of one of its header's keys shows it (as plain data with ``plain``, see
    :data:`Viewer`), or ``state`` itself when no key has one.
    Reads the checkpoint's header; raises what the viewer raises
    (:class:`~qvc.errors.CorruptionError` for values that do not decode)."""
    viewer = viewer_of(store, sha)
    return viewer(store, sha, state, plain=plain) if viewer is not None else state


def viewer_of(store: GitCheckpointStore, sha: str) -> Optional[Viewer]:
    """The viewer of checkpoint commit ``sha``: that of the first of its header's keys that has
    one, else that of ``"source:" + `` its metadata's ``source``, else ``None`` (its values are
    shown as stored). Reads the checkpoint's header."""
    header, metadata = store.header(sha)
    for key in header:
        if key in STORE_KEYS:
            continue
        viewer = viewer_for(key)
        if viewer is not None:
            return viewer
    source = metadata.get("source") if isinstance(metadata, dict) else None
    if isinstance(source, str) and source not in STORE_SOURCES:
        return viewer_for("source:" + source)
    return None
