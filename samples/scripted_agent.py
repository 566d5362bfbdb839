"""A deterministic scripted "model", toy tools and an agent loop for the run samples (no API key).

The model follows a plan: while fewer tool batches than planned have been answered since the
last user message, it asks for the next batch of tool calls; then it writes an answer from the
tool results. Tool call ids count the calls in the conversation, so they are unique in a run
and identical on every replay.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from qvc.runs import Message, Run, RunRecorder, ToolCall

POPULATIONS = {
    "Paris": "Paris: 2.1 million inhabitants (city proper, 2024).",
    "Tokyo": "Tokyo: 14.1 million inhabitants (metropolis, 2024).",
    "Lagos": "Lagos: 15.4 million inhabitants (state estimate, 2024).",
    "Berlin": "Berlin: 3.9 million inhabitants (2024).",
}

SYSTEM = "You are a careful research assistant. Use the tools, then answer in one sentence."


def make_tools(delay: float = 0.0) -> dict[str, Callable[..., Any]]:
    """``search`` (a table lookup), ``lookup`` (raises for unknown cities) and ``compare``; each sleeps ``delay``."""

    def search(city: str) -> str:
        time.sleep(delay)
        return POPULATIONS.get(city, f"no results for {city!r}")

    def lookup(city: str) -> str:
        time.sleep(delay)
        if city not in POPULATIONS:
            raise ValueError(f"no such city in the gazetteer: {city!r}")
        return POPULATIONS[city]

    def compare(cities: list) -> str:
        time.sleep(delay)
        return " > ".join(sorted(cities, key=lambda c: -float(POPULATIONS[c].split()[1])))

    return {"search": search, "lookup": lookup, "compare": compare}


class ScriptedModel:
    """``plan[i]`` is the i-th tool batch, as ``(tool name, arguments)`` pairs.

    ``fail_calls``: the first N calls raise ``ConnectionError`` (a model API that is down);
    ``fail_on``: the numbers (1-based) of further calls that raise it.
    """

    def __init__(self, plan: Sequence[Sequence[tuple[str, dict]]], fail_calls: int = 0,
                 fail_on: Sequence[int] = ()):
        self.plan = [list(batch) for batch in plan]
        self.fail_calls = fail_calls
        self.fail_on = set(fail_on)
        self.calls = 0

    def __call__(self, messages: Sequence[Message]) -> Message:
        self.calls += 1
        if self.calls <= self.fail_calls or self.calls in self.fail_on:
            raise ConnectionError("model API unreachable (scripted failure)")
        last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
        done = sum(1 for m in messages[last_user + 1:] if m.role == "assistant" and m.tool_calls)
        if done < len(self.plan):
            n = sum(len(m.tool_calls) for m in messages)
            calls = [ToolCall(f"call_{n + i}", name, args) for i, (name, args) in enumerate(self.plan[done])]
            return Message("assistant", tool_calls=calls)
        facts = [m.content for m in messages[last_user + 1:] if m.role == "tool"]
        return Message("assistant", "Answer: " + " ".join(facts))


def drive(rec: RunRecorder, model: Callable[[Sequence[Message]], Message], tools: dict[str, Callable[..., Any]],
          on_checkpoint: Callable[[RunRecorder], None] | None = None) -> Run:
    """The agent loop: call the model, run its tool calls, checkpoint after each batch, until an answer.

    A failing tool becomes an error tool message (the run goes on). The session state keeps a
    ``notes`` list with one line per successful tool call, so snapshots show it growing.
    """
    while True:
        pending = rec.pending_tool_calls()
        if not pending:
            reply = model(rec.run.messages)
            rec.add_metrics(model_calls=1)
            rec.add_message(reply)
            if not reply.tool_calls:
                return rec.complete(reply.content)
            pending = reply.tool_calls
        for call in pending:
            try:
                result, error = tools[call.name](**call.arguments), False
                rec.run.session_state.setdefault("notes", []).append(f"{call.name}: {result}")
            except Exception as exc:  # noqa: BLE001 - a tool error is data for the model
                result, error = f"{type(exc).__name__}: {exc}", True
            rec.tool_result(call, result, error=error)
            rec.after_tool_call()
        if rec.after_tool_batch() and on_checkpoint is not None:
            on_checkpoint(rec)


RESEARCH_PLAN = [
    [("search", {"city": "Paris"}), ("search", {"city": "Tokyo"})],
    [("search", {"city": "Lagos"})],
    [("compare", {"cities": ["Paris", "Tokyo", "Lagos"]})],
]
QUESTION = "Which is biggest: Paris, Tokyo or Lagos?"


def show_cli(repo: str, *commands: list[str]) -> None:
    """Run ``qvc`` commands on ``repo`` and print them with their output; exit if one fails."""
    qvc = [shutil.which("qvc")] if shutil.which("qvc") else [sys.executable, "-m", "qvc"]
    for args in commands:
        print(f"\n$ qvc {' '.join(args)}")
        done = subprocess.run([*qvc, "--repo", repo, "--no-pager", *args], capture_output=True, text=True)
        print((done.stdout + done.stderr).rstrip())
        if done.returncode != 0:
            raise SystemExit(f"qvc {args[0]} failed")
