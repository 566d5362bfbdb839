"""``qvc remote/push/fetch/clone`` as real processes: JSON, exit codes, one-line errors, progress on a terminal."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

import test_full_disk  # noqa: E402
from git_servers import GitDaemon  # noqa: E402
from helpers import put, qvc, qvc_json, run_git  # noqa: E402
from test_cli_process import run_in_pty  # noqa: E402

from qvc import GitCheckpointStore  # noqa: E402

small_fs = test_full_disk.small_fs  # the fixture: a small tmpfs


@pytest.fixture(autouse=True)
def isolated_git(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)


@pytest.fixture
def setup(tmp_path):
    """A repository with two threads (run-1 with 3 checkpoints, run-2) and an empty bare server."""
    repo = tmp_path / "a.qvc"
    with GitCheckpointStore(repo) as store:
        for i in range(3):
            put(store, "run-1", f"c{i}", i, {"n": i})
        put(store, "run-2", "r0", 0, {"n": 0})
    server = tmp_path / "hub.git"
    run_git(None, "init", "-q", "--bare", str(server))
    return repo, server


def published(tmp_path, setup, copy: str) -> tuple[str, str, str]:
    """``setup``'s repository pushed to its server as origin, and a clone of the server at ``copy``:
    ``(repository, server, clone)`` as strings."""
    repo, server = setup
    qvc("--repo", str(repo), "remote", "add", "origin", str(server))
    qvc("--repo", str(repo), "push", "-q")
    qvc("clone", "-q", str(server), str(tmp_path / copy))
    return str(repo), str(server), str(tmp_path / copy)


def test_remote_push_clone_fetch_json(tmp_path, setup):
    repo, server = setup
    r = str(repo)
    assert qvc_json("--repo", r, "remote", "add", "origin", str(server)) == {
        "name": "origin", "url": str(server), "replicate": False}
    assert qvc("--repo", r, "remote", "list", "-v").stdout == f"origin\t{server}\n"
    pushed = qvc_json("--repo", r, "push")
    assert pushed["pushed"] == 2 and pushed["rejected"] == 0 and pushed["objects"] > 0
    assert {u["thread"] for u in pushed["updates"]} == {"run-1", "run-2"}
    assert qvc_json("--repo", r, "push")["pushed"] == 0
    assert "Everything up to date" in qvc("--repo", r, "push").stdout
    cloned = qvc_json("clone", str(server), cwd=tmp_path)
    assert cloned["path"] == str(tmp_path / "hub.qvc") and cloned["threads"] == 2
    b = str(tmp_path / "hub.qvc")
    assert [e["id"] for e in qvc_json("--repo", b, "log", "run-1")] == ["c2", "c1", "c0"]
    assert qvc("--repo", b, "fsck").returncode == 0
    with GitCheckpointStore(repo) as store:
        put(store, "run-1", "c3", 3, {"n": 3})
    assert "run-1" in qvc("--repo", r, "push", "origin", "run-1").stdout
    fetched = qvc_json("--repo", b, "fetch")
    assert [u["ref"] for u in fetched["updates"]] == ["refs/remotes/origin/run-1"]
    assert [e["id"] for e in qvc_json("--repo", b, "log", "-n", "2", "origin/run-1")] == ["c3", "c2"]
    made = qvc_json("--repo", b, "checkout", "-b", "mine", "origin/run-1")
    assert made["thread"] == "mine"
    assert qvc_json("--repo", b, "show", "mine~1")["id"] == "c3"
    assert "removed" in qvc("--repo", b, "remote", "remove", "origin").stdout.lower()
    assert qvc_json("--repo", b, "remote", "list") == []


def test_errors_are_one_line_with_exit_codes(tmp_path, setup):
    repo, server = setup
    r = str(repo)
    proc = qvc("--repo", r, "push", "nosuch", check=3)
    assert proc.stderr.count("\n") == 1 and "no remote named 'nosuch'" in proc.stderr
    qvc("--repo", r, "fetch", "nosuch", check=3)
    qvc("--repo", r, "remote", "add", "dead", "git://127.0.0.1:9/x.git")
    proc = qvc("--repo", r, "push", "dead", check=1)
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("qvc: ") and "127.0.0.1" in proc.stderr
    qvc("--repo", r, "remote", "add", "dead", "elsewhere", check=4)
    qvc("--repo", r, "remote", "add", "bad name", "elsewhere", check=2)
    qvc("clone", str(tmp_path / "none.git"), str(tmp_path / "x.qvc"), check=1)
    assert not (tmp_path / "x.qvc").exists()
    # a server that refuses one ref: exit 4, that ref listed with the server's reason, the rest pushed
    qvc("--repo", r, "remote", "add", "origin", str(server))
    qvc("--repo", r, "push", "-q")
    run_git(server, "config", "receive.denyNonFastForwards", "true")
    qvc("--repo", r, "checkout", "run-1")
    qvc("--repo", r, "reset", "run-1~2")
    with GitCheckpointStore(repo) as store:
        put(store, "run-2", "r1", 1, {"n": 1})
    proc = qvc("--repo", r, "push", check=4)
    assert proc.stderr.count("\n") == 1 and "refs/heads/run-1" in proc.stderr
    assert " ! [rejected]   run-1 (" in proc.stdout and "non-fast-forward" in proc.stdout
    assert "run-2" in proc.stdout
    assert run_git(server, "rev-parse", "refs/heads/run-2").stdout.strip() == qvc_json(
        "--repo", r, "show", "run-2")["commit"]
    data = qvc("--repo", r, "push", "--json", check=4)
    assert '"rejected": 1' in data.stdout


def test_progress_on_a_terminal_only_for_slow_transfers(tmp_path, setup):
    repo, server = setup
    hook = server / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\ncat >/dev/null\nsleep 1.6\n")  # a slow server
    hook.chmod(0o755)
    daemon = GitDaemon(str(tmp_path)).start()
    try:
        url = daemon.url("hub.git")
        qvc("--repo", str(repo), "remote", "add", "origin", url)
        code, drawn = run_in_pty(["--repo", str(repo), "push"], tmp_path, stderr_tty=True)
        assert code == 0, drawn
        assert "push origin: " in drawn and "objects" in drawn and "\x1b[K" in drawn
        with GitCheckpointStore(repo) as store:
            put(store, "run-1", "c3", 3, {"n": 3})
        code, drawn = run_in_pty(["--repo", str(repo), "push", "-q"], tmp_path, stderr_tty=True)
        assert code == 0 and drawn == ""
        with GitCheckpointStore(repo) as store:
            put(store, "run-1", "c4", 4, {"n": 4})
        piped = qvc("--repo", str(repo), "push")  # stderr is a pipe: no bar
        assert piped.stderr == "" and "run-1" in piped.stdout
        code, drawn = run_in_pty(["clone", url, str(tmp_path / "fast.qvc")], tmp_path, stderr_tty=True)
        assert code == 0 and "clone origin" not in drawn  # under a second: no bar
    finally:
        daemon.stop()


def test_push_refuses_to_undo_a_time_travel_the_fetch_reported(tmp_path, setup):
    """A replica that fetched a time travel made elsewhere and did not follow it: a plain push
    would bring the remote's superseded line back as the head (a fast-forward for git). Refused
    (exit 4, the reason on the ref's line) unless --force or --force-with-lease, as git refuses a
    non-fast-forward."""
    r, server, replica = published(tmp_path, setup, "replica.qvc")
    qvc("--repo", r, "checkout", "run-1")
    qvc("--repo", r, "reset", "run-1~2")  # the time travel, made on a
    assert "(time travel" in qvc("--repo", r, "push").stdout
    rewound = run_git(server, "rev-parse", "refs/heads/run-1").stdout.strip()
    # before the replica fetched, its lease is stale: the reason is that, not --force's advice
    proc = qvc("--repo", replica, "push", "--force-with-lease", check=4)
    assert "stale info: the remote's refs/heads/run-1 is at" in proc.stdout and "fetch first" in proc.stdout
    assert "push --force" not in proc.stdout
    assert "(time travel" in qvc("--repo", replica, "fetch").stdout  # reported to the replica
    proc = qvc("--repo", replica, "push", check=4)
    assert " ! [rejected]   run-1 (the remote's run-1 was time-travelled back to" in proc.stdout
    assert "push --force" in proc.stdout and proc.stderr.count("\n") == 1
    assert run_git(server, "rev-parse", "refs/heads/run-1").stdout.strip() == rewound
    qvc("--repo", replica, "push", "origin", "run-1", check=4)  # naming the thread: the same
    # --force-with-lease: the remote is where the fetch left origin/run-1, so it goes
    made = qvc_json("--repo", replica, "push", "--force-with-lease")
    assert [u["thread"] for u in made["updates"]] == ["run-1"]
    assert run_git(server, "rev-parse", "refs/heads/run-1").stdout.strip() == qvc_json(
        "--repo", replica, "show", "run-1")["commit"]
    # the time travel made here and stepped back from: a deliberate fast-forward, as in git
    qvc("--repo", r, "fetch", "-q")
    qvc("--repo", r, "reset", "run-1@{1}")  # a is back where the replica pushed
    qvc("--repo", replica, "checkout", "run-1")
    qvc("--repo", replica, "reset", "run-1~1")
    qvc("--repo", replica, "push", "-q")
    qvc("--repo", replica, "reset", "run-1@{1}")
    qvc("--repo", replica, "push", "-q")


def test_push_force_keeps_the_remote_line(tmp_path, setup):
    """--force over a remote head that is no ancestor and kept by no line here: pushed, the
    remote's head kept as a superseded line there (nothing is lost); without it, refused."""
    r, server, other = published(tmp_path, setup, "other.qvc")
    with GitCheckpointStore(other) as store:
        put(store, "run-1", "x3", 3, {"n": 30})
    qvc("--repo", other, "push", "-q")
    qvc("--repo", r, "fetch", "-q")
    with GitCheckpointStore(r) as store:
        put(store, "run-1", "c3", 3, {"n": 3})
    theirs = run_git(server, "rev-parse", "refs/heads/run-1").stdout.strip()
    assert "fetch first" in qvc("--repo", r, "push", check=4).stdout
    assert " + " in qvc("--repo", r, "push", "--force").stdout
    assert run_git(server, "rev-parse", f"refs/qvc/superseded/run-1/{theirs}").stdout.strip() == theirs
    assert run_git(server, "rev-parse", "refs/heads/run-1").stdout.strip() == qvc_json(
        "--repo", r, "show", "run-1")["commit"]


def test_push_u_records_the_upstream(tmp_path, setup):
    repo, server = setup
    r = str(repo)
    qvc("--repo", r, "remote", "add", "backup", str(server))
    qvc("--repo", r, "checkout", "run-1")
    assert "set up to track backup/run-1" in qvc("--repo", r, "push", "-u", "backup", "run-1").stdout
    assert run_git(repo, "config", "branch.run-1.remote").stdout.strip() == "backup"
    assert run_git(repo, "config", "branch.run-1.merge").stdout.strip() == "refs/heads/run-1"
    with GitCheckpointStore(repo) as store:
        put(store, "run-1", "c3", 3, {"n": 3})
    assert f"To {server}" in qvc("--repo", r, "push").stdout  # no REMOTE: the upstream, not origin


def test_fetch_all(tmp_path, setup):
    repo, server = setup
    r = str(repo)
    second = tmp_path / "second.git"
    run_git(None, "init", "-q", "--bare", str(second))
    for name, url in (("one", server), ("two", second)):
        qvc("--repo", r, "remote", "add", name, str(url))
        qvc("--repo", r, "push", "-q", name)
    b = str(tmp_path / "b.qvc")
    qvc("clone", "-q", "-o", "one", str(server), b)
    qvc("--repo", b, "remote", "add", "two", str(second))
    text = qvc("--repo", b, "fetch", "--all").stdout
    assert "one: up to date" in text and f"From {second}" in text and "two/run-1" in text
    assert [x["remote"] for x in qvc_json("--repo", b, "fetch", "--all")] == ["one", "two"]
    qvc("--repo", b, "fetch", "--all", "one", check=2)


def test_clone_head_names_a_thread(tmp_path, setup):
    """A server whose HEAD names no thread (a bare `git init`: an unborn main): the clone's HEAD
    is the most recently written thread, so the first `qvc log` works; a HEAD naming a thread wins."""
    r, server, copy = published(tmp_path, setup, "copy.qvc")
    assert qvc_json("--repo", copy, "status")["thread"] == "run-2"
    assert [e["id"] for e in qvc_json("--repo", copy, "log")] == ["r0"]
    run_git(server, "symbolic-ref", "HEAD", "refs/heads/run-1")
    again = str(tmp_path / "again.qvc")
    qvc("clone", "-q", str(server), again)
    assert qvc_json("--repo", again, "status")["thread"] == "run-1"
    assert qvc("--repo", again, "log", "--oneline").stdout.count("\n") == 3


class SilentServer:
    """A TCP server on 127.0.0.1 that accepts connections and never answers: a git:// remote
    that hangs, so a clone, fetch or push is caught in the middle. ``connected`` is set when git
    has connected and asked for this server's repository (a path no other test uses: a client
    of another test that reaches a recycled port is turned away); ``closed`` when git let go of
    the connection (it was stopped)."""

    def __init__(self):
        import secrets
        import socket
        import threading

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.path = f"/hub-{secrets.token_hex(6)}.git"
        self.url = f"git://127.0.0.1:{self.sock.getsockname()[1]}{self.path}"
        self.connected, self.closed = threading.Event(), threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            conn, _ = self.sock.accept()
            with conn:
                conn.settimeout(5)  # a client that connects and says nothing is not git either
                try:
                    if self.path.encode() not in self._first_line(conn):
                        continue
                except TimeoutError:
                    continue
                conn.settimeout(None)
                self.connected.set()
                while conn.recv(4096):
                    pass
            self.closed.set()
            return

    @staticmethod
    def _first_line(conn) -> bytes:
        """The client's first pkt-line (git's "004agit-upload-pack /hub-....git\\0host=..."), in as
        many reads as it takes: git may send its length apart."""
        data = b""
        while chunk := conn.recv(4096):
            data += chunk
            try:
                if len(data) >= 4 and len(data) >= int(data[:4], 16):
                    break
            except ValueError:  # not a pkt-line: a client of another test
                break
        return data

    def holders(self) -> list[str]:
        """The command lines of the processes still running with this server's URL in them."""
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if self.url in cmdline:
                found.append(f"{pid}: {cmdline}")
        return found


@pytest.mark.parametrize("command", ["clone", "fetch", "push"])
def test_ctrl_c_exits_130_and_leaves_nothing(tmp_path, setup, command):
    """SIGINT while git waits on the remote: exit 130 (git's), one line, git stopped with it,
    and no clone work folder (`.qvc-clone-*`) nor destination left; a fetch or push changes nothing."""
    import signal
    import subprocess

    from helpers import QVC, env

    repo, _ = setup
    server = SilentServer()
    if command == "clone":
        args = ["clone", server.url, str(tmp_path / "copy.qvc")]
    else:
        qvc("--repo", str(repo), "remote", "add", "origin", server.url)
        args = ["--repo", str(repo), command]
    before = run_git(repo, "for-each-ref").stdout
    # SIGINT as a terminal delivers it: a suite started in the background of a shell script
    # (`pytest &`) runs with SIGINT ignored, which its children would inherit.
    proc = subprocess.Popen([*QVC, *args], cwd=tmp_path, env=env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert server.connected.wait(30)
        os.kill(proc.pid, signal.SIGINT)  # qvc alone: git must be stopped by qvc
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert err == "qvc: interrupted\n"
    assert server.closed.wait(10), server.holders()  # git went down with qvc
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".qvc-clone-") or n == "copy.qvc"]
    assert run_git(repo, "for-each-ref").stdout == before


def test_a_ctrl_c_while_git_starts_waits_until_git_can_be_stopped(tmp_path):
    """A SIGINT inside `subprocess.Popen`, after its fork, would leave git running with no one to
    stop it (what made the test above fail once under load): transfers start git with Ctrl-C
    held, and raise it once the process is theirs to kill. Here the SIGINT arrives mid-block."""
    import signal
    import subprocess

    from helpers import child_env

    script = (
        "import os, signal, sys\n"
        "from qvc.remotes.transfer import interrupt_held\n"
        "try:\n"
        "    with interrupt_held():\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        for _ in range(10000): pass  # bytecodes, where Python would run the handler\n"
        "        print('held', flush=True)\n"
        "except KeyboardInterrupt:\n"
        "    print('raised after the block', flush=True)\n"
        "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)\n")
    proc = subprocess.run([sys.executable, "-c", script], env=child_env(), capture_output=True, text=True,
                          timeout=60, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout.split("\n") == ["held", "raised after the block", "True", ""], proc.stdout + proc.stderr


def test_clone_errors_name_the_path_given(tmp_path, setup, small_fs):
    """A clone that fails inside its work folder (here: the destination's file system is full)
    names the destination the user typed, never `.qvc-clone-XXXX`, and leaves nothing behind."""
    repo, server = setup
    qvc("--repo", str(repo), "remote", "add", "origin", str(server))
    qvc("--repo", str(repo), "push", "-q")
    test_full_disk.fill(small_fs)
    proc = qvc("clone", str(server), "fs/copy.qvc", cwd=tmp_path, check=1)
    assert proc.stderr.count("\n") == 1 and ".qvc-clone-" not in proc.stderr, proc.stderr
    assert "fs/copy.qvc" in proc.stderr and "No space left on device" in proc.stderr
    assert os.listdir(small_fs) == ["ballast"]


def test_clone_names_the_directory_and_the_url_as_typed(tmp_path):
    """As git echoes what was typed: a relative destination and a relative URL stay relative in
    the one error line, never made absolute."""
    (tmp_path / "dd").mkdir()
    (tmp_path / "dd" / "mine").write_text("x")
    run_git(None, "init", "-q", "--bare", str(tmp_path / "srv.git"))
    proc = qvc("clone", "srv.git", "dd", cwd=tmp_path, check=2)
    assert proc.stderr == "qvc: dd exists and is not empty\n"
    proc = qvc("clone", "../nowhere/none.git", "qq", cwd=tmp_path, check=1)
    assert proc.stderr.startswith("qvc: clone from ../nowhere/none.git failed: '../nowhere/none.git' ")
    assert str(tmp_path) not in proc.stderr and not (tmp_path / "qq").exists()


def test_push_to_a_full_remote_says_so(tmp_path, setup, small_fs):
    """A remote whose disk is full: git says only "unpacker error" per ref. qvc names the full
    disk in one line and exits 1 (a StorageError, as a full local disk), not 4 (a conflict);
    once there is room, the push goes through."""
    repo, _ = setup
    server = small_fs / "hub.git"
    run_git(None, "init", "-q", "--bare", str(server))
    qvc("--repo", str(repo), "remote", "add", "origin", str(server))
    ballast = test_full_disk.fill(small_fs)
    proc = qvc("--repo", str(repo), "push", check=1)
    assert proc.stderr.count("\n") == 1 and "unpacker error" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("qvc: push to origin failed: remote: no space left on device (")
    proc = qvc("--repo", str(repo), "push", "--json", check=1)
    assert "no space left on device" in proc.stderr
    ballast.unlink()
    assert qvc_json("--repo", str(repo), "push")["pushed"] == 2
