"""Git remotes: push, fetch and clone qvc history with the ``git`` program, and replication.

:mod:`~qvc.remotes.remote` holds the operations (``push(store, ...)``, ``fetch(store, ...)``,
``clone(url, path)``, remote configuration), :mod:`~qvc.remotes.transfer` runs ``git`` and
parses what it reports, :mod:`~qvc.remotes.replication` pushes in the background.
Imports: the store and below.
"""

from qvc.remotes.remote import (
    FetchResult,
    PushResult,
    Remote,
    add_remote,
    clone,
    fetch,
    push,
    remote_threads,
    remotes,
    remove_remote,
    set_replicate,
)

__all__ = ["FetchResult", "PushResult", "Remote", "add_remote", "clone", "fetch", "push", "remote_threads",
           "remotes", "remove_remote", "set_replicate"]
