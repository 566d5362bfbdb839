"""Refs packed as threads accumulate, so that a repository of many threads stays cheap to read.

Each thread's head is a loose ref file: one 4 KB block on most file systems and one open per
ref for whoever lists them (``git branch`` on 20,000 loose refs takes 250 ms, on
``packed-refs`` 60 ms). Writers count the refs they create in ``qvc/refs-created``, one byte
per ref appended when the store closes (so the count costs one small append per store, not
one per put, and is read with one ``stat``). A closing store that finds :data:`PACK_REFS_AT`
or more runs ``git pack-refs --all --prune`` and empties the count.

``git pack-refs`` is safe with writers running: it writes the new ``packed-refs`` first (under
``packed-refs.lock``, flushed with ``core.fsync=reference`` unless the repository runs without
flushes), then removes each loose ref under that ref's own lock, and only if it still holds
the value it packed; a writer that meanwhile takes a ref's lock simply keeps its loose file.
Readers read loose refs before ``packed-refs`` and so never miss a ref moving between the two.
The count is a hint: a store killed before it closes adds nothing, and two stores packing at
once are harmless (the second waits for or skips the first one's lock).
"""

from __future__ import annotations

import contextlib
import os

CREATED = "qvc/refs-created"
PACK_REFS_AT = 256


def created(repo_path: str) -> int:
    """Refs created since the refs were last packed (as counted by closing stores)."""
    try:
        return os.stat(os.path.join(repo_path, CREATED)).st_size
    except FileNotFoundError:
        return 0


def note_created(repo_path: str, count: int) -> int:
    """Add ``count`` created refs to the count; return the count now."""
    path = os.path.join(repo_path, CREATED)
    if count > 0:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, b"." * count)
        finally:
            os.close(fd)
    return created(repo_path)


def pack_refs(repo_path: str, *, fsync: bool = True) -> bool:
    """Move every loose ref into ``packed-refs`` (``git pack-refs --all --prune``); empty the count.

    Returns whether git succeeded (a failure leaves the loose refs as they were, and the count,
    so a later store tries again). Call while holding the repository's shared lock, so that no
    exclusive maintenance runs meanwhile; writers may run.
    """
    from qvc.plumbing.maintenance import run

    settings = ["-c", "core.fsync=reference", "-c", "core.fsyncMethod=fsync"] if fsync else ["-c", "core.fsync=none"]
    proc = run(repo_path, *settings, "pack-refs", "--all", "--prune")
    if proc.returncode != 0:
        return False
    with contextlib.suppress(FileNotFoundError):
        os.truncate(os.path.join(repo_path, CREATED), 0)
    return True
