"""Pending-writes refs by their key: the store's own, or opaque refs of another layout.

A ref ``refs/qvc/writes/<key>`` (or its copy under a remote's namespace) whose key is a commit
SHA (40 lower-case hex digits) holds the store's pending writes of that checkpoint commit
(:meth:`~qvc.store.git_store.GitCheckpointStore.pending_writes_in` reads them). Any other key
is an *opaque* writes ref, written in a layout of its own by whoever wrote it: readers carry it
like any ref (push, fetch and clone take it in when its commit and tree read) and otherwise leave
it alone (``qvc watch`` reports no event for it). No reader needs to know whose layout it is.

Imports nothing of qvc.
"""

from __future__ import annotations

import re
from typing import Optional

_SHA = re.compile(r"[0-9a-f]{40}")


def writes_commit(key: str) -> Optional[str]:
    """The checkpoint commit SHA the writes ref keyed by ``key`` (the part of its name after the
    writes namespace) belongs to, or ``None`` for an opaque writes ref."""
    return key if _SHA.fullmatch(key) else None
