"""No sample deletes what it did not create (issue 25): every runnable sample, as a real process,
refuses a directory holding a user's file and a file path with one line and exit status 2, and
leaves them as they were. The runs on fresh paths are in tests/features/test_runs.py
(crash_recovery, tool_error, time_travel), tests/integrations/test_agno.py (agno_agent),
tests/integrations/test_google_adk.py (google_adk_session), tests/integrations/test_openai_agents.py
(openai_agents_session), tests/integrations/test_claude_agent_sdk.py (claude_agent_sdk_session),
tests/integrations/test_agent_framework.py (agent_framework_workflow), tests/integrations/test_strands.py
(strands_session) and tests/integrations/test_crewai.py (crewai_flow); quickstart's and langgraph_agent's are here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

from helpers import child_env, fsck, qvc_json  # noqa: E402

SAMPLES = ROOT / "samples"
#: every sample a user runs (the others are modules the samples share)
RUNNABLE = sorted(p.name for p in SAMPLES.glob("*.py") if 'if __name__ == "__main__"' in p.read_text())


def sample(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SAMPLES / name), *args], env=child_env(), capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)


def test_every_sample_is_covered():
    assert set(RUNNABLE) == {"agent_framework_workflow.py", "agno_agent.py", "claude_agent_sdk_session.py",
                             "crash_recovery.py", "crewai_flow.py", "google_adk_session.py", "langgraph_agent.py",
                             "openai_agents_session.py", "pydantic_ai_conversation.py", "quickstart.py",
                             "strands_session.py", "time_travel.py", "tool_error.py"}


#: the framework each sample runs (its tests skip where it is not installed: pydantic-ai and ADK
#: need Python 3.11)
FRAMEWORK = {"agno_agent.py": "agno", "google_adk_session.py": "google.adk", "langgraph_agent.py": "langgraph.prebuilt",
             "openai_agents_session.py": "agents", "pydantic_ai_conversation.py": "pydantic_ai",
             "claude_agent_sdk_session.py": "claude_agent_sdk", "agent_framework_workflow.py": "agent_framework",
             "strands_session.py": "strands", "crewai_flow.py": "crewai"}


def needs_framework(name: str) -> None:
    if name in FRAMEWORK:
        pytest.importorskip(FRAMEWORK[name])


@pytest.mark.parametrize("name", RUNNABLE)
def test_a_sample_refuses_a_directory_holding_a_users_file(name, tmp_path):
    needs_framework(name)
    mydir = tmp_path / "mydir"
    mydir.mkdir()
    (mydir / "notes.txt").write_text("mine\n")
    proc = sample(name, "--repo", str(mydir))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert str(mydir) in proc.stderr and "refusing" in proc.stderr
    assert (mydir / "notes.txt").read_text() == "mine\n"
    assert [p.name for p in mydir.iterdir()] == ["notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mydir"]  # nothing beside it either


@pytest.mark.parametrize("name", RUNNABLE)
def test_a_sample_refuses_a_file_path(name, tmp_path):
    needs_framework(name)
    mine = tmp_path / "notes.txt"
    mine.write_text("mine\n")
    for target in (mine, mine / "repo.qvc"):
        proc = sample(name, "--repo", str(target))
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert mine.read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_quickstart_on_a_fresh_path_then_again_on_its_own(tmp_path):
    repo = tmp_path / "q.qvc"
    for _ in range(2):  # the second run replaces what the first created
        proc = sample("quickstart.py", "--repo", str(repo))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert (repo / "qvc-sample").is_file() and (tmp_path / "q.qvc-remote.git" / "qvc-sample").is_file()
    fsck(repo)
    assert {t["thread"] for t in qvc_json("--repo", str(repo), "branch")} >= {"france", "france/metropolitan"}


def test_langgraph_agent_on_a_fresh_path_then_again_on_its_own(tmp_path):
    needs_framework("langgraph_agent.py")
    repo = tmp_path / "lg.qvc"
    for _ in range(2):  # the second run replaces what the first created
        proc = sample("langgraph_agent.py", "--repo", str(repo))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "FAIL" not in proc.stdout and (repo / "qvc-sample").is_file()
    fsck(repo)
    assert [t["thread"] for t in qvc_json("--repo", str(repo), "branch")] == ["cities"]
    messages = qvc_json("--repo", str(repo), "show", "cities")["state"]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "assistant"]
    assert [c["args"] for c in messages[1]["tool_calls"]] == [{"city": "Paris"}, {"city": "Tokyo"}]
    assert messages[-1]["content"] == "Tokyo is larger: 14.0 million to 2.1 million."
    assert "→ population" in proc.stdout and "(superseded)" in proc.stdout  # the CLI showed the calls and the fork
