"""``qvc blame``: which checkpoint each part of a state field comes from, as ``git blame`` says
which commit each line comes from.

For a list (or tuple) field, each item is attributed to the checkpoint that added it; for a
mapping, each key to the checkpoint that gave it its current value; anything else, as a
whole, to the checkpoint of its last change. The walk is the revision's first-parent line,
oldest first (crossing into the source thread at a fork, as ``qvc log`` does); only
checkpoints whose tree entry for the field changed are decoded, and only that field.

Items are told apart by their exact stored bytes (:func:`qvc.codec.serde.dumps`): a list that
only grew keeps every old attribution; otherwise the old and new lists are matched as a
sequence diff (``difflib``), so an item moved by an insertion before it keeps its origin, and an
item changed in place counts as added by the checkpoint that changed it.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from qvc.codec import serde
from qvc.codec.tagged import to_jsonable
from qvc.errors import NotFoundError
from qvc.readers.views import iso
from qvc.store.refnames import encode_name

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


def blame(store: GitCheckpointStore, field: str, commit: str) -> list[BlameLine]:
    """Each item (list), key (mapping) or the value (anything else) of state field ``field`` in
    checkpoint commit ``commit``, with the checkpoint it comes from; list items in order,
    mapping keys in the mapping's order. Raises :class:`NotFoundError` when the checkpoint has
    no such field. Reads only."""
    name = encode_name(field)
    if name not in store.tree_entries(commit):
        fields = sorted(store.read(commit).checkpoint.state_data)
        raise NotFoundError(f"checkpoint {commit[:12]} has no field {field!r} (fields: {', '.join(fields) or 'none'})")
    line: list[CommitInfo] = []
    for info in store.first_parents(commit):
        line.append(info)
        if name not in store.tree_entries(info.hex):  # before the field existed (or last came back)
            break
    previous_entry = None
    value: Any = None
    origins: Any = None  # list of _Origin (list), {key: (_Origin, bytes)} (mapping), _Origin (scalar)
    keys: list[bytes] = []
    for info in reversed(line):
        entry = store.tree_entries(info.hex).get(name)
        if entry is None:
            previous_entry, origins = None, None
            continue
        if entry == previous_entry:
            continue
        previous_entry = entry
        here = _Origin(info.checkpoint_id, info.hex, info.step, info.time)
        new = store.field_value(info.hex, field, entry)
        if isinstance(new, (list, tuple)):
            new_keys = [_key(item) for item in new]
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
