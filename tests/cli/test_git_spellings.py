"""git's spellings (issue 32, item 6) through the real CLI as a subprocess, each compared with what
git itself does: ``diff A..B``, ``diff A B -- FIELD``, ``show REV:FIELD``, ``branch -a/-r/--contains/
--show-current/-f``, ``status -s``, ``switch``, ``rev-parse``; and ``runs`` with no runs says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import test_git_manners
from helpers import qvc, qvc_json, run_git

work = test_git_manners.work  # thread main (m0..m2, HEAD; fields plan and n), thread fork (from m1, f1..f4)


@pytest.fixture
def repo(work) -> str:
    return str(work / ".qvc")


def test_diff_two_dots_and_fields_after_dashes(repo):
    two = qvc("--repo", repo, "diff", "main~2", "main").stdout
    assert qvc("--repo", repo, "diff", "main~2..main").stdout == two != ""
    assert qvc("--repo", repo, "diff", "main~2..").stdout == two  # a missing side is HEAD
    assert qvc("--repo", repo, "diff", "..main~1").stdout == qvc("--repo", repo, "diff", "HEAD", "main~1").stdout
    only = json.loads(qvc("--repo", repo, "diff", "--json", "main~2", "main", "--", "plan").stdout)
    assert [d["field"] for d in only] == ["plan"]
    only = json.loads(qvc("--repo", repo, "diff", "--json", "main~2..main", "--", "n").stdout)
    assert [d["field"] for d in only] == ["n"]
    assert "plan" not in qvc("--repo", repo, "diff", "main", "--", "n").stdout
    qvc("--repo", repo, "diff", "nope..main", check=3)


def test_show_rev_colon_field(repo):
    assert qvc("--repo", repo, "show", "main:plan").stdout == '["p0", "p1", "p2"]\n'
    assert qvc("--repo", repo, "show", "main~2:n").stdout == "0\n"
    assert qvc_json("--repo", repo, "show", "fork:n") == 104
    proc = qvc("--repo", repo, "show", "main:nope", check=3)
    assert proc.stderr == "qvc: checkpoint main has no field 'nope' (fields: n, plan)\n"
    qvc("--repo", repo, "show", "nope:plan", check=3)


def test_branch_show_current_contains_and_force(repo):
    assert qvc("--repo", repo, "branch", "--show-current").stdout == "main\n"
    qvc("--repo", repo, "checkout", "main~1")
    assert qvc("--repo", repo, "branch", "--show-current").stdout == ""  # detached: nothing, as git
    qvc("--repo", repo, "checkout", "main")
    assert qvc("--repo", repo, "branch", "--contains", "main~1").stdout == "  fork\n* main\n"
    assert qvc("--repo", repo, "branch", "--contains", "fork").stdout == "  fork\n"
    assert qvc("--repo", repo, "branch", "--contains", "main").stdout == "* main\n"
    # -f moves an existing thread (time travel, its line kept); the current one is refused, as git does
    before = qvc_json("--repo", repo, "show", "fork")["commit"]
    assert "Moved thread fork" in qvc("--repo", repo, "branch", "-f", "fork", "fork~1").stdout
    assert qvc_json("--repo", repo, "show", "fork")["id"] == "f3"
    assert before in qvc("--repo", repo, "log", "--all", "--format=%H").stdout.split()
    qvc("--repo", repo, "branch", "fork", "fork~1", check=4)  # without -f: taken
    qvc("--repo", repo, "branch", "-f", "main", "main~1", check=2)
    qvc("--repo", repo, "branch", "-f", "new", "main~1")  # a new name: a fork
    assert qvc("--repo", repo, "branch", "--show-current").stdout == "main\n"
    qvc("--repo", repo, "branch", "-d", "fork", check=2)  # kept lines: refused
    assert "Deleted thread fork" in qvc("--repo", repo, "branch", "-d", "-f", "fork").stdout  # git: -d -f is -D


def test_branch_remote_threads(repo, tmp_path):
    server = tmp_path / "hub.git"
    run_git(None, "init", "-q", "--bare", str(server))
    qvc("--repo", repo, "remote", "add", "origin", str(server))
    qvc("--repo", repo, "push", "-q", "origin", "fork")
    assert qvc("--repo", repo, "branch", "-r").stdout == "  origin/fork\n"
    assert qvc("--repo", repo, "branch", "-a").stdout == "  fork\n* main\n  remotes/origin/fork\n"
    rows = qvc_json("--repo", repo, "branch", "-r", "-v")
    assert [(r["thread"], r["head_id"], r["remote"]) for r in rows] == [("origin/fork", "f4", True)]
    assert qvc("--repo", repo, "branch", "-a", "--contains", "main").stdout == "* main\n"
    # git: `git branch -r` lists the same remote-tracking branches
    assert run_git(repo, "branch", "-r").stdout.split() == ["origin/fork"]


def test_switch(repo, tmp_path):
    assert qvc("--repo", repo, "switch", "fork").stdout == "Switched to thread 'fork'\n"
    assert qvc("--repo", repo, "branch", "--show-current").stdout == "fork\n"
    made = qvc_json("--repo", repo, "switch", "-c", "retry", "main~1")
    assert made["thread"] == "retry" and not made["detached"]
    assert qvc("--repo", repo, "switch", "-c", "again").stdout.startswith("Switched to a new thread 'again'")
    proc = qvc("--repo", repo, "switch", "main~1", check=3)  # a checkpoint: git wants --detach
    assert "--detach" in proc.stderr and proc.stderr.count("\n") == 1
    detached = qvc_json("--repo", repo, "switch", "--detach", "main")
    assert detached["detached"] and detached["thread"] is None
    assert detached["head"] == qvc_json("--repo", repo, "show", "main")["commit"]
    qvc("--repo", repo, "switch", "nope", check=3)
    qvc("--repo", repo, "switch", "main", "main~1", check=2)
    # a thread only a remote has: forked locally from REMOTE/THREAD, as git's switch guesses
    server = tmp_path / "hub.git"
    run_git(None, "init", "-q", "--bare", str(server))
    qvc("--repo", repo, "remote", "add", "origin", str(server))
    qvc("--repo", repo, "push", "-q")
    other = str(tmp_path / "other.qvc")
    qvc("clone", "-q", "--thread", "main", str(server), other)
    qvc("--repo", other, "fetch", "-q")
    assert "Switched to a new thread 'fork'" in qvc("--repo", other, "switch", "fork").stdout
    assert [e["id"] for e in qvc_json("--repo", other, "log", "-n", "1", "fork~1")] == ["f4"]


def test_rev_parse(repo):
    heads = {line.split()[1]: line.split()[0] for line in run_git(repo, "show-ref").stdout.splitlines()}
    main = heads["refs/heads/main"]
    assert qvc("--repo", repo, "rev-parse", "HEAD", "fork").stdout == f"{main}\n{heads['refs/heads/fork']}\n"
    assert qvc("--repo", repo, "rev-parse", "main~1").stdout == run_git(repo, "rev-parse", "main~1").stdout
    short = qvc("--repo", repo, "rev-parse", "--short", "HEAD").stdout.strip()
    assert short == run_git(repo, "rev-parse", "--short", "HEAD").stdout.strip()
    assert qvc("--repo", repo, "rev-parse", "--short=10", "HEAD").stdout == main[:10] + "\n"
    assert qvc("--repo", repo, "rev-parse", short).stdout == main + "\n"  # typed back
    assert qvc("--repo", repo, "rev-parse", "--abbrev-ref", "HEAD").stdout == "main\n"
    qvc("--repo", repo, "checkout", "fork~1")
    assert qvc("--repo", repo, "rev-parse", "--abbrev-ref", "HEAD").stdout == "HEAD\n"
    proc = qvc("--repo", repo, "rev-parse", "nope", check=3)
    assert proc.stderr.count("\n") == 1


def test_status_short(repo):
    assert qvc("--repo", repo, "status", "-s").stdout == ""  # all is well: nothing, as git
    assert qvc("--repo", repo, "status", "-sb").stdout == "## main\n"
    qvc("--repo", repo, "checkout", "main~1")
    assert qvc("--repo", repo, "status", "-s", "-b").stdout == "## HEAD (no thread)\n"
    qvc("--repo", repo, "checkout", "main")
    with open(Path(repo) / "refs" / "heads" / "main", "w") as f:
        f.write("0" * 40 + "\n")  # the head names a missing commit
    lines = qvc("--repo", repo, "status", "-s", "--branch").stdout.splitlines()
    assert lines[0] == "## main" and lines[1].startswith("!! thread main is damaged: ")


def test_runs_with_none_says_so(repo):
    assert qvc("--repo", repo, "runs").stdout == "no runs (qvc.runs records them; see docs/runs.md)\n"
    assert json.loads(qvc("--repo", repo, "runs", "--json").stdout) == []
