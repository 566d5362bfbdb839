"""A scripted agent: drives the OpenAI Agents SDK's real ``Runner`` offline (no key, no network).

The model is the SDK's own ``agents.testing.ScriptedModel``; the tools are real function tools.
:func:`make_agent` builds an agent whose run makes ``steps`` tool calls (``lookup``), one per
model turn, then answers; tests, the sample and the benchmark drive ``Runner.run`` with it::

    agent = make_agent(steps=3, tag="r1")
    await Runner.run(agent, "Look it up.", session=session, run_config=RUN_CONFIG)

``send_email`` needs a human's approval: a run that calls it stops with an interruption.
Imports the SDK.
"""

from __future__ import annotations

import json
import os
from typing import Any, List

from agents import Agent, RunConfig, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

set_tracing_disabled(True)
os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

#: The run config of offline runs: no tracing (nothing leaves the process).
RUN_CONFIG = RunConfig(tracing_disabled=True)


@function_tool
def lookup(n: int) -> str:
    """Look up the value of item ``n``."""
    return f"value {n}"


@function_tool(needs_approval=True)
def send_email(to: str, body: str) -> str:
    """Send an email (a human approves it first)."""
    return f"sent to {to}"


def tool_steps(steps: int, tag: str = "", answer: str = "done") -> List[List[Any]]:
    """The model's script: ``steps`` turns each calling ``lookup`` once, then ``answer``. Call and
    message ids carry ``tag``, so several runs in one session have ids of their own."""
    script: List[List[Any]] = [[function_call("lookup", json.dumps({"n": i}), call_id=f"call_{tag}_{i}")]
                               for i in range(steps)]
    script.append([assistant_message(answer, item_id=f"msg_{tag}")])
    return script


def make_agent(steps: int = 1, tag: str = "", answer: str = "done", script: Any = None) -> Agent:
    """An agent on a :class:`ScriptedModel` playing ``script`` (default: :func:`tool_steps`)."""
    model = ScriptedModel(script if script is not None else tool_steps(steps, tag, answer))
    return Agent(name="assistant", instructions="Be brief.", model=model, tools=[lookup, send_email])


def email_agent(tag: str = "", *, resumed: bool = False) -> Agent:
    """An agent whose run asks to send an email (stopping for approval), then, resumed, answers.
    ``resumed``: the agent of the resumed run, in another process (its model's next turn is the answer)."""
    answer = [assistant_message("Email sent.", item_id=f"msg_{tag}_mail")]
    call = [function_call("send_email", json.dumps({"to": "bob@example.com", "body": "hi"}),
                          call_id=f"call_{tag}_mail")]
    return make_agent(script=[answer] if resumed else [call, answer])
