"""How a repository reads git's files: through libgit2 (a writable store), or without it (a read-only one).

:class:`GitBackend` reads objects and refs with ``pygit2`` (one ``pygit2.Repository`` per Python
thread: libgit2 objects are not thread-safe). :class:`ReadOnlyBackend` reads them with
:class:`qvc.plumbing.odb.ObjectReader` (no libgit2: what short-lived commands open, and it works
on a repository it cannot write). Both read git's files only: this process's unpublished writes
are the repository's to add (:mod:`qvc.plumbing.publication`).
"""

from __future__ import annotations

import os
import re
import threading
from typing import Callable, TypeVar

from qvc.errors import CorruptionError, NotARepositoryError, StoreClosedError
from qvc.plumbing.libgit2 import configured, pygit2
from qvc.plumbing.odb import ObjectReader, RefReader

T = TypeVar("T")
MISS_RETRIES = 8  # lookups of an object while other stores keep merging packs
QVC_DIR = "qvc"



_SECTION = re.compile(r'\[[-A-Za-z0-9.]+(\s+"(?:[^"\\\n]|\\.)*")?\]')
_KEY = re.compile(r"[A-Za-z][-A-Za-z0-9]*\s*(?:$|[=#;])")


def config_plainly_fine(config: str) -> bool:
    """Whether the config file at ``config`` is plainly well formed, read in Python (no program
    runs: what ``qvc status`` may afford): section headers and ``key = value`` lines. ``False``
    only says git should look (:func:`config_problem` then asks it)."""
    try:
        with open(config, "rb") as f:
            text = f.read(1 << 20).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    section = continued = False
    for raw in text.splitlines():
        line = raw.strip()
        if continued:
            continued = line.endswith("\\")
            continue
        if not line or line[0] in "#;":
            continue
        if line[0] == "[":
            found = _SECTION.match(line)
            if found is None:
                return False
            section, line = True, line[found.end():].strip()
            if not line or line[0] in "#;":
                continue
        if not section or _KEY.match(line) is None or line.count('"') % 2:
            return False
        continued = line.endswith("\\")
    return True


class Backend:
    """What both backends share: this thread's ``pygit2.Repository`` on demand (recovery and
    maintenance use libgit2 on any store), and closing."""

    def __init__(self, path: str):
        self.path = path
        self.pack_dir = os.path.join(path, "objects", "pack")
        self._local = threading.local()
        self._gits: list[pygit2.Repository] = []
        self._gits_lock = threading.Lock()
        self.released = False

    @property
    def git(self) -> pygit2.Repository:
        """This Python thread's ``pygit2.Repository``; :class:`StoreClosedError` once closed."""
        git = getattr(self._local, "git", None)
        if git is None:
            if self.released:
                raise StoreClosedError(f"{self.path}: the store is closed")
            git = configured().Repository(self.path)
            self._local.git = git
            with self._gits_lock:
                self._gits.append(git)
        return git

    def reopen_git(self) -> None:
        """Give this Python thread a new ``pygit2.Repository`` (a fresh view of the packs)."""
        old = getattr(self._local, "git", None)
        git = configured().Repository(self.path)
        self._local.git = git
        with self._gits_lock:
            self._gits.append(git)
            if old is not None and old in self._gits:
                self._gits.remove(old)
                old.free()  # qvc keeps no libgit2 objects between calls

    def retry_on_miss(self, lookup: Callable[[], T]) -> T:
        """Run a libgit2 object lookup, looking again while the pack directory keeps changing.

        libgit2 rescans the pack directory once on a miss. Another store merging its small
        packs can delete one between that scan and the lookup, hiding objects that now sit in
        the merged pack the scan did not see. A miss counts only once the directory held still.
        """
        try:
            return lookup()  # the hot path: no directory listing unless the object is missing
        except KeyError:
            before = sorted(os.listdir(self.pack_dir))
        for _ in range(MISS_RETRIES):
            try:
                return lookup()  # libgit2 rescans the directory (as it is now, or newer) first
            except KeyError:
                now = sorted(os.listdir(self.pack_dir))
                if now == before:
                    raise
                before = now
        return lookup()

    def close(self) -> None:
        """Free every ``pygit2.Repository``; :attr:`git` raises from now on."""
        with self._gits_lock:
            for git in self._gits:
                git.free()
            self._gits.clear()
        self._local = threading.local()
        self.released = True


class GitBackend(Backend):
    """Reads through libgit2 (objects) and :class:`~qvc.plumbing.odb.RefReader` (single refs)."""

    def __init__(self, path: str, git: pygit2.Repository | None = None):
        """``git``: the calling thread's ``pygit2.Repository`` if one is open already (as
        :meth:`check` returns it), so that opening a store opens libgit2's repository once."""
        super().__init__(path)
        self.reader = RefReader(path)
        if git is not None:
            self._local.git = git
            self._gits.append(git)

    @staticmethod
    def check(path: str) -> pygit2.Repository:
        """Return a ``pygit2.Repository`` of ``path`` (for :class:`GitBackend`'s constructor);
        raise :class:`NotARepositoryError` unless ``path`` is a bare git repository."""
        try:
            git = configured().Repository(path)
        except (pygit2.GitError, KeyError, OSError) as exc:
            config = os.path.join(path, "config")
            if "config" in str(exc) and os.path.isfile(config):  # a repository whose config does not parse
                raise CorruptionError(f"{config}: config unreadable ({exc}); fix or restore that file") from None
            raise NotARepositoryError(f"{path}: not a qvc repository ({exc})") from None
        if not git.is_bare:
            git.free()
            raise NotARepositoryError(f"{path}: not a qvc repository (a git work tree, not a bare repository)")
        return git

    def read(self, raw: bytes) -> tuple[int, bytes]:
        """``(type, data)`` of an object in git's files; :class:`CorruptionError` if missing or unreadable."""
        oid = pygit2.Oid(raw=raw)
        for fresh in (False, True):
            try:
                otype, data = self.retry_on_miss(lambda: self.git.odb.read(oid))
                break
            except KeyError:
                if fresh:
                    raise CorruptionError(f"object {oid} is missing") from None
            except (pygit2.GitError, OSError, ValueError) as exc:
                if fresh:
                    raise CorruptionError(f"object {oid} is unreadable: {exc}") from None
            # Before calling it lost: this thread's libgit2 may hold a pack list from before
            # another store merged, repacked or recovery removed packs. Look once more afresh.
            self.reopen_git()
        return otype, data

    def refs(self, prefix: str) -> list[tuple[str, str]]:
        """``(name, hex target)`` of every direct ref under ``prefix`` in git's files. Read from the
        files (:meth:`qvc.plumbing.odb.RefReader.refs`): only the directories under ``prefix`` are
        scanned, where libgit2's iterator reads every ref of the repository."""
        return list(self.reader.refs(prefix))

    def head(self, resolve: Callable[[str], str | None]) -> tuple[str | None, str | None]:
        """``(ref name, commit)`` HEAD stands for, the ref's commit given by ``resolve``."""
        try:
            head = self.git.references.get("HEAD")
        except (pygit2.GitError, ValueError) as exc:
            raise CorruptionError(f"{self.path}: HEAD is unreadable: {exc}") from None
        if head is None:
            raise CorruptionError(f"{self.path}: HEAD is missing")
        if head.type == pygit2.enums.ReferenceType.SYMBOLIC:
            name = head.target
            return name, resolve(name)
        return None, str(head.target)


class ReadOnlyBackend(Backend):
    """Reads without libgit2, through :class:`~qvc.plumbing.odb.ObjectReader` (objects and refs)."""

    def __init__(self, path: str):
        super().__init__(path)
        self.reader: ObjectReader = ObjectReader(path)

    @staticmethod
    def check(path: str) -> None:
        """Raise :class:`NotARepositoryError` unless ``path`` has the parts of a qvc repository
        (no libgit2 here: its files are looked for)."""
        for part, isdir in (("HEAD", False), ("objects", True), ("refs", True), (QVC_DIR, True)):
            where = os.path.join(path, part)
            if not (os.path.isdir(where) if isdir else os.path.isfile(where)):
                raise NotARepositoryError(f"{path}: not a qvc repository (no {part})")

    def read(self, raw: bytes) -> tuple[int, bytes]:
        """``(type, data)`` of an object in git's files; :class:`CorruptionError` if missing."""
        try:
            return self.reader.read(raw)
        except KeyError:
            raise CorruptionError(f"object {raw.hex()} is missing") from None

    def refs(self, prefix: str) -> list[tuple[str, str]]:
        """``(name, hex target)`` of every ref under ``prefix`` in git's files."""
        return list(self.reader.refs(prefix))

    def head(self, resolve: Callable[[str], str | None]) -> tuple[str | None, str | None]:
        """``(ref name, commit)`` HEAD stands for, read from the files, the ref's commit given by ``resolve``."""
        return self.reader.head(resolve)

    def close(self) -> None:
        self.reader.close()
        super().close()

