"""A process that owns a run and then sleeps, for the takeover tests (killed with SIGKILL).

Usage: python runs_worker.py REPO RUN_ID
Prints "ready <checkpoint id>" once a RUNNING checkpoint is durable, then sleeps.
"""

from __future__ import annotations

import sys
import time

from qvc.runs import Message, Runs, ToolCall


def main() -> None:
    repo, run_id = sys.argv[1], sys.argv[2]
    runs = Runs(repo)
    rec = runs.start("slow question", system="sys", run_id=run_id, session_id="workers")
    rec.add_message(Message("assistant", tool_calls=[ToolCall("c1", "slow", {})]))
    rec.tool_result("c1", "first result")
    checkpoint = rec.after_tool_batch()
    print(f"ready {checkpoint}", flush=True)
    rec.add_message(Message("assistant", tool_calls=[ToolCall("c2", "slow", {})]))  # in flight, never stored
    time.sleep(120)


if __name__ == "__main__":
    main()
