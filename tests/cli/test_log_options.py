"""``qvc log``'s git options through the real ``qvc`` console script, each checked against the
real ``git`` on the same commits (a qvc repository is a git repository): ``-N``, revisions as git
takes them (``A ^B``, ``B..A``, ``A...B``), ``--first-parent``, ``--topo-order``/``--date-order``,
``--graph`` drawn as ``git log --graph`` draws it, ``-S``/``-G``, ``--name-only``/``--name-status``,
``--decorate`` with tags, and ``--since``/``--until`` in git's approxidate phrases."""

from __future__ import annotations

import json
import re
import shutil
import time
from datetime import date, timedelta

import pytest
from helpers import put, qvc, run_git

from qvc import GitCheckpointStore
from qvc.store.fork import fork_thread


def next_second() -> None:
    """Wait for the clock's next second: commit times are whole seconds, and the two orders
    differ only where times do."""
    time.sleep(int(time.time()) + 1 - time.time() + 0.01)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> dict:
    """Thread t1: a0, a1, (later) a2, a3; thread t2 forked from a1: its fork checkpoint, b0, b1.
    Times interleave: a0 a1 fork b0 | a2 | b1 | a3 (each | a new second), so date order braids
    the threads and topological order does not. Tags: v1 (lightweight) and v2 (annotated) on
    a1, v3 on b1."""
    path = tmp_path_factory.mktemp("logopts") / ".qvc"
    with GitCheckpointStore(path) as store:
        put(store, "t1", "a0", 0, {"messages": ["hello"], "n": 0})
        put(store, "t1", "a1", 1, {"messages": ["hello", "how are you?"], "n": 1})
        store.checkout("t1")
        fork_thread(store, store.resolve("a1"), "t2")
        put(store, "t2", "b0", 2, {"messages": ["hello", "how are you?", "rate limit hit"], "n": 1,
                                   "note": "retry"})
        next_second()
        put(store, "t1", "a2", 2, {"messages": ["hello", "how are you?", "fine, thanks"], "n": 2})
        next_second()
        put(store, "t2", "b1", 3, {"messages": ["hello", "how are you?", "rate limit hit", "ok now"], "n": 1})
        next_second()
        put(store, "t1", "a3", 3, {"messages": ["hello", "how are you?", "fine, thanks", "bye"], "n": 2,
                                   "note": "done"})
        commits = {e: store.resolve(e) for e in ("a0", "a1", "a2", "a3", "b0", "b1")}
    run_git(path, "tag", "v1", commits["a1"])
    run_git(path, "-c", "user.name=t", "-c", "user.email=t@t", "tag", "-a", "-m", "annotated", "v2", commits["a1"])
    run_git(path, "tag", "v3", commits["b1"])
    return {"path": path, "commits": commits, "by_sha": {v: k for k, v in commits.items()}}


def log(repo, *args: str, check: int = 0):
    return qvc("--repo", str(repo["path"]), "log", *args, check=check)


def shas(repo, *args: str) -> list[str]:
    return log(repo, "--format=%H", *args).stdout.split()


def names(repo, *args: str) -> list[str]:
    """The checkpoint ids `qvc log` lists (the fork checkpoint, with a random id, as ``fork``)."""
    return [e["id"] if e["id"] in repo["commits"] else "fork" for e in json.loads(log(repo, "--json", *args).stdout)]


def git_list(repo, *args: str) -> list[str]:
    return run_git(repo["path"], "rev-list", *args, "--").stdout.split()


def test_dash_number_is_max_count(repo):
    assert names(repo, "-2") == ["a3", "a2"]
    assert names(repo, "-2") == names(repo, "-n", "2") == names(repo, "--max-count=2") == names(repo, "-n2")
    assert names(repo, "-1", "t2") == ["b1"]
    assert names(repo, "-3", "-n", "1") == ["a3"]  # the last one given wins, as in git
    assert names(repo, "-1", "--", "note") == ["a3"]


@pytest.mark.parametrize("revisions", [["t1", "^t2"], ["t2..t1"], ["t1...t2"], ["t1", "t2"], ["^t1", "t2"],
                                       ["t2", "^a0"], ["a3...b0"], ["t1..."], ["^t1"]])
def test_revisions_as_git_takes_them(repo, revisions):
    as_git = [re.sub(r"\b[ab]\d\b", lambda m: repo["commits"][m.group(0)], r) for r in revisions]  # ids: SHAs
    assert shas(repo, *revisions) == git_list(repo, "--date-order", *as_git)


def test_revision_names_are_qvcs(repo):
    assert names(repo, "t2", "^a1") == ["b1", "b0", "fork"]
    assert names(repo, "t1...t2") == ["a3", "b1", "a2", "b0", "fork"]
    assert names(repo, "b0..t2", "a1..a2") == ["b1", "a2"]
    assert "unknown revision" in log(repo, "t1", "^nowhere", check=3).stderr


def test_topo_and_date_order_are_gits(repo):
    every = ["--branches", "--glob=refs/qvc/superseded/*"]
    topo, by_date = shas(repo, "--all", "--topo-order"), shas(repo, "--all", "--date-order")
    assert topo == git_list(repo, "--topo-order", *every)
    assert by_date == git_list(repo, "--date-order", *every) == shas(repo, "--all")
    assert topo != by_date  # the fixture braids the threads by time
    assert shas(repo, "t1", "t2", "--topo-order") == git_list(repo, "--topo-order", "t1", "t2")
    assert shas(repo, "--first-parent", "t1", "t2") == git_list(repo, "--first-parent", "--date-order", "t1", "t2")
    assert names(repo, "--first-parent", "t2") == ["b1", "b0", "fork", "a1", "a0"]


def graph_lines(text: str) -> list[str]:
    """Each line of a ``--graph`` as its graph characters and abbreviated commit, nothing else."""
    out = []
    for line in text.rstrip("\n").split("\n"):
        m = re.match(r"([*|/\\ _.-]*?)(?:([0-9a-f]{7,40})(?:\s|$)|$)", line)
        assert m is not None, line
        out.append(m.group(1).rstrip() + (" " + m.group(2)[:7] if m.group(2) else ""))
    return out


@pytest.mark.parametrize("args", [["--all"], ["t1", "t2"], ["t2"], ["--all", "--date-order"], ["t1...t2"],
                                  ["--all", "-n", "4"], ["--all", "--first-parent"]])
def test_graph_is_drawn_in_gits_order(repo, args):
    every = ["--branches", "--glob=refs/qvc/superseded/*"] if "--all" in args else []
    rest = [a for a in args if a != "--all"]
    mine = graph_lines(log(repo, "--graph", *args).stdout)
    gits = graph_lines(run_git(repo["path"], "log", "--graph", "--format=%H", *every, *rest, "--").stdout)
    assert mine == gits and sum(bool(re.search(r" [0-9a-f]{7}$", line)) for line in mine) == len(shas(repo, *args))
    for fmt in ("%H", "%H%n%n%H"):  # qvc's --format beside the graph: git's own drawing, line for line
        assert log(repo, "--graph", f"--format={fmt}", *args).stdout == run_git(
            repo["path"], "log", "--graph", f"--format={fmt}", *every, *rest, "--").stdout
    if args == ["--all"]:  # each line drawn whole: t1's own checkpoints together, then t2's
        short = {sha[:7]: name for sha, name in repo["by_sha"].items()}
        order = [short.get(line.split()[-1]) for line in mine if "*" in line]
        assert [o for o in order if o] in (["a3", "a2", "b1", "b0", "a1", "a0"], ["b1", "b0", "a3", "a2", "a1", "a0"])


def test_pickaxe_S_and_G(repo):
    assert names(repo, "--all", "-S", "rate limit") == ["b0"]  # added once; b1 keeps it
    assert names(repo, "--all", "-S", "how are") == ["a1"]
    assert names(repo, "--all", "-S", "retry") == ["b1", "b0"]  # a field added, then removed
    assert names(repo, "-S", "hello") == ["a0"]
    assert names(repo, "--all", "-G", "^(ok|bye)") == ["a3", "b1"]
    assert names(repo, "--all", "-G", "thanks$") == ["a2"]
    assert names(repo, "--all", "-S", r"\bfine\b|\bok\b", "--pickaxe-regex") == ["b1", "a2"]
    assert names(repo, "--all", "-S", "done", "--", "messages") == []  # only in note
    assert names(repo, "--all", "-S", "done", "--", "note") == ["a3"]
    assert names(repo, "--all", "-G", "e", "-n", "1", "--reverse") == ["a3"]
    assert log(repo, "-G", "(", check=2).stderr.startswith("qvc: bad -G pattern")
    assert log(repo, "--pickaxe-regex", check=2).stderr.count("\n") == 1


def test_name_only_and_name_status(repo):
    out = log(repo, "--oneline", "--name-status", "-2", "t1").stdout.splitlines()
    assert re.match(r"[0-9a-f]{7} a3 ", out[0]) and out[1:3] == ["M\tmessages", "A\tnote"]
    assert re.match(r"[0-9a-f]{7} a2 ", out[3]) and out[4:] == ["M\tmessages", "M\tn"]
    assert log(repo, "--format=%(id)", "--name-only", "-1").stdout == "a3\n\nmessages\nnote\n"  # git's layout
    full = log(repo, "--name-status", "-1", "t2").stdout.splitlines()
    assert full[3].startswith("Changed: ") and full[4:] == ["M\tmessages", "D\tnote"]
    assert log(repo, "--oneline", "--name-status", "-1", "b0").stdout.splitlines()[1:] == ["M\tmessages", "A\tnote"]
    assert log(repo, "--format=", "--name-status", "a0").stdout.split() == ["A", "messages", "A", "n"]
    assert "cannot be used together" in log(repo, "--name-only", "--name-status", check=2).stderr


def test_decorate_as_git_does(repo):
    # qvc's %D and git's own decorations name the same refs in the same order
    for rev in ("a1", "t2"):
        sha = repo["commits"]["a1" if rev == "a1" else "b1"]
        gits = run_git(repo["path"], "log", "-1", "--decorate=short", "--format=%D", sha).stdout.strip()
        assert log(repo, "-1", "--format=%D", sha).stdout.strip() == gits
    assert log(repo, "-1", "--format=%D", repo["commits"]["a1"]).stdout.strip() == "tag: v2, tag: v1"
    first = log(repo, "--oneline", "-1").stdout
    assert first.rstrip().endswith("(HEAD -> t1)")
    tagged = log(repo, "--oneline", "--decorate", "t2", "-1").stdout
    assert tagged.rstrip().endswith("(tag: v3, t2)")
    assert log(repo, "--oneline", "--decorate=full", "t2", "-1").stdout.rstrip().endswith(
        "(tag: refs/tags/v3, refs/heads/t2)")
    assert "(" not in log(repo, "--oneline", "--no-decorate", "-1").stdout
    assert "(" not in log(repo, "--oneline", "--decorate=auto", "-1").stdout  # not a terminal
    assert "(tag: v2, tag: v1)" in log(repo, "--graph", "--all").stdout
    assert "(tag: refs/tags/v3, refs/heads/t2)" in log(repo, "--graph", "--all", "--decorate=full").stdout
    assert "tag:" not in log(repo, "--graph", "--all", "--no-decorate").stdout
    [b1] = json.loads(log(repo, "--json", "-1", "t2").stdout)
    assert b1["tags"] == ["v3"] and b1["heads"] == ["t2"]


def test_since_and_until_in_gits_phrases(repo):
    every = names(repo, "--all")
    assert names(repo, "--all", "--since", "last week") == every
    assert names(repo, "--all", "--after", "2 days ago", "--before", "now") == every
    assert names(repo, "--all", "--until", "yesterday") == []
    yesterday = (date.today() - timedelta(days=1)).isoformat()
    assert names(repo, "--all", "--since", yesterday) == every
    assert names(repo, "--all", "--until", "last year") == []
    for phrase in ("2 days ago", "yesterday", "last week"):
        assert shas(repo, "--all", "--since", phrase) == git_list(repo, "--date-order", "--branches",
                                                                  f"--since={phrase}")
    bad = log(repo, "--since", "a week ago", check=2)
    assert bad.stderr.startswith("qvc: ") and bad.stderr.count("\n") == 1


def test_graph_with_qvcs_format(repo):
    out = log(repo, "--graph", "--all", "--format=%(id)%d%n%(changed)").stdout.splitlines()
    assert out[0] == "* a3 (HEAD -> t1)" and re.fullmatch(r"\| +messages,note", out[1])
    assert "* a1 (tag: v2, tag: v1)" in out


def test_graph_refuses_what_git_cannot_draw_here(repo):
    for args in (["-S", "x"], ["--name-only"], ["--reverse"], ["--json"]):
        proc = log(repo, "--graph", *args, check=2)
        assert proc.stderr.count("\n") == 1 and "--graph" in proc.stderr
    since = log(repo, "--graph", "--all", "--since", "last week").stdout
    assert graph_lines(since) == graph_lines(run_git(repo["path"], "log", "--graph", "--format=%H", "--branches",
                                                     "--glob=refs/qvc/superseded/*", "--since=last week").stdout)


@pytest.mark.parametrize("order", ["--topo-order", "--date-order"])
def test_where_git_cannot_read_the_repository_the_order_is_still_gits(repo, tmp_path, order):
    """A thread whose head is missing makes `git rev-list --branches` fail: qvc's own walk then
    lists the readable threads, in the order git gives them."""
    copy = tmp_path / "copy.qvc"
    shutil.copytree(repo["path"], copy)
    (copy / "refs" / "heads" / "broken").write_text("0123456789abcdef0123456789abcdef01234567\n")
    proc = qvc("--repo", str(copy), "log", "--all", order, "--format=%H")
    assert "broken" in proc.stderr  # named as damaged, and skipped
    assert proc.stdout.split() == git_list(repo, order, "t1", "t2")


def test_pickaxe_searches_langgraph_messages_as_shown(tmp_path):
    """-S and -G read a LangGraph checkpoint's messages as people see them (through the viewer),
    not as the serializer's bytes."""
    pytest.importorskip("langgraph.graph")
    from langgraph.graph import START, MessagesState, StateGraph

    from qvc.integrations.langgraph import QvcSaver

    g = StateGraph(MessagesState)
    g.add_node("bot", lambda s: {"messages": [("ai", "hello from the model")]})
    g.add_edge(START, "bot")
    path = tmp_path / "m.qvc"
    with QvcSaver(path) as saver:
        g.compile(checkpointer=saver).invoke({"messages": [("user", "hi there")]}, {"configurable": {"thread_id": "m"}})
    every = json.loads(qvc("--repo", str(path), "log", "--json", "m").stdout)
    found = json.loads(qvc("--repo", str(path), "log", "--json", "-S", "hello from", "m").stdout)
    assert [e["commit"] for e in found] == [every[0]["commit"]]  # the step that added the answer
    asked = json.loads(qvc("--repo", str(path), "log", "--json", "-G", "^hi there$", "m", "--",
                              "messages").stdout)
    assert len(asked) == 1 and asked[0]["commit"] == every[1]["commit"]  # the step that took the input
