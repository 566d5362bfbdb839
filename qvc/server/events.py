"""The live-update source of ``qvc serve``: ref changes of a repository, as JSON events.

:func:`ref_events` is the one place the server learns that the repository changed. It polls
the refs (threads, superseded lines, pending writes: one read of the ref files, no objects
decoded), which sees writes of every process. When the store gains a push-style watch API,
this function is the only thing to switch to it.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Dict, Iterator, Optional

from ..refnames import HEADS, SUPERSEDED, WRITES, decode_thread

if TYPE_CHECKING:
    from ..store import GitCheckpointStore

SOURCE = "poll"  # what /api/repository reports as "live"


def _kind(ref: str) -> Optional[str]:
    for prefix, kind in ((HEADS, "thread"), (SUPERSEDED, "superseded"), (WRITES, "writes")):
        if ref.startswith(prefix):
            return kind
    return None


def _thread(store: GitCheckpointStore, ref: str, kind: Optional[str]) -> Optional[str]:
    if kind == "thread":
        return store.thread_of_ref(ref)
    if kind == "superseded":
        return decode_thread(ref[len(SUPERSEDED):].rsplit("/", 1)[0])
    return None


def _refs(store: GitCheckpointStore) -> Dict[str, str]:
    return {name: tip for name, tip in store.repository.refs("refs/") if _kind(name)}


def ref_events(store: GitCheckpointStore, stop: threading.Event, interval: float = 0.5
               ) -> Iterator[Optional[Dict[str, Any]]]:
    """Yield one event per ref that changed, as it changes, until ``stop`` is set.

    An event is ``{"type": "ref", "kind": "thread"|"superseded"|"writes", "ref", "thread"
    (for thread and superseded refs, else null), "old", "new" (commit or null), "time"}``. ``None`` is yielded
    after every quiet poll (at least every ``interval`` seconds), so a consumer can check on its
    client without waiting for a change. Reads only; never blocks writers.
    """
    before = _refs(store)
    while not stop.wait(interval):
        now = _refs(store)
        changed = False
        for ref in sorted(before.keys() | now.keys()):
            old, new = before.get(ref), now.get(ref)
            if old != new:
                changed = True
                kind = _kind(ref)
                yield {"type": "ref", "kind": kind, "ref": ref,
                       "thread": _thread(store, ref, kind),
                       "old": old, "new": new, "time": time.time()}
        before = now
        if not changed:
            yield None
