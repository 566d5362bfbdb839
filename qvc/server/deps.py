"""What the routes of ``qvc serve`` are given: one application's state and the stores, as FastAPI
dependencies (``Depends``) read from ``app.state``, never from variables of an enclosing function.

:func:`create_app <qvc.server.app.create_app>` puts a :class:`ServerState` on ``app.state.qvc``;
a route asks for what it needs by annotating a parameter with :data:`State`, :data:`Reader`,
:data:`ReadRuns` or :data:`Writer`. Those parameters never appear in the OpenAPI document.

Importing this module registers the ``anything`` path convertor the routes' paths use.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Annotated, Any, Callable, Optional

import anyio
from fastapi import Depends, Request
from starlette.convertors import PathConvertor, register_url_convertor

from qvc.runs import Runs
from qvc.store.git_store import GitCheckpointStore
from qvc.store.revisions import parse_revision


class AnythingConvertor(PathConvertor):
    """A path parameter that is any text, newlines included (Starlette's ``path`` stops at a
    newline): thread and checkpoint ids are arbitrary strings (LangGraph's, agno's)."""

    regex = r"[\s\S]*"


# Registered before any route module declares ``{thread:anything}``: Starlette compiles a route's
# path when the route is declared.
register_url_convertor("anything", AnythingConvertor())


@dataclass
class ServerState:
    """The state of one ``qvc serve`` application, shared by all its requests.

    ``reader`` is the one read-only store every read goes through (no lock, nothing written), open
    from :func:`~qvc.server.app.create_app` until the application shuts down. Actions open a
    writing store each with :meth:`open_writer`. ``stopping`` is set at shutdown (open event
    streams end); ``event_threads`` (set at start-up) bounds the threads event streams wait in.
    """

    path: str
    reader: GitCheckpointStore
    read_only: bool
    token: Optional[str]
    live: str
    poll_interval: float
    agent: Optional[Callable[[Any], Any]]
    stopping: threading.Event = field(default_factory=threading.Event)
    event_threads: Optional[anyio.CapacityLimiter] = None

    def open_writer(self) -> GitCheckpointStore:
        """A writing store on the repository, for one action; the caller closes it (``with``).
        Raises :class:`~qvc.errors.NotARepositoryError` if the repository is gone."""
        return GitCheckpointStore(self.path, create=False)


async def server_state(request: Request) -> ServerState:
    """Dependency: the :class:`ServerState` of the application answering ``request``."""
    return request.app.state.qvc


async def reader(state: Annotated[ServerState, Depends(server_state)]) -> GitCheckpointStore:
    """Dependency: the application's read-only store (never close it)."""
    return state.reader


async def read_runs(store: Annotated[GitCheckpointStore, Depends(reader)]) -> Runs:
    """Dependency: :class:`~qvc.runs.Runs` over the read-only store."""
    return Runs(store)


async def writer(state: Annotated[ServerState, Depends(server_state)]) -> Callable[[], GitCheckpointStore]:
    """Dependency: :meth:`ServerState.open_writer`, for an action to open (and close) the writing
    store of that one request: the server holds no repository lock between requests."""
    return state.open_writer


#: A route parameter annotated with these is given the application's state or a store.
State = Annotated[ServerState, Depends(server_state)]
Reader = Annotated[GitCheckpointStore, Depends(reader)]
ReadRuns = Annotated[Runs, Depends(read_runs)]
Writer = Annotated[Callable[[], GitCheckpointStore], Depends(writer)]


def revision(store: GitCheckpointStore, name: str) -> str:
    """The commit a checkpoint name of the command line (id, id prefix, commit, THREAD,
    THREAD~N) names in ``store``. Raises :class:`~qvc.errors.NotFoundError` for an unknown name,
    :class:`~qvc.errors.InvalidInputError` for an ambiguous or malformed one."""
    return parse_revision(store, name).commit

