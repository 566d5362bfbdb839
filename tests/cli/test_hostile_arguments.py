"""Arguments a user trial threw at the command line, through the real ``qvc`` process: bytes that
are not UTF-8 (a Latin-1 terminal's), names longer than a file name, a thousand ``~``, an empty
revision, and the reader of a pipe leaving early. Each ends in one line on stderr and a
documented status (docs/cli.md), never a traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from helpers import QVC, env, put, qvc, qvc_json  # noqa: E402

from qvc import GitCheckpointStore  # noqa: E402

LATIN1 = "\udcff"  # how Python reads the byte 0xff of a command-line argument (not UTF-8)


@pytest.fixture
def work(tmp_path) -> Path:
    with GitCheckpointStore(tmp_path / "work" / ".qvc") as store:
        for i in range(3):
            put(store, "main", f"m{i}", i, {"n": i})
        store.checkout("main")
    return tmp_path / "work"


def one_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("qvc: "), proc.stderr
    return lines[0]


@pytest.mark.parametrize("args", [["show", "\udcff\udcfe"], ["log", LATIN1], ["rev-parse", LATIN1],
                                  ["checkout", LATIN1], ["diff", LATIN1], ["diff", "main", LATIN1],
                                  ["log", f"main..{LATIN1}"], ["reset", LATIN1], ["blame", "n", LATIN1],
                                  ["show", f"main:{LATIN1}"], ["show", f"{LATIN1}~1"]])
def test_bytes_that_are_not_utf8_name_no_revision(work, args):
    line = one_line(qvc(*args, cwd=work, check=3))
    assert "\\udcff" in line or "no field" in line


@pytest.mark.parametrize("args", [["tag", LATIN1], ["tag", LATIN1, "main"], ["branch", LATIN1],
                                  ["checkout", "-b", LATIN1], ["switch", "-c", LATIN1]])
def test_bytes_that_are_not_utf8_are_no_valid_name(work, args):
    assert "not valid UTF-8" in one_line(qvc(*args, cwd=work, check=2))
    assert qvc("tag", cwd=work).stdout == ""


def test_a_thousand_tildes_are_one_line(work):
    one_line(qvc("log", "main" + "~" * 1000, cwd=work, check=3))
    one_line(qvc("rev-parse", "main" + "~1" * 1000, cwd=work, check=3))
    # the iterative parse walks as the recursive one did
    sha = qvc("rev-parse", "main~2", cwd=work).stdout
    assert qvc("rev-parse", "main~~", cwd=work).stdout == qvc("rev-parse", "main^~1", cwd=work).stdout == sha


def test_a_revision_longer_than_a_file_name_is_unknown(work):
    line = one_line(qvc("show", "a" * 300, cwd=work, check=3))
    assert "unknown revision" in line and "300 characters" in line and len(line) < 200
    line = one_line(qvc("log", "b" * 5000, cwd=work, check=3))
    assert "5000 characters" in line and len(line) < 200
    line = one_line(qvc("tag", "c" * 300, cwd=work, check=2))
    assert "longer than 255 bytes" in line and len(line) < 250


@pytest.mark.parametrize("command", ["rev-parse", "diff", "show", "log", "checkout"])
def test_an_empty_revision_is_refused_as_git_refuses_it(work, command):
    assert "ambiguous argument ''" in one_line(qvc(command, "", cwd=work, check=2))


def test_head_reflog_when_detached_says_why(work):
    qvc("checkout", "main~1", cwd=work)
    line = one_line(qvc("rev-parse", "HEAD@{1}", cwd=work, check=3))
    assert "detached" in line and "no checkpoints" not in line


@pytest.mark.parametrize("command", [["status"], ["status", "--json"], ["branch"], ["branch", "-v"], ["show"],
                                     ["reflog"], ["tag", "-l"], ["rev-parse", "HEAD"], ["log"], ["diff", "main"],
                                     ["show", "--json"], ["runs"]])
def test_the_reader_of_a_pipe_leaving_is_a_quiet_exit_0_for_every_command(work, command):
    """Each command's output goes into a pipe whose reader is already gone (`qvc status | head -1`
    with the reader quicker than the writer): no message, status 0, whatever the command."""
    qvc("tag", "t", cwd=work)
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([*QVC, *command], cwd=work, env=env(), stdout=write, stderr=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, text=True, timeout=120)
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (0, "")


@pytest.fixture
def dashed(tmp_path) -> Path:
    """A repository whose one thread's id starts with `-` (the library takes any id)."""
    with GitCheckpointStore(tmp_path / "dashed" / ".qvc") as store:
        put(store, "-dash", "d0", 0, {"v": 1})
        put(store, "-dash", "d1", 1, {"v": 2, "w": 0})
    return tmp_path / "dashed"


def test_a_thread_starting_with_a_dash_is_named_after_end_of_options(dashed):
    head = qvc("rev-parse", "--end-of-options", "-dash", cwd=dashed).stdout.strip()
    assert len(head) == 40
    assert qvc("rev-parse", "--end-of-options", "-dash~1", cwd=dashed).stdout.strip() != head
    log = qvc("log", "--oneline", "--end-of-options", "-dash", cwd=dashed).stdout.splitlines()
    assert len(log) == 2 and log[0].startswith(head[:7])
    # `--` still puts field names apart after it: only the checkpoint that changed `w`
    assert len(qvc("log", "--oneline", "--end-of-options", "-dash", "--", "w", cwd=dashed).stdout.splitlines()) == 1
    assert "v: 1 → 2" in qvc("diff", "--end-of-options", "-dash", cwd=dashed).stdout
    stat = qvc("diff", "--stat", "--end-of-options", "-dash~1", "-dash", "--", "w", cwd=dashed).stdout
    assert "w |" in stat and "v |" not in stat
    assert "Thread:   -dash" in qvc("show", "--end-of-options", "-dash", cwd=dashed).stdout
    assert "'-dash'" in qvc("checkout", "--end-of-options", "-dash", cwd=dashed).stdout
    # -3 after --end-of-options is a revision, not git's -n 3
    assert "'-3'" in one_line(qvc("log", "--end-of-options", "-3", cwd=dashed, check=3))


def test_full_ref_names_name_threads_and_tags(dashed):
    head = qvc("rev-parse", "--end-of-options", "-dash", cwd=dashed).stdout
    assert qvc("rev-parse", "refs/heads/-dash", cwd=dashed).stdout == head
    assert len(qvc("log", "--oneline", "refs/heads/-dash", cwd=dashed).stdout.splitlines()) == 2
    assert "v: 1 → 2" in qvc("diff", "refs/heads/-dash", cwd=dashed).stdout
    qvc("tag", "good", "refs/heads/-dash~1", cwd=dashed)
    assert qvc("rev-parse", "refs/tags/good", cwd=dashed).stdout == qvc("rev-parse", "good", cwd=dashed).stdout
    one_line(qvc("rev-parse", "refs/heads/nothing", cwd=dashed, check=3))
    # as git's `checkout refs/heads/X`, a thread spelled in full detaches at its head
    assert "detached" in qvc("checkout", "refs/heads/-dash", cwd=dashed).stdout


def test_checkout_of_no_thread_is_refused_and_orphan_makes_one_unborn(work):
    line = one_line(qvc("checkout", "brandnew", cwd=work, check=3))
    assert "-b brandnew" in line and "--orphan brandnew" in line
    assert qvc("branch", cwd=work).stdout.split() == ["*", "main"]  # a typo makes no thread
    assert "unborn" in qvc("checkout", "--orphan", "brandnew", cwd=work).stdout
    assert qvc("rev-parse", "--abbrev-ref", "HEAD", cwd=work).stdout == "brandnew\n"
    with GitCheckpointStore(work / ".qvc") as store:  # its first checkpoint creates it
        put(store, "brandnew", "b0", 0, {"n": 9})
    assert qvc("log", "--oneline", cwd=work).stdout.splitlines()[0].endswith("(HEAD -> brandnew)")
    assert "already exists" in one_line(qvc("checkout", "--orphan", "main", cwd=work, check=4))
    assert "not a valid thread name" in one_line(qvc("switch", "--orphan", "a..b", cwd=work, check=2))
    assert qvc_json("switch", "--orphan", "other", cwd=work) == {"thread": "other", "head": None, "detached": False}
    one_line(qvc("checkout", "--orphan", "x", "main", cwd=work, check=2))


def test_checkout_b_on_an_unborn_head_works_as_gits(tmp_path):
    qvc("init", cwd=tmp_path)
    assert "unborn" in qvc("checkout", "-b", "new", cwd=tmp_path).stdout
    assert qvc("rev-parse", "--abbrev-ref", "HEAD", cwd=tmp_path).stdout == "new\n"
    assert "unborn" in qvc("switch", "-c", "newer", cwd=tmp_path).stdout
    # a CHECKPOINT named still has to exist
    one_line(qvc("checkout", "-b", "x", "HEAD", cwd=tmp_path, check=3))


def test_checkout_b_names_the_checkpoint_it_forked_from(work):
    out = qvc("checkout", "-b", "newb", "main~1", cwd=work).stdout
    assert out.startswith("Switched to a new thread 'newb' (forked from m1, new checkpoint ")
    assert "m1, new checkpoint m1" not in out


def test_tag_f_labels_both_checkpoints(work):
    qvc("tag", "good", "main", cwd=work)
    out = qvc("tag", "-f", "good", "main~2", cwd=work).stdout
    assert out == "Updated tag 'good' to checkpoint m0 (was checkpoint m2)\n"
