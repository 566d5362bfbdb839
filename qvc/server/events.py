"""The live-update source of ``qvc serve``: the repository's changes, as JSON events.

:func:`change_events` is the one place the server learns that the repository changed. It is
a :func:`qvc.readers.watch.watch` (inotify hints, the refs re-read on each, polling
where inotify is unavailable), so it sees the writes of every process.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, Iterator, Optional

from qvc.readers import watch as live
from qvc.readers.watch import Watcher
from qvc.store.git_store import GitCheckpointStore


def watch(store: GitCheckpointStore, interval: float = 0.5) -> Watcher:
    """A watcher of ``store`` for one event stream (create it before telling the client it is
    live: changes from then on are reported). Stop it when the stream ends."""
    return live.watch(store, poll_interval=min(interval, 0.05), rescan_interval=interval)


def change_events(watcher: Watcher, stop: threading.Event, interval: float = 0.5
                  ) -> Iterator[Optional[Dict[str, Any]]]:
    """Yield each change (:meth:`qvc.readers.watch.WatchEvent.to_json`) as it is seen, until ``stop`` is set.

    ``None`` is yielded after every quiet ``interval`` seconds, so a consumer can check on its
    client without waiting for a change. Reads only; never blocks writers.
    """
    while not stop.is_set():
        quiet = True
        for event in watcher.events(timeout=interval):
            quiet = False
            yield event.to_json()
        if quiet:
            yield None


def live_source(store: GitCheckpointStore) -> str:
    """How changes reach open pages here: ``"inotify"``, or ``"poll"`` where inotify is unavailable."""
    with live.watch(store) as watcher:
        return watcher.hints
