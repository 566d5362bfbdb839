"""A Claude Agent SDK session mirrored into qvc: tool steps, a subagent, resumed from qvc alone, forked. No API key.

The agent is the SDK's own ``query()``, which runs the SDK's bundled ``claude`` program, with one
changed line, ``ClaudeAgentOptions(session_store=QvcSessionStore(repo))``. The program's model is a
scripted server on 127.0.0.1 speaking the Messages API, and its tool ``lookup`` is a real
in-process MCP tool (qvc/integrations/claude_agent_sdk/scripted.py): nothing leaves the machine.

1. A turn of three tool steps: the SDK mirrors the transcript into thread
   ``claude/session/<project>/<session id>``, each append a checkpoint.
2. A turn that hands work to a subagent (the ``Agent`` tool): the subagent's transcript is a
   thread of its own, ``.../<session id>/subagents/agent-<id>``.
3. The program's local transcripts are deleted (a new machine, a lost disk); ``resume=`` brings
   the session back from qvc alone, and the model sees its history.
4. ``rename_session_via_store`` and ``tag_session_via_store``; ``fork_session_via_store`` up to the
   first answer: the fork's first commit has the source's checkpoint as parent, so both share that
   history; a turn on the fork.
5. ``qvc log``, ``qvc show`` and ``qvc diff`` show the sessions as conversations.

Usage::

    python samples/claude_agent_sdk_session.py [--repo PATH]

Exits 0 when every step behaved as described, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile

from claude_agent_sdk import (
    fork_session_via_store,
    list_sessions_from_store,
    project_key_for_directory,
    rename_session_via_store,
    tag_session_via_store,
)
from sample_repo import check, sample_repository
from scripted_agent import show_cli

from qvc import CheckpointConfig
from qvc.integrations.claude_agent_sdk import QvcSessionStore
from qvc.integrations.claude_agent_sdk.scripted import LOOKUP, ScriptedModel, ask, offline_options


def checkpoints(store: QvcSessionStore, key: dict) -> list:
    """The transcript's own checkpoints, oldest first (a fork's line goes on into its source's: not those)."""
    thread = store.thread(key)
    return [t for t in reversed(list(store.store.list(CheckpointConfig(thread)))) if t.checkpoint.thread_id == thread]


async def demo(repo: str, work: str) -> None:
    project, config = os.path.join(work, "project"), os.path.join(work, "config")
    store = QvcSessionStore(repo)
    with ScriptedModel() as model:
        model.plan("Look up items 0 to 2.", calls=[(LOOKUP, {"n": n}) for n in range(3)],
                   answer="Items 0 to 2 are 0, 1 and 2.")
        model.plan("Ask a helper about item 7.", answer="The helper says item 7 is value 7.", calls=[
            ("Agent", {"description": "Look up item 7", "prompt": "Helper: look up item 7.",
                       "subagent_type": "general-purpose"})])
        model.plan("Helper: look up item 7.", calls=[(LOOKUP, {"n": 7})], answer="Item 7 is value 7.")
        model.plan("Which items did you look up?", answer="0, 1, 2 and 7.")
        model.plan("And item 3?", calls=[(LOOKUP, {"n": 3})], answer="Item 3 is value 3.")

        print(f"1. a turn of three tool steps, mirrored into {repo}")
        sid, answer = await ask("Look up items 0 to 2.", offline_options(store, model, project, config))
        key = {"project_key": project_key_for_directory(project), "session_id": sid}
        entries = store.entries(key)
        calls = [b["input"]["n"] for e in entries if e["type"] == "assistant"
                 for b in e["message"]["content"] if b["type"] == "tool_use"]
        check(answer == "Items 0 to 2 are 0, 1 and 2." and calls == [0, 1, 2],
              f"the session {sid[:8]} made three lookups and answered")
        turn_one = checkpoints(store, key)
        check(turn_one[-1].metadata["count"] == len(entries),
              f"thread {store.thread(key)}: {len(turn_one)} checkpoints hold its {len(entries)} transcript lines")
        at = max(i for i, e in enumerate(entries) if e["type"] == "assistant")
        first_answer = entries[at]["uuid"]

        print("2. a turn that hands work to a subagent")
        again, answer = await ask("Ask a helper about item 7.", offline_options(store, model, project, config,
                                                                               resume=sid))
        subs = await store.list_subkeys(key)
        check(again == sid and answer.endswith("value 7.") and len(subs) == 1,
              f"the subagent's transcript is a thread of its own: {store.thread({**key, 'subpath': subs[0]})}")

        print("3. the program's local transcripts are gone: resume from qvc alone")
        shutil.rmtree(config)
        asked = len(model.requests)
        again, answer = await ask("Which items did you look up?", offline_options(store, model, project, config,
                                                                                 resume=sid))
        seen = json.dumps(model.requests[asked]["messages"])
        check(again == sid and "Look up items 0 to 2." in seen and "Ask a helper about item 7." in seen,
              "the resumed session came back from qvc: the model saw both earlier turns")

        print("4. rename, tag and fork through the SDK's store functions")
        await rename_session_via_store(store, sid, "Lookups", directory=project)
        await tag_session_via_store(store, sid, "demo", directory=project)
        listed = await list_sessions_from_store(store, directory=project)
        check([(i.custom_title, i.tag) for i in listed] == [("Lookups", "demo")],
              "list_sessions_from_store reads the title and tag from the kept summary")
        fork = (await fork_session_via_store(store, sid, directory=project, up_to_message_id=first_answer)).session_id
        fkey = {**key, "session_id": fork}
        source = next(t for t in checkpoints(store, key) if t.metadata["count"] > at)  # the append that added it
        check(checkpoints(store, fkey)[0].checkpoint.parent_id == source.checkpoint.id,
              "the fork's first commit has as parent the source's checkpoint that added the first answer")
        _, answer = await ask("And item 3?", offline_options(store, model, project, config, resume=fork))
        check(answer == "Item 3 is value 3.", "a turn on the fork, its own thread")
        main_thread, fork_thread = store.thread(key), store.thread(fkey)
        sub_thread = store.thread({**key, "subpath": subs[0]})
    store.close()

    print("5. what qvc shows")
    show_cli(repo, ["branch"], ["log", "--oneline", main_thread], ["show", fork_thread], ["show", sub_thread],
             ["diff", f"{main_thread}~1", main_thread])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", help="repository to create (replaced only if a sample created it; "
                        "default: a temporary directory, removed at the end)")
    args = parser.parse_args()
    with sample_repository(args.repo, "qvc-claude-agent-sdk-") as repo:
        work = tempfile.mkdtemp(prefix="qvc-claude-work-")  # the project and the program's local state
        try:
            asyncio.run(demo(repo, work))
        finally:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
