"""A Microsoft Agent Framework workflow checkpointed into qvc: supersteps, a resume from an older
checkpoint in a new process, a review answered later, a fork. No model, no network.

The workflow is the framework's own ``Workflow`` of plain executors (a planner, a worker that does one
tool step per superstep, a writer; qvc/integrations/agent_framework/scripted.py), with one changed
line, ``WorkflowBuilder(..., checkpoint_storage=QvcCheckpointStorage(repo))``.

1. A run of three tool steps: the framework checkpoints every superstep boundary into thread
   ``maf/workflow/lookups``, each checkpoint a commit whose parent is the checkpoint it names as
   previous (6 checkpoints: the entry, the planner, three steps, the writer).
2. A new process resumes from the checkpoint after the second tool step (``run(checkpoint_id=...)``),
   with nothing but the repository: the new supersteps are qvc's time travel, the old line is kept
   (superseded), and every checkpoint still lists.
3. A run that asks for a review (``request_info``) pauses; another process answers it from the
   repository (``run(checkpoint_id=..., responses=...)``).
4. A workflow of another name resumed from a checkpoint of the first is a fork: its thread's first
   commit has that checkpoint as parent, so both share the history before it.
5. ``qvc log``, ``qvc show`` and ``qvc diff`` show the checkpoints as supersteps.

Usage::

    python samples/agent_framework_workflow.py [--repo PATH]

Exits 0 when every step behaved as described, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import subprocess
import sys

from sample_repo import check, sample_repository
from scripted_agent import show_cli

from qvc import CheckpointConfig
from qvc.integrations.agent_framework import QvcCheckpointStorage
from qvc.integrations.agent_framework.scripted import NAME, Task, build_workflow

#: What the second process runs: resume the workflow from a checkpoint, with the repository alone.
RESUME = """
import asyncio, json, sys
from qvc.integrations.agent_framework import QvcCheckpointStorage
from qvc.integrations.agent_framework.scripted import build_workflow
async def main():
    more = json.loads(sys.argv[3])
    with QvcCheckpointStorage(sys.argv[1]) as storage:
        workflow = build_workflow(storage, review=more.pop("review", False))
        print(json.dumps((await workflow.run(checkpoint_id=sys.argv[2], **more)).get_outputs()))
asyncio.run(main())
"""


def resumed(repo: str, checkpoint_id: str, **more: object) -> list:
    """The outputs of the workflow resumed from ``checkpoint_id`` in a new process."""
    done = subprocess.run([sys.executable, "-c", RESUME, repo, checkpoint_id, json.dumps(more)],
                          capture_output=True, text=True, timeout=120)
    check(done.returncode == 0, f"a new process resumed from {checkpoint_id[:8]}")
    return json.loads(done.stdout.splitlines()[-1])


async def demo(repo: str) -> None:
    print("1. a run of three tool steps")
    with QvcCheckpointStorage(repo) as storage:
        result = await build_workflow(storage).run(Task("first", 3))
        check(result.get_outputs() == ["3 items: value 0, value 1, value 2"], "the workflow answered")
        first = await storage.list_checkpoint_ids(workflow_name=NAME)
        check(len(first) == 6, "six checkpoints: the entry, the planner, three tool steps, the writer")
        thread = storage.thread(NAME)
        line = list(reversed(list(storage.store.list(CheckpointConfig(thread)))))
        check([t.checkpoint.id for t in line] == first, f"each is a commit on {thread}, in order")
        previous = [(await storage.load(i)).previous_checkpoint_id for i in first]
        check(previous == [None, *first[:-1]], "each names the one before as previous: that is its git parent")

    print("2. a new process resumes from the checkpoint after the second tool step")
    check(resumed(repo, first[3]) == ["3 items: value 0, value 1, value 2"], "it ran the last step again and answered")
    with QvcCheckpointStorage(repo) as storage:
        every = await storage.list_checkpoint_ids(workflow_name=NAME)
        check(set(first) < set(every) and len(every) == 8, "the old line is kept (superseded): 8 checkpoints list")
        latest = await storage.get_latest(workflow_name=NAME)
        check(latest.state["_executor_state"]["worker"] == {"calls": 3}, "the worker's own state came back too")

        print("3. a run that asks for a review, answered by another process")
        review = await build_workflow(storage, review=True).run(Task("checked", 2))
        check([e.request_id for e in review.get_request_info_events()] == ["review-checked"], "it pauses for review")
        paused = await storage.get_latest(workflow_name=NAME)
        check(list(paused.pending_request_info_events) == ["review-checked"], "the pending request is in qvc")
    out = resumed(repo, paused.checkpoint_id, review=True, responses={"review-checked": "approved"})
    check(out == ["2 items: value 0, value 1 (approved)"], "answered from the repository alone")

    print("4. a workflow of another name resumed from a checkpoint of the first: a fork")
    with QvcCheckpointStorage(repo) as storage:
        forked = await build_workflow(storage, name="lookups-retry").run(checkpoint_id=first[2])
        check(forked.get_outputs() == ["3 items: value 0, value 1, value 2"], "the fork ran to its end")
        fork = storage.thread("lookups-retry")
        own = [t for t in reversed(list(storage.store.list(CheckpointConfig(fork)))) if t.config.thread_id == fork]
        check(own[0].parent_config.checkpoint_id == first[2], "its first commit's parent is the source's checkpoint")

    print("5. what qvc shows")
    show_cli(repo, ["branch"], ["log", "--oneline", "--all"], ["show", thread], ["diff", f"{thread}~1", thread])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", help="repository to create (replaced only if a sample created it; "
                        "default: a temporary directory, removed at the end)")
    args = parser.parse_args()
    logging.getLogger("agent_framework").setLevel(logging.ERROR)  # its warning about the worker's self-loop
    with sample_repository(args.repo, "qvc-agent-framework-") as repo:
        asyncio.run(demo(repo))


if __name__ == "__main__":
    main()
