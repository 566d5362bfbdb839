"""Automatic replication: every write pushed to a remote in the background.

Turn it on per remote (``qvc remote add NAME URL --replicate``, ``qvc remote replicate NAME``,
or ``add_remote(..., replicate=True)``; stored as ``remote.<name>.qvcReplicate = true`` in the
repository's git config). Every writing :class:`~qvc.store.git_store.GitCheckpointStore` opened after
that runs one :class:`Replicator` per such remote:

* ``put`` and every other write only set an event (no I/O, no lock): replication never
  slows a write.
* A background thread wakes on that event (at most once per ``INTERVAL`` second: writes
  arriving meanwhile share one push), makes the writes so far durable locally
  (``store.flush()``: a no-op in SYNC mode), then pushes every thread that changed
  (:func:`qvc.remotes.remote.push`: leased, incremental, chunked). One replicator per repository and
  remote pushes at a time (a ``filelock`` in ``qvc/``), whichever process it runs in.
* When the remote is down (or refuses a ref) it retries with exponential backoff,
  ``MIN_BACKOFF`` doubling up to ``MAX_BACKOFF`` seconds, and logs nothing louder than the
  state file.
* Its progress is kept in ``qvc/replication-<remote>.json`` (last pushed tips, last success,
  last error), so :func:`replication_status` (``qvc status``) shows the lag from any process:
  threads behind, the age of the oldest checkpoint not yet replicated, the last error.
* ``close()`` makes one bounded final attempt (at most ``FINAL_ATTEMPT`` seconds) if there
  is something left to push and the remote did not just fail; otherwise the lag stays
  visible in ``qvc status`` and the next writer catches up.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from qvc.errors import PushRejectedError, QvcError
from qvc.store.git_store import GitCheckpointStore
from qvc.store.refnames import HEADS

if TYPE_CHECKING:
    from qvc.plumbing.transaction import Record
    from qvc.remotes.remote import Remote

MIN_BACKOFF = 0.5
MAX_BACKOFF = 60.0
FINAL_ATTEMPT = 5.0
INTERVAL = 1.0  # at most one push per second: writes arriving meanwhile share the next one
PUSH_TIMEOUT = 300.0


def state_path(qvc_dir: str, remote: str) -> str:
    return os.path.join(qvc_dir, f"replication-{remote}.json")


def read_state(qvc_dir: str, remote: str) -> dict[str, Any]:
    """The replicator's record for ``remote`` (empty if it never ran or the file is torn)."""
    try:
        with open(state_path(qvc_dir, remote)) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_state(qvc_dir: str, remote: str, state: dict[str, Any]) -> None:
    path = state_path(qvc_dir, remote)
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.replace(tmp, path)  # readers see the old or the new record, never half of one


def _configured(path: str) -> bool:
    """Whether the repository's config mentions replication at all (most do not: no parsing then)."""
    try:
        with open(os.path.join(path, "config"), encoding="utf-8", errors="replace") as f:
            return "qvcreplicate" in f.read().lower()
    except OSError:
        return False


def replicated_remotes(store: GitCheckpointStore) -> list[Remote]:
    """The remotes writes replicate to, read from the repository's config (cheap: no subprocess)."""
    if not _configured(store.path):
        return []
    from qvc.remotes.remote import Remote  # deferred: `qvc status` loads no transfer machinery

    config = store.repository.git.config
    out = []
    for entry in config:
        name = entry.name
        if name.startswith("remote.") and name.endswith(".qvcreplicate") and str(entry.value).lower() == "true":
            remote = name[len("remote."):-len(".qvcreplicate")]
            url = config[f"remote.{remote}.url"] if f"remote.{remote}.url" in config else None
            if url:
                out.append(Remote(remote, url, True))
    return out


class Replicator:
    """Pushes a store's threads to one remote in a background thread (see the module docstring)."""

    def __init__(self, store: GitCheckpointStore, remote: Remote):
        self.store = store
        self.remote = remote
        from filelock import FileLock  # deferred: `qvc status` reads replication_status without it

        from qvc.remotes.remote import push, pushable  # deferred, as FileLock

        self._push, self._pushable = push, pushable

        qvc_dir = store.repository.qvc_dir
        self._qvc_dir = qvc_dir
        self._lock = FileLock(os.path.join(qvc_dir, f"replicate-{remote.name}.lock"))
        self._wake = threading.Event()
        self._halt = threading.Event()
        self._dirty = True  # catch up on whatever earlier writers left unreplicated
        self._failed = False
        self._busy = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"qvc-replicate-{remote.name}", daemon=True)
        self._thread.start()
        self._wake.set()

    def notify(self, record: Record) -> None:
        """Called after each committed write: wake the pusher if a pushable ref moved."""
        if any(self._pushable(name) for name, _, _ in record.refs):
            self._dirty = True
            self._wake.set()

    def _run(self) -> None:
        backoff, last = 0.0, float("-inf")
        while True:
            self._wake.wait(timeout=backoff or None)
            if self._halt.is_set():
                return
            self._wake.clear()
            if self._halt.wait(max(0.0, INTERVAL - (time.monotonic() - last))):
                return
            if not self._dirty:
                continue
            last = time.monotonic()
            if self.push_once():
                backoff = 0.0
            else:
                backoff = min(max(backoff * 2, MIN_BACKOFF), MAX_BACKOFF)

    def push_once(self, timeout: float = PUSH_TIMEOUT) -> bool:
        """One replication attempt; ``True`` when the remote has every local thread. Never raises."""
        with self._busy:
            self._dirty = False
            started = time.time()
            state = read_state(self._qvc_dir, self.remote.name)
            try:
                self.store.flush()  # replicate only what is durable here
                with self._lock.acquire(timeout=timeout):
                    state = read_state(self._qvc_dir, self.remote.name)  # another process may have pushed
                    known = state.get("pushed") if isinstance(state.get("pushed"), dict) else None
                    try:
                        result = self._push(self.store, self.remote.url, timeout=timeout, remote_refs=known)
                    except PushRejectedError as exc:
                        stale = known is not None and any(
                            "stale" in (u.reason or "") or "never seen" in (u.reason or "")
                            for u in exc.result.rejected)
                        if not stale:
                            raise
                        result = self._push(self.store, self.remote.url, timeout=timeout)  # our record was old
                    pushed = dict(known or {})
                    pushed.update({u.ref: u.new for u in result.updates if u.status != "rejected" and u.new})
                    state.update(remote=self.remote.name, url=self.remote.url, pushed=pushed, last_success=time.time(),
                                 last_attempt=started, last_error=None, failures=0)
                    _write_state(self._qvc_dir, self.remote.name, state)
                self._failed = False
                return True
            except (QvcError, OSError) as exc:  # OSError: filelock's Timeout (a TimeoutError) too
                if isinstance(exc, PushRejectedError):  # keep what did get through
                    pushed = dict(state.get("pushed") or {})
                    pushed.update({u.ref: u.new for u in exc.result.updates if u.status != "rejected" and u.new})
                    state["pushed"] = pushed
                state.update(remote=self.remote.name, url=self.remote.url, last_attempt=started,
                             last_error=str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                             failures=int(state.get("failures") or 0) + 1)
                try:
                    _write_state(self._qvc_dir, self.remote.name, state)
                except OSError:
                    pass
                self._dirty = True
                self._failed = True
                return False

    def close(self, final_attempt: float = FINAL_ATTEMPT) -> None:
        """Stop the thread; push what is left once, for at most ``final_attempt`` seconds,
        unless the last attempt failed (the remote is down: the lag stays visible instead)."""
        self._halt.set()
        self._wake.set()
        self._thread.join(timeout=final_attempt)
        if self._dirty and not self._failed and not self._thread.is_alive():
            self.push_once(timeout=final_attempt)


@dataclass
class ReplicationStatus:
    """How far a remote that writes replicate to is behind (``qvc status``)."""

    remote: str
    url: str
    threads_behind: int
    oldest_unreplicated_age: float | None  # seconds since the oldest checkpoint not yet pushed
    last_success: float | None  # Unix time
    last_attempt: float | None
    last_error: str | None
    failures: int  # attempts failed in a row

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def replication_status(store: GitCheckpointStore) -> list[ReplicationStatus]:
    """The lag of every replicated remote, from the replicators' records (works read-only)."""
    if not _configured(store.path):  # most repositories replicate nowhere: say so without running git
        return []
    from qvc.remotes.remote import remotes  # deferred, as in replicated_remotes

    out = []
    now = time.time()
    local = dict(store.repository.refs(HEADS))
    for remote in remotes(store):
        if not remote.replicate:
            continue
        state = read_state(store.repository.qvc_dir, remote.name)
        pushed = state.get("pushed") if isinstance(state.get("pushed"), dict) else {}
        behind, oldest = 0, None
        for ref, tip in local.items():
            done = pushed.get(ref)
            if done == tip:
                continue
            behind += 1
            floor = store.commit_info(done).time if done else float("-inf")
            for info in store.first_parents(tip):  # the checkpoints newer than what was pushed
                if info.hex == done or info.time <= floor:
                    break
                oldest = info.time if oldest is None else min(oldest, info.time)
        out.append(ReplicationStatus(
            remote.name, remote.url, behind, None if oldest is None else max(0.0, now - oldest),
            state.get("last_success"), state.get("last_attempt"), state.get("last_error"),
            int(state.get("failures") or 0)))
    return out


class Replication:
    """The replicators of one open store (a :class:`qvc.store.git_store.Service`)."""

    def __init__(self, store: GitCheckpointStore, replicators: list[Replicator]):
        self.replicators = replicators
        for replicator in replicators:
            store.repository.listeners.append(replicator.notify)

    def close(self) -> None:
        """Close every replicator (each makes its bounded final attempt)."""
        for replicator in self.replicators:
            replicator.close()


def start(store: GitCheckpointStore) -> Replication | None:
    """Start one :class:`Replicator` per remote with replication on; ``None`` when there is none.

    Registered in :data:`qvc.store.git_store.SERVICES`, so every writable store runs it."""
    found = replicated_remotes(store)
    return Replication(store, [Replicator(store, remote) for remote in found]) if found else None
