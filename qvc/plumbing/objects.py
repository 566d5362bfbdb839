"""Git objects as bytes: type numbers, tree entry modes, and building and parsing trees and commits.

Pure functions over bytes; nothing here touches a repository.
"""

from __future__ import annotations

import time
from typing import Iterable

from qvc.errors import CorruptionError

TYPES = {"blob": 3, "tree": 2, "commit": 1}  # git's object type numbers (pygit2.enums.ObjectType)
TYPE_NAMES = {v: k for k, v in TYPES.items()} | {4: "tag"}
MODE_BLOB = 0o100644
MODE_TREE = 0o040000
SIGNATURE = b"qvc <qvc@localhost>"

#: A tree entry: (mode, raw oid).
Entry = tuple[int, bytes]


def tree_bytes(entries: dict[str, Entry]) -> bytes:
    """Serialize a git tree from ``{name: (mode, raw oid)}`` in git's canonical order."""

    def key(item: tuple[str, Entry]) -> bytes:
        name, (mode, _) = item
        return name.encode("utf-8", "surrogateescape") + (b"/" if mode == MODE_TREE else b"")

    parts = []
    for name, (mode, raw) in sorted(entries.items(), key=key):
        parts.append(b"%o %s\x00%s" % (mode, name.encode("utf-8", "surrogateescape"), raw))
    return b"".join(parts)


def commit_bytes(tree_hex: str, parents: Iterable[str], message: str, when: float | None = None) -> bytes:
    """Serialize a git commit object."""
    stamp = b"%d +0000" % int(time.time() if when is None else when)
    lines = [b"tree " + tree_hex.encode()]
    lines += [b"parent " + p.encode() for p in parents]
    lines += [b"author " + SIGNATURE + b" " + stamp, b"committer " + SIGNATURE + b" " + stamp, b""]
    return b"\n".join(lines) + b"\n" + message.encode("utf-8", "surrogateescape")


def parse_tree(data: bytes, raw: bytes = b"") -> dict[str, tuple[int, bytes]]:
    """Parse a git tree object's data into ``{name: (mode, raw oid)}``."""
    entries, pos, end = {}, 0, len(data)
    try:
        while pos < end:
            space = data.index(b" ", pos)
            nul = data.index(b"\x00", space)
            if nul + 21 > end:
                raise ValueError("truncated object id")
            entries[data[space + 1 : nul].decode("utf-8", "surrogateescape")] = (
                int(data[pos:space], 8), data[nul + 1 : nul + 21])
            pos = nul + 21
    except ValueError:
        raise CorruptionError(f"tree {raw.hex() or '?'} is malformed") from None
    return entries
