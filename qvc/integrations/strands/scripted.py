"""Offline runs of Strands Agents' real loop: a scripted model (a ``strands.models.Model``) and a tool.

:class:`ScriptedModel` answers each of the ``Agent``'s model calls from a *plan*: a prompt and what
the model does about it, a number of tool calls then an answer::

    model = ScriptedModel()
    model.plan("Look up items 0 to 2.", calls=[("lookup", {"n": n}) for n in range(3)],
               answer="Items 0 to 2 are looked up.")
    agent = Agent(model=model, tools=[lookup], agent_id="a1", callback_handler=None,
                  session_manager=SnapshotSessionManager("s1", storage=QvcStorage("agent.qvc")))
    agent("Look up items 0 to 2.")

For each call it finds the newest user text that starts with a planned prompt, counts the tool
results after it, and makes the next call of the plan or, when all were made, answers. So the
model holds no state of its own: an agent resumed from a session (in another process) carries on
where the conversation is. Calls about nothing planned are answered ``"done"``. Every request's
messages are kept (:attr:`ScriptedModel.requests`), so a test sees what the agent sent (a resumed
session's history, say). ``delay`` sleeps before each answer (a model's latency: a kill lands
mid-turn).

:func:`lookup` is the tool (``lookup(n)`` answers ``"value <n>"``; ``n < 0`` fails).

Imports Strands.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncGenerator, Dict, List, Optional, Tuple

from strands import tool
from strands.models import Model


@dataclass
class Plan:
    """What the model does about a prompt: ``calls`` (``(tool name, input)``), one per model
    turn, then ``answer``."""

    prompt: str
    calls: List[Tuple[str, Dict[str, Any]]] = field(default_factory=list)
    answer: str = "done"


def _texts(message: Dict[str, Any]) -> List[str]:
    return [b["text"] for b in message.get("content") or [] if isinstance(b, dict) and isinstance(b.get("text"), str)]


def _results(message: Dict[str, Any]) -> int:
    return sum(1 for b in message.get("content") or [] if isinstance(b, dict) and "toolResult" in b)


class ScriptedModel(Model):
    """A Strands model that plays plans (see the module docstring)."""

    def __init__(self, *, delay: float = 0.0) -> None:
        self.plans: List[Plan] = []
        self.requests: List[List[Dict[str, Any]]] = []
        self.delay = delay
        self._lock = threading.Lock()

    def plan(self, prompt: str, calls: Optional[List[Tuple[str, Dict[str, Any]]]] = None,
             answer: str = "done") -> Plan:
        """Register what the model does about ``prompt`` (a later plan for the same prompt wins)."""
        made = Plan(prompt, list(calls or []), answer)
        with self._lock:
            self.plans.insert(0, made)
        return made

    # -- strands.models.Model -------------------------------------------------------------------------

    def update_config(self, **model_config: Any) -> None:
        """Nothing to configure."""

    def get_config(self) -> Dict[str, Any]:
        """The model's configuration: its id."""
        return {"model_id": "scripted"}

    async def structured_output(self, output_model: Any, prompt: Any, system_prompt: Optional[str] = None,
                                **kwargs: Any) -> AsyncGenerator[Any, None]:
        """Not scripted: raises ``NotImplementedError``."""
        raise NotImplementedError("the scripted model does not produce structured output")
        yield  # pragma: no cover  (an async generator)

    async def stream(self, messages: Any, tool_specs: Any = None, system_prompt: Optional[str] = None,
                     **kwargs: Any) -> AsyncGenerator[Dict[str, Any], None]:
        """The next step of the plan the conversation is about, as Strands' stream events."""
        history = json.loads(json.dumps(list(messages), default=str))
        with self._lock:
            self.requests.append(history)
        if self.delay:
            await asyncio.sleep(self.delay)
        plan, done = self._step(history)
        yield {"messageStart": {"role": "assistant"}}
        if plan is not None and done < len(plan.calls):
            name, args = plan.calls[done]
            yield {"contentBlockStart": {"start": {"toolUse": {"name": name,
                                                               "toolUseId": f"tooluse_{uuid.uuid4().hex[:16]}"}}}}
            yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(args)}}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "tool_use"}}
        else:
            yield {"contentBlockStart": {"start": {}}}
            yield {"contentBlockDelta": {"delta": {"text": plan.answer if plan is not None else "done"}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "end_turn"}}
        yield {"metadata": {"usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15},
                            "metrics": {"latencyMs": 0}}}

    def _step(self, messages: List[Dict[str, Any]]) -> Tuple[Optional[Plan], int]:
        """The plan the conversation is about and how many of its calls were answered."""
        with self._lock:
            plans = list(self.plans)
        for i in range(len(messages) - 1, -1, -1):
            if messages[i].get("role") != "user":
                continue
            for text in _texts(messages[i]):
                for plan in plans:
                    if text.strip().startswith(plan.prompt):
                        return plan, sum(_results(m) for m in messages[i + 1:])
        return None, 0


@tool
def lookup(n: int) -> str:
    """Look up the value of item n.

    Args:
        n: The item's number (negative numbers fail).
    """
    if n < 0:
        raise ValueError(f"item {n} does not exist")
    return f"value {n}"
