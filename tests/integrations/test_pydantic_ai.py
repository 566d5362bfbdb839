"""QvcConversationStore under pydantic-ai's real agent loop (a scripted FunctionModel and a real tool,
no API key): checkpoints per tool step, the same records and entries as pydantic-ai's own
InMemoryConversationStore, compare-and-swap conflicts, branches and forks sharing commits, delete
as purge, a SIGKILLed writer, the CLI showing a conversation, and the adapter kit (docs/pydantic-ai.md)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Set

import pytest
from helpers import ROOT, child_env, fsck, qvc, qvc_json, run_git

pytest.importorskip("pydantic_ai.conversation_store")

from adapter_kit import AdapterDriver, AdapterKit, Operation  # noqa: E402
from pydantic_ai import Agent, ModelRetry  # noqa: E402
from pydantic_ai.conversation import Conversation  # noqa: E402
from pydantic_ai.conversation_store import (  # noqa: E402
    ConversationConflict,
    ConversationEntry,
    ConversationStore,
    InMemoryConversationStore,
)
from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelResponse, TextPart, ToolCallPart  # noqa: E402
from pydantic_ai.models.function import FunctionModel  # noqa: E402

from qvc import CheckpointConfig, GitCheckpointStore  # noqa: E402
from qvc.integrations.pydantic_ai import QvcConversationStore, conversation_thread  # noqa: E402
from tests.workers.pydantic_ai_worker import make_agent  # noqa: E402


def run(coro):
    return asyncio.run(coro)


async def turn(store: ConversationStore, cid: str, prompt: str, steps: int = 1) -> None:
    """One agent run on conversation ``cid``: load, run, save (pydantic-ai's pattern)."""
    conv = await store.load(cid) or Conversation(conversation_id=cid)
    await store.save(await make_agent(steps).run(prompt, conversation=conv))


async def script(store: ConversationStore) -> None:
    """Turns, a stale save, a branch (regenerate a turn), a fork, a history rewrite, a delete."""
    await turn(store, "c1", "first", steps=2)
    conv = await store.load("c1")
    stale = await make_agent(1).run("stale", conversation=conv)
    await turn(store, "c1", "second")
    with pytest.raises(ConversationConflict):
        await store.save(stale)
    rec = await store.read_record("c1")
    branched = await store.branch("c1", at=6, expected_revision=rec.revision)
    await store.save(await make_agent(1).run("second, again", conversation=branched))
    fork = await store.fork("c1", at=6, new_conversation_id="c1-fork", scope="team")
    await store.save(await make_agent(3).run("fork", conversation=fork))
    await turn(store, "gone", "to be deleted")
    await store.fork("gone", new_conversation_id="gone-fork")
    await store.delete("gone")
    # a rewritten history: the app drops the last turn and runs again; the save branches off
    conv = await store.load("c1-fork")
    conv.messages = conv.messages[:6]
    await store.save(await make_agent(1).run("rewritten", conversation=conv))


def _plain(message: Any) -> Any:
    """A message as JSON without what differs between two runs of the same script."""
    data = ModelMessagesTypeAdapter.dump_python([message], mode="json")[0]

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ("timestamp", "run_id")}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(data)


async def contents(store: ConversationStore) -> Any:
    """Every record and history, entry ids numbered by first appearance (ids are minted per store)."""
    ids: Dict[str, int] = {}

    def num(entry_id: str | None) -> int | None:
        return None if entry_id is None else ids.setdefault(entry_id, len(ids))

    out = []
    for rec in sorted(await store.list_conversations(), key=lambda r: r.conversation_id):
        history = await store.load_entries(rec.conversation_id)
        rows = [(num(e.id), num(e.parent_id), e.kind, _plain(e.message)) for e in history]
        branches = []
        for tip in rec.branches:
            branches.append([num(e.id) for e in await store.read_history(tip)])
        out.append({"id": rec.conversation_id, "head": num(rec.head_id), "scope": rec.scope,
                    "forked_from": rec.forked_from, "forked_at": num(rec.forked_at), "branches": branches,
                    "usage": rec.usage, "deferred": rec.deferred_tool_requests, "history": rows})
    return out


def head_commit(store: GitCheckpointStore, cid: str) -> str:
    return store.head(conversation_thread(cid))


# -- the agent loop --------------------------------------------------------------------------------


@pytest.mark.parametrize("steps", [1, 4])
def test_k_tool_steps_give_their_checkpoints(tmp_path: Path, steps: int) -> None:
    path = tmp_path / "r.qvc"
    with QvcConversationStore(path) as store:
        run(turn(store, "c", "go", steps))
        rec = run(store.read_record("c"))
        history = run(store.load_entries("c"))
        assert len(history) == 2 * steps + 2  # the prompt, each call and its return, the answer
        assert [e.message.kind for e in history] == ["request"] + ["response", "request"] * steps + ["response"]
        line = list(store.store.list(CheckpointConfig(conversation_thread("c"))))
        assert [t.checkpoint.id for t in reversed(line)] == [e.id for e in history]
        assert [t.checkpoint.step for t in reversed(line)] == list(range(2 * steps + 2))
        assert line[0].checkpoint.id == rec.head_id
        for t in line:  # an entry's parent entry is its commit's parent
            assert t.checkpoint.parent_id == (t.parent_config.checkpoint_id if t.parent_config else None)
        assert rec.usage.requests == steps + 1 and rec.usage.tool_calls == steps
        run(turn(store, "c", "again", steps))
        assert len(run(store.load_entries("c"))) == 2 * (2 * steps + 2)
    fsck(path)


def test_records_are_no_pending_writes_to_status_and_fsck(tmp_path: Path) -> None:
    """A conversation's record lives in the thread's writes ref but is no pending write: ``qvc
    status`` counted each such ref as a checkpoint with pending writes, ``qvc fsck`` as a set."""
    path = tmp_path / "r.qvc"
    with QvcConversationStore(path) as store:
        run(turn(store, "a", "go", 1))
        run(turn(store, "b", "go", 2))
    assert len(run_git(path, "for-each-ref", "refs/qvc/writes/").stdout.splitlines()) == 2
    assert qvc_json("status", cwd=path)["pending_writes"] == 0
    assert "0 checkpoint(s) with pending writes" in qvc("status", cwd=path).stdout
    report = qvc_json("fsck", cwd=path)
    assert report["ok"] and report["pending_writes"] == 0, report


def test_same_records_and_entries_as_pydantic_ais_in_memory_store(tmp_path: Path) -> None:
    memory = InMemoryConversationStore()
    run(script(memory))
    with QvcConversationStore(tmp_path / "r.qvc") as store:
        run(script(store))
        ours = run(contents(store))
        assert ours == run(contents(memory))
        assert [r["id"] for r in ours] == ["c1", "c1-fork", "gone-fork"]
        # and the same again from a new process's view: a fresh store on the repository
    with QvcConversationStore(tmp_path / "r.qvc") as again:
        assert run(contents(again)) == ours
        assert [r.conversation_id for r in run(again.list_conversations(limit=2))] == \
            [r.conversation_id for r in run(memory.list_conversations(limit=2))]
        assert [r.conversation_id for r in run(again.list_conversations(scope="team"))] == ["c1-fork"]
    fsck(tmp_path / "r.qvc")


def test_a_paused_run_resumes_from_the_stored_record(tmp_path: Path) -> None:
    from pydantic_ai import DeferredToolRequests

    def scripted(messages, info):
        if any(p.part_kind == "tool-return" for p in messages[-1].parts):
            return ModelResponse(parts=[TextPart("sent")])
        return ModelResponse(parts=[ToolCallPart("send_email", {"to": "bob"}, tool_call_id="mail")])

    agent = Agent(FunctionModel(scripted), output_type=[str, DeferredToolRequests])

    @agent.tool_plain(requires_approval=True)
    def send_email(to: str) -> str:
        return f"sent to {to}"

    with QvcConversationStore(tmp_path / "r.qvc") as store:
        paused = run(agent.run("mail bob", conversation=Conversation(conversation_id="hitl")))
        run(store.save(paused))
    with QvcConversationStore(tmp_path / "r.qvc") as store:  # another process, say
        loaded = run(store.load("hitl"))
        assert [c.tool_name for c in loaded.deferred_tool_requests.approvals] == ["send_email"]
        results = loaded.deferred_tool_requests.build_results(approve_all=True)
        done = run(agent.run(conversation=loaded, deferred_tool_results=results))
        run(store.save(done))
        assert done.output == "sent" and run(store.read_record("hitl")).deferred_tool_requests is None


# -- compare-and-swap ------------------------------------------------------------------------------


def test_a_stale_revision_is_a_conflict_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "r.qvc"
    with QvcConversationStore(path) as a, QvcConversationStore(path) as b:
        run(turn(a, "c", "one"))
        conv_a, conv_b = run(a.load("c")), run(b.load("c"))
        result_a = run(make_agent(1).run("from a", conversation=conv_a))
        result_b = run(make_agent(2).run("from b", conversation=conv_b))
        run(a.save(result_a))
        objects = run_git(path, "count-objects", "-v").stdout
        refs = run_git(path, "for-each-ref").stdout
        record = a.store.thread_record(conversation_thread("c"))
        with pytest.raises(ConversationConflict):
            run(b.save(result_b))
        assert run_git(path, "for-each-ref").stdout == refs
        assert a.store.thread_record(conversation_thread("c")) == record
        assert run_git(path, "count-objects", "-v").stdout == objects  # not even an object
        rec = run(a.read_record("c"))
        for entry in result_b.new_messages():  # b's entries were never stored
            assert entry not in [e.message for e in run(a.load_entries("c"))]
        # the framework's other conflicts: a record that exists, a stale delete, an unknown head
        with pytest.raises(ConversationConflict):
            run(a.write_record(rec, expected_revision=None))
        with pytest.raises(ConversationConflict):
            run(a.delete_record("c", expected_revision="not-it"))
        rec.head_id = "no-such-entry"
        with pytest.raises(ConversationConflict):
            run(a.write_record(rec, expected_revision=run(a.read_record("c")).revision))
        # b loads again and saves: the conversation goes on
        run(turn(b, "c", "from b, again"))
        assert len(run(a.load_entries("c"))) == 12
    fsck(path)


def test_concurrent_saves_one_wins(tmp_path: Path) -> None:
    path = tmp_path / "r.qvc"
    with QvcConversationStore(path) as a:
        run(turn(a, "c", "one"))
    script = (
        "import asyncio, sys\n"
        "from pydantic_ai.conversation_store import ConversationConflict\n"
        "from qvc.integrations.pydantic_ai import QvcConversationStore\n"
        "from tests.workers.pydantic_ai_worker import make_agent\n"
        "async def main():\n"
        "    store = QvcConversationStore(sys.argv[1])\n"
        "    conv = await store.load('c')\n"
        "    result = await make_agent(1).run(sys.argv[2], conversation=conv)\n"
        "    print('ready', flush=True)\n"
        "    sys.stdin.readline()\n"
        "    try:\n"
        "        await store.save(result)\n"
        "        print('saved', flush=True)\n"
        "    except ConversationConflict:\n"
        "        print('conflict', flush=True)\n"
        "asyncio.run(main())\n")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(path), f"w{i}"], env=child_env(), cwd=ROOT,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for i in range(3)]
    for p in procs:  # every child has loaded and run before any saves
        assert p.stdout.readline().strip() == "ready"
    for p in procs:
        p.stdin.write("\n")
        p.stdin.flush()
    outs = sorted(p.communicate(timeout=60)[0].strip() for p in procs)
    assert outs == ["conflict", "conflict", "saved"], outs
    with QvcConversationStore(path) as store:
        assert len(run(store.load_entries("c"))) == 8
    fsck(path)


# -- branches, forks, delete -----------------------------------------------------------------------


def test_branch_and_fork_share_commits(tmp_path: Path) -> None:
    path = tmp_path / "r.qvc"
    with QvcConversationStore(path) as store:
        run(turn(store, "c", "one"))
        run(turn(store, "c", "two"))
        history = run(store.load_entries("c"))
        git = store.store
        kept = git.resolve(history[3].id)  # the end of turn one
        old_tip = head_commit(git, "c")
        rec = run(store.read_record("c"))
        branched = run(store.branch("c", at=4, expected_revision=rec.revision))
        assert head_commit(git, "c") == kept  # the head moved back, in the same write as the record
        run(store.save(run(make_agent(1).run("two, again", conversation=branched))))
        rec = run(store.read_record("c"))
        assert rec.branches == [history[-1].id]
        new_tip = head_commit(git, "c")
        run_git(path, "merge-base", "--is-ancestor", kept, new_tip)
        run_git(path, "merge-base", "--is-ancestor", kept, old_tip)
        assert run_git(path, "merge-base", "--is-ancestor", old_tip, new_tip, check=False).returncode == 1
        superseded = run_git(path, "for-each-ref", "--format=%(objectname)", "refs/qvc/superseded/").stdout.split()
        assert superseded == [old_tip]  # the branch left is a superseded line, every commit kept
        fork = run(store.fork("c", from_entry=history[-1].id, new_conversation_id="f"))
        assert head_commit(git, "f") == old_tip  # nothing copied
        run(store.save(run(make_agent(1).run("on the fork", conversation=fork))))
        fork_tip = head_commit(git, "f")
        run_git(path, "merge-base", "--is-ancestor", old_tip, fork_tip)
        first = git.commit_info(fork_tip)
        while git.commit_info(first.parent).thread_id == conversation_thread("f"):
            first = git.commit_info(first.parent)
        assert first.parent == old_tip  # the fork's first commit's parent is on the source thread
        log = qvc_json("log", "--all", cwd=path)
        assert {e["id"] for e in log} >= {e.id for e in history}
    fsck(path)



def test_a_conversation_renamed_with_branch_m_reads_and_saves_under_its_new_id(tmp_path: Path) -> None:
    """``qvc branch -m`` renames the conversation's thread: the store then knows it by the new
    id only (its record says so, though written under the old one), and saving goes on there."""
    path = tmp_path / "r.qvc"
    with QvcConversationStore(path) as store:
        run(turn(store, "a", "one"))
    qvc("branch", "-m", conversation_thread("a"), conversation_thread("b"), cwd=path)
    with QvcConversationStore(path) as store:
        assert run(store.read_record("a")) is None
        rec = run(store.read_record("b"))
        assert rec.conversation_id == "b"
        assert [r.conversation_id for r in run(store.read_records())] == ["b"]
        before = len(run(store.load_entries("b")))
        run(turn(store, "b", "two"))
        assert len(run(store.load_entries("b"))) > before
        assert run(store.read_record("b")).conversation_id == "b"
        assert qvc("branch", cwd=path).stdout.split() == [conversation_thread("b")]
    fsck(path)


def test_delete_purges_what_no_other_conversation_reaches(tmp_path: Path) -> None:
    path = tmp_path / "r.qvc"
    with QvcConversationStore(path) as store:
        run(turn(store, "c", "one"))
        run(turn(store, "c", "two"))
        history = run(store.load_entries("c"))
        run(store.fork("c", at=4, new_conversation_id="f"))
        commits = [store.store.resolve(e.id) for e in history]
        run(store.delete("c"))
        assert run(store.read_record("c")) is None and run(store.load("c")) is None
        for sha in commits[:4]:  # shared with the fork: kept
            run_git(path, "cat-file", "-e", sha)
        for sha, entry in zip(commits[4:], history[4:], strict=True):  # only c's: gone for good
            assert run_git(path, "cat-file", "-e", sha, check=False).returncode != 0
            with pytest.raises(LookupError):
                run(store.read_entry(entry.id))
        assert len(run(store.load_entries("f"))) == 4
        assert conversation_thread("c") not in store.store.threads()
        run(turn(store, "c", "a new c"))  # the same id again: a new conversation
        assert len(run(store.load_entries("c"))) == 4
    fsck(path)


def test_a_killed_writer_loses_nothing_acknowledged_and_the_conversation_resumes(tmp_path: Path) -> None:
    path = tmp_path / "r.qvc"
    proc = subprocess.Popen([sys.executable, "-m", "tests.workers.pydantic_ai_worker", str(path)], cwd=ROOT,
                            env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    acked: List[str] = []
    try:
        while len(acked) < 3:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            acked.append(line.split()[1])
        time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    fsck(path)
    with QvcConversationStore(path) as store:
        ids = [e.id for e in run(store.load_entries("killed"))]
        assert all(a in ids for a in acked)
        run(turn(store, "killed", "after the kill"))
        assert len(run(store.load_entries("killed"))) == len(ids) + 4
    fsck(path)


# -- what people see -------------------------------------------------------------------------------


def test_the_cli_shows_a_conversation(tmp_path: Path) -> None:
    path = tmp_path / "r.qvc"

    def scripted(messages, info):
        last = messages[-1].parts
        if any(p.part_kind == "retry-prompt" or getattr(p, "outcome", "") == "retried" for p in last):
            return ModelResponse(parts=[ToolCallPart("lookup", {"key": "good"}, tool_call_id="c2")])
        if any(p.part_kind == "tool-return" for p in last):
            return ModelResponse(parts=[TextPart("found it")])
        return ModelResponse(parts=[ToolCallPart("lookup", {"key": "bad"}, tool_call_id="c1")])

    agent = Agent(FunctionModel(scripted), instructions="Look things up.")

    @agent.tool_plain
    def lookup(key: str) -> str:
        if key == "bad":
            raise ModelRetry("no such key")
        return "value"

    with QvcConversationStore(path) as store:
        run(store.save(run(agent.run("find it", conversation=Conversation(conversation_id="cli")))))
        history = run(store.load_entries("cli"))
    thread = conversation_thread("cli")
    shown = qvc("show", thread, cwd=path).stdout
    assert 'user: "find it"' in shown
    assert 'assistant: → lookup({"key": "bad"})' in shown
    assert 'assistant: "found it"' in shown
    state = qvc_json("show", thread, cwd=path)["state"]
    messages = state["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert messages[0]["instructions"] == "Look things up."
    assert messages[1]["tool_calls"] == [{"id": "c1", "name": "lookup", "args": {"key": "bad"}}]
    assert messages[2]["tool_call_id"] == "c1" and messages[2]["error"] is True
    assert messages[4] == {**messages[4], "role": "tool", "tool_call_id": "c2", "name": "lookup", "content": "value"}
    assert "error" not in messages[4]
    assert messages[-1]["id"] == history[-1].id and messages[-1]["content"] == "found it"
    assert set(state) == {"messages"}
    diff = qvc("diff", history[1].id, history[-1].id, cwd=path).stdout
    assert "messages added" in diff and "1 tool call failed" in diff, diff
    log = qvc("log", "-p", thread, cwd=path).stdout
    assert log.count("checkpoint ") == len(history)
    assert qvc("branch", cwd=path).stdout.split() == [thread]


def test_import_qvc_does_not_import_pydantic_ai() -> None:
    out = subprocess.run([sys.executable, "-c", "import qvc, sys; print('pydantic_ai' in sys.modules)"],
                         env=child_env(), capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# -- the adapter kit -------------------------------------------------------------------------------


class Handle:
    def __init__(self, path: Path):
        self.store = QvcConversationStore(path, purge_on_delete=True)


def _turn(cid: str, prompt: str, steps: int = 1):
    return lambda h: run(turn(h.store, cid, prompt, steps))


def _branch(h: Handle) -> None:
    rec = run(h.store.read_record("a"))
    conv = run(h.store.branch("a", at=6, expected_revision=rec.revision))
    run(h.store.save(run(make_agent(1).run("again", conversation=conv))))


class PydanticAIDriver(AdapterDriver):
    name = "pydantic-ai"

    def open(self, path: Path) -> Handle:
        return Handle(path)

    def close(self, handle: Handle) -> None:
        handle.store.close()

    def script(self) -> List[Operation]:
        return [
            Operation("a: a run of two tool steps", _turn("a", "one", 2)),
            Operation("a: a second run", _turn("a", "two")),
            Operation("a: branch at 6 (after run one) and run again", _branch),
            Operation("fork a at 6 into b", lambda h: run(h.store.fork("a", at=6, new_conversation_id="b"))),
            Operation("b: a run on the fork", _turn("b", "fork")),
            Operation("c: a run", _turn("c", "three")),
            Operation("delete c (purged)", lambda h: run(h.store.delete("c"))),
            Operation("d: a run after the delete", _turn("d", "four")),
        ]

    def lines(self, handle: Handle) -> Dict[str, List[str]]:
        out = {}
        for rec in run(handle.store.list_conversations()):
            out[conversation_thread(rec.conversation_id)] = [e.id for e in
                                                             reversed(run(handle.store.load_entries(rec.conversation_id)))]
        return out

    def checkpoints(self, handle: Handle) -> Dict[str, Set[str]]:
        out = {}
        for rec in run(handle.store.list_conversations()):
            ids = set()
            for tip in [rec.head_id, *rec.branches]:
                ids |= {e.id for e in run(handle.store.read_history(tip))}
            out[conversation_thread(rec.conversation_id)] = ids
        return out

    def snapshot(self, handle: Handle) -> Any:
        out = []
        for rec in sorted(run(handle.store.list_conversations()), key=lambda r: r.conversation_id):
            out.append((rec, [(e.id, e.parent_id, e.kind, e.message) for e in
                              run(handle.store.load_entries(rec.conversation_id))]))
        return out

    def writer(self, path: Path) -> List[str]:
        return [sys.executable, "-m", "tests.workers.pydantic_ai_worker", str(path)]

    def check_acknowledged(self, handle: Handle, tokens: List[str]) -> None:
        ids = {e.id for e in run(handle.store.load_entries("killed"))}
        for token in tokens:
            assert token in ids, f"acknowledged head {token} is not in the conversation"
            entry = run(handle.store.read_entry(token))
            assert isinstance(entry, ConversationEntry) and entry.message.kind == "response"


class TestPydanticAIAdapter(AdapterKit):
    driver = PydanticAIDriver()


def test_entries_read_back_as_json(tmp_path: Path) -> None:
    """What ``qvc show --raw`` gives is pydantic-ai's own JSON form of the message."""
    path = tmp_path / "r.qvc"
    with QvcConversationStore(path) as store:
        run(turn(store, "c", "go"))
        history = run(store.load_entries("c"))
    raw = qvc_json("show", "--raw", history[0].id, cwd=path)["state"]["message"]
    assert ModelMessagesTypeAdapter.validate_python([raw])[0] == history[0].message
    assert json.loads(ModelMessagesTypeAdapter.dump_json([history[0].message]))[0] == raw


def test_the_page_api_shows_a_conversation(tmp_path: Path) -> None:
    """``qvc serve``'s checkpoint view (what the page draws) has the conversation, through the viewer."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from qvc.server.app import create_app

    path = tmp_path / "r.qvc"
    with QvcConversationStore(path) as store:
        run(turn(store, "c", "go", 2))
        history = run(store.load_entries("c"))
    client = TestClient(create_app(path), base_url="http://127.0.0.1")
    view = client.get(f"/api/checkpoints/{conversation_thread('c')}").json()
    assert view["id"] == history[-1].id
    roles = [m["role"] for m in view["state"]["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    diff = client.get("/api/diff", params={"a": history[0].id, "b": history[-1].id})
    assert diff.status_code == 200, diff.text
    assert "messages" in json.dumps(diff.json()["fields"])


def test_the_sample_runs(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(Path(ROOT, "samples", "pydantic_ai_conversation.py")), "--repo",
                           str(tmp_path / "s.qvc")], env=child_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAIL" not in proc.stdout and "8 messages added" in proc.stdout
    fsck(tmp_path / "s.qvc")


def test_the_viewer_needs_no_pydantic_ai(tmp_path: Path) -> None:
    """A repository pushed to a machine without pydantic-ai still shows as a conversation."""
    path = tmp_path / "r.qvc"
    with QvcConversationStore(path) as store:
        run(turn(store, "c", "go"))
    code = ("import sys; sys.modules['pydantic_ai'] = None\n"
            "from qvc.cli.app import main\n"
            "sys.argv = ['qvc', '--repo', sys.argv[1], '--no-pager', 'show', '--json', 'pydantic-ai/c']\n"
            "main()\n")
    out = subprocess.run([sys.executable, "-c", code, str(path)], env=child_env(), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert [m["role"] for m in json.loads(out.stdout)["state"]["messages"]] == ["user", "assistant", "tool",
                                                                                "assistant"]


@pytest.mark.parametrize("cid", ["user@example.com/chat 1", "a..b", "HEAD", "@{1}", "x" * 300])
def test_any_conversation_id_is_a_thread(tmp_path: Path, cid: str) -> None:
    with QvcConversationStore(tmp_path / "r.qvc") as store:
        run(turn(store, cid, "go"))
        assert [r.conversation_id for r in run(store.list_conversations())] == [cid]
        assert len(run(store.load_entries(cid))) == 4
        run(store.delete(cid))
        assert run(store.list_conversations()) == []
    fsck(tmp_path / "r.qvc")


def test_the_page_reads_a_conversation_in_chromium(tmp_path: Path) -> None:
    """``qvc serve``'s page, in headless Chromium, draws the conversation of a pydantic-ai thread."""
    import re
    import shutil

    pytest.importorskip("fastapi")
    pytest.importorskip("selenium")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    driver_path = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    if not (Path(chromium).exists() and Path(driver_path).exists()):
        pytest.skip("chromium and chromedriver are needed")
    path = tmp_path / "r.qvc"
    with QvcConversationStore(path) as store:
        run(turn(store, "trip", "go", 2))
    thread = conversation_thread("trip")
    server = subprocess.Popen([sys.executable, "-m", "qvc", "--repo", str(path), "serve", "--port", "0", "--read-only"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(),
                              stdin=subprocess.DEVNULL)
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"):
        options.add_argument(arg)
    browser = None
    try:
        found = re.search(r"at (http://\S+?/)[ ;\n]", server.stdout.readline())
        assert found, server.stderr.read() if server.poll() is not None else "no URL"
        browser = webdriver.Chrome(service=Service(driver_path), options=options)
        browser.get(found.group(1) + f"#t={thread}")
        wait = WebDriverWait(browser, 20)
        # one point per entry checkpoint; tool results are drawn inside their calls
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#conversation li.marker")) == 6)
        assert len(browser.find_elements(By.CSS_SELECTOR, "#conversation li.msg")) == 4

        def texts(css: str) -> list:
            return browser.execute_script(
                "return [...document.querySelectorAll(arguments[0])].map((n) => n.textContent)", css)

        assert "go" in texts("#conversation li.msg.role-user")[0]
        calls = browser.find_elements(By.CSS_SELECTOR, '#conversation .tool-call[data-name="add"]')
        assert len(calls) == 2 and '"a":0' in calls[0].text.replace(" ", "")
        assert calls[1].find_element(By.CSS_SELECTOR, ".tool-result").text.strip().endswith("2")
        assert texts("#conversation li.msg.role-assistant .msg-text")[-1].strip() == "total 2"
        assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    finally:
        if browser is not None:
            browser.quit()
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=15)
