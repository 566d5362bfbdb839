"""What the command line prints agrees with itself and reads as people read it (issue 32):

- the same commit was "1 changed" in ``log --oneline`` and "2 fields changed" in ``log --graph``
  and git's commit message, and ``--graph`` had a line format of its own;
- raw floats and epochs (``metrics.duration: 0.055190141000025505``, ``time: 1796527610.77``);
- ``show RUN@N`` printed a call with ``null`` arguments while ``diff`` printed them.

Through the real ``qvc`` command line; the repositories are written by LangGraph and qvc's runs.
"""

from __future__ import annotations

import re
import sys

import pytest
from helpers import ROOT, langgraph_weather, qvc, qvc_json, run_git

from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore


@pytest.fixture(scope="module")
def langgraph_repo(tmp_path_factory):
    """A real LangGraph graph (a scripted chat model, LangGraph's ToolNode): its checkpoints store
    LangGraph's own channels beside ``messages``, which the viewer leaves out."""
    pytest.importorskip("langgraph.prebuilt", reason="LangGraph is in the test extra")
    return langgraph_weather(tmp_path_factory.mktemp("lg") / "lg.qvc")


def test_graph_lines_are_the_oneline_lines_and_counts_name_gits(langgraph_repo):
    repo = ["--repo", str(langgraph_repo), "--no-pager"]
    oneline = qvc(*repo, "log", "--oneline", "weather").stdout.splitlines()
    graph = qvc(*repo, "log", "--graph", "weather").stdout.splitlines()
    assert [line[2:] for line in graph] == oneline  # "* " then the same line
    subjects = run_git(langgraph_repo, "log", "--format=%s", "weather").stdout.splitlines()
    assert len(subjects) == len(oneline)
    for line, subject in zip(oneline, subjects, strict=True):
        shown = int(re.search(r"· (\d+) changed", line).group(1))
        in_git = int(re.search(r"(\d+) fields? changed", subject).group(1))
        if shown != in_git:  # the viewer hides LangGraph's own channels: git's count is named beside
            assert f"{shown} changed ({in_git} in git)" in line, (line, subject)
    assert any("in git)" in line for line in oneline)
    raw = qvc(*repo, "log", "--oneline", "--raw", "weather").stdout
    assert "in git" not in raw  # the stored fields are git's


def test_durations_are_rounded_and_times_are_dates_raw_in_json(tmp_path):
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        for step, duration in enumerate((0.055190141000025505, 0.1054078050000271)):
            state = {"metrics": {"duration": duration, "time_to_first_token": 0.00046156299993072025},
                     "time": 1796527610.77 + step}
            store.put(CheckpointConfig("t"), Checkpoint(id=f"c{step}", thread_id="t", step=step, state_data=state),
                      {"source": "loop", "time": 1796527610.77})
    repo = ["--repo", str(path), "--no-pager"]
    shown = qvc(*repo, "show", "t").stdout
    assert '"duration": 0.105s' in shown and '"time_to_first_token": 0.000s' in shown, shown
    assert re.search(r"^  time \(v2\): 2026-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4}$", shown, re.M), shown
    assert re.search(r"^  time: 2026-\d\d-\d\d ", shown, re.M), shown  # the metadata's too
    assert "0.1054078" not in shown and "1796527" not in shown
    diff = qvc(*repo, "diff", "t~1", "t").stdout
    assert "~ metrics.duration: 0.055s → 0.105s" in diff, diff
    assert re.search(r"~ time: 2026-\S+ \S+ \S+ → 2026-", diff), diff
    data = qvc_json(*repo, "show", "t")  # the JSON keeps the numbers
    assert data["state"]["metrics"]["duration"] == 0.1054078050000271 and data["state"]["time"] == 1796527611.77


def test_show_run_at_n_prints_calls_as_diff_does(tmp_path):
    sys.path.insert(0, str(ROOT))
    from qvc.runs import Runs
    from samples.scripted_agent import QUESTION, RESEARCH_PLAN, SYSTEM, ScriptedModel, drive, make_tools

    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        with Runs(store).start(QUESTION, system=SYSTEM, session_id="s", run_id="r") as rec:
            drive(rec, ScriptedModel(RESEARCH_PLAN), make_tools())
    repo = ["--repo", str(path), "--no-pager"]
    shown = qvc(*repo, "show", "r").stdout  # the run as of its latest checkpoint
    calls = [re.sub(r"^\s*\d+ ", "", line) for line in shown.splitlines() if "→" in line]  # without the index
    assert calls and all("null" not in c for c in calls), shown
    diff = qvc(*repo, "log", "-p", "run/s/r").stdout  # every checkpoint's diff
    for call in calls:  # the same words in both
        assert call in diff, (call, diff)
