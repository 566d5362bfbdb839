"""Run threads through the everyday verbs (issue 32): ``qvc branch NEW RUN@N`` made a thread that
was not a run (``qvc timeline NEW``: "unknown run"); a branch from a run is now a run, forked at
that boundary. Through the real ``qvc`` command line on a run qvc's runs recorded."""

from __future__ import annotations

import sys

import pytest
from helpers import ROOT, qvc, qvc_json

from qvc import GitCheckpointStore
from qvc.runs import Runs

sys.path.insert(0, str(ROOT))
from samples.scripted_agent import QUESTION, RESEARCH_PLAN, SYSTEM, ScriptedModel, drive, make_tools  # noqa: E402


@pytest.fixture
def run_repo(tmp_path):
    """Run ``r`` of session ``s``: three tool batches, then the answer (COMPLETED)."""
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        with Runs(store).start(QUESTION, system=SYSTEM, session_id="s", run_id="r") as rec:
            drive(rec, ScriptedModel(RESEARCH_PLAN), make_tools())
    return path


def test_a_branch_from_a_run_is_a_run(run_repo):
    repo = ["--repo", str(run_repo), "--no-pager"]
    made = qvc(*repo, "branch", "again", "r@7").stdout
    assert "Forked run 'again' from r@7" in made and "run/s/again" in made, made
    timeline = qvc(*repo, "timeline", "again").stdout
    assert "again@7" in timeline and "PENDING" in timeline, timeline
    run = qvc_json(*repo, "show", "again")
    assert run["run_id"] == "again" and run["forked_from_run_id"] == "r" and run["forked_from_message_index"] == 7
    source = qvc_json(*repo, "show", "r@7")
    assert [m["id"] for m in run["messages"]] == [m["id"] for m in source["run"]["messages"]]  # its 7 messages
    assert "run/s/again" in qvc(*repo, "branch").stdout.split()
    # the fork's first checkpoint is a child of the source boundary: the line crosses into the run
    assert [e["thread"] for e in qvc_json(*repo, "log", "run/s/again")][:2] == ["run/s/again", "run/s/r"]
    taken = qvc(*repo, "branch", "again", "r@5", check=2)
    assert "already exists" in taken.stderr and taken.stderr.count("\n") == 1


def test_a_branch_from_a_run_named_as_a_run_is_a_run_else_a_thread(run_repo):
    from helpers import put

    repo = ["--repo", str(run_repo), "--no-pager"]
    qvc(*repo, "branch", "side", "r")  # the run's head, named as the run
    assert "side@10" in qvc(*repo, "timeline", "side").stdout
    qvc(*repo, "branch", "copy", "run/s/r")  # named by its thread: a thread (that reads as the run it copies)
    assert "copy" in qvc(*repo, "branch").stdout.split() and qvc_json(*repo, "show", "copy")["state"]["messages"]
    with GitCheckpointStore(run_repo) as store:
        put(store, "t", "c0")
    assert "Forked thread 'u'" in qvc(*repo, "branch", "u", "t").stdout
    assert "u" in qvc(*repo, "branch").stdout.split()


def test_a_run_checks_out_as_its_conversation_and_commits_back_as_a_run(run_repo, tmp_path):
    """Issue 32: ``qvc checkout RUN --to DIR`` wrote the run's storage (``log%2E00000000.json``,
    ``owner.json``, ``takeovers.json``), not the conversation."""
    import json

    repo = ["--repo", str(run_repo), "--no-pager"]
    work = tmp_path / "w"
    qvc(*repo, "checkout", "r@7", "--to", str(work))
    files = sorted(p.name for p in work.iterdir() if not p.name.startswith("."))
    assert "messages.json" in files and "status.json" in files and "run.json" in files, files
    assert not [f for f in files if f.startswith(("log%2E", "sealed%2E", "owner", "takeovers"))], files
    messages = json.loads((work / "messages.json").read_text())
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool", "assistant", "tool"]
    call = messages[2]["tool_calls"][0]
    assert call["name"] == "search" and call["args"] == {"city": "Paris"}
    # an edit of the conversation commits back as the run with that conversation
    messages.append({"role": "user", "content": "And Berlin?"})
    (work / "messages.json").write_text(json.dumps(messages))
    qvc(*repo, "checkout", "run/s/r")
    qvc(*repo, "commit", str(work), "-m", "ask about Berlin")
    shown = qvc_json(*repo, "show", "run/s/r")
    assert [m["content"] for m in shown["state"]["messages"]][-2:] == [messages[-2]["content"], "And Berlin?"]
    assert [m["id"] for m in shown["state"]["messages"][:7]] == [m["id"] for m in messages[:7]]  # kept as stored
    assert "r@8" in qvc(*repo, "timeline", "r").stdout  # the run's timeline has it
    raw = qvc_json(*repo, "show", "--raw", "run/s/r")["state"]
    assert raw["log.00000002"]["messages"] == [{**raw["log.00000002"]["messages"][0], "role": "user",
                                                 "content": "And Berlin?"}]
