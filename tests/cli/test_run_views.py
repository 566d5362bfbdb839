"""A run read through the command line as people read it (a user trial's findings): ``qvc show
RUN@N --field``, ``RUN@N:FIELD`` and ``RUN@{N}``; the header of a run shown between checkpoints;
the owner lease, takeovers and storage records (``run``, ``agno``) kept out of people's views and
kept in ``--raw``; ``qvc timeline``'s order; one date format; ``qvc runs`` in columns.

Each repository is one a sample writes (``samples/time_travel.py``, ``crash_recovery.py``,
``agno_agent.py``), read by the real CLI as a subprocess.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from helpers import ROOT, child_env, qvc, qvc_json


def sample(name: str, repo) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "samples" / name), "--repo", str(repo)], env=child_env(),
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def travel(tmp_path_factory):
    repo = tmp_path_factory.mktemp("views") / "time_travel.qvc"
    sample("time_travel.py", repo)
    return repo


@pytest.fixture(scope="module")
def crash(tmp_path_factory):
    repo = tmp_path_factory.mktemp("views") / "crash_recovery.qvc"
    sample("crash_recovery.py", repo)
    return repo


def show(repo, *args: str, check: int | None = 0) -> subprocess.CompletedProcess:
    return qvc("--repo", str(repo), "show", *args, check=check)


# -- 1. --field, RUN@N:FIELD and RUN@{N} -----------------------------------------------------------


def test_show_run_field_shows_only_that_field(travel):
    text = show(travel, "flaky@6", "--field", "status").stdout
    assert 'status: "RUNNING"' in text and "Messages (" not in text and "Metrics:" not in text
    latest = show(travel, "flaky", "--field", "status").stdout
    assert 'status: "COMPLETED"' in latest and "Messages (" not in latest
    messages = show(travel, "flaky@6", "--field", "messages").stdout
    assert "messages: 6 messages" in messages and "status:" not in messages
    data = qvc_json("--repo", str(travel), "show", "flaky@6", "--field", "status")
    assert data["name"] == "flaky@6" and data["state"] == {"status": "RUNNING"} and "run" not in data


def test_show_run_unknown_field_is_exit_3_one_line(travel):
    proc = show(travel, "flaky@6", "--field", "nope", check=3)
    assert proc.stdout == "" and proc.stderr.count("\n") == 1
    assert "no field 'nope'" in proc.stderr and "messages" in proc.stderr


def test_run_at_index_colon_field_is_the_stored_field(travel):
    assert show(travel, "flaky@6:status").stdout.strip() == '"RUNNING"'
    assert show(travel, "flaky@6:status").stdout == show(travel, "run/time-travel/flaky~2:status").stdout


def test_run_reflog_form_is_the_runs_thread_reflog(travel):
    by_run = show(travel, "flaky@{1}").stdout
    assert by_run.split("\n")[1].startswith("flaky@8 · checkpoint ")
    thread = qvc_json("--repo", str(travel), "show", "run/time-travel/flaky@{1}")
    assert f"checkpoint {thread['id']}" in by_run
    proc = show(travel, "flaky@{x}", check=3)
    assert proc.stderr.count("\n") == 1 and "{N}" in proc.stderr and "message index" in proc.stderr


# -- 6. the header of a run between checkpoints ----------------------------------------------------


def test_show_between_checkpoints_names_what_it_shows(travel):
    text = show(travel, "flaky@3").stdout.split("\n")
    assert text[1].startswith("flaky@2 · as of message 2 (asked for 3;"), text[1]
    assert "flaky@5" in text[1] and "before the run's first checkpoint" in text[1]
    assert text[2] == "Messages (2):"
    data = qvc_json("--repo", str(travel), "show", "flaky@3")
    assert (data["n"], data["name"]) == (2, "flaky@2") and len(data["run"]["messages"]) == 2
    exact = qvc_json("--repo", str(travel), "show", "flaky@6")
    assert (exact["n"], exact["name"]) == (6, "flaky@6")


# -- 3. the owner lease and takeovers --------------------------------------------------------------


def test_show_run_json_leaves_the_owner_lease_and_takeovers_to_raw(travel):
    data = qvc_json("--repo", str(travel), "show", "flaky@3")
    assert "owner" not in data["run"] and "takeovers" not in data["run"] and "token" not in json.dumps(data)
    raw = qvc_json("--repo", str(travel), "show", "flaky@3", "--raw")
    assert "owner" in raw["state"] and raw["state"]["owner"]["token"]


def test_a_takeover_shows_no_lease_token_but_raw(crash):
    rows = qvc_json("--repo", str(crash), "log", "--all")
    takeover = next(r for r in rows if r["name"] and "takeover" in show(crash, r["commit"]).stdout)
    text = show(crash, takeover["commit"]).stdout
    assert 'reason: "takeover"' in text and "token" not in text and "takeover:" not in text
    data = qvc_json("--repo", str(crash), "show", takeover["commit"])
    assert "token" not in json.dumps(data) and "takeovers" not in data["state"]
    raw = show(crash, takeover["commit"], "--raw", "--full").stdout
    assert "takeover:" in raw and "token" in raw and "takeovers" in raw


# -- 4. a run's storage records -----------------------------------------------------------------


def test_storage_records_stay_out_of_show_and_diff_but_by_name_and_raw(tmp_path):
    pytest.importorskip("agno")
    repo = tmp_path / "agno_agent.qvc"
    sample("agno_agent.py", repo)
    text = show(repo, "run/agno-demo/crashed").stdout
    state = text.split("State (", 1)[1]
    assert "messages:" in state and not re.search(r"^  (run|agno)\b", state, re.M)
    diff = qvc("--repo", str(repo), "diff", "crashed@3", "crashed@8").stdout
    assert "field messages" in diff and "field agno" not in diff and "field run" not in diff
    assert "field run" in qvc("--repo", str(repo), "diff", "crashed@3", "crashed@8", "--", "run").stdout
    assert "field agno" in qvc("--repo", str(repo), "diff", "crashed@3", "crashed@8", "--raw").stdout
    assert re.search(r"^  agno\b", show(repo, "run/agno-demo/crashed", "--field", "agno").stdout, re.M)
    data = qvc_json("--repo", str(repo), "show", "run/agno-demo/crashed")
    assert {"run", "agno"} <= set(data["state"]) and data["records"] == ["agno", "run"]


# -- 5. the timeline's order -------------------------------------------------------------------


def test_timeline_puts_superseded_checkpoints_where_they_branched(travel):
    lines = qvc("--repo", str(travel), "timeline", "flaky").stdout.strip().split("\n")[:-1]
    marks = [line[0] for line in lines]
    assert marks[-1] == "*" and "~" not in marks[marks.index("*"):]
    names = [line.split()[2] if line[0] in "*~" else line.split()[1] for line in lines]
    assert names[0] == "flaky@5" and marks[1:3] == ["~", "~"] and names[3] == "flaky@6"
    entries = qvc_json("--repo", str(travel), "timeline", "flaky")
    assert [e["is_latest"] for e in entries][-1] and [e["current"] for e in entries][1:3] == [False, False]


# -- 7. one date format; runs in columns -------------------------------------------------------------


def test_show_and_log_print_dates_alike(travel):
    date = re.compile(r"^Date: +\S.* \((\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4})\)$", re.M)
    shown = date.search(show(travel, "run/time-travel/flaky").stdout)
    logged = date.search(qvc("--repo", str(travel), "log", "-1", "run/time-travel/flaky").stdout)
    assert shown and logged and shown.group(1) == logged.group(1)


def test_runs_columns_line_up(travel):
    lines = qvc("--repo", str(travel), "runs").stdout.strip().split("\n")
    ids = {line.split()[0] for line in lines}
    assert len({len(i) for i in ids}) > 1  # ids of different lengths (a forked run's is 32 digits)
    assert len({line.index(" COMPLETED") for line in lines}) == 1
