"""Shared fixtures: a fresh on-disk qvc repository per test, and a ``git`` runner for it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from qvc import GitCheckpointStore  # noqa: E402
from qvc.plumbing.repository import publish_open  # noqa: E402


def _git_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_TERMINAL_PROMPT="0",
               LC_ALL="C.UTF-8")
    return env


def child_env() -> dict:
    """The environment for a Python subprocess that imports qvc from this checkout.

    Output is unbuffered, so each argument of ``print`` is its own write: a child that may be
    killed prints a line's fields as one string, so a kill cannot leave half a line.
    """
    env = dict(os.environ)
    # Children cache their compiled modules as users' Pythons do: hundreds of qvc processes
    # would otherwise each compile the package again (a third of a CLI call's time).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def git_env(path) -> dict:
    """The environment for running the real ``git`` on the repository at ``path`` (no user config)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_DIR=os.fspath(path), GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, LC_ALL="C")
    return env


def fsck(path) -> None:
    """Assert that ``git fsck --strict`` accepts the repository at ``path`` (once this process's
    open stores there have published their writes, as a program does before it runs git)."""
    publish_open(path)
    proc = subprocess.run([shutil.which("git") or "git", "fsck", "--strict", "--no-progress"],
                          env=git_env(path), capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)
    assert proc.returncode == 0, f"git fsck --strict failed:\n{proc.stdout}\n{proc.stderr}"


def run_git(git_dir, *args: str, check: bool = True, input: bytes | None = None,
            text: bool = True) -> subprocess.CompletedProcess:
    """Run the real ``git`` binary against ``git_dir`` (a bare repository; ``None``: no --git-dir),
    once this process's open stores there have published their writes (see ``fsck``)."""
    if git_dir is not None:
        publish_open(git_dir)
    exe = shutil.which("git")
    assert exe is not None, "git must be installed for these tests"
    prefix = [] if git_dir is None else [f"--git-dir={os.fspath(git_dir)}"]
    stdin = subprocess.DEVNULL if input is None else None
    proc = subprocess.run([exe, *prefix, *args], env=_git_env(), stdin=stdin,
                          capture_output=True, input=input, text=text, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
    return proc


@pytest.fixture
def repo_path(tmp_path) -> Path:
    """Where the test's repository lives (not created yet)."""
    return tmp_path / "r.qvc"


@pytest.fixture
def store(repo_path):
    """A fresh ``GitCheckpointStore`` at ``repo_path``, closed at teardown."""
    s = GitCheckpointStore(repo_path)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def git(repo_path):
    """``git(*args)`` runs ``git --git-dir=<repo_path> *args`` and returns the CompletedProcess."""

    def _run(*args: str, check: bool = True, input=None, text: bool = True):
        return run_git(repo_path, *args, check=check, input=input, text=text)

    return _run


@pytest.fixture
def isolated_git(tmp_path, monkeypatch):
    """git with no system config and a global config of the test's own (empty unless a test writes it)."""
    config = tmp_path / "gitconfig"
    config.write_text("")
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    return config
