"""A pydantic-ai agent whose conversations live in qvc: save, branch, fork, pause and resume, then read
them with ``qvc``. No API key needed.

The agent is pydantic-ai's own ``Agent`` over a scripted ``FunctionModel`` (a weather tool call,
then an answer; an e-mail tool that needs approval). The one changed line is the store:
``QvcConversationStore(repo)`` where an app would use ``InMemoryConversationStore()``.

1. Two turns of conversation ``trip``: ``load``, ``agent.run(..., conversation=...)``, ``save``;
   each message is a checkpoint of the thread ``pydantic-ai/trip``.
2. A stale copy saved again is refused (``ConversationConflict``): the revision is a
   compare-and-swap.
3. ``branch`` the conversation back to its first turn and ask again: the left turn stays as a
   superseded line.
4. ``fork`` it after the first turn into ``trip-b``: the fork's commits sit on the source's.
5. A run pauses for an approval; a new store object (another process, say) loads it and resumes.
6. ``qvc log``, ``qvc show`` and ``qvc diff`` show the conversation.

Usage::

    python samples/pydantic_ai_conversation.py [--repo PATH]

Exits 0 when every step behaved as described, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pydantic_ai import Agent, DeferredToolRequests  # noqa: E402
from pydantic_ai.conversation import Conversation  # noqa: E402
from pydantic_ai.conversation_store import ConversationConflict  # noqa: E402
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from sample_repo import check, sample_repository  # noqa: E402
from scripted_agent import show_cli  # noqa: E402

from qvc.integrations.pydantic_ai import QvcConversationStore, conversation_thread  # noqa: E402


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Call a tool for the prompt, answer once it returned."""
    returned = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
    if returned:
        return ModelResponse(parts=[TextPart(f"Noted: {returned[0].content}.")])
    prompt = next(p.content for p in messages[-1].parts if p.part_kind == "user-prompt")
    if "mail" in prompt.lower():
        return ModelResponse(parts=[ToolCallPart("send_email", {"to": "ana@example.com"}, tool_call_id="mail")])
    city = prompt.rsplit(" ", 1)[-1].rstrip("?")
    return ModelResponse(parts=[ToolCallPart("weather", {"city": city}, tool_call_id=f"w{len(messages)}")])


agent = Agent(FunctionModel(scripted), output_type=[str, DeferredToolRequests], instructions="Plan the trip.")


@agent.tool_plain
def weather(city: str) -> str:
    """Today's weather in a city."""
    return {"Lisbon": "sunny, 24°C", "Porto": "cloudy, 19°C"}.get(city, "rain")


@agent.tool_plain(requires_approval=True)
def send_email(to: str) -> str:
    """Send the plan by e-mail (a person approves first)."""
    return f"sent to {to}"


async def turn(store: QvcConversationStore, cid: str, prompt: str) -> None:
    conv = await store.load(cid) or Conversation(conversation_id=cid)
    await store.save(await agent.run(prompt, conversation=conv))


async def demo(repo: str) -> None:
    with QvcConversationStore(repo) as store:  # instead of InMemoryConversationStore()
        print(f"1. two turns of 'trip' in {repo}")
        await turn(store, "trip", "Weather in Lisbon?")
        stale = await agent.run("Weather in Faro?", conversation=await store.load("trip"))
        await turn(store, "trip", "And in Porto?")
        history = await store.load_entries("trip")
        check(len(history) == 8, "8 messages, each a checkpoint of pydantic-ai/trip")

        print("2. saving a stale copy")
        try:
            await store.save(stale)
            check(False, "the stale save was refused")
        except ConversationConflict:
            check(True, "the stale save was refused (ConversationConflict); nothing was written")

        print("3. branch back to the first turn and ask again")
        rec = await store.read_record("trip")
        branched = await store.branch("trip", at=4, expected_revision=rec.revision)
        await store.save(await agent.run("Weather in Faro?", conversation=branched))
        rec = await store.read_record("trip")
        check(rec.branches == [history[-1].id], "the left turn is kept (a superseded line in qvc)")

        print("4. fork after the first turn")
        fork = await store.fork("trip", at=4, new_conversation_id="trip-b")
        await store.save(await agent.run("Weather in Porto?", conversation=fork))
        shared = [e.id for e in await store.load_entries("trip-b")][:4]
        check(shared == [e.id for e in history[:4]], "the fork shares the first turn's entries (commits)")

        print("5. a run that waits for an approval")
        paused = await agent.run("Mail the plan", conversation=await store.load("trip-b"))
        await store.save(paused)
        check(isinstance(paused.output, DeferredToolRequests), "paused: send_email needs an approval")
    with QvcConversationStore(repo) as store:  # a new process would do the same
        loaded = await store.load("trip-b")
        results = loaded.deferred_tool_requests.build_results(approve_all=True)
        done = await agent.run(conversation=loaded, deferred_tool_results=results)
        await store.save(done)
        check(done.output == "Noted: sent to ana@example.com.", "resumed from the stored record and finished")
        first, last = history[3].id, (await store.load_entries("trip-b"))[-1].id

    print("6. what qvc shows")
    show_cli(repo, ["branch"], ["log", "--oneline", conversation_thread("trip")],
             ["show", conversation_thread("trip-b")], ["diff", first, last])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", help="repository to create (replaced only if a sample created it; "
                        "default: a temporary directory, removed at the end)")
    args = parser.parse_args()
    with sample_repository(args.repo, "qvc-pydantic-ai-") as repo:
        asyncio.run(demo(repo))


if __name__ == "__main__":
    main()
