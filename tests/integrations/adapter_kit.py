"""The adapter kit: the tests every qvc integration (a framework's checkpointer or database on a
qvc store) runs, whatever framework it adapts.

An adapter test module plugs in by subclassing :class:`AdapterKit` with a ``driver``, an
:class:`AdapterDriver` for its framework::

    class TestMyAdapter(AdapterKit):
        driver = MyDriver()

The kit then checks, on real repositories, with real git and real ``qvc`` subprocesses:

- after every operation of the driver's script (writes, forks, continues, deletes): ``git fsck
  --strict`` is clean, the threads the adapter says it wrote are the repository's threads, and
  qvc's readers read each of them: ``qvc branch``, ``qvc log`` (each thread's line, in order, and
  every checkpoint in ``qvc log --all``), ``qvc show`` (its head), run in a process of their own
  (:class:`QvcReaders`), and ``GitCheckpointStore.read`` of every checkpoint;
- a SIGKILL at a random moment of a child process writing in a loop through the adapter
  recovers: the repository reopens through the adapter, fsck is clean, the readers read it, and
  every write the child acknowledged (printed after the call returned) reads back;
- a push to a bare remote (a path, and a real ``git daemon`` on 127.0.0.1) and a clone from it
  carry everything: the clone reads identically through the adapter.

The driver uses only the adapter's public API (and qvc's public readers); the kit never looks
inside an adapter. docs/adapters.md says how to write a driver.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Set

import pytest
from git_servers import GitDaemon
from helpers import child_env, fsck, run_git, slow_enabled

from qvc import GitCheckpointStore
from qvc.store.retention import Policy

#: The kill comes after this many acknowledged writes (a random number in the range, inclusive)
#: and then a random delay, so mostly in the middle of the next write.
KILL_AFTER_ACKS = (1, 4)


@dataclass(frozen=True)
class Operation:
    """One step of a driver's script: ``run(handle)`` does one framework operation (a graph step, an
    agent run, a fork, a delete, ...) through the open adapter ``handle``."""

    label: str
    run: Callable[[Any], None]


class AdapterDriver:
    """What the kit needs from an adapter. Subclass it and implement every method.

    A *handle* is whatever :meth:`open` returns (the adapter object, or a small holder of it and
    what drives it). Threads are qvc thread names (``qvc branch`` lists them); checkpoint ids are
    qvc checkpoint ids (``qvc log --json`` names them).
    """

    #: A short name for messages.
    name: str = "adapter"

    def open(self, path: Path) -> Any:
        """Open the adapter on the repository at ``path`` (created if missing) and return a handle."""
        raise NotImplementedError

    def close(self, handle: Any) -> None:
        """Close the handle (everything written so far durable)."""
        raise NotImplementedError

    def script(self) -> List[Operation]:
        """A realistic script: writes, a fork or branch, a continue after it, and the adapter's
        deletes (and prunes) if it has them, ending with writes that leave something to carry."""
        raise NotImplementedError

    def lines(self, handle: Any) -> Dict[str, List[str]]:
        """Every qvc thread the adapter wrote, with the checkpoint ids of its current line as the
        framework sees them, newest first (``qvc log THREAD`` must name them in this order; it may
        name more, e.g. the checkpoints a fork shares with its source)."""
        raise NotImplementedError

    def checkpoints(self, handle: Any) -> Dict[str, Set[str]]:
        """Every checkpoint id per thread the framework can still reach, off its current line too
        (``qvc log --all`` must name them all). Default: the lines."""
        return {thread: set(ids) for thread, ids in self.lines(handle).items()}

    def snapshot(self, handle: Any) -> Any:
        """Everything readable through the adapter (threads, checkpoint ids, values, metadata,
        pending writes), as data that compares with ``==`` between two repositories."""
        raise NotImplementedError

    def writer(self, path: Path) -> List[str]:
        """The argv of a child process that writes through the adapter at ``path`` in a loop until
        killed, printing ``ack TOKEN`` (one line, one ``print`` argument) after each write's call
        returned. Run with :func:`conftest.child_env`."""
        raise NotImplementedError

    def check_acknowledged(self, handle: Any, tokens: List[str]) -> None:
        """Assert that every acknowledged write (its TOKEN) reads back through ``handle``."""
        raise NotImplementedError


# -- qvc's readers ---------------------------------------------------------------------------------


def _qvc_argv(path: Optional[Path], args: tuple) -> List[str]:
    """``python -m qvc`` (the ``qvc`` command of this interpreter), on ``path`` unless ``None``."""
    repo = [] if path is None else ["--repo", str(path)]
    return [sys.executable, "-m", "qvc", "--no-pager", "--color=never", *repo, *args]


def qvc_cli(path: Optional[Path], *args: str) -> str:
    """Run ``qvc ARGS`` on ``path`` (``None``: no ``--repo``) as a subprocess; assert exit 0; return stdout."""
    proc = subprocess.run(_qvc_argv(path, args), capture_output=True, text=True, env=child_env(), timeout=120,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"qvc {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


# Reads lines from stdin, each a JSON list of argument lists; runs each command through the CLI's
# entry point, one after the other, and writes one JSON line: [[exit status, stdout, stderr], ...].
_READERS = """
import contextlib, io, json, sys
from qvc.cli import main
for line in sys.stdin:
    done = []
    for args in json.loads(line):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(args)
        done.append([code, out.getvalue(), err.getvalue()])
    sys.__stdout__.write(json.dumps(done) + "\\n")
    sys.__stdout__.flush()
"""


class QvcReaders:
    """A separate process that runs read-only ``qvc`` commands through the CLI's ``main``, as the
    ``qvc`` command does, batch after batch: it pays the interpreter's start and the CLI's imports
    (a framework's, for its viewer) once, and every command still opens the repository anew.
    A context manager; :func:`qvc_many` without one starts a fresh process per batch."""

    def __init__(self) -> None:
        self.errors = tempfile.TemporaryFile(mode="w+")  # not a pipe: a chatty reader never blocks
        self.proc = subprocess.Popen([sys.executable, "-c", _READERS], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.errors, text=True, env=child_env())

    def run(self, argv: List[List[str]]) -> list:
        """Run one batch; returns ``[[exit status, stdout, stderr], ...]``."""
        self.proc.stdin.write(json.dumps(argv) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=60)
            self.errors.seek(0)
            raise AssertionError(f"the qvc readers' process exited {self.proc.returncode}:\n{self.errors.read()}")
        return json.loads(line)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        self.proc.stdout.close()
        self.errors.close()

    def __enter__(self) -> QvcReaders:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def qvc_many(path: Path, commands: List[tuple], readers: Optional[QvcReaders] = None) -> List[str]:
    """Run several read-only ``qvc`` commands on ``path`` in ``readers`` (default: a fresh
    :class:`QvcReaders` process); assert each exits 0; return their stdouts in order."""
    argv = [["--no-pager", "--color=never", "--repo", str(path), *args] for args in commands]
    if readers is None:
        with QvcReaders() as fresh:
            results = fresh.run(argv)
    else:
        results = readers.run(argv)
    outs = []
    for args, (code, out, err) in zip(commands, results, strict=True):
        assert code == 0, f"qvc {' '.join(args)} exited {code}:\n{out}\n{err}"
        outs.append(out)
    return outs


def in_order(wanted: List[str], seen: List[str]) -> bool:
    """Whether ``wanted`` is a subsequence of ``seen``."""
    rest = iter(seen)
    return all(any(w == s for s in rest) for w in wanted)


@dataclass
class Seen:
    """What :func:`check_readable` saw last: a thread whose line and checkpoints did not change
    since is not run through ``qvc log THREAD`` and ``qvc show THREAD`` again."""

    lines: Dict[str, List[str]]
    checkpoints: Dict[str, Set[str]]


def check_readable(driver: AdapterDriver, handle: Any, path: Path, when: str,
                   previous: Optional[Seen] = None, readers: Optional[QvcReaders] = None) -> Seen:
    """fsck and every reader of qvc over what the adapter says it wrote (see the module docstring);
    with ``previous``, the per-thread CLI reads only for threads that changed since; the CLI in
    ``readers`` (default: a fresh process)."""
    where = f"{driver.name}, {when}"
    fsck(path)
    lines = driver.lines(handle)
    every = driver.checkpoints(handle)
    changed = [t for t in lines if previous is None or previous.lines.get(t) != lines[t]
               or previous.checkpoints.get(t) != every[t]]
    outs = qvc_many(path, [("branch", "--json"), ("log", "--all", "--json"),
                           *[c for t in changed for c in (("log", "--json", t), ("show", t))]], readers)
    branches = {b["thread"]: b for b in json.loads(outs[0])}
    assert set(branches) == set(lines), f"{where}: qvc branch lists {sorted(branches)}, the adapter {sorted(lines)}"
    logged_all = {e["id"] for e in json.loads(outs[1])}
    for thread, line in lines.items():
        assert line, f"{where}: thread {thread!r} has no checkpoint"
        assert branches[thread]["head_id"] == line[0], f"{where}: {thread!r}'s head is not the adapter's newest"
        missing = every[thread] - logged_all
        assert not missing, f"{where}: qvc log --all does not name {sorted(missing)} of {thread!r}"
    with GitCheckpointStore(path, create=False) as store:
        for i, thread in enumerate(changed):
            line = lines[thread]
            logged = [e["id"] for e in json.loads(outs[2 + 2 * i])]
            assert in_order(line, logged), f"{where}: qvc log {thread!r} gives {logged}, the adapter's line is {line}"
            shown = outs[3 + 2 * i]
            assert shown.startswith(f"checkpoint {line[0]}\n"), f"{where}: qvc show {thread!r}:\n{shown[:500]}"
            for cid in every[thread] | set(line):
                read = store.read(store.resolve(cid))
                assert read.checkpoint.id == cid, f"{where}: reading {cid} of {thread!r} gave {read.checkpoint.id}"
    return Seen(lines, every)


# -- a child killed while it writes ----------------------------------------------------------------


class _Acks:
    """The ``ack TOKEN`` lines a child printed, read on a thread as they come."""

    def __init__(self, proc: subprocess.Popen):
        self.tokens: List[str] = []
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._read, args=(proc.stdout,), daemon=True)
        self.thread.start()

    def _read(self, stream) -> None:
        for raw in stream:
            if not raw.endswith("\n"):  # cut by the kill: not acknowledged
                break
            if raw.startswith("ack "):  # other lines are the framework's own output
                with self.cond:
                    self.tokens.append(raw[4:-1])
                    self.cond.notify_all()

    def wait_for(self, n: int, proc: subprocess.Popen, errors: Path, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while len(self.tokens) < n:
                assert proc.poll() is None, f"the writer exited {proc.returncode}: {errors.read_text()[-3000:]}"
                assert time.monotonic() < deadline, f"the writer acknowledged {len(self.tokens)} of {n} writes"
                self.cond.wait(0.05)


def kill_a_writer(driver: AdapterDriver, path: Path, rng: random.Random) -> List[str]:
    """Start the driver's writer, SIGKILL it after a few acknowledged writes and a random delay (so
    mostly inside a write), and return every token it acknowledged."""
    errors = path.parent / f"{path.name}.writer-stderr"
    with open(errors, "w") as err:  # a file, not a pipe: a chatty child never blocks on it
        proc = subprocess.Popen(driver.writer(path), env=child_env(), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        acks = _Acks(proc)
        acks.wait_for(rng.randint(*KILL_AFTER_ACKS), proc, errors)
        time.sleep(rng.uniform(0.0, 0.08))
        proc.send_signal(signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)
    acks.thread.join(timeout=30)
    assert proc.returncode == -signal.SIGKILL, f"the writer exited {proc.returncode}: {errors.read_text()[-3000:]}"
    return list(acks.tokens)


# -- the tests --------------------------------------------------------------------------------------


class AdapterKit:
    """The kit's tests; subclass with ``driver = YourDriver()`` in a ``Test...`` class."""

    driver: AdapterDriver

    def test_every_operation_leaves_a_clean_readable_repository(self, tmp_path: Path) -> None:
        path = tmp_path / "a.qvc"
        handle = self.driver.open(path)
        try:
            threads: Set[str] = set()
            last: Optional[Seen] = None
            with QvcReaders() as readers:
                for op in self.driver.script():
                    op.run(handle)
                    last = check_readable(self.driver, handle, path, f"after {op.label!r}", last, readers)
                    threads |= set(last.lines)
            assert len(threads) >= 2, f"{self.driver.name}: the script should write more than one thread"
        finally:
            self.driver.close(handle)
        handle = self.driver.open(path)  # and read again by a fresh adapter, with readers in a fresh process
        try:
            check_readable(self.driver, handle, path, "reopened")
        finally:
            self.driver.close(handle)

    def _kill_and_recover(self, path: Path, rounds: int, seed: int) -> None:
        rng = random.Random(seed)
        acknowledged: List[str] = []
        for i in range(rounds):
            tokens = kill_a_writer(self.driver, path, rng)
            assert tokens, f"{self.driver.name}: the writer acknowledged nothing (seed {seed})"
            acknowledged += tokens
            handle = self.driver.open(path)  # recovery on open
            try:
                check_readable(self.driver, handle, path, f"killed writer {i + 1} (seed {seed})")
                self.driver.check_acknowledged(handle, acknowledged)
            finally:
                self.driver.close(handle)

    def test_a_retention_policy_keeps_what_the_framework_resumes_from(self, tmp_path: Path) -> None:
        """``qvc gc --keep-last 2`` on what the script wrote: each thread keeps its head and the
        newest of its line as the framework sees it, the readers read it, and a writer then
        continues through the adapter (what it acknowledged reads back)."""
        path = tmp_path / "r.qvc"
        handle = self.driver.open(path)
        try:
            for op in self.driver.script():
                op.run(handle)
            before = self.driver.lines(handle)
        finally:
            self.driver.close(handle)
        with GitCheckpointStore(path) as store:
            report = store.retain(Policy(keep_last=2))
        assert report.removed, f"{self.driver.name}: the script should leave a thread with more than 2 checkpoints"
        handle = self.driver.open(path)
        try:
            after = self.driver.lines(handle)
            assert set(after) == set(before), f"{self.driver.name}: keep-last removed a thread"
            for thread, ids in before.items():
                kept = after[thread]
                assert kept and kept == ids[:len(kept)], f"{self.driver.name}: {thread} after retention: {kept}"
            check_readable(self.driver, handle, path, "after retention")
        finally:
            self.driver.close(handle)
        tokens = kill_a_writer(self.driver, path, random.Random(_seed()))
        handle = self.driver.open(path)
        try:
            check_readable(self.driver, handle, path, "a writer after retention")
            self.driver.check_acknowledged(handle, tokens)
        finally:
            self.driver.close(handle)

    def test_a_writer_killed_during_a_write_recovers(self, tmp_path: Path) -> None:
        self._kill_and_recover(tmp_path / "k.qvc", rounds=1, seed=_seed())

    @pytest.mark.slow
    def test_writers_killed_many_times_recover(self, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        if not (slow_enabled(request.config) or os.environ.get("QVC_KIT_ROUNDS")):
            pytest.skip("long variant: run with -m slow (or QVC_SLOW=1, or QVC_KIT_ROUNDS=N)")
        self._kill_and_recover(tmp_path / "k.qvc", rounds=int(os.environ.get("QVC_KIT_ROUNDS", "20")), seed=_seed())

    @pytest.mark.parametrize("server", ["path", "daemon"])
    def test_push_and_clone_carry_everything(self, tmp_path: Path, isolated_git: Path, server: str) -> None:
        path, bare = tmp_path / "a.qvc", tmp_path / "srv" / "hub.git"
        bare.parent.mkdir()
        run_git(None, "init", "-q", "--bare", str(bare))
        handle = self.driver.open(path)
        try:
            for op in self.driver.script():
                op.run(handle)
            expected_lines = self.driver.lines(handle)
            expected_all = self.driver.checkpoints(handle)
            expected = self.driver.snapshot(handle)
        finally:
            self.driver.close(handle)
        daemon: Optional[GitDaemon] = None
        try:
            if server == "daemon":
                daemon = GitDaemon(str(bare.parent)).start()
                url = daemon.url(bare.name)
            else:
                url = str(bare)
            qvc_cli(path, "remote", "add", "origin", url)
            qvc_cli(path, "push", "origin")
            clone = tmp_path / "b.qvc"
            qvc_cli(None, "clone", url, str(clone))
        finally:
            if daemon is not None:
                daemon.stop()
        handle = self.driver.open(clone)
        try:
            assert self.driver.lines(handle) == expected_lines
            assert self.driver.checkpoints(handle) == expected_all
            assert self.driver.snapshot(handle) == expected
            check_readable(self.driver, handle, clone, "cloned")
        finally:
            self.driver.close(handle)


def _seed() -> int:
    """The kill tests' seed: ``QVC_KIT_SEED`` to replay one, else a new one (named in failures)."""
    return int(os.environ.get("QVC_KIT_SEED") or random.randrange(2**32))
