"""Time travel on runs: timeline, a true point-in-time snapshot, a fork, and a rewind that keeps the tail.

Runs offline with no API key (a scripted model and toy tools, see scripted_agent.py).

1. A research run (three tool batches) COMPLETES. Its timeline lists one checkpoint per
   batch plus the end, each with a stable id (the checkpoint id).
2. A snapshot at an inner boundary returns the run as it was then: fewer messages, and the
   session state and metrics of that moment (not today's values with a shorter message list).
3. Continuing the COMPLETED run from that boundary with a new question forks a new run
   (``forked_from_run_id`` / ``forked_from_message_index``); the source is unchanged.
4. A second run fails (ERROR) after two batches. Continuing it in place from an earlier
   boundary rewinds it: the same run id goes on from the cut, and the replaced tail is still
   there (listed with ``current=False``, readable by its checkpoint id).
5. The threads of the session are printed as a graph, then the history the next run would get.

Usage::

    python samples/time_travel.py [--repo PATH]

Exits 0 when every step behaved as described, 1 otherwise.
"""

from __future__ import annotations

import argparse

from sample_repo import check, sample_repository
from scripted_agent import (
    QUESTION,
    RESEARCH_PLAN,
    SYSTEM,
    ScriptedModel,
    drive,
    make_tools,
    show_cli,
)

from qvc.runs import Runs, RunStatus

SESSION = "time-travel"


def show_timeline(runs: Runs, run_id: str) -> None:
    for e in runs.timeline(run_id):
        mark = "<- latest" if e.is_latest else ("(superseded)" if not e.current else "")
        print(f"   {e.id[:12]}  msg {e.message_index:>2}  {e.status.value:<9} {e.reason:<10} "
              f"{(e.role or ''):<9} {e.preview[:48]:<48} {mark}")


def show_graph(runs: Runs, session: str) -> None:
    """The session's runs as lines of checkpoints, newest first, like ``git log --graph`` per thread."""
    for summary in runs.list_runs(session):
        run = runs.get(summary.run_id)
        entries = runs.timeline(summary.run_id)
        lineage = ""
        if run.forked_from_run_id:
            lineage = f"  (forked from {run.forked_from_run_id}@{run.forked_from_message_index}"
            lineage += f", parent checkpoint {entries[0].parent_id[:12]})"
        print(f"   thread {runs.thread(summary.run_id)}  [{run.status.value}]{lineage}")
        current = [e for e in entries if e.current]
        for e in reversed(current):
            print(f"   * {e.id[:12]} {e.status.value:<9} {e.reason:<10} msg {e.message_index}")
        for e in reversed([e for e in entries if not e.current]):
            print(f"   | x {e.id[:12]} {e.status.value:<9} {e.reason:<10} msg {e.message_index}  (superseded line)")


def demo(repo: str) -> None:
    with Runs(repo) as runs:
        print("1. a COMPLETED research run and its timeline")
        with runs.start(QUESTION, system=SYSTEM, session_id=SESSION, run_id="research") as rec:
            drive(rec, ScriptedModel(RESEARCH_PLAN), make_tools())
        show_timeline(runs, "research")
        timeline = runs.timeline("research")
        check(len(timeline) == len(RESEARCH_PLAN) + 1, f"{len(RESEARCH_PLAN)} batches gave "
                                                       f"{len(RESEARCH_PLAN) + 1} checkpoints")

        inner = timeline[1]
        print(f"2. snapshot at message {inner.message_index} (checkpoint {inner.id[:12]})")
        snap = runs.snapshot("research", inner.message_index)
        final = runs.get("research")
        print(f"   then: {len(snap.run.messages)} messages, status {snap.run.status}, "
              f"notes {len(snap.run.session_state['notes'])}, tool calls {snap.run.metrics['tool_calls']}")
        print(f"   now:  {len(final.messages)} messages, status {final.status}, "
              f"notes {len(final.session_state['notes'])}, tool calls {final.metrics['tool_calls']}")
        check(snap.exact and snap.checkpoint_id == inner.id, "the snapshot is the stored checkpoint itself")
        check(snap.run.session_state != final.session_state and snap.run.status is RunStatus.RUNNING,
              "its session state and status are those of that moment")
        check(runs.snapshot("research", inner.id).run.to_dict() == snap.run.to_dict(),
              "addressing it by its stable id gives the same state")
        check(runs.snapshot("research", 4).message_index == 2,
              "an index inside a tool exchange snaps to a pair-safe boundary (4 -> 2)")

        print(f"3. continue the COMPLETED run from message {inner.message_index} with a new question")
        rec = runs.continue_run("research", "Add Berlin, then compare all four.", continue_from=inner.message_index)
        fork = drive(rec, ScriptedModel([[("search", {"city": "Berlin"})],
                                         [("compare", {"cities": ["Paris", "Tokyo", "Lagos", "Berlin"]})]]),
                     make_tools())
        print(f"   new run {fork.run_id}: {fork.status}, answer {fork.content!r}")
        check(fork.run_id != "research" and fork.forked_from_run_id == "research"
              and fork.forked_from_message_index == inner.message_index, "it forked a new run with its lineage")
        check(runs.get("research").to_dict() == final.to_dict(), "the source run is unchanged")

        print("4. a run that fails, rewound in place to an earlier boundary")
        try:
            with runs.start(QUESTION, system=SYSTEM, session_id=SESSION, run_id="flaky") as rec:
                drive(rec, ScriptedModel(RESEARCH_PLAN, fail_on=[3]), make_tools())
        except ConnectionError as exc:
            print(f"   the agent raised {type(exc).__name__}: {exc}")
        before = runs.timeline("flaky")
        show_timeline(runs, "flaky")
        cut = before[0]
        rec = runs.continue_run("flaky", "Skip Lagos: compare Paris and Tokyo only.", continue_from=cut.message_index)
        rewound = drive(rec, ScriptedModel([[("compare", {"cities": ["Paris", "Tokyo"]})]]), make_tools())
        print(f"   after continue_from={cut.message_index}:")
        show_timeline(runs, "flaky")
        after = runs.timeline("flaky")
        kept = [e for e in after if not e.current]
        check(rewound.run_id == "flaky" and rewound.status is RunStatus.COMPLETED, "same run id, COMPLETED")
        check({e.id for e in before[1:]} == {e.id for e in kept}, "the replaced tail is still listed")
        old = runs.snapshot("flaky", before[-1].id)
        check(old.run.status is RunStatus.ERROR and not old.current, "and readable: its ERROR state is intact")

        print("5. the session's threads")
        show_graph(runs, SESSION)
        history = runs.history(SESSION)
        print(f"   history for the next run: {len(history)} messages from "
              f"{len(runs.history_runs(SESSION))} runs")
        check(len(runs.history_runs(SESSION)) == 3, "all three COMPLETED runs are in the history")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", help="repository to create (replaced only if a sample created it; "
                        "default: a temporary directory, removed at the end)")
    args = parser.parse_args()
    with sample_repository(args.repo, "qvc-timetravel-") as repo:
        demo(repo)
        # The same history through the command line: the fork and the superseded line drawn.
        show_cli(repo, ["log", "--graph", "--all"], ["timeline", "flaky"])


if __name__ == "__main__":
    main()
