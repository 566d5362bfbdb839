"""Running ``git push`` / ``git fetch`` / ``git ls-remote`` against a remote, with progress.

qvc talks to remotes through the ``git`` executable rather than libgit2's remote API: git
brings every transport (paths, ``git://``, ssh with the user's agent and ``~/.ssh/config``,
smart HTTP(S) with credential helpers and proxies) with the user's own configuration, reports
each ref's outcome with the server's reason (``--porcelain``), and checks leases
(``--force-with-lease``) on the server side. libgit2 reports some server rejections only
through callbacks, aborts a whole push on one client-side non-fast-forward, and may be built
without HTTPS or ssh support.

This module only runs git and parses what it prints; :mod:`qvc.remotes.remote` decides what to push.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

from qvc.errors import RemoteError
from qvc.plumbing import launcher

_PROGRESS = re.compile(r"(?:remote: )?([A-Z][a-z]+(?: [a-z]+)*):\s+\d+% \((\d+)/(\d+)\)"
                       r"(?:, ([\d.]+) (bytes|KiB|MiB|GiB))?")
_UNITS = {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
_TRANSFER_PHASES = ("Writing objects", "Receiving objects")
_FULL = (os.strerror(errno.ENOSPC), os.strerror(errno.EDQUOT))  # the server's words for a full disk


@dataclass
class TransferProgress:
    """Where a push, fetch or clone is: the phase git reports and its counts so far.

    ``objects``/``total`` count the current phase; ``bytes`` is what was sent or received.
    ``chunk``/``chunks`` number the git runs of a push split into chunks.
    """

    operation: str
    remote: str
    phase: str = "connecting"
    objects: int = 0
    total: int = 0
    bytes: int = 0
    elapsed: float = 0.0
    chunk: int = 1
    chunks: int = 1
    done: bool = False


ProgressCallback = Callable[[TransferProgress], None]


@dataclass
class GitRun:
    """A finished git run: exit status, stdout, the non-progress stderr lines, objects and bytes sent."""

    returncode: int
    stdout: str
    messages: list[str]
    objects: int
    bytes: int
    timed_out: float | None = None  # the timeout, when git was stopped for passing it

    def no_space(self) -> str | None:
        """The server's line saying its disk is full (``remote: fatal: ... No space left on
        device``, or a quota exceeded), or ``None``."""
        for line in self.messages:
            if line.startswith("remote:") and any(m in line for m in _FULL):
                return line[len("remote:"):].strip()
        return None

    def failure(self) -> str:
        """git's own explanation of a failure (from its first ``fatal:``/``error:`` line on)."""
        if self.timed_out is not None:
            return f"timed out after {self.timed_out:g} s"
        for i in range(len(self.messages)):
            if self.messages[i].startswith(("fatal:", "error:")):
                text = " ".join([self.messages[i].split(":", 1)[1].strip(), *self.messages[i + 1:]])
                return text[:300]
        return self.messages[-1] if self.messages else f"exit status {self.returncode}"


def run_git(repo_path: str | None, args: list[str], *, interactive: bool = False,
            progress: Optional[ProgressCallback] = None, state: Optional[TransferProgress] = None,
            timeout: Optional[float] = None) -> GitRun:
    """Run ``git [--git-dir=repo_path] args``; parse its progress into ``state`` and call ``progress``.

    ``progress`` is called at least every 0.2 s while git runs (so a caller can draw a bar
    for a slow server); the caller reports the end (``done=True``). ``timeout`` kills git after
    that many seconds (the run then reports exit status -9). Raises :class:`QvcError` only
    if git is missing.
    """
    proc: Optional[subprocess.Popen] = None
    out: list[bytes] = []
    try:
        with interrupt_held():  # a Ctrl-C while git starts waits until git is ours to stop
            # With a timeout git gets its own process group, so ssh or git-remote-http go down with it.
            proc = launcher.popen(repo_path, args, interactive=interactive, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, start_new_session=timeout is not None)
        reader = threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)
        reader.start()
        return _follow(proc, reader, out, proc.stderr.fileno(), state or TransferProgress("git", ""), progress,
                       timeout)
    except BaseException:  # Ctrl-C (KeyboardInterrupt) here: git goes too, before the caller cleans up
        if proc is not None:
            if timeout is not None:
                _kill_group(proc)
            else:
                proc.kill()
            proc.wait()
        raise


@contextlib.contextmanager
def interrupt_held() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) off while a child process starts, then raise it (KeyboardInterrupt)
    when the block ends, once the caller holds the process: raised inside ``subprocess.Popen``,
    after the fork, it would leave git running with no one to stop it. In the main thread, with
    Python's own handler installed, only (elsewhere Python raises no KeyboardInterrupt): a no-op."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


def _follow(proc: subprocess.Popen, reader: threading.Thread, out: list[bytes], fd: int, state: TransferProgress,
            progress: Optional[ProgressCallback], timeout: Optional[float]) -> GitRun:
    """Read git's stderr until it ends (progress into ``state``), wait for git; its :class:`GitRun`."""
    start = time.monotonic()
    messages: list[str] = []
    objects = sent = 0
    timed_out = None
    pending = b""
    while True:
        ready, _, _ = select.select([fd], [], [], 0.2)
        chunk = os.read(fd, 65536) if ready else b""
        if ready and not chunk:
            break
        pending += chunk
        *pieces, pending = re.split(rb"[\r\n]", pending)
        for piece in pieces:
            line = piece.decode("utf-8", "replace").strip()
            if not line:
                continue
            m = _PROGRESS.search(line)
            if m is None:
                if not line.startswith("remote: ") or not _PROGRESS.search(line):
                    messages.append(line)
                continue
            state.phase, state.objects, state.total = m.group(1), int(m.group(2)), int(m.group(3))
            if m.group(4) and m.group(1) in _TRANSFER_PHASES:
                state.bytes = int(float(m.group(4)) * _UNITS[m.group(5)])
            if m.group(1) in _TRANSFER_PHASES:
                objects, sent = state.objects, state.bytes
        state.elapsed = time.monotonic() - start
        if progress is not None:
            progress(state)
        if timeout is not None and state.elapsed > timeout and proc.poll() is None:
            _kill_group(proc)
            timed_out = timeout
    if pending.strip():
        messages.append(pending.decode("utf-8", "replace").strip())
    try:
        code = proc.wait(timeout=None if timeout is None else max(0.0, timeout - (time.monotonic() - start)) + 5)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        code = proc.wait()
    reader.join()
    proc.stdout.close()
    proc.stderr.close()
    state.elapsed = time.monotonic() - start
    return GitRun(code, b"".join(out).decode("utf-8", "replace"), messages, objects, sent, timed_out)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def ls_remote(repo_path: str, url: str, *, interactive: bool = False,
              timeout: Optional[float] = None) -> dict[str, str]:
    """``{ref name: sha}`` of every ref the remote advertises (one round trip).

    Raises :class:`RemoteError` (with git's reason) when the remote cannot be read.
    """
    run = run_git(repo_path, ["ls-remote", "--", url], interactive=interactive, timeout=timeout)
    if run.returncode != 0:
        raise RemoteError(f"cannot read remote {url}: {run.failure()}")
    refs = {}
    for line in run.stdout.splitlines():
        sha, _, name = line.partition("\t")
        if name and not name.endswith("^{}"):
            refs[name] = sha
    return refs


def remote_head(repo_path: str, url: str, *, interactive: bool = False) -> str | None:
    """The ref the remote's HEAD points to (``refs/heads/...``), if it says."""
    run = run_git(repo_path, ["ls-remote", "--symref", "--", url, "HEAD"], interactive=interactive)
    for line in run.stdout.splitlines():
        if line.startswith("ref: ") and line.endswith("\tHEAD"):
            return line[5:].split("\t")[0]
    return None


@dataclass(frozen=True)
class PorcelainLine:
    """One ref of ``git push --porcelain``: its flag, destination, summary and reason."""

    flag: str
    src: str
    dst: str
    summary: str
    reason: str | None


def parse_porcelain(stdout: str) -> dict[str, PorcelainLine]:
    """``git push --porcelain`` output by destination ref."""
    found = {}
    for line in stdout.splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or len(parts[0]) != 1:
            continue
        flag, spec, summary = parts[0], parts[1], parts[2]
        src, _, dst = spec.rpartition(":")
        reason = None
        m = re.match(r"(\[[^\]]*\]|\S+)\s*(?:\((.*)\))?$", summary)
        if m and m.group(2):
            reason = m.group(2)
        found[dst] = PorcelainLine(flag, src, dst, summary, reason)
    return found


class ProgressBar:
    """Draws a one-line progress bar on a terminal for transfers longer than ``delay`` seconds.

    Shows the phase, a bar, objects and bytes; clears itself at the end. Draws nothing
    unless ``stream`` is a terminal (so piped output and logs never see it).
    """

    def __init__(self, stream=None, delay: float = 1.0, width: int = 24):
        self.stream = stream if stream is not None else sys.stderr
        self.delay = delay
        self.width = width
        self.drawn = False
        self._last = 0.0
        try:
            self.enabled = self.stream.isatty()
        except (AttributeError, ValueError):
            self.enabled = False

    def __call__(self, p: TransferProgress) -> None:
        if not self.enabled:
            return
        if p.done:
            if self.drawn:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
                self.drawn = False
            return
        now = time.monotonic()
        if p.elapsed < self.delay or now - self._last < 0.1:
            return
        self._last = now
        frac = p.objects / p.total if p.total else 0.0
        bar = "#" * int(frac * self.width)
        chunk = f" [{p.chunk}/{p.chunks}]" if p.chunks > 1 else ""
        line = (f"\r\x1b[K{p.operation} {p.remote}{chunk}: {p.phase} [{bar:<{self.width}}] "
                f"{p.objects}/{p.total} objects, {human_bytes(p.bytes)}, {p.elapsed:.0f} s")
        self.stream.write(line)
        self.stream.flush()
        self.drawn = True


def human_bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
