"""Verifying a repository: every ref valid, every checkpoint and pending write decodes.

Two levels: git's own ``git fsck`` for the object store (hashes, links, missing objects), then
qvc's checks on top (thread names, checkpoint headers, state fields, pending writes).

A reflog entry naming a commit that is gone ("invalid reflog entry") is what ``qvc reset
THREAD@{1}`` leaves when it puts back a thread whose head commit was missing: the reflog records
the head it left, as git's does. In a repository that is otherwise healthy it is a warning, not
a problem (``qvc gc --prune`` drops such entries); with other problems it is one of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from qvc.errors import QvcError
from qvc.plumbing.leftovers import quarantine_folders
from qvc.store.refnames import HEADS, SUPERSEDED, WRITES, decode_thread

if TYPE_CHECKING:
    from qvc.store.git_store import GitCheckpointStore


@dataclass
class FsckReport:
    """What :func:`fsck` checked and the problems it found (falsy when none)."""

    refs: int = 0
    checkpoints: int = 0
    pending_writes: int = 0
    problems: list[str] = field(default_factory=list)
    #: what needs no repair: reflog entries naming a commit that is gone (``qvc gc --prune`` drops them)
    warnings: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.problems)

    def to_json(self) -> dict[str, Any]:
        return {"ok": not self.problems, "refs": self.refs, "checkpoints": self.checkpoints,
                "pending_writes": self.pending_writes, "problems": self.problems, "warnings": self.warnings}


# git fsck's line for a reflog entry whose new (or old) commit is missing
_INVALID_REFLOG = re.compile(r"error: (\S+): invalid reflog entry ([0-9a-f]{40,64})")


def fsck(store: GitCheckpointStore, *, objects: bool = True) -> FsckReport:
    """Check the repository; never raises for what it finds (it is reported), only for
    :class:`~qvc.errors.QvcError` such as a missing ``git`` when ``objects`` is set.

    Each problem names where it is: the thread (and ref) of a ref pointing at a missing or
    unreadable commit; the thread, checkpoint id and commit, and the field, of a damaged
    checkpoint; the checkpoint (commit, or thread and id) and ref of pending writes that do not
    decode, in either layout (:meth:`~qvc.store.git_store.GitCheckpointStore.write_sets`;
    ``pending_writes`` counts the sets). ``checkpoints`` counts every checkpoint commit reached, damaged ones too. A
    reflog entry naming a missing commit is one of ``warnings`` (naming ``qvc gc --prune``, which
    drops it) when nothing else is wrong, else one of the ``problems``.
    """
    from qvc.plumbing.launcher import run_git as run

    report = FsckReport()
    git_lines: list[str] = []  # git fsck's findings, in its order
    reflog: list[re.Match] = []  # those that are reflog entries naming a missing commit
    if objects:
        proc = run(store.path, "fsck", "--no-dangling", "--no-progress", "--strict")
        for line in (proc.stdout + proc.stderr).splitlines():
            if line.strip() and not line.startswith("notice:"):
                git_lines.append(f"git fsck: {line.strip()}")
                found = _INVALID_REFLOG.fullmatch(line.strip())
                if found is not None:
                    reflog.append(found)
        if proc.returncode != 0 and not git_lines:
            git_lines.append(f"git fsck failed with exit status {proc.returncode}")
    damage = store.staging_damage()
    if damage is not None:
        report.problems.append(f"{store.path}/qvc/staging.db: the staging database is damaged ({damage}); writes fail "
                               "until it is moved aside (repair: `qvc fsck --repair`)")
    _check_refs(store, report)
    if report.problems or len(reflog) < len(git_lines):  # damaged otherwise: missing commits may be part of it
        report.problems[:0] = git_lines
    else:
        report.warnings += [f"{m.group(1)}: reflog entry {m.group(2)[:12]} names a commit that is gone (left by a "
                            f"repair of a damaged head); `qvc gc --prune` drops it" for m in reflog]
    report.warnings += [f"files moved aside by a repair: {folder} (nothing reads them; look, then delete it)"
                        for folder in quarantine_folders(store.path)]
    return report


def _check_refs(store: GitCheckpointStore, report: FsckReport) -> None:
    """qvc's checks of every ref and what it reaches, into ``report``."""
    seen: set[str] = set()
    try:
        refs = list(store.repository.refs("refs/"))
    except QvcError as exc:
        report.problems.append(str(exc))
        return
    for name, why in store.repository.damaged_refs("refs/"):  # (skipped by the listing above)
        report.refs += 1
        thread = store.ref_thread(name)
        report.problems.append(f"{'thread ' + repr(thread) + ' (' + name + ')' if thread else name}: {why} "
                               "(repair: `qvc fsck --repair`)")
    for name, tip in refs:
        report.refs += 1
        if name.startswith(WRITES):  # every set of writes it holds, in every layout, decodes
            try:
                sets = store.write_sets(name, tip)
            except QvcError as exc:
                report.problems.append(f"{name}: {exc}")
                continue
            for found in sets:
                try:
                    store.write_set(found)
                    report.pending_writes += 1
                except QvcError as exc:
                    report.problems.append(f"{found.where}: {exc}")
            continue
        if not name.startswith((HEADS, SUPERSEDED)):
            continue
        if name.startswith(HEADS):
            thread = store.thread_of_ref(name)
            where = f"thread {thread!r} ({name})"
            try:
                owner = store.commit_info(tip).thread_id
            except QvcError as exc:
                report.problems.append(f"{where}: {exc}")
                continue
            if owner is not None and thread != owner and owner != name[len(HEADS):]:
                report.problems.append(f"{name}: names thread {thread!r} but its head belongs to {owner!r}")
        else:
            component = name[len(SUPERSEDED):].rpartition("/")[0]
            where = f"a superseded line of thread {decode_thread(component) or component!r} ({name})"
        stack = [tip]
        while stack:
            commit = stack.pop()
            if commit in seen:
                continue
            seen.add(commit)
            try:
                info = store.commit_info(commit)
            except QvcError as exc:
                report.problems.append(f"{where}: {exc}" if commit == tip else
                                       f"{where}: commit {commit[:12]}: {exc}")
                continue
            report.checkpoints += 1  # every checkpoint commit counts, damaged or not
            stack.extend(info.parents)
            label = f"thread {info.thread_id!r} checkpoint {info.checkpoint_id} (commit {commit[:12]})"
            damaged: dict[str, str] = {}
            try:
                store.read(commit, damaged=damaged)
            except QvcError as exc:
                report.problems.append(f"{label}: {exc}")
                continue
            for field_name, why in damaged.items():
                report.problems.append(f"{label} field {field_name!r}: {why}")
