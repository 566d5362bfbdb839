"""``qvc blame`` and ``qvc bisect run`` through the real console script, running real commands."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import pytest
from helpers import put, qvc

from qvc import GitCheckpointStore

N = 33  # checkpoints c0..c32 on thread t; ``n`` is the step; ``bad`` from step 21 on


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("bisect") / ".qvc"
    with GitCheckpointStore(path) as store:
        for i in range(N):
            put(store, "t", f"c{i}", i, {"n": i, "bad": i >= 21, "log": [f"line {k}" for k in range(i + 1)],
                                         "cfg": {"model": "a" if i < 10 else "b", "seed": 7}})
        store.checkout("t")
    return path


def run(repo: Path, *args: str, check: int = 0, cwd=None):
    return qvc("--repo", str(repo), *args, check=check, cwd=cwd)


CHECK = """\
import json, os, sys
state = os.environ["QVC_STATE_DIR"]
with open(os.path.join(state, "bad.json")) as f:
    bad = json.load(f)
with open(sys.argv[1], "a") as f:
    f.write(json.dumps({"id": os.environ["QVC_CHECKPOINT"], "repo": os.environ["QVC_REPO"],
                        "commit": os.environ["QVC_COMMIT"], "files": sorted(os.listdir(state))}) + "\\n")
print("tested", os.environ["QVC_CHECKPOINT"])
skip = [int(s) for s in sys.argv[2:]]
with open(os.path.join(state, "n.json")) as f:
    n = json.load(f)
sys.exit(125 if n in skip else (3 if bad else 0))
"""


@pytest.fixture
def check(tmp_path) -> tuple[Path, Path]:
    script = tmp_path / "check.py"
    script.write_text(CHECK)
    return script, tmp_path / "calls.jsonl"


def calls(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


# -- blame -----------------------------------------------------------------------------------------


def test_blame_text_and_json(repo):
    text = run(repo, "blame", "log", "t~30").stdout.splitlines()
    assert len(text) == 3
    for i, line in enumerate(text):
        date = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4}"  # as `qvc log` and `qvc show` print dates
        assert re.match(rf"[0-9a-f]{{7}} c{i} +step {i} +{date}  log\[{i}\]: \"line {i}\"$", line), line
    data = json.loads(run(repo, "blame", "log", "--json").stdout)
    assert [(d["path"], d["id"], d["step"], d["value"]) for d in data] == [
        ([i], f"c{i}", i, f"line {i}") for i in range(N)]
    assert all(set(d) == {"path", "id", "commit", "step", "time", "value"} for d in data)
    cfg = json.loads(run(repo, "blame", "cfg", "t", "--json").stdout)
    assert [(d["path"], d["id"], d["value"]) for d in cfg] == [(["model"], "c10", "b"), (["seed"], "c0", 7)]
    [scalar] = json.loads(run(repo, "blame", "bad", "--json").stdout)
    assert (scalar["path"], scalar["id"], scalar["value"]) == ([], "c21", True)
    missing = run(repo, "blame", "nope", check=3)
    assert missing.stderr.count("\n") == 1 and "no field 'nope'" in missing.stderr
    assert "unknown revision" in run(repo, "blame", "log", "nowhere", check=3).stderr


# -- bisect ----------------------------------------------------------------------------------------


def test_bisect_run_finds_the_first_bad_checkpoint(repo, check):
    script, log = check
    proc = run(repo, "bisect", "run", "--good", "t~32", "--bad", "t", "--", sys.executable, str(script), str(log))
    made = calls(log)
    assert 1 <= len(made) <= math.ceil(math.log2(N - 1))
    assert proc.stdout.splitlines()[-1].startswith("first bad checkpoint: c21 (commit ") and "step 21" in proc.stdout
    assert proc.stdout.count("tested c") == len(made)  # the command's own output passes through
    first = made[0]
    assert first["repo"] == str(repo.resolve()) and "n.json" in first["files"] and "log.json" in first["files"]
    assert run(repo, "show", first["id"], "--json").stdout.count(first["commit"]) >= 1


def test_bisect_run_json_and_run_at_n_names(repo, check):
    script, log = check
    proc = run(repo, "bisect", "run", "--good", "c3", "--bad", "t~2", "--json", "--", sys.executable, str(script),
               str(log))
    data = json.loads(proc.stdout)  # only the result: the command's output went to stderr
    assert data["first_bad"]["id"] == "c21" and data["first_bad"]["step"] == 21
    assert len(data["first_bad"]["commit"]) == 40
    assert data["tested"] == len(calls(log)) == len(data["steps"]) <= math.ceil(math.log2(27))
    assert {s["verdict"] for s in data["steps"]} <= {"good", "bad"}
    assert all(s["exit"] in (0, 3) for s in data["steps"]) and "tested c" in proc.stderr


def test_bisect_run_skips_and_undecided(repo, check):
    script, log = check
    data = json.loads(run(repo, "bisect", "run", "--good", "c0", "--bad", "c32", "--json", "--", sys.executable,
                          str(script), str(log), "16", "24").stdout)
    assert data["first_bad"]["id"] == "c21" and "skip" in {s["verdict"] for s in data["steps"]}
    proc = run(repo, "bisect", "run", "--good", "c0", "--bad", "c32", "--", sys.executable, str(script), str(log),
               "20", "21", check=1)
    assert "undecided" in proc.stdout and "c20 (step 20), c21 (step 21), c22 (step 22)" in proc.stdout


def test_bisect_run_aborts_and_refuses(repo, tmp_path):
    proc = run(repo, "bisect", "run", "--good", "c0", "--bad", "c32", "--", sys.executable, "-c",
               "import sys; sys.exit(130)", check=1)
    assert proc.stderr.startswith("qvc: bisect aborted: the test exited 130") and proc.stderr.count("\n") == 1
    assert run(repo, "bisect", "run", "--good", "c0", "--bad", "c32", check=2).stderr.startswith("qvc: name the")
    assert "not on the bad one's line" in run(repo, "bisect", "run", "--good", "c9", "--bad", "c2", "--", "true",
                                              check=2).stderr
    missing = run(repo, "bisect", "run", "--good", "c0", "--bad", "c32", "--", str(tmp_path / "no-such-command"),
                  check=1)
    assert missing.stderr.startswith("qvc: cannot run") and missing.stderr.count("\n") == 1
    assert "--good" in run(repo, "bisect", "run", "--bad", "c2", "--", "true", check=2).stderr
