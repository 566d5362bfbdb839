"""A Google ADK agent on qvc: run, resume in another session, fork, then ``qvc show``/``log``/``diff``.
No API key, no network.

ADK's own ``Runner`` and ``LlmAgent``, with one changed line:
``session_service=QvcSessionService(repo)`` (and ``artifact_service=QvcArtifactService(...)``). The
model is qvc's scripted one (:mod:`qvc.integrations.google_adk.scripted`): it calls a tool that adds
to a running total (session state), counts calls per user (``user:`` state) and per app (``app:``
state), and saves a note as an artifact, then answers.

1. Two invocations of three and two tool steps: each stored event is a checkpoint of the session's
   thread; the tool's ``temp:`` key is stored nowhere.
2. A second session of the same user starts with the user's and the app's state.
3. The first session is forked at its first answer: the fork shares the source's commits.
4. ``qvc show`` reads the session as a conversation, ``qvc log`` lists its checkpoints and ``qvc
   diff`` says what the last event added.

Usage::

    python samples/google_adk_session.py [--repo PATH]

Exits 0 when every step behaved as described, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import warnings

from sample_repo import check, qvc, sample_repository

from qvc.integrations.google_adk import QvcArtifactService, QvcSessionService
from qvc.integrations.google_adk.layout import session_thread
from qvc.integrations.google_adk.scripted import ask, make_runner

APP, USER = "calc", "ada"


async def demo(repo: str) -> None:
    sessions = QvcSessionService(repo)
    artifacts = QvcArtifactService(store=sessions.store)
    store = sessions.store
    thread = session_thread(APP, USER, "s1")

    print(f"1. two invocations in {repo}")
    await sessions.create_session(app_name=APP, user_id=USER, session_id="s1", state={"user:lang": "en"})
    first = await ask(make_runner(sessions, steps=3, app_name=APP, artifact_service=artifacts), USER, "s1", "add 1..3")
    check(first == "The total is 6.", f"the first answer: {first!r}")
    second = await ask(make_runner(sessions, steps=2, app_name=APP, artifact_service=artifacts), USER, "s1", "more")
    check(second == "The total is 9.", f"the second answer: {second!r} (the total is session state)")
    s1 = await sessions.get_session(app_name=APP, user_id=USER, session_id="s1")
    line = list(store.first_parents(store.head(thread)))
    check(len(line) == 1 + len(s1.events) == 1 + 8 + 6, f"{len(s1.events)} events, {len(line)} checkpoints "
          "(the session's first, then one per event)")
    check(all("temp:" not in k for e in s1.events for k in e.actions.state_delta), "no temp: key was stored")
    notes = await artifacts.list_versions(app_name=APP, user_id=USER, session_id="s1", filename="notes.txt")
    check(notes == [0, 1, 2, 3, 4], f"the tool's note has {len(notes)} versions")

    print("2. a second session of the same user")
    s2 = await sessions.create_session(app_name=APP, user_id=USER, session_id="s2")
    check(s2.state == {"user:lang": "en", "user:calls": 5, "app:calls": 5}, f"it starts with {s2.state}")

    print("3. fork s1 at its first answer")
    answer = next(e for e in s1.events if e.content and e.content.parts and e.content.parts[0].text == first)
    fork = await sessions.fork_session(app_name=APP, user_id=USER, session_id="s1", new_session_id="s1-again",
                                       event_id=answer.id)
    check(fork.state["total"] == 6 and len(fork.events) == 8, "the fork holds the first invocation, total 6")
    again = await ask(make_runner(sessions, steps=1, app_name=APP), USER, "s1-again", "one more")
    check(again == "The total is 7.", f"the fork goes on by itself: {again!r}")
    fork_line = {i.hex for i in store.first_parents(store.head(session_thread(APP, USER, "s1-again")))}
    check({i.hex for i in line} & fork_line and len({i.hex for i in line} & fork_line) == 9,
          "the fork's history is the source's commits up to the first answer")
    await sessions.close()

    print("4. what qvc shows")
    qvc(repo, "show", thread)
    qvc(repo, "log", "--oneline", thread)
    qvc(repo, "diff", f"{thread}~1", thread)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", help="repository to create (replaced only if a sample created it; "
                        "default: a temporary directory, removed at the end)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    with sample_repository(args.repo, "qvc-adk-") as repo:
        asyncio.run(demo(repo))
    print("\nOK")


if __name__ == "__main__":
    main()
