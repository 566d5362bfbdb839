"""Pair-safe boundaries: where a conversation may be cut without keeping a tool call whose result is cut off.

Imports :mod:`qvc.errors` and :mod:`qvc.runs.model`.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from qvc.errors import InvalidInputError
from qvc.runs.model import Message

ContinueFrom = str | int | None


def safe_truncation_index(messages: Sequence[Message], k: int) -> int:
    """The largest boundary ``b <= k`` such that every tool call kept in ``messages[:b]`` is answered there.

    ``k <= 0`` and ``k >= len(messages)`` are returned unchanged. Otherwise the first message
    before ``k`` with a tool call (that has an id) whose result is missing or at or after ``k``
    is where the cut goes: that whole exchange is dropped. The boundary never moves forward.
    """
    if k <= 0 or k >= len(messages):
        return k
    answered = {m.tool_call_id: i for i, m in enumerate(messages) if m.role == "tool" and m.tool_call_id}
    for idx in range(k):
        for call in messages[idx].tool_calls:
            if not call.id:
                continue
            at = answered.get(call.id)
            if at is None or at >= k:
                return idx
    return k


def referenced_tool_call_ids(messages: Iterable[Message]) -> set:
    """Every tool call id a message names, as a call or as the call it answers."""
    out = set()
    for m in messages:
        if m.tool_call_id:
            out.add(m.tool_call_id)
        out.update(c.id for c in m.tool_calls)
    return out


def resolve_continue_from(messages: Sequence[Message], continue_from: ContinueFrom) -> int:
    """The pair-safe message index ``continue_from`` names.

    ``"end"`` (or ``None``) is ``len(messages)``; ``"last_user"`` keeps up to and including the
    last user message; an int counts messages to keep (negative: from the end). Raises
    :class:`InvalidInputError` for anything else, an index out of range, or ``"last_user"`` with
    no user message.
    """
    n = len(messages)
    if continue_from is None or continue_from == "end":
        return n
    if continue_from == "last_user":
        for i in range(n - 1, -1, -1):
            if messages[i].role == "user":
                return safe_truncation_index(messages, i + 1)
        raise InvalidInputError("continue_from='last_user': the run has no user message")
    if isinstance(continue_from, bool) or not isinstance(continue_from, int):
        raise InvalidInputError(f"continue_from must be 'end', 'last_user' or an int, not {continue_from!r}")
    k = continue_from + n if continue_from < 0 else continue_from
    if not 0 <= k <= n:
        raise InvalidInputError(f"continue_from={continue_from} is outside 0..{n} (the run has {n} messages)")
    return safe_truncation_index(messages, k)

