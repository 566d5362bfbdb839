"""How ``qvc checkout --to DIR`` and ``qvc commit DIR`` edit a LangGraph checkpoint.

Declared in ``pyproject.toml`` as the ``qvc.editors`` entry point ``langgraph`` (the key
:class:`~qvc.integrations.langgraph.QvcSaver` writes into its checkpoints' header), so
:mod:`qvc.readers.workdir` and :mod:`qvc.edit.workdir` find it through :mod:`qvc.store.viewers`
without naming LangGraph.

**Files.** Each channel is one JSON file holding its value in LangGraph's serializer's JSON form:
a LangChain object (a message: ``{"lc": 1, "type": "constructor", "id": [..., "AIMessage"],
"kwargs": {"content": ..., "tool_calls": [...], ...}}``) as ``langchain_core.load.dumpd`` writes
it, dicts, lists, strings, numbers, booleans and ``null`` as themselves. A list channel (messages)
is a JSON list, one item per element. A value (or a list item) without an exact JSON form (one
that would not read back as the same object, such as a tuple, bytes or a user's pydantic model)
is kept in its stored encoding, ``{"qvc:stored": ["msgpack", {"$bytes": "..."}]}``, and named in
one line of the checkout's notes: nothing is lost, and the rest stays editable.

**Commit.** A file is read back through LangGraph's serializer (``loads_typed(("json", ...))``),
so messages come back as LangChain message objects. A file (or list item) left as it was written
is stored exactly as the checkpoint it came from stores it, so an untouched directory commits to
identical channel values. The new checkpoint is a LangGraph checkpoint: a ``uuid6`` id, ``ts``,
the parent's ``versions_seen``, ``channel_versions`` with every changed or removed channel's
version moved on (as :meth:`QvcSaver.get_next_version` does) and no ``updated_channels`` (so on
resume LangGraph checks every node's triggers), so ``graph.get_state`` reads it and the graph
continues from it: the tasks pending at the parent run next. Values are stored as
:mod:`qvc.integrations.langgraph.values` lays them out (a list longer than
:data:`~qvc.store.format.CHUNK` items one ``[type, bytes]`` pair per item), through the store's
one write path.

Imports LangGraph, LangChain's ``dumpd`` and :mod:`qvc.store`.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timezone
from typing import Any, Optional

from langchain_core.load import dumpd
from langchain_core.load.serializable import Serializable
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from qvc.codec import serde as qserde
from qvc.errors import CorruptionError, InvalidInputError
from qvc.integrations.langgraph.saver import split_thread_name
from qvc.store.editing import Editable, Stored
from qvc.store.format import CHUNK, is_chunked
from qvc.store.git_store import GitCheckpointStore
from qvc.store.refnames import decode_name

#: The header key of LangGraph checkpoints, under which this editor is declared.
HEADER_KEY = "langgraph"
#: The one key of a value kept in its stored encoding: ``{"qvc:stored": [type, bytes]}``.
STORED = "qvc:stored"


class _NoJson(Exception):
    """A value with no exact JSON form (its type's name is the message)."""


class LangGraphEditor:
    """LangGraph channel values to JSON files and back (see the module docstring).

    ``serde`` is the serializer the values were stored with (default: LangGraph's own, as
    :class:`~qvc.integrations.langgraph.QvcSaver` uses)."""

    def __init__(self, serde: SerializerProtocol | None = None) -> None:
        self.serde = serde if serde is not None else JsonPlusSerializer()

    # -- checkout -------------------------------------------------------------------------------

    def to_files(self, store: GitCheckpointStore, sha: str, state: dict[str, Any]) -> Editable:
        """The channels of checkpoint commit ``sha`` (``state``: the stored ``[type, bytes]`` pairs,
        a list of them for a chunked list) as JSON values; see the module docstring."""
        notes: list[str] = []
        out = {name: self._files_form(name, value, mode, notes)
               for name, value, mode in self._fields(store, sha, state)}
        return Editable(out, notes)

    def _fields(self, store: GitCheckpointStore, sha: str, state: dict[str, Any]) -> list[tuple[str, Any, int]]:
        modes = {decode_name(n): mode for n, (mode, _) in store.tree_entries(sha).items()}
        return [(name, value, modes.get(name, 0)) for name, value in state.items()]

    def _files_form(self, name: str, stored: Any, mode: int, notes: list[str]) -> Any:
        """The JSON value of channel ``name`` stored as ``stored`` (tree ``mode``: one pair per item)."""
        if is_chunked(mode):
            pairs = stored if isinstance(stored, list) else []
            items, kept = [], []
            for i, pair in enumerate(pairs):
                item, why = self._item_form(pair)
                items.append(item)
                if why:
                    kept.append((i, why))
            _note(notes, name, kept)
            return items
        try:
            value = self.serde.loads_typed(_pair(stored))
        except Exception as exc:  # whatever the serializer raises: keep the stored bytes
            notes.append(f"channel {name!r} is kept in its stored encoding ({STORED!r}): it does not decode "
                         f"({type(exc).__name__})")
            return {STORED: stored}
        if type(value) is list:
            items, kept = [], []
            for i, obj in enumerate(value):
                form = self._exact(obj)
                if isinstance(form, _NoJson):
                    items.append({STORED: list(self._dumps(obj))})
                    kept.append((i, str(form)))
                else:
                    items.append(form)
            _note(notes, name, kept)
            return items
        form = self._exact(value)
        if isinstance(form, _NoJson):
            notes.append(f"channel {name!r} is kept in its stored encoding ({STORED!r}): a {form} has no exact "
                         "JSON form")
            return {STORED: stored}
        return form

    def _item_form(self, pair: Any) -> tuple[Any, str]:
        """``(JSON value, why it is kept stored or "")`` of one stored item pair."""
        try:
            obj = self.serde.loads_typed(_pair(pair))
        except Exception as exc:
            return {STORED: pair}, f"does not decode ({type(exc).__name__})"
        form = self._exact(obj)
        if isinstance(form, _NoJson):
            return {STORED: pair}, f"a {form} has no exact JSON form"
        return form, ""

    def _exact(self, obj: Any) -> Any:
        """The JSON form of ``obj`` if it reads back as an object the serializer stores the same
        way, else a :class:`_NoJson` naming what has none."""
        try:
            form = _jsonable(obj)
            back = self._revive(form)
            if self._dumps(back) == self._dumps(obj):
                return form
            return _NoJson(type(obj).__name__)
        except _NoJson as exc:
            return exc
        except Exception:  # the serializer refused the round trip
            return _NoJson(type(obj).__name__)

    # -- commit ---------------------------------------------------------------------------------

    def from_files(self, store: GitCheckpointStore, state: dict[str, Any], *, thread: str,
                   parent: Optional[str], origin: Optional[str], step: int) -> Stored:
        """The edited channels as QvcSaver stores them, and the LangGraph header of a new
        checkpoint at ``step`` on ``thread`` after commit ``parent``; see the module docstring.
        Raises :class:`~qvc.errors.InvalidInputError` naming the channel (and item) LangGraph
        cannot read."""
        was_files, was_stored, was_modes = self._origin(store, origin)
        stored: dict[str, Any] = {}
        for name, value in state.items():
            if name in was_stored and qserde.dumps(value) == qserde.dumps(was_files.get(name)):
                stored[name] = was_stored[name]  # as it was written: stored exactly as before
            else:
                stored[name] = self._stored_form(name, value, was_files.get(name), was_stored.get(name),
                                                 was_modes.get(name, 0))
        parent_state = store.read(parent, damaged={}).checkpoint.state_data if parent else {}
        changed = [n for n in stored
                   if n not in parent_state or qserde.dumps(stored[n]) != qserde.dumps(parent_state[n])]
        removed = [n for n in parent_state if n not in stored]
        rest, typed = self._checkpoint_of(store, parent) or self._checkpoint_of(store, origin) or ({}, False)
        versions = dict(rest.get("channel_versions") or {})
        for name in changed + removed:
            versions[name] = _next_version(versions.get(name))
        cid = str(uuid6(clock_seq=step))
        ts = datetime.now(timezone.utc).isoformat()
        # updated_channels None: on resume LangGraph checks every node's triggers against the
        # versions, so the parent's pending tasks and the edit's both run (a list would narrow it)
        checkpoint = {**rest, "v": rest.get("v", 4), "id": cid, "ts": ts, "channel_versions": versions,
                      "versions_seen": rest.get("versions_seen") or {}, "updated_channels": None}
        checkpoint.pop("channel_values", None)
        tid, ns = split_thread_name(thread)
        lg: dict[str, Any] = {"thread_id": tid, "checkpoint_ns": ns}
        if typed:
            lg["checkpoint_typed"] = list(self._dumps(checkpoint))
        else:
            lg["checkpoint"] = checkpoint
        return Stored(stored, {HEADER_KEY: lg}, cid, ts, {"parents": {}})

    def _origin(self, store: GitCheckpointStore, origin: Optional[str]) -> tuple[dict, dict, dict]:
        """``(files form, stored values, modes)`` of the checkpoint the files came from (empty when
        there is none, or it is no longer readable)."""
        if origin is None:
            return {}, {}, {}
        try:
            state = store.read(origin).checkpoint.state_data
            fields = self._fields(store, origin, state)
        except CorruptionError:
            return {}, {}, {}
        files = {name: self._files_form(name, value, mode, []) for name, value, mode in fields}
        return files, state, {name: mode for name, _, mode in fields}

    def _stored_form(self, name: str, value: Any, was_file: Any, was_stored: Any, was_mode: int) -> Any:
        """Channel ``name``'s edited JSON ``value`` as stored: one pair, or one per item for a list
        longer than CHUNK. Items left as they were written keep the objects (and, from a chunked
        list, the stored pairs) of the checkpoint they came from."""
        if _is_stored(value):
            return _checked_pair(value[STORED], name)
        if not isinstance(value, list):
            return list(self._dumps(self._object(value, name)))
        known: dict[bytes, tuple[Any, Any]] = {}  # an item's JSON (msgpack) -> (object, stored pair or None)
        if isinstance(was_file, list):
            if is_chunked(was_mode) and isinstance(was_stored, list):
                pairs = list(was_stored)
                objects = [None] * len(pairs)
            else:
                try:
                    objects = list(self.serde.loads_typed(_pair(was_stored)))
                except Exception:
                    objects = []
                pairs = [None] * len(objects)
            for form, obj, pair in zip(was_file, objects, pairs, strict=False):
                if obj is None and pair is not None:
                    try:
                        obj = self.serde.loads_typed(_pair(pair))
                    except Exception:
                        continue
                known.setdefault(qserde.dumps(form), (obj, pair))
        items = []
        for i, item in enumerate(value):
            found = known.get(qserde.dumps(item))
            items.append(found if found is not None else (self._object(item, f"{name}[{i}]"), None))
        if len(items) > CHUNK:
            return [pair if pair is not None else list(self._dumps(obj)) for obj, pair in items]
        return list(self._dumps([obj for obj, _ in items]))

    def _object(self, value: Any, where: str) -> Any:
        """The object a JSON value (or a kept stored pair) stands for."""
        try:
            if _is_stored(value):
                return self.serde.loads_typed(_pair(_checked_pair(value[STORED], where)))
            return self._revive(value)
        except InvalidInputError:
            raise
        except Exception as exc:  # the reviver raises what the constructor raises
            raise InvalidInputError(f"channel {where}: LangGraph cannot read it back: "
                                    f"{type(exc).__name__}: {exc}") from None

    def _checkpoint_of(self, store: GitCheckpointStore, sha: Optional[str]) -> Optional[tuple[dict, bool]]:
        """``(LangGraph checkpoint without channel values, stored typed)`` of commit ``sha``, or
        ``None`` when it is no LangGraph checkpoint."""
        if sha is None:
            return None
        try:
            lg = store.header(sha)[0].get(HEADER_KEY)
        except CorruptionError:
            return None
        if not isinstance(lg, dict):
            return None
        if "checkpoint_typed" in lg:
            return dict(self.serde.loads_typed(_pair(lg["checkpoint_typed"]))), True
        return dict(lg.get("checkpoint") or {}), False

    def _revive(self, form: Any) -> Any:
        return self.serde.loads_typed(("json", json.dumps(form, allow_nan=True).encode()))

    def _dumps(self, obj: Any) -> tuple[str, bytes]:
        t, b = self.serde.dumps_typed(obj)
        return t, bytes(b)


#: The editor ``pyproject.toml`` declares.
EDITOR = LangGraphEditor()


def _jsonable(obj: Any) -> Any:
    """``obj`` as JSON data: LangChain objects as ``dumpd`` writes them; raises :class:`_NoJson`."""
    if obj is None or isinstance(obj, (str, bool, int, float)):
        return obj
    if type(obj) is list:
        return [_jsonable(v) for v in obj]
    if type(obj) is dict:
        if not all(isinstance(k, str) for k in obj):
            raise _NoJson("dict with non-string keys")
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, Serializable) and obj.is_lc_serializable():
        return dumpd(obj)
    raise _NoJson(type(obj).__name__)


def _pair(value: Any) -> tuple[str, bytes]:
    if not (isinstance(value, (list, tuple)) and len(value) == 2 and isinstance(value[0], str)
            and isinstance(value[1], (bytes, bytearray))):
        raise CorruptionError(f"not a stored [type, bytes] pair: {value!r:.80}")
    return value[0], bytes(value[1])


def _is_stored(value: Any) -> bool:
    return isinstance(value, dict) and list(value) == [STORED]


def _checked_pair(value: Any, where: str) -> list:
    try:
        t, b = _pair(value)
    except CorruptionError:
        raise InvalidInputError(f"channel {where}: {STORED!r} must hold a [type, bytes] pair as checkout wrote it"
                                ) from None
    return [t, b]


def _note(notes: list[str], name: str, kept: list[tuple[int, str]]) -> None:
    if kept:
        why = "; ".join(sorted({w for _, w in kept}))
        notes.append(f"channel {name!r}: item(s) {', '.join(str(i) for i, _ in kept)} kept in their stored "
                     f"encoding ({STORED!r}): {why}")


def _next_version(current: Any) -> str:
    """The version after ``current``, as :meth:`QvcSaver.get_next_version` makes them."""
    if current is None:
        n = 0
    elif isinstance(current, str):
        try:
            n = int(current.split(".", 1)[0])
        except ValueError:
            n = 0
    else:
        n = int(current)
    return f"{n + 1:032}.{random.random():016}"
