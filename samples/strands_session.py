"""A Strands Agents session kept in qvc: tool steps, a resume, time travel, a fork, both session managers. No API key.

The agent is Strands' own ``Agent`` loop with one changed line,
``SnapshotSessionManager(session, storage=QvcStorage(repo))``. Its model is a scripted
``strands.models.Model`` and its tool ``lookup`` a real ``@tool`` function
(qvc/integrations/strands/scripted.py): nothing leaves the machine.

1. A turn of three tool steps: every message is saved as it is added (``save_latest_on="message"``),
   each save a checkpoint on thread ``strands/session/trip/agent/assistant``; the turn's end is
   also an immutable snapshot, a checkpoint on the same line.
2. A second turn; then a new agent (as a new process would) resumes from qvc alone.
3. ``restore_snapshot`` goes back to the first turn's snapshot and the agent carries on from there.
4. ``QvcStorage.fork_session`` starts session ``trip-b`` from the second turn's snapshot: its first
   commit has the source's as parent, so both share that history; a turn on the fork.
5. ``QvcSessionManager`` (Strands' per-message ``RepositorySessionManager``, in place of
   ``FileSessionManager``): a turn, a checkpoint per message and sync.
6. ``qvc branch``, ``qvc log``, ``qvc show`` and ``qvc diff`` show the sessions as conversations.

Usage::

    python samples/strands_session.py [--repo PATH]

Exits 0 when every step behaved as described, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess

from sample_repo import check, sample_repository
from scripted_agent import show_cli
from strands import Agent
from strands.session import SnapshotSessionManager

from qvc import CheckpointConfig
from qvc.integrations.strands import QvcSessionManager, QvcStorage, snapshot_thread
from qvc.integrations.strands.scripted import ScriptedModel, lookup


def texts(agent: Agent) -> list:
    return [b["text"] for m in agent.messages for b in m["content"] if "text" in b]


def make_agent(model: ScriptedModel, manager: object) -> Agent:
    return Agent(model=model, tools=[lookup], session_manager=manager, agent_id="assistant", callback_handler=None,
                 system_prompt="Answer in one sentence.")


def own_line(storage: QvcStorage, thread: str) -> list:
    """The thread's own checkpoints, oldest first (a fork's line goes on into its source's: not those)."""
    return [t for t in reversed(list(storage.store.list(CheckpointConfig(thread)))) if t.checkpoint.thread_id == thread]


def demo(repo: str) -> None:
    model = ScriptedModel()
    model.plan("Look up items 0 to 2.", calls=[("lookup", {"n": n}) for n in range(3)],
               answer="Items 0 to 2 are values 0, 1 and 2.")
    model.plan("And item 7?", calls=[("lookup", {"n": 7})], answer="Item 7 is value 7.")
    model.plan("Which items did you look up?", answer="0, 1, 2 and 7.")
    model.plan("Try item -1 instead.", calls=[("lookup", {"n": -1})], answer="Item -1 does not exist.")
    model.plan("And item 9?", calls=[("lookup", {"n": 9})], answer="Item 9 is value 9.")
    model.plan("Look up item 4.", calls=[("lookup", {"n": 4})], answer="Item 4 is value 4.")
    thread, fork_thread = snapshot_thread("trip", "agent", "assistant"), snapshot_thread("trip-b", "agent", "assistant")

    def manager(storage: QvcStorage, session: str = "trip") -> SnapshotSessionManager:
        return SnapshotSessionManager(session, storage=storage, save_latest_on="message",
                                      snapshot_trigger=lambda **kw: True)

    print(f"1. a turn of three tool steps, saved into {repo}")
    storage = QvcStorage(repo)
    agent = make_agent(model, manager(storage))
    answer = str(agent("Look up items 0 to 2.")).strip()
    cps = own_line(storage, thread)
    check(answer == "Items 0 to 2 are values 0, 1 and 2." and len(agent.messages) == 8,
          "the agent made three lookups and answered")
    check(len(cps) == 10 and sum(1 for t in cps if t.metadata.get("snapshot_id")) == 1,
          f"thread {thread}: 8 saves (one per message), the immutable snapshot and the last save")

    print("2. a second turn, then a new agent resumes from qvc alone")
    agent("And item 7?")
    storage.close()
    storage = QvcStorage(repo)
    asked = len(model.requests)
    resumed = make_agent(model, manager(storage))
    answer = str(resumed("Which items did you look up?")).strip()
    seen = json.dumps(model.requests[asked])
    check(answer == "0, 1, 2 and 7." and "Look up items 0 to 2." in seen and "And item 7?" in seen,
          "the resumed agent's model saw both earlier turns")

    print("3. back to the first turn's snapshot, and on from there")
    snaps = manager(storage)
    agent = make_agent(model, snaps)
    first, second = asyncio.run(snaps.list_snapshot_ids(agent))[:2]
    asyncio.run(snaps.restore_snapshot(agent, snapshot_id=first))
    agent("Try item -1 instead.")
    check(texts(agent)[-3:] == ["Items 0 to 2 are values 0, 1 and 2.", "Try item -1 instead.",
                                "Item -1 does not exist."],
          "the agent carried on from the first turn (the failed lookup is in its history)")

    print("4. a fork of the second turn's snapshot")
    storage.fork_session("trip", "trip-b", snapshot_id=second)
    fork = make_agent(model, manager(storage, "trip-b"))
    fork("And item 9?")
    source = next(t for t in own_line(storage, thread) if t.metadata.get("snapshot_id") == second)
    source_sha, fork_head = storage.store.resolve(source.checkpoint.id), storage.store.head(fork_thread)
    storage.close()  # everything published to git's files
    shared = subprocess.run(["git", "--git-dir", repo, "merge-base", "--is-ancestor", source_sha, fork_head]).returncode
    check(shared == 0 and texts(fork)[-2:] == ["And item 9?", "Item 9 is value 9."],
          f"{fork_thread} starts from {thread}'s second snapshot (git merge-base --is-ancestor) and went on")

    print("5. the per-message session manager, in place of FileSessionManager")
    with QvcSessionManager("notes", repo) as repository:
        make_agent(model, repository)("Look up item 4.")
        ops = [t.metadata["op"] for t in own_line(repository, "strands/repository/notes/agent/assistant")]
        check(ops.count("create_message") == 4, f"strands/repository/notes/agent/assistant: {len(ops)} "
                                                f"checkpoints, one per message appended and per agent sync")

    print("6. what qvc shows")
    show_cli(repo, ["branch"], ["log", "--oneline", "-n", "4", thread], ["show", fork_thread],
             ["diff", f"{thread}~4", thread])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", help="repository to create (replaced only if a sample created it; "
                        "default: a temporary directory, removed at the end)")
    args = parser.parse_args()
    with sample_repository(args.repo, "qvc-strands-") as repo:
        demo(repo)


if __name__ == "__main__":
    main()
