"""History as git users read it, through the real ``qvc`` console script: ``qvc log``'s selection
(ranges, ``-- FIELD``, dates, ``--grep``), ``-p``/``--stat``/``--format``, and names for checkpoints
(``RUN@N`` in every command, ambiguous prefixes). ``qvc blame`` and ``qvc bisect run`` are in
test_blame_bisect_cli.py."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from helpers import put, qvc

from qvc import GitCheckpointStore
from qvc.runs import Message, Runs, ToolCall


@pytest.fixture(scope="module")
def hist(tmp_path_factory) -> dict:
    """Thread t: c0..c5 (messages grows by one each step, ``n`` changes on even steps, ``mode``
    only at c3); c0..c2 a second before c3..c5. Thread side forks from c2."""
    path = tmp_path_factory.mktemp("hist") / ".qvc"
    with GitCheckpointStore(path) as store:
        for i in range(6):
            if i == 3:
                time.sleep(1.1)
                split = time.time()
            state = {"messages": [f"m{k}" for k in range(i + 1)], "n": i // 2 * 2}
            if i >= 3:
                state["mode"] = "fast"
            put(store, "t", f"c{i}", i, state)
        store.checkout("t")
        from qvc.store.fork import fork_thread

        fork_thread(store, store.resolve("c2"), "side")
        put(store, "side", "s0", 3, {"messages": ["side"], "n": 0})
    return {"path": path, "split": split}


def log(hist, *args: str, check: int = 0):
    return qvc("--repo", str(hist["path"]), "log", *args, check=check)


def ids(hist, *args: str) -> list[str]:
    return [e["id"] for e in json.loads(log(hist, "--json", *args).stdout)]


def test_log_range_a_dot_dot_b_is_b_without_what_a_reaches(hist):
    assert ids(hist, "t~3..t") == ["c5", "c4", "c3"]
    assert ids(hist, "c1..c3") == ["c3", "c2"]
    assert ids(hist, "t~2..") == ["c5", "c4"]  # A..: up to HEAD
    assert ids(hist, "..c1") == []  # ..B: HEAD reaches c1
    # across threads, as git log main..topic: side's own checkpoints (its fork point, then s0)
    assert [(e["id"] == "s0", e["thread"]) for e in json.loads(log(hist, "--json", "t..side").stdout)] == [
        (True, "side"), (False, "side")]
    assert ids(hist, "-n", "1", "c0..t") == ["c5"]
    assert ids(hist, "c0...c3") == ["c3", "c2", "c1"]  # A...B: what either reaches and not both
    assert "unknown revision" in log(hist, "c0..nope", check=3).stderr


def test_log_reverse_after_max_count(hist):
    assert ids(hist, "--reverse") == [f"c{i}" for i in range(6)]
    assert ids(hist, "--reverse", "-n", "2") == ["c4", "c5"]  # git: -n picks the newest, then reverses


def test_log_dash_dash_fields_keeps_checkpoints_that_changed_them(hist):
    assert ids(hist, "--", "n") == ["c4", "c2", "c0"]
    assert ids(hist, "--", "mode") == ["c3"]
    assert ids(hist, "--", "mode", "n") == ["c4", "c3", "c2", "c0"]
    assert ids(hist, "t~4..t", "--", "n") == ["c4", "c2"]
    assert ids(hist, "--", "nothing-has-this") == []
    text = log(hist, "-p", "--oneline", "-n", "1", "--", "n").stdout  # -p shows only those fields
    assert "field n" in text and "messages" not in text.split("\n", 1)[1]


def test_log_since_and_until_in_gits_date_forms(hist):
    split = hist["split"]
    assert ids(hist, "--since", f"@{int(split)}") == ["c5", "c4", "c3"]
    assert ids(hist, "--until", f"@{int(split) - 1}") == ["c2", "c1", "c0"]
    assert ids(hist, "--after", "1 year ago", "--before", "now") == [f"c{i}" for i in range(5, -1, -1)]
    assert ids(hist, "--since", "2.weeks.ago", "-n", "1") == ["c5"]
    assert ids(hist, "--until", "1 hour ago") == []
    iso = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(split))
    assert ids(hist, "--since", iso) == ["c5", "c4", "c3"]
    assert ids(hist, "--since", "2000-01-01", "--until", "2001-01-01 12:00") == []
    bad = log(hist, "--since", "the day after tomorrow", check=2)
    assert bad.stderr.startswith("qvc: ") and bad.stderr.count("\n") == 1 and "--since" in bad.stderr


def test_log_grep_matches_the_commit_message(hist):
    assert ids(hist, "--grep", r"^step [24] ") == ["c4", "c2"]
    assert ids(hist, "--grep", "Checkpoint-Id: c1$") == ["c1"]  # trailers are part of the message
    assert log(hist, "--grep", "([", check=2).stderr.startswith("qvc: bad --grep pattern")


def test_log_patch_and_stat(hist):
    out = log(hist, "-p", "-n", "2").stdout
    blocks = out.split("checkpoint ")[1:]
    assert blocks[0].startswith("c5") and "~~~ field messages (changed)" in blocks[0]
    assert '+ messages[5]: "m5"' in blocks[0] and "field n" not in blocks[0]
    assert "~ n: 2 → 4" in blocks[1]
    stat = log(hist, "--stat", "--oneline", "-n", "2").stdout.split("\n")
    assert re.match(r"[0-9a-f]{7} c5 ", stat[0]) and stat[1].startswith("messages | 1 +")
    assert stat[2] == "1 field changed" and stat[3] == "" and re.match(r"[0-9a-f]{7} c4 ", stat[4])
    first = log(hist, "-p", "--oneline", "c0", "-n", "1").stdout
    assert "+++ field messages (added)" in first and "+++ field n (added)" in first
    [data] = json.loads(log(hist, "--json", "--stat", "-n", "1", "c4").stdout)
    assert [(d["field"], d["status"]) for d in data["diff"]] == [("messages", "changed"), ("n", "changed")]


def test_log_format_placeholders(hist):
    out = log(hist, "--format", "%h|%H|%(id)|%(step)|%(thread)|%(source)|%(nchanged)|%(changed)|%d", "-n", "2")
    first, second = out.stdout.splitlines()
    h, full, cid, step, thread, source, n, changed, deco = first.split("|")
    assert full.startswith(h) and len(h) == 7 and len(full) == 40
    assert (cid, step, thread, source, n, changed, deco) == ("c5", "5", "t", "loop", "1", "messages",
                                                              " (HEAD -> t)")
    assert second.split("|")[2] == "c4" and second.endswith("|")
    multi = log(hist, "--pretty=format:%(id)%n  %s%n  %at %ai %ar%x21 100%%", "-n", "1").stdout.splitlines()
    assert multi[0] == "c5" and multi[1].startswith("  step 5 · loop")
    assert re.fullmatch(r"  \d{10} \d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4} .+ ago! 100%", multi[2]), multi
    parents = log(hist, "--format", "%P %p", "-n", "1", "c1").stdout.split()
    assert parents[1] == parents[0][:7] and len(parents[0]) == 40
    for bad in ("%q", "%(nope)", "50%"):
        proc = log(hist, "--format", bad, check=2)
        assert proc.stderr.startswith("qvc: unknown --format placeholder") and proc.stderr.count("\n") == 1


def test_log_selection_does_not_go_with_graph_or_follow(hist):
    assert "--graph" in log(hist, "--graph", "--reverse", check=2).stderr
    assert "--follow" in log(hist, "--follow", "--grep", "x", check=2).stderr


# -- names: RUN@N everywhere, ambiguous prefixes --------------------------------------------------


@pytest.fixture(scope="module")
def runs_repo(tmp_path_factory) -> Path:
    """Run r1 (session s): 3 tool batches, then an answer: checkpoints at messages 4, 6, 8, 9."""
    path = tmp_path_factory.mktemp("runs") / ".qvc"
    with GitCheckpointStore(path) as store:
        runs = Runs(store)
        with runs.start("question", system="sys", run_id="r1", session_id="s") as rec:
            for n in range(3):
                rec.add_message(Message("assistant", tool_calls=[ToolCall(f"call_{n}", "tool", {"n": n})]))
                rec.tool_result(f"call_{n}", f"result {n}")
                rec.after_tool_batch()
            rec.add_message(Message("assistant", "answer"))
            rec.complete()
        put(store, "other", "abcd1111", 0, {"x": 1})
        put(store, "other", "abcd2222", 1, {"x": 2})
    return path


def run_qvc(path: Path, *args: str, check: int = 0):
    return qvc("--repo", str(path), *args, check=check)


def test_run_at_n_names_a_checkpoint_in_every_command(runs_repo, tmp_path):
    timeline = json.loads(run_qvc(runs_repo, "timeline", "r1", "--json").stdout)
    at = {e["message_index"]: e["id"] for e in timeline}
    assert sorted(at) == [4, 6, 8, 9]
    assert json.loads(run_qvc(runs_repo, "log", "--json", "-n", "1", "r1@6").stdout)[0]["id"] == at[6]
    assert [e["id"] for e in json.loads(run_qvc(runs_repo, "log", "--json", "r1@4..r1@8").stdout)] == [at[8], at[6]]
    assert json.loads(run_qvc(runs_repo, "log", "--json", "-n", "1", "r1@6~1").stdout)[0]["id"] == at[4]
    assert json.loads(run_qvc(runs_repo, "log", "--json", "-n", "1", "r1@7").stdout)[0]["id"] == at[6]  # snapped
    changes = json.loads(run_qvc(runs_repo, "diff", "r1@4", "r1@6", "--json").stdout)
    assert changes and all(d["field"] != "run" or d["status"] == "changed" for d in changes)
    assert json.loads(run_qvc(runs_repo, "diff", "r1@6", "--json").stdout) == changes  # against its parent
    out = json.loads(run_qvc(runs_repo, "checkout", "r1@6", "--to", str(tmp_path / "w"), "--json").stdout)
    assert out["id"] == at[6]
    assert json.loads(run_qvc(runs_repo, "show", "r1@6", "--json").stdout)["message_index"] == 6  # still the run
    assert "outside" in run_qvc(runs_repo, "log", "r1@99", check=2).stderr
    # the run's id alone is its latest checkpoint, in log and diff as in show
    assert json.loads(run_qvc(runs_repo, "log", "--json", "-n", "1", "r1").stdout)[0]["id"] == at[9]
    assert json.loads(run_qvc(runs_repo, "diff", "r1@8", "r1", "--json").stdout)
    assert "unknown revision" in run_qvc(runs_repo, "log", "nobody@3", check=3).stderr


def test_an_ambiguous_prefix_lists_the_candidates(runs_repo):
    proc = run_qvc(runs_repo, "log", "abcd", check=2)
    assert proc.stderr.count("\n") == 1 and "ambiguous" in proc.stderr
    assert "candidates:" in proc.stderr and "abcd1111" in proc.stderr and "abcd2222" in proc.stderr
    assert "other step 1" in proc.stderr
    for command in (("diff", "abcd"), ("show", "abcd"), ("checkout", "abcd")):
        assert "abcd2222" in run_qvc(runs_repo, *command, check=2).stderr
