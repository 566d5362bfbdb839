r"""Ref leases: how a process moves a ref now and writes it to git later.

A put must not wait for git's files (a pack, a ref lock, a rename, a reflog line): on the
machines qvc runs on, creating files costs more than the one flush a durable put needs. So a
ref move takes a **lease** on the ref instead of rewriting it: the writer creates git's own
lock file, ``<ref>.lock``, with ``O_EXCL`` (exactly as git and libgit2 lock a ref before they
change it), checks under the lock that the ref still holds the value it expects, and keeps the
lock. Until the lease is released, no other writer (qvc, git, libgit2) can move the ref, so the
lease holder's later moves of it are compare-and-swap against its own view. The holder's
journal makes each move durable; its publisher (:meth:`Repository.publish
<qvc.plumbing.repository.Repository.publish>`) later writes the objects as one pack, appends
the ref's reflog lines, writes the newest value into the lock file and renames it over the ref,
which releases the lease.

A lease's lock file names its holder and the lease: ``qvc lease <journal file name> <serial>``,
the serial unique among that journal's leases. Every move made under the lease is journaled
with its serial, so the moves a lease holds unpublished are exactly the journaled moves with
that serial: whoever finishes a dead writer's lease (:func:`qvc.plumbing.recovery.adopt_lease`,
recovery on open) rolls the ref forward to the last of them, and judges by nothing that
another process can change (file identities, mtimes, ``packed-refs``). A lock whose holder is
gone (that journal's ``flock`` is free) is a dead writer's lease. (Locks written before
serials existed name the journal alone; recovery then falls back to the older rules.)

Readers in other processes see a leased ref's move once it is published. So that a read which
starts after a put returned sees that put (as a SQLite reader sees every committed
transaction), a reader first :func:`settle`\ s the refs it reads: for each one a live store of
another process holds a lease on, it waits until that lease is released (published) or
replaced by a later one, at most :data:`SETTLE_WAIT`; the writer publishes within about its
publish lag. A ref without a lock costs the reader one ``stat``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Iterable

from qvc.errors import CheckpointConflictError
from qvc.plumbing.durability import dirty
from qvc.plumbing.locking import LOCK, flocked
from qvc.plumbing.reflog import ZERO, reflog_line

TAG = b"qvc lease "
#: the longest a reader waits for another store to publish the refs it reads (see :func:`settle`)
SETTLE_WAIT = 0.5
#: leases a reader of this process waited for in vain (a stopped or stuck writer's): lock path
#: and identity; not waited for again, so such a writer costs each reader one wait, not one a read
_UNPUBLISHED: set[tuple[str, int, int]] = set()
#: journal file names of this process's open stores: their leases a reader never waits for
#: (a reader publishes its own process's writes instead; see Repository.catch_up)
OWN: set[str] = set()
#: refs git logs when ``core.logAllRefUpdates`` is true (others only if their log exists)
LOGGED = ("refs/heads/", "refs/remotes/", "refs/notes/")


@dataclass
class Lease:
    """A ref this process holds locked: the value to publish, and the moves that led to it."""

    fd: int  # the open ``<ref>.lock``
    value: str | None  # the newest value moved to (what publication writes)
    identity: list | None  # ``[inode, mtime ns]`` of the ref's file when the lease was taken
    moves: list[tuple[str | None, str | None, str, float]] = field(default_factory=list)  # old, new, why, when
    serial: int | None = None  # the lease's number in its holder's journal (see the module docstring)
    #: ``id()`` of the records with moves under this lease that are not journaled yet: the
    #: background publisher leaves the lease alone until they are (see ``Publication.publish``)
    unjournaled: set[int] = field(default_factory=set)


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


#: how the file a lease is written into, beside its lock, begins (see :func:`take`); it ends in
#: ``.lock`` and starts with a dot, so git never takes it for a ref
WRITING = ".qvc-lease-"


def writing(filename: str) -> int | None:
    """The pid of the qvc process writing a lease under ``filename`` (a file of ``refs/``), or
    ``None`` if it is no such file."""
    if not (filename.startswith(WRITING) and filename.endswith(".lock")):
        return None
    pid = filename[len(WRITING):].split("-", 1)[0]
    return int(pid) if pid.isdigit() else None


def take(repo_path: str, name: str, holder: str, serial: int | None = None) -> int | None:
    """Create ``<ref>.lock`` exclusively, holding the holder's tag (``qvc lease <holder>
    <serial>``) from the moment it exists; return its fd.

    The tag is written into a file of its own beside the lock first (``.qvc-lease-<pid>-...lock``,
    :data:`WRITING`), which is then linked into place (exclusive, as ``O_EXCL``) and removed: a
    writer killed at any moment leaves no lock without its tag, so a lock that names no store is
    provably no qvc store's, and is never removed. ``None`` when the lock exists (another
    writer holds the ref). Raises :class:`CheckpointConflictError` when the name cannot be a ref
    here (a ref is in the way of its directory, or it is a directory).
    """
    path = lock_path(repo_path, name)
    tmp = os.path.join(os.path.dirname(path), f"{WRITING}{os.getpid()}-{os.urandom(6).hex()}.lock")
    try:
        fd = open_creating_dirs(repo_path, tmp, os.O_WRONLY | os.O_EXCL | os.O_CLOEXEC)
    except (NotADirectoryError, IsADirectoryError) as exc:
        raise CheckpointConflictError(f"{name}: cannot be created here ({exc.strerror})") from None
    try:
        os.write(fd, TAG + holder.encode() + (b"" if serial is None else b" %d" % serial) + b"\n")
        os.link(tmp, path)
    except FileExistsError:
        os.close(fd)
        return None
    except (NotADirectoryError, IsADirectoryError) as exc:
        os.close(fd)
        raise CheckpointConflictError(f"{name}: cannot be created here ({exc.strerror})") from None
    except BaseException:
        os.close(fd)
        raise
    finally:
        os.unlink(tmp)  # the lock, if linked, keeps the file
    return fd


def drop(repo_path: str, name: str, fd: int) -> None:
    """Give a lease up without writing anything (the ref keeps its value on disk)."""
    os.close(fd)
    try:
        os.unlink(lock_path(repo_path, name))
    except FileNotFoundError:
        pass


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


def _foreign(repo_path: str, names: Iterable[str]) -> dict[str, tuple[int, int]]:
    """Lock path → identity of each of ``names`` leased by a live store of another process."""
    found: dict[str, tuple[int, int]] = {}
    for name in names:
        path = f"{repo_path}/{name}.lock"  # (not os.path.join: this runs on every read of a ref)
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            continue
        if (path, st.st_ino, st.st_ctime_ns) in _UNPUBLISHED:
            continue
        who = holder(repo_path, name)
        if who is None:
            if publishing(path):  # a lease being published now: its rename follows at once
                found[path] = (st.st_ino, st.st_ctime_ns)
            continue
        if who in OWN or not flocked(os.path.join(repo_path, "qvc", "journal", os.path.basename(who))):
            continue
        found[path] = (st.st_ino, st.st_ctime_ns)
    return found


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


def foreign(repo_path: str, names: Iterable[str]) -> list[str]:
    """Those of ``names`` (refs) a live store of another process holds a lease on now."""
    return [path[len(repo_path) + 1:-5] for path in _foreign(repo_path, names)]


def settle(repo_path: str, names: Iterable[str]) -> None:
    """Wait until every ref in ``names`` that a live store of another process holds a lease on
    (or is publishing) has been published: its lock is gone or is another file, a later
    lease's. (Not a change of the lock's times: publishing writes the value into the lock
    before it renames it, so the ref is written only once the lock is gone.) A read that follows sees every
    move that store acknowledged before this call. git's own locks, dead stores' leases (the
    next recovery rolls them forward) and this process's (:data:`OWN`) are not waited for.
    Returns after :data:`SETTLE_WAIT` at most, whatever is still leased; a lease still held
    then (its writer stopped or stuck) is not waited for again by this process, unless some
    process (this one, say, recovering under it) held the maintenance lock ``qvc/lock``
    exclusively meanwhile: no store can publish then (publishing holds it shared), so the
    wait says nothing about the writer, and a later read waits for the lease again."""
    waiting = _foreign(repo_path, names)
    if not waiting:
        return
    maintenance = f"{repo_path}/{LOCK}"
    excluded = False  # whether the maintenance lock was seen held exclusively while we waited
    deadline = time.monotonic() + SETTLE_WAIT
    delay = 0.0002
    while waiting and time.monotonic() < deadline:
        excluded = excluded or bool(flocked(maintenance))  # shared holders do not count: they publish
        time.sleep(delay)
        delay = min(delay * 2, 0.005)
        for path, identity in list(waiting.items()):
            try:
                st = os.stat(path)
            except FileNotFoundError:
                del waiting[path]
                continue
            if st.st_ino != identity[0]:
                del waiting[path]
    if not waiting or excluded or flocked(maintenance):
        return
    if len(_UNPUBLISHED) > 10_000:
        _UNPUBLISHED.clear()
    _UNPUBLISHED.update((path, *identity) for path, identity in waiting.items())


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
    deletes its ref is published by :func:`qvc.plumbing.publication.delete_leased_ref`)."""
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
