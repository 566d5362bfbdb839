"""git's binary delta format (pack entries of type ``OFS_DELTA``/``REF_DELTA``): apply and encode.

A delta rebuilds a target object from a base object: a header with both sizes, then ops that
either copy a run of the base or insert literal bytes. :func:`apply` reads any delta git or
libgit2 wrote. :class:`Base` encodes deltas against one base, for what qvc writes most: a new
version of a state field's blob that repeats most of an earlier one (a transcript chunk with
messages appended), so the match finder is simple: the base is indexed in aligned blocks and
each match is extended as far as it goes, in C-speed slice compares.
"""

from __future__ import annotations

BLOCK = 16  # bytes: the base is indexed at every BLOCK-aligned offset; shorter matches are inserted
MIN_SIZE = 4 * BLOCK  # bytes: smaller targets are not worth a delta
_MAX_COPY = 0xFFFFFF  # the largest run one copy op names (three size bytes)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        c = data[pos]
        pos += 1
        value |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return value, pos


def _size(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def apply(base: bytes, delta: bytes) -> bytes:
    """The target ``delta`` rebuilds from ``base``. Raises ``ValueError`` if they do not fit."""
    src_size, pos = _varint(delta, 0)
    dst_size, pos = _varint(delta, pos)
    if src_size != len(base):
        raise ValueError("delta base size mismatch")
    out = bytearray()
    n = len(delta)
    while pos < n:
        op = delta[pos]
        pos += 1
        if op & 0x80:
            off = size = 0
            for i in range(4):
                if op & (1 << i):
                    off |= delta[pos] << (8 * i)
                    pos += 1
            for i in range(3):
                if op & (0x10 << i):
                    size |= delta[pos] << (8 * i)
                    pos += 1
            out += base[off:off + (size or 0x10000)]
        elif op:
            out += delta[pos:pos + op]
            pos += op
        else:
            raise ValueError("delta opcode 0")
    if len(out) != dst_size:
        raise ValueError("delta result size mismatch")
    return bytes(out)


def _copy(off: int, size: int) -> bytes:
    out = bytearray()
    while size:
        run = min(size, _MAX_COPY)
        op, args = 0x80, bytearray()
        for i in range(4):
            byte = (off >> (8 * i)) & 0xFF
            if byte:
                op |= 1 << i
                args.append(byte)
        for i in range(3):
            byte = (run >> (8 * i)) & 0xFF
            if byte:
                op |= 0x10 << i
                args.append(byte)
        out.append(op)
        out += args
        off += run
        size -= run
    return bytes(out)


def _insert(data: bytes) -> bytes:
    return b"".join(bytes([len(data[i:i + 127])]) + data[i:i + 127] for i in range(0, len(data), 127))


class Base:
    """One base object, indexed once, to encode deltas of several targets against."""

    def __init__(self, data: bytes):
        self.data = data
        self._blocks: dict[bytes, int] = {}
        for off in range(0, len(data) - BLOCK + 1, BLOCK):
            self._blocks.setdefault(data[off:off + BLOCK], off)

    def _match(self, at: int, target: bytes, pos: int) -> int:
        """How many bytes from ``base[at]`` equal those from ``target[pos]`` (at least BLOCK)."""
        base, length, step = self.data, BLOCK, BLOCK
        while True:
            n = min(step, len(base) - at - length, len(target) - pos - length)
            if n <= 0:
                return length
            if base[at + length:at + length + n] == target[pos + length:pos + length + n]:
                length += n
                step *= 2
                continue
            lo, hi = 0, n  # the first lo bytes agree, the first hi do not
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if base[at + length:at + length + mid] == target[pos + length:pos + length + mid]:
                    lo = mid
                else:
                    hi = mid
            return length + lo

    def _shares(self, target: bytes) -> bool:
        """A quick look: do two of three stretches sampled across ``target`` occur in the base?
        (Two blobs that share only a common opening, a system prompt say, are not worth a
        byte-by-byte search.)"""
        blocks, hits = self._blocks, 0
        for k in (1, 2, 3):
            start = len(target) * k // 4
            stop = min(start + BLOCK, len(target) - BLOCK + 1)
            hits += any(target[p:p + BLOCK] in blocks for p in range(start, stop))
        return hits >= 2

    def delta(self, target: bytes, limit: int) -> bytes | None:
        """A delta that rebuilds ``target`` from this base, or ``None`` if none shorter than
        ``limit`` bytes was found."""
        if len(target) < MIN_SIZE or not self._blocks or not self._shares(target):
            return None
        base, blocks = self.data, self._blocks
        parts = [_size(len(base)), _size(len(target))]
        size = len(parts[0]) + len(parts[1])
        pending = pos = 0  # target[pending:pos] is not matched yet
        last = len(target) - BLOCK
        while pos <= last:
            at = blocks.get(target[pos:pos + BLOCK])
            if at is None:
                pos += 1
                if pos - pending + size >= limit:
                    return None
                continue
            length = self._match(at, target, pos)
            while pos > pending and at > 0 and base[at - 1] == target[pos - 1]:  # grow it backwards
                at, pos, length = at - 1, pos - 1, length + 1
            if pos > pending:
                parts.append(_insert(target[pending:pos]))
                size += len(parts[-1])
            parts.append(_copy(at, length))
            size += len(parts[-1])
            pos = pending = pos + length
            if size >= limit:
                return None
        if pending < len(target):
            parts.append(_insert(target[pending:]))
            size += len(parts[-1])
        return b"".join(parts) if size < limit else None
