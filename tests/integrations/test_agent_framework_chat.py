"""QvcHistoryProvider (qvc.integrations.agent_framework): Microsoft Agent Framework's agent-side
``HistoryProvider`` (``get_messages`` / ``save_messages``) on a qvc repository.

The provider's contracts (round trips, thread names, replays not stored twice, replace, clear as a
qvc delete, concurrent writers); the framework's own agent loop, offline (a scripted chat client,
qvc/integrations/agent_framework/scripted_chat.py): K tool steps written through qvc, one commit per
model call with per-service-call persistence; a conversation resumed in a new process from the
repository alone; the viewer showing a session as a conversation; the adapter kit (adapter_kit.py);
and (slow tier) a process killed mid-conversation whose acknowledged saves read back."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Set

import pytest

pytest.importorskip("agent_framework")

from adapter_kit import AdapterDriver, AdapterKit, Operation  # noqa: E402
from agent_framework import Agent, AgentSession, HistoryProvider, Message  # noqa: E402
from helpers import child_env, fsck, slow_enabled  # noqa: E402

from qvc import CheckpointConfig, GitCheckpointStore  # noqa: E402
from qvc.errors import InvalidInputError, StoreClosedError  # noqa: E402
from qvc.integrations.agent_framework import QvcHistoryProvider, chat_session_of, chat_thread  # noqa: E402
from qvc.integrations.agent_framework.history_viewer import KEY, view  # noqa: E402
from qvc.integrations.agent_framework.scripted_chat import ScriptedChatClient, add  # noqa: E402
from qvc.store.prefixes import owner_of  # noqa: E402
from qvc.store.viewers import register_viewer, view_state  # noqa: E402

register_viewer(KEY, view)  # what the pyproject entry point declares, without reinstalling the package


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def user(text: str, **kw: Any) -> Message:
    return Message(role="user", contents=[text], **kw)


def texts(provider: QvcHistoryProvider, session_id: str) -> List[str]:
    return [m.text for m in run(provider.get_messages(session_id))]


def agent_of(provider: QvcHistoryProvider, steps: int = 3, per_call: bool = False) -> Agent:
    return Agent(ScriptedChatClient(steps=steps), tools=[add], context_providers=[provider],
                 require_per_service_call_history_persistence=per_call)


def line(provider: QvcHistoryProvider, session_id: str) -> list:
    return list(provider.store.list(CheckpointConfig(chat_thread(session_id))))


# -- import and names --------------------------------------------------------------------------------


def test_import_qvc_and_the_viewer_do_not_import_the_framework():
    code = ("import sys, qvc, qvc.store.viewers, qvc.integrations.agent_framework.history_viewer\n"
            "assert not any(m.split('.')[0] == 'agent_framework' for m in sys.modules), 'the framework was imported'")
    subprocess.run([sys.executable, "-c", code], env=child_env(), check=True, timeout=60)


def test_it_is_the_frameworks_history_provider_and_its_threads_are_registered():
    assert issubclass(QvcHistoryProvider, HistoryProvider)
    assert chat_thread("s1") == "maf/chat/s1" and owner_of("maf/chat/s1") == "agent-framework.chat"
    assert chat_thread(None) == "maf/chat/default"
    for sid in ("a/b", "50%", "%2F", "x y"):
        assert chat_session_of(chat_thread(sid)) == sid
    assert chat_session_of("maf/workflow/x") is None and chat_session_of("maf/chat/") is None
    for bad in ("", 3):
        with pytest.raises(InvalidInputError):
            chat_thread(bad)


# -- the protocol's contracts ------------------------------------------------------------------------


def test_saves_round_trip_each_a_commit_and_replays_are_not_stored_twice(tmp_path):
    with QvcHistoryProvider(tmp_path / "a.qvc") as p:
        assert run(p.get_messages("s")) == [] and p.head("s") is None
        run(p.save_messages("s", []))
        assert p.head("s") is None  # nothing to write
        first = [user("hi", message_id="m1"), Message(role="assistant", contents=["hello"], author_name="bot")]
        run(p.save_messages("s", first))
        got = run(p.get_messages("s"))
        assert [m.to_dict() for m in got] == [m.to_dict() for m in first]
        assert got[1].author_name == "bot" and got[0].message_id == "m1"
        run(p.save_messages("s", first))  # a replay of the whole history: nothing new
        run(p.save_messages("s", [user("again", message_id="m1")]))  # a stored message id
        assert len(line(p, "s")) == 1
        run(p.save_messages("s", [*first, user("more")]))  # replay plus one
        run(p.save_messages("s", [user("more")]))  # the same text again is a new turn
        assert texts(p, "s") == ["hi", "hello", "more", "more"]
        commits = line(p, "s")
        assert [c.metadata["added"] for c in commits] == [1, 1, 2]
        assert all(c.metadata["source"] == "agent-framework-chat" for c in commits)
        assert commits[0].checkpoint.state_data["session"] == "s"
        assert commits[0].checkpoint.state_data["messages"][0] == first[0].to_dict()  # readable fields
        run(p.save_messages(None, [user("no session")]))
        assert texts(p, None) == ["no session"] and p.sessions() == ["default", "s"]
    fsck(tmp_path / "a.qvc")


def test_replace_keeps_the_old_history_and_clear_is_a_qvc_delete(tmp_path):
    store = GitCheckpointStore(tmp_path / "a.qvc")
    p = QvcHistoryProvider(store=store, skip_excluded=True)
    run(p.save_messages("s", [user("a"), user("b"), user("c")]))
    run(p.replace("s", [Message(role="system", contents=["summary of a, b"]), user("c")]))
    run(p.replace("s", [Message(role="system", contents=["summary of a, b"]), user("c")]))  # unchanged: no commit
    assert texts(p, "s") == ["summary of a, b", "c"]
    commits = line(p, "s")
    assert [c.metadata["op"] for c in commits] == ["replace", "save"]
    assert [m["contents"][0]["text"] for m in commits[1].checkpoint.state_data["messages"]] == ["a", "b", "c"]
    run(p.save_messages("s", [user("hidden", additional_properties={"_excluded": True})]))
    assert texts(p, "s") == ["summary of a, b", "c"]  # skip_excluded
    run(p.save_messages("t", [user("other")]))
    run(p.clear("s"))
    run(p.clear("never"))  # an unknown session: nothing
    assert p.sessions() == ["t"] and run(p.get_messages("s")) == [] and store.head(chat_thread("s")) is None
    run(p.save_messages("s", [user("fresh")]))
    assert texts(p, "s") == ["fresh"]
    p.close()  # the store was the caller's: left open
    assert not store.closed
    store.close()
    with pytest.raises(StoreClosedError):
        run(p.save_messages("s", [user("x")]))


def test_concurrent_writers_on_one_session_lose_nothing(tmp_path):
    path = tmp_path / "a.qvc"
    GitCheckpointStore(path).close()
    providers = [QvcHistoryProvider(path) for _ in range(2)]

    def write(i: int) -> None:
        for n in range(8):
            run(providers[i].save_messages("s", [user(f"{i}-{n}")]))
    threads = [threading.Thread(target=write, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = texts(providers[0], "s")
    assert sorted(got) == sorted(f"{i}-{n}" for i in range(2) for n in range(8))
    for i in range(2):
        assert [t for t in got if t.startswith(f"{i}-")] == [f"{i}-{n}" for n in range(8)]
    for p in providers:
        p.close()


# -- the framework's agent loop ----------------------------------------------------------------------


K = 3


def test_an_agent_run_of_k_tool_steps_writes_through_qvc(tmp_path):
    with QvcHistoryProvider(tmp_path / "a.qvc") as p:
        agent = agent_of(p, per_call=True)
        session = agent.create_session(session_id="chat-1")
        result = run(agent.run("add some numbers", session=session))
        assert result.text == f"done after {K} tool calls"
        commits = line(p, "chat-1")
        assert len(commits) == K + 1  # one per model call: K tool steps and the answer
        stored = p.message_dicts("chat-1")
        assert [m["role"] for m in stored] == ["user"] + ["assistant", "tool"] * K + ["assistant"]
        results = [c["result"] for m in stored if m["role"] == "tool" for c in m["contents"]]
        assert results == [str(n + 2) for n in range(K)]
        # once per run without per-call persistence, on another session
        plain = agent_of(p)
        run(plain.run("again", session=plain.create_session(session_id="chat-2")))
        assert len(line(p, "chat-2")) == 1 and len(p.message_dicts("chat-2")) == 2 * K + 2
        # the viewer: the conversation in the shared shape
        shown = view_state(p.store, p.store.head(chat_thread("chat-1")), commits[0].checkpoint.state_data)
        assert shown["session"] == "chat-1"
        conv = shown["messages"]
        assert conv[0] == {"role": "user", "content": "add some numbers", "id": None}
        assert conv[1]["tool_calls"] == [{"id": "call-1", "name": "add", "args": {"a": 1, "b": 1}}]
        assert conv[2]["role"] == "tool" and conv[2]["tool_call_id"] == "call-1" and conv[2]["name"] == "add"
        assert conv[2]["content"] == "2"
        assert conv[-1]["content"] == f"done after {K} tool calls" and conv[-1]["tool_calls"] == []
    fsck(tmp_path / "a.qvc")


def test_the_viewer_marks_a_failed_tool_result_and_keeps_other_contents():
    msgs = [Message(role="assistant", contents=[{"type": "function_call", "call_id": "c", "name": "f",
                                                 "arguments": "not json"}]),
            Message(role="tool", contents=[{"type": "function_result", "call_id": "c", "exception": "boom"}]),
            Message(role="assistant", contents=[{"type": "text_reasoning", "text": "hmm"}])]
    out = view(None, "0" * 40, {"session": "s", "messages": [m.to_dict() for m in msgs]})["messages"]
    assert out[0]["tool_calls"][0]["args"] == {"arguments": "not json"}
    assert out[1]["error"] is True and out[1]["name"] == "f"
    assert out[1]["content"] == "FunctionInvocationError"  # the exception as the framework keeps it
    assert isinstance(out[2]["content"], list) and out[2]["content"][0]["type"] == "text_reasoning"
    json.dumps(out)


# A child process that resumes a session from the repository alone: a new agent, a new provider, the
# session restored from its serialized dict (AgentSession.to_dict), one more turn.
RESUMER = """
import asyncio, json, sys
from agent_framework import Agent, AgentSession
from qvc.integrations.agent_framework import QvcHistoryProvider
from qvc.integrations.agent_framework.scripted_chat import ScriptedChatClient, add
async def main():
    with QvcHistoryProvider(sys.argv[1]) as provider:
        client = ScriptedChatClient(steps=int(sys.argv[3]))
        agent = Agent(client, tools=[add], context_providers=[provider])
        session = AgentSession.from_dict(json.loads(sys.argv[2]))
        result = await agent.run("and now?", session=session)
        print(json.dumps({"text": result.text, "model_calls": client.calls}))
asyncio.run(main())
"""


def test_a_conversation_resumes_in_a_new_process_from_the_repository_alone(tmp_path):
    path = tmp_path / "a.qvc"
    with QvcHistoryProvider(path) as p:
        agent = agent_of(p, per_call=True)
        session = agent.create_session(session_id="resume-me")
        run(agent.run("add some numbers", session=session))
        before = p.message_dicts("resume-me")
    serialized = json.dumps(session.to_dict())
    # The history holds K calls already: a client scripted for K + 1 makes one more tool step, then answers.
    proc = subprocess.run([sys.executable, "-c", RESUMER, str(path), serialized, str(K + 1)], env=child_env(),
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"text": f"done after {K + 1} tool calls", "model_calls": 2}
    with QvcHistoryProvider(path) as p:
        after = p.message_dicts("resume-me")
        assert after[:len(before)] == before
        assert [m["role"] for m in after[len(before):]] == ["user", "assistant", "tool", "assistant"]
    fsck(path)


# -- the adapter kit ----------------------------------------------------------------------------------


def _chat(session_id: str, text: str, per_call: bool = True, steps: int = 2):
    def op(p: QvcHistoryProvider) -> None:
        agent = agent_of(p, steps=steps, per_call=per_call)
        run(agent.run(text, session=AgentSession(session_id=session_id)))
    return op


def _replace(p: QvcHistoryProvider) -> None:
    run(p.replace("b", [Message(role="system", contents=["summary"]), *run(p.get_messages("b"))[-2:]]))


def _clear(p: QvcHistoryProvider) -> None:
    run(p.clear("c"))


class AgentFrameworkChatDriver(AdapterDriver):
    name = "agent-framework-chat"

    def open(self, path: Path) -> QvcHistoryProvider:
        return QvcHistoryProvider(path)

    def close(self, handle: QvcHistoryProvider) -> None:
        handle.close()

    def script(self) -> List[Operation]:
        return [
            Operation("a run of two tool steps, one commit per model call", _chat("a", "first")),
            Operation("a run saved once at its end", _chat("b", "second", per_call=False)),
            Operation("a second turn of the first session", _chat("a", "more", steps=3)),
            Operation("a session's history compacted", _replace),
            Operation("a third session", _chat("c", "third", steps=1)),
            Operation("the third session cleared", _clear),
            Operation("the third session again", _chat("c", "fresh", steps=1)),
        ]

    def lines(self, handle: QvcHistoryProvider) -> Dict[str, List[str]]:
        store = handle.store
        return {t: [x.checkpoint.id for x in store.list(CheckpointConfig(t))]
                for t in store.threads() if chat_session_of(t) is not None}

    def checkpoints(self, handle: QvcHistoryProvider) -> Dict[str, Set[str]]:
        return {t: set(ids) for t, ids in self.lines(handle).items()}

    def snapshot(self, handle: QvcHistoryProvider) -> Any:
        store = handle.store
        return {t: ([(x.checkpoint.id, x.metadata, x.checkpoint.state_data) for x in store.list(CheckpointConfig(t))],
                    handle.message_dicts(chat_session_of(t)))
                for t in store.threads() if chat_session_of(t) is not None}

    def writer(self, path: Path) -> List[str]:
        return [sys.executable, "-c", WRITER, str(path)]

    def check_acknowledged(self, handle: QvcHistoryProvider, tokens: List[str]) -> None:
        stored = {m.text for m in run(handle.get_messages("killed"))}
        for token in tokens:
            assert token in stored, token


# A child that saves messages in a loop, printing an ack once each save returned.
WRITER = """
import asyncio, sys, uuid
from agent_framework import Message
from qvc.integrations.agent_framework import QvcHistoryProvider
async def main():
    provider = QvcHistoryProvider(sys.argv[1])
    while True:
        token = uuid.uuid4().hex
        await provider.save_messages("killed", [Message(role="user", contents=[token])])
        print(f"ack {token}", flush=True)
asyncio.run(main())
"""


class TestAgentFrameworkChatAdapter(AdapterKit):
    driver = AgentFrameworkChatDriver()


# -- a process killed mid-conversation ----------------------------------------------------------------


RUNNER = """
import asyncio, sys
from agent_framework import Agent, AgentSession
from qvc.integrations.agent_framework import QvcHistoryProvider
from qvc.integrations.agent_framework.scripted_chat import ScriptedChatClient, add
class Acking(QvcHistoryProvider):
    async def save_messages(self, session_id, messages, **kw):
        await super().save_messages(session_id, messages, **kw)
        print(f"ack {len(self.message_dicts(session_id))}", flush=True)
async def main():
    with Acking(sys.argv[1]) as provider:
        agent = Agent(ScriptedChatClient(steps=10_000), tools=[add], context_providers=[provider],
                      require_per_service_call_history_persistence=True)
        await agent.run("count forever", session=AgentSession(session_id="long"))
asyncio.run(main())
"""


@pytest.mark.slow  # a real agent loop killed mid-run, then resumed (a few seconds)
def test_an_agent_killed_mid_run_keeps_every_acknowledged_step_and_resumes(tmp_path, request):
    if not slow_enabled(request.config):
        pytest.skip("slow: run with -m slow or QVC_SLOW=1")
    path = tmp_path / "a.qvc"
    proc = subprocess.Popen([sys.executable, "-c", RUNNER, str(path)], env=child_env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    acked = 0
    deadline = time.monotonic() + 60
    while acked < 12 and time.monotonic() < deadline:
        got = proc.stdout.readline()
        assert got, proc.stderr.read()
        acked = int(got.split()[1])
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    fsck(path)
    with QvcHistoryProvider(path) as p:
        stored = p.message_dicts("long")
        assert len(stored) >= acked
        calls = [c["call_id"] for m in stored for c in m["contents"] if c["type"] == "function_call"]
        answered = [c["call_id"] for m in stored for c in m["contents"] if c["type"] == "function_result"]
        assert answered == calls[:len(answered)] and len(calls) - len(answered) <= 1
        # resumed: a new agent in this process finishes the conversation from the repository
        agent = agent_of(p, steps=len(calls) + 1)
        result = run(agent.run("finish", session=AgentSession(session_id="long")))
        assert result.text == f"done after {len(calls) + 1} tool calls"
        assert p.message_dicts("long")[:len(stored)] == stored
