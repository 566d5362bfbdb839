"""A small Microsoft Agent Framework workflow that runs offline: plain executors, no model, no network.

:func:`build_workflow` makes the graph the sample, the tests and the benchmark run::

    planner ──▶ worker ──▶ worker ──▶ ... (K tool steps, one superstep each) ──▶ writer [──▶ review]

- ``planner`` (the start executor) takes a :class:`Task` (``name``, ``steps``), keeps it in the shared
  state and sends the worker its first :class:`Step`;
- ``worker`` does one *tool step* per superstep (a lookup of item ``i``: ``"value i"`` plus
  ``payload`` bytes of text), appends it to the shared state's ``results``, counts its calls in its own
  executor state (``on_checkpoint_save`` / ``on_checkpoint_restore``), and sends itself the next step,
  or the results to the writer when the task's steps are done;
- ``writer`` yields the answer (``"N items: value 0, value 1, ..."``) or, with ``review=True``, asks for
  approval first (``request_info`` with a :class:`Draft`, answered with a ``str``) and yields the answer
  with the reviewer's note once the response comes.

With a checkpoint storage the framework checkpoints at every superstep boundary: an entry checkpoint,
then one after the planner, one per tool step and one after the writer (``steps + 3``). ``delay``
(seconds) is spent in each tool step, so a process can be killed in the middle of a run.

Imports the framework.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from agent_framework import (
    CheckpointStorage,
    Executor,
    Workflow,
    WorkflowBuilder,
    WorkflowContext,
    handler,
    register_checkpoint_type,
    response_handler,
)
from typing_extensions import Never

#: The workflow's name: its checkpoints are keyed by it, and so is its thread (``maf/workflow/lookups``).
NAME = "lookups"


@dataclass
class Task:
    """What the planner is asked: ``steps`` lookups for the task ``name``."""

    name: str
    steps: int


@dataclass
class Step:
    """The worker's next tool step."""

    task: str
    index: int
    steps: int


@dataclass
class Draft:
    """What the writer asks a reviewer to approve."""

    task: str
    text: str


for _cls in (Task, Step, Draft):
    register_checkpoint_type(_cls)  # checkpoints hold them; every persistent storage loads only allowed types


class Planner(Executor):
    """The start executor: keeps the task in the shared state and sends the first step."""

    @handler
    async def plan(self, task: Task, ctx: WorkflowContext[Step]) -> None:
        ctx.set_state("task", {"name": task.name, "steps": task.steps})
        ctx.set_state("results", [])
        await ctx.send_message(Step(task.name, 0, task.steps), target_id="worker")


class Worker(Executor):
    """One tool step per superstep (see the module docstring)."""

    def __init__(self, payload: int = 0, delay: float = 0.0) -> None:
        super().__init__(id="worker")
        self.payload, self.delay, self.calls = payload, delay, 0

    @handler
    async def step(self, step: Step, ctx: WorkflowContext[Step | List[str]]) -> None:
        if self.delay:
            await asyncio.sleep(self.delay)
        self.calls += 1
        result = f"value {step.index}" + (" " + "x" * self.payload if self.payload else "")
        results = list(ctx.get_state("results", [])) + [result]
        ctx.set_state("results", results)
        if step.index + 1 < step.steps:
            await ctx.send_message(Step(step.task, step.index + 1, step.steps), target_id="worker")
        else:
            await ctx.send_message([r.split(" x", 1)[0] for r in results], target_id="writer")

    async def on_checkpoint_save(self) -> Dict[str, Any]:
        return {"calls": self.calls}

    async def on_checkpoint_restore(self, state: Dict[str, Any]) -> None:
        self.calls = int(state.get("calls", 0))


class Writer(Executor):
    """Yields the answer, or asks for a review first (``review=True``)."""

    def __init__(self, review: bool = False) -> None:
        super().__init__(id="writer")
        self.review = review

    @handler
    async def write(self, results: List[str], ctx: WorkflowContext[Never, str]) -> None:
        text = f"{len(results)} items: " + ", ".join(results)
        if self.review:
            task = (ctx.get_state("task") or {}).get("name", "")
            await ctx.request_info(Draft(task, text), response_type=str, request_id=f"review-{task}")
        else:
            await ctx.yield_output(text)

    @response_handler
    async def reviewed(self, draft: Draft, note: str, ctx: WorkflowContext[Never, str]) -> None:
        await ctx.yield_output(f"{draft.text} ({note})")


def build_workflow(storage: Optional[CheckpointStorage] = None, *, name: str = NAME, payload: int = 0,
                   delay: float = 0.0, review: bool = False) -> Workflow:
    """The workflow (see the module docstring), checkpointing into ``storage`` when given."""
    planner, worker, writer = Planner(id="planner"), Worker(payload, delay), Writer(review)
    return (WorkflowBuilder(name=name, max_iterations=10_000, start_executor=planner, checkpoint_storage=storage)
            .add_edge(planner, worker).add_edge(worker, worker).add_edge(worker, writer).build())
