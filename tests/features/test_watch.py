"""Following a repository live (qvc.readers.watch, ``qvc watch``, ``qvc log --follow``).

Writers are real processes (tests/workers/watch_worker.py); the watcher runs in this process or as the
real ``qvc`` command. No file-system events are faked: inotify is the kernel's, the polling
fallback is forced by a parameter or by exhausting the process's file descriptors for real.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import child_env, run_git

import qvc
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore, InvalidInputError
from qvc.store.refnames import head_ref, superseded_prefix

WORKER = str(Path(__file__).resolve().parents[1] / "workers" / "watch_worker.py")
SCRIPT = Path(sys.executable).with_name("qvc")
QVC = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "qvc"]
WAIT = 15.0  # generous: the machine is shared; a passing run waits milliseconds


class Writer:
    """A writer process driven one command at a time."""

    def __init__(self, path: Path):
        self.proc = subprocess.Popen([sys.executable, WORKER, str(path)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=child_env())
        assert self._line() == "READY"

    def _line(self) -> str:
        line = self.proc.stdout.readline().strip()
        assert not line.startswith("ERROR") and line, f"worker: {line or 'exited'}"
        return line

    def __call__(self, op: str, **kw):
        self.proc.stdin.write(json.dumps({"op": op, **kw}) + "\n")
        self.proc.stdin.flush()
        line = self._line()
        assert line.startswith("OK "), line
        return json.loads(line[3:])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write('{"op": "exit"}\n')
            self.proc.stdin.close()
            assert self.proc.wait(30) == 0
        self.proc.stdout.close()


@pytest.fixture
def writer(repo_path):
    GitCheckpointStore(repo_path).close()
    w = Writer(repo_path)
    yield w
    w.close()


class Collector:
    """Events from a watcher's callback thread, waited for by count or content."""

    def __init__(self):
        self.events = []
        self.last = []
        self._cond = threading.Condition()

    def __call__(self, event) -> None:
        with self._cond:
            self.events.append(event)
            self._cond.notify_all()

    def until(self, done, what: str = "events") -> list:
        deadline = time.monotonic() + WAIT
        with self._cond:
            while not done(self.events):
                left = deadline - time.monotonic()
                assert left > 0, f"timed out waiting for {what}; got {[summary(e) for e in self.events]}"
                self._cond.wait(left)
            return list(self.events)

    def take(self, n: int) -> list:
        """Exactly the next ``n`` events (and a moment later still no more)."""
        got = self.until(lambda ev: len(ev) >= n, f"{n} events")
        time.sleep(0.15)
        with self._cond:
            got, self.events = self.events, []
        assert len(got) == n, [summary(e) for e in got]
        self.last = got
        return [summary(e) for e in got]


def summary(e) -> tuple:
    """What a test asserts about an event: kind, thread, checkpoint id and the kind's own detail."""
    detail = {"fork": (e.from_thread, e.from_checkpoint_id), "rename": e.from_thread,
              "reset": len(e.superseded)}.get(e.kind)
    return (e.kind, e.thread_id, e.checkpoint_id) + ((detail,) if detail is not None else ())


@pytest.mark.parametrize("hints", ["inotify", "poll"])
def test_every_kind_of_change_from_another_process(repo_path, writer, hints):
    writer("put", thread="base", id="base-0")
    got = Collector()
    with GitCheckpointStore(repo_path, readonly=True) as reader, \
            qvc.watch(reader, callback=got, hints=hints, poll_interval=0.02) as watcher:
        assert watcher.hints == hints and watcher.fallback_reason is None
        commits = [writer("put", thread="a", id=f"a-{i}") for i in range(3)]
        events = got.until(lambda ev: len(ev) >= 3)
        assert got.take(3) == [("checkpoint", "a", f"a-{i}") for i in range(3)]
        assert [e.commit for e in events] == commits and [e.previous for e in events[1:]] == commits[:2]
        writer("fork", thread="a/b", id="b-0", **{"from": "a-1"})
        writer("put", thread="a/b", id="b-1")
        assert got.take(3) == [("fork", "a/b", "b-0", ("a", "a-1")), ("checkpoint", "a/b", "b-0"),
                               ("checkpoint", "a/b", "b-1")]
        writer("put", thread="a", id="a-tt", parent="a-0", expected_head=commits[2])  # time travel: a-1, a-2 superseded
        assert got.take(2) == [("reset", "a", "a-tt", 1), ("checkpoint", "a", "a-tt")]
        writer("reset", thread="a", id="a-2")  # undo it: no new checkpoint
        assert got.take(1) == [("reset", "a", "a-2", 1)] and got.last[0].cause == "reset: moving to a-2"
        writer("writes", id="a-1")
        assert got.take(1) == [("writes", "a", "a-1")]
        writer("delete", id="a-1")  # a-2 and the fork b-0, b-1 are rewritten: heads move, no new checkpoints
        assert got.take(2) == [("reset", "a", "a-2", 0), ("reset", "a/b", "b-1", 0)]
        assert {e.cause for e in got.last} == {"delete: checkpoint a-1"}
        writer("rename", thread="base", to="base2")
        assert got.take(1) == [("rename", "base2", "base-0", "base")]
        writer("delete_thread", thread="a/b")
        assert got.take(1) == [("delete", "a/b", None)]
        writer("checkout", thread="a")
        assert got.take(1) == [("head", "a", None)]



def _poll_until(watcher, done, what: str) -> list:
    """Poll ``watcher`` (no callback thread) until ``done(events so far)``, at most WAIT seconds."""
    events: list = []
    deadline = time.monotonic() + WAIT
    while not done(events):
        assert time.monotonic() < deadline, f"timed out waiting for {what}; got {[summary(e) for e in events]}"
        events += watcher.poll()
        time.sleep(0.01)
    return events


def test_a_put_acknowledged_before_the_watch_is_in_its_baseline(repo_path, writer):
    """A put another process acknowledged and git's files do not hold yet (its ref is locked by
    another program, so it stays staged) is in a new watcher's baseline: never reported as new
    after later changes (issue 22: under load the poll watcher reported such a put after the next
    three), and the next put on that thread is reported from it."""
    lock = repo_path / (head_ref("early") + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("another program\n")
    early = writer("put", thread="early", id="early-0")
    assert run_git(repo_path, "rev-parse", "-q", "--verify", head_ref("early"), check=False).returncode != 0
    with GitCheckpointStore(repo_path, readonly=True) as reader:
        with qvc.watch(reader, hints="poll") as watcher:
            assert watcher.poll() == []  # early-0 is no news
            lock.unlink()
            commit = writer("put", thread="early", id="early-1")
            events = _poll_until(watcher, lambda ev: ev, "early-1")
    assert [summary(e) for e in events] == [("checkpoint", "early", "early-1")]
    assert events[0].commit == commit and events[0].previous == early


def test_a_reset_names_the_line_it_left_also_when_published_after_the_head(repo_path):
    """A reset whose superseded ref reaches git's files after the head's (here: never, while
    another program holds its lock) still names that line: the watcher reads refs as
    acknowledged, the head and the line kept in one transaction."""
    with GitCheckpointStore(repo_path) as store:
        for i in range(2):
            store.put(CheckpointConfig("a"), Checkpoint(id=f"a-{i}", thread_id="a", step=i, state_data={}), {}, {})
        left = store.head("a")
    lock_file = repo_path / (superseded_prefix("a") + left + ".lock")
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    lock_file.write_text("another program\n")
    with GitCheckpointStore(repo_path, readonly=True) as reader, qvc.watch(reader, hints="poll") as watcher:
        with GitCheckpointStore(repo_path) as store:
            store.reset("a", "a-0")
        assert run_git(repo_path, "rev-parse", head_ref("a")).stdout.strip() != left  # the head is in git's files
        assert not (repo_path / (superseded_prefix("a") + left)).exists()  # its line is not
        events = watcher.poll()
    lock_file.unlink()
    assert [summary(e) for e in events] == [("reset", "a", "a-0", 1)]
    assert events[0].superseded == (f"a/{left}",) and events[0].cause == "reset: moving to a-0"


def test_bursts_report_every_checkpoint_once_in_order(repo_path, writer):
    threads = [f"t{i}" for i in range(8)]
    got = Collector()
    with GitCheckpointStore(repo_path, readonly=True) as reader, qvc.watch(reader, callback=got):
        done = writer("burst", threads=threads, n=15)
        events = got.until(lambda ev: len(ev) >= len(done), f"{len(done)} checkpoints")
        time.sleep(0.2)
    assert sorted(e.checkpoint_id for e in events) == sorted(done)
    assert {e.kind for e in got.events} == {"checkpoint"}
    for t in threads:  # per thread in commit order, each step once
        assert [e.step for e in got.events if e.thread_id == t] == list(range(15))


def test_packing_refs_is_not_a_deletion(repo_path, writer):
    threads = [f"p{i}" for i in range(6)]
    writer("burst", threads=threads, n=2, prefix="seed-")
    got = Collector()
    with GitCheckpointStore(repo_path, readonly=True) as reader, qvc.watch(reader, callback=got, hints="inotify"):
        for r in range(4):  # packing while a burst writes loose refs on top of packed ones
            run_git(repo_path, "pack-refs", "--all")
            done = writer("burst", threads=threads, n=3, prefix=f"r{r}-")
            writer("flush")  # the burst's refs are in git's files (else published after the packing)
            run_git(repo_path, "pack-refs", "--all")
            got.until(lambda ev, d=done: {e.checkpoint_id for e in ev} >= set(d), "the burst")
        time.sleep(0.3)
    assert {e.kind for e in got.events} == {"checkpoint"}, [summary(e) for e in got.events if e.kind != "checkpoint"]
    assert len(got.events) == 4 * 3 * len(threads)
    assert not any(name for name in os.listdir(repo_path / "refs" / "heads"))  # packed for real


def test_threads_filter_iterator_and_timeout(repo_path, writer):
    with GitCheckpointStore(repo_path, readonly=True) as reader:
        watcher = qvc.watch(reader, ["keep"], timeout=0.3)
        writer("put", thread="keep", id="k-0")
        writer("put", thread="skip", id="s-0")
        start = time.monotonic()
        events = list(watcher)  # ends at the timeout
        assert 0.2 < time.monotonic() - start < 5
        assert [summary(e) for e in events] == [("checkpoint", "keep", "k-0")]
        line = events[0].to_json()
        assert json.loads(json.dumps(line)) == line and line["kind"] == "checkpoint" and line["id"] == "k-0"
        assert set(line) == {"kind", "thread", "id", "commit", "previous", "step", "source", "from",
                             "superseded", "writes", "cause", "committed", "time", "timestamp"}
        writer("put", thread="skip", id="s-1")
        assert watcher.poll() == []  # another thread's change is read but not reported
        watcher.stop()
        assert list(watcher.events(timeout=5)) == []  # stopped: ends at once
        with pytest.raises(InvalidInputError):
            qvc.watch(reader, hints="fanotify")
        with pytest.raises(InvalidInputError):
            qvc.watch(reader, poll_interval=0)


def test_a_callback_error_is_raised_by_stop(repo_path, writer):
    def boom(event):
        raise RuntimeError(f"bad callback for {event.checkpoint_id}")

    with GitCheckpointStore(repo_path, readonly=True) as reader:
        watcher = qvc.watch(reader, callback=boom, hints="poll", poll_interval=0.02)
        writer("put", thread="a", id="a-0")
        deadline = time.monotonic() + WAIT
        while watcher.error is None and time.monotonic() < deadline:
            time.sleep(0.02)
        with pytest.raises(RuntimeError, match="bad callback for a-0"):
            watcher.stop()


FALLBACK = r"""
import sys
import qvc
from qvc import GitCheckpointStore
store = GitCheckpointStore(sys.argv[1], readonly=True)
watcher = qvc.watch(store, poll_interval=0.02)
print(f"HINTS {watcher.hints} {watcher.fallback_reason}", flush=True)
for event in watcher.events(timeout=30):
    print(f"EVENT {event.kind} {event.checkpoint_id}", flush=True)
    break
"""
UNSHARE = shutil.which("unshare")


def _own_user_namespace() -> bool:
    return UNSHARE is not None and subprocess.run(
        [UNSHARE, "-Ur", "sh", "-c", "echo 0 > /proc/sys/user/max_inotify_watches"],
        capture_output=True, timeout=30).returncode == 0


@pytest.mark.skipif(not _own_user_namespace(), reason="needs `unshare -Ur` to lower inotify limits in its own "
                                                      "user namespace (without touching the machine's)")
@pytest.mark.parametrize("limit", ["max_inotify_watches", "max_inotify_instances"])
def test_falls_back_to_polling_when_inotify_is_exhausted(repo_path, writer, limit):
    # In a user namespace of its own the process has its own inotify limits: set to 0 there,
    # inotify_add_watch fails with ENOSPC (watches) or inotify_init with EMFILE (instances).
    proc = subprocess.Popen([UNSHARE, "-Ur", "sh", "-c", f'echo 0 > /proc/sys/user/{limit} && exec "$0" "$@"',
                             sys.executable, "-c", FALLBACK, str(repo_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env())
    try:
        hints = proc.stdout.readline().rstrip("\n").split(" ", 2)
        assert hints[:2] == ["HINTS", "poll"], (hints, proc.stderr.read() if proc.poll() is not None else "")
        assert "limit reached" in hints[2], hints
        writer("put", thread="a", id="a-0")
        assert proc.stdout.readline().split() == ["EVENT", "checkpoint", "a-0"]
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


# -- the command line, as a real process ----------------------------------------------------------


class Command:
    """A qvc command as a real process; its output lines are read in the background."""

    def __init__(self, repo_path, *args: str, preexec=None):
        self.proc = subprocess.Popen([*QVC, "--repo", str(repo_path), *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=child_env(), preexec_fn=preexec)
        self._lines: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def line(self, timeout: float = WAIT) -> str | None:
        """The next line (``None`` if none came within ``timeout``); fails if the command ended."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            return None
        assert line is not None, f"qvc exited {self.proc.wait()}: {self.proc.stderr.read()}"
        return line

    def json_lines(self, n: int, skip: str = "ping") -> list[dict]:
        """The next ``n`` JSON lines whose thread is not ``skip``."""
        out = []
        while len(out) < n:
            line = self.line()
            assert line is not None, f"timed out; got {out}"
            obj = json.loads(line)
            if obj["thread"] != skip:
                out.append(obj)
        return out

    def until_live(self, writer, thread: str = "ping", prefix: str | None = None) -> str:
        """Put on ``thread`` until the command prints something: then it is surely watching."""
        for i in range(int(WAIT / 0.2)):
            writer("put", thread=thread, id=f"{prefix or thread}-{i}")
            line = self.line(0.2)
            if line is not None:
                return line
        raise AssertionError("qvc printed nothing")

    def interrupt(self, sig: int) -> str:
        """Send ``sig``; the command must end with status 0 and a silent stderr. Returns the rest of stdout."""
        self.proc.send_signal(sig)
        assert self.proc.wait(30) == 0
        assert self.proc.stderr.read() == ""
        self._reader.join(30)
        rest = []
        while (line := self._lines.get_nowait()) is not None:
            rest.append(line)
        return "".join(rest)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc.stderr.close()


@pytest.fixture
def command(repo_path):
    started: list[Command] = []

    def start(*args: str) -> Command:
        started.append(Command(repo_path, *args))
        return started[-1]

    yield start
    for c in started:
        c.close()


def test_qvc_watch_json_streams_until_sigint(writer, command):
    watch = command("watch", "--json")
    first = json.loads(watch.until_live(writer))
    assert first["kind"] == "checkpoint" and first["thread"] == "ping"
    writer("put", thread="a", id="a-0")
    assert [(e["kind"], e["thread"], e["id"]) for e in watch.json_lines(1)] == [("checkpoint", "a", "a-0")]
    writer("fork", thread="b", id="b-0", **{"from": "a-0"})
    fork, cp = watch.json_lines(2)
    assert (fork["kind"], fork["thread"], fork["id"], fork["from"]["thread"], fork["from"]["id"]) == (
        "fork", "b", "b-0", "a", "a-0")
    assert (cp["kind"], cp["thread"], cp["id"], cp["source"]) == ("checkpoint", "b", "b-0", "worker")
    writer("delete_thread", thread="b")
    [gone] = watch.json_lines(1)
    assert (gone["kind"], gone["thread"], gone["previous"]) == ("delete", "b", cp["commit"])
    assert watch.interrupt(signal.SIGINT) == ""


def test_qvc_watch_ends_on_sigint_when_started_with_sigint_ignored(repo_path, writer):
    """A shell starts a script's background job (`qvc watch &`) with SIGINT ignored; Ctrl-C
    and `kill -INT` still end the watch, quietly."""
    watch = Command(repo_path, "watch", preexec=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        watch.until_live(writer)
        watch.interrupt(signal.SIGINT)  # exit status 0, nothing on stderr (later events may still print)
    finally:
        watch.close()


def test_qvc_watch_piped_into_head_ends_quietly(repo_path, writer):
    # `qvc watch | head -1`: once head has gone, the next line hits a closed pipe
    script = f'{shlex.join(QVC)} --repo {shlex.quote(str(repo_path))} watch --poll 0.02 a 2>"$0" | head -1; ' \
             'echo "status ${PIPESTATUS[0]}"'
    err = repo_path.parent / "stderr"
    shell = subprocess.Popen(["bash", "-c", script, str(err)], stdout=subprocess.PIPE, text=True, env=child_env())
    try:
        for i in range(int(WAIT / 0.1)):
            writer("put", thread="a", id=f"a-{i}")
            if shell.poll() is not None:
                break
            time.sleep(0.1)
        out = shell.communicate(timeout=30)[0].splitlines()
        assert len(out) == 2 and out[1] == "status 0", out
        assert re.fullmatch(r"\d\d:\d\d:\d\d checkpoint a a-\d+ step 0 · worker [0-9a-f]{7}", out[0]), out
        assert err.read_text() == ""
    finally:
        if shell.poll() is None:
            shell.kill()
            shell.communicate()


def test_qvc_log_follow_prints_the_log_then_new_checkpoints(writer, command):
    for i in range(3):
        writer("put", thread="run", id=f"run-{i}")
    follow = command("log", "--follow", "--json", "run")
    old = [json.loads(follow.line()) for _ in range(3)]
    assert [e["id"] for e in old] == ["run-0", "run-1", "run-2"]  # oldest first, as `tail -f` reads
    assert {e["kind"] for e in old} == {"checkpoint"}
    writer("put", thread="other", id="x-0")  # another thread: not followed
    entry = json.loads(follow.until_live(writer, "run", "new"))
    assert entry["kind"] == "checkpoint" and entry["id"] == "new-0" and entry["source"] == "worker"
    assert entry["changed"] == ["id"]
    assert entry["thread"] == "run" and entry["heads"] == ["run"] and entry["parents"] == [old[-1]["commit"]]
    rest = follow.interrupt(signal.SIGTERM)
    assert all(json.loads(x)["thread"] == "run" for x in rest.splitlines())


def test_qvc_log_follow_shows_resets_deletions_and_forks_as_their_own_lines(writer, command):
    commits = [writer("put", thread="run", id=f"run-{i}") for i in range(4)]
    follow = command("log", "--follow", "--json", "-n", "2", "run")
    assert [json.loads(follow.line())["id"] for _ in range(2)] == ["run-2", "run-3"]  # the newest 2, oldest first
    writer("reset", thread="run", id="run-0")  # a rewind: step 3 is followed by a note, not silently by step 0
    [reset] = follow.json_lines(1)
    assert (reset["kind"], reset["thread"], reset["id"], reset["previous"]) == ("reset", "run", "run-0", commits[3])
    writer("put", thread="run", id="run-1b")
    [again] = follow.json_lines(1)
    assert (again["kind"], again["id"], again["parents"]) == ("checkpoint", "run-1b", [commits[0]])
    writer("delete_thread", thread="run")
    [gone] = follow.json_lines(1)
    assert (gone["kind"], gone["thread"]) == ("delete", "run")
    writer("put", thread="base", id="base-0")
    writer("fork", thread="run", id="run-f", **{"from": "base-0"})  # the name comes back as a fork
    fork, first = follow.json_lines(2)
    assert (fork["kind"], fork["from"]["thread"], fork["from"]["id"]) == ("fork", "base", "base-0")
    assert (first["kind"], first["id"]) == ("checkpoint", "run-f")
    writer("rename", thread="run", to="run-renamed")
    [renamed] = follow.json_lines(1)
    assert (renamed["kind"], renamed["thread"], renamed["from"]["thread"]) == ("rename", "run-renamed", "run")
    assert follow.interrupt(signal.SIGTERM) == ""


def test_qvc_log_follow_text_notes_a_reset(writer, command):
    for i in range(3):
        writer("put", thread="run", id=f"run-{i}")
    follow = command("log", "--follow", "--oneline", "run")
    assert [follow.line().split()[1] for _ in range(3)] == ["run-0", "run-1", "run-2"]
    writer("reset", thread="run", id="run-0")
    line = follow.line()
    assert re.match(r"reset: run [0-9a-f]{7} -> [0-9a-f]{7} run-0 step 0", line), line
    writer("put", thread="run", id="run-1b")
    assert follow.line().split()[1] == "run-1b"
    follow.interrupt(signal.SIGINT)


def test_qvc_log_follow_text_on_a_new_thread(repo_path, writer, command):
    follow = command("log", "--follow", "--oneline", "later")
    line = follow.until_live(writer, "later")
    # decorated when it is the head as it is printed (a later put may land before the log is read)
    assert re.fullmatch(r"[0-9a-f]{7} later-(\d+) step 0 · worker · [12] changed( \(later\))?\n", line), line
    follow.interrupt(signal.SIGINT)
    bad = subprocess.run([*QVC, "--repo", str(repo_path), "log", "--follow", "--all"], capture_output=True,
                         text=True, env=child_env(), timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("qvc: --follow") and "Traceback" not in bad.stderr


def test_watch_in_process_sees_own_store_writes(repo_path):
    with GitCheckpointStore(repo_path) as store:
        with qvc.watch(store, hints="poll", poll_interval=0.01) as watcher:
            cp = Checkpoint(id="own-0", thread_id="me", step=0, state_data={"x": 1})
            store.put(CheckpointConfig("me"), cp, {"source": "loop"}, {})
            events = watcher.poll()
        assert [summary(e) for e in events] == [("checkpoint", "me", "own-0")]
        assert events[0].source == "loop" and events[0].commit == store.head("me")
