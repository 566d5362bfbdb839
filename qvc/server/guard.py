"""Who may ask a ``qvc serve`` application what: the token, loopback names, other sites' pages
and read-only mode, checked by one ASGI middleware (:class:`Guard`) before any route runs, so
the page, its static files, the OpenAPI document and unknown paths are guarded alike.
"""

from __future__ import annotations

import hmac
import ipaddress
from http.cookies import SimpleCookie
from typing import Any, Dict, List, Optional
from urllib.parse import parse_qs, urlsplit

from qvc.server.responses import error

#: The cookie that carries the token for the page, its files and its event stream.
COOKIE = "qvc_token"
#: The methods of actions: refused in read-only mode and from other sites' pages.
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or address) only reaches this machine."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def hostname(netloc: str) -> str:
    """The host of a ``Host`` header or an origin's ``host[:port]`` (IPv6 in brackets); ``""``
    when it cannot be parsed."""
    try:
        return urlsplit("//" + netloc).hostname or ""
    except ValueError:
        return ""


def presented_tokens(scope: Dict[str, Any]) -> List[str]:
    """The tokens an HTTP request carries: ``Authorization: Bearer``, the :data:`COOKIE` cookie
    (a malformed cookie header carries none) and ``token`` query parameters."""
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
    - Without a token, an ``action_token`` (when set: ``qvc serve`` makes one per start, as
      notebook servers do) on every action, presented as the token is (401 otherwise): any
      local process can reach a loopback port, but only who has the printed URL may act.
      Reads stay open on loopback.
    - No actions at all in read-only mode (403).
    """

    def __init__(self, app: Any, token: Optional[str], read_only: bool, any_host: bool = False,
                 action_token: Optional[str] = None):
        self.app, self.token, self.read_only, self.any_host = app, token, read_only, any_host
        self.action_token = None if token is not None else action_token

    async def __call__(self, scope: Dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            response = None
            headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope.get("headers", [])}
            host, origin = headers.get("host", ""), headers.get("origin")
            if self.token is None and not self.any_host and not is_loopback(hostname(host)):
                response = error(403, "forbidden_host", f"this server answers to loopback names only, not "
                                 f"{host!r} (serve with --token to be reached under other names)")
            elif self.token is None and scope["method"] in WRITE_METHODS and origin is not None and (
                    origin == "null" or urlsplit(origin).netloc.lower() != host.lower()):
                response = error(403, "cross_origin", f"actions from pages of {origin} are refused")
            elif self.token is not None and not any(
                    hmac.compare_digest(t.encode(), self.token.encode()) for t in presented_tokens(scope)):
                response = error(401, "unauthorized", "this server needs its token (Authorization: Bearer TOKEN)")
                response.headers["WWW-Authenticate"] = "Bearer"
            elif self.read_only and scope["method"] in WRITE_METHODS:
                response = error(403, "read_only", "the server is read-only (qvc serve --read-only)")
            elif self.action_token is not None and scope["method"] in WRITE_METHODS and not any(
                    hmac.compare_digest(t.encode(), self.action_token.encode()) for t in presented_tokens(scope)):
                response = error(401, "unauthorized", "actions need the token in the URL qvc serve printed "
                                 "(open the page with its ?token=, or send Authorization: Bearer TOKEN)")
                response.headers["WWW-Authenticate"] = "Bearer"
            if response is not None:
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
