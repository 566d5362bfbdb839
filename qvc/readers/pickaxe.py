"""``qvc log -S`` / ``-G``: the checkpoints whose change adds or removes a string, or a line
matching a regular expression, in a state field's value as people see it (git's pickaxe).

Values are searched as :func:`qvc.readers.views.state_of` shows them (an adapter's values through
its viewer, as plain data): every string in a value, its mappings' keys included, and any other
scalar as ``qvc show`` writes it. Only the fields a checkpoint changed are read.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from qvc.errors import InvalidInputError
from qvc.readers.log import LogEntry
from qvc.readers.views import state_of

if TYPE_CHECKING:
    from qvc.store.git_store import GitCheckpointStore


def pickaxe(store: GitCheckpointStore, *, string: str | None = None, regex: str | None = None,
            string_is_regex: bool = False, fields: Sequence[str] = ()) -> Callable[[LogEntry], bool]:
    """A predicate for :func:`qvc.readers.log.log`'s ``where``.

    ``string`` (``-S``): the entry changed how many times it occurs in a field's value (with
    ``string_is_regex``, git's ``--pickaxe-regex``: how many matches of that regular
    expression). ``regex`` (``-G``): a line added or removed in a field's value (each string
    split into lines, compared as multisets) matches. Both given: either holds. ``fields``
    restricts the search to those fields (``qvc log -S x -- messages``). Raises
    :class:`InvalidInputError` for a bad pattern or an empty ``string``, and (from the
    predicate) what reading a checkpoint raises.
    """
    if string is None and regex is None:
        raise InvalidInputError("pickaxe needs a string (-S) or a regular expression (-G)")
    if string == "":
        raise InvalidInputError("-S needs a non-empty string")
    counted = _compile(string, "-S") if string is not None and string_is_regex else None
    lines_re = _compile(regex, "-G") if regex is not None else None
    only = set(fields)

    def count(value: Any) -> int:
        assert string is not None
        if counted is not None:
            return sum(len(counted.findall(t)) for t in texts(value))
        return sum(t.count(string) for t in texts(value))

    def changed_lines(old: Any, new: Any) -> Iterator[str]:
        before = Counter(line for t in texts(old) for line in t.splitlines())
        after = Counter(line for t in texts(new) for line in t.splitlines())
        yield from (after - before)
        yield from (before - after)

    def holds(e: LogEntry) -> bool:
        names = [f for f in e.changed if not only or f in only]
        if not names:
            return False
        new = _shown(store, e.commit)
        old = _shown(store, e.parents[0]) if e.parents else {}
        for name in names:
            if string is not None and count(old.get(name, _ABSENT)) != count(new.get(name, _ABSENT)):
                return True
            if lines_re is not None and any(lines_re.search(line) for line in
                                            changed_lines(old.get(name, _ABSENT), new.get(name, _ABSENT))):
                return True
        return False

    return holds


_ABSENT = object()  # a field the state does not have (added or removed): no text at all


def _compile(pattern: str | None, option: str) -> re.Pattern:
    try:
        return re.compile(pattern or "")
    except re.error as exc:
        raise InvalidInputError(f"bad {option} pattern {pattern!r}: {exc}") from None


def _shown(store: GitCheckpointStore, commit: str) -> dict[str, Any]:
    return state_of(store, commit, store.read(commit).checkpoint.state_data, plain=True)


def texts(value: Any) -> Iterator[str]:
    """The text of a shown value as the pickaxe searches it: its strings (mapping keys too),
    and every other scalar as ``qvc show`` writes it (``1.5``, ``true``, ``null``, ``b'...'``)."""
    from qvc.readers.statediff import shorten  # deferred: start-up speed

    if value is _ABSENT:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from texts(key)
            yield from texts(item)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            yield from texts(item)
    else:
        yield shorten(value, full=True)
