"""Naming checkpoints the way git names commits.

A revision is a base name, optionally followed by suffixes:

* base: ``HEAD`` (the current thread's head, or the detached checkpoint), a thread id (its
  head), a tag (``refs/tags/<name>``; a thread of the same name wins),
  ``REMOTE/THREAD`` (a remote's thread as last fetched, see :mod:`qvc.remotes.remote`), any of
  these spelled in full (``refs/heads/THREAD``, ``refs/tags/TAG``, ``refs/remotes/REMOTE/THREAD``), a
  checkpoint id or unique id prefix, a commit SHA or unique SHA prefix (4+ digits);
* ``~N`` (``~`` alone is ``~1``; ``^`` is ``~1``): N first parents back (across forks);
* ``@{N}``: the thread's head N movements ago, read from its reflog (``@{0}`` is the head); after
  a name ``names`` resolves to a thread's head (a run id: ``RUN@{N}``), that thread's reflog.

Thread ids may contain ``~``, ``^`` and ``@{``: the whole text is tried as a thread and as a
checkpoint id before any suffix is split off. Names the store cannot know (an agent run's
``RUN@N``, :func:`qvc.runs.run_revision`) come from the feature layer through the ``names``
argument of :func:`parse_revision`. A range ``A..B`` (:func:`parse_range`) is what ``git log A..B``
shows: B's line without what A reaches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, NamedTuple, Optional

from qvc.errors import DamagedRefError, InvalidInputError, NotFoundError, UnknownCheckpointError, UnknownThreadError
from qvc.lazy import Pattern
from qvc.store.refnames import HEADS, REMOTES, TAGS, check_thread_id, encodable, shown, tracking_ref

if TYPE_CHECKING:
    from qvc.store.git_store import GitCheckpointStore

_SUFFIX = Pattern(r"(~\d*|\^|@\{\d+\})$")


class Revision(NamedTuple):
    """A resolved name: the checkpoint's commit, and the thread the name went through (if any)."""

    commit: str
    thread: str | None


def thread_named(store: GitCheckpointStore, name: str, *, damaged: bool = False) -> str | None:
    """``name`` if it is a thread with checkpoints (``HEAD``: the current thread), else ``None``.
    With ``damaged``, a thread whose ref file holds no ref counts too (its reflog still reads:
    ``THREAD@{N}``); without, reading it raises :class:`DamagedRefError`."""
    try:
        if name == "HEAD":
            head = store.current()
            return head.thread if head.commit is not None else None
        try:
            check_thread_id(name)
        except InvalidInputError:
            return None
        if not encodable(name):  # no thread id holds one (a put refuses it)
            return None
        return name if store.head(name) is not None else None
    except DamagedRefError as exc:
        if not damaged:
            raise
        return store.ref_thread(exc.ref)


#: A resolver for names beyond the store's own: the :class:`Revision` ``text`` names, or ``None``.
Names = Callable[[str], Optional[Revision]]


def parse_revision(store: GitCheckpointStore, text: str, *, names: Names | None = None) -> Revision:
    """Resolve ``text`` to a checkpoint commit.

    ``names`` is asked about a base name the store does not know (before it is an unknown
    revision), so ``RUN@3~1`` works when it knows ``RUN@3``.

    Raises :class:`UnknownCheckpointError` for a name that matches nothing (or a ``~N`` past the
    first checkpoint, an ``@{N}`` past the reflog; a text that is not valid UTF-8, such as a
    command-line argument holding bytes of another encoding, names nothing: no thread id or
    checkpoint id can hold one), :class:`UnknownThreadError` for ``HEAD`` on a thread with no
    checkpoints, :class:`AmbiguousNameError` for an ambiguous prefix and
    :class:`InvalidInputError` for an empty name.
    """
    if not isinstance(text, str) or not text:
        raise InvalidInputError("ambiguous argument '': an empty revision names nothing")
    if not encodable(text):
        raise UnknownCheckpointError(f"unknown revision {shown(text)}: not a thread, checkpoint id or commit")
    # Suffixes are peeled off one at a time (a loop, not recursion: `a~~~...~` may be long), each
    # time after the whole remaining text failed as a name (thread ids may contain `~` and `@{`).
    walks: list[tuple[str, str, int]] = []  # (text, inner, steps) of each ~N peeled, outermost first
    inner = text
    while True:
        base = _base(store, inner)
        if base is not None:
            break
        m = _SUFFIX.search(inner)
        if m is None or m.start() == 0:
            base = _by_checkpoint(store, inner, names)
            break
        outer, inner, suffix = inner, inner[: m.start()], m.group(0)
        if suffix.startswith("@{"):
            base = _reflog_entry(store, outer, inner, int(suffix[2:-1]), names)
            break
        walks.append((outer, inner, 1 if suffix in ("~", "^") else int(suffix[1:])))
    commit = base.commit
    for outer, inner, steps in reversed(walks):
        for i in range(steps):
            parent = store.commit_info(commit).parent
            if parent is None:
                raise UnknownCheckpointError(f"{shown(outer)}: only {i} checkpoint(s) before {shown(inner)}")
            commit = parent
    return Revision(commit, base.thread)


def _reflog_entry(store: GitCheckpointStore, text: str, inner: str, n: int, names: Names | None = None) -> Revision:
    """``INNER@{N}``: thread ``inner``'s head ``n`` movements ago; ``inner`` may be a name ``names``
    resolves to a thread's head (a run id: ``RUN@{N}`` is its thread's reflog)."""
    thread = thread_named(store, inner, damaged=True)
    if thread is None and names is not None and inner != "HEAD":
        named = names(inner)
        if named is not None and named.thread is not None and store.head(named.thread) == named.commit:
            thread = named.thread
    if thread is None:
        if inner == "HEAD":
            head = store.current()
            if head.thread is None:
                raise UnknownCheckpointError(f"{shown(text)}: HEAD is detached, so it has no thread's reflog "
                                             f"(name the thread: THREAD@{{N}})")
            raise UnknownThreadError(f"{shown(text)}: the current thread {head.thread!r} has no checkpoints, "
                                     f"so no reflog")
        raise UnknownCheckpointError(f"{shown(text)}: {shown(inner)} is not a thread (@{{N}} needs one)")
    log = store.reflog(thread)
    if n >= len(log) or log[n].new is None:
        raise UnknownCheckpointError(f"{shown(text)}: thread {shown(thread)} has {len(log)} reflog entries")
    return Revision(log[n].new, thread)


def _base(store: GitCheckpointStore, text: str) -> Revision | None:
    if text == "HEAD":
        head = store.current()
        if head.commit is None:
            threads = store.threads()
            hint = f"; threads: {', '.join(threads[:5])}{', ...' if len(threads) > 5 else ''}" if threads else ""
            raise UnknownThreadError(f"HEAD: the current thread {head.thread!r} has no checkpoints yet "
                                     f"(name a thread, or choose one with `qvc checkout THREAD`{hint})")
        return Revision(head.commit, head.thread)
    thread = thread_named(store, text)
    if thread is not None:
        return Revision(store.head(thread), thread)
    tagged = store.tag(text)  # a thread's name wins over a tag's (git warns of the ambiguity)
    if tagged is not None:
        return Revision(tagged, None)
    remote, sep, rest = text.partition("/")  # REMOTE/THREAD: a remote-tracking ref
    ref = tracking_ref(remote, rest) if sep and rest else None
    tracked = store.repository.ref(ref) if ref else None
    if tracked is not None:
        return Revision(tracked, None)
    return _full_ref(store, text)


def _full_ref(store: GitCheckpointStore, text: str) -> Revision | None:
    """``refs/heads/THREAD``, ``refs/tags/TAG``, ``refs/remotes/REMOTE/THREAD``: a name spelled in
    full, as ``log --decorate=full`` prints it (the thread id as it is, not its ref encoding), so a
    thread whose id starts with ``-`` has a name no option parser takes for an option."""
    if text.startswith(HEADS):
        thread = thread_named(store, text[len(HEADS):])
        return Revision(store.head(thread), thread) if thread is not None else None
    if text.startswith(TAGS):
        tagged = store.tag(text[len(TAGS):])
        return Revision(tagged, None) if tagged is not None else None
    if text.startswith(REMOTES):
        remote, sep, rest = text[len(REMOTES):].partition("/")
        ref = tracking_ref(remote, rest) if sep and rest else None
        tracked = store.repository.ref(ref) if ref else None
        return Revision(tracked, None) if tracked is not None else None
    return None


def _by_checkpoint(store: GitCheckpointStore, text: str, names: Names | None = None) -> Revision:
    try:
        return Revision(store.resolve(text), None)
    except UnknownCheckpointError:
        found = names(text) if names is not None else None
        if found is not None:
            return found
        raise UnknownCheckpointError(f"unknown revision {shown(text)}: not a thread, checkpoint id or commit") from None


def parse_range(store: GitCheckpointStore, text: str, *,
                names: Names | None = None) -> tuple[Optional[Revision], Revision]:
    """``(exclude, include)`` for ``A..B`` (``A..`` and ``..B`` leave out ``HEAD``), or
    ``(None, revision)`` for a plain revision. The whole text is tried as a revision first
    (a thread id may contain ``..``). ``A...B`` is refused (:class:`InvalidInputError`); the
    rest raises as :func:`parse_revision` does.
    """
    try:
        return None, parse_revision(store, text, names=names)
    except NotFoundError:
        if ".." not in text:
            raise
    a, _, b = text.partition("..")
    if b.startswith("."):
        raise InvalidInputError(f"{text!r}: A...B (symmetric difference) is not supported; use A..B")
    return parse_revision(store, a or "HEAD", names=names), parse_revision(store, b or "HEAD", names=names)
