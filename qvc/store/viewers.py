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
keys are looked up first. A checkpoint that copies or edits another (metadata ``source``
``"fork"``: ``qvc branch``, :func:`~qvc.store.fork.fork_checkpoint`; ``"update"``: ``qvc commit``)
and has no viewer of its own is shown by the viewer of the checkpoint it was made from, its first
parent (:data:`COPY_SOURCES`); when that viewer cannot read the copy (edited into something
else), the copy is shown as stored. A viewer comes from either

- the ``qvc.viewers`` entry-point group (name: the header key, value: ``module:function``), read
  the first time a checkpoint carries a key the store does not write, and its module imported
  the first time a checkpoint carries that key; so ``import qvc`` imports no framework, and a
  package outside qvc can add a viewer by declaring one; or
- :func:`register_viewer`, which takes precedence.

A viewer whose module does not import (its framework is not installed) counts as none: the
stored values are shown as they are. A viewer that shows values less fully than it could (its
framework is not installed, so it reads them from their serialized form) says so with
:func:`note`; readers print the :func:`notes` once, beside what they show.

**Pending writes** are shown through the same viewer: one that carries a ``writes`` attribute
(:data:`WritesViewer`) decodes the values of its checkpoints' pending writes, whichever layout the
store keeps them in (:meth:`~qvc.store.git_store.GitCheckpointStore.checkpoint_pending_writes`),
and leaves out those that are bookkeeping; readers call :func:`view_writes`. Without one the
writes are shown as stored.

**Editors** are a viewer's inverse, for ``qvc checkout --to DIR`` and ``qvc commit DIR``: an
object with ``to_files`` and ``from_files`` (:class:`Editor`), declared under the same header key
in the ``qvc.editors`` entry-point group (value: ``module:object``) or registered with
:func:`register_editor`. ``to_files`` turns a checkpoint's stored values into values a person
edits as JSON files; ``from_files`` turns the edited values back into what the adapter stores,
plus the header keys the adapter keeps, so the commit reads back through the adapter as its
framework's objects. Without an editor a directory holds the stored values (qvc's tagged JSON).

Imports only :mod:`qvc.errors` and :mod:`qvc.lazy` (the store and :mod:`qvc.types` only for type hints).
"""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Sequence

from qvc.errors import CorruptionError
from qvc.lazy import exports

if TYPE_CHECKING:
    from qvc.store.editing import Editor
    from qvc.store.git_store import GitCheckpointStore
    from qvc.types import PendingWrite

#: The entry-point group viewers are declared in (``[project.entry-points."qvc.viewers"]``).
GROUP = "qvc.viewers"
#: The entry-point group editors are declared in (``[project.entry-points."qvc.editors"]``).
EDITORS = "qvc.editors"

#: ``viewer(store, sha, state, plain=False) -> state to show``: ``state`` is the checkpoint's
#: ``state_data`` as the store read it; the viewer returns the fields people should see (a new
#: dict), or raises :class:`~qvc.errors.CorruptionError` when they do not decode. With
#: ``plain=True`` (the JSON forms: ``--json``, ``qvc serve``) the values are plain data a JSON
#: form holds (dicts, lists, strings, numbers, ...), not the framework's objects.
Viewer = Callable[..., "dict[str, Any]"]
#: ``viewer.writes(store, sha, writes, plain=False) -> writes to show``: a viewer may carry this
#: attribute to show its checkpoints' pending writes too (:func:`view_writes`). ``writes`` are the
#: checkpoint's :class:`~qvc.types.PendingWrite` as stored (in every layout: LangGraph keeps its
#: own encoding of values in the store's keyed writes); it returns those people should see, values
#: decoded as the viewer shows state (plain data with ``plain``), writes that are only bookkeeping
#: left out, or raises :class:`~qvc.errors.CorruptionError`. Without it the writes are shown as stored.
WritesViewer = Callable[..., "Sequence[PendingWrite]"]

#: What a viewer may declare as attributes of itself (read with :func:`records_of` and
#: :func:`bookkeeping_of`), so every reader applies one rule: ``records``, the state fields it shows
#: that are the writer's storage records rather than state (a run's ``run`` and agno's ``agno``: who
#: the run is), which people's views (the text forms, the page of ``qvc serve``) show apart, not in
#: the state or its diffs, while the JSON forms keep them; ``hidden_metadata``, metadata keys that
#: are bookkeeping (a run's ``takeover`` record, with the owners' lease tokens), shown only raw.
TRAITS = ("records", "hidden_metadata")

#: Header keys :class:`~qvc.store.git_store.GitCheckpointStore` writes itself: no viewer is looked
#: up for them (a checkpoint with only these never reads the entry points).
STORE_KEYS = frozenset({"id", "thread_id", "step", "parent_id", "created_at", "schema_version",
                        "versions_seen", "pending_writes", "versions"})
#: Metadata ``source`` values of plain checkpoints (qvc's ``put``, ``qvc commit``, forks, and the
#: ``input``/``loop`` steps LangGraph names, whose checkpoints have a header key): no viewer is
#: looked up for them, so showing one never reads the entry points.
STORE_SOURCES = frozenset({"", "put", "update", "fork", "commit", "input", "loop"})
#: Metadata ``source`` values of checkpoints made from another one, their first parent: a fork copies
#: it (``qvc branch``, ``fork_checkpoint``), ``qvc commit`` stores an edit of it ("update"). Without a
#: viewer of their own (no header key has one) they are shown by their first parent's viewer.
COPY_SOURCES = frozenset({"fork", "update"})


_lock = threading.Lock()
_registered: dict[str, dict[str, Any]] = {GROUP: {}, EDITORS: {}}
_loaded: dict[str, dict[str, Any]] = {GROUP: {}, EDITORS: {}}  # imported (None: their module did not)
_declared: dict[str, dict[str, Any]] = {}  # group -> header key -> entry point, read once per group


# Copies (COPY_SOURCES) -> the commit whose viewer shows them (None: none), by commit SHA: what a
# commit and its ancestors hold never changes, so a long line of edits is walked once.
_made_from: dict[str, Optional[str]] = {}
_MADE_FROM_MAX = 100_000


_notes: dict[str, None] = {}  # what viewers told readers in this process, in order, each once
_collected = threading.local()  # .lists: the notes lists of the collecting_notes blocks open in a thread


def note(line: str) -> None:
    """Tell the people reading ``line`` (one line, such as which extra shows the values fully):
    kept once per process until :func:`notes` is asked, and in the list of each
    :func:`collecting_notes` block open in this thread."""
    with _lock:
        _notes.setdefault(line, None)
    for said in getattr(_collected, "lists", ()):
        if line not in said:
            said.append(line)


@contextlib.contextmanager
def collecting_notes() -> Iterator[list[str]]:
    """A list of the lines viewers :func:`note` in this thread within the block, each once (the
    JSON forms carry them beside what they show: ``"notes"``)."""
    said: list[str] = []
    lists = getattr(_collected, "lists", None)
    if lists is None:
        lists = _collected.lists = []
    lists.append(said)
    try:
        yield said
    finally:
        lists.remove(said)


def notes(clear: bool = True) -> list[str]:
    """The lines viewers noted (:func:`note`) in this process, in order, each once (forgotten with
    ``clear``)."""
    with _lock:
        found = list(_notes)
        if clear:
            _notes.clear()
        return found


def register_viewer(key: str, viewer: Viewer) -> None:
    """Show checkpoints whose header carries ``key`` through ``viewer`` (replacing a declared one)."""
    with _lock:
        _registered[GROUP][key] = viewer
        _made_from.clear()


def register_editor(key: str, editor: Editor) -> None:
    """Check out and commit checkpoints whose header carries ``key`` through ``editor`` (replacing a
    declared one)."""
    with _lock:
        _registered[EDITORS][key] = editor


def _lookup(group: str, key: str) -> tuple[bool, Any]:
    """``(declared, object)`` for header key ``key`` in ``group``: registered, else declared in the
    entry points (imported now, once); the object is ``None`` when there is none or its module
    does not import (its framework is not installed), ``declared`` tells the two apart."""
    with _lock:
        if key in _registered[group]:
            return True, _registered[group][key]
        if key in _loaded[group]:
            return True, _loaded[group][key]
        if group not in _declared:
            from importlib.metadata import entry_points  # deferred: ~40 ms, only once a checkpoint needs it

            _declared[group] = {}
            for ep in entry_points(group=group):
                _declared[group].setdefault(ep.name, ep)
        ep = _declared[group].get(key)
        if ep is None:
            return False, None
        try:
            found = ep.load()
        except ImportError:  # the framework is not installed
            found = None
        _loaded[group][key] = found
        return True, found


def viewer_for(key: str) -> Optional[Viewer]:
    """The viewer for header key ``key``: registered, else declared in :data:`GROUP` (imported
    now, once), else ``None`` (also when its module does not import)."""
    return _lookup(GROUP, key)[1]


def editor_for(key: str) -> Optional[Editor]:
    """The editor for header key ``key``: registered, else declared in :data:`EDITORS` (imported
    now, once), else ``None`` (also when its module does not import)."""
    return _lookup(EDITORS, key)[1]


def editor_of(store: GitCheckpointStore, sha: str) -> Optional[tuple[str, Optional[Editor]]]:
    """``(key, editor)`` for checkpoint commit ``sha``: the first key of its header (other than
    the store's) with an editor, else ``"source:" +`` its metadata's ``source`` when one is
    declared for it (runs: ``"source:run"``); for a copy or an edit (:data:`COPY_SOURCES`) without
    one, that of the checkpoint it was made from (its first parent, and so on back, as
    :func:`viewer_of`). ``(key, None)`` when one is declared but its module does not import (its
    framework is not installed: the caller says so); ``None`` when none is. Reads the headers."""
    at: Optional[str] = sha
    for _ in range(_MADE_FROM_MAX):
        if at is None:
            return None
        try:
            header, metadata = store.header(at)
        except CorruptionError:  # not a checkpoint (a foreign commit), or damaged: no editor
            return None
        missing = None
        for key in header:
            if key in STORE_KEYS:
                continue
            declared, editor = _lookup(EDITORS, key)
            if editor is not None:
                return key, editor
            if declared and missing is None:
                missing = (key, None)
        if missing is not None:
            return missing
        source = metadata.get("source") if isinstance(metadata, dict) else None
        if isinstance(source, str) and source not in STORE_SOURCES:
            declared, editor = _lookup(EDITORS, "source:" + source)
            return ("source:" + source, editor) if declared else None
        if source not in COPY_SOURCES:
            return None
        at = store.commit_info(at).parent
    return None


def view_state(store: GitCheckpointStore, sha: str, state: dict[str, Any], *, plain: bool = False) -> dict[str, Any]:
    """The state of checkpoint commit ``sha`` to show people: ``state`` (its ``state_data``) as
    its viewer (:func:`viewer_of`) shows it (as plain data with ``plain``, see :data:`Viewer`), or
    ``state`` itself when it has none. Reads the checkpoint's header; raises what the viewer raises
    (:class:`~qvc.errors.CorruptionError` for values that do not decode), except for a copy shown
    by the viewer of the checkpoint it was made from (:data:`COPY_SOURCES`): a copy that viewer
    cannot read is shown as stored."""
    found = _viewer_of(store, sha)
    if found is None:
        return state
    viewer, inherited = found
    if not inherited:
        return viewer(store, sha, state, plain=plain)
    try:
        return viewer(store, sha, state, plain=plain)
    except CorruptionError:  # an edit the writer's viewer does not read: the values as stored
        return state


def view_writes(store: GitCheckpointStore, sha: str, writes: Sequence[PendingWrite], *,
                plain: bool = False) -> list[PendingWrite]:
    """The pending writes of checkpoint commit ``sha`` (``writes``, as
    :meth:`~qvc.store.git_store.GitCheckpointStore.checkpoint_pending_writes` read them) to show
    people: as its viewer's :data:`WritesViewer` (its ``writes`` attribute) shows them (values
    decoded, bookkeeping left out), else as stored. Raises what that raises
    (:class:`~qvc.errors.CorruptionError` for values that do not decode), except for a copy shown
    by the viewer of the checkpoint it was made from (:data:`COPY_SOURCES`), whose writes are then
    shown as stored."""
    found = _viewer_of(store, sha) if writes else None
    show = getattr(found[0], "writes", None) if found is not None else None
    if show is None:
        return list(writes)
    if not found[1]:
        return list(show(store, sha, writes, plain=plain))
    try:
        return list(show(store, sha, writes, plain=plain))
    except CorruptionError:  # writes the writer's viewer does not read: as stored
        return list(writes)


def records_of(store: GitCheckpointStore, sha: str) -> frozenset[str]:
    """The state fields of checkpoint commit ``sha`` that its viewer (:func:`viewer_of`) calls the
    writer's storage records (its ``records`` attribute, :data:`TRAITS`): people's views leave them
    out of the state and its diffs unless asked for by name. Empty without a viewer."""
    viewer = viewer_of(store, sha)
    return frozenset(getattr(viewer, "records", ()))


def bookkeeping_of(store: GitCheckpointStore, sha: str) -> frozenset[str]:
    """The metadata keys of checkpoint commit ``sha`` that its viewer calls bookkeeping (its
    ``hidden_metadata`` attribute, :data:`TRAITS`): shown only raw. Empty without a viewer."""
    viewer = viewer_of(store, sha)
    return frozenset(getattr(viewer, "hidden_metadata", ()))


def viewer_of(store: GitCheckpointStore, sha: str) -> Optional[Viewer]:
    """The viewer of checkpoint commit ``sha``: that of the first of its header's keys that has
    one, else that of ``"source:" + `` its metadata's ``source``; for a copy or an edit of another
    checkpoint (its ``source`` in :data:`COPY_SOURCES`) without one, the viewer of the checkpoint
    it was made from (its first parent, and so on back); else ``None`` (its values are shown as
    stored). Reads the checkpoint's header (and, for a copy, its ancestors' until one is not a
    copy, once per commit in this process)."""
    found = _viewer_of(store, sha)
    return found[0] if found is not None else None


def _own_viewer(store: GitCheckpointStore, sha: str) -> tuple[Optional[Viewer], bool]:
    """``(viewer, copy)``: the viewer of ``sha`` by its own header and metadata, and whether it is a
    copy without one (:data:`COPY_SOURCES`: its first parent's is looked up)."""
    header, metadata = store.header(sha)
    for key in header:
        if key in STORE_KEYS:
            continue
        viewer = viewer_for(key)
        if viewer is not None:
            return viewer, False
    source = metadata.get("source") if isinstance(metadata, dict) else None
    if isinstance(source, str) and source not in STORE_SOURCES:
        return viewer_for("source:" + source), False
    return None, source in COPY_SOURCES


def _viewer_of(store: GitCheckpointStore, sha: str) -> Optional[tuple[Viewer, bool]]:
    """``(viewer, inherited)`` of ``sha`` (see :func:`viewer_of`), or ``None``."""
    viewer, copy = _own_viewer(store, sha)
    if not copy:
        return (viewer, False) if viewer is not None else None
    walked: list[str] = []
    at: Optional[str] = sha
    found: Optional[str] = None
    while at is not None:
        with _lock:
            if at in _made_from:
                found = _made_from[at]
                break
        walked.append(at)
        parent = store.commit_info(at).parent
        if parent is None:
            break
        try:
            viewer, copy = _own_viewer(store, parent)
        except CorruptionError:  # not a checkpoint (a foreign commit), or damaged: no viewer, not kept
            return None
        if not copy:
            found = parent if viewer is not None else None
            break
        at = parent
    with _lock:
        if len(_made_from) > _MADE_FROM_MAX:
            _made_from.clear()
        _made_from.update(dict.fromkeys(walked, found))
    if found is None:
        return None
    viewer = _own_viewer(store, found)[0]
    return (viewer, True) if viewer is not None else None


# The editors' types live apart (readers never load them) and stay importable from here.
__getattr__, __dir__ = exports(__name__, {"Editable": "qvc.store.editing", "Editor": "qvc.store.editing",
                                          "Stored": "qvc.store.editing"})
