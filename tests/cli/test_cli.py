"""The ``qvc`` command line, in process: every command and option on real repositories.

Successful commands run through click's ``CliRunner`` (``invoke(cli, ..., obj=None)``); exit
statuses and one-line errors go through :func:`qvc.cli.main`, which maps errors to statuses
(captured with capsys). Repositories are built with the library, closed, then inspected with
the CLI and with the real ``git``. Subprocess tests of the console script are in
``test_cli_process.py``.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from helpers import invoke, put, run_git  # noqa: E402

import qvc.cli  # noqa: E402
from qvc import CheckpointConfig, GitCheckpointStore  # noqa: E402
from qvc.cli import cli  # noqa: E402
from qvc.codec import serde  # noqa: E402
from qvc.codec.tagged import from_jsonable  # noqa: E402
from qvc.errors import InvalidThreadIdError  # noqa: E402
from qvc.types import PendingWrite  # noqa: E402

ANSI = re.compile(r"\x1b\[[0-9;]*m")
LOG_KEYS = {"id", "commit", "thread", "step", "n", "name", "source", "time", "timestamp", "parents", "changed",
            "status", "heads", "tags", "superseded", "cut"}
STATUS_KEYS = {"path", "thread", "head", "head_id", "head_step", "durability", "threads", "superseded_lines",
               "pending_writes", "recovery", "maintenance_due", "replication", "damaged", "failures",
               "last_failures", "quarantine", "problems"}
BRANCH_KEYS = {"thread", "current", "head", "head_id", "step", "status", "updated", "timestamp", "checkpoints"}
REFLOG_KEYS = {"selector", "old", "new", "time", "timestamp", "message"}


# -- helpers ------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """Each test runs in its own directory (``-C`` chdirs in process) with no qvc environment."""
    monkeypatch.chdir(tmp_path)
    for var in ("QVC_DIR", "NO_COLOR", "QVC_PAGER", "PAGER", "LINES", "COLUMNS"):
        monkeypatch.delenv(var, raising=False)


def ok(*args: str, env: dict | None = None) -> str:
    """stdout of a command that must succeed."""
    result = invoke(*args, env=env)
    assert result.exit_code == 0, f"qvc {' '.join(args)} -> {result.exit_code}\n{result.output}"
    return result.stdout


def ok_json(*args: str) -> object:
    return json.loads(ok(*args, "--json"))


def fails(capsys, code: int, *args: str) -> str:
    """Run through ``qvc.cli.main``; assert the exit status and a one-line error; return it."""
    capsys.readouterr()
    got = qvc.cli.main(list(args))
    cap = capsys.readouterr()
    assert got == code, f"qvc {' '.join(args)} -> {got}, expected {code}\nstdout: {cap.out}\nstderr: {cap.err}"
    assert "Traceback" not in cap.err + cap.out
    assert cap.err.startswith("qvc: ") and cap.err.count("\n") == 1, f"not a one-line error: {cap.err!r}"
    return cap.err.strip()


def run_state(i: int) -> dict:
    """State of checkpoint ``c{i}`` on run-1: one transcript message appended per step."""
    return {"messages": [f"message {k}" for k in range(i + 1)], "counter": i,
            "status": "done" if i == 3 else "running"}


def build_run(path: Path, n: int = 4, thread: str = "run-1") -> None:
    """A closed repository with ``thread`` = c0..c{n-1} and HEAD on it."""
    with GitCheckpointStore(path) as store:
        for i in range(n):
            put(store, thread, f"c{i}", i, run_state(i))
        store.checkout(thread)


@pytest.fixture
def repo(tmp_path) -> Path:
    """``.qvc`` in the test's directory: run-1 with c0..c3, HEAD on run-1."""
    path = tmp_path / ".qvc"
    build_run(path)
    return path


def same_data(a: dict, b: dict) -> bool:
    """Equal field by field, types included (the serialized bytes); field order aside."""
    return set(a) == set(b) and all(serde.dumps(a[k]) == serde.dumps(b[k]) for k in a)


def git(path: Path, *args: str, check: bool = True):
    return run_git(path, *args, check=check)


def sha(path: Path, rev: str) -> str:
    return git(path, "rev-parse", rev).stdout.strip()


def head_of(thread: str = "run-1") -> str:
    return ok_json("show", thread)["id"]


# -- init ---------------------------------------------------------------------------------------


def test_init_default_creates_dot_qvc_here(tmp_path):
    out = ok("init")
    assert out.strip() == f"Initialized empty qvc repository in {tmp_path / '.qvc'}"
    assert (tmp_path / ".qvc" / "HEAD").is_file() and (tmp_path / ".qvc" / "qvc").is_dir()
    assert git(tmp_path / ".qvc", "rev-parse", "--is-bare-repository").stdout.strip() == "true"
    st = ok_json("status")
    assert st["path"] == str(tmp_path / ".qvc") and st["threads"] == 0 and st["head"] is None


def test_init_path_json_and_reinit_keeps_data(tmp_path):
    target = tmp_path / "runs.qvc"
    assert ok_json("init", "runs.qvc") == {"path": str(target), "created": True}
    with GitCheckpointStore(target) as store:
        put(store, "t", "a0", 0, {"x": 1})
    assert ok_json("init", str(target)) == {"path": str(target), "created": False}
    assert ok("init", "runs.qvc").strip() == f"Reinitialized existing qvc repository in {target}"
    assert [e["id"] for e in ok_json("--repo", "runs.qvc", "log", "t")] == ["a0"]


def test_init_in_an_existing_empty_directory(tmp_path):
    (tmp_path / "empty").mkdir()
    assert ok_json("init", "empty")["created"] is True
    assert ok_json("--repo", "empty", "status")["threads"] == 0


def test_init_refuses_a_non_empty_directory(tmp_path, capsys):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "notes.txt").write_text("mine")
    err = fails(capsys, 2, "init", "data")
    assert "not a qvc repository" in err and str(tmp_path / "data") in err
    assert os.listdir(tmp_path / "data") == ["notes.txt"]
    (tmp_path / "afile").write_text("x")
    fails(capsys, 2, "init", "afile")


def test_init_with_C_and_repo(tmp_path):
    (tmp_path / "proj").mkdir()
    ok("-C", "proj", "init")
    assert (tmp_path / "proj" / ".qvc" / "HEAD").is_file()
    ok("--repo", str(tmp_path / "other.qvc"), "init")
    assert (tmp_path / "other.qvc" / "HEAD").is_file()


def test_init_honours_QVC_DIR(tmp_path, monkeypatch):
    """Like `git init` with GIT_DIR: the repository every other command will look for."""
    monkeypatch.setenv("QVC_DIR", str(tmp_path / "env.qvc"))
    ok("init")
    assert (tmp_path / "env.qvc" / "HEAD").is_file() and not (tmp_path / ".qvc").exists()
    assert ok_json("status")["path"] == str(tmp_path / "env.qvc")


# -- finding the repository --------------------------------------------------------------------


def test_discovery_C_dir(tmp_path, monkeypatch):
    build_run(tmp_path / "a" / ".qvc")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert ok_json("-C", str(tmp_path / "a"), "status")["path"] == str(tmp_path / "a" / ".qvc")
    assert ok_json("-C", "../a", "status")["thread"] == "run-1"


def test_discovery_repo_option_beats_environment(tmp_path, monkeypatch):
    build_run(tmp_path / "one.qvc", thread="one")
    build_run(tmp_path / "two.qvc", thread="two")
    monkeypatch.setenv("QVC_DIR", str(tmp_path / "two.qvc"))
    assert ok_json("status")["thread"] == "two"
    assert ok_json("--repo", "one.qvc", "status")["thread"] == "one"


def test_discovery_environment_beats_the_directory(tmp_path):
    build_run(tmp_path / ".qvc", thread="here")
    build_run(tmp_path / "env.qvc", thread="env")
    assert ok_json("status")["thread"] == "here"
    result = invoke("status", "--json", env={"QVC_DIR": str(tmp_path / "env.qvc")})
    assert result.exit_code == 0 and json.loads(result.stdout)["thread"] == "env"


def test_discovery_dot_qvc_in_a_parent_and_inside_the_repository(tmp_path, monkeypatch):
    build_run(tmp_path / "proj" / ".qvc")
    deep = tmp_path / "proj" / "src" / "deep"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    assert ok_json("status")["path"] == str(tmp_path / "proj" / ".qvc")
    monkeypatch.chdir(tmp_path / "proj" / ".qvc" / "refs")
    assert ok_json("status")["path"] == str(tmp_path / "proj" / ".qvc")


def test_outside_any_repository_is_exit_128_one_line(tmp_path, capsys, monkeypatch):
    (tmp_path / "nothing").mkdir()
    monkeypatch.chdir(tmp_path / "nothing")
    for args in (["status"], ["log"], ["show"], ["branch"], ["fsck"], ["gc"]):
        err = fails(capsys, 128, *args)
        assert "not a qvc repository" in err
    err = fails(capsys, 128, "--repo", str(tmp_path / "nothing"), "status")
    assert "--repo" in err
    monkeypatch.setenv("QVC_DIR", str(tmp_path / "nothing"))
    assert "$QVC_DIR" in fails(capsys, 128, "log")
    assert not os.listdir(tmp_path / "nothing")  # nothing was created


def test_C_to_a_missing_directory_is_a_usage_error(tmp_path, capsys):
    fails(capsys, 2, "-C", str(tmp_path / "missing"), "status")


# -- log ----------------------------------------------------------------------------------------


def test_log_default_is_head_newest_first(repo):
    out = ok("log")
    blocks = out.strip("\n").split("\n\n")
    assert [b.split("\n")[0] for b in blocks] == [
        "checkpoint c3 (HEAD -> run-1)", "checkpoint c2", "checkpoint c1", "checkpoint c0"]
    first = blocks[0].split("\n")
    assert first[1].startswith(f"Commit:  {sha(repo, 'run-1')[:12]}   Thread: run-1   Step: 3   Source: loop")
    assert "Status: done" in first[1]
    assert re.match(r"Date:    (just now|\d+ seconds? ago) \(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4}\)$", first[2])
    assert first[3] == "Changed: counter, messages, status"
    assert blocks[3].split("\n")[3] == "Changed: counter, messages, status"  # the first: every field is new
    assert blocks[2].split("\n")[3] == "Changed: counter, messages"
    assert ANSI.search(out) is None  # not a terminal


def test_log_thread_and_checkpoint(repo):
    with GitCheckpointStore(repo) as store:
        put(store, "other", "o0", 0, {"x": 0})
    assert [e["id"] for e in ok_json("log", "other")] == ["o0"]
    assert [e["id"] for e in ok_json("log", "c1")] == ["c1", "c0"]
    assert [e["id"] for e in ok_json("log", "run-1~2")] == ["c1", "c0"]
    assert [e["id"] for e in ok_json("log")] == ["c3", "c2", "c1", "c0"]  # HEAD did not move


def test_log_max_count(repo):
    assert [e["id"] for e in ok_json("log", "-n", "2")] == ["c3", "c2"]
    assert [e["id"] for e in ok_json("log", "--max-count", "1", "c1")] == ["c1"]
    assert ok("log", "-n", "0") == ""
    assert len(ok("log", "--oneline", "-n", "3").splitlines()) == 3


def test_log_max_count_must_be_a_natural_number(repo, capsys):
    fails(capsys, 2, "log", "-n", "-1")
    fails(capsys, 2, "log", "-n", "x")


def test_log_graph_with_json_is_a_usage_error(repo, capsys):
    assert "--graph" in fails(capsys, 2, "log", "--graph", "--json")


def test_log_oneline(repo):
    lines = ok("log", "--oneline").splitlines()
    assert len(lines) == 4
    for i, line in zip((3, 2, 1, 0), lines, strict=True):
        assert line.startswith(f"{sha(repo, f'run-1~{3 - i}')[:7]} c{i} step {i} · loop · ")
    assert lines[0].endswith("3 changed [done] (HEAD -> run-1)")
    assert lines[1].endswith("2 changed [running]")


def test_log_json_is_stable_and_exact(repo):
    entries = ok_json("log")
    assert [set(e) for e in entries] == [LOG_KEYS] * 4
    head = entries[0]
    assert head["id"] == "c3" and head["thread"] == "run-1" and head["step"] == 3 and head["source"] == "loop"
    assert head["commit"] == sha(repo, "run-1")
    assert head["parents"] == [sha(repo, "run-1~1")] and entries[3]["parents"] == []
    assert head["changed"] == ["counter", "messages", "status"] and entries[1]["changed"] == ["counter", "messages"]
    assert head["status"] == "done" and entries[1]["status"] == "running"
    assert head["heads"] == ["run-1"] and entries[1]["heads"] == []
    assert not any(e["superseded"] for e in entries)
    assert isinstance(head["timestamp"], int)
    assert dt.datetime.fromisoformat(head["time"]) == dt.datetime.fromtimestamp(head["timestamp"], dt.timezone.utc)
    assert head["timestamp"] == int(git(repo, "log", "-1", "--format=%ct", "run-1").stdout)


def test_log_counts_removed_fields_as_changed(tmp_path):
    """A checkpoint that drops a field changed it: `qvc log` must say so, as the commit subject does."""
    path = tmp_path / ".qvc"
    with GitCheckpointStore(path) as store:
        put(store, "t", "a", 0, {"keep": 1, "scratch": "x"})
        put(store, "t", "b", 1, {"keep": 1})
        store.checkout("t")
    assert git(path, "log", "-1", "--format=%s", "t").stdout.strip().endswith("1 field changed")
    assert ok_json("log", "-n", "1")[0]["changed"] == ["scratch"]
    assert "Changed: scratch" in ok("log", "-n", "1")


def test_commit_counts_removed_fields_as_changed(tmp_path):
    with GitCheckpointStore(tmp_path / ".qvc") as store:
        put(store, "t", "a", 0, {"keep": 1, "scratch": "x"})
        store.checkout("t")
    ok("checkout", "--to", "fix")
    Path("fix/keep.json").unlink()
    assert ok("commit", "fix").rstrip().endswith("update · 1 field(s) changed: keep")
    ok("checkout", "--to", "fix")
    Path("fix/scratch.json").unlink()
    (Path("fix") / "new.json").write_text("1")
    made = json.loads(ok("commit", "fix", "--json"))
    assert sorted(made["changed"]) == ["new", "scratch"]


def test_log_all_shows_superseded_lines(repo):
    ok("reset", "run-1~2")
    with GitCheckpointStore(repo) as store:
        put(store, "run-1", "c2b", 2, {"redo": True})
    assert [e["id"] for e in ok_json("log")] == ["c2b", "c1", "c0"]
    entries = ok_json("log", "--all")
    by_id = {e["id"]: e for e in entries}
    assert set(by_id) == {"c0", "c1", "c2", "c3", "c2b"}
    assert by_id["c3"]["superseded"] and by_id["c2"]["superseded"]
    assert not any(by_id[c]["superseded"] for c in ("c0", "c1", "c2b"))
    times = [e["timestamp"] for e in entries]
    assert times == sorted(times, reverse=True)
    text = ok("log", "--all", "--oneline")
    assert len(text.splitlines()) == 5
    assert [ln for ln in text.splitlines() if "(superseded)" in ln and " c3 " in ln]
    assert [ln for ln in text.splitlines() if " c2b " in ln and "(HEAD -> run-1)" in ln]
    assert len(ok_json("log", "--all", "-n", "2")) == 2


def test_log_graph_draws_forks_across_threads(repo):
    ok("branch", "retry", "c1")
    with GitCheckpointStore(repo) as store:
        put(store, "retry", "r2", 2, {"retry": 1})
    graph = ok("log", "--graph", "--all")
    lines = graph.splitlines()
    assert lines[0].startswith("*")
    assert any("/" in ln.split(" ")[0] or ln.startswith("|/") for ln in lines), graph  # the fork is drawn
    assert sum(1 for ln in lines if "*" in ln[:4]) == 6  # c0..c3, the fork checkpoint, r2
    assert "HEAD -> run-1" in graph and "retry" in graph
    for cid in ("c0", "c1", "c2", "c3", "r2"):  # each line as --oneline prints it
        assert re.search(rf"^[*|/\\ ]+[0-9a-f]{{7}} {cid} step ", graph, re.M), cid
    one = ok("log", "--graph", "retry").splitlines()
    assert len(one) == 4 and all(ln.startswith("* ") for ln in one)  # r2, fork, c1, c0
    assert len(ok("log", "--graph", "-n", "2").splitlines()) == 2
    assert ANSI.search(graph) is None


def test_log_graph_all_includes_superseded(repo):
    ok("reset", "HEAD~2")
    graph = ok("log", "--graph", "--all")
    for cid in ("c0", "c1", "c2", "c3"):
        assert re.search(rf"^[*|/\\ ]+[0-9a-f]{{7}} {cid} step ", graph, re.M), (cid, graph)


def test_log_follows_a_fork_into_its_source_thread(repo):
    ok("branch", "retry", "c1")
    entries = ok_json("log", "retry")
    assert [e["thread"] for e in entries] == ["retry", "run-1", "run-1"]
    assert [e["id"] for e in entries][1:] == ["c1", "c0"]
    assert entries[0]["source"] == "fork"


def test_log_on_an_unborn_current_thread_is_not_found(tmp_path, capsys):
    ok("init")
    assert "no checkpoints" in fails(capsys, 3, "log")


# -- show ---------------------------------------------------------------------------------------


def test_show_default_is_head(repo):
    out = ok("show")
    lines = out.splitlines()
    assert lines[0] == "checkpoint c3"
    assert lines[1] == f"Commit:   {sha(repo, 'HEAD')}"
    assert lines[2] == "Thread:   run-1   Step: 3"
    assert lines[3] == "Parent:   run-1@c2"
    assert "Metadata:" in lines and "  source: \"loop\"" in lines and "  step: 3" in lines
    assert "State (3 fields):" in lines
    assert '  messages (v4): ["message 0", "message 1", "message 2", "message 3"]' in lines
    assert "  counter (v4): 3" in lines and '  status (v2): "done"' in lines
    assert lines[-1] == "Pending writes: none"
    assert ok("show", "c0").splitlines()[3] == "Parent:   (none)"


def test_show_field(repo):
    lines = ok("show", "c2", "--field", "counter").splitlines()
    assert "  counter (v3): 2" in lines
    assert not [ln for ln in lines if ln.startswith("  messages")]
    both = ok("show", "--field", "counter", "--field", "status").splitlines()
    assert [ln.split(" ")[2] for ln in both if ln.startswith("  ") and ln.split(" ")[2] in ("counter", "status")]
    data = ok_json("show", "--field", "status")
    assert data["state"] == {"status": "done"}


def test_show_unknown_field_is_exit_3(repo, capsys):
    err = fails(capsys, 3, "show", "--field", "nope")
    assert "'nope'" in err and "counter" in err


def test_show_shortens_long_values_unless_full(tmp_path):
    long_text = "".join(f"{i:05d}" for i in range(2000))  # 10,000 characters
    items = list(range(1000))
    with GitCheckpointStore(tmp_path / ".qvc") as store:
        put(store, "t", "big", 0, {"text": long_text, "items": items})
        store.checkout("t")
    short = ok("show")
    assert long_text not in short and "10000 chars" in short
    assert "999" in short and "…" in short and ", 500," not in short
    assert max(len(ln) for ln in short.splitlines()) < 400
    full = ok("show", "--full")
    assert f'"{long_text}"' in full
    assert "[" + ", ".join(map(str, items)) + "]" in full


def test_show_json_is_the_exact_data(tmp_path):
    state = {
        "bytes": b"\x00\xffhi",
        "tuple": (1, "two", (3.5,)),
        "set": {3, 1, 2},
        "frozen": frozenset({"a"}),
        "nested": {"int keys": {1: "one", 2: None}, "$dollar": [True, False]},
        "floats": [float("inf"), -0.0, 1.5],
        "when": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc),
        "plain": {"a": [1, {"b": "c"}]},
    }
    with GitCheckpointStore(tmp_path / ".qvc") as store:
        put(store, "t", "p0", 0, {"x": 0})
        put(store, "t", "p1", 1, state)
        store.put_writes(CheckpointConfig("t", "p1"), [PendingWrite("task-1", "messages", (b"w", 1))], "task-1")
        store.checkout("t")
    data = ok_json("show")
    assert set(data) == {"id", "commit", "thread", "step", "parent", "created_at", "time", "timestamp", "metadata",
                         "state", "state_versions", "pending_writes", "signature"}
    assert data["signature"] is None  # unsigned, no allowed signers
    assert data["id"] == "p1" and data["thread"] == "t" and data["step"] == 1
    assert data["parent"] == {"thread": "t", "id": "p0"}
    assert data["commit"] == sha(tmp_path / ".qvc", "t")
    assert data["metadata"] == {"source": "loop", "step": 1}
    assert data["state_versions"] == {k: 1 for k in state}
    js = data["state"]
    assert js["bytes"] == {"$bytes": base64.b64encode(b"\x00\xffhi").decode()}
    assert js["tuple"] == {"$tuple": [1, "two", {"$tuple": [3.5]}]}
    assert js["set"] == {"$set": [1, 2, 3]}
    assert js["frozen"] == {"$frozenset": ["a"]}
    assert js["nested"] == {"int keys": {"$dict": [[1, "one"], [2, None]]}, "$$dollar": [True, False]}
    assert js["floats"] == [{"$float": "inf"}, {"$float": "-0.0"}, 1.5]
    assert js["plain"] == {"a": [1, {"b": "c"}]}
    assert same_data(from_jsonable(js), state)  # lossless, types included
    assert data["pending_writes"] == [{"task": "task-1", "channel": "messages",
                                       "value": {"$tuple": [{"$bytes": "dw=="}, 1]}}]
    text = ok("show")
    assert "Pending writes (1):" in text and "  task-1 messages: (b'w', 1)" in text


def test_show_by_thread_and_detached(repo):
    assert ok_json("show", "run-1")["id"] == "c3"
    ok("checkout", "c1")
    assert ok_json("show")["id"] == "c1"


# -- diff ---------------------------------------------------------------------------------------


def test_diff_one_checkpoint_is_against_its_parent(repo):
    assert ok_json("diff", "c3") == ok_json("diff", "c2", "c3")
    changes = {d["field"]: d for d in ok_json("diff", "HEAD")}
    assert set(changes) == {"counter", "messages", "status"}
    assert changes["counter"]["changes"] == [{"path": [], "op": "change", "old": 2, "new": 3}]
    assert changes["status"]["changes"] == [{"path": [], "op": "change", "old": "running", "new": "done"}]


def test_diff_transcript_append_is_exactly_one_added_item(repo):
    changes = {d["field"]: d for d in ok_json("diff", "c2")}
    assert changes["messages"] == {"field": "messages", "status": "changed",
                                   "changes": [{"path": [2], "op": "add", "new": "message 2"}]}
    text = ok("diff", "c2")
    assert "+ messages[2]: \"message 2\"" in text
    assert "message 0" not in text and "message 1" not in text  # not a dump of the whole list
    assert "~ counter: 1 → 2" in text


def test_diff_two_checkpoints(repo):
    diffs = {d["field"]: d for d in ok_json("diff", "c0", "run-1")}
    assert [c["path"] for c in diffs["messages"]["changes"]] == [[1], [2], [3]]
    assert all(c["op"] == "add" for c in diffs["messages"]["changes"])
    back = {d["field"]: d for d in ok_json("diff", "run-1", "c0")}
    assert [c["op"] for c in back["messages"]["changes"]] == ["remove"] * 3
    assert ok_json("diff", "c3", "c3") == []
    assert ok("diff", "c3", "c3").strip() == ""


def test_diff_first_checkpoint_adds_every_field(repo):
    diffs = ok_json("diff", "c0")
    assert {d["field"]: d["status"] for d in diffs} == {"counter": "added", "messages": "added", "status": "added"}


def test_diff_added_and_removed_fields_and_stat(tmp_path):
    with GitCheckpointStore(tmp_path / ".qvc") as store:
        put(store, "t", "a", 0, {"keep": [1, 2], "gone": "x", "scratch": {"k": 1, "old": 2}})
        put(store, "t", "b", 1, {"keep": [1, 2, 3], "new": True, "scratch": {"k": 5, "fresh": 1}})
        store.checkout("t")
    diffs = {d["field"]: d for d in ok_json("diff", "b")}
    assert diffs["gone"]["status"] == "removed" and diffs["new"]["status"] == "added"
    assert sorted((c["path"], c["op"]) for c in diffs["scratch"]["changes"]) == [
        (["fresh"], "add"), (["k"], "change"), (["old"], "remove")]
    stat = ok("diff", "b", "--stat").splitlines()
    assert stat[-1] == "4 fields changed"
    rows = {ln.split("|")[0].strip(): ln.split("|")[1].strip() for ln in stat[:-1]}
    assert rows == {"gone": "1 - (removed)", "keep": "1 +", "new": "1 + (added)", "scratch": "1 + 1 ~ 1 -"}


def test_diff_unknown_revision(repo, capsys):
    fails(capsys, 3, "diff", "nope")
    fails(capsys, 3, "diff", "c0", "nope")


# -- branch -------------------------------------------------------------------------------------


def test_branch_lists_threads(repo):
    with GitCheckpointStore(repo) as store:
        put(store, "alpha", "a0", 0, {"x": 1})
    assert ok("branch").splitlines() == ["  alpha", "* run-1"]


def test_branch_verbose_and_json(repo):
    with GitCheckpointStore(repo) as store:
        put(store, "alpha", "a0", 0, {"x": 1})
    lines = ok("branch", "-v").splitlines()
    assert re.match(r"  alpha  a0 step 0 · 1 checkpoint\(s\) · updated (just now|\d+ seconds? ago)$", lines[0])
    assert re.match(r"\* run-1  c3 step 3 \[done\] · 4 checkpoint\(s\) · updated ", lines[1])
    rows = ok_json("branch")
    assert [set(r) for r in rows] == [BRANCH_KEYS, BRANCH_KEYS]
    assert rows[1] == {**rows[1], "thread": "run-1", "current": True, "head": sha(repo, "run-1"), "head_id": "c3",
                       "step": 3, "status": "done", "checkpoints": 4}
    assert rows[0]["current"] is False and rows[0]["status"] is None
    assert dt.datetime.fromisoformat(rows[1]["updated"]).timestamp() == rows[1]["timestamp"]
    assert ok_json("branch", "-v") == rows


def test_branch_fork(repo):
    out = ok("branch", "retry", "c1")
    assert out.startswith("Forked thread 'retry' from c1 (new checkpoint ")
    log = ok_json("log", "retry")
    assert [e["id"] for e in log][1:] == ["c1", "c0"] and log[0]["step"] == 1
    assert ok_json("show", "retry")["state"] == ok_json("show", "c1")["state"]
    made = json.loads(ok("branch", "again", "--json"))  # default: from HEAD
    assert made["from"] == "c3" and made["thread"] == "again"
    assert ok_json("show", "again")["id"] == made["id"]
    assert ok_json("status")["thread"] == "run-1"  # forking does not switch


def test_branch_fork_existing_name_is_exit_4(repo, capsys):
    ok("branch", "retry", "c1")
    before = sha(repo, "refs/heads/retry")
    assert "already exists" in fails(capsys, 4, "branch", "retry", "c0")
    assert "already exists" in fails(capsys, 4, "branch", "run-1")
    assert sha(repo, "refs/heads/retry") == before


def test_branch_delete_refuses_current_and_superseded(repo, capsys):
    assert "current thread" in fails(capsys, 2, "branch", "-d", "run-1")
    with GitCheckpointStore(repo) as store:
        put(store, "other", "o0", 0, {"x": 1})
        put(store, "other", "o1", 1, {"x": 2})
        store.reset("other", "o0")
    assert "kept by time travel" in fails(capsys, 2, "branch", "-d", "other")
    assert [r["thread"] for r in ok_json("branch")] == ["other", "run-1"]
    assert fails(capsys, 3, "branch", "-d", "missing")
    out = ok("branch", "-D", "other")
    assert out.startswith("Deleted thread other (was o0;")
    assert [r["thread"] for r in ok_json("branch")] == ["run-1"]
    assert git(repo, "for-each-ref", "refs/qvc/superseded/").stdout == ""


def test_branch_delete_a_plain_thread(repo, capsys):
    with GitCheckpointStore(repo) as store:
        put(store, "other", "o0", 0, {"x": 1})
    assert "not fully merged" in fails(capsys, 2, "branch", "-d", "other")  # its checkpoint is on no other line
    ok("branch", "-D", "other")
    assert [r["thread"] for r in ok_json("branch")] == ["run-1"]


def test_branch_force_delete_current(repo, capsys):
    assert "current thread" in fails(capsys, 2, "branch", "-D", "run-1")  # as git refuses the checked-out branch
    ok("checkout", "c2")
    ok("branch", "-D", "run-1")
    assert ok("branch") == ""
    assert fails(capsys, 3, "show", "c3")


def test_branch_rename_old_new_and_head_follows(repo):
    with GitCheckpointStore(repo) as store:
        put(store, "other", "o0", 0, {"x": 1})
    ok("branch", "-m", "other", "renamed")
    assert [r["thread"] for r in ok_json("branch")] == ["renamed", "run-1"]
    assert ok_json("status")["thread"] == "run-1"
    assert ok_json("show", "renamed")["thread"] == "renamed"
    ok("branch", "-m", "run-1", "run-A")
    assert ok_json("status")["thread"] == "run-A"  # HEAD followed
    assert [e["id"] for e in ok_json("log")] == ["c3", "c2", "c1", "c0"]
    assert {e["thread"] for e in ok_json("log")} == {"run-A"}
    assert [e["message"] for e in ok_json("reflog")][-1].startswith("loop: step 0")  # reflog carried over


def test_branch_rename_current_with_one_name(repo, capsys):
    out = ok("branch", "-m", "run-B")
    assert out.splitlines()[0] == "Renamed thread 'run-1' to 'run-B'"
    assert out.splitlines()[1].startswith("note: unlike git, its 4 checkpoint(s) got new commit SHAs")
    assert ok_json("status")["thread"] == "run-B"
    with GitCheckpointStore(repo) as store:
        put(store, "other", "o0", 0, {"x": 1})
    assert "already exists" in fails(capsys, 4, "branch", "-m", "other")
    fails(capsys, 2, "branch", "-m", "a", "b", "c")
    fails(capsys, 2, "branch", "-d", "-m", "other")
    fails(capsys, 2, "branch", "-d")


# -- checkout and commit --------------------------------------------------------------------------


def test_checkout_thread(repo):
    with GitCheckpointStore(repo) as store:
        put(store, "other", "o0", 0, {"x": 1})
    assert ok("checkout", "other").strip() == "Switched to thread 'other'"
    st = ok_json("status")
    assert st["thread"] == "other" and st["head_id"] == "o0"
    assert ok_json("checkout", "run-1") == {"thread": "run-1", "head": sha(repo, "run-1"), "detached": False}


def test_checkout_HEAD_stays_on_the_thread(repo):
    assert ok("checkout", "HEAD").strip() == "Already on 'run-1'"
    assert ok_json("status")["thread"] == "run-1"
    ok("checkout", "c1")
    assert ok_json("checkout", "HEAD") == {"thread": None, "head": sha(repo, "run-1~2"), "detached": True}


def test_checkout_checkpoint_detaches(repo):
    assert ok("checkout", "c1").strip() == "HEAD is now at c1 (detached)"
    st = ok_json("status")
    assert st["thread"] is None and st["head_id"] == "c1" and st["head"] == sha(repo, "run-1~2")
    assert "HEAD detached at c1 (step 1)" in ok("status")
    assert [e["id"] for e in ok_json("log")] == ["c1", "c0"]
    assert "(HEAD)" in ok("log", "--oneline").splitlines()[0]
    assert ok_json("checkout", "run-1~1")["detached"] is True


def test_checkout_b_forks_and_switches(repo):
    out = ok("checkout", "-b", "fix", "c1")
    assert out.startswith("Switched to a new thread 'fix' (forked from c1, new checkpoint ")
    st = ok_json("status")
    assert st["thread"] == "fix" and st["head_step"] == 1
    assert [e["id"] for e in ok_json("log")][1:] == ["c1", "c0"]
    ok("checkout", "-b", "fix2")  # default: HEAD
    assert ok_json("status")["thread"] == "fix2"
    assert [e["thread"] for e in ok_json("log")][:2] == ["fix2", "fix"]


def test_checkout_b_existing_is_exit_4(repo, capsys):
    fails(capsys, 4, "checkout", "-b", "run-1", "c0")
    assert ok_json("status")["head_id"] == "c3"


def test_checkout_usage_errors(repo, capsys):
    fails(capsys, 2, "checkout")
    fails(capsys, 2, "checkout", "-b", "x", "--to", "dir")
    fails(capsys, 3, "checkout", "nope")


def test_checkout_to_and_commit_roundtrip(repo, tmp_path):
    state = {"messages": ["hi", "bad tool result"], "plan": {"steps": [1, 2], "tags": {"a", "b"}},
             "raw": b"\x01\x02", "pair": (1, 2), "scratch": "drop me", "when": dt.date(2026, 3, 4),
             "nan": float("nan"), "big": 2**70}
    with GitCheckpointStore(repo) as store:
        put(store, "run-1", "c4", 4, state)
    out = ok("checkout", "HEAD", "--to", "fix")
    assert out.startswith("Wrote 8 field(s) of checkpoint c4 (thread run-1, step 4) to fix")
    fix = tmp_path / "fix"
    assert sorted(p.name for p in fix.glob("[!.]*.json")) == sorted(f"{k}.json" for k in state)
    assert ok_json("status")["head_id"] == "c4"  # --to does not move HEAD
    # a person edits the transcript, deletes a field, adds one
    messages = json.loads((fix / "messages.json").read_text())
    assert messages == ["hi", "bad tool result"]
    (fix / "messages.json").write_text(json.dumps(messages[:1] + ["fixed"], indent=2))
    (fix / "scratch.json").unlink()
    (fix / "note.json").write_text('"added by hand"')
    out = ok("commit", "fix", "-m", "fix the transcript")
    assert out.startswith("[run-1 ") and "step 5 · update" in out
    data = ok_json("show")
    assert data["step"] == 5 and data["parent"] == {"thread": "run-1", "id": "c4"}
    assert data["metadata"] == {"source": "update", "step": 5, "message": "fix the transcript", "edited_from": "c4"}
    expected = {**{k: v for k, v in state.items() if k != "scratch"}, "messages": ["hi", "fixed"],
                "note": "added by hand"}
    assert same_data(from_jsonable(data["state"]), expected)  # bytes, tuple, set, date, nan, big int: lossless
    with GitCheckpointStore(repo) as store:  # the library reads the same
        assert same_data(store.get_tuple(CheckpointConfig("run-1")).checkpoint.state_data, expected)
    diffs = {d["field"]: d for d in ok_json("diff", "HEAD")}
    assert set(diffs) == {"messages", "scratch", "note"}
    assert diffs["scratch"]["status"] == "removed"
    assert diffs["messages"]["changes"] == [{"path": [1], "op": "remove", "old": "bad tool result"},
                                            {"path": [1], "op": "add", "new": "fixed"}]  # never paired by position
    assert [e["source"] for e in ok_json("log", "-n", "2")] == ["update", "loop"]


def test_checkout_to_unchanged_commit_changes_nothing(repo, capsys):
    ok("checkout", "--to", "same")
    assert "nothing to commit" in fails(capsys, 1, "commit", "same")  # as git refuses
    made = json.loads(ok("commit", "same", "--json", "--allow-empty"))
    assert made["changed"] == [] and made["step"] == 4 and made["time_travel"] is False
    assert ok_json("diff", "HEAD") == []
    assert ok_json("show")["state"] == ok_json("show", "c3")["state"]


def test_commit_of_an_older_checkpoint_is_time_travel(repo):
    ok("checkout", "c1", "--to", "old")
    assert ok_json("status")["thread"] == "run-1"
    counter = Path("old/counter.json")
    counter.write_text("100")
    out = ok("commit", "old")
    assert "step 2 · update" in out and "superseded line" in out
    assert [e["id"] for e in ok_json("log")][1:] == ["c1", "c0"]
    assert ok_json("show", "--field", "counter")["state"] == {"counter": 100}
    assert {e["id"] for e in ok_json("log", "--all") if e["superseded"]} == {"c2", "c3"}


def test_commit_on_detached_head_is_refused(repo, capsys):
    ok("checkout", "--to", "fix")
    ok("checkout", "c2")
    assert "detached" in fails(capsys, 2, "commit", "fix")
    assert ok_json("log", "run-1")[0]["id"] == "c3"


def test_commit_bad_directory(repo, tmp_path, capsys):
    (tmp_path / "junk").mkdir()
    fails(capsys, 2, "commit", "junk")  # no manifest
    fails(capsys, 2, "commit", "missing")  # click: does not exist
    ok("checkout", "--to", "fix")
    (tmp_path / "fix" / "counter.json").write_text("{not json")
    assert "counter.json" in fails(capsys, 2, "commit", "fix")


# -- reset and reflog ---------------------------------------------------------------------------


def test_reset_keeps_the_superseded_line_and_undoes(repo):
    out = ok("reset", "HEAD~2")
    assert out.strip() == "HEAD is now at c1 (step 1) on run-1; the previous line is kept (`qvc log --all`)"
    assert [e["id"] for e in ok_json("log")] == ["c1", "c0"]
    assert git(repo, "for-each-ref", "--format=%(objectname)", "refs/qvc/superseded/").stdout.split() == [
        ok_json("show", "c3")["commit"]]
    assert ok_json("show", "c3")["id"] == "c3"  # still readable by id
    reflog = ok_json("reflog")
    assert reflog[0]["message"] == "reset: moving to c1"
    assert reflog[1]["new"] == ok_json("show", "c3")["commit"]
    made = json.loads(ok("reset", "run-1@{1}", "--json"))
    assert made == {"thread": "run-1", "id": "c3", "commit": reflog[1]["new"], "step": 3}
    assert [e["id"] for e in ok_json("log")] == ["c3", "c2", "c1", "c0"]


def test_undoing_a_reset_claims_no_kept_line_and_deletes_cleanly(repo, capsys):
    ok("reset", "HEAD~2")
    out = ok("reset", "run-1@{1}")
    assert out.strip() == "HEAD is now at c3 (step 3) on run-1"  # a fast-forward leaves nothing behind
    assert not any(e["superseded"] for e in ok_json("log", "--all"))
    with GitCheckpointStore(repo) as store:
        put(store, "other", "o0", 0, {"x": 1})
    ok("checkout", "other")
    # the line the reset left is the head's own: -d refuses only because run-1 is on no other line
    assert "not fully merged" in fails(capsys, 2, "branch", "-d", "run-1")
    ok("branch", "-D", "run-1")
    assert [r["thread"] for r in ok_json("branch")] == ["other"]


def test_status_after_undoing_a_reset_has_no_superseded_line(repo):
    ok("reset", "HEAD~2")
    assert ok_json("status")["superseded_lines"] == 1
    ok("reset", "run-1@{1}")
    assert ok_json("status")["superseded_lines"] == 0


def test_reset_by_id_and_errors(repo, capsys):
    ok("reset", "c0")
    assert ok_json("status")["head_id"] == "c0"
    ok("reset", "c3")
    assert ok_json("status")["head_id"] == "c3"
    with GitCheckpointStore(repo) as store:
        put(store, "other", "o0", 0, {"x": 1})
    assert "belongs to thread 'other'" in fails(capsys, 2, "reset", "o0")
    fails(capsys, 3, "reset", "HEAD~9")
    assert ok("reset").startswith("HEAD is now at c3")  # as git's, NAME defaults to HEAD
    ok("checkout", "c1")
    assert "detached" in fails(capsys, 2, "reset", "c0")


def test_reflog_entries_and_causes(repo):
    ok("branch", "retry", "c1")
    ok("reset", "HEAD~1")
    with GitCheckpointStore(repo) as store:
        put(store, "run-1", "c3b", 3, {"x": 1})
        put(store, "run-1", "c4b", 4, {"x": 2})
        store.delete(CheckpointConfig("run-1", "c3b"))
    entries = ok_json("reflog")
    assert [set(e) for e in entries] == [REFLOG_KEYS] * len(entries)
    messages = [e["message"] for e in entries]
    assert messages[0] == "delete: checkpoint c3b"
    assert messages[1:4] == ["loop: step 4 c4b", "loop: step 3 c3b", "reset: moving to c2"]
    assert messages[4:] == [f"loop: step {i} c{i}" for i in (3, 2, 1, 0)]
    assert [e["selector"] for e in entries] == [f"run-1@{{{i}}}" for i in range(len(entries))]
    assert entries[-1]["old"] is None and entries[0]["new"] == sha(repo, "run-1")
    assert entries[0]["old"] == entries[1]["new"]
    assert dt.datetime.fromisoformat(entries[0]["time"]).timestamp() == entries[0]["timestamp"]
    fork = ok_json("reflog", "retry")
    assert len(fork) == 1 and fork[0]["message"].startswith("fork: step 1 ") and "(fork of c1)" in fork[0]["message"]
    text = ok("reflog").splitlines()
    assert text[0].startswith(f"{sha(repo, 'run-1')[:7]} run-1@{{0}}: delete: checkpoint c3b (")
    assert len(text) == len(entries)
    assert len(ok_json("reflog", "-n", "2")) == 2
    assert ok_json("reflog", "HEAD") == entries


def test_reflog_errors(repo, capsys):
    fails(capsys, 3, "reflog", "missing")
    ok("checkout", "c1")
    assert "detached" in fails(capsys, 2, "reflog")


# -- naming checkpoints ---------------------------------------------------------------------------


@pytest.fixture
def named(tmp_path) -> Path:
    path = tmp_path / ".qvc"
    with GitCheckpointStore(path) as store:
        put(store, "t", "abcd1111", 0, {"x": 0})
        put(store, "t", "abcd2222", 1, {"x": 1})
        put(store, "t", "zz-unique-id", 2, {"x": 2})
        store.checkout("t")
    return path


def test_names_full_id_and_unique_prefix(named):
    assert ok_json("show", "abcd1111")["id"] == "abcd1111"
    assert ok_json("show", "abcd2")["id"] == "abcd2222"
    assert ok_json("show", "zz-u")["id"] == "zz-unique-id"


def test_names_ambiguous_prefix_is_exit_2(named, capsys):
    assert "ambiguous" in fails(capsys, 2, "show", "abcd")


def test_names_commit_sha_and_prefix(named):
    full = sha(named, "t~1")
    assert ok_json("show", full)["id"] == "abcd2222"
    assert ok_json("show", full[:10])["id"] == "abcd2222"
    assert ok_json("show", full.upper())["id"] == "abcd2222"


def test_names_thread_tilde_caret_and_reflog(named, capsys):
    assert ok_json("show", "t")["id"] == "zz-unique-id"
    assert ok_json("show", "t~1")["id"] == "abcd2222"
    assert ok_json("show", "t~2")["id"] == "abcd1111"
    assert ok_json("show", "t^")["id"] == "abcd2222"
    assert ok_json("show", "t~")["id"] == "abcd2222"
    assert ok_json("show", "t^^")["id"] == "abcd1111"
    assert ok_json("show", "HEAD~2")["id"] == "abcd1111"
    assert ok_json("show", "zz-unique-id~1")["id"] == "abcd2222"
    assert ok_json("show", "t@{0}")["id"] == "zz-unique-id"
    assert ok_json("show", "t@{2}")["id"] == "abcd1111"
    assert ok_json("show", "HEAD@{1}")["id"] == "abcd2222"
    assert ok_json("show", "t@{1}~1")["id"] == "abcd1111"
    fails(capsys, 3, "show", "t~3")
    fails(capsys, 3, "show", "t@{3}")
    fails(capsys, 3, "show", "abcd1111@{0}")  # @{N} needs a thread


def test_names_unknown_is_exit_3(named, capsys):
    for name in ("nope", "ffff", "0" * 40, "t~x", "nope~1"):
        assert "unknown" in fails(capsys, 3, "show", name)
        fails(capsys, 3, "log", name)
        fails(capsys, 3, "diff", name)


@pytest.mark.parametrize("thread", ["agent run/7", "exp~1", "a b~2/c^", "what@{1}", "ünï cødé"])
def test_names_odd_thread_ids(tmp_path, thread):
    with GitCheckpointStore(tmp_path / ".qvc") as store:
        for i in range(3):
            put(store, thread, f"id{i}", i, {"i": i})
    assert [r["thread"] for r in ok_json("branch")] == [thread]
    assert ok_json("show", thread)["id"] == "id2"
    assert ok_json("show", thread + "~1")["id"] == "id1"
    assert ok_json("show", thread + "~2")["id"] == "id0"
    assert ok_json("show", thread + "@{1}")["id"] == "id1"
    assert [e["id"] for e in ok_json("log", thread)] == ["id2", "id1", "id0"]
    assert ok("branch").splitlines() == [f"  {thread}"]
    ok("checkout", thread)
    assert ok_json("status")["thread"] == thread
    assert ok_json("reflog")[0]["selector"] == f"{thread}@{{0}}"
    with pytest.raises(InvalidThreadIdError):  # a typed new name follows git's branch rules (exit 2)
        invoke("branch", "-m", thread + " renamed")
    ok("branch", "-m", "renamed/7")
    assert [r["thread"] for r in ok_json("branch")] == ["renamed/7"]


def test_names_a_thread_named_like_a_suffixed_thread(tmp_path):
    with GitCheckpointStore(tmp_path / ".qvc") as store:
        for i in range(2):
            put(store, "exp", f"e{i}", i, {"i": i})
            put(store, "exp~1", f"x{i}", i, {"i": i})
    assert ok_json("show", "exp~1")["id"] == "x1"  # the thread, not exp's parent
    assert ok_json("show", "exp~1~1")["id"] == "x0"
    assert ok_json("show", "exp^")["id"] == "e0"


# -- status -------------------------------------------------------------------------------------


def test_status_json_keys_and_text(repo):
    st = ok_json("status")
    assert set(st) == STATUS_KEYS
    assert st == {"path": str(repo), "thread": "run-1", "head": sha(repo, "run-1"), "head_id": "c3", "head_step": 3,
                  "durability": "sync", "threads": 1, "superseded_lines": 0, "pending_writes": 0, "recovery": None,
                  "maintenance_due": st["maintenance_due"], "replication": [], "damaged": None,
                  "failures": 0, "last_failures": [], "quarantine": [], "problems": []}
    lines = ok("status").splitlines()
    assert lines[:3] == [f"repository {repo}", "On thread run-1, head c3 (step 3)",
                         "durability sync · 1 thread(s) · 0 superseded line(s) · 0 checkpoint(s) with pending writes"]
    ok("reset", "c1")
    assert ok_json("status")["superseded_lines"] == 1


def test_status_on_an_empty_repository(tmp_path):
    ok("init")
    assert "On thread main (no checkpoints yet)" in ok("status")
    st = ok_json("status")
    assert st["thread"] == "main" and st["head"] is None and st["head_step"] is None


# -- gc and fsck --------------------------------------------------------------------------------


def test_gc_keeps_everything_readable(repo):
    ok("reset", "c1")
    ok("branch", "retry", "c2")
    before = {name: ok(*name.split()) for name in ("log --all --json", "show c3 --json", "show retry --json",
                                                    "diff c0 c3 --json", "branch --json")}
    out = ok("gc")
    assert out.startswith(f"Packed {repo}: ")
    assert not list((repo / "objects").glob("[0-9a-f][0-9a-f]/*"))  # no loose objects left
    for name, text in before.items():
        assert ok(*name.split()) == text, name
    assert ok("fsck").endswith(": ok\n")


def test_gc_prune_drops_deleted_checkpoints(repo, capsys):
    ok("branch", "doomed", "c1")
    with GitCheckpointStore(repo) as store:
        put(store, "doomed", "secret", 9, {"password": "hunter2"})
    doomed = sha(repo, "doomed")
    blob = git(repo, "rev-parse", "doomed:password").stdout.strip()
    ok("branch", "-D", "doomed")
    assert git(repo, "cat-file", "-e", doomed, check=False).returncode == 0  # deleted, still on disk
    ok("gc")
    assert git(repo, "cat-file", "-e", doomed, check=False).returncode == 0  # gc alone keeps it
    out = ok("gc", "--prune")
    assert out.startswith(f"Purged and packed {repo}: ")
    assert git(repo, "cat-file", "-e", doomed, check=False).returncode != 0
    assert git(repo, "cat-file", "-e", blob, check=False).returncode != 0
    fails(capsys, 3, "show", doomed)
    fails(capsys, 3, "show", "secret")
    assert [e["id"] for e in ok_json("log")] == ["c3", "c2", "c1", "c0"]
    assert ok("fsck").endswith(": ok\n")


def test_fsck_clean(repo):
    assert ok("fsck").strip() == "checked 1 ref(s), 4 checkpoint(s), 0 set(s) of pending writes: ok"
    assert ok_json("fsck") == {"ok": True, "refs": 1, "checkpoints": 4, "pending_writes": 0, "problems": [],
                               "warnings": []}
    assert qvc.cli.main(["fsck"]) == 0


def _loose(repo: Path) -> None:
    """Explode every pack into loose objects (so one object can be damaged on its own)."""
    packs = sorted((repo / "objects" / "pack").glob("*.pack"))
    moved = []
    for pack in packs:
        target = pack.with_suffix(".moved")
        pack.rename(target)
        pack.with_suffix(".idx").unlink()
        moved.append(target)
    for target in moved:
        run_git(repo, "unpack-objects", "-q", input=target.read_bytes(), text=False)
        target.unlink()


def test_fsck_finds_a_corrupt_blob(repo, capsys):
    blob = git(repo, "rev-parse", "run-1~1:counter").stdout.strip()
    _loose(repo)
    path = repo / "objects" / blob[:2] / blob[2:]
    assert path.is_file()
    path.chmod(0o644)
    path.write_bytes(b"\x78\x9c garbage, not zlib")
    capsys.readouterr()
    assert qvc.cli.main(["fsck"]) == 5
    cap = capsys.readouterr()
    problems = [ln for ln in cap.err.splitlines() if ln.startswith("error: ")]
    assert problems and any(blob in ln or "c2" in ln or blob[:12] in ln for ln in problems), cap.err
    assert "Traceback" not in cap.err
    assert re.search(r"\d+ problem\(s\)$", cap.out.strip())
    assert qvc.cli.main(["fsck", "--json"]) == 5
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["problems"]
    assert any("thread 'run-1' checkpoint c2" in ln and "field 'counter'" in ln for ln in problems), problems
    assert report["checkpoints"] == 4  # every checkpoint counted, the damaged one too
    assert qvc.cli.main(["show", "c2"]) == 0  # the healthy fields stay readable; the damaged one is marked
    assert "counter: DAMAGED" in capsys.readouterr().out
    code = qvc.cli.main(["show", "c2", "--field", "counter"])
    err = capsys.readouterr().err
    assert code == 5 and err.startswith("qvc: ") and err.count("\n") == 1, err


def test_fsck_finds_a_corrupt_ref(repo, capsys):
    with GitCheckpointStore(repo) as store:
        put(store, "other", "o0", 0, {"x": 1})
    refs = repo / "refs" / "heads"
    (refs / "other").parent.mkdir(parents=True, exist_ok=True)
    (refs / "other").write_text("1234567890123456789012345678901234567890\n")  # a commit that does not exist
    capsys.readouterr()
    assert qvc.cli.main(["fsck"]) == 5
    cap = capsys.readouterr()
    assert any("other" in ln for ln in cap.err.splitlines() if ln.startswith("error: ")), cap.err
    assert "Traceback" not in cap.err


def test_fsck_finds_a_ref_to_a_non_checkpoint(repo, capsys):
    blob = git(repo, "rev-parse", "run-1:counter").stdout.strip()
    (repo / "refs" / "heads" / "bogus").write_text(blob + "\n")
    capsys.readouterr()
    assert qvc.cli.main(["fsck"]) == 5
    assert any("bogus" in ln for ln in capsys.readouterr().err.splitlines())


# -- completion, colours, help --------------------------------------------------------------------


@pytest.mark.parametrize("shell,marker", [("bash", "complete -o nosort -F _qvc_completion qvc"),
                                          ("zsh", "#compdef qvc"), ("fish", "complete --no-files --command qvc")])
def test_completion_script(shell, marker):
    out = ok("completion", shell)
    assert marker in out and "_QVC_COMPLETE" in out


def test_completion_unknown_shell(capsys):
    fails(capsys, 2, "completion", "tcsh")


def test_thread_name_completion_in_process(repo):
    from click.shell_completion import ShellComplete

    with GitCheckpointStore(repo) as store:
        put(store, "run-2", "r0", 0, {"x": 1})
        put(store, "other", "o0", 0, {"x": 1})
    comp = ShellComplete(cli, {}, "qvc", "_QVC_COMPLETE")
    assert [c.value for c in comp.get_completions(["log"], "run")] == ["run-1", "run-2"]
    assert [c.value for c in comp.get_completions(["checkout"], "")] == ["HEAD", "other", "run-1", "run-2"]
    assert [c.value for c in comp.get_completions(["diff", "run-1"], "o")] == ["other"]


def test_no_colors_when_not_a_terminal_and_always_forces_them(repo):
    ok("branch", "retry", "c1")
    for args in (["log"], ["log", "--oneline"], ["branch", "-v"], ["status"], ["diff", "c3"], ["show"],
                 ["log", "--graph", "--all"], ["reflog"]):
        assert ANSI.search(ok(*args)) is None, args
        assert ANSI.search(ok("--color=never", *args)) is None, args
        assert ANSI.search(ok("--color=always", *args)), args
    plain = ok("log", "--oneline")
    assert ANSI.sub("", ok("--color=always", "log", "--oneline")) == plain


def test_help_on_every_command_has_an_example():
    assert "Example" in ok("--help")
    for name in cli.commands:
        out = ok(name, "--help")
        assert "Example" in out, name
        assert out.startswith("Usage: ") and f" {name} " in out.splitlines()[0]
    assert ok("branch", "-h") == ok("branch", "--help")


def test_version():
    assert ok("--version").strip() == f"qvc, version {qvc.__version__}"


def test_usage_errors_are_one_line(capsys):
    assert "No such command 'frobnicate'" in fails(capsys, 2, "frobnicate")
    assert "`qvc log --help`" in fails(capsys, 2, "log", "--bogus")
    assert "`qvc show --help`" in fails(capsys, 2, "show", "a", "b")


def test_a_group_alone_shows_its_help(capsys):
    """`qvc` or `qvc bisect` with nothing more: the usage and the commands, as git shows its
    usage (not a usage line cut from it), on stderr with the usage errors' status."""
    for args, listed in (((), ("log", "status", "push")), (("bisect",), ("run",))):
        assert qvc.cli.main(list(args)) == qvc.cli.EXIT_USAGE
        err = capsys.readouterr().err
        assert err.startswith(f"Usage: qvc {' '.join(args)}".rstrip() + " [OPTIONS] COMMAND"), err
        assert "Commands:" in err and all(f"  {name} " in err for name in listed), err


def test_exit_codes_are_distinct():
    codes = [qvc.cli.EXIT_ERROR, qvc.cli.EXIT_USAGE, qvc.cli.EXIT_NOT_FOUND, qvc.cli.EXIT_CONFLICT,
             qvc.cli.EXIT_CORRUPT, qvc.cli.EXIT_DURABILITY, qvc.cli.EXIT_NOT_A_REPO]
    assert len(set(codes)) == len(codes) and 0 not in codes


def test_ago():
    from qvc.cli import ago

    assert ago(1000, now=1000) == "just now"
    assert ago(1000, now=1001) == "1 second ago"
    assert ago(1000, now=1000 + 180) == "3 minutes ago"
    assert ago(1000, now=1000 + 2 * 86400) == "2 days ago"
    assert ago(1000, now=900) == "in the future"
