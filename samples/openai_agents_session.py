"""An OpenAI Agents SDK agent on QvcSession: run, pause for approval, crash, resume, fork. No API key needed.

The agent is the SDK's own ``Agent`` run by its ``Runner``, with one changed line,
``session=QvcSession(session_id, repo)``; its model is the SDK's ``agents.testing.ScriptedModel``
and its tools are real function tools (qvc/integrations/openai_agents/scripted.py).

1. A run of three tool steps: five checkpoints on thread ``openai/session/chat``
   (the question, one per tool step, the answer), each holding only what it added.
2. A second question, then ``pop_item()``: the answer is removed by a new checkpoint; it stays in history.
3. A worker process asks to send an email, which needs a human's approval: it saves the paused
   run's ``RunState`` in the session's thread and is SIGKILLed while it waits.
4. The repository, opened again (which recovers what the killed worker acknowledged), gives the
   ``RunState`` back; approved, ``Runner.run(agent, state, session=...)`` completes the run.
5. ``fork("chat-retry", turn=2)``: a new session holding the items before the second question,
   whose first commit's parent is the source's checkpoint there; a different question on it.
6. ``qvc log``, ``qvc show`` and ``qvc diff`` show the sessions as conversations.

Usage::

    python samples/openai_agents_session.py [--repo PATH]

Exits 0 when every step behaved as described, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys

from agents import Runner
from sample_repo import check, sample_repository
from scripted_agent import show_cli

from qvc import CheckpointConfig
from qvc.integrations.openai_agents import QvcSession
from qvc.integrations.openai_agents.scripted import RUN_CONFIG, email_agent, make_agent


def checkpoints(session: QvcSession) -> list:
    """The session's checkpoints, oldest first."""
    return list(reversed(list(session.store.list(CheckpointConfig(session.thread)))))


async def worker(repo: str) -> None:
    """Step 3, in a process of its own: the run stops for approval; its state is saved; then it waits."""
    session = QvcSession("mail", repo)
    result = await Runner.run(email_agent("m"), "Email Bob a hello.", session=session, run_config=RUN_CONFIG)
    await session.save_state(result.to_state())
    print("paused", flush=True)
    await asyncio.sleep(600)


async def demo(repo: str) -> None:
    chat = QvcSession("chat", repo)
    print(f"1. a run of three tool steps in {repo}")
    result = await Runner.run(make_agent(3, "a", "Items 0 to 2 are looked up."), "Look up items 0 to 2.",
                              session=chat, run_config=RUN_CONFIG)
    check(result.final_output == "Items 0 to 2 are looked up.", "the run answered")
    check(len(checkpoints(chat)) == 5, "five checkpoints: the question, three tool steps, the answer")

    print("2. a second question, then pop_item()")
    await Runner.run(make_agent(0, "b", "Nothing more."), "Anything else?", session=chat, run_config=RUN_CONFIG)
    popped = await chat.pop_item()
    items = await chat.get_items()
    check(popped is not None and popped.get("id") == "msg_b" and items[-1]["content"] == "Anything else?",
          "the answer was popped")
    check(checkpoints(chat)[-1].metadata["op"] == "pop" and len(checkpoints(chat)) == 8,
          "by a new checkpoint: the answer stays in the history")

    print("3. a worker pauses for approval and is SIGKILLed while it waits")
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", "--repo", repo],
                            stdout=subprocess.PIPE, text=True)
    try:
        check(proc.stdout.readline().strip() == "paused", "the worker saved its paused run")
        proc.send_signal(signal.SIGKILL)
        check(proc.wait(timeout=30) == -signal.SIGKILL, "the worker died of SIGKILL")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    print("4. resume the paused run from the repository")
    chat.close()  # as a new process would: opening the repository recovers what the killed worker acknowledged
    chat = QvcSession("chat", repo)
    mail = QvcSession("mail", store=chat.store)
    agent = email_agent("m", resumed=True)
    state = await mail.load_state(agent)
    check(state is not None and [i.name for i in state.get_interruptions()] == ["send_email"],
          "the saved RunState waits for send_email's approval")
    state.approve(state.get_interruptions()[0])
    result = await Runner.run(agent, state, session=mail, run_config=RUN_CONFIG)
    check(result.final_output == "Email sent.", "the resumed run sent the email and answered")
    await mail.discard_state()

    print("5. fork the chat before its second question")
    retry = await chat.fork("chat-retry", turn=2)
    await Runner.run(make_agent(1, "c", "Item 0 again."), "Look up item 0 again.", session=retry,
                     run_config=RUN_CONFIG)
    source = chat.store.resolve(checkpoints(chat)[4].checkpoint.id)
    first = chat.store.resolve(checkpoints(retry)[5].checkpoint.id)
    check(chat.store.commit_info(first).parent == source,
          "the fork's first commit has the source's checkpoint after the first answer as parent")
    chat.close()

    print("6. what qvc shows")
    show_cli(repo, ["log", "--oneline", "openai/session/chat"], ["show", "openai/session/chat-retry"],
             ["diff", "openai/session/chat~1", "openai/session/chat"], ["show", "openai/session/mail"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", help="repository to create (replaced only if a sample created it; "
                        "default: a temporary directory, removed at the end)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(worker(args.repo))
        return
    with sample_repository(args.repo, "qvc-openai-agents-") as repo:
        asyncio.run(demo(repo))


if __name__ == "__main__":
    main()
