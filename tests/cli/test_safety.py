"""A careless user survives: nothing the user made is destroyed (issue 15, part A), as real processes.

The samples replace only repositories they created; ``qvc checkout --to DIR`` refuses to overwrite
edited field files; ``qvc commit DIR`` twice builds a line; concurrent commits lose with a
conflict naming the thread; ``qvc branch -D`` refuses the current thread.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from helpers import QVC, child_env, env, fsck, put, qvc, qvc_json, run_git  # noqa: E402

from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore  # noqa: E402
from qvc.errors import CheckpointConflictError  # noqa: E402

SAMPLES = ROOT / "samples"


@pytest.fixture
def work(tmp_path) -> Path:
    """``tmp_path/work`` holding ``.qvc``: thread main (3 checkpoints, HEAD) and other (1)."""
    with GitCheckpointStore(tmp_path / "work" / ".qvc") as store:
        for i in range(3):
            put(store, "main", f"m{i}", i, {"plan": [f"p{k}" for k in range(i + 1)], "n": i})
        put(store, "other", "o0", 0, {"n": 0})
        store.checkout("main")
    return tmp_path / "work"


def sample(name: str, *args: str, check: int = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, str(SAMPLES / name), *args], env=child_env(), capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == check, proc.stdout + proc.stderr
    return proc


# -- the samples ----------------------------------------------------------------------------------


def test_a_sample_refuses_a_users_file_and_directory(tmp_path):
    mine = tmp_path / "notes.txt"
    mine.write_text("precious\n")
    proc = sample("tool_error.py", "--repo", str(mine), check=2)
    assert proc.stderr.count("\n") == 1 and "not created by a qvc sample" in proc.stderr, proc.stderr
    assert mine.read_text() == "precious\n"
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "keep.txt").write_text("x")
    sample("time_travel.py", "--repo", str(folder), check=2)
    assert (folder / "keep.txt").read_text() == "x" and sorted(p.name for p in folder.iterdir()) == ["keep.txt"]


def test_quickstart_refuses_a_repository_of_real_runs(work):
    before = qvc_json("log", "--all", cwd=work)
    proc = sample("quickstart.py", "--repo", str(work / ".qvc"), check=2)
    assert proc.stderr.count("\n") == 1 and str(work / ".qvc") in proc.stderr
    assert qvc_json("log", "--all", cwd=work) == before
    assert not (work / ".qvc-remote.git").exists()


def test_a_sample_replaces_only_what_it_created(tmp_path):
    target = tmp_path / "s.qvc"
    sample("tool_error.py", "--repo", str(target))
    assert (target / "qvc-sample").is_file()
    first = qvc_json("--repo", str(target), "branch")
    sample("tool_error.py", "--repo", str(target))  # its own repository: replaced
    assert len(qvc_json("--repo", str(target), "branch")) == len(first)  # replaced, not added to
    fsck(target)
    empty = tmp_path / "empty"
    empty.mkdir()  # an empty directory holds nothing to lose
    sample("tool_error.py", "--repo", str(empty))
    assert (empty / "qvc-sample").is_file()


# -- checkout --to over edits ---------------------------------------------------------------------


def test_checkout_to_refuses_to_overwrite_edits_and_force_overrides(work):
    qvc("checkout", "main", "--to", "st", cwd=work)
    state = work / "st"
    qvc("checkout", "main~1", "--to", "st", cwd=work)  # nothing edited: rewritten freely
    assert json.loads((state / "n.json").read_text()) == 1
    (state / "n.json").write_text("41\n")
    (state / "extra.json").write_text('"mine"\n')
    (state / "plan.json").unlink()
    (state / "readme.txt").write_text("not a field file")
    proc = qvc("checkout", "main", "--to", "st", cwd=work, check=1)
    assert proc.stderr.count("\n") == 1 and "would be overwritten" in proc.stderr
    assert "2 file(s)" in proc.stderr and "n.json, plan.json" in proc.stderr and "--force" in proc.stderr
    assert "extra.json" not in proc.stderr  # a file of the user's that no field replaces: not in the way
    assert (state / "n.json").read_text() == "41\n" and (state / "extra.json").read_text() == '"mine"\n'
    assert not (state / "plan.json").exists()
    assert qvc("checkout", "main", "--to", "st", "--json", cwd=work, check=1).stdout == ""
    done = json.loads(qvc("checkout", "main", "--to", "st", "--force", "--json", cwd=work).stdout)
    assert sorted(done["files"]) == ["n.json", "plan.json"] and done["kept"] == ["extra.json"]
    assert json.loads((state / "n.json").read_text()) == 2
    assert (state / "extra.json").read_text() == '"mine"\n'  # qvc did not write it: never removed
    assert (state / "readme.txt").read_text() == "not a field file"  # never a field: kept
    assert qvc("checkout", "main", "--force", cwd=work, check=2).stderr.startswith("qvc: --force goes with --to")


def test_checkout_to_never_removes_a_file_it_did_not_write(work):
    """git keeps untracked files through `checkout -f` and `reset --hard`: so does `--to DIR`. A
    `*.json` file of the user's is in the way only where the new state has a field file of its name."""
    qvc("checkout", "main", "--to", "st", cwd=work)
    state = work / "st"
    (state / "my-settings.json").write_text('{"budget": 10}\n')
    proc = qvc("checkout", "other", "--to", "st", cwd=work)  # other has no `plan`: plan.json (qvc's) goes
    assert "note: kept 1 file(s) qvc did not write in st: my-settings.json" in proc.stdout
    assert sorted(p.name for p in state.iterdir()) == [".qvc-state.json", "my-settings.json", "n.json"]
    proc = qvc("checkout", "main", "--to", "st", "--force", cwd=work)
    assert (state / "my-settings.json").read_text() == '{"budget": 10}\n' and "my-settings.json" in proc.stdout
    proc = qvc("reset", "--hard", "--to", "st", "main~1", cwd=work)
    assert "discarding the edits made there" in proc.stdout and "kept 1 file(s)" in proc.stdout
    assert (state / "my-settings.json").read_text() == '{"budget": 10}\n'
    assert json.loads(qvc("commit", "st", "-m", "settings", "--json", cwd=work).stdout)["changed"] == ["my-settings"]
    # a file of the user's that a field's file would replace is in the way (--force replaces it)
    qvc("checkout", "other", "--to", "other-st", cwd=work)
    (work / "other-st" / "plan.json").write_text('"my plan"\n')
    proc = qvc("checkout", "main", "--to", "other-st", cwd=work, check=1)
    assert "would be overwritten: plan.json" in proc.stderr
    assert (work / "other-st" / "plan.json").read_text() == '"my plan"\n'
    qvc("checkout", "main", "--to", "other-st", "--force", cwd=work)
    assert json.loads((work / "other-st" / "plan.json").read_text()) == ["p0", "p1"]


def test_commit_refuses_a_thread_whose_writer_keeps_its_head_in_a_record(tmp_path):
    """pydantic-ai's conversations (and CrewAI's flows) keep their head in the thread's record: a
    hand edit committed on the thread would be a checkpoint their framework never reads."""
    repo = tmp_path / ".qvc"
    with GitCheckpointStore(repo) as store:
        store.put_record("chat", b"record", expected=None, head="e1", checkpoints=[
            (Checkpoint(id="e1", thread_id="chat", step=0, state_data={"message": "hi"}), {"source": "mine"})])
        store.checkout("chat")
    proc = qvc("checkout", "--to", "st", cwd=tmp_path)
    assert "keeps its head in the record" in proc.stderr and "`qvc commit` refuses" in proc.stderr
    (tmp_path / "st" / "message.json").write_text('"hello"\n')
    proc = qvc("commit", "st", cwd=tmp_path, check=2)
    assert proc.stderr.count("\n") == 1 and "nothing was stored" in proc.stderr and "--force" in proc.stderr
    assert qvc("log", "--oneline", cwd=tmp_path).stdout.count("\n") == 1
    qvc("commit", "st", "--force", cwd=tmp_path)
    with GitCheckpointStore(repo, readonly=True) as store:
        assert store.get_tuple(CheckpointConfig("chat")).checkpoint.state_data == {"message": "hello"}
        assert store.thread_record("chat") == b"record"


def test_checkout_to_after_a_commit_is_not_refused(work):
    qvc("checkout", "--to", "st", cwd=work)
    (work / "st" / "n.json").write_text("7\n")
    qvc("commit", "st", "-m", "seven", cwd=work)
    qvc("checkout", "main~1", "--to", "st", cwd=work)  # what is there was committed: nothing to lose
    assert json.loads((work / "st" / "n.json").read_text()) == 2


# -- two commits from one directory ---------------------------------------------------------------


def test_two_commits_from_one_directory_build_a_line(work):
    qvc("checkout", "--to", "st", cwd=work)
    (work / "st" / "n.json").write_text("10\n")
    one = json.loads(qvc("commit", "st", "-m", "one", "--json", cwd=work).stdout)
    (work / "st" / "n.json").write_text("11\n")
    two = json.loads(qvc("commit", "st", "-m", "two", "--json", cwd=work).stdout)
    assert not one["time_travel"] and not two["time_travel"]
    assert (one["step"], two["step"]) == (3, 4) and two["changed"] == ["n"]
    log = qvc_json("log", cwd=work)
    assert [e["id"] for e in log[:3]] == [two["id"], one["id"], "m2"]
    assert qvc_json("status", cwd=work)["superseded_lines"] == 0
    assert qvc_json("show", "main", cwd=work)["state"]["n"] == 11


def test_a_commit_from_an_older_checkpoint_is_still_time_travel(work):
    qvc("checkout", "main~2", "--to", "st", cwd=work)
    (work / "st" / "n.json").write_text("5\n")
    done = json.loads(qvc("commit", "st", "--json", cwd=work).stdout)
    assert done["time_travel"] and done["step"] == 1
    assert qvc_json("status", cwd=work)["superseded_lines"] == 1


def test_a_stale_put_is_a_conflict_naming_the_thread(work):
    with GitCheckpointStore(work / ".qvc") as store:
        old = store.head("main")
        put(store, "main", "m3", 3, {"n": 3})
        with pytest.raises(CheckpointConflictError) as caught:
            store.put(CheckpointConfig("main"), Checkpoint(id="late", thread_id="main", step=3, state_data={}),
                      {}, expected_head=old)
        assert "thread 'main'" in str(caught.value) and "refs/" not in str(caught.value)
        assert store.resolve("m3") == store.head("main")
        with pytest.raises(CheckpointConflictError):
            store.put(CheckpointConfig("new"), Checkpoint(id="n0", thread_id="new", step=0, state_data={}),
                      {}, expected_head=old)
        store.put(CheckpointConfig("new"), Checkpoint(id="n0", thread_id="new", step=0, state_data={}),
                  {}, expected_head=None)
        assert store.commit_info(store.head("new")).checkpoint_id == "n0"


def test_concurrent_commits_on_one_thread(work):
    """Processes committing from their own directories at once: each either builds on what it read
    or loses with one line naming the thread; no checkpoint is lost or silently superseded."""
    dirs = []
    for k in range(6):
        qvc("checkout", "--to", f"st{k}", cwd=work)
        (work / f"st{k}" / "n.json").write_text(f"{100 + k}\n")
        dirs.append(f"st{k}")

    def commit(d: str) -> subprocess.CompletedProcess:
        return subprocess.run([*QVC, "commit", d, "--json"], cwd=work, env=env(), capture_output=True, text=True,
                              timeout=120, stdin=subprocess.DEVNULL)

    with ThreadPoolExecutor(len(dirs)) as pool:
        results = list(pool.map(commit, dirs))
    won = [json.loads(r.stdout) for r in results if r.returncode == 0]
    for r in results:
        assert r.returncode in (0, 4) and "Traceback" not in r.stderr, r.stderr
        if r.returncode == 4:
            assert r.stderr.count("\n") == 1 and "thread 'main'" in r.stderr and "refs/" not in r.stderr, r.stderr
    assert won
    ids = {e["id"] for e in qvc_json("log", "--all", cwd=work)}
    assert all(w["id"] in ids for w in won)  # every acknowledged commit is in the history
    # Each directory was based on m2: only the first to land builds on it without time travel; the
    # others either lost the race (exit 4) or committed after it as time travel, keeping the line.
    assert sum(not w["time_travel"] for w in won) == 1
    assert qvc_json("status", cwd=work)["superseded_lines"] == len(won) - 1
    fsck(work / ".qvc")


# -- branch -D of the current thread --------------------------------------------------------------


def test_branch_force_delete_refuses_the_current_thread(work):
    for flag in ("-d", "-D"):
        proc = qvc("branch", flag, "main", cwd=work, check=2)
        assert proc.stderr.count("\n") == 1 and "current thread 'main'" in proc.stderr
    assert [t["thread"] for t in qvc_json("branch", cwd=work)] == ["main", "other"]
    qvc("branch", "-D", "other", cwd=work)
    qvc("checkout", "m1", cwd=work)  # detached: no thread is current, so -D may delete main
    qvc("branch", "-D", "main", cwd=work)
    assert qvc_json("branch", cwd=work) == []


# -- lock files qvc did not create (issue 32) ------------------------------------------------------


def test_a_read_leaves_lock_files_it_did_not_create_and_status_names_them(work):
    repo = work / ".qvc"
    (repo / "config.lock").write_text("x\n")  # git or another program, mid-update (or killed)
    (repo / "refs" / "heads" / "france.lock").write_text("y\n")
    for args in (("log", "-n", "1"), ("status",), ("branch",)):
        proc = qvc(*args, cwd=work)
        assert "removed" not in proc.stderr, proc.stderr
        assert (repo / "config.lock").read_text() == "x\n"
        assert (repo / "refs" / "heads" / "france.lock").read_text() == "y\n"
    named = [ln for ln in qvc("status", cwd=work).stderr.splitlines() if "lock file" in ln]
    assert len(named) == 2 and "config.lock" in named[0] and "france.lock" in named[1], named
    assert qvc_json("status", cwd=work)["problems"] == [ln.removeprefix("qvc: warning: ") for ln in named]


def test_a_write_beside_a_lock_it_did_not_create_is_kept_and_reaches_git_once_the_lock_is_gone(work):
    """The write is acknowledged (staged) and every qvc reader sees it; git's file of that ref
    waits for the other program's lock, which qvc leaves as it is, naming it in one line."""
    repo = work / ".qvc"
    lock = repo / "refs" / "heads" / "france.lock"
    lock.write_text("y\n")
    proc = qvc("branch", "france", "main", cwd=work)
    warned = [ln for ln in proc.stderr.splitlines() if "locked by another program" in ln]
    assert len(warned) == 1 and str(lock) in warned[0], proc.stderr
    assert lock.read_text() == "y\n"
    assert "france" in [t["thread"] for t in qvc_json("branch", cwd=work)]
    assert run_git(repo, "rev-parse", "-q", "--verify", "refs/heads/france", check=False).returncode != 0
    purge = qvc("gc", "--prune", cwd=work, check=None)  # its commit is on no ref git's files have: kept
    assert purge.returncode == 1 and "cannot purge" in purge.stderr.splitlines()[-1], purge.stderr
    assert lock.read_text() == "y\n"
    lock.unlink()
    qvc("gc", cwd=work)  # any later writer publishes it
    shown = qvc_json("show", "france", cwd=work)["commit"]
    assert run_git(repo, "rev-parse", "refs/heads/france").stdout.strip() == shown
