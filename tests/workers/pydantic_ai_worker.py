"""A pydantic-ai agent driven offline by a scripted model, and a writer that saves its runs in a loop.

``make_agent(steps)``: a real ``pydantic_ai.Agent`` over a ``FunctionModel`` that calls the real
tool ``add`` ``steps`` times, one call per model response, then answers ``"total N"``: one run
stores ``2 * steps + 2`` entries (the prompt, each call and its return, the answer).

As a program (``python -m tests.workers.pydantic_ai_worker REPO``): runs and saves
conversation ``killed`` through ``QvcConversationStore`` forever, printing ``ack <head entry id>``
after each save returned (the adapter kit's SIGKILL test).
"""

from __future__ import annotations

import asyncio
import sys

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel


def make_agent(steps: int) -> Agent:
    """An agent whose scripted model calls ``add`` ``steps`` times per run, then answers."""

    def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = 0  # tool returns since the run's prompt
        for message in reversed(messages):
            if any(p.part_kind == "user-prompt" for p in message.parts):
                break
            done += sum(isinstance(p, ToolReturnPart) for p in message.parts)
        if done < steps:
            return ModelResponse(parts=[ToolCallPart("add", {"a": done, "b": 1},
                                                     tool_call_id=f"call-{len(messages)}-{done}")])
        last = next((p.content for p in messages[-1].parts if isinstance(p, ToolReturnPart)), 0)
        return ModelResponse(parts=[TextPart(f"total {last}")])

    agent = Agent(FunctionModel(scripted), instructions="Add numbers with the tool.")

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    return agent


async def _loop(path: str) -> None:
    from pydantic_ai.conversation import Conversation
    from pydantic_ai.usage import UsageLimits

    from qvc.integrations.pydantic_ai import QvcConversationStore

    store = QvcConversationStore(path)
    agent = make_agent(1)
    while True:
        conv = await store.load("killed") or Conversation(conversation_id="killed")
        # a conversation's usage counts every run it had: no request limit for an endless one
        result = await agent.run("go", conversation=conv, usage_limits=UsageLimits(request_limit=None))
        await store.save(result)
        record = await store.read_record("killed")
        print(f"ack {record.head_id}", flush=True)


if __name__ == "__main__":
    asyncio.run(_loop(sys.argv[1]))
