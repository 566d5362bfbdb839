"""Crash recovery: SIGKILL an agent mid-run, then continue it in place to COMPLETED.

Runs offline with no API key (a scripted model and slow toy tools, see scripted_agent.py).

1. A worker subprocess starts a research run with ``cadence="tool-batch"``: three tool
   batches, each tool sleeping ``--delay`` seconds.
2. The parent polls the repository until a real checkpoint holds the first batch, then
   SIGKILLs the worker while it is inside the next batch.
3. It shows the run as the crash left it: RUNNING, the last checkpointed batch intact, and
   an owner (the dead worker's pid) that qvc reports as stale because its run lock is free.
4. It continues the run in place: the takeover is recorded, the remaining batches run, and
   the same run id ends COMPLETED with every tool execution (the resumed leg's and the
   crashed leg's).

Usage::

    python samples/crash_recovery.py [--repo PATH] [--delay SECONDS]

Exits 0 when every step behaved as described, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

from sample_repo import check, sample_repository
from scripted_agent import QUESTION, RESEARCH_PLAN, SYSTEM, ScriptedModel, drive, make_tools

from qvc.errors import UnknownRunError
from qvc.runs import Runs, RunStatus

RUN_ID = "research-1"
SESSION = "crash-demo"


def worker(repo: str, delay: float) -> None:
    """The agent process that gets killed: it records checkpoints until it dies."""
    with Runs(repo) as runs, runs.start(QUESTION, system=SYSTEM, run_id=RUN_ID, session_id=SESSION,
                                        cadence="tool-batch") as rec:
        def announce(r):
            print(f"worker: checkpoint {r.last_checkpoint_id[:12]} at message {len(r.run.messages)}", flush=True)

        drive(rec, ScriptedModel(RESEARCH_PLAN), make_tools(delay), on_checkpoint=announce)
    print("worker: finished (it should have been killed)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", help="repository to create (replaced only if a sample created it; "
                        "default: a temporary directory, removed at the end)")
    parser.add_argument("--delay", type=float, default=0.5, help="seconds each tool call sleeps in the worker")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.repo, args.delay)
        return
    with sample_repository(args.repo, "qvc-crash-") as repo:
        demo(repo, args.delay)


def demo(repo: str, delay: float) -> None:
    print(f"1. worker starts run {RUN_ID!r} in {repo} (tools sleep {delay}s)")
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", "--repo", repo,
                             "--delay", str(delay)])
    runs = Runs(repo)
    try:
        deadline = time.monotonic() + 60
        run = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                run = runs.get(RUN_ID)
            except UnknownRunError:
                run = None
            if run is not None and run.status is RunStatus.RUNNING and len(run.tools) >= 2:
                break
            time.sleep(0.05)
        check(run is not None and proc.poll() is None, "a RUNNING checkpoint with the first batch appeared")
        print(f"2. SIGKILL worker pid {proc.pid} (checkpoint {run.checkpoint_id[:12]}, "
              f"{len(run.messages)} messages)")
        os.kill(proc.pid, signal.SIGKILL)
        check(proc.wait(timeout=30) == -signal.SIGKILL, "the worker died of SIGKILL")

        crashed = runs.get(RUN_ID)
        owner = runs.owner_status(RUN_ID)
        print(f"3. after the crash: status {crashed.status}, {len(crashed.messages)} messages, "
              f"{len(crashed.tools)} tool executions, last checkpoint at message "
              f"{crashed.last_checkpoint_at_message_index}")
        print(f"   owner: {owner.state} ({owner.reason})")
        check(crashed.status is RunStatus.RUNNING, "the run is RUNNING")
        check(crashed.checkpoint_id == run.checkpoint_id or len(crashed.tools) > len(run.tools),
              "the latest checkpoint is the one seen before the kill (or a later one)")
        results = {m.tool_call_id: m.content for m in crashed.messages if m.role == "tool"}
        check(all(results.get(t.tool_call_id) == t.result for t in crashed.tools) and len(results) >= 2,
              "the last batch is intact: every tool result is there, message and execution")
        check(owner.state == "stale" and owner.owner.pid == proc.pid, "its owner is the dead worker, stale")

        print("4. continue in place")
        rec = runs.continue_run(RUN_ID)
        print(f"   {rec.checkpoints[0][:12]}: takeover recorded, run {rec.run_id!r} now owned by pid {os.getpid()}")
        final = drive(rec, ScriptedModel(RESEARCH_PLAN), make_tools())
        check(final.run_id == RUN_ID and runs.get(RUN_ID).status is RunStatus.COMPLETED,
              "the same run id is COMPLETED")
        stored = runs.get(RUN_ID)
        check(len(stored.tools) == sum(len(b) for b in RESEARCH_PLAN),
              f"all {len(stored.tools)} tool executions kept (crashed leg + resumed leg)")
        check(len(stored.takeovers) == 1 and stored.takeovers[0]["previous_owner"]["pid"] == proc.pid,
              "the takeover names the dead worker")
        check([r.run_id for r in runs.list_runs(SESSION)] == [RUN_ID], "one run in the session, no fork")
        print(f"   answer: {stored.content}")
        print("5. timeline")
        for e in runs.timeline(RUN_ID):
            print(f"   {e.id[:12]}  msg {e.message_index:>2}  {e.status.value:<9} {e.reason:<10} "
                  f"{e.role or '':<9} {e.preview[:60]}{'  <- latest' if e.is_latest else ''}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        runs.close()


if __name__ == "__main__":
    main()
