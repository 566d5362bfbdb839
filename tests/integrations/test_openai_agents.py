"""QvcSession (qvc.integrations.openai_agents): the OpenAI Agents SDK's real ``Runner.run`` on a qvc
repository, offline (the SDK's ``ScriptedModel`` and real function tools,
qvc/integrations/openai_agents/scripted.py), compared with the SDK's own ``SQLiteSession``; a
killed writer and a paused run resumed in another process; forks; the command line showing a
session as a conversation; and the adapter kit (adapter_kit.py)."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List

import pytest

pytest.importorskip("agents")

from adapter_kit import AdapterDriver, AdapterKit, Operation, kill_a_writer  # noqa: E402
from agents import Runner, SQLiteSession  # noqa: E402
from helpers import child_env, fsck, qvc, qvc_json, run_git  # noqa: E402

from qvc import CheckpointConfig, GitCheckpointStore  # noqa: E402
from qvc.errors import (  # noqa: E402
    CheckpointConflictError,
    InvalidInputError,
    SerializationError,
    StoreClosedError,
)
from qvc.integrations.openai_agents import QvcSession, session_of, session_thread  # noqa: E402
from qvc.integrations.openai_agents.scripted import RUN_CONFIG, email_agent, make_agent  # noqa: E402


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def turn(session: Any, steps: int, tag: str, prompt: str = "Go.") -> Any:
    return await Runner.run(make_agent(steps, tag), prompt, session=session, run_config=RUN_CONFIG)


def line(store: GitCheckpointStore, session_id: str) -> list:
    """The session's checkpoints on its line, oldest first (the tuples)."""
    return list(reversed(list(store.list(CheckpointConfig(session_thread(session_id))))))


# -- import ----------------------------------------------------------------------------------------


def test_import_qvc_does_not_import_the_sdk():
    """Nor does the viewer: ``qvc show`` reads a session without loading the SDK."""
    code = ("import sys, qvc, qvc.store.viewers, qvc.integrations.openai_agents.viewer\n"
            "assert not any(m.split('.')[0] in ('agents', 'openai') for m in sys.modules), 'the SDK was imported'")
    subprocess.run([sys.executable, "-c", code], env=child_env(), check=True, timeout=60)


# -- checkpoints -----------------------------------------------------------------------------------


@pytest.mark.parametrize("steps", [0, 1, 4])
def test_k_tool_steps_give_k_plus_two_checkpoints_each_holding_what_it_added(tmp_path, steps):
    """Runner.run saves the user's message, each tool step (call + output) and the answer: one
    add_items each, so K+2 checkpoints, each changing only the one segment field it added."""
    with QvcSession("s", tmp_path / "r.qvc") as s:
        result = run(turn(s, steps, "a"))
        assert result.final_output == "done"
        cps = line(s.store, "s")
        assert len(cps) == steps + 2
        assert [t.metadata["op"] for t in cps] == ["add"] * (steps + 2)
        assert [t.metadata["items"] for t in cps] == [1, *range(3, 2 * steps + 2, 2), 2 * steps + 2]
        for i, t in enumerate(cps):
            sha = s.store.resolve(t.checkpoint.id)
            changed = s.store.changed(sha)
            assert changed == ([f"items.{i:04d}"] if i else ["items.0000", "session"]), changed
        kinds = [i.get("type", "message") for i in run(s.get_items())]
        assert kinds == ["message"] + ["function_call", "function_call_output"] * steps + ["message"]
        assert cps[-1].metadata["usage"]["requests"] == steps + 1  # the SDK passed its wrapper
    fsck(tmp_path / "r.qvc")


def test_a_long_session_stays_cheap(tmp_path):
    """Bytes written per add_items do not grow with the history: the objects a window of 64 adds
    made, late in a session of 512, weigh no more than an early window's (segments are sealed in
    groups and groups archived, so a checkpoint's tree and header keep a bounded size)."""
    path = tmp_path / "r.qvc"
    item = {"role": "user", "content": "x" * 200}
    with QvcSession("long", path, durability="exit") as s:
        async def fill():
            for i in range(512):
                await s.add_items([dict(item, content=f"{i:04d}" + "x" * 200)])
        run(fill())
        shas = [s.store.resolve(t.checkpoint.id) for t in line(s.store, "long")]
        assert len(run(s.get_items())) == 512

    def weight(a: str, b: str) -> int:
        objs = run_git(path, "rev-list", "--objects", f"{a}..{b}").stdout.split()
        objs = [o for o in objs if len(o) == 40]
        sizes = run_git(path, "cat-file", "--batch-check=%(objectsize)", input="\n".join(objs).encode() + b"\n",
                        text=False)
        return sum(int(x) for x in sizes.stdout.split())

    early, late = weight(shas[63], shas[127]), weight(shas[447], shas[511])
    assert late <= early * 1.25, (early, late)


# -- semantics as SQLiteSession's ----------------------------------------------------------------------


async def _script(session: Any) -> list:
    """One script of runs and protocol calls; what each step read back."""
    seen: list = []
    await turn(session, 2, "a", "First.")
    seen.append(await session.get_items())
    seen.append(await session.get_items(limit=3))
    seen.append(await session.get_items(limit=0))
    seen.append(await session.get_items(limit=100))
    await turn(session, 1, "b", "Second.")
    seen.append(await session.pop_item())
    seen.append(await session.pop_item())
    seen.append(await session.get_items())
    await session.add_items([{"role": "user", "content": "Typed by hand."}, {"role": "user", "content": "Again."}])
    seen.append(await session.get_items(limit=1))
    await session.clear_session()
    seen.append(await session.get_items())
    seen.append(await session.pop_item())
    await turn(session, 0, "c", "After the clear.")
    seen.append(await session.get_items())
    return seen


def test_the_same_script_reads_back_as_on_sqlite_session(tmp_path):
    sqlite = SQLiteSession("s", tmp_path / "s.db")
    try:
        expected = run(_script(sqlite))
    finally:
        sqlite.close()
    with QvcSession("s", tmp_path / "r.qvc") as s:
        assert run(_script(s)) == expected
        ops = [t.metadata["op"] for t in line(s.store, "s")]
        assert ops.count("pop") == 2 and ops.count("clear") == 1
    with QvcSession("s", tmp_path / "r.qvc", session_settings={"limit": 2}) as s:  # settings: the default limit
        assert run(s.get_items()) == expected[-1][-2:]
        assert run(s.get_items(limit=-1)) == expected[-1]


def test_pop_and_clear_keep_the_history(tmp_path):
    with QvcSession("s", tmp_path / "r.qvc") as s:
        run(turn(s, 1, "a"))
        before = run(s.get_items())
        popped = run(s.pop_item())
        assert popped == before[-1] and run(s.get_items()) == before[:-1]
        run(s.clear_session())
        assert run(s.get_items()) == [] and run(s.pop_item()) is None
        cps = line(s.store, "s")
        assert [t.metadata["op"] for t in cps][-2:] == ["pop", "clear"]
        assert s.store.list(CheckpointConfig("openai/session/s"), limit=1)  # the thread is still there
        full = s.store.read(s.store.resolve(cps[-3].checkpoint.id))  # the checkpoint before the pop
        assert [i for k in sorted(full.checkpoint.state_data) if k.startswith("items.")
                for i in full.checkpoint.state_data[k]] == before
    out = qvc("--repo", str(tmp_path / "r.qvc"), "log", "--oneline", "openai/session/s").stdout
    assert len(out.splitlines()) == 5, out


def test_run_sync_run_streamed_and_an_encrypted_session(tmp_path):
    with QvcSession("s", tmp_path / "r.qvc") as s:
        assert Runner.run_sync(make_agent(1, "a"), "Sync.", session=s, run_config=RUN_CONFIG).final_output == "done"

        async def streamed():
            result = Runner.run_streamed(make_agent(1, "b"), "Streamed.", session=s, run_config=RUN_CONFIG)
            async for _ in result.stream_events():
                pass
            return result.final_output
        assert run(streamed()) == "done" and len(s.items()) == 8
        pytest.importorskip("cryptography")
        from agents.extensions.memory import EncryptedSession

        inner = QvcSession("e", store=s.store)
        wrapped = EncryptedSession("e", inner, encryption_key="k" * 32)
        run(Runner.run(make_agent(1, "c"), "Encrypted.", session=wrapped, run_config=RUN_CONFIG))
        assert [i.get("type", "message") for i in run(wrapped.get_items())][-1] == "message"
        assert all("__enc__" in i for i in inner.items()) and len(inner.items()) == 4


def test_bad_input_is_refused(tmp_path):
    with QvcSession("s", tmp_path / "r.qvc") as s:
        with pytest.raises(SerializationError):
            run(s.add_items([{"role": "user", "content": object()}]))
        with pytest.raises(InvalidInputError):
            run(s.add_items("not a list"))  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError):
            QvcSession("", store=s.store)
        assert run(s.get_items()) == [] and s.store.head("openai/session/s") is None
        s.close()
        with pytest.raises(StoreClosedError):
            run(s.add_items([{"role": "user", "content": "late"}]))
    assert session_of("openai/session/a/b") == "a/b" and session_of("other") is None


def test_the_compaction_hook_is_a_compare_and_swap(tmp_path):
    """The hook the SDK's compaction session calls: replace_suffix replaces the newest items only
    while the session is as read; the replaced items stay in the history."""
    with QvcSession("s", tmp_path / "r.qvc") as s:
        run(turn(s, 2, "a"))
        before = run(s.get_items())
        snap = run(s._get_compaction_snapshot(3))
        assert snap.items == before[-3:] and snap.complete is False
        summary = [{"role": "assistant", "content": "summary", "type": "message"}]
        assert run(snap.replace_suffix(1, summary)) is True
        assert run(s.get_items()) == before[:-2] + summary
        assert run(snap.replace_suffix(1, summary)) is False  # stale: the head moved
        stale = run(s._get_compaction_snapshot(10))
        run(s.add_items([{"role": "user", "content": "meanwhile"}]))
        assert run(stale.replace_suffix(0, summary)) is False
        assert run(s.get_items())[-1]["content"] == "meanwhile"
        assert [t.metadata["op"] for t in line(s.store, "s")][-2:] == ["compact", "add"]
        whole = run(s._get_compaction_snapshot(100))
        assert whole.complete and run(whole.replace_suffix(0, summary)) and run(s.get_items()) == summary


ADDER = """
import asyncio, os, sys, time
from qvc.integrations.openai_agents import QvcSession
async def main():
    with QvcSession("shared", sys.argv[1]) as s:
        print("ready", flush=True)
        while not os.path.exists(sys.argv[3]):
            time.sleep(0.005)
        for i in range(30):
            await s.add_items([{"role": "user", "content": f"{sys.argv[2]} {i}"}])
asyncio.run(main())
"""


def test_two_processes_adding_to_one_session_both_land(tmp_path):
    path = tmp_path / "r.qvc"
    QvcSession("shared", path).close()
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", ADDER, str(path), who, str(go)], env=child_env(),
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for who in ("a", "b")]
    for p in procs:
        assert p.stdout.readline() == "ready\n", p.stderr.read()
    go.touch()  # both at once: their writes interleave
    for p in procs:
        assert p.wait(timeout=120) == 0, p.stderr.read()
    fsck(path)
    with QvcSession("shared", path) as s:
        contents = [i["content"] for i in s.items()]
    assert len(contents) == 60
    for who in ("a", "b"):
        assert [c for c in contents if c.startswith(who)] == [f"{who} {i}" for i in range(30)]


def test_a_subclass_that_overrides_a_protocol_method_gets_no_compaction_hook(tmp_path):
    """The swap would bypass the override (the SDK then compacts through the protocol's methods),
    as SQLiteSession does for its subclasses; the SDK's own compaction-retry tests rely on it."""
    class Counting(QvcSession):
        async def add_items(self, items, *, wrapper=None):
            self.added = getattr(self, "added", 0) + 1
            await super().add_items(items, wrapper=wrapper)

    with Counting("s", tmp_path / "r.qvc") as s:
        run(turn(s, 0, "a"))
        assert s.added == 2 and run(s._get_compaction_snapshot(2)) is None


# -- forks ----------------------------------------------------------------------------------------------


def test_a_fork_shares_the_source_commits_and_continues(tmp_path):
    path = tmp_path / "r.qvc"
    with QvcSession("main", path) as s:
        run(turn(s, 1, "a", "First."))
        run(turn(s, 1, "b", "Second."))
        source = run(s.get_items())
        fork = run(s.fork("retry", turn=2))  # the items before the 2nd user message, as AdvancedSQLiteSession
        assert run(fork.get_items()) == source[:4]
        run(turn(fork, 0, "c", "Second, rephrased."))
        assert run(fork.get_items())[:4] == source[:4] and run(fork.get_items())[-1]["id"] == "msg_c"
        assert run(s.get_items()) == source
        # the fork's parent is the source's checkpoint that held exactly those items
        src_sha = s.store.resolve(line(s.store, "main")[2].checkpoint.id)
        run_git(path, "merge-base", "--is-ancestor", src_sha, s.store.head("openai/session/retry"))
        mid = run(s.fork("mid", at=2))  # inside a segment: the items cut, the parent holds one
        assert run(mid.get_items()) == source[:2]
        run_git(path, "merge-base", "--is-ancestor", s.store.resolve(line(s.store, "main")[0].checkpoint.id),
                s.store.head("openai/session/mid"))
        with pytest.raises(CheckpointConflictError):
            run(s.fork("retry"))
        with pytest.raises(InvalidInputError):
            run(s.fork("x", at=99))
        with pytest.raises(InvalidInputError):
            run(s.fork("x", turn=3))
    fsck(path)


# -- crashes and paused runs ---------------------------------------------------------------------------

WRITER = """
import asyncio, sys, uuid
from agents import Runner
from qvc.integrations.openai_agents import QvcSession
from qvc.integrations.openai_agents.scripted import RUN_CONFIG, make_agent
session = QvcSession(sys.argv[1], sys.argv[2])
tag, i = uuid.uuid4().hex[:8], 0
async def main():
    global i
    while True:
        t = f"{tag}-{i}"
        await Runner.run(make_agent(1, t), f"q {t}", session=session, run_config=RUN_CONFIG)
        print(f"ack {t}")
        i += 1
asyncio.run(main())
"""

PAUSER = """
import asyncio, sys, time
from agents import Runner
from qvc.integrations.openai_agents import QvcSession
from qvc.integrations.openai_agents.scripted import RUN_CONFIG, email_agent
session = QvcSession("hitl", sys.argv[1])
async def main():
    result = await Runner.run(email_agent("m"), "Email Bob.", session=session, run_config=RUN_CONFIG)
    assert result.interruptions, result
    await session.save_state(result.to_state())
    print("ack paused")
    time.sleep(600)
asyncio.run(main())
"""


def _acknowledged(items: List[dict], token: str) -> bool:
    return {"content": f"q {token}", "role": "user"} in items and any(i.get("id") == f"msg_{token}" for i in items)


def test_a_killed_writer_loses_nothing_acknowledged_and_the_session_goes_on(tmp_path):
    path = tmp_path / "k.qvc"

    class Writer(AdapterDriver):
        name = "openai-agents writer"

        def writer(self, p: Path) -> List[str]:
            return [sys.executable, "-c", WRITER, "killed", str(p)]

    tokens = kill_a_writer(Writer(), path, random.Random())
    assert tokens
    fsck(path)
    with QvcSession("killed", path) as s:
        items = run(s.get_items())
        for token in tokens:
            assert _acknowledged(items, token), token
        agent = make_agent(0, "after")
        run(Runner.run(agent, "Still there?", session=s, run_config=RUN_CONFIG))
        seen = agent.model.last_call.input
        assert any(i.get("content") == f"q {tokens[0]}" for i in seen if isinstance(i, dict))  # history fed
        assert run(s.get_items())[-1]["id"] == "msg_after"


def test_a_paused_run_resumes_from_the_repository_after_a_crash(tmp_path):
    path = tmp_path / "p.qvc"
    proc = subprocess.Popen([sys.executable, "-c", PAUSER, str(path)], env=child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout.readline() == "ack paused\n", proc.stderr.read() if proc.poll() is not None else ""
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    fsck(path)
    shown = qvc("--repo", str(path), "show", "openai/session/hitl").stdout
    assert "paused_run" in shown and "send_email" in shown, shown
    with QvcSession("hitl", path) as s:
        agent = email_agent("m", resumed=True)  # the call was made before the crash: the answer is next
        state = run(s.load_state(agent))
        assert state is not None
        pending = state.get_interruptions()
        assert [p.name for p in pending] == ["send_email"]
        state.approve(pending[0])
        result = run(Runner.run(agent, state, session=s, run_config=RUN_CONFIG))
        assert result.final_output == "Email sent."
        items = run(s.get_items())
        assert {"call_id": "call_m_mail", "output": "sent to bob@example.com", "type": "function_call_output"} in items
        assert sum(1 for i in items if i.get("type") == "function_call") == 1  # nothing doubled by the resume
        run(s.discard_state())
        assert run(s.load_state(agent)) is None


# -- the command line ---------------------------------------------------------------------------------


def test_the_command_line_shows_a_session_as_a_conversation(tmp_path):
    path = tmp_path / "r.qvc"
    with QvcSession("chat", path) as s:
        run(turn(s, 1, "a", "Look it up."))
        first = line(s.store, "chat")[-1].checkpoint.id
        run(turn(s, 2, "b", "And two more."))
        run(s.pop_item())
    repo = ("--repo", str(path))
    shown = qvc(*repo, "show", "openai/session/chat").stdout
    assert '0 user: "Look it up."' in shown and '→ lookup({"n": 0})' in shown and 'tool [lookup]: "value 0"' in shown
    assert "items.0000" not in shown
    doc = qvc_json(*repo, "show", "openai/session/chat")
    msgs = doc["state"]["messages"]
    assert msgs[1] == {"role": "assistant", "content": "", "id": "call_a_0",
                       "tool_calls": [{"id": "call_a_0", "name": "lookup", "args": {"n": 0}}], "type": "function_call"}
    assert msgs[2] == {"role": "tool", "content": "value 0", "id": None, "tool_call_id": "call_a_0", "name": "lookup",
                       "type": "function_call_output"}
    assert msgs[3]["role"] == "assistant" and msgs[3]["content"] == "done" and msgs[3]["id"] == "msg_a"
    diff = qvc(*repo, "diff", first, "openai/session/chat").stdout
    assert "messages added" in diff and "→ lookup" in diff, diff
    popped = qvc(*repo, "diff", "openai/session/chat").stdout  # the pop against its parent
    assert "1 message removed" in popped or "removed" in popped, popped
    logged = qvc(*repo, "log", "-p", "-n", "1", "openai/session/chat").stdout
    assert "messages" in logged
    raw = qvc(*repo, "show", "--raw", "openai/session/chat").stdout
    assert "items.0000" in raw


def test_qvc_serve_shows_a_session_as_a_conversation(tmp_path):
    """The page's API (what the page draws) gives the session's messages in the conversation shape."""
    pytest.importorskip("fastapi")
    path = tmp_path / "r.qvc"
    with QvcSession("chat", path) as s:
        run(turn(s, 1, "a", "Look it up."))
    proc = subprocess.Popen([sys.executable, "-m", "qvc", "--repo", str(path), "serve", "--port", "0", "--read-only"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(),
                            stdin=subprocess.DEVNULL)
    try:
        line = proc.stdout.readline()
        url = line.split(" at ", 1)[1].split()[0]
        with urllib.request.urlopen(url + "api/checkpoints/openai%2Fsession%2Fchat", timeout=30) as resp:
            doc = json.loads(resp.read())
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert doc["metadata"]["op"] == "add" and doc["state"]["session"] == "chat"
    assert [(m["role"], m.get("tool_calls")) for m in doc["state"]["messages"]] == [
        ("user", None), ("assistant", [{"id": "call_a_0", "name": "lookup", "args": {"n": 0}}]), ("tool", None),
        ("assistant", [])]


# -- the adapter kit ------------------------------------------------------------------------------------

@dataclass
class Handle:
    store: GitCheckpointStore
    made: Dict[str, Any] = field(default_factory=dict)

    def session(self, session_id: str) -> QvcSession:
        return QvcSession(session_id, store=self.store)


def _turn(session_id: str, steps: int, tag: str):
    def op(h: Handle) -> None:
        run(turn(h.session(session_id), steps, tag, f"q {tag}"))
    return op


def _pause(h: Handle) -> None:
    s = h.session("s3")
    result = run(Runner.run(email_agent("m"), "Email Bob.", session=s, run_config=RUN_CONFIG))
    run(s.save_state(result.to_state()))


def _resume(h: Handle) -> None:
    s = h.session("s3")
    agent = email_agent("m", resumed=True)
    state = run(s.load_state(agent))
    state.approve(state.get_interruptions()[0])
    assert run(Runner.run(agent, state, session=s, run_config=RUN_CONFIG)).final_output == "Email sent."
    run(s.discard_state())


class OpenAIAgentsDriver(AdapterDriver):
    name = "openai-agents"

    def open(self, path: Path) -> Handle:
        return Handle(GitCheckpointStore(path))

    def close(self, handle: Handle) -> None:
        handle.store.close()

    def script(self) -> List[Operation]:
        return [
            Operation("s1: a run of two tool steps", _turn("s1", 2, "a")),
            Operation("s1: a second run", _turn("s1", 1, "b")),
            Operation("s1: pop_item", lambda h: run(h.session("s1").pop_item())),
            Operation("fork s1 at turn 2 -> s2", lambda h: run(h.session("s1").fork("s2", turn=2))),
            Operation("s2: a run on the fork", _turn("s2", 1, "c")),
            Operation("s3: a run paused for approval, its state saved", _pause),
            Operation("s1: clear_session", lambda h: run(h.session("s1").clear_session())),
            Operation("s1: a run after the clear", _turn("s1", 0, "d")),
            Operation("s3: resumed from the saved state", _resume),
        ]

    def lines(self, handle: Handle) -> Dict[str, List[str]]:
        return {thread: [t.checkpoint.id for t in handle.store.list(CheckpointConfig(thread))]
                for thread in handle.store.threads() if session_of(thread) is not None}

    def snapshot(self, handle: Handle) -> Any:
        out = {}
        for thread in handle.store.threads():
            sid = session_of(thread)
            if sid is None:
                continue
            s = handle.session(sid)
            out[sid] = (s.items(), [(t.checkpoint.id, t.metadata, t.checkpoint.state_data)
                                    for t in handle.store.list(CheckpointConfig(thread))])
        return out

    def writer(self, path: Path) -> List[str]:
        return [sys.executable, "-c", WRITER, "killed", str(path)]

    def check_acknowledged(self, handle: Handle, tokens: List[str]) -> None:
        items = handle.session("killed").items()
        for token in tokens:
            assert _acknowledged(items, token), f"acknowledged run {token} is not in the session"


class TestOpenAIAgentsAdapter(AdapterKit):
    driver = OpenAIAgentsDriver()


def test_durability_modes_pass_through(tmp_path):
    for mode in ("sync", "async", "exit"):
        with QvcSession("d", tmp_path / f"{mode}.qvc", durability=mode) as s:
            assert s.store.durability.value == mode
            run(s.add_items([{"role": "user", "content": mode}]))
        with QvcSession("d", tmp_path / f"{mode}.qvc") as s:
            assert run(s.get_items()) == [{"role": "user", "content": mode}]


def test_the_sample_runs(tmp_path):
    proc = subprocess.run([sys.executable, str(Path(__file__).parents[2] / "samples" / "openai_agents_session.py"),
                           "--repo", str(tmp_path / "s.qvc")], env=child_env(), capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAIL" not in proc.stdout and "1 message removed" in proc.stdout
    fsck(tmp_path / "s.qvc")
