"""Staging: the one owner of every acknowledged write until git's files hold it.

A repository's writes are staged in one SQLite database in WAL mode, ``qvc/staging.db``, then
published to git's files by whoever gets there first. SQLite gives the ordering, the locking
and the crash recovery; this module only says what is stored and how it reaches git.

**What is stored** (tables): ``objects`` (git objects not yet in a pack), ``refs`` (the ref
overlay: each staged ref's acknowledged value, ``NULL`` for deleted, and the value git's files
held when it was first staged), ``moves`` (every staged move in order: the chain that ties the
overlay to git's files, and the reflog lines of moves that have a message), ``ids`` (the
checkpoint ids each transaction put on a ref since history was last rewritten) and ``meta``
(the transaction sequence number, the generation token a rewrite changes).

**The contract.**

* A :meth:`Staging.transaction` is one SQLite transaction (``BEGIN IMMEDIATE``): its reads see
  every transaction committed before it began, its :meth:`StagedTransaction.move` is a
  compare-and-swap against the overlay (else git's files), and a conflict raises
  :class:`~qvc.errors.CheckpointConflictError` with nothing stored. Writers of any number of
  processes and threads queue on a ``flock`` (``qvc/staging.queue``) in front of SQLite's
  write lock (SQLite's own busy handler waits in sleeps) and hold both for one transaction
  only: a committed transaction holds no lock, so a writer that stops (SIGSTOP, a debugger)
  after its commit blocks no one, and every transaction that starts later, in any process,
  sees its writes. A writer waits in the queue for up to ``write_wait`` seconds
  (:data:`OPEN_WAIT`, 60, unless told): a writer stopped *inside* its transaction holds the
  queue until it resumes or dies, and the others then fail with
  :class:`~qvc.errors.StorageError` (``EBUSY``, naming the queue) with nothing stored. That
  wait is polled; a process's threads first queue among themselves on a blocking ``flock`` of
  an anonymous file of its own, which hands over at once (only the first in line polls).
* **Durable when**: ``sync``, at commit (``synchronous=FULL``: the WAL is flushed before the
  transaction returns; the transactions of a process's threads that arrive while one runs
  commit with it, as one SQLite transaction and one flush, each in a savepoint of its own:
  a group commit, :meth:`Staging._grouped`); ``async``, within ``max_lag`` seconds (a background flush of the WAL);
  ``exit``, at :meth:`Staging.flush` or :meth:`Staging.close`. A process killed after its commit
  loses nothing in any mode (the data is in the OS). With ``fsync=False`` nothing is flushed.
* **Readers** (:meth:`Staging.ref`, :meth:`Staging.refs`, :meth:`Staging.object`,
  :meth:`Staging.lookup`) ask the overlay first, then git's files: they never wait for a
  publication and know nothing of locks.
* **Publication** (:meth:`Staging.publish`) is idempotent and anyone's: it writes the staged
  objects as one pack, then moves each staged ref with git's own lock-and-rename (its reflog
  lines first), flushes what it wrote (files, and each directory it created with its parent),
  and only then deletes the published rows in one transaction (if the writers' queue is had
  within ``lock_wait``: a writer stopped mid-transaction holds it, and the rows then stay for
  the next publisher). In ``async`` and ``exit`` it
  first flushes the log (write-ahead: git's files are never ahead of a log a power cut could
  roll back). A ref file a power cut tore (empty, NUL bytes, or the start of a value the ref
  took while staged) is written over; one holding anything else is someone's, and the ref
  stays staged. Killed anywhere, the next publisher simply does it again: a ref already at its
  staged value is left as it is, and reflog lines already appended are not appended twice.
  Publishers take turns on ``qvc/publish.lock``; the background publisher, finding it taken,
  returns at once (someone else is publishing); an explicit one waits up to ``lock_wait``.
* **Readers create nothing.** A store connects to the database on its first write; until then,
  and in a read-only store, a read where the log holds nothing reads the file as it is
  (SQLite's ``immutable``), checked afterwards against the file's identity and the log.
* **Plain git moving a staged ref.** If git's file holds a value that is neither the staged
  chain's base nor any value of the chain when the ref is published, another program moved the
  ref under a staged write. The acknowledged staged value wins (every qvc reader has seen it),
  and the other program's value, when it names a commit, is kept under
  ``refs/qvc/displaced/<ref>/<sha>`` with a warning, so neither is lost.
* **git's lock files.** A publisher takes ``<ref>.lock`` (and ``packed-refs.lock`` for a
  delete) as git does, exclusively, only for the rename. It creates each lock whole, by linking
  a file of its own into place, after noting the file's identity in ``qvc/publishing``; so a
  lock is provably a dead publisher's when the publisher's turn is free and the lock is the
  file noted, and only such a lock is removed. A lock held by another program makes a
  publisher wait up to :data:`REF_LOCK_WAIT` (as git waits for ``packed-refs.lock``; once per
  store while that lock stays, later publications try it once) and then leave that ref
  staged: qvc's readers see the acknowledged value, plain git sees it once the lock is gone
  and the next publisher (any write, ``flush``, ``close``, open, ``qvc gc``) ran. The write
  itself never waits for it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sqlite3
import threading
import time
from typing import Callable, Iterator, Sequence

from qvc.errors import CheckpointConflictError, CorruptionError, QvcError, StorageError, StoreClosedError
from qvc.logs import log
from qvc.plumbing import pack
from qvc.plumbing.durability import fsync_dir
from qvc.plumbing.locking import wait_flock
from qvc.plumbing.odb import RefReader
from qvc.plumbing.reflog import ReflogEntry, head_branch, reflog_line
from qvc.plumbing.refpack import without_packed

DB = "qvc/staging.db"
QUEUE = "qvc/staging.queue"  # the writers' fair queue in front of SQLite's write lock
PUBLISH_LOCK = "qvc/publish.lock"
PUBLISHING = "qvc/publishing"  # the locks the publisher holding the turn creates (see the docstring)
PACKED_REFS = "packed-refs"
DISPLACED = "refs/qvc/displaced/"
MODES = ("sync", "async", "exit")
#: how long a publisher waits for another program's lock on a ref (git waits 0.1 s for a ref, 1 s for packed-refs)
REF_LOCK_WAIT = 1.0
#: how long a writer waits for SQLite's locks (its busy timeout; opening, see Staging._open_writer),
#: and, unless its store says otherwise (``write_wait``), for the writers' queue
OPEN_WAIT = 60.0
#: SQLite's default limit on one value (SQLITE_MAX_LENGTH); a larger object cannot be staged
MAX_OBJECT = 1_000_000_000


SCHEMA_VERSION = 1  # PRAGMA user_version once the tables below exist
_SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (id INTEGER PRIMARY KEY, oid BLOB NOT NULL UNIQUE, kind TEXT NOT NULL,
                                    data BLOB NOT NULL, seq INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS refs (name TEXT PRIMARY KEY, value TEXT, base TEXT, seq INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS moves (id INTEGER PRIMARY KEY, name TEXT NOT NULL, old TEXT, new TEXT,
                                  message TEXT, who TEXT NOT NULL, time REAL NOT NULL, seq INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS moves_by_name ON moves (name, id);
CREATE TABLE IF NOT EXISTS ids (checkpoint TEXT PRIMARY KEY, sha TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;
"""


#: at most this many transactions commit as one group (a member waits for the later ones' bodies)
GROUP_MAX = 32


class _Group:
    """Transactions of several threads committed as one SQLite transaction (see :meth:`Staging._grouped`)."""

    def __init__(self, db: sqlite3.Connection, fd: int, seq: int):
        self.db, self.fd, self.seq = db, fd, seq
        self.members = 0  # members whose writes are in it
        self.size = 0  # members done with their body, whatever came of it
        self.error: BaseException | None = None
        self.committed = threading.Event()


class Published:
    """What one :meth:`Staging.publish` did. (A plain class: every command loads this module, and
    a dataclass costs start-up half a millisecond to make on CPython 3.11.)"""

    __slots__ = ("objects", "pack", "refs", "displaced", "blocked", "busy")

    def __init__(self) -> None:
        self.objects = 0
        self.pack: str | None = None  # the base path (no suffix) of the pack it wrote, if it wrote one
        self.refs: list[str] = []
        self.displaced: list[str] = []  # refs/qvc/displaced/... it created
        self.blocked: list[str] = []  # refs left staged: another program holds their lock
        self.busy = False  # another publisher was at work: this call did nothing


class StagedTransaction:
    """One SQLite write transaction of :class:`Staging` (made by :meth:`Staging.transaction`)."""

    def __init__(self, staging: Staging, db: sqlite3.Connection, seq: int, generation: str | None):
        self._staging = staging
        self._db = db
        self.seq = seq
        #: the generation token when the transaction began (:meth:`Staging.generation`)
        self.generation = generation
        #: objects written, inserted at once before the commit (this thread reads them meanwhile)
        self.objects: dict[bytes, tuple[str, bytes]] = {}
        self.rewritten = False  #: whether :meth:`rewrite` was called
        self._seen: dict[str, tuple[bool, str | None]] = {}  # ref -> (staged?, value) as read or moved here

    def _read_ref(self, name: str) -> tuple[bool, str | None]:
        seen = self._seen.get(name)
        if seen is None:
            row = self._db.execute("SELECT value FROM refs WHERE name = ?", (name,)).fetchone()
            seen = self._seen[name] = (True, row[0]) if row is not None else (False, self._staging.git_ref(name))
        return seen

    def ref(self, name: str) -> str | None:
        """Ref ``name``'s value as this transaction sees it: staged, else git's files."""
        return self._read_ref(name)[1]

    def write(self, kind: str, data: bytes, oid: bytes | None = None) -> bytes:
        """Stage a git object (``kind``: blob, tree, commit, tag); return its raw id."""
        if len(data) > MAX_OBJECT:
            raise StorageError(f"a {kind} of {len(data)} bytes is larger than qvc stages ({MAX_OBJECT} bytes)",
                               errno.EFBIG)
        oid = oid if oid is not None else pack.object_id(kind, data)
        self.objects.setdefault(oid, (kind, data))
        return oid

    def _insert_objects(self) -> None:
        if self.objects:
            self._db.executemany("INSERT OR IGNORE INTO objects (oid, kind, data, seq) VALUES (?, ?, ?, ?)",
                                 [(oid, kind, data, self.seq) for oid, (kind, data) in self.objects.items()])

    def move(self, name: str, old: str | None, new: str | None, message: str | None = None) -> None:
        """Compare-and-swap ref ``name`` from ``old`` to ``new`` (``None``: absent). ``message``
        makes a reflog line. Raises :class:`CheckpointConflictError` if the ref is not at ``old``."""
        staged, current = self._read_ref(name)
        if current != old:
            raise moved(name, old, current)
        if old == new:
            return
        if staged:
            self._db.execute("UPDATE refs SET value = ?, seq = ? WHERE name = ?", (new, self.seq, name))
        else:
            self._db.execute("INSERT INTO refs VALUES (?, ?, ?, ?)", (name, new, current, self.seq))
        self._seen[name] = (True, new)
        self._db.execute("INSERT INTO moves (name, old, new, message, who, time, seq) VALUES (?, ?, ?, ?, ?, ?, ?)",
                         (name, old, new, message, self._staging.who, time.time(), self.seq))

    def rewrite(self) -> str:
        """Mark this transaction as rewriting history (a delete, a rename, a purge's rewrite): a
        new generation token, returned, that readers see with the commit (:meth:`Staging.generation`)."""
        token = os.urandom(8).hex()
        self.rewritten = True
        self._db.execute("INSERT OR REPLACE INTO meta VALUES ('generation', ?)", (token,))
        self._db.execute("DELETE FROM ids")  # the index of the old history: rebuilt from the refs
        self.forget_index()
        return token

    def index(self, ids: Sequence[tuple[str, str]]) -> None:
        """Note in the checkpoint-id index that each ``(checkpoint id, commit sha)`` of ``ids`` is
        stored, with this transaction (a rewrite empties the index first: :meth:`rewrite`)."""
        self._db.executemany("INSERT OR REPLACE INTO ids VALUES (?, ?)", ids)

    def forget_index(self) -> None:
        """Mark the checkpoint-id index incomplete (see :meth:`Staging.forget_index`)."""
        self._db.execute("DELETE FROM meta WHERE key = 'ids'")

    def complete_index(self, ids: Sequence[tuple[str, str]]) -> None:
        """Make the checkpoint-id index complete with ``ids``, every ``(checkpoint id, commit
        sha)`` on a ref, read by a walk of the refs since the last rewrite (what transactions
        indexed meanwhile stays: it is newer). It then answers for every id until the next
        rewrite (:meth:`Staging.indexed`)."""
        self._db.executemany("INSERT OR IGNORE INTO ids VALUES (?, ?)", ids)
        self._db.execute("INSERT OR REPLACE INTO meta VALUES ('ids', 'complete')")


class Staging:
    """The staging database of the repository at ``path`` (see the module docstring for the contract).

    ``mode`` is ``"sync"``, ``"async"`` or ``"exit"``; ``max_lag`` bounds how long an ``async``
    commit waits for its flush; ``readonly`` opens without creating anything (nothing staged
    reads as empty); ``lock_wait`` bounds an explicit publisher's wait for the publishers' turn,
    ``write_wait`` a transaction's wait in the writers' queue (then :class:`StorageError`,
    ``EBUSY``). Thread-safe: each Python thread gets its own SQLite connection. Raises
    :class:`~qvc.errors.StorageError` when the database cannot be created or opened.
    """

    def __init__(self, path: str | os.PathLike, *, mode: str = "sync", fsync: bool = True,
                 max_lag: float = 0.05, readonly: bool = False, lock_wait: float = 1.0, who: str | None = None,
                 write_wait: float = OPEN_WAIT):
        if mode not in MODES:
            raise QvcError(f"durability mode {mode!r}: expected one of {', '.join(MODES)}")
        self.path = os.fspath(path)
        self.mode = mode
        self.fsync = fsync
        self.max_lag = max_lag
        self.readonly = readonly
        self.lock_wait = lock_wait
        self.write_wait = write_wait
        self.who = who or "qvc <qvc@localhost>"
        self._db_path = os.path.join(self.path, DB)
        #: the file every commit writes (SQLite's write-ahead log): what a watcher waits on
        self.log_path = self._db_path + "-wal"
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._fds: list[int] = []  # the queue's descriptors, one per thread that wrote
        self._conns_lock = threading.Lock()
        self._refs = RefReader(self.path)
        self._dirty = threading.Event()  # commits since the last flush (async, exit)
        self._stopping = threading.Event()  # set by close: the flusher ends
        self._flushing = threading.Lock()  # one flush at a time: a caller returns once its commits are flushed
        self._closed = False
        self._flusher: threading.Thread | None = None
        self._failed: BaseException | None = None
        self._warned: set[str] = set()  # locks of other programs already named in a warning
        #: why the database file does not read (SQLite finds it malformed), once a read or write met that;
        #: reads then see git's files alone, and every write raises it (see :meth:`damage`)
        self.damaged: CorruptionError | None = None
        # group commit (sync): see _grouped
        self._own_queue: int | None = None  # this process's own queue in front of the writers' (_queue)
        self._gate = threading.Lock()  # one member's body at a time
        self._group_lock = threading.Lock()  # guards _arrivals and a group's size
        self._group: _Group | None = None  # the group arriving members join
        self._arrivals = 0  # members arrived and not finished with their body
        self._pool: list[tuple[sqlite3.Connection, int]] = []  # idle group connections, with their queue descriptor
        if not readonly:
            os.makedirs(os.path.dirname(self._db_path), exist_ok=True)

    # -- connections ----------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection | None:
        if self._closed:
            raise StoreClosedError(f"{self.path}: the store is closed")
        db = getattr(self._local, "db", None)
        if db is not None:
            return db
        if self.readonly:
            if not os.path.exists(self._db_path):
                return None
            db = sqlite3.connect(f"file:{self._db_path}?mode=ro", uri=True, isolation_level=None,
                                 check_same_thread=False, timeout=60)
            with self._conns_lock:
                self._conns.append(db)
        else:
            db = self._writer()
        self._local.db = db
        return db

    def _writer(self) -> sqlite3.Connection:
        """A new connection that writes (creating the database and its tables if need be)."""
        # Connected on first need (a store that only reads makes no log): a full disk fails
        # the first write, not the open.
        with self._guard("open"):
            new = not os.path.exists(self.log_path) and not os.path.exists(self._db_path)
            with self._queue() if new else contextlib.nullcontext():  # its first writers take turns
                db = self._open_writer()
        with self._conns_lock:
            self._conns.append(db)
        return db

    def _open_writer(self) -> sqlite3.Connection:
        """Connect and set the connection up. SQLite answers "database is locked" at once,
        without its busy handler, where another connection holds the database exclusively for
        a moment (the last one to close checkpoints the log and deletes it): that is waited
        out here, as the busy handler waits out a writer (up to :data:`OPEN_WAIT` seconds)."""
        deadline, pause = time.monotonic() + OPEN_WAIT, 0.001
        while True:
            db = sqlite3.connect(self._db_path, isolation_level=None, check_same_thread=False, timeout=OPEN_WAIT)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                sync = "FULL" if self.mode == "sync" and self.fsync else "NORMAL" if self.fsync else "OFF"
                db.execute(f"PRAGMA synchronous={sync}")
                if db.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
                    with self._queue():  # (reentrant) creating the tables: one writer at a time
                        db.executescript(_SCHEMA + f"PRAGMA user_version = {SCHEMA_VERSION};")
                return db
            except sqlite3.OperationalError as exc:
                db.close()
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def _rows(self, sql: str, args: Sequence = ()) -> list[tuple]:
        """The rows of a read outside any transaction (``[]`` when there is no database yet, and
        when its file is malformed: :attr:`damaged` says so, a warning names it, and readers see
        git's files alone).

        Where the write-ahead log is absent or empty (no store has the database open: every
        commit is in its file), the file is read as it is, as SQLite's ``immutable`` reader does, and read
        again through a connection if it changed meanwhile: a read-only store then creates
        nothing in the repository (a WAL reader would leave ``-wal`` and ``-shm`` files), and
        works where those files cannot be created (a full disk, no write permission). A writing
        store connects on its first write (or a read while the log holds something) and keeps
        its connection, and with it the log, open."""
        try:
            return self._query(sql, args)
        except sqlite3.DatabaseError as exc:
            if not _malformed(exc):
                raise
            if self.damaged is None:
                self.damage(exc)
                log.warning("qvc: warning: %s: the staging database is damaged (%s): reading git's files alone; "
                            "writes fail until `qvc fsck --repair` moves it aside", self._db_path, exc)
            return []

    def _query(self, sql: str, args: Sequence = ()) -> list[tuple]:
        """:meth:`_rows`, raising SQLite's error when the database is malformed."""
        if self._closed:
            raise StoreClosedError(f"{self.path}: the store is closed")
        tx = getattr(self._local, "tx", None)
        if tx is not None:  # this thread's transaction (a group's connection, when grouped)
            return self._read(tx._db, sql, args)
        if getattr(self._local, "db", None) is None:
            try:
                before = _identity(self._db_path)
            except FileNotFoundError:
                return []
            if not self._logged():
                rows = self._read(self._snapshot(before), sql, args)
                if not self._logged() and _identity(self._db_path) == before:
                    return rows
        db = self._connection()
        if db is None:
            return []
        return self._read(db, sql, args)

    def _read(self, db: sqlite3.Connection, sql: str, args: Sequence) -> list[tuple]:
        """The rows of a read; none while a first writer is creating the tables (nothing is in them yet)."""
        with self._guard("read"):
            try:
                return db.execute(sql, args).fetchall()
            except sqlite3.OperationalError as exc:
                if "no such table" not in str(exc):
                    raise
                return []

    def _snapshot(self, identity: tuple[int, int, int]) -> sqlite3.Connection:
        """This thread's ``immutable`` connection to the database file as it is at ``identity``
        (a new one once the file changed: an immutable reader never looks again)."""
        cached = getattr(self._local, "snapshot", None)
        if cached is not None and cached[0] == identity:
            return cached[1]
        db = sqlite3.connect(f"file:{self._db_path}?immutable=1", uri=True, isolation_level=None,
                             check_same_thread=False)
        self._local.snapshot = (identity, db)
        with self._conns_lock:
            if cached is not None:
                cached[1].close()
                self._conns.remove(cached[1])
            self._conns.append(db)
        return db

    def _logged(self) -> bool:
        """Whether the write-ahead log holds anything (an empty one has no committed frame)."""
        try:
            return os.path.getsize(self.log_path) > 0
        except FileNotFoundError:
            return False

    @contextlib.contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        """SQLite's and the OS's errors as qvc's: a full disk is a :class:`StorageError`."""
        try:
            yield
        except sqlite3.OperationalError as exc:
            text = str(exc)
            code = errno.ENOSPC if _full(exc, self.path) else errno.EIO
            raise StorageError(f"{self.path}: cannot write: {os.strerror(code)} (staging {what}: {text})",
                               code, self._db_path) from None

    # -- writing --------------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self) -> Iterator[StagedTransaction]:
        """One write transaction: everything staged inside commits together or not at all
        (an exception inside rolls it back and propagates). Durable on return per the mode.
        Raises :class:`QvcError` in a thread that has one open already (they do not nest),
        :class:`StorageError` if SQLite cannot write (a full disk: nothing was stored), and
        :class:`CorruptionError` if the database file is malformed (:meth:`damage`)."""
        if self.readonly:
            raise QvcError(f"{self.path}: opened read-only")
        self._check_open()
        if getattr(self._local, "open_tx", False):
            raise QvcError(f"{self.path}: a transaction is already open in this thread (they do not nest)")
        if self.damaged is not None:
            raise self.damaged
        try:
            with self._transaction() as tx:
                yield tx
        except sqlite3.DatabaseError as exc:
            if not _malformed(exc):
                raise
            raise self.damage(exc) from None

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[StagedTransaction]:
        if self.mode == "sync" and self.fsync and getattr(self._local, "queue", None) is None:
            with self._grouped() as tx:
                yield tx
            return
        with self._queue():
            db = self._connection()
            with self._guard("write"):
                db.execute("BEGIN IMMEDIATE")
            self._local.open_tx = True
            try:
                meta = dict(db.execute("SELECT key, value FROM meta WHERE key IN ('generation', 'seq')").fetchall())
                self._local.generation_before = meta.get("generation")
                seq = (meta.get("seq") or 0) + 1
                db.execute("INSERT OR REPLACE INTO meta VALUES ('seq', ?)", (seq,))
                tx = StagedTransaction(self, db, seq, self._local.generation_before)
                self._local.staged, self._local.tx = tx.objects, tx
                yield tx
                with self._guard("commit"):
                    tx._insert_objects()
                    db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        db.execute("ROLLBACK")
                raise
            finally:
                self._local.open_tx = False
                self._local.staged = self._local.tx = None
        if self.mode != "sync":
            self._dirty.set()
            if self.mode == "async" and self.fsync and self._flusher is None:  # on the first commit
                with self._conns_lock:
                    if self._flusher is None and not self._closed:
                        self._flusher = threading.Thread(target=self._flush_loop, name="qvc-staging-flush",
                                                         daemon=True)
                        self._flusher.start()

    @contextlib.contextmanager
    def _grouped(self) -> Iterator[StagedTransaction]:
        """A ``sync`` transaction as a member of a group commit: the transactions of this
        process's threads that arrive while one runs join its SQLite transaction, each in a
        savepoint (a member that raises rolls back only its own writes), and the last member
        to finish commits them all with one flush of the log. A member returns once that
        commit is on stable storage; no reader, in any process, sees a member before (the
        commit is ``synchronous=FULL``); a failed commit fails every member (nothing stored)."""
        deadline = time.monotonic() + self.write_wait  # (members waiting here after a failed start wait no longer)
        with self._group_lock:
            self._arrivals += 1
        self._gate.acquire()  # one member's body at a time: they share the group's connection
        group = self._group
        try:
            if group is None:
                group = self._group = self._start_group(deadline)
        except BaseException:
            with self._group_lock:
                self._arrivals -= 1
            self._gate.release()
            raise
        db = group.db
        self._local.open_tx = True
        try:
            if not db.in_transaction:  # SQLite rolled the group back (an earlier member's full disk)
                raise StorageError(f"{self.path}: cannot write: the group's transaction was rolled back",
                                   errno.EIO, self._db_path)
            with self._guard("write"):
                db.execute("SAVEPOINT member")
            try:
                row = db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
                self._local.generation_before = row[0] if row else None  # (an earlier member's rewrite counts)
                tx = StagedTransaction(self, db, group.seq, self._local.generation_before)
                self._local.staged, self._local.tx = tx.objects, tx
                yield tx
                with self._guard("write"):
                    tx._insert_objects()
                    db.execute("RELEASE member")
                group.members += 1
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK TO member")
                    db.execute("RELEASE member")
                raise
        finally:
            self._local.open_tx = False
            self._local.staged = self._local.tx = None
            with self._group_lock:
                self._arrivals -= 1
                group.size += 1
                last = self._arrivals == 0 or group.size >= GROUP_MAX
            if last:
                self._group = None  # later arrivals start the next group (once this one's commit ends)
            self._gate.release()
            if last:
                self._commit_group(group)
        group.committed.wait()
        if group.error is not None:
            raise group.error

    def _start_group(self, deadline: float) -> _Group:
        """A new group: an idle group connection (or a new one) with its queue descriptor,
        the writers' queue taken (waiting until ``deadline`` at most) and a write transaction
        begun on it."""
        with self._conns_lock:
            pooled = self._pool.pop() if self._pool else None
        if pooled is None:
            pooled = (self._writer(), self._queue_fd(new=True))
        db, fd = pooled
        if not wait_flock(fd, timeout=max(0.0, deadline - time.monotonic())):
            with self._conns_lock:
                self._pool.append(pooled)
            raise self._busy()
        try:
            with self._guard("write"):
                db.execute("BEGIN IMMEDIATE")
            try:
                seq = (db.execute("SELECT value FROM meta WHERE key = 'seq'").fetchone() or (0,))[0] + 1
                db.execute("INSERT OR REPLACE INTO meta VALUES ('seq', ?)", (seq,))
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
                raise
        except BaseException:
            fcntl.flock(fd, fcntl.LOCK_UN)
            with self._conns_lock:
                self._pool.append(pooled)
            raise
        return _Group(db, fd, seq)

    def _commit_group(self, group: _Group) -> None:
        """Commit (or, with no member left to commit, roll back) ``group``; wake its members."""
        done = False
        try:
            with self._guard("commit"):
                group.db.execute("COMMIT" if group.members else "ROLLBACK")
            done = True
        except Exception as exc:  # a full disk, an I/O error: no member's write was stored
            group.error = exc if isinstance(exc, StorageError) else StorageError(
                f"{self.path}: cannot write: {exc}", errno.EIO, self._db_path)
        finally:
            if not done:
                if group.error is None:  # interrupted before the commit: nothing was stored
                    group.error = StorageError(f"{self.path}: the commit was interrupted", errno.EINTR, self._db_path)
                with contextlib.suppress(sqlite3.Error):
                    if group.db.in_transaction:
                        group.db.execute("ROLLBACK")
            fcntl.flock(group.fd, fcntl.LOCK_UN)
            with self._conns_lock:
                self._pool.append((group.db, group.fd))
            group.committed.set()

    def _queue_fd(self, *, new: bool = False) -> int:
        """This thread's descriptor of the writers' queue (``new``: another one, for a group)."""
        fd = None if new else getattr(self._local, "queue_fd", None)
        if fd is None:
            fd = os.open(os.path.join(self.path, QUEUE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            with self._conns_lock:
                self._fds.append(fd)
            if not new:
                self._local.queue_fd = fd
        return fd

    @contextlib.contextmanager
    def _queue(self, timeout: float | None = None) -> Iterator[bool]:
        """Hold the writers' queue (``qvc/staging.queue``), unless this thread holds it already
        (inside :meth:`exclusive`); yields ``True``. Waits up to ``write_wait`` seconds, then
        raises :class:`StorageError` (:meth:`_busy`); with ``timeout``, up to that, then yields
        ``False`` holding nothing."""
        if getattr(self._local, "queue", None) is not None:
            yield True
            return
        fd = self._queue_fd()
        deadline = time.monotonic() + (self.write_wait if timeout is None else timeout)
        # This process's threads queue first on a lock only they take (a kernel lock: it hands
        # over at once, as a blocking flock does); a thread that holds it runs, so that wait ends.
        # Only the first in line then waits for the writers' queue, polled, up to the deadline: a
        # writer stopped in another process wakes no one.
        own = self._own_queue_fd()
        fcntl.flock(own, fcntl.LOCK_EX)
        if time.monotonic() > deadline or not wait_flock(fd, timeout=max(0.0, deadline - time.monotonic())):
            fcntl.flock(own, fcntl.LOCK_UN)
            if timeout is None:
                raise self._busy()
            yield False
            return
        try:
            self._local.queue = fd
            yield True
        finally:
            self._local.queue = None
            fcntl.flock(fd, fcntl.LOCK_UN)
            fcntl.flock(own, fcntl.LOCK_UN)

    def _own_queue_fd(self) -> int:
        """This thread's descriptor of this process's own queue (an anonymous file, each thread
        with an open file of its own, so that their ``flock`` exclude one another)."""
        fd = getattr(self._local, "own_queue_fd", None)
        if fd is None:
            with self._conns_lock:
                if self._own_queue is None:
                    self._own_queue = os.memfd_create("qvc-queue", os.MFD_CLOEXEC)
                    self._fds.append(self._own_queue)
                fd = os.open(f"/proc/self/fd/{self._own_queue}", os.O_RDWR | os.O_CLOEXEC)
                self._fds.append(fd)
            self._local.own_queue_fd = fd
        return fd

    def _busy(self) -> StorageError:
        """What a writer that waited ``write_wait`` in the queue raises: nothing was stored."""
        return StorageError(f"{self.path}: cannot write: another writer has held {QUEUE} for over "
                            f"{self.write_wait:g} s (a process stopped or hung inside its transaction?); "
                            "nothing was stored, try again", errno.EBUSY, os.path.join(self.path, QUEUE))

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold back every writer of every process (they wait in the queue) after publishing
        everything staged: what maintenance that hands the repository to ``git`` needs. This
        thread may still open transactions inside. Raises :class:`StorageError` if what is
        staged cannot be published (git's files then lack it, and ``git`` must not run)."""
        with self._queue():
            done = self.publish()
            if done.blocked or self.staged():
                raise StorageError(f"{self.path}: cannot publish {', '.join(done.blocked) or 'what is staged'} "
                                   f"to git's files (another program holds a lock)", errno.EAGAIN)
            yield

    # -- reading --------------------------------------------------------------------------

    def git_ref(self, name: str) -> str | None:
        """Ref ``name`` as git's files hold it (loose, else ``packed-refs``), ``None`` if absent."""
        return self._refs.ref(name)

    def ref(self, name: str) -> str | None:
        """Ref ``name``'s acknowledged value: staged, else git's files; ``None`` if absent."""
        rows = self._rows("SELECT value FROM refs WHERE name = ?", (name,))
        return rows[0][0] if rows else self.git_ref(name)

    def refs(self, prefix: str) -> list[tuple[str, str]]:
        """``(name, value)`` of every ref under ``prefix``, staged values over git's, sorted."""
        staged = dict(self._rows("SELECT name, value FROM refs WHERE name >= ? AND name < ?",
                                 (prefix, prefix + "\U0010ffff")))
        found = {n: v for n, v in self._refs.refs(prefix) if n not in staged}
        found.update((n, v) for n, v in staged.items() if v is not None)
        return sorted(found.items())

    def object(self, oid: bytes) -> tuple[str, bytes] | None:
        """``(kind, data)`` of a staged object, ``None`` if it is not staged (git's files have it,
        or no one wrote it)."""
        mine = getattr(self._local, "staged", None)  # this thread's transaction, not inserted yet
        if mine and oid in mine:
            return mine[oid]
        rows = self._rows("SELECT kind, data FROM objects WHERE oid = ?", (oid,))
        return (rows[0][0], bytes(rows[0][1])) if rows else None

    def indexed(self, checkpoint_id: str) -> tuple[str | None, bool]:
        """``(the commit the checkpoint-id index names for checkpoint_id or None, whether the
        index is complete)``: a complete index (:meth:`StagedTransaction.complete_index`, not
        undone by a rewrite since) names every checkpoint on a ref, so a miss means the id is new."""
        rows = self._rows("SELECT (SELECT sha FROM ids WHERE checkpoint = ?), "
                          "EXISTS (SELECT 1 FROM meta WHERE key = 'ids')", (checkpoint_id,))
        return (rows[0][0], bool(rows[0][1])) if rows else (None, False)

    def complete_index(self, ids: Sequence[tuple[str, str]], generation: str | None) -> bool:
        """:meth:`StagedTransaction.complete_index` with ``ids`` (a walk of the refs made under
        ``generation``), in this thread's open transaction if it has one, else in a transaction
        of its own; ``False`` (nothing done) if a rewrite committed since ``generation``."""
        tx = getattr(self._local, "tx", None)
        with contextlib.nullcontext(tx) if tx is not None else self.transaction() as tx:
            if tx.generation != generation or tx.rewritten:  # (a rewrite under way: its moves are not all made)
                return False
            tx.complete_index(ids)
        return True

    def forget_index(self) -> None:
        """Mark the checkpoint-id index incomplete (refs moved outside any transaction: a
        migration's recovery): the next lookup walks the refs again."""
        with self.transaction() as tx:
            tx.forget_index()

    def generation(self) -> str | None:
        """The token of the last committed transaction that rewrote history
        (:meth:`StagedTransaction.rewrite`), ``None`` if none did: what is derived from history is
        valid while it stays the same. Inside a transaction of this thread, the token it began
        with (what is derived meanwhile must not be trusted under a token that transaction
        may yet give)."""
        if self.in_transaction():
            return self._local.generation_before
        rows = self._rows("SELECT value FROM meta WHERE key = 'generation'")
        return rows[0][0] if rows else None

    def reflog(self, name: str) -> list[ReflogEntry]:
        """The staged moves of ref ``name`` that have a reflog line, newest first (git's file
        holds the older ones)."""
        rows = self._rows("SELECT old, new, who, time, message FROM moves WHERE name = ? AND message IS NOT NULL "
                          "ORDER BY id DESC", (name,))
        return [ReflogEntry(old, new, int(when), who, message) for old, new, who, when, message in rows]

    def in_transaction(self) -> bool:
        """Whether this thread has a transaction open."""
        return getattr(self._local, "open_tx", False)

    def staged_refs(self, prefix: str) -> dict[str, str | None]:
        """Name to staged value (``None``: deleted) of every staged ref under ``prefix``: what a
        reader of git's files alone lacks."""
        return dict(self._rows("SELECT name, value FROM refs WHERE name >= ? AND name < ?",
                               (prefix, prefix + "\U0010ffff")))

    @property
    def failed(self) -> BaseException | None:
        """The error of a failed flush, if one failed (every later write raises it)."""
        return self._failed

    def staged(self) -> int:
        """How many refs are staged and not yet published."""
        rows = self._rows("SELECT count(*) FROM refs")
        return rows[0][0] if rows else 0

    # -- damage ---------------------------------------------------------------------------

    def damage(self, exc: BaseException | str) -> CorruptionError:
        """Note that the database file is malformed (``exc``: SQLite's error, or what
        :meth:`check` found) and return the :class:`CorruptionError` every write raises from now on."""
        self.damaged = CorruptionError(
            f"{self._db_path}: the staging database is damaged ({exc}); nothing can be staged until it is "
            "moved aside: `qvc fsck --repair` (what it held that git's files lack is lost)")
        return self.damaged

    def check(self) -> str | None:
        """What SQLite's ``PRAGMA quick_check`` finds wrong with the database file (``None``:
        nothing, or no database yet)."""
        try:
            rows = self._query("PRAGMA quick_check")
        except sqlite3.DatabaseError as exc:
            if not _malformed(exc):
                raise
            return str(exc)
        found = [str(row[0]) for row in rows if row and row[0] != "ok"]
        return "; ".join(found[:3]) + (f" (and {len(found) - 3} more)" if len(found) > 3 else "") if found else None

    def set_aside(self, move: Callable[[str], object]) -> tuple[str, int | None] | None:
        """Move a malformed database file aside with ``move(path)`` (its log files too), writers
        held back, so that the next write makes a new, empty one: the repair of a damaged database.
        Returns ``(what was wrong, how many refs it held staged and unpublished, None when that
        does not read)``, or ``None`` when :meth:`check` finds nothing wrong."""
        with self._queue():
            why = self.check()
            if why is None:
                return None
            try:
                staged = self._query("SELECT count(*) FROM refs")[0][0]
            except (sqlite3.DatabaseError, IndexError):
                staged = None
            self._disconnect()
            for suffix in ("", "-wal", "-shm"):
                if os.path.lexists(self._db_path + suffix):
                    move(self._db_path + suffix)
            self.damaged = None
        return why, staged

    def _disconnect(self) -> None:
        """Close this store's connections (the next use opens new ones)."""
        with self._conns_lock:
            for db in self._conns:
                with contextlib.suppress(sqlite3.Error):
                    db.close()
            self._conns.clear()
            self._pool.clear()
        self._local.db = None
        self._local.snapshot = None

    # -- durability -----------------------------------------------------------------------

    def flush(self, *, force: bool = False) -> None:
        """Make every committed transaction durable (a no-op in ``sync`` mode, or without fsync;
        ``force``: flush the log even if no commit marked it dirty yet). Raises
        :class:`StorageError` if the flush fails, and so does every later write."""
        if self._failed is not None:
            raise StorageError(f"staging: an earlier flush failed: {self._failed}", errno.EIO)
        if not self.fsync:
            return
        with self._flushing:  # a flush under way covers what this call must: wait for it to end
            if not self._dirty.is_set() and not force:
                return
            self._dirty.clear()
            try:
                fd = os.open(self.log_path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                return  # no WAL: everything was checkpointed into the database, which SQLite flushed
            try:
                os.fdatasync(fd)
            except OSError as exc:
                self._failed = exc
                raise StorageError(f"staging: flushing the WAL failed: {exc}", exc.errno or errno.EIO) from None
            finally:
                os.close(fd)

    def _flush_loop(self) -> None:
        while not self._closed:
            self._dirty.wait(0.5)
            if self._closed:
                return
            if self._stopping.wait(self.max_lag / 2):  # (close flushes the rest itself)
                return
            with contextlib.suppress(StorageError):
                self.flush()

    def _check_open(self) -> None:
        if self._closed:
            raise QvcError(f"{self.path}: staging is closed")
        if self._failed is not None:
            raise StorageError(f"staging: an earlier flush failed: {self._failed}", errno.EIO)

    def close(self) -> None:
        """Flush (every mode) and close every connection. Nothing is published here: call
        :meth:`publish` first for git's files to have it (the next opener does otherwise)."""
        if self._closed:
            return
        try:
            if not self.readonly:
                self.flush()
        finally:
            self._closed = True
            self._dirty.set()
            self._stopping.set()
            if self._flusher is not None:
                self._flusher.join()
            with self._conns_lock:
                for db in self._conns:
                    with contextlib.suppress(sqlite3.Error):
                        db.close()
                self._conns.clear()
                for fd in self._fds:
                    os.close(fd)
                self._fds.clear()

    def erase(self) -> None:
        """Leave nothing deleted readable in the database's files (``qvc purge``): publish what
        is staged, copy the WAL into the database and cut it to nothing, then rebuild the
        database without free pages (``VACUUM``). Call it with writers held back
        (:meth:`exclusive`, or the repository's maintenance lock); a reader in another process
        holding an old snapshot makes it wait (up to ``lock_wait`` seconds), then
        :class:`StorageError`."""
        self.publish()
        db = self._connection()
        deadline = time.monotonic() + self.lock_wait
        with self._guard("erase"):
            while True:
                busy, _, _ = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                if not busy:
                    break
                if time.monotonic() > deadline:
                    raise StorageError(f"{self.path}: cannot erase the staging database's log: a reader "
                                       "holds it", errno.EBUSY, self._db_path)
                time.sleep(0.01)
            db.execute("VACUUM")
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    # -- publication ----------------------------------------------------------------------

    def publish(self, *, wait: bool = True) -> Published:
        """Write what is staged to git's files (see the module docstring); idempotent. Returns what
        it did. When another publisher holds the turn: with ``wait``, waits for it (up to
        ``lock_wait`` seconds: a publisher that is stopped holds it) and then publishes what is
        left; without, returns at once. ``busy`` says nothing was done for that reason. Raises
        :class:`StorageError` (the rows stay staged) if git's files cannot be written."""
        out = Published()
        if getattr(self._local, "open_tx", False):
            raise QvcError(f"{self.path}: publish inside a transaction of this thread (it would wait for itself)")
        if self.readonly or (self.staged() == 0 and not os.path.exists(os.path.join(self.path, PUBLISHING))):
            return out
        turn = os.open(os.path.join(self.path, PUBLISH_LOCK), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            deadline = time.monotonic() + (self.lock_wait if wait else 0)
            delay = 0.0005
            while True:
                try:
                    fcntl.flock(turn, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        out.busy = True
                        return out
                    time.sleep(delay)
                    delay = min(delay * 2, 0.01)
            try:
                self._publish(out)
            except sqlite3.DatabaseError as exc:
                if not _malformed(exc):
                    raise
                raise self.damage(exc) from None
            except OSError as exc:
                if isinstance(exc, StorageError):
                    raise
                raise StorageError(f"publishing to git's files: {exc}", exc.errno or errno.EIO, exc.filename) from None
        finally:
            os.close(turn)
        return out

    def _publish(self, out: Published) -> None:
        self._clear_dead_publisher()
        db = self._connection()
        db.execute("BEGIN")  # one snapshot of everything staged up to seq
        try:
            seq = (db.execute("SELECT value FROM meta WHERE key = 'seq'").fetchone() or (0,))[0]
            objects = db.execute("SELECT oid, kind, data FROM objects WHERE seq <= ?", (seq,)).fetchall()
            refs = db.execute("SELECT name, value, base FROM refs WHERE seq <= ? ORDER BY name", (seq,)).fetchall()
            moves = db.execute("SELECT id, name, old, new, message, who, time FROM moves WHERE seq <= ? ORDER BY id",
                               (seq,)).fetchall()
        finally:
            db.execute("COMMIT")
        # Write-ahead: what git's files get is durable here first (in ``sync`` mode it is), so a
        # power cut never leaves git's files ahead of a log that lost the rows they came from.
        # After the snapshot, and whatever the flag says: a commit the snapshot saw may not
        # have marked the log dirty yet.
        if self.mode != "sync" and (objects or refs):
            self.flush(force=True)
        written: set[str] = set()
        if objects:
            base = pack.write(os.path.join(self.path, "objects", "pack"),
                              [(kind, bytes(data)) for _, kind, data in objects],
                              [bytes(oid) for oid, _, _ in objects], fsync=self.fsync)
            written.add(os.path.dirname(base))
            out.objects, out.pack = len(objects), base
        chains: dict[str, list[tuple]] = {}
        for move in moves:
            chains.setdefault(move[1], []).append(move)
        published: list[tuple[str, str | None]] = []
        for name, value, base_value in refs:
            chain = chains.get(name, [])
            values = [base_value] + [m[2] for m in chain] + [m[3] for m in chain]  # every value it took
            if self._publish_ref(name, value, values, chain, out, written):
                published.append((name, value))
                out.refs.append(name)
        if self.fsync:
            for path in sorted(written):
                _fsync_path(path)
        # The rows go in a transaction like a writer's. A writer stopped mid-transaction holds the
        # queue: the rows then stay (git's files hold them already) for the next publisher.
        with self._queue(timeout=min(self.lock_wait, self.write_wait)) as queued:
            if queued:
                self._forget_published(db, seq, published)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.path, PUBLISHING))

    def _forget_published(self, db: sqlite3.Connection, seq: int, published: list[tuple[str, str | None]]) -> None:
        """Delete the rows of what a publication wrote to git's files (up to transaction ``seq``)."""
        with self._guard("publish"):
            db.execute("BEGIN IMMEDIATE")
            try:
                done = [name for name, _ in published]
                db.execute("DELETE FROM objects WHERE seq <= ?", (seq,))
                db.executemany("DELETE FROM refs WHERE name = ? AND seq <= ?", [(n, seq) for n in done])
                # a ref staged again since the snapshot now builds on the value published
                db.executemany("UPDATE refs SET base = ? WHERE name = ?", [(v, n) for n, v in published])
                db.executemany("DELETE FROM moves WHERE name = ? AND seq <= ?", [(n, seq) for n in done])
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def _publish_ref(self, name: str, value: str | None, chain_values: list[str | None], chain: list[tuple],
                     out: Published, written: set[str]) -> bool:
        """Move git's ref ``name`` to ``value`` under its lock; ``False`` if it stays staged
        (another program's lock kept it from moving within ``lock_wait``, or its file is no ref)."""
        lock = os.path.join(self.path, name + ".lock")
        if not self._take(lock, f"{value or ''}\n".encode(), out, name, written):
            return False
        held = True
        try:
            torn = False
            try:
                current = self.git_ref(name)
            except CorruptionError as exc:
                if not _torn(os.path.join(self.path, name), chain_values):  # someone's: left, for `qvc fsck`
                    log.warning("qvc: %s; it stays staged", exc)
                    out.blocked.append(name)
                    return False
                current, torn = None, True  # empty or zeroed by a power cut: nothing in it to keep
            if not torn and current != value and current not in chain_values:
                self._displace(name, current, out, written)
            path = os.path.join(self.path, name)
            if value is None:
                if current is not None or torn or os.path.exists(os.path.join(self.path, "logs", name)):
                    if not self._delete(name, out, written):
                        return False
                # (else a killed publisher deleted it: what it removed is flushed before the rows go)
                written.update((os.path.dirname(path), os.path.join(self.path, PACKED_REFS)))
                return True
            lines = [reflog_line(old, new, who, when, message) for _, _, old, new, message, who, when in chain
                     if message is not None]
            if lines:  # before the value, as git does; lines a killed publisher appended are not repeated
                written.update(self._append_reflog(name, lines))
                if name == head_branch(self.path):  # git logs the branch HEAD names in HEAD's reflog too
                    written.update(self._append_reflog("HEAD", lines))
            if current != value:  # else an earlier publication got this far: flushed all the same
                os.rename(lock, path)
                held = False
            written.update((path, os.path.dirname(path)))
            return True
        finally:
            if held:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(lock)  # ours: taken above

    def _take(self, lock: str, content: bytes, out: Published, name: str, written: set[str]) -> bool:
        """Create git's lock file ``lock`` holding ``content``, exclusively, waiting up to
        :data:`REF_LOCK_WAIT` for another program's; ``False`` (noted in ``out.blocked``) if it stays taken.

        The lock is a file of this publisher's linked into place, whole, after its identity was
        noted in ``qvc/publishing`` (device, inode, modification time): what makes it provably
        ours after a kill. The lock's content is never written again (linking changes only its
        inode's change time)."""
        tmp_dir = os.path.join(self.path, "qvc", "publishing.d")
        os.makedirs(tmp_dir, exist_ok=True)
        tmp = os.path.join(tmp_dir, f"{os.getpid()}-{os.urandom(6).hex()}")
        try:
            with open(tmp, "wb") as f:
                f.write(content)
            st = os.stat(tmp)
            notes = os.path.join(self.path, PUBLISHING)
            new = not os.path.exists(notes)
            with open(notes, "a", encoding="utf-8", errors="surrogateescape") as f:
                f.write(f"{st.st_dev} {st.st_ino} {st.st_mtime_ns} {lock}\n")
                if self.fsync:  # before the lock exists: a lock that outlives a power cut is provably ours
                    f.flush()
                    os.fdatasync(f.fileno())
            if new and self.fsync:
                fsync_dir(os.path.dirname(notes))
            _makedirs(os.path.dirname(lock), written)
            # A lock this store already waited out once (another program holds it for long) is
            # tried once more, not waited for again by every publication while it stays.
            deadline = time.monotonic() + (0 if lock in self._warned else REF_LOCK_WAIT)
            delay = 0.0005
            while True:
                try:
                    os.link(tmp, lock)
                    self._warned.discard(lock)  # gone: a later holder is waited for (and named) again
                    return True
                except FileExistsError:
                    if time.monotonic() > deadline:
                        if lock not in self._warned:  # once per store while it stays, not at every retry
                            self._warned.add(lock)
                            log.warning("qvc: %s is locked by another program (%s): qvc reads the new value, "
                                        "git's files get it once the lock is gone", name, lock)
                        out.blocked.append(name)
                        return False
                    time.sleep(delay)
                    delay = min(delay * 2, 0.05)
        finally:
            os.unlink(tmp)

    def _clear_dead_publisher(self) -> None:
        """Remove the locks a publisher killed midway left: those ``qvc/publishing`` notes that are
        still the very files it linked (the caller holds the turn, so that publisher is gone)."""
        try:
            with open(os.path.join(self.path, PUBLISHING), encoding="utf-8", errors="surrogateescape") as f:
                notes = f.read().splitlines()
        except FileNotFoundError:
            notes = []
        for note in notes:
            parts = note.split(" ", 3)
            if len(parts) != 4:
                continue  # torn by the kill
            dev, ino, mtime, lock = parts
            with contextlib.suppress(FileNotFoundError, ValueError):
                st = os.stat(lock)
                if (st.st_dev, st.st_ino, st.st_mtime_ns) == (int(dev), int(ino), int(mtime)):
                    os.unlink(lock)
                    log.warning("qvc: removed %s, left by a publisher that was killed", lock)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.path, PUBLISHING))
        with contextlib.suppress(FileNotFoundError):
            import shutil  # deferred: start-up speed (rarely there)

            shutil.rmtree(os.path.join(self.path, "qvc", "publishing.d"))

    def _delete(self, name: str, out: Published, written: set[str]) -> bool:
        """Delete git's ref ``name`` (its ``<ref>.lock`` held), as git does: under
        ``packed-refs.lock``, its ``packed-refs`` entry first, then its loose file and reflog.
        ``False`` if another program holds ``packed-refs.lock`` (it stays staged)."""
        packed = os.path.join(self.path, PACKED_REFS)
        if not self._take(packed + ".lock", b"", out, name, written):
            return False
        try:
            kept = without_packed(self.path, name)
            if kept is not None:  # the new file goes over packed-refs while we hold its lock
                tmp = os.path.join(self.path, "qvc", "publishing.d", f"packed-refs-{os.getpid()}-{os.urandom(4).hex()}")
                with open(tmp, "wb") as f:
                    f.write(b"\n".join(kept))
                os.rename(tmp, packed)
                written.update((packed, self.path))
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(packed + ".lock")
        for path in (os.path.join(self.path, name), os.path.join(self.path, "logs", name)):
            with contextlib.suppress(FileNotFoundError, NotADirectoryError, IsADirectoryError):
                os.unlink(path)
                written.add(os.path.dirname(path))
        return True

    def _displace(self, name: str, found: str | None, out: Published, written: set[str]) -> None:
        """Keep the value another program moved ref ``name`` to under ``refs/qvc/displaced/``."""
        if found is None:
            log.warning("qvc: %s was deleted by another program while a write to it was staged; "
                        "the staged value is published", name)
            return
        kept = f"{DISPLACED}{name[len('refs/'):] if name.startswith('refs/') else name}/{found}"
        path = os.path.join(self.path, kept)
        _makedirs(os.path.dirname(path), written)
        tmp = f"{path}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
        with open(tmp, "wb") as f:
            f.write(found.encode() + b"\n")
        os.rename(tmp, path)
        written.update((path, os.path.dirname(path)))
        out.displaced.append(kept)
        log.warning("qvc: %s was moved by another program to %s while a write to it was staged; "
                    "the staged value is published and %s keeps the other", name, found[:12], kept)

    def _append_reflog(self, name: str, lines: Sequence[bytes]) -> list[str]:
        """Append the reflog lines a killed publisher did not append already; the paths written."""
        path = os.path.join(self.path, "logs", name)
        made: set[str] = set()
        _makedirs(os.path.dirname(path), made)
        try:
            with open(path, "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - sum(len(line) for line in lines)))
                tail = f.read().splitlines(keepends=True)
        except FileNotFoundError:
            tail = []
        skip = next((k for k in range(len(lines), 0, -1) if list(lines[:k]) == tail[-k:]), 0)
        if skip < len(lines):
            with open(path, "ab") as f:
                f.write(b"".join(lines[skip:]))
        return [path, os.path.dirname(path), *made]


def _makedirs(directory: str, written: set[str]) -> None:
    """Create ``directory`` and its missing parents, noting in ``written`` each one created and
    the directory holding it: a new directory is durable once its parent is flushed."""
    missing = []
    d = directory
    while d and not os.path.isdir(d):
        missing.append(d)
        d = os.path.dirname(d)
    os.makedirs(directory, exist_ok=True)
    for made in missing:
        written.update((made, os.path.dirname(made)))


def _fsync_path(path: str) -> None:
    """Flush a file or a directory that a publication wrote (gone since: nothing to flush)."""
    if os.path.isdir(path):
        with contextlib.suppress(FileNotFoundError):
            fsync_dir(path)
        return
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


def _full(exc: sqlite3.Error, path: str) -> bool:
    """Whether SQLite failed for want of space: it says so (``SQLITE_FULL``), or it names an I/O
    error (creating its shared-memory file, say) on a file system with no free block left."""
    if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "full" in str(exc):
        return True
    try:
        return os.statvfs(path).f_bavail == 0
    except OSError:
        return False


def _malformed(exc: BaseException) -> bool:
    """Whether SQLite's error says the database file is damaged (``SQLITE_CORRUPT``, ``SQLITE_NOTADB``)."""
    code = getattr(exc, "sqlite_errorcode", None)  # (Python 3.11+)
    if code is not None:
        return code & 0xFF in (11, 26)
    return type(exc) is sqlite3.DatabaseError


def _identity(path: str) -> tuple[int, int, int]:
    """What changes when a file is replaced or written: inode, size, modification time."""
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns


def moved(name: str, old: str | None, current: str | None) -> CheckpointConflictError:
    """The conflict of a compare-and-swap of ``name`` that expected ``old`` and found ``current``."""
    if old is None:
        return CheckpointConflictError(f"{name}: created by another writer meanwhile")
    found = (current or "nothing")[:12]
    return CheckpointConflictError(f"{name}: moved by another writer (expected {old[:12]}, found {found})")


def _torn(path: str, values: Sequence[str | None]) -> bool:
    """Whether ref file ``path`` is what a power cut leaves of a publication's rename whose data
    did not all reach the disk: empty, NUL bytes, or the start of one of ``values`` (the values
    the ref took while staged), NUL-padded or not."""
    try:
        with open(path, "rb") as f:
            data = f.read(4096)
    except OSError:
        return False
    data = data.rstrip(b"\0")
    return not data or any(v is not None and f"{v}\n".encode().startswith(data) for v in values)
