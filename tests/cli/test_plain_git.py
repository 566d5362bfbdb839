"""Plain git shows qvc's blobs safely (issue 25): ``git log -p``/``git show``/``git diff`` on a qvc
repository print "Binary files ... differ", never raw msgpack (escape sequences included); one
line of config (a textconv running ``qvc cat-blob``) shows them as JSON; a user's own attributes
are kept. Real repositories, real git, the CLI as a subprocess."""

from __future__ import annotations

import json
import shlex
import subprocess

from helpers import QVC, fsck, put, qvc, run_git

from qvc import GitCheckpointStore

ESC = "\x1b[31m"


def make(path) -> None:
    with GitCheckpointStore(path) as store:
        put(store, "t", "a", 0, {"msg": f"hello {ESC}red", "n": 1})
        put(store, "t", "b", 1, {"msg": "bye", "n": 2, "plan": list(range(70))})


def test_git_log_p_show_and_diff_print_binary_not_msgpack(tmp_path):
    repo = tmp_path / "r.qvc"
    make(repo)
    assert (repo / "info" / "attributes").read_text() == "* diff=qvc\n"
    assert run_git(repo, "config", "--local", "diff.qvc.binary").stdout.strip() == "true"
    for args in (("log", "-p", "t"), ("show", "t"), ("diff", "t~1", "t"), ("log", "-p", "--all")):
        out = run_git(repo, *args).stdout
        assert "Binary files a/msg and b/msg differ" in out, out
        assert "\x1b" not in out and "\x00" not in out and "\ufffd" not in out
    fsck(repo)


def test_one_line_of_config_shows_the_blobs_as_json(tmp_path):
    repo = tmp_path / "r.qvc"
    make(repo)
    textconv = " ".join(shlex.quote(part) for part in QVC) + " cat-blob"
    run_git(repo, "config", "diff.qvc.textconv", textconv)
    out = run_git(repo, "log", "-p", "t").stdout
    assert '-"hello \\u001b[31mred"\n+"bye"' in out, out
    assert '+    "id": "b",' in out and "+  69\n" in out and "\x1b" not in out
    # qvc's own git runs never run a program the repository's config names, this textconv included
    from qvc.plumbing.launcher import run_git as qvcs_git

    mine = qvcs_git(str(repo), "log", "-p", "t")  # (qvc itself never asks git for a diff)
    assert '"id": "b"' not in mine.stdout and "cannot run" in mine.stderr  # the textconv was neutralized
    (tmp_path / "header").write_bytes(run_git(repo, "cat-file", "blob", "t:.qvc", text=False).stdout)
    assert json.loads(qvc("cat-blob", str(tmp_path / "header")).stdout)["checkpoint"]["id"] == "b"
    (tmp_path / "junk").write_bytes(b"\xc1")  # never valid msgpack
    assert qvc("cat-blob", str(tmp_path / "junk")).stdout == "(not a qvc value: 1 bytes)\n"
    proc = subprocess.run([*QVC, "cat-blob", "-"], input=run_git(repo, "cat-file", "blob", "t:n", text=False).stdout,
                          capture_output=True)
    assert proc.stdout == b"2\n"


def test_an_older_repository_is_marked_when_opened_for_writing(tmp_path):
    repo = tmp_path / "r.qvc"
    make(repo)
    (repo / "info" / "attributes").unlink()
    run_git(repo, "config", "--unset", "diff.qvc.binary")
    assert b"\x1b" in run_git(repo, "log", "-p", "t", text=False).stdout  # what issue 25 found
    GitCheckpointStore(repo, readonly=True).close()  # a reader writes nothing
    assert not (repo / "info" / "attributes").exists()
    GitCheckpointStore(repo).close()
    assert (repo / "info" / "attributes").read_text() == "* diff=qvc\n"
    assert "Binary files a/msg and b/msg differ" in run_git(repo, "log", "-p", "t").stdout


def test_a_users_own_attributes_and_settings_are_kept(tmp_path):
    repo = tmp_path / "r.qvc"
    make(repo)
    attributes = repo / "info" / "attributes"
    attributes.write_text("*.txt text\n")  # a line of the user's that says nothing of diffs
    run_git(repo, "config", "diff.qvc.binary", "false")
    GitCheckpointStore(repo).close()
    assert attributes.read_text() == "*.txt text\n* diff=qvc\n"
    assert run_git(repo, "config", "--local", "diff.qvc.binary").stdout.strip() == "false"
    attributes.write_text("* -diff\n")  # the user's own decision for every path
    GitCheckpointStore(repo).close()
    assert attributes.read_text() == "* -diff\n"
    assert "Binary files a/msg and b/msg differ" in run_git(repo, "log", "-p", "t").stdout
