"""History as people read it: ``qvc log`` entries, newest first, their selection (ranges,
fields, dates, message patterns), ``--format`` placeholders, and the fork graph.

Entries are read from commits and trees only (a checkpoint's state is not decoded, except its
``status`` field when it has one), so listing stays cheap on long threads. With ``viewed=True``
(``qvc log`` without ``--raw``), the fields a checkpoint changed are named as its viewer shows
them (:class:`ViewedNames`: a run's ``messages``, not its ``log.00000003`` segment): only the
checkpoints that have a viewer are decoded for that, plain states keep the cheap path.
"""

from __future__ import annotations

import heapq
import math
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from qvc.codec import serde
from qvc.errors import OBJECTS_REPAIR, CorruptionError, InvalidInputError, NotFoundError, QvcError
from qvc.lazy import Pattern
from qvc.logs import log as logger
from qvc.plumbing.objects import MODE_BLOB
from qvc.readers.dates import ago
from qvc.store.format import HEADER, cut_note
from qvc.store.refnames import HEADS, SUPERSEDED, decode_name, decode_thread, encode_name
from qvc.store.viewers import view_state, viewer_of

if TYPE_CHECKING:
    from qvc.store.git_store import GitCheckpointStore
    from qvc.store.history import CommitInfo
    from qvc.store.revisions import Names


TAGS = "refs/tags/"  # git's tags: lightweight or annotated, decorated as ``tag: NAME``


@dataclass
class LogEntry:
    """One checkpoint as ``qvc log`` shows it."""

    commit: str
    checkpoint_id: str
    thread: str | None
    step: int | None
    source: str
    time: int
    parents: tuple[str, ...]
    changed: list[str]
    status: str | None = None
    heads: list[str] = field(default_factory=list)  # threads whose head this is
    superseded: bool = False  # only reachable through a line left by time travel
    message: str = ""  # the commit message (subject ``step N · source · ...``, then trailers)
    tags: list[str] = field(default_factory=list)  # tags (``refs/tags/``) naming this commit
    kinds: dict[str, str] = field(default_factory=dict)  # changed field -> "A", "M" or "D" (git's --name-status)
    n: int | None = None  # a run checkpoint's number, its message index (qvc.runs.queries.numbers)
    name: str | None = None  # a run checkpoint's name, ``RUN@n`` as ``qvc show`` takes it
    #: how many stored fields it changed (what its commit message counts, as git shows it) when
    #: that is not ``len(changed)`` (a viewer shows fewer: bookkeeping hidden), else ``None``
    stored: int | None = None

    @property
    def cut(self) -> str | None:
        """What retention removed before this checkpoint, if it made it the first of its line."""
        return cut_note(self.message) if not self.parents else None

    def to_json(self) -> dict[str, Any]:
        """The stable ``--json`` form (documented in docs/cli.md)."""
        return {
            "id": self.checkpoint_id, "commit": self.commit, "thread": self.thread, "step": self.step,
            "n": self.n, "name": self.name,
            "source": self.source, "time": datetime.fromtimestamp(self.time, timezone.utc).isoformat(),
            "timestamp": self.time, "parents": list(self.parents), "changed": self.changed,
            "status": self.status, "heads": self.heads, "tags": self.tags, "superseded": self.superseded,
            "cut": self.cut,
        }


def source_of(info: CommitInfo) -> str:
    """The ``source`` metadata, as recorded in the commit subject (``step N · source · ...``)."""
    parts = info.message.split("\n", 1)[0].split(" · ")
    return " · ".join(parts[1:-1]) if len(parts) >= 3 and parts[0].startswith("step ") else ""


class ViewedNames:
    """The fields checkpoints changed as their viewers show them (:mod:`qvc.store.viewers`), for
    log entries: :func:`entry` and :func:`log` take one (``viewed=True``). Only a checkpoint that
    has a viewer is decoded (with its parent, as the viewers show both); the viewed states of the
    last few commits are kept, since a line's entries each need their parent's."""

    KEPT = 8

    def __init__(self, store: GitCheckpointStore) -> None:
        self._store = store
        self._states: dict[str, dict] = {}

    def kinds(self, commit: str, parent: str | None) -> dict[str, str] | None:
        """``{field: "A" | "M" | "D"}`` for what checkpoint commit ``commit`` added, changed or
        removed against ``parent`` (``None``: everything added), as its viewer shows both, in the
        order it shows them (removed ones last); ``None`` when it has no viewer (its stored field
        names are the ones people see) or does not read (the caller names the stored fields, and
        ``qvc fsck`` the damage)."""
        try:
            if viewer_of(self._store, commit) is None:
                return None
            new = self._viewed(commit)
            old = self._viewed(parent) if parent is not None else {}
        except CorruptionError:
            return None
        if new is None or old is None:
            return None
        from qvc.readers.statediff import diff_states  # deferred: only a viewer's checkpoints need it

        try:
            found = {d.field: d.status for d in diff_states(old, new)}
        except QvcError:  # a value the diff cannot compare: the stored names
            return None
        kinds = {f: {"added": "A", "changed": "M"}[found[f]] for f in new if f in found}
        kinds.update((f, "D") for f in old if found.get(f) == "removed")
        return kinds

    def _viewed(self, sha: str) -> dict | None:
        """The state of ``sha`` as its viewer shows it; ``None`` when a field is damaged."""
        if sha in self._states:
            return self._states[sha]
        damaged: dict[str, str] = {}
        state = self._store.read(sha, damaged=damaged).checkpoint.state_data
        shown = None if damaged else view_state(self._store, sha, state)
        if len(self._states) >= self.KEPT:
            self._states.pop(next(iter(self._states)))
        self._states[sha] = shown
        return shown


def entry(store: GitCheckpointStore, commit: str, heads: dict[str, list[str]] | None = None,
          superseded: bool = False, tags: dict[str, list[str]] | None = None, *,
          viewed: ViewedNames | None = None) -> LogEntry:
    """The log entry of one checkpoint commit (``heads`` and ``tags``: ``{commit: [names]}``); with
    ``viewed``, the fields it changed as its viewer shows them, when it has one."""
    info = store.commit_info(commit)
    kinds = viewed.kinds(commit, info.parent) if viewed is not None else None
    stored = _stored_kinds(store, commit, info.parent)
    if kinds is None:
        kinds = stored
    return LogEntry(commit, info.checkpoint_id, info.thread_id, info.step, source_of(info), info.time,
                    info.parents, list(kinds), _status(store, info), (heads or {}).get(commit, []), superseded,
                    info.message, (tags or {}).get(commit, []), kinds,
                    stored=len(stored) if len(stored) != len(kinds) else None)


def _stored_kinds(store: GitCheckpointStore, commit: str, parent: str | None) -> dict[str, str]:
    """``{field: "A" | "M" | "D"}`` of the stored fields ``commit`` changed against ``parent``:
    added or changed, then removed (as its commit subject counts them)."""
    mine = store.tree_entries(commit)
    theirs = store.tree_entries(parent) if parent is not None else {}
    # entries compare by (mode, id)
    kinds = {decode_name(n): "M" if n in theirs else "A" for n, e in mine.items()
             if n != HEADER and theirs.get(n) != e}
    kinds.update((decode_name(n), "D") for n in theirs if n != HEADER and n not in mine)
    return kinds


def _status(store: GitCheckpointStore, info: CommitInfo) -> str | None:
    found = store.tree_entries(info.hex).get(encode_name("status"))
    if found is None or found[0] != MODE_BLOB:
        return None
    try:
        value = serde.loads(store.blob(found[1]), "status")
    except CorruptionError:
        return None
    return value if isinstance(value, str) and len(value) <= 40 else None


def head_map(store: GitCheckpointStore) -> dict[str, list[str]]:
    """``{commit: [threads whose head it is]}``."""
    out: dict[str, list[str]] = {}
    for name, tip in store.repository.refs(HEADS):
        if readable(store, name, tip):
            out.setdefault(tip, []).append(store.thread_of_ref(name))
    return out


def readable(store: GitCheckpointStore, name: str, tip: str) -> bool:
    """Whether ref ``name``'s commit ``tip`` reads; if not, a warning naming it is logged (on
    stderr from the CLI) and the ref is skipped, so one damaged thread hides only itself."""
    why = store.damage(tip)
    if why is not None:
        what = f"thread {store.thread_of_ref(name)!r}" if name.startswith(HEADS) else name
        logger.warning("qvc: warning: %s is damaged, skipped: %s; %s", what, why, OBJECTS_REPAIR)
    return why is None


#: The orders a walk of several lines takes (``git log --date-order`` / ``--topo-order``).
ORDERS = ("date", "topo")


def tag_map(store: GitCheckpointStore) -> dict[str, list[str]]:
    """``{commit: [tag names]}`` of the tags under ``refs/tags/`` (an annotated tag is peeled
    to its commit; a tag naming anything else is left out)."""
    out: dict[str, list[str]] = {}
    for name, target in store.repository.refs(TAGS):
        commit = _peeled(store, target)
        if commit is not None:
            out.setdefault(commit, []).append(name[len(TAGS):])
    return out


def _peeled(store: GitCheckpointStore, sha: str) -> str | None:
    for _ in range(8):  # a tag of a tag of ...: git peels them all; a short bound against cycles
        try:
            data = store.repository.read(bytes.fromhex(sha))
        except (CorruptionError, ValueError):
            return None
        if not data.startswith(b"object "):  # not a tag object: the commit itself (or nothing shown)
            return sha
        sha = data.split(b"\n", 1)[0][len(b"object "):].decode("ascii", "replace")
    return None


def merge_bases(store: GitCheckpointStore, a: str, b: str) -> list[str]:
    """The best common ancestors of commits ``a`` and ``b`` (``git merge-base --all``): the
    common ancestors no other common ancestor descends from. ``A...B`` is ``A B`` without them."""
    common = _reachable_from(store, {a}) & _reachable_from(store, {b})
    below = {p for c in common for p in store.commit_info(c).parents}
    return sorted(common - _reachable_from(store, below & common))


def revision_set(store: GitCheckpointStore, texts: Sequence[str], *,
                 names: Names | None = None) -> tuple[list[str], list[str]]:
    """``(include, exclude)`` commits for revision arguments as ``git log`` takes them: ``A``,
    ``^A`` (leave out what A reaches), ``A..B`` (``^A B``; a missing side is ``HEAD``) and
    ``A...B`` (what either reaches and not both: ``A B`` without their merge bases). Each text is
    tried whole as a revision first (a thread id may hold ``..`` or start with ``^``); ``names``
    resolves other names (``RUN@N``) as :func:`qvc.store.revisions.parse_revision` does.
    Raises what :func:`~qvc.store.revisions.parse_revision` raises."""
    from qvc.store.revisions import parse_range, parse_revision  # deferred: start-up speed

    include: list[str] = []
    exclude: list[str] = []
    for text in texts:
        try:
            include.append(parse_revision(store, text, names=names).commit)
            continue
        except NotFoundError:
            if not text.startswith("^") and ".." not in text:
                raise
        if text.startswith("^"):
            exclude.append(parse_revision(store, text[1:], names=names).commit)
        elif "..." in text:
            a, _, b = text.partition("...")
            left = parse_revision(store, a or "HEAD", names=names).commit
            right = parse_revision(store, b or "HEAD", names=names).commit
            include += [left, right]
            exclude += merge_bases(store, left, right)
        else:
            excluded, included = parse_range(store, text, names=names)
            include.append(included.commit)
            if excluded is not None:
                exclude.append(excluded.commit)
    return include, exclude


def log(store: GitCheckpointStore, start: str | Sequence[str] | None = None, *, limit: int | None = None,
        all: bool = False, exclude: str | Sequence[str] | None = None, fields: Sequence[str] = (),
        since: float | None = None, until: float | None = None, grep: str | None = None, reverse: bool = False,
        first_parent: bool = False, order: str | None = None,
        where: Callable[[LogEntry], bool] | None = None, viewed: bool = False) -> Iterator[LogEntry]:
    """Checkpoints newest first.

    With ``start`` (a commit), its first-parent line, crossing into the source thread at a
    fork (``git log --first-parent``). With several commits (``git log A B``), or with ``all``
    (every checkpoint reachable from any thread or superseded line, and from ``start``), what
    they reach, in ``order``: ``"date"`` (the default: newest first by commit time, never a
    parent before a child, ``git log --date-order``) or ``"topo"`` (``git log --topo-order``:
    a child before its parents and each line's checkpoints together, as ``--graph`` draws
    them); ``first_parent`` follows first parents only. With ``all``, those reachable only
    through a superseded line are marked ``superseded``.

    The selection, as ``git log`` makes it: ``exclude`` (a commit or several; ``git log A..B``
    is ``start=B, exclude=A``) leaves out every checkpoint they reach; ``fields`` keeps the
    checkpoints that added, changed or removed one of those fields; ``since`` / ``until`` (Unix
    times, inclusive) bound the commit time; ``grep`` (a regular expression) must match the
    commit message (``^`` and ``$`` match at each line); ``where`` (a predicate, such as
    :func:`qvc.readers.pickaxe.pickaxe`'s) must hold. ``limit`` counts what is selected;
    ``reverse`` then gives those oldest first. Raises :class:`InvalidInputError` for a negative
    limit, a bad pattern or an unknown order. ``git rev-list`` orders several lines; where git
    cannot read the repository, a walk of everything here does (and raises
    :class:`CorruptionError` on what it cannot read).

    ``viewed``: each entry's changed fields (``changed``, ``kinds``, and so what ``fields``
    selects by) are named as its checkpoint's viewer shows them (:class:`ViewedNames`), for the
    checkpoints that have one.
    """
    if limit is not None and limit < 0:
        raise InvalidInputError(f"limit must be a non-negative integer, not {limit!r}")
    if order is not None and order not in ORDERS:
        raise InvalidInputError(f"unknown order {order!r} (one of: {', '.join(ORDERS)})")
    try:
        pattern = re.compile(grep, re.MULTILINE) if grep is not None else None  # per line, as git greps
    except re.error as exc:
        raise InvalidInputError(f"bad --grep pattern {grep!r}: {exc}") from None
    starts = [start] if isinstance(start, str) else list(start or ())
    excludes = [exclude] if isinstance(exclude, str) else list(exclude or ())
    wanted = set(fields)
    names = ViewedNames(store) if viewed else None

    def chosen(e: LogEntry) -> bool:
        return ((not wanted or not wanted.isdisjoint(e.changed))
                and (since is None or e.time >= since) and (until is None or e.time <= until)
                and (pattern is None or pattern.search(e.message) is not None)
                and (where is None or where(e)))

    trivial = not (wanted or since is not None or until is not None or pattern is not None or where is not None)

    def selected() -> Iterator[LogEntry]:
        count = 0
        if not all and len(starts) == 1:
            candidates = _line(store, starts[0], _reachable_from(store, set(excludes)) if excludes else set(),
                               names)
        else:
            candidates = _walk(store, starts, excludes, all, first_parent, order or "date",
                               limit if trivial else None, names)
        for e in candidates:
            if limit is not None and count >= limit:
                return
            if chosen(e):
                count += 1
                yield e

    if reverse:
        yield from reversed(list(selected()))
    else:
        yield from selected()


def _line(store: GitCheckpointStore, start: str, hidden: set[str],
          viewed: ViewedNames | None = None) -> Iterator[LogEntry]:
    """One commit's first-parent line, newest first, up to the first commit in ``hidden``."""
    # Decorate with the heads of the threads this line belongs to and of HEAD's thread
    # (not every ref: listing thousands of threads would cost more than the log itself).
    heads: dict[str, list[str]] = {}
    current = store.current_or_none()  # a garbled HEAD: no decoration of it, the log all the same
    threads = {current.thread if current is not None else None}
    for info in store.first_parents(start):
        if info.thread_id not in threads:
            break
    threads |= {store.commit_info(start).thread_id}
    for thread in sorted(t for t in threads if t is not None):
        try:
            tip = store.head(thread)
        except CorruptionError:  # its ref file holds no ref: no decoration of it
            continue
        if tip is not None:
            heads.setdefault(tip, []).append(thread)
    tags = tag_map(store)
    for info in store.first_parents(start):
        if info.hex in hidden:
            return
        yield entry(store, info.hex, heads, tags=tags, viewed=viewed)


def _walk(store: GitCheckpointStore, starts: list[str], excludes: list[str], all: bool, first_parent: bool,
          order: str, limit: int | None, viewed: ViewedNames | None = None) -> Iterator[LogEntry]:
    """What ``starts`` (and with ``all`` every thread and superseded line) reach and ``excludes``
    do not, in ``order``; ``limit``: how many at most the caller takes (``None``: it filters
    them, so all may be needed)."""
    ordered = _git_order(store, starts, excludes, all, first_parent, order, limit)
    tags = tag_map(store)
    if ordered is not None:
        shown = {commit for commit, _ in ordered}
        names: dict[str, list[str]] = {}
        for name, tip in store.repository.refs(HEADS):  # decode only the heads shown
            if tip in shown:
                names.setdefault(tip, []).append(store.thread_of_ref(name, tip))
        for commit, superseded in ordered:
            yield entry(store, commit, names, superseded=superseded, tags=tags, viewed=viewed)
        return
    heads = head_map(store)
    tips = set(starts)
    live = set(heads)
    if all:  # (git could not walk them: each line whose every commit reads, the others skipped with a warning)
        whole = _whole_lines(store, [(name, tip) for name, tip in store.repository.refs(HEADS) if tip in heads]
                             + [(name, tip) for name, tip in store.repository.refs(SUPERSEDED)
                                if readable(store, name, tip)])
        live &= whole
        tips |= whole
    on_live = _reachable_from(store, live) if all else set()
    hidden = _reachable_from(store, set(excludes), first_parent) if excludes else set()
    everything = _reachable_from(store, tips, first_parent) - hidden
    for commit in _ordered(store, everything, first_parent, order):
        yield entry(store, commit, heads, superseded=all and commit not in on_live, tags=tags, viewed=viewed)


def _ordered(store: GitCheckpointStore, commits: set[str], first_parent: bool, order: str) -> Iterator[str]:
    """``commits`` newest first, never a parent before any of its children: by commit time
    (``--date-order``), or as git's ``--topo-order`` (a stack: each line followed down until
    a commit with children still to show)."""
    def parents(commit: str) -> tuple[str, ...]:
        found = store.commit_info(commit).parents
        return found[:1] if first_parent else found

    children = dict.fromkeys(commits, 0)
    for commit in commits:
        for parent in parents(commit):
            if parent in children:
                children[parent] += 1
    tips = sorted((c for c, n in children.items() if n == 0), key=lambda c: -store.commit_info(c).time)
    if order == "topo":
        stack = tips[::-1]
        while stack:
            commit = stack.pop()
            yield commit
            for parent in parents(commit):
                if parent in children:
                    children[parent] -= 1
                    if children[parent] == 0:
                        stack.append(parent)
        return
    queue = [(-store.commit_info(c).time, c) for c in tips]
    heapq.heapify(queue)
    while queue:
        _, commit = heapq.heappop(queue)
        yield commit
        for parent in parents(commit):
            if parent in children:
                children[parent] -= 1
                if children[parent] == 0:
                    heapq.heappush(queue, (-store.commit_info(parent).time, parent))


def _git_order(store: GitCheckpointStore, starts: list[str], excludes: list[str], all: bool,
               first_parent: bool, order: str, limit: int | None) -> list[tuple[str, bool]] | None:
    """The commits ``git rev-list`` lists for ``starts`` (every thread's and superseded line's
    with ``all``) without what ``excludes`` reach, in ``order`` (the first ``limit``), each with
    whether it is reachable only from superseded lines (with ``all``); ``None`` if git cannot
    read the repository (then the caller's own walk names the damage).

    git walks the history in C (on a 20,000-thread repository it reads every tip in a tenth of
    the time Python takes); the walk is the same one ``qvc log --graph`` draws.
    """
    from qvc.plumbing.launcher import run_git as run

    args = ["rev-list", f"--{order}-order", *(["--first-parent"] if first_parent else [])]
    if all:
        args += ["--branches", f"--glob={SUPERSEDED}*"]
    args += [*starts, *(f"^{c}" for c in excludes)]
    proc = run(store.path, *args, *([f"-n{int(limit)}"] if limit is not None else []), "--")
    if proc.returncode != 0:
        return None
    order_found = proc.stdout.split()
    hidden = _superseded_only(store) if all and order_found else set()
    return [(commit, commit in hidden) for commit in order_found]


def _whole_lines(store: GitCheckpointStore, refs: list[tuple[str, str]]) -> set[str]:
    """The tips of ``refs`` whose every commit reads; each other ref is named in a warning, as
    :func:`readable` names one whose tip does not read, so one damaged line hides only itself."""
    good: set[str] = set()
    out: set[str] = set()
    for name, tip in refs:
        seen: set[str] = set()
        stack = [tip]
        try:
            while stack:
                commit = stack.pop()
                if commit in good or commit in seen:
                    continue
                seen.add(commit)
                stack.extend(store.commit_info(commit).parents)
        except CorruptionError as exc:
            what = f"thread {store.thread_of_ref(name)!r}" if name.startswith(HEADS) else name
            logger.warning("qvc: warning: %s is damaged, skipped: commit %s: %s; %s", what, commit[:12], exc,
                           OBJECTS_REPAIR)
            continue
        good |= seen
        out.add(tip)
    return out


def _reachable_from(store: GitCheckpointStore, tips: set[str], first_parent: bool = False) -> set[str]:
    out: set[str] = set()
    stack = list(tips)
    while stack:
        commit = stack.pop()
        if commit in out:
            continue
        out.add(commit)
        parents = store.commit_info(commit).parents
        stack.extend(parents[:1] if first_parent else parents)
    return out


#: ``--decorate`` values: git's ``short`` (thread and tag names), ``full`` (whole ref names), ``no``.
DECORATE = ("short", "full", "no")


def graph(store: GitCheckpointStore, start: str | Sequence[str] | None = None, *, limit: int | None = None,
          all: bool = False, color: bool = False, exclude: Sequence[str] = (), first_parent: bool = False,
          order: str | None = None, since: float | None = None, until: float | None = None,
          decorate: str = "short", fmt: str | None = None, head_thread: str | None = None,
          head_commit: str | None = None, viewed: bool = False,
          line: Callable[[LogEntry], str] | None = None) -> str:
    """The fork graph drawn by ``git log --graph`` (threads as branch decorations), of what
    ``start`` (a commit or several; with ``all`` every thread and superseded line too) reaches
    and ``exclude`` does not, in ``order`` (default ``"topo"``: git's graph order, each line
    drawn whole), at most ``limit`` checkpoints, between ``since`` and ``until`` (inclusive);
    ``decorate`` is one of :data:`DECORATE`. With ``fmt`` (a ``--format`` as :func:`check_format`
    returns it), each checkpoint is written as :func:`format_entry` writes it (``head_thread``
    and ``head_commit`` for ``%d``), each of its lines beside the graph as git draws it;
    ``viewed``: ``%(changed)`` names the fields as viewers show them (see :func:`log`). Without
    ``fmt``, ``line`` writes each checkpoint's line (``qvc log --graph`` passes the one ``--oneline``
    prints, so both read alike); without either, git's subject, date and the checkpoint id.

    git is better at laying out a graph than anything we would write; it runs with the
    repository's own configuration neutralized (see :mod:`qvc.plumbing.maintenance`).
    """
    from qvc.plumbing.launcher import git

    if order is not None and order not in ORDERS:
        raise InvalidInputError(f"unknown order {order!r} (one of: {', '.join(ORDERS)})")
    if decorate not in DECORATE:
        raise InvalidInputError(f"unknown --decorate value {decorate!r} (one of: {', '.join(DECORATE)})")
    starts = [start] if isinstance(start, str) else list(start or ())
    refs = "%x01%D%x01" if decorate != "no" else ""
    pieces = _lines_of(fmt) if fmt is not None else []
    if fmt is not None:  # git leaves a line per piece beside the graph, the commit marked on the first
        shown = "\x02%H\x02" + "%n" * (len(pieces) - 1)
    elif line is not None:
        shown = "\x02%H\x02"
    else:
        shown = f"%h{refs} %s  %C(dim)%ad · %(trailers:key=Checkpoint-Id,valueonly,separator=%x2C)%Creset"
    args = ["log", "--graph", f"--{order or 'topo'}-order", "--date=relative", f"--format={shown}",
            f"--color={'always' if color else 'never'}", f"--decorate={'full' if decorate == 'full' else 'short'}",
            "--decorate-refs=refs/heads/", "--decorate-refs=HEAD", f"--decorate-refs={TAGS}",
            f"--decorate-refs={SUPERSEDED}"]
    if first_parent:
        args.append("--first-parent")
    if limit is not None:
        args.append(f"-n{int(limit)}")
    if since is not None:
        args.append(f"--max-age={math.ceil(since)}")
    if until is not None:
        args.append(f"--min-age={math.floor(until)}")
    if all:
        args += ["--branches", f"--glob={SUPERSEDED}*"]
    elif not starts:
        return ""
    text = git(store.path, *args, *starts, *(f"^{c}" for c in exclude), "--")
    if fmt is not None:
        def write(e: LogEntry) -> list[str]:
            return [format_entry(e, piece, head_thread=head_thread, head_commit=head_commit, store=store)
                    for piece in pieces]
    elif line is not None:
        def write(e: LogEntry) -> list[str]:
            return [line(e)]
    else:
        return _DECORATION.sub(lambda m: _decorate(m.group(1), color), text)
    return _formatted(store, text, write, all, ViewedNames(store) if viewed else None)


def _lines_of(fmt: str) -> list[str]:
    """``fmt`` cut at its ``%n`` placeholders: one format per line it writes."""
    pieces, begin = [], 0
    for m in _PLACEHOLDER.finditer(fmt):
        if m.group(0) == "%n":
            pieces.append(fmt[begin:m.start()])
            begin = m.end()
    return pieces + [fmt[begin:]]


def _formatted(store: GitCheckpointStore, text: str, write: Callable[[LogEntry], list[str]], all: bool,
               viewed: ViewedNames | None = None) -> str:
    """git's graph ``text`` (a marked commit, then a line per further line it writes) with each
    commit's lines written by ``write``."""
    lines = text.split("\n")
    marked = [_MARKED.search(line) for line in lines]
    commits = {m.group(1) for m in marked if m is not None}
    names: dict[str, list[str]] = {}
    for name, tip in store.repository.refs(HEADS):
        if tip in commits:
            names.setdefault(tip, []).append(store.thread_of_ref(name, tip))
    hidden = _superseded_only(store) if all else set()
    tags = tag_map(store)
    out: list[str] = []
    rest: list[str] = []
    for line, m in zip(lines, marked, strict=True):
        if m is not None:
            e = entry(store, m.group(1), names, superseded=m.group(1) in hidden, tags=tags, viewed=viewed)
            written = write(e)
            out.append(line[:m.start()] + written[0])
            rest = written[1:]
        elif rest:
            out.append(line + rest.pop(0))
        else:
            out.append(line)
    return "\n".join(out)


_MARKED = Pattern("\x02([0-9a-f]{40})\x02")


def _superseded_only(store: GitCheckpointStore) -> set[str]:
    """The commits only superseded lines reach (none when there are none, or git cannot say)."""
    from qvc.plumbing.launcher import run_git as run

    if next(iter(store.repository.refs(SUPERSEDED)), None) is None:
        return set()
    proc = run(store.path, "rev-list", f"--glob={SUPERSEDED}*", "--not", "--branches", "--")
    return set(proc.stdout.split()) if proc.returncode == 0 else set()


_DECORATION = Pattern("\x01([^\x01]*)\x01")


def _decorate(refs: str, color: bool) -> str:
    """git's ref decorations with thread names decoded (``run%2F7`` is thread ``run/7``)."""
    if not refs:
        return ""
    names = []
    for ref in refs.split(", "):
        head, arrow, rest = ref.rpartition(" -> ")
        name = rest if arrow else ref
        if name.startswith(("qvc/superseded/", SUPERSEDED)):
            name = "superseded"
        elif name.startswith(HEADS):
            name = HEADS + (decode_thread(name[len(HEADS):]) or name[len(HEADS):])
        elif name.startswith(("refs/", "tag: ")) or name == "HEAD":
            pass
        else:
            name = decode_thread(name) or name
        names.append(f"{head} -> {name}" if arrow else name)
    text = f" ({', '.join(names)})"
    return f"\x1b[33m{text}\x1b[m" if color else text


# -- decorations and --format --------------------------------------------------------------


def decorations(e: LogEntry, head_thread: str | None, head_commit: str | None, full: bool = False) -> list[str]:
    """The names pointing at an entry, in git's order: ``HEAD -> t`` for the current thread
    ``t`` (``HEAD`` when detached at it), the tags as ``tag: v1``, the other threads whose head
    it is, then ``superseded``; ``full``: whole ref names (``refs/heads/t``, ``tag: refs/tags/v1``)."""
    heads, tags = (HEADS, TAGS) if full else ("", "")
    names = [f"HEAD -> {heads}{t}" for t in e.heads if t == head_thread]
    if head_thread is None and head_commit == e.commit:
        names.append("HEAD")
    names += [f"tag: {tags}{t}" for t in sorted(e.tags, reverse=True)]
    names += [f"{heads}{t}" for t in sorted(e.heads, reverse=True) if t != head_thread]
    if e.superseded:
        names.append("superseded")
    return names


#: The ``--format`` placeholders (docs/cli.md lists them): git's own, and qvc's as ``%(name)``.
PLACEHOLDERS: dict[str, str] = {
    "%H": "commit SHA", "%h": "abbreviated commit SHA (7)", "%P": "parent SHAs", "%p": "abbreviated parent SHAs",
    "%s": "subject (first line of the commit message)", "%b": "body (the rest of the message)",
    "%B": "the raw message", "%at": "time, Unix seconds", "%ai": "time, ISO-like (2026-11-30 14:05:09 +0000)",
    "%aI": "time, strict ISO 8601", "%ad": "time, git's default form", "%ar": "time, relative (3 hours ago)",
    "%d": "decorations, as ` (HEAD -> t, u)`", "%D": "decorations without the parentheses",
    "%n": "newline", "%%": "a literal %", "%xNN": "the byte with hex code NN",
    "%(id)": "checkpoint id",
    "%(shortid)": "checkpoint id, when longer than 16 characters its shortest unique prefix of 12 or more",
    "%(thread)": "thread", "%(step)": "step", "%(source)": "source (put when none)",
    "%(status)": "status field (empty when none)", "%(changed)": "changed fields, comma-separated",
    "%(nchanged)": "how many fields changed", "%(superseded)": "`superseded` when only on a superseded line",
}

_PLACEHOLDER = Pattern(r"%(?:\((\w+)\)|x([0-9a-fA-F]{2})|([ac][tiIdr])|([HhPpsbBdDn%]))")


def check_format(fmt: str) -> str:
    """``fmt`` without git's ``format:`` / ``tformat:`` prefix, checked: every ``%`` must start a
    placeholder of :data:`PLACEHOLDERS`, else :class:`InvalidInputError`."""
    for prefix in ("format:", "tformat:"):
        if fmt.startswith(prefix):
            fmt = fmt[len(prefix):]
    rest = _PLACEHOLDER.sub("", fmt)
    if "%" in rest:
        bad = rest[rest.index("%"):][:12]
        raise InvalidInputError(f"unknown --format placeholder at {bad!r} (see `qvc log --help`)")
    for name in re.findall(r"%\((\w+)\)", fmt):
        if f"%({name})" not in PLACEHOLDERS:
            raise InvalidInputError(f"unknown --format placeholder %({name})")
    return fmt


def short_id(checkpoint_id: str, store: GitCheckpointStore | None = None) -> str:
    """A checkpoint id short enough to read: an id of up to 16 characters whole, a longer one as
    its shortest prefix of 12 or more characters that names it alone in ``store``
    (:meth:`~qvc.store.git_store.GitCheckpointStore.abbreviate`: it reads back), as git abbreviates
    SHAs; without a store, or when its history does not read, the first 12 characters."""
    if len(checkpoint_id) <= 16:
        return checkpoint_id
    if store is not None:
        try:
            return store.abbreviate(checkpoint_id, 12)
        except QvcError:  # a damaged repository: the ids still read, maybe not uniquely
            pass
    return checkpoint_id[:12]


def format_entry(e: LogEntry, fmt: str, *, head_thread: str | None = None, head_commit: str | None = None,
                 now: float | None = None, store: GitCheckpointStore | None = None) -> str:
    """``e`` written with the placeholders of :data:`PLACEHOLDERS` in ``fmt`` replaced
    (``fmt`` as :func:`check_format` returns it); ``now`` is the clock for ``%ar``; ``store``
    abbreviates ``%(shortid)`` to a prefix unique in it (without it: the first 12 characters)."""
    when = datetime.fromtimestamp(e.time).astimezone()
    subject, _, body = e.message.partition("\n")
    names = decorations(e, head_thread, head_commit)

    def value(m: re.Match) -> str:
        name, hexcode, date, letter = m.groups()
        if hexcode is not None:
            return chr(int(hexcode, 16))
        if date is not None:
            return {"t": str(e.time), "i": when.strftime("%Y-%m-%d %H:%M:%S %z"), "I": when.isoformat(),
                    "d": when.strftime("%a %b %-d %H:%M:%S %Y %z"),
                    "r": ago(e.time, time.time() if now is None else now)}[date[1]]
        if letter is not None:
            return {"H": e.commit, "h": e.commit[:7], "P": " ".join(e.parents),
                    "p": " ".join(p[:7] for p in e.parents), "s": subject, "b": body.lstrip("\n"), "B": e.message,
                    "d": f" ({', '.join(names)})" if names else "", "D": ", ".join(names), "n": "\n",
                    "%": "%"}[letter]
        cid = e.checkpoint_id
        return {"id": cid, "shortid": short_id(cid, store), "thread": e.thread or "",
                "step": "" if e.step is None else str(e.step), "source": e.source or "put",
                "status": e.status or "", "changed": ",".join(e.changed), "nchanged": str(len(e.changed)),
                "superseded": "superseded" if e.superseded else ""}[name]

    return _PLACEHOLDER.sub(value, fmt)
