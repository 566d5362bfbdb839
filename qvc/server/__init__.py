"""``qvc serve``: a repository's checkpoint timeline over HTTP (JSON, OpenAPI) and a page to browse it.

Needs the ``server`` extra (``pip install "qvc[server]"``: FastAPI and uvicorn); ``import qvc``
never imports this package. :func:`create_app` builds the ASGI application (see
:mod:`qvc.server.app`; the endpoints are in the ``routes_*`` modules); :func:`serve` runs it the way
``qvc serve`` does.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
from typing import Any, Callable, Iterator, Optional

from qvc.errors import InvalidInputError
from qvc.server.app import create_app, is_loopback

__all__ = ["create_app", "is_loopback", "load_agent", "serve"]


def load_agent(spec: str) -> Callable[[Any], Any]:
    """The callable ``MODULE:NAME`` names (``qvc serve --agent``). Raises :class:`~qvc.errors.InvalidInputError`."""
    import importlib

    module, _, name = spec.partition(":")
    if not module or not name:
        raise InvalidInputError(f"--agent {spec!r}: expected MODULE:FUNCTION")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise InvalidInputError(f"--agent {spec!r}: {exc}") from None
    if not callable(found):
        raise InvalidInputError(f"--agent {spec!r} is not callable")
    return found


#: Seconds a stopping server waits for requests under way (event streams end at once) before
#: it cancels them.
GRACEFUL_TIMEOUT = 2


def serve(path: str | os.PathLike, host: str = "127.0.0.1", port: int = 8321, *, read_only: bool = False,
          token: Optional[str] = None, allow_no_token: bool = False, poll_interval: float = 0.5,
          agent: Optional[Callable[[Any], Any]] = None, on_listen: Optional[Callable[[str], None]] = None) -> None:
    """Serve the repository at ``path`` until SIGINT or SIGTERM, then return: open event streams
    end at once, requests under way get :data:`GRACEFUL_TIMEOUT` seconds, and nothing is raised.

    ``port=0`` picks a free port; ``agent`` records continuations (see :func:`create_app`).
    ``on_listen`` is called with the page's URL once the socket listens (before requests are
    answered). Without a ``token``, actions need a random token made for this start (reads stay
    open on loopback), which that URL carries (``?token=``) unless ``read_only``. A host other
    than loopback needs a ``token`` unless ``allow_no_token``: raises
    :class:`~qvc.errors.InvalidInputError` otherwise, and
    :class:`~qvc.errors.NotARepositoryError` for a path that is not a repository.
    """
    import secrets

    import uvicorn

    if not is_loopback(host) and not token and not allow_no_token:
        raise InvalidInputError(f"refusing to serve on {host} without a token: anyone who reaches it could "
                                "read and change the repository (use --token or $QVC_SERVE_TOKEN, or "
                                "--allow-no-token)")
    action_token = None if token or read_only else secrets.token_urlsafe(24)
    app = create_app(path, read_only=read_only, token=token or None, poll_interval=poll_interval, agent=agent,
                     any_host=not is_loopback(host), action_token=action_token)
    stopping = app.state.qvc.stopping

    class Server(uvicorn.Server):
        """uvicorn's server, but the event streams end as soon as it starts stopping (else its
        graceful shutdown would wait for them, then cancel them with a traceback), and the
        signal that stopped it is not raised again once it has (the caller returns normally)."""

        async def shutdown(self, sockets: Any = None) -> None:
            stopping.set()
            await super().shutdown(sockets)

        def handle_exit(self, sig: int, frame: Any) -> None:
            stopping.set()
            super().handle_exit(sig, frame)

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            handled = (signal.SIGINT, signal.SIGTERM)
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise InvalidInputError(f"cannot resolve host {host!r}: {exc.strerror}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise InvalidInputError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    shown_token = token or action_token
    url = f"http://{shown}:{bound_port}/" + (f"?token={shown_token}" if shown_token else "")
    if on_listen is not None:
        on_listen(url)
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=GRACEFUL_TIMEOUT, lifespan="on")
    try:
        Server(config).run(sockets=[sock])
    finally:
        sock.close()
