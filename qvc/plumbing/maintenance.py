"""Maintenance through git itself: packing and purging (libgit2 has no gc).

``git`` runs through :mod:`qvc.plumbing.launcher` with the system and global configuration
ignored (maintenance needs none of it), so nothing a repository names runs.
"""

from __future__ import annotations

import os
import subprocess
from typing import TYPE_CHECKING

from qvc.errors import QvcError
from qvc.plumbing import launcher
from qvc.plumbing.durability import harden

if TYPE_CHECKING:
    from qvc.plumbing.repository import Repository

# No automatic gc of git's own inside a command, no bitmaps qvc's packs do not need, and
# reflogs kept for every ref git moves (as qvc keeps them).
_SETTINGS = ["-c", "gc.auto=0", "-c", "maintenance.auto=false", "-c", "repack.writeBitmaps=false",
             "-c", "core.logAllRefUpdates=true"]


def run(repo_path: str, *args: str, lock_fd: int | None = None) -> subprocess.CompletedProcess:
    """Run ``git`` on the repository with its configuration neutralized; return the finished process.

    ``lock_fd`` (the maintenance lock) is inherited by git, so the lock outlives this process
    if it is killed while git runs.
    """
    return launcher.run(repo_path, [*_SETTINGS, *args], user_config=False, capture_output=True, text=True,
                        pass_fds=() if lock_fd is None else (lock_fd,))


def git(repo_path: str, *args: str, lock_fd: int | None = None) -> str:
    """Run ``git`` (see :func:`run`); its output, or :class:`QvcError` with git's message on failure."""
    proc = run(repo_path, *args, lock_fd=lock_fd)
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise QvcError(f"git {args[0]} failed: {detail[-1] if detail else proc.returncode}")
    return proc.stdout


def _prepare(repo: Repository) -> None:
    """Flush everything, and remove lock files crashed writers left (git refuses to touch a
    locked ref). Under the exclusive lock no qvc writer is mid-write, so every lock is stale."""
    from qvc.plumbing.recovery import RecoveryReport, remove_stale_files

    repo.harden()
    remove_stale_files(repo, 0.0, RecoveryReport())


def purge(repo: Repository, lock_fd: int) -> None:
    """Drop every unreachable object, packed or loose. Call under ``repo.exclusive()``, passing
    the lock's descriptor so git keeps the lock even if this process is killed meanwhile."""
    _prepare(repo)
    git(repo.path, "reflog", "expire", "--expire=now", "--all", lock_fd=lock_fd)
    git(repo.path, "repack", "-a", "-d", "-q", lock_fd=lock_fd)
    git(repo.path, "prune", "--expire=now", lock_fd=lock_fd)
    harden(repo.path, fsync=repo.fsync)


def gc(repo: Repository, lock_fd: int) -> None:
    """Pack refs and objects (git's own maintenance; libgit2 has none). Keeps unreachable objects:
    deleted checkpoints stay recoverable until :func:`purge`. Call under ``repo.exclusive()``."""
    _prepare(repo)
    git(repo.path, "pack-refs", "--all", "--prune", lock_fd=lock_fd)
    git(repo.path, "repack", "-a", "-d", "-q", "--keep-unreachable", lock_fd=lock_fd)
    harden(repo.path, fsync=repo.fsync)


def due(repo: Repository) -> str | None:
    """Why maintenance (``qvc gc``) is due, or ``None``: many packs, loose objects or loose refs."""
    packs = sum(1 for n in os.listdir(repo.pack_dir) if n.endswith(".idx"))
    objects = os.path.join(repo.path, "objects")
    loose = sum(len(os.listdir(os.path.join(objects, d))) for d in os.listdir(objects) if len(d) == 2)
    refs = sum(len(files) for _, _, files in os.walk(os.path.join(repo.path, "refs")))
    reasons = [f"{n} {what}" for n, what, limit in ((packs, "packs", 50), (loose, "loose objects", 1000),
                                                     (refs, "loose refs", 2000)) if n > limit]
    return ", ".join(reasons) or None


def disk_usage(path: str) -> int:
    """Bytes in the files under ``path`` (files that vanish meanwhile count as 0)."""
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total
