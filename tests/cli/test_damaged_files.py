"""Damaged files of a repository other than refs and objects, through the ``qvc`` command as a
real process: the staging database (``qvc/staging.db``), git's ``config``, a lock file of
another program on ``HEAD``, an inner commit that is gone, and the repair a missing object's
hint names (``qvc fetch REMOTE`` then ``qvc gc``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from helpers import put, qvc, run_git  # noqa: E402

from qvc import GitCheckpointStore  # noqa: E402
from qvc.errors import CorruptionError  # noqa: E402


@pytest.fixture
def work(tmp_path) -> Path:
    """``tmp_path/work/.qvc``: threads main (3 checkpoints, HEAD) and side (2)."""
    with GitCheckpointStore(tmp_path / "work" / ".qvc") as store:
        for i in range(3):
            put(store, "main", f"m{i}", i, {"n": i})
        for i in range(2):
            put(store, "side", f"s{i}", i, {"n": 10 + i})
        store.checkout("main")
    return tmp_path / "work"


def one_line(proc) -> str:
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("qvc: "), proc.stderr
    return lines[0]


# -- a damaged staging database -------------------------------------------------------------------


def garble(db: Path, how: str) -> None:
    if how == "truncated":
        with open(db, "r+b") as f:
            f.truncate(db.stat().st_size // 2)
    elif how == "header":
        with open(db, "r+b") as f:
            f.write(b"GARBAGEGARBAGE")
    else:  # a later page
        with open(db, "r+b") as f:
            f.seek(4096)
            f.write(b"\xab" * 3000)


@pytest.mark.parametrize("how", ["truncated", "header", "page"])
def test_a_damaged_staging_database(work, how):
    db = work / ".qvc" / "qvc" / "staging.db"
    garble(db, how)
    damaged = db.read_bytes()
    # reads of git's files go on (warning when the read met the damage)
    proc = qvc("log", "--oneline", "--all", cwd=work)
    assert len(proc.stdout.splitlines()) == 5
    assert all(ln.startswith("qvc: warning: ") and "staging.db" in ln for ln in proc.stderr.splitlines())
    assert "On thread main" in qvc("status", cwd=work).stdout
    # a write: one line naming the file and the repair, exit 5
    line = one_line(qvc("branch", "fork", "main", cwd=work, check=5)
                    if how == "page" else _last(qvc("branch", "fork", "main", cwd=work, check=5)))
    assert str(db) in line and "qvc fsck --repair" in line
    # fsck finds it (SQLite's quick_check), exit 5
    proc = qvc("fsck", cwd=work, check=5)
    assert any(ln.startswith("error: ") and "staging.db" in ln for ln in proc.stderr.splitlines()), proc.stderr
    assert db.read_bytes() == damaged  # nothing deleted or rewritten
    with pytest.raises(CorruptionError, match="staging.db"):
        with GitCheckpointStore(work / ".qvc") as store:
            put(store, "main", "m9", 9, {"n": 9})
    # the repair moves it aside, saying so in one line; then writes work
    proc = qvc("fsck", "--repair", cwd=work)
    repaired = [ln for ln in proc.stdout.splitlines() if ln.startswith("repaired: ")]
    assert len(repaired) == 1 and "staging database" in repaired[0] and "qvc/quarantine/" in repaired[0]
    moved = list((work / ".qvc" / "qvc" / "quarantine").glob("*/qvc/staging.db"))
    assert len(moved) == 1 and moved[0].read_bytes() == damaged
    qvc("branch", "fork", "main", cwd=work)
    assert qvc("fsck", cwd=work).returncode == 0


def _last(proc):
    """``proc`` with only its last stderr line (a read before the write warned already)."""
    lines = proc.stderr.splitlines()
    assert all(ln.startswith("qvc: warning: ") for ln in lines[:-1]), proc.stderr
    proc.stderr = lines[-1] + "\n"
    return proc


# -- another program's HEAD.lock ------------------------------------------------------------------


def test_checkout_with_another_programs_HEAD_lock(work):
    lock = work / ".qvc" / "HEAD.lock"
    lock.write_text("y\n")
    for args in (["checkout", "side"], ["checkout", "-b", "nb", "side"], ["switch", "-c", "nb2"],
                 ["branch", "-m", "renamed"]):
        line = one_line(qvc(*args, cwd=work, check=4))
        assert str(lock) in line and "locked by another program" in line, line
    assert lock.read_text() == "y\n"  # left in place
    assert qvc("branch", cwd=work).stdout.split() == ["*", "main", "side"]  # no new thread left behind
    assert qvc("rev-parse", "--abbrev-ref", "HEAD", cwd=work).stdout.strip() == "main"
    lock.unlink()
    qvc("checkout", "-b", "nb", "side", cwd=work)
    assert qvc("rev-parse", "--abbrev-ref", "HEAD", cwd=work).stdout.strip() == "nb"


# -- a missing inner commit -----------------------------------------------------------------------


def explode(repo: Path) -> None:
    """Unpack every pack into loose objects (so that one object can be removed)."""
    for pack in list((repo / "objects" / "pack").glob("*.pack")):
        data = pack.read_bytes()
        pack.unlink()
        pack.with_suffix(".idx").unlink()
        run_git(repo, "unpack-objects", "-q", input=data, text=False)


def drop(repo: Path, sha: str) -> None:
    obj = repo / "objects" / sha[:2] / sha[2:]
    obj.chmod(0o644)
    obj.unlink()


def test_log_all_skips_a_thread_whose_inner_commit_is_missing(work):
    repo = work / ".qvc"
    explode(repo)
    inner = qvc("rev-parse", "main~1", cwd=work).stdout.strip()
    drop(repo, inner)
    proc = qvc("log", "--oneline", "--all", cwd=work)
    assert len(proc.stdout.splitlines()) == 2  # side's two checkpoints
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("qvc: warning: thread 'main' is damaged") and inner[:12] in lines[0]


# -- a config that does not parse -----------------------------------------------------------------


def test_a_config_that_does_not_parse(work):
    config = work / ".qvc" / "config"
    config.write_text("[core\n\tbare = true\n")
    for args in (["log", "--all", "--oneline"], ["fsck"], ["push"], ["branch", "x", "main"], ["gc"]):
        line = one_line(qvc(*args, cwd=work, check=5))
        assert line.startswith(f"qvc: {config}: config unreadable (") and "fix or restore that file" in line, line
    proc = qvc("status", cwd=work)  # status works, and warns
    assert "On thread main" in proc.stdout
    assert proc.stderr.startswith(f"qvc: warning: {config}: config unreadable ("), proc.stderr
    assert config.read_text() == "[core\n\tbare = true\n"


# -- the repair a missing object's hint names -----------------------------------------------------


def test_the_hint_for_a_missing_object_restores_it_from_a_remote(work, tmp_path):
    remote = tmp_path / "remote.git"
    run_git(None, "init", "-q", "--bare", str(remote))
    qvc("remote", "add", "origin", str(remote), cwd=work)
    qvc("push", "-q", "origin", cwd=work)
    repo = work / ".qvc"
    explode(repo)
    drop(repo, qvc("rev-parse", "main~1", cwd=work).stdout.strip())
    hint = qvc("log", "--oneline", "--all", cwd=work).stderr
    assert "`qvc fetch --refetch REMOTE` then `qvc gc`" in hint, hint
    qvc("fetch", "--refetch", "origin", cwd=work)
    qvc("gc", cwd=work)
    assert "ok" in qvc("fsck", cwd=work).stdout
    assert len(qvc("log", "--oneline", "main", cwd=work).stdout.splitlines()) == 3
