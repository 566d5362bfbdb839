"""Reflogs: the movements of a ref, as git records them in ``logs/<ref>``, plus compacted ones.

A reflog file costs a file-system block (4 KB) however short it is, and most threads of a
fleet move once: 20,000 one-line reflogs take 79 MB. :func:`qvc.plumbing.refpack.compact_reflogs`
moves one-line reflogs of threads into ``qvc/reflogs/<xx>``, 256 append-only files of
``<ref name>\t<reflog line>`` lines (the file chosen by the name's CRC-32; empty lines are
skipped), and removes the reflog file. :func:`read_reflog` puts a ref's compacted entries
before those of its file, so ``THREAD@{N}`` and ``qvc reflog`` see the whole history (plain
``git reflog`` sees the file only). A compaction a crash cut short leaves an entry in both its
shard and its file, and a later one may append it again: each counts once.

Compacted entries count only while they connect to the file: a file whose oldest entry does not
start from the newest compacted entry's value belongs to a new ref of that name (the old one
was deleted, and git deleted its reflog file), and the compacted entries are then ignored, as
are those before a compacted creation (a ref of that name deleted and created again).
"""

from __future__ import annotations

import os
import time
import zlib
from typing import NamedTuple

PACKED = "qvc/reflogs"  # compacted reflogs (see the module docstring)

ZERO = "0" * 40  # git's id for "absent" in a reflog line


def reflog_line(old: str | None, new: str | None, who: str, when: float, message: str) -> bytes:
    """One reflog line as git writes it (``message`` on one line)."""
    offset = time.localtime(when).tm_gmtoff // 60
    sign = "-" if offset < 0 else "+"
    tz = f"{sign}{abs(offset) // 60:02d}{abs(offset) % 60:02d}"
    text = " ".join(message.split("\n"))
    return f"{old or ZERO} {new or ZERO} {who} {int(when)} {tz}\t{text}\n".encode("utf-8", "surrogateescape")


class ReflogEntry(NamedTuple):
    """One movement of a ref: from ``old`` to ``new`` (``None`` = absent) at ``time``, and why."""

    old: str | None
    new: str | None
    time: int
    who: str
    message: str

    @classmethod
    def parse(cls, line: bytes) -> ReflogEntry | None:
        """Parse one reflog line; ``None`` if it is malformed (torn by a crash)."""
        try:
            head, _, message = line.decode("utf-8", "replace").partition("\t")
            old, new, rest = head.split(" ", 2)
            who, when, _tz = rest.rsplit(" ", 2)
            if len(old) != 40 or len(new) != 40:
                return None
            int(old, 16), int(new, 16)
            return cls(None if old == ZERO else old, None if new == ZERO else new, int(when), who, message)
        except ValueError:
            return None


def head_branch(repo_path: str) -> str | None:
    """The ref HEAD names (read from its file), or ``None`` (detached, or unreadable): the branch
    whose moves git logs in HEAD's reflog too."""
    try:
        with open(os.path.join(repo_path, "HEAD"), "rb") as f:
            data = f.read(4096)
    except OSError:
        return None
    return data[5:].strip().decode("utf-8", "replace") if data.startswith(b"ref: ") else None


def read_reflog(repo_path: str, name: str) -> list[ReflogEntry]:
    """The reflog of ref ``name`` in the repository at ``repo_path``, newest first; ``[]`` if none:
    its compacted entries, then its file's (see the module docstring).

    Parsed leniently: a line torn by a crash is skipped, not an error."""
    try:
        with open(os.path.join(repo_path, "logs", name), "rb") as f:
            data = f.read()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        data = b""
    out = []
    for line in data.split(b"\n"):
        entry = ReflogEntry.parse(line)
        if entry is not None:
            out.append(entry)
    packed = packed_entries(repo_path, name)
    if packed:
        if out and out[0] == packed[-1]:  # compacted, then killed before the file was removed
            packed.pop()
        if packed and (not out or out[0].old == packed[-1].new):
            out = packed + out
    out.reverse()
    return out


def shard_of(name: str) -> str:
    """The file of ``qvc/reflogs`` that holds ref ``name``'s compacted entries."""
    return f"{zlib.crc32(name.encode('utf-8', 'surrogateescape')) & 0xFF:02x}"


def packed_entries(repo_path: str, name: str) -> list[ReflogEntry]:
    """Ref ``name``'s compacted reflog entries, oldest first, from its latest creation on."""
    try:
        with open(os.path.join(repo_path, PACKED, shard_of(name)), "rb") as f:
            data = f.read()
    except (FileNotFoundError, NotADirectoryError):
        return []
    prefix = name.encode("utf-8", "surrogateescape") + b"\t"
    out: list[ReflogEntry] = []
    for line in data.split(b"\n"):
        if line.startswith(prefix):
            entry = ReflogEntry.parse(line[len(prefix):])
            if entry is not None:
                if entry.old is None:
                    out = []
                elif out and entry == out[-1] and entry.old != entry.new:
                    continue  # compacted twice (a crash kept the file after its line was flushed): once
                out.append(entry)
    return out
