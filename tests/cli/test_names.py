"""Names and what is printed (issue 15, part B), with the ``qvc`` command as a real process.

Thread names typed on the command line to create a thread are refused as ``git
check-ref-format --branch`` refuses them (exit 2); the library keeps taking any thread id, and
everything the CLI prints escapes control characters, so one thread is always one row; the
server answers for any thread id (a newline, 300 characters).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from helpers import child_env, put, qvc, qvc_json, run_git  # noqa: E402

from qvc import GitCheckpointStore  # noqa: E402
from qvc.store.refnames import branch_name_problem  # noqa: E402

GIT_REFUSES = ["a\nb", "\x01", "tab\there", "a b", "HEAD", "france~1", "x^", "a:b", "a?", "a*", "a[", "a\\b",
               "a..b", "a@{1}", "@{", "-x", "-", "/a", "a/", "a//b", "a.lock", "a/b.lock/c", ".a", "a/.b", "a.",
               "a\x7f", ""]
GIT_TAKES = ["ok", "a/b", "run-7", "run/s1/r2", "é", "a@b", "a.b", "HEAD2", "head", "x.lock2", "a/-b", "ünï-cødé",
             "t" * 300]
ODD = ["a\nb", "\x01x\x1b[2J", "tab\there", "t" * 300, 'quote"back\\slash', "plain", '"a\\nb"']
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # anything but \t and \n, which end cells and rows


def test_the_rules_are_gits(tmp_path):
    for name in GIT_REFUSES + GIT_TAKES:
        git = run_git(None, "check-ref-format", "--branch", name, check=False).returncode == 0
        assert git == (branch_name_problem(name) is None), (name, branch_name_problem(name))
    # `@` alone: check-ref-format --branch reads it as HEAD's branch; `git branch @` refuses it, so do we
    assert branch_name_problem("@") is not None


@pytest.fixture
def work(tmp_path) -> Path:
    with GitCheckpointStore(tmp_path / "work" / ".qvc") as store:
        put(store, "main", "m0", 0, {"n": 0})
        put(store, "main", "m1", 1, {"n": 1})
        store.checkout("main")
    return tmp_path / "work"


#: one typed name of each kind of rule, through the real command (test_the_rules_are_gits checks
#: every name of GIT_REFUSES against git's own rules, in process)
TYPED = ["a\nb", "a b", "HEAD", "france~1", "a..b", "a@{1}", "-x", "-", "/a", "a.lock", ".a", "a\x7f"]


def test_creating_a_thread_from_a_typed_name_refuses_what_git_refuses(work):
    assert set(TYPED) <= set(GIT_REFUSES)
    for k, name in enumerate(TYPED):
        commands = [["branch", "--", name]] + ([["checkout", "-b", name], ["branch", "-m", "--", name]]
                                               if k % 4 == 0 else [])
        for args in commands:
            proc = qvc(*args, cwd=work, check=2)
            assert proc.stderr.startswith("qvc: ") and proc.stderr.count("\n") == 1, (args, proc.stderr)
            if name not in ("-x", "-"):
                assert "not a valid thread name" in proc.stderr, (args, proc.stderr)
            assert CONTROL.search(proc.stderr) is None, proc.stderr
    assert [r["thread"] for r in qvc_json("branch", cwd=work)] == ["main"]
    assert qvc_json("status", cwd=work)["thread"] == "main"
    for name in ("run/s1/r2", "ünï-cødé", "a@b"):
        qvc("branch", name, "m0", cwd=work)
    qvc("checkout", "-b", "x.lock2", cwd=work)
    qvc("branch", "-m", "renamed.ok", cwd=work)
    assert [r["thread"] for r in qvc_json("branch", cwd=work)] == ["a@b", "main", "renamed.ok", "run/s1/r2", "ünï-cødé"]


@pytest.fixture
def odd(tmp_path) -> Path:
    """Threads the library took from programs (any string), HEAD on the one with a newline."""
    with GitCheckpointStore(tmp_path / "odd" / ".qvc") as store:
        for k, thread in enumerate(ODD):
            put(store, thread, f"id{k}", 0, {"n": k})
            put(store, thread, f"id{k}b", 1, {"n": k + 1})
        store.checkout("a\nb")
    return tmp_path / "odd"


def rows(text: str) -> list[str]:
    assert CONTROL.search(text) is None, repr(text)
    return text.splitlines()


def test_one_thread_is_one_row(odd):
    listed = rows(qvc("branch", cwd=odd).stdout)
    assert len(listed) == len(ODD)
    assert '* "a\\nb"' in listed and '  "\\001x\\033[2J"' in listed and '  "tab\\there"' in listed
    assert "  plain" in listed  # printable: as it is
    # a name holding `"` or `\\` is quoted too, as git quotes such paths: no two names look alike
    assert '  "quote\\"back\\\\slash"' in listed and '  "\\"a\\\\nb\\""' in listed
    assert len(rows(qvc("branch", "-v", cwd=odd).stdout)) == len(ODD)
    assert len(rows(qvc("log", "--all", "--oneline", cwd=odd).stdout)) == 2 * len(ODD)
    formatted = rows(qvc("log", "--all", "--format=%(thread)|%d", cwd=odd).stdout)
    assert len(formatted) == 2 * len(ODD)  # --format's names are shown as every view's: one row each
    assert '"a\\nb"| (HEAD -> "a\\nb")' in formatted and '"\\"a\\\\nb\\""| ("\\"a\\\\nb\\"")' in formatted
    assert len(rows(qvc("log", "--all", cwd=odd).stdout)) == 2 * len(ODD) * 5 - 1
    status = rows(qvc("status", cwd=odd).stdout)
    assert status[1] == 'On thread "a\\nb", head id0b (step 1)'
    assert [r.split(" ", 1)[1].split(":")[0] for r in rows(qvc("reflog", cwd=odd).stdout)] == \
        ['"a\\nb"@{0}', '"a\\nb"@{1}']
    shown = rows(qvc("show", cwd=odd).stdout)
    assert any(line.startswith('Thread:   "a\\nb"') for line in shown), shown
    qvc("checkout", "--to", "st", cwd=odd)
    made = rows(qvc("commit", "st", "--allow-empty", cwd=odd).stdout)
    assert len(made) == 1 and made[0].startswith('["a\\nb" ')
    # --json keeps the exact names
    assert sorted(r["thread"] for r in qvc_json("branch", cwd=odd)) == sorted(ODD)
    assert qvc_json("status", cwd=odd)["thread"] == "a\nb"


def test_log_shows_a_name_escaped_as_branch_does(tmp_path):
    """A thread named with an escape sequence is not shown as another, plain name (the terminal
    obeying it, or the colours stripped with it) in log's decorations, nor a bidi override raw."""
    names = ["\x1b[31mred", "evil\u202etxt.exe"]
    with GitCheckpointStore(tmp_path / "w" / ".qvc") as store:
        for k, thread in enumerate(names):
            put(store, thread, f"n{k}", 0, {"n": k})
        store.checkout(names[0])
    work = tmp_path / "w"
    listed = qvc("branch", cwd=work).stdout.splitlines()
    assert listed == ['* "\\033[31mred"', '  "evil\\342\\200\\256txt.exe"']
    shown = {listed[0][2:], listed[1][2:]}
    lines = qvc("log", "--all", "--oneline", cwd=work).stdout.splitlines()
    assert {ln.rsplit(" (", 1)[1].rstrip(")").removeprefix("HEAD -> ") for ln in lines} == shown, lines
    block = qvc("log", "-n", "1", cwd=work).stdout
    assert '(HEAD -> "\\033[31mred")' in block and 'Thread: "\\033[31mred"' in block
    assert "\u202e" not in qvc("log", "--all", cwd=work).stdout
    with GitCheckpointStore(tmp_path / "w" / ".qvc") as store:
        put(store, names[1], "n2", 1, {"n": 2}, parent_id="n1")
    shown = qvc("show", "n2", cwd=work).stdout
    assert 'Parent:   "evil\\342\\200\\256txt.exe"@n1' in shown and "\u202e" not in shown


def test_the_server_answers_for_any_thread_id(odd):
    proc = subprocess.Popen([sys.executable, "-m", "qvc", "--repo", str(odd / ".qvc"), "serve", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(),
                            stdin=subprocess.DEVNULL)
    try:
        line = proc.stdout.readline()
        base = re.search(r"at (http://\S+?/)(?:\?token=\S+?)?[ ;]", line).group(1)

        def get(path: str) -> tuple[int, dict]:
            try:
                with urllib.request.urlopen(base.rstrip("/") + path, timeout=30) as resp:
                    return resp.status, json.loads(resp.read())
            except urllib.error.HTTPError as exc:
                with exc:
                    return exc.code, json.loads(exc.read())

        status, listing = get("/api/threads")
        assert status == 200 and sorted(t["thread"] for t in listing["threads"]) == sorted(ODD)
        for k, thread in enumerate(ODD):
            status, line_ = get("/api/threads/" + urllib.parse.quote(thread, safe="/"))
            assert status == 200, (thread, line_)
            assert line_["thread"] == thread and [c["id"] for c in line_["line"]] == [f"id{k}b", f"id{k}"]
            status, cp = get("/api/checkpoints/" + urllib.parse.quote(thread, safe="/"))
            assert status == 200 and cp["thread"] == thread and cp["id"] == f"id{k}b"
        status, missing = get("/api/threads/" + urllib.parse.quote("a\n"))
        assert status == 404 and "not found" in missing["error"]["message"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()
