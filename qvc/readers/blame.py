"""``qvc blame``: which checkpoint each part of a state field comes from, as ``git blame`` says
which commit each line comes from.

For a list (or tuple) field, each item is attributed to the checkpoint that added it; for a
mapping, each key to the checkpoint that gave it its current value; anything else, as a
whole, to the checkpoint of its last change. The walk is the revision's first-parent line,
oldest first (crossing into the source thread at a fork, as ``qvc log`` does); only
checkpoints whose tree entry for the field changed are decoded, and only that field.

The field is the one people see: a checkpoint with a viewer (:mod:`qvc.store.viewers`: a
LangGraph checkpoint, a run) is blamed on its viewed state, so ``qvc blame messages`` of a
LangGraph thread or of a run says which checkpoint added each message (a run's ``messages``
exist only as viewed, reassembled from its segments); ``raw=True`` blames the stored fields.

Items that carry an identity (a message's ``id``, a tool result's ``tool_call_id``:
:func:`qvc.readers.statediff.item_identity`) are told apart by it, so a message keeps the
checkpoint that added it even when a later one edits it; other items by their exact bytes
(:func:`qvc.codec.serde.dumps`). A list that only grew keeps every old attribution; otherwise
the old and new lists are matched as a sequence diff (``difflib``), so an item moved by an
insertion before it keeps its origin, and an item without an identity changed in place counts
as added by the checkpoint that changed it.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from qvc.codec import serde
from qvc.codec.tagged import to_jsonable
from qvc.errors import NotFoundError
from qvc.readers.statediff import item_identity
from qvc.readers.views import iso
from qvc.store.refnames import encode_name
from qvc.store.viewers import view_state, viewer_of

if TYPE_CHECKING:
    from qvc.store.git_store import GitCheckpointStore
    from qvc.store.history import CommitInfo


@dataclass(frozen=True)
class BlameLine:
    """One part of a field and the checkpoint it comes from.

    ``path`` is ``()`` for the whole value (a scalar), ``(index,)`` for a list item and
    ``(key,)`` for a mapping's key, as :class:`qvc.readers.statediff.Change` paths are.
    """

    path: tuple
    value: Any
    checkpoint_id: str
    commit: str
    step: int | None
    time: int

    def to_json(self) -> dict[str, Any]:
        """The stable ``qvc blame --json`` form: values and path steps in tagged JSON."""
        return {"path": [to_jsonable(p, "path") for p in self.path], "id": self.checkpoint_id,
                "commit": self.commit, "step": self.step, "time": iso(self.time),
                "value": to_jsonable(self.value, "value")}


@dataclass(frozen=True)
class _Origin:
    checkpoint_id: str
    commit: str
    step: int | None
    time: int


def _key(value: Any) -> bytes:
    return serde.dumps(value)


def _item_key(value: Any) -> bytes:
    known = item_identity(value)
    return serde.dumps(list(known)) if known is not None else b"v" + serde.dumps(value)


_MISSING = object()


def blame(store: GitCheckpointStore, field: str, commit: str, *, raw: bool = False) -> list[BlameLine]:
    """Each item (list), key (mapping) or the value (anything else) of state field ``field`` in
    checkpoint commit ``commit``, with the checkpoint it comes from; list items in order,
    mapping keys in the mapping's order. The field is as the checkpoint's viewer shows it
    (``raw``: as stored; see the module docstring). Raises :class:`NotFoundError` when the
    checkpoint has no such field. Reads only."""
    viewer = None if raw else viewer_of(store, commit)
    versions = _viewed_versions(store, field, commit) if viewer is not None \
        else _stored_versions(store, field, commit)
    value: Any = None
    origins: Any = None  # list of _Origin (list), {key: (_Origin, bytes)} (mapping), _Origin (scalar)
    keys: list[bytes] = []
    for info, new in versions:
        if new is _MISSING:
            origins = None
            continue
        here = _Origin(info.checkpoint_id, info.hex, info.step, info.time)
        if isinstance(new, (list, tuple)):
            new_keys = [_item_key(item) for item in new]
            if isinstance(value, (list, tuple)) and isinstance(origins, list):
                origins = _match(keys, new_keys, origins, here)
            else:
                origins = [here] * len(new)
            keys = new_keys
        elif isinstance(new, Mapping):
            old = origins if isinstance(value, Mapping) and isinstance(origins, dict) else {}
            origins = {}
            for k, v in new.items():
                kept = old.get(_key(k))
                b = _key(v)
                origins[_key(k)] = kept if kept is not None and kept[1] == b else (here, b)
        elif not (origins is not None and not isinstance(origins, (list, dict)) and _key(value) == _key(new)):
            origins = here
        value = new
    if isinstance(value, (list, tuple)):
        return [_line((i,), item, o) for i, (item, o) in enumerate(zip(value, origins, strict=True))]
    if isinstance(value, Mapping):
        return [_line((k,), v, origins[_key(k)][0]) for k, v in value.items()]
    return [_line((), value, origins)]


def _stored_versions(store: GitCheckpointStore, field: str, commit: str) -> list[tuple[CommitInfo, Any]]:
    """The stored field's values along ``commit``'s line, oldest first, one per checkpoint that
    changed it (``_MISSING`` where it went away); only those checkpoints' field is decoded."""
    name = encode_name(field)
    if name not in store.tree_entries(commit):
        fields = sorted(store.read(commit).checkpoint.state_data)
        raise NotFoundError(f"checkpoint {commit[:12]} has no field {field!r} (fields: {', '.join(fields) or 'none'})")
    line: list[CommitInfo] = []
    for info in store.first_parents(commit):
        line.append(info)
        if name not in store.tree_entries(info.hex):  # before the field existed (or last came back)
            break
    out: list[tuple[CommitInfo, Any]] = []
    previous = None
    for info in reversed(line):
        entry = store.tree_entries(info.hex).get(name)
        if entry is None:
            out.append((info, _MISSING))
        elif entry != previous:
            out.append((info, store.field_value(info.hex, field, entry)))
        previous = entry
    return out


def _viewed_versions(store: GitCheckpointStore, field: str, commit: str) -> list[tuple[CommitInfo, Any]]:
    """The viewed field's values along ``commit``'s line, oldest first, one per checkpoint whose
    view of it changed; a checkpoint whose tree is its child's is not decoded again."""
    def shown(sha: str) -> Any:
        return view_state(store, sha, store.read(sha).checkpoint.state_data).get(field, _MISSING)

    newest = view_state(store, commit, store.read(commit).checkpoint.state_data)
    if field not in newest:
        raise NotFoundError(f"checkpoint {commit[:12]} has no field {field!r} "
                            f"(fields: {', '.join(sorted(newest)) or 'none'})")
    line: list[tuple[CommitInfo, Any]] = []
    later_entries, later_value = None, newest[field]
    for info in store.first_parents(commit):
        entries = store.tree_entries(info.hex)
        value = later_value if entries == later_entries else (
            newest[field] if info.hex == commit else shown(info.hex))
        line.append((info, value))
        if value is _MISSING:
            break
        later_entries, later_value = entries, value
    out: list[tuple[CommitInfo, Any]] = []
    previous: Any = _MISSING
    for info, value in reversed(line):
        if value is _MISSING or previous is _MISSING or _key(value) != _key(previous):
            out.append((info, value))
        previous = value
    return out


def _match(old: list[bytes], new: list[bytes], origins: list[_Origin], here: _Origin) -> list[_Origin]:
    """The origins of ``new``'s items: those ``old`` had (matched by a sequence diff), else ``here``."""
    if new[:len(old)] == old:  # it only grew: the common case (messages appended)
        return origins + [here] * (len(new) - len(old))
    out = [here] * len(new)
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, _ in matcher.get_opcodes():
        if tag == "equal":
            out[j1:j1 + i2 - i1] = origins[i1:i2]
    return out


def _line(path: tuple, value: Any, origin: _Origin) -> BlameLine:
    return BlameLine(path, value, origin.checkpoint_id, origin.commit, origin.step, origin.time)
