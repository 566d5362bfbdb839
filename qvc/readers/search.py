"""Searching threads by what their conversations say, their status and their date: what
``qvc serve``'s search box asks (``GET /api/search``).

A thread matches when its head checkpoint passes every filter given: its status (the ``status``
field, as ``qvc log`` reads it), the time of its last checkpoint (``since``/``until``,
inclusive), and ``text``, a case-insensitive substring of a message of one of its
conversations. A conversation is any list of dicts carrying ``"role"`` in the state as people
see it (:func:`qvc.readers.views.state_of`: LangGraph channels, qvc and agno runs alike), at any
depth; a state without one is searched in all its strings. Only the head is read: a message a
rewind left on a superseded line is not found. Reads only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING, Any, Iterator, Optional

from qvc.errors import CorruptionError
from qvc.logs import log
from qvc.readers.log import entry
from qvc.readers.views import iso, run_of_thread, state_of

if TYPE_CHECKING:
    from qvc.store.git_store import GitCheckpointStore


#: Characters of context a hit's snippet shows on each side of the match.
CONTEXT = 60


@dataclass
class Match:
    """Where ``text`` was found: ``path`` into the state (field, then keys and list indexes), the
    message's ``role`` (``None`` outside a conversation) and a snippet around the match."""

    path: list[Any]
    role: Optional[str]
    snippet: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "role": self.role, "snippet": self.snippet}


@dataclass
class Hit:
    """One matching thread: its head checkpoint and, when ``text`` was asked, its matches."""

    thread: str
    head: str
    head_id: str
    step: Optional[int]
    status: Optional[str]
    timestamp: int
    matches: list[Match] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"thread": self.thread, "head": self.head, "head_id": self.head_id, "step": self.step,
                "status": self.status, "updated": iso(self.timestamp), "timestamp": self.timestamp,
                "run": run_of_thread(self.thread), "matches": [m.to_json() for m in self.matches]}


def search(store: GitCheckpointStore, text: Optional[str] = None, *, status: Optional[str] = None,
           since: Optional[float] = None, until: Optional[float] = None, prefix: Optional[str] = None,
           max_matches: int = 5) -> list[Hit]:
    """The threads (sorted by name; only those starting with ``prefix``, if given) whose head
    passes the filters (see the module's docstring), each with at most ``max_matches`` matches.
    With no filter at all, every thread. A thread whose head does not decode is logged as a
    warning and left out, so the others are still searched."""
    needle = text.casefold() if text else None
    out = []
    for thread in store.threads():
        if prefix is not None and not thread.startswith(prefix):
            continue
        tip = store.head(thread)
        if tip is None:
            continue
        try:
            e = entry(store, tip)
            if (status is not None and e.status != status) or (since is not None and e.time < since) \
                    or (until is not None and e.time > until):
                continue
            hit = Hit(thread, tip, e.checkpoint_id, e.step, e.status, e.time)
            if needle is not None:
                state = state_of(store, tip, store.read(tip).checkpoint.state_data, plain=True)
                hit.matches = list(islice(_matches(state, needle), max_matches))
                if not hit.matches:
                    continue
        except CorruptionError as exc:
            log.warning("qvc: warning: thread %r is damaged, not searched: %s", thread, exc)
            continue
        out.append(hit)
    return out


#: LangChain's message types (its plain form names them ``type``) as the roles of the conversation shape.
ROLES = {"human": "user", "ai": "assistant", "tool": "tool", "system": "system"}


def is_conversation(value: Any) -> bool:
    """Whether ``value`` is a conversation: a non-empty list of dicts, each with a ``"role"`` (or
    LangChain's ``"type"`` beside ``"content"``)."""
    return isinstance(value, list) and bool(value) and all(
        isinstance(m, dict) and ("role" in m or ("type" in m and "content" in m)) for m in value)


def _conversations(value: Any, path: list[Any]) -> Iterator[tuple[list[Any], list]]:
    if is_conversation(value):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _conversations(v, [*path, k])
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _conversations(v, [*path, i])


def _strings(value: Any, path: list[Any]) -> Iterator[tuple[list[Any], str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, [*path, k])
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, [*path, i])


def _snippet(s: str, at: int, n: int) -> str:
    start, end = max(0, at - CONTEXT), min(len(s), at + n + CONTEXT)
    return ("…" if start else "") + " ".join(s[start:end].split()) + ("…" if end < len(s) else "")


def _matches(state: dict[str, Any], needle: str) -> Iterator[Match]:
    conversations = list(_conversations(state, []))
    if not conversations:
        for path, s in _strings(state, []):
            at = s.casefold().find(needle)
            if at >= 0:
                yield Match(path, None, _snippet(s, at, len(needle)))
        return
    for path, messages in conversations:
        for i, message in enumerate(messages):
            found = next(_in_message(message, [*path, i], needle), None)
            if found is not None:
                yield found


def _in_message(message: dict[str, Any], path: list[Any], needle: str) -> Iterator[Match]:
    """Matches in a message's text and its tool calls' names and arguments (not in ids)."""
    for key in ("content", "tool_calls"):
        for sub, s in _strings(message.get(key), [*path, key]):
            if key == "tool_calls" and sub[-1] in ("id", "type"):
                continue
            at = s.casefold().find(needle)
            if at >= 0:
                role = message.get("role") or ROLES.get(message.get("type"), message.get("type"))
                yield Match(sub, str(role), _snippet(s, at, len(needle)))
