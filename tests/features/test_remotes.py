"""Remotes for real: pushes, fetches and clones over a path, ``git daemon`` and smart HTTP.

Every server is a real git process on 127.0.0.1; nothing is mocked.
"""

from __future__ import annotations

import os
import uuid

import helpers
import pytest
from git_servers import GitDaemon, GitHttpServer, snapshot
from helpers import run_git

import qvc
from qvc import (
    CheckpointConfig,
    CheckpointConflictError,
    GitCheckpointStore,
    PushRejectedError,
    RemoteError,
    UnknownRemoteError,
    UnknownThreadError,
    fork_checkpoint,
)
from qvc.readers.fsck import fsck
from qvc.remotes.remote import add_remote, remote_threads, remotes, remove_remote
from qvc.store.revisions import parse_revision

pytestmark = pytest.mark.usefixtures("isolated_git")  # git with no system or global config of the machine


def put(store, thread, step, parent=None, **state):
    """``helpers.put`` of a checkpoint with a fresh random id (kept: these tests name checkpoints by step)."""
    return helpers.put(store, thread, uuid.uuid4().hex, step,
                       state or {"step": step, "messages": [f"m{i}" for i in range(step + 1)]}, parent_id=parent)


def build(store, prefix=""):
    """Threads with a fork, a time travel (superseded line) and pending writes."""
    for step in range(4):
        put(store, f"{prefix}main", step)
    line = list(store.list(CheckpointConfig(f"{prefix}main")))
    fork_checkpoint(store, line[2].config, new_thread_id=f"{prefix}main/retry")
    put(store, f"{prefix}main/retry", 9, tool="fixed")
    fork_checkpoint(store, line[-1].config)  # time travel: steps 1-3 become a superseded line
    store.put_writes(line[1].config, [("messages", "partial"), ("tools", {"x": 1})], task_id="task-1")
    put(store, "Ünïcode thread.1", 0, data=b"\x00bytes", nested={"a": [1, 2.5, None]})


@pytest.fixture
def servers(tmp_path):
    root = tmp_path / "srv"
    root.mkdir()
    made = []

    def make(kind: str, name: str = "hub.git", **kw):
        path = root / name
        if not path.exists():
            run_git(None, "init", "-q", "--bare", str(path))
            run_git(path, "config", "http.receivepack", "true")
        if kind == "path":
            return str(path), path
        server = GitDaemon(str(root)) if kind == "daemon" else GitHttpServer(str(root), **kw)
        made.append(server.start())
        return server.url(name), path

    make.started = made
    yield make
    for server in made:
        server.stop()


@pytest.mark.parametrize("kind", ["path", "daemon", "http"])
def test_push_clone_round_trip_every_checkpoint(tmp_path, servers, kind):
    url, bare = servers(kind)
    with GitCheckpointStore(tmp_path / "a.qvc") as a:
        build(a)
        add_remote(a, "origin", url)
        result = qvc.push(a)
        assert {u.status for u in result.updates} == {"new"} and not result.rejected
        assert result.objects > 0 and result.bytes > 0
        expected = snapshot(a)
        # plain git on the server sees one branch per thread
        heads = run_git(bare, "for-each-ref", "--format=%(refname)", "refs/heads/").stdout.split()
        assert sorted(heads) == sorted(n for n in expected["refs"] if n.startswith("refs/heads/"))
        with qvc.clone(url, tmp_path / "b.qvc") as b:
            assert snapshot(b) == expected
            assert not fsck(b), fsck(b).problems
            assert [r.name for r in remotes(b)] == ["origin"]
            assert remote_threads(b, "origin") == a.threads()
        # incremental: one thread moves on, the other is rewound; only they are sent
        put(a, "main", 5)
        put(a, "Ünïcode thread.1", 1)
        again = qvc.push(a)
        assert sorted(u.thread for u in again.pushed) == ["main", "Ünïcode thread.1"]
        with GitCheckpointStore(tmp_path / "b.qvc") as b:
            fetched = qvc.fetch(b)
            assert len(fetched.updates) == 2
            assert parse_revision(b, "origin/main").commit == a.head("main")
            assert b.head("main") != a.head("main")  # fetch moves remote-tracking refs only


def test_clone_is_a_working_repository(tmp_path, servers):
    url, _ = servers("path")
    with GitCheckpointStore(tmp_path / "a.qvc") as a:
        build(a)
        a.checkout("main/retry")
        run_git(a.path, "-c", "user.name=r", "-c", "user.email=r@x", "notes", "add", "-m", "reviewed", a.head("main"))
        qvc.push(a, url)
    with qvc.clone(url, tmp_path / "b.qvc") as b:
        assert run_git(b.path, "notes", "show", b.head("main")).stdout == "reviewed\n"  # notes travel too
        assert b.current().thread == "main"  # a bare server's HEAD: refs/heads/main
        put(b, "main", 7)
        assert b.get_tuple(CheckpointConfig("main")).checkpoint.step == 7
    with pytest.raises(qvc.InvalidInputError):
        qvc.clone(url, tmp_path / "b.qvc")
    with pytest.raises(RemoteError):
        qvc.clone(str(tmp_path / "missing.git"), tmp_path / "c.qvc")
    assert not (tmp_path / "c.qvc").exists()
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".qvc-clone-")]


def test_time_travel_push_keeps_the_remote_line(tmp_path, servers):
    url, bare = servers("path")
    with GitCheckpointStore(tmp_path / "a.qvc") as a:
        for step in range(3):
            put(a, "t", step)
        old_head = a.head("t")
        qvc.push(a, url)
        first = list(a.list(CheckpointConfig("t")))[-1]
        a.reset("t", first.config.checkpoint_id)
        result = qvc.push(a, url)
        kinds = {u.ref: u.status for u in result.pushed}
        assert kinds[f"refs/qvc/superseded/t/{old_head}"] == "new"
        assert kinds["refs/heads/t"] == "forced"
        assert run_git(bare, "rev-parse", f"refs/qvc/superseded/t/{old_head}").stdout.strip() == old_head
        assert run_git(bare, "rev-parse", "refs/heads/t").stdout.strip() == a.head("t")


def test_server_rejections_are_reported_per_ref(tmp_path, servers):
    url, bare = servers("daemon")
    with GitCheckpointStore(tmp_path / "a.qvc") as a:
        for step in range(3):
            put(a, "rewound", step)
        put(a, "other", 0)
        add_remote(a, "origin", url)
        qvc.push(a)
        run_git(bare, "config", "receive.denyNonFastForwards", "true")
        hook = bare / "hooks" / "pre-receive"
        hook.write_text("#!/bin/sh\nwhile read old new ref; do\n  case $ref in *locked*) "
                        "echo \"no write access to $ref\" >&2; exit 1;; esac\ndone\nexit 0\n")
        hook.chmod(0o755)
        a.reset("rewound", list(a.list(CheckpointConfig("rewound")))[-1].config.checkpoint_id)
        put(a, "other", 1)
        with pytest.raises(PushRejectedError) as info:
            qvc.push(a)
        assert isinstance(info.value, CheckpointConflictError)
        by_ref = {u.ref: u for u in info.value.result.updates}
        rejected = by_ref["refs/heads/rewound"]
        assert rejected.status == "rejected" and "non-fast-forward" in rejected.reason
        assert by_ref["refs/heads/other"].status == "fast-forward"  # the rest still went through
        assert run_git(bare, "rev-parse", "refs/heads/other").stdout.strip() == a.head("other")
        put(a, "locked", 0)
        with pytest.raises(PushRejectedError) as info:
            qvc.push(a, threads=["locked"])
        (update,) = info.value.result.rejected
        assert update.thread == "locked" and "pre-receive hook declined" in update.reason
        assert "refs/heads/locked" in str(info.value)


def test_many_machines_one_remote(tmp_path, servers):
    url, bare = servers("http")
    with GitCheckpointStore(tmp_path / "seed.qvc") as seed:
        put(seed, "shared", 0)
        qvc.push(seed, url)
    one, two = qvc.clone(url, tmp_path / "one.qvc"), qvc.clone(url, tmp_path / "two.qvc")
    try:
        put(one, "from-one", 0)
        put(two, "from-two", 0)
        qvc.push(one)
        qvc.push(two)
        assert set(run_git(bare, "for-each-ref", "--format=%(refname:short)", "refs/heads/").stdout.split()) == {
            "shared", "from-one", "from-two"}
        # both extend the same thread: the second push is a clear conflict, nothing lost
        put(one, "shared", 1, parent=None)
        put(two, "shared", 1, parent=None)
        qvc.push(one)
        with pytest.raises(PushRejectedError) as info:
            qvc.push(two, threads=["shared"])
        (update,) = info.value.result.rejected
        assert update.thread == "shared" and "never seen" in update.reason
        assert run_git(bare, "rev-parse", "refs/heads/shared").stdout.strip() == one.head("shared")
        # after a fetch, two can fork the remote's line locally and push that
        qvc.fetch(two)
        tip = parse_revision(two, "origin/shared").commit
        fork_checkpoint(two, CheckpointConfig("shared", two.commit_info(tip).checkpoint_id), new_thread_id="shared-2")
        qvc.push(two, threads=["shared-2"])
        assert parse_revision(two, "shared-2~1").commit == one.head("shared")
        # the same thread created independently on two machines: a conflict too
        put(one, "dup", 0)
        put(two, "dup", 0)
        put(two, "also", 0)
        qvc.push(one)
        with pytest.raises(PushRejectedError) as info:
            qvc.push(two)  # everything: the refused thread is left out, the others go
        assert sorted(u.thread for u in info.value.result.rejected) == ["dup", "shared"]  # both still diverge
        assert run_git(bare, "rev-parse", "refs/heads/dup").stdout.strip() == one.head("dup")
        assert run_git(bare, "rev-parse", "refs/heads/also").stdout.strip() == two.head("also")
    finally:
        one.close()
        two.close()


def test_stale_lease_is_a_conflict(tmp_path, servers):
    url, bare = servers("path")
    with GitCheckpointStore(tmp_path / "a.qvc") as a:
        for step in range(3):
            put(a, "t", step)
        qvc.push(a, url)
        advertised = {"refs/heads/t": a.head("t")}
        with qvc.clone(url, tmp_path / "b.qvc") as b:
            put(b, "t", 3)
            qvc.push(b)  # the remote moves on after `advertised` was read
        a.reset("t", list(a.list(CheckpointConfig("t")))[-1].config.checkpoint_id)
        with pytest.raises(PushRejectedError) as info:  # the forced update's lease no longer holds
            qvc.push(a, url, remote_refs=advertised)
        (update,) = info.value.result.rejected
        assert update.ref == "refs/heads/t" and "stale info" in update.reason
        assert run_git(bare, "rev-parse", "refs/heads/t").stdout.strip() != a.head("t")
        with pytest.raises(PushRejectedError) as info:  # read afresh: a line this repository never saw
            qvc.push(a, url)
        assert "never seen" in info.value.result.rejected[0].reason


def test_fetch_prunes_and_merges_pending_writes(tmp_path, servers):
    url, bare = servers("path")
    with GitCheckpointStore(tmp_path / "a.qvc") as a, GitCheckpointStore(tmp_path / "b.qvc") as b:
        put(a, "t", 0)
        put(a, "gone", 0)
        cp = a.get_tuple(CheckpointConfig("t"))
        qvc.push(a, url)
        add_remote(b, "hub", url)
        qvc.fetch(b, "hub")
        assert remote_threads(b, "hub") == ["gone", "t"]
        assert b.get_tuple(CheckpointConfig("x", cp.checkpoint.id)) is not None  # ids resolve across refs
        a.put_writes(cp.config, [("messages", "late")], task_id="k")
        qvc.push(a, url)
        run_git(bare, "update-ref", "-d", "refs/heads/gone")
        result = qvc.fetch(b, "hub")
        assert result.writes_merged == 1
        assert remote_threads(b, "hub") == ["t"]
        assert b.read(cp_sha := a.head("t")).pending_writes == a.read(cp_sha).pending_writes
        assert [u.status for u in result.updates if u.ref.endswith("/gone")] == ["deleted"]
        remove_remote(b, "hub")
        assert remotes(b) == [] and list(b.repository.refs("refs/remotes/")) == []


def test_chunks_and_thread_selection(tmp_path, servers):
    url, bare = servers("path")
    with GitCheckpointStore(tmp_path / "a.qvc") as a:
        for i in range(7):
            put(a, f"t{i}", 0)
        a.put_writes(CheckpointConfig("t1"), [("channel", 1)], task_id="k")
        result = qvc.push(a, url, threads=["t1", "t2"])
        assert sorted(u.ref for u in result.pushed) == [
            "refs/heads/t1", "refs/heads/t2", f"refs/qvc/writes/{a.head('t1')}"]  # the thread's pending writes too
        result = qvc.push(a, url, [f"t{i}" for i in range(7)], chunk=2)  # chosen threads: explicit refspecs
        assert result.chunks == 3 and len(result.pushed) == 5
        for i in range(7):
            put(a, f"t{i}", 1)
        put(a, "t7", 0)
        result = qvc.push(a, url)  # everything: one git run per namespace phase
        assert result.chunks == 1 and len(result.pushed) == 8
        assert qvc.push(a, url).pushed == [] and qvc.push(a, url).chunks == 0
        with pytest.raises(UnknownThreadError):
            qvc.push(a, url, threads=["nope"])


def test_unknown_and_unreachable_remotes(tmp_path, servers):
    with GitCheckpointStore(tmp_path / "a.qvc") as a:
        put(a, "t", 0)
        with pytest.raises(UnknownRemoteError):
            qvc.push(a, "nosuch")
        with pytest.raises(UnknownRemoteError):
            qvc.fetch(a, "nosuch")
        add_remote(a, "dead", f"git://127.0.0.1:{_closed_port()}/x.git")
        with pytest.raises(RemoteError) as info:
            qvc.push(a, "dead")
        assert "dead" in str(info.value) or "127.0.0.1" in str(info.value)
        with pytest.raises(RemoteError):
            qvc.fetch(a, "dead")
        with pytest.raises(qvc.InvalidInputError):
            add_remote(a, "bad name", "x")
        with pytest.raises(CheckpointConflictError):
            add_remote(a, "dead", "y")


def test_a_push_past_its_timeout_is_stopped(tmp_path, servers):
    import time

    url, bare = servers("path")
    hook = bare / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\ncat >/dev/null\nsleep 30\n")
    hook.chmod(0o755)
    with GitCheckpointStore(tmp_path / "a.qvc") as a:
        put(a, "t", 0)
        start = time.monotonic()
        with pytest.raises(RemoteError, match="timed out after 1 s"):
            qvc.push(a, url, timeout=1)
        assert time.monotonic() - start < 10
        assert run_git(bare, "for-each-ref", "refs/heads/").stdout == ""


def test_http_basic_auth_through_a_credential_helper(tmp_path, servers, isolated_git):
    url, _ = servers("http", credentials=("agent", "s3cret"))
    with GitCheckpointStore(tmp_path / "a.qvc") as a:
        put(a, "t", 0)
        with pytest.raises(RemoteError):  # no credentials anywhere, and never a prompt
            qvc.push(a, url)
        store_file = tmp_path / "credentials"
        store_file.write_text(f"http://agent:s3cret@127.0.0.1:{url.split(':')[2].split('/')[0]}\n")
        isolated_git.write_text(f"[credential]\n\thelper = store --file={store_file}\n")
        qvc.push(a, url)
    with qvc.clone(url, tmp_path / "b.qvc") as b:
        assert b.threads() == ["t"]


def _closed_port() -> int:
    from git_servers import free_port

    return free_port()


def test_replication_catches_up_after_the_remote_was_down(tmp_path, servers):
    import json
    import subprocess
    import sys
    import time

    from helpers import child_env

    from qvc.remotes import replication

    url, bare = servers("daemon")
    daemon_port = int(url.split(":")[2].split("/")[0])
    with GitCheckpointStore(tmp_path / "a.qvc") as a:
        add_remote(a, "backup", url, replicate=True)

    def status_json():  # from another process, as an operator would look
        out = subprocess.run([sys.executable, "-m", "qvc", "--repo", str(tmp_path / "a.qvc"), "status", "--json"],
                             env=child_env(), capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        (entry,) = json.loads(out.stdout)["replication"]
        return entry

    def wait_for(predicate, timeout=30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            entry = status_json()
            if predicate(entry):
                return entry
            time.sleep(0.2)
        raise AssertionError(f"replication did not get there: {entry}")

    a = GitCheckpointStore(tmp_path / "a.qvc")
    try:
        put(a, "t", 0)
        wait_for(lambda e: e["threads_behind"] == 0 and e["last_success"])
        assert run_git(bare, "rev-parse", "refs/heads/t").stdout.strip() == a.head("t")
        (daemon,) = servers.started
        daemon.stop()  # the remote goes down
        put(a, "t", 1)
        put(a, "u", 0)
        down = wait_for(lambda e: e["last_error"] and e["threads_behind"] == 2)
        assert down["oldest_unreplicated_age"] >= 0 and down["failures"] >= 1
        daemon.port = daemon_port
        daemon.start()  # back up: the replicator retries with backoff and catches up
        wait_for(lambda e: e["threads_behind"] == 0 and e["last_error"] is None)
        assert run_git(bare, "rev-parse", "refs/heads/u").stdout.strip() == a.head("u")
        a.reset("t", list(a.list(CheckpointConfig("t")))[-1].config.checkpoint_id)  # time travel replicates too
        put(a, "t", 5)
    finally:
        a.close()  # the bounded final attempt pushes what is left
    assert run_git(bare, "rev-parse", "refs/heads/t").stdout.strip() == GitCheckpointStore(
        tmp_path / "a.qvc", readonly=True).head("t")
    assert run_git(bare, "for-each-ref", "refs/qvc/superseded/").stdout.strip()
    assert replication.read_state(str(tmp_path / "a.qvc" / "qvc"), "backup")["last_error"] is None
