"""Maintenance through git itself: packing and purging (libgit2 has no gc).

``git`` runs through :func:`qvc.plumbing.launcher.git` (the everyday runner: the system and
global configuration ignored, nothing a repository names runs).
"""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING, Collection

from qvc.errors import QvcError, StorageError
from qvc.logs import log
from qvc.plumbing import refpack
from qvc.plumbing.durability import harden
from qvc.plumbing.leftovers import RecoveryReport

if TYPE_CHECKING:
    from qvc.plumbing.repository import Repository



def _prepare(repo: Repository) -> None:
    """Flush everything, remove lock files crashed writers left (git refuses to touch a locked
    ref) and rebuild damaged pack indexes (moving what cannot be repaired aside, see
    :func:`~qvc.plumbing.recovery.repair_packs`). Under the exclusive lock no qvc writer is
    mid-write, so every lock is stale."""
    from qvc.plumbing.recovery import remove_stale_files, repair_packs  # deferred: `qvc status` asks due() only

    repo.harden()
    report = RecoveryReport()
    remove_stale_files(repo, 0.0, report)
    repair_packs(repo, report)  # git refuses to repack beside a damaged index
    if report:
        log.warning("qvc: before maintenance of %s: %s", repo.path, report.summary())
    repo.recovered(report.moved)


def purge(repo: Repository, lock_fd: int) -> None:
    """Drop every unreachable object, packed or loose. Call under ``repo.exclusive()``, passing
    the lock's descriptor so git keeps the lock even if this process is killed meanwhile."""
    from qvc.plumbing.launcher import git  # deferred: `qvc status` asks due() only

    _prepare(repo)
    blocked = repo.staging.staged_refs("")
    if blocked:  # their commits may be reachable from nothing git's files name: never prune them
        raise StorageError(f"{repo.path}: cannot purge while {', '.join(sorted(blocked))} cannot be written to "
                           "git's files (another program's lock, or a qvc publisher that is stopped); nothing "
                           "was purged", errno.EBUSY)
    # First what needs free space (a full disk then fails the purge before it changed anything):
    # what was staged and published leaves the staging database's files too.
    repo.staging.erase()
    git(repo.path, "reflog", "expire", "--expire=now", "--all", lock_fd=lock_fd)
    git(repo.path, "repack", "-a", "-d", "-q", lock_fd=lock_fd)
    git(repo.path, "prune", "--expire=now", lock_fd=lock_fd)
    if os.path.exists(os.path.join(repo.path, refpack.GRAPH)):  # it names commits just pruned
        refpack.commit_graph(repo.path, fsync=repo.fsync, replace=True)
    harden(repo.path, fsync=repo.fsync)


def gc(repo: Repository, lock_fd: int) -> None:
    """Pack refs and objects (git's own maintenance; libgit2 has none). Keeps unreachable objects:
    deleted checkpoints stay recoverable until :func:`purge`. Call under ``repo.exclusive()``."""
    from qvc.plumbing.launcher import git  # deferred: `qvc status` asks due() only

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


def object_sizes(repo: Repository) -> dict[bytes, int]:
    """``{raw oid: bytes it takes on disk}`` of every object in git's files (packed: its entry in
    the pack, a delta where it is one; loose: its file), reachable or not. Publishes first."""
    from qvc.plumbing.launcher import git  # deferred: `qvc status` asks due() only

    repo.publish()
    out = git(repo.path, "cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objectsize:disk)")
    sizes: dict[bytes, int] = {}
    for line in out.splitlines():
        oid, _, size = line.partition(" ")
        sizes[bytes.fromhex(oid)] = int(size)
    return sizes


def reachable(repo: Repository, tips: Collection[str]) -> set[bytes]:
    """The raw oids of every object reachable from ``tips`` (commits, trees or blobs, hex), as git
    walks them (``rev-list --objects``). Publishes first."""
    from qvc.plumbing.launcher import run_git  # deferred: `qvc status` asks due() only

    repo.publish()
    if not tips:
        return set()
    proc = run_git(repo.path, "rev-list", "--objects", "--no-object-names", "--stdin",
                   input="".join(f"{t}\n" for t in tips))
    if proc.returncode != 0:
        raise QvcError(f"git rev-list failed: {(proc.stderr or '').strip().splitlines()[-1:]}")
    return {bytes.fromhex(line) for line in proc.stdout.split()}


def history_usage(path: str) -> int:
    """Bytes of the files that hold a repository's history: git's objects and its reflogs (qvc's
    compacted ones included); what a purge shrinks, the staging database aside."""
    return sum(disk_usage(os.path.join(path, *where)) for where in (("objects",), ("logs",), ("qvc", "reflogs")))


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
