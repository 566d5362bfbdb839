"""QvcSessionStore (qvc.integrations.claude_agent_sdk): the Claude Agent SDK's ``SessionStore`` on a
qvc repository.

The SDK's own conformance suite (all 14 contracts: every optional method is implemented);
idempotent appends; two processes appending to one session at once; reopening; the SDK's
store-facing functions (import, list, read, rename, tag, fork, delete, resume materialization) on
qvc; the SDK's real loop, its bundled ``claude`` program driven offline by a scripted model server
on 127.0.0.1 (qvc/integrations/claude_agent_sdk/scripted.py): tool steps, a subagent, a resume
from the repository alone, a run SIGKILLed mid-way; the command line showing a session as a
conversation; and the adapter kit (adapter_kit.py)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest

pytest.importorskip("claude_agent_sdk")

import claude_agent_sdk as sdk  # noqa: E402
from adapter_kit import AdapterDriver, AdapterKit, Operation  # noqa: E402
from claude_agent_sdk import ClaudeAgentOptions, InMemorySessionStore, SessionStore, project_key_for_directory  # noqa: E402
from claude_agent_sdk.testing import run_session_store_conformance  # noqa: E402
from helpers import child_env, fsck, qvc, qvc_json, run_git, slow_enabled  # noqa: E402

from qvc import CheckpointConfig, GitCheckpointStore  # noqa: E402
from qvc.errors import InvalidInputError, SerializationError, StoreClosedError  # noqa: E402
from qvc.integrations.claude_agent_sdk import QvcSessionStore, key_of, session_thread  # noqa: E402
from qvc.integrations.claude_agent_sdk.scripted import (  # noqa: E402
    LOOKUP,
    ScriptedModel,
    ask,
    offline_options,
    turn_lines,
    write_lines,
)

OPTIONAL = ("list_sessions", "list_session_summaries", "delete", "list_subkeys")


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def e(**fields: Any) -> Dict[str, Any]:
    return {"type": "x", **fields}


def line(store: GitCheckpointStore, thread: str) -> list:
    """The thread's checkpoints on its line, oldest first (the tuples)."""
    return list(reversed(list(store.list(CheckpointConfig(thread)))))


# -- import ----------------------------------------------------------------------------------------


def test_import_qvc_does_not_import_the_sdk():
    """Nor does the viewer: ``qvc show`` reads a transcript without loading the SDK."""
    code = ("import sys, qvc, qvc.store.viewers, qvc.integrations.claude_agent_sdk.viewer\n"
            "import qvc.integrations.claude_agent_sdk.scripted\n"
            "assert not any(m.split('.')[0] in ('claude_agent_sdk', 'anyio', 'mcp') for m in sys.modules), "
            "'the SDK was imported'")
    subprocess.run([sys.executable, "-c", code], env=child_env(), check=True, timeout=60)


# -- the SDK's conformance suite -------------------------------------------------------------------


def test_the_sdks_conformance_suite_passes_every_contract(tmp_path):
    """``run_session_store_conformance`` runs its optional contracts only for methods a store
    overrides: QvcSessionStore overrides all four, so all 14 run (on a fresh repository each)."""
    made: List[QvcSessionStore] = []

    def make() -> QvcSessionStore:
        made.append(QvcSessionStore(tmp_path / f"c{len(made)}.qvc"))
        return made[-1]

    try:
        for name in OPTIONAL:
            assert getattr(QvcSessionStore, name) is not getattr(SessionStore, name), name
        run(run_session_store_conformance(make))
        assert len(made) == 15  # the probe and one store per contract group: none was skipped
    finally:
        for s in made:
            s.close()
    for s in made[1:4]:
        fsck(s.path)


def test_the_conformance_suite_passes_on_one_shared_repository_in_each_durability_mode(tmp_path):
    """``store=``: many stores on one open repository (each contract in a fresh repository still:
    the suite's keys are fixed); and the durability modes pass through."""
    for mode in ("async", "exit"):
        made: List[GitCheckpointStore] = []

        def make(made: List[GitCheckpointStore] = made, mode: str = mode) -> QvcSessionStore:
            made.append(GitCheckpointStore(tmp_path / f"{mode}{len(made)}.qvc", durability=mode))
            return QvcSessionStore(store=made[-1])

        try:
            run(run_session_store_conformance(make))
            assert made[0].durability.value == mode
        finally:
            for s in made:
                s.close()


# -- appends ---------------------------------------------------------------------------------------


def test_appends_are_idempotent_by_uuid_and_each_is_one_checkpoint(tmp_path):
    key = {"project_key": "p", "session_id": "s"}
    thread = session_thread("p", "s")
    with QvcSessionStore(tmp_path / "r.qvc") as s:
        run(s.append(key, [e(uuid="a", n=1), e(uuid="b", n=2)]))
        run(s.append(key, [e(uuid="a", n=1), e(uuid="b", n=2)]))  # a retried batch: nothing new
        run(s.append(key, [e(uuid="b", n=2), e(uuid="c", n=3), e(uuid="c", n=3)]))  # partly new
        run(s.append(key, [e(title="no uuid")]))
        run(s.append(key, [e(title="no uuid")]))  # entries without a uuid are always appended
        run(s.append(key, []))
        assert run(s.load(key)) == [e(uuid="a", n=1), e(uuid="b", n=2), e(uuid="c", n=3), e(title="no uuid"),
                                    e(title="no uuid")]
        cps = line(s.store, thread)
        assert [(t.metadata["op"], t.metadata["added"], t.metadata["count"]) for t in cps] == [
            ("append", 2, 2), ("append", 1, 3), ("append", 1, 4), ("append", 1, 5)]
        assert cps[1].metadata["skipped"] == 2
        assert [t.checkpoint.step for t in cps] == [0, 1, 2, 3]
        mtimes = [t.metadata["mtime"] for t in cps]
        assert mtimes == sorted(set(mtimes)) and mtimes[0] > 1e12  # epoch ms, increasing
        assert s.store.changed(s.store.head(thread)) == ["entries"]  # the key and summary unchanged
        loaded = run(s.load(key))
        loaded[0]["n"] = 99  # the caller's copy
        assert run(s.load(key))[0]["n"] == 1
    fsck(tmp_path / "r.qvc")


def test_entries_round_trip_deep_equal_and_bad_input_is_refused(tmp_path):
    odd = e(uuid="u", text="héllo ✓ \u0000 \n", big=2**70, neg=-2**63, f=0.1, exp=1e300, nested={"a": [1, [2, {}]]},
            keys={"": 1, "a.b/c": 2, "%2F": 3}, empty=[], none=None, t=True)
    key = {"project_key": "tenant/one%", "session_id": "s/1", "subpath": "subagents/agent-x"}
    with QvcSessionStore(tmp_path / "r.qvc") as s:
        run(s.append(key, [odd]))
        assert run(s.load(key)) == [odd]
        thread = s.thread(key)
        assert thread == "claude/session/tenant%2Fone%25/s%2F1/subagents/agent-x" and key_of(thread) == key
        with pytest.raises(SerializationError):
            run(s.append(key, [e(v=object())]))
        for bad in ("not a list", ["not an object"]):
            with pytest.raises(InvalidInputError):
                run(s.append(key, bad))
        for bad_key in ({"project_key": "", "session_id": "s"}, {"session_id": "s"}, "p/s"):
            with pytest.raises(InvalidInputError):
                run(s.append(bad_key, [e()]))
        with pytest.raises(InvalidInputError):
            run(s.list_subkeys(key))  # a session's key, without a subpath
        assert run(s.load(key)) == [odd] and len(s.store.threads()) == 1
        assert run(s.load({**key, "subpath": ""})) is None  # an empty subpath is the main transcript
        s.close()
        with pytest.raises(StoreClosedError):
            run(s.append(key, [e()]))
    assert key_of("claude/session/p") is None and key_of("other/p/s") is None


ADDER = """
import asyncio, os, sys, time
from qvc.integrations.claude_agent_sdk import QvcSessionStore
key = {"project_key": "p", "session_id": "shared"}
async def main():
    with QvcSessionStore(sys.argv[1]) as s:
        print("ready", flush=True)
        while not os.path.exists(sys.argv[3]):
            time.sleep(0.005)
        for i in range(30):
            # its own entry, and one both processes append (the same uuid): it must land once
            await s.append(key, [{"type": "x", "uuid": f"{sys.argv[2]}-{i}", "who": sys.argv[2], "i": i},
                                 {"type": "x", "uuid": f"both-{i}", "i": i}])
asyncio.run(main())
"""


def test_two_processes_appending_to_one_session_at_once_lose_nothing(tmp_path):
    path = tmp_path / "r.qvc"
    QvcSessionStore(path).close()
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", ADDER, str(path), who, str(go)], env=child_env(),
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for who in ("a", "b")]
    for p in procs:
        assert p.stdout.readline() == "ready\n", p.stderr.read()
    go.touch()  # both at once: their appends interleave
    for p in procs:
        assert p.wait(timeout=120) == 0, p.stderr.read()
    fsck(path)
    with QvcSessionStore(path) as s:
        entries = s.entries({"project_key": "p", "session_id": "shared"})
        assert len(entries) == 90
        for who in ("a", "b"):
            assert [x["i"] for x in entries if x.get("who") == who] == list(range(30))
        assert sorted(x["i"] for x in entries if x["uuid"].startswith("both-")) == list(range(30))
        cps = line(s.store, session_thread("p", "shared"))
        assert cps[-1].metadata["count"] == 90 and sum(t.metadata["added"] for t in cps) == 90


def test_a_reopened_store_reads_the_same(tmp_path):
    path = tmp_path / "r.qvc"
    main = {"project_key": "p", "session_id": "s"}
    sub = {**main, "subpath": "subagents/agent-1"}
    with QvcSessionStore(path) as s:
        run(s.append(main, [e(uuid="1", timestamp="2026-01-01T00:00:00.000Z", customTitle="Hello")]))
        run(s.append(sub, [e(uuid="2")]))
        before = (run(s.load(main)), run(s.load(sub)), run(s.list_sessions("p")), run(s.list_session_summaries("p")),
                  run(s.list_subkeys(main)))
    with QvcSessionStore(path) as s:
        after = (run(s.load(main)), run(s.load(sub)), run(s.list_sessions("p")), run(s.list_session_summaries("p")),
                 run(s.list_subkeys(main)))
        assert after == before
        assert after[3][0]["data"]["custom_title"] == "Hello" and after[4] == ["subagents/agent-1"]
        meta = line(s.store, s.thread(sub))[0].metadata
        assert meta["session_thread"] == s.thread(main) and meta["subpath"] == "subagents/agent-1"


def test_delete_is_a_qvc_delete(tmp_path):
    """A deleted transcript's branch goes (with its subagents'); its commits stay until a prune,
    and a fork of it keeps the history it shares."""
    path = tmp_path / "r.qvc"
    main = {"project_key": "p", "session_id": "s"}
    with QvcSessionStore(path) as s:
        run(s.append(main, [e(uuid="1")]))
        run(s.append({**main, "subpath": "subagents/agent-1"}, [e(uuid="2")]))
        head = s.store.head(s.thread(main))
        run(s.delete(main))
        assert s.store.threads() == [] and run(s.load(main)) is None
        assert run_git(path, "cat-file", "-t", head).stdout.strip() == "commit"  # until qvc gc --prune
        run(s.append(main, [e(uuid="1")]))  # a new transcript under the same key: a new root
        assert s.store.commit_info(s.store.head(s.thread(main))).parents == ()
    fsck(path)


def test_a_failed_append_raises_and_is_recorded_where_qvc_status_shows_it(tmp_path):
    """The SDK's mirror catches a failed append (it tries twice more, then drops the batch): the
    failure is logged and recorded in the repository too, so ``qvc status`` reports the gap."""
    path = tmp_path / "r.qvc"
    key = {"project_key": "p", "session_id": "s"}
    with QvcSessionStore(path) as s:
        run(s.append(key, [e(uuid="1")]))
    with GitCheckpointStore(path, readonly=True) as ro:
        with pytest.raises(InvalidInputError):
            run(QvcSessionStore(store=ro).append(key, [e(uuid="2")]))
    status = qvc_json("--repo", str(path), "status")
    assert status["failures"] == 1 and status["last_failures"][0]["operation"] == "claude-agent-sdk append"
    assert status["last_failures"][0]["session_id"] == "s"


# -- the SDK's store-facing functions --------------------------------------------------------------


@contextmanager
def config_dir(path: Path) -> Iterator[Path]:
    """``CLAUDE_CONFIG_DIR`` set to ``path`` while the block runs (where the SDK's functions that
    read local transcripts look, as the Claude Code program writes them)."""
    old = os.environ.get("CLAUDE_CONFIG_DIR")
    os.environ["CLAUDE_CONFIG_DIR"] = str(path)
    try:
        yield path
    finally:
        if old is None:
            os.environ.pop("CLAUDE_CONFIG_DIR", None)
        else:
            os.environ["CLAUDE_CONFIG_DIR"] = old


def local_transcript(config: Path, project: Path, session_id: str, subpath: Optional[str] = None) -> str:
    """Where the Claude Code program keeps a transcript of a session run in ``project``."""
    base = config / "projects" / project_key_for_directory(str(project)) / session_id
    return str(base / f"{subpath}.jsonl") if subpath else str(base) + ".jsonl"


def test_the_sdks_session_functions_work_through_qvc(tmp_path):
    """Import a local transcript (twice: nothing doubles), list and read it, rename, tag, fork and
    delete it, and materialize it for a resume, all through the SDK's own functions."""
    project, config = tmp_path / "project", tmp_path / "config"
    project.mkdir()
    sid, d = str(uuid.uuid4()), str(project)
    first = turn_lines(sid, "Look up items 0 and 1.", steps=2, cwd=d)
    second = turn_lines(sid, "Ask a helper.", steps=0, answer="The helper found it.", parent=first[-1]["uuid"], cwd=d)
    sub = turn_lines(sid, "Sub: look up item 7.", steps=1, cwd=d, sidechain=True, agent_id="h1")
    write_lines(local_transcript(config, project, sid), first + second)
    write_lines(local_transcript(config, project, sid, "subagents/agent-h1"), sub)
    meta = Path(local_transcript(config, project, sid, "subagents/agent-h1")).with_suffix(".meta.json")
    meta.write_text(json.dumps({"agentType": "general-purpose", "toolUseId": "toolu_1"}))
    path = tmp_path / "r.qvc"
    with config_dir(config), QvcSessionStore(path) as s:
        key = {"project_key": project_key_for_directory(d), "session_id": sid}
        run(sdk.import_session_to_store(sid, s, directory=d))
        run(sdk.import_session_to_store(sid, s, directory=d))  # a re-import: uuids are idempotency keys
        assert run(s.load(key)) == first + second
        assert run(s.list_subkeys(key)) == ["subagents/agent-h1"]
        assert len(line(s.store, s.thread(key))) == 1
        assert run(sdk.list_subagents_from_store(s, sid, directory=d)) == ["h1"]
        subs = run(sdk.get_subagent_messages_from_store(s, sid, "h1", directory=d))
        assert [m.type for m in subs] == ["user", "assistant", "user", "assistant"]
        assert subs[0].parent_tool_use_id == "toolu_1"  # from the imported sidecar
        msgs = run(sdk.get_session_messages_from_store(s, sid, directory=d))
        assert [m.uuid for m in msgs] == [x["uuid"] for x in first + second]

        run(sdk.rename_session_via_store(s, sid, "Lookups", directory=d))
        run(sdk.tag_session_via_store(s, sid, "keep", directory=d))
        listed = run(sdk.list_sessions_from_store(s, directory=d))  # from the kept summaries
        assert [(i.session_id, i.custom_title, i.tag, i.first_prompt) for i in listed] == [
            (sid, "Lookups", "keep", "Look up items 0 and 1.")]
        info = run(sdk.get_session_info_from_store(s, sid, directory=d))
        assert info.custom_title == "Lookups" and info.tag == "keep"

        fork = run(sdk.fork_session_via_store(s, sid, directory=d, up_to_message_id=first[-1]["uuid"]))
        fkey = {**key, "session_id": fork.session_id}
        forked = run(s.load(fkey))
        assert [x["forkedFrom"]["messageUuid"] for x in forked[:-1]] == [x["uuid"] for x in first]
        # a qvc fork: its first commit's parent is the source's checkpoint that added the last
        # forked entry (the import's), so both share that history
        fork_first = line(s.store, s.thread(fkey))[-1]
        source_cp = line(s.store, s.thread(key))[0]
        assert fork_first.metadata["op"] == "fork" and fork_first.checkpoint.parent_id == source_cp.checkpoint.id
        assert fork_first.metadata["forked_from"] == {"session_id": sid, "checkpoint": source_cp.checkpoint.id}
        run_git(path, "merge-base", "--is-ancestor", s.store.resolve(source_cp.checkpoint.id),
                s.store.head(s.thread(fkey)))
        titles = {i.session_id: i.custom_title for i in run(sdk.list_sessions_from_store(s, directory=d))}
        assert titles == {sid: "Lookups", fork.session_id: "Lookups (fork)"}

        from claude_agent_sdk._internal.session_resume import materialize_resume_session  # internal, offline

        done = run(materialize_resume_session(ClaudeAgentOptions(session_store=s, resume=sid, cwd=d)))
        try:
            written = Path(done.config_dir) / "projects" / key["project_key"]
            assert [json.loads(x) for x in (written / f"{sid}.jsonl").read_text().splitlines()] == run(s.load(key))
            assert (written / sid / "subagents" / "agent-h1.jsonl").is_file()
            assert (written / sid / "subagents" / "agent-h1.meta.json").is_file()
        finally:
            run(done.cleanup())

        run(sdk.delete_session_via_store(s, sid, directory=d))
        assert run(s.load(key)) is None and run(s.list_subkeys(key)) == []
        assert [i.session_id for i in run(sdk.list_sessions_from_store(s, directory=d))] == [fork.session_id]
        run_git(path, "merge-base", "--is-ancestor", s.store.resolve(source_cp.checkpoint.id),
                s.store.head(s.thread(fkey)))  # the fork keeps the history it shares
    fsck(path)


def test_the_same_calls_read_back_as_on_the_sdks_in_memory_store(tmp_path):
    """One script of appends (several sessions, a subagent, a rename, a delete) on the SDK's
    ``InMemorySessionStore`` and on QvcSessionStore: every read gives the same (mtimes aside)."""

    d = str(tmp_path)
    sid, other = str(uuid.UUID(int=1)), str(uuid.UUID(int=2))
    key = {"project_key": project_key_for_directory(d), "session_id": sid}
    one, sub, two = turn_lines(sid, "First.", steps=2, cwd=d), turn_lines(sid, "Sub.", sidechain=True), \
        turn_lines(other, "Other.", cwd=d)

    def same(entries: Optional[list]) -> Optional[list]:  # the rename's line has a uuid and time of its own
        return None if entries is None else [
            {k: v for k, v in x.items() if x["type"] != "custom-title" or k not in ("uuid", "timestamp")}
            for x in entries]

    async def script(s: Any) -> list:
        seen: list = []
        await s.append(key, one[:3])
        await s.append(key, one[3:])
        await s.append({**key, "subpath": "subagents/agent-a"}, sub)
        await s.append({**key, "session_id": other}, two)
        await sdk.rename_session_via_store(s, sid, "Named", directory=d)
        for k in (key, {**key, "subpath": "subagents/agent-a"}, {**key, "session_id": "none"}):
            seen.append(same(await s.load(k)))
        seen.append(sorted(x["session_id"] for x in await s.list_sessions(key["project_key"])))
        seen.append(sorted((x["session_id"], x["data"]) for x in await s.list_session_summaries(key["project_key"])))
        seen.append(await s.list_subkeys(key))
        seen.append([(i.session_id, i.summary, i.first_prompt, i.custom_title, i.created_at) for i in
                     sorted(await sdk.list_sessions_from_store(s, directory=d), key=lambda i: i.session_id)])
        await s.delete(key)
        seen.append((await s.load(key), await s.list_subkeys(key), len(await s.list_sessions(key["project_key"]))))
        return seen

    expected = run(script(InMemorySessionStore()))
    with QvcSessionStore(tmp_path / "r.qvc") as s:
        assert run(script(s)) == expected


# -- the real loop, offline -------------------------------------------------------------------------


def plan_turns(model: ScriptedModel) -> None:
    model.plan("Look up items 0 to 2.", calls=[(LOOKUP, {"n": n}) for n in range(3)], answer="Items 0 to 2: found.")
    model.plan("Ask a helper.", answer="The helper found it.", calls=[
        ("Agent", {"description": "Look it up", "prompt": "Sub: look up item 7.", "subagent_type": "general-purpose"})])
    model.plan("Sub: look up item 7.", calls=[(LOOKUP, {"n": 7})], answer="Item 7 is value 7.")


def options(store: Any, model: ScriptedModel, work: Path, **more: Any) -> ClaudeAgentOptions:
    """The SDK's options of an offline run in ``work/project`` (the program's state in ``work/config``)."""
    return offline_options(store, model, str(work / "project"), str(work / "config"), **more)


def local_lines(work: Path, key: Dict[str, str]) -> List[dict]:
    """The lines of a session's transcript the program wrote locally."""
    path = work / "config" / "projects" / key["project_key"] / f"{key['session_id']}.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_the_real_loop_mirrors_into_qvc_and_resumes_from_it(tmp_path):
    """The SDK's ``query`` with its bundled program on the scripted model: a turn of three tool
    steps and a turn that hands work to a subagent are mirrored into qvc (the session and the
    subagent each a thread, every line the program wrote locally in it); with the local files
    gone, ``resume=`` brings the session back from qvc alone and the model sees its history."""
    path = tmp_path / "r.qvc"
    with ScriptedModel() as model, QvcSessionStore(path) as store:
        plan_turns(model)
        sid, result = run(ask("Look up items 0 to 2.", options(store, model, tmp_path)))
        assert result == "Items 0 to 2: found."
        key = {"project_key": project_key_for_directory(str(tmp_path / "project")), "session_id": sid}
        thread = store.thread(key)
        entries = store.entries(key)
        calls = [b for x in entries if x["type"] == "assistant" for b in x["message"]["content"]
                 if b["type"] == "tool_use"]
        assert [(c["name"], c["input"]) for c in calls] == [(LOOKUP, {"n": n}) for n in range(3)]
        results = [b["content"] for x in entries if x["type"] == "user" and isinstance(x["message"]["content"], list)
                   for b in x["message"]["content"] if b.get("type") == "tool_result"]
        assert results == [[{"type": "text", "text": f"value {n}"}] for n in range(3)]
        local = {x["uuid"]: x for x in local_lines(tmp_path, key) if "uuid" in x}
        assert all(local[x["uuid"]] == x for x in entries if "uuid" in x)  # the mirror is the local copy
        assert {u for u, x in local.items() if x["type"] in ("user", "assistant")} <= {x.get("uuid") for x in entries}
        cps = line(store.store, thread)
        assert cps[-1].metadata["count"] == len(entries) and sum(t.metadata["added"] for t in cps) == len(entries)

        shutil.rmtree(tmp_path / "config")  # the program's local transcripts are gone: qvc has the session
        asked = len(model.requests)
        # eager: the SDK appends after every frame (in the background, one at a time) instead of once a turn
        again, result = run(ask("Ask a helper.", options(store, model, tmp_path, resume=sid,
                                                         session_store_flush="eager")))
        assert again == sid and result == "The helper found it."
        first = model.requests[asked]
        assert "Look up items 0 to 2." in json.dumps(first["messages"])  # the history came back from qvc
        subs = run(store.list_subkeys(key))
        assert len(subs) == 1 and subs[0].startswith("subagents/agent-")
        sub = store.entries({**key, "subpath": subs[0]})
        assert any(x.get("type") == "agent_metadata" for x in sub)
        assert "Sub: look up item 7." in json.dumps(sub)
        agent = subs[0].rsplit("agent-", 1)[1]
        assert run(sdk.list_subagents_from_store(store, sid, directory=str(tmp_path / "project"))) == [agent]
        assert set(store.store.threads()) == {thread, f"{thread}/{subs[0]}"}
        assert store.entries(key)[:len(entries)] == entries  # the resumed turn appended to the same line
        assert len(line(store.store, thread)) > len(cps) + 1
    fsck(path)
    shown = qvc("--repo", str(path), "show", thread).stdout
    assert '→ mcp__qvc__lookup({"n": 2})' in shown and 'tool [mcp__qvc__lookup]' in shown, shown
    assert '→ Agent(' in shown and '"The helper found it."' in shown, shown


RUNNER = """
import asyncio, sys, uuid
from qvc.integrations.claude_agent_sdk import QvcSessionStore
from qvc.integrations.claude_agent_sdk.scripted import LOOKUP, ScriptedModel, ask, offline_options
work, sid = sys.argv[2], None
async def main():
    global sid
    with ScriptedModel() as model, QvcSessionStore(sys.argv[1]) as store:
        while True:
            token = uuid.uuid4().hex[:8]
            model.plan(f"Turn {token}.", calls=[(LOOKUP, {"n": 1})], answer=f"Answer {token}.")
            more = {"resume": sid} if sid else {}
            sid, _ = await ask(f"Turn {token}.", offline_options(store, model, work + "/project", work + "/config",
                                                                **more))
            print(f"ack {sid} {token}")
asyncio.run(main())
"""


@pytest.mark.slow  # a kill of the real loop (about 4 s): the slow tier (the kit kills a writer in every run)
def test_a_run_killed_mid_way_loses_nothing_acknowledged_and_resumes_from_qvc(tmp_path, request):
    """A process runs turn after turn of the real loop on one session; it is SIGKILLed at a random
    moment (mostly mid-turn). Every turn whose ``query`` had returned is in the repository, and the
    session continues from it (its local files gone) with that history."""
    if not slow_enabled(request.config):
        pytest.skip("slow: run with -m slow or QVC_SLOW=1")
    path, work = tmp_path / "k.qvc", tmp_path / "work"
    errors = tmp_path / "runner-stderr"
    with open(errors, "w") as err:
        proc = subprocess.Popen([sys.executable, "-c", RUNNER, str(path), str(work)], env=child_env(),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        first = proc.stdout.readline()  # a turn acknowledged, then a kill within about one more turn
        assert first.startswith("ack "), errors.read_text()[-3000:]
        time.sleep(random.uniform(0.0, 0.7))
        proc.send_signal(signal.SIGKILL)
        rest = proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    acks = [first[4:].strip()] + [x[4:] for x in rest.split("\n")[:-1] if x.startswith("ack ")]  # whole lines only
    sids = {a.split()[0] for a in acks}
    assert len(sids) == 1, acks
    sid, tokens = sids.pop(), [a.split()[1] for a in acks]
    fsck(path)
    shutil.rmtree(work / "config")
    with ScriptedModel() as model, QvcSessionStore(path) as store:
        key = {"project_key": project_key_for_directory(str(work / "project")), "session_id": sid}
        text = json.dumps(store.entries(key))
        for token in tokens:
            assert f"Turn {token}." in text and f"Answer {token}." in text, token
        model.plan("After the kill.", answer="Still here.")
        # continue_conversation: the SDK picks the newest session of the project (list_sessions' mtime)
        assert run(ask("After the kill.", options(store, model, work, continue_conversation=True))) == (
            sid, "Still here.")
        seen = json.dumps(model.requests[-1]["messages"])
        assert all(f"Turn {token}." in seen for token in tokens)
        assert "Still here." in json.dumps(store.entries(key))


# -- the command line --------------------------------------------------------------------------------


def test_the_command_line_shows_a_session_as_a_conversation(tmp_path):
    path = tmp_path / "r.qvc"
    sid = str(uuid.uuid4())
    key = {"project_key": "-work-demo", "session_id": sid}
    one = turn_lines(sid, "Look it up.", steps=1, cwd="/work/demo")
    two = turn_lines(sid, "And two more.", steps=2, answer="All found.", parent=one[-1]["uuid"], cwd="/work/demo")
    two[2]["message"]["content"][0]["is_error"] = True
    with QvcSessionStore(path) as s:
        run(s.append(key, one))
        first = line(s.store, s.thread(key))[-1].checkpoint.id
        run(s.append(key, two))
        run(sdk.rename_session_via_store(s, sid, "Demo", directory="/work/demo"))
        thread = s.thread(key)
    repo = ("--repo", str(path))
    shown = qvc(*repo, "show", thread).stdout
    assert '0 user: "Look it up."' in shown and '→ mcp__qvc__lookup({"n": 0})' in shown, shown
    assert 'tool [mcp__qvc__lookup]: "value 0"' in shown and "(failed)" in shown, shown
    assert "\n  entries:" not in shown and "\n  messages: 10 messages" in shown, shown
    doc = qvc_json(*repo, "show", thread)
    state = doc["state"]
    assert state["session"] == key and state["title"] == "Demo"
    msgs = state["messages"]
    assert msgs[1] == {"role": "assistant", "content": "", "id": one[1]["uuid"], "model": "scripted",
                       "tool_calls": [{"id": one[1]["message"]["content"][0]["id"], "name": "mcp__qvc__lookup",
                                       "args": {"n": 0}}], "time": one[1]["timestamp"]}
    assert msgs[2] == {"role": "tool", "content": "value 0", "id": one[2]["uuid"], "name": "mcp__qvc__lookup",
                       "tool_call_id": one[1]["message"]["content"][0]["id"], "time": one[2]["timestamp"]}
    assert msgs[6]["error"] is True and [m["role"] for m in msgs].count("user") == 2
    assert state["events"][-1]["type"] == "custom-title" and state["events"][-1]["customTitle"] == "Demo"
    diff = qvc(*repo, "diff", first, thread).stdout
    assert "messages added" in diff and '"All found."' in diff, diff
    logged = qvc(*repo, "log", "--oneline", thread).stdout
    assert len(logged.splitlines()) == 3, logged
    patched = qvc(*repo, "log", "-p", "-n", "2", thread).stdout  # the rename, and the turn before it
    assert '+ title: "Demo"' in patched and "messages added" in patched, patched
    raw = qvc_json(*repo, "show", "--raw", thread)["state"]
    assert raw["entries"] == one + two + [raw["entries"][-1]] and raw["key"] == key


# -- the adapter kit ---------------------------------------------------------------------------------


@dataclass
class Handle:
    """A QvcSessionStore, a project directory and the Claude Code program's local state (where the
    SDK's import reads transcripts from), and the sessions the script made."""

    store: QvcSessionStore
    work: Path
    sessions: Dict[str, str] = field(default_factory=dict)
    last: Dict[str, str] = field(default_factory=dict)

    @property
    def project(self) -> str:
        return str(self.work / "project")

    def sid(self, name: str) -> str:
        return self.sessions.setdefault(name, str(uuid.uuid5(uuid.NAMESPACE_URL, f"{self.work}/{name}")))


def _turn(name: str, prompt: str, steps: int = 1, sub: Optional[str] = None):
    """A turn the program wrote to its local transcript (and a subagent's, with ``sub``), replayed into
    the store by the SDK's ``import_session_to_store``, as when a mirror had a gap."""
    def op(h: Handle) -> None:
        sid = h.sid(name)
        lines = turn_lines(sid, prompt, steps=steps, parent=h.last.get(sid), cwd=h.project)
        h.last[sid] = lines[-1]["uuid"]
        write_lines(local_transcript(h.work / "config", Path(h.project), sid), lines)
        if sub:
            write_lines(local_transcript(h.work / "config", Path(h.project), sid, f"subagents/agent-{sub}"),
                        turn_lines(sid, f"Sub: {prompt}", cwd=h.project, sidechain=True, agent_id=sub))
        with config_dir(h.work / "config"):
            run(sdk.import_session_to_store(sid, h.store, directory=h.project))
    return op


def _fork(h: Handle) -> None:
    src = h.sid("s1")
    result = run(sdk.fork_session_via_store(h.store, src, directory=h.project, title="Retry"))
    h.sessions["s2"] = result.session_id


def _on_fork(h: Handle) -> None:
    """The fork resumed (the SDK materializes it from the store for the program), then a turn of its own."""
    from claude_agent_sdk._internal.session_resume import materialize_resume_session

    sid = h.sessions["s2"]
    done = run(materialize_resume_session(ClaudeAgentOptions(session_store=h.store, resume=sid, cwd=h.project)))
    try:
        config = Path(done.config_dir)
        before = [json.loads(x) for x in Path(local_transcript(config, Path(h.project), sid)).read_text().splitlines()]
        lines = turn_lines(sid, "On the fork.", parent=before[-2]["uuid"], cwd=h.project)
        write_lines(local_transcript(config, Path(h.project), sid), lines)
        with config_dir(config):
            run(sdk.import_session_to_store(sid, h.store, directory=h.project))
    finally:
        run(done.cleanup())


class ClaudeAgentSdkDriver(AdapterDriver):
    name = "claude-agent-sdk"

    def open(self, path: Path) -> Handle:
        work = path.parent / f"{path.name}.work"
        (work / "project").mkdir(parents=True, exist_ok=True)
        return Handle(QvcSessionStore(path), work)

    def close(self, handle: Handle) -> None:
        handle.store.close()

    def script(self) -> List[Operation]:
        return [
            Operation("s1: a turn of two tool steps", _turn("s1", "Look up items 0 and 1.", 2)),
            Operation("s1: a turn with a subagent", _turn("s1", "Ask a helper.", 0, sub="h1")),
            Operation("s1: rename", lambda h: run(sdk.rename_session_via_store(h.store, h.sid("s1"), "Lookups",
                                                                                directory=h.project))),
            Operation("s1: tag", lambda h: run(sdk.tag_session_via_store(h.store, h.sid("s1"), "keep",
                                                                          directory=h.project))),
            Operation("fork s1 -> s2", _fork),
            Operation("s2: resumed, a turn on the fork", _on_fork),
            Operation("s3: a turn", _turn("s3", "Something else.", 1)),
            Operation("s3: delete", lambda h: run(sdk.delete_session_via_store(h.store, h.sid("s3"),
                                                                                directory=h.project))),
            Operation("s1: another turn", _turn("s1", "One more.", 1, sub="h2")),
        ]

    def lines(self, handle: Handle) -> Dict[str, List[str]]:
        return {thread: [t.checkpoint.id for t in handle.store.store.list(CheckpointConfig(thread))]
                for thread in handle.store.store.threads() if key_of(thread) is not None}

    def snapshot(self, handle: Handle) -> Any:
        s = handle.store.store
        out = {}
        for thread in s.threads():
            key = key_of(thread)
            if key is None:
                continue
            out[thread] = (handle.store.entries(key), [(t.checkpoint.id, t.metadata, t.checkpoint.state_data)
                                                       for t in s.list(CheckpointConfig(thread))])
        projects = {k["project_key"] for k in map(key_of, s.threads()) if k}
        for p in projects:
            out[p] = (sorted(x["session_id"] for x in run(handle.store.list_sessions(p))),
                      sorted((x["session_id"], x["mtime"], x["data"]) for x in
                             run(handle.store.list_session_summaries(p))))
        return out

    def writer(self, path: Path) -> List[str]:
        return [sys.executable, "-c", WRITER, str(path)]

    def check_acknowledged(self, handle: Handle, tokens: List[str]) -> None:
        key = {"project_key": "killed", "session_id": "writer"}
        text = json.dumps(handle.store.entries(key) or [])
        for token in tokens:
            assert f"q {token}" in text, f"acknowledged turn {token} is not in the session"


# A child that mirrors turns of a session as the SDK's mirror does: appends of transcript lines, the
# uuids its idempotency keys; it prints an ack once an append returned.
WRITER = """
import asyncio, sys, uuid
from qvc.integrations.claude_agent_sdk import QvcSessionStore
from qvc.integrations.claude_agent_sdk.scripted import turn_lines
store = QvcSessionStore(sys.argv[1])
key = {"project_key": "killed", "session_id": "writer"}
tag, i, parent = uuid.uuid4().hex[:8], 0, None
async def main():
    global i, parent
    while True:
        t = f"{tag}-{i}"
        lines = turn_lines("writer", f"q {t}", steps=1, parent=parent)
        await store.append(key, lines[:2])
        await store.append(key, lines)  # the rest, with a retried part
        parent = lines[-1]["uuid"]
        print(f"ack {t}")
        i += 1
asyncio.run(main())
"""


class TestClaudeAgentSdkAdapter(AdapterKit):
    driver = ClaudeAgentSdkDriver()


# -- the sample ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_sample_runs(tmp_path, request):
    if not slow_enabled(request.config):
        pytest.skip("about 5 seconds of the real loop: run with -m slow (or QVC_SLOW=1)")
    proc = subprocess.run([sys.executable, str(Path(__file__).parents[2] / "samples" / "claude_agent_sdk_session.py"),
                           "--repo", str(tmp_path / "s.qvc")], env=child_env(), capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAIL" not in proc.stdout and "→ mcp__qvc__lookup" in proc.stdout and "+ tag: \"demo\"" in proc.stdout
    fsck(tmp_path / "s.qvc")
