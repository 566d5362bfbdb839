"""History as people read it: ``qvc log`` entries, newest first, and the fork graph.

Entries are read from commits and trees only (a checkpoint's state is not decoded, except its
``status`` field when it has one), so listing stays cheap on long threads.
"""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Iterator

from qvc.errors import CorruptionError, InvalidInputError
from qvc.plumbing.objects import MODE_BLOB
from qvc.store import serde
from qvc.store.format import HEADER
from qvc.store.refnames import HEADS, SUPERSEDED, decode_name, decode_thread, encode_name

if TYPE_CHECKING:
    from qvc.store.git_store import GitCheckpointStore
    from qvc.store.history import CommitInfo


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

    def to_json(self) -> dict[str, Any]:
        """The stable ``--json`` form (documented in docs/cli.md)."""
        return {
            "id": self.checkpoint_id, "commit": self.commit, "thread": self.thread, "step": self.step,
            "source": self.source, "time": datetime.fromtimestamp(self.time, timezone.utc).isoformat(),
            "timestamp": self.time, "parents": list(self.parents), "changed": self.changed,
            "status": self.status, "heads": self.heads, "superseded": self.superseded,
        }


def source_of(info: CommitInfo) -> str:
    """The ``source`` metadata, as recorded in the commit subject (``step N · source · ...``)."""
    parts = info.message.split("\n", 1)[0].split(" · ")
    return " · ".join(parts[1:-1]) if len(parts) >= 3 and parts[0].startswith("step ") else ""


def entry(store: GitCheckpointStore, commit: str, heads: dict[str, list[str]] | None = None,
          superseded: bool = False) -> LogEntry:
    """The log entry of one checkpoint commit."""
    info = store.commit(commit)
    mine = store.tree_entries(commit)
    theirs = store.tree_entries(info.parent) if info.parent is not None else {}
    # added or changed, then removed (as in the commit subject); entries compare by (mode, id)
    changed = [decode_name(n) for n, e in mine.items() if n != HEADER and theirs.get(n) != e]
    changed += [decode_name(n) for n in theirs if n != HEADER and n not in mine]
    return LogEntry(commit, info.checkpoint_id, info.thread_id, info.step, source_of(info), info.time,
                    info.parents, changed, _status(store, info), (heads or {}).get(commit, []), superseded)


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
        out.setdefault(tip, []).append(store.thread_of_ref(name))
    return out


def log(store: GitCheckpointStore, start: str | None = None, *, limit: int | None = None,
        all: bool = False) -> Iterator[LogEntry]:
    """Checkpoints newest first.

    With ``start`` (a commit), its first-parent line, crossing into the source thread at a
    fork (``git log --first-parent``). With ``all``, every checkpoint reachable from any thread
    or superseded line, newest first by commit time (``git log --all --date-order``); those
    reachable only through a superseded line are marked ``superseded``. ``git rev-list`` orders
    them; where git cannot read the repository, a walk of everything here does (and raises
    :class:`CorruptionError` on what it cannot read).
    """
    if limit is not None and limit < 0:
        raise InvalidInputError(f"limit must be a non-negative integer, not {limit!r}")
    count = 0
    if not all:
        if start is None:
            return
        # Decorate with the heads of the threads this line belongs to and of HEAD's thread
        # (not every ref: listing thousands of threads would cost more than the log itself).
        heads: dict[str, list[str]] = {}
        threads = {store.current().thread}
        for info in store.first_parents(start):
            if info.thread_id not in threads:
                break
        threads |= {store.commit(start).thread_id}
        for thread in sorted(t for t in threads if t is not None):
            tip = store.head(thread)
            if tip is not None:
                heads.setdefault(tip, []).append(thread)
        for info in store.first_parents(start):
            if limit is not None and count >= limit:
                return
            count += 1
            yield entry(store, info.hex, heads)
        return
    ordered = _git_order(store, limit)
    if ordered is not None:
        shown = {commit for commit, _ in ordered}
        names: dict[str, list[str]] = {}
        for name, tip in store.repository.refs(HEADS):  # decode only the heads shown
            if tip in shown:
                names.setdefault(tip, []).append(store.thread_of_ref(name, tip))
        for commit, superseded in ordered:
            yield entry(store, commit, names, superseded=superseded)
        return
    heads = head_map(store)
    tips = list(heads) + [tip for _, tip in store.repository.refs(SUPERSEDED)]
    on_live = _reachable_from(store, set(heads))
    everything = _reachable_from(store, set(tips))
    # Newest first, but never a parent before any of its children (git log --date-order).
    children = dict.fromkeys(everything, 0)
    for commit in everything:
        for parent in store.commit(commit).parents:
            if parent in children:
                children[parent] += 1
    queue = [(-store.commit(c).time, c) for c, n in children.items() if n == 0]
    heapq.heapify(queue)
    while queue:
        _, commit = heapq.heappop(queue)
        if limit is not None and count >= limit:
            return
        count += 1
        yield entry(store, commit, heads, superseded=commit not in on_live)
        for parent in store.commit(commit).parents:
            if parent in children:
                children[parent] -= 1
                if children[parent] == 0:
                    heapq.heappush(queue, (-store.commit(parent).time, parent))


def _git_order(store: GitCheckpointStore, limit: int | None) -> list[tuple[str, bool]] | None:
    """Every thread's and superseded line's commits in ``git log --date-order`` order (the first
    ``limit``), each with whether it is reachable only from superseded lines; ``None`` if git
    cannot read the repository (then the caller's own walk names the damage).

    git walks the history in C (on a 20,000-thread repository it reads every tip in a tenth of
    the time Python takes); the walk is the same one ``qvc log --graph`` draws.
    """
    from qvc.plumbing.maintenance import run

    args = ["rev-list", "--date-order", "--branches", f"--glob={SUPERSEDED}*"]
    proc = run(store.path, *args, *([f"-n{int(limit)}"] if limit is not None else []), "--")
    if proc.returncode != 0:
        return None
    order = proc.stdout.split()
    hidden: set[str] = set()
    if order and next(iter(store.repository.refs(SUPERSEDED)), None) is not None:
        proc = run(store.path, "rev-list", f"--glob={SUPERSEDED}*", "--not", "--branches", "--")
        if proc.returncode != 0:
            return None
        hidden = set(proc.stdout.split())
    return [(commit, commit in hidden) for commit in order]


def _reachable_from(store: GitCheckpointStore, tips: set[str]) -> set[str]:
    out: set[str] = set()
    stack = list(tips)
    while stack:
        commit = stack.pop()
        if commit in out:
            continue
        out.add(commit)
        stack.extend(store.commit(commit).parents)
    return out


def graph(store: GitCheckpointStore, start: str | None = None, *, limit: int | None = None, all: bool = False,
          color: bool = False) -> str:
    """The fork graph drawn by ``git log --graph`` (threads as branch decorations).

    git is better at laying out a graph than anything we would write; it runs with the
    repository's own configuration neutralized (see :mod:`qvc.plumbing.maintenance`).
    """
    from qvc.plumbing.maintenance import git

    fmt = "%h%x01%D%x01 %s  %C(dim)%ad · %(trailers:key=Checkpoint-Id,valueonly,separator=%x2C)%Creset"
    args = ["log", "--graph", "--date-order", "--date=relative", f"--format={fmt}",
            f"--color={'always' if color else 'never'}", "--decorate-refs=refs/heads/", "--decorate-refs=HEAD",
            f"--decorate-refs={SUPERSEDED}"]
    if limit is not None:
        args.append(f"-n{int(limit)}")
    if all:
        args += ["--branches", f"--glob={SUPERSEDED}*"]
    elif start is not None:
        args.append(start)
    else:
        return ""
    text = git(store.path, *args, "--")
    return _DECORATION.sub(lambda m: _decorate(m.group(1), color), text)


_DECORATION = re.compile("\x01([^\x01]*)\x01")


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
        elif name.startswith("refs/") or name == "HEAD":
            pass
        else:
            name = decode_thread(name) or name
        names.append(f"{head} -> {name}" if arrow else name)
    text = f" ({', '.join(names)})"
    return f"\x1b[33m{text}\x1b[m" if color else text
