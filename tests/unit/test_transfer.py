"""qvc.remotes.transfer: running the real git against real remotes, and parsing what it prints.

Every test runs git itself (a push into a bare repository, ``ls-remote``, a server that never
answers); only :class:`ProgressBar` is fed by hand, on a real pseudo-terminal.
"""

from __future__ import annotations

import io
import os
import pty
import select
import socket
import threading
import time

import pytest
from helpers import make_state, put, run_git

from qvc import GitCheckpointStore
from qvc.errors import RemoteError
from qvc.remotes.transfer import (
    GitRun,
    ProgressBar,
    TransferProgress,
    human_bytes,
    ls_remote,
    parse_porcelain,
    remote_head,
)
from qvc.remotes.transfer import run_git as transfer_git

PROGRESS_WORDS = ("Writing objects", "Receiving objects", "Resolving deltas", "Compressing objects",
                  "Counting objects")


@pytest.fixture
def source(tmp_path) -> str:
    """A closed qvc repository: thread ``t`` of 20 checkpoints (lists that grow, bytes)."""
    path = tmp_path / "src.qvc"
    with GitCheckpointStore(path) as store:
        for i in range(20):
            put(store, "t", f"c{i}", i, make_state("t", f"c{i}", i))
    return str(path)


@pytest.fixture
def bare(tmp_path) -> str:
    path = tmp_path / "remote.git"
    run_git(None, "init", "-q", "--bare", str(path))
    return str(path)


@pytest.fixture
def silent_server():
    """``git://`` URL of a TCP server that accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    accepted = []
    stop = threading.Event()

    def serve() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(sock.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"git://127.0.0.1:{sock.getsockname()[1]}/never.git"
    finally:
        stop.set()
        thread.join(5)
        for conn in accepted:
            conn.close()
        sock.close()


# -- run_git -------------------------------------------------------------------------------------------


def test_a_push_reports_its_objects_and_bytes_and_keeps_progress_out_of_messages(source, bare):
    seen: list[tuple[str, int, int, int]] = []
    state = TransferProgress("push", "origin")
    run = transfer_git(source, ["push", "--progress", "--porcelain", bare, "refs/heads/t:refs/heads/t"],
                       progress=lambda p: seen.append((p.phase, p.objects, p.total, p.bytes)), state=state)
    assert isinstance(run, GitRun)
    assert run.returncode == 0 and run.timed_out is None
    assert "refs/heads/t:refs/heads/t" in run.stdout  # stdout is git's, untouched
    # every object of the thread went to the empty remote, and the run counted each one once
    expected = run_git(source, "rev-list", "--objects", "refs/heads/t").stdout.count("\n")
    assert run.objects == expected
    assert run.bytes > 0
    assert ("Writing objects", expected, expected) in [(ph, n, total) for ph, n, total, _ in seen]
    # the state the caller passed is the one filled in, and the progress callback saw it move
    assert state.elapsed > 0 and state.bytes == run.bytes
    assert len(seen) >= 2 and seen[-1][0] in PROGRESS_WORDS
    # progress lines, git's own and the server's ("remote: Resolving deltas"), are not messages
    assert not [m for m in run.messages if "%" in m and any(w in m for w in PROGRESS_WORDS)], run.messages
    assert any(m.startswith("Total ") for m in run.messages), run.messages
    assert run_git(bare, "rev-parse", "refs/heads/t").stdout == run_git(source, "rev-parse", "refs/heads/t").stdout


def test_a_fetch_counts_the_received_objects(source, tmp_path):
    dest = tmp_path / "dest.git"
    run_git(None, "init", "-q", "--bare", str(dest))
    run = transfer_git(str(dest), ["fetch", "--progress", source, "refs/heads/t:refs/heads/t"])
    assert run.returncode == 0, run.messages
    assert run.objects == run_git(source, "rev-list", "--objects", "refs/heads/t").stdout.count("\n")
    assert run.bytes > 0


def test_a_failing_git_explains_itself_from_its_first_fatal_line(source, tmp_path):
    run = transfer_git(source, ["push", "--porcelain", str(tmp_path / "missing.git"), "refs/heads/t"])
    assert run.returncode != 0 and run.timed_out is None
    reason = run.failure()
    assert "does not appear to be a git repository" in reason
    assert not reason.startswith("fatal:") and len(reason) <= 300


def test_a_git_that_never_finishes_is_stopped_at_its_timeout(source, silent_server):
    ticks: list[float] = []
    t0 = time.monotonic()
    run = transfer_git(source, ["ls-remote", silent_server], progress=lambda p: ticks.append(p.elapsed), timeout=1.0)
    took = time.monotonic() - t0
    assert run.timed_out == 1.0
    assert run.returncode == -9
    assert run.failure() == "timed out after 1 s"
    assert 1.0 <= took < 30
    # progress comes at least every 0.2 s while git runs, even when git prints nothing
    assert len(ticks) >= 4 and ticks == sorted(ticks)


def test_failure_without_a_fatal_line_is_the_last_message_or_the_status():
    assert GitRun(1, "", ["hint: one", "the last word"], 0, 0).failure() == "the last word"
    assert GitRun(128, "", [], 0, 0).failure() == "exit status 128"
    assert GitRun(1, "", ["note", "error: it broke", "because"], 0, 0).failure() == "it broke because"
    assert GitRun(-9, "", ["fatal: ignored"], 0, 0, timed_out=2.5).failure() == "timed out after 2.5 s"


# -- ls_remote and remote_head -------------------------------------------------------------------------------


def test_ls_remote_lists_every_ref_once_without_peeled_tags(source, bare):
    head = run_git(source, "rev-parse", "refs/heads/t").stdout.strip()
    first = run_git(source, "rev-list", "--max-parents=0", "refs/heads/t").stdout.strip()
    assert transfer_git(source, ["push", bare, "refs/heads/t:refs/heads/t"]).returncode == 0
    run_git(bare, "-c", "user.name=T", "-c", "user.email=t@example.com", "tag", "-a", "-m", "a tag", "v1", first)
    tag = run_git(bare, "rev-parse", "refs/tags/v1").stdout.strip()
    refs = ls_remote(source, bare)
    assert refs == {"refs/heads/t": head, "refs/tags/v1": tag}


def test_ls_remote_raises_remote_error_with_gits_reason(source, tmp_path):
    with pytest.raises(RemoteError, match="cannot read remote .*missing.git: .*does not appear to be a git repository"):
        ls_remote(source, str(tmp_path / "missing.git"))


def test_remote_head_is_the_branch_head_names_or_none(source, bare):
    assert remote_head(source, bare) is None  # HEAD names a branch that does not exist yet
    assert transfer_git(source, ["push", bare, "refs/heads/t:refs/heads/t"]).returncode == 0
    run_git(bare, "symbolic-ref", "HEAD", "refs/heads/t")
    assert remote_head(source, bare) == "refs/heads/t"


# -- parse_porcelain ----------------------------------------------------------------------------------------


def test_parse_porcelain_reads_each_refs_outcome_from_a_real_push(source, bare):
    line = run_git(source, "rev-list", "--first-parent", "refs/heads/t").stdout.split()
    run_git(source, "update-ref", "refs/heads/old", line[5])
    run_git(source, "update-ref", "refs/heads/same", line[3])
    run_git(source, "update-ref", "refs/heads/gone", line[4])
    pushed = transfer_git(source, ["push", bare, "refs/heads/t:refs/heads/t", "refs/heads/same:refs/heads/same",
                                   "refs/heads/gone:refs/heads/gone", f"{line[0]}:refs/heads/ahead"])
    assert pushed.returncode == 0, pushed.messages
    # new branch, up to date, deleted, rejected non-fast-forward, rejected by a stale lease
    run = transfer_git(source, ["push", "--porcelain", bare, "refs/heads/old:refs/heads/new",
                                "refs/heads/same:refs/heads/same", ":refs/heads/gone", "refs/heads/old:refs/heads/t",
                                f"--force-with-lease=refs/heads/ahead:{line[1]}", "refs/heads/old:refs/heads/ahead"])
    assert run.returncode != 0
    found = parse_porcelain(run.stdout)
    assert set(found) == {"refs/heads/new", "refs/heads/same", "refs/heads/gone", "refs/heads/t", "refs/heads/ahead"}
    new, same, gone, t, ahead = (found[r] for r in ("refs/heads/new", "refs/heads/same", "refs/heads/gone",
                                                     "refs/heads/t", "refs/heads/ahead"))
    assert (new.flag, new.src, new.summary, new.reason) == ("*", "refs/heads/old", "[new branch]", None)
    assert (same.flag, same.summary, same.reason) == ("=", "[up to date]", None)
    assert (gone.flag, gone.src, gone.summary) == ("-", "", "[deleted]")
    assert (t.flag, t.reason) == ("!", "non-fast-forward") and t.summary.startswith("[rejected]")
    assert (ahead.flag, ahead.reason) == ("!", "stale info")


def test_parse_porcelain_skips_lines_that_are_not_ref_outcomes():
    text = "To /srv/r.git\n+\trefs/heads/a:refs/heads/a\tabc1234...def5678 (forced update)\nDone\n\n"
    found = parse_porcelain(text)
    assert list(found) == ["refs/heads/a"]
    assert found["refs/heads/a"].reason == "forced update"
    assert parse_porcelain("") == {}


# -- ProgressBar and human_bytes ------------------------------------------------------------------------------


def _terminal():
    """A real pseudo-terminal: (what the bar writes to, a function returning what it drew)."""
    master, slave = pty.openpty()
    stream = os.fdopen(slave, "w")

    def drawn() -> str:
        stream.flush()
        out = b""
        while True:
            if not select.select([master], [], [], 0.2)[0]:
                return out.decode()
            out += os.read(master, 65536)

    return stream, drawn, master


def test_progress_bar_draws_on_a_terminal_after_its_delay_and_clears_at_the_end():
    stream, drawn, master = _terminal()
    try:
        bar = ProgressBar(stream, delay=1.0, width=10)
        assert bar.enabled
        bar(TransferProgress("push", "origin", "Writing objects", 5, 10, 3 * 2**20, elapsed=0.5))
        assert drawn() == ""  # a transfer shorter than the delay draws nothing
        bar(TransferProgress("push", "origin", "Writing objects", 5, 10, 3 * 2**20, elapsed=2.0, chunk=2, chunks=3))
        bar(TransferProgress("push", "origin", "Writing objects", 10, 10, 3 * 2**20, elapsed=2.01))
        # the second call came within 0.1 s of the first: at most one drawing per 0.1 s
        assert drawn() == "\r\x1b[Kpush origin [2/3]: Writing objects [#####     ] 5/10 objects, 3.0 MiB, 2 s"
        bar(TransferProgress("push", "origin", done=True))
        assert drawn() == "\r\x1b[K" and not bar.drawn
        bar(TransferProgress("push", "origin", done=True))
        assert drawn() == ""  # nothing left to clear
    finally:
        stream.close()
        os.close(master)


def test_progress_bar_draws_nothing_off_a_terminal():
    out = io.StringIO()
    bar = ProgressBar(out, delay=0.0)
    assert not bar.enabled
    bar(TransferProgress("fetch", "origin", "Receiving objects", 1, 2, 10, elapsed=5.0))
    bar(TransferProgress("fetch", "origin", done=True))
    assert out.getvalue() == ""


def test_human_bytes():
    assert [human_bytes(n) for n in (0, 1023, 1024, 1536, 2**20, 5 * 2**30)] == [
        "0 B", "1023 B", "1.0 KiB", "1.5 KiB", "1.0 MiB", "5.0 GiB"]
