"""How ``qvc serve`` answers failures: the error body, library errors mapped to status codes, the
error responses each operation declares in the OpenAPI document, and the exception handlers.

Every error answer is ``{"error": {"type", "message", "status"}}`` (:class:`models.ErrorBody`).
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple, Type

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
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
from qvc.server import models

# Library errors -> HTTP status, first match wins (RunOwnedError is a RunStateError: 409).
STATUS: List[Tuple[Type[QvcError], int]] = [
    (NotFoundError, 404), (RunStateError, 409), (CheckpointConflictError, 409), (InvalidInputError, 400),
    (NotARepositoryError, 500), (CorruptionError, 500), (DurabilityError, 503), (QvcError, 500),
]

#: The error answers every operation declares (``responses=`` of a route).
ERRORS: Dict[int | str, Dict[str, Any]] = {
    400: {"model": models.ErrorBody, "description": "Bad input (a bad boundary, name or body)"},
    401: {"model": models.ErrorBody, "description": "The server has a token and the request did not carry it"},
    404: {"model": models.ErrorBody, "description": "Unknown thread, checkpoint or run"}}
#: The error answers every action declares: :data:`ERRORS`, no token (401: actions need one even
#: without ``--token``), read-only (403) and conflicts (409).
ACTION_ERRORS: Dict[int | str, Dict[str, Any]] = {
    **ERRORS,
    401: {"model": models.ErrorBody, "description": "The request did not carry the server's token (with `qvc "
          "serve --token`), or this start's token for actions (without it: the `?token=` of the printed URL)"},
    403: {"model": models.ErrorBody, "description": "The server is read-only, or the request came from another "
          "site's page"},
    409: {"model": models.ErrorBody,
          "description": "Conflict: a CANCELLED run, a run owned by a live worker, a name taken"}}


def error(status: int, kind: str, message: str) -> JSONResponse:
    """The error answer ``{"error": {"type": kind, "message": message, "status": status}}``."""
    return JSONResponse({"error": {"type": kind, "message": message, "status": status}}, status_code=status)


def qvc_error(exc: QvcError) -> JSONResponse:
    """The answer to a library error: its status from :data:`STATUS`, its class name as the type,
    and the first line of its message."""
    status = next(code for kind, code in STATUS if isinstance(exc, kind))
    return error(status, type(exc).__name__, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)


async def on_qvc_error(request: Request, exc: QvcError) -> JSONResponse:
    """Exception handler for :class:`~qvc.errors.QvcError`: see :func:`qvc_error`."""
    return qvc_error(exc)


async def on_bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    """Exception handler for a request FastAPI could not validate: 400 ``InvalidInputError``
    naming the first bad parameter (or body field) and what was wrong with it."""
    errors = exc.errors()
    loc = errors[0].get("loc", ()) if errors else ()
    where = str(loc[1]) if len(loc) > 1 else "request"
    said = [e.get("msg", "invalid") for e in errors if e.get("loc", ())[1:2] == loc[1:2]]
    return error(400, "InvalidInputError", f"{where}: {' or '.join(dict.fromkeys(said)) or 'invalid'}")


async def on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    """Exception handler for HTTP errors of the routing itself (an unknown path: 404, a method
    the path does not take: 405) in the same error body."""
    kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return error(exc.status_code, kind, str(exc.detail))
