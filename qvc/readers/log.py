"""History as people read it: ``qvc log`` entries, newest first, their selection (ranges,
fields, dates, message patterns), ``--format`` placeholders, and the fork graph.

Entries are read from commits and trees only (a checkpoint's state is not decoded, except its
``status`` field when it has one), so listing stays cheap on long threads.
"""

from __future__ import annotations

import heapq
import logging
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from qvc.codec import serde
from qvc.errors import CorruptionError, InvalidInputError
from qvc.plumbing.objects import MODE_BLOB
from qvc.readers.dates import ago
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
    message: str = ""  # the commit message (subject ``step N · source · ...``, then trailers)
    n: int | None = None  # a run checkpoint's number, its message index (qvc.runs.queries.numbers)
    name: str | None = None  # a run checkpoint's name, ``RUN@n`` as ``qvc show`` takes it

    def to_json(self) -> dict[str, Any]:
        """The stable ``--json`` form (documented in docs/cli.md)."""
        return {
            "id": self.checkpoint_id, "commit": self.commit, "thread": self.thread, "step": self.step,
            "n": self.n, "name": self.name,
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
    info = store.commit_info(commit)
    mine = store.tree_entries(commit)
    theirs = store.tree_entries(info.parent) if info.parent is not None else {}
    # added or changed, then removed (as in the commit subject); entries compare by (mode, id)
    changed = [decode_name(n) for n, e in mine.items() if n != HEADER and theirs.get(n) != e]
    changed += [decode_name(n) for n in theirs if n != HEADER and n not in mine]
    return LogEntry(commit, info.checkpoint_id, info.thread_id, info.step, source_of(info), info.time,
                    info.parents, changed, _status(store, info), (heads or {}).get(commit, []), superseded,
                    info.message)


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
        logging.getLogger("qvc").warning("qvc: warning: %s is damaged, skipped: %s (see `qvc fsck`)", what, why)
    return why is None


def log(store: GitCheckpointStore, start: str | None = None, *, limit: int | None = None,
        all: bool = False, exclude: str | None = None, fields: Sequence[str] = (), since: float | None = None,
        until: float | None = None, grep: str | None = None, reverse: bool = False) -> Iterator[LogEntry]:
    """Checkpoints newest first.

    With ``start`` (a commit), its first-parent line, crossing into the source thread at a
    fork (``git log --first-parent``). With ``all``, every checkpoint reachable from any thread
    or superseded line, newest first by commit time (``git log --all --date-order``); those
    reachable only through a superseded line are marked ``superseded``.

    The selection, as ``git log`` makes it: ``exclude`` (a commit; ``git log A..B`` is
    ``start=B, exclude=A``) leaves out every checkpoint it reaches; ``fields`` keeps the
    checkpoints that added, changed or removed one of those fields; ``since`` / ``until`` (Unix
    times, inclusive) bound the commit time; ``grep`` (a regular expression) must match the
    commit message (``^`` and ``$`` match at each line). ``limit`` counts what is selected;
    ``reverse`` then gives those oldest first. Raises :class:`InvalidInputError` for a negative limit or a bad pattern.
    ``git rev-list`` orders ``all``; where git cannot read the repository, a walk of everything
    here does (and raises :class:`CorruptionError` on what it cannot read).
    """
    if limit is not None and limit < 0:
        raise InvalidInputError(f"limit must be a non-negative integer, not {limit!r}")
    try:
        pattern = re.compile(grep, re.MULTILINE) if grep is not None else None  # per line, as git greps
    except re.error as exc:
        raise InvalidInputError(f"bad --grep pattern {grep!r}: {exc}") from None
    hidden = _reachable_from(store, {exclude}) if exclude is not None else set()
    wanted = set(fields)

    def chosen(e: LogEntry) -> bool:
        return ((not wanted or not wanted.isdisjoint(e.changed))
                and (since is None or e.time >= since) and (until is None or e.time <= until)
                and (pattern is None or pattern.search(e.message) is not None))

    trivial = not (hidden or wanted or since is not None or until is not None or pattern is not None)

    def selected() -> Iterator[LogEntry]:
        count = 0
        for e in _walk(store, start, all, hidden, limit if trivial else None):
            if limit is not None and count >= limit:
                return
            if chosen(e):
                count += 1
                yield e

    if reverse:
        yield from reversed(list(selected()))
    else:
        yield from selected()


def _walk(store: GitCheckpointStore, start: str | None, all: bool, hidden: set[str],
          limit: int | None) -> Iterator[LogEntry]:
    """The candidates, newest first; ``limit``: how many at most the caller takes (``None``: it
    filters them, so all may be needed)."""
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
        threads |= {store.commit_info(start).thread_id}
        for thread in sorted(t for t in threads if t is not None):
            tip = store.head(thread)
            if tip is not None:
                heads.setdefault(tip, []).append(thread)
        for info in store.first_parents(start):
            if info.hex in hidden:
                return
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
            if commit not in hidden:
                yield entry(store, commit, names, superseded=superseded)
        return
    heads = head_map(store)
    tips = list(heads) + [tip for name, tip in store.repository.refs(SUPERSEDED) if readable(store, name, tip)]
    on_live = _reachable_from(store, set(heads))
    everything = _reachable_from(store, set(tips)) - hidden
    # Newest first, but never a parent before any of its children (git log --date-order).
    children = dict.fromkeys(everything, 0)
    for commit in everything:
        for parent in store.commit_info(commit).parents:
            if parent in children:
                children[parent] += 1
    queue = [(-store.commit_info(c).time, c) for c, n in children.items() if n == 0]
    heapq.heapify(queue)
    while queue:
        _, commit = heapq.heappop(queue)
        yield entry(store, commit, heads, superseded=commit not in on_live)
        for parent in store.commit_info(commit).parents:
            if parent in children:
                children[parent] -= 1
                if children[parent] == 0:
                    heapq.heappush(queue, (-store.commit_info(parent).time, parent))


def _git_order(store: GitCheckpointStore, limit: int | None) -> list[tuple[str, bool]] | None:
    """Every thread's and superseded line's commits in ``git log --date-order`` order (the first
    ``limit``), each with whether it is reachable only from superseded lines; ``None`` if git
    cannot read the repository (then the caller's own walk names the damage).

    git walks the history in C (on a 20,000-thread repository it reads every tip in a tenth of
    the time Python takes); the walk is the same one ``qvc log --graph`` draws.
    """
    from qvc.plumbing.launcher import run_git as run

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
        stack.extend(store.commit_info(commit).parents)
    return out


def graph(store: GitCheckpointStore, start: str | None = None, *, limit: int | None = None, all: bool = False,
          color: bool = False) -> str:
    """The fork graph drawn by ``git log --graph`` (threads as branch decorations).

    git is better at laying out a graph than anything we would write; it runs with the
    repository's own configuration neutralized (see :mod:`qvc.plumbing.maintenance`).
    """
    from qvc.plumbing.launcher import git

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


# -- decorations and --format --------------------------------------------------------------


def decorations(e: LogEntry, head_thread: str | None, head_commit: str | None) -> list[str]:
    """The names pointing at an entry, as git decorates: ``HEAD -> t`` for the current thread
    ``t``, ``HEAD`` when detached at it, the other threads whose head it is, ``superseded``."""
    names = [f"HEAD -> {t}" if t == head_thread else t for t in e.heads]
    if head_thread is None and head_commit == e.commit:
        names.insert(0, "HEAD")
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
    "%(id)": "checkpoint id", "%(shortid)": "checkpoint id shortened to 12 characters when longer than 16",
    "%(thread)": "thread", "%(step)": "step", "%(source)": "source (put when none)",
    "%(status)": "status field (empty when none)", "%(changed)": "changed fields, comma-separated",
    "%(nchanged)": "how many fields changed", "%(superseded)": "`superseded` when only on a superseded line",
}

_PLACEHOLDER = re.compile(r"%(?:\((\w+)\)|x([0-9a-fA-F]{2})|([ac][tiIdr])|([HhPpsbBdDn%]))")


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


def format_entry(e: LogEntry, fmt: str, *, head_thread: str | None = None, head_commit: str | None = None,
                 now: float | None = None) -> str:
    """``e`` written with the placeholders of :data:`PLACEHOLDERS` in ``fmt`` replaced
    (``fmt`` as :func:`check_format` returns it); ``now`` is the clock for ``%ar``."""
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
        return {"id": cid, "shortid": cid if len(cid) <= 16 else cid[:12], "thread": e.thread or "",
                "step": "" if e.step is None else str(e.step), "source": e.source or "put",
                "status": e.status or "", "changed": ",".join(e.changed), "nchanged": str(len(e.changed)),
                "superseded": "superseded" if e.superseded else ""}[name]

    return _PLACEHOLDER.sub(value, fmt)
