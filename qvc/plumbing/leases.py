r"""Ref leases of the journal-and-leases release: read to migrate its repositories.

That release moved a ref by taking a **lease** on it: git's own lock file, ``<ref>.lock``,
created whole by linking a file written beside it (``.qvc-lease-<pid>-...lock``,
:data:`WRITING`) and naming its holder, ``qvc lease <journal file name> <serial>``. Each move
under the lease was journaled with the serial (:mod:`qvc.plumbing.journal`), and the lease was
released by writing the newest value into the lock and renaming it over the ref.

Today's write path (:mod:`qvc.plumbing.staging`) takes no lease. A repository that release
left with a dead writer's leases is rolled forward on open (:mod:`qvc.plumbing.recovery`):
this module reads the leases (:func:`tag`, :func:`holder`, :func:`publishing`) and finishes
them (:func:`publish`) as that release did.
"""

from __future__ import annotations

import os

from qvc.plumbing.durability import dirty
from qvc.plumbing.reflog import ZERO, reflog_line

TAG = b"qvc lease "


class Lease:
    """A ref this process holds locked: the value to publish, and the moves that led to it. (A
    plain class, as :class:`qvc.plumbing.staging.Published` is: every command loads this module.)"""

    __slots__ = ("fd", "value", "identity", "moves", "serial")

    def __init__(self, fd: int, value: str | None, identity: list | None,
                 moves: list[tuple[str | None, str | None, str, float]] | None = None, serial: int | None = None):
        self.fd = fd  # the open ``<ref>.lock``
        self.value = value  # the newest value moved to (what publication writes)
        self.identity = identity  # ``[inode, mtime ns]`` of the ref's file when the lease was taken
        self.moves = [] if moves is None else moves  # (old, new, why, when)
        self.serial = serial  # the lease's number in its holder's journal (see the module docstring)


def lock_path(repo_path: str, name: str) -> str:
    return os.path.join(repo_path, name + ".lock")


#: how many times a file is created again after its directory vanished under it
CREATE_TRIES = 16


def open_creating_dirs(repo_path: str, path: str, flags: int) -> int:
    """``os.open(path, flags | O_CREAT)`` under ``repo_path``, making its directories first if
    they are missing (noted for the next flush). Another process deleting the last ref of a
    directory removes the emptied directory, as git does, possibly between the making and the
    open: the open is then tried again (as git's own ``raceproof_create_file`` does), so that
    race never fails a write. Raises what ``os.open`` raises otherwise."""
    flags |= os.O_CREAT
    for _ in range(CREATE_TRIES):
        try:
            return os.open(path, flags, 0o644)
        except FileNotFoundError:
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
            except FileNotFoundError:
                continue  # a parent went meanwhile: make them again
            dirty(repo_path).made_dirs(os.path.dirname(path))
    return os.open(path, flags, 0o644)


#: how the file a lease was written into, beside its lock, begins; it ends in
#: ``.lock`` and starts with a dot, so git never takes it for a ref
WRITING = ".qvc-lease-"


def writing(filename: str) -> int | None:
    """The pid of the qvc process writing a lease under ``filename`` (a file of ``refs/``), or
    ``None`` if it is no such file."""
    if not (filename.startswith(WRITING) and filename.endswith(".lock")):
        return None
    pid = filename[len(WRITING):].split("-", 1)[0]
    return int(pid) if pid.isdigit() else None


def tag(repo_path: str, name: str) -> tuple[str, int | None] | None:
    """``(journal file name, serial)`` of the lease lock of ``name``; ``None`` if there is no
    lock or it is not a lease (git's own). The serial is ``None`` in locks written before
    leases were numbered."""
    try:
        with open(lock_path(repo_path, name), "rb") as f:
            data = f.read(200)
    except OSError:
        return None
    if not data.startswith(TAG):
        return None
    # its first line: a power cut may keep a publication's truncation but not its write, which
    # leaves the tag followed by NUL bytes
    line, whole, _ = data[len(TAG):].partition(b"\n")
    words = line.strip().split(b" ")
    who = words[0]
    if not who or b"/" in who or any(c <= 0x20 or c == 0x7F for c in who) or len(words) > 2:
        return None
    if len(words) == 2 and not words[1].isdigit():
        return None
    # The tag is written by one write, so only a power cut tears it, at any byte: a serial is
    # trusted only when the line's end made it to the disk too (a torn "12" must not read "1").
    serial = int(words[1]) if len(words) == 2 and whole else None
    return who.decode("utf-8", "replace"), serial


def holder(repo_path: str, name: str) -> str | None:
    """The journal file name a lease lock of ``name`` names, or ``None`` (no lock, or git's own)."""
    found = tag(repo_path, name)
    return None if found is None else found[0]


def publishing(lock: str) -> bool:
    """Whether the lock file ``lock`` holds a ref value (``<40 hex>\n``): a lease whose value
    is written over its tag, about to be renamed over the ref (or git's own lock, the same
    moment of its update)."""
    try:
        with open(lock, "rb") as f:
            data = f.read(64)
    except OSError:
        return False
    return len(data) == 41 and data[40:] == b"\n" and all(c in b"0123456789abcdef" for c in data[:40])


def append_reflog(repo_path: str, name: str, lines: bytes) -> None:
    """Append reflog lines to ``logs/<name>`` (created, with its directories, if needed)."""
    path = os.path.join(repo_path, "logs", name)
    fd = open_creating_dirs(repo_path, path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    try:
        os.write(fd, lines)
    finally:
        os.close(fd)
    dirty(repo_path).wrote(path)


def publish(repo_path: str, name: str, lease: Lease, who: str, *, log: bool, head_too: bool) -> None:
    """Release ``lease`` by writing its value: its moves' reflog lines (``log``; also to HEAD's
    reflog when ``head_too``, as git does for the branch HEAD names), then the lock renamed
    over the ref. On an error the lease is kept whole, with the lines already written dropped
    from it, so a later call finishes the job. The value must not be ``None`` (a lease that
    deletes its ref is published by :func:`qvc.plumbing.recovery.delete_leased_ref`)."""
    if lease.moves and log:
        lines = b"".join(reflog_line(old, new, who, when, why) for old, new, why, when in lease.moves)
        append_reflog(repo_path, name, lines)
        if head_too:
            append_reflog(repo_path, "HEAD", lines)
    lease.moves.clear()
    value = (lease.value or ZERO).encode() + b"\n"
    os.pwrite(lease.fd, value, 0)  # over the tag, then cut to it: the lock is never empty, so
    os.ftruncate(lease.fd, len(value))  # recovery tells a publication cut short (the value) from git's lock
    os.rename(lock_path(repo_path, name), os.path.join(repo_path, name))
    dirty(repo_path).wrote(os.path.join(repo_path, name))
    os.close(lease.fd)
    lease.fd = -1
