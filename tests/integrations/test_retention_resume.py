"""After a retention policy, every kept thread resumes as before: a LangGraph graph from its head
(pending writes and an interrupt included), a run from the first kept checkpoint (its whole
conversation, the cut marked), a signed repository verifies."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import fsck, qvc, qvc_json

from qvc import GitCheckpointStore
from qvc.runs import Runs
from qvc.store.retention import Policy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workers"))


def test_a_langgraph_thread_resumes_its_interrupt_after_a_cut(tmp_path):
    pytest.importorskip("langgraph.graph")
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command
    from langgraph_worker import build, human, summarize

    from qvc.integrations.langgraph import QvcSaver

    config = {"configurable": {"thread_id": "t"}}
    repo = tmp_path / "lg.qvc"
    oracle = build("interrupt", InMemorySaver())
    with QvcSaver(repo) as saver:
        graph = build("interrupt", saver)
        for i in range(4):
            for g in (graph, oracle):
                g.invoke(human(i), config)
                g.invoke(Command(resume=f"yes {i}"), config)
        for g in (graph, oracle):
            g.invoke(human(9), config)  # stops at the interrupt: its pending writes are at the head
        before = len(list(graph.get_state_history(config)))
        report = saver.store.retain(Policy(keep_last=3))
        assert report.removed == before - 3
    with QvcSaver(repo, create=False) as saver:  # a new saver resumes from what is left
        graph = build("interrupt", saver)
        state = graph.get_state(config)
        assert state.next == ("ask",) and state.interrupts[0].value == oracle.get_state(config).interrupts[0].value
        for g in (graph, oracle):
            g.invoke(Command(resume="yes 9"), config)
        assert summarize(graph, config)[:3] == summarize(oracle, config)[:3]
        assert len(list(graph.get_state_history(config))) == 5  # the 3 kept and the 2 the resume added
    fsck(repo)


def test_a_run_reads_as_a_conversation_from_the_first_kept_checkpoint(tmp_path):
    repo = tmp_path / "runs.qvc"
    with GitCheckpointStore(repo) as store:
        runs = Runs(store)
        with runs.start("what is 6*7?", run_id="r1", system="be terse") as rec:
            for i in range(6):
                call = {"id": f"c{i}", "name": "calc", "arguments": {"x": i}}
                rec.add_message({"role": "assistant", "content": "", "tool_calls": [call]})
                rec.tool_result(f"c{i}", i * 7)
                rec.after_tool_batch()
            rec.complete("42")
        before = runs.get("r1")
        timeline = runs.timeline("r1")
        store.retain(Policy(keep_last=3))
        after = runs.get("r1")
        assert [m.content for m in after.messages] == [m.content for m in before.messages]
        kept = runs.timeline("r1")
        assert [e.id for e in kept] == [e.id for e in timeline][-3:]
        assert kept[0].cut.startswith("4 earlier checkpoint(s) removed") and not kept[1].cut
        assert runs.snapshot("r1", kept[0].id).exact
    shown = qvc("timeline", "r1", cwd=repo).stdout
    assert "(retention: 4 earlier checkpoint(s) removed" in shown
    assert qvc_json("timeline", "r1", cwd=repo)[0]["cut"].startswith("4 earlier")
    continued = qvc("show", "r1", cwd=repo).stdout
    assert "42" in continued


@pytest.mark.skipif(subprocess.run(["which", "ssh-keygen"], capture_output=True).returncode != 0,
                    reason="ssh-keygen is not installed")
def test_a_cut_in_a_signed_repository_is_signed_recorded_and_verifies(tmp_path):
    key = tmp_path / "k"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    repo = tmp_path / "s.qvc"
    from helpers import put

    with GitCheckpointStore(repo, signing_key=key) as store:
        for i in range(8):
            put(store, "a", f"a{i}", i, {"i": i})
    qvc("signers", "add", "me", f"{key}.pub", cwd=repo)
    qvc("config", "qvc.signingKey", str(key), cwd=repo)
    out = qvc("gc", "--keep-last", "2", cwd=repo).stdout
    assert "Removed 6 checkpoint(s)" in out
    assert qvc("verify", "--all", cwd=repo).returncode == 0
    with GitCheckpointStore(repo) as store:
        whys = [r["why"] for _, r in store.rewrites()]
        assert any(w.startswith("retention (keep-last 2)") for w in whys) and whys[0].startswith("purge")
    fsck(repo)
