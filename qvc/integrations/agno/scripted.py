"""A scripted agno model: drives agno's real run loop offline (no provider, no API key).

agno ships no test model. :class:`ScriptedModel` is an ``agno.models.base.Model`` whose replies
come from a script instead of a provider, so agents on :class:`~qvc.integrations.agno.QvcDb`
can be run in tests, samples and benchmarks::

    model = ScriptedModel(script=[
        [("get_population", {"city": "Paris"})],   # turn 1: one tool batch (a list of calls)
        "About 2.1 million.",                      # turn 2: the final answer
    ])

Each turn of the script is a list of ``(tool_name, arguments)`` calls (one tool batch), a string
(the final answer), an exception (raised by the model call: a provider failure) or a callable
taking the messages and returning one of these. The turn played is the number of assistant
messages after the last user message, so a run resumed from a checkpoint, in this process or
another, picks up where it stopped. Past the end of the script the model answers ``"done"``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Iterator, List, Sequence

from agno.models.base import Model
from agno.models.message import Message
from agno.models.response import ModelResponse

Turn = str | BaseException | Sequence[tuple] | Callable[[List[Message]], Any]


def turn_index(messages: Sequence[Message]) -> int:
    """How many assistant replies follow the last user message of ``messages``."""
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    return sum(1 for m in messages[last_user + 1:] if m.role == "assistant")


@dataclass
class ScriptedModel(Model):
    """An agno model that plays ``script`` (see the module docstring); ``calls`` counts model calls."""

    id: str = "scripted"
    name: str = "ScriptedModel"
    provider: str = "qvc"
    script: List[Any] = field(default_factory=list)
    calls: int = 0

    def _reply(self, messages: List[Message]) -> ModelResponse:
        self.calls += 1
        i = turn_index(messages)
        turn: Any = self.script[i] if i < len(self.script) else "done"
        if callable(turn) and not isinstance(turn, BaseException):
            turn = turn(messages)
        if isinstance(turn, BaseException):
            raise turn
        if isinstance(turn, str):
            return ModelResponse(role="assistant", content=turn)
        calls = []
        for n, (name, args) in enumerate(turn):
            calls.append({"id": f"call_{len(messages)}_{n}", "type": "function",
                          "function": {"name": name, "arguments": json.dumps(args)}})
        return ModelResponse(role="assistant", tool_calls=calls)

    def invoke(self, messages: List[Message], *args: Any, **kwargs: Any) -> ModelResponse:
        return self._reply(messages)

    async def ainvoke(self, messages: List[Message], *args: Any, **kwargs: Any) -> ModelResponse:
        return self._reply(messages)

    def invoke_stream(self, messages: List[Message], *args: Any, **kwargs: Any) -> Iterator[ModelResponse]:
        yield self._reply(messages)

    async def ainvoke_stream(self, messages: List[Message], *args: Any, **kwargs: Any) -> AsyncIterator[ModelResponse]:
        yield self._reply(messages)

    def _parse_provider_response(self, response: Any, **kwargs: Any) -> ModelResponse:
        return response

    def _parse_provider_response_delta(self, response: Any) -> ModelResponse:
        return response
