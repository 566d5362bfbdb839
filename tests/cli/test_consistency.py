"""Consistent with git and with itself (issue 15, part G), through the ``qvc`` command as a real process."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from helpers import put, qvc, qvc_json, run_git  # noqa: E402

from qvc import CheckpointConfig, GitCheckpointStore  # noqa: E402
from qvc.errors import InvalidInputError  # noqa: E402


@pytest.fixture
def work(tmp_path) -> Path:
    with GitCheckpointStore(tmp_path / "work" / ".qvc") as store:
        for i in range(4):
            put(store, "main", f"m{i}", i, {"n": i})
        store.checkout("main")
    return tmp_path / "work"


def test_remote_alone_lists_names_and_v_adds_urls(work, tmp_path):
    assert qvc("remote", cwd=work).stdout == ""
    for name in ("origin", "backup"):
        run_git(None, "init", "-q", "--bare", str(tmp_path / f"{name}.git"))
        qvc("remote", "add", name, str(tmp_path / f"{name}.git"), cwd=work)
    assert qvc("remote", cwd=work).stdout == "backup\norigin\n"
    urls = f"backup\t{tmp_path / 'backup.git'}\norigin\t{tmp_path / 'origin.git'}\n"
    assert qvc("remote", "-v", cwd=work).stdout == urls
    assert qvc("remote", "list", cwd=work).stdout == "backup\norigin\n"
    assert [r["name"] for r in qvc_json("remote", cwd=work)] == ["backup", "origin"]
    proc = qvc("remote", "-v", "add", "x", "y", cwd=work, check=2)
    assert proc.stderr.count("\n") == 1


def test_a_configured_remote_wins_over_a_directory_of_that_name(work, tmp_path):
    server = tmp_path / "server.git"
    run_git(None, "init", "-q", "--bare", str(server))
    qvc("remote", "add", "srv", str(server), cwd=work)
    (work / "srv").mkdir()  # a directory called like the remote, here where qvc runs
    (work / "srv" / "notes.txt").write_text("not a repository")
    pushed = qvc_json("push", "srv", cwd=work)
    assert pushed["remote"] == "srv" and pushed["url"] == str(server)
    assert run_git(server, "rev-parse", "main").stdout.strip() == qvc_json("status", cwd=work)["head"]
    qvc("fetch", "srv", cwd=work)
    assert (work / "srv" / "notes.txt").read_text() == "not a repository"
    # a path that is no remote's name is still a URL
    other = tmp_path / "other.git"
    run_git(None, "init", "-q", "--bare", str(other))
    qvc("push", str(other), cwd=work)
    assert run_git(other, "rev-parse", "main").stdout.strip() == qvc_json("status", cwd=work)["head"]


def test_a_file_as_repository_is_exit_128_either_way(work):
    (work / "plain.txt").write_text("x")
    for args, extra in ((["--repo", "plain.txt", "status"], {}), (["status"], {"QVC_DIR": "plain.txt"}),
                        (["--repo", "plain.txt", "log"], {}), (["log"], {"QVC_DIR": "plain.txt"})):
        proc = qvc(*args, cwd=work, check=128, **extra)
        assert proc.stderr.count("\n") == 1 and "is not a qvc repository" in proc.stderr, proc.stderr
    assert (work / "plain.txt").read_text() == "x"


def test_list_before_takes_a_config(work):
    with GitCheckpointStore(work / ".qvc") as store:
        by_id = [t.checkpoint.id for t in store.list(CheckpointConfig("main"), before="m2")]
        before = CheckpointConfig("main", "m2")
        by_config = [t.checkpoint.id for t in store.list(CheckpointConfig("main"), before=before)]
        assert by_id == by_config == ["m1", "m0"]
        assert [t.checkpoint.id for t in store.list(CheckpointConfig("main"), limit=1,
                                                    before=CheckpointConfig("main", "m3"))] == ["m2"]
        with pytest.raises(InvalidInputError):
            list(store.list(CheckpointConfig("main"), before=CheckpointConfig("main")))
