"""Shared fixtures: a fresh on-disk qvc repository per test, and a ``git`` runner for it (the
helpers tests import are in helpers.py); and the choice of the quick tier."""

from __future__ import annotations

import faulthandler
import gc
import os
from pathlib import Path

import pytest
from helpers import run_git, use_quick_profile  # helpers also puts the checkout on sys.path

from qvc import GitCheckpointStore


def _quick_tier(config) -> bool:
    return " ".join((config.getoption("markexpr", "") or "").split()) == "not slow"


def pytest_configure(config) -> None:
    """``-m "not slow"`` given explicitly selects the quick tier (see README.md); the default
    run (no ``-m``) keeps the full budgets."""
    if _quick_tier(config):
        use_quick_profile()


def pytest_xdist_auto_num_workers(config) -> int | None:
    """``-n auto`` (pyproject.toml's addopts): one worker per core, at most eight, since each
    worker imports every framework the suites drive (0.7 GB). ``PYTEST_XDIST_AUTO_NUM_WORKERS``
    in the environment still decides (pytest-xdist's own hook reads it)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return min(8, len(os.sched_getaffinity(0)))


def pytest_collection_modifyitems(config, items) -> None:
    """The quick tier also leaves out the modules marked ``heavy`` (the fault suites' kill,
    power-loss and fleet loops); the default run and CI run them."""
    if not _quick_tier(config):
        return
    heavy = [item for item in items if item.get_closest_marker("heavy")]
    if heavy:
        config.hook.pytest_deselected(items=heavy)
        items[:] = [item for item in items if not item.get_closest_marker("heavy")]


def pytest_collection_finish(session) -> None:
    """Collection imported every framework the suites drive (millions of long-lived objects):
    freeze them, so that no collection of cyclic garbage walks them again, and collect the
    young generation less often (it held a few per cent of the run's time)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 10)


@pytest.fixture(autouse=True)
def _long_variants_are_not_timed(request):
    """A long variant (marked ``slow``) may run past ``faulthandler_timeout`` by design; dumping
    every thread's stack then, while another thread is inside libgit2, can crash the process,
    so the dump is not armed for them."""
    if request.node.get_closest_marker("slow"):
        faulthandler.cancel_dump_traceback_later()
    yield


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
