"""The ``qvc serve`` application: the checkpoint timeline of a repository over HTTP, and its page.

Every endpoint is one library call (:mod:`qvc.inspect.views`, :mod:`qvc.inspect.log`, :mod:`qvc.runs`, the
store); this module maps paths to them, library errors to status codes, and guards access.

Reads go through one read-only store (no lock, no journal: writers in other processes are never
blocked, and their writes are seen at the next request). Each action opens a writing store for
that one request and closes it, so the server holds no repository lock between requests.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import os
import re
import threading
from contextlib import asynccontextmanager
from typing import Annotated, Any, Callable, Dict, Iterator, List, Optional
from urllib.parse import urlsplit

import anyio
from fastapi import FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from starlette.convertors import PathConvertor, register_url_convertor
from starlette.exceptions import HTTPException as StarletteHTTPException

from qvc.errors import (
    CheckpointConflictError,
    CorruptionError,
    DurabilityError,
    InvalidInputError,
    NotARepositoryError,
    NotFoundError,
    QvcError,
    RunStateError,
)
from qvc.server import events, models
from qvc.store.git_store import GitCheckpointStore
from qvc.version import __version__


class AnythingConvertor(PathConvertor):
    """A path parameter that is any text, newlines included (Starlette's ``path`` stops at a
    newline): thread and checkpoint ids are arbitrary strings (LangGraph's, agno's)."""

    regex = r"[\s\S]*"


register_url_convertor("anything", AnythingConvertor())

log = logging.getLogger("qvc")
STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
COOKIE = "qvc_token"

# Library errors -> HTTP status, first match wins (RunOwnedError is a RunStateError: 409).
STATUS: List[tuple] = [
    (NotFoundError, 404), (RunStateError, 409), (CheckpointConflictError, 409), (InvalidInputError, 400),
    (NotARepositoryError, 500), (CorruptionError, 500), (DurabilityError, 503), (QvcError, 500),
]
_INDEX = re.compile(r"^-?\d+$")
_WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_ERRORS = {400: {"model": models.ErrorBody, "description": "Bad input (a bad boundary, name or body)"},
           401: {"model": models.ErrorBody, "description": "The server has a token and the request did not carry it"},
           404: {"model": models.ErrorBody, "description": "Unknown thread, checkpoint or run"}}
_ACTION_ERRORS = {**_ERRORS, 403: {"model": models.ErrorBody, "description": "The server is read-only"},
                  409: {"model": models.ErrorBody,
                        "description": "Conflict: a CANCELLED run, a run owned by a live worker, a name taken"}}


def _error(status: int, kind: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"type": kind, "message": message, "status": status}}, status_code=status)


def _qvc_error(exc: QvcError) -> JSONResponse:
    status = next(code for kind, code in STATUS if isinstance(exc, kind))
    return _error(status, type(exc).__name__, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or address) only reaches this machine."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _hostname(netloc: str) -> str:
    """The host of a ``Host`` header or an origin's ``host[:port]`` (IPv6 in brackets)."""
    try:
        return urlsplit("//" + netloc).hostname or ""
    except ValueError:
        return ""


class Guard:
    """ASGI middleware: who may ask what.

    - The token (when set) on every request: as ``Authorization: Bearer``, as the ``qvc_token``
      cookie (which opening the page with ``?token=`` sets, so the page, its assets and its event
      stream work in a browser), or as a ``token`` query parameter (401 otherwise).
    - Without a token, only loopback names in the ``Host`` header (unless ``any_host``): a web
      page whose name is made to resolve to 127.0.0.1 (DNS rebinding) gets 403.
    - Without a token, actions (POST, PUT, PATCH, DELETE) only from this server's own pages or
      from clients that send no ``Origin``: another site's page cannot make a browser act here
      (403). With a token this check is not needed (other sites' requests carry no token: the
      cookie is SameSite=Strict), and it would refuse pages served through a reverse proxy.
    - No actions at all in read-only mode (403).
    """

    def __init__(self, app: Any, token: Optional[str], read_only: bool, any_host: bool = False):
        self.app, self.token, self.read_only, self.any_host = app, token, read_only, any_host

    def _presented(self, scope: Dict[str, Any]) -> List[str]:
        from http.cookies import SimpleCookie
        from urllib.parse import parse_qs

        found = []
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                scheme, _, cred = value.decode("latin-1").partition(" ")
                if scheme.lower() == "bearer":
                    found.append(cred.strip())
            elif name == b"cookie":
                jar: SimpleCookie = SimpleCookie()
                try:
                    jar.load(value.decode("latin-1"))
                except Exception:  # noqa: BLE001 - a malformed cookie header is simply no token
                    continue
                if COOKIE in jar:
                    found.append(jar[COOKIE].value)
        found += parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", [])
        return found

    async def __call__(self, scope: Dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            response = None
            headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope.get("headers", [])}
            host, origin = headers.get("host", ""), headers.get("origin")
            if self.token is None and not self.any_host and not is_loopback(_hostname(host)):
                response = _error(403, "forbidden_host", f"this server answers to loopback names only, not "
                                  f"{host!r} (serve with --token to be reached under other names)")
            elif self.token is None and scope["method"] in _WRITE_METHODS and origin is not None and (
                    origin == "null" or urlsplit(origin).netloc.lower() != host.lower()):
                response = _error(403, "cross_origin", f"actions from pages of {origin} are refused")
            elif self.token is not None and not any(
                    hmac.compare_digest(t.encode(), self.token.encode()) for t in self._presented(scope)):
                response = _error(401, "unauthorized", "this server needs its token (Authorization: Bearer TOKEN)")
                response.headers["WWW-Authenticate"] = "Bearer"
            elif self.read_only and scope["method"] in _WRITE_METHODS:
                response = _error(403, "read_only", "the server is read-only (qvc serve --read-only)")
            if response is not None:
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(path: str | os.PathLike, *, read_only: bool = False, token: Optional[str] = None,
               poll_interval: float = 0.5, agent: Optional[Callable[[Any], Any]] = None,
               any_host: bool = False) -> FastAPI:
    """The ``qvc serve`` application for the repository at ``path``.

    ``read_only`` refuses every action with 403; ``token`` (when not ``None``) is required on
    every request; without one, requests must name a loopback host unless ``any_host`` (see
    :class:`Guard`; actions from other sites' pages are always refused). ``poll_interval``
    bounds how long the event stream goes without re-reading the refs (inotify wakes it
    sooner). ``agent``, when given, is called with the :class:`~qvc.runs.RunRecorder` of each
    continuation (in a thread of its own) to record it: the agent loop of :mod:`qvc.runs`.
    Raises :class:`~qvc.errors.NotARepositoryError` if ``path`` is not a repository.
    """
    path = os.fspath(path)
    reader = GitCheckpointStore(path, create=False, readonly=True)
    live = events.live_source(reader)
    stopping = threading.Event()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        # Event streams wait in threads of their own, so open pages never starve the request pool.
        app.state.event_threads = anyio.CapacityLimiter(256)
        try:
            yield
        finally:
            stopping.set()
            reader.close()

    app = FastAPI(title="qvc", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="The checkpoint timeline of a qvc repository: threads, checkpoints, diffs, runs "
                              "(timeline, point-in-time snapshots), and actions (continue, fork, reset, delete). "
                              "Errors are `{\"error\": {\"type\", \"message\", \"status\"}}`.")
    app.state.path = path
    app.state.reader = reader
    app.add_middleware(Guard, token=token, read_only=read_only, any_host=any_host)

    @app.exception_handler(QvcError)
    async def on_qvc_error(request: Request, exc: QvcError) -> JSONResponse:
        return _qvc_error(exc)

    @app.exception_handler(RequestValidationError)
    async def on_bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        loc = errors[0].get("loc", ()) if errors else ()
        where = str(loc[1]) if len(loc) > 1 else "request"
        said = [e.get("msg", "invalid") for e in errors if e.get("loc", ())[1:2] == loc[1:2]]
        return _error(400, "InvalidInputError", f"{where}: {' or '.join(dict.fromkeys(said)) or 'invalid'}")

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _error(exc.status_code, kind, str(exc.detail))

    def write(fn: Callable[[GitCheckpointStore], Any]) -> Any:
        """Run ``fn`` with a writing store opened for this one action."""
        with GitCheckpointStore(path, create=False) as store:
            return fn(store)

    def runs(store: Optional[GitCheckpointStore] = None) -> Any:
        from qvc.runs import Runs

        return Runs(store or reader)

    def revision(store: GitCheckpointStore, name: str) -> str:
        from qvc.store.revisions import parse_revision

        return parse_revision(store, name).commit

    # -- the page -------------------------------------------------------------------------

    @app.get("/", include_in_schema=False)
    def index(token_: Optional[str] = Query(None, alias="token")) -> FileResponse:
        response = FileResponse(os.path.join(STATIC, "index.html"), headers={"Cache-Control": "no-cache"})
        if token_ is not None and token is not None:
            response.set_cookie(COOKIE, token_, httponly=True, samesite="strict")
        return response

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    # -- reading --------------------------------------------------------------------------

    @app.get("/api/repository", response_model=models.Repository, tags=["read"], responses=_ERRORS)
    def repository() -> Dict[str, Any]:
        """The repository: current thread, counts, recovery, maintenance; and how this server runs."""
        from qvc.inspect.status import status

        return {**status(reader).to_json(), "version": __version__, "read_only": read_only, "live": live}

    @app.get("/api/threads", response_model=models.ThreadPage, response_model_exclude_unset=True, tags=["read"],
             responses=_ERRORS)
    def threads(status: Optional[str] = Query(None, description="Only threads whose head has this status"),
                prefix: Optional[str] = Query(None, description="Only threads whose name starts with this"),
                offset: int = Query(0, ge=0), limit: int = Query(100, ge=1, le=1000)) -> Dict[str, Any]:
        """Threads, sorted by name, a page at a time (head, step, status, last update, checkpoint count)."""
        from qvc.inspect.views import run_of_thread, thread_json

        current = reader.current().thread
        names = [t for t in reader.threads() if prefix is None or t.startswith(prefix)]
        def rows(threads: List[str], count: bool = True) -> List[Dict[str, Any]]:
            out = []
            for t in threads:
                try:
                    out.append(thread_json(reader, t, t == current, count=count))
                except CorruptionError as exc:  # a damaged thread (see `qvc fsck`): the others are listed
                    logging.getLogger("qvc").warning("qvc: warning: thread %r is damaged, not listed: %s", t, exc)
            return out

        if status is not None:
            names = [r["thread"] for r in rows(names, count=False) if r.get("status") == status]
        page = rows(names[offset:offset + limit])
        for row in page:
            row["run"] = run_of_thread(row["thread"])
        return {"total": len(names), "offset": offset, "limit": limit, "threads": page}

    @app.get("/api/threads/{thread:anything}", response_model=models.ThreadLine, tags=["read"], responses=_ERRORS)
    def thread_line(thread: str = Path(description="The thread id (may contain '/')"),
                    limit: int = Query(500, ge=1, le=10000)) -> Dict[str, Any]:
        """One thread's line (newest first), the lines time travel left behind, and its forks."""
        from qvc.inspect.views import thread_line_json

        return thread_line_json(reader, thread, limit)

    @app.get("/api/checkpoints/{name:anything}", response_model=models.CheckpointView, tags=["read"], responses=_ERRORS)
    def checkpoint(name: str = Path(description="Checkpoint id or prefix, commit or prefix, THREAD, THREAD~N"),
                   field: Annotated[Optional[List[str]], Query(description="Only these state fields")] = None
                   ) -> Dict[str, Any]:
        """One checkpoint: header, metadata, state and pending writes (`qvc show --json`)."""
        from qvc.inspect.views import checkpoint_json

        return checkpoint_json(reader, revision(reader, name), field or ())

    @app.get("/api/diff", response_model=models.DiffView, response_model_exclude_unset=True, tags=["read"],
             responses=_ERRORS)
    def diff(b: str = Query(description="The new checkpoint"),
             a: Optional[str] = Query(None, description="The old checkpoint (default: B's parent)")) -> Dict[str, Any]:
        """What changed from A to B, field by field and item by item (`qvc diff --json`)."""
        from qvc.inspect.statediff import to_json
        from qvc.inspect.views import diff_commits

        new = revision(reader, b)
        old = revision(reader, a) if a is not None else None
        return {"a": old if a is not None else reader.commit(new).parent, "b": new,
                "fields": to_json(diff_commits(reader, old, new))}

    @app.get("/api/runs", response_model=models.RunPage, tags=["runs"], responses=_ERRORS)
    def list_runs(session: Optional[str] = Query(None, description="Only the runs of this session"),
                  status: Optional[str] = Query(None, description="Only runs with this status (COMPLETED...)"),
                  offset: int = Query(0, ge=0), limit: int = Query(100, ge=1, le=1000)) -> Dict[str, Any]:
        """Agent runs, oldest first, a page at a time."""
        from qvc.runs import RunStatus

        if status is not None and status not in RunStatus.__members__:
            raise InvalidInputError(f"unknown run status {status!r} (one of {', '.join(RunStatus.__members__)})")
        found = [r for r in runs().list_runs(session) if status is None or r.status.value == status]
        return {"total": len(found), "offset": offset, "limit": limit,
                "runs": [r.to_dict() for r in found[offset:offset + limit]]}

    @app.get("/api/runs/{run_id}", response_model=models.RunView, tags=["runs"], responses=_ERRORS)
    def get_run(run_id: str) -> Dict[str, Any]:
        """A run as its latest checkpoint holds it, and whether its owner is alive."""
        from qvc.inspect.statefiles import to_jsonable

        r = runs()
        return {"thread": r.thread(run_id), "owner_status": r.owner_status(run_id).to_dict(),
                "run": to_jsonable(r.get(run_id).to_dict(), "run")}

    @app.get("/api/runs/{run_id}/checkpoints", response_model=models.Timeline, tags=["runs"], responses=_ERRORS)
    def timeline(run_id: str, superseded: bool = Query(True, description="Include lines a rewind left behind")
                 ) -> Dict[str, Any]:
        """A run's timeline: its checkpoints (stable ids) with message boundaries and previews."""
        from qvc.inspect.statefiles import to_jsonable
        from qvc.inspect.views import run_of_thread

        r = runs()
        thread = r.thread(run_id)
        entries = [to_jsonable(e.to_dict(), "timeline") for e in r.timeline(run_id, superseded=superseded)]
        return {**run_of_thread(thread), "thread": thread, "checkpoints": entries}

    @app.get("/api/runs/{run_id}/checkpoints/{at}", response_model=models.SnapshotView, tags=["runs"],
             responses=_ERRORS)
    def snapshot(run_id: str, at: str = Path(description="A message index (pair-safe; snapped down) or a "
                                                         "checkpoint id from the timeline")) -> Dict[str, Any]:
        """The run as it truly was at a message boundary or checkpoint (never writes)."""
        from qvc.inspect.statefiles import to_jsonable

        where: Any = int(at) if _INDEX.match(at) else at
        return to_jsonable(runs().snapshot(run_id, where).to_dict(), "snapshot")

    # -- actions --------------------------------------------------------------------------

    def run_action(store: GitCheckpointStore, run: Any, forked: bool) -> Dict[str, Any]:
        from qvc.runs import thread_of

        thread = thread_of(run.session_id, run.run_id)
        return {"run_id": run.run_id, "session_id": run.session_id, "thread": thread, "head": store.head(thread),
                "checkpoint_id": run.checkpoint_id, "status": run.status.value, "message_index": len(run.messages),
                "forked": forked, "forked_from_run_id": run.forked_from_run_id,
                "forked_from_message_index": run.forked_from_message_index}

    @app.post("/api/runs/{run_id}/continue", response_model=models.RunAction, tags=["actions"],
              responses=_ACTION_ERRORS)
    def continue_run(run_id: str, body: Optional[models.ContinueRequest] = None) -> Dict[str, Any]:
        """Continue a run with `Runs.continue_run`'s rules.

        In place for RUNNING (a stale owner is taken over), ERROR, PAUSED and PENDING runs, where a
        boundary before the end rewinds the run (the old tail stays as a superseded line); in a new
        run forked at the boundary for COMPLETED and REGENERATED runs or `fork: true`. CANCELLED
        runs and runs owned by a live worker are refused (409). The continuation's first
        checkpoint (`input` as a user message) is durable when this answers. Then, if the server
        has an agent (`qvc serve --agent`), the agent records the continuation in the background
        (`agent: true`; the run is owned by this server until it finishes); otherwise the
        continuation is detached (`RunRecorder.close`): RUNNING with no live owner, for an agent
        to pick up with `Runs.continue_run(run_id)`, which records the takeover.
        """
        from qvc.inspect.statefiles import from_jsonable

        body = body or models.ContinueRequest()
        store = GitCheckpointStore(path, create=False)
        try:
            rec = runs(store).continue_run(run_id, from_jsonable(body.input, "input"), body.continue_from,
                                           fork=body.fork, requirements=body.requirements)
            answer = run_action(store, rec.run, rec.run.run_id != run_id)
        except BaseException:
            store.close()
            raise
        if agent is None:
            try:
                rec.close()
            finally:
                store.close()
            return {**answer, "agent": False}
        threading.Thread(target=record, args=(rec, store), daemon=True, name=f"qvc-agent-{rec.run_id}").start()
        return {**answer, "agent": True}

    def record(rec: Any, store: GitCheckpointStore) -> None:
        """The agent's thread: an exception leaving the agent finishes the run ERROR (as `with rec:` does)."""
        try:
            with rec:
                agent(rec)
        except Exception:  # noqa: BLE001 - recorded as the run's ERROR checkpoint; the server goes on
            log.exception("qvc serve: the agent failed on run %s", rec.run_id)
        finally:
            store.close()

    @app.post("/api/runs/{run_id}/fork", response_model=models.RunAction, tags=["actions"],
              responses=_ACTION_ERRORS)
    def fork_run(run_id: str, body: Optional[models.ForkRunRequest] = None) -> Dict[str, Any]:
        """A new PENDING run whose conversation is this run's up to `at` (pair-safe), `input` appended."""
        from qvc.inspect.statefiles import from_jsonable

        body = body or models.ForkRunRequest()

        def act(store: GitCheckpointStore) -> Dict[str, Any]:
            run = runs(store).fork(run_id, body.at, input=from_jsonable(body.input, "input"),
                                   new_run_id=body.new_run_id)
            return {**run_action(store, run, True), "agent": False}

        return write(act)

    def thread_action(store: GitCheckpointStore, thread: str, deleted: Optional[str] = None) -> Dict[str, Any]:
        head = store.head(thread)
        info = store.commit(head) if head else None
        return {"thread": thread, "head": head, "id": info.checkpoint_id if info else None,
                "step": info.step if info else None, "deleted": deleted}

    @app.post("/api/fork", response_model=models.ThreadAction, response_model_exclude_unset=True,
              tags=["actions"], responses=_ACTION_ERRORS)
    def fork_thread(body: models.ForkThreadRequest) -> Dict[str, Any]:
        """Fork a new thread from a checkpoint (`qvc branch NEW CHECKPOINT`)."""
        from qvc.inspect.views import fork_thread as fork

        def act(store: GitCheckpointStore) -> Dict[str, Any]:
            fork(store, revision(store, body.checkpoint), body.thread)
            return thread_action(store, body.thread)

        return write(act)

    @app.post("/api/reset", response_model=models.ThreadAction, response_model_exclude_unset=True,
              tags=["actions"], responses=_ACTION_ERRORS)
    def reset(body: models.ResetRequest) -> Dict[str, Any]:
        """Time travel: move a thread's head to one of its checkpoints; the line left behind is kept."""
        def act(store: GitCheckpointStore) -> Dict[str, Any]:
            store.reset(body.thread, revision(store, body.to))
            return thread_action(store, body.thread)

        return write(act)

    @app.delete("/api/threads/{thread:anything}", response_model=models.ThreadAction, tags=["actions"],
                responses=_ACTION_ERRORS)
    def delete_thread(thread: str) -> Dict[str, Any]:
        """Delete a thread with its superseded lines (data stays until `qvc gc --prune`)."""
        def act(store: GitCheckpointStore) -> Dict[str, Any]:
            head = store.head(thread)
            store.delete_thread(thread)
            return thread_action(store, thread, head)

        return write(act)

    @app.delete("/api/checkpoints/{name:anything}", response_model=models.ThreadAction, tags=["actions"],
                responses=_ACTION_ERRORS)
    def delete_checkpoint(name: str) -> Dict[str, Any]:
        """Delete one checkpoint; its children are re-parented onto its parent."""
        from qvc.types import CheckpointConfig

        def act(store: GitCheckpointStore) -> Dict[str, Any]:
            sha = revision(store, name)
            info = store.commit(sha)
            if info.thread_id is None:
                raise InvalidInputError(f"checkpoint {name!r} belongs to no thread")
            store.delete(CheckpointConfig(info.thread_id, sha))
            return thread_action(store, info.thread_id, info.checkpoint_id)

        return write(act)

    # -- live updates ---------------------------------------------------------------------

    @app.get("/api/events", tags=["read"], response_class=StreamingResponse,
             responses={200: {"content": {"text/event-stream": {}},
                              "description": "Server-sent events: `ready` once, then one `change` event per "
                                             "change (data: the JSON of `qvc watch --json`)"}})
    async def stream_events(request: Request) -> StreamingResponse:
        """Live updates: one server-sent event per change (checkpoints, forks, resets, deletions,
        renames, pending writes, HEAD moves), as :meth:`GitCheckpointStore.watch` reports them."""
        stop = threading.Event()
        watcher = events.watch(reader, poll_interval)
        source: Iterator[Optional[Dict[str, Any]]] = events.change_events(watcher, stop, poll_interval)

        async def body() -> Any:
            try:
                yield f"retry: 2000\nevent: ready\ndata: {json.dumps({'type': 'ready', 'live': watcher.hints})}\n\n"
                quiet = 0
                while not stopping.is_set():
                    event = await anyio.to_thread.run_sync(next, source, None, limiter=app.state.event_threads)
                    if event is not None:
                        quiet = 0
                        yield f"event: change\ndata: {json.dumps(event)}\n\n"
                    elif await request.is_disconnected():
                        break
                    else:
                        quiet += 1
                        if quiet * poll_interval >= 15:  # a comment now and then keeps proxies from closing it
                            quiet = 0
                            yield ": keep-alive\n\n"
            finally:
                stop.set()
                watcher.stop()

        return StreamingResponse(body(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    return app
