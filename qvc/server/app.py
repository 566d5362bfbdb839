"""The ``qvc serve`` application: the checkpoint timeline of a repository over HTTP, and its page.

Every endpoint is one library call (:mod:`qvc.readers.views`, :mod:`qvc.readers.log`, :mod:`qvc.runs`, the
store); the routers map paths to them (:mod:`~qvc.server.routes_read`, :mod:`~qvc.server.routes_runs`,
:mod:`~qvc.server.routes_actions`, :mod:`~qvc.server.routes_events`, :mod:`~qvc.server.routes_page`),
:mod:`~qvc.server.responses` maps library errors to status codes, and :mod:`~qvc.server.guard`
guards access. This module composes them; the routes get the application's state and stores
as dependencies (:mod:`~qvc.server.deps`).

Reads go through one read-only store (no lock, nothing written: writers in other processes are never
blocked, and their writes are seen at the next request). Each action opens a writing store for
that one request and closes it, so the server holds no repository lock between requests.
"""

from __future__ import annotations

import os
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable, Optional

import anyio
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from qvc.errors import QvcError
from qvc.server import events, routes_actions, routes_events, routes_page, routes_read, routes_runs
from qvc.server.deps import AnythingConvertor, ServerState
from qvc.server.guard import COOKIE, Guard, is_loopback
from qvc.server.responses import STATUS, on_bad_request, on_http_error, on_qvc_error
from qvc.server.routes_page import STATIC
from qvc.store.git_store import GitCheckpointStore
from qvc.version import __version__

# Names this module has always offered.
__all__ = ["COOKIE", "STATIC", "STATUS", "AnythingConvertor", "Guard", "create_app", "is_loopback", "lifespan"]

DESCRIPTION = ("The checkpoint timeline of a qvc repository: threads, checkpoints, diffs, runs "
               "(timeline, point-in-time snapshots), and actions (continue, fork, reset, delete). "
               "Errors are `{\"error\": {\"type\", \"message\", \"status\"}}`.")


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Start-up and shutdown of an application :func:`create_app` made: event streams get threads
    of their own (at most 256, so open pages never starve the request pool); at shutdown open
    streams end and the read-only store is closed."""
    state: ServerState = app.state.qvc
    state.event_threads = anyio.CapacityLimiter(256)
    try:
        yield
    finally:
        state.stopping.set()
        state.reader.close()


def create_app(path: str | os.PathLike, *, read_only: bool = False, token: Optional[str] = None,
               poll_interval: float = 0.5, agent: Optional[Callable[[Any], Any]] = None,
               any_host: bool = False, action_token: Optional[str] = None) -> FastAPI:
    """The ``qvc serve`` application for the repository at ``path``.

    ``read_only`` refuses every action with 403; ``token`` (when not ``None``) is required on
    every request; without one, requests must name a loopback host unless ``any_host`` (see
    :class:`Guard`; actions from other sites' pages are always refused); without a ``token``,
    an ``action_token`` (when not ``None``) is required on every action, reads stay open
    (``qvc serve`` makes one per start). ``poll_interval``
    bounds how long the event stream goes without re-reading the refs (inotify wakes it
    sooner). ``agent``, when given, is called with the :class:`~qvc.runs.RunRecorder` of each
    continuation (in a thread of its own) to record it: the agent loop of :mod:`qvc.runs`.
    Raises :class:`~qvc.errors.NotARepositoryError` if ``path`` is not a repository.
    """
    path = os.fspath(path)
    reader = GitCheckpointStore(path, create=False, readonly=True)
    state = ServerState(path=path, reader=reader, read_only=read_only, token=token, live=events.live_source(reader),
                        poll_interval=poll_interval, agent=agent)

    app = FastAPI(title="qvc", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  description=DESCRIPTION)
    app.state.qvc = state
    app.state.path, app.state.reader = path, reader  # as before the routes took their state as dependencies
    app.add_middleware(Guard, token=token, read_only=read_only, any_host=any_host, action_token=action_token)
    app.add_exception_handler(QvcError, on_qvc_error)
    app.add_exception_handler(RequestValidationError, on_bad_request)
    app.add_exception_handler(StarletteHTTPException, on_http_error)

    # In this order: the paths of the OpenAPI document keep it, and so does routing.
    app.include_router(routes_page.router)
    app.mount("/static", routes_page.static_files(), name="static")
    for router in (routes_read.router, routes_runs.router, routes_actions.router, routes_events.router):
        app.include_router(router)
    return app
