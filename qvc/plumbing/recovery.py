"""Repair on open: what a crash (process kill or power loss) can leave behind.

Runs under the repository's exclusive maintenance lock, before the store accepts calls:

1. Journals whose owner died (see :mod:`qvc.plumbing.journal`) are replayed: every object they
   recorded is rewritten if it is missing, empty or truncated, and every ref they moved is
   checked; a ref that is missing or whose recent history no longer reads back is set to the
   newest value the journal made durable whose history does read back.
2. Stale ``*.lock`` files under ``refs/`` and libgit2's temporary object files are removed
   (all of them when no other qvc store has the repository open, else those older than
   ``STALE_SECONDS``). After a crash, empty loose objects are removed too (``git fsck``
   rejects them).
3. The repaired files are hardened and the replayed journals deleted.

The result is a :class:`RecoveryReport`, kept as ``store.recovery`` and logged.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

from qvc.errors import CorruptionError
from qvc.plumbing import leases, pack
from qvc.plumbing.durability import harden
from qvc.plumbing.journal import GENERATION, claim_orphans, fsync_dir, read_records
from qvc.plumbing.libgit2 import pygit2
from qvc.plumbing.objects import MODE_TREE
from qvc.plumbing.reflog import ReflogEntry

if TYPE_CHECKING:
    from qvc.plumbing.repository import Repository

STALE_SECONDS = 10.0
VERIFY_DEPTH = 1000


@dataclass
class RecoveryReport:
    """What opening the repository repaired (empty when nothing was needed)."""

    journals_replayed: int = 0
    objects_restored: int = 0
    refs_restored: list[str] = field(default_factory=list)
    locks_removed: list[str] = field(default_factory=list)
    temp_files_removed: int = 0
    empty_objects_removed: int = 0
    damaged_packs_removed: list[str] = field(default_factory=list)
    reflogs_repaired: list[str] = field(default_factory=list)
    #: refs the replayed journals moved, as ``{name: (value before the first move, last value)}``
    #: (their writers may have died before indexing what they wrote)
    moved: dict[str, tuple[str | None, str | None]] = field(default_factory=dict, repr=False)

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    def summary(self) -> str:
        lines = (
            (self.journals_replayed, f"replayed {self.journals_replayed} journal(s) of crashed writers"),
            (self.objects_restored, f"restored {self.objects_restored} object(s)"),
            (self.refs_restored, f"restored ref(s) {', '.join(self.refs_restored)}"),
            (self.locks_removed, f"removed stale lock(s) {', '.join(self.locks_removed)}"),
            (self.temp_files_removed, f"removed {self.temp_files_removed} temporary file(s)"),
            (self.empty_objects_removed, f"removed {self.empty_objects_removed} empty object file(s)"),
            (self.damaged_packs_removed, f"removed damaged pack(s) {', '.join(self.damaged_packs_removed)}"),
            (self.reflogs_repaired, f"repaired reflog(s) of {', '.join(self.reflogs_repaired)}"),
        )
        parts = [text for present, text in lines if present]
        return "; ".join(parts) or "nothing to repair"


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
    return leases.flocked(path) is False


def needed(repo: Repository) -> bool:
    """Whether :func:`recover` has anything to do, judged without the exclusive lock: a journal
    no live store holds, or a lock, temporary or half-created journal file left behind."""
    journal_dir = os.path.join(repo.qvc_dir, "journal")
    try:
        names = os.listdir(journal_dir)
    except FileNotFoundError:
        return False
    for name in names:
        if name.endswith(".wal.new"):
            return True
        if name.endswith(".wal"):
            try:
                fd = os.open(os.path.join(journal_dir, name), os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return True  # nobody holds it: its owner died
            except BlockingIOError:
                pass
            finally:
                os.close(fd)
    for top in ("refs", "objects"):
        for dirpath, _, files in os.walk(os.path.join(repo.path, top)):
            for n in files:
                if n.startswith("tmp_") or ".tmp-" in n:
                    return True
                if n.endswith(".lock"):
                    name = os.path.relpath(os.path.join(dirpath, n[:-5]), repo.path).replace(os.sep, "/")
                    holder = leases.holder(repo.path, name)
                    if holder is None or not journal_alive(repo, holder):
                        return True  # a live store's lease is no leftover
    return any(os.path.exists(os.path.join(repo.path, n)) for n in ("packed-refs.lock", "config.lock", "HEAD.lock"))


def journal_alive(repo: Repository, name: str) -> bool:
    """Whether journal file ``name`` (of ``<repo>/qvc/journal``) belongs to an open store: it
    exists and someone holds its ``flock`` (this process included)."""
    return bool(leases.flocked(os.path.join(repo.qvc_dir, "journal", os.path.basename(name))))


def adopt_lease(repo: Repository, name: str, holder: str) -> bool:
    """Finish a dead store's lease on ref ``name`` (see :mod:`qvc.plumbing.leases`) while other
    stores run: roll the ref forward to the last value the dead store's journal moved it to
    (its objects rewritten first if git's files lack them), append those moves to the reflog,
    and release the lock. Returns whether it did; ``False`` if the holder turns out to be alive
    or another process is adopting it. The journal stays for the next open's full recovery,
    which then finds the ref where the journal left it.
    """
    path = os.path.join(repo.qvc_dir, "journal", os.path.basename(holder))
    lock = leases.lock_path(repo.path, name)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        fd = -1  # its journal is gone: nothing of the lease was acknowledged
    try:
        if fd >= 0:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
        if leases.holder(repo.path, name) != holder:
            return False  # released or adopted meanwhile
        moves: list[tuple[str | None, str | None, list | None]] = []
        missing: list[tuple[str, bytes]] = []
        for record in read_records(path) if fd >= 0 else ():
            if record.base:
                continue
            for kind, data in record.objects:
                if not repo.has(repo.hash(kind, data)):
                    missing.append((kind, data))
            moves += [(old, new, record.seen.get(n)) for n, old, new in record.refs if n == name]
        disk = repo.ref(name)
        identity = repo.file_identity(name)
        start = next((i for i, (old, _, seen) in enumerate(moves)
                      if old == disk and seen and seen[0] == identity), None)
        if start is None or moves[-1][1] is None:
            os.unlink(lock)  # the lease's moves never reached the journal: nothing to roll forward
            return True
        if missing:
            pack.write(os.path.join(repo.path, "objects", "pack"), missing)
        value = moves[-1][1]
        if not _history_reads(repo, value, {disk} if disk else set()):
            os.unlink(lock)
            return True
        why, when = "recovery: a crashed writer's move", time.time()
        with open(lock, "r+b") as f:
            lease = leases.Lease(os.dup(f.fileno()), value, identity,
                                 [(old, new, why, when) for old, new, _ in moves[start:]])
        leases.publish(repo.path, name, lease, "qvc <qvc@localhost>", log=True, head_too=False)
        return True
    finally:
        if fd >= 0:
            os.close(fd)


def recover(repo: Repository) -> RecoveryReport:
    report = RecoveryReport()
    journal_dir = os.path.join(repo.qvc_dir, "journal")
    orphans = claim_orphans(journal_dir)
    try:
        live = [n for n in os.listdir(journal_dir) if n.endswith(".wal")]
        alone = len(live) == len(orphans)
        leased: dict[str, str] = {}  # refs the dead writers held leased: no one else moved them since
        remove_stale_files(repo, 0.0 if alone else STALE_SECONDS, report,
                           dead={os.path.basename(path) for path, _ in orphans}, leased=leased)
        if orphans:
            _remove_empty_objects(repo, report)
            _remove_damaged_packs(repo, report)
        replayed = [_replay(repo, path, report) for path, _ in orphans]
        moves = [m for m, _ in replayed]
        if orphans:
            _repair_reflogs(repo, report)  # before restoring refs appends to the reflogs
        for (journal_moves, tokens), (path, _) in zip(replayed, orphans, strict=True):
            for name, history in journal_moves.items():
                _restore_ref(repo, name, history, tokens, report,
                             leased=leased.get(name) == os.path.basename(path))
        if orphans:
            _repair_unjournalled_refs(repo, {name for m in moves for name in m}, report)
            for path, _ in orphans:
                _finish_generation(repo, path)
        if orphans:  # the dead writers' small packs, while no writer runs
            try:
                repo.merge_small_packs(locked=True)
            except (OSError, ValueError) as exc:
                logging.getLogger("qvc").warning("qvc: merging packs in %s failed: %s", repo.path, exc)
        if report:
            harden(repo.path, fsync=repo.fsync)
        for path, _ in orphans:
            os.unlink(path)
        if orphans and repo.fsync:
            fsync_dir(journal_dir)
    finally:
        for _, fd in orphans:
            os.close(fd)
    return report


def _mtime(path: str, default: float) -> float:
    try:
        return os.lstat(path).st_mtime
    except FileNotFoundError:
        return default


def remove_stale_files(repo: Repository, older_than: float, report: RecoveryReport,
                       dead: set[str] | frozenset[str] = frozenset(),
                       leased: dict[str, str] | None = None) -> None:
    """Remove lock and temporary files at least ``older_than`` seconds old. Under the exclusive
    lock (no qvc writer is mid-write) every lock file but a live store's lease is stale: pass 0.
    A lease (:mod:`qvc.plumbing.leases`) goes, whatever its age, once its store is gone: one
    held by a journal in ``dead`` (those this recovery claimed and replays) is removed and noted
    in ``leased`` (ref → journal), any other dead store's is rolled forward (:func:`adopt_lease`),
    or removed when its ref is unreadable (recovery repairs the ref after)."""
    now = time.time()

    def stale(path: str) -> bool:
        try:
            return now - os.lstat(path).st_mtime >= older_than
        except OSError:
            return False

    for top in ("refs",):
        for dirpath, _, files in os.walk(os.path.join(repo.path, top)):
            for name in files:
                if not name.endswith(".lock"):
                    continue
                path = os.path.join(dirpath, name)
                ref = os.path.relpath(path[:-5], repo.path).replace(os.sep, "/")
                holder = leases.holder(repo.path, ref)
                if holder is not None:  # a store's lease: kept while that store lives, whatever its age
                    if holder not in dead:
                        if journal_alive(repo, holder):
                            continue
                        try:
                            if not adopt_lease(repo, ref, holder):
                                continue  # alive after all, or adopted by another process
                            report.locks_removed.append(os.path.relpath(path, repo.path))
                            continue
                        except CorruptionError:
                            pass  # the ref is torn (a power cut): the lock goes, recovery repairs the ref

                    if leased is not None:
                        leased[ref] = holder
                elif not stale(path):
                    continue
                os.unlink(path)
                report.locks_removed.append(os.path.relpath(path, repo.path))
    journal_dir = os.path.join(repo.qvc_dir, "journal")
    for name in os.listdir(journal_dir):  # a store killed while creating its journal
        path = os.path.join(journal_dir, name)
        if name.endswith(".wal.new") and (now - _mtime(path, now) >= STALE_SECONDS or _abandoned(path)):
            os.unlink(path)
            report.temp_files_removed += 1
    for name in ("packed-refs.lock", "config.lock", "HEAD.lock"):
        path = os.path.join(repo.path, name)
        if os.path.exists(path) and stale(path):
            os.unlink(path)
            report.locks_removed.append(name)
    objects = os.path.join(repo.path, "objects")
    for dirpath, _, files in os.walk(objects):
        for name in files:
            path = os.path.join(dirpath, name)
            if (name.startswith("tmp_") or ".tmp-" in name) and stale(path):
                os.unlink(path)
                report.temp_files_removed += 1


def _remove_damaged_packs(repo: Repository, report: RecoveryReport) -> None:
    """Packs a power loss left torn (or a .pack whose .idx never got written): the journal has their objects."""
    pack_dir = os.path.join(repo.path, "objects", "pack")
    for name in sorted(os.listdir(pack_dir)):
        base, ext = os.path.splitext(os.path.join(pack_dir, name))
        if not os.path.exists(base + ext):
            continue  # removed with its .idx just before
        if ext == ".pack" and not os.path.exists(base + ".idx"):
            os.unlink(base + ".pack")
            report.damaged_packs_removed.append(name)
        elif ext == ".idx" and not pack.is_intact(base):
            for suffix in (".idx", ".pack"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(base + suffix)
            report.damaged_packs_removed.append(name)


def _remove_empty_objects(repo: Repository, report: RecoveryReport) -> None:
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


def _loose_path(repo: Repository, raw: bytes) -> str:
    hexid = raw.hex()
    return os.path.join(repo.path, "objects", hexid[:2], hexid[2:])


def _finish_generation(repo: Repository, path: str) -> None:
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


def _replay(repo: Repository, path: str, report: RecoveryReport) -> tuple[dict[str, list], set[str]]:
    """Restore the journal's missing objects; return its ref moves (``{ref: [(old, new, seen)]}``)
    and the generation tokens the writer saw or wrote."""
    report.journals_replayed += 1
    moves: dict[str, list[tuple[str | None, str | None, float]]] = {}
    tokens: set[str] = set()
    for record in read_records(path):
        tokens.update(v[1] for v in record.seen.values() if isinstance(v, list) and len(v) > 1
                      and isinstance(v[1], str))
        for kind, data in record.objects:
            raw = repo.hash(kind, data)
            try:
                repo.read(raw, kind)
                continue
            except CorruptionError:
                pass
            try:
                os.unlink(_loose_path(repo, raw))
            except FileNotFoundError:
                pass
            repo.git.odb.write(pygit2.enums.ObjectType[kind.upper()], data)
            report.objects_restored += 1
        for name, old, new in record.refs:
            moves.setdefault(name, []).append((new if record.base else old, new, record.seen.get(name)))
            first = report.moved.get(name, (new if record.base else old, None))[0]
            report.moved[name] = (first, new)
    return moves, tokens


def _repair_reflogs(repo: Repository, report: RecoveryReport) -> None:
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


def _restore_ref(repo: Repository, name: str, moves: list[tuple[str | None, str | None, list | None]],
                 tokens: set[str], report: RecoveryReport, *, leased: bool = False) -> None:
    """Bring a ref the dead writer moved back to what its durable journal records say.

    ``moves`` are the writer's (old, new, seen) moves of the ref, oldest first, where ``seen``
    is the identity (inode, mtime) of the ref's file and the token in ``qvc/generation`` just
    before the move. The ref is set to the newest recorded value whose history reads back when
    it is unreadable now; or when it still holds the value one of the moves replaced, in a file
    no newer than the one seen before that move (the renames since never reached the disk); or
    when it is missing and no other writer deleted history since (each delete writes a new token
    to ``qvc/generation``; ``tokens`` are those the dead writer saw or wrote). A ref anyone else
    wrote since is left alone. File times come from the kernel's coarse clock: two writes of one
    ref within one tick (a few ms) plus a power loss cannot be told apart. ``leased``: the dead
    writer died holding the ref's lease (its unpublished moves), so no one else can have
    deleted the ref since: a missing ref is restored whatever deletes happened elsewhere. The
    same holds when the ref's lock shows the writer died publishing that lease (:func:`_cut_short`).
    (Not proof against one case: the writer created the ref, another deleted it, and the
    writer died re-creating it before journaling that; the deleted thread then comes back.)
    """
    try:
        current = repo.ref(name)
        broken = current is not None and not _history_reads(
            repo, current, {v for _, v, _ in moves if v} | {v for v, _, _ in moves if v})
    except CorruptionError:
        current, broken = None, True
    new = moves[-1][1]
    cut_short = _cut_short(repo, name, {v for _, v, _ in moves if v})
    leased = leased or cut_short  # it died publishing its lease
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
    if not _unlocked(repo, name, cut_short):
        return
    loose = os.path.join(repo.path, name)
    if broken and os.path.exists(loose):
        os.unlink(loose)
    refs = repo.git.references
    if value is None:
        if refs.get(name) is not None:
            refs.delete(name)
    else:
        repo.git.create_reference_direct(name, pygit2.Oid(hex=value), True,
                                         message="recovery: restored from the journal")
    report.refs_restored.append(name)


def _cut_short(repo: Repository, name: str, values: set[str]) -> bool:
    """Whether ``name``'s lock is the dead writer's publication cut short: its lease's lock
    already holds one of ``values`` (those the writer moved the ref to) in place of its tag."""
    try:
        with open(leases.lock_path(repo.path, name), "rb") as f:
            data = f.read(64)
    except OSError:
        return False
    return data[:40].decode("ascii", "replace") in values and data[40:41] in (b"\n", b"")


def _unlocked(repo: Repository, name: str, cut_short: bool) -> bool:
    """Whether ``name`` may be written now: it has no lock, or its lock is the dead writer's
    publication cut short (``cut_short``, see :func:`_cut_short`), which is removed. Another
    lock (git's own, a live store's lease) is left, and so is the ref, for whoever holds the
    lock to write; a warning names it."""
    path = leases.lock_path(repo.path, name)
    if cut_short:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return True
    if not os.path.lexists(path):
        return True
    logging.getLogger("qvc").warning("qvc: recovering %s: %s is locked by another writer; left to it",
                                     repo.path, name)
    return False


def _repair_unjournalled_refs(repo: Repository, journalled: set[str], report: RecoveryReport) -> None:
    """Loose refs no durable journal record names, whose tip a power loss left unreadable.

    A store moves a ref before the journal record of that move is flushed, so a power cut
    can keep the ref's new file (possibly empty) but lose its objects and the record. Such
    a move was never acknowledged as durable: the ref goes back to the newest reflog value (or
    first parent, if its commit still reads) that reads back, or is deleted if there is none
    (a thread created by the lost write).
    """
    refs_dir = os.path.join(repo.path, "refs")
    for dirpath, _, files in os.walk(refs_dir):
        for fname in files:
            name = os.path.relpath(os.path.join(dirpath, fname), repo.path).replace(os.sep, "/")
            if name in journalled or name.endswith(".lock"):
                continue
            current = None
            try:
                current = repo.ref(name)
                # the whole line, not just the tip: a power cut may keep a new tip whose parents' packs it tore
                if current is not None and _history_reads(repo, current, set()):
                    continue
            except CorruptionError:
                pass
            candidates = [e.new for e in repo.reflog(name) if e.new] + _first_parents(repo, current)
            fallback = next((c for c in candidates if _history_reads(repo, c, set())), None)
            os.unlink(os.path.join(dirpath, fname))
            if fallback is not None:
                repo.git.create_reference_direct(name, pygit2.Oid(hex=fallback), True,
                                                 message="recovery: restored from the reflog")
            report.refs_restored.append(name)


def _first_parents(repo: Repository, commit_hex: str | None, limit: int = 64) -> list[str]:
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


def _history_reads(repo: Repository, commit_hex: str, stop: set[str]) -> bool:
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


def _tree_reads(repo: Repository, raw: bytes) -> None:
    for mode, child in repo.read_tree(raw).values():
        if mode == MODE_TREE:
            _tree_reads(repo, child)
        else:
            repo.read(child)
