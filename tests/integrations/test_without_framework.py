"""A repository an integration wrote reads as data where that framework is not installed (issue 32:
a LangGraph repository showed raw msgpack bytes in ``show`` and ``diff``, with no hint).

Each repository is written by the real framework (in a process where it is installed); it is then
read by the real ``qvc`` command line in a process where importing the framework fails: a
``sitecustomize`` on ``PYTHONPATH`` puts a meta path finder first that raises ``ImportError`` for
it, as on a machine without it. The reads show messages and tool calls from their serialized form,
the same as with the framework, and one line names the extra that shows them fully.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import LANGGRAPH, QVC, ROOT, child_env, env, langgraph_weather, without


def read(repo: Path, *args: str, environment: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([*QVC, "--repo", str(repo), "--no-pager", *args], env=environment or env(COLUMNS="200"),
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return proc


@pytest.fixture(scope="module")
def langgraph_repo(tmp_path_factory) -> Path:
    """A real LangGraph graph (a scripted chat model, LangGraph's ToolNode) checkpointed by QvcSaver."""
    pytest.importorskip("langgraph.prebuilt", reason="LangGraph is in the test extra")
    return langgraph_weather(tmp_path_factory.mktemp("lg") / "lg.qvc")


def test_the_blocker_blocks(tmp_path):
    proc = subprocess.run([sys.executable, "-c", "import langgraph"], env=without(tmp_path, *LANGGRAPH),
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "not installed here" in proc.stderr


@pytest.mark.parametrize("view", [["show", "weather"], ["diff", "weather~2", "weather"],
                                  ["log", "-p", "-n", "3", "weather"], ["blame", "messages", "weather"]],
                         ids=lambda v: v[0])
def test_a_langgraph_repository_reads_without_langgraph(langgraph_repo, tmp_path, view):
    bare = read(langgraph_repo, *view, environment=without(tmp_path, *LANGGRAPH))
    assert "msgpack" not in bare.stdout and "\\x" not in bare.stdout, bare.stdout
    assert 'tool [weather]: "Oslo: 3°C, light snow"' in bare.stdout
    assert 'assistant: "Snow is likely in Oslo: 3°C."' in bare.stdout
    if view[0] != "diff":
        assert 'assistant: → weather({"city": "Oslo"})' in bare.stdout
    hints = [line for line in bare.stderr.splitlines() if line.startswith("hint: ")]
    assert len(hints) == 1 and "pip install 'qvc[langgraph]'" in hints[0], bare.stderr
    full = read(langgraph_repo, *view)
    assert "hint:" not in full.stderr
    def dated(text: str) -> list[str]:
        return [line for line in text.split("\n") if not line.startswith("Date:")]  # "just now", "1 second ago"

    assert dated(full.stdout) == dated(bare.stdout)  # shown as with LangGraph


def test_the_json_form_is_the_same_without_langgraph(langgraph_repo, tmp_path):
    bare = read(langgraph_repo, "show", "--json", "weather", environment=without(tmp_path, *LANGGRAPH))
    bare = json.loads(bare.stdout)
    full = json.loads(read(langgraph_repo, "show", "--json", "weather").stdout)
    assert bare["state"] == full["state"]
    assert [m["role"] for m in bare["state"]["messages"]] == ["user", "assistant", "tool", "assistant"]


def test_an_adk_session_reads_without_adk(tmp_path):
    pytest.importorskip("google.adk", reason="ADK needs Python 3.11 and the google-adk extra")
    repo = tmp_path / "adk.qvc"
    subprocess.run([sys.executable, str(ROOT / "samples" / "google_adk_session.py"), "--repo", str(repo)],
                   env=child_env(), check=True, capture_output=True, timeout=300)
    thread = "adk/session/calc/ada/s1"
    bare = json.loads(read(repo, "show", "--json", thread, environment=without(tmp_path, "google")).stdout)
    full = json.loads(read(repo, "show", "--json", thread).stdout)
    assert bare["state"] == full["state"] and bare["state"]["messages"][0]["role"] == "user"
