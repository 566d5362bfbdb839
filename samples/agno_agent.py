"""An agno agent on QvcDb: run, crash, continue, fork, then ``qvc timeline``. No API key needed.

The agent is agno's own ``Agent`` with ``checkpoint="tool-batch"`` and one changed line,
``db=QvcDb(repo)``; its model is qvc's :class:`~qvc.integrations.agno.scripted.ScriptedModel`
(a scripted reply per turn) and its tool sleeps ``--delay`` seconds.

1. A first run completes: three tool batches give four checkpoints.
2. A worker process starts a second run and is SIGKILLed inside its second tool batch.
3. The run is RUNNING with its first batch stored, as the crash left it; agno's
   ``acontinue_run`` on the same run id completes it.
4. ``continue_run(..., continue_from=3, fork=True)`` forks the first run after its first
   batch: a new run whose first commit's parent is the source's checkpoint there.
5. ``qvc runs`` and ``qvc timeline`` show the runs.

Usage::

    python samples/agno_agent.py [--repo PATH] [--delay SECONDS]

Exits 0 when every step behaved as described, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time

from agno.agent import Agent
from agno.run.base import RunStatus
from sample_repo import check, qvc, sample_repository

from qvc.integrations.agno import AsyncQvcDb, QvcDb
from qvc.integrations.agno.scripted import ScriptedModel
from qvc.runs import Runs

SESSION = "agno-demo"
PLAN = [[("population", {"city": "Paris"})], [("population", {"city": "Lagos"})],
        [("population", {"city": "Tokyo"})], "Tokyo is the largest of the three."]
FIGURES = {"Paris": "2.1 million", "Lagos": "15.4 million", "Tokyo": "14.0 million"}


def population(city: str) -> str:
    """The population of a city (slow on purpose: the worker is killed while it runs)."""
    time.sleep(float(os.environ.get("AGNO_SAMPLE_DELAY", "0")))
    return f"{city}: {FIGURES.get(city, 'unknown')}"


def agent(db: object) -> Agent:
    """The agent: agno's Agent, checkpointing after each tool batch, on ``db``."""
    return Agent(model=ScriptedModel(script=list(PLAN)), db=db, tools=[population], checkpoint="tool-batch",
                 session_id=SESSION, telemetry=False)


def worker(repo: str) -> None:
    asyncio.run(agent(AsyncQvcDb(repo)).arun("Which city is largest?", run_id="crashed"))
    print("worker: finished (it should have been killed)", flush=True)


def demo(repo: str, delay: float) -> None:
    db = QvcDb(repo)
    print(f"1. a first run in {repo}")
    first = agent(db).run("Which city is largest?", run_id="first")
    check(first.status is RunStatus.completed, "the first run COMPLETED")
    runs = Runs(db.store)  # the same repository through qvc.runs: agno runs are qvc runs
    check([e.status.value for e in runs.timeline("first")] == ["RUNNING"] * 3 + ["COMPLETED"],
          "three tool batches gave four checkpoints")

    print("2. a worker starts run 'crashed'; SIGKILL it inside its second tool batch")
    env = dict(os.environ, AGNO_SAMPLE_DELAY=str(delay))
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", "--repo", repo], env=env)
    try:
        deadline = time.monotonic() + 60
        seen = None
        while time.monotonic() < deadline and proc.poll() is None:
            seen = db.get_run("crashed")
            if seen is not None and seen.status is RunStatus.running and seen.tools:
                break
            time.sleep(0.02)
        check(seen is not None and proc.poll() is None, "a RUNNING checkpoint with the first batch appeared")
        time.sleep(delay / 3)  # the worker is now inside its second batch's tool call
        os.kill(proc.pid, signal.SIGKILL)
        check(proc.wait(timeout=30) == -signal.SIGKILL, "the worker died of SIGKILL")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    crashed = db.get_run("crashed")
    print(f"3. after the crash: {crashed.status.value}, {len(crashed.messages)} messages, "
          f"{len(crashed.tools)} tool execution(s), last checkpoint at message "
          f"{crashed.last_checkpoint_at_message_index}")
    check(crashed.status is RunStatus.running and len(crashed.tools) >= 1, "RUNNING, the last batch stored")
    done = asyncio.run(agent(AsyncQvcDb(repo, sync=db)).acontinue_run(run_id="crashed", session_id=SESSION))
    check(done.run_id == "crashed" and db.get_run("crashed").status is RunStatus.completed,
          "acontinue_run completed the same run id")

    print("4. fork the first run after its first tool batch")
    fork = agent(db).continue_run(run_id="first", session_id=SESSION, continue_from=3, fork=True)
    check(fork.forked_from_run_id == "first" and fork.status is RunStatus.completed,
          f"a new run {fork.run_id[:8]}… forked from 'first' COMPLETED")
    source = runs.timeline("first")
    check(runs.timeline(fork.run_id)[0].parent_id == source[0].id,
          "its first commit's parent is the checkpoint of 'first' after batch 1 (shared history)")

    print("5. what qvc shows")
    qvc(repo, "runs")
    qvc(repo, "timeline", "crashed")
    qvc(repo, "timeline", fork.run_id)
    db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", help="repository to create (replaced only if a sample created it; "
                        "default: a temporary directory, removed at the end)")
    parser.add_argument("--delay", type=float, default=0.6, help="seconds each tool call sleeps in the worker")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.repo)
        return
    with sample_repository(args.repo, "qvc-agno-") as repo:
        demo(repo, args.delay)


if __name__ == "__main__":
    main()
