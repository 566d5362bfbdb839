"""What a killed or crashed process may have left in a repository, judged cheaply and without
locks on every open (:func:`needed`: whether :func:`qvc.plumbing.recovery.recover` has anything
to do), and the :class:`RecoveryReport` of what recovery then repaired.

Kept apart from :mod:`qvc.plumbing.recovery` (which imports this module) so that opening a
clean repository, which every command and every store does, loads none of the recovery itself.
"""

from __future__ import annotations

import os
import time
from typing import Protocol

from qvc.plumbing import pack
from qvc.plumbing.backend import QVC_DIR
from qvc.plumbing.locking import flocked, try_flock

#: how old a temporary or half-created file must be before it counts as a dead writer's (a
#: live writer renames its own into place at once)
STALE_SECONDS = 10.0


class Opened(Protocol):
    """The repository being opened, as the check needs it."""

    path: str  # the repository (git's directory)
    qvc_dir: str  # qvc's own directory in it


class RecoveryReport:
    """What opening the repository repaired (empty, and false, when nothing was needed). (A
    plain class: every store makes one on opening, and a dataclass of this many fields costs
    start-up about a millisecond to define on CPython 3.11.)"""

    __slots__ = ("journals_replayed", "objects_restored", "refs_restored", "restored_from", "refs_removed",
                 "refs_deleted", "locks_removed", "locks_left", "temp_files_removed", "empty_objects_removed",
                 "indexes_rebuilt", "moved_aside", "quarantine", "reflogs_repaired", "moved")

    def __init__(self) -> None:
        self.journals_replayed = 0
        self.objects_restored = 0
        #: refs set back to a value that reads, each also in :attr:`restored_from`
        self.refs_restored: list[str] = []
        #: ref -> where its restored value came from: ``"the journal"``, ``"the reflog"`` or ``"its
        #: tip's first readable ancestor"``
        self.restored_from: dict[str, str] = {}
        #: refs deleted: nothing they named reads back, nor any earlier value of theirs
        self.refs_removed: list[str] = []
        #: refs deleted as a crashed writer's journal says (its delete, journaled, was not yet in git's files)
        self.refs_deleted: list[str] = []
        self.locks_removed: list[str] = []
        #: lock files that name no qvc store (git's, another program's): never removed, since their
        #: owner cannot be proved gone; a write to the ref one locks stays staged until it is gone
        self.locks_left: list[str] = []
        self.temp_files_removed = 0
        self.empty_objects_removed = 0
        #: pack indexes rebuilt from their packs (the damaged ones moved aside)
        self.indexes_rebuilt: list[str] = []
        #: files moved into :attr:`quarantine`, as paths relative to the repository
        self.moved_aside: list[str] = []
        #: the quarantine folder of this repair, relative to the repository (``None``: nothing moved)
        self.quarantine: str | None = None
        self.reflogs_repaired: list[str] = []
        #: refs the replayed journals moved, as ``{name: (value before the first move, last value)}``
        #: (their writers may have died before indexing what they wrote)
        self.moved: dict[str, tuple[str | None, str | None]] = {}

    def __bool__(self) -> bool:
        return any(getattr(self, name) for name in self.__slots__)

    def __repr__(self) -> str:
        return f"RecoveryReport({self.summary()!r})"

    def restored(self, name: str, source: str) -> None:
        """Note that ref ``name`` was set back to a value from ``source`` (``"the journal"``, ...)."""
        if name not in self.refs_restored:
            self.refs_restored.append(name)
        self.restored_from[name] = source
        if name in self.refs_removed:
            self.refs_removed.remove(name)

    def removed(self, name: str) -> None:
        """Note that ref ``name`` was deleted."""
        if name not in self.refs_removed:
            self.refs_removed.append(name)
        if name in self.refs_restored:
            self.refs_restored.remove(name)
            self.restored_from.pop(name, None)

    def deleted(self, name: str) -> None:
        """Note that ref ``name`` was deleted, finishing a crashed writer's journaled delete."""
        if name not in self.refs_deleted:
            self.refs_deleted.append(name)

    def summary(self) -> str:
        """What happened, each kind of repair in its own words: restored (and from where),
        removed, moved aside (and where to)."""
        by_source: dict[str, list[str]] = {}
        for name in self.refs_restored:
            by_source.setdefault(self.restored_from.get(name, "the journal"), []).append(name)
        lines = (
            (self.journals_replayed, f"replayed {self.journals_replayed} journal(s) of crashed writers"),
            (self.objects_restored, f"restored {self.objects_restored} object(s) from the journal"),
            *((True, f"restored ref(s) {', '.join(names)} from {source}") for source, names in by_source.items()),
            (self.refs_removed, f"removed ref(s) {', '.join(self.refs_removed)} (nothing they named reads "
                                "back, nor any earlier value)"),
            (self.refs_deleted, f"deleted ref(s) {', '.join(self.refs_deleted)} as the journal says"),
            (self.locks_removed, f"removed stale lock(s) {', '.join(self.locks_removed)}"),
            (self.locks_left, f"left lock(s) {', '.join(self.locks_left)} (no qvc store's: if no other "
                              "program is running, remove them)"),
            (self.temp_files_removed, f"removed {self.temp_files_removed} temporary file(s)"),
            (self.empty_objects_removed, f"removed {self.empty_objects_removed} empty object file(s)"),
            (self.indexes_rebuilt, f"rebuilt pack index(es) {', '.join(self.indexes_rebuilt)} from their packs"),
            (self.moved_aside, f"moved aside to {self.quarantine}/: {', '.join(self.moved_aside[:5])}"
                               + (f" and {len(self.moved_aside) - 5} more" if len(self.moved_aside) > 5 else "")),
            (self.reflogs_repaired, f"repaired reflog(s) of {', '.join(self.reflogs_repaired)}"),
        )
        parts = [text for present, text in lines if present]
        return "; ".join(parts) or "nothing to repair"


#: the folder under ``<repo>/qvc`` that repairs move files aside into (see :func:`move_aside`)
QUARANTINE = "quarantine"


def quarantine_folders(repo_path: str) -> list[str]:
    """The quarantine folders (:func:`qvc.plumbing.recovery.move_aside`) of the repository at ``repo_path`` that hold
    files, oldest first, as paths."""
    root = os.path.join(repo_path, QVC_DIR, QUARANTINE)
    try:
        names = sorted(os.listdir(root))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [os.path.join(root, n) for n in names if os.path.isdir(os.path.join(root, n))
            and any(files for _, _, files in os.walk(os.path.join(root, n)))]


def needed(repo: Opened) -> bool:
    """Whether :func:`qvc.plumbing.recovery.recover` has anything to do, judged without the exclusive lock: a journal
    no live store holds, or a lock, temporary or half-created journal file left behind."""
    journal_dir = os.path.join(repo.qvc_dir, "journal")
    try:
        names = os.listdir(journal_dir)
    except FileNotFoundError:
        names = []  # a repository the staging database wrote from the start: no journal to migrate
    for name in names:
        if name.endswith(".wal.new"):
            return True
        if name.endswith(".wal"):
            try:
                fd = os.open(os.path.join(journal_dir, name), os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                if try_flock(fd, shared=True):
                    return True  # nobody holds it: its owner died
                if os.path.exists(os.path.join(journal_dir, name + ADOPTING)):
                    return True  # held by a process finishing its dead owner's leases, not by the owner
            finally:
                os.close(fd)
    old_release = os.path.isdir(journal_dir)  # leases and their publication: only that release's
    if old_release:
        # deferred: start-up speed (other repositories never need it; the loop reads it only then)
        from qvc.plumbing import leases
    for top in ("refs", "objects"):
        for dirpath, _, files in os.walk(os.path.join(repo.path, top)):
            for n in files:
                if (n.startswith("tmp_") or ".tmp-" in n) and \
                        time.time() - mtime(os.path.join(dirpath, n), time.time()) >= STALE_SECONDS:
                    return True  # a dead writer's (a live one renames its own into place at once)
                if not old_release:
                    continue
                if leases.writing(n) is not None:
                    if not alive(leases.writing(n)):
                        return True  # a lease's file its writer left, killed before the link
                elif n.endswith(".lock"):
                    name = os.path.relpath(os.path.join(dirpath, n[:-5]), repo.path).replace(os.sep, "/")
                    holder = leases.holder(repo.path, name)
                    if holder is not None and not journal_alive(repo, holder):
                        return True  # a dead store's lease (a live store's is no leftover)
                    if holder is None and leases.publishing(os.path.join(dirpath, n)):
                        return True  # maybe a dead store's publication cut short (or git's own)
    return suspect_indexes(repo)  # a damaged index fails every read of its pack: rebuilt by recovery


def migrating(repo: Opened) -> bool:
    """Whether the repository holds journals of the journal-and-leases release (``qvc/journal/``
    not empty): their migration must run before this engine writes (see :func:`needed`)."""
    try:
        return bool(os.listdir(os.path.join(repo.qvc_dir, "journal")))
    except (FileNotFoundError, NotADirectoryError):
        return False


def journal_alive(repo: Opened, name: str) -> bool:
    """Whether journal file ``name`` (of ``<repo>/qvc/journal``) belongs to an open store: it
    exists and someone holds its ``flock`` (this process included)."""
    return bool(flocked(os.path.join(repo.qvc_dir, "journal", os.path.basename(name))))


#: the suffix of the marker a process finishing a dead store's leases
#: (:func:`qvc.plumbing.recovery.adopt_lease`) puts
#: beside its journal while it holds the journal's lock, so that :func:`needed` tells that lock
#: from its owner's: the journal still needs recovery
ADOPTING = ".adopting"


def mtime(path: str, default: float) -> float:
    try:
        return os.lstat(path).st_mtime
    except FileNotFoundError:
        return default


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (on this machine)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def suspect_indexes(repo: Opened) -> bool:
    """Whether a pack index is no version-2 index or too short to be one (what ``echo garbage >
    pack-x.idx`` or a torn copy leaves): its first bytes and size alone, cheap enough for every
    open (see :func:`needed`); :func:`qvc.plumbing.recovery.repair_packs` checks the rest."""
    pack_dir = os.path.join(repo.path, "objects", "pack")
    try:
        entries = list(os.scandir(pack_dir))
    except FileNotFoundError:
        return False
    for entry in entries:
        if entry.name.endswith(".idx"):
            try:
                fd = os.open(entry.path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                if os.pread(fd, 8, 0) != pack.IDX_MAGIC or os.fstat(fd).st_size < pack.MIN_INDEX_SIZE:
                    return True
            finally:
                os.close(fd)
    return False
