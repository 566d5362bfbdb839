"""Errors are data: a failing tool, a failing model call, and continuing the ERROR run in place.

Runs offline with no API key (a scripted model and toy tools, see scripted_agent.py).

A. A tool raises. The agent loop records the error as a tool message (``tool_call_error``),
   the tool-batch checkpoint fires, and the run goes on to COMPLETED. Nothing is lost.
B. The model call fails before any tool batch. The ERROR checkpoint still holds the system
   and user messages that led to the failure (the in-flight messages are flushed into it).
C. ``continue_run`` on the ERROR run retries it in place: the same run id ends COMPLETED.

Usage::

    python samples/tool_error.py [--repo PATH]

Exits 0 when every step behaved as described, 1 otherwise.
"""

from __future__ import annotations

import argparse

from sample_repo import check, sample_repository
from scripted_agent import SYSTEM, ScriptedModel, drive, make_tools

from qvc.runs import Runs, RunStatus


def demo(repo: str) -> None:
    with Runs(repo) as runs:
        print("A. a tool raises")
        plan = [[("lookup", {"city": "Atlantis"}), ("lookup", {"city": "Paris"})]]
        with runs.start("How many people live in Atlantis and Paris?", system=SYSTEM, session_id="errors") as rec:
            run_a = drive(rec, ScriptedModel(plan), make_tools())
        stored = runs.get(run_a.run_id)
        failed = [m for m in stored.messages if m.role == "tool" and m.tool_call_error]
        print(f"   tool message: {failed[0].content if failed else None!r}")
        check(stored.status is RunStatus.COMPLETED, "the run COMPLETED")
        check(len(failed) == 1 and "ValueError" in failed[0].content, "the error is kept as a tool message")
        check([t.tool_call_error for t in stored.tools] == [True, False], "and as a failed tool execution")
        check([e.reason for e in runs.timeline(run_a.run_id)] == ["tool-batch", "end"],
              "the batch with the error was checkpointed, then the end")

        print("B. the model call fails before any tool batch")
        try:
            with runs.start("Which is bigger, Paris or Berlin?", system=SYSTEM, session_id="errors") as rec:
                run_id = rec.run_id
                drive(rec, ScriptedModel([[("search", {"city": "Paris"})]], fail_calls=1), make_tools())
        except ConnectionError as exc:
            print(f"   the agent raised {type(exc).__name__}: {exc}")
        errored = runs.get(run_id)
        print(f"   stored: status {errored.status}, error {errored.error}, "
              f"messages {[m.role for m in errored.messages]}")
        check(errored.status is RunStatus.ERROR, "the run is ERROR")
        check([m.role for m in errored.messages] == ["system", "user"],
              "the ERROR checkpoint keeps the system and user messages")
        check(errored.error["type"] == "ConnectionError", "and says what failed")

        print("C. continue the ERROR run in place")
        rec = runs.continue_run(run_id)
        final = drive(rec, ScriptedModel([[("search", {"city": "Paris"}), ("search", {"city": "Berlin"})]]),
                      make_tools())
        stored = runs.get(run_id)
        print(f"   answer: {final.content}")
        check(final.run_id == run_id and stored.status is RunStatus.COMPLETED, "the same run id is COMPLETED")
        check(stored.error is None and [m.role for m in stored.messages][:2] == ["system", "user"],
              "the error is cleared and the conversation continues from the kept messages")
        check(len(runs.list_runs("errors")) == 2, "no extra run was created")
        print("   timeline:", " → ".join(f"{e.status.value}/{e.reason}@{e.message_index}"
                                          for e in runs.timeline(run_id)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", help="repository to create (replaced only if a sample created it; "
                        "default: a temporary directory, removed at the end)")
    args = parser.parse_args()
    with sample_repository(args.repo, "qvc-errors-") as repo:
        demo(repo)


if __name__ == "__main__":
    main()
