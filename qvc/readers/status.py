"""``qvc status``: what a repository holds and how it is doing, in one call."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from qvc.errors import OBJECTS_REPAIR, CorruptionError, DamagedRefError, QvcError
from qvc.plumbing import leases, pack
from qvc.plumbing.leftovers import quarantine_folders
from qvc.plumbing.maintenance import due
from qvc.remotes.replication import replication_status
from qvc.runs.failures import recorded_failures
from qvc.store.refnames import HEADS, SUPERSEDED, WRITES
from qvc.types import Head

if TYPE_CHECKING:
    from qvc.store.git_store import GitCheckpointStore


@dataclass
class RepoStatus:
    """A repository's state; ``to_json()`` is the stable ``qvc status --json`` form."""

    path: str
    thread: str | None  # the current thread (None: HEAD is detached)
    head: str | None  # the commit HEAD stands for (None: the current thread has no checkpoints)
    head_id: str | None  # its checkpoint id
    head_step: int | None
    durability: str
    threads: int
    superseded_lines: int
    pending_writes: int
    recovery: str | None  # what opening repaired, if anything
    maintenance_due: str | None  # why `qvc gc` is due, if it is
    replication: list[dict[str, Any]] = field(default_factory=list)  # lag per replicated remote
    damaged: str | None = None  # why HEAD's commit does not read, if it does not (see `qvc fsck`);
    # with thread and head None: why HEAD itself does not read
    failures: int = 0  # checkpoint writes that failed where the caller may not see it (qvc.runs.failures)
    last_failures: list[dict[str, Any]] = field(default_factory=list)  # the last 5 of them, oldest first
    #: the folders of files repairs moved aside instead of deleting them (qvc.plumbing.recovery.move_aside),
    #: oldest first: nothing reads them; look, then delete them
    quarantine: list[str] = field(default_factory=list)
    #: what `qvc fsck` would find that is cheap to see (a damaged ref file, a pack whose size
    #: disagrees with its index), each naming the repair
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def status(store: GitCheckpointStore) -> RepoStatus:
    """The status of the repository ``store`` has open (reads only; never blocks writers)."""
    try:
        head = store.current()
    except DamagedRefError as exc:  # HEAD names a thread whose ref file holds no ref
        head, head_damaged = Head(store.ref_thread(exc.ref), None), str(exc)
    except CorruptionError as exc:  # a garbled HEAD: say so; the rest still reads
        head, head_damaged = Head(None, None), str(exc)
    else:
        head_damaged = None
    damaged = head_damaged or (store.damage(head.commit) if head.commit else None)  # a broken head
    info = store.commit_info(head.commit) if head.commit and damaged is None else None
    counts = {HEADS: 0, SUPERSEDED: 0}
    writes_refs = []
    for name, tip in store.repository.refs("refs/"):
        for prefix in counts:
            if name.startswith(prefix):
                counts[prefix] += 1
        if name.startswith(WRITES):
            writes_refs.append((name, tip))
    failures = recorded_failures(store.path)
    return RepoStatus(
        path=store.path, thread=head.thread, head=head.commit, head_id=info.checkpoint_id if info else None,
        head_step=info.step if info else None, durability=store.durability.value, threads=counts[HEADS],
        superseded_lines=counts[SUPERSEDED], pending_writes=pending_checkpoints(store, writes_refs),
        recovery=store.recovery.summary() if store.recovery else None, maintenance_due=due(store.repository),
        replication=[r.to_json() for r in replication_status(store)], damaged=damaged,
        failures=len(failures), last_failures=failures[-5:], quarantine=quarantine_folders(store.path),
        problems=[f"thread {thread!r} is damaged: {why}" for thread, why in store.damaged_threads()
                  if thread != head.thread or head_damaged is None]
        + damaged_packs(store.path) + foreign_locks(store.path) + config_problems(store.path),
    )


def pending_checkpoints(store: GitCheckpointStore, refs: list[tuple[str, str]]) -> int:
    """How many checkpoints have pending writes, in every layout, among the writes refs ``refs``
    (``(name, tip)``): each set of writes is one checkpoint's
    (:meth:`~qvc.store.git_store.GitCheckpointStore.write_sets`; a thread's record is none), a
    checkpoint with sets in both layouts counts once. A ref that does not read counts for
    nothing (``qvc fsck`` reports it). Reads no write itself."""
    commits, keyed = [], set()
    for name, tip in refs:
        try:
            sets = store.write_sets(name, tip)
        except QvcError:
            continue
        for found in sets:
            if found.commit is not None:
                commits.append(found.commit)
            else:
                keyed.add((found.thread, found.key) if found.thread is not None and found.key is not None
                          else (found.ref, found.path))
    count = len(keyed)
    for sha in commits:
        if keyed:  # the same checkpoint's writes in both layouts count once
            try:
                info = store.commit_info(sha)
            except QvcError:
                info = None
            if info is not None and (info.thread_id, info.checkpoint_id) in keyed:
                continue
        count += 1
    return count


def config_problems(path: str) -> list[str]:
    """A line when the repository's ``config`` file does not parse (every command that needs it
    exits 5), naming the repair."""
    from qvc.plumbing.backend import config_plainly_fine

    if config_plainly_fine(os.path.join(path, "config")):  # (no program runs: status runs none)
        return []
    from qvc.plumbing.launcher import config_problem, unreadable_config  # deferred: start-up speed

    found = config_problem(path)
    return [] if found is None else [str(unreadable_config(os.path.join(path, "config"), found))]


def foreign_locks(path: str) -> list[str]:
    """A line for each lock file of the repository at ``path`` that no qvc store holds (git's,
    another program's: ``refs/**.lock``, ``packed-refs.lock``, ``config.lock``, ``HEAD.lock``).
    qvc never removes one (its owner cannot be proved gone); what qvc writes to what it locks
    stays staged (qvc reads it) until it is gone."""
    found = [name for name in ("packed-refs.lock", "config.lock", "HEAD.lock")
             if os.path.lexists(os.path.join(path, name))]
    for dirpath, _, files in os.walk(os.path.join(path, "refs")):
        for n in files:
            if n.endswith(".lock") and leases.writing(n) is None:  # (a qvc lease being written is no lock)
                ref = os.path.relpath(os.path.join(dirpath, n[:-5]), path).replace(os.sep, "/")
                if leases.holder(path, ref) is None and os.path.lexists(os.path.join(dirpath, n)):
                    found.append(f"{ref}.lock")
    return [f"lock file {os.path.join(path, name)} is no qvc store's (another program is updating, or was killed): "
            "qvc's writes to what it locks reach git's files once it is gone; if no other program is running, "
            "remove it" for name in sorted(found)]


def damaged_packs(path: str) -> list[str]:
    """A line for each pack of the repository at ``path`` that is not whole (its size or checksum
    disagrees with its index: :func:`qvc.plumbing.pack.is_intact`), naming the repair."""
    pack_dir = os.path.join(path, "objects", "pack")
    try:
        names = sorted(n for n in os.listdir(pack_dir) if n.endswith(".pack"))
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = []
    for name in names:
        base = os.path.join(pack_dir, name[:-5])
        if not pack.is_intact(base) and os.path.exists(base + ".pack"):  # (not merged away meanwhile)
            found.append(f"pack {os.path.relpath(base + '.pack', path)} is damaged (its size or checksum "
                         f"disagrees with its index): {OBJECTS_REPAIR}")
    return found
