"""Where a sample writes: the one helper every sample (``samples/*.py``) goes through; and
:func:`check` and :func:`qvc`, how a sample says what it verified and shows a command.

A sample creates its repositories at new paths only. It reuses a path only when a sample
created what is there (it holds the :data:`MARK` file), and then replaces only that. Anything
else (a user's file, a non-empty directory, a repository of real runs) is refused with one line
on stderr and exit status 2, and nothing is touched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator

from qvc import GitCheckpointStore


def check(condition: bool, what: str) -> None:
    """Print ``what`` as verified (``ok``) or not (``FAIL``, then exit 1)."""
    print(("  ok    " if condition else "  FAIL  ") + what)
    if not condition:
        raise SystemExit(1)


def qvc(repo: str, *args: str) -> None:
    """Run ``qvc --repo REPO ARGS`` as a user would, print its output, and :func:`check` it succeeded."""
    exe = [shutil.which("qvc")] if shutil.which("qvc") else [sys.executable, "-m", "qvc"]
    print(f"\n$ qvc {' '.join(args)}")
    done = subprocess.run([*exe, "--repo", repo, "--no-pager", "--color=never", *args], capture_output=True,
                          text=True)
    print(done.stdout.rstrip())
    check(done.returncode == 0, f"qvc {args[0]} succeeded" + (f": {done.stderr.strip()}" if done.stderr else ""))


#: The file a sample writes into every repository it creates: only those are ever replaced.
MARK = "qvc-sample"


def refuse(path: str, why: str) -> None:
    """Exit with status 2 and one line on stderr: the sample will not write at ``path``."""
    print(f"{os.path.basename(sys.argv[0])}: {path} {why} (choose a new path)", file=sys.stderr)
    sys.exit(2)


def fresh_path(path: str) -> str:
    """``path`` made free for a sample to create a repository there; its absolute form.

    Missing or an empty directory: fine. A directory a sample created before (it holds
    :data:`MARK`): removed. Anything else (a file, a user's directory or repository) is refused
    (:func:`refuse`); nothing is touched.
    """
    path = os.path.abspath(path)
    if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
        refuse(path, "is a file (or a link), not created by a qvc sample; refusing to replace it")
    if os.path.isdir(path):
        entries = os.listdir(path)
        if entries and not os.path.isfile(os.path.join(path, MARK)):
            refuse(path, "exists and was not created by a qvc sample; refusing to replace it")
        shutil.rmtree(path) if entries else os.rmdir(path)
    parent = os.path.dirname(path)
    if os.path.lexists(parent) and not os.path.isdir(parent):
        refuse(path, "is inside a file; refusing to write there")
    return path


def mark(path: str) -> None:
    """Mark the repository at ``path`` as created by a sample (see :func:`fresh_path`)."""
    with open(os.path.join(path, MARK), "w") as f:
        f.write("created by a qvc sample; the samples may replace this repository\n")


def fresh_repository(path: str) -> str:
    """An empty qvc repository at ``path`` (see :func:`fresh_path`), marked as the sample's."""
    path = fresh_path(path)
    GitCheckpointStore(path).close()
    mark(path)
    return path


def fresh_remote(path: str) -> str:
    """An empty bare git repository at ``path`` (see :func:`fresh_path`), marked as the sample's."""
    path = fresh_path(path)
    subprocess.run(["git", "init", "--quiet", "--bare", path], check=True)
    mark(path)
    return path


@contextlib.contextmanager
def sample_repository(path: str | None, prefix: str) -> Iterator[str]:
    """The repository a sample writes: ``path`` (created by :func:`fresh_repository`: replaced
    only if a sample created it), or one in a new temporary directory removed afterwards."""
    if path is not None:
        yield fresh_repository(path)
        return
    tmp = tempfile.mkdtemp(prefix=prefix)
    try:
        yield os.path.join(tmp, "runs.qvc")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
