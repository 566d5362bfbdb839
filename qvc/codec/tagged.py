"""Lossless tagged JSON: every value :mod:`qvc.codec.serde` round-trips, as JSON people can read and edit.

:func:`to_jsonable` / :func:`from_jsonable` convert between values and plain JSON data;
:func:`dumps_tagged` / :func:`loads_tagged` between values and JSON text. Reading back what was
written gives the same value, types included (``serde.dumps`` of both is identical). Built on
the public :mod:`json` API only. Imports: :mod:`qvc.errors`.

Plain JSON where it is exact: ``str``,
``int`` (any size), ``bool``, ``None``, ``list``, finite floats other than ``-0.0``, and dicts
whose keys are all strings (key order kept). Everything else is a *tag*, an object with one key
starting with a single ``$``::

    {"$bytes": "aGk="}                                   base64 (bytearray/memoryview read back as bytes)
    {"$tuple": [1, 2]}
    {"$set": [...]}  {"$frozenset": [...]}               members sorted by their JSON text
    {"$float": "nan" | "inf" | "-inf" | "-0.0"}          a NaN other than the canonical one adds
                                                         "bits": "<16 hex digits>" (its IEEE 754 bits)
    {"$datetime": "2026-11-29T10:00:00+01:00", "tz": "Europe/Paris"}
                                                         naive: no offset; fixed offset: no "tz";
                                                         zoneinfo: "tz" is the key (the offset must
                                                         match it); "fold": 1 only when fold is 1
    {"$date": "2026-11-29"}
    {"$time": "10:00:00+01:00"}                          "tz" (zoneinfo key) and "fold" as above
    {"$timedelta": {"days": 1, "seconds": 3, "microseconds": 0}}
    {"$dict": [[key, value], ...]}                       a dict with any non-str key, order kept

User dict keys that start with ``$`` are escaped by doubling the ``$`` (``"$ref"`` is written
``"$$ref"``), so user data is never mistaken for a tag. A tag object with unknown or extra keys,
or a value of the wrong shape, is an error naming the file and line.
"""

from __future__ import annotations

import binascii
import datetime as _dt
import math
import re
import struct
from typing import Any, Callable

from qvc.errors import InvalidInputError, SerializationError
from qvc.lazy import Pattern

_CANONICAL_NAN_BITS = struct.unpack(">Q", struct.pack(">d", math.nan))[0]
_TAG_EXTRA_KEYS = {
    "$bytes": (), "$tuple": (), "$set": (), "$frozenset": (), "$dict": (), "$date": (), "$timedelta": (),
    "$float": ("bits",), "$datetime": ("tz", "fold"), "$time": ("tz", "fold"),
}
_INT_DIGITS_BITS = 13_000  # below this many bits str(int) never hits Python's int/str digit limit
#: A JSON string (skipped whole) or an object's brace: enough to pair braces in valid JSON text.
_BRACE_OR_STRING = Pattern(r'"[^"\\]*(?:\\.[^"\\]*)*"|[{}]', re.S)


# -- encoding ------------------------------------------------------------------------------------


def to_jsonable(value: Any, path: str = "value") -> Any:
    """Return ``value`` as plain JSON data (dicts, lists, str, int, float, bool, None), tagged where needed.

    Lossless for every type :mod:`qvc.codec.serde` round-trips; :func:`from_jsonable` is the inverse.
    Raises :class:`SerializationError` naming the path below ``path`` for anything else.
    """
    try:
        return _enc(value, path)
    except RecursionError:
        raise SerializationError(f"{path}: value nested too deeply") from None


def _tz_key(tz: _dt.tzinfo | None, path: str) -> str | None:
    """The zoneinfo key of ``tz``, or None for no tz / a fixed offset (which isoformat carries)."""
    if tz is None:
        return None
    key = getattr(tz, "key", None)
    if isinstance(key, str):
        return key
    if isinstance(tz, _dt.timezone):
        return None
    raise SerializationError(f"{path}: object of type {type(tz).__name__} (tzinfo) is not serializable")


def _sort_text(item: Any) -> str:
    import json  # (json and base64 load on first use: a command that shows no value needs neither)

    return json.dumps(item, sort_keys=True, ensure_ascii=False)


def _enc(v: Any, path: str) -> Any:
    t = type(v)
    if v is None or t is bool or t is str:
        return v
    if t is int:
        if v.bit_length() > _INT_DIGITS_BITS:
            try:
                str(v)
            except ValueError:
                raise SerializationError(f"{path}: int too large ({v.bit_length()} bits)") from None
        return v
    if t is float:
        if math.isnan(v):
            bits = struct.unpack(">Q", struct.pack(">d", v))[0]
            return {"$float": "nan"} if bits == _CANONICAL_NAN_BITS else {"$float": "nan", "bits": f"{bits:016x}"}
        if math.isinf(v):
            return {"$float": "inf" if v > 0 else "-inf"}
        if v == 0.0 and math.copysign(1.0, v) < 0:
            return {"$float": "-0.0"}
        return v
    if t is bytes or t is bytearray or t is memoryview:
        import base64

        return {"$bytes": base64.b64encode(bytes(v)).decode("ascii")}
    if t is list:
        return [_enc(x, f"{path}[{i}]") for i, x in enumerate(v)]
    if t is tuple:
        return {"$tuple": [_enc(x, f"{path}[{i}]") for i, x in enumerate(v)]}
    if t is set or t is frozenset:
        items = [_enc(x, f"{path}[{i}]") for i, x in enumerate(v)]
        items.sort(key=_sort_text)
        return {"$set" if t is set else "$frozenset": items}
    if t is dict:
        if all(type(k) is str for k in v):
            return {("$" + k if k.startswith("$") else k): _enc(x, f"{path}[{k!r}]") for k, x in v.items()}
        return {"$dict": [[_enc(k, f"{path}[{k!r}] (key)"), _enc(x, f"{path}[{k!r}]")] for k, x in v.items()]}
    if t is _dt.date:
        return {"$date": v.isoformat()}
    if t is _dt.datetime or t is _dt.time:
        key = _tz_key(v.tzinfo, path)  # first: it rejects a zone that isoformat() would choke on
        out: dict = {"$datetime" if t is _dt.datetime else "$time": v.isoformat()}
        if key is not None:
            out["tz"] = key
        if v.fold:
            out["fold"] = v.fold
        return out
    if t is _dt.timedelta:
        return {"$timedelta": {"days": v.days, "seconds": v.seconds, "microseconds": v.microseconds}}
    raise SerializationError(f"{path}: object of type {t.__name__} is not serializable")


def dumps_tagged(value: Any, path: str = "value") -> str:
    """Pretty JSON text (indent 2, UTF-8 characters kept, trailing newline) of :func:`to_jsonable`.

    The text always encodes to UTF-8: strings holding lone surrogates raise :class:`SerializationError`.
    """
    import json

    data = to_jsonable(value, path)
    try:
        text = json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    except RecursionError:
        raise SerializationError(f"{path}: value nested too deeply") from None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise SerializationError(f"{path}: a string holds a lone surrogate (not valid Unicode)") from None
    return text


# -- decoding ------------------------------------------------------------------------------------


def _line(s: str, pos: int) -> int:
    return s.count("\n", 0, pos) + 1


def _hashable(item: Any) -> bool:
    try:
        hash(item)
    except TypeError:
        return False
    return True


def _tz_from_key(key: Any, bad: Callable[[str], InvalidInputError]) -> _dt.tzinfo:
    if not isinstance(key, str) or not key:
        raise bad('"tz" must be a zoneinfo key such as "Europe/Paris"')
    import zoneinfo  # deferred: start-up time (only zoned datetimes need it)

    try:
        return zoneinfo.ZoneInfo(key)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise bad(f"unknown time zone {key!r}") from None


def _fold(obj: dict, bad: Callable[[str], InvalidInputError]) -> int:
    fold = obj.get("fold", 0)
    if type(fold) is not int or fold not in (0, 1):
        raise bad('"fold" must be 0 or 1')
    return fold


def _decode_tag(tag: str, obj: dict, bad: Callable[[str], InvalidInputError]) -> Any:
    body = obj[tag]
    if tag == "$bytes":
        if not isinstance(body, str):
            raise bad("expected a base64 string")
        import base64

        try:
            return base64.b64decode(body.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            raise bad("invalid base64") from None
    if tag in ("$tuple", "$set", "$frozenset"):
        if not isinstance(body, list):
            raise bad("expected a list")
        if tag == "$tuple":
            return tuple(body)
        for item in body:
            if not _hashable(item):
                raise bad(f"unhashable member of type {type(item).__name__}")
        return set(body) if tag == "$set" else frozenset(body)
    if tag == "$dict":
        if not isinstance(body, list):
            raise bad("expected a list of [key, value] pairs")
        out: dict = {}
        for pair in body:
            if not isinstance(pair, list) or len(pair) != 2:
                raise bad("expected a list of [key, value] pairs")
            key, val = pair
            if not _hashable(key):
                raise bad(f"unhashable key of type {type(key).__name__}")
            if key in out:
                raise bad(f"duplicate key {key!r}")
            out[key] = val
        return out
    if tag == "$float":
        if body == "nan" and "bits" in obj:
            bits = obj["bits"]
            if not isinstance(bits, str) or not re.fullmatch(r"[0-9a-fA-F]{16}", bits):
                raise bad('"bits" must be 16 hex digits')
            value = struct.unpack(">d", struct.pack(">Q", int(bits, 16)))[0]
            if not math.isnan(value):
                raise bad('"bits" is not a NaN')
            return value
        if "bits" in obj:
            raise bad('"bits" is only allowed with "nan"')
        values = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "-0.0": -0.0}
        if not isinstance(body, str) or body not in values:
            raise bad('expected "nan", "inf", "-inf" or "-0.0"')
        return values[body]
    if tag == "$date":
        if not isinstance(body, str):
            raise bad("expected an ISO date string")
        try:
            return _dt.date.fromisoformat(body)
        except ValueError as exc:
            raise bad(str(exc)) from None
    if tag == "$timedelta":
        if not isinstance(body, dict) or not set(body) <= {"days", "seconds", "microseconds"} or any(
                type(x) is not int for x in body.values()):
            raise bad('expected {"days": int, "seconds": int, "microseconds": int}')
        try:
            return _dt.timedelta(**body)
        except OverflowError as exc:
            raise bad(str(exc)) from None
    if tag in ("$datetime", "$time"):
        kind = _dt.datetime if tag == "$datetime" else _dt.time
        if not isinstance(body, str):
            raise bad(f"expected an ISO {kind.__name__} string")
        try:
            parsed = kind.fromisoformat(body)
        except ValueError as exc:
            raise bad(str(exc)) from None
        fold = _fold(obj, bad)
        if "tz" not in obj:
            return parsed.replace(fold=fold)
        zone = _tz_from_key(obj["tz"], bad)
        value = parsed.replace(tzinfo=zone, fold=fold)
        if parsed.tzinfo is not None:
            if kind is _dt.time:
                raise bad('a $time with "tz" carries no UTC offset')
            if parsed.utcoffset() != value.utcoffset():
                raise bad(f"UTC offset {parsed.utcoffset()} does not match {obj['tz']} ({value.utcoffset()})")
        return value
    raise bad("unknown tag")  # pragma: no cover - callers check the tag first


def _decode_object(pairs: list, bad: Callable[[str], InvalidInputError]) -> Any:
    """Turn the (key, decoded value) pairs of one JSON object into a value; ``bad`` makes the error."""
    seen: set = set()
    tags = []
    for key, _ in pairs:
        if key in seen:
            raise bad(f"duplicate key {key!r}")
        seen.add(key)
        if key.startswith("$") and not key.startswith("$$"):
            tags.append(key)
    if not tags:
        return {(k[1:] if k.startswith("$") else k): v for k, v in pairs}
    if len(tags) > 1:
        raise bad(f"one object holds several tags ({', '.join(tags)}); escape a user key $x as $$x")
    tag = tags[0]
    if tag not in _TAG_EXTRA_KEYS:
        raise bad(f"unknown tag {tag!r} (known: {', '.join(_TAG_EXTRA_KEYS)}; escape a user key $x as $$x)")
    extra = [k for k in seen if k != tag and k not in _TAG_EXTRA_KEYS[tag]]
    if extra:
        raise bad(f"malformed {tag} tag: unexpected key(s) {', '.join(sorted(extra))}")

    def bad_tag(msg: str) -> InvalidInputError:
        return bad(f"malformed {tag} tag: {msg}")

    return _decode_tag(tag, dict(pairs), bad_tag)


def _object_start(text: str, n: int) -> int:
    """Where the ``{`` of the ``n``-th object (from 0) to close in ``text`` stands.

    The decoder finishes objects in the order their ``}`` appear, so the ``n``-th call of its
    ``object_pairs_hook`` is the ``n``-th closing brace outside strings. Only run for an error.
    """
    opened: list[int] = []
    closed = 0
    for match in _BRACE_OR_STRING.finditer(text):
        char = match.group()
        if char == "{":
            opened.append(match.start())
        elif char == "}" and opened:
            start = opened.pop()
            if closed == n:
                return start
            closed += 1
    return 0  # pragma: no cover - the decoder closed that object, so the scan finds it


def loads_tagged(text: str, where: str = "value") -> Any:
    """Parse JSON ``text`` written by :func:`dumps_tagged` (or by hand) back into the value.

    Raises :class:`InvalidInputError` naming ``where`` and the line (of a malformed tag's
    object: its opening brace) for invalid JSON or a malformed tag. ``NaN``/``Infinity``
    literals are accepted as floats.
    """
    import json

    closed = 0

    def decode_object(pairs: list) -> Any:  # tags decode bottom-up, as each object closes
        nonlocal closed
        n = closed
        closed += 1

        def bad(msg: str) -> InvalidInputError:
            return InvalidInputError(f"{where}: line {_line(text, _object_start(text, n))}: {msg}")

        return _decode_object(pairs, bad)

    try:
        return json.JSONDecoder(object_pairs_hook=decode_object).decode(text)
    except InvalidInputError:
        raise
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"{where}: line {exc.lineno}: invalid JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise InvalidInputError(f"{where}: JSON nested too deeply") from None
    except ValueError as exc:  # e.g. an int literal beyond Python's int/str digit limit
        raise InvalidInputError(f"{where}: invalid JSON: {exc}") from None


def from_jsonable(data: Any, where: str = "value") -> Any:
    """Inverse of :func:`to_jsonable` for data already parsed as plain JSON values."""
    import json

    return loads_tagged(json.dumps(data, allow_nan=True), where)
