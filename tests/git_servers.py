"""Real git servers on 127.0.0.1 for the remote tests (``git daemon`` and smart HTTP), and
``snapshot``, every checkpoint of a store, to compare two repositories.

``GitDaemon`` runs ``git daemon --enable=receive-pack`` as a subprocess; ``GitHttpServer``
serves ``git http-backend`` (a real CGI process per request) from a small threaded
``http.server``, optionally behind HTTP basic authentication.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from qvc import CheckpointConfig


def snapshot(store) -> dict:
    """Every checkpoint of every thread and line: ids, values, metadata, versions, pending writes."""
    out = {}
    for thread in store.threads():
        out[thread] = [
            (t.config, t.checkpoint.id, t.checkpoint.step, t.checkpoint.state_data, t.checkpoint.state_versions,
             t.checkpoint.parent_id, t.checkpoint.created_at, t.metadata, t.parent_config, t.pending_writes)
            for t in store.list(CheckpointConfig(thread), superseded=True)]
    out["refs"] = sorted(name for name, _ in store.repository.refs("refs/")
                         if name.startswith(("refs/heads/", "refs/qvc/superseded/", "refs/qvc/writes/")))
    return out




def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


class GitDaemon:
    """``git daemon`` serving every repository under ``base`` (pushes enabled) on a free port."""

    def __init__(self, base: str):
        self.base = base
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    def url(self, name: str) -> str:
        return f"git://127.0.0.1:{self.port}/{name}"

    def start(self) -> GitDaemon:
        self.proc = subprocess.Popen(
            [shutil.which("git"), "daemon", "--reuseaddr", f"--base-path={self.base}", "--export-all",
             "--enable=receive-pack", "--listen=127.0.0.1", f"--port={self.port}", self.base],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)  # `git daemon` runs git-daemon as a child: stop the whole group
        wait_for_port(self.port)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.proc = None


class GitHttpServer:
    """Smart HTTP: ``git http-backend`` behind a threaded HTTP server on a free port.

    With ``credentials=(user, password)`` every request needs HTTP basic authentication.
    """

    def __init__(self, root: str, credentials: tuple[str, str] | None = None):
        self.root = root
        self.credentials = credentials
        self.requests = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                self._cgi()

            def do_POST(self) -> None:
                self._cgi()

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    out = b""
                    while True:
                        size = int(self.rfile.readline().strip().split(b";")[0], 16)
                        if size == 0:
                            self.rfile.readline()
                            return out
                        out += self.rfile.read(size)
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _cgi(self) -> None:
                server.requests += 1
                body = self._body() if self.command == "POST" else b""
                user = None
                if server.credentials is not None:
                    expected = base64.b64encode(":".join(server.credentials).encode()).decode()
                    if self.headers.get("Authorization") != f"Basic {expected}":
                        self.send_response(401)
                        self.send_header("WWW-Authenticate", 'Basic realm="qvc-test"')
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    user = server.credentials[0]
                path, _, query = self.path.partition("?")
                env = {"PATH": os.environ.get("PATH", ""), "GIT_PROJECT_ROOT": server.root,
                       "GIT_HTTP_EXPORT_ALL": "1", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
                       "REQUEST_METHOD": self.command, "PATH_INFO": path, "QUERY_STRING": query,
                       "CONTENT_TYPE": self.headers.get("Content-Type", ""), "CONTENT_LENGTH": str(len(body)),
                       "REMOTE_ADDR": "127.0.0.1", "GIT_PROTOCOL": self.headers.get("Git-Protocol", "")}
                if user:
                    env["REMOTE_USER"] = user
                proc = subprocess.run([shutil.which("git"), "http-backend"], input=body, env=env,
                                      capture_output=True)
                head, _, payload = proc.stdout.partition(b"\r\n\r\n")
                if not _:
                    head, _, payload = proc.stdout.partition(b"\n\n")
                status, headers = 200, []
                for line in head.decode("latin-1").splitlines():
                    key, _, value = line.partition(":")
                    if key.lower() == "status":
                        status = int(value.strip().split()[0])
                    elif key:
                        headers.append((key, value.strip()))
                self.send_response(status)
                for key, value in headers:
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.port = free_port()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def start(self) -> GitHttpServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
