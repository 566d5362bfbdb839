"""Refs packed as threads accumulate, so that a repository of many threads stays cheap to read.

Each thread's head is a loose ref file: one 4 KB block on most file systems and one open per
ref for whoever lists them (``git branch`` on 20,000 loose refs takes 250 ms, on
``packed-refs`` 60 ms). Writers count the refs they create in ``qvc/refs-created``, one byte
per ref, appended once :data:`PACK_REFS_AT` are published (by the store's background packer)
and at close (so the count costs a small append now and then, not one per put, and is read
with one ``stat``). A store that finds the count at :data:`PACK_REFS_AT` or more runs
``git pack-refs --all --prune`` and empties the count.

``git pack-refs`` is safe with writers running: it writes the new ``packed-refs`` first (under
``packed-refs.lock``, flushed with ``core.fsync=reference`` unless the repository runs without
flushes), then removes each loose ref under that ref's own lock, and only if it still holds
the value it packed; a writer that meanwhile takes a ref's lock simply keeps its loose file.
Readers read loose refs before ``packed-refs`` and so never miss a ref moving between the two.
The count is a hint: a store killed before it closes adds nothing, and two stores packing at
once are harmless (the second waits for or skips the first one's lock).

Then :func:`compact_reflogs` moves the one-line reflogs of threads into ``qvc/reflogs`` (see
:mod:`qvc.plumbing.reflog`), each under its ref's lock, as git takes it to append to a reflog,
so no entry a writer appends meanwhile is lost; and, when :func:`graph_due` says so,
:func:`commit_graph` writes git's commit-graph (generation numbers for ``qvc log --all``). The
graph is written when the refs packed since it was last written reach a quarter of all refs:
its writes cost O(n) over a repository's life, and a store packing as it creates threads (in
the background, every :data:`PACK_REFS_AT`) leaves ``close()`` little to do.
"""

from __future__ import annotations

import contextlib
import os

from qvc.plumbing.durability import dirty, fsync_dir, harden
from qvc.plumbing.pack import write_all
from qvc.plumbing.reflog import PACKED, ReflogEntry, shard_of

CREATED = "qvc/refs-created"
UNGRAPHED = "qvc/refs-ungraphed"
PACK_REFS_AT = 256
GRAPH_SHARE = 4  # the commit-graph is rewritten once a 1/GRAPH_SHARE of the refs is new to it
GRAPH = "objects/info/commit-graphs/commit-graph-chain"


def without_packed(repo_path: str, name: str) -> list[bytes] | None:
    """The lines of ``repo_path``'s ``packed-refs`` without ref ``name``'s entry (and its peeled
    ``^`` line), as git deletes a packed ref; ``None`` if it has no entry (nothing to rewrite).
    Read under ``packed-refs.lock``, so that no other writer changes the file meanwhile."""
    try:
        with open(os.path.join(repo_path, "packed-refs"), "rb") as f:
            lines = f.read().split(b"\n")
    except FileNotFoundError:
        return None
    wanted = name.encode("utf-8", "surrogateescape")
    kept: list[bytes] = []
    skipping = False
    for line in lines:
        if skipping and line.startswith(b"^"):
            continue  # the peeled value of the removed entry
        sha, _, ref = line.partition(b" ")
        skipping = ref == wanted and len(sha) == 40 and not line.startswith(b"#")
        if not skipping:
            kept.append(line)
    return kept if len(kept) != len(lines) else None


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def _count(path: str, count: int) -> int:
    """Add ``count`` to the count kept as the size of the file at ``path``; return the count now."""
    if count > 0:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, b"." * count)
        finally:
            os.close(fd)
    return _size(path)


def created(repo_path: str) -> int:
    """Refs created since the refs were last packed (as counted by stores)."""
    return _size(os.path.join(repo_path, CREATED))


def note_created(repo_path: str, count: int) -> int:
    """Add ``count`` created refs to the count; return the count now."""
    return _count(os.path.join(repo_path, CREATED), count)


def graph_due(repo_path: str, packed: int) -> bool:
    """Note ``packed`` refs just packed; whether the commit-graph should be written now: there is
    none yet, or the refs packed since it was written are at least 1/:data:`GRAPH_SHARE` of all
    refs (estimated from ``packed-refs``' size, 64 bytes a ref). A hint, like the count."""
    since = _count(os.path.join(repo_path, UNGRAPHED), packed)
    if not os.path.exists(os.path.join(repo_path, GRAPH)) and not os.path.exists(
            os.path.join(repo_path, "objects", "info", "commit-graph")):
        return True
    return since * GRAPH_SHARE * 64 >= _size(os.path.join(repo_path, "packed-refs"))


def pack_refs(repo_path: str, *, fsync: bool = True) -> bool:
    """Move every loose ref into ``packed-refs`` (``git pack-refs --all --prune``); empty the count.

    Returns whether git succeeded (a failure leaves the loose refs as they were, and the count,
    so a later store tries again). Call while holding the repository's shared lock, so that no
    exclusive maintenance runs meanwhile; writers may run.
    """
    settings = ["-c", "core.fsync=reference", "-c", "core.fsyncMethod=fsync"] if fsync else ["-c", "core.fsync=none"]
    from qvc.plumbing.launcher import run_git  # deferred: a reading process never runs git through it

    proc = run_git(repo_path, *settings, "pack-refs", "--all", "--prune")
    if proc.returncode != 0:
        return False
    # git flushed packed-refs (core.fsync) but not its rename, nor the removals of loose refs
    dirty(repo_path).changed(repo_path)
    with contextlib.suppress(FileNotFoundError):
        os.truncate(os.path.join(repo_path, CREATED), 0)
    return True


ONE_LINE = 512  # bytes: a reflog file at most this long may hold a single entry
BATCH = 1024  # ref locks held at once while compacting
FLUSH_EACH = 4  # a batch touching more shards than this flushes them with one syncfs


def compact_reflogs(repo_path: str, *, fsync: bool = True) -> int:
    """Move the reflog file of every thread that holds a single entry into ``qvc/reflogs``;
    return how many were moved.

    Each file is read under its ref's lock (``refs/heads/<thread>.lock``, taken as git and
    libgit2 take it; a ref locked by a writer is skipped), its line appended to its shard, the
    shards flushed, and only then the file removed and the lock released; a crash in between
    leaves the entry in both places, which readers take once. Locks a crash leaves behind are
    removed by recovery.

    Refs go in batches of at most :data:`BATCH` locks, in shard order. A batch that touches at
    most :data:`FLUSH_EACH` shards flushes each (and the directory when a shard is new); a
    larger one flushes the file system once (``syncfs``, :func:`~qvc.plumbing.durability.harden`):
    a thousand new threads' reflogs spread over most of the 256 shards, and one flush of each
    would cost a quarter of a second or more.
    """
    logs = os.path.join(repo_path, "logs", "refs", "heads")
    try:
        entries = list(os.scandir(logs))
    except FileNotFoundError:
        return 0
    todo: list[tuple[str, str]] = []  # (shard, ref name)
    for entry in entries:
        if entry.name.endswith(".lock") or not entry.is_file(follow_symlinks=False):
            continue
        with contextlib.suppress(OSError):
            if entry.stat(follow_symlinks=False).st_size > ONE_LINE:
                continue
        name = "refs/heads/" + entry.name
        todo.append((shard_of(name), name))
    if not todo:
        return 0
    packed = os.path.join(repo_path, PACKED)
    if not os.path.isdir(packed):
        os.makedirs(packed, exist_ok=True)
        if fsync:  # the new directory's name, before any entry in it counts as durable
            fsync_dir(os.path.dirname(packed))
    todo.sort()
    return sum(_move(repo_path, todo[i:i + BATCH], fsync) for i in range(0, len(todo), BATCH))


def _move(repo_path: str, batch: list[tuple[str, str]], fsync: bool) -> int:
    """Compact the one-line reflogs of ``batch`` (``(shard, ref name)``) whose locks are free."""
    locks: list[str] = []
    logs: list[str] = []
    shards: dict[str, list[bytes]] = {}
    try:
        for shard, name in batch:
            lock = os.path.join(repo_path, name + ".lock")
            try:
                os.close(os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644))
            except OSError:
                continue  # a writer holds it (or the ref is gone): next time
            locks.append(lock)
            log = os.path.join(repo_path, "logs", name)
            try:
                with open(log, "rb") as f:
                    data = f.read(ONE_LINE + 1)
            except OSError:
                continue
            lines = data.split(b"\n")
            if len(lines) == 2 and lines[1] == b"" and ReflogEntry.parse(lines[0]) is not None:
                shards.setdefault(shard, []).append(name.encode("utf-8", "surrogateescape") + b"\t" + lines[0] + b"\n")
                logs.append(log)
        each = fsync and len(shards) <= FLUSH_EACH
        created = False
        for shard, lines in shards.items():
            created = _append(os.path.join(repo_path, PACKED, shard), b"".join(lines), each) or created
        if each and created:
            fsync_dir(os.path.join(repo_path, PACKED))
        elif fsync and shards:
            harden(repo_path)  # the shards, new directory entries included
        for log in logs:  # only now: every line is durable in its shard
            os.unlink(log)
        return len(logs)
    finally:
        for lock in locks:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lock)


def _append(path: str, data: bytes, fsync: bool) -> bool:
    """Append ``data`` (whole lines) to the shard at ``path`` and flush it; return whether the
    file is new. The block starts with a newline (readers skip empty lines), so a line a failed
    write or a crash left torn never swallows the first line of this one."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC
    try:
        fd, created = os.open(path, flags), False
    except FileNotFoundError:
        fd, created = os.open(path, flags | os.O_CREAT, 0o644), True
    try:
        write_all(fd, b"\n" + data)
        if fsync:
            os.fdatasync(fd)
    finally:
        os.close(fd)
    return created


def commit_graph(repo_path: str, *, fsync: bool = True, replace: bool = False) -> bool:
    """Write git's commit-graph of every reachable commit (``git commit-graph write --reachable
    --split``: a new layer for the commits since the last one, merged geometrically by git;
    ``replace``: one new layer instead of every existing one, as after a prune, which removes
    commits the old layers still name and ``git fsck`` then reports).

    It gives git generation numbers, so ``git rev-list --date-order -n 20`` (``qvc log --all
    -n 20``) walks only the newest commits instead of every one (33 ms instead of 103 ms at
    20,000 threads). The file is derived: git ignores one it cannot read, and ``qvc log``
    falls back to its own walk if git fails. Returns whether git succeeded (and then empties
    the count :func:`graph_due` keeps).
    """
    settings = ["-c", "core.fsync=reference,derived-metadata", "-c", "core.fsyncMethod=fsync"] if fsync else [
        "-c", "core.fsync=none"]
    from qvc.plumbing.launcher import run_git  # deferred, as in pack_refs

    proc = run_git(repo_path, *settings, "commit-graph", "write", "--reachable",
                   "--split=replace" if replace else "--split", "--no-progress")
    if proc.returncode != 0:
        return False
    # git flushed the graph's files (core.fsync) but not their directory entries
    dirty(repo_path).changed(os.path.join(repo_path, os.path.dirname(GRAPH)),
                             os.path.join(repo_path, "objects", "info"))
    with contextlib.suppress(FileNotFoundError):
        os.truncate(os.path.join(repo_path, UNGRAPHED), 0)
    return True
