"""Following a repository live: typed events for what other processes write.

A :class:`Watcher` keeps a snapshot of every ref of one repository (threads' heads,
superseded lines, pending-writes refs, ``HEAD``). Whenever something may have changed it
reads the refs again and turns the difference between the two snapshots into
:class:`WatchEvent` s. File-system events (watchdog's inotify observer on ``refs/``,
``packed-refs`` and ``HEAD``) are only hints that wake the reader: they come duplicated and
reordered, and packing refs reports loose ref files deleted although the refs still exist.
Where inotify cannot be used (no inotify, its watch or instance limit reached, or
``hints="poll"``), the refs are polled every ``poll_interval`` seconds instead; with inotify
they are still re-read every ``rescan_interval`` seconds, since hints can be lost (a queue
overflow, a directory created just before its watch).

Guarantees, for every change of the refs a read observes:

- one ``checkpoint`` event per new commit on a thread, oldest first, also when several landed
  between two reads (the first parents from the old head to the new one, at most
  ``walk_limit`` of them: a longer burst reports its newest ``walk_limit`` commits);
- events of one thread come in the order of its changes; across threads, in no set order;
- a ref that is merely moved into ``packed-refs`` (``git pack-refs``, ``qvc gc``) is never
  reported deleted: loose files are read before ``packed-refs`` and a ref missing from a read
  is looked up once more before it counts as deleted;
- moves that cancel out between two reads (a ref moved and moved back, a pending write
  upserted twice) are coalesced into what the second read sees. Events are derived from the
  refs, so nothing is reported twice and a watcher started later never sees earlier changes.

Refs are read as every store acknowledged them: the staging database's values over git's
files (:mod:`qvc.plumbing.staging`), so another process's write is seen as soon as its
transaction committed, also when its writer is stopped before publishing it. The hints come
when git's files change (publication, within a few milliseconds of a write); a write that is
never published is found by the next rescan. Reading takes no lock and writes nothing, so a
watcher never slows writers of other processes down; objects are read through the store, which
for ``readonly=True`` stores needs no libgit2.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from qvc.errors import CorruptionError, InvalidInputError, StoreClosedError
from qvc.readers.log import source_of
from qvc.store.refnames import (
    HEADS,
    SUPERSEDED,
    WRITES,
    check_thread_id,
    decode_thread,
    encode_thread,
    superseded_prefix,
)
from qvc.store.writes import writes_commit

if TYPE_CHECKING:
    from qvc.store.git_store import GitCheckpointStore
    from qvc.store.history import CommitInfo

HINTS = ("auto", "inotify", "poll")
#: after a hint whose read found nothing, read again after these pauses (seconds): a commit
#: writes the staging log (the hint) before it is flushed and visible to readers
LOOK_AGAIN = (0.002, 0.01, 0.05)
_RENAMED = "branch: renamed "


@dataclass(frozen=True)
class WatchEvent:
    """One change seen in the repository.

    ``kind`` is one of:

    - ``checkpoint``: a new checkpoint ``checkpoint_id`` (commit ``commit``) on ``thread_id``;
      ``previous`` is its parent commit, ``step``/``source`` come from the commit.
    - ``fork``: thread ``thread_id`` was created from checkpoint ``from_checkpoint_id``
      (``from_commit``) of ``from_thread``; ``checkpoint_id``/``commit`` are its first own
      checkpoint. ``checkpoint`` events for its own commits follow.
    - ``reset``: the thread's head moved from ``previous`` to ``commit`` and the new head does
      not descend from the old one (time travel, a reset, a deleted checkpoint). ``superseded``
      names the line kept for the old head (``<thread>/<sha>`` under ``refs/qvc/superseded/``)
      and ``cause`` is the reflog's reason. ``checkpoint`` events follow for new checkpoints
      on the new line.
    - ``delete``: thread ``thread_id`` was deleted; ``previous`` was its head.
    - ``rename``: thread ``from_thread`` is now called ``thread_id`` (head ``commit``).
    - ``writes``: pending writes of checkpoint ``checkpoint_id`` (``commit``) were added or
      upserted; ``writes`` is the commit that holds them now.
    - ``head``: HEAD moved (``qvc checkout``): to thread ``thread_id``, or detached at ``commit``.

    ``observed`` is when the watcher saw the change (Unix seconds), ``committed`` the commit's
    time for ``checkpoint`` events.
    """

    kind: str
    thread_id: str | None
    checkpoint_id: str | None = None
    commit: str | None = None
    previous: str | None = None
    step: int | None = None
    source: str | None = None
    from_thread: str | None = None
    from_checkpoint_id: str | None = None
    from_commit: str | None = None
    superseded: tuple[str, ...] = ()
    writes: str | None = None
    cause: str | None = None
    committed: int | None = None
    observed: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        """The stable JSON form (``qvc watch --json``; documented in docs/watch.md)."""
        source = None
        if self.from_thread is not None or self.from_commit is not None:
            source = {"thread": self.from_thread, "id": self.from_checkpoint_id, "commit": self.from_commit}
        return {
            "kind": self.kind, "thread": self.thread_id, "id": self.checkpoint_id, "commit": self.commit,
            "previous": self.previous, "step": self.step, "source": self.source, "from": source,
            "superseded": list(self.superseded), "writes": self.writes, "cause": self.cause,
            "committed": self.committed,
            "time": datetime.fromtimestamp(self.observed, timezone.utc).isoformat(), "timestamp": self.observed,
        }


@dataclass
class _Snapshot:
    refs: dict[str, str]
    head: tuple[str | None, str | None]


class Watcher:
    """Events of one repository as other processes (or this one) write it; see the module docstring.

    Iterate it for events (blocking; the iteration ends after ``timeout`` seconds if given, or
    when :meth:`stop` is called), call :meth:`poll` for what changed since the last read, or
    :meth:`start` a background thread that calls ``callback(event)``. Use it as a context
    manager, or call :meth:`stop`, to release the inotify watches.

    The baseline is the repository as it is when the watcher is created, with every move
    another process acknowledged before (staged or published): only later changes are
    reported. ``threads`` limits events to those threads (``rename`` events also when
    the old name is one of them; ``head`` events when HEAD moves to one of them).
    """

    def __init__(self, store: GitCheckpointStore, threads: Iterable[str] | None = None, *,
                 hints: str = "auto", poll_interval: float = 0.05, rescan_interval: float = 1.0,
                 timeout: float | None = None, walk_limit: int = 1000):
        if hints not in HINTS:
            raise InvalidInputError(f"hints must be one of {', '.join(HINTS)}, not {hints!r}")
        for name, value in (("poll_interval", poll_interval), ("rescan_interval", rescan_interval)):
            if not isinstance(value, (int, float)) or value <= 0:
                raise InvalidInputError(f"{name} must be a positive number of seconds, not {value!r}")
        self._store = store
        self._path = store.path
        self._repo = store.repository  # refs as acknowledged: staged values over git's files
        self._threads = None if threads is None else frozenset(check_thread_id(t) for t in threads)
        self.poll_interval = float(poll_interval)
        self.rescan_interval = float(rescan_interval)
        self.timeout = timeout
        self.walk_limit = walk_limit
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._names: dict[str, str] = {}  # head ref -> thread id (long ids are read from commits)
        self._renamed: set[str] = set()  # head refs whose deletion belongs to a reported rename
        self._observer = None
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        #: how hints arrive: ``"inotify"`` or ``"poll"`` (also after a fallback from ``"auto"``)
        self.hints = "poll"
        #: why ``hints="auto"`` fell back to polling (``None`` if it did not)
        self.fallback_reason: str | None = None
        self._snapshot: _Snapshot | None = None
        if hints != "poll":
            try:
                self._observe()
                self.hints = "inotify"
            except (OSError, ImportError) as exc:
                if hints == "inotify":
                    raise
                self.fallback_reason = str(exc) or type(exc).__name__
        try:
            self._snapshot = self._read()  # after the observer started: nothing falls in between
        except BaseException:
            self.stop()
            raise

    # -- hints --------------------------------------------------------------------------------

    def _observe(self) -> None:
        from watchdog.events import (
            DirCreatedEvent,
            DirDeletedEvent,
            DirMovedEvent,
            FileCreatedEvent,
            FileDeletedEvent,
            FileModifiedEvent,
            FileMovedEvent,
            FileSystemEventHandler,
        )
        from watchdog.observers.inotify import InotifyObserver

        refs_dir = os.path.join(self._path, "refs")
        staging_dir, log_name = os.path.split(self._repo.staging_log)
        wake = self._wake

        class Hint(FileSystemEventHandler):
            def dispatch(self, event) -> None:
                for p in (event.src_path, getattr(event, "dest_path", "")):
                    p = os.fsdecode(p)
                    if p and not p.endswith(".lock") and (
                            p.startswith(refs_dir) or os.path.basename(p) in ("packed-refs", "HEAD", log_name)):
                        wake.set()
                        return

        # Only what moving a ref does (link, rename, unlink; our own reads open and close files),
        # and every write to the staging database's log: a write is acknowledged (and read) at
        # its commit there, before its publisher moves git's ref.
        kinds = [FileCreatedEvent, FileMovedEvent, FileDeletedEvent, DirCreatedEvent, DirDeletedEvent, DirMovedEvent]
        observer = InotifyObserver()
        observer.schedule(Hint(), refs_dir, recursive=True, event_filter=kinds)
        observer.schedule(Hint(), self._path, recursive=False, event_filter=kinds)
        if os.path.isdir(staging_dir):
            observer.schedule(Hint(), staging_dir, recursive=False, event_filter=[FileCreatedEvent, FileModifiedEvent])
        try:
            observer.start()
        except BaseException:
            observer.stop()
            raise
        self._observer = observer

    # -- reading ------------------------------------------------------------------------------

    def _read(self) -> _Snapshot:
        refs = dict(self._repo.refs("refs/"))
        try:
            head = self._repo.head_ref()
        except CorruptionError:  # HEAD being replaced by a non-atomic writer: keep the old one
            head = self._snapshot.head if self._snapshot is not None else (None, None)
        return _Snapshot(refs, head)

    def poll(self) -> list[WatchEvent]:
        """Read the refs now and return the events since the last read (``[]`` if none)."""
        with self._lock:
            new = self._read()
            old = self._snapshot
            assert old is not None  # read in __init__
            for name in [n for n in old.refs if n not in new.refs]:
                again = self._repo.ref(name)  # packing refs deletes loose files: look once more
                if again is not None:
                    new.refs[name] = again
            events = self._diff(old, new)
            self._snapshot = new
        if self._threads is None:
            return events
        return [e for e in events if e.thread_id in self._threads or (
            e.kind == "rename" and e.from_thread in self._threads)]

    def _thread_of(self, ref: str, tip: str | None) -> str:
        thread = self._names.get(ref)
        if thread is None:
            component = ref[len(HEADS):]
            thread = decode_thread(component)
            if thread is None:
                thread = (self._store.commit_info(tip).thread_id if tip else None) or component
            self._names[ref] = thread
        return thread

    def _diff(self, old: _Snapshot, new: _Snapshot) -> list[WatchEvent]:
        now = time.time()
        events: list[WatchEvent] = []
        heads = sorted(n for n in old.refs.keys() | new.refs.keys() if n.startswith(HEADS))
        known = set(old.refs.values())
        for ref in heads:
            was, tip = old.refs.get(ref), new.refs.get(ref)
            if was == tip or tip is None:
                continue
            thread = self._thread_of(ref, tip)
            if was is None:
                events += self._created(ref, thread, tip, now)
            else:
                events += self._moved(ref, thread, was, tip, old, new, known, now)
        for ref in heads:
            if ref in old.refs and ref not in new.refs:
                thread = self._thread_of(ref, None)
                del self._names[ref]
                if ref in self._renamed:
                    self._renamed.discard(ref)
                    continue
                events.append(WatchEvent("delete", thread, previous=old.refs[ref], observed=now))
        for ref, tip in new.refs.items():
            if ref.startswith(WRITES) and old.refs.get(ref) != tip:
                events += self._writes(ref, tip, now)
        if (new.head[0] or new.head[1]) != (old.head[0] or old.head[1]):  # not the current thread moving
            name, commit = new.head
            thread = self._thread_of(name, commit) if name and name.startswith(HEADS) else None
            events.append(WatchEvent("head", thread, commit=commit, previous=old.head[1], observed=now))
        return events

    def _last_cause(self, ref: str, tip: str) -> str | None:
        """The reason of the ref's latest reflog entry (staged or in git's file) if that entry
        moved it to ``tip``."""
        entries = self._repo.reflog(ref)
        return entries[0].message.strip() if entries and entries[0].new == tip else None

    def _created(self, ref: str, thread: str, tip: str, now: float) -> list[WatchEvent]:
        cause = self._last_cause(ref, tip)
        if cause is not None and cause.startswith(_RENAMED) and cause.endswith(f" to {thread}"):
            was = cause[len(_RENAMED):-len(f" to {thread}")]
            self._renamed.add(HEADS + encode_thread(was))
            info = self._store.commit_info(tip)
            return [WatchEvent("rename", thread, info.checkpoint_id, tip, from_thread=was, cause=cause,
                               observed=now)]
        own, base = [], None
        for info in self._first_parents(tip):
            if info.thread_id is not None and info.thread_id != thread:
                base = info
                break
            own.append(info)
        events = []
        if base is not None:
            first = own[-1] if own else base  # the thread's first checkpoint (not its head: reads coalesce)
            events.append(WatchEvent("fork", thread, first.checkpoint_id, first.hex,
                                     from_thread=base.thread_id, from_checkpoint_id=base.checkpoint_id,
                                     from_commit=base.hex, cause=cause, observed=now))
        return events + [self._checkpoint(thread, info, now) for info in reversed(own)]

    def _moved(self, ref: str, thread: str, was: str, tip: str, old: _Snapshot, new: _Snapshot,
               known: set[str], now: float) -> list[WatchEvent]:
        line = []
        for info in self._first_parents(tip):
            if info.hex == was:
                return [self._checkpoint(thread, i, now) for i in reversed(line)]  # fast-forward
            line.append(info)
        if len(line) >= self.walk_limit:  # a burst longer than the walk: its newest checkpoints
            return [self._checkpoint(thread, i, now) for i in reversed(line)]
        # Not a fast-forward: the new checkpoints are those up to where the lines meet, less
        # those the old line had under the same id (rewritten by a delete).
        old_line = {info.hex: info.checkpoint_id for info in self._first_parents(was)}
        old_ids = set(old_line.values())
        fresh = []
        for info in line:
            if info.hex in old_line or info.hex in known:
                break
            if info.checkpoint_id not in old_ids:
                fresh.append(info)
        prefix = superseded_prefix(thread)
        # the line left behind, if kept (maybe seen by an earlier read: written before the head moved)
        kept = tuple(sorted(n[len(SUPERSEDED):] for n, t in new.refs.items() if n.startswith(prefix) and t == was))
        if not kept:  # or not yet seen: read before the head (refs are read one by one), or published after it
            name = prefix + was
            if self._repo.ref(name) == was:
                new.refs[name] = was
                kept = (name[len(SUPERSEDED):],)
        head = self._store.commit_info(tip)
        events = [WatchEvent("reset", thread, head.checkpoint_id, tip, previous=was, step=head.step,
                             superseded=kept, cause=self._last_cause(ref, tip), observed=now)]
        return events + [self._checkpoint(thread, i, now) for i in reversed(fresh)]

    def _first_parents(self, sha: str) -> Iterator[CommitInfo]:
        for n, info in enumerate(self._store.first_parents(sha)):
            if n >= self.walk_limit:
                return
            yield info

    def _checkpoint(self, thread: str, info: CommitInfo, now: float) -> WatchEvent:
        return WatchEvent("checkpoint", thread, info.checkpoint_id, info.hex, previous=info.parent,
                          step=info.step, source=source_of(info) or "put", committed=info.time, observed=now)

    def _writes(self, ref: str, tip: str, now: float) -> list[WatchEvent]:
        sha = writes_commit(ref[len(WRITES):])
        if sha is None:  # an opaque writes ref (another layout's): no checkpoint of the store to report
            return []
        try:
            info = self._store.commit_info(sha)
        except CorruptionError:  # the checkpoint was deleted meanwhile
            return []
        return [WatchEvent("writes", info.thread_id, info.checkpoint_id, sha, writes=tip, observed=now)]

    # -- streaming -----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[WatchEvent]:
        return self.events(self.timeout)

    def events(self, timeout: float | None = None) -> Iterator[WatchEvent]:
        """Events as they happen, blocking between them; ends after ``timeout`` seconds (if
        given) or once :meth:`stop` is called."""
        deadline = None if timeout is None else time.monotonic() + timeout
        wait = self.rescan_interval if self.hints == "inotify" else self.poll_interval
        again: tuple[float, ...] = ()  # looks owed after a hint that found nothing
        while not self._stopped.is_set():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            pause = again[0] if again else wait
            hinted = self._wake.wait(pause if left is None else min(pause, left))
            self._wake.clear()  # before reading: a hint arriving during the read wakes us again
            if self._stopped.is_set():
                return
            events = self.poll()
            yield from events
            if hinted and not events and self.hints == "inotify":
                again = LOOK_AGAIN  # the hint may precede what it announces (see LOOK_AGAIN)
            elif again:
                again = again[1:]

    def start(self, callback: Callable[[WatchEvent], object]) -> Watcher:
        """Call ``callback(event)`` for each event from a background thread until :meth:`stop`.

        An exception from ``callback`` ends the thread; it is kept in :attr:`error` and
        re-raised by :meth:`stop`."""
        if self._thread is not None:
            raise InvalidInputError("this watcher already runs a callback")

        def run() -> None:
            try:
                for event in self.events():
                    callback(event)
            except BaseException as exc:  # handed to stop()
                self.error = exc

        self._thread = threading.Thread(target=run, name="qvc-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching: end iterations and the callback thread, release the inotify watches."""
        self._stopped.set()
        self._wake.set()
        observer, self._observer = self._observer, None
        if observer is not None:
            observer.stop()
            observer.join(5)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(10)
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    def __enter__(self) -> Watcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def watch(store: GitCheckpointStore, threads: Iterable[str] | None = None, *,
          callback: Callable[[WatchEvent], object] | None = None, hints: str = "auto",
          poll_interval: float = 0.05, rescan_interval: float = 1.0, timeout: float | None = None) -> Watcher:
    """Follow ``store``'s repository live: a :class:`Watcher` of the changes made from now on.

    Iterate it for :class:`WatchEvent` s (checkpoints, forks, resets, deletes, renames, pending
    writes, HEAD moves), blocking until ``timeout`` seconds have passed (forever if ``None``) or
    it is stopped; with ``callback``, a background thread calls ``callback(event)`` instead until
    ``watcher.stop()``. ``threads`` limits the events to those threads. Hints come from inotify
    (``hints="inotify"``, or ``"auto"``: inotify, else polling every ``poll_interval`` seconds;
    ``"poll"`` forces polling); the refs are re-read at least every ``rescan_interval`` seconds.
    Works on read-only stores. Use it as a context manager (or call ``stop()``) to release the
    inotify watches. Raises :class:`InvalidInputError` for a bad argument, ``OSError`` when
    ``hints="inotify"`` cannot start, :class:`StoreClosedError` on a closed store.
    """
    if store.closed:
        raise StoreClosedError(f"{store.path}: the store is closed")
    watcher = Watcher(store, threads, hints=hints, poll_interval=poll_interval,
                      rescan_interval=rescan_interval, timeout=timeout)
    return watcher.start(callback) if callback is not None else watcher
