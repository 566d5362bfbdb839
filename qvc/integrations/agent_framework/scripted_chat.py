"""A scripted chat client and tool for offline agent runs (the tests, the sample): no network, no model.

``ScriptedChatClient(steps=K)`` answers each model call of an ``Agent`` run with a call of the tool
``add`` until the conversation holds ``K`` calls, then with a final text answer. It has the
framework's function-invocation and chat-middleware layers, as the framework's own clients do, so
the agent's tool loop and per-model-call history persistence run as they do against a real model.

Imports the framework (``agent_framework``).
"""

from __future__ import annotations

import json
from typing import Any

from agent_framework import (
    BaseChatClient,
    ChatMiddlewareLayer,
    ChatResponse,
    Content,
    FunctionInvocationLayer,
    Message,
    tool,
)

__all__ = ["ScriptedChatClient", "add"]


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class ScriptedChatClient(FunctionInvocationLayer, ChatMiddlewareLayer, BaseChatClient):
    """A chat client that calls ``add`` until the conversation holds ``steps`` calls, then answers."""

    def __init__(self, steps: int = 2, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.steps = steps
        self.calls = 0

    async def _respond(self, messages: Any) -> ChatResponse:
        self.calls += 1
        made = sum(1 for m in messages for c in m.contents if c.type == "function_call")
        if made < self.steps:
            call = Content.from_function_call(call_id=f"call-{made + 1}", name="add",
                                              arguments=json.dumps({"a": made + 1, "b": 1}))
            return ChatResponse(messages=[Message(role="assistant", contents=[call])])
        return ChatResponse(messages=[Message(role="assistant", contents=[f"done after {made} tool calls"])])

    def _inner_get_response(self, *, messages: Any, stream: bool, options: Any, **kwargs: Any) -> Any:
        if stream:
            raise NotImplementedError("ScriptedChatClient does not stream")
        return self._respond(messages)
