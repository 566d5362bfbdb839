"""Git packfiles written by qvc: one small pack per write, so a put creates two files, not one per object.

Loose objects cost one new file each (a checkpoint is often 5–10 objects) and file creation,
not bytes, dominates the cost of a put on a busy disk. A pack holds any number of objects
in two files (``.pack`` and ``.idx``, format version 2), which git and libgit2 read natively.
Small packs are merged later (see :meth:`qvc.plumbing.repository.Repository.consolidate`).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import mmap
import os
import struct
import zlib
from typing import Sequence

from qvc.errors import CorruptionError
from qvc.plumbing import delta
from qvc.plumbing.objects import MODE_TREE, TYPE_NAMES, parse_tree

TYPE_CODES = {"commit": 1, "tree": 2, "blob": 3}
_IDX_MAGIC = b"\xfftOc" + struct.pack(">I", 2)
#: the first bytes of a version-2 pack index
IDX_MAGIC = _IDX_MAGIC
#: the size of the smallest version-2 pack index (header, fan-out, two checksums)
MIN_INDEX_SIZE = 8 + 1024 + 40


def object_id(kind: str, data: bytes) -> bytes:
    """The raw SHA-1 git gives ``data`` as a ``kind`` object."""
    import hashlib  # here: read-only commands never hash

    h = hashlib.sha1(b"%s %d\x00" % (kind.encode(), len(data)))
    h.update(data)
    return h.digest()


def deflate(data: bytes) -> bytes:
    """zlib-compress ``data`` at git's loose-object level (1) with a window sized to it.

    zlib's set-up of its default 32 KiB window and hash tables costs more than compressing a
    small object; a window just larger than the data gives the same output four times faster.
    """
    c = zlib.compressobj(1, zlib.DEFLATED, max(9, min(15, (len(data) + 262).bit_length())), 6)
    return c.compress(data) + c.flush()


def _entry_header(code: int, size: int) -> bytes:
    out = bytearray()
    byte = (code << 4) | (size & 0x0F)
    size >>= 4
    while size:
        out.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    out.append(byte)
    return bytes(out)


def _ofs(back: int) -> bytes:
    """An ``OFS_DELTA`` entry's distance back to its base, in git's encoding."""
    out = [back & 0x7F]
    back >>= 7
    while back:
        back -= 1
        out.append(0x80 | (back & 0x7F))
        back >>= 7
    return bytes(reversed(out))


#: an ``OFS_DELTA`` entry still to be placed: (its type-and-size header, base oid, deflated delta)
DeltaEntry = tuple[bytes, bytes, bytes]


def _assemble(entries: Sequence[tuple[bytes, bytes | DeltaEntry]]) -> tuple[bytes, bytes, str]:
    """``(pack, idx, name)`` from ``(raw oid, entry bytes)`` pairs (first of a duplicate wins);
    an entry may be a :data:`DeltaEntry` whose base comes earlier in ``entries``."""
    import hashlib

    seen: dict[bytes, tuple[int, int]] = {}
    parts = [b""]
    offset = 12
    for oid, entry in entries:
        if oid in seen:
            continue
        if isinstance(entry, tuple):
            header, base_oid, payload = entry
            entry = header + _ofs(offset - seen[base_oid][1]) + payload
        seen[oid] = (zlib.crc32(entry), offset)
        parts.append(entry)
        offset += len(entry)
    if offset >= 2**31:
        raise ValueError("packs of 2 GiB or more are not written by qvc")
    parts[0] = b"PACK" + struct.pack(">II", 2, len(seen))
    pack = b"".join(parts)
    checksum = hashlib.sha1(pack).digest()
    pack += checksum
    oids = sorted(seen)
    counts = [0] * 256
    for oid in oids:
        counts[oid[0]] += 1
    fanout = list(itertools.accumulate(counts))
    idx = b"".join([
        _IDX_MAGIC, struct.pack(">256I", *fanout), b"".join(oids),
        b"".join(struct.pack(">I", seen[o][0]) for o in oids),
        b"".join(struct.pack(">I", seen[o][1]) for o in oids), checksum,
    ])
    idx += hashlib.sha1(idx).digest()
    return pack, idx, checksum.hex()


def build(objects: Sequence[tuple[str, bytes]], oids: Sequence[bytes] | None = None) -> tuple[bytes, bytes, str]:
    """``(pack bytes, idx bytes, pack name)`` for the objects (duplicates are stored once).

    ``oids``, when given, are the objects' ids (saves hashing them again). Objects are stored
    whole: a write stays cheap, and :func:`merge` finds the deltas later.
    """
    return _assemble([
        (oids[i] if oids is not None else object_id(kind, data),
         _entry_header(TYPE_CODES[kind], len(data)) + deflate(data))
        for i, (kind, data) in enumerate(objects)
    ])


def _install(pack_dir: str, pack: bytes, idx: bytes, name: str, fsync: bool) -> str:
    """Put a pack in place: the ``.pack`` first, then the ``.idx`` readers find packs by."""
    base = os.path.join(pack_dir, f"pack-{name}")
    for ext, data in ((".pack", pack), (".idx", idx)):
        # unique per call: two threads may install byte-identical packs (same name) at once
        tmp = f"{base}{ext}.tmp-{os.getpid()}-{os.urandom(6).hex()}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o444)
            try:
                write_all(fd, data)  # a full disk may take part of it: never install a short pack
                if fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, base + ext)
        except BaseException:
            # A .pack already in place stays: without its .idx nothing reads it, and another
            # thread may be installing the byte-identical pack (same name) right now.
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    return base


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (``os.write`` may write less); raise :class:`OSError` if it cannot."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:  # pragma: no cover - os.write raises rather than return 0 for a regular file
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[written:]


def write(pack_dir: str, objects: Sequence[tuple[str, bytes]], oids: Sequence[bytes] | None = None,
          *, fsync: bool = False) -> str:
    """Write a pack of ``objects`` into ``pack_dir``; return its base path (without extension)."""
    return _install(pack_dir, *build(objects, oids), fsync)


def read_index(idx_path: str) -> list[tuple[bytes, int]]:
    """``(raw oid, offset)`` of every object in a version-2 pack index, by offset."""
    with open(idx_path, "rb") as f:
        idx = f.read()
    if idx[:8] != _IDX_MAGIC:
        raise ValueError(f"{idx_path}: not a version 2 pack index")
    count = struct.unpack(">I", idx[8 + 1020 : 8 + 1024])[0]
    names = 8 + 1024
    offsets = names + 24 * count
    out = []
    for i in range(count):
        off = struct.unpack_from(">I", idx, offsets + 4 * i)[0]
        if off & 0x80000000:
            raise ValueError(f"{idx_path}: 64-bit offsets are not written by qvc")
        out.append((idx[names + 20 * i : names + 20 * i + 20], off))
    out.sort(key=lambda item: item[1])
    return out


def entry_at(data: bytes | mmap.mmap, off: int) -> tuple[int, int, int]:
    """``(type code, size, where its data starts)`` of the pack entry at ``off`` of a pack's
    bytes; ``size`` is the object's (for a delta, the delta's) inflated size."""
    c = data[off]
    kind, size, shift, pos = (c >> 4) & 7, c & 15, 4, off + 1
    while c & 0x80:
        c = data[pos]
        pos += 1
        size |= (c & 0x7F) << shift
        shift += 7
    return kind, size, pos


def ofs_base(data: bytes | mmap.mmap, pos: int) -> tuple[int, int]:
    """``(distance back to its base entry, where the deflated delta starts)`` of an
    ``OFS_DELTA`` entry whose data starts at ``pos`` (see :func:`entry_at`)."""
    c = data[pos]
    pos += 1
    back = c & 0x7F
    while c & 0x80:
        c = data[pos]
        pos += 1
        back = ((back + 1) << 7) | (c & 0x7F)
    return back, pos


def _tree_entries(deflated: bytes) -> list[tuple[str, tuple[int, bytes]]]:
    """A packed tree's entries, or none if it does not inflate or parse (it is copied as it is)."""
    try:
        return list(parse_tree(zlib.decompress(deflated)).items())
    except (zlib.error, CorruptionError):
        return []


OFS_DELTA, REF_DELTA = 6, 7  # pack entry types of deltas (the whole objects' are objects.TYPE_NAMES)
DELTA_MAX = 4 << 20  # bytes: larger blobs are stored whole (a delta search's memory and time)
DELTA_TRIES = 8  # bases a blob is tried against before it becomes a base itself
OPENING = slice(8, 40)  # the bytes that group a blob with its likely bases (past any small header)


def merge(pack_dir: str, bases: Sequence[str], *, fsync: bool = False) -> str:
    """Merge packs (qvc's own, or any holding no ``REF_DELTA`` entries) into one; return its base path.

    Entries are copied (a delta keeps its base, at its new distance), and blobs stored whole
    are stored as deltas where one blob repeats most of another of the same name: the versions
    of a growing state field (a transcript chunk), whose whole copies would otherwise cost
    their full size each. Blobs are grouped by tree entry name and opening bytes; each is
    tried against the largest of its group (the newest versions, kept whole, so reading the
    latest is one inflate), and a delta is kept only if it is under half the blob. The deltas
    a merge makes are one level deep.

    The new pack is on stable storage on return when ``fsync`` (then its directory should be
    synced by the caller); the old packs are left for the caller to remove. Raises
    ``ValueError`` for a pack with ``REF_DELTA`` entries.
    """
    whole: list[tuple[bytes, bytes]] = []  # (oid, entry bytes)
    deltas: list[tuple[bytes, DeltaEntry]] = []  # copied, and found here
    blobs: dict[bytes, tuple[bytes, int]] = {}  # oid -> (entry bytes, where its data starts in them)
    names: dict[bytes, str] = {}  # blob oid -> a name a tree gives it
    keep_whole: set[bytes] = set()  # bases of copied deltas
    for base in bases:
        with open(base + ".pack", "rb") as f:
            data = f.read()
        index = read_index(base + ".idx")
        at = {off: oid for oid, off in index}
        ends = [off for _, off in index[1:]] + [len(data) - 20]
        for (oid, off), end in zip(index, ends, strict=True):
            kind, size, pos = entry_at(data, off)
            if kind == OFS_DELTA:
                back, start = ofs_base(data, pos)
                base_oid = at.get(off - back)
                if base_oid is None:
                    raise ValueError(f"{base}.pack: a delta at {off} has no base entry")
                keep_whole.add(base_oid)
                deltas.append((oid, (data[off:pos], base_oid, data[start:end])))
            elif kind in TYPE_NAMES:
                whole.append((oid, data[off:end]))
                if kind == 3 and delta.MIN_SIZE <= size <= DELTA_MAX:
                    blobs.setdefault(oid, (data[off:end], pos - off))
                elif kind == 2:
                    for name, (mode, raw) in _tree_entries(data[pos:end]):
                        if mode != MODE_TREE:
                            names.setdefault(raw, name)
            else:
                raise ValueError(f"{base}.pack holds REF_DELTA entries: only packs without them are merged")
    by_name: dict[str, list[bytes]] = {}
    for oid in blobs:
        if oid in names and oid not in keep_whole:
            by_name.setdefault(names[oid], []).append(oid)
    contents: dict[bytes, bytes] = {}
    groups: dict[tuple[str, bytes], list[bytes]] = {}
    for name, oids in by_name.items():
        for oid in oids if len(oids) > 1 else ():
            entry, start = blobs[oid]
            try:
                contents[oid] = content = zlib.decompress(entry[start:])
            except zlib.error:
                continue  # copied as it is; whoever reads it reports the damage
            # a version of one field keeps its name and its opening (a chunk's first message)
            groups.setdefault((name, content[OPENING]), []).append(oid)
    found: dict[bytes, DeltaEntry] = {}
    for group in groups.values():
        if len(group) < 2:
            continue
        group.sort(key=lambda oid: len(contents[oid]), reverse=True)
        chosen: list[tuple[bytes, delta.Base]] = []
        for oid in group:
            target = contents[oid]
            for base_oid, base in chosen[-DELTA_TRIES:]:
                d = base.delta(target, len(target) // 2)
                if d is not None:
                    found[oid] = (_entry_header(OFS_DELTA, len(d)), base_oid, deflate(d))
                    break
            else:
                chosen.append((oid, delta.Base(target)))
    entries: list[tuple[bytes, bytes | DeltaEntry]] = [(oid, e) for oid, e in whole if oid not in found]
    entries += deltas + list(found.items())
    return _install(pack_dir, *_assemble(entries), fsync)


def is_intact(base: str) -> bool:
    """Whether a pack and its index are whole: sizes agree and both name the same checksum.

    Cheap (reads the index and the pack's last 20 bytes); it catches what a crash leaves:
    a missing, empty or truncated file, or a tail never written out.
    """
    import hashlib

    try:
        with open(base + ".idx", "rb") as f:
            idx = f.read()
        if len(idx) < MIN_INDEX_SIZE or idx[:8] != _IDX_MAGIC:
            return False
        count = struct.unpack(">I", idx[8 + 1020 : 8 + 1024])[0]
        extra = len(idx) - (8 + 1024 + 28 * count + 40)  # the 64-bit offset table of a big pack
        if extra < 0 or extra % 8:
            return False
        if len(idx) <= 2**20 and hashlib.sha1(idx[:-20]).digest() != idx[-20:]:
            return False
        size = os.path.getsize(base + ".pack")
        with open(base + ".pack", "rb") as f:
            header = f.read(12)
            f.seek(size - 20)
            tail = f.read(20)
        return (size >= 32 and header[:4] == b"PACK" and struct.unpack(">I", header[8:12])[0] == count
                and tail == idx[-40:-20])
    except (OSError, struct.error):
        return False


def mergeable(base: str) -> bool:
    """Whether :func:`merge` can take this pack: whole (:func:`is_intact`) and holding no
    ``REF_DELTA`` entries (qvc's own packs, merged ones, and those ``git repack`` writes; not
    a fetch's thin pack completed by git)."""
    if not is_intact(base):
        return False
    try:
        with open(base + ".pack", "rb") as f:
            data = f.read()
        return all((data[off] >> 4) & 7 in (*TYPE_NAMES, OFS_DELTA) for _, off in read_index(base + ".idx"))
    except (OSError, ValueError, IndexError):
        return False
