"""How a session's items are laid out in checkpoint fields (no SDK import: the viewer reads it too).

A session is the thread ``openai/session/<session_id>``. Each checkpoint holds the session's items
as a :class:`Log`: the newest *segments*, one per ``add_items`` call (or per pop, clear or
compaction that cut the line), in fields ``items.0000``, ``items.0001``, ...; and the older items,
*sealed*, in one list field ``sealed``. A checkpoint reuses its parent's blobs for every segment
it did not add, so it writes only its own segment. Once a line has ``2 * GROUP`` segments, the
oldest ``GROUP`` are appended to ``sealed`` (the store keeps a long list as a tree of 64-item
chunks and rewrites only the last one) and the remaining segments move down to the first field
names. So a checkpoint's tree and header have a bounded number of fields however long the
session grows, and what an ``add_items`` writes does not grow with the history. Field
``session`` names the session; ``run_state`` holds a paused run's ``RunState`` JSON when one was
saved.

Imports :mod:`qvc.errors` and :mod:`qvc.store.prefixes`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from qvc.errors import CorruptionError, InvalidInputError
from qvc.store.prefixes import register_prefix

#: Thread names of sessions: ``openai/session/<session_id>``.
PREFIX = register_prefix("openai-agents.sessions", "openai/session/")
#: The metadata ``source`` of every session checkpoint; its viewer is declared as ``source:openai-agents``.
SOURCE = "openai-agents"
#: Segments sealed at a time; a line seals its oldest ``GROUP`` segments once it has ``2 * GROUP``.
GROUP = 16
#: Field names: the session's id, a paused run's state, segments (``items.0000``...), sealed items.
SESSION, RUN_STATE, ITEMS, SEALED = "session", "run_state", "items.", "sealed"

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


@dataclass(frozen=True)
class Log:
    """A session's items as a checkpoint stores them: ``sealed`` items, then ``segments``."""

    sealed: List[Item] = field(default_factory=list)
    segments: List[Segment] = field(default_factory=list)

    @property
    def items(self) -> List[Item]:
        """Every item, oldest first."""
        return self.sealed + [item for seg in self.segments for item in seg]

    def __len__(self) -> int:
        return len(self.sealed) + sum(len(s) for s in self.segments)

    def add(self, segment: Segment) -> Log:
        """The log with ``segment`` appended (sealing the oldest group when it is due)."""
        segments = self.segments + [segment]
        if len(segments) < 2 * GROUP:
            return Log(self.sealed, segments)
        return Log(self.sealed + [i for s in segments[:GROUP] for i in s], segments[GROUP:])

    def cut(self, keep: int) -> Log:
        """The log of the first ``keep`` items (the segment the cut falls in shortened)."""
        if keep <= len(self.sealed):
            return Log(self.sealed[:keep], [])
        out: List[Segment] = []
        n = len(self.sealed)
        for seg in self.segments:
            if n >= keep:
                break
            out.append(seg if n + len(seg) <= keep else seg[:keep - n])
            n += len(seg)
        return Log(self.sealed, out)

    def fields(self) -> Dict[str, Any]:
        """The state fields holding the log."""
        out: Dict[str, Any] = {SEALED: self.sealed} if self.sealed else {}
        for i, seg in enumerate(self.segments):
            out[f"{ITEMS}{i:04d}"] = seg
        return out

    @classmethod
    def of(cls, state: Mapping[str, Any], what: str) -> Log:
        """The log a checkpoint's state fields hold; :class:`CorruptionError` names ``what`` when a
        field is not a list of items."""
        sealed = state.get(SEALED, [])
        if not isinstance(sealed, list):
            raise CorruptionError(f"{what}: field {SEALED!r} is not a list of items")
        found = []
        for name, value in state.items():
            if name.startswith(ITEMS):
                if not isinstance(value, list):
                    raise CorruptionError(f"{what}: field {name!r} is not a list of items")
                found.append((name, value))
        segments = [value for _, value in sorted(found, key=lambda kv: (len(kv[0]), kv[0]))]
        for seg in [sealed, *segments]:
            if not all(isinstance(item, Mapping) for item in seg):
                raise CorruptionError(f"{what}: a segment holds an item that is not a mapping")
        return cls(list(sealed), segments)
