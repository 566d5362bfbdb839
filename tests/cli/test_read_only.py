"""A repository the user may not write is read as git reads one: every reading command works
(`config` and `gc --dry-run` included), a write fails in one line, and nothing changes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from helpers import QVC, env, put  # noqa: E402

from qvc import GitCheckpointStore  # noqa: E402

#: root reads and writes whatever the modes say: drop the capabilities that let it (util-linux's setpriv)
AS_USER = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner"] if os.geteuid() == 0 else []


def tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.fixture
def read_only(tmp_path):
    if AS_USER and shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is needed to drop root's file capabilities")
    repo = tmp_path / "r.qvc"
    with GitCheckpointStore(repo) as store:
        for i in range(3):
            put(store, "main", f"m{i}", i, {"n": i})
        store.set_config("retention.keepLast", "1")
        store.checkout("main")
    subprocess.run(["chmod", "-R", "a-w", str(repo)], check=True)
    try:
        yield repo
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(repo)], check=True)


def qvc_as_user(repo: Path, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([*AS_USER, *QVC, "--repo", str(repo), *args], env=env(), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_reading_commands_work_on_a_repository_the_user_may_not_write(read_only):
    before = tree(read_only)
    for args in (["log", "--oneline"], ["status"], ["show"], ["branch", "-v"]):
        assert qvc_as_user(read_only, *args).returncode == 0, args
    got = qvc_as_user(read_only, "config", "retention.keepLast")  # git config reads without a lock
    assert (got.returncode, got.stdout, got.stderr) == (0, "1\n", "")
    got = qvc_as_user(read_only, "config", "--list")
    assert got.returncode == 0 and "retention.keeplast=1" in got.stdout.splitlines()
    assert qvc_as_user(read_only, "config", "no.such").returncode == 1  # unset: exit 1, as git
    got = qvc_as_user(read_only, "gc", "--dry-run")  # changes nothing: a read
    assert got.returncode == 0 and "would remove 2 checkpoint(s)" in got.stdout, got.stdout + got.stderr
    got = qvc_as_user(read_only, "config", "retention.keepLast", "2")
    assert got.returncode == 1 and got.stderr.count("\n") == 1 and "Permission denied" in got.stderr
    assert tree(read_only) == before
