"""``qvc verify``: is the history what its signers wrote?

Every commit reachable from the chosen refs (a thread's head and its superseded lines, or every
ref) is read once and checked in process, as an auditor would with plain git:

* its bytes hash to its id, and so do the trees and blobs it holds (an object edited in place,
  in a loose file or a pack, is found; git's own hash chain then carries the check to every
  parent);
* its signature (:func:`qvc.plumbing.signing.check_commit`) is good and by a key the
  repository's allowed signers (:mod:`qvc.store.signers`) held at the commit's time; this
  agrees with ``git -c gpg.ssh.allowedSignersFile=REPO/qvc/allowed_signers verify-commit``;
* every movement of a thread's head in its reflog left the old commit on one of the lines
  checked (a put moves forward; a time travel keeps the old line) or is named by a verified
  rewrite record (:class:`qvc.store.rewrite.RewriteLog`: an erasure that was asked for), and
  the reflog chains from the head back (an edited or removed entry breaks it).

What a local check cannot see: a thread cut short together with its reflog, consistently. A
remote that holds the history (``qvc push``) is the witness for that.

A problem is one line naming the ref, the checkpoint and the commit. Nothing is written.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Sequence

from qvc.errors import CorruptionError, QvcError, UnknownThreadError
from qvc.plumbing.objects import MODE_TREE, parse_tree
from qvc.plumbing.signing import SignatureState, SignatureStatus, check_commit
from qvc.store.history import parse_commit
from qvc.store.refnames import HEADS, REMOTE_QVC, REWRITES, head_ref, superseded_prefix
from qvc.store.signers import Signers

if TYPE_CHECKING:
    from qvc.store.git_store import GitCheckpointStore


@dataclass
class Problem:
    """One commit that does not verify: the ref it was reached from (``thread`` when that is a
    thread's), its checkpoint id, SHA, status (``unsigned``, ``bad``, ``unknown-key``,
    ``damaged``; for a movement of a head: ``unexplained``, ``reflog``) and why."""

    ref: str
    thread: str | None
    checkpoint_id: str | None
    sha: str
    status: str
    reason: str

    def __str__(self) -> str:
        where = f"thread {self.thread!r}" if self.thread is not None else self.ref
        what = f"checkpoint {self.checkpoint_id} ({self.sha[:12]})" if self.checkpoint_id else f"commit {self.sha[:12]}"
        return f"{where}: {what}: {self.status}: {self.reason}"


@dataclass
class VerifyReport:
    """What :func:`verify` checked and found; true when every commit verified."""

    refs: int = 0
    commits: int = 0
    objects: int = 0
    #: principal -> how many of the commits they signed
    signed_by: dict[str, int] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    def __bool__(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        return {"ok": not self.problems, "refs": self.refs, "commits": self.commits, "objects": self.objects,
                "signed_by": self.signed_by,
                "problems": [{"ref": p.ref, "thread": p.thread, "checkpoint_id": p.checkpoint_id, "sha": p.sha,
                              "status": p.status, "reason": p.reason} for p in self.problems]}


def verify(store: GitCheckpointStore, threads: Iterable[str] = ()) -> VerifyReport:
    """Check the commits reachable from ``threads`` (each thread's head and superseded lines;
    none given: every ref of the repository) against the allowed signers, and each thread's
    reflog against what is kept and what the rewrite records say. Raises
    :class:`~qvc.errors.UnknownThreadError` for a thread that does not exist and
    :class:`~qvc.errors.InvalidInputError` for an allowed signers file that does not parse."""
    allowed = Signers(store.path).entries()
    chosen = list(threads)
    refs: list[tuple[str, str]] = []
    if chosen:
        for thread in chosen:
            head = store.repository.ref(head_ref(thread))
            if head is None:
                raise UnknownThreadError(f"no thread {thread!r}")
            refs.append((head_ref(thread), head))
            refs += sorted(store.repository.refs(superseded_prefix(thread)))
        # what explains the threads' rewrites (this repository's records, and those fetched) must verify too
        refs += sorted(store.repository.refs(REWRITES))
        refs += sorted((n, t) for n, t in store.repository.refs(REMOTE_QVC) if n.split("/")[4:5] == ["rewrites"])
    else:
        refs = sorted(store.repository.refs("refs/"))
    report = VerifyReport(refs=len(refs))
    seen: set[str] = set()
    objects: set[bytes] = set()
    failed: set[str] = set()
    batch: list[tuple[str, str | None, str]] = []  # commits whose objects hold: their signatures next
    datas: list[bytes] = []

    def fail(name: str, thread: str | None, sha: str, status: str, reason: str) -> None:
        failed.add(sha)
        report.problems.append(Problem(name, thread, _checkpoint_id(store, sha), sha, status, reason))

    def check_signatures() -> None:
        for (where, who, commit), state in zip(batch, _signatures(datas, allowed), strict=True):
            if state.status is SignatureStatus.VERIFIED:
                assert state.principal is not None
                report.signed_by[state.principal] = report.signed_by.get(state.principal, 0) + 1
            else:
                fail(where, who, commit, state.status.value, state.reason)
        batch.clear()
        datas.clear()

    for name, tip in refs:
        thread = store.thread_of_ref(name, tip) if name.startswith(HEADS) else None
        stack = [tip]
        while stack:
            sha = stack.pop()
            if sha in seen:
                continue
            seen.add(sha)
            report.commits += 1
            checked = _check_objects(store, sha, objects)
            parents: Sequence[str] = ()
            if isinstance(checked, str):
                fail(name, thread, sha, "damaged", checked)
            elif checked[0] is None:
                fail(name, thread, sha, "damaged", CHANGED)
                parents = checked[1]
            else:
                batch.append((name, thread, sha))
                datas.append(checked[0])
                parents = checked[1]
            stack.extend(p for p in parents if p not in seen)
            if len(batch) >= BATCH:
                check_signatures()
    check_signatures()
    report.objects = len(objects)
    explained = _recorded(store, seen - failed, report)
    for name, tip in refs:
        if name.startswith(HEADS):
            _check_reflog(store, name, tip, seen, explained, report)
    return report


def _recorded(store: GitCheckpointStore, verified: set[str], report: VerifyReport) -> set[str]:
    """The commits the rewrite records that verified (``verified``) name as moved away from,
    removed or rewritten."""
    names: set[str] = set()
    try:
        for sha, record in store.rewrites():
            if sha not in verified:
                continue  # a record that does not verify explains nothing (it is a problem itself)
            names.update(old for _, old, _ in record.get("moves", ()) if old)
            names.update(entry["sha"] for key in ("removed", "rewritten") for entry in record.get(key, ()))
    except (QvcError, KeyError, TypeError, ValueError) as exc:
        report.problems.append(Problem(REWRITES, None, None, "", "damaged",
                                       f"the rewrite records do not read: {exc}"))
    return names


def _check_reflog(store: GitCheckpointStore, name: str, tip: str, kept: set[str], explained: set[str],
                  report: VerifyReport) -> None:
    """Each movement of thread ref ``name`` must leave its old commit kept (a put, a time travel
    keeping the old line) or named by a rewrite record, and the entries must chain from the
    current head back (an entry edited or removed breaks the chain)."""
    thread = store.thread_of_ref(name, tip)

    def problem(status: str, sha: str, why: str) -> None:
        report.problems.append(Problem(name, thread, _checkpoint_id(store, sha) if sha else None, sha, status, why))

    try:
        entries = store.repository.reflog(name)
    except QvcError as exc:
        problem("reflog", tip, f"the reflog does not read: {exc}")
        return
    expect: str | None = tip
    for i, entry in enumerate(entries):
        if expect is not None and entry.new != expect:
            to = (entry.new or "nothing")[:12]
            problem("reflog", entry.new or expect, f"reflog entry @{{{i}}} moved the ref to {to}, but the ref is at "
                    f"{expect[:12]} after it (the reflog was edited)")
        elif expect is None and entry.new is not None and entry.new not in kept and entry.new not in explained:
            problem("unexplained", entry.new, f"reflog entry @{{{i}}}: the ref was at {entry.new[:12]} before it was "
                    "deleted or replaced, and no rewrite record names that")
        if entry.old is not None and entry.new is not None and entry.old not in kept and entry.old not in explained:
            problem("unexplained", entry.old, f"reflog entry @{{{i}}} ({entry.message}) moved the ref from "
                    f"{entry.old[:12]} to {entry.new[:12]}, and {entry.old[:12]} is on no line and in no rewrite "
                    "record (checkpoints left history unrecorded)")
        expect = entry.old


CHANGED = "its bytes do not hash to its id (the object was changed in place)"
#: how many commits have their signatures checked at a time, in :data:`WORKERS` threads (the
#: Ed25519 checks, most of the work, run outside the GIL; the walk reading objects does not)
BATCH = 4096
WORKERS = min(4, os.cpu_count() or 1)


def _signatures(commits: list[bytes], allowed: list) -> list[SignatureState]:
    """:func:`~qvc.plumbing.signing.check_commit` of each commit, in order, in :data:`WORKERS` threads."""
    if WORKERS == 1 or len(commits) < 64:
        return [check_commit(data, allowed) for data in commits]
    from concurrent.futures import ThreadPoolExecutor  # deferred: it imports logging

    size = -(-len(commits) // WORKERS)
    parts = [commits[i:i + size] for i in range(0, len(commits), size)]
    with ThreadPoolExecutor(max_workers=len(parts)) as pool:
        return [state for part in pool.map(lambda part: [check_commit(d, allowed) for d in part], parts)
                for state in part]


def _check_objects(store: GitCheckpointStore, sha: str, objects: set[bytes]
                   ) -> str | tuple[bytes | None, Sequence[str]]:
    """Why commit ``sha`` or an object of its tree does not read or match its id; else ``(its
    bytes, its parents)`` (bytes ``None`` when only the commit itself does not match its id)."""
    raw = bytes.fromhex(sha)
    try:
        data = store.repository.read(raw, "commit")
    except QvcError as exc:
        return str(exc)
    try:
        info = parse_commit(sha, data)
    except CorruptionError as exc:
        return str(exc)
    if _object_id("commit", data) != raw:
        return None, info.parents
    damage = _check_tree(store, info.tree, objects)
    return damage if damage is not None else (data, info.parents)


def _check_tree(store: GitCheckpointStore, tree: bytes, objects: set[bytes]) -> str | None:
    """Why the tree ``tree`` (raw id) or an object in it does not match its id, ``None`` if all do.
    Objects checked before (``objects``) are not read again."""
    stack = [(tree, "tree")]
    while stack:
        raw, kind = stack.pop()
        if raw in objects:
            continue
        try:
            data = store.repository.read(raw, kind)
        except CorruptionError as exc:
            return str(exc)
        if _object_id(kind, data) != raw:
            return f"{kind} {raw.hex()[:12]}: {CHANGED}"
        objects.add(raw)
        if kind == "tree":
            stack += [(oid, "tree" if mode == MODE_TREE else "blob") for mode, oid in parse_tree(data, raw).values()]
    return None


def _object_id(kind: str, data: bytes) -> bytes:
    return hashlib.sha1(b"%s %d\x00" % (kind.encode(), len(data)) + data).digest()


def _checkpoint_id(store: GitCheckpointStore, sha: str) -> str | None:
    try:
        return store.commit_info(sha).checkpoint_id
    except QvcError:
        return None


def unverified(store: GitCheckpointStore, shas: Iterable[str]) -> list[str]:
    """One line per commit of ``shas`` whose bytes do not match its id or whose signature does
    not verify against the allowed signers at its time (``[]``: all verify): what a fetch into a
    repository that requires signatures checks before it moves a ref."""
    allowed = Signers(store.path).entries()
    problems, batch = [], []
    objects: set[bytes] = set()  # trees and blobs checked once, however many commits share them
    for sha in shas:
        checked = _check_objects(store, sha, objects)
        if isinstance(checked, str):
            problems.append(f"commit {sha[:12]}: damaged: {checked}")
        elif checked[0] is None:
            problems.append(f"commit {sha[:12]}: damaged: {CHANGED}")
        else:
            batch.append((sha, checked[0]))
    for (sha, _), state in zip(batch, _signatures([data for _, data in batch], allowed), strict=True):
        if not state.verified:
            problems.append(f"commit {sha[:12]}: {state}")
    return problems

