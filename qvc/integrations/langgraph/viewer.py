"""How readers show a LangGraph checkpoint: its channels decoded with LangGraph's serializer, as plain data.

Declared in ``pyproject.toml`` as the ``qvc.viewers`` entry point ``langgraph`` (the key
:class:`~qvc.integrations.langgraph.QvcSaver` writes into its checkpoints' header), so
``qvc show``, ``qvc diff``, ``qvc log -p``, ``qvc blame`` and ``qvc serve`` find it through
:mod:`qvc.store.viewers` without naming LangGraph; it is imported the first time such a
checkpoint is shown.

Every reader sees the same plain form (text and JSON alike): a LangChain message is a dict in
the shared conversation shape (``role``, ``content``, ``id``, ``tool_calls`` of an assistant
message as ``{"id", "name", "args"}``, ``tool_call_id`` and ``error`` of a tool result, ``name``,
then the other fields LangChain keeps that are set), and any other object the way LangGraph's
serializer writes it as JSON: a pydantic model as its fields (``model_dump(mode="json")``), a
dataclass, named tuple or ``Send`` as its fields, an enum as its value, a UUID, path, decimal or
pattern as its text. Never a ``repr``, never the stored bytes.

LangGraph's own channels, which drive the graph rather than hold its state (``__start__`` and
every other ``__``-prefixed name such as ``__pregel_tasks``, ``branch:to:NODE`` and the other
``branch:`` channels, ``join:`` channels), are left out (:func:`internal`), and so are pending
writes to them; ``--raw`` shows them, and ``qvc checkout --to`` writes them (through the editor).
A checkpoint's pending writes (the saver's, in the store's keyed writes) are shown by
:func:`view_writes`, the ``writes`` of :func:`view`, their values decoded the same way.
While the viewer decodes, LangGraph's serializer's warnings about the types it meets
("Deserializing unregistered type ...") are not logged: the viewer only reads values to show
them, the user's graph is where such types are registered.

Imports LangGraph and LangChain when they are installed, and :mod:`qvc.store`; without them it
shows the values from their serialized form (:mod:`.serialized`), saying so once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import enum
import ipaddress
import logging
import pathlib
import re
import threading
import uuid
from decimal import Decimal
from typing import Any, Sequence

from qvc.errors import CorruptionError
from qvc.integrations.langgraph.serialized import SERIALIZED, shaped
from qvc.integrations.langgraph.values import channel_values
from qvc.store.git_store import GitCheckpointStore
from qvc.store.viewers import note
from qvc.types import PendingWrite

try:
    from langchain_core.messages import BaseMessage
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer  # noqa: F401 (whether LangGraph reads them)
except ImportError:  # not installed: the values are shown from their serialized form
    BaseMessage = None

#: The header key of LangGraph checkpoints, under which this viewer is declared.
HEADER_KEY = "langgraph"
#: What readers are told once when LangGraph is not installed (:func:`view` shows the values from
#: their serialized form, :mod:`.serialized`).
NOT_INSTALLED = ("LangGraph is not installed: its checkpoints are shown from their serialized form; "
                 "pip install 'qvc[langgraph]' shows them fully")
# Values that pass through as they are: the readers' tagged JSON holds them.
_SCALARS = (str, int, float, bool, bytes, type(None), _dt.datetime, _dt.date, _dt.time, _dt.timedelta)
# Objects LangGraph's serializer writes as their text.
_TEXT_TYPES = (uuid.UUID, pathlib.PurePath, Decimal, ipaddress.IPv4Address, ipaddress.IPv6Address,
               ipaddress.IPv4Network, ipaddress.IPv6Network, ipaddress.IPv4Interface, ipaddress.IPv6Interface)


#: Prefixes of the channels LangGraph keeps for itself (see :func:`internal`).
INTERNAL_PREFIXES = ("__", "branch:", "join:")
# The logger of LangGraph's serializer, whose type warnings the viewer keeps quiet.
_SERDE_LOGGER = "langgraph.checkpoint.serde.jsonplus"
_decoding = threading.local()


class _WhileViewing(logging.Filter):
    """Drops the serializer's records logged in a thread while :func:`view` decodes there."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_decoding, "depth", 0)


_quiet_filter = _WhileViewing()
logging.getLogger(_SERDE_LOGGER).addFilter(_quiet_filter)


@contextlib.contextmanager
def _quiet():
    _decoding.depth = getattr(_decoding, "depth", 0) + 1
    try:
        yield
    finally:
        _decoding.depth -= 1


def internal(channel: str) -> bool:
    """Whether ``channel`` is one LangGraph keeps for itself (``__start__``, ``__pregel_tasks``,
    ``branch:to:NODE``, ``join:A+B:C``) rather than one of the graph's state."""
    return channel.startswith(INTERNAL_PREFIXES)


def view(store: GitCheckpointStore, sha: str, state: dict[str, Any], *, plain: bool = False) -> dict[str, Any]:
    """The channel values of the LangGraph checkpoint in commit ``sha``, decoded
    (:func:`~qvc.integrations.langgraph.values.channel_values`; ``state``, the stored
    ``[type, bytes]`` pairs, is read again from ``sha``) and shown as plain data (see the module
    docstring), whatever ``plain`` says: the text forms show messages by role and content too.
    LangGraph's internal channels (:func:`internal`) are left out; the serializer's type warnings
    are not logged meanwhile. Without LangGraph installed, the values are read from their
    serialized form (:data:`~qvc.integrations.langgraph.serialized.SERIALIZED`: the same shape,
    no object made) and readers are told so once (:data:`NOT_INSTALLED`). Raises
    :class:`~qvc.errors.CorruptionError` when a channel does not decode."""
    if BaseMessage is None:
        note(NOT_INSTALLED)
        values = channel_values(store, sha, SERIALIZED)
        return {name: value for name, value in values.items() if not internal(name)}
    with _quiet():
        values = channel_values(store, sha)
        return {name: plain_value(value) for name, value in values.items() if not internal(name)}


def view_writes(store: GitCheckpointStore, sha: str, writes: Sequence[PendingWrite], *,
                plain: bool = False) -> list[PendingWrite]:
    """The pending writes of the LangGraph checkpoint in commit ``sha`` as people read them
    (:data:`qvc.store.viewers.WritesViewer`): each value QvcSaver stored (``{"type", "value",
    "task_path"}``, the serializer's typed pair) decoded and made plain data as :func:`view` shows
    channels (from the serialized form without LangGraph, saying so once), in LangGraph's order
    (task path, then task id; a task's writes as written); writes to LangGraph's internal channels
    (:func:`internal`) left out; a value of another shape (the store's own ``put_writes``) as it is.
    Raises :class:`~qvc.errors.CorruptionError` when a value does not decode."""
    if BaseMessage is None:
        note(NOT_INSTALLED)
        serde: Any = SERIALIZED
    else:
        from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

        serde = JsonPlusSerializer()
    shown = []
    with _quiet():
        for w in writes:
            if internal(w.channel):
                continue
            value, path = w.value, ""
            if isinstance(value, dict) and isinstance(value.get("type"), str) and isinstance(value.get("value"), bytes):
                path = value.get("task_path") or ""
                try:
                    value = serde.loads_typed((value["type"], value["value"]))
                except (TypeError, ValueError, IndexError, KeyError) as exc:
                    raise CorruptionError(f"checkpoint {sha[:12]}: a pending write of task {w.task_id} to "
                                          f"{w.channel!r} does not decode: {exc}") from None
            shown.append(((str(path), w.task_id), PendingWrite(w.task_id, w.channel, plain_value(value))))
    shown.sort(key=lambda item: item[0])
    return [w for _, w in shown]


view.writes = view_writes  # type: ignore[attr-defined]  # how readers find it (qvc.store.viewers.view_writes)


def message_dict(message: BaseMessage) -> dict[str, Any]:
    """A LangChain message in the shared conversation shape (see the module docstring)."""
    return shaped(message.model_dump(mode="json"), message.type, plain_value)


def plain_value(value: Any) -> Any:
    """``value`` with the framework objects inside dicts, lists and tuples made plain data."""
    if isinstance(value, _SCALARS):
        return value
    if BaseMessage is not None and isinstance(value, BaseMessage):
        return message_dict(value)
    if isinstance(value, dict):
        return {k: plain_value(v) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_asdict"):  # a named tuple: its fields
        return plain_value(dict(value._asdict()))
    if isinstance(value, list):
        return [plain_value(v) for v in value]
    if isinstance(value, tuple):
        return tuple(plain_value(v) for v in value)
    if isinstance(value, (set, frozenset)):  # members are hashable, so plain already (or their text)
        return type(value)(v if isinstance(v, _SCALARS + (tuple,)) else str(plain_value(v)) for v in value)
    if isinstance(value, enum.Enum):
        return plain_value(value.value)
    if isinstance(value, _TEXT_TYPES):
        return str(value)
    if isinstance(value, re.Pattern):
        return value.pattern
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        return plain_value(dump(mode="json"))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain_value(getattr(value, f.name)) for f in dataclasses.fields(value)}
    fields = getattr(value, "__dict__", None)
    if isinstance(fields, dict) and not isinstance(value, type):  # Send, Interrupt and other plain classes
        return {k: plain_value(v) for k, v in fields.items() if not k.startswith("_")}
    slots = getattr(type(value), "__slots__", None)
    if slots:
        names = [slots] if isinstance(slots, str) else list(slots)
        return {n: plain_value(getattr(value, n, None)) for n in names if not n.startswith("_")}
    to_list = getattr(value, "tolist", None)  # numpy arrays and scalars
    if callable(to_list):
        return plain_value(to_list())
    return str(value)  # nothing LangGraph's serializer writes gets here
