"""The staging database under faults: real processes that are stopped, killed mid-transaction and
killed mid-publication, and several processes writing one ref. Plain git checks the result."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pygit2
import pytest
from helpers import child_env, run_git, staged_commit

from qvc.plumbing.staging import Staging

WORKER = Path(__file__).resolve().parent / "workers" / "staging_worker.py"
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


def worker(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(WORKER), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=child_env())


@pytest.fixture
def repo(tmp_path):
    path = tmp_path / "r.git"
    pygit2.init_repository(str(path), bare=True)
    return path


def test_a_stopped_writer_hides_nothing_and_blocks_no_one(repo):
    """A writer stopped (SIGSTOP) right after an acknowledged put: another process reads the put
    and extends it, and publishes it, while the writer stays stopped."""
    staging = Staging(repo)
    with staging.transaction() as tx:
        base = staged_commit(tx, None, "base")
        tx.move("refs/heads/t", None, base, "base")
    staging.publish()
    proc = worker("put-and-stop", str(repo), "refs/heads/t")
    try:
        line = proc.stdout.readline().split()
        assert line[0] == "ACK", proc.stderr.read()
        acked = line[1]
        deadline = time.monotonic() + 30
        while not _stopped(proc.pid):
            assert time.monotonic() < deadline, "the writer did not stop"
            time.sleep(0.01)
        started = time.monotonic()
        assert Staging(repo, readonly=True).ref("refs/heads/t") == acked  # another process's reader
        read = time.monotonic() - started
        with staging.transaction() as tx:
            head = tx.ref("refs/heads/t")
            assert head == acked
            mine = staged_commit(tx, head, "after the stop")
            tx.move("refs/heads/t", head, mine, "put while the other writer is stopped")
        put = time.monotonic() - started - read
        print(f"stopped writer: read {read * 1000:.1f} ms, put {put * 1000:.1f} ms")
        assert staging.publish().refs == ["refs/heads/t"]
        assert run_git(repo, "rev-list", "refs/heads/t").stdout.split() == [mine, acked, base]
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.wait(30)
        staging.close()
    run_git(repo, "fsck", "--strict")


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def test_processes_writing_one_ref_lose_no_acknowledged_move(repo):
    procs = [worker("put", str(repo), "refs/heads/shared", "30") for _ in range(4)]
    acked = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        acked += [line.split()[2] for line in out.splitlines() if line.startswith("ACK ")]
    staging = Staging(repo)
    try:
        staging.publish()
    finally:
        staging.close()
    line = run_git(repo, "rev-list", "refs/heads/shared").stdout.split()
    assert len(acked) == 120 and sorted(line) == sorted(acked)
    run_git(repo, "fsck", "--strict")


def test_a_writer_killed_inside_its_transaction_leaves_nothing_and_blocks_no_one(repo):
    script = (
        "import os, signal\nfrom qvc.plumbing.staging import Staging\n"
        f"s = Staging({str(repo)!r})\n"
        "with s.transaction() as tx:\n"
        "    tx.write('blob', b'never acknowledged')\n"
        "    tx.move('refs/heads/t', None, '1' * 40, 'never')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n")
    proc = subprocess.run([sys.executable, "-c", script], env=child_env(), capture_output=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    staging = Staging(repo)
    try:
        assert staging.ref("refs/heads/t") is None and staging.staged() == 0
        with staging.transaction() as tx:  # the dead writer's locks went with it
            tx.move("refs/heads/t", None, staged_commit(tx, None, "next"), "next")
        staging.publish()
    finally:
        staging.close()
    run_git(repo, "fsck", "--strict")


def _scene(repo: Path) -> dict[str, str | None]:
    """Stage a publication's worth of work: two threads' lines, a deleted ref and a packed ref
    moved; return what git's refs must be once it is published."""
    staging = Staging(repo)
    try:
        with staging.transaction() as tx:
            packed = staged_commit(tx, None, "packed")
            tx.move("refs/heads/packed", None, packed, "packed")
            gone = staged_commit(tx, None, "gone")
            tx.move("refs/heads/gone", None, gone, "gone")
        staging.publish()
        run_git(repo, "pack-refs", "--all")
        heads: dict[str, str | None] = {"refs/heads/gone": None}
        for thread in ("a", "b"):
            for i in range(3):
                with staging.transaction() as tx:
                    head = tx.ref(f"refs/heads/{thread}")
                    heads[f"refs/heads/{thread}"] = new = staged_commit(tx, head, f"{thread} {i}")
                    tx.move(f"refs/heads/{thread}", head, new, f"{thread} {i}")
        with staging.transaction() as tx:
            heads["refs/heads/packed"] = new = staged_commit(tx, packed, "moved")
            tx.move("refs/heads/packed", packed, new, "moved")
            tx.move("refs/heads/gone", gone, None)
    finally:
        staging.close()
    return heads


@pytest.mark.heavy
def test_a_publication_killed_anywhere_is_finished_by_the_next_publisher(tmp_path, repo):
    _scene(repo)
    template = tmp_path / "template.git"
    shutil.copytree(repo, template)
    whole = worker("publish-killed", str(repo), "1000000")
    out, err = whole.communicate(timeout=60)
    assert out.startswith("DONE"), err
    operations = int(out.split()[1])
    expected = run_git(repo, "for-each-ref", "--format=%(refname) %(objectname)").stdout
    reflogs = {t: run_git(repo, "reflog", "show", "--format=%gs", f"refs/heads/{t}").stdout for t in ("a", "b")}
    assert operations > 5
    for at in range(1, operations + 1):
        copy = tmp_path / f"killed-{at}.git"
        shutil.copytree(template, copy)
        proc = worker("publish-killed", str(copy), str(at))
        proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGKILL, f"not killed at operation {at}"
        staging = Staging(copy)
        try:
            staging.publish()
            assert staging.staged() == 0, (at, staging.publish())
        finally:
            staging.close()
        assert run_git(copy, "for-each-ref", "--format=%(refname) %(objectname)").stdout == expected, at
        for thread, log in reflogs.items():  # every line once, none repeated
            assert run_git(copy, "reflog", "show", "--format=%gs", f"refs/heads/{thread}").stdout == log, at
        assert not list(copy.glob("refs/**/*.lock")) and not list(copy.glob("packed-refs*[!s]"))
        assert not (copy / "qvc" / "publishing").exists() and not list((copy / "qvc").glob("publishing.d/*"))
        run_git(copy, "fsck", "--strict")
        shutil.rmtree(copy)


@pytest.mark.heavy
@pytest.mark.parametrize("variant", ["short", pytest.param("long", marks=pytest.mark.slow)])
def test_writers_and_publishers_killed_at_random_lose_no_acknowledged_move(tmp_path, repo, request, variant):
    """Rounds of three writers (one shared ref, each its own too) and two publishers, SIGKILLed
    at random moments; then the next publisher. Every move a writer acknowledged is on its ref's
    line, each reflog line is there once, no lock is left, and plain git finds it whole.
    ``QVC_STAGING_ROUNDS`` sets the long variant's rounds (default 40)."""
    import os
    import random

    from helpers import slow_enabled

    if variant == "long" and not slow_enabled(request.config):
        pytest.skip("slow: run with -m slow or QVC_SLOW=1")
    rounds = int(os.environ.get("QVC_STAGING_ROUNDS", "40")) if variant == "long" else 4
    seed = int(os.environ.get("QVC_STAGING_SEED", random.randrange(2**32)))
    rng = random.Random(seed)
    acked: dict[str, list[str]] = {}
    for r in range(rounds):
        refs = ["refs/heads/shared"] * 3
        refs = [ref if rng.random() < 0.5 else f"refs/heads/own{i}" for i, ref in enumerate(refs)]
        writers = [(ref, worker("put", str(repo), ref, "400")) for ref in refs]
        publishers = [worker("publish-loop", str(repo)) for _ in range(2)]
        for _, proc in writers:
            assert proc.stdout.readline().strip() == "READY"
        time.sleep(rng.uniform(0.02, 0.4))
        for _, proc in writers:
            proc.kill()
        for proc in publishers:
            proc.kill()
        for ref, proc in writers:
            out, _ = proc.communicate(timeout=60)
            acked.setdefault(ref, []).extend(line.split()[2] for line in out.splitlines()
                                             if line.startswith("ACK ") and len(line.split()) == 3)
        for proc in publishers:
            proc.communicate(timeout=60)
        if r % 2:  # the next round starts from a published repository or from a staged one
            staging = Staging(repo)
            try:
                staging.publish()
            finally:
                staging.close()
    staging = Staging(repo)
    try:
        done = staging.publish()
        assert staging.staged() == 0 and not done.blocked, (seed, done)
    finally:
        staging.close()
    for ref, shas in acked.items():
        if not shas:
            continue  # killed before its first acknowledgement
        line = set(run_git(repo, "rev-list", ref).stdout.split())
        missing = [sha for sha in shas if sha not in line]
        assert not missing, f"seed {seed}: {ref} lost {len(missing)} acknowledged move(s)"
        moves = run_git(repo, "reflog", "show", "--format=%H", ref).stdout.split()
        assert len(moves) == len(set(moves)) == len(line), f"seed {seed}: {ref}'s reflog repeats or lacks lines"
    assert not list(repo.glob("refs/**/*.lock")) and not (repo / "packed-refs.lock").exists(), seed
    run_git(repo, "fsck", "--strict")
    print(f"seed {seed}: {rounds} rounds, {sum(map(len, acked.values()))} acknowledged moves")
