"""git's manners where a git user relies on them (issue 25, item 4), through the real CLI as a subprocess.

``branch -d`` refuses an unmerged thread; ``branch -m`` says its commits get new SHAs and keeps the old
ones in the reflog; ``commit`` refuses to rewind other writers' work and to store nothing new;
``reset THREAD@{N}`` puts back a thread whose head is damaged; a garbled HEAD leaves reads working and
``checkout THREAD`` repairs it; ``reset --soft/--mixed/--hard``, ``checkout -`` and ``tag``. Every
refusal is one line on stderr, a non-zero exit, and leaves refs, reflogs and HEAD as they were.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from helpers import fsck, put, qvc, qvc_json, run_git  # noqa: E402

from qvc import GitCheckpointStore  # noqa: E402
from qvc.store.fork import fork_thread  # noqa: E402


@pytest.fixture
def work(tmp_path) -> Path:
    """``tmp_path/work`` holding ``.qvc``: thread main (m0..m2, HEAD) and thread fork, forked from m1
    with 5 checkpoints of its own (the fork checkpoint and f1..f4)."""
    with GitCheckpointStore(tmp_path / "work" / ".qvc") as store:
        for i in range(3):
            put(store, "main", f"m{i}", i, {"plan": [f"p{k}" for k in range(i + 1)], "n": i})
        fork_thread(store, store.resolve("m1"), "fork")
        for i in range(1, 5):
            put(store, "fork", f"f{i}", None, {"n": 100 + i})
        store.checkout("main")
    return tmp_path / "work"


def repo(work: Path) -> Path:
    return work / ".qvc"


def snapshot(work: Path) -> dict:
    """What a refusal must leave as it was: every ref, HEAD, and every reflog (loose or compacted)."""
    path = repo(work)
    logs = {}
    for base in ("logs", os.path.join("qvc", "reflogs")):
        for top, _, files in os.walk(path / base):
            for name in files:
                full = Path(top) / name
                logs[str(full.relative_to(path))] = full.read_bytes()
    return {"refs": run_git(path, "for-each-ref", "--format=%(refname) %(objectname)").stdout,
            "HEAD": (path / "HEAD").read_bytes(), "logs": logs}


def refused(work: Path, code: int, *args: str, says: str) -> str:
    """Run ``qvc ARGS`` expecting a refusal: exit ``code``, one line naming ``says``, nothing changed."""
    before = snapshot(work)
    proc = qvc(*args, cwd=work, check=code)
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("qvc: ") and says in proc.stderr, proc.stderr
    assert snapshot(work) == before
    fsck(repo(work))
    return proc.stderr


def ids(work: Path, *args: str) -> list[str]:
    return [e["id"] for e in qvc_json("log", *args, cwd=work)]


# -- 1. branch -d of an unmerged thread -----------------------------------------------------------


def test_branch_d_refuses_an_unmerged_fork_and_D_forces(work):
    tip = qvc_json("show", "fork", cwd=work)["commit"]
    line = refused(work, 2, "branch", "-d", "fork", says="thread 'fork' is not fully merged")
    assert "its 5 checkpoint(s)" in line and "qvc branch -D fork" in line
    out = qvc("branch", "-D", "fork", cwd=work).stdout
    assert out.startswith("Deleted thread fork (was f4;")
    assert [t["thread"] for t in qvc_json("branch", cwd=work)] == ["main"]
    run_git(repo(work), "cat-file", "-e", tip)  # the data stays until `qvc gc --prune`
    fsck(repo(work))


def test_branch_d_deletes_a_thread_another_line_holds(work):
    qvc("branch", "mid", "fork", cwd=work)  # mid's head is one fork checkpoint past fork's head
    refused(work, 2, "branch", "-d", "fork", "mid", says="is not fully merged")  # both going: nothing holds fork
    assert qvc("branch", "-d", "fork", cwd=work).stdout.startswith("Deleted thread fork")
    qvc("checkout", "mid", cwd=work)
    qvc("checkout", "mid~1", cwd=work)  # detached below mid's head: mid is not on HEAD's line
    refused(work, 2, "branch", "-d", "mid", says="is not fully merged")
    qvc("checkout", "mid", cwd=work)
    qvc("checkout", qvc_json("show", "mid", cwd=work)["commit"], cwd=work)  # detached at mid's head
    qvc("branch", "-d", "mid", cwd=work)
    fsck(repo(work))


# -- 2. branch -m ---------------------------------------------------------------------------------


def test_branch_m_says_the_commits_get_new_shas_and_keeps_the_old_ones(work):
    old_tip = qvc_json("show", "fork", cwd=work)["commit"]
    before = ids(work, "fork")
    qvc("tag", "good", "fork~1", cwd=work)
    out = qvc("branch", "-m", "fork", "renamed", cwd=work).stdout.splitlines()
    assert out[0] == "Renamed thread 'fork' to 'renamed'"
    assert out[1].startswith("note: unlike git, its 5 checkpoint(s) got new commit SHAs") and len(out) == 2
    assert ids(work, "renamed") == before  # checkpoint ids stay
    assert qvc_json("show", "renamed", cwd=work)["commit"] != old_tip
    reflog = qvc_json("reflog", "renamed", cwd=work)
    assert reflog[0]["message"] == "branch: renamed fork to renamed" and reflog[1]["new"] == old_tip
    assert qvc_json("show", "renamed@{1}", cwd=work)["commit"] == old_tip  # the old commits stay named
    assert qvc_json("show", "good", cwd=work)["id"] == "f3"  # the tag followed its checkpoint
    assert qvc_json("show", "good", cwd=work)["thread"] == "renamed"
    fsck(repo(work))


# -- 3. commit from a stale directory, and an unchanged one ---------------------------------------


def test_commit_from_a_stale_directory_is_refused_unless_forced(work):
    qvc("checkout", "main", "--to", "mine", cwd=work)
    qvc("checkout", "main", "--to", "theirs", cwd=work)
    (work / "theirs" / "n.json").write_text("20\n")
    qvc("commit", "theirs", "-m", "another writer", cwd=work)
    theirs = ids(work)[0]
    (work / "mine" / "n.json").write_text("10\n")
    manifest = (work / "mine" / ".qvc-state.json").read_bytes()
    line = refused(work, 4, "commit", "mine", says="thread 'main' has moved on since mine was checked out")
    assert "rewind 1 checkpoint(s)" in line and "--force" in line
    assert (work / "mine" / ".qvc-state.json").read_bytes() == manifest  # the directory too
    out = qvc("commit", "mine", "--force", cwd=work).stdout
    assert "--force" in out and "superseded line" in out
    assert ids(work)[1:] == ["m2", "m1", "m0"]
    kept = {e["id"]: e["superseded"] for e in qvc_json("log", "--all", cwd=work)}
    assert kept[theirs] is True  # the overwritten checkpoint stays reachable
    fsck(repo(work))


def test_commit_of_an_older_checkpoint_on_purpose_is_still_time_travel(work):
    qvc("checkout", "main~2", "--to", "old", cwd=work)
    (work / "old" / "n.json").write_text("5\n")
    out = qvc("commit", "old", cwd=work).stdout
    assert "older checkpoint" in out and "superseded line" in out
    assert ids(work)[1:] == ["m0"]


def test_commit_of_an_unchanged_directory_is_nothing_to_commit(work):
    qvc("checkout", "--to", "same", cwd=work)
    refused(work, 1, "commit", "same", says="nothing to commit: same holds the state of checkpoint m2")
    (work / "same" / "n.json").write_text("2\n")  # rewritten, same value: still nothing new
    refused(work, 1, "commit", "same", says="nothing to commit")
    made = json.loads(qvc("commit", "same", "--allow-empty", "--json", cwd=work).stdout)
    assert made["changed"] == [] and ids(work)[:2] == [made["id"], "m2"]
    refused(work, 1, "commit", "same", says="nothing to commit")  # the next commit builds on it
    fsck(repo(work))


# -- 4. reset from the reflog when the head is damaged --------------------------------------------


def test_reset_puts_back_a_thread_whose_head_commit_is_missing(work):
    good = qvc_json("show", "main", cwd=work)["commit"]
    (repo(work) / "refs" / "heads" / "main").write_text("1" * 40 + "\n")  # a loose ref wins over packed-refs
    assert qvc("log", cwd=work, check=5).stderr.count("\n") == 1
    out = qvc("reset", "main@{0}", cwd=work).stdout
    assert out.startswith("HEAD is now at m2 (step 2) on main") and "damaged head 111111111111" in out
    assert ids(work) == ["m2", "m1", "m0"] and qvc_json("show", "main", cwd=work)["commit"] == good
    assert qvc_json("status", cwd=work)["damaged"] is None
    # Like git's, the reflog records the missing commit it left: qvc fsck warns of it (exit 0).
    checked = qvc("fsck", cwd=work)
    assert "reflog entry 111111111111" in checked.stderr and "qvc gc --prune" in checked.stderr


def test_reset_puts_back_a_thread_whose_head_is_no_checkpoint(work):
    path = repo(work)
    tree = run_git(path, "mktree", input=b"", text=False).stdout.decode().strip()
    who = ("-c", "user.name=t", "-c", "user.email=t@example.com")
    stray = run_git(path, *who, "commit-tree", tree, "-m", "not a checkpoint").stdout.strip()
    run_git(path, "update-ref", "refs/heads/main", stray)
    assert qvc("show", cwd=work, check=5).stderr.count("\n") == 1
    out = qvc("reset", "main@{1}", cwd=work).stdout
    assert out.startswith("HEAD is now at m2") and "damaged head" in out
    assert ids(work) == ["m2", "m1", "m0"] and qvc_json("status", cwd=work)["superseded_lines"] == 0
    fsck(path)


# -- 5. a garbled HEAD ----------------------------------------------------------------------------


def test_a_garbled_head_leaves_reads_working_and_checkout_repairs_it(work):
    (repo(work) / "HEAD").write_text("garbage\n")
    status = qvc("status", cwd=work)
    assert "HEAD is damaged" in status.stdout and "Traceback" not in status.stderr
    assert qvc_json("status", cwd=work)["damaged"] and qvc_json("status", cwd=work)["thread"] is None
    listed = qvc("branch", cwd=work)
    assert listed.stdout.split() == ["fork", "main"] and listed.stderr.count("\n") == 1
    assert "HEAD is damaged" in listed.stderr
    assert "qvc checkout THREAD" in qvc("log", cwd=work, check=5).stderr
    assert ids(work, "main") == ["m2", "m1", "m0"]  # naming a thread needs no HEAD
    out = qvc("checkout", "main", cwd=work).stdout
    assert out.strip() == "Switched to thread 'main' (HEAD was damaged; it is repaired)"
    assert (repo(work) / "HEAD").read_text() == "ref: refs/heads/main\n"
    assert qvc_json("status", cwd=work)["thread"] == "main" and qvc_json("status", cwd=work)["damaged"] is None
    fsck(repo(work))


# -- 6. reset modes, checkout -, tags -------------------------------------------------------------


def test_reset_soft_and_mixed_move_the_head_only(work):
    assert qvc("reset", "--soft", "HEAD~1", cwd=work).stdout.startswith("HEAD is now at m1")
    assert qvc("reset", "--mixed", "main@{1}", cwd=work).stdout.startswith("HEAD is now at m2")
    assert qvc("reset", cwd=work).stdout.startswith("HEAD is now at m2")  # NAME defaults to HEAD
    assert ids(work) == ["m2", "m1", "m0"]
    refused(work, 2, "reset", "--soft", "HEAD~1", "--to", "d", says="--to DIR goes with --hard")


def test_reset_hard_rewrites_a_checkout_directory(work):
    qvc("checkout", "--to", "d", cwd=work)
    (work / "d" / "n.json").write_text("99\n")
    out = qvc("reset", "--hard", "HEAD~1", cwd=work).stdout
    assert "note: qvc has no working tree: --hard moved the head only" in out
    assert json.loads((work / "d" / "n.json").read_text()) == 99  # no --to: the directory is not touched
    out = qvc("reset", "--hard", "main@{1}", "--to", "d", cwd=work).stdout.splitlines()
    assert out[0].startswith("HEAD is now at m2") and "discarding the edits" in out[1]
    assert json.loads((work / "d" / "n.json").read_text()) == 2
    done = qvc_json("reset", "--hard", "HEAD", "--to", "d", cwd=work)
    assert done["id"] == "m2" and done["directory"] == str((work / "d").resolve())
    fsck(repo(work))


def test_checkout_dash_goes_back_to_the_previous_thread_or_checkpoint(work, tmp_path):
    qvc("checkout", "fork", cwd=work)
    assert qvc("checkout", "-", cwd=work).stdout.strip() == "Switched to thread 'main'"
    assert qvc("checkout", "-", cwd=work).stdout.strip() == "Switched to thread 'fork'"
    qvc("checkout", "m1", cwd=work)
    assert qvc("checkout", "-", cwd=work).stdout.strip() == "Switched to thread 'fork'"
    assert qvc("checkout", "-", cwd=work).stdout.strip() == "HEAD is now at m1 (detached)"
    qvc("checkout", "main", cwd=work)
    assert qvc("checkout", "-b", "new", cwd=work).stdout.startswith("Switched to a new thread 'new'")
    assert qvc("checkout", "-", cwd=work).stdout.strip() == "Switched to thread 'main'"  # where -b left from
    assert qvc("checkout", "-", cwd=work).stdout.strip() == "Switched to thread 'new'"
    assert "checkout: moving from main to new" in run_git(repo(work), "reflog", "-n", "4", "HEAD").stdout
    qvc("checkout", "main", cwd=work)
    qvc("branch", "gone", cwd=work)
    qvc("checkout", "gone", cwd=work)
    qvc("checkout", "main", cwd=work)
    qvc("branch", "-D", "gone", cwd=work)
    refused(work, 3, "checkout", "-", says="the previous thread 'gone' has no checkpoints")
    fresh = tmp_path / "fresh"
    with GitCheckpointStore(fresh / ".qvc") as store:
        put(store, "main", "x0", 0)
    refused(fresh, 2, "checkout", "-", says="HEAD has not moved yet")


def test_tags_create_list_read_move_and_delete(work):
    assert qvc("tag", "v1", "main~1", cwd=work).stdout.strip() == "Tagged checkpoint m1 as 'v1'"
    qvc("tag", "v2", cwd=work)
    qvc("tag", "rc/1", "fork", cwd=work)
    assert qvc("tag", cwd=work).stdout.split() == ["rc/1", "v1", "v2"]
    assert qvc("tag", "-l", "v*", cwd=work).stdout.split() == ["v1", "v2"]
    assert [(t["tag"], t["id"]) for t in qvc_json("tag", "-l", "rc/*", cwd=work)] == [("rc/1", "f4")]
    assert qvc_json("show", "v1", cwd=work)["id"] == "m1" and qvc_json("show", "v1~1", cwd=work)["id"] == "m0"
    assert run_git(repo(work), "tag").stdout.split() == ["rc/1", "v1", "v2"]  # plain git's tags
    refused(work, 4, "tag", "v1", "m0", says="tag 'v1' already exists (use -f")
    refused(work, 2, "tag", "bad..name", says="not a valid tag name")
    refused(work, 3, "tag", "-d", "v1", "nope", says="tag 'nope' not found")  # none deleted
    out = qvc("tag", "-f", "v1", "m0", cwd=work).stdout
    assert out == "Updated tag 'v1' to checkpoint m0 (was checkpoint m1)\n"  # both checkpoints, labelled
    assert qvc_json("show", "v1", cwd=work)["id"] == "m0"
    assert qvc("tag", "-d", "v1", "v2", cwd=work).stdout.count("Deleted tag") == 2
    qvc("branch", "-D", "fork", cwd=work)
    assert qvc_json("show", "rc/1", cwd=work)["id"] == "f4"  # a tag keeps its checkpoint
    fsck(repo(work))
