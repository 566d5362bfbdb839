"""msgpack serialization of state values, with exact round-trips and no pickle.

Round-trips exactly: ``str``, ``bytes``, ``int`` of any size, ``float`` (NaN and infinities
included), ``bool``, ``None``, ``list``, ``tuple``, ``dict`` (keys of any of these types),
``set``, ``frozenset``, ``datetime`` (naive, fixed-offset or zoneinfo), ``date``, ``time``
and ``timedelta``. Anything else raises :class:`~qvc.errors.SerializationError` naming the
field path, e.g. ``state_data["tools"][3]["result"]: object of type Foo is not serializable``.
``bytearray`` and ``memoryview`` are byte strings to msgpack: they are stored, and read back,
as ``bytes``. Extension types may nest at most ``MAX_EXT_DEPTH`` levels.

Decoding never executes code: the extension types above are the only ones recognized, and
malformed bytes raise :class:`~qvc.errors.CorruptionError`.
"""

from __future__ import annotations

import datetime as _dt
import threading
from typing import Any

import msgpack

from qvc.errors import CorruptionError, SerializationError

# Extension type codes. Stable: they are part of the on-disk format.
EXT_TUPLE = 1
EXT_SET = 2
EXT_FROZENSET = 3
EXT_DATETIME = 4
EXT_DATE = 5
EXT_TIME = 6
EXT_TIMEDELTA = 7
EXT_BIGINT = 8

_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1
#: How deeply tuples, sets, datetimes and the like may nest inside each other. Each level is
#: a nested msgpack call, so unbounded nesting would exhaust the C stack.
MAX_EXT_DEPTH = 100
_depth = threading.local()


def _enter(what: str) -> int:
    """Count one more level of nesting (a plain function: this is on every field's path)."""
    level = getattr(_depth, "n", 0)
    if level > MAX_EXT_DEPTH:  # level 0 is the value itself, not an extension
        raise _TooDeep(f"{what} nested more than {MAX_EXT_DEPTH} levels deep")
    _depth.n = level + 1
    return level


class _Unserializable(TypeError):
    pass


class _TooDeep(ValueError):
    pass


def _tz_fields(tz: _dt.tzinfo | None, sample: Any) -> list:
    if tz is None:
        return [None, None]
    key = getattr(tz, "key", None)  # zoneinfo.ZoneInfo
    if isinstance(key, str):
        return [None, key]
    offset = tz.utcoffset(sample)
    if offset is None or not isinstance(tz, _dt.timezone):
        raise _Unserializable(f"object of type {type(tz).__name__} (tzinfo) is not serializable")
    return [offset // _dt.timedelta(microseconds=1), None]


def _tz_from(offset_us: int | None, key: str | None) -> _dt.tzinfo | None:
    if key is not None:
        import zoneinfo  # deferred: start-up time (`import qvc` loads this module; few values are zoned)

        return zoneinfo.ZoneInfo(key)
    if offset_us is None:
        return None
    return _dt.timezone(_dt.timedelta(microseconds=offset_us))


def _pack_inner(obj: Any) -> bytes:
    level = _enter("value")
    try:
        return msgpack.packb(obj, default=_default, strict_types=True, use_bin_type=True)
    finally:
        _depth.n = level


def _pack_members(members: Any) -> bytes:
    """A set's members as a msgpack array in a canonical order (sorted by their encoding), so
    equal sets always encode to the same bytes, whatever their iteration order."""
    packed = sorted(_pack_inner(m) for m in members)
    return msgpack.Packer().pack_array_header(len(packed)) + b"".join(packed)


def _default(obj: Any) -> msgpack.ExtType:
    t = type(obj)
    if t is tuple:
        return msgpack.ExtType(EXT_TUPLE, _pack_inner(list(obj)))
    if t is set:
        return msgpack.ExtType(EXT_SET, _pack_members(obj))
    if t is frozenset:
        return msgpack.ExtType(EXT_FROZENSET, _pack_members(obj))
    if t is int:  # only reached for ints msgpack cannot hold natively (see _widen)
        return msgpack.ExtType(EXT_BIGINT, str(obj).encode())
    if t is _dt.datetime:
        fields = [obj.replace(tzinfo=None).isoformat(), obj.fold, *_tz_fields(obj.tzinfo, obj)]
        return msgpack.ExtType(EXT_DATETIME, _pack_inner(fields))
    if t is _dt.date:
        return msgpack.ExtType(EXT_DATE, obj.isoformat().encode())
    if t is _dt.time:
        fields = [obj.replace(tzinfo=None).isoformat(), obj.fold, *_tz_fields(obj.tzinfo, None)]
        return msgpack.ExtType(EXT_TIME, _pack_inner(fields))
    if t is _dt.timedelta:
        return msgpack.ExtType(EXT_TIMEDELTA, _pack_inner([obj.days, obj.seconds, obj.microseconds]))
    raise _Unserializable(f"object of type {t.__name__} is not serializable")


def _ext_hook(code: int, data: bytes) -> Any:
    if code == EXT_TUPLE:
        return tuple(_unpack(data))
    if code == EXT_SET:
        return set(_unpack(data))
    if code == EXT_FROZENSET:
        return frozenset(_unpack(data))
    if code == EXT_BIGINT:
        return int(data.decode("ascii"))
    if code == EXT_DATETIME:
        iso, fold, offset, key = _unpack(data)
        return _dt.datetime.fromisoformat(iso).replace(tzinfo=_tz_from(offset, key), fold=fold)
    if code == EXT_DATE:
        return _dt.date.fromisoformat(data.decode("ascii"))
    if code == EXT_TIME:
        iso, fold, offset, key = _unpack(data)
        return _dt.time.fromisoformat(iso).replace(tzinfo=_tz_from(offset, key), fold=fold)
    if code == EXT_TIMEDELTA:
        days, seconds, micros = _unpack(data)
        return _dt.timedelta(days=days, seconds=seconds, microseconds=micros)
    raise ValueError(f"unknown msgpack extension type {code}")


def _unpack(data: bytes) -> Any:
    level = _enter("msgpack data")
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_ext_hook, use_list=True)
    finally:
        _depth.n = level


def _describe(path: str, exc: BaseException) -> str:
    return f"{path}: {exc}"


def _key_repr(key: Any) -> str:
    return f"[{key!r}]" if not isinstance(key, str) else f'["{key}"]'


def _widen(value: Any, path: str) -> Any:
    """Slow path: return ``value`` with out-of-range ints made explicit, or raise with a path."""
    t = type(value)
    if t is int:
        return msgpack.ExtType(EXT_BIGINT, str(value).encode()) if not _INT_MIN <= value <= _INT_MAX else value
    if t is list:
        return [_widen(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if t in (tuple, set, frozenset):
        items = [_widen(v, f"{path}[{i}]") for i, v in enumerate(value)]
        if t is tuple:
            return msgpack.ExtType(EXT_TUPLE, _pack_inner(items))
        return msgpack.ExtType(EXT_SET if t is set else EXT_FROZENSET, _pack_members(items))
    if t is dict:
        out = {}
        for k, v in value.items():
            wk = _widen(k, f"{path}{_key_repr(k)} (key)")
            if isinstance(wk, (list, dict)):
                raise SerializationError(f"{path}{_key_repr(k)}: unhashable key of type {type(k).__name__}")
            out[wk] = _widen(v, f"{path}{_key_repr(k)}")
        return out
    if t in (str, bytes, float, bool, type(None)):
        return value
    try:
        return _default(value)
    except _Unserializable as exc:
        raise SerializationError(_describe(path, exc)) from None


def dumps(value: Any, path: str = "value") -> bytes:
    """Serialize ``value``; raise :class:`SerializationError` naming ``path`` and below."""
    try:
        return _pack_inner(value)
    except _TooDeep as exc:
        raise SerializationError(_describe(path, exc)) from None
    except (_Unserializable, OverflowError, TypeError, ValueError):
        pass
    widened = _widen(value, path)
    try:
        return _pack_inner(widened)
    except (_Unserializable, OverflowError, TypeError, ValueError) as exc:  # pragma: no cover - defensive
        raise SerializationError(_describe(path, exc)) from None


def loads(data: bytes, what: str = "object") -> Any:
    """Decode bytes written by :func:`dumps`; raise :class:`CorruptionError` naming ``what``."""
    try:  # the outermost value is no extension: only the ext hook's nested calls count depth
        return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_ext_hook, use_list=True)
    except RecursionError:
        raise CorruptionError(f"{what}: msgpack data nested too deeply") from None
    except Exception as exc:  # msgpack raises many unrelated types on hostile input
        raise CorruptionError(f"{what}: cannot decode msgpack data ({type(exc).__name__}: {exc})") from None
