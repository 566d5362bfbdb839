"""LangGraph's stored values read as plain data without LangGraph: for a repository a LangGraph
graph wrote, inspected where LangGraph is not installed (a clone one only reads).

:data:`SERIALIZED` reads the ``[type, bytes]`` pairs :class:`~qvc.integrations.langgraph.QvcSaver`
stores the way LangGraph's ``JsonPlusSerializer.loads_typed`` does, with qvc's own ``msgpack``
instead of ``ormsgpack``, and makes no object: each of the serializer's msgpack extensions
(``(module, class, arguments)``) becomes what it holds. A LangChain message (a pydantic model of
``langchain_core.messages``) becomes a dict in the shared conversation shape (:func:`shaped`, as
the viewer shows one from the object), another pydantic model, named tuple or dataclass its
fields, a UUID, path, decimal or address its text, a date or time the ``datetime`` value, an
enum its value, a set its members. Values LangGraph pickled are named, not unpickled.

Imports no framework: only :mod:`msgpack` and :mod:`qvc.errors`.
"""

from __future__ import annotations

import datetime as _dt
import json
from typing import Any, Callable

import msgpack

from qvc.errors import CorruptionError

#: The LangChain message types and the conversation role each is shown as.
ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool", "function": "tool",
         "HumanMessageChunk": "user", "AIMessageChunk": "assistant", "SystemMessageChunk": "system",
         "ToolMessageChunk": "tool", "FunctionMessageChunk": "tool"}
# Fields of a message's dump the shared shape shows under its own names (or drops: ``type``).
_SHAPED = {"type", "role", "content", "id", "tool_calls", "tool_call_id", "name", "status"}

# LangGraph's msgpack extension codes (langgraph.checkpoint.serde.jsonplus)
_SINGLE_ARG, _POS_ARGS, _KW_ARGS, _METHOD, _PYDANTIC_V1, _PYDANTIC_V2, _NUMPY, _DELTA = range(8)
_MESSAGES = "langchain_core.messages"


def _same(value: Any) -> Any:
    return value


def shaped(dumped: dict[str, Any], kind: str | None = None, plain: Callable[[Any], Any] = _same) -> dict[str, Any]:
    """A LangChain message's fields (``dumped``, as its ``model_dump`` gives them; ``kind``: its
    ``type`` when the dump lacks it) as a dict in the shared conversation shape: ``role``,
    ``content``, ``id``, an assistant's ``tool_calls`` as ``{"id", "name", "args"}``, a tool
    result's ``tool_call_id`` and ``error``, ``name``, then the other fields that are set;
    ``plain`` makes nested values plain data."""
    kind = dumped.get("type") or kind
    role = dumped.get("role") if kind in ("chat", "ChatMessageChunk") else ROLES.get(kind, kind)
    out: dict[str, Any] = {"role": role, "content": plain(dumped.get("content", "")), "id": dumped.get("id")}
    if role == "assistant":
        out["tool_calls"] = [{"id": c.get("id"), "name": c.get("name"), "args": plain(c.get("args") or {})}
                             for c in dumped.get("tool_calls") or [] if isinstance(c, dict)]
    if dumped.get("tool_call_id") is not None:
        out["tool_call_id"] = dumped["tool_call_id"]
    if dumped.get("name"):
        out["name"] = dumped["name"]
    if dumped.get("status") == "error":
        out["error"] = True
    if role not in ("system", "user", "assistant", "tool"):
        out["type"] = kind
    for key, value in dumped.items():  # what else LangChain keeps, when set
        if key not in _SHAPED and value not in (None, {}, []):
            out[key] = plain(value)
    return out


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, ext_hook=_ext, raw=False, strict_map_key=False)


def _ext(code: int, data: bytes) -> Any:
    """One of LangGraph's msgpack extensions as the plain data it holds (see the module docstring)."""
    if code == _DELTA:
        return _unpack(data)
    if code == _NUMPY:
        dtype, shape = _unpack(data)[:2]
        return f"<array of {dtype}, shape {list(shape)}>"
    found = _unpack(data)
    if not isinstance(found, (list, tuple)) or len(found) < 3:
        return found
    module, name, arg = found[0], found[1], found[2]
    if code in (_PYDANTIC_V1, _PYDANTIC_V2, _KW_ARGS) and isinstance(arg, dict):
        if isinstance(module, str) and module.startswith(_MESSAGES):
            return shaped(arg)
        if (module, name) == ("datetime", "time"):
            return _dt.time(**{k: v for k, v in arg.items() if k != "tzinfo" or v is None})
        return arg
    if code == _METHOD:
        if (module, name) == ("datetime", "datetime") and isinstance(arg, str):
            return _dt.datetime.fromisoformat(arg)
        return arg
    if code == _POS_ARGS:
        args = list(arg) if isinstance(arg, (list, tuple)) else [arg]
        if module == "datetime" and name in ("date", "timedelta"):
            return getattr(_dt, name)(*args)
        if module == "re" and name == "compile":
            return args[0]
        if module == "pathlib":
            return "/".join(str(a) for a in args).replace("//", "/")
        if name == "Send":
            return {"node": args[0], "arg": args[1]} if len(args) >= 2 else args
        return args
    if code == _SINGLE_ARG:
        if name in ("set", "frozenset", "deque") and isinstance(arg, (list, tuple)):
            members = list(arg)
            try:
                return set(members) if name == "set" else frozenset(members) if name == "frozenset" else members
            except TypeError:  # unhashable members: kept as a list
                return members
        if name == "UUID" and isinstance(arg, str) and len(arg) == 32:
            return f"{arg[:8]}-{arg[8:12]}-{arg[12:16]}-{arg[16:20]}-{arg[20:]}"
        return arg
    return arg


class SerializedValues:
    """LangGraph's ``loads_typed`` without LangGraph: stored pairs as plain data (see the module
    docstring). Raises :class:`~qvc.errors.CorruptionError` for a pair that does not decode."""

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        """The value of the pair ``(type, bytes)`` as plain data."""
        kind, raw = data
        try:
            if kind == "null":
                return None
            if kind in ("bytes", "bytearray"):
                return bytes(raw)
            if kind == "json":
                return json.loads(raw)
            if kind == "msgpack":
                return _unpack(raw)
        except (ValueError, TypeError, IndexError, KeyError) as exc:
            raise CorruptionError(f"a {kind} value does not decode: {exc}") from None
        if kind == "pickle":
            return f"<pickled value, {len(raw)} bytes: LangGraph reads it>"
        raise CorruptionError(f"unknown LangGraph serialization type {kind!r}")


#: The reader :func:`~qvc.integrations.langgraph.values.channel_values` takes as ``serde``.
SERIALIZED = SerializedValues()
