"""The ``qvc`` command as a real process: the console script, pipes, terminals, a live writer, scale.

The command is the installed console script next to the interpreter (``pip install -e .``
puts ``qvc`` there) or, when this environment does not have it, ``python -m qvc``;
:func:`test_the_installed_console_script` needs the real script and is skipped, saying why,
without it. Every process imports qvc from this checkout (``child_env``).
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from helpers import QVC, SCRIPT, child_env, env, put, qvc, qvc_json, run_git  # noqa: E402

from qvc import GitCheckpointStore  # noqa: E402

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture
def repo(tmp_path) -> Path:
    """``work/.qvc`` in tmp_path: run-1 (4 checkpoints, HEAD) and run-2 (1)."""
    path = tmp_path / "work" / ".qvc"
    with GitCheckpointStore(path) as store:
        for i in range(4):
            put(store, "run-1", f"c{i}", i, {"messages": [f"m{k}" for k in range(i + 1)], "n": i})
        put(store, "run-2", "r0", 0, {"n": 0})
        store.checkout("run-1")
    return path


# -- the console script ---------------------------------------------------------------------------


@pytest.mark.skipif(SCRIPT is None, reason=f"the qvc console script is not installed next to {sys.executable} "
                                           "(run `pip install -e .`); the other tests use `python -m qvc`")
def test_the_installed_console_script(repo):
    proc = subprocess.run([SCRIPT, "--version"], env=env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("qvc, version ")
    proc = subprocess.run([SCRIPT, "log", "--oneline"], cwd=repo.parent, env=env(), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 4
    proc = subprocess.run([SCRIPT, "show", "nope"], cwd=repo.parent, env=env(), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 3 and proc.stderr.startswith("qvc: ") and proc.stderr.count("\n") == 1


def test_python_dash_m_qvc(repo):
    proc = subprocess.run([sys.executable, "-m", "qvc", "status", "--json"], cwd=repo.parent, env=env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and json.loads(proc.stdout)["thread"] == "run-1"


# -- errors ---------------------------------------------------------------------------------------


def test_errors_are_one_line_without_traceback(repo, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    cases = [
        (["status"], tmp_path / "elsewhere", 128),
        (["show", "nope"], repo.parent, 3),
        (["show", "--field", "nope"], repo.parent, 3),
        (["log", "run-1~9"], repo.parent, 3),
        (["branch", "run-2"], repo.parent, 4),
        (["branch", "-d", "run-1"], repo.parent, 2),
        (["reflog", "missing"], repo.parent, 3),
        (["show", "c"], repo.parent, 3),
        (["--repo", str(tmp_path / "elsewhere"), "log"], repo.parent, 128),
    ]
    for args, cwd, code in cases:
        proc = qvc(*args, cwd=cwd, check=code)
        assert proc.stderr.startswith("qvc: ") and proc.stderr.count("\n") == 1, (args, proc.stderr)
        assert proc.stdout == "", args
    usage = qvc("log", "--bogus", cwd=repo.parent, check=2)
    assert usage.stderr.startswith("qvc: No such option") and usage.stderr.count("\n") == 1, usage.stderr


def test_corruption_is_exit_5_one_line(repo):
    blob = run_git(repo, "rev-parse", "run-1:n").stdout.strip()
    packs = list((repo / "objects" / "pack").glob("*.pack"))
    for pack in packs:  # explode the packs so that one object can be damaged alone
        data = pack.read_bytes()
        pack.unlink()
        pack.with_suffix(".idx").unlink()
        run_git(repo, "unpack-objects", "-q", input=data, text=False)
    obj = repo / "objects" / blob[:2] / blob[2:]
    obj.chmod(0o644)
    obj.write_bytes(b"not zlib at all")
    proc = qvc("show", "run-1", "--field", "n", cwd=repo.parent, check=5)
    assert proc.stderr.startswith("qvc: ") and proc.stderr.count("\n") == 1, proc.stderr
    proc = qvc("fsck", cwd=repo.parent, check=5)
    assert [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert proc.stdout.rstrip().endswith("problem(s)")


# -- pipes ----------------------------------------------------------------------------------------


def test_log_piped_into_head_ends_quietly(scale):
    """`qvc log | head -1` on a 5,000-checkpoint thread: the reader leaves early; no traceback, exit 0."""
    proc = subprocess.run(["bash", "-c", 'set -o pipefail; "$@" log long | head -1', "bash", *QVC],
                          cwd=scale, env=env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "checkpoint L04999 (HEAD -> long)\n"
    assert proc.stderr == ""
    # the same, watching the writer's own status
    p = subprocess.Popen([*QVC, "--repo", str(scale), "log", "--oneline", "long"], env=env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    first = p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 0, err
    assert first.split()[1] == b"L04999" and err == ""


def test_no_pager_and_no_colors_when_piped(repo):
    out = qvc("log", cwd=repo.parent, QVC_PAGER="sed -e s/^/PAGED:/", PAGER="sed -e s/^/PAGED:/", LINES="3").stdout
    assert "PAGED:" not in out and ANSI.search(out) is None
    assert ANSI.search(qvc("--color=always", "log", cwd=repo.parent).stdout)


# -- terminals ------------------------------------------------------------------------------------


def run_in_pty(args: list[str], cwd: Path, stdin_tty: bool = False, stderr_tty: bool = False,
               **extra: str) -> tuple[int, str]:
    """Run with stdout (and optionally stdin and stderr) on a pseudo-terminal; return (status,
    what it drew there). A traceback on a piped stderr fails the test."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([*QVC, *args], cwd=cwd, env=env(**{"TERM": "xterm", **extra}), stdout=slave,
                                stderr=slave if stderr_tty else subprocess.PIPE,
                                stdin=slave if stdin_tty else subprocess.DEVNULL)
    finally:
        os.close(slave)
    chunks = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(master)
    code = proc.wait(timeout=60)
    if not stderr_tty:
        err = proc.stderr.read().decode()
        assert "Traceback" not in err, err
    return code, b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")


def test_colors_on_a_terminal_unless_no_color(repo):
    code, out = run_in_pty(["log", "--oneline"], repo.parent)
    assert code == 0 and ANSI.search(out), out
    code, out = run_in_pty(["branch"], repo.parent)
    assert code == 0 and ANSI.search(out), out
    code, out = run_in_pty(["log", "--oneline"], repo.parent, NO_COLOR="1")
    assert code == 0 and ANSI.search(out) is None and " c3 " in out
    code, out = run_in_pty(["--color=never", "diff", "c3"], repo.parent)
    assert code == 0 and ANSI.search(out) is None and "messages" in out
    code, out = run_in_pty(["log", "--oneline"], repo.parent, TERM="dumb")
    assert code == 0 and ANSI.search(out) is None


def test_long_output_is_paged_on_a_terminal(repo):
    pager = "sed -e s/^/PAGED:/"
    code, out = run_in_pty(["log"], repo.parent, stdin_tty=True, QVC_PAGER=pager, LINES="5")
    assert code == 0 and "PAGED:checkpoint c0" in ANSI.sub("", out), out
    code, out = run_in_pty(["--no-pager", "log"], repo.parent, stdin_tty=True, QVC_PAGER=pager, LINES="5")
    assert code == 0 and "PAGED:" not in out and "checkpoint c0" in ANSI.sub("", out)
    code, out = run_in_pty(["log", "-n", "1"], repo.parent, stdin_tty=True, QVC_PAGER=pager, LINES="40")
    assert code == 0 and "PAGED:" not in out  # fits the screen


# -- shell completion -----------------------------------------------------------------------------


def complete(words: str, cword: int, cwd: Path) -> list[str]:
    proc = qvc(cwd=cwd, _QVC_COMPLETE="bash_complete", COMP_WORDS=words, COMP_CWORD=str(cword))
    return [ln for ln in proc.stdout.splitlines() if ln]


def test_completion_of_thread_names(repo, tmp_path):
    with GitCheckpointStore(repo) as store:
        put(store, "other thread", "o0", 0, {"x": 1})
    work = repo.parent
    assert complete("qvc log ru", 2, work) == ["plain,run-1", "plain,run-2"]
    assert complete("qvc checkout ", 2, work) == ["plain,HEAD", "plain,other thread", "plain,run-1", "plain,run-2"]
    assert complete("qvc diff run-1 o", 3, work) == ["plain,other thread"]
    (tmp_path / "away").mkdir()
    assert complete("qvc log r", 2, tmp_path / "away") == []  # no repository: nothing, no error
    assert complete(f"qvc -C {work} log r", 4, tmp_path / "away") == ["plain,run-1", "plain,run-2"]
    assert complete(f"qvc --repo {repo} show run-", 4, tmp_path / "away") == ["plain,run-1", "plain,run-2"]
    assert "plain,checkout" in complete("qvc ch", 1, work)


def test_completion_script_drives_bash(repo, tmp_path):
    """The printed bash script, sourced in a real bash, completes thread names."""
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    script = qvc("completion", "bash").stdout
    runner = tmp_path / "qvc-cmd"
    runner.write_text("#!/bin/sh\nexec " + " ".join(f"'{a}'" for a in QVC) + ' "$@"\n')
    runner.chmod(0o755)
    driver = (script + '\nCOMP_WORDS=(qvc log run-); COMP_CWORD=2\n_qvc_completion "$QVC_RUNNER"\n'
              + 'printf "%s\\n" "${COMPREPLY[@]}"\n')
    proc = subprocess.run(["bash", "-c", driver], cwd=repo.parent, env=env(QVC_RUNNER=str(runner)),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["run-1", "run-2"]


# -- a repository written by a live agent ---------------------------------------------------------

WRITER = r"""
import os, sys
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
path, stop = sys.argv[1], sys.argv[2]
with GitCheckpointStore(path) as store:
    i = 0
    while True:
        state = {"step": i, "items": list(range(i)), "twin": i, "status": "running"}
        store.put(CheckpointConfig("w"), Checkpoint(id=f"w{i:06d}", thread_id="w", step=i, state_data=state),
                  {"source": "loop", "step": i})
        if i == 0:
            print("ready", flush=True)
        i += 1
        if os.path.exists(stop):
            break
print(i, flush=True)
"""


UNPUBLISHED_WRITER = r"""
import sys
import qvc.plumbing.repository as repository
repository.PUBLISH_LAG = 3600.0  # its puts stay in the staging database while it lives
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
store = GitCheckpointStore(sys.argv[1])
for i in range(3):
    store.put(CheckpointConfig("w"), Checkpoint(id=f"w{i:06d}", thread_id="w", step=i, state_data={"step": i}),
              {"source": "loop", "step": i})
print(store.head("w"), flush=True)
sys.stdin.read()  # alive, its puts acknowledged and not published, until the test closes stdin
store.close()
"""


def test_every_read_command_sees_puts_not_yet_in_gits_files(tmp_path):
    """A writer whose puts are acknowledged (committed in the staging database) but not yet
    published to git's files: status, log, show and branch read its head, as every qvc reader
    must (HEAD names the thread; the ref's value is the staged one, not git's file)."""
    path = tmp_path / ".qvc"
    with GitCheckpointStore(path) as store:
        put(store, "w", "w-old", 0, {"step": -1})
    qvc("checkout", "w", cwd=tmp_path)
    writer = subprocess.Popen([sys.executable, "-c", UNPUBLISHED_WRITER, str(path)], env=child_env(),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        head = writer.stdout.readline().strip()
        assert len(head) == 40, writer.stderr.read()
        assert run_git(path, "rev-parse", "refs/heads/w").stdout.strip() != head  # git's file lags
        assert qvc_json("status", cwd=tmp_path)["head"] == head
        assert qvc_json("status", cwd=tmp_path)["head_step"] == 2
        assert qvc_json("log", "-n", "1", cwd=tmp_path)[0]["commit"] == head
        assert qvc_json("show", cwd=tmp_path)["id"] == "w000002"
        assert qvc_json("show", "HEAD", cwd=tmp_path)["id"] == "w000002"
        assert {b["thread"]: b["head"] for b in qvc_json("branch", cwd=tmp_path)}["w"] == head
    finally:
        writer.stdin.close()
        writer.wait(timeout=60)
    assert run_git(path, "rev-parse", "refs/heads/w").stdout.strip() == head  # published at its close


def check_show(data: dict) -> int:
    step = data["step"]
    assert data["id"] == f"w{step:06d}" and data["thread"] == "w"
    assert data["state"] == {"items": list(range(step)), "status": "running", "step": step, "twin": step}
    assert data["metadata"] == {"source": "loop", "step": step}
    if step:
        assert data["parent"] == {"thread": "w", "id": f"w{step - 1:06d}"}
    return step


def test_reads_while_another_process_writes(tmp_path):
    path = tmp_path / ".qvc"
    GitCheckpointStore(path).close()
    stop = tmp_path / "stop"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(stop)], env=child_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "ready", writer.stderr.read()
        qvc("checkout", "w", cwd=tmp_path)
        seen = []
        for round_ in range(4):
            log = qvc_json("log", "-n", "30", "w", cwd=tmp_path)
            steps = [e["step"] for e in log]
            assert steps == list(range(steps[0], steps[0] - len(steps), -1)) and steps[-1] >= 0
            assert [e["id"] for e in log] == [f"w{s:06d}" for s in steps]
            for e in log:
                assert e["changed"] == (["items", "status", "step", "twin"] if e["step"] == 0
                                        else ["items", "step", "twin"])
                assert e["status"] == "running"
            for e, older in zip(log, log[1:], strict=False):
                assert e["parents"] == [older["commit"]]
            step = check_show(qvc_json("show", "w", cwd=tmp_path))
            assert step >= steps[0]
            if round_ == 0:
                check_show(qvc_json("show", "HEAD~1", cwd=tmp_path))
                assert 1 <= len(qvc("log", "--oneline", "-n", "5", cwd=tmp_path).stdout.splitlines()) <= 5
            diff = {d["field"]: d for d in qvc_json("diff", "w", cwd=tmp_path)}
            assert set(diff) == {"items", "step", "twin"}
            (add,) = diff["items"]["changes"]
            assert add["op"] == "add" and add["path"] == [add["new"]]
            assert diff["twin"]["changes"][0]["new"] == diff["step"]["changes"][0]["new"] == add["new"] + 1
            st = qvc_json("status", cwd=tmp_path)
            assert st["thread"] == "w" and st["threads"] == 1 and st["head_step"] >= step
            seen.append(st["head_step"])
        stop.write_text("")
        out, err = writer.communicate(timeout=60)
    finally:
        if writer.poll() is None:
            stop.write_text("")
            try:
                writer.wait(timeout=30)
            except subprocess.TimeoutExpired:
                writer.kill()
                writer.wait()
    assert writer.returncode == 0, err
    total = int(out.split()[-1])
    assert seen[-1] > seen[0], f"the writer did not move during the reads: {seen}"
    full = qvc_json("log", "w", cwd=tmp_path)
    assert [e["step"] for e in full] == list(range(total - 1, -1, -1))
    assert qvc("fsck", cwd=tmp_path).stdout.rstrip().endswith(": ok")


# -- scale: 1,000 threads and a thread of 5,000 checkpoints ---------------------------------------

LONG = 5000
THREADS = 1000
BUILD_LONG = r"""
import sys
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
with GitCheckpointStore(sys.argv[1], fsync=False, durability="exit") as store:
    for i in range(int(sys.argv[2])):
        state = {"n": i, "messages": ["m%d" % i], "status": "running" if i < int(sys.argv[2]) - 1 else "done"}
        store.put(CheckpointConfig("long"), Checkpoint(id="L%05d" % i, thread_id="long", step=i, state_data=state),
                  {"source": "loop", "step": i})
"""


def thread_name(t: int) -> str:
    return f"t{t:04d}"


@pytest.fixture(scope="module")
def scale(tmp_path_factory):
    """A repository with 1,000 small threads (1–2 checkpoints) and ``long`` (5,000), HEAD on long.

    Built without flushes (``fsync=False``, EXIT durability; on tmpfs when there is one), the
    long thread in a second process while this one writes the small threads (2 cores).
    """
    base = None
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        base = tempfile.mkdtemp(prefix="qvc-cli-scale-", dir="/dev/shm")
    root = Path(base) if base else tmp_path_factory.mktemp("scale")
    path = root / "scale.qvc"
    GitCheckpointStore(path).close()
    t0 = time.monotonic()
    builder = subprocess.Popen([sys.executable, "-c", BUILD_LONG, str(path), str(LONG)], env=child_env(),
                               stderr=subprocess.PIPE, text=True)
    try:
        with GitCheckpointStore(path, fsync=False, durability="exit") as store:
            for t in range(THREADS):
                for j in range(1 + t % 2):
                    put(store, thread_name(t), f"T{t:04d}-{j}", j, {"n": j, "t": t})
        _, err = builder.communicate(timeout=600)
        assert builder.returncode == 0, err
        with GitCheckpointStore(path) as store:
            store.checkout("long")
        print(f"scale repository built in {time.monotonic() - t0:.1f} s")
        yield path
    finally:
        if builder.poll() is None:
            builder.kill()
            builder.wait()
        if base:
            shutil.rmtree(base, ignore_errors=True)


def test_scale_log_n_20(scale):
    lines = qvc("log", "-n", "20", "long", cwd=scale).stdout.split("\n\n")
    assert len(lines) == 20
    assert [b.split("\n")[0] for b in lines] == (
        ["checkpoint L04999 (HEAD -> long)"] + [f"checkpoint L{i:05d}" for i in range(4998, 4979, -1)])
    assert "Status: done" in lines[0] and "Changed: messages, n, status" in lines[0]
    assert "Step: 4980" in lines[-1] and "Changed: messages, n" in lines[-1]
    entries = qvc_json("log", "-n", "20", cwd=scale)
    assert [e["step"] for e in entries] == list(range(4999, 4979, -1))
    assert [e["id"] for e in qvc_json("log", "-n", "3", "long~4990", cwd=scale)] == ["L00009", "L00008", "L00007"]
    oneline = qvc("log", "--oneline", "-n", "20", "long", cwd=scale).stdout.splitlines()
    assert len(oneline) == 20 and oneline[-1].split()[1:4] == ["L04980", "step", "4980"]
    tail = qvc_json("log", "L00002", cwd=scale)
    assert [e["id"] for e in tail] == ["L00002", "L00001", "L00000"]


def test_scale_branch(scale):
    lines = qvc("branch", cwd=scale).stdout.splitlines()
    assert len(lines) == THREADS + 1
    assert lines[0].split() == ["*", "long"]
    assert [ln[2:].strip() for ln in lines[1:]] == [thread_name(t) for t in range(THREADS)]
    assert all(ln.startswith("  ") for ln in lines[1:])
    rows = {r["thread"]: r for r in qvc_json("branch", cwd=scale)}
    assert len(rows) == THREADS + 1
    assert rows["long"]["checkpoints"] == LONG and rows["long"]["step"] == LONG - 1 and rows["long"]["current"]
    assert rows["long"]["status"] == "done"
    for t in (0, 1, 998, 999):
        row = rows[thread_name(t)]
        assert row["checkpoints"] == 1 + t % 2 and row["head_id"] == f"T{t:04d}-{t % 2}" and not row["current"]
    st = qvc_json("status", cwd=scale)
    assert st["threads"] == THREADS + 1 and st["head_step"] == LONG - 1
    assert qvc_json("show", "t0999", cwd=scale)["state"] == {"n": 1, "t": 999}
