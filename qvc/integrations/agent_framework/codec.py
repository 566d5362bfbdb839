"""A ``WorkflowCheckpoint`` as a qvc checkpoint's fields, and back (:mod:`.layout` says what the fields hold).

:func:`encode_checkpoint` turns a checkpoint into ``(state_data, metadata, step, parent id)``;
:func:`decode_checkpoint` turns a stored checkpoint's fields back into an equal ``WorkflowCheckpoint``,
new objects each time. Values qvc's codec keeps exactly are stored as they are; anything else is
pickled into the framework's envelope and decoded by the framework's ``decode_checkpoint_value``, with
the same restricted unpickler and allow-list of types as ``FileCheckpointStorage`` (built-in value types,
the framework's own types, types registered with ``register_checkpoint_type``, and the storage's
``allowed_checkpoint_types``). Every envelope is decoded once when it is written, so a checkpoint that
could not be loaded is refused at save time, as the framework's file storage does.

``decode_checkpoint_value`` lives in the framework's ``_workflows._checkpoint_encoding`` module, where
every checkpoint storage of the framework's (file, Cosmos DB) takes it from: one decoder, one allow-list.

Imports the framework (``agent_framework``), :mod:`qvc.errors` and :mod:`.layout`.
"""

from __future__ import annotations

import base64
import datetime as _dt
import pickle
from typing import Any, Dict, FrozenSet, Mapping, Optional, Tuple
from zoneinfo import ZoneInfo

from agent_framework import WorkflowCheckpoint, WorkflowEvent, WorkflowMessage
from agent_framework._workflows._checkpoint_encoding import decode_checkpoint_value
from agent_framework.exceptions import WorkflowCheckpointException

from qvc.errors import CorruptionError, InvalidInputError, SerializationError, UnknownCheckpointError
from qvc.integrations.agent_framework.layout import (
    BOOKKEEPING,
    EDGE_STATE,
    EDGE_STATE_KEY,
    EXECUTOR_STATE_KEY,
    EXECUTOR_STATES,
    GRAPH,
    ITERATION,
    MESSAGES,
    METADATA,
    PENDING,
    PICKLED,
    RAW,
    RAW_STATE,
    SOURCE,
    STATE,
    TYPE,
    check_name,
    is_envelope,
)


class CheckpointEncodingError(SerializationError, WorkflowCheckpointException):
    """A checkpoint value cannot be stored, or would not load under the storage's allowed types
    (a :class:`~qvc.errors.SerializationError` and the framework's ``WorkflowCheckpointException``)."""


class CheckpointDecodingError(CorruptionError, WorkflowCheckpointException):
    """A stored checkpoint does not decode (a damaged value, or a type the allow-list refuses)."""


class CheckpointNotFoundError(UnknownCheckpointError, WorkflowCheckpointException):
    """No workflow checkpoint has that id (a :class:`~qvc.errors.UnknownCheckpointError` and the
    framework's ``WorkflowCheckpointException``, which ``load`` raises for an unknown id)."""


class InvalidCheckpointError(InvalidInputError, WorkflowCheckpointException):
    """What was given is not a checkpoint the storage can keep (not a ``WorkflowCheckpoint``, an empty
    id or workflow name)."""


_SCALARS = frozenset({str, int, float, bool, type(None), bytes})
_PLAIN_TIMES = frozenset({_dt.date, _dt.timedelta})
_ZONED_TIMES = frozenset({_dt.datetime, _dt.time})


def _key_ok(key: Any) -> bool:
    """Whether qvc's codec keeps ``key`` exactly as a dict key."""
    t = type(key)
    return t in _SCALARS or (t is tuple and all(_key_ok(k) for k in key))


def _type_key(value: Any) -> str:
    t = type(value)
    return f"{t.__module__}:{t.__qualname__}"


class Encoder:
    """Values to what qvc stores (see the module docstring); envelopes checked against ``allowed``."""

    def __init__(self, allowed: FrozenSet[str]) -> None:
        self.allowed = allowed

    def value(self, value: Any, path: str) -> Any:
        """``value`` as stored: itself where qvc's codec keeps it exactly, containers rebuilt, the rest
        in envelopes. Raises :class:`CheckpointEncodingError` naming ``path``."""
        t = type(value)
        if t in _SCALARS or t in _PLAIN_TIMES:
            return value
        if t in _ZONED_TIMES:
            tz = value.tzinfo
            return value if tz is None or type(tz) in (_dt.timezone, ZoneInfo) else self.envelope(value, path)
        if t is list:
            return [self.value(v, f"{path}[{i}]") for i, v in enumerate(value)]
        if t is tuple:
            return tuple(self.value(v, f"{path}[{i}]") for i, v in enumerate(value))
        if t is set or t is frozenset:
            return value if all(type(v) in _SCALARS for v in value) else self.envelope(value, path)
        if t is dict:
            if not all(_key_ok(k) for k in value) or PICKLED in value or TYPE in value:
                return self.envelope(value, path)  # as the framework's encoder does with its marker keys
            return {k: self.value(v, f"{path}[{k!r}]") for k, v in value.items()}
        return self.envelope(value, path)

    def envelope(self, value: Any, path: str) -> Dict[str, Any]:
        """``value`` pickled into the framework's envelope, refused unless it decodes under the allow-list."""
        try:
            data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise CheckpointEncodingError(f"{path}: {type(value).__name__} cannot be pickled: {exc}") from None
        env = {PICKLED: data, TYPE: _type_key(value)}
        try:
            unpickle(env, self.allowed)
        except CheckpointDecodingError as exc:
            raise CheckpointEncodingError(
                f"{path}: {env[TYPE]} would not load under this storage's allowed types ({exc.__cause__ or exc}); "
                "register it with agent_framework.register_checkpoint_type or pass it in allowed_checkpoint_types "
                "('module:qualname')") from None
        return env


def unpickle(env: Mapping[str, Any], allowed: FrozenSet[str]) -> Any:
    """The value of an envelope, through the framework's restricted decoder (raw bytes, or base64 text
    as the framework's file storage writes them)."""
    data = env[PICKLED]
    text = base64.b64encode(data).decode("ascii") if isinstance(data, bytes) else data
    try:
        return decode_checkpoint_value({PICKLED: text, TYPE: env[TYPE]}, allowed_types=allowed)
    except Exception as exc:
        raise CheckpointDecodingError(f"a pickled {env.get(TYPE)} does not load: {exc}") from exc


def decode_value(value: Any, allowed: FrozenSet[str]) -> Any:
    """A stored value back as the framework's: envelopes decoded, every container a new object."""
    t = type(value)
    if t is dict:
        if is_envelope(value):
            return unpickle(value, allowed)
        return {k: decode_value(v, allowed) for k, v in value.items()}
    if t is list:
        return [decode_value(v, allowed) for v in value]
    if t is tuple:
        return tuple(decode_value(v, allowed) for v in value)
    if t is set:
        return set(value)
    return value


# -- the framework's records ------------------------------------------------------------------------


def _plain_record(value: Any, cls: type) -> bool:
    """Whether ``value`` is exactly a ``cls`` that pickle keeps as its ``__dict__`` (no slots, no
    custom state): then its attributes are stored one by one, readable, and set back the same way."""
    return (type(value) is cls and hasattr(value, "__dict__") and "__slots__" not in cls.__dict__
            and cls.__reduce_ex__ is object.__reduce_ex__ and cls.__getstate__ is object.__getstate__
            and not hasattr(cls, "__setstate__"))


def _message(enc: Encoder, item: Any, path: str) -> Dict[str, Any]:
    if type(item) is WorkflowMessage:
        return {"message": {k: enc.value(v, f"{path}.{k}") for k, v in item.to_dict().items()}}
    return {"value": enc.value(item, path)}


def _event(enc: Encoder, item: Any, path: str) -> Dict[str, Any]:
    if not _plain_record(item, WorkflowEvent):
        return {"value": enc.value(item, path)}
    out: Dict[str, Any] = {"event": {k: enc.value(v, f"{path}.{k}") for k, v in vars(item).items()}}
    if item.type == "request_info":  # what the viewer shows of the types (stored as pickled classes)
        out["about"] = {k: f"{t.__module__}:{t.__qualname__}" for k, t in
                        (("request_type", vars(item).get("_request_type")),
                         ("response_type", vars(item).get("_response_type"))) if isinstance(t, type)}
    return out


def _decode_item(item: Any, allowed: FrozenSet[str], what: str) -> Any:
    if not isinstance(item, dict):
        raise CheckpointDecodingError(f"{what}: an item is not a dict")
    if "message" in item:
        try:
            return WorkflowMessage.from_dict(decode_value(item["message"], allowed))
        except (KeyError, ValueError, TypeError) as exc:
            raise CheckpointDecodingError(f"{what}: a message does not decode: {exc}") from None
    if "event" in item:
        event = WorkflowEvent.__new__(WorkflowEvent)
        event.__dict__.update(decode_value(item["event"], allowed))
        return event
    if "value" in item:
        return decode_value(item["value"], allowed)
    raise CheckpointDecodingError(f"{what}: an item holds none of message, event, value")


# -- a whole checkpoint -----------------------------------------------------------------------------


def check_checkpoint(checkpoint: Any) -> Tuple[str, str]:
    """``(checkpoint_id, workflow_name)`` of a ``WorkflowCheckpoint`` fit to store, else
    :class:`InvalidCheckpointError`."""
    if not isinstance(checkpoint, WorkflowCheckpoint):
        raise InvalidCheckpointError(f"expected a WorkflowCheckpoint, not {type(checkpoint).__name__}")
    cid = checkpoint.checkpoint_id
    if not isinstance(cid, str) or not cid:
        raise InvalidCheckpointError(f"checkpoint_id must be a non-empty string, not {cid!r}")
    try:
        name = check_name(checkpoint.workflow_name)
    except InvalidInputError as exc:
        raise InvalidCheckpointError(str(exc)) from None
    prev = checkpoint.previous_checkpoint_id
    if prev is not None and (not isinstance(prev, str) or not prev):
        raise InvalidCheckpointError(f"previous_checkpoint_id must be a non-empty string or None, not {prev!r}")
    return cid, name


def encode_checkpoint(checkpoint: WorkflowCheckpoint, allowed: FrozenSet[str]) -> Tuple[Dict[str, Any],
                                                                                         Dict[str, Any], int]:
    """``(state_data, metadata, step)`` of the qvc checkpoint that keeps ``checkpoint`` (checked with
    :func:`check_checkpoint` first). Raises :class:`CheckpointEncodingError` naming the value's path."""
    cid, name = check_checkpoint(checkpoint)
    enc = Encoder(allowed)
    state: Dict[str, Any] = {}
    what = f"checkpoint {cid}"

    messages = checkpoint.messages
    if type(messages) is dict and all(type(k) is str and type(v) is list for k, v in messages.items()):
        state[MESSAGES] = {source: [_message(enc, m, f"{what}.messages[{source!r}][{i}]") for i, m in enumerate(items)]
                          for source, items in messages.items()}
    else:
        state[RAW + MESSAGES] = enc.value(messages, f"{what}.messages")

    shared = checkpoint.state
    if type(shared) is dict and all(type(k) is str for k in shared) and PICKLED not in shared and TYPE not in shared:
        for k, v in shared.items():
            if k not in (EXECUTOR_STATE_KEY, EDGE_STATE_KEY):
                state[STATE + k] = enc.value(v, f"{what}.state[{k!r}]")
        for key, field in ((EXECUTOR_STATE_KEY, EXECUTOR_STATES), (EDGE_STATE_KEY, EDGE_STATE)):
            if key in shared:
                state[field] = enc.value(shared[key], f"{what}.state[{key!r}]")
    else:
        state[RAW_STATE] = enc.value(shared, f"{what}.state")

    pending = checkpoint.pending_request_info_events
    if type(pending) is dict and all(type(k) is str for k in pending):
        state[PENDING] = {rid: _event(enc, ev, f"{what}.pending_request_info_events[{rid!r}]")
                          for rid, ev in pending.items()}
    else:
        state[RAW + PENDING] = enc.value(pending, f"{what}.pending_request_info_events")

    iteration = checkpoint.iteration_count
    state[ITERATION] = enc.value(iteration, f"{what}.iteration_count")
    state[GRAPH] = enc.value(checkpoint.graph_signature_hash, f"{what}.graph_signature_hash")
    state[METADATA] = enc.value(checkpoint.metadata, f"{what}.metadata")
    state[BOOKKEEPING] = {"workflow_name": name, "previous_checkpoint_id": checkpoint.previous_checkpoint_id,
                          "timestamp": enc.value(checkpoint.timestamp, f"{what}.timestamp"),
                          "version": enc.value(checkpoint.version, f"{what}.version")}
    step = iteration if type(iteration) is int else 0
    metadata = {"source": SOURCE, "workflow": name, "iteration": step,
                "previous": checkpoint.previous_checkpoint_id,
                "timestamp": checkpoint.timestamp if isinstance(checkpoint.timestamp, str) else None}
    return state, metadata, step


def is_workflow_checkpoint(fields: Mapping[str, Any]) -> bool:
    """Whether a qvc checkpoint's fields (or their names) are a workflow checkpoint's."""
    return BOOKKEEPING in fields and GRAPH in fields


def bookkeeping(state: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    """The ``checkpoint`` field of a workflow checkpoint's state, or ``None``."""
    value = state.get(BOOKKEEPING)
    return value if isinstance(value, dict) and isinstance(value.get("workflow_name"), str) else None


def decode_checkpoint(checkpoint_id: str, state: Mapping[str, Any], allowed: FrozenSet[str]) -> WorkflowCheckpoint:
    """The ``WorkflowCheckpoint`` a stored checkpoint's fields keep (new objects). Raises
    :class:`CheckpointDecodingError` when they do not decode."""
    what = f"checkpoint {checkpoint_id}"
    book = bookkeeping(state)
    if book is None:
        raise CheckpointDecodingError(f"{what}: not a workflow checkpoint (no {BOOKKEEPING!r} field)")

    if MESSAGES in state:
        raw = state[MESSAGES]
        if not isinstance(raw, dict):
            raise CheckpointDecodingError(f"{what}: field {MESSAGES!r} is not a dict")
        messages = {source: [_decode_item(m, allowed, what) for m in items] for source, items in raw.items()}
    else:
        messages = decode_value(state.get(RAW + MESSAGES, {}), allowed)

    if RAW_STATE in state:
        shared = decode_value(state[RAW_STATE], allowed)
    else:
        shared = {name[len(STATE):]: decode_value(value, allowed) for name, value in state.items()
                  if name.startswith(STATE)}
        for key, field in ((EXECUTOR_STATE_KEY, EXECUTOR_STATES), (EDGE_STATE_KEY, EDGE_STATE)):
            if field in state:
                shared[key] = decode_value(state[field], allowed)

    if PENDING in state:
        raw = state[PENDING]
        if not isinstance(raw, dict):
            raise CheckpointDecodingError(f"{what}: field {PENDING!r} is not a dict")
        pending = {rid: _decode_item(ev, allowed, what) for rid, ev in raw.items()}
    else:
        pending = decode_value(state.get(RAW + PENDING, {}), allowed)

    return WorkflowCheckpoint(
        workflow_name=book["workflow_name"],
        graph_signature_hash=decode_value(state.get(GRAPH), allowed),
        checkpoint_id=checkpoint_id,
        previous_checkpoint_id=book.get("previous_checkpoint_id"),
        timestamp=decode_value(book.get("timestamp"), allowed),
        messages=messages,
        state=shared,
        pending_request_info_events=pending,
        iteration_count=decode_value(state.get(ITERATION, 0), allowed),
        metadata=decode_value(state.get(METADATA, {}), allowed),
        version=decode_value(book.get("version"), allowed),
    )
