"""How a session's items are laid out in checkpoint fields (no SDK import: the viewer reads it too).

A session is the thread ``openai/session/<session_id>``. Each checkpoint holds the session's items
as a :class:`Log` of three tiers, so that a checkpoint writes little more than what it added and
its tree and header keep a bounded number of fields however long the session grows:

- *segments*, one per ``add_items`` call (or per pop, clear or compaction that cut the line),
  in fields ``items.0000``, ``items.0001``, ...; a checkpoint reuses its parent's blob for every
  segment it did not add, so it writes only its own;
- once there are ``2 * GROUP`` segments, the oldest ``GROUP`` are *sealed* into one group, a
  field ``sealed.0000``, ``sealed.0001``, ... (written once, then reused);
- once there are ``2 * GROUP`` groups, the oldest ``GROUP`` are appended to the *archive*, one
  list field ``archive`` that the store keeps as a tree of 64-item chunks, rewriting only the
  last one.

When a tier seals, the fields after it move down to the first names (their blobs are reused).
Field ``session`` names the session; ``run_state`` holds a paused run's ``RunState`` JSON when
one was saved.

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
#: Segments per sealed group, and groups archived at a time (a tier seals its oldest GROUP at 2 * GROUP).
GROUP = 8
#: Field names: the session's id, a paused run's state, segments, sealed groups, the archive.
SESSION, RUN_STATE, ITEMS, SEALED, ARCHIVE = "session", "run_state", "items.", "sealed.", "archive"

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
    """A session's items as a checkpoint stores them: the ``archive``, sealed ``groups`` (each the
    items of ``GROUP`` segments), then ``segments`` (see the module docstring)."""

    archive: List[Item] = field(default_factory=list)
    groups: List[List[Item]] = field(default_factory=list)
    segments: List[Segment] = field(default_factory=list)

    @property
    def items(self) -> List[Item]:
        """Every item, oldest first."""
        return self.archive + [i for g in self.groups for i in g] + [i for s in self.segments for i in s]

    def __len__(self) -> int:
        return len(self.archive) + sum(len(g) for g in self.groups) + sum(len(s) for s in self.segments)

    def add(self, segment: Segment) -> Log:
        """The log with ``segment`` appended (sealing the oldest segments, and groups, when due)."""
        archive, groups, segments = self.archive, self.groups, self.segments + [segment]
        if len(segments) >= 2 * GROUP:
            groups = groups + [[i for s in segments[:GROUP] for i in s]]
            segments = segments[GROUP:]
            if len(groups) >= 2 * GROUP:
                archive = archive + [i for g in groups[:GROUP] for i in g]
                groups = groups[GROUP:]
        return Log(archive, groups, segments)

    def cut(self, keep: int) -> Log:
        """The log of the first ``keep`` items (the group or segment the cut falls in shortened)."""
        if keep <= len(self.archive):
            return Log(self.archive[:keep], [], [])
        n = len(self.archive)
        groups: List[List[Item]] = []
        for g in self.groups:
            if n + len(g) >= keep:
                return Log(self.archive, groups + ([g[:keep - n]] if keep > n else []), [])
            groups.append(g)
            n += len(g)
        segments: List[Segment] = []
        for seg in self.segments:
            if n >= keep:
                break
            segments.append(seg if n + len(seg) <= keep else seg[:keep - n])
            n += len(seg)
        return Log(self.archive, groups, segments)

    def fields(self) -> Dict[str, Any]:
        """The state fields holding the log."""
        out: Dict[str, Any] = {ARCHIVE: self.archive} if self.archive else {}
        for i, g in enumerate(self.groups):
            out[f"{SEALED}{i:04d}"] = g
        for i, seg in enumerate(self.segments):
            out[f"{ITEMS}{i:04d}"] = seg
        return out

    @classmethod
    def of(cls, state: Mapping[str, Any], what: str) -> Log:
        """The log a checkpoint's state fields hold; :class:`CorruptionError` names ``what`` when a
        field is not a list of items."""
        tiers: Dict[str, List[tuple]] = {SEALED: [], ITEMS: []}
        for name, value in state.items():
            prefix = SEALED if name.startswith(SEALED) else ITEMS if name.startswith(ITEMS) else None
            if prefix is None and name != ARCHIVE:
                continue
            if not isinstance(value, list) or not all(isinstance(item, Mapping) for item in value):
                raise CorruptionError(f"{what}: field {name!r} is not a list of items")
            if prefix is not None:
                tiers[prefix].append((len(name), name, value))
        return cls(list(state.get(ARCHIVE, [])), [v for *_, v in sorted(tiers[SEALED])],
                   [v for *_, v in sorted(tiers[ITEMS])])
