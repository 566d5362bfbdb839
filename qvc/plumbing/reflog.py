"""Reflogs: the movements of a ref, as git records them in ``logs/<ref>``."""

from __future__ import annotations

import os
from dataclasses import dataclass

ZERO = "0" * 40  # git's id for "absent" in a reflog line


@dataclass(frozen=True)
class ReflogEntry:
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


def read_reflog(repo_path: str, name: str) -> list[ReflogEntry]:
    """The reflog of ref ``name`` in the repository at ``repo_path``, newest first; ``[]`` if none.

    Parsed leniently: a line torn by a crash is skipped, not an error."""
    try:
        with open(os.path.join(repo_path, "logs", name), "rb") as f:
            data = f.read()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return []
    out = []
    for line in data.split(b"\n"):
        entry = ReflogEntry.parse(line)
        if entry is not None:
            out.append(entry)
    out.reverse()
    return out
