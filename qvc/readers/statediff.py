"""A readable, structural diff of two checkpoint states.

:func:`diff_states` compares two states (``{field name: value}``) field by field and returns a
:class:`FieldDiff` for every field added, removed or changed, sorted by field name. Equality is
exact in type and value: ``1``, ``1.0`` and ``True`` differ, ``-0.0`` differs from ``0.0``,
every NaN equals every NaN, a tuple differs from a list with the same items, and tz-aware
datetimes differ when their time zones do even if they denote the same instant. Dict key order
and set iteration order do not count as changes.

Inside a changed field the diff is structural (a list of :class:`Change`):

* dicts: removed keys, changed keys (recursively), added keys;
* lists and tuples: items are aligned, never by position. Items that carry an identity (a dict
  with a string ``id``, else a ``tool_call_id``: messages, tool calls, tool results) are
  matched by it and an item matched this way whose content changed is compared recursively;
  other items are matched by exact value. The alignment is the longest common subsequence
  (:class:`difflib.SequenceMatcher` on those keys), so appending one message to a 500-message
  transcript is one ``add`` at index 500, an insertion or removal in the middle shows only those
  items, and two conversations that diverge after a shared prefix show the old tail removed and
  the new one added (not pairs of unrelated messages "changed"). ``remove`` paths use indexes
  into the old sequence, ``add`` and ``change`` paths indexes into the new one;
* sets and frozensets: one ``add`` / ``remove`` per member, with ``member=True`` and the path of
  the set itself;
* anything else (scalars, or values whose types differ): one ``change``.

A field holding a *conversation* (a list of dicts each with a string ``role``: the shared
conversation shape viewers show, :mod:`qvc.store.viewers`) gets a :attr:`FieldDiff.counts`
summary: messages added, removed and changed, tool calls made and tool results failed in what
was added, read as ``"3 messages added, 1 tool call failed"`` (:attr:`FieldDiff.summary`).

:func:`format_diff`, :func:`format_stat` and :func:`to_json` render a diff; :func:`shorten` is
the compact one-line rendering of any value they use (and ``qvc show`` uses to print states);
:func:`message_line` the one-line rendering of a message (role, content, tool calls).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import difflib
import json
import math
import os
from collections.abc import Mapping
from typing import Any, Dict, Hashable, Iterable, List, Optional

from qvc.codec import serde
from qvc.codec.tagged import to_jsonable
from qvc.errors import InvalidInputError, SerializationError
from qvc.lazy import Pattern
from qvc.readers.dates import local_date

#: Strings longer than this are shown as head…tail by :func:`shorten` (unless ``full``).
STR_LIMIT = 80
#: Collections with more items than this are summarized by :func:`shorten` (unless ``full``).
ITEMS_LIMIT = 10

_IDENT_KEY = Pattern(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_PLAIN_FIELD = Pattern(r"[A-Za-z0-9_\-]+\Z")
_COLORS = {"+": "\x1b[32m", "-": "\x1b[31m", "~": "\x1b[33m", "header": "\x1b[1m"}
_RESET = "\x1b[0m"
_OP_SIGN = {"add": "+", "remove": "-", "change": "~"}


@dataclasses.dataclass(frozen=True)
class Change:
    """One difference inside a field.

    ``path`` is the tuple of dict keys / sequence indexes from the field's value down to the
    changed spot (``()`` for the value itself). ``op`` is ``"add"`` (``new`` is the added value,
    ``old`` is None), ``"remove"`` (``old`` is the removed value, ``new`` is None) or ``"change"``
    (both set). ``member`` is True when a set member was added or removed; ``path`` is then
    the set's path.
    """

    path: tuple
    op: str
    old: Any = None
    new: Any = None
    member: bool = False


#: The counts of a conversation's summary, in the order :attr:`FieldDiff.summary` reads them.
COUNTS = ("messages_added", "messages_removed", "messages_changed", "tool_calls_made", "tool_calls_failed")


@dataclasses.dataclass(frozen=True)
class FieldDiff:
    """The changes to one field; ``status`` is ``"added"``, ``"removed"`` or ``"changed"``.

    An added (removed) field has a single ``add`` (``remove``) change with path ``()``.
    ``counts`` is set (a dict keyed by :data:`COUNTS`) when the field holds a conversation.
    """

    field: str
    status: str
    changes: List[Change]
    counts: Optional[Dict[str, int]] = dataclasses.field(default=None, compare=False)

    @property
    def summary(self) -> Optional[str]:
        """``"3 messages added, 1 tool call failed"`` for a conversation field (``None`` otherwise;
        ``"no message changed"`` when only something else in it did)."""
        if self.counts is None:
            return None
        words = {"messages_added": ("message", "added"), "messages_removed": ("message", "removed"),
                 "messages_changed": ("message", "changed"), "tool_calls_made": ("tool call", "made"),
                 "tool_calls_failed": ("tool call", "failed")}
        parts = [f"{n} {noun}{'' if n == 1 else 's'} {verb}"
                 for key, (noun, verb) in words.items() if (n := self.counts.get(key, 0))]
        return ", ".join(parts) or "no message changed"


# -- exact identity ------------------------------------------------------------------------------


class _Unsupported(Exception):
    """A value serde cannot hold; ``steps`` collects the path (innermost first) while unwinding."""

    def __init__(self, msg: str) -> None:
        super().__init__(msg)
        self.msg = msg
        self.steps: List[str] = []


def _tz_ident(tz: Optional[_dt.tzinfo], sample: Any) -> Hashable:
    if tz is None:
        return None
    key = getattr(tz, "key", None)
    if isinstance(key, str):
        return ("zone", key)
    if isinstance(tz, _dt.timezone):
        return ("offset", tz.utcoffset(sample))
    raise _Unsupported(f"object of type {type(tz).__name__} (tzinfo) is not serializable")


class _Identity:
    """Maps values to hashable keys equal exactly when the values are equal in type and value.

    Dict key order and set order do not matter; NaNs are all equal; ``-0.0 != 0.0``; datetimes
    compare by wall time, fold and time zone (key or offset), not by instant.
    """

    def __init__(self) -> None:
        self._cache: Dict[int, tuple] = {}  # id -> (value kept alive, key)

    def __call__(self, v: Any, path: str = "value") -> Hashable:
        try:
            return self._key(v)
        except _Unsupported as exc:
            raise SerializationError(f"{path}{''.join(reversed(exc.steps))}: {exc.msg}") from None
        except RecursionError:
            raise SerializationError(f"{path}: value nested too deeply") from None

    def _key(self, v: Any) -> Hashable:
        t = type(v)
        if v is None or t is str or t is int or t is bool or t is bytes:
            return (t.__name__, v)
        if t is float:
            return ("float", "nan" if math.isnan(v) else v.hex())
        if t is bytearray or t is memoryview:
            return ("bytes", bytes(v))
        hit = self._cache.get(id(v))
        if hit is not None and hit[0] is v:
            return hit[1]
        key = self._compute(v, t)
        if t in (list, tuple, set, frozenset, dict):
            self._cache[id(v)] = (v, key)
        return key

    def _compute(self, v: Any, t: type) -> Hashable:
        if t in (list, tuple, set, frozenset):
            items = []
            i = 0
            try:
                for i, x in enumerate(v):  # noqa: B007 - i names the failing item
                    items.append(self._key(x))
            except _Unsupported as exc:
                exc.steps.append(f"[{i}]")
                raise
            return (t.__name__, tuple(items) if t in (list, tuple) else frozenset(items))
        if t is dict:
            pairs = []
            k, in_key = None, True
            try:
                for k, x in v.items():
                    in_key = True
                    ik = self._key(k)
                    in_key = False
                    pairs.append((ik, self._key(x)))
            except _Unsupported as exc:
                exc.steps.append(f"[{k!r}]" + (" (key)" if in_key else ""))
                raise
            return ("dict", frozenset(pairs))
        if t is _dt.datetime:
            return ("datetime", v.replace(tzinfo=None).isoformat(), v.fold, _tz_ident(v.tzinfo, v))
        if t is _dt.date:
            return ("date", v.isoformat())
        if t is _dt.time:
            return ("time", v.replace(tzinfo=None).isoformat(), v.fold, _tz_ident(v.tzinfo, None))
        if t is _dt.timedelta:
            return ("timedelta", v.days, v.seconds, v.microseconds)
        raise _Unsupported(f"object of type {t.__name__} is not serializable")


# -- diffing -------------------------------------------------------------------------------------


def _check_state(state: Any, name: str) -> None:
    if not isinstance(state, Mapping):
        raise InvalidInputError(f"{name} state must be a mapping, not {type(state).__name__}")
    for key in state:
        if type(key) is not str:
            raise InvalidInputError(f"{name} state: field names must be str, not {type(key).__name__}")


def diff_states(old: Mapping[str, Any], new: Mapping[str, Any]) -> List[FieldDiff]:
    """Return one :class:`FieldDiff` per field added, removed or changed, sorted by field name.

    Unchanged fields are omitted; see the module docstring for what counts as equal and how
    changes inside a field are reported. Raises :class:`InvalidInputError` if a state is not a
    mapping with str keys, :class:`SerializationError` for values :mod:`qvc.codec.serde` cannot hold.
    """
    _check_state(old, "old")
    _check_state(new, "new")
    ident = _Identity()
    out = []
    for field in sorted(set(old) | set(new)):
        if field not in new:
            ident(old[field], f"old[{field!r}]")
            gone = [Change((), "remove", old[field], None)]
            out.append(FieldDiff(field, "removed", gone, _counts(gone) if is_conversation(old[field]) else None))
        elif field not in old:
            ident(new[field], f"new[{field!r}]")
            made = [Change((), "add", None, new[field])]
            out.append(FieldDiff(field, "added", made, _counts(made) if is_conversation(new[field]) else None))
        else:
            if _same_bytes(old[field], new[field]):
                continue
            changes: List[Change] = []
            _diff_value(old[field], new[field], (), changes, ident, field)
            if changes:
                talk = type(old[field]) is type(new[field]) is list and (
                    is_conversation(old[field]) or is_conversation(new[field]))
                out.append(FieldDiff(field, "changed", changes, _counts(changes) if talk else None))
    return out


def is_conversation(value: Any) -> bool:
    """Whether ``value`` is a non-empty list of messages (dicts each with a string ``role``)."""
    return (type(value) is list and bool(value)
            and all(type(m) is dict and type(m.get("role")) is str for m in value))


def _failed(message: Any) -> bool:
    return type(message) is dict and message.get("role") == "tool" and bool(
        message.get("error") or message.get("tool_call_error") or message.get("status") == "error")


def _counts(changes: List[Change]) -> Dict[str, int]:
    """The summary counts of a conversation field's changes (see :data:`COUNTS`)."""
    added: List[Any] = []
    removed = 0
    changed: set = set()
    for c in changes:
        if c.path == ():
            if c.op == "add":
                added.extend(c.new)
            elif c.op == "remove":
                removed += len(c.old)
            continue
        if len(c.path) == 1 and c.op == "add":
            added.append(c.new)
        elif len(c.path) == 1 and c.op == "remove":
            removed += 1
        else:
            changed.add(c.path[0])
    calls = sum(len(m.get("tool_calls") or ()) for m in added if type(m) is dict and m.get("role") == "assistant")
    return {"messages_added": len(added), "messages_removed": removed, "messages_changed": len(changed),
            "tool_calls_made": calls, "tool_calls_failed": sum(1 for m in added if _failed(m))}


def _same_bytes(a: Any, b: Any) -> bool:
    """Fast path: equal serde bytes mean exactly equal values (unequal bytes prove nothing)."""
    try:
        return serde.dumps(a) == serde.dumps(b)
    except SerializationError:
        return False


def _diff_value(a: Any, b: Any, path: tuple, out: List[Change], ident: _Identity, field: str) -> None:
    where = f"state[{field!r}]"
    if ident(a, where) == ident(b, where):
        return
    ta, tb = type(a), type(b)
    if ta is dict and tb is dict:
        akeys = {ident(k): k for k in a}
        bkeys = {ident(k): k for k in b}
        for ik, k in akeys.items():
            if ik not in bkeys:
                out.append(Change(path + (k,), "remove", a[k], None))
            else:
                kb = bkeys[ik]
                _diff_value(a[k], b[kb], path + (kb,), out, ident, field)
        for ik, k in bkeys.items():
            if ik not in akeys:
                out.append(Change(path + (k,), "add", None, b[k]))
    elif ta is tb and ta in (list, tuple):
        _diff_sequence(a, b, path, out, ident, field)
    elif ta is tb and ta in (set, frozenset):
        amembers = {ident(m): m for m in a}
        bmembers = {ident(m): m for m in b}
        removed = [m for im, m in amembers.items() if im not in bmembers]
        added = [m for im, m in bmembers.items() if im not in amembers]
        out.extend(Change(path, "remove", m, None, member=True) for m in sorted(removed, key=_sort_key))
        out.extend(Change(path, "add", None, m, member=True) for m in sorted(added, key=_sort_key))
    else:
        out.append(Change(path, "change", a, b))


def item_identity(item: Any) -> Optional[tuple]:
    """What identifies a list item across versions: ``("id", id)`` for a dict with a non-empty
    string ``id`` (a message, a tool call), else ``("tool_call_id", id)`` (a tool result), else
    ``None`` (the item is identified by its value)."""
    if type(item) is dict:
        for key in ("id", "tool_call_id"):
            value = item.get(key)
            if type(value) is str and value:
                return (key, value)
    return None


def _diff_sequence(a: Any, b: Any, path: tuple, out: List[Change], ident: _Identity, field: str) -> None:
    where = f"state[{field!r}]"

    def key(x: Any) -> Hashable:
        known = item_identity(x)
        return ("item",) + known if known is not None else ("value", ident(x, where))

    codes: Dict[Hashable, int] = {}
    keys_a, keys_b = [key(x) for x in a], [key(x) for x in b]
    seq_a = [codes.setdefault(k, len(codes)) for k in keys_a]
    seq_b = [codes.setdefault(k, len(codes)) for k in keys_b]
    matcher = difflib.SequenceMatcher(None, seq_a, seq_b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":  # the same items: those identified by an id may have changed inside
            for k in range(i2 - i1):
                if keys_a[i1 + k][0] == "item":
                    _diff_value(a[i1 + k], b[j1 + k], path + (j1 + k,), out, ident, field)
            continue
        for i in range(i1, i2):  # a moved item is removed where it was and added where it is
            out.append(Change(path + (i,), "remove", a[i], None))
        for j in range(j1, j2):
            out.append(Change(path + (j,), "add", None, b[j]))


def _sort_key(value: Any) -> tuple:
    return (type(value).__name__, shorten(value, full=True))


# -- rendering -----------------------------------------------------------------------------------


#: Keys whose numbers are times (Unix seconds): ``time``, ``timestamp``, ``created_at``,
#: ``update_time``, ... shown to people as dates by :func:`for_people`.
EPOCH_KEYS = Pattern(r"(?:^|_)(?:time|timestamp|at)\Z")
#: Keys whose numbers are durations in seconds: ``duration``, ``elapsed``, ``latency``,
#: ``time_to_first_token``, ... shown to people rounded by :func:`for_people`.
DURATION_KEYS = Pattern(r"(?:^|_)(?:duration|elapsed|latency)\Z|\Atime_to_")
_EPOCHS = (1e9, 4e9)  # 2001 to 2096: a number outside is not taken for a time


def for_people(key: Any, value: Any) -> Optional[str]:
    """How a number under ``key`` reads for people, or ``None`` to show it as it is: a time in Unix
    seconds (:data:`EPOCH_KEYS`) as a local date, ``2026-12-06 05:12:39 +0000``; a float
    duration in seconds (:data:`DURATION_KEYS`) rounded, ``0.014s``. The JSON forms keep the
    raw value; the page reads numbers the same way."""
    if type(key) is not str or type(value) not in (int, float):
        return None
    if EPOCH_KEYS.search(key) and _EPOCHS[0] <= value < _EPOCHS[1]:
        return local_date(value)
    if type(value) is float and DURATION_KEYS.search(key) and math.isfinite(value):
        return f"{value:.3f}s" if abs(value) < 100 else f"{value:.1f}s"
    return None


def shorten(value: Any, full: bool = False, width: int = 100, key: Any = None) -> str:
    """The compact one-line rendering of ``value``, JSON-like but showing every type.

    Strings are JSON-quoted, ``None``/``True``/``False`` are ``null``/``true``/``false``, floats
    use ``repr`` (``1.0``, ``nan``, ``-0.0``), bytes ``b'…'``, tuples ``(…)``, sets ``{…}``,
    frozensets ``frozenset({…})``, datetimes ISO 8601 with ``[zone key]``, timedeltas
    ``timedelta(…)``. Unless ``full``: strings over :data:`STR_LIMIT` characters become
    ``"head…tail" (N chars)``, collections over :data:`ITEMS_LIMIT` items show their first and
    last items and ``… N more …``, and the result is cut to ``width`` characters. A number that
    is a time or a duration by its key (``key`` for ``value`` itself, dict keys inside it) reads
    as :func:`for_people` writes it. Never raises for odd values (unknown types use ``repr``).
    """
    limit = max(20, min(STR_LIMIT, width))
    text = for_people(key, value) or _render(value, full, limit, width)
    if not full and len(text) > width:
        text = text[:max(width - 1, 1)] + "…"
    return text


def _render_str(s: str, full: bool, limit: int, start: int = 0) -> str:
    if full or len(s) <= limit:
        return json.dumps(s, ensure_ascii=False)
    if start <= 0:
        head, tail = s[: limit * 2 // 3], s[-(limit // 4):]
        quoted_head, quoted_tail = json.dumps(head, ensure_ascii=False), json.dumps(tail, ensure_ascii=False)
        return f"{quoted_head[:-1]}…{quoted_tail[1:]} ({len(s)} chars)"
    window = s[start:start + limit]
    more = "…" if start + limit < len(s) else ""
    return f'"…{json.dumps(window, ensure_ascii=False)[1:-1]}{more}" ({len(s)} chars)'


def _render_bytes(b: bytes, full: bool, limit: int) -> str:
    if full or len(b) <= limit:
        return repr(b)
    return f"{repr(b[: limit * 2 // 3])[:-1]}…{repr(b[-(limit // 4):])[2:]} ({len(b)} bytes)"


def _render_items(parts: Iterable[Any], n: int, render: Any, full: bool, width: int) -> str:
    """Join rendered items with ", "; unless ``full``, summarize past ITEMS_LIMIT and stop past ``width``."""
    seq = list(parts)
    if full:
        return ", ".join(render(x) for x in seq)
    chosen: List[Any] = seq
    hidden = 0
    if n > ITEMS_LIMIT:
        chosen = seq[:ITEMS_LIMIT - 2] + seq[-1:]
        hidden = n - (ITEMS_LIMIT - 1)
    out: List[str] = []
    used = 0
    for i, x in enumerate(chosen):
        if hidden and i == len(chosen) - 1:
            out.append(f"… {hidden} more …")
        elif used > width:
            out.append("…")
            break
        text = render(x)
        out.append(text)
        used += len(text) + 2
    return ", ".join(out)


def _render(v: Any, full: bool, limit: int, width: int) -> str:
    t = type(v)

    def sub(x: Any) -> str:
        return _render(x, full, limit, width)

    if v is None:
        return "null"
    if t is bool:
        return "true" if v else "false"
    if t is int:
        try:
            text = str(v)
        except ValueError:  # beyond Python's int/str digit limit
            return f"<int of {v.bit_length()} bits>"
        if not full and len(text) > limit:
            return f"{text[: limit // 2]}…{text[-(limit // 4):]} ({len(text.lstrip('-'))} digits)"
        return text
    if t is float:
        return repr(v)
    if t is str:
        return _render_str(v, full, limit)
    if t in (bytes, bytearray, memoryview):
        return _render_bytes(bytes(v), full, limit)
    if t is list:
        return "[" + _render_items(v, len(v), sub, full, width) + "]"
    if t is tuple:
        inner = _render_items(v, len(v), sub, full, width)
        return "(" + inner + ("," if len(v) == 1 else "") + ")"
    if t is set or t is frozenset:
        if not v:
            return "set()" if t is set else "frozenset()"
        members = sorted(v, key=_sort_key) if full or len(v) <= 200 else list(v)
        inner = "{" + _render_items(members, len(v), sub, full, width) + "}"
        return inner if t is set else f"frozenset({inner})"
    if t is dict:
        def pair(kv: tuple) -> str:
            return f"{sub(kv[0])}: {for_people(kv[0], kv[1]) or sub(kv[1])}"
        return "{" + _render_items(v.items(), len(v), pair, full, width) + "}"
    if t is _dt.datetime or t is _dt.time:
        text = v.isoformat()
        key = getattr(v.tzinfo, "key", None)
        if isinstance(key, str):
            text += f"[{key}]"
        return text + (" (fold=1)" if v.fold else "")
    if t is _dt.date:
        return v.isoformat()
    if t is _dt.timedelta:
        return f"timedelta({v})"
    return repr(v)


def format_path(field: str, path: tuple) -> str:
    """``field`` and ``path`` as ``messages[500].content`` / ``scratch["a key"]`` / ``"odd field"``."""
    text = field if _PLAIN_FIELD.match(field) else json.dumps(field, ensure_ascii=False)
    for step in path:
        if type(step) is str and _IDENT_KEY.match(step):
            text += "." + step
        else:
            text += "[" + shorten(step, width=60) + "]"
    return text


def _paint(line: str, kind: str, color: bool) -> str:
    return f"{_COLORS[kind]}{line}{_RESET}" if color else line


def is_message(value: Any) -> bool:
    """Whether ``value`` is a message of the shared conversation shape (a dict with a string ``role``)."""
    return type(value) is dict and type(value.get("role")) is str


#: Where the tool's name sits in a tool call, in the shapes agents write: the conversation shape's
#: ``name`` (LangChain, the viewers), ``tool`` (qvc's quick start), ``tool_name`` (agno), and
#: OpenAI's chat format ``{"function": {"name", "arguments"}}`` (read by :func:`tool_call`).
CALL_NAMES = ("name", "tool", "tool_name")
#: Where its arguments sit: ``args`` (the conversation shape), ``arguments`` (OpenAI), ``input``
#: (Anthropic's ``tool_use`` blocks), ``tool_args`` (agno).
CALL_ARGS = ("args", "arguments", "input", "tool_args")


def tool_call(call: Any) -> tuple[Optional[str], Any]:
    """``(name, args)`` of one tool call in any of the shapes agents write (:data:`CALL_NAMES`,
    :data:`CALL_ARGS`, OpenAI's nested ``function``); ``(None, None)`` for what is not a dict.
    Arguments given as a JSON text (OpenAI's) are decoded when they parse as a JSON object."""
    if type(call) is not dict:
        return None, None
    fn = call.get("function")
    where = [call, fn] if type(fn) is dict else [call]
    name = next((w[k] for w in where for k in CALL_NAMES if type(w.get(k)) is str and w[k]), None)
    args = next((w[k] for w in where for k in CALL_ARGS if w.get(k) is not None), None)
    if type(args) is str:
        try:
            decoded = json.loads(args)
        except ValueError:
            decoded = None
        if type(decoded) is dict:
            args = decoded
    return name, args


def message_line(message: dict, *, full: bool = False, width: int = 100) -> str:
    """A message on one line, as people read a conversation: ``role [tool name] (failed): content``
    and, for an assistant's tool calls, ``→ name({args})`` each (read in every shape
    :func:`tool_call` knows); other keys are left out (the JSON forms keep them). Shortened to
    ``width`` unless ``full``."""
    role = message["role"]
    head = role
    said = next((message[k] for k in ("name", "tool_name", "tool_call_id") if message.get(k)), None)
    if role == "tool" and said:
        head += f" [{said}]"
    if _failed(message):
        head += " (failed)"
    content = message.get("content")
    room = max(20, width - len(head) - 2)
    parts = []
    if content not in (None, "", []):  # a long text as its head and tail, sized to fit the line
        if type(content) is str:
            fits = len(json.dumps(content, ensure_ascii=False)) <= room
            parts.append(_render_str(content, full, len(content) if fits else max(20, min(STR_LIMIT * 2, room - 20))))
        else:
            parts.append(shorten(content, full=full, width=room))
    for call in message.get("tool_calls") or ():
        if type(call) is dict:
            name, args = tool_call(call)
            parts.append(f"→ {name or '?'}({shorten(args, full=full, width=width) if args else ''})")
    text = f"{head}: {' '.join(parts)}" if parts else head
    if not full and len(text) > width:
        text = text[:max(width - 1, 1)] + "…"
    return text


def _value_text(value: Any, full: bool, width: int, key: Any = None) -> str:
    return message_line(value, full=full, width=width) if is_message(value) \
        else shorten(value, full=full, width=width, key=key)


def _key_of(field: str, path: tuple) -> Any:
    """The key a value at ``path`` in ``field`` sits under (the field's name at the top)."""
    return path[-1] if path else field


def _change_lines(field: str, change: Change, full: bool, width: int, color: bool) -> List[str]:
    sign = _OP_SIGN[change.op]
    where = format_path(field, change.path) + (" (member)" if change.member else "")
    if change.op != "change":
        value = change.new if change.op == "add" else change.old
        room = max(width - len(where) - 4, 40)
        if change.path == () and is_conversation(value):  # a whole conversation: one line per message
            return [_paint(f"{sign} {format_path(field, (i,))} {message_line(m, full=full, width=room)}", sign, color)
                    for i, m in enumerate(value)]
        if is_message(value):
            return [_paint(f"{sign} {where} {message_line(value, full=full, width=room)}", sign, color)]
        return [_paint(f"{sign} {where}: {shorten(value, full=full, width=room, key=_key_of(field, change.path))}",
                       sign, color)]
    old, new = change.old, change.new
    room = max(width - 6, 40)  # what fits on a "    - old" line
    if type(old) is str and type(new) is str and not full and max(len(old), len(new)) > STR_LIMIT:
        start = max(0, len(os.path.commonprefix([old, new])) - 20)
        limit = max(20, min(STR_LIMIT, room - 20))  # room for quotes, ellipses and "(N chars)"
        old_text, new_text = _render_str(old, False, limit, start), _render_str(new, False, limit, start)
    else:
        key = _key_of(field, change.path)
        old_text, new_text = _value_text(old, full, room, key), _value_text(new, full, room, key)
    line = f"{sign} {where}: {old_text} → {new_text}"
    if len(line) <= width:
        return [_paint(line, sign, color)]
    return [_paint(f"{sign} {where}:", sign, color), _paint(f"    - {old_text}", "-", color),
            _paint(f"    + {new_text}", "+", color)]


def format_diff(diffs: Iterable[FieldDiff], *, color: bool = False, full: bool = False, width: int = 100) -> str:
    """Render ``diffs`` like ``git diff``: a header per field, then one line per change.

    Headers are ``+++ field tools (added)``, ``--- field scratch (removed)`` and
    ``~~~ field messages (changed)``; a conversation field's header is followed by its summary
    (``3 messages added, 1 tool call failed``); change lines are ``+ messages[500] user: "hi"``
    (a message: :func:`message_line`), ``- scratch.notes: "old"`` and ``~ current_step: 3 → 4``
    (a change too wide for ``width`` is split into ``- old`` / ``+ new`` lines below its path).
    Values are shortened with
    :func:`shorten` unless ``full``; a long changed string is shown around its first
    difference. ``color`` adds ANSI colors (green +, red -, yellow ~, bold headers). Returns
    ``""`` for no diffs; lines are joined by newlines with no trailing newline.
    """
    lines: List[str] = []
    for diff in diffs:
        sign = {"added": "+++", "removed": "---", "changed": "~~~"}[diff.status]
        lines.append(_paint(f"{sign} field {format_path(diff.field, ())} ({diff.status})", "header", color))
        if diff.summary is not None:
            lines.append(diff.summary)
        for change in diff.changes:
            lines.extend(_change_lines(diff.field, change, full, width, color))
    return "\n".join(lines)


def format_stat(diffs: Iterable[FieldDiff]) -> str:
    """One line per field with its change counts, then a total, like ``git diff --stat``::

        messages | 1 + · 1 message added
        scratch  | 2 ~ 1 -
        tools    | 1 + (added)
        3 fields changed

    (a conversation field's line ends with its summary).
    """
    diffs = list(diffs)
    names = [format_path(d.field, ()) for d in diffs]
    pad = max((len(n) for n in names), default=0)
    lines = []
    for name, diff in zip(names, diffs, strict=True):
        counts = {op: sum(1 for c in diff.changes if c.op == op) for op in ("add", "change", "remove")}
        parts = [f"{counts[op]} {_OP_SIGN[op]}" for op in ("add", "change", "remove") if counts[op]]
        suffix = f" ({diff.status})" if diff.status != "changed" else ""
        if diff.summary is not None:
            suffix += f" · {diff.summary}"
        lines.append(f"{name.ljust(pad)} | {' '.join(parts)}{suffix}")
    lines.append(f"{len(diffs)} field{'' if len(diffs) == 1 else 's'} changed")
    return "\n".join(lines)


def to_json(diffs: Iterable[FieldDiff]) -> List[dict]:
    """``diffs`` as JSON-safe data (``json.dumps`` accepts it with ``allow_nan=False``).

    ``[{"field": ..., "status": ..., "changes": [{"path": [...], "op": ..., "old": ...,
    "new": ...}]}]``: ``old`` only for ``remove``/``change``, ``new`` only for ``add``/``change``,
    ``"member": true`` for set members. Path steps and values use the tagged JSON encoding of
    :func:`qvc.codec.tagged.to_jsonable` (``{"$tuple": [...]}``, ``{"$float": "nan"}``, ...).
    A conversation field also has ``"summary"`` (:attr:`FieldDiff.summary`, the text) and
    ``"counts"`` (:attr:`FieldDiff.counts`).
    """
    result = []
    for diff in diffs:
        changes = []
        for c in diff.changes:
            where = f"state[{diff.field!r}]"
            item: Dict[str, Any] = {"path": [to_jsonable(step, where) for step in c.path], "op": c.op}
            if c.op in ("remove", "change"):
                item["old"] = to_jsonable(c.old, where)
            if c.op in ("add", "change"):
                item["new"] = to_jsonable(c.new, where)
            if c.member:
                item["member"] = True
            changes.append(item)
        item = {"field": diff.field, "status": diff.status, "changes": changes}
        if diff.counts is not None:
            item.update(summary=diff.summary, counts=dict(diff.counts))
        result.append(item)
    return result
