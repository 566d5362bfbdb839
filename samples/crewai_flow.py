"""CrewAI flows on qvc: one line to store a flow's states, and CrewAI's runtime checkpoints, in a
qvc repository; then a resume from the repository alone, a fork and a prune (docs/crewai.md).

Offline: a flow's methods are plain Python (no model). Run:

    python samples/crewai_flow.py [--repo PATH]
"""

from __future__ import annotations

import argparse
import os

# CrewAI checks PyPI for a newer release and sends telemetry; this sample stays offline.
for name, value in (("CREWAI_DISABLE_VERSION_CHECK", "true"), ("OTEL_SDK_DISABLED", "true"),
                    ("CREWAI_TRACING_ENABLED", "false"), ("CREWAI_DISABLE_TELEMETRY", "true")):
    os.environ.setdefault(name, value)

from crewai.flow.flow import Flow, listen, start  # noqa: E402
from crewai.flow.persistence import persist  # noqa: E402
from sample_repo import check, qvc, sample_repository  # noqa: E402

from qvc import CheckpointConfig  # noqa: E402
from qvc.integrations.crewai import QvcCheckpointProvider, QvcFlowPersistence, flow_thread  # noqa: E402


def build(persistence: QvcFlowPersistence) -> type:
    @persist(persistence)  # the one line: every method's state is saved in qvc
    class Research(Flow):
        @start()
        def plan(self) -> str:
            self.state.setdefault("notes", [])
            self.state["notes"].append("plan: look up two sources")
            return "planned"

        @listen(plan)
        def gather(self) -> str:
            self.state["notes"].append("gathered: source A, source B")
            return "gathered"

        @listen(gather)
        def write(self) -> str:
            self.state["notes"].append("report written")
            return "written"

    return Research


def demo(repo: str) -> None:
    print("1. a flow whose states are saved by @persist(QvcFlowPersistence(repo))")
    with QvcFlowPersistence(repo) as persistence:
        Research = build(persistence)
        Research().kickoff(inputs={"id": "research-1"})
        states = list(persistence.store.list(CheckpointConfig(flow_thread("research-1"))))
        check(len(states) == 3, "three methods, three checkpoints on crewai/flow/research-1")
        print("2. resumed from qvc: the same id restores the saved state and runs on")
        again = Research()
        again.kickoff(inputs={"id": "research-1"})
        check(again.state["notes"][:3] == states[0].checkpoint.state_data["notes"], "resumed from the saved state")

    print("3. CrewAI's runtime checkpoints through QvcCheckpointProvider")
    with QvcCheckpointProvider(repo) as provider:
        Research = build(QvcFlowPersistence(repo))
        Research(checkpoint=provider.config(on_events=["method_execution_finished"])).kickoff()
        first = list(provider.store.list(CheckpointConfig(provider.thread("main"))))[-1].checkpoint.id
        fork = provider.restore(Research, first, branch="what-if", on_events=["method_execution_finished"])
        fork.kickoff()
        check(provider.branches() == ["main", "what-if"], "a fork is a branch of its own: crewai/checkpoint/what-if")
        removed = provider.prune(provider.path, 1, branch="main")
        check(removed >= 1, f"prune kept main's newest checkpoint ({removed} dropped)")

    print("4. what qvc shows")
    for args in (["branch"], ["log", "--oneline", "crewai/flow/research-1"], ["show", "crewai/flow/research-1"],
                 ["diff", "crewai/flow/research-1~1", "crewai/flow/research-1"]):
        qvc(repo, *args)
    print("\nresumed, forked and pruned: all in", repo)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", help="repository to create (replaced only if a sample created it; "
                        "default: a temporary directory, removed at the end)")
    args = parser.parse_args()
    with sample_repository(args.repo, "qvc-crewai-") as repo:
        demo(repo)


if __name__ == "__main__":
    main()
