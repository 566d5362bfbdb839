"""How a session's items are laid out in checkpoint fields (no SDK import: the viewer reads it too).

A session is the thread ``openai/session/<session_id>``. Each checkpoint holds the items of the
session as *segments*, one per ``add_items`` call (or per pop, clear or compaction that cut the
line): field ``items.<n>`` is the list of items segment ``n`` added. Earlier segments are the
parent's blobs, so a checkpoint writes only the segment it added. Once a line has ``2 * GROUP``
segment fields, its oldest ``GROUP`` are sealed into one field ``sealed.<n>`` (a list of
segments) so the tree stays small on a long session. Field ``session`` names the session;
``run_state`` holds a paused run's ``RunState`` JSON when one was saved.

Imports :mod:`qvc.errors` and :mod:`qvc.store.prefixes`.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

from qvc.errors import CorruptionError, InvalidInputError
from qvc.store.prefixes import register_prefix

#: Thread names of sessions: ``openai/session/<session_id>``.
PREFIX = register_prefix("openai-agents.sessions", "openai/session/")
#: The metadata ``source`` of every session checkpoint; its viewer is declared as ``source:openai-agents``.
SOURCE = "openai-agents"
#: Segments per sealed group; a line seals its oldest group once it has ``2 * GROUP`` segment fields.
GROUP = 16
#: Field names: the session's id, a paused run's state, segments, sealed groups of segments.
SESSION, RUN_STATE, ITEMS, SEALED = "session", "run_state", "items.", "sealed."

Item = Dict[str, Any]
Segment = List[Item]


def session_thread(session_id: str) -> str:
    """The thread of session ``session_id``; :class:`InvalidInputError` for an id that is not a non-empty string."""
    if not isinstance(session_id, str) or not session_id:
        raise InvalidInputError(f"session id must be a non-empty string, not {session_id!r}")
    return PREFIX + session_id


def session_of(thread: str) -> Optional[str]:
    """The session id of a session thread, else ``None``."""
    return thread[len(PREFIX):] if thread.startswith(PREFIX) and len(thread) > len(PREFIX) else None


def layout(segments: Sequence[Segment]) -> Dict[str, Any]:
    """State fields for a line's segments: sealed groups of :data:`GROUP`, then one field per segment."""
    sealed = max(0, (len(segments) - GROUP) // GROUP)
    out: Dict[str, Any] = {}
    for g in range(sealed):
        out[f"{SEALED}{g * GROUP:08d}"] = [list(s) for s in segments[g * GROUP:(g + 1) * GROUP]]
    for i in range(sealed * GROUP, len(segments)):
        out[f"{ITEMS}{i:08d}"] = segments[i]
    return out


def segments_of(state: Mapping[str, Any], what: str) -> List[Segment]:
    """A checkpoint's segments in order, from its state fields; :class:`CorruptionError` names ``what``
    when a segment field is not a list of items."""
    found: List[tuple] = []
    for name, value in state.items():
        if name.startswith(SEALED):
            if not isinstance(value, list) or not all(isinstance(s, list) for s in value):
                raise CorruptionError(f"{what}: field {name!r} is not a list of segments")
            found.append((name[len(SEALED):], value))
        elif name.startswith(ITEMS):
            if not isinstance(value, list):
                raise CorruptionError(f"{what}: field {name!r} is not a list of items")
            found.append((name[len(ITEMS):], [value]))
    found.sort(key=lambda kv: kv[0])
    out: List[Segment] = []
    for _, segs in found:
        for seg in segs:
            if not all(isinstance(item, Mapping) for item in seg):
                raise CorruptionError(f"{what}: a segment holds an item that is not a mapping")
            out.append(seg)
    return out


def cut(segments: Sequence[Segment], keep: int) -> List[Segment]:
    """The segments holding the first ``keep`` items (the segment the cut falls in is shortened)."""
    out: List[Segment] = []
    n = 0
    for seg in segments:
        if n >= keep:
            break
        if n + len(seg) <= keep:
            out.append(seg)
        else:
            out.append(seg[:keep - n])
        n += len(seg)
    return out
