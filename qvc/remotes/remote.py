"""Remotes: any git server holds a qvc repository's history.

**What a push carries.** For each thread: its branch ``refs/heads/<thread>``, the lines time
travel left behind (``refs/qvc/superseded/<thread>/<sha>``) and the pending writes of its
checkpoints (``refs/qvc/writes/<sha>``); a push of every thread also carries every other ref
under ``refs/qvc/`` and ``refs/notes/``. Refs keep their names on the remote, so plain git
on the server sees one branch per thread. A push never deletes anything on the remote.

**Ref mapping on fetch.** A remote's threads become ``refs/remotes/<remote>/<thread>``
(``REMOTE/THREAD`` in revisions: ``qvc log origin/t``, ``qvc checkout -b mine origin/t``), its
other qvc refs ``refs/qvc/remotes/<remote>/<namespace>/...``. Pending writes are keyed by the
checkpoint's commit, which is the same everywhere, so fetched pending writes are also merged
into ``refs/qvc/writes/`` (new ones, and fast-forwards of local ones): a fetched checkpoint
shows them. A clone makes the remote's refs local refs outright.

**Never clobbering.** A push first reads the remote's refs (one ``ls-remote``) and sends only
refs that differ. New refs and fast-forwards are plain (non-forced) updates: git and the
server refuse them if the remote ref moved meanwhile. A thread whose remote head is not an
ancestor of the local head (time travel rewound it) is pushed only if that remote head is kept
by one of the thread's superseded lines, which goes first (a head whose line was refused stays
unpushed), and with ``--force-with-lease=<ref>:<value read>``, so the server refuses it if
anyone moved the ref meanwhile: the remote never loses a line. A remote head this repository
has never seen (another machine's checkpoints) is a conflict for that ref, reported with the
reason, never overwritten.

**Bounded time.** A push of every thread is two git runs (superseded lines, pending writes and
notes first, then heads), each naming namespaces as globs (``refs/heads/*:refs/heads/*``, with
``^ref`` exclusions for refused refs): git then skips unchanged refs itself and sends one pack
of what changed. A push of chosen threads names refs explicitly, in git runs of at most
``CHUNK`` refspecs. (git matches each explicit refspec against every local ref, so explicit
lists cost refspecs x refs: 1.3 s for 500 refspecs in a repository of 1,000 threads, against
0.35 s for the whole repository as globs; see ``benchmarks/bench_remotes.py``.)

Transport is the ``git`` executable (see :mod:`qvc.remotes.transfer` for why).
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import os
import re
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Iterable, Optional

from qvc.errors import (
    CheckpointConflictError,
    CorruptionError,
    InvalidInputError,
    NotARepositoryError,
    PushRejectedError,
    QvcError,
    RemoteError,
    RemoteStorageError,
    SignatureError,
    UnknownRemoteError,
    UnknownThreadError,
)
from qvc.plumbing import launcher
from qvc.plumbing.durability import harden
from qvc.plumbing.locking import open_lock_file, try_flock, wait_flock
from qvc.remotes.transfer import (
    ProgressCallback,
    TransferProgress,
    ls_remote,
    parse_porcelain,
    remote_head,
    run_git,
)
from qvc.store.git_store import GitCheckpointStore
from qvc.store.refnames import (
    HEADS,
    INCOMING,
    NOTES,
    REMOTE_NAME,
    REMOTE_QVC,
    REMOTES,
    SUPERSEDED,
    WRITES,
    decode_thread,
    encode_pattern,
    encode_thread,
    head_ref,
    superseded_prefix,
)
from qvc.store.writes import writes_commit

CHUNK = 500  # refspecs per git run
_CLONE_PREFIX = ".qvc-clone-"  # a clone's work folder next to its destination
_NAMESPACES = ("superseded", "writes", "rewrites")  # refs/qvc/<ns>/ fetched into refs/qvc/remotes/<remote>/<ns>/


@dataclass(frozen=True)
class Remote:
    """A configured remote: its name, URL and whether writes replicate to it automatically."""

    name: str
    url: str
    replicate: bool = False


@dataclass
class RefUpdate:
    """What happened to one ref on the remote.

    ``status``: ``new``, ``fast-forward``, ``forced`` (time travel, the old line kept by a
    superseded ref), ``up-to-date`` or ``rejected``; ``reason`` says why a ref was rejected
    (the server's words when the server refused it).
    """

    ref: str
    thread: str | None
    old: str | None
    new: str | None
    status: str
    reason: str | None = None


@dataclass
class PushResult:
    """Every ref a push considered, and what it sent (objects and bytes, from git's progress)."""

    remote: str
    url: str
    updates: list[RefUpdate] = field(default_factory=list)
    objects: int = 0
    bytes: int = 0
    chunks: int = 0

    @property
    def rejected(self) -> list[RefUpdate]:
        return [u for u in self.updates if u.status == "rejected"]

    @property
    def pushed(self) -> list[RefUpdate]:
        return [u for u in self.updates if u.status in ("new", "fast-forward", "forced")]

    def to_json(self) -> dict:
        return {"remote": self.remote, "url": self.url, "pushed": len(self.pushed),
                "up_to_date": sum(u.status == "up-to-date" for u in self.updates), "rejected": len(self.rejected),
                "objects": self.objects, "bytes": self.bytes, "chunks": self.chunks,
                "updates": [asdict(u) for u in self.updates if u.status != "up-to-date"]}


@dataclass
class FetchResult:
    """What a fetch changed: remote-tracking refs (``updates``) and pending writes merged locally.

    ``conflicts`` lists pending writes of a checkpoint that differ here and on the remote
    (neither descends from the other); the local ones are kept, the remote's stay under
    ``refs/qvc/remotes/<remote>/writes/``.
    """

    remote: str
    url: str
    threads: list[str] = field(default_factory=list)
    updates: list[RefUpdate] = field(default_factory=list)
    writes_merged: int = 0
    conflicts: list[RefUpdate] = field(default_factory=list)
    objects: int = 0
    bytes: int = 0

    def to_json(self) -> dict:
        return {"remote": self.remote, "url": self.url, "threads": self.threads, "objects": self.objects,
                "bytes": self.bytes, "writes_merged": self.writes_merged,
                "updates": [asdict(u) for u in self.updates], "conflicts": [asdict(u) for u in self.conflicts]}


# -- configuration ----------------------------------------------------------------------------


def _config(path: str, *args: str, check: bool = True) -> str:
    proc = launcher.run(path, ["config", *args], user_config=False, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RemoteError(f"git config {' '.join(args)} failed: {proc.stderr.strip() or proc.returncode}")
    return proc.stdout


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not REMOTE_NAME.match(name) or name.endswith((".lock", ".")) or ".." in name:
        raise InvalidInputError(f"invalid remote name {name!r}: use letters, digits, '.', '_' and '-'")
    return name


def _normalize_url(url: str) -> str:
    if not isinstance(url, str) or not url or url.startswith("-") or "\n" in url or "\0" in url:
        # a leading '-' would reach git as an option (--upload-pack=..., -oProxyCommand=...)
        raise InvalidInputError(f"invalid remote URL {url!r}")
    if "://" not in url and not re.match(r"^[^/]+:", url):  # a local path (not host:path)
        return os.path.abspath(url)
    return url


def fetch_refspecs(name: str) -> list[str]:
    """Where a fetch from remote ``name`` puts each namespace (also written to its git config)."""
    return ([f"+{HEADS}*:{REMOTES}{name}/*"]
            + [f"+refs/qvc/{ns}/*:{REMOTE_QVC}{name}/{ns}/*" for ns in _NAMESPACES]
            + [f"+{NOTES}*:{REMOTE_QVC}{name}/notes/*"])


def remotes(store: GitCheckpointStore) -> list[Remote]:
    """The configured remotes, sorted by name."""
    found: dict[str, dict[str, str]] = {}
    text = _config(store.path, "--get-regexp", r"^remote\..*\.(url|qvcreplicate)$", check=False)
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        section, _, var = key.rpartition(".")
        found.setdefault(section[len("remote."):], {})[var] = value
    return [Remote(n, v["url"], v.get("qvcreplicate") == "true") for n, v in sorted(found.items()) if "url" in v]


def get_remote(store: GitCheckpointStore, name: str) -> Remote:
    """The remote called ``name``; :class:`UnknownRemoteError` if there is none."""
    for remote in remotes(store):
        if remote.name == name:
            return remote
    known = ", ".join(r.name for r in remotes(store)) or "none configured"
    raise UnknownRemoteError(f"no remote named {name!r} (remotes: {known}; add one with `qvc remote add`)")


def add_remote(store: GitCheckpointStore, name: str, url: str, *, replicate: bool = False) -> Remote:
    """Configure remote ``name`` at ``url`` (a path, ``git://``, ``ssh://``, ``host:path``, ``http(s)://``).

    ``replicate=True`` makes writing stores push every thread to it in the background (see
    :mod:`qvc.remotes.replication`). Raises :class:`InvalidInputError` for a bad name or URL and
    :class:`~qvc.errors.CheckpointConflictError` if the name is taken.
    """
    _check_name(name)
    url = _normalize_url(url)
    if any(r.name == name for r in remotes(store)):
        raise CheckpointConflictError(f"remote {name!r} already exists")
    _config(store.path, f"remote.{name}.url", url)
    for spec in fetch_refspecs(name):
        _config(store.path, "--add", f"remote.{name}.fetch", spec)
    _config(store.path, f"remote.{name}.tagOpt", "--no-tags")
    if replicate:
        _config(store.path, f"remote.{name}.qvcReplicate", "true")
    return Remote(name, url, replicate)


def set_replicate(store: GitCheckpointStore, name: str, replicate: bool) -> Remote:
    """Turn automatic replication to remote ``name`` on or off (stores opened later follow it)."""
    remote = get_remote(store, name)
    if replicate:
        _config(store.path, f"remote.{name}.qvcReplicate", "true")
    else:
        _config(store.path, "--unset", f"remote.{name}.qvcReplicate", check=False)
    return Remote(remote.name, remote.url, replicate)


def remove_remote(store: GitCheckpointStore, name: str) -> None:
    """Forget remote ``name``: its configuration and remote-tracking refs (nothing on the server)."""
    get_remote(store, name)
    _config(store.path, "--remove-section", f"remote.{name}")
    repo = store.repository
    with repo.transaction() as tx:
        for prefix in (f"{REMOTES}{name}/", f"{REMOTE_QVC}{name}/"):
            for ref, tip in list(repo.refs(prefix)):
                tx.move_ref(ref, tip, None)
    state = os.path.join(repo.qvc_dir, f"replication-{name}.json")
    if os.path.exists(state):
        os.remove(state)


def set_upstream(store: GitCheckpointStore, thread: str, remote: str) -> None:
    """Record ``remote`` as ``thread``'s upstream, as ``git push -u`` does (``branch.<thread>.remote``
    and ``.merge`` in the repository's git config): :func:`upstream` reads it back."""
    component = encode_thread(thread)
    _config(store.path, f"branch.{component}.remote", remote)
    _config(store.path, f"branch.{component}.merge", HEADS + component)


def upstream(store: GitCheckpointStore, thread: str | None) -> str | None:
    """The remote recorded as ``thread``'s upstream (:func:`set_upstream`), or ``None``."""
    if thread is None:
        return None
    return _config(store.path, "--get", f"branch.{encode_thread(thread)}.remote", check=False).strip() or None


def _resolve(store: GitCheckpointStore, remote: str) -> tuple[str, str, bool]:
    """``(display name, url, named)`` for a remote name or a URL."""
    if REMOTE_NAME.match(remote or ""):
        try:  # a configured remote wins over a directory of the same name, as in git
            found = get_remote(store, remote)
        except UnknownRemoteError:
            if not os.path.exists(remote):
                raise
        else:
            return found.name, found.url, True
    return remote, _normalize_url(remote), False


# -- push -------------------------------------------------------------------------------------


def pushable(name: str) -> bool:
    """Whether a push carries ref ``name``: thread heads, notes and qvc's own refs (superseded
    lines, pending writes, rewrite records), never remote-tracking refs nor a fetch's quarantine."""
    return name.startswith((HEADS, NOTES)) or (name.startswith("refs/qvc/")
                                                and not name.startswith((REMOTE_QVC, INCOMING)))


def _selected_refs(store: GitCheckpointStore, threads: Optional[Iterable[str]]) -> dict[str, str]:
    repo = store.repository
    if threads is None:
        return {name: tip for name, tip in repo.refs("refs/") if pushable(name)}
    wanted = list(dict.fromkeys(threads))
    refs: dict[str, str] = {}
    for thread in wanted:
        head = store.head(thread)
        lines = dict(repo.refs(superseded_prefix(thread)))
        if head is None and not lines:
            raise UnknownThreadError(f"thread {thread!r} has no checkpoints")
        if head is not None:
            refs[head_ref(thread)] = head
        refs.update(lines)
    names = set(wanted)
    for name, tip in repo.refs(WRITES):
        try:
            # keyed by a commit SHA (resolve takes a checkpoint id too); an opaque key names no checkpoint
            if store.commit_info(store.resolve(name[len(WRITES):])).thread_id in names:
                refs[name] = tip
        except QvcError:  # a writes ref whose checkpoint is gone (or not a commit): not this thread's
            continue
    return refs


def _thread_of(store: GitCheckpointStore, ref: str) -> str | None:
    if ref.startswith(HEADS):
        return store.thread_of_ref(ref)
    if ref.startswith(SUPERSEDED):
        return decode_thread(ref[len(SUPERSEDED):].split("/")[0])
    return None


def _descends(store: GitCheckpointStore, commit: str, ancestor: str) -> bool:
    try:
        return store.descends(commit, ancestor)
    except (CorruptionError, ValueError):  # an object this repository does not have
        return False


def _known(store: GitCheckpointStore, sha: str) -> bool:
    try:
        return store.repository.has(bytes.fromhex(sha))
    except ValueError:
        return False


def push(store: GitCheckpointStore, remote: str = "origin", threads: Optional[Iterable[str]] = None, *,
         progress: Optional[ProgressCallback] = None, chunk: int = CHUNK, interactive: bool = False,
         timeout: Optional[float] = None, remote_refs: Optional[dict[str, str]] = None,
         force: bool = False, force_with_lease: bool = False) -> PushResult:
    """Push threads (default: every thread and every other qvc ref) to ``remote`` (a name or URL).

    Only refs that differ from the remote's are sent (see the module docstring: namespace
    globs for a push of everything, explicit refspecs in runs of at most ``chunk`` for chosen
    threads; forced updates leased on the value the remote advertised). Returns a
    :class:`PushResult` when every ref was pushed or already up to date.

    Raises :class:`PushRejectedError` (a :class:`CheckpointConflictError`) carrying the
    result when any ref was rejected, by the server (its reason: non-fast-forward denied,
    hook declined, permissions, stale lease) or here (the remote's thread holds checkpoints
    this repository has never seen); every other ref was still pushed.
    :class:`RemoteError` when the remote cannot be reached or read at all,
    :class:`~qvc.errors.RemoteStorageError` (a :class:`~qvc.errors.StorageError` too) when the
    remote's disk is full (git reports only "unpacker error" per ref; the refs sent before stay),
    :class:`UnknownRemoteError` for an unknown name, :class:`UnknownThreadError` for a
    thread with no checkpoints. ``remote_refs`` (the remote's refs, if the caller just read
    them) saves the ``ls-remote`` round trip.

    As git refuses a non-fast-forward, a thread whose push would undo a time travel on the
    remote (its new head carries checkpoints of a line the remote keeps as superseded, that the
    remote's head does not reach: the remote rewound the thread, this repository did not
    follow) is rejected, and so is a remote head that is no ancestor and kept by no local
    superseded line. ``force`` pushes both anyway; the remote's head is kept as one of the
    thread's superseded lines there (pushed first), so the remote still loses no line.
    ``force_with_lease`` does so only for refs whose remote value is the one the last fetch
    or push recorded (``REMOTE/THREAD``); a remote head that moved since is rejected ("stale").
    A remote head this repository has never seen is rejected even with ``force``.
    """
    if not isinstance(chunk, int) or chunk < 1:
        raise InvalidInputError(f"chunk must be a positive integer, not {chunk!r}")
    name, url, named = _resolve(store, remote)
    local = _selected_refs(store, threads)
    result = PushResult(name, url)
    state = TransferProgress("push", name)
    if remote_refs is None:
        remote_refs = ls_remote(store.path, url, interactive=interactive, timeout=timeout)
    ordered = sorted(local, key=lambda ref: (ref.startswith(HEADS), ref))  # lines and writes before heads
    plans: list[RefUpdate] = []
    kept: list[RefUpdate] = []  # remote heads a forced push keeps as superseded lines there
    remote_lines: dict[str, list[str]] = {}  # the remote's superseded lines, by their thread's prefix
    for ref, tip in remote_refs.items():
        if ref.startswith(SUPERSEDED):
            remote_lines.setdefault(ref[:ref.rindex("/") + 1], []).append(tip)
    for ref in ordered:
        new, old = local[ref], remote_refs.get(ref)
        update = RefUpdate(ref, _thread_of(store, ref), old, new, "up-to-date")
        result.updates.append(update)
        if old == new:
            continue
        overriding = force or (force_with_lease and named and old == store.repository.ref(
            _tracking_name(name, ref) or ref))
        if old is None:
            update.status = "new"
        elif not _known(store, old):
            update.status, update.reason = "rejected", (
                f"the remote's {ref} is at {old[:12]}, which this repository has never seen "
                f"(another repository pushed it): fetch, then fork it or push under another thread name")
            continue
        elif force_with_lease and not overriding and not _descends(store, new, old):
            update.status, update.reason = "rejected", (
                f"stale info: the remote's {ref} is at {old[:12]}, not where the last fetch left "
                f"{name}/{update.thread or ref}: fetch first")
            continue
        elif ref.startswith(HEADS) and update.thread is not None and not overriding and (
                undone := _undone_line(store, update.thread, new, old,
                                       remote_lines.get(superseded_prefix(update.thread), []))):
            update.status, update.reason = "rejected", (
                f"stale info: the remote's {ref} is at {old[:12]}, not where the last fetch left "
                f"{name}/{update.thread} (it was time-travelled back there): fetch first" if force_with_lease else
                f"the remote's {update.thread} was time-travelled back to {old[:12]} (the line through "
                f"{undone[:12]} is kept there as superseded); pushing would undo that: follow it with "
                f"`qvc reset --hard {name}/{update.thread}` on that thread, or push --force to undo it")
            continue
        elif _descends(store, new, old):
            update.status = "fast-forward"
        elif ref.startswith(HEADS) and update.thread is not None and any(
                _descends(store, tip, old) for r, tip in local.items()
                if r.startswith(superseded_prefix(update.thread))):
            update.status = "forced"  # time travel: the remote's line is kept by a superseded ref we push
        elif ref.startswith(HEADS) and update.thread is not None and overriding:
            update.status = "forced"  # --force: the remote's line is kept as a superseded line there
            line = superseded_prefix(update.thread) + old
            if remote_refs.get(line) != old:
                kept.append(RefUpdate(line, update.thread, remote_refs.get(line), old, "new"))
        else:
            update.status, update.reason = "rejected", (
                f"the remote's {ref} is at {old[:12]}, not an ancestor of {new[:12]} and kept by no superseded "
                f"line here: fetch first")
            continue
        plans.append(update)
    result.updates += kept
    plans += kept
    phases = [[u for u in plans if not u.ref.startswith(HEADS)], [u for u in plans if u.ref.startswith(HEADS)]]
    if threads is None:  # everything: one git run per phase, namespaces as globs (git skips unchanged refs)
        batches = [(phase, True) for phase in phases]
    else:
        batches = [(phase[i:i + chunk], False) for phase in phases for i in range(0, len(phase), chunk)]
    batches = [b for b in batches if b[0]]
    state.chunks = len(batches)
    failed_lines: set[str] = set()
    full = None  # the server's words when its disk is full
    try:
        for number, (batch, globs) in enumerate(batches, 1):
            state.chunk = number
            for update in batch:  # a forced head whose kept line did not reach the remote waits
                if update.status == "forced" and update.thread in failed_lines:
                    update.status, update.reason = "rejected", "its superseded line was not pushed (see that ref)"
            send = [u for u in batch if u.status != "rejected"]
            if not send:
                continue
            heads = send[0].ref.startswith(HEADS)
            if globs:
                specs = _globs(local, heads) + [f"^{u.ref}" for u in result.updates
                                                if u.status == "rejected" and u.ref.startswith(HEADS) == heads]
                specs += [f"{u.new}:{u.ref}" for u in send if u in kept]
            else:
                specs = [f"{u.new}:{u.ref}" for u in send]
            leases = [f"--force-with-lease={u.ref}:{u.old}" for u in send if u.status == "forced"]
            run = run_git(store.path, ["push", "--porcelain", "--progress", "--no-verify", *leases, "--",
                                       url if not named else name, *specs],
                          interactive=interactive, progress=progress, state=state, timeout=timeout)
            result.chunks += 1
            result.objects += run.objects
            result.bytes += run.bytes
            lines = parse_porcelain(run.stdout)
            if run.returncode != 0 and run.no_space() is not None:  # git says "unpacker error" per ref
                full = run.no_space()
                for update in send:
                    update.status, update.reason = "rejected", "the remote's disk is full"
                break
            if not lines and run.returncode != 0:
                raise RemoteError(f"push to {name} failed: {run.failure()}")
            for update in send:
                line = lines.get(update.ref)
                if line is None:
                    update.status, update.reason = "rejected", f"git did not report this ref ({run.failure()})"
                elif line.flag == "!":
                    update.status, update.reason = "rejected", line.reason or line.summary
                elif line.flag == "=":
                    update.status = "up-to-date"
                if update.status == "rejected" and update.ref.startswith(SUPERSEDED) and update.thread:
                    failed_lines.add(update.thread)
    finally:
        if progress is not None:
            state.done = True
            progress(state)
    if named:
        _track(store, name, [u for u in result.updates if u.status != "rejected"])
    if full is not None:
        raise RemoteStorageError(f"push to {name} failed: remote: no space left on device ({full}); "
                                 f"{len(result.pushed)} ref(s) pushed before it", _full_errno(full), url)
    if result.rejected:
        first = result.rejected[0]
        more = f" (and {len(result.rejected) - 1} more)" if len(result.rejected) > 1 else ""
        raise PushRejectedError(f"push to {name} rejected {first.ref}: {first.reason}{more}", result)
    return result


def _full_errno(text: str) -> int:
    """``EDQUOT`` when the server's words say a quota, else ``ENOSPC``."""
    return errno.EDQUOT if os.strerror(errno.EDQUOT) in text else errno.ENOSPC


def _undone_line(store: GitCheckpointStore, thread: str, new: str, old: str, tips: list[str]) -> str | None:
    """The superseded line on the remote (its tip) that pushing ``new`` over the remote head
    ``old`` of ``thread`` would bring back, or ``None``: a checkpoint of ``new``'s line that
    ``old`` does not reach but one of the remote's superseded lines of that thread (``tips``) does, unless
    the thread was rewound to ``old`` here (its reflog says so: a deliberate step forward again).
    Threads never merge, so ``new``'s own checkpoints are its first parents back to ``old``'s line."""
    lines = [tip for tip in tips if _known(store, tip) and not _descends(store, old, tip)]
    if not lines or any(e.new == old and e.old not in (None, old) and _descends(store, e.old, old)
                        for e in store.reflog(thread)):
        return None  # nothing to undo, or the time travel was made here: moving on from it is deliberate
    try:
        for info in store.first_parents(new):
            if _descends(store, old, info.hex):
                return None
            for tip in lines:
                if _descends(store, tip, info.hex):
                    return tip
    except CorruptionError:  # a line that does not read here: nothing to tell
        return None
    return None


def _globs(local: dict[str, str], heads: bool) -> list[str]:
    """Refspecs that push every local ref of one phase by namespace (``refs/qvc/<ns>/*``, ``refs/notes/*``)."""
    if heads:
        return [f"{HEADS}*:{HEADS}*"]
    out = set()
    for ref in local:
        if ref.startswith(HEADS):
            continue
        parts = ref.split("/")
        if ref.startswith(NOTES):
            out.add(f"{NOTES}*:{NOTES}*")
        elif len(parts) > 3:
            out.add(f"refs/qvc/{parts[2]}/*:refs/qvc/{parts[2]}/*")
        else:
            out.add(f"{ref}:{ref}")
    return sorted(out)


def _track(store: GitCheckpointStore, name: str, updates: list[RefUpdate]) -> None:
    """Record what the remote now holds in the remote-tracking refs (as a fetch would)."""
    with store.repository.transaction() as tx:
        for u in updates:
            dst = _tracking_name(name, u.ref)
            if dst is None or u.new is None:
                continue
            cur = tx.ref(dst)
            if cur != u.new:
                tx.move_ref(dst, cur, u.new)


def _tracking_name(name: str, ref: str) -> str | None:
    if ref.startswith(HEADS):
        return f"{REMOTES}{name}/{ref[len(HEADS):]}"
    for ns in _NAMESPACES:
        if ref.startswith(f"refs/qvc/{ns}/"):
            return f"{REMOTE_QVC}{name}/{ns}/{ref[len(f'refs/qvc/{ns}/'):]}"
    if ref.startswith(NOTES):
        return f"{REMOTE_QVC}{name}/notes/{ref[len(NOTES):]}"
    return None


# -- fetch ------------------------------------------------------------------------------------


def _tracking(store: GitCheckpointStore, name: str) -> dict[str, str]:
    repo = store.repository
    return dict(repo.refs(f"{REMOTES}{name}/")) | dict(repo.refs(f"{REMOTE_QVC}{name}/"))


def remote_threads(store: GitCheckpointStore, name: str) -> list[str]:
    """The threads of remote ``name`` as last fetched or pushed, sorted."""
    out = []
    for ref, tip in store.repository.refs(f"{REMOTES}{name}/"):
        component = ref[len(f"{REMOTES}{name}/"):]
        thread = decode_thread(component)
        if thread is None:
            try:
                thread = store.commit_info(tip).thread_id or component
            except QvcError:  # not a checkpoint commit (the remote holds refs no qvc wrote)
                thread = component
        out.append(thread)
    return sorted(out)


def _writes_of(repo_path: str, url: str, tips: list[str], *, interactive: bool = False,
               timeout: Optional[float] = None) -> list[str]:
    """The ``refs/qvc/writes/<sha>`` the remote holds for commits reachable from ``tips`` (here)."""
    if not tips:
        return []
    run = run_git(repo_path, ["rev-list", *sorted(set(tips)), "--"], timeout=timeout)
    if run.returncode != 0:
        raise RemoteError(f"cannot walk the fetched lines: {run.failure()}")
    shas = run.stdout.split()
    found: list[str] = []
    for i in range(0, len(shas), CHUNK):
        ls = run_git(repo_path, ["ls-remote", "--", url, *(WRITES + sha for sha in shas[i:i + CHUNK])],
                     interactive=interactive, timeout=timeout)
        if ls.returncode != 0:
            raise RemoteError(f"cannot read remote {url}: {ls.failure()}")
        found += [line.partition("\t")[2] for line in ls.stdout.splitlines() if "\t" in line]
    return sorted(set(found))


def _superseded_of(repo_path: str, url: str, components: set[str], *, interactive: bool = False,
                   timeout: Optional[float] = None) -> list[str]:
    """The remote's superseded lines (``refs/qvc/superseded/<component>/<sha>``) of those threads."""
    ls = run_git(repo_path, ["ls-remote", "--", url, f"{SUPERSEDED}*"], interactive=interactive, timeout=timeout)
    if ls.returncode != 0:
        raise RemoteError(f"cannot read remote {url}: {ls.failure()}")
    refs = [line.partition("\t")[2] for line in ls.stdout.splitlines() if "\t" in line]
    return sorted(r for r in refs if r[len(SUPERSEDED):].rsplit("/", 1)[0] in components)


def _fetch_chunks(repo_path: str, url: str, refspecs: list[str], **options) -> tuple[int, int]:
    """Run ``git fetch`` of explicit refspecs, ``CHUNK`` at a time; (objects, bytes) received."""
    objects = size = 0
    for i in range(0, len(refspecs), CHUNK):
        run = run_git(repo_path, ["fetch", "--no-tags", "--progress", "--no-write-fetch-head", "--", url,
                                  *refspecs[i:i + CHUNK]], **options)
        if run.returncode != 0:
            raise RemoteError(f"fetch from {url} failed: {run.failure()}")
        objects, size = objects + run.objects, size + run.bytes
    return objects, size


def fetch(store: GitCheckpointStore, remote: str = "origin", threads: Optional[Iterable[str]] = None, *,
          progress: Optional[ProgressCallback] = None, interactive: bool = False,
          timeout: Optional[float] = None, refetch: bool = False) -> FetchResult:
    """Fetch every thread, superseded line, pending write and note of remote ``remote`` (a name);
    with ``threads``, only those threads, their superseded lines and the pending writes of the
    checkpoints their lines hold (a few runs from a server holding many: the rest is not sent).
    ``refetch``: every object again, as a new clone would (git's ``fetch --refetch``, git 2.36+),
    not only what the local refs lack: what restores objects lost locally (then :meth:`gc`).

    Remote-tracking refs follow the remote exactly (refs it deleted are dropped; with
    ``threads``, only among those threads'); pending writes are merged into the local ones
    (see :class:`FetchResult`). The fetched objects and refs are durable on return. Raises
    :class:`UnknownRemoteError`, :class:`UnknownThreadError` (a thread the remote does not
    have) and :class:`RemoteError`.
    """
    name, url, named = _resolve(store, remote)
    if not named:
        raise InvalidInputError(f"fetch needs a configured remote (`qvc remote add NAME {url}`), not a URL")
    repo = store.repository
    state = TransferProgress("fetch", name)
    components = None if threads is None else [encode_thread(t) for t in dict.fromkeys(threads)]
    if components is not None:
        refspecs = [f"+{HEADS}{c}:{REMOTES}{name}/{c}" for c in components]
        refspecs += [f"+{SUPERSEDED}{c}/*:{REMOTE_QVC}{name}/superseded/{c}/*" for c in components]
        if components:
            ls = run_git(store.path, ["ls-remote", "--heads", "--", url, *(HEADS + c for c in components)],
                         interactive=interactive, timeout=timeout)
            if ls.returncode != 0:
                raise RemoteError(f"cannot read remote {url}: {ls.failure()}")
            there = {line.partition("\t")[2][len(HEADS):] for line in ls.stdout.splitlines()}
            missing = [c for c in components if c not in there]
            if missing:
                raise UnknownThreadError(f"remote {name} has no thread {decode_thread(missing[0]) or missing[0]!r}")
    else:
        refspecs = fetch_refspecs(name)
    # A repository that requires signatures fetches into a quarantine (refs/qvc/incoming/<remote>/)
    # and moves its remote-tracking refs only once every new commit verifies (_admit).
    quarantine = f"{INCOMING}{name}/" if repo.signatures_required else None
    into = (lambda specs: specs) if quarantine is None else (lambda specs: [_into(s, quarantine) for s in specs])
    try:
        # Outside any transaction (no writer waits for the network): the shared maintenance lock
        # keeps gc out while git adds objects and moves remote-tracking refs, which qvc never stages.
        with repo.writing():
            before = _tracking(store, name)
            moves: list[tuple[str, str | None, str | None]] = []
            try:
                run = run_git(store.path, ["fetch", *(["--prune"] if quarantine is None else []), "--no-tags",
                                           *(["--refetch"] if refetch else []),
                                           "--progress", "--no-write-fetch-head", "--", url, *into(refspecs)],
                              interactive=interactive, progress=progress, state=state, timeout=timeout)
                if components and run.returncode == 0:  # then the pending writes of what arrived
                    arrived = f"{REMOTES}{name}/" if quarantine is None else f"{quarantine}remotes/{name}/"
                    lines = f"{REMOTE_QVC}{name}/superseded/" if quarantine is None else \
                        f"{quarantine}qvc/remotes/{name}/superseded/"
                    tips = [tip for ref, tip in repo.refs(arrived) if ref[len(arrived):] in set(components)]
                    tips += [tip for c in components for _, tip in repo.refs(f"{lines}{c}/")]
                    writes = _writes_of(store.path, url, tips, interactive=interactive, timeout=timeout)
                    more = _fetch_chunks(store.path, url, into([f"+{w}:{REMOTE_QVC}{name}/writes/{w[len(WRITES):]}"
                                                                for w in writes]), interactive=interactive,
                                         timeout=timeout)
                    run.objects, run.bytes = run.objects + more[0], run.bytes + more[1]
            finally:  # what git moved (also when it failed part-way)
                if quarantine is None:
                    after = _tracking(store, name)
                    moves = [(ref, before.get(ref), after.get(ref)) for ref in sorted(set(before) | set(after))
                             if before.get(ref) != after.get(ref)]
            harden(store.path, fsync=repo.fsync)  # git's objects and refs, before the listeners hear of them
        if quarantine is not None:
            moves = _admit(store, name, quarantine, refspecs if run.returncode == 0 else [])
        elif moves:  # also when git failed part-way
            with repo.transaction() as tx:  # the store's listeners (caches, replication) follow git's moves
                tx.record_moves(moves)
        if run.returncode != 0:
            raise RemoteError(f"fetch from {name} failed: {run.failure()}")
    finally:
        if progress is not None:
            state.done = True
            progress(state)
    result = FetchResult(name, url, remote_threads(store, name), objects=run.objects, bytes=run.bytes)
    for ref, old, new in moves:
        status = "new" if old is None else "deleted" if new is None else (
            "fast-forward" if _descends(store, new, old) else "forced")
        result.updates.append(RefUpdate(ref, None, old, new, status))
    _merge_writes(store, name, result)
    return result


def _into(refspec: str, quarantine: str) -> str:
    """``refspec`` with its destination moved under ``quarantine`` (``refs/X`` -> ``<quarantine>X``)."""
    force = "+" if refspec.startswith("+") else ""
    src, _, dst = refspec.removeprefix("+").partition(":")
    return f"{force}{src}:{quarantine}{dst.removeprefix('refs/')}"


def _admit(store: GitCheckpointStore, name: str, quarantine: str,
           refspecs: list[str]) -> list[tuple[str, str | None, str | None]]:
    """Move the remote-tracking refs to what a fetch left in ``quarantine`` if every commit it
    brought verifies against the allowed signers (:func:`qvc.readers.verify.unverified`), pruning
    the refs ``refspecs``' destinations cover that did not arrive (none when ``refspecs`` is
    empty: a failed fetch); the quarantine is emptied whatever happens. Returns the moves.
    Raises :class:`SignatureError` (nothing moved) when a commit does not verify."""
    from qvc.readers.verify import unverified  # deferred: only a repository requiring signatures needs it

    repo = store.repository
    incoming = dict(repo.refs(quarantine))
    try:
        if not incoming:
            return []
        new = run_git(store.path, ["rev-list", *dict.fromkeys(incoming.values()), "--not",
                                   f"--exclude={quarantine}*", "--all"])
        if new.returncode != 0:
            raise RemoteError(f"fetch from {name}: cannot list what arrived: {new.failure()}")
        problems = unverified(store, new.stdout.split())
        if problems:
            raise SignatureError(f"fetch from {name} refused: {len(problems)} commit(s) do not verify against "
                                 f"{store.path}/qvc/allowed_signers (qvc.requireSignatures), nothing moved; "
                                 f"{problems[0]}")
        target = {"refs/" + ref[len(quarantine):]: tip for ref, tip in incoming.items()}
        current = _tracking(store, name)
        covered = [spec.removeprefix("+").partition(":")[2] for spec in refspecs]
        moves = [(ref, current.get(ref), tip) for ref, tip in sorted(target.items()) if current.get(ref) != tip]
        moves += [(ref, tip, None) for ref, tip in sorted(current.items())
                  if ref not in target and any(fnmatch.fnmatchcase(ref, pattern) for pattern in covered)]
        with repo.transaction() as tx:
            for ref, old, tip in moves:
                tx.move_ref(ref, old, tip, f"fetch: {name}")
        return moves
    finally:
        with repo.transaction() as tx:
            for ref, tip in incoming.items():
                tx.move_ref(ref, tip, None)


def _merge_writes(store: GitCheckpointStore, name: str, result: FetchResult) -> None:
    repo = store.repository
    prefix = f"{REMOTE_QVC}{name}/writes/"
    with repo.transaction() as tx:
        for ref, theirs in repo.refs(prefix):
            local = WRITES + ref[len(prefix):]
            ours = tx.ref(local)
            if ours == theirs or (ours is not None and _descends(store, ours, theirs)):
                continue
            problem = _unreadable_writes(store, ref[len(prefix):], theirs)
            if problem:  # a hostile or broken remote: taking it in would make the checkpoint unreadable here
                result.conflicts.append(RefUpdate(local, None, ours, theirs, "rejected",
                                                  f"the remote's pending writes do not read: {problem}"))
                continue
            if ours is None or _descends(store, theirs, ours):
                tx.move_ref(local, ours, theirs)
                result.writes_merged += 1
            else:
                result.conflicts.append(RefUpdate(local, None, ours, theirs, "rejected",
                                                  "pending writes differ here and on the remote; kept the local ones"))


def _unreadable_writes(store: GitCheckpointStore, key: str, tip: str) -> str | None:
    """Why the writes ref keyed by ``key`` at ``tip`` does not read (``None``: it does): the store's
    pending writes must decode; an opaque writes ref (:func:`qvc.store.writes.writes_commit`) needs a commit
    and tree that read."""
    try:
        if writes_commit(key) is not None:
            store.pending_writes_in(tip)
        else:
            store.tree_entries(tip)
    except QvcError as exc:
        return str(exc)
    return None


# -- clone ------------------------------------------------------------------------------------


def clone(url: str, path: str | os.PathLike, *, remote: str = "origin", progress: Optional[ProgressCallback] = None,
          interactive: bool = False, durability: str = "sync", threads: Optional[Iterable[str]] = None,
          allowed_signers: str | os.PathLike | None = None) -> GitCheckpointStore:
    """Make a new repository at ``path`` holding everything the remote at ``url`` holds; with
    ``threads`` (patterns: thread ids with at most one ``*``, see
    :func:`~qvc.store.refnames.encode_pattern`), only the matching threads, their superseded
    lines and the pending writes of their checkpoints (notes and other refs stay behind).

    Its threads, superseded lines, pending writes and notes are local refs, the remote is
    configured as ``remote`` (with remote-tracking refs), and HEAD is the remote's HEAD
    thread when it names one, else the thread a new repository starts on (``main``) if the
    remote has it, else the most recently written thread. The repository is built
    next to ``path`` and renamed into place once complete and durable, so ``path`` is either
    absent or complete, whenever the clone stops. A failed or interrupted clone removes its
    work folder; a killed one leaves it (``.qvc-clone-*`` next to ``path``), and the next
    clone into the same folder removes it. Returns
    the repository opened as a store (close it). With ``allowed_signers`` (an allowed signers
    file), the clone requires signatures (docs/signing.md): the file becomes its
    ``qvc/allowed_signers``, and the clone is kept only if every commit verifies against it
    (:func:`qvc.readers.verify.verify`), else :class:`SignatureError` and nothing is left. Raises
    :class:`InvalidInputError` if ``path`` exists and is not empty, :class:`RemoteError` if the
    remote cannot be read.
    """
    given, url = url, _normalize_url(url)  # messages name the URL and the path as given
    target = os.path.abspath(os.fspath(path))
    if os.path.exists(target) and (not os.path.isdir(target) or os.listdir(target)):
        raise InvalidInputError(f"{os.fspath(path)} exists and is not empty")
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    _sweep_dead_clones(parent)
    tmp = tempfile.mkdtemp(prefix=_CLONE_PREFIX, dir=parent)
    work = os.path.join(tmp, "repo")
    state = TransferProgress("clone", remote)
    owner = None
    try:
        owner = open_lock_file(os.path.join(tmp, "owner.lock"))
        wait_flock(owner)  # held until this process ends: tells a live clone from a killed one
        with GitCheckpointStore(work, fsync=False) as store:
            add_remote(store, remote, url)
        if threads is None:
            local = [f"+{HEADS}*:{HEADS}*", "+refs/qvc/*:refs/qvc/*", f"+{NOTES}*:{NOTES}*"]
            refspecs = [*local, *fetch_refspecs(remote)]
        else:
            globs = [encode_pattern(p) for p in dict.fromkeys(threads)]
            refspecs = [f"+{HEADS}{g}:{HEADS}{g}" for g in globs]
            refspecs += [f"+{HEADS}{g}:{REMOTES}{remote}/{g}" for g in globs]
        run = run_git(work, ["fetch", "--no-tags", "--progress", "--no-write-fetch-head", "--", url, *refspecs],
                      interactive=interactive, progress=progress, state=state)
        if run.returncode != 0:
            raise RemoteError(f"clone from {given} failed: {run.failure().replace(url, given)}")
        if threads is not None:  # then the lines time travel kept and the pending writes of what arrived
            with GitCheckpointStore(work, fsync=False) as store:
                heads = dict(store.repository.refs(HEADS))
            lines = _superseded_of(work, url, {ref[len(HEADS):] for ref in heads}, interactive=interactive)
            more = [f"+{ref}:{ref}" for ref in lines]
            more += [f"+{ref}:{REMOTE_QVC}{remote}/superseded/{ref[len(SUPERSEDED):]}" for ref in lines]
            _fetch_chunks(work, url, more, interactive=interactive)
            with GitCheckpointStore(work, fsync=False) as store:
                tips = list(heads.values()) + [tip for _, tip in store.repository.refs(SUPERSEDED)]
            writes = _writes_of(work, url, tips, interactive=interactive)
            _fetch_chunks(work, url, [f"+{w}:{w}" for w in writes]
                          + [f"+{w}:{REMOTE_QVC}{remote}/writes/{w[len(WRITES):]}" for w in writes],
                          interactive=interactive)
        with GitCheckpointStore(work, fsync=False) as store:
            repo = store.repository
            strays = [(ref, tip) for ref, tip in repo.refs(REMOTE_QVC)  # the remote's own tracking refs are not ours
                      if not ref.startswith(f"{REMOTE_QVC}{remote}/")]
            strays += [(ref, tip) for ref, tip in repo.refs(WRITES)  # pending writes that do not read stay remote-only
                       if _unreadable_writes(store, ref[len(WRITES):], tip)]
            with repo.transaction() as tx:
                for ref, tip in strays:
                    tx.move_ref(ref, tip, None)
        head = remote_head(work, url, interactive=interactive)
        with GitCheckpointStore(work, fsync=False, readonly=True) as store:
            heads = dict(store.repository.refs(HEADS))
            if head not in heads:  # the remote's HEAD names no thread: a new repository's, else the latest written
                with open(os.path.join(work, "HEAD")) as f:
                    head = f.read().strip().removeprefix("ref: ")
            if head not in heads and heads:
                head = max(heads, key=lambda ref: (_written(store, heads[ref]), ref))
        if head in heads:
            with open(os.path.join(work, "HEAD"), "w") as f:
                f.write(f"ref: {head}\n")
        if allowed_signers is not None:
            _require_signatures(work, allowed_signers, url)
        harden(work)
        if os.path.exists(target):
            os.rmdir(target)
        os.rename(work, target)
    except BaseException as exc:  # Ctrl-C included: nothing is left behind
        _remove(tmp)
        if isinstance(exc, (QvcError, OSError)):
            _as_given(exc, {work: os.fspath(path), tmp: os.path.dirname(os.fspath(path)) or "."})
        raise
    finally:
        if owner is not None:
            os.close(owner)
        if progress is not None:
            state.done = True
            progress(state)
    _remove(tmp)
    try:
        return GitCheckpointStore(target, create=False, durability=durability)
    except NotARepositoryError as exc:
        raise RemoteError(f"clone from {url} did not give a qvc repository: {exc}") from None


def _require_signatures(work: str, allowed_signers: str | os.PathLike, url: str) -> None:
    """Make the clone at ``work`` require signatures checked against ``allowed_signers``; raise
    :class:`SignatureError` unless every commit it holds verifies."""
    from qvc.plumbing.signing import load_allowed_signers
    from qvc.readers.verify import verify  # deferred: only a clone that requires signatures needs it
    from qvc.store.signers import FILE

    load_allowed_signers(allowed_signers)  # one that does not read or parse is refused, naming its line
    shutil.copyfile(allowed_signers, os.path.join(work, FILE))
    _config(work, "qvc.requireSignatures", "true")
    with GitCheckpointStore(work, fsync=False, readonly=True) as store:
        report = verify(store)
    if not report:
        raise SignatureError(f"clone from {url} refused: {len(report.problems)} problem(s) against "
                             f"{allowed_signers}; first: {report.problems[0]}")


def _remove(folder: str) -> None:
    """Remove a clone's work folder, finishing even when Ctrl-C comes again meanwhile, and again
    while a git process that was stopped still had files to remove there."""
    for _ in range(50):
        try:
            shutil.rmtree(folder, ignore_errors=True)
            if not os.path.lexists(folder):
                return
            time.sleep(0.02)
        except KeyboardInterrupt:
            continue


def _as_given(exc: BaseException, paths: dict[str, str]) -> None:
    """Say the paths the user gave in ``exc``'s message, not the clone's work folder (each key of
    ``paths``, longest first, becomes its value): the work folder is gone when the user reads it."""
    def given(text):
        if not isinstance(text, str):
            return text
        for inner in sorted(paths, key=len, reverse=True):
            text = text.replace(inner, paths[inner])
        return text

    exc.args = tuple(given(a) for a in exc.args)
    for attr in ("message", "filename", "filename2"):
        if isinstance(getattr(exc, attr, None), str):
            with contextlib.suppress(AttributeError):
                setattr(exc, attr, given(getattr(exc, attr)))


def _written(store: GitCheckpointStore, sha: str) -> float:
    """When checkpoint commit ``sha`` was written (0 for a commit that does not read)."""
    try:
        return store.commit_info(sha).time
    except QvcError:
        return 0.0


def _sweep_dead_clones(parent: str) -> None:
    """Remove the work folders clones killed in ``parent`` left behind (their owner's flock is free).

    A folder without its lock file yet belongs to a clone starting right now unless it is old.
    """
    for entry in os.listdir(parent):
        if not entry.startswith(_CLONE_PREFIX):
            continue
        folder = os.path.join(parent, entry)
        try:
            fd = os.open(os.path.join(folder, "owner.lock"), os.O_RDWR)
        except FileNotFoundError:
            try:
                if time.time() - os.stat(folder).st_mtime > 3600:
                    shutil.rmtree(folder, ignore_errors=True)
            except OSError:
                pass
            continue
        except OSError:
            continue
        try:
            free = try_flock(fd)
        except OSError:
            free = False
        if not free:
            os.close(fd)
            continue  # a clone in progress
        try:  # the lock file goes last, so a sweep killed midway is finished by the next one
            for name in os.listdir(folder):  # the repository, and the folder its creation used
                if name != "owner.lock":
                    shutil.rmtree(os.path.join(folder, name), ignore_errors=True)
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, "owner.lock"))
                os.rmdir(folder)
        finally:
            os.close(fd)
