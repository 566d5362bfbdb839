"""``GitCheckpointStore``: the checkpoint store API over a qvc repository.

One thread is one branch (``refs/heads/<thread>``); one checkpoint is one commit whose tree
holds one msgpack blob per state field (see :mod:`qvc.store.format`). The store is safe to use from
many Python threads and processes at once; see :mod:`qvc.plumbing.durability` for when writes are
durable and :mod:`qvc.plumbing.recovery` for what opening a crashed repository repairs.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, NamedTuple, Optional, Protocol, Sequence

from qvc.codec import serde
from qvc.errors import (
    AmbiguousNameError,
    CheckpointConflictError,
    CorruptionError,
    DamagedRefError,
    InvalidInputError,
    SerializationError,
    StorageError,
    UnknownCheckpointError,
    UnknownThreadError,
)
from qvc.lazy import Pattern
from qvc.logs import log
from qvc.plumbing.leftovers import RecoveryReport
from qvc.plumbing.libgit2 import pygit2
from qvc.plumbing.objects import MODE_BLOB, MODE_TREE, Entry, commit_bytes, tree_bytes
from qvc.plumbing.reflog import ReflogEntry
from qvc.plumbing.repository import Repository
from qvc.store.base import CheckpointStore
from qvc.store.format import HEADER, TreeBuilder, commit_message, decode_header, encode_header, object_id
from qvc.store.history import CommitInfo, History, ThreadIndex
from qvc.store.refnames import (
    HEADS,
    SUPERSEDED,
    TAGS,
    WRITES,
    check_thread_id,
    decode_name,
    decode_thread,
    encode_name,
    encode_thread,
    head_ref,
    superseded_prefix,
    tag_ref,
    writes_ref,
)
from qvc.store.rewrite import RewriteLog, Rewriter
from qvc.store.summaries import MISSING, Summaries, Summary, summarize
from qvc.store.writes import (
    ALL,
    KEYED,
    Item,
    PendingWrites,
    WriteSet,
    entry_key,
    key_of,
    key_path,
    keyed_prefix,
    keyed_ref,
    thread_writes_ref,
    writes_commit,
)
from qvc.types import (
    Checkpoint,
    CheckpointConfig,
    CheckpointMetadata,
    CheckpointTuple,
    DurabilityMode,
    Head,
    PendingWrite,
    StateVersions,
)

if TYPE_CHECKING:
    from qvc.plumbing.repository import Transaction
    from qvc.plumbing.signing import Signer
    from qvc.store.retention import Policy, RetentionReport


class Service(Protocol):
    """Something a writable store runs while it is open (see :data:`SERVICES`)."""

    def close(self) -> None:
        """Stop; called by :meth:`GitCheckpointStore.close` before the repository closes."""


#: Starters of the services every writable store runs while open: each is called with the
#: store being opened and returns a :class:`Service` or ``None`` (nothing to run for that
#: repository). The feature layer registers here, so the store never imports it: ``qvc``'s
#: package ``__init__`` (always imported before any qvc module) registers replication
#: (:mod:`qvc.remotes.replication`), which pushes to remotes configured with ``--replicate``.
SERVICES: list[Callable[[GitCheckpointStore], Optional[Service]]] = []

#: ``put(expected_head=...)`` not given: the head is not checked.
UNCHECKED: Any = object()


class PutRequest(NamedTuple):
    """One checkpoint of :meth:`GitCheckpointStore.put_many`: the arguments :meth:`GitCheckpointStore.put` takes."""

    config: CheckpointConfig
    checkpoint: Checkpoint
    metadata: CheckpointMetadata
    expected_head: Optional[str] = UNCHECKED
    header: Optional[Mapping[str, Any]] = None


_HEXISH = Pattern(r"^[0-9a-fA-F]{4,40}$")
_BOOLEANS = ("true", "false", "yes", "no", "on", "off", "1", "0")
_MOVED = Pattern(r"^checkout: moving from (\S+) to \S+$")  # what git and libgit2 log in HEAD's reflog


class GitCheckpointStore(CheckpointStore):
    """A checkpoint store backed by a bare git repository at ``path``.

    Args:
        path: the repository directory; created (atomically) if missing and ``create``.
        durability: when writes reach stable storage (:class:`DurabilityMode`, or its value
            ``"sync"``, ``"async"``, ``"exit"``); SYNC by default.
        fsync: ``False`` skips every flush (throwaway repositories, tmpfs).
        create: ``False`` raises :class:`~qvc.errors.NotARepositoryError` for a missing path.
        max_lag: ASYNC only, the longest a returned write waits for its flush (seconds).
        readonly: read without libgit2 (:mod:`qvc.plumbing.odb`: no pygit2 import, no lock);
            writes raise :class:`~qvc.errors.InvalidInputError`. Opening still repairs a
            crashed repository first (when it can without waiting: a writer stopped mid-transaction
            leaves the repair to a later opener).
        signing_key: an OpenSSH Ed25519 private key file (or the ``.pub`` of a key ssh-agent
            holds) that signs every commit this store writes, in git's SSH signature format
            (docs/signing.md); default ``$QVC_SIGNING_KEY``, else the repository's
            ``qvc.signingKey``, else none. A key given here that does not load raises
            :class:`~qvc.errors.InvalidInputError` here (one configured: at the first write); a
            repository with ``qvc.requireSignatures`` refuses every write without one
            (:class:`~qvc.errors.SignatureError`).
        write_wait: how long a write waits for another process's transaction (the writers'
            queue), and :meth:`gc` and :meth:`purge` for the writers, before they raise
            :class:`~qvc.errors.StorageError` (``EBUSY``) with nothing stored (seconds; 60 by
            default). Only a writer stopped or hung inside its transaction makes anyone wait so long.

    Opening runs crash recovery; what it repaired is in :attr:`recovery`. The store is a
    context manager; :meth:`close` flushes (and, in EXIT mode, is when writes become durable).
    """

    def __init__(self, path: str | os.PathLike, *, durability: DurabilityMode | str = DurabilityMode.SYNC,
                 fsync: bool = True, create: bool = True, max_lag: float = 0.05, readonly: bool = False,
                 signing_key: str | os.PathLike | None = None, write_wait: float = 60.0):
        self._repo = Repository(path, create=create, durability=durability, fsync=fsync, max_lag=max_lag,
                                readonly=readonly, signing_key=signing_key, write_wait=write_wait)
        self._history = History(self._repo)
        self._writes = PendingWrites(self._repo, self._history)
        self._rewriter = Rewriter(self._repo, self._history)
        self._rewrites = RewriteLog(self._repo, self._history)
        self._summaries = Summaries(self._repo, self._history)
        self._services: list[Service] = []
        if not readonly:
            for start in SERVICES:
                service = start(self)
                if service is not None:
                    self._services.append(service)

    # -- properties and lifecycle --------------------------------------------------------

    @property
    def path(self) -> str:
        return self._repo.path

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._repo.closed

    @property
    def durability(self) -> DurabilityMode:
        return self._repo.durability

    @property
    def signer(self) -> Signer | None:
        """What signs the commits this store writes (see ``signing_key``), ``None`` if nothing does."""
        return self._repo.signer

    def config(self) -> dict[str, str]:
        """The repository's own configuration (``git config --local --list``): ``{name: value}``,
        section and key names in lower case. A read-only store reads it too."""
        return self._repo.config()

    def set_config(self, name: str, value: str | None) -> None:
        """Set (``None``: remove) a key of the repository's own configuration, as ``git config
        --local``: ``qvc.signingKey``, ``qvc.requireSignatures`` (docs/signing.md), ``retention.*``
        (:meth:`retain`) and any of git's. Keys qvc keeps itself (``qvc.format``, ``qvc.id``) are
        refused, and so is a value of ``qvc.requireSignatures`` that is no boolean, a
        ``qvc.signingKey`` that does not load and a retention setting that does not parse
        (:class:`InvalidInputError`; nothing changes).
        Signing settings take effect in this store at once and in others when they open."""
        key = name.lower()
        if key in ("qvc.format", "qvc.id"):
            raise InvalidInputError(f"{name} is qvc's own setting; it is not changed by hand")
        if key == "qvc.requiresignatures" and value is not None and value.lower() not in _BOOLEANS:
            raise InvalidInputError(f"{name} takes true or false, not {value!r}")
        if key.startswith("retention.") and value is not None:
            from qvc.store.retention import setting  # deferred: start-up speed

            setting(name, value)
        self._repo.set_config(name, value)

    def rewrites(self) -> Iterator[tuple[str, dict]]:
        """``(commit SHA, record)`` of every history rewrite this repository recorded, newest
        first (:class:`~qvc.store.rewrite.RewriteLog`: why, by whom, when, the refs moved and the
        checkpoints removed). Raises :class:`CorruptionError` for a record that does not read."""
        return self._rewrites.records()

    @property
    def recovery(self) -> RecoveryReport:
        """What opening this repository repaired (falsy when nothing)."""
        return self._repo.recovery

    @property
    def repository(self) -> Repository:
        """The plumbing layer (objects, refs, the staging database); its :meth:`~Repository.transaction` is
        the one write path, used by this store and by every feature that writes."""
        return self._repo

    @property
    def history(self) -> History:
        """The store's cached reads of commits, trees and blobs, and its checkpoint-id index
        (one per store; it follows every write made through :attr:`repository`)."""
        return self._history

    def flush(self) -> None:
        """Make every write so far durable; raise :class:`~qvc.errors.DurabilityError` on failure."""
        self._repo.flush()

    def raise_if_failed(self) -> None:
        """Raise :class:`~qvc.errors.DurabilityError` if an earlier flush failed (in the background
        or not). Sticky until the store is reopened: after a failed flush nothing later can be
        promised durable. Reads call it first, so a reader learns of a lost write."""
        self._repo.raise_if_failed()

    def close(self) -> None:
        """Flush and release the repository. Idempotent.

        First closes the store's :data:`SERVICES` (with replication on, one bounded attempt to
        push what is left: :data:`qvc.remotes.replication.FINAL_ATTEMPT` seconds, skipped while
        the remote is down).
        """
        services, self._services = self._services, []
        for service in services:
            service.close()
        self._repo.close()

    def __enter__(self) -> GitCheckpointStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"GitCheckpointStore({self.path!r}, durability={self.durability})"

    # -- resolving names ------------------------------------------------------------------

    def head(self, thread_id: str) -> str | None:
        """The commit SHA of a thread's head, or ``None`` for a thread with no checkpoints.
        Raises :class:`DamagedRefError` naming the thread when its ref file holds no ref."""
        try:
            return self._repo.ref(head_ref(thread_id))
        except DamagedRefError as exc:
            raise self._damaged_thread(exc) from None

    def _damaged_thread(self, exc: DamagedRefError) -> DamagedRefError:
        """``exc`` (a ref file that holds no ref) in the words of a user: which thread, and the repair."""
        thread = self.ref_thread(exc.ref)
        what = f"thread {thread!r} is damaged" if thread is not None else "a ref is damaged"
        return DamagedRefError(f"{what}: {exc} (repair: `qvc fsck --repair`)", exc.ref)

    def ref_thread(self, name: str) -> str | None:
        """The thread a ``refs/heads/...`` name stands for, read from the name alone (``None``
        for other refs): a hashed long id stands for itself here (:meth:`thread_of_ref` reads
        the full id from the thread's commits)."""
        if not name.startswith(HEADS):
            return None
        component = name[len(HEADS):]
        return decode_thread(component) or component

    def damaged_threads(self) -> list[tuple[str, str]]:
        """``(thread, why)`` of every thread whose ref file holds no ref (garbage text, or a file
        another program left under ``refs/heads/``): :meth:`thread_heads` skips them, as git's
        listings skip a broken ref, and :meth:`repair_refs` repairs them."""
        return [(self.ref_thread(name) or name, f"{why} (repair: `qvc fsck --repair`)")
                for name, why in self._repo.damaged_refs(HEADS)]

    def repair_refs(self) -> RecoveryReport:
        """Repair every ref whose file holds no ref: move the file aside into a quarantine folder
        (:func:`~qvc.plumbing.recovery.move_aside`, nothing is deleted) and set the ref back to
        the newest value its reflog names whose commit is whole; a ref without one stays
        deleted. Returns what was done (falsy: nothing to repair)."""
        report = RecoveryReport()
        for name, _ in self._repo.damaged_refs("refs/"):
            value = self._reflog_value(name)
            with self._repo.transaction() as tx:
                if not self._set_aside(name, report):
                    continue
                if value is not None:
                    tx.move_ref(name, None, value, "repair: restored from the reflog")
                    report.restored(name, "its reflog")
                else:
                    report.removed(name)
        return report

    def _reflog_value(self, name: str) -> str | None:
        """The newest value ref ``name``'s reflog names whose commit is in the repository, or ``None``."""
        try:
            entries = self._repo.reflog(name)
        except CorruptionError:
            entries = []
        return next((e.new for e in entries if e.new and self._repo.has(bytes.fromhex(e.new))), None)

    def staging_damage(self) -> str | None:
        """What SQLite finds wrong with the staging database file (``qvc/staging.db``), ``None``
        when nothing: a damaged one is read past (readers see git's files alone) and fails every write."""
        return self._repo.staging.check()

    def repair_staging(self) -> str | None:
        """Move a damaged staging database aside into a quarantine folder (nothing is deleted),
        so that the next write makes a new one. Returns one line saying what was done and what
        is lost, ``None`` when the database is not damaged."""
        from qvc.plumbing.recovery import move_aside  # deferred, as in repair_refs

        report = RecoveryReport()
        done = self._repo.staging.set_aside(lambda path: move_aside(self._repo, path, report))
        if done is None:
            return None
        why, staged = done
        lost = ("it held no write that git's files lack" if staged == 0 else
                f"its {staged} staged ref update(s) that git's files lack are lost to qvc" if staged else
                "any write it held that git's files lack is lost to qvc")
        return (f"moved the damaged staging database ({why}) aside to {report.quarantine}/: "
                f"{', '.join(report.moved_aside)}; {lost}")

    def _set_aside(self, name: str, report: RecoveryReport) -> bool:
        """Move ref ``name``'s file, which holds no ref, aside (noted in ``report``); ``False``
        when it reads as a ref by now (repaired meanwhile by another process, or git)."""
        try:
            self._repo.ref(name)
            return False
        except DamagedRefError:
            pass
        from qvc.plumbing.recovery import move_aside  # deferred, as in repair_refs

        move_aside(self._repo, os.path.join(self.path, name), report)
        return True

    def commit_info(self, sha: str) -> CommitInfo:
        """What a checkpoint commit says (id, thread, step, parents, time, message), without its
        state. Raises :class:`CorruptionError` if it is missing or malformed."""
        return self._history.commit(sha)

    def first_parents(self, sha: str) -> Iterator[CommitInfo]:
        """The commit and its first parents, newest first (``git log --first-parent``)."""
        return self._history.first_parents(sha)

    def changed(self, sha: str) -> list[str]:
        """The fields a checkpoint added or changed against its first parent (from the trees)."""
        return self._history.changed(sha)

    def tree_entries(self, sha: str) -> dict[str, tuple[int, bytes]]:
        """The raw entries (``{encoded name: (mode, raw id)}``) of a checkpoint commit's tree."""
        return self._history.entries(self._history.commit(sha))

    def blob(self, raw: bytes) -> bytes:
        """A blob's bytes by raw id."""
        return self._history.blob(raw)

    def read(self, sha: str, *, damaged: dict[str, str] | None = None) -> CheckpointTuple:
        """The checkpoint stored in commit ``sha``, fully decoded. Raises :class:`CorruptionError`.

        With ``damaged`` (a dict), a state field whose blob is missing or does not decode is left
        out of ``state_data`` and ``damaged[field]`` says why, so the healthy fields stay
        readable; the commit and its header must still read. Every object is read from git
        (never the summary files' copies, :mod:`qvc.store.summaries`), so fsck and damage
        reports see what git holds.
        """
        return self._tuple(sha, damaged=damaged, from_git=True)

    def damage(self, sha: str) -> str | None:
        """Why commit ``sha`` cannot be read as a checkpoint commit (missing, malformed, no
        header), or ``None`` when it can. Reads the commit and its tree, not the state."""
        try:
            entries = self._history.entries(self._history.commit(sha))
            if HEADER not in entries:
                return f"commit {sha[:12]} is not a qvc checkpoint (no {HEADER} entry)"
        except CorruptionError as exc:
            return str(exc)
        return None

    def field_value(self, sha: str, name: str, entry: tuple[int, bytes] | None = None) -> Any:
        """State field ``name`` of checkpoint commit ``sha``, decoded alone (the rest of the state
        is not read); ``entry`` is its raw tree entry when the caller has it (from
        :meth:`tree_entries`). Raises :class:`UnknownCheckpointError` (no such field) and
        :class:`CorruptionError`."""
        found = entry if entry is not None else self.tree_entries(sha).get(encode_name(name))
        if found is None:
            raise UnknownCheckpointError(f"checkpoint {sha[:12]} has no field {name!r}")
        return self._field(name, found[0], found[1], sha)

    def header(self, sha: str) -> tuple[dict, dict]:
        """``(checkpoint header, metadata)`` of the checkpoint commit ``sha`` (its ``.qvc`` blob)."""
        entries = self.tree_entries(sha)
        if HEADER not in entries:
            raise CorruptionError(f"commit {sha[:12]} is not a qvc checkpoint (no {HEADER} entry)")
        return decode_header(self._blob(entries[HEADER][1]), f"checkpoint {sha[:12]} header")

    def same_state(self, sha: str, state: Mapping[str, Any]) -> bool:
        """Whether ``state`` stored as a checkpoint would hold exactly the fields of checkpoint commit
        ``sha``, byte for byte (``qvc commit``'s "nothing to commit"). Nothing is written. Raises
        :class:`SerializationError` for a state that cannot be stored, :class:`CorruptionError`."""
        entries, _ = self._builder(lambda kind, data: Repository.hash(kind, data)).fields(dict(state), {})
        return entries == {n: e for n, e in self.tree_entries(sha).items() if n != HEADER}

    def pending_writes_at(self, sha: str) -> Optional[list[PendingWrite]]:
        """The pending writes ``refs/qvc/writes/<sha>`` holds for the checkpoint in commit ``sha``
        (``None`` if it has none). Raises :class:`CorruptionError` if they do not decode."""
        tip = self._repo.ref(writes_ref(sha))
        return None if tip is None else self.pending_writes_in(tip)

    def thread_of_ref(self, name: str, tip: str | None = None) -> str | None:
        """The thread a ``refs/heads/...`` name stands for (``None`` for other refs); ``tip``, the
        ref's target when the caller has it, saves reading the ref for a hashed long id."""
        if not name.startswith(HEADS):
            return None
        component = name[len(HEADS):]
        thread = decode_thread(component)
        if thread is None:  # a hashed long id: the full id is in its commits
            tip = tip or self._repo.ref(name)
            try:
                thread = (self._history.commit(tip).thread_id if tip else None) or component
            except CorruptionError:  # not a checkpoint commit (a ref another tool wrote): its name is all there is
                thread = component
        return thread

    def current(self) -> Head:
        """What HEAD stands for: the current thread and its head commit (``None`` while it has
        no checkpoints), or, when detached, no thread and the checkpoint commit. Raises
        :class:`CorruptionError` if HEAD is missing or unreadable (:meth:`checkout` repairs it)."""
        try:
            name, commit = self._repo.head_ref()
        except DamagedRefError as exc:  # HEAD reads; the thread it names does not
            raise self._damaged_thread(exc) from None
        except CorruptionError as exc:
            raise CorruptionError(f"{exc} (checking out a thread repairs it: `qvc checkout THREAD`)") from None
        return Head(self.thread_of_ref(name) if name else None, commit)

    def current_or_none(self) -> Head | None:
        """:meth:`current`, or ``None`` when HEAD is missing or unreadable: for reads that only mark
        the current thread (a log's decorations), which go on without it."""
        try:
            return self.current()
        except CorruptionError:
            return None

    def previous_checkout(self) -> Head | None:
        """What HEAD stood for before the last checkout that moved it (git's ``@{-1}``, read from
        HEAD's reflog): a thread (its head commit now, ``None`` if it has none) or a detached
        commit; ``None`` if HEAD never moved."""
        for entry in self._repo.reflog("HEAD"):
            m = _MOVED.match(entry.message)
            if m is None:
                continue
            was = m.group(1)
            if len(was) == 40 and _HEXISH.match(was):
                return Head(None, was.lower())
            thread = self.thread_of_ref(HEADS + was) or was
            return Head(thread, self.head(thread))
        return None

    def checkout(self, thread_id: str | None = None, *, commit: str | None = None) -> Head:
        """Make ``thread_id`` the current thread, or detach HEAD at ``commit`` (a commit SHA).

        A thread need not exist yet (its first put creates it, like git's unborn branch).
        Durable on return; a missing or unreadable HEAD is written anew. Raises
        :class:`InvalidThreadIdError` / :class:`UnknownCheckpointError`.
        """
        if (thread_id is None) == (commit is None):
            raise InvalidInputError("checkout needs exactly one of a thread or a commit")
        if thread_id is not None:
            target = head_ref(check_thread_id(thread_id))
            self.head(thread_id)  # a damaged thread is refused before HEAD moves to it
        else:
            if not (isinstance(commit, str) and len(commit) == 40 and _HEXISH.match(commit)):
                raise InvalidInputError(f"not a commit SHA: {commit!r}")
            self._history.commit(commit.lower())  # exists and parses
            target = commit.lower()
        self._repo.set_head(target)
        return self.current()

    def check_head_movable(self) -> None:
        """Raise :class:`CheckpointConflictError` when HEAD cannot move now (another program
        holds ``HEAD.lock``, which is left to it): what a command that writes something before
        it moves HEAD (``checkout -b``) checks first, so that it leaves nothing behind."""
        from qvc.plumbing.transaction import head_unlocked  # deferred, as move_aside

        head_unlocked(self.path)

    def reflog(self, thread_id: str) -> list[ReflogEntry]:
        """Every movement of the thread's head, newest first (puts, resets, forks, deletes)."""
        return self._repo.reflog(head_ref(check_thread_id(thread_id)))

    def resolve(self, name: str) -> str:
        """The commit SHA of a checkpoint named by id, unique id prefix, commit SHA or SHA prefix.

        Raises :class:`UnknownCheckpointError` (none) or :class:`InvalidInputError` (ambiguous).
        """
        if not isinstance(name, str) or not name:
            raise InvalidInputError(f"checkpoint id must be a non-empty string, not {name!r}")
        found = self._history.lookup(name)
        if found is not None:
            return found
        if len(name) == 40 and _HEXISH.match(name) and self._history.reachable(name.lower()):
            return name.lower()
        matches = self._history.matches(name) if len(name) >= 4 else set()
        if len(matches) == 1:
            return matches.pop()
        if matches:
            raise AmbiguousNameError(f"checkpoint {name!r} is ambiguous: matches {len(matches)} checkpoints; "
                                     f"candidates: {self._candidates(matches)}")
        raise UnknownCheckpointError(f"unknown checkpoint {name!r}")

    def abbreviate(self, checkpoint_id: str, minimum: int = 12) -> str:
        """The shortest prefix of ``checkpoint_id`` (at least ``minimum`` characters) that
        :meth:`resolve` reads back as that checkpoint alone, as git abbreviates SHAs: long enough
        that no other checkpoint id and no other commit's SHA starts with it (the whole id when
        no shorter prefix is unique). Reads every ref's history once per process, then again only
        for an id it has not seen."""
        return self._history.abbreviate(checkpoint_id, minimum)

    def _candidates(self, matches: set[str], shown: int = 8) -> str:
        """The commits of an ambiguous name, newest first, as git's hint lists them: SHA,
        thread, step, checkpoint id (at most ``shown``, then how many more)."""
        infos = sorted((self._history.commit(c) for c in matches), key=lambda i: (-i.time, i.hex))
        text = "; ".join(f"{i.hex[:10]} {i.thread_id or '(no thread)'} step {i.step} id {i.checkpoint_id}"
                         for i in infos[:shown])
        return text + (f"; and {len(infos) - shown} more" if len(infos) > shown else "")

    def _target(self, config: CheckpointConfig) -> str | None:
        """The commit a config addresses, or ``None`` for a thread with no checkpoints."""
        thread = _thread_of(config)
        if config.checkpoint_id is None:
            return self.head(thread)
        return self.resolve(config.checkpoint_id)

    def _existing(self, config: CheckpointConfig) -> str:
        found = self._target(config)
        if found is None:
            raise UnknownThreadError(f"thread {config.thread_id!r} has no checkpoints")
        return found

    # -- reading --------------------------------------------------------------------------

    def _blob(self, raw: bytes) -> bytes:
        data = self._summaries.blobs.get(raw)  # what a thread's summary file held
        return data if data is not None else self._history.blob(raw)

    def _field(self, name: str, mode: int, raw: bytes, hexid: str) -> Any:
        if mode != MODE_TREE:
            value = self._summaries.values.get(raw, MISSING)
            if value is MISSING:
                value = self._decode_field(name, mode, raw, hexid)
            return value
        return self._decode_field(name, mode, raw, hexid)

    def _decode_field(self, name: str, mode: int, raw: bytes, hexid: str, from_git: bool = False) -> Any:
        """:meth:`_field` for a value not kept decoded; ``from_git``: its blobs as git has them
        (not the summary files' copies)."""
        what = f"checkpoint {hexid[:12]} field {name!r}"
        blob = self._history.blob if from_git else self._blob
        if mode == MODE_TREE:
            out: list = []
            for chunk in sorted(self._history.tree(raw).items()):
                part = serde.loads(blob(chunk[1][1]), what)
                if not isinstance(part, list):
                    raise CorruptionError(f"{what}: chunk {chunk[0]} is not a list")
                out.extend(part)
            return out
        value = serde.loads(blob(raw), what)
        self._summaries.remember_value(raw, value)
        return value

    def _tuple(self, hexid: str, with_writes: set[str] | None = None, damaged: dict | None = None,
               summary: Summary | None = None, from_git: bool = False) -> CheckpointTuple:
        """The checkpoint tuple of commit ``hexid``; ``from_git`` reads every object from git (as
        :meth:`read` does for fsck and damage reports), not from summaries and values kept."""
        if from_git:
            s = summarize(self._history, hexid)
        else:
            s = summary if summary is not None else self._summaries.get(hexid)
        header, metadata = decode_header(s.header, f"checkpoint {hexid[:12]} header")
        state = {}
        known = self._summaries.values if not from_git else {}
        for name, (_, mode, raw) in zip(s.names, s.fields, strict=True):
            value = known.get(raw, MISSING)  # an immutable value decoded before
            if value is MISSING:
                try:
                    value = self._decode_field(name, mode, raw, hexid, from_git)
                except CorruptionError as exc:
                    if damaged is None:
                        raise
                    damaged[name] = str(exc)
                    continue
            state[name] = value
        versions = dict(zip(s.names, s.versions, strict=True))
        configs = self._summaries.configs.get(hexid)  # frozen: shared by every tuple of the checkpoint
        parent_config = configs[1] if configs is not None else (
            CheckpointConfig(s.parent_thread, s.parent_id) if s.parent is not None else None)
        try:
            checkpoint = Checkpoint(
                id=header["id"], thread_id=header["thread_id"], step=header["step"], state_data=state,
                state_versions=versions, versions_seen=header.get("versions_seen") or {},
                pending_writes=[PendingWrite(*w) for w in header.get("pending_writes") or []],
                parent_id=header.get("parent_id") or (parent_config.checkpoint_id if parent_config else None),
                created_at=header.get("created_at", ""), schema_version=header.get("schema_version", "v2"),
            )
        except (KeyError, TypeError) as exc:
            raise CorruptionError(f"checkpoint {hexid[:12]} header lacks {exc}") from None
        if configs is None:
            configs = (CheckpointConfig(checkpoint.thread_id, checkpoint.id), parent_config)
            self._summaries.remember_configs(hexid, configs)
        config = configs[0]
        writes = None if with_writes is not None and hexid not in with_writes else self.pending_writes_at(hexid)
        return CheckpointTuple(config, checkpoint, metadata, parent_config, writes)

    def get_tuple(self, config: CheckpointConfig) -> Optional[CheckpointTuple]:
        """The addressed checkpoint, or ``None`` if the thread is empty or the id unknown.

        ``state_versions`` is derived from tree diffs along the first-parent chain;
        ``parent_config`` is the commit's first parent (possibly on another thread: a fork).
        """
        self._repo.raise_if_failed()
        try:
            hexid = self._target(config)
        except UnknownCheckpointError:
            return None
        return None if hexid is None else self._tuple(hexid)

    def new_versions(self, config: CheckpointConfig) -> StateVersions:
        """The fields the addressed checkpoint added or changed against its parent, with their versions."""
        hexid = self._existing(config)
        versions = self._history.versions(hexid)
        return {f: versions[f] for f in self._history.changed(hexid)}

    def list(self, config: CheckpointConfig, *, limit: Optional[int] = None,
             before: Optional[str | CheckpointConfig] = None, superseded: bool = False) -> Iterator[CheckpointTuple]:
        """The thread's line, newest first: its head (or ``config.checkpoint_id``), then first parents.

        The line crosses into the source thread at a fork, as ``git log`` does. ``before`` (a
        checkpoint id, or a :class:`CheckpointConfig` naming one, as LangGraph-style callers pass
        it) starts after that checkpoint on the line; ``limit`` caps the count. ``superseded=True``
        appends the lines left behind by time travel. Raises :class:`UnknownCheckpointError`
        for an unknown ``before`` and :class:`InvalidInputError` for a negative ``limit``.
        """
        self._repo.raise_if_failed()
        thread = _thread_of(config)
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
            raise InvalidInputError(f"limit must be a non-negative integer, not {limit!r}")
        if before is not None and not isinstance(before, str) and hasattr(before, "checkpoint_id"):
            if before.checkpoint_id is None:
                raise InvalidInputError("before: the config names no checkpoint (its checkpoint_id is None)")
            before = before.checkpoint_id
        generation = self._repo.generation()  # before the refs: a delete after it stops the summaries' save
        start = self._target(config)
        stop = self.resolve(before) if before is not None else None
        tips = [start] if start else []
        if superseded:
            tips += [tip for _, tip in sorted(self._repo.refs(superseded_prefix(thread)),
                                              key=lambda item: -self._history.commit(item[1]).time)]
        return self._iter_lines(thread, tips, stop, limit, before, generation)

    def _iter_lines(self, thread: str, tips: list[str], stop: str | None, limit: int | None,
                    before: str | None, generation: str | None) -> Iterator[CheckpointTuple]:
        """The checkpoints of the lines ending at ``tips``, from their summaries: those in memory,
        else the thread's summary file (read on the first miss), else git; what git gave is
        added to the file when the walk ends (:mod:`qvc.store.summaries`)."""
        seen: set[str] = set()
        with_writes = {name[len(WRITES):] for name, _ in self._repo.refs(WRITES)}
        waiting = stop is not None
        count = 0
        summaries = self._summaries
        walked: list[Summary] = []
        loaded = False
        complete = False
        try:
            for tip in tips:
                hexid: str | None = tip
                while hexid is not None and hexid not in seen:
                    seen.add(hexid)
                    if waiting:  # not listed: only its first parent is needed
                        waiting = hexid != stop
                        known = summaries.known(hexid)
                        hexid = known.parent if known is not None else self._history.commit(hexid).parent
                        continue
                    if limit is not None and count >= limit:
                        return
                    s = summaries.known(hexid)
                    if s is None and not loaded:
                        summaries.load(thread)
                        loaded = True
                        s = summaries.known(hexid)
                    if s is None:
                        s = summaries.get(hexid)
                    walked.append(s)
                    hexid = s.parent
                    count += 1
                    yield self._tuple(s.sha, with_writes, summary=s)
            complete = stop is None
            if waiting:
                raise UnknownCheckpointError(f"before={before!r} is not on the listed line")
        finally:
            if loaded:
                summaries.save(thread, walked, seen if complete else None, generation=generation)

    def threads(self) -> list[str]:
        """Every thread id, sorted."""
        return [thread for thread, _ in self.thread_heads()]

    def thread_heads(self) -> list[tuple[str, str]]:
        """``(thread id, head commit SHA)`` of every thread, sorted by id: one read of the refs
        (``packed-refs`` and the loose ones), not one lookup per thread."""
        return sorted((self.thread_of_ref(name, tip), tip) for name, tip in self._repo.refs(HEADS))

    # -- writing --------------------------------------------------------------------------

    def _builder(self, write: Callable[[str, bytes], bytes]) -> TreeBuilder:
        """A tree builder whose objects go to ``write``."""
        return TreeBuilder(write, lambda data: Repository.hash("blob", data), self._history.tree,
                           self._history.known_blob)

    def put(self, config: CheckpointConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: StateVersions | None = None, *, expected_head: str | None = UNCHECKED,
            header: Mapping[str, Any] | None = None) -> CheckpointConfig:
        """Store ``checkpoint`` as a commit on ``config.thread_id`` and move the thread's head to it.

        The parent is the checkpoint named by ``checkpoint.parent_id`` when given, else the
        thread's head. A parent that is the head, or descends from it, extends the thread (a
        fork when the thread is new). Any other parent (an older checkpoint of this thread, or
        one of another thread, while the thread has a head) would supersede the head's line:
        that is **time travel**, done only when asked for explicitly with
        ``expected_head`` (the head the caller saw; the line left is kept under
        ``refs/qvc/superseded/``); without it :class:`CheckpointConflictError` says so and
        nothing is stored, since another writer moving the head meanwhile looks the same
        (no silent fork). ``expected_head`` (a commit SHA, or ``None`` for a thread without
        checkpoints) makes any write a compare-and-swap: if the thread's head is not that
        commit when the write starts, or moves before it ends, :class:`CheckpointConflictError`
        names the thread and nothing is stored. ``new_versions`` is accepted for compatibility;
        versions are derived from the stored trees. ``header`` holds keys an adapter keeps in the
        checkpoint's header beside the store's own (``{"langgraph": ...}``: what names its viewer
        and editor, :mod:`qvc.store.viewers`); one of the store's own keys there is an
        :class:`InvalidInputError`.

        A put that raised :class:`CheckpointConflictError` stored nothing: retrying it with the
        same id and content stores it (once the conflict's cause is gone).

        Durable on return in SYNC mode. Raises :class:`InvalidInputError` for malformed
        arguments, :class:`SerializationError` (naming the field path) for state that cannot
        be stored, :class:`UnknownCheckpointError` for an unknown ``parent_id`` and
        :class:`CheckpointConflictError` if another writer moved the thread meanwhile or the
        id exists with different content.
        """
        thread = _thread_of(config)
        _check_checkpoint(checkpoint, thread)
        metadata = _check_mapping(metadata, "metadata")
        header = _checkpoint_header(checkpoint, thread, _check_mapping(header, "header"))
        ref = head_ref(thread)
        with self._repo.transaction() as tx:
            head = tx.ref(ref)
            if expected_head is not UNCHECKED and head != expected_head:
                raise CheckpointConflictError(_moved(thread, expected_head, head))
            parent = head
            if checkpoint.parent_id is not None and (
                    head is None or self._history.commit(head).checkpoint_id != checkpoint.parent_id):
                try:
                    parent = self.resolve(checkpoint.parent_id)
                except UnknownCheckpointError:
                    raise UnknownCheckpointError(f"parent_id {checkpoint.parent_id!r}: unknown checkpoint") from None
            existing = self._history.lookup(checkpoint.id, refresh=False)
            if existing is not None:
                self._check_reput(existing, header, metadata, checkpoint.state_data, parent,
                                  checkpoint.parent_id is not None)
                return CheckpointConfig(thread, checkpoint.id)
            parent_entries = self._history.entries(self._history.commit(parent)) if parent else {}
            fields, _ = self._builder(tx.write).fields(checkpoint.state_data, parent_entries)
            new = self.write_checkpoint(tx, header, metadata, fields, [parent] if parent else [])
            cause = f"{metadata.get('source') or 'put'}: step {checkpoint.step} {checkpoint.id}"
            travel = self._travels(head, parent)
            if travel and expected_head is UNCHECKED:
                raise CheckpointConflictError(_unasked_travel(thread, checkpoint.parent_id, head))
            if travel:
                cause += " (time travel)"
            elif parent is not None and parent != head:
                cause += f" (fork of {self._history.commit(parent).checkpoint_id})"
            self._move_head(tx, thread, head, new, cause, parent=parent)
        return CheckpointConfig(thread, checkpoint.id)

    def put_many(self, puts: Sequence[PutRequest]) -> list[CheckpointConfig]:
        """Store several checkpoints, each on its own thread, in one transaction: all or nothing.

        Each :class:`PutRequest` is what :meth:`put` takes (``config``, ``checkpoint``,
        ``metadata``, ``expected_head``, ``header``) and is stored as :meth:`put` stores it, with
        two limits: every request names a different thread, and each extends its thread (its
        ``checkpoint.parent_id`` is ``None`` or the id of the thread's head: no time travel and
        no fork from another thread in a batch; :class:`InvalidInputError` otherwise). A request
        whose id is stored already with the same content is a no-op, as in :meth:`put`.

        The heads move in one transaction: if any thread's head is not its ``expected_head``,
        :class:`CheckpointConflictError` names the thread and nothing is stored; no reader, in
        any process, sees half a batch. What a returned call stored is durable in SYNC mode.
        Returns each request's new address, in order. Raises what :meth:`put` raises.
        """
        requests = list(puts)
        threads = [_thread_of(r.config) for r in requests]
        if len(set(threads)) != len(threads):
            raise InvalidInputError("put_many: each request must name a different thread")
        prepared = []
        for request, thread in zip(requests, threads, strict=True):
            _check_checkpoint(request.checkpoint, thread)
            metadata = _check_mapping(request.metadata, "metadata")
            header = _checkpoint_header(request.checkpoint, thread, _check_mapping(request.header, "header"))
            prepared.append((request, thread, header, metadata))
        out: list[CheckpointConfig] = []
        with self._repo.transaction() as tx:
            staged: list[tuple[str, str | None, str, str]] = []
            for request, thread, header, metadata in prepared:
                cp = request.checkpoint
                ref = head_ref(thread)
                head = tx.ref(ref)
                if request.expected_head is not UNCHECKED and head != request.expected_head:
                    raise CheckpointConflictError(_moved(thread, request.expected_head, head))
                if cp.parent_id is not None and (
                        head is None or self._history.commit(head).checkpoint_id != cp.parent_id):
                    raise InvalidInputError(f"put_many: thread {thread!r}: parent_id {cp.parent_id!r} is not the "
                                            "thread's head (a batch only extends threads)")
                out.append(CheckpointConfig(thread, cp.id))
                existing = self._history.lookup(cp.id, refresh=False)
                if existing is not None:
                    self._check_reput(existing, header, metadata, cp.state_data, head, cp.parent_id is not None)
                    continue
                parent_entries = self._history.entries(self._history.commit(head)) if head else {}
                fields, _ = self._builder(tx.write).fields(cp.state_data, parent_entries)
                new = self.write_checkpoint(tx, header, metadata, fields, [head] if head else [])
                cause = f"{metadata.get('source') or 'put'}: step {cp.step} {cp.id}"
                staged.append((thread, head, new, cause))
            for thread, head, new, cause in staged:
                self._move_head(tx, thread, head, new, cause, parent=head)
        return out

    def write_checkpoint(self, tx: Transaction, header: dict[str, Any], metadata: dict[str, Any],
                         fields: dict[str, Entry], parents: Sequence[str], *, source: str | None = None) -> str:
        """Write the commit of one checkpoint into ``tx`` in qvc's format (:mod:`qvc.store.format`);
        return its SHA. Moves no ref: the caller moves the thread's head (``tx.move_ref``).

        ``header`` holds at least ``id``, ``thread_id`` and ``step`` (plus what the writer keeps:
        it is stored as given); ``fields`` are the state's tree entries (encoded field name to
        ``(mode, raw id)``), whose objects ``tx`` already holds or the repository has. Adds the
        ``versions`` record (state versions derived against the first parent) to ``header``.
        The commit message names the fields changed against the first parent and ``source``
        (default: ``metadata["source"]``). Raises
        :class:`SerializationError` (naming the path) if ``header`` or ``metadata`` cannot be stored.
        """
        first = parents[0] if parents else None
        before = ({n: e for n, e in self._history.entries(self._history.commit(first)).items() if n != HEADER}
                  if first else {})
        counts = dict(self._history.counts(first)[0]) if first else {}
        changed = [decode_name(n) for n, e in fields.items() if before.get(n) != e]
        removed = [decode_name(n) for n in before if n not in fields]
        for name in changed:
            counts[name] = counts.get(name, 0) + 1
        header["versions"] = [first, counts]
        try:
            header_raw = tx.write("blob", encode_header(header, metadata))
        except SerializationError:
            serde.dumps(metadata, "metadata")  # the exact path of what does not serialize
            serde.dumps(header, "checkpoint")
            raise
        tree = tx.write("tree", tree_bytes({**fields, HEADER: (MODE_BLOB, header_raw)}))
        source = str(metadata.get("source", "")) if source is None else source
        message = commit_message(header["step"], source, changed + removed,
                                 header["id"], header["thread_id"])
        new = tx.write("commit", commit_bytes(tree.hex(), parents, message)).hex()
        self._history.remember(new, counts, {decode_name(n): raw for n, (_, raw) in fields.items()})
        return new

    def descends(self, commit: str | None, ancestor: str) -> bool:
        """Whether commit ``commit`` is ``ancestor`` or has it among its ancestors (any parent).
        ``False`` for ``None``. Raises :class:`CorruptionError` if either is not in the repository."""
        if commit is None:
            return False
        if commit == ancestor:
            return True
        repo = self._repo
        # Staged commits (not yet in git's files) are walked here; libgit2 walks from the first
        # published ones. A published commit's ancestors are all published (each was staged
        # before it), so a staged ancestor can only be found among the staged commits.
        stack, seen, published = [commit], set(), []
        while stack:
            hexid = stack.pop()
            if hexid in seen:
                continue
            seen.add(hexid)
            if hexid == ancestor:
                return True
            if repo.staged(bytes.fromhex(hexid)):
                stack += self._history.commit(hexid).parents
            else:
                published.append(hexid)
        if not published or repo.staged(bytes.fromhex(ancestor)):
            return False
        try:
            goal = pygit2.Oid(hex=ancestor)
            return any(repo.retry_on_miss(lambda p=p: repo.git.descendant_of(pygit2.Oid(hex=p), goal))
                       for p in published)
        except (pygit2.GitError, KeyError) as exc:
            raise CorruptionError(f"cannot tell whether {commit[:12]} descends from {ancestor[:12]}: {exc}") from None

    def _travels(self, head: str | None, line: str | None) -> bool:
        """Whether moving a thread's head from ``head`` onto the first-parent line ending at
        ``line`` is **time travel**, the one definition every write uses: it is unless ``head``
        is on that line (an extension, or a fork through the head); a head that goes
        (``line`` ``None``) leaves its line too."""
        return head is not None and head != line and (
            line is None or all(info.hex != head for info in self._history.first_parents(line)))

    def _move_head(self, tx: Transaction, thread: str, head: str | None, target: str | None, cause: str, *,
                   parent: str | None | object = UNCHECKED, keep: bool = True) -> None:
        """Move ``thread``'s head from ``head`` to ``target`` in ``tx``: the one head move of every write.

        ``parent``, given when ``target`` is a commit this transaction wrote, is its first parent
        (``None``: a root): the line the new commit joins. A time travel (:meth:`_travels`) first
        keeps the line it leaves under ``refs/qvc/superseded/`` (unless ``keep`` is false: a
        damaged head), in the same transaction; any move but an extension then drops the
        superseded refs of lines the new head reaches again (an undone reset, a branch back to a
        tip left). If the head is not at ``head`` (another writer moved it),
        :class:`CheckpointConflictError` names the thread, and the transaction stores nothing.
        """
        ref = head_ref(thread)
        new = parent is not UNCHECKED
        line = parent if new else target
        travel = target != head and (target is None or self._travels(head, line))
        try:
            if travel and keep:
                self._keep_superseded(tx, thread, head)
            tx.move_ref(ref, head, target, cause)
        except CheckpointConflictError:
            raise CheckpointConflictError(_moved(thread, head, tx.ref(ref))) from None
        # Lines the new head reaches again are no longer superseded. None is on the old head's
        # line, and a new commit is no line's tip: a commit that extends the head reaches none.
        extends = (line if new else self._history.commit(target).parent if target else None) == head
        if target is not None and target != head and (head is None or not extends):
            left = tx.refs(superseded_prefix(thread))
            if left:
                reached = set()
                with contextlib.suppress(CorruptionError):  # a damaged line reaches nothing past the damage
                    reached.update(info.hex for info in self._history.first_parents(line))
                for name, tip in left:
                    if tip in reached:
                        tx.move_ref(name, tip, None, f"{cause.split(':', 1)[0]}: line reached again")

    def _keep_superseded(self, tx: Transaction, thread: str, tip: str) -> None:
        """Keep the line ending at ``tip`` under ``refs/qvc/superseded/`` (once: a line kept
        already has its ref)."""
        name = superseded_prefix(thread) + tip
        if tx.ref(name) is None:
            tx.move_ref(name, None, tip)

    def _check_reput(self, existing: str, header: dict, metadata: dict, state: Mapping, parent: str | None,
                     parent_given: bool) -> None:
        """A re-put of an existing id is a no-op if it stores the same bytes, else a conflict."""
        info = self._history.commit(existing)
        old_entries = self._history.entries(info)
        old_header, old_metadata = decode_header(self._blob(old_entries[HEADER][1]), f"checkpoint {existing[:12]}")
        entries, _ = self._builder(lambda kind, data: Repository.hash(kind, data)).fields(state, {})  # ids only

        def comparable(h: dict, m: dict) -> bytes:
            return serde.dumps([{k: v for k, v in h.items() if k not in ("created_at", "versions")}, m])

        same = (entries == {n: e for n, e in old_entries.items() if n != HEADER}
                and comparable(old_header, old_metadata) == comparable(header, metadata)
                and (not parent_given or info.parent == parent))
        if not same:
            raise CheckpointConflictError(
                f"checkpoint {header['id']!r} already exists (commit {existing[:12]} on thread "
                f"{old_header.get('thread_id')!r}) with different content")

    def reset(self, thread_id: str, checkpoint_id: str) -> CheckpointConfig:
        """Time travel: move the thread's head to an existing checkpoint of that thread.

        The line left behind stays reachable (``list(..., superseded=True)``). ``checkpoint_id``
        may be the full SHA of a checkpoint commit nothing reaches any more (one a reflog names,
        ``THREAD@{N}``), so a thread whose head is damaged can be put back; a damaged head is not
        kept as a line. A head ref whose file holds no ref is moved aside first and set back to
        the newest value its reflog names (as :meth:`repair_refs` does), so the line it stood for
        is kept as every reset keeps one. Raises :class:`UnknownCheckpointError`, or
        :class:`InvalidInputError` if the checkpoint belongs to another thread (fork it instead).
        """
        thread = check_thread_id(thread_id)
        with self._repo.transaction() as tx:
            try:
                target = self.resolve(checkpoint_id)
            except UnknownCheckpointError:  # a full SHA only a reflog still names (its thread's head is damaged)
                if not (len(checkpoint_id) == 40 and _HEXISH.match(checkpoint_id)
                        and self.damage(checkpoint_id.lower()) is None):
                    raise
                target = checkpoint_id.lower()
            info = self._history.commit(target)
            if info.thread_id is not None and info.thread_id != thread:
                raise InvalidInputError(f"checkpoint {checkpoint_id!r} belongs to thread {info.thread_id!r}, "
                                        f"not {thread!r}; fork it instead")
            ref = head_ref(thread)
            try:
                head = tx.ref(ref)
            except DamagedRefError:  # its file holds no ref: set aside and put back from its reflog, then reset
                aside, value = RecoveryReport(), self._reflog_value(ref)
                if self._set_aside(ref, aside) and value is not None:
                    tx.move_ref(ref, None, value, "repair: restored from the reflog")
                    aside.restored(ref, "its reflog")
                log.warning("qvc: warning: thread %r was damaged: %s", thread, aside.summary())
                head = tx.ref(ref)
            if head != target:
                # A damaged head (missing or unreadable commit) is not kept as a superseded line,
                # which would damage every read of the thread; the reflog entry keeps its SHA.
                broken = head is not None and self.damage(head) is not None
                try:
                    self._move_head(tx, thread, head, target, f"reset: moving to {info.checkpoint_id}",
                                    keep=not broken)
                except CheckpointConflictError as exc:
                    raise CheckpointConflictError(str(exc).replace("nothing was stored", "nothing was reset")) from None
        return CheckpointConfig(thread, info.checkpoint_id)

    # -- pending writes -------------------------------------------------------------------

    def pending_writes_in(self, tip: str) -> list[PendingWrite]:
        """The pending writes held by the writes commit ``tip`` (the tip of a ``refs/qvc/writes/``
        ref, or of a fetched one, checked before it is taken in), in the order they were written.
        Raises :class:`CorruptionError` if they do not decode."""
        return self._decoded(self._writes.read(tip))

    def checkpoint_pending_writes(self, sha: str) -> list[PendingWrite]:
        """Every pending write of the checkpoint in commit ``sha``, whatever layout holds it: the
        store's own (:meth:`put_writes`, ``refs/qvc/writes/<sha>``), then those keyed by its thread
        and checkpoint id (:meth:`put_checkpoint_writes`, LangGraph's), each in the order first
        written. Values are as stored: a keyed writer's values in its own encoding, which its
        viewer decodes (:func:`qvc.store.viewers.view_writes`). Raises :class:`CorruptionError`
        if they do not decode."""
        out = list(self.pending_writes_at(sha) or [])
        info = self.commit_info(sha)
        if info.thread_id is not None:
            try:
                thread = check_thread_id(info.thread_id)
            except InvalidInputError:  # no thread id of ours (a foreign commit): no keyed writes
                return out
            out += self._decoded(self.checkpoint_writes(thread, info.checkpoint_id), f"of {info.checkpoint_id}")
        return out

    def write_sets(self, name: str, tip: str) -> list[WriteSet]:
        """The sets of pending writes the writes ref ``name`` (at commit ``tip``) holds, in every
        layout (:mod:`qvc.store.writes`): the one set of a per-commit ref; every checkpoint's set of
        a thread's keyed writes ref (its record is none); the set of a per-key ref written before,
        unless the thread's writes ref holds that key's set (which is read instead); ``[]`` for
        another layout's ref. Raises :class:`CorruptionError` if the ref's commit or trees do
        not read (the sets' writes are read by :meth:`write_set`)."""
        key = name[len(WRITES):] if name.startswith(WRITES) else ""
        commit = writes_commit(key)
        if commit is not None:
            self._history.commit(tip)
            return [WriteSet(name, tip, (), commit, None, None)]
        if name.startswith(KEYED):
            component, _, last = name[len(KEYED):].rpartition("/")
            thread = decode_thread(component) if component and "/" not in component else None
            if last == ALL:
                return [WriteSet(name, tip, path, None, thread, key_of(path[-1]))
                        for path in self._writes.key_sets(tip)]
            if last and component and "/" not in component:
                self._history.commit(tip)
                key_id = key_of(last)
                all_tip = self._repo.ref(KEYED + component + "/" + ALL)
                if all_tip is not None and key_id is not None and self._writes.read_at(all_tip, key_path(key_id)):
                    return []  # shadowed: the thread's writes ref holds this key's set
                return [WriteSet(name, tip, (), None, thread, key_id)]
        self.tree_entries(tip)  # another layout's: its commit and tree read
        return []

    def write_set(self, found: WriteSet) -> list[PendingWrite]:
        """The writes of the set ``found`` (:meth:`write_sets`), as :meth:`checkpoint_pending_writes`
        gives them. Raises :class:`CorruptionError` if they do not decode."""
        return self._decoded(self._writes.read_at(found.tip, found.path))

    @staticmethod
    def _decoded(items: Sequence[tuple[str, bytes]], where: str = "") -> list[PendingWrite]:
        """Stored writes (msgpack ``[task, channel, index, value]``, every layout's) as :class:`PendingWrite`."""
        out = []
        for key, data in items:
            what = f"write {key}{' ' + where if where else ''}"
            found = serde.loads(data, what)
            if not (isinstance(found, list) and len(found) == 4 and isinstance(found[0], str)
                    and isinstance(found[1], str)):
                raise CorruptionError(f"{what} is no [task, channel, index, value]")
            out.append(PendingWrite(found[0], found[1], found[3]))
        return out

    def put_writes(self, config: CheckpointConfig, writes: Sequence[PendingWrite], task_id: str) -> None:
        """Attach ``writes`` to the addressed checkpoint, durably, without rewriting its commit.

        Each write is a :class:`PendingWrite` (its own task id) or a ``(channel, value)`` pair
        (``task_id`` is used). A write replaces an earlier one with the same (task id, channel,
        index in ``writes``). Raises :class:`UnknownThreadError` / :class:`UnknownCheckpointError`
        if the checkpoint does not exist.
        """
        hexid = self._existing(config)
        items = []
        for idx, w in enumerate(writes):
            if isinstance(w, tuple) and len(w) == 3:
                task, channel, value = w
            elif isinstance(w, tuple) and len(w) == 2:
                (channel, value), task = w, task_id
            else:
                raise InvalidInputError(f"writes[{idx}] must be a PendingWrite or a (channel, value) pair")
            if not isinstance(task, str) or not isinstance(channel, str):
                raise InvalidInputError(f"writes[{idx}]: task id and channel must be strings")
            items.append(Item(f"{entry_key(task, channel)}.{idx}", serde.dumps([task, channel, idx, value],
                                                                                f"writes[{idx}]")))
        self._writes.upsert(writes_ref(hexid), items, f"writes for checkpoint {hexid[:12]} · {len(items)} write(s)\n")

    # -- deleting -------------------------------------------------------------------------

    def delete(self, config: CheckpointConfig) -> None:
        """Delete one checkpoint (the thread's latest without an id).

        Its children are re-parented onto its parent (their ids stay; their commit SHAs
        change). Deleting a thread's only checkpoint deletes the thread. The data stays in
        the object store until :meth:`purge`. Raises :class:`UnknownThreadError` /
        :class:`UnknownCheckpointError`.
        """
        with self._repo.transaction() as tx:
            target = self._existing(config)
            info = self._history.commit(target)
            mapping: dict[str, str | None] = {target: info.parent}
            # Plan every move first, then apply them in an order whose every prefix is
            # consistent, so a crash part-way loses nothing acknowledged: new pending-writes
            # refs, then the heads and superseded lines, then the old pending-writes refs.
            moves: list[tuple[str, str | None, str | None]] = []
            for name, tip in tx.refs("refs/"):
                if name.startswith(WRITES):
                    continue
                new = self._rewriter.line(tx, tip, mapping)
                if new == tip:
                    continue
                if name.startswith(HEADS) and new is not None:
                    owner = self._history.commit(new).thread_id
                    if owner is not None and encode_thread(owner) != name[len(HEADS):]:
                        new = None  # its only checkpoints are gone: do not adopt another thread's
                if name.startswith(SUPERSEDED):
                    moves.append((name, tip, None))
                    fresh = name.rsplit("/", 1)[0] + "/" + new if new is not None else None
                    if fresh is not None and tx.ref(fresh) is None:
                        moves.append((fresh, None, new))
                else:
                    moves.append((name, tip, new))
            rekeyed, dropped = [], []
            for old, new in mapping.items():
                wtip = tx.ref(writes_ref(old)) if new != old else None
                if wtip is None:
                    continue
                if new is not None and old != target:
                    rekeyed.append((writes_ref(new), None, wtip))
                dropped.append((writes_ref(old), wtip, None))
            cause = f"delete: checkpoint {info.checkpoint_id}"
            tx.rewrite_history(f"delete checkpoint {info.checkpoint_id} of thread {config.thread_id}")
            for name, old, new in rekeyed + moves + dropped:
                tx.move_ref(name, old, new, cause)

    def delete_thread(self, thread_id: str) -> None:
        """Delete a thread: its branch, its superseded lines and the pending writes of its checkpoints
        (those of its commits and those keyed by its checkpoint ids, :meth:`put_checkpoint_writes`).

        Checkpoints shared with threads forked from it stay. A damaged thread (a ref pointing at a
        missing or unreadable commit) is deleted too: its refs go, with the pending writes of
        whatever part of its line still reads. Raises :class:`UnknownThreadError`.
        """
        self.delete_threads([thread_id])

    def delete_threads(self, thread_ids: Sequence[str], *, missing_ok: bool = False) -> None:
        """Delete several threads as :meth:`delete_thread` does, in one transaction (all or none
        after a crash). Raises :class:`UnknownThreadError` for a thread without checkpoints
        unless ``missing_ok`` (its keyed pending writes, if any, go all the same)."""
        threads = [check_thread_id(t) for t in thread_ids]
        with self._repo.transaction() as tx:
            refs: list[tuple[str, str]] = []
            writes: dict[str, str] = {}
            for thread in threads:
                own, its_writes = self._rewriter.thread_refs(tx, thread)
                if not own and not missing_ok:
                    raise UnknownThreadError(f"thread {thread!r} has no checkpoints")
                refs += own
                writes.update(its_writes)
            if not refs and not writes:
                return
            tx.rewrite_history("delete thread(s) " + ", ".join(repr(t) for t in thread_ids))
            # the threads' refs first: a crash part-way leaves only unreachable pending writes
            for name, tip in refs + list(writes.items()):
                tx.move_ref(name, tip, None)

    def rename_thread(self, old_id: str, new_id: str) -> int:
        """Rename a thread: its branch, superseded lines, reflog and the thread id its own
        checkpoints record (their ids stay; their commit SHAs change, pending writes and tags
        follow, keyed writes included; the old commits stay named in the carried-over reflog).
        Returns how many commits were copied under the new name.

        Raises :class:`UnknownThreadError`, :class:`CheckpointConflictError` if ``new_id``
        exists or another writer moved the thread meanwhile, and :class:`InvalidInputError`
        if other threads were forked from it (their history records the old name; fork instead).
        """
        old, new = check_thread_id(old_id), check_thread_id(new_id)
        if old == new:
            return 0
        with self._repo.transaction() as tx:
            # read through the transaction: a dead writer's lease on any of them is finished first
            tips = [(head_ref(old), tx.ref(head_ref(old)))] + tx.refs(superseded_prefix(old))
            tips = [(n, t) for n, t in tips if t is not None]
            if not tips:
                raise UnknownThreadError(f"thread {old!r} has no checkpoints")
            if tx.ref(head_ref(new)) is not None or tx.refs(superseded_prefix(new)):
                raise CheckpointConflictError(f"thread {new!r} already exists")
            own = {info.hex for _, tip in tips for info in self._history.first_parents(tip)
                   if info.thread_id == old}
            for name, tip in self._repo.refs(HEADS):
                if name != head_ref(old) and any(i.hex in own for i in self._history.first_parents(tip)):
                    raise InvalidInputError(f"thread {self.thread_of_ref(name)!r} was forked from {old!r}; "
                                            f"renaming would duplicate checkpoints (fork {old!r} instead)")
            mapping: dict[str, str] = {}
            for _, tip in tips:
                self._rewriter.relabel(tx, tip, old, new, mapping)
            moves = [(head_ref(new), None, mapping.get(tips[0][1], tips[0][1]))]
            moves += [(superseded_prefix(new) + mapping.get(t, t), None, mapping.get(t, t)) for _, t in tips[1:]]
            for sha, fresh in mapping.items():
                wtip = tx.ref(writes_ref(sha))
                if wtip is not None:
                    moves += [(writes_ref(fresh), None, wtip), (writes_ref(sha), wtip, None)]
            moves += [(name, tip, mapping[tip]) for name, tip in tx.refs(TAGS) if tip in mapping]
            prefix = keyed_prefix(old)  # keyed by checkpoint id, which stays
            for ref, wtip in tx.refs(prefix):
                moves += [(keyed_prefix(new) + ref[len(prefix):], None, wtip), (ref, wtip, None)]
            moves += [(name, tip, None) for name, tip in tips]
            reflog = self._repo.reflog(head_ref(old))
            tx.rewrite_history(f"rename thread {old!r} to {new!r}")
            for name, was, now in moves:
                tx.move_ref(name, was, now, f"branch: renamed {old} to {new}")
            if reflog:  # carry the old reflog over, under the new name
                tx.prepend_reflog(head_ref(new), reflog)
        return len(mapping)

    # -- tags -----------------------------------------------------------------------------

    def tags(self) -> list[tuple[str, str]]:
        """``(name, commit)`` of every tag (``refs/tags/<name>``), sorted by name."""
        return sorted((name[len(TAGS):], tip) for name, tip in self._repo.refs(TAGS))

    def tag(self, name: str) -> str | None:
        """The commit tag ``name`` points at, ``None`` if there is no such tag (or the name is not
        a valid tag name)."""
        try:
            return self._repo.ref(tag_ref(name))
        except InvalidInputError:
            return None

    def set_tag(self, name: str, commit: str, *, force: bool = False) -> str | None:
        """Point tag ``name`` at checkpoint commit ``commit`` (a full SHA); durable on return. Returns
        the commit it pointed at before (``None``: a new tag). Raises :class:`InvalidInputError` for
        a name git would refuse, :class:`CorruptionError` if ``commit`` does not read, and
        :class:`CheckpointConflictError` if the tag exists and ``force`` is false (nothing changes)."""
        ref = tag_ref(name)
        self._history.commit(commit)  # exists and parses
        with self._repo.transaction() as tx:
            old = tx.ref(ref)
            if old is not None and not force:
                raise CheckpointConflictError(f"tag {name!r} already exists (use -f to move it)")
            if old != commit:
                tx.move_ref(ref, old, commit, f"tag: {name}")
        return old

    def delete_tag(self, name: str) -> str:
        """Delete tag ``name``; returns the commit it pointed at (the checkpoint stays). Raises
        :class:`UnknownCheckpointError` if there is no such tag."""
        ref = tag_ref(name)
        with self._repo.transaction() as tx:
            old = tx.ref(ref)
            if old is None:
                raise UnknownCheckpointError(f"tag {name!r} not found")
            tx.move_ref(ref, old, None, f"tag: deleted {name}")
        return old

    # -- lines of checkpoints for adapters ---------------------------------------------------
    #
    # What an adapter whose framework names checkpoints by id within a thread needs (LangGraph's
    # saver is one): a thread's checkpoints by id over every line it has, a put whose fields are
    # tree entries the adapter encoded itself and whose parent may be any checkpoint of the
    # thread, pending writes keyed by thread and checkpoint id, and the rewrites it offers.

    def thread_index(self, thread_id: str) -> ThreadIndex | None:
        """The checkpoints of a thread by id: every checkpoint commit of the thread reachable from
        its head or its superseded lines, through any parent (threads written before lines existed
        kept older lines as second parents). ``None`` for a thread without checkpoints. Cached;
        always right for the refs as read now (rewrites in any process drop the cache)."""
        thread = check_thread_id(thread_id)
        return self._thread_index(thread, self.head(thread))

    def _thread_index(self, thread: str, head: str | None) -> ThreadIndex | None:
        """:meth:`thread_index` for a head the caller has just read."""
        if head is None:
            return None
        return self._history.thread_index(thread, [head, *self._superseded_tips(thread)])

    def _superseded_tips(self, thread: str) -> list[str]:
        """The tips of the thread's superseded lines, sorted (a scan of the thread's superseded-ref
        directory and of ``packed-refs``, parsed again only when it changed)."""
        return sorted(tip for _, tip in self._repo.refs(superseded_prefix(thread)))

    def put_entries(self, thread_id: str, header: dict[str, Any], metadata: dict[str, Any],
                    entries_of: Callable[[str | None, Callable[[str, bytes], bytes]], dict[str, Entry]], *,
                    parent_id: str | None = None, source: str | None = None) -> str:
        """Store one checkpoint whose state the caller encoded; return its commit SHA. Durable on
        return in SYNC mode.

        ``header`` holds at least ``id`` and ``step`` (stored as given, ``thread_id`` set to
        the thread); ``entries_of(parent, write)`` returns the state's tree entries given the parent
        commit (``None`` for none), writing the objects they need through ``write(kind, data) ->
        raw id``. The parent is the thread's checkpoint ``parent_id`` (:meth:`thread_index`), else
        the head. A parent other than the head is a time travel: the head's line is kept under
        ``refs/qvc/superseded/`` and the head moves to the new commit (one model of threads:
        lines, never second parents). The head is read and moved in one transaction, so no other
        writer comes between.

        Re-putting an id of the thread with the same entries, header and metadata is a no-op (the
        existing commit is returned); with other content the new commit replaces the old one,
        whose descendants are re-parented (:meth:`drop_checkpoints`). Raises
        :class:`SerializationError` (header or metadata).
        """
        thread = check_thread_id(thread_id)
        header = {**header, "thread_id": thread}
        cid = header["id"]
        ref = head_ref(thread)
        with self._repo.transaction() as tx:
            head = tx.ref(ref)
            index = self._thread_index(thread, head)
            existing = index.ids.get(cid) if index else None
            parent = index.ids.get(parent_id) if (index and parent_id) else None
            objects: list[tuple[str, bytes]] = []

            def write(kind: str, data: bytes) -> bytes:
                objects.append((kind, data))
                return object_id(kind, data)

            fields = entries_of(parent, write)
            if existing is not None and self._same_entries(existing, fields, header, metadata):
                return existing
            for kind, data in objects:
                tx.write(kind, data)
            first = parent or head
            new = self.write_checkpoint(tx, dict(header), metadata, fields, [first] if first else [], source=source)
            travel = self._travels(head, first)
            cause = f"{source or 'put'}: step {header['step']} {cid}" + (" (time travel)" if travel else "")
            self._move_head(tx, thread, head, new, cause, parent=first)
        if existing is not None:
            self.drop_checkpoints(thread, [existing], keep=cid)
        return new

    def _same_entries(self, existing: str, fields: dict[str, Entry], header: dict, metadata: dict) -> bool:
        entries = self._history.entries(self._history.commit(existing))
        old_header, old_meta = decode_header(self._blob(entries[HEADER][1]), f"checkpoint {existing[:12]}")
        old_header.pop("versions", None)
        return ({n: e for n, e in entries.items() if n != HEADER} == fields
                and serde.dumps([old_header, old_meta]) == serde.dumps([header, metadata]))

    def put_checkpoint_writes(self, thread_id: str, checkpoint_id: str, items: Sequence[Item], message: str) -> None:
        """Upsert pending writes of the thread's checkpoint ``checkpoint_id`` (which need not be
        stored yet: writes may come first) into the thread's one writes ref,
        ``refs/qvc/writes/lg/<thread>/%all`` (:mod:`qvc.store.writes`; writes a repository
        kept under the checkpoint's own ref before move into it); see
        :meth:`qvc.store.writes.PendingWrites.upsert` for the rules. Durable on return in SYNC mode.

        Each item's data is a msgpack ``[task id, channel, index, value]``, as :meth:`put_writes`
        stores its own (the value in the caller's encoding), so that readers list them as the
        checkpoint's pending writes (:meth:`checkpoint_pending_writes`) and ``qvc fsck`` checks
        them (:meth:`write_sets`); the caller's viewer decodes the values."""
        thread = check_thread_id(thread_id)
        self._writes.upsert(thread_writes_ref(thread), items, message, path=key_path(checkpoint_id),
                            legacy=keyed_ref(thread, checkpoint_id))

    def checkpoint_writes(self, thread_id: str, checkpoint_id: str) -> list[tuple[str, bytes]]:
        """``(key, stored bytes)`` of the pending writes :meth:`put_checkpoint_writes` stored for
        the thread's checkpoint ``checkpoint_id``, in the order first written (``[]``: none)."""
        thread = check_thread_id(thread_id)
        return self._writes.keyed(thread_writes_ref(thread), key_path(checkpoint_id),
                                  keyed_ref(thread, checkpoint_id)) or []

    def drop_checkpoints(self, thread_id: str, shas: Sequence[str], *, keep: str | None = None) -> None:
        """Delete the checkpoint commits ``shas`` from the thread's lines, with their keyed pending
        writes: their descendants are re-parented onto their parents (ids kept, SHAs changed).
        When several lines remain where the head was, the one whose checkpoint id is ``keep``
        (else the newest) is the head and the others superseded lines. The data stays in the
        object store until :meth:`purge`. Raises :class:`CheckpointConflictError` if another
        writer moves the thread meanwhile."""
        thread = check_thread_id(thread_id)
        with self._repo.transaction() as tx:
            head = tx.ref(head_ref(thread))
            if head is None or not shas:
                return
            superseded = tx.refs(superseded_prefix(thread))
            ids = {self._history.commit(s).checkpoint_id for s in shas}
            gone, paths = {keyed_ref(thread, c) for c in ids}, {key_path(c) for c in ids}
            tx.rewrite_history(f"drop checkpoint(s) {', '.join(sorted(ids))} of thread {thread}")
            self._rewriter.settle(tx, thread, head, superseded, set(shas), keep=keep)
            self._writes.drop_keyed(tx, thread_writes_ref(thread), paths, "drop: writes of deleted checkpoints\n")
            for ref, tip in tx.refs(keyed_prefix(thread)):
                if ref in gone:  # written before the thread's one writes ref
                    tx.move_ref(ref, tip, None)

    def prune_thread(self, thread_id: str) -> None:
        """Keep only the thread's newest checkpoint by id (:meth:`thread_index`), as a root commit,
        with its keyed pending writes; every other line and write of the thread goes. No-op for a
        thread without checkpoints."""
        thread = check_thread_id(thread_id)
        with self._repo.transaction() as tx:
            head = tx.ref(head_ref(thread))
            index = self._thread_index(thread, head)
            if index is None or index.latest is None:
                return
            keep = index.ids[index.latest]
            superseded = tx.refs(superseded_prefix(thread))
            one = thread_writes_ref(thread)
            stay = (one, keyed_ref(thread, index.latest))
            writes = [(r, t) for r, t in tx.refs(keyed_prefix(thread)) if r not in stay]
            tx.rewrite_history(f"prune thread {thread} to its latest checkpoint")
            new = self._rewriter.commit(tx, keep, []) if self._history.commit(keep).parents else keep
            if new != head:
                tx.move_ref(head_ref(thread), head, new, "prune: kept the latest checkpoint")
            self._writes.keep_keyed(tx, one, key_path(index.latest), "prune: kept the latest checkpoint's writes\n")
            for ref, tip in superseded + writes:
                tx.move_ref(ref, tip, None)

    def copy_threads(self, pairs: Sequence[tuple[str, str]],
                     header_update: Callable[[str, str], Mapping[str, Any]] | None = None) -> None:
        """Copy threads, ``(source, target)`` each, in one transaction: every line (the same ids and
        shape; new commits relabelled as the target's, each header updated with
        ``header_update(sha, target)``; every state blob shared) and every keyed pending write. A
        source without checkpoints is skipped. Raises :class:`CheckpointConflictError` (nothing
        copied) if a target has checkpoints."""
        checked = [(check_thread_id(a), check_thread_id(b)) for a, b in pairs]
        with self._repo.transaction() as tx:
            for _, target in checked:
                if tx.ref(head_ref(target)) is not None:
                    raise CheckpointConflictError(f"thread {target!r} already has checkpoints")
            for source, target in checked:
                head = tx.ref(head_ref(source))
                if head is None:
                    continue

                def relabel(sha: str, target: str = target) -> tuple[str, Mapping[str, Any]]:
                    return target, (header_update(sha, target) if header_update else {})

                self._rewriter.settle(tx, source, head, tx.refs(superseded_prefix(source)), set(), target=target,
                                      relabel=relabel)
                prefix = keyed_prefix(source)
                for ref, tip in tx.refs(prefix):
                    tx.move_ref(keyed_prefix(target) + ref[len(prefix):], None, tip)

    # -- a thread's record: what an adapter keeps beside the head, moved with it -----------
    #
    # For frameworks whose conversation is a chain of immutable entries plus one mutable record
    # (pydantic-ai's ConversationStore): each entry a checkpoint, the record's head the thread's
    # head, the record's other fields bytes of the adapter's kept in the thread's writes ref
    # (:data:`qvc.store.writes.RECORD`), and one compare-and-swap on the record for all of it.

    def thread_record(self, thread_id: str) -> bytes | None:
        """The thread's record, the bytes :meth:`put_record` stored last, or ``None`` (none stored,
        or deleted). Raises :class:`CorruptionError` if it does not read."""
        thread = check_thread_id(thread_id)
        return self._writes.record_at(self._repo.ref(thread_writes_ref(thread)))

    def record_threads(self) -> list[str]:
        """Every thread with a writes ref, where a record may be (:meth:`thread_record` says),
        sorted: those with a head and those without (a record whose head is ``None``). A thread
        whose id is too long to name its ref is found through its head only."""
        found = set(self.threads())
        tail = "/" + ALL
        for name, _ in self._repo.refs(KEYED):
            if name.endswith(tail):
                thread = decode_thread(name[len(KEYED):-len(tail)])
                if thread is not None:
                    found.add(thread)
        return sorted(found)

    def put_record(self, thread_id: str, record: bytes, *, expected: bytes | None,
                   checkpoints: Sequence[tuple[Checkpoint, Mapping[str, Any]]] = (),
                   head: str | None, header: Mapping[str, Any] | None = None) -> dict[str, str]:
        """Store new checkpoints, move the thread's head and replace its record, in one transaction,
        as a compare-and-swap on the record; returns ``{checkpoint id: commit SHA}`` of the new ones.

        ``expected`` is the record as the caller read it (:meth:`thread_record`; ``None``: none
        stored): if the stored one differs when the transaction starts, or another writer moves it
        or the head before it ends, :class:`CheckpointConflictError` names the thread and nothing
        is stored (no ref moved, so neither the record nor the head). ``checkpoints`` are
        ``(checkpoint, metadata)`` pairs in order, each checkpoint's parent its ``parent_id`` (one
        written earlier in this call, or any stored checkpoint, of any thread: a fork), ``None`` a
        root; their ids must be new (:class:`CheckpointConflictError` otherwise); ``header`` holds
        keys kept in each one's header beside the store's own (what names a viewer, as
        :meth:`put`'s). ``head`` is the checkpoint id the thread's head moves to (one of
        ``checkpoints`` or any stored checkpoint; ``None``: the thread keeps no head); a head
        not reached from the new one stays as a superseded line (time travel, asked for by
        the caller's ``expected``; so does a head another kind of writer moved, :meth:`put`,
        before the transaction). The record lives in the thread's writes ref, so it is
        pushed, cloned and deleted with the thread (:meth:`delete_record`,
        :meth:`delete_thread`); :meth:`prune_thread` drops it. Durable on return in SYNC mode.
        Raises :class:`InvalidInputError`, :class:`UnknownCheckpointError` (an unknown parent
        or head) and :class:`SerializationError`.
        """
        thread = check_thread_id(thread_id)
        if not isinstance(record, bytes):
            raise InvalidInputError(f"record must be bytes, not {type(record).__name__}")
        extra = _check_mapping(header, "header")
        ref, wref = head_ref(thread), thread_writes_ref(thread)
        with self._repo.transaction() as tx:
            wtip = tx.ref(wref)
            if self._writes.record_at(wtip) != expected:
                raise CheckpointConflictError(f"thread {thread!r}: its record was changed by another writer; "
                                              f"nothing was stored")
            old = tx.ref(ref)
            made: dict[str, str] = {}
            for checkpoint, metadata in checkpoints:
                _check_checkpoint(checkpoint, thread)
                if checkpoint.id in made or self._history.lookup(checkpoint.id, refresh=False) is not None:
                    raise CheckpointConflictError(f"checkpoint {checkpoint.id!r} already exists; nothing was stored")
                pid = checkpoint.parent_id
                parent = None if pid is None else made.get(pid) or self._exact(pid, "parent_id")
                cp_header = _checkpoint_header(checkpoint, thread, extra, pending_writes=False)
                parent_entries = self._history.entries(self._history.commit(parent)) if parent else {}
                fields, _ = self._builder(tx.write).fields(dict(checkpoint.state_data), parent_entries)
                made[checkpoint.id] = self.write_checkpoint(tx, cp_header, _check_mapping(metadata, "metadata"),
                                                            fields, [parent] if parent else [])
            target = None if head is None else made.get(head) or self._exact(head, "head")
            cause = f"record: {len(made)} new checkpoint(s), head {head}"
            new_wtip = self._writes.stage_record(tx, wtip, record, cause + "\n")
            tx.move_ref(wref, wtip, new_wtip)  # first: the record's compare-and-swap orders its writers
            self._move_head(tx, thread, old, target, cause)  # a conflict stores neither move
        return made

    def delete_record(self, thread_id: str, *, expected: bytes) -> None:
        """Delete the thread with its record, as a compare-and-swap on the record: its head,
        superseded lines and writes ref go (:meth:`delete_thread`; checkpoints other threads
        reach stay), only if the stored record is ``expected``, else
        :class:`CheckpointConflictError` and nothing changes. The data stays in the object store
        until :meth:`purge`."""
        thread = check_thread_id(thread_id)
        wref = thread_writes_ref(thread)
        with self._repo.transaction() as tx:
            wtip = tx.ref(wref)
            if wtip is None or self._writes.record_at(wtip) != expected:
                raise CheckpointConflictError(f"thread {thread!r}: its record was changed or deleted by another "
                                              f"writer; nothing was deleted")
            own = [(head_ref(thread), tx.ref(head_ref(thread)))] + tx.refs(superseded_prefix(thread))
            refs = [(n, t) for n, t in own if t is not None] + [(n, t) for n, t in tx.refs(keyed_prefix(thread))
                                                               if n != wref]
            tx.rewrite_history(f"delete the record of thread {thread}")
            tx.move_ref(wref, wtip, None)  # first, as put_record moves it first
            for name, tip in refs:
                tx.move_ref(name, tip, None)

    def _exact(self, checkpoint_id: str, what: str) -> str:
        """The commit of the checkpoint with exactly this id; :class:`UnknownCheckpointError` if none."""
        found = self._history.lookup(checkpoint_id) if isinstance(checkpoint_id, str) and checkpoint_id else None
        if found is None:
            raise UnknownCheckpointError(f"{what} {checkpoint_id!r}: unknown checkpoint")
        return found

    # -- maintenance ------------------------------------------------------------------------

    def retain(self, policy: Policy | None = None, *, dry_run: bool = False, reclaim: bool = True,
               now: float | None = None) -> RetentionReport:
        """Apply the repository's retention policy (docs/retention.md): the ``retention.*`` settings
        of its configuration, with those ``policy`` sets winning over them for this call. Returns
        what it did (:class:`~qvc.store.retention.RetentionReport`), or with ``dry_run`` what it
        would do and the bytes it would free, changing nothing.

        Every thread keeps its head and whatever its policy keeps, with their checkpoint ids,
        states and pending writes; a thread's removed checkpoints leave its lines in one
        transaction (a put landing meanwhile is kept: the thread is planned again). Rewrites are
        recorded (:meth:`rewrites`) and durable on return. With ``reclaim`` the freed bytes then
        leave the disk (:meth:`purge`: deleted data and every reflog go too; the report has the
        repository's bytes before and after). Ages count back from ``now`` (Unix seconds; default:
        the time of the call). Raises :class:`InvalidInputError` for a configured setting that
        does not parse, and what :meth:`purge` raises.
        """
        from qvc.plumbing.maintenance import disk_usage, history_usage  # deferred, as in gc
        from qvc.store.retention import Policies, Retention, RetentionReport

        t0 = time.monotonic()
        policies = Policies.from_config(self.config()).with_call(policy)
        report = RetentionReport(dry_run)
        if policies:
            now = time.time() if now is None else now
            heads = self.thread_heads()
            report.examined = len(heads)
            retention = Retention(self._repo, self._history, self._rewriter, self._writes)
            plans = retention.plan(policies, heads, now, report)
            if dry_run:
                report.threads = plans
                retention.estimate(plans, report)
            elif plans:
                report.bytes_before, report.total_before = history_usage(self.path), disk_usage(self.path)
                retention.apply(plans, policies, now, report)
                if reclaim and report.threads:
                    self.purge()
                report.bytes_after, report.total_after = history_usage(self.path), disk_usage(self.path)
        report.seconds = time.monotonic() - t0
        return report

    def gc(self) -> None:
        """Pack objects and refs with git (waits for writers in every process). Deleted
        checkpoints stay in the object store; :meth:`purge` drops them."""
        from qvc.plumbing import maintenance  # deferred: `import qvc` does not load git's subprocess machinery

        try:
            with self._repo.exclusive() as lock_fd:
                maintenance.gc(self._repo, lock_fd)
        except StorageError:
            raise
        except OSError as exc:  # a full disk: git's packs are written aside, the old ones stay
            raise StorageError.of(exc, self.path, "cannot pack") from exc

    def purge(self) -> None:
        """Make deleted checkpoints unrecoverable: drop unreachable objects from the repository.

        Runs ``git`` (repack and prune) under the exclusive maintenance lock, so it waits for
        writers in every process; publishes what is staged first and erases what was deleted
        from the staging database's files too. Raises :class:`StorageError` and purges nothing
        while a staged ref cannot be written to git's files (another program's lock). The
        thread summary files (:mod:`qvc.store.summaries`, which copy headers and small field
        blobs) are removed first; later lists write them again from what the refs reach. The
        purge is recorded first, as a rewrite is (:meth:`rewrites`), signed when the store signs.
        """
        from qvc.plumbing import maintenance  # deferred, as in gc

        self._rewrites.record("purge: the data of deleted checkpoints and every reflog erased")
        try:
            with self._repo.exclusive() as lock_fd:
                self._summaries.drop()
                maintenance.purge(self._repo, lock_fd)
        except StorageError:
            raise
        except OSError as exc:
            raise StorageError.of(exc, self.path, "cannot purge") from exc


def _unasked_travel(thread: str, parent_id: str, head: str) -> str:
    return (f"thread {thread!r}: parent_id {parent_id!r} is not its head {head[:12]} nor after it (time travel, or "
            f"another writer moved the head); nothing was stored. To supersede the head's line on purpose, pass "
            f"expected_head=<the head's SHA>, or reset the thread")


def _moved(thread: str, expected: str | None, found: str | None) -> str:
    was = expected[:12] if expected else "no checkpoints"
    now = found[:12] if found else "no checkpoints"
    return f"thread {thread!r} was moved by another writer (expected {was}, found {now}); nothing was stored"


def _thread_of(config: Any) -> str:
    thread = getattr(config, "thread_id", None)
    if thread is None and not hasattr(config, "thread_id"):
        raise InvalidInputError(f"expected a CheckpointConfig, not {type(config).__name__}")
    return check_thread_id(thread)


def _checkpoint_header(checkpoint: Checkpoint, thread: str, extra: dict, *, pending_writes: bool = True) -> dict:
    """The header a checkpoint's commit stores: the store's keys, then ``extra`` (an adapter's own
    keys; :class:`InvalidInputError` for one of the store's). ``pending_writes=False``: none kept."""
    header = {
        "id": checkpoint.id, "thread_id": thread, "step": checkpoint.step, "parent_id": checkpoint.parent_id,
        "created_at": checkpoint.created_at, "schema_version": checkpoint.schema_version,
        "versions_seen": checkpoint.versions_seen,
        "pending_writes": [list(w) for w in checkpoint.pending_writes or []] if pending_writes else [],
    }
    clash = sorted(k for k in extra if k in header or k == "versions")
    if clash:
        raise InvalidInputError(f"header keys {clash} are the store's own")
    header.update(extra)
    return header


def _check_mapping(value: Any, what: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"{what} must be a mapping, not {type(value).__name__}")
    return dict(value)


def _check_checkpoint(checkpoint: Any, thread: str) -> None:
    for attr in ("id", "thread_id", "step", "state_data"):
        if not hasattr(checkpoint, attr):
            raise InvalidInputError(f"expected a Checkpoint, not {type(checkpoint).__name__}")
    if not isinstance(checkpoint.id, str) or not checkpoint.id:
        raise InvalidInputError(f"checkpoint.id must be a non-empty string, not {checkpoint.id!r}")
    if checkpoint.thread_id != thread:
        raise InvalidInputError(f"checkpoint.thread_id {checkpoint.thread_id!r} does not match "
                                f"config.thread_id {thread!r}")
    if not isinstance(checkpoint.step, int) or isinstance(checkpoint.step, bool):
        raise InvalidInputError(f"checkpoint.step must be an integer, not {checkpoint.step!r}")
    if not isinstance(checkpoint.state_data, Mapping):
        raise InvalidInputError(f"checkpoint.state_data must be a mapping, not {type(checkpoint.state_data).__name__}")
    if checkpoint.parent_id is not None and (not isinstance(checkpoint.parent_id, str) or not checkpoint.parent_id):
        raise InvalidInputError(
            f"checkpoint.parent_id must be a non-empty string or None, not {checkpoint.parent_id!r}")


__all__ = ["GitCheckpointStore", "CommitInfo"]
