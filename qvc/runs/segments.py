"""Segments: how a run's conversation is laid out in checkpoint fields.

Field ``log.<n>`` holds the messages and tool executions that checkpoint ``n`` of the line added
(a :class:`Segment`); once a line has ``2 * GROUP`` segments, its oldest groups of ``GROUP`` are
sealed into ``sealed.<n>`` fields. Imports :mod:`qvc.errors`, :mod:`qvc.runs.model` and
:mod:`qvc.runs.boundaries`.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

from qvc.errors import InvalidInputError

#: Segments per sealed group; a line seals its oldest group once it has 2 * GROUP segments.
GROUP = 64


class Segment:
    """The messages and tool executions one checkpoint added (stored as field ``log.<n>``)."""

    __slots__ = ("messages", "tools", "_stored")

    def __init__(self, messages: List[Dict[str, Any]], tools: List[Dict[str, Any]],
                 stored: Optional[Dict[str, Any]] = None):
        self.messages = messages
        self.tools = tools
        self._stored = stored

    @classmethod
    def load(cls, stored: Any, what: str) -> Segment:
        """A segment from its stored form (a result kept once restored); :class:`InvalidInputError` names ``what``."""
        if not isinstance(stored, Mapping) or not isinstance(stored.get("messages", []), list):
            raise InvalidInputError(f"{what}: not a run segment")
        messages = list(stored.get("messages", []))
        contents = {m.get("tool_call_id"): m.get("content") for m in messages if m.get("role") == "tool"}
        tools = []
        for t in stored.get("tools", []):
            if t.get("result_in_message"):
                t = {k: v for k, v in t.items() if k != "result_in_message"}
                t["result"] = contents.get(t.get("tool_call_id"))
            tools.append(t)
        return cls(messages, tools, dict(stored))

    def stored(self) -> Dict[str, Any]:
        """The stored form: a tool result equal to its tool message's content is kept once."""
        if self._stored is None:
            contents = {m.get("tool_call_id"): m.get("content") for m in self.messages if m.get("role") == "tool"}
            tools = []
            for t in self.tools:
                result = t.get("result")
                if type(result) is str and contents.get(t.get("tool_call_id")) == result:
                    t = {k: v for k, v in t.items() if k != "result"}
                    t["result_in_message"] = True
                tools.append(t)
            self._stored = {"messages": self.messages, "tools": tools}
        return self._stored


def layout(segments: Sequence[Segment]) -> Dict[str, Any]:
    """State fields for a line's segments: sealed groups of GROUP, then one field per segment."""
    sealed = max(0, (len(segments) - GROUP) // GROUP)
    out: Dict[str, Any] = {}
    for g in range(sealed):
        out[f"sealed.{g * GROUP:08d}"] = [s.stored() for s in segments[g * GROUP:(g + 1) * GROUP]]
    for i in range(sealed * GROUP, len(segments)):
        out[f"log.{i:08d}"] = segments[i].stored()
    return out


def cut(segments: Sequence[Segment], k: int) -> List[Segment]:
    """The segments holding ``messages[:k]``, tools pruned to the tool calls still referenced.

    Reads the stored message dicts as they are (a ``tool_call_id``, ``tool_calls`` with ``id``
    keys), so it serves any message format that names calls that way: qvc's and agno's."""
    out: List[Segment] = []
    n = 0
    for seg in segments:
        if n + len(seg.messages) <= k:
            out.append(seg)
            n += len(seg.messages)
            continue
        if k > n:
            out.append(Segment(seg.messages[:k - n], seg.tools))
        break
    refs = {m.get("tool_call_id") for s in out for m in s.messages}
    refs |= {c.get("id") for s in out for m in s.messages for c in m.get("tool_calls") or () if isinstance(c, Mapping)}
    refs.discard(None)
    for i, seg in enumerate(out):
        tools = [t for t in seg.tools if t.get("tool_call_id") in refs]
        if len(tools) != len(seg.tools):
            out[i] = Segment(seg.messages, tools)
    return [s for s in out if s.messages or s.tools]

