"""A repository is data: nothing its hooks or configuration name ever runs when qvc works on it.

A trapped repository (:func:`traps.arm`) carries every git hook (githooks(5)) in ``hooks/`` and
in a ``core.hooksPath`` directory, and sets every program-naming configuration key (directly,
through ``include.path`` and through a conditional include) to a script that leaves a marker file.
Every operation that starts ``git`` runs on it as a real subprocess or library call: push,
fetch, clone (of it, and a clone that then fetches from it), background replication, gc, purge,
fsck, ``log --graph``, and the server's actions. Nothing may leave a marker, and push and fetch
must still work. The user's own programs (a credential helper in the global configuration)
still run. A last test fails if any module starts a process without the one launcher.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import time
from pathlib import Path

import helpers
import pytest
from helpers import child_env, run_git
from traps import PROGRAM_KEYS, arm, use_hooks_dir

import qvc
from qvc import CheckpointConfig, GitCheckpointStore
from qvc.plumbing import launcher
from qvc.readers.fsck import fsck as qvc_fsck
from qvc.readers.log import graph
from qvc.remotes.remote import add_remote, remotes

pytestmark = pytest.mark.usefixtures("isolated_git")

PACKAGE = Path(__file__).resolve().parents[2] / "qvc"

def qvc_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "qvc", *args], capture_output=True, text=True, timeout=120,
                          env={**child_env(), "GIT_PAGER": "", "PAGER": "cat"}, stdin=subprocess.DEVNULL)
    assert not check or proc.returncode == 0, f"qvc {' '.join(args)}: {proc.stderr}"
    return proc


def put(store: GitCheckpointStore, thread: str, cid: str, n: int) -> None:
    """``helpers.put`` of a state holding ``n`` messages (kept: the tests name states by ``n``)."""
    helpers.put(store, thread, cid, state={"n": n, "messages": ["m"] * n})


def ran(markers: Path) -> list[str]:
    return sorted(os.listdir(markers))


@pytest.fixture
def trapped(tmp_path):
    repo, bare, markers = tmp_path / "r.qvc", tmp_path / "bare.git", tmp_path / "markers"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True, env=child_env())
    with GitCheckpointStore(repo) as store:
        put(store, "t", "a", 1)
        add_remote(store, "o", str(bare))
    made = arm(repo, markers)
    assert len(made) > 2 * len(launcher.HOOKS) + len(PROGRAM_KEYS)
    subprocess.run([str(made[0])], check=True, input=b"")  # the traps do fire when run
    assert ran(markers)
    for m in markers.iterdir():
        m.unlink()
    return repo, bare, markers


@pytest.mark.parametrize("hooks", ["hooks-dir", "hooksPath"])
def test_push_fetch_and_clone_run_nothing_the_repository_names(trapped, tmp_path, hooks):
    repo, bare, markers = trapped
    if hooks == "hooks-dir":
        use_hooks_dir(repo)
    with GitCheckpointStore(repo) as store:
        put(store, "t", "b", 2)
        result = qvc.push(store, "o")
        assert result.pushed, "the push did nothing"
        put(store, "t", "c", 3)
        qvc.push(store, "o", ["t"])
        assert run_git(bare, "rev-parse", "refs/heads/t").stdout.strip() == store.head("t")
        qvc.fetch(store, "o")
        assert store.repository.ref("refs/remotes/o/t") == store.head("t")
    assert ran(markers) == [], f"the library's push/fetch ran {ran(markers)}"
    qvc_cli("--repo", str(repo), "push", "o")
    qvc_cli("--repo", str(repo), "fetch", "o")
    qvc_cli("--repo", str(repo), "remote", "list", "-v")
    assert ran(markers) == [], f"qvc push/fetch ran {ran(markers)}"
    # the trapped repository as a clone's source (its own upload-pack reads its config), over a path
    dest = tmp_path / f"clone-{hooks}.qvc"
    qvc_cli("clone", str(repo), str(dest))
    with GitCheckpointStore(dest, create=False) as clone:
        assert clone.head("t") is not None
        qvc.fetch(clone, "origin")
    assert ran(markers) == [], f"a clone of the trapped repository ran {ran(markers)}"


def test_maintenance_log_fsck_and_the_server_run_nothing(trapped, tmp_path):
    repo, _, markers = trapped
    with GitCheckpointStore(repo) as store:
        put(store, "t", "b", 2)
        store.delete(CheckpointConfig("t", "b"))
        store.gc()
        assert qvc_fsck(store).problems == []
        assert "t" in graph(store, all=True)
        store.purge()
    for args in (["gc"], ["gc", "--prune"], ["fsck"], ["log", "--all", "--graph"], ["log", "--graph", "t"],
                 ["status"], ["branch", "-v"]):
        qvc_cli("--repo", str(repo), *args)
    assert ran(markers) == [], f"maintenance ran {ran(markers)}"
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from qvc.server import create_app

    with TestClient(create_app(repo), base_url="http://127.0.0.1") as client:
        assert client.get("/api/threads").status_code == 200
        assert client.get("/api/threads/t").status_code == 200
        reply = client.post("/api/fork", json={"checkpoint": "t", "thread": "forked"})
        assert reply.status_code in (200, 201), reply.text
    assert ran(markers) == [], f"the server's actions ran {ran(markers)}"


def test_background_replication_runs_nothing(trapped):
    repo, bare, markers = trapped
    with GitCheckpointStore(repo) as store:
        qvc.remotes.set_replicate(store, "o", True)
    with GitCheckpointStore(repo) as store:
        put(store, "r", "r1", 1)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and run_git(bare, "for-each-ref", "refs/heads/r").stdout == "":
            time.sleep(0.1)
        assert run_git(bare, "rev-parse", "refs/heads/r").stdout.strip() == store.head("r"), "nothing replicated"
    assert ran(markers) == [], f"replication ran {ran(markers)}"
    with GitCheckpointStore(repo, readonly=True) as reader:
        assert any(r.replicate for r in remotes(reader))


def test_the_users_own_programs_still_run(trapped, tmp_path, isolated_git):
    """A credential helper and an askpass program in the user's global configuration are the user's
    choice: the launcher hands them to git in place of the repository's."""
    repo, _, markers = trapped
    mine = tmp_path / "mine"
    mine.mkdir()
    helper = mine / "helper"
    helper.write_text(f"#!/bin/sh\ntouch '{mine}/helper-ran'\n")
    helper.chmod(0o755)
    assert "credential.helper=" in launcher.neutralizing(str(repo))  # read before the user's config changes
    isolated_git.write_text(f"[credential]\n\thelper = {helper}\n[core]\n\taskPass = /bin/false\n")
    options = launcher.neutralizing(str(repo))  # the edit is seen: the user's values replace the repository's
    assert f"credential.helper={helper}" in options and "credential.helper=" in options
    assert "core.askpass=/bin/false" in options
    assert f"core.hookspath={os.devnull}" in options
    proc = launcher.run(str(repo), ["credential", "fill"], input="protocol=https\nhost=example.com\n\n",
                        capture_output=True, text=True, timeout=30)
    assert (mine / "helper-ran").exists(), proc.stderr
    assert ran(markers) == [], f"the repository's own helpers ran too: {ran(markers)}"


# -- the one launcher ----------------------------------------------------------------------------

_STARTERS = {("subprocess", "run"), ("subprocess", "Popen"), ("subprocess", "call"), ("subprocess", "check_call"),
             ("subprocess", "check_output"), ("subprocess", "getoutput"), ("subprocess", "getstatusoutput"),
             ("os", "system"), ("os", "popen"), ("pty", "spawn"), ("asyncio", "create_subprocess_exec"),
             ("asyncio", "create_subprocess_shell")}


def starters(source: str) -> list[str]:
    """Calls in ``source`` that start a process without the launcher."""
    found = []
    for node in ast.walk(ast.parse(source)):
        func = getattr(node, "func", None)
        if isinstance(node, ast.Call) and isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            pair = (node.func.value.id, node.func.attr)
            if pair in _STARTERS or (pair[0] == "os" and pair[1].startswith(("exec", "spawn", "posix_spawn"))):
                found.append(f"{pair[0]}.{pair[1]} (line {node.lineno})")
        if isinstance(node, ast.ImportFrom) and node.module in ("subprocess", "pty") and any(
                a.name in {s for _, s in _STARTERS} for a in node.names):
            found.append(f"from {node.module} import ... (line {node.lineno})")
    return found


def test_only_the_launcher_starts_processes():
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "plumbing" / "launcher.py":
            continue
        found = starters(path.read_text())
        if found:
            offenders[str(path.relative_to(PACKAGE.parent))] = found
    assert offenders == {}, f"start git through qvc.plumbing.launcher: {offenders}"
    assert starters((PACKAGE / "plumbing" / "launcher.py").read_text()), "the launcher itself must be seen"


def test_the_check_catches_a_new_way_of_starting_git():
    assert starters("import subprocess\nsubprocess.run(['git', 'gc'])\n")
    assert starters("import os\nos.execvp('git', ['git'])\n")
    assert starters("from subprocess import Popen\n")
    assert not starters("import subprocess\nx = subprocess.PIPE\n")
