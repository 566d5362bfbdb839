"""``qvc serve``: the repository over HTTP (:mod:`qvc.server`, the optional ``server`` extra)."""

from __future__ import annotations

import click

from qvc.cli.app import cli, session
from qvc.cli.output import out


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8321, show_default=True,
              help="Port (0: any free port).")
@click.option("--read-only", is_flag=True, help="Refuse every action (continue, fork, reset, delete) with 403.")
@click.option("--token", envvar="QVC_SERVE_TOKEN", metavar="TOKEN",
              help="Require this bearer token on every request (default: $QVC_SERVE_TOKEN).")
@click.option("--allow-no-token", is_flag=True, help="Serve a non-loopback host without a token.")
@click.option("--agent", metavar="MODULE:FUNCTION",
              help="Record each continuation with FUNCTION(recorder) (else continuations are detached).")
def serve(host: str, port: int, read_only: bool, token: str | None, allow_no_token: bool, agent: str | None) -> None:
    """Serve the repository over HTTP: a JSON API (OpenAPI at /openapi.json) and a page to browse runs.

    Listens on loopback by default; another host needs --token. Without --token, actions need
    the token made for this start, which the printed URL carries (reads stay open on loopback).
    Ctrl-C stops it.

    \b
    Example:
      qvc serve --port 0 --read-only
    """
    from qvc.store.discovery import find_repository  # deferred: start-up speed

    try:  # deferred: FastAPI is an optional extra and slow to import
        from qvc.server import load_agent
        from qvc.server import serve as run_server
    except ImportError as exc:
        raise click.ClickException(f'qvc serve needs the server extra ({exc.name} is missing): '
                                   'pip install "qvc[server]"') from None
    path = find_repository(explicit=session().repo)
    run_server(path, host, port, read_only=read_only, token=token, allow_no_token=allow_no_token,
               agent=load_agent(agent) if agent else None,
               on_listen=lambda url: out(f"Serving {path} at {url}" + (" (read-only)" if read_only else "")
                                         + "; Ctrl-C stops"))
    out(f"Stopped serving {path}")
