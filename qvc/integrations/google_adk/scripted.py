"""A scripted model and a tool for running ADK's real ``Runner`` offline (tests, the sample, the
benchmark): no network, no API key, the same events every time.

``ScriptedLlm(steps=K)`` answers a user's message with K function calls of its tool (:func:`add`), one at a
time (each after the previous response came back), then with a text answer. :func:`make_runner`
builds an ``LlmAgent`` with it and a ``Runner`` over the services given.
"""

from __future__ import annotations

import os
from typing import Any, AsyncGenerator, Optional

os.environ.setdefault("ADK_DISABLE_TELEMETRY", "1")

from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.models.base_llm import BaseLlm  # noqa: E402
from google.adk.models.llm_request import LlmRequest  # noqa: E402
from google.adk.models.llm_response import LlmResponse  # noqa: E402
from google.adk.runners import Runner  # noqa: E402
from google.adk.tools.tool_context import ToolContext  # noqa: E402
from google.genai import types  # noqa: E402


class ScriptedLlm(BaseLlm):
    """Calls :func:`add` ``steps`` times for each user message, then answers with the total."""

    model: str = "scripted"
    steps: int = 1
    tool: str = "add"

    async def generate_content_async(self, llm_request: LlmRequest,
                                     stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        done = 0
        total = None
        for content in reversed(llm_request.contents):
            parts = content.parts or ()
            responses = [p.function_response for p in parts if p.function_response]
            if responses:
                done += 1
                if total is None:
                    total = (responses[0].response or {}).get("total")
            elif not any(p.function_call for p in parts):
                break  # the user's message: this turn's calls come after it
        usage = types.GenerateContentResponseUsageMetadata(prompt_token_count=1, candidates_token_count=1,
                                                           total_token_count=2)
        if done < self.steps:
            call = types.FunctionCall(name=self.tool, args={"n": done + 1}, id=f"call-{done + 1}")
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]),
                              usage_metadata=usage)
            return
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=f"The total is {total}.")]),
                          usage_metadata=usage)


async def add(n: int, tool_context: ToolContext) -> dict:
    """Add ``n`` to the session's running total; count calls per user and per app."""
    total = tool_context.state.get("total", 0) + n
    tool_context.state["total"] = total
    tool_context.state["user:calls"] = tool_context.state.get("user:calls", 0) + 1
    tool_context.state["app:calls"] = tool_context.state.get("app:calls", 0) + 1
    tool_context.state["temp:last_n"] = n  # this invocation only: never stored
    return {"total": total}


async def add_and_note(n: int, tool_context: ToolContext) -> dict:
    """:func:`add`, and save a note of it as the artifact ``notes.txt`` (a new version each call)."""
    out = await add(n, tool_context)
    await tool_context.save_artifact("notes.txt", types.Part(text=f"added {n}, total {out['total']}"))
    return out


def make_runner(session_service: Any, *, steps: int = 1, app_name: str = "calc",
                artifact_service: Optional[Any] = None) -> Runner:
    """A ``Runner`` of an ``LlmAgent`` driven by ``ScriptedLlm(steps=steps)`` with the :func:`add` tool
    (:func:`add_and_note` when an ``artifact_service`` is given)."""
    tool = add if artifact_service is None else add_and_note
    agent = LlmAgent(name="calculator", model=ScriptedLlm(steps=steps, tool=tool.__name__), instruction="Add.",
                     tools=[tool], output_key="answer")
    return Runner(app_name=app_name, agent=agent, session_service=session_service,
                  artifact_service=artifact_service)


async def ask(runner: Runner, user_id: str, session_id: str, text: str) -> str:
    """Send ``text`` and run the invocation to its end; the agent's final text."""
    out = ""
    message = types.Content(role="user", parts=[types.Part(text=text)])
    async for event in runner.run_async(user_id=user_id, session_id=session_id, new_message=message):
        if event.author != "user" and event.content and event.content.parts and event.content.parts[0].text:
            out = event.content.parts[0].text
    return out
