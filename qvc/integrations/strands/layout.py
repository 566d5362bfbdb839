"""How Strands Agents' sessions are laid out in a qvc repository (no Strands import: the viewer reads it too).

**The ``Storage`` protocol** (:class:`~qvc.integrations.strands.QvcStorage`, behind
``SnapshotSessionManager``). The manager keeps, under its storage namespace (``session`` unless the
caller passed an already scoped view),
``<namespace>/<session_id>/scopes/<scope>/<id>/snapshots/snapshot_latest.json`` (overwritten on
each save) and ``.../snapshots/immutable_history/snapshot_<snapshot id>.json`` (one per
checkpoint); ``scope`` is ``agent`` (an ``Agent`` or ``BidiAgent``) or ``multiAgent`` (a Graph or
Swarm). The snapshots of one agent are one thread:

- ``strands/session/<session_id>/<scope>/<id>`` for the ``session`` namespace,
- ``strands/snapshots/<namespace>/<session_id>/<scope>/<id>`` for another (``/`` in the namespace
  written ``%2F``, ``%`` as ``%25``);

each write of either key is a checkpoint on that thread's line (metadata ``key``: the key written;
an immutable entry's also ``snapshot_id``). Reading ``snapshot_latest.json`` reads the newest
checkpoint on the line that wrote it; an immutable entry, the newest that wrote that id. Any other
key is a thread of its own, ``strands/storage/<key>``, each write a checkpoint.

A value's fields: a snapshot (the JSON Strands writes: ``json.dumps(..., ensure_ascii=False)`` of
``{"scope", "schema_version", "created_at", "data", "app_data"}``) keeps each key of its ``data`` as
a field of its own (``messages``, ``state``, ``conversation_manager_state``, ``interrupt_state``,
``system_prompt``, ``model_state``, ...) and the rest in ``snapshot`` (``data`` there lists the
data keys in order), so that the bytes read back are the bytes written. Other JSON written that
way is one field, ``value``; other UTF-8 text, ``text``; anything else, ``bytes``. A list of
messages is stored in chunks of one message each (:mod:`.entries`).

**The ``SessionRepository``** (:class:`~qvc.integrations.strands.QvcSessionManager`, Strands'
``FileSessionManager`` / ``S3SessionManager`` line): ``strands/repository/<session_id>`` holds
the ``session``; ``strands/repository/<session_id>/agent/<agent_id>`` an agent (``agent``: its id
and times, ``state``, ``conversation_manager_state``, ``internal_state``, and ``messages``: every
``SessionMessage`` in ``message_id`` order); ``strands/repository/<session_id>/multi_agent/<id>`` a
Graph's or Swarm's ``state``. Each repository call that writes is one checkpoint.

Every checkpoint's metadata says ``"source": "strands"`` (its viewer's key, :mod:`.viewer`).

Imports :mod:`qvc.errors` and :mod:`qvc.store.prefixes`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from qvc.errors import InvalidInputError
from qvc.store.prefixes import register_prefix

#: Every thread this adapter names starts with this.
PREFIX = register_prefix("strands", "strands/")
#: Snapshot threads of the ``session`` namespace, of other namespaces, threads of other keys, and
#: the SessionRepository's threads.
SESSION, SNAPSHOTS, STORAGE, REPOSITORY = (f"{PREFIX}session/", f"{PREFIX}snapshots/", f"{PREFIX}storage/",
                                           f"{PREFIX}repository/")
#: The metadata ``source`` of every checkpoint; its viewer is declared as ``source:strands``.
SOURCE = "strands"
#: The namespace ``SnapshotSessionManager`` puts a raw storage's keys under.
DEFAULT_NAMESPACE = "session"
LATEST = "snapshot_latest.json"
#: Fields of a stored value: a snapshot's envelope, JSON, text, bytes.
ENVELOPE, VALUE, TEXT, BYTES = "snapshot", "value", "text", "bytes"

_SNAPSHOT_KEY = re.compile(
    r"(?P<ns>.+)/(?P<sid>[^/]+)/scopes/(?P<scope>[^/]+)/(?P<id>[^/]+)/snapshots/"
    r"(?:snapshot_latest\.json|immutable_history/snapshot_(?P<snap>[^/]+)\.json)")
_ESCAPED = re.compile(r"%(25|2F)")


def _escape(part: str) -> str:
    return part.replace("%", "%25").replace("/", "%2F")


def _unescape(part: str) -> str:
    return _ESCAPED.sub(lambda m: "%" if m.group(1) == "25" else "/", part)


# -- keys ------------------------------------------------------------------------------------------


def normalize_key(key: Any) -> str:
    """``key`` as Strands' path-based backends store it (runs of ``/`` collapsed, leading and
    trailing ``/`` dropped); :class:`InvalidInputError` for a key that is not a string, is empty,
    holds a backslash or a ``..`` segment (as Strands' ``InMemoryStorage`` and ``LocalFileStorage``
    refuse them)."""
    if not isinstance(key, str):
        raise InvalidInputError(f"a storage key is a string, not {type(key).__name__}")
    if "\\" in key:
        raise InvalidInputError(f"invalid storage key {key!r}: backslashes are not allowed")
    normalized = re.sub(r"/+", "/", key).strip("/")
    if not normalized:
        raise InvalidInputError("a storage key must not be empty")
    if ".." in normalized.split("/"):
        raise InvalidInputError(f"invalid storage key {key!r}: '..' path segments are not allowed")
    return normalized


def normalize_prefix(prefix: Any) -> str:
    """A ``list`` prefix as Strands' path-based backends take it: runs of ``/`` collapsed, leading
    ``/`` dropped, a trailing one kept; empty matches every key. :class:`InvalidInputError` as
    :func:`normalize_key`."""
    if not isinstance(prefix, str):
        raise InvalidInputError(f"a storage prefix is a string, not {type(prefix).__name__}")
    if "\\" in prefix:
        raise InvalidInputError(f"invalid storage prefix {prefix!r}: backslashes are not allowed")
    normalized = re.sub(r"/+", "/", prefix).lstrip("/")
    if ".." in normalized.split("/"):
        raise InvalidInputError(f"invalid storage prefix {prefix!r}: '..' path segments are not allowed")
    return normalized


@dataclass(frozen=True)
class Place:
    """Where a normalized key lives: its ``thread`` and, for a snapshot thread, which of its keys
    (``snapshot_id`` ``None``: ``snapshot_latest.json``), with the parts of the key."""

    thread: str
    snapshot: bool
    snapshot_id: Optional[str] = None
    namespace: Optional[str] = None
    session_id: Optional[str] = None
    scope: Optional[str] = None
    scope_id: Optional[str] = None

    @property
    def directory(self) -> str:
        """A snapshot thread's keys all start with this (``.../snapshots/``); a key thread's key."""
        if not self.snapshot:
            return self.thread[len(STORAGE):]
        return f"{self.namespace}/{self.session_id}/scopes/{self.scope}/{self.scope_id}/snapshots/"

    def key(self, snapshot_id: Optional[str] = None) -> str:
        """A snapshot thread's key of ``snapshot_latest.json`` (``snapshot_id`` ``None``) or of an
        immutable entry."""
        if snapshot_id is None:
            return self.directory + LATEST
        return f"{self.directory}immutable_history/snapshot_{snapshot_id}.json"


def place_of(key: str) -> Place:
    """Where the normalized ``key`` lives (see the module docstring)."""
    m = _SNAPSHOT_KEY.fullmatch(key)
    if m is None:
        return Place(STORAGE + key, False)
    ns, sid, scope, sc_id = m.group("ns"), m.group("sid"), m.group("scope"), m.group("id")
    return Place(snapshot_thread(sid, scope, sc_id, ns), True, m.group("snap"), ns, sid, scope, sc_id)


def snapshot_thread(session_id: str, scope: str, scope_id: str, namespace: str = DEFAULT_NAMESPACE) -> str:
    """The thread of the snapshots of ``scope`` (``agent``, ``multiAgent``) ``scope_id`` in the session."""
    for name, value in (("session_id", session_id), ("scope", scope), ("scope_id", scope_id),
                        ("namespace", namespace)):
        if not isinstance(value, str) or not value or (name != "namespace" and "/" in value):
            raise InvalidInputError(f"{name} must be a non-empty string without '/', not {value!r}")
    if namespace == DEFAULT_NAMESPACE:
        return f"{SESSION}{session_id}/{scope}/{scope_id}"
    return f"{SNAPSHOTS}{_escape(namespace)}/{session_id}/{scope}/{scope_id}"


def place_of_thread(thread: str) -> Optional[Place]:
    """The place a thread of the ``Storage`` protocol stands for, or ``None`` for another thread."""
    if thread.startswith(SESSION):
        parts, ns = thread[len(SESSION):].split("/"), DEFAULT_NAMESPACE
    elif thread.startswith(SNAPSHOTS):
        first, _, rest = thread[len(SNAPSHOTS):].partition("/")
        parts, ns = rest.split("/"), _unescape(first)
        if not ns:
            return None
    elif thread.startswith(STORAGE):
        key = thread[len(STORAGE):]
        try:
            ok = normalize_key(key) == key and _SNAPSHOT_KEY.fullmatch(key) is None
        except InvalidInputError:
            ok = False
        return Place(thread, False) if ok else None
    else:
        return None
    if len(parts) != 3 or not all(parts):
        return None
    return Place(thread, True, None, ns, *parts)


def snapshot_id_of(key: str) -> Optional[str]:
    """The snapshot id of an immutable entry's key (``None``: ``snapshot_latest.json``, or not a
    snapshot key)."""
    m = _SNAPSHOT_KEY.fullmatch(key)
    return m.group("snap") if m else None


# -- the SessionRepository's threads -----------------------------------------------------------------


def check_id(value: Any, what: str) -> str:
    """``value`` if it can be a Strands session, agent or multi-agent id (a non-empty string
    without a path separator, as Strands' own repositories require), else :class:`InvalidInputError`."""
    if not isinstance(value, str) or not value or "/" in value or "\\" in value:
        raise InvalidInputError(f"{what} must be a non-empty string without path separators, not {value!r}")
    return value


def repository_thread(session_id: str, kind: Optional[str] = None, member_id: Optional[str] = None) -> str:
    """The SessionRepository thread of a session, or of one of its members (``kind`` ``agent`` or
    ``multi_agent``)."""
    base = f"{REPOSITORY}{check_id(session_id, 'session_id')}"
    return base if kind is None else f"{base}/{kind}/{check_id(member_id, f'{kind}_id')}"


def repository_parts(thread: str) -> Optional[Tuple[str, Optional[str], Optional[str]]]:
    """``(session_id, kind, member id)`` of a SessionRepository thread (kind ``None``: the session's)."""
    if not thread.startswith(REPOSITORY):
        return None
    parts = thread[len(REPOSITORY):].split("/")
    if len(parts) == 1 and parts[0]:
        return parts[0], None, None
    if len(parts) == 3 and all(parts) and parts[1] in ("agent", "multi_agent"):
        return parts[0], parts[1], parts[2]
    return None


# -- values --------------------------------------------------------------------------------------------


def encode_value(data: bytes) -> Dict[str, Any]:
    """The fields that store the bytes ``data`` (see the module docstring); :func:`decode_value`
    gives the same bytes back."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return {BYTES: data}
    try:
        obj = json.loads(text)
    except ValueError:
        return {TEXT: text}
    if json.dumps(obj, ensure_ascii=False) != text:
        return {TEXT: text}
    inner = obj.get("data") if isinstance(obj, dict) else None
    if isinstance(inner, dict) and inner and all(isinstance(k, str) and k and k != ENVELOPE for k in inner):
        fields: Dict[str, Any] = dict(inner)
        fields[ENVELOPE] = {k: (list(inner) if k == "data" else v) for k, v in obj.items()}
        return fields
    return {VALUE: obj}


def text_fields(data: bytes) -> Dict[str, Any]:
    """The fields of ``data`` stored as text (or bytes): for a value whose JSON the store cannot hold."""
    try:
        return {TEXT: data.decode("utf-8")}
    except UnicodeDecodeError:
        return {BYTES: data}


def decode_value(state: Dict[str, Any]) -> bytes:
    """The bytes the fields ``state`` (:func:`encode_value`) store; :class:`ValueError` if they are
    not such fields."""
    if ENVELOPE in state:
        envelope = state[ENVELOPE]
        if not isinstance(envelope, dict) or not isinstance(envelope.get("data"), list):
            raise ValueError(f"field {ENVELOPE!r} is not a snapshot envelope")
        obj = {k: ({name: state[name] for name in v} if k == "data" else v) for k, v in envelope.items()}
        return json.dumps(obj, ensure_ascii=False).encode("utf-8")
    if VALUE in state:
        return json.dumps(state[VALUE], ensure_ascii=False).encode("utf-8")
    if TEXT in state and isinstance(state[TEXT], str):
        return state[TEXT].encode("utf-8")
    if BYTES in state and isinstance(state[BYTES], bytes):
        return state[BYTES]
    raise ValueError(f"no stored value among the fields {sorted(state)}")
