"""`qvc serve` reads a run as the command line does (a user trial's findings): a thread's line names
the fields each checkpoint changed as shown and numbers a run's checkpoints ``RUN@n``, as ``qvc log
--json`` does; a snapshot leaves out the owner lease and takeovers; a checkpoint names its storage
records; the timeline comes in ``qvc timeline``'s order. A real `qvc serve` process on
127.0.0.1, on the repository ``samples/time_travel.py`` writes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import ROOT, child_env, qvc_json

if os.environ.get("CI") != "true":  # CI installs the test extra: there, a missing server stack fails
    pytest.importorskip("fastapi", reason='qvc serve needs the server extra: pip install -e ".[test]"')
from test_server import Server, request  # noqa: E402


@pytest.fixture(scope="module")
def travel(tmp_path_factory):
    repo = tmp_path_factory.mktemp("serve-views") / "time_travel.qvc"
    proc = subprocess.run([sys.executable, str(ROOT / "samples" / "time_travel.py"), "--repo", str(repo)],
                          env=child_env(), capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    server = Server(repo, "--read-only")
    yield repo, server
    assert server.stop() == 0


def get(server, path: str):
    status, _, body = request(server.url.rstrip("/") + path)
    assert status == 200, body
    return json.loads(body)


def test_thread_line_agrees_with_log_json(travel):
    repo, server = travel
    line = get(server, "/api/threads/run/time-travel/flaky")
    logged = qvc_json("--repo", str(repo), "log", "run/time-travel/flaky")
    keys = ("commit", "n", "name", "changed")
    assert [{k: e[k] for k in keys} for e in line["line"]] == [{k: e[k] for k in keys} for e in logged]
    assert line["line"][0]["name"] == "flaky@9" and line["line"][0]["changed"]
    every = [e for e in line["line"]] + [e for s in line["superseded"] for e in s["line"]]
    assert every and all(e["name"] and e["n"] is not None for e in every)
    stored = {"owner", "takeovers"}
    assert not [f for e in every for f in e["changed"] if f in stored or f.startswith(("log.", "sealed."))]
    everything = {e["commit"]: e for e in qvc_json("--repo", str(repo), "log", "--all")}
    for e in (e for s in line["superseded"] for e in s["line"]):
        assert (e["name"], e["changed"]) == (everything[e["commit"]]["name"], everything[e["commit"]]["changed"])


def test_snapshot_and_run_leave_out_the_owner_lease(travel):
    _, server = travel
    snap = get(server, "/api/runs/flaky/checkpoints/3")
    assert snap["run"]["messages"] and "owner" not in snap["run"] and "takeovers" not in snap["run"]
    assert "token" not in json.dumps(snap)
    assert "owner" not in get(server, "/api/runs/flaky")["run"]


def test_checkpoint_names_its_storage_records(travel):
    _, server = travel
    cp = get(server, "/api/checkpoints/run/time-travel/flaky")
    assert cp["records"] == ["run"] and "run" in cp["state"]


def test_timeline_in_the_order_of_qvc_timeline(travel):
    repo, server = travel
    served = [e["id"] for e in get(server, "/api/runs/flaky/checkpoints")["checkpoints"]]
    assert served == [e["id"] for e in qvc_json("--repo", str(repo), "timeline", "flaky")]
    entries = get(server, "/api/runs/flaky/checkpoints")["checkpoints"]
    last_superseded = max(i for i, e in enumerate(entries) if not e["current"])
    assert entries[-1]["is_latest"] and last_superseded < len(entries) - 2  # none after the latest
