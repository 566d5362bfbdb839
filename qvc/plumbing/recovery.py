"""Repair on open: what a crash (process kill or power loss) can leave in git's files, and the
migration of repositories the journal-and-leases release wrote.

What a store acknowledged is in the staging database (:mod:`qvc.plumbing.staging`): SQLite
recovers it, and the first publisher writes it to git's files; none of that is here. What is
here runs only when :func:`needed` finds work, under the repository's exclusive maintenance
lock, before the store accepts calls. Steps 1 and 2's journals and leases exist only in a
repository that release wrote (``qvc/journal/``): they are replayed and rolled forward as
that release did, once, and the journal directory is then empty.

1. Journals whose owner died (see :mod:`qvc.plumbing.journal`) are replayed: every object they
   recorded is rewritten if it is missing, empty or truncated (all of them in one pack), and
   every ref they moved is checked; a ref that is missing or whose recent history no longer
   reads back is set to the newest value the journal made durable whose history does read back.
2. Lease locks (``*.lock`` files under ``refs/`` that name their qvc store) whose store is
   gone are rolled forward and removed, and libgit2's temporary object files are removed
   (all of them when no other qvc store has the repository open, else those older than
   ``STALE_SECONDS``). A lock file that names no qvc store (git's, another program's) is
   never removed, however old: its owner cannot be proved gone (git's rule); it is left and
   named in the report (:attr:`RecoveryReport.locks_left`). After a crash, empty loose
   objects are removed too (``git fsck`` rejects them). A pack index that does not match its
   pack is rebuilt from the pack (``git index-pack``).
3. The repaired files are hardened and the replayed journals deleted.

Nothing that may hold data is deleted: a damaged pack, a damaged pack index, a file in the
journal directory that is no journal, a damaged loose object and the file of a ref that is
repaired or removed are moved aside, by a rename inside the repository (crash-safe), into one
quarantine folder per repair, ``<repo>/qvc/quarantine/<UTC time>/<their path in the
repository>`` (:func:`move_aside`), which the report names. git never looks under ``qvc/``
(``gc``, ``push`` and ``fsck`` ignore it) and no qvc reader does; inspect it, then delete it.
What is removed is what holds nothing: empty files, dead stores' leases, temporary files of killed
writers and journals once replayed.

The result is a :class:`RecoveryReport`, kept as ``store.recovery`` and logged.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from typing import Protocol

from qvc.errors import CheckpointConflictError, CorruptionError, QvcError
from qvc.logs import log
from qvc.plumbing import durability, leases, pack
from qvc.plumbing.durability import fsync_dir, harden
from qvc.plumbing.journal import GENERATION, MAGIC, claim_orphans, read_records
from qvc.plumbing.leftovers import (
    ADOPTING,
    QUARANTINE,
    STALE_SECONDS,
    RecoveryReport,
    alive,
    journal_alive,
    mtime,
    suspect_indexes,
)
from qvc.plumbing.libgit2 import pygit2
from qvc.plumbing.locking import flocked, try_flock, unlock
from qvc.plumbing.objects import MODE_TREE
from qvc.plumbing.reflog import ReflogEntry
from qvc.plumbing.refpack import without_packed


class RecoveryHost(Protocol):
    """What recovery needs of the repository it repairs (:class:`qvc.plumbing.repository.Repository`,
    which calls recovery: so this module names the methods it uses instead of importing it)."""

    path: str
    qvc_dir: str
    fsync: bool

    @property
    def git(self) -> pygit2.Repository:
        """This Python thread's ``pygit2.Repository``."""

    def read(self, raw: bytes, kind: str | None = None) -> bytes:
        """An object's data (:class:`CorruptionError` if missing, unreadable or not ``kind``)."""

    def read_tree(self, raw: bytes) -> dict[str, tuple[int, bytes]]:
        """A tree's entries as ``{name: (mode, raw oid)}``."""

    def has(self, raw: bytes, *, published: bool = False) -> bool:
        """Whether the repository has object ``raw`` whole."""

    def hash(self, kind: str, data: bytes) -> bytes:
        """The raw id of a git object of ``kind`` with ``data``."""

    def ref(self, name: str, *, settle: bool = True) -> str | None:
        """The hex target of ref ``name``, ``None`` when absent."""

    def reflog(self, name: str) -> list[ReflogEntry]:
        """The reflog of ``name``, newest first."""

    def file_identity(self, name: str) -> list | None:
        """``[inode, mtime ns]`` of the file holding ref ``name``."""

    def generation(self) -> str | None:
        """The token in ``qvc/generation``."""

    def merge_small_packs(self, *, locked: bool = False) -> int:
        """Merge the directory's small packs once there are many; how many were merged."""

VERIFY_DEPTH = 1000


def move_aside(repo: RecoveryHost, path: str, report: RecoveryReport) -> str | None:
    """Move the file at ``path`` (inside the repository) into this repair's quarantine folder,
    ``<repo>/qvc/quarantine/<UTC time>/<its path in the repository>``, made on the first move
    and named in ``report``; a rename, so a crash leaves the file in one place or the other.
    Returns its path relative to the repository (``None``: it was gone already)."""
    rel = os.path.relpath(path, repo.path)
    if not os.path.lexists(path):
        return None
    if report.quarantine is None:
        root = os.path.join(repo.qvc_dir, QUARANTINE)
        os.makedirs(root, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        for n in range(1, 10000):
            name = stamp if n == 1 else f"{stamp}-{n}"
            try:
                os.mkdir(os.path.join(root, name))
                break
            except FileExistsError:
                continue
        report.quarantine = os.path.relpath(os.path.join(root, name), repo.path)
    target = os.path.join(repo.path, report.quarantine, rel)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    while os.path.lexists(target):  # the same file twice in one repair (a ref moved aside again)
        target += "~"
    os.rename(path, target)
    report.moved_aside.append(rel)
    return rel


def _abandoned(path: str) -> bool:
    """Whether the half-created journal ``path`` (``<pid>-<random>.wal.new``) was left by a process
    that is gone: its pid names no live process here and nobody holds the lock its creator takes
    right after creating it. (A live creator holds the lock; younger files are otherwise judged
    by age, since a pid of another pid namespace cannot be checked.)"""
    pid = os.path.basename(path).split("-", 1)[0]
    if not pid.isdecimal():
        return False
    try:
        os.kill(int(pid), 0)
        return False  # alive (or a reused pid): wait for the file to be stale
    except ProcessLookupError:
        pass
    except (PermissionError, OverflowError):
        return False
    return flocked(path) is False


def is_journal(path: str) -> bool:
    """Whether the file at ``path`` is a qvc journal: it starts with the journal's magic, or is
    a prefix of it (a writer killed while creating it). Anything else in the journal directory
    is no journal of qvc's, and recovery moves it aside instead of deleting it."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(MAGIC))
    except FileNotFoundError:
        return True
    return MAGIC.startswith(head)


#: how long finishing a dead writer's lease waits for processes that only look at its journal
#: (a shared ``flock`` held for a moment, as :func:`qvc.plumbing.locking.flocked` takes it)
ADOPT_WAIT = 2.0


def _claim(fd: int) -> bool:
    """Take a dead store's journal exclusively; ``False`` if another process holds it so (its
    live owner, or another process finishing its leases). Processes that only test it (a
    shared lock for a moment) are waited for, up to :data:`ADOPT_WAIT`."""
    deadline = time.monotonic() + ADOPT_WAIT
    delay = 0.0005
    while True:
        if try_flock(fd):
            return True
        if not try_flock(fd, shared=True):  # a shared lock we can take too: only lookers, no owner and no adopter
            return False
        unlock(fd)
        if time.monotonic() > deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.02)


def _serial(seen: object) -> int | None:
    """The lease serial a journal record's ``seen`` entry for a ref names, if any."""
    return seen[2] if isinstance(seen, list) and len(seen) > 2 and isinstance(seen[2], int) else None


Move = tuple[str | None, str | None]


def moves_under(moves: list[tuple[str | None, str | None, object]], serial: int) -> list[Move] | None:
    """Of a journal's moves of one ref (``(old, new, seen)``, oldest first), those made under
    lease ``serial`` when they are its last moves of the ref; ``None`` when a move without that
    serial follows them (the lease was published and the ref moved again: only a power cut
    that lost the publication's rename but kept the lock leaves such a lock behind)."""
    start = next((i for i, m in enumerate(moves) if _serial(m[2]) == serial), None)
    if start is None:
        return []
    tail = moves[start:]
    if any(_serial(seen) != serial for _, _, seen in tail):
        return None
    return [(old, new) for old, new, _ in tail]


def lease_moves(path: str, name: str, serial: int) -> tuple[list[tuple[str | None, str | None]] | None,
                                                              list[tuple[str, bytes]]]:
    """The moves of ref ``name`` the journal at ``path`` made under its lease ``serial``, oldest
    first (see :func:`moves_under`), and every object the journal holds (what they may need)."""
    moves: list[tuple[str | None, str | None, object]] = []
    objects: list[tuple[str, bytes]] = []
    for record in read_records(path):
        if record.base:
            continue
        objects += record.objects
        moves += [(old, new, record.seen.get(n)) for n, old, new in record.refs if n == name]
    return moves_under(moves, serial), objects


def adopt_lease(repo: RecoveryHost, name: str, holder: str,
                moved: dict[str, tuple[str | None, str | None]] | None = None) -> bool:
    """Finish a dead store's lease on ref ``name`` (see :mod:`qvc.plumbing.leases`) while other
    stores run: roll the ref forward to the last value the dead store's journal moved it to
    under that lease (its objects written first, as one pack, if git's files lack them),
    append those moves to the reflog, and release the lock. Returns whether it did; ``False``
    if the holder turns out to be alive or another process is adopting it. The journal stays
    for the next open's full recovery, which then finds the ref where the journal left it.
    A ref it moves is noted in ``moved`` (as :attr:`RecoveryReport.moved` notes it), so that the
    caller can tell what derives from history (:attr:`Repository.recovery_listeners`).

    Nothing but the lease's own journaled moves decides: no one else can have moved the ref
    while the lock was in place, whatever happened to ``packed-refs`` or the ref's file.
    """
    path = os.path.join(repo.qvc_dir, "journal", os.path.basename(holder))
    lock = leases.lock_path(repo.path, name)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        fd = -1  # its journal is gone: nothing of the lease was acknowledged
    if fd >= 0:  # made before the claim: the journal is never seen held without it meanwhile
        with contextlib.suppress(OSError), open(path + ADOPTING, "wb"):
            pass
    claimed = False
    try:
        if fd >= 0 and not (claimed := _claim(fd)):
            return False
        found = leases.tag(repo.path, name)
        if found is None or found[0] != holder:
            return False  # released or adopted meanwhile
        serial = found[1]
        moves: list[tuple[str | None, str | None]] | None = []
        objects: list[tuple[str, bytes]] = []
        if fd >= 0:
            if serial is not None:
                moves, objects = lease_moves(path, name, serial)
            if serial is None or moves is None:  # an old lock, or (after a power cut) one left behind
                moves, objects = _unnumbered_lease_moves(repo, path, name)
        if not moves:
            os.unlink(lock)  # the lease's moves never reached the journal: nothing to roll forward
            return True
        if moves[-1][1] is None:  # its journaled last move deletes the ref
            delete_leased_ref(repo.path, name)
            if moved is not None:
                moved[name] = (moves[0][0], None)
            return True
        # not this process's unpublished objects: git's files must hold what the ref will name
        missing = {repo.hash(kind, data): (kind, data) for kind, data in objects
                   if not repo.has(repo.hash(kind, data), published=True)}
        if missing:
            pack.write(os.path.join(repo.path, "objects", "pack"), list(missing.values()), list(missing))
        value = moves[-1][1]
        disk = repo.ref(name)  # the lease is ours: waiting for it would stall
        if not _history_reads(repo, value, {disk} if disk else set()):
            os.unlink(lock)
            return True
        _publish_through_lock(repo, name, value, moves, "recovery: a crashed writer's move", serial)
        if moved is not None:
            moved[name] = (moves[0][0], value)
        return True
    finally:
        if claimed:  # (else another process holds it and removes the marker when done)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path + ADOPTING)  # before the lock goes
        if fd >= 0:
            os.close(fd)


#: how old a lock holding a value must be before a running store takes it for a dead writer's
#: publication cut short (a live publisher holds that state for microseconds)
CUT_SHORT_AGE = 1.0


def finish_publication(repo: RecoveryHost, name: str, *, min_age: float = CUT_SHORT_AGE) -> bool:
    """Complete a dead store's publication of ref ``name`` that a kill cut short, while other
    stores run: the lease's lock already holds the value being published (its reflog lines
    are written by then) and is renamed over the ref, as the dead store was about to. Only a
    lock at least ``min_age`` old whose value a dead store's journal moved ``name`` to
    qualifies (git's own lock, held for milliseconds, is younger; under the exclusive lock, where
    no store publishes, any age will do). Returns whether it did."""
    lock = leases.lock_path(repo.path, name)
    try:
        with open(lock, "rb") as f:
            data = f.read(64)
        age = time.time() - os.stat(lock).st_mtime
    except OSError:
        return False
    value = data[:40].decode("ascii", "replace")
    if age < min_age or not leases.publishing(lock):
        return False
    journal_dir = os.path.join(repo.qvc_dir, "journal")
    for journal in sorted(_listdir(journal_dir)):
        path = os.path.join(journal_dir, journal)
        if not journal.endswith(".wal") or journal_alive(repo, journal):
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            if not _claim(fd):
                continue
            last = [new for record in read_records(path) for n, _, new in record.refs if n == name][-1:]
            if last != [value]:  # not its last move of the ref: not the publication it died in
                continue
            with open(lock, "rb") as f:
                if f.read(64) != data:
                    return False
            os.rename(lock, os.path.join(repo.path, name))
            return True
        except OSError:
            return False
        finally:
            os.close(fd)
    return False


def _unnumbered_lease_moves(repo: RecoveryHost, path: str, name: str) -> tuple[
        list[tuple[str | None, str | None]], list[tuple[str, bytes]]]:
    """A lease lock written before leases were numbered: its moves are told from earlier ones
    by the identity of the ref's file the writer saw (as qvc did then)."""
    moves: list[tuple[str | None, str | None, list | None]] = []
    objects: list[tuple[str, bytes]] = []
    for record in read_records(path):
        if not record.base:
            objects += record.objects
            moves += [(old, new, record.seen.get(n)) for n, old, new in record.refs if n == name]
    disk, identity = repo.ref(name), repo.file_identity(name)
    start = next((i for i, (old, _, seen) in enumerate(moves)
                  if old == disk and seen and seen[0] == identity), None)
    return ([] if start is None else [(old, new) for old, new, _ in moves[start:]]), objects


def recover(repo: RecoveryHost) -> RecoveryReport:
    report = RecoveryReport()
    journal_dir = os.path.join(repo.qvc_dir, "journal")
    orphans = claim_orphans(journal_dir)
    try:
        live = [n for n in _listdir(journal_dir) if n.endswith(".wal")]
        alone = len(live) == len(orphans)
        # refs the dead writers held leased (ref -> (journal, serial)): no one else moved them since
        leased: dict[str, tuple[str, int | None]] = {}
        remove_stale_files(repo, 0.0 if alone else STALE_SECONDS, report,
                           dead={os.path.basename(path) for path, _ in orphans}, leased=leased)
        if orphans:
            _remove_empty_objects(repo, report)
        if orphans or suspect_indexes(repo):
            repair_packs(repo, report)
        missing: dict[bytes, tuple[str, bytes]] = {}  # raw id -> (kind, data) of every journal
        replayed = [_replay(repo, path, report, missing) for path, _ in orphans]
        _restore_objects(repo, missing)  # before anything reads them (reflogs, refs)
        moves = [m for m, _ in replayed]
        if orphans:
            _repair_reflogs(repo, report)  # before restoring refs appends to the reflogs
        restores = [(name, history, tokens.get(name, set()), leased.get(name, ("", None)), os.path.basename(path))
                    for (journal_moves, tokens), (path, _) in zip(replayed, orphans, strict=True)
                    for name, history in journal_moves.items()]
        # the lease a dead writer held has the last word on its ref: restored after the others
        restores.sort(key=lambda r: r[3][0] == r[4])
        for name, history, tokens, (holder, serial), journal in restores:
            _restore_ref(repo, name, history, tokens, report, leased=holder == journal,
                         serial=serial if holder == journal else None, holder=holder if holder == journal else None)
        _release_leases(repo, leased, report)  # those of refs the restores left as they were
        if orphans:  # locks holding a value that no replayed journal owned: stale now
            remove_stale_files(repo, 0.0 if alone else STALE_SECONDS, report, replayed=True)
        if orphans:
            journalled: dict[str, list[str]] = {}  # ref -> the values the journals moved it to, newest first
            for m in moves:
                for name, history in m.items():
                    journalled[name] = [new for _, new, _ in reversed(history) if new] + journalled.get(name, [])
            _repair_unjournalled_refs(repo, journalled, report)
            for path, _ in orphans:
                _finish_generation(repo, path)
        if orphans:  # the dead writers' small packs, while no writer runs
            try:
                repo.merge_small_packs(locked=True)
            except (OSError, ValueError) as exc:
                log.warning("qvc: merging packs in %s failed: %s", repo.path, exc)
        if report:
            harden(repo.path, fsync=repo.fsync)
        for path, _ in orphans:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path + ADOPTING)  # left by a process killed while it finished the journal's leases
            if is_journal(path):
                os.unlink(path)  # replayed: git's files hold all of it now
            else:
                move_aside(repo, path, report)  # not qvc's: kept for whoever put it there
        for n in _listdir(journal_dir):  # markers of adopters that lost the race for a journal now gone
            if n.endswith(ADOPTING) and not os.path.exists(os.path.join(journal_dir, n[:-len(ADOPTING)])):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(journal_dir, n))
        if orphans and repo.fsync:
            fsync_dir(journal_dir)
    finally:
        for _, fd in orphans:
            os.close(fd)
    return report


def remove_stale_files(repo: RecoveryHost, older_than: float, report: RecoveryReport,
                       dead: set[str] | frozenset[str] = frozenset(),
                       leased: dict[str, tuple[str, int | None]] | None = None, replayed: bool = False) -> None:
    """Remove temporary files at least ``older_than`` seconds old, and the lock files of qvc
    stores that are gone. Under the exclusive lock (no qvc writer is mid-write) pass 0. A lock
    that names no store (git's, another program's) is left and noted in ``report.locks_left``
    (if ``older_than`` old): its owner cannot be proved gone. Except while recovering crashed
    qvc writers (``dead``: the journals this recovery claimed; ``replayed``: it has replayed
    them): their own writes take git's locks too (libgit2's ref updates, ``packed-refs.lock``
    for a delete, a publication writing its value), and a kill or a power cut leaves those
    behind, so stale ones go then, as before.
    A lease (:mod:`qvc.plumbing.leases`) goes, whatever its age, once its store is gone: one
    held by a journal in ``dead`` (those this recovery claimed and replays) is noted in
    ``leased`` (ref → (journal, lease serial)) and kept, for the restore of its ref to
    release (:func:`_release_leases`), so that a recovery killed before then leaves the next
    one the lease's serial to decide by; any other dead store's is rolled forward
    (:func:`adopt_lease`), or removed when its ref is unreadable (recovery repairs the ref after)."""
    now = time.time()
    crashed = bool(dead) or replayed

    def stale(path: str) -> bool:
        try:
            return now - os.lstat(path).st_mtime >= older_than
        except OSError:
            return False

    for top in ("refs",):
        for dirpath, _, files in os.walk(os.path.join(repo.path, top)):
            for name in files:
                if not name.endswith(".lock") or leases.writing(name) is not None:
                    continue  # (a lease's own file is removed below)
                path = os.path.join(dirpath, name)
                ref = os.path.relpath(path[:-5], repo.path).replace(os.sep, "/")
                found = leases.tag(repo.path, ref)
                holder = None if found is None else found[0]
                if holder is not None:  # a store's lease: kept while that store lives, whatever its age
                    if holder not in dead:
                        if journal_alive(repo, holder):
                            continue
                        try:
                            if not adopt_lease(repo, ref, holder, report.moved):
                                continue  # alive after all, or adopted by another process
                            report.locks_removed.append(os.path.relpath(path, repo.path))
                            continue
                        except CorruptionError:
                            pass  # the ref is torn (a power cut): the lock goes, recovery repairs the ref

                    if leased is not None:
                        leased[ref] = (holder, found[1])
                    continue  # kept until its ref is restored: a kill meanwhile leaves the lease to decide
                elif leases.publishing(path):
                    # a dead store's publication cut short (or git's own lock, mid-update): never
                    # simply removed, which would drop what it publishes. Under the exclusive lock
                    # no live store publishes, so any age will do.
                    if finish_publication(repo, ref, min_age=0.0 if older_than == 0.0 else CUT_SHORT_AGE):
                        report.locks_removed.append(os.path.relpath(path, repo.path))
                        continue
                    if dead or not stale(path):
                        continue  # a journal this recovery replays may own it: _restore_ref decides
                if crashed and stale(path):  # the crashed writers' own (see the docstring)
                    os.unlink(path)
                    report.locks_removed.append(os.path.relpath(path, repo.path))
                elif stale(path) and os.path.relpath(path, repo.path) not in report.locks_left:
                    report.locks_left.append(os.path.relpath(path, repo.path))  # its owner cannot be proved gone
                continue
    journal_dir = os.path.join(repo.qvc_dir, "journal")
    for name in _listdir(journal_dir):  # a store killed creating its journal
        path = os.path.join(journal_dir, name)
        if name.endswith(".wal.new") and (now - mtime(path, now) >= STALE_SECONDS or _abandoned(path)):
            os.unlink(path)
            report.temp_files_removed += 1
    for name in ("packed-refs.lock", "config.lock", "HEAD.lock"):  # as above
        path = os.path.join(repo.path, name)
        if os.path.exists(path) and stale(path):
            if crashed:
                os.unlink(path)
                report.locks_removed.append(name)
            elif name not in report.locks_left:
                report.locks_left.append(name)
    objects = os.path.join(repo.path, "objects")
    for dirpath, _, files in os.walk(objects):
        for name in files:
            path = os.path.join(dirpath, name)
            if (name.startswith("tmp_") or ".tmp-" in name) and stale(path):
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    continue  # renamed into place meanwhile (a live writer's)
                report.temp_files_removed += 1
    for dirpath, _, files in os.walk(os.path.join(repo.path, "refs")):  # a lease's file, its writer killed
        for name in files:
            pid = leases.writing(name)
            if pid is not None and not alive(pid):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(dirpath, name))
                    report.temp_files_removed += 1


#: what git may keep beside a pack (``pack-<sha>.<ext>``): moved aside with it
PACK_SIDECARS = (".pack", ".idx", ".rev", ".bitmap", ".keep", ".mtimes", ".promisor")


def index_pack(pack_path: str) -> bool:
    """Rebuild the index of the pack at ``pack_path`` (``git index-pack``, on the file alone: no
    repository, so nothing a repository's config names runs) and put it in place by a rename;
    whether the pack read whole. Any index there is replaced: move a damaged one aside first."""
    from qvc.plumbing.launcher import run

    base = pack_path[:-len(".pack")]
    tmp = f"{base}.idx.tmp-qvc-{os.getpid()}"  # a kill leaves a temporary file remove_stale_files removes
    try:
        proc = run(None, ["index-pack", "-o", tmp, pack_path], user_config=False, capture_output=True, cwd="/")
    except (OSError, QvcError):  # no git here: the pack cannot be checked
        return False
    if proc.returncode != 0 or not os.path.exists(tmp):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)  # git's partial output: nothing of anyone's
        return False
    os.replace(tmp, base + ".idx")
    return pack.is_intact(base)


def repair_packs(repo: RecoveryHost, report: RecoveryReport) -> None:
    """Under the exclusive lock: every pack whose index does not match it (:func:`pack.is_intact`)
    gets its index rebuilt from the pack (the damaged index moved aside); a pack that does not
    read whole (a power loss tore it; the journals have its objects), an index without its pack
    and a pack without an index that cannot be rebuilt are moved aside with what git keeps
    beside them (:func:`move_aside`)."""
    pack_dir = os.path.join(repo.path, "objects", "pack")
    names = os.listdir(pack_dir)
    bases = sorted({os.path.join(pack_dir, n[:-len(ext)]) for n in names for ext in (".pack", ".idx")
                    if n.endswith(ext) and n.startswith("pack-")})
    for base in bases:
        has_pack, has_idx = os.path.exists(base + ".pack"), os.path.exists(base + ".idx")
        if has_pack and has_idx and pack.is_intact(base):
            continue
        if has_pack:
            import shutil  # deferred: start-up speed (a clean open never gets here)

            if shutil.which("git") is None:  # nothing can check the pack: left as it is, and said
                log.warning(
                    "qvc: %s: the index of %s.pack is damaged or missing; install git and open the repository "
                    "again to rebuild it (or run `git index-pack %s.pack`)", repo.path, base, base)
                continue
            if has_idx:
                move_aside(repo, base + ".idx", report)
            if index_pack(base + ".pack"):
                report.indexes_rebuilt.append(os.path.basename(base) + ".idx")
                continue
        for ext in PACK_SIDECARS:
            move_aside(repo, base + ext, report)


def _remove_empty_objects(repo: RecoveryHost, report: RecoveryReport) -> None:
    objects = os.path.join(repo.path, "objects")
    for fan in os.listdir(objects):
        if len(fan) != 2:
            continue
        d = os.path.join(objects, fan)
        for name in os.listdir(d):
            path = os.path.join(d, name)
            if os.path.getsize(path) == 0:
                os.unlink(path)
                report.empty_objects_removed += 1


def _loose_path(repo: RecoveryHost, raw: bytes) -> str:
    hexid = raw.hex()
    return os.path.join(repo.path, "objects", hexid[:2], hexid[2:])


def _finish_generation(repo: RecoveryHost, path: str) -> None:
    """Write the generation token a dead writer's journal says it was about to write.

    A delete journals its record (naming a new token) and only then writes ``qvc/generation``;
    a writer killed in between applied the delete but left the old token, so caches derived
    from history (every process's checkpoint-id index) would not know it changed. When the
    current token is still the one that delete replaced (the token its own record's moves saw),
    recovery writes the new token for it. Any other current token is left alone: the dead
    writer's, or a later writer's (putting an older token back would revive an index that may
    name what that later delete removed).
    """
    written, replaced = None, set()
    for record in read_records(path):
        token = record.seen.get(GENERATION)
        if isinstance(token, list) and len(token) > 1 and isinstance(token[1], str):
            written = token[1]
            replaced = {v[1] for n, v in record.seen.items() if n != GENERATION and isinstance(v, list)
                        and len(v) > 1 and (v[1] is None or isinstance(v[1], str))}
    if written is None or repo.generation() not in replaced:
        return
    target = os.path.join(repo.path, GENERATION)
    with open(target + ".recovery", "w") as f:
        f.write(written)
    os.replace(target + ".recovery", target)


def _replay(repo: RecoveryHost, path: str, report: RecoveryReport,
            missing: dict[bytes, tuple[str, bytes]]) -> tuple[dict[str, list], dict[str, set[str]]]:
    """Collect the journal's objects git's files lack (or hold unreadable) into ``missing`` (raw
    id -> (kind, data)), for :func:`_restore_objects`; return its ref moves (``{ref: [(old, new,
    seen)]}``) and, for each ref, the generation tokens that stood since the writer's last move
    of it: the one it saw then, and those its own later deletes wrote while no other writer's
    token came between (a later record of the writer that saw a token not in the chain proves
    another writer deleted history after the move: the chain ends there)."""
    if not is_journal(path):
        return {}, {}  # no journal of qvc's (moved aside once recovery is done): nothing to replay
    report.journals_replayed += 1
    moves: dict[str, list[tuple[str | None, str | None, float]]] = {}
    chains: dict[str, set[str | None]] = {}  # ref -> the tokens since its last move (None: no file yet)
    ended: set[str] = set()  # refs whose chain another writer's token broke
    for record in read_records(path):
        for name, _, _ in record.refs:
            seen = _seen_token(record.seen.get(name))
            chains[name] = {seen[0]} if seen else set()
            if seen:
                ended.discard(name)
            else:
                ended.add(name)
        written = _seen_token(record.seen.get(GENERATION))
        if written and written[0] is not None:
            saw = {t[0] for n, v in record.seen.items() if n != GENERATION and (t := _seen_token(v))}
            for name, chain in chains.items():
                if name not in ended and saw and saw <= chain:
                    chain.add(written[0])
                else:
                    ended.add(name)
        for kind, data in record.objects:
            raw = repo.hash(kind, data)
            if raw in missing:
                continue
            try:
                repo.read(raw, kind)
                continue
            except CorruptionError:
                pass
            move_aside(repo, _loose_path(repo, raw), report)  # a damaged loose copy: the restored one is read instead
            missing[raw] = (kind, data)
            report.objects_restored += 1
        for name, old, new in record.refs:
            moves.setdefault(name, []).append((new if record.base else old, new, record.seen.get(name)))
            first = report.moved.get(name, (new if record.base else old, None))[0]
            report.moved[name] = (first, new)
    return moves, {name: {t for t in chain if t is not None} for name, chain in chains.items()}


def _seen_token(seen: object) -> tuple[str | None] | None:
    """The generation token a journal record's ``seen`` entry names (a 1-tuple: ``(None,)`` when
    there was no ``qvc/generation`` yet), ``None`` when the entry names none (an old record)."""
    if isinstance(seen, list) and len(seen) > 1 and (seen[1] is None or isinstance(seen[1], str)):
        return (seen[1],)
    return None


def _restore_objects(repo: RecoveryHost, missing: dict[bytes, tuple[str, bytes]]) -> None:
    """Write the objects the replayed journals restore as one pack (not one loose file each:
    a recovery leaves no debris for ``qvc gc``). Not flushed here: :func:`recover` hardens the
    repository before it removes the journals that hold them."""
    if missing:
        pack.write(os.path.join(repo.path, "objects", "pack"), list(missing.values()), list(missing))


def _repair_reflogs(repo: RecoveryHost, report: RecoveryReport) -> None:
    """Drop the reflog lines a crash tore, zero-filled or left pointing at lost objects.

    Reflogs are appended without a flush, so after a power loss their tail may name commits
    that never reached the disk. Only reflogs whose last line is bad are rewritten.
    """
    logs = os.path.join(repo.path, "logs")

    def usable(line: bytes) -> bool:
        entry = ReflogEntry.parse(line)
        return entry is not None and all(sha is None or _history_reads(repo, sha, {sha})
                                         for sha in (entry.old, entry.new))

    for dirpath, _, files in os.walk(logs):
        for fname in files:
            path = os.path.join(dirpath, fname)
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError:
                continue
            lines = data.split(b"\n")
            if lines[-1] == b"":
                lines.pop()
            if not lines or (data.endswith(b"\n") and usable(lines[-1])):
                continue
            good = [ln for ln in lines if usable(ln)]
            tmp = path + ".qvc-repair"
            with open(tmp, "wb") as f:
                f.write(b"".join(ln + b"\n" for ln in good))
            os.replace(tmp, path)
            report.reflogs_repaired.append(os.path.relpath(path, logs))


def _restore_ref(repo: RecoveryHost, name: str, moves: list[tuple[str | None, str | None, list | None]],
                 tokens: set[str], report: RecoveryReport, *, leased: bool = False,
                 serial: int | None = None, holder: str | None = None) -> None:
    """Bring a ref the dead writer moved back to what its durable journal records say.

    ``moves`` are the writer's (old, new, seen) moves of the ref, oldest first, where ``seen``
    is the identity (inode, mtime) of the ref's file and the token in ``qvc/generation`` just
    before the move. The ref is set to the newest recorded value whose history reads back when
    it is unreadable now; or when it still holds the value one of the moves replaced, in a file
    no newer than the one seen before that move (the renames since never reached the disk); or
    when it is missing and no other writer deleted history since (each delete writes a new token
    to ``qvc/generation``; ``tokens`` are those that stood since the writer's last move of the
    ref: the one it saw then and those it wrote after; a token it saw later proves nothing about
    this ref). A ref anyone else
    wrote since is left alone. File times come from the kernel's coarse clock: two writes of one
    ref within one tick (a few ms) plus a power loss cannot be told apart. ``leased``: the dead
    writer died holding the ref's lease (its unpublished moves), so no one else can have
    deleted the ref since: a missing ref is restored whatever deletes happened elsewhere. The
    same holds when the ref's lock shows the writer died publishing that lease (:func:`_cut_short`).
    (Not proof against one case: the writer created the ref, another deleted it, and the
    writer died re-creating it before journaling that; the deleted thread then comes back.)

    ``serial``: the number of the lease the dead writer died holding (its lock named it). Then
    nothing but that lease's journaled moves decides: the ref goes to the last of them (none:
    nothing under the lease was acknowledged, the ref stays), whatever the ref's file or
    ``packed-refs`` look like, which other processes may have rewritten since without moving
    the ref. (Unless the journal moved the ref again after that lease: a power cut kept the
    lock but lost its publication's rename; then the rules above apply.) Likewise a
    publication cut short (the lock holds the value being published) completes to that value.
    The file-identity rules above remain for refs without such a lock: after a power cut lost
    the lock, when no other process can have run since.

    ``holder``: the dead journal whose lease lock is still on the ref. The ref is then written
    through that lock (its value over the tag, renamed over the ref, as the writer would have
    published it), so that a kill at any moment leaves either the lease or the restored ref.
    """
    try:
        current = repo.ref(name)  # under the exclusive lock: no one publishes
        broken = current is not None and not _history_reads(
            repo, current, {v for _, v, _ in moves if v} | {v for v, _, _ in moves if v})
    except CorruptionError:
        current, broken = None, True
    new = moves[-1][1]
    publishing = _cut_short(repo, name, {v for _, v, _ in moves if v})
    cut_short = publishing is not None
    if publishing != new:  # a power cut kept an older publication's lock: the journal moved on since
        publishing = None
    leased = leased or cut_short  # it died publishing its lease
    decided = publishing
    under = moves_under(moves, serial) if serial is not None and decided is None else None
    if under is not None:
        if not under and not broken:
            return  # nothing under the lease was acknowledged: the ref is as the lease found it
        decided = under[-1][1] if under else None
        if under and decided is None and leases.tag(repo.path, name) == (holder, serial):
            delete_leased_ref(repo.path, name)  # its journaled last move deletes the ref
            if current is not None or broken:
                report.deleted(name)
            return
    if decided is not None and not broken:
        if current == decided or not _history_reads(repo, decided, {current} if current else set()):
            return
        if holder is not None and _publish_lease(repo, name, holder, serial, current, decided):
            report.restored(name, "the journal")
            return
        if not _unlocked(repo, name, cut_short, holder):
            return
        repo.git.create_reference_direct(name, pygit2.Oid(hex=decided), True,
                                         message="recovery: restored from the journal")
        report.restored(name, "the journal")
        return
    if not broken:
        if current == new:
            return
        if current is None:
            generation = repo.generation()
            # A token torn by a power cut (it is written without a flush) is a prefix of the one
            # its writer journaled: the dead writer's own, when one of its tokens starts with it.
            if generation is not None and not any(t.startswith(generation) for t in tokens) and not leased:
                return  # another writer deleted history since: do not resurrect
        else:
            # Several of the writer's renames of this ref may be lost: the file may hold the value
            # any of its moves replaced. Judge by the last such move.
            replaced = [m for m in moves if m[0] == current and m[2]]
            ref_was = replaced[-1][2][0] if replaced else None
            now = repo.file_identity(name)
            if ref_was is None or now is None or now[1] > ref_was[1]:
                return  # moved, or written again, by someone else since
    candidates = [new] + [v for _, v, _ in reversed(moves[:-1])] + [moves[0][0]]
    for value in candidates:
        if value is None or _history_reads(repo, value, set()):
            break
    else:
        return  # nothing better to offer; fsck will name it
    if value == current and not broken:
        return
    if not _unlocked(repo, name, cut_short, holder):
        return
    loose = os.path.join(repo.path, name)
    if broken and os.path.exists(loose):
        move_aside(repo, loose, report)  # what it named does not read: kept for whoever looks
    refs = repo.git.references
    if value is None:
        if refs.get(name) is not None:
            refs.delete(name)
        report.removed(name)  # the crashed writer created it: there was no ref before
    else:
        repo.git.create_reference_direct(name, pygit2.Oid(hex=value), True,
                                         message="recovery: restored from the journal")
        report.restored(name, "the journal")


def _cut_short(repo: RecoveryHost, name: str, values: set[str]) -> str | None:
    """The value the dead writer was publishing when ``name``'s lock is its publication cut
    short (its lease's lock already holds one of ``values``, those the writer moved the ref
    to, in place of its tag), else ``None``."""
    try:
        with open(leases.lock_path(repo.path, name), "rb") as f:
            data = f.read(64)
    except OSError:
        return None
    value = data[:40].decode("ascii", "replace")
    return value if value in values and data[40:41] in (b"\n", b"") else None


def _publish_through_lock(repo: RecoveryHost, name: str, value: str, moves: list[tuple[str | None, str | None]],
                          why: str, serial: int | None) -> None:
    """Publish a dead store's lease on ``name`` for it, as :func:`qvc.plumbing.leases.publish`
    does: the reflog lines of ``moves``, then ``value`` over the lock's tag, renamed over the ref."""
    with open(leases.lock_path(repo.path, name), "r+b") as f:
        lease = leases.Lease(os.dup(f.fileno()), value, repo.file_identity(name),
                             [(old, new, why, time.time()) for old, new in moves], serial)
    leases.publish(repo.path, name, lease, "qvc <qvc@localhost>", log=True, head_too=False)


def _publish_lease(repo: RecoveryHost, name: str, holder: str, serial: int | None, old: str | None,
                   new: str) -> bool:
    """Write ``new`` to ``name`` through the dead journal ``holder``'s lease lock on it, with a
    reflog line; whether the lock was that lease (else nothing is written)."""
    if leases.tag(repo.path, name) != (holder, serial):
        return False
    _publish_through_lock(repo, name, new, [(old, new)], "recovery: restored from the journal", serial)
    return True


def _release_leases(repo: RecoveryHost, leased: dict[str, tuple[str, int | None]], report: RecoveryReport) -> None:
    """Remove the lease locks of replayed journals still on their refs (the restores left those
    refs as they were, or wrote them another way)."""
    for name, found in leased.items():
        if leases.tag(repo.path, name) == found:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(leases.lock_path(repo.path, name))
                report.locks_removed.append(name + ".lock")


def _unlocked(repo: RecoveryHost, name: str, cut_short: bool, holder: str | None = None) -> bool:
    """Whether ``name`` may be written now: it has no lock, or its lock is the dead writer's
    publication cut short (``cut_short``, see :func:`_cut_short`) or the lease of the dead
    journal ``holder``, which is removed. Another lock (git's own, a live store's lease) is
    left, and so is the ref, for whoever holds the lock to write; a warning names it."""
    path = leases.lock_path(repo.path, name)
    if cut_short or (holder is not None and (leases.tag(repo.path, name) or ("",))[0] == holder):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return True
    if not os.path.lexists(path):
        return True
    log.warning("qvc: recovering %s: %s is locked by another writer; left to it",
                                     repo.path, name)
    return False


def _repair_unjournalled_refs(repo: RecoveryHost, journalled: dict[str, list[str]], report: RecoveryReport) -> None:
    """Loose refs no durable journal record names, whose tip a power loss left unreadable; and
    journalled ones whose file is still no ref after the restores (``journalled``: ref -> the
    values the journals moved it to, newest first).

    A store moves a ref before the journal record of that move is flushed, so a power cut
    can keep the ref's new file (possibly empty) but lose its objects and the record. Such
    a move was never acknowledged as durable: the ref goes back to the newest reflog value (or
    first parent, if its commit still reads) that reads back, or is deleted if there is none
    (a thread created by the lost write). A journalled ref is left to :func:`_restore_ref`
    unless its file holds no value at all (a publication torn by the power cut, left in place
    because a lock of a lost record's publication stood on it then): it goes back to the
    newest journalled, else reflog, value that reads back.
    """
    refs_dir = os.path.join(repo.path, "refs")
    for dirpath, _, files in os.walk(refs_dir):
        for fname in files:
            name = os.path.relpath(os.path.join(dirpath, fname), repo.path).replace(os.sep, "/")
            if name.endswith(".lock"):
                continue
            current = None
            try:
                current = repo.ref(name)
                # the whole line, not just the tip: a power cut may keep a new tip whose parents' packs it tore
                if name in journalled or (current is not None and _history_reads(repo, current, set())):
                    continue
            except CorruptionError:
                pass
            logged = [e.new for e in repo.reflog(name) if e.new]
            candidates = journalled.get(name, []) + logged + _first_parents(repo, current)
            fallback = next((c for c in candidates if _history_reads(repo, c, set())), None)
            move_aside(repo, os.path.join(dirpath, fname), report)  # what it named does not read
            if fallback is not None:
                source = ("the journal" if fallback in journalled.get(name, ()) else "the reflog" if fallback in logged
                          else "its tip's first readable ancestor")
                repo.git.create_reference_direct(name, pygit2.Oid(hex=fallback), True,
                                                 message=f"recovery: restored from {source}")
                report.restored(name, source)
            else:
                report.removed(name)


def _first_parents(repo: RecoveryHost, commit_hex: str | None, limit: int = 64) -> list[str]:
    """The first parents of a commit, as far as the commits read back (at most ``limit``)."""
    out: list[str] = []
    while commit_hex is not None and len(out) < limit:
        try:
            header = repo.read(bytes.fromhex(commit_hex), "commit").split(b"\n\n", 1)[0]
        except (CorruptionError, ValueError):
            break
        commit_hex = next((ln[7:].decode() for ln in header.split(b"\n") if ln.startswith(b"parent ")), None)
        if commit_hex is not None:
            out.append(commit_hex)
    return out


def _history_reads(repo: RecoveryHost, commit_hex: str, stop: set[str]) -> bool:
    """Whether the commit, its trees and blobs, and its first parents (down to ``stop``) read back."""
    current: str | None = commit_hex
    for _ in range(VERIFY_DEPTH):
        if current is None:
            return True
        try:
            data = repo.read(bytes.fromhex(current), "commit")
            lines = data.split(b"\n\n", 1)[0].split(b"\n")
            _tree_reads(repo, bytes.fromhex(lines[0][5:].decode()))
            parents = [ln[7:].decode() for ln in lines if ln.startswith(b"parent ")]
        except (CorruptionError, ValueError, IndexError):
            return False
        if current in stop:
            return True
        current = parents[0] if parents else None
    return True


def _tree_reads(repo: RecoveryHost, raw: bytes) -> None:
    for mode, child in repo.read_tree(raw).values():
        if mode == MODE_TREE:
            _tree_reads(repo, child)
        else:
            repo.read(child)


def _listdir(path: str) -> list[str]:
    """The names in directory ``path``; none if it does not exist (the journal directory exists
    only in repositories the journal-and-leases release wrote)."""
    try:
        return os.listdir(path)
    except FileNotFoundError:
        return []


# -- what the journal-and-leases release's publisher did, for its leases ------------------------

#: how long a lease's delete waits for another writer's ``packed-refs.lock``
LOCK_WAIT = 10.0


def file_identity(repo_path: str, name: str) -> list | None:
    """``[inode, mtime ns]`` of the file holding ref ``name`` (its loose file, else packed-refs)
    or of another file of the repository, ``None`` if there is none."""
    for rel in (name, "packed-refs") if name.startswith("refs/") else (name,):
        try:
            st = os.stat(os.path.join(repo_path, rel))
            return [st.st_ino, st.st_mtime_ns]
        except FileNotFoundError:
            continue
    return None


PACKED_REFS = "packed-refs"


def _create_lock(repo_path: str, path: str) -> None:
    """Create the lock file ``path`` exclusively (its directory too); ``OSError`` naming the
    lock when it exists (the callers' retry loops look for "lock" in the message)."""
    try:
        os.close(leases.open_creating_dirs(repo_path, path, os.O_WRONLY | os.O_EXCL | os.O_CLOEXEC))
    except FileExistsError:
        raise OSError(errno.EEXIST, "locked by another writer", path) from None


def _prune_dirs(root: str, name: str) -> None:
    """Remove the empty directories ``name`` (a ref) leaves under ``root`` (as git and libgit2
    do after a delete), keeping ``refs/<kind>``."""
    parts = name.split("/")[:-1]
    while len(parts) > 2:
        try:
            os.rmdir(os.path.join(root, *parts))
        except OSError:
            return
        parts.pop()


def delete_leased_ref(repo_path: str, name: str) -> None:
    """Delete ref ``name`` under the lease lock held on it (:mod:`qvc.plumbing.leases`: no one
    else moved the ref meanwhile), as git deletes a ref: under ``packed-refs.lock`` too, its
    ``packed-refs`` entry first, then its loose file and reflog, then the lock. A failure keeps
    the lease whole and a kill leaves it for a roll-forward, which deletes again (each step
    finds what an earlier try left). Waits out another writer's ``packed-refs.lock`` (held for
    milliseconds) up to :data:`LOCK_WAIT`, then raises ``OSError``.

    Holding ``packed-refs.lock`` is what keeps a concurrent ``git pack-refs`` (any store's
    packer, or git's) from reading the loose ref before the delete and writing it into
    ``packed-refs`` after: the deleted ref would come back with its old value. (libgit2 takes
    that lock only when the ref is packed already, so its delete is not used.)"""
    deadline = time.monotonic() + LOCK_WAIT
    delay = 0.0005
    while True:
        try:
            _delete_under_lock(repo_path, name)
            break
        except OSError as exc:
            if exc.errno != errno.EEXIST:  # (a full disk is no lock)
                raise
            if time.monotonic() > deadline:
                raise CheckpointConflictError(held_too_long(repo_path, PACKED_REFS)) from None
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
    # the ref's file and reflog are gone, and packed-refs was rewritten if it held the ref
    durability.dirty(repo_path).wrote(os.path.join(repo_path, PACKED_REFS))
    durability.dirty(repo_path).changed(os.path.dirname(os.path.join(repo_path, name)),
                             os.path.dirname(os.path.join(repo_path, "logs", name)))
    _prune_dirs(repo_path, name)
    _prune_dirs(os.path.join(repo_path, "logs"), name)


def _delete_under_lock(repo_path: str, name: str) -> None:
    """One try of :func:`delete_leased_ref`; ``OSError`` (``EEXIST``) when another writer holds
    ``packed-refs.lock``."""
    packed = os.path.join(repo_path, PACKED_REFS)
    _create_lock(repo_path, packed + ".lock")
    committed = False
    try:
        kept = without_packed(repo_path, name)
        if kept is not None:
            with open(packed + ".lock", "wb") as f:
                f.write(b"\n".join(kept))
            os.rename(packed + ".lock", packed)
            committed = True
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            os.unlink(os.path.join(repo_path, name))
        with contextlib.suppress(FileNotFoundError, NotADirectoryError, IsADirectoryError):
            os.unlink(os.path.join(repo_path, "logs", name))
    finally:
        if not committed:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(packed + ".lock")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(repo_path, name + ".lock"))


def held_too_long(repo_path: str, name: str) -> str:
    """The one line for a write that waited :data:`LOCK_WAIT` for ``name``'s lock (no qvc store's):
    it names the lock file and, as git does, leaves removing it to the user."""
    return (f"{name}: locked by another program for over {LOCK_WAIT:.0f} s ({os.path.join(repo_path, name)}.lock "
            "exists; if no other program is running, remove it and try again)")
