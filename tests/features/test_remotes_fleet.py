"""A fleet's remotes: a few runs fetched or cloned from a server holding many, and many machines
replicating to one server, all over a real ``git daemon`` on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import helpers
import pytest
from git_servers import GitDaemon, snapshot
from helpers import child_env, fsck, run_git

import qvc
from qvc import CheckpointConfig, GitCheckpointStore, PendingWrite, UnknownThreadError
from qvc.remotes.remote import add_remote, clone

pytestmark = [pytest.mark.heavy, pytest.mark.usefixtures("isolated_git")]

THREADS = 60


def put(store, thread, step, **state):
    """``helpers.put`` of checkpoint ``<thread>-<step>`` with 300 bytes of padding (kept: named by step)."""
    return helpers.put(store, thread, f"{thread}-{step}", step, {"step": step, "pad": "p" * 300, **state}, metadata={})


@pytest.fixture
def hub(tmp_path):
    """A served bare repository of THREADS runs: run-00 has a superseded line, every run a
    checkpoint with pending writes."""
    srv = tmp_path / "srv"
    srv.mkdir()
    with GitCheckpointStore(srv / "hub.git", durability="async") as store:
        for n in range(THREADS):
            t = f"run-{n:02d}"
            for step in range(3):
                put(store, t, step, n=n)
            store.put_writes(CheckpointConfig(t, f"{t}-1"), [PendingWrite("task", "ch", {"n": n})], "task")
        store.reset("run-00", "run-00-0")
        put(store, "run-00", 5, again=True)
    daemon = GitDaemon(str(srv)).start()
    yield daemon, srv / "hub.git"
    daemon.stop()


def objects(repo) -> int:
    """Objects in a repository, loose and packed (``git count-objects``)."""
    counts = dict(line.split(": ") for line in run_git(repo, "count-objects", "-v").stdout.splitlines())
    return int(counts["count"]) + int(counts["in-pack"])


def thread_snapshot(store, threads):
    full = snapshot(store)
    return {t: full[t] for t in threads}


def test_fetch_named_threads_brings_only_those(tmp_path, hub):
    daemon, served = hub
    with GitCheckpointStore(served, create=False) as server:
        expected = thread_snapshot(server, ["run-00", "run-07"])
    with GitCheckpointStore(tmp_path / "mine.qvc") as store:
        add_remote(store, "origin", daemon.url("hub.git"))
        result = qvc.fetch(store, "origin", ["run-00", "run-07"])
        assert result.threads == ["run-00", "run-07"]
        tracking = [name for name, _ in store.repository.refs("refs/remotes/origin/")]
        assert tracking == ["refs/remotes/origin/run-00", "refs/remotes/origin/run-07"]
        superseded = [name for name, _ in store.repository.refs("refs/qvc/remotes/origin/superseded/")]
        assert len(superseded) == 1 and "/run-00/" in superseded[0]
        assert result.writes_merged == 2  # the pending writes of run-00-1 and run-07-1
        sha = store.repository.ref("refs/remotes/origin/run-07")
        line = [store.commit_info(c.hex).checkpoint_id for c in store.first_parents(sha)]
        assert line == ["run-07-2", "run-07-1", "run-07-0"]
        assert store.pending_writes_at(store.resolve("run-07-1"))[0].value == {"n": 7}
        with pytest.raises(UnknownThreadError):
            qvc.fetch(store, "origin", ["no-such-run"])
        again = qvc.fetch(store, "origin", ["run-07"])
        assert again.updates == []  # up to date
    with GitCheckpointStore(tmp_path / "all.qvc") as store:
        add_remote(store, "origin", daemon.url("hub.git"))
        full = qvc.fetch(store, "origin")
        assert len(full.threads) == THREADS
    partial, everything = objects(tmp_path / "mine.qvc"), objects(tmp_path / "all.qvc")
    assert 0 < partial < everything / 5, (partial, everything)
    with clone(daemon.url("hub.git"), tmp_path / "check.qvc", threads=["run-00", "run-07"]) as store:
        assert thread_snapshot(store, ["run-00", "run-07"]) == expected
    fsck(tmp_path / "mine.qvc")


def test_clone_with_thread_patterns(tmp_path, hub):
    daemon, served = hub
    with GitCheckpointStore(served, create=False) as server:
        wanted = [t for t in server.threads() if t.startswith("run-0")]
        expected = thread_snapshot(server, wanted)
    dest = tmp_path / "few.qvc"
    proc = subprocess.run([sys.executable, "-m", "qvc", "clone", "--json", "--thread", "run-0*", daemon.url("hub.git"),
                           str(dest)], env=child_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["threads"] == len(wanted) == 10
    with GitCheckpointStore(dest, create=False) as store:
        assert store.threads() == wanted
        assert snapshot(store) == {**expected, "refs": snapshot(store)["refs"]}
        assert thread_snapshot(store, wanted) == expected
        refs = [name for name, _ in store.repository.refs("refs/qvc/writes/")]
        assert len(refs) == len(wanted)
        put(store, "run-03", 3)  # and it is a working repository
    fsck(dest)
    proc = subprocess.run([sys.executable, "-m", "qvc", "clone", "--thread", "a*b*", daemon.url("hub.git"),
                           str(tmp_path / "bad.qvc")], env=child_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "qvc", "--repo", str(dest), "fetch", "origin", "run-42", "run-07"],
                          env=child_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "origin/run-42" in proc.stdout


# One machine of a fleet: PER threads of 2 checkpoints each (one with pending writes), then a push.
MACHINE = r"""
import sys
import qvc
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore, PendingWrite
from qvc.remotes.remote import add_remote
path, url, me, per = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
with GitCheckpointStore(path, durability="async") as store:
    add_remote(store, "hub", url)
    for n in range(per):
        t = f"{me}/run-{n}"
        for step in range(2):
            store.put(CheckpointConfig(t), Checkpoint(id=f"{me}-{n}-{step}", thread_id=t, step=step,
                                                      state_data={"me": me, "n": n, "step": step}), {})
        store.put_writes(CheckpointConfig(t, f"{me}-{n}-1"), [PendingWrite("w", "c", n)], "w")
    store.flush()
    result = qvc.push(store, "hub")
    assert not result.rejected, result.rejected
print("PUSHED", flush=True)
"""


def test_eight_machines_replicate_to_one_server(tmp_path):
    """8 processes on 8 repositories push their runs to one bare repository over git daemon at
    once: every thread arrives, none is lost or overwritten (the 1,000-thread version is in
    benchmarks/bench_fleet.py --replicate)."""
    srv = tmp_path / "srv"
    srv.mkdir()
    GitCheckpointStore(srv / "hub.git").close()
    daemon = GitDaemon(str(srv)).start()
    machines, per = 8, 100
    try:
        procs = [subprocess.Popen([sys.executable, "-c", MACHINE, str(tmp_path / f"m{i}.qvc"), daemon.url("hub.git"),
                                   f"m{i}", str(per)], env=child_env(), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for i in range(machines)]
        for p in procs:
            out, err = p.communicate(timeout=600)
            assert p.returncode == 0 and "PUSHED" in out, err[-2000:]
    finally:
        daemon.stop()
    with GitCheckpointStore(srv / "hub.git", create=False, readonly=True) as hub:
        threads = hub.threads()
        assert len(threads) == machines * per
        everything = snapshot(hub)
        for i in range(machines):
            with GitCheckpointStore(tmp_path / f"m{i}.qvc", create=False, readonly=True) as mine:
                theirs = snapshot(mine)
                for t in mine.threads():
                    assert theirs[t] == everything[t], t  # same commits, states and pending writes
    fsck(srv / "hub.git")


def test_fetch_of_threads_from_the_command_line_reports_each(tmp_path, hub):
    daemon, _ = hub
    repo = tmp_path / "mine.qvc"
    GitCheckpointStore(repo).close()
    env = child_env()
    assert subprocess.run([sys.executable, "-m", "qvc", "--repo", str(repo), "remote", "add", "origin",
                           daemon.url("hub.git")], env=env, capture_output=True, timeout=60).returncode == 0
    proc = subprocess.run([sys.executable, "-m", "qvc", "--repo", str(repo), "fetch", "--json", "origin", "run-01",
                           "run-02"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["threads"] == ["run-01", "run-02"] and data["writes_merged"] == 2
    proc = subprocess.run([sys.executable, "-m", "qvc", "--repo", str(repo), "fetch", "origin", "nope"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert os.path.isdir(repo)
