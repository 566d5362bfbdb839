"""The pack set of one store: the small packs its publications wrote, their merges, and the packer thread.

Each publication writes what is staged as one small pack (:meth:`qvc.plumbing.staging.Staging.publish`),
which the store that published it counts here (:meth:`PackSet.add`).
Small packs are merged as the store goes (:meth:`PackSet.consolidate`, tiered like git's
geometric repack) by a background thread, the packer, and the directory's small packs of any
writer, dead or alive, once there are many (:meth:`PackSet.merge_small_packs`, under the
exclusive maintenance lock). A merged pack is on stable storage before the packs it replaces
are removed, and readers that miss an object meanwhile look again
(:meth:`qvc.plumbing.backend.Backend.retry_on_miss`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Callable

from qvc.logs import log
from qvc.plumbing import pack
from qvc.plumbing.durability import Worker, fsync_dir
from qvc.plumbing.locking import LockProtocol, pack_lock

CONSOLIDATE_AT = 32  # small packs this store wrote before they are merged into one
MERGE_PACKS_AT = 16  # small packs in the directory (any writer's, dead or alive) before they are merged
#: packs git marks as not to be merged away: kept, a partial clone's, cruft (unreachable objects' times)
NOT_MERGED = (".keep", ".promisor", ".mtimes")
SMALL_PACK = 4 * 2**20




class PackSet:
    """The packs one store wrote and merged, and the packer thread that merges them.

    ``closing`` tells whether the store began to close (no packer starts then); ``also`` is
    more work for the packer, run after each merge (the store packs the refs it created).
    """

    def __init__(self, path: str, locks: LockProtocol, *, fsync: bool, closing: Callable[[], bool],
                 also: Callable[[], None] | None = None):
        self.path = path
        self.pack_dir = os.path.join(path, "objects", "pack")
        self.fsync = fsync
        self._locks = locks
        self._closing = closing
        self._also = also
        self._small: list[str] = []  # packs of single writes, not yet merged
        self._merged: list[str] = []  # packs this store merged
        self._packs_lock = threading.Lock()
        self._consolidate_lock = threading.Lock()
        self._packer: Worker | None = None  # started on first need
        self._workers_lock = threading.Lock()  # guards starting the packer (see stop)

    @property
    def small_count(self) -> int:
        """How many small packs this store wrote and has not merged yet."""
        return len(self._small)

    def add(self, base: str) -> None:
        """Count the small pack at ``base`` (a publication's, already on stable storage) as this
        store's, to be merged once there are :data:`CONSOLIDATE_AT` of them."""
        with self._packs_lock:
            self._small.append(base)

    def poke(self, more: bool = False) -> None:
        """Wake the packer (starting it on first need) if this store wrote :data:`CONSOLIDATE_AT`
        small packs or ``more`` (other work for it) is due. Never once the store began to close."""
        if len(self._small) >= CONSOLIDATE_AT or more:
            # Runs after publish() let go of its locks, in any thread that published: one
            # packer, started under the lock and never once close() began (close stops it).
            with self._workers_lock:
                if self._packer is None and not self._closing():
                    self._packer = Worker(self._maintain_quietly, 0.0, name="qvc-packer")
                packer = self._packer
            if packer is not None:
                packer.poke()

    def stop(self) -> None:
        """Stop and join the packer (the store is closing: no packer starts after this)."""
        with self._workers_lock:
            packer = self._packer
        if packer is not None:
            packer.stop()

    def _maintain_quietly(self) -> None:
        """The packer's task: merge this store's small packs, then the extra work (``also``)."""
        if len(self._small) >= CONSOLIDATE_AT:
            self.consolidate_quietly()
        if self._also is not None:
            self._also()

    def consolidate_quietly(self) -> None:
        """:meth:`consolidate`, a failure only logged (the small packs stay and are merged later)."""
        try:
            self.consolidate()
        except Exception as exc:  # harmless: the small packs stay and are merged later
            log.warning("qvc: merging small packs in %s failed: %s", self.path, exc)

    def consolidate(self) -> None:
        """Merge the small packs this store wrote into one; merge those in turn.

        Tiered like git's geometric repack: CONSOLIDATE_AT small packs become one, and
        CONSOLIDATE_AT merged packs become one, so a long run keeps few packs. Each merged pack
        is flushed to stable storage before the packs it replaces are removed. Holds the
        maintenance lock shared and the pack lock.
        """
        with self._consolidate_lock, self._locks.shared(), pack_lock(self.path):
            with self._packs_lock:
                small, self._small = self._small, []
            # git maintenance (qvc purge, git gc) may have repacked some of them already
            small = [b for b in small if os.path.exists(b + ".idx")]
            self._merged = [b for b in self._merged if os.path.exists(b + ".idx")]
            if len(small) == 1:
                with self._packs_lock:
                    self._small[:0] = small
                return
            if small:
                self._merged.append(self._merge(small))
            if len(self._merged) >= CONSOLIDATE_AT:
                self._merged = [self._merge(self._merged)]

    def merge_small_packs(self, *, locked: bool = False) -> int:
        """Merge the directory's small packs into one once it holds ``MERGE_PACKS_AT`` of them;
        return how many were merged.

        Whoever wrote them: stores that closed (each leaves its last pack), writers killed
        before they merged their own, and so on. Runs under the exclusive maintenance lock, so
        no qvc writer is mid-write (``locked``: the caller, recovery, holds it; otherwise it is
        tried without waiting, and a busy repository is merged by a later close). Readers may
        run: the merged pack is on stable storage before the packs it replaces are removed,
        and a reader that misses an object looks again once the directory holds still
        (:meth:`~qvc.plumbing.backend.Backend.retry_on_miss`). Packs with ``REF_DELTA`` entries
        (a fetch's completed thin pack) and torn ones are left alone (``qvc gc`` repacks
        everything; recovery removes torn packs).
        """
        if not locked:
            with self._locks.try_exclusive() as mine:
                return self.merge_small_packs(locked=True) if mine else 0
        with self._consolidate_lock, pack_lock(self.path):
            small = []
            for name in os.listdir(self.pack_dir):
                base = os.path.join(self.pack_dir, name[:-4])
                if not name.endswith(".idx") or any(os.path.exists(base + ext) for ext in NOT_MERGED):
                    continue
                with contextlib.suppress(OSError):
                    if os.path.getsize(base + ".pack") < SMALL_PACK:
                        small.append(base)
            if len(small) < MERGE_PACKS_AT:
                return 0
            small = [b for b in sorted(small) if pack.mergeable(b)]
            if len(small) < 2:
                return 0
            merged = self._merge(small)
            gone = set(small) - {merged}
            with self._packs_lock:
                self._small = [b for b in self._small if b not in gone]
            self._merged = [b for b in self._merged if b not in gone and b != merged] + [merged]
            return len(small)

    def _merge(self, bases: list[str]) -> str:
        merged = pack.merge(self.pack_dir, bases, fsync=self.fsync)
        if self.fsync:
            fsync_dir(self.pack_dir)
        for base in bases:
            if base != merged:
                # the index first (readers find packs by it), then the pack, then what git keeps
                # next to packs it wrote (bitmap, reverse index)
                for ext in (".idx", ".pack", ".bitmap", ".rev"):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(base + ext)
        return merged
