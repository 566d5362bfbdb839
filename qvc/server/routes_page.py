"""The page of ``qvc serve``: ``/`` and its static files (plain HTML, JS and CSS shipped in the
package: no build step, no CDN). Neither is in the OpenAPI document.
"""

from __future__ import annotations

import os
from typing import Optional

from fastapi import APIRouter, Query
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from qvc.server.deps import State
from qvc.server.guard import COOKIE

#: The directory of the page's files, served under ``/static``.
STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")

router = APIRouter()


@router.get("/", include_in_schema=False)
def index(state: State, token_: Optional[str] = Query(None, alias="token")) -> FileResponse:
    """The page. Opened with ``?token=`` on a server that has a token, it also sets the HttpOnly
    :data:`~qvc.server.guard.COOKIE` cookie, so its files and its event stream carry the token
    (the guard has already checked it)."""
    response = FileResponse(os.path.join(STATIC, "index.html"), headers={"Cache-Control": "no-cache"})
    if token_ is not None and state.token is not None:
        response.set_cookie(COOKIE, token_, httponly=True, samesite="strict")
    return response


def static_files() -> StaticFiles:
    """The ASGI app serving the page's files (mounted at ``/static``)."""
    return StaticFiles(directory=STATIC)
