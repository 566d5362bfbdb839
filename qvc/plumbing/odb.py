"""Reading a git repository without libgit2: objects (loose and packed, deltas included) and refs.

Read-only stores (``GitCheckpointStore(path, readonly=True)``, what the CLI's reading
commands open) use this instead of pygit2, whose import alone costs more than a whole
``qvc log``. It reads what git and libgit2 write: loose objects, version-2 pack indexes,
packs with ``OFS_DELTA``/``REF_DELTA`` entries, loose refs, ``packed-refs`` and ``HEAD``.
It never writes.
"""

from __future__ import annotations

import bisect
import mmap
import os
import re
import struct
import threading
import zlib
from collections import OrderedDict
from typing import Callable, Iterator

from qvc.errors import CorruptionError, DamagedRefError
from qvc.plumbing import delta, leases
from qvc.plumbing import pack as packfile
from qvc.plumbing.objects import TYPE_NAMES

_IDX_MAGIC = b"\xfftOc\x00\x00\x00\x02"
_MISS_RETRIES = 8
_HEX40 = re.compile("[0-9a-f]{40}")


class ObjectMissing(KeyError):
    """The object is in no pack and not loose (after looking again while packs kept changing)."""


class _Pack:
    """One pack and its index, memory-mapped."""

    def __init__(self, base: str):
        self.base = base
        with open(base + ".idx", "rb") as f:
            self.idx = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        with open(base + ".pack", "rb") as f:
            self.pack = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        if self.idx[:8] != _IDX_MAGIC or self.pack[:4] != b"PACK":
            raise CorruptionError(f"{base}: not a version-2 pack and index")
        self.count = struct.unpack_from(">I", self.idx, 8 + 255 * 4)[0]
        self.names = 8 + 1024
        self.offsets = self.names + 24 * self.count  # past the names (20 bytes) and CRCs (4 bytes)
        self.large = self.offsets + 4 * self.count

    def offset(self, raw: bytes) -> int | None:
        """The object's offset in the pack, or ``None`` (binary search in the fan-out range)."""
        first = raw[0]
        lo = struct.unpack_from(">I", self.idx, 8 + (first - 1) * 4)[0] if first else 0
        hi = struct.unpack_from(">I", self.idx, 8 + first * 4)[0]
        idx, names = self.idx, self.names
        while lo < hi:
            mid = (lo + hi) // 2
            at = names + 20 * mid
            name = idx[at:at + 20]
            if name < raw:
                lo = mid + 1
            elif name > raw:
                hi = mid
            else:
                off = struct.unpack_from(">I", idx, self.offsets + 4 * mid)[0]
                if off & 0x80000000:
                    off = struct.unpack_from(">Q", idx, self.large + 8 * (off & 0x7FFFFFFF))[0]
                return off
        return None

    def close(self) -> None:
        self.idx.close()
        self.pack.close()


class RefReader:
    """The refs of the repository at ``path`` (loose files, ``packed-refs``, ``HEAD``); never writes.

    Every call reads the files afresh (``packed-refs`` is parsed again only when it changed),
    so it sees other processes' ref moves; :mod:`qvc.readers.watch` diffs its snapshots.
    """

    def __init__(self, path: str):
        self.path = path
        self._packed_refs: tuple[tuple, dict[str, str]] | None = None
        self._packed_names: tuple[dict[str, str], list[str]] | None = None  # (the dict, its names sorted)

    def _packed(self) -> dict[str, str]:
        path = os.path.join(self.path, "packed-refs")
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return {}
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        cached = self._packed_refs
        if cached is not None and cached[0] == stamp:
            return cached[1]
        refs: dict[str, str] = {}
        with open(path, "rb") as f:
            for line in f.read().decode("utf-8", "surrogateescape").splitlines():
                if not line or line[0] in "#^":
                    continue
                sha, _, name = line.partition(" ")
                if len(sha) == 40:
                    refs[name] = sha
        self._packed_refs = (stamp, refs)
        return refs

    def _packed_under(self, prefix: str) -> list[tuple[str, str]]:
        """The packed refs whose name starts with ``prefix`` (a range of the sorted names, found by
        bisection: ``packed-refs`` may hold tens of thousands)."""
        refs = self._packed()
        names = self._packed_names
        if names is None or names[0] is not refs:
            names = self._packed_names = (refs, sorted(refs))
        ordered = names[1]
        out = []
        for i in range(bisect.bisect_left(ordered, prefix), len(ordered)):
            name = ordered[i]
            if not name.startswith(prefix):
                break
            out.append((name, refs[name]))
        return out

    def _loose(self, name: str, depth: int = 0, *, follow: bool = True) -> str | None:
        """The target of a loose ref file (following ``ref:`` links; ``None`` for one without
        ``follow``), or ``None`` if there is none."""
        try:
            fd = os.open(os.path.join(self.path, name), os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            text = os.read(fd, 4096).decode("utf-8", "surrogateescape").strip()
        except IsADirectoryError:
            return None
        finally:
            os.close(fd)
        if text.startswith("ref: "):
            if not follow:
                return None
            if depth >= 5:
                raise CorruptionError(f"ref {name}: too many symbolic links")
            found = self._loose(text[5:], depth + 1)
            return found if found is not None else self._packed().get(text[5:])
        if not _HEX40.fullmatch(text):
            raise DamagedRefError(f"ref {name} is unreadable: {text[:60]!r}", name)
        return text

    def ref(self, name: str) -> str | None:
        """The hex target of ``name`` (loose, else packed), ``None`` when it does not exist.
        Raises :class:`CorruptionError` for a ref file that is no ref."""
        found = self._loose(name)
        return found if found is not None else self._packed().get(name)

    def refs(self, prefix: str) -> Iterator[tuple[str, str]]:
        """``(name, hex target)`` of every direct ref whose name starts with ``prefix`` (a symbolic
        one, such as ``refs/remotes/<remote>/HEAD``, is not listed). A ref file that holds no ref
        is skipped, as git skips it ("ignoring broken ref"), rather than fail the listing; its
        packed value, if any, is not listed either (:meth:`damaged` lists such files).

        Loose refs are read before ``packed-refs``: ``git pack-refs`` and libgit2 write the new
        ``packed-refs`` before they remove the loose files, so a ref moving into ``packed-refs``
        meanwhile is found in one or the other, never missed.
        """
        out: dict[str, str | None] = {}
        for name in self.loose_names(prefix):
            try:
                out[name] = self._loose(name, follow=False)
            except DamagedRefError:
                out[name] = None
        for name, target in self._packed_under(prefix):
            out.setdefault(name, target)
        return iter(sorted((name, target) for name, target in out.items() if target is not None))

    def damaged(self, prefix: str) -> list[tuple[str, str]]:
        """``(name, why)`` of every loose ref file under ``prefix`` that holds no ref (which
        :meth:`refs` skips), sorted by name."""
        found = []
        for name in self.loose_names(prefix):
            try:
                self._loose(name, follow=False)
            except DamagedRefError as exc:
                found.append((name, str(exc)))
        return sorted(found)

    def names(self, prefix: str) -> set[str]:
        """The names of every ref under ``prefix``, loose and packed, without reading their targets.

        For indexes that need only which refs exist: one directory scan (plus ``packed-refs`` when
        it changed), where :meth:`refs` also opens every loose file. Loose names are listed
        before ``packed-refs`` is read, as in :meth:`refs`.
        """
        out = set(self.loose_names(prefix))
        out.update(name for name, _ in self._packed_under(prefix))
        return out

    def loose_names(self, prefix: str) -> list[str]:
        """The loose ref files under ``prefix`` (not lock files), walking only the directories
        that can hold such names."""
        return [name for name in self.walk(prefix) if not name.endswith(".lock")]

    def walk(self, prefix: str) -> Iterator[str]:
        """Every file under ``refs/`` whose name starts with ``prefix``, lock files included
        (nothing waited for, nothing read); not the files a qvc lease is written into before it
        is linked as its lock (:data:`qvc.plumbing.leases.WRITING`)."""
        # Names under ``prefix`` live in the directory its last ``/`` ends (or below): start there.
        top = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        dirs = [top] if top.startswith("refs/") or top == "refs" else ["refs"]
        while dirs:
            rel = dirs.pop()
            try:
                entries = list(os.scandir(os.path.join(self.path, rel)))
            except (FileNotFoundError, NotADirectoryError):
                continue  # removed meanwhile (pack-refs prunes empty directories)
            for entry in entries:
                name = f"{rel}/{entry.name}"
                if entry.is_dir(follow_symlinks=False):
                    if name.startswith(prefix) or prefix.startswith(name + "/"):
                        dirs.append(name)
                elif name.startswith(prefix) and leases.writing(entry.name) is None:
                    yield name

    def head(self, resolve: Callable[[str], str | None] | None = None) -> tuple[str | None, str | None]:
        """``(ref name, commit)`` of HEAD, as :meth:`qvc.plumbing.repository.Repository.head_ref`:
        the ref HEAD names is resolved by ``resolve`` (default: :meth:`ref`, git's files alone)."""
        try:
            with open(os.path.join(self.path, "HEAD"), "rb") as f:
                text = f.read().decode("utf-8", "surrogateescape").strip()
        except FileNotFoundError:
            raise CorruptionError(f"{self.path}: HEAD is missing") from None
        if text.startswith("ref: "):
            return text[5:], (resolve or self.ref)(text[5:])
        if len(text) == 40:
            return None, text
        raise CorruptionError(f"{self.path}: HEAD is unreadable: {text[:60]!r}")


class ObjectReader(RefReader):
    """Objects and refs of the repository at ``path``, read with the standard library only.

    Thread-safe. Lookups that miss rescan the pack directory while it keeps changing (another
    store may be merging packs), like :meth:`qvc.plumbing.repository.Repository.retry_on_miss`.
    """

    def __init__(self, path: str):
        super().__init__(path)
        self.pack_dir = os.path.join(path, "objects", "pack")
        self._packs: dict[str, _Pack] = {}
        self._listing: list[str] = []
        self._failed: set[str] = set()  # packs listed that did not open
        self._lock = threading.Lock()
        self._bases: OrderedDict[tuple[str, int], tuple[int, bytes]] = OrderedDict()  # delta bases
        self._last: _Pack | None = None
        self._scan()

    # -- objects --------------------------------------------------------------------------

    def _scan(self) -> bool:
        """Open packs that appeared; return whether the directory changed since the last scan or a
        pack opened that did not before (an index rebuilt in place)."""
        try:
            listing = sorted(n[:-4] for n in os.listdir(self.pack_dir) if n.endswith(".idx"))
        except FileNotFoundError:
            listing = []
        with self._lock:
            changed = listing != self._listing
            self._listing = listing
            for name in listing:
                if name not in self._packs:
                    try:
                        self._packs[name] = _Pack(os.path.join(self.pack_dir, name))
                        changed = changed or name in self._failed
                        self._failed.discard(name)
                    except (OSError, ValueError, CorruptionError):
                        # half-installed or gone again: the next scan sees it; or a damaged
                        # index, which recovery on open rebuilds (qvc.plumbing.recovery.repair_packs)
                        self._failed.add(name)
                        continue
            for name in [n for n in self._packs if n not in listing]:
                self._packs.pop(name).close()
        return changed

    def read(self, raw: bytes) -> tuple[int, bytes]:
        """``(type, data)`` of an object (type 1 commit, 2 tree, 3 blob, 4 tag).

        Raises :class:`ObjectMissing` if it is nowhere, :class:`CorruptionError` if it does not decode.
        """
        for _ in range(_MISS_RETRIES):
            found = self._find(raw)
            if found is not None:
                return found
            if not self._scan():
                break
        raise ObjectMissing(raw.hex())

    def _find(self, raw: bytes) -> tuple[int, bytes] | None:
        packs = list(self._packs.values())
        last = self._last
        if last is not None and last in packs:  # objects read together tend to share a pack
            packs.remove(last)
            packs.insert(0, last)
        for pack in packs:
            off = pack.offset(raw)
            if off is not None:
                self._last = pack
                try:
                    return self._unpack(pack, off)
                except (ValueError, IndexError, zlib.error, struct.error) as exc:
                    raise CorruptionError(f"object {raw.hex()} in {pack.base}.pack is unreadable: {exc}") from None
        hexid = raw.hex()
        try:
            with open(os.path.join(self.path, "objects", hexid[:2], hexid[2:]), "rb") as f:
                data = zlib.decompress(f.read())
        except FileNotFoundError:
            return None
        except (OSError, zlib.error) as exc:
            raise CorruptionError(f"object {hexid} is unreadable: {exc}") from None
        head, sep, body = data.partition(b"\0")
        kind, _, size = head.partition(b" ")
        types = {v.encode(): k for k, v in TYPE_NAMES.items()}
        if not sep or kind not in types or not size.isdigit() or int(size) != len(body):
            raise CorruptionError(f"object {hexid}: malformed loose object")
        return types[kind], body

    def _unpack(self, pack: _Pack, offset: int) -> tuple[int, bytes]:
        key = (pack.base, offset)
        cached = self._bases.get(key)
        if cached is not None:
            return cached
        data = pack.pack
        kind, size, pos = packfile.entry_at(data, offset)
        if kind == packfile.OFS_DELTA:
            back, pos = packfile.ofs_base(data, pos)
            base_type, base = self._unpack(pack, offset - back)
            result = base_type, delta.apply(base, _inflate(data, pos, size))
        elif kind == packfile.REF_DELTA:
            base_type, base = self.read(bytes(data[pos:pos + 20]))
            result = base_type, delta.apply(base, _inflate(data, pos + 20, size))
        elif kind in TYPE_NAMES:
            result = kind, _inflate(data, pos, size)
        else:
            raise ValueError(f"unknown pack entry type {kind}")
        if kind in (packfile.OFS_DELTA, packfile.REF_DELTA) or len(result[1]) < 65536:  # keep delta chains cheap
            with self._lock:
                self._bases[key] = result
                while len(self._bases) > 256:
                    self._bases.popitem(last=False)
        return result

    def close(self) -> None:
        with self._lock:
            for pack in self._packs.values():
                pack.close()
            self._packs.clear()


def _inflate(data: mmap.mmap, pos: int, size: int) -> bytes:
    """Inflate the zlib stream at ``pos`` that must yield ``size`` bytes."""
    d = zlib.decompressobj()
    parts, window = [], size + 1024  # a stream is at most a little longer than its data
    while not d.eof:
        chunk = data[pos:pos + window]
        if not chunk:
            raise ValueError("truncated pack entry")
        parts.append(d.decompress(chunk))
        pos += window
        window = 1 << 16
    out = b"".join(parts)
    if len(out) != size:
        raise ValueError(f"pack entry inflates to {len(out)} bytes, expected {size}")
    return out
