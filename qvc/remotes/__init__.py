"""Git remotes: push, fetch and clone qvc history with the ``git`` program, and replication.

:mod:`~qvc.remotes.remote` holds the operations (``push(store, ...)``, ``fetch(store, ...)``,
``clone(url, path)``, remote configuration), :mod:`~qvc.remotes.transfer` runs ``git`` and
parses what it reports, :mod:`~qvc.remotes.replication` pushes in the background.
Imports: the store and below.
"""

from typing import TYPE_CHECKING

from qvc.lazy import exports

__all__ = ["FetchResult", "PushResult", "Remote", "add_remote", "clone", "fetch", "push", "remote_threads",
           "remotes", "remove_remote", "set_replicate"]

# imported on first use (qvc.lazy): `qvc status` reads replication's records without loading git's transfers
__getattr__, __dir__ = exports(__name__, {name: "qvc.remotes.remote" for name in __all__})

if TYPE_CHECKING:
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
