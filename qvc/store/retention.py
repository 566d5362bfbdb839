"""Retention: what a repository keeps of each thread, on a policy, and how the rest goes.

A :class:`Policy` keeps what a thread can resume from and removes the rest:

* ``keep_last`` N: the newest N checkpoints of the thread's line (its head and the head's first
  parents, as far as they are the thread's own: a fork's source is its source's to keep);
* ``max_age``: no checkpoint older than this (by its commit time);
* ``keep_first``: the thread's first checkpoint stays too;
* ``thread_ttl``: a thread idle longer than this goes whole (idle: no checkpoint, reset or other
  move of its head since);
* ``abandoned_after``: superseded lines (what time travel left behind) whose newest checkpoint is
  older than this go, and so do threads forked from another that have been idle that long.

Whatever the policy, a thread's head stays, and so does every checkpoint a tag names.

**How a line is cut.** The kept checkpoints are copied with the removed ones left out of their
ancestry: the oldest kept becomes a root commit, so git itself no longer reaches what was
removed and ``git fsck`` stays clean. Every kept checkpoint keeps its id, tree and state (the
copies differ only in their parents); the new root's header says it has no parent and records the
state versions it had, so ``state_versions`` do not change, and its message gets a
``Retention-Cut`` trailer (:func:`qvc.store.format.cut_note`) saying how many earlier checkpoints
went, when and by which policy. Commit SHAs change, as in every rewrite; ids do not, and that is
what every integration resumes from. Pending writes follow their checkpoints (keyed by id, or
moved to the copy's SHA), tags follow the checkpoints they name, and the thread's keyed writes ref
loses its history. Why copies and not git's grafts or shallow files: git's own repack keeps
what a graft hides, and plain git readers and every remote understand a root commit.

**Beside writers.** :class:`Retention` plans outside any transaction, then applies a batch of
threads in one transaction that first checks every planned thread's refs are as planned (a
compare-and-swap): a put that landed meanwhile fails the check, the batch is planned again, so
an acknowledged checkpoint is never removed without a policy asking for it. Each batch commits
whole or not at all: killed midway, every thread is as before or as after, and the next run
does the rest. Every batch is a rewrite of the record (:class:`~qvc.store.rewrite.RewriteLog`),
signed when the store signs.
"""

from __future__ import annotations

import fnmatch
import math
import os
import re
import time
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from qvc.errors import CheckpointConflictError, CorruptionError, InvalidInputError
from qvc.plumbing.objects import MODE_TREE
from qvc.store.format import CUT
from qvc.store.history import History
from qvc.store.refnames import TAGS, head_ref, superseded_prefix, writes_ref
from qvc.store.writes import key_path, keyed_prefix, keyed_ref, thread_writes_ref

if TYPE_CHECKING:
    from qvc.plumbing.repository import Repository, Transaction
    from qvc.store.rewrite import Rewriter
    from qvc.store.writes import PendingWrites

#: The configuration section of retention settings: ``retention.<key>`` for every thread,
#: ``retention.<pattern>.<key>`` for threads whose id matches the shell pattern.
SECTION = "retention"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_AGE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([smhdw])\s*$")
_NONE = ("all", "never", "none", "off")
#: Threads whose refs a batch may move at most (several writers wait for one transaction).
BATCH_THREADS = 100
#: Commits a batch may copy at most.
BATCH_COPIES = 4000


def parse_age(text: str, what: str = "age") -> float:
    """Seconds in an age such as ``30d``, ``12h``, ``90m``, ``2w``, ``45s``. Raises
    :class:`InvalidInputError` for anything else."""
    found = _AGE.match(str(text))
    if not found:
        raise InvalidInputError(f"{what}: {text!r} is no age (a number and one of s, m, h, d, w: 30d, 12h)")
    return float(found.group(1)) * _UNITS[found.group(2)]


def format_age(seconds: float) -> str:
    """``30d``, ``12h``, ``90m``, ``45s``: the largest unit that divides ``seconds`` (else one decimal of days)."""
    for unit, size in (("w", 7 * 86400), ("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds / 86400:.1f}d" if seconds >= 86400 else f"{seconds:.0f}s"


@dataclass(frozen=True)
class Policy:
    """What to keep of each thread (see the module's docstring); ``None`` sets no limit."""

    keep_last: int | None = None
    max_age: float | None = None
    thread_ttl: float | None = None
    abandoned_after: float | None = None
    keep_first: bool = False

    def __post_init__(self) -> None:
        if self.keep_last is not None and (not isinstance(self.keep_last, int) or isinstance(self.keep_last, bool)
                                           or self.keep_last < 1):
            raise InvalidInputError(f"keep_last must be a whole number of at least 1, not {self.keep_last!r}")
        for name in ("max_age", "thread_ttl", "abandoned_after"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)
                                      or not value > 0 or math.isinf(value)):
                raise InvalidInputError(f"{name} must be a positive number of seconds, not {value!r}")

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) not in (None, False) for f in fields(self))

    def describe(self) -> str:
        """``keep-last 20, max-age 30d``: the limits set, as the command line spells them."""
        parts = [f"keep-last {self.keep_last}"] if self.keep_last is not None else []
        parts += [f"{name} {format_age(value)}" for name, value in (
            ("max-age", self.max_age), ("thread-ttl", self.thread_ttl), ("abandoned-after", self.abandoned_after))
            if value is not None]
        return ", ".join(parts + (["keep-first"] if self.keep_first else [])) or "no limit"


#: ``retention.<key>`` -> (the Policy field, its parser); the keys as git's config lower-cases them.
_SETTINGS = {
    "keeplast": ("keep_last", lambda v: _count(v)),
    "maxage": ("max_age", lambda v: parse_age(v, "retention.maxAge")),
    "threadttl": ("thread_ttl", lambda v: parse_age(v, "retention.threadTtl")),
    "abandonedafter": ("abandoned_after", lambda v: parse_age(v, "retention.abandonedAfter")),
    "keepfirst": ("keep_first", lambda v: _boolean(v)),
}


def _count(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise InvalidInputError(f"retention.keepLast: {value!r} is no count (a whole number of at least 1, or all)")
    return n


def _boolean(value: str) -> bool:
    text = value.strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0", ""):
        return False
    raise InvalidInputError(f"retention.keepFirst takes true or false, not {value!r}")


def setting(name: str, value: str) -> tuple[str, str, Any]:
    """Parse the configuration setting ``retention[.<pattern>].<key>`` = ``value``: ``(pattern, Policy
    field, value)``, the pattern ``""`` for every thread and the value ``None`` for ``all`` /
    ``never`` (no limit: a pattern's way to exempt threads). Raises :class:`InvalidInputError`."""
    section, _, rest = name.partition(".")
    pattern, _, key = rest.rpartition(".")
    if section.lower() != SECTION or key.lower() not in _SETTINGS:
        known = ", ".join(("keepLast", "maxAge", "threadTtl", "abandonedAfter", "keepFirst"))
        raise InvalidInputError(f"{name}: no retention setting (retention[.<thread pattern>].<key>, "
                                f"key one of {known})")
    attr, parse = _SETTINGS[key.lower()]
    if attr != "keep_first" and value.strip().lower() in _NONE:
        return pattern, attr, None
    return pattern, attr, parse(value)


class Policies:
    """A repository's policy: settings for every thread, and settings for the threads whose id
    matches a pattern (``fnmatch``; where several match, the longer pattern's settings win).
    Settings given for one call (:meth:`with_call`) win over both."""

    def __init__(self, default: Mapping[str, Any] | None = None,
                 patterns: Sequence[tuple[str, Mapping[str, Any]]] = (), call: Mapping[str, Any] | None = None):
        self._default = dict(default or {})
        self._patterns = sorted(((p, dict(s)) for p, s in patterns), key=lambda ps: len(ps[0]))
        self._call = dict(call or {})

    @classmethod
    def from_config(cls, config: Mapping[str, str]) -> Policies:
        """The policy a repository's configuration sets (``{name: value}``, as
        :meth:`~qvc.store.git_store.GitCheckpointStore.config` gives it). Raises
        :class:`InvalidInputError` for a retention setting that does not parse."""
        default: dict[str, Any] = {}
        patterns: dict[str, dict[str, Any]] = {}
        for name, value in config.items():
            if name.lower().startswith(SECTION + "."):
                pattern, attr, parsed = setting(name, value)
                (patterns.setdefault(pattern, {}) if pattern else default)[attr] = parsed
        return cls(default, list(patterns.items()))

    def with_call(self, policy: Policy | None) -> Policies:
        """These settings, with those ``policy`` sets winning over every configured one."""
        if policy is None:
            return self
        given = {f.name: getattr(policy, f.name) for f in fields(policy)
                 if getattr(policy, f.name) not in (None, False)}
        return Policies(self._default, self._patterns, {**self._call, **given})

    def for_thread(self, thread: str) -> Policy:
        """The policy of ``thread``."""
        merged = dict(self._default)
        for pattern, settings in self._patterns:
            if fnmatch.fnmatchcase(thread, pattern):
                merged.update(settings)
        merged.update(self._call)
        return Policy(**merged)

    def __bool__(self) -> bool:
        return any(v not in (None, False) for s in [self._default, self._call, *(s for _, s in self._patterns)]
                   for v in s.values())


@dataclass
class ThreadPlan:
    """What a policy does to one thread, planned from its refs as they were read."""

    thread: str
    head: str
    superseded: list[tuple[str, str]]
    policy: Policy
    delete: str | None = None  # why the whole thread goes
    drop: set[str] = field(default_factory=set)  # commits left out of its lines
    lines: list[tuple[str, str]] = field(default_factory=list)  # superseded lines that go whole
    gone: set[str] = field(default_factory=set)  # its own checkpoint commits that no ref of it reaches after
    keeps: set[str] = field(default_factory=set)  # its own checkpoint commits that its refs still reach after
    kept: int = 0  # checkpoints left on its head's line
    cut: int = 0  # checkpoints removed below the oldest kept one of the head's line
    bytes: int | None = None  # what the removal frees, estimated (dry runs)

    @property
    def changes(self) -> bool:
        return bool(self.delete or self.drop or self.lines)


@dataclass
class RetentionReport:
    """What :meth:`~qvc.store.git_store.GitCheckpointStore.retain` did (or, in a dry run, would do)."""

    dry_run: bool
    threads: list[ThreadPlan] = field(default_factory=list)  # the threads it changes
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (thread, why it was left as it was)
    examined: int = 0
    bytes_before: int | None = None  # the history's files (git's objects, reflogs), before and after
    bytes_after: int | None = None
    total_before: int | None = None  # the whole repository's files, before and after
    total_after: int | None = None
    predicted: int | None = None  # bytes of the history's files a dry run predicts the run frees
    seconds: float = 0.0

    @property
    def removed(self) -> int:
        """Checkpoints removed."""
        return sum(len(p.gone) for p in self.threads)

    @property
    def deleted(self) -> list[str]:
        """Threads deleted whole."""
        return [p.thread for p in self.threads if p.delete]

    def as_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run, "examined": self.examined, "removed": self.removed,
            "threads": [{"thread": p.thread, "policy": p.policy.describe(), "deleted": p.delete,
                         "removed": len(p.gone), "kept": p.kept, "lines_dropped": len(p.lines), "bytes": p.bytes}
                        for p in self.threads],
            "skipped": [{"thread": t, "why": why} for t, why in self.skipped],
            "bytes_before": self.bytes_before, "bytes_after": self.bytes_after, "predicted": self.predicted,
            "total_before": self.total_before, "total_after": self.total_after,
            "seconds": round(self.seconds, 3),
        }


class _Moved(Exception):
    """Planned threads whose refs are not as planned any more (a writer moved them): plan them again."""

    def __init__(self, threads: set[str]):
        super().__init__(", ".join(sorted(threads)))
        self.threads = threads


def _own(history: History, thread: str, tips: Iterable[str]) -> set[str]:
    """The thread's own checkpoint commits reachable from ``tips`` (every parent)."""
    out: set[str] = set()
    stack = list(tips)
    while stack:
        sha = stack.pop()
        if sha in out:
            continue
        info = history.commit(sha)
        if info.thread_id != thread:
            continue
        out.add(sha)
        stack.extend(info.parents)
    return out


def _ancestors(history: History, sha: str) -> set[str]:
    out: set[str] = set()
    stack = [sha]
    while stack:
        current = stack.pop()
        if current not in out:
            out.add(current)
            stack.extend(history.commit(current).parents)
    return out


def plan_thread(history: History, thread: str, head: str, superseded: Sequence[tuple[str, str]], policy: Policy, *,
                now: float, active: float, tagged: set[str]) -> ThreadPlan:
    """Plan ``policy`` for one thread whose refs read ``head`` and ``superseded`` (reads only).
    ``active``: when its head last moved; ``tagged``: the commits tags name. Raises
    :class:`CorruptionError` for a line that does not read."""
    plan = ThreadPlan(thread, head, list(superseded), policy)
    line, source = [], None
    for info in history.first_parents(head):
        if info.thread_id != thread:
            source = info.hex
            break
        line.append(info)
    idle = now - active
    if policy.thread_ttl is not None and idle > policy.thread_ttl:
        plan.delete = f"idle for {format_age(idle)} (thread-ttl {format_age(policy.thread_ttl)})"
    elif policy.abandoned_after is not None and source is not None and idle > policy.abandoned_after:
        plan.delete = f"a fork idle for {format_age(idle)} (abandoned-after {format_age(policy.abandoned_after)})"
    if plan.delete:
        plan.gone = _own(history, thread, [head, *(tip for _, tip in superseded)])
        return plan
    keep = set()
    for i, info in enumerate(line):
        within = policy.keep_last is None or i < policy.keep_last
        young = policy.max_age is None or now - info.time <= policy.max_age
        first = policy.keep_first and i == len(line) - 1
        if i == 0 or (within and young) or first or info.hex in tagged:
            keep.add(info.hex)
    plan.kept = len(keep)
    plan.drop = {info.hex for info in line if info.hex not in keep}
    if plan.drop:
        kept_oldest = max(i for i, info in enumerate(line) if info.hex in keep)
        plan.cut = len(line) - 1 - kept_oldest
        if line[-1].hex in plan.drop and source is not None:
            plan.drop |= _ancestors(history, source)  # left out of this line; its source keeps them
    if policy.abandoned_after is not None:
        plan.lines = [(name, tip) for name, tip in superseded
                      if now - history.commit(tip).time > policy.abandoned_after]
    if plan.changes:
        before = _own(history, thread, [head, *(tip for _, tip in superseded)])
        after = _own(history, thread, [head, *(tip for ref, tip in superseded if (ref, tip) not in plan.lines)])
        plan.keeps = after - plan.drop
        plan.gone = before - plan.keeps
    return plan


class Retention:
    """Plans and applies a repository's policy (the store's :meth:`retain`), through the store's
    rewriter and pending writes, in the store's transactions."""

    def __init__(self, repo: Repository, history: History, rewriter: Rewriter, writes: PendingWrites):
        self._repo = repo
        self._history = history
        self._rewriter = rewriter
        self._writes = writes

    def plan(self, policies: Policies, threads: Sequence[tuple[str, str]], now: float,
             report: RetentionReport) -> list[ThreadPlan]:
        """Plans of the ``(thread, head)`` given that change something; threads whose line does not
        read go to ``report.skipped``."""
        tagged = {tip for _, tip in self._repo.refs(TAGS)}
        plans = []
        for thread, head in threads:
            policy = policies.for_thread(thread)
            if not policy:
                continue
            superseded = sorted(self._repo.refs(superseded_prefix(thread)))
            log = self._repo.reflog(head_ref(thread))
            active = max([self._history.commit(head).time] + [e.time for e in log[:1]])
            try:
                plan = plan_thread(self._history, thread, head, superseded, policy, now=now, active=active,
                                   tagged=tagged)
            except CorruptionError as exc:
                report.skipped.append((thread, f"left as it is: {exc}"))
                continue
            if plan.changes:
                plans.append(plan)
        return plans

    def apply(self, plans: list[ThreadPlan], policies: Policies, now: float, report: RetentionReport) -> None:
        """Apply ``plans`` in batches, each one transaction that first checks its threads did not
        move; the threads a batch finds moved are planned again and the batch retried (three
        times at most; then the threads still moving are left as they are, in ``report.skipped``,
        and the rest go ahead)."""
        pending = list(plans)
        while pending:
            batch, copies = [], 0
            while pending and len(batch) < BATCH_THREADS and (not batch or copies < BATCH_COPIES):
                batch.append(pending.pop(0))
                copies += batch[-1].kept
            attempt = 0
            while batch:
                try:
                    self._apply_batch(batch, now)
                    report.threads += batch
                    break
                except (_Moved, CheckpointConflictError) as exc:
                    moved = exc.threads if isinstance(exc, _Moved) else {p.thread for p in batch}
                    stale = [p for p in batch if p.thread in moved]
                    batch = [p for p in batch if p.thread not in moved]
                    attempt += 1
                    if attempt > 3:  # a thread that keeps moving: the others go ahead without it
                        report.skipped += [(p.thread, "moved by a writer while retention ran; left as it is")
                                           for p in stale]
                        continue
                    heads = [(p.thread, h) for p in stale if (h := self._repo.ref(head_ref(p.thread))) is not None]
                    batch += self.plan(policies, heads, now, report)

    def _apply_batch(self, batch: list[ThreadPlan], now: float) -> None:
        policies = sorted({p.policy.describe() for p in batch})
        with self._repo.transaction() as tx:
            moved = {plan.thread for plan in batch if tx.ref(head_ref(plan.thread)) != plan.head
                     or sorted(tx.refs(superseded_prefix(plan.thread))) != plan.superseded}
            if moved:
                raise _Moved(moved)
            tx.rewrite_history(f"retention ({'; '.join(policies)}): {len(batch)} thread(s)")
            tags = tx.refs(TAGS)  # read once a batch: the tags that name a copied checkpoint follow it
            for plan in batch:
                if plan.delete:
                    own, writes = self._rewriter.thread_refs(tx, plan.thread)
                    for name, tip in own + list(writes.items()):
                        tx.move_ref(name, tip, None)
                else:
                    self._cut(tx, plan, now, tags)

    def _cut(self, tx: Transaction, plan: ThreadPlan, now: float, tags: list[tuple[str, str]]) -> None:
        thread = plan.thread
        for name, tip in plan.lines:
            tx.move_ref(name, tip, None)
        mapped: dict[str, list[str]] = {}
        if plan.drop:
            stamp = time.strftime("%Y-%m-%d", time.gmtime(now))
            note = (f"{CUT}: {plan.cut} earlier checkpoint(s) removed {stamp} ({plan.policy.describe()})"
                    if plan.cut else f"{CUT}: earlier checkpoints removed {stamp} ({plan.policy.describe()})")

            def cut(sha: str, parents: list[str], copied: list[str]) -> tuple[Mapping[str, Any], str | None]:
                # its parent went: its header names the new one (none: the first of its line) and
                # records the state versions it had, so they stay as they were
                parent_id = self._history.commit(copied[0]).checkpoint_id if copied else None
                versions = [parents[0] if parents else None, self._history.counts(sha)[0]]
                return {"parent_id": parent_id, "versions": versions}, None if parents else note

            surviving = [(n, t) for n, t in plan.superseded if (n, t) not in plan.lines]
            self._rewriter.settle(tx, thread, plan.head, surviving, plan.drop, cut=cut, mapped=mapped,
                                  keep=self._history.commit(plan.head).checkpoint_id)
        copies = {old: new[0] for old, new in mapped.items()
                  if new != [old] and len(new) == 1 and old not in plan.drop}
        for old, new in copies.items():  # pending writes and tags follow the copies
            wtip = tx.ref(writes_ref(old))
            if wtip is not None:
                tx.move_ref(writes_ref(new), None, wtip)
                tx.move_ref(writes_ref(old), wtip, None)
        for name, tip in tags:
            if tip in copies:
                tx.move_ref(name, tip, copies[tip], "retention: the checkpoint's copy")
        for sha in plan.gone:
            wtip = tx.ref(writes_ref(sha))
            if wtip is not None:
                tx.move_ref(writes_ref(sha), wtip, None)
        ids = {self._history.commit(sha).checkpoint_id for sha in plan.gone}
        self._writes.drop_keyed(tx, thread_writes_ref(thread), {key_path(c) for c in ids},
                                "retention: writes of removed checkpoints\n", squash=True)
        legacy = {keyed_ref(thread, c) for c in ids}
        for ref, tip in tx.refs(keyed_prefix(thread)):
            if ref in legacy:  # written before the thread's one writes ref
                tx.move_ref(ref, tip, None)

    def estimate(self, plans: list[ThreadPlan], report: RetentionReport) -> None:
        """Predict, per plan and in all, the bytes the run frees once it reclaims (a purge, as
        ``qvc gc --prune``): the objects no ref reaches after it (their size in git's files; the
        copies of kept checkpoints take the place of what they copy) and every reflog (a purge
        erases them). A plan's own figure counts its removed checkpoints' objects that nothing
        else keeps; the total also counts what was deleted before and the history of pending writes."""
        from qvc.plumbing.maintenance import disk_usage, history_usage, object_sizes, reachable  # deferred

        sizes = object_sizes(self._repo)
        dropped: set[str] = set()  # refs the run deletes or replaces by the kept commits below
        flattened: set[str] = set()  # refs whose history goes (their tip's tree stays)
        tips: list[str] = []
        copied: set[str] = set()
        for p in plans:
            dropped.update([head_ref(p.thread), *(name for name, _ in p.superseded)])
            dropped.update(writes_ref(sha) for sha in p.gone)
            dropped.update(keyed_ref(p.thread, self._history.commit(sha).checkpoint_id) for sha in p.gone)
            if p.delete:
                dropped.update(ref for ref, _ in self._repo.refs(keyed_prefix(p.thread)))
                continue
            flattened.add(thread_writes_ref(p.thread))
            for sha in p.keeps:
                info = self._history.commit(sha)
                tips.append(info.tree.hex())
                tips += [q for q in info.parents if q not in p.keeps and q not in p.drop]
            if p.drop:
                copied |= p.keeps
        owned = {sha for p in plans for sha in p.keeps}
        for name, tip in self._repo.refs("refs/"):
            if name in dropped:
                continue
            if name in flattened or (name.startswith(TAGS) and tip in owned):
                tips.append(self._history.commit(tip).tree.hex())
            else:
                tips.append(tip)
        live = reachable(self._repo, tips)
        claimed: set[bytes] = set()

        def claim(raw: bytes) -> int:
            if raw in live or raw in claimed:
                return 0
            claimed.add(raw)
            return sizes.get(raw, 0)

        for p in plans:
            total, trees = 0, []
            for sha in p.gone:
                total += claim(bytes.fromhex(sha))
                trees.append(self._history.commit(sha).tree)
            while trees:
                raw = trees.pop()
                if raw in live or raw in claimed:
                    continue
                total += claim(raw)
                for mode, oid in self._history.tree(raw).values():
                    if mode == MODE_TREE:
                        trees.append(oid)
                    else:
                        total += claim(oid)
            p.bytes = total
        logs = history_usage(self._repo.path) - disk_usage(os.path.join(self._repo.path, "objects"))
        unreachable = sum(n for raw, n in sizes.items() if raw not in live)
        report.predicted = unreachable + logs - sum(sizes.get(bytes.fromhex(sha), 0) for sha in copied)
