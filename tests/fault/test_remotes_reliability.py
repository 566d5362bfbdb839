"""Reliability of remotes: transfers killed at random instants, and hostile remotes.

- **Kills.** Real ``qvc clone``, ``qvc fetch`` and ``qvc push`` processes moving a repository
  of a few hundred threads (over a path and ``git daemon``) are SIGKILLed at instants that
  adapt to how long the command takes; half the kills take git's children down with the
  command, half kill the command alone (its git then finishes or dies on its own). After each
  kill: a clone's destination is absent or complete (opens, ``qvc fsck``, every checkpoint as
  on the remote) and no work folder outlives the next clone; a fetch left the local threads as
  they were, ``git fsck --strict`` passes (every remote-tracking ref points at a complete
  commit) and a second fetch completes it; a push left a remote ``git fsck --strict`` accepts,
  and a second push makes it equal to the local repository. A process replicating in the
  background is killed mid-push: reopening the repository resumes replication until the
  remote has every checkpoint.
- **Hostile remotes.** Refs that are no qvc thread (undecodable names, blobs, trees, plain git
  commits, garbage pending writes, superseded lines of missing threads), a remote whose config
  and hooks ask for programs, and URLs that try to inject options or use the ``ext::``
  transport: a typed error or a one-line CLI error with a non-zero exit, or a clean result;
  nothing local lost; no program run on the client.

``QVC_REMOTE_KILLS`` scales the long variant (``-m slow``).
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import helpers
import pytest
from git_servers import GitDaemon, snapshot
from helpers import child_env, fsck, run_git
from test_crash import slow_enabled
from traps import arm, marker_of_key

import qvc
from qvc import CheckpointConfig, GitCheckpointStore, PushRejectedError, QvcError, RemoteError, fork_checkpoint
from qvc.readers.fsck import fsck as qvc_fsck
from qvc.remotes.remote import add_remote

# what the server's receive-pack may run, from the server repository's own hooks and config
SERVER_SIDE = {f"{where}-{hook}" for where in ("hook", "hookspath") for hook in (
    "pre-receive", "update", "post-update", "reference-transaction", "proc-receive", "push-to-checkout",
    "post-receive")} | {marker_of_key("core.alternateRefsCommand")}

pytestmark = [pytest.mark.heavy,  # a kill loop: left out of the quick tier
              pytest.mark.usefixtures("isolated_git")]  # git with no system or global config of the machine


def qvc_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "qvc", *args]


def run_qvc(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(qvc_cmd(*args), capture_output=True, text=True, env=child_env(), cwd=cwd,
                          stdin=subprocess.DEVNULL, timeout=120)


def assert_one_line_error(proc: subprocess.CompletedProcess, what: str) -> None:
    assert proc.returncode not in (0, -signal.SIGKILL), f"{what}: exit {proc.returncode}"
    err = proc.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1 and err.startswith("qvc: "), f"{what}: {err!r}"


def assert_clean_or_one_line(proc: subprocess.CompletedProcess, what: str) -> None:
    """Exit 0, or one ``qvc: ...`` line and a non-zero exit (``qvc fsck``: one line per problem, exit 5)."""
    assert "Traceback" not in proc.stderr, f"{what}: {proc.stderr}"
    if proc.args[-1] == "fsck" and proc.returncode == 5:
        assert all(line.startswith("error: ") for line in proc.stderr.splitlines()), proc.stderr
    elif proc.returncode != 0:
        assert_one_line_error(proc, what)


def checkpoints(store) -> dict:
    """Every checkpoint of every local thread (``snapshot`` without its list of ref names)."""
    return {k: v for k, v in snapshot(store).items() if k != "refs"}


def pushable_refs(git_dir: Path) -> dict[str, str]:
    out = run_git(git_dir, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads/", "refs/qvc/",
                  "refs/notes/").stdout
    return {name: sha for name, sha in (line.split() for line in out.splitlines())
            if not name.startswith("refs/qvc/remotes/")}


# -- hostile remotes ---------------------------------------------------------------------------


def put(store, thread: str, step: int, **state) -> None:
    """``helpers.put`` of checkpoint ``<thread>-<step>`` (kept: these tests name checkpoints by step)."""
    helpers.put(store, thread, f"{thread}-{step}", step, state or {"n": step}, metadata={})


def hostile_remote(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A bare remote holding a good qvc thread plus refs no qvc wrote (name -> what it is)."""
    good = tmp_path / "good.qvc"
    with GitCheckpointStore(good) as store:
        for step in range(3):
            put(store, "good", step)
        good_head = store.head("good")
    bare = tmp_path / "srv" / "evil.git"
    bare.parent.mkdir(exist_ok=True)
    run_git(None, "init", "-q", "--bare", str(bare))
    run_git(bare, "config", "user.name", "someone else")
    run_git(bare, "config", "user.email", "x@example.com")
    run_git(good, "push", "-q", str(bare), "refs/heads/*:refs/heads/*")
    blob = run_git(bare, "hash-object", "-w", "--stdin", input="not a checkpoint\n").stdout.strip()
    tree = run_git(bare, "mktree", input=f"100644 blob {blob}\tREADME\n").stdout.strip()
    plain = run_git(bare, "commit-tree", tree, "-m", "plain git").stdout.strip()
    # git refuses non-commits under refs/heads/: a hostile server just writes the files
    refs = {"refs/heads/%FF": plain, "refs/heads/%C3%28": plain, "refs/heads/a%%b": plain,
            "refs/heads/blob": blob, "refs/heads/tree": tree, "refs/heads/plain": plain,
            "refs/qvc/writes/garbage": blob, f"refs/qvc/writes/{good_head}": tree,
            f"refs/qvc/writes/{'ab' * 20}": plain,
            f"refs/qvc/superseded/no-such-thread/{plain}": plain,
            f"refs/qvc/superseded/good/{blob}": blob}
    for name, sha in refs.items():
        path = bare / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(sha + "\n")
    return bare, refs


def test_fetch_and_clone_from_hostile_refs(tmp_path):
    bare, refs = hostile_remote(tmp_path)
    cases = 0
    for attempt in ("every ref", "no blob or tree heads"):  # git itself refuses non-commits under refs/heads/
        lib, cli = tmp_path / f"lib-{len(attempt)}.qvc", tmp_path / f"cli-{len(attempt)}.qvc"
        try:  # the library: a clean result or a typed error
            with qvc.clone(str(bare), lib) as cloned:
                threads = cloned.threads()
                assert [t.checkpoint.id for t in cloned.list(CheckpointConfig("good"))] == ["good-2", "good-1",
                                                                                             "good-0"]
                for thread in threads:
                    try:
                        list(cloned.list(CheckpointConfig(thread), superseded=True))
                    except QvcError:
                        pass
                assert qvc_fsck(cloned).problems  # the hostile refs are reported, not hidden
        except QvcError:
            assert not lib.exists()
        proc = run_qvc("clone", str(bare), str(cli))  # the command line, then every reading command
        assert_clean_or_one_line(proc, "clone")
        assert not list(tmp_path.glob(".qvc-clone-*"))
        cases += 2
        if proc.returncode == 0:
            for args in (["log", "--all"], ["fsck"], ["show", "plain"], ["diff", "good", "plain"],
                         ["checkout", "plain"]):
                assert_clean_or_one_line(run_qvc("--repo", str(cli), *args), f"qvc {' '.join(args)} on the clone")
                cases += 1
        else:
            assert not cli.exists()
        for name in ("refs/heads/blob", "refs/heads/tree"):
            (bare / name).unlink(missing_ok=True)
    # fetch into a repository with threads of its own: they are untouched
    local = tmp_path / "local.qvc"
    with GitCheckpointStore(local) as store:
        for step in range(2):
            put(store, "mine", step)
        fork_checkpoint(store, CheckpointConfig("mine", "mine-0"), new_thread_id="mine/fork")
        add_remote(store, "origin", str(bare))
    for name, sha in refs.items():  # put the blob and tree heads back for the fetch
        (bare / name).write_text(sha + "\n")
    run_git(local, "fetch", "-q", str(tmp_path / "good.qvc"), "refs/heads/good:refs/heads/good")  # shared history
    with GitCheckpointStore(local) as store:
        before = checkpoints(store)
        fetched = qvc.fetch(store)  # git takes non-commits under refs/remotes/: a clean result
        assert "%FF" in fetched.threads and "blob" in fetched.threads
        # the garbage pending writes of the shared checkpoint stay out of refs/qvc/writes/
        assert any("do not read" in (c.reason or "") for c in fetched.conflicts), fetched.conflicts
        assert checkpoints(store) == before
    cases += 1
    for args in (["fetch"], ["branch", "-a"], ["log", "origin/blob"], ["show", "origin/tree"],
                 ["checkout", "-b", "x", "origin/blob"], ["push"]):
        assert_clean_or_one_line(run_qvc("--repo", str(local), *args), f"qvc {' '.join(args)} after fetch")
        cases += 1
    fsck(local)
    with GitCheckpointStore(local) as store:
        after = checkpoints(store)
        assert {t: after[t] for t in before} == before
    print(f"\nhostile refs: {len(refs)} crafted refs, {cases} operations")


@pytest.fixture
def daemon(tmp_path):
    (tmp_path / "srv").mkdir(exist_ok=True)
    server = GitDaemon(str(tmp_path / "srv")).start()
    yield server
    server.stop()


def test_a_remote_that_asks_for_programs(tmp_path, daemon):
    """Hooks and config of the remote repository run nothing on the client (clone, fetch);
    a push runs only the server's own receive hooks, as any git server does."""
    bare, _ = hostile_remote(tmp_path)
    for name in ("refs/heads/blob", "refs/heads/tree"):  # git would refuse the whole clone
        (bare / name).unlink()
    markers = tmp_path / "markers"
    arm(bare, markers)
    for kind, url in (("path", str(bare)), ("daemon", daemon.url("evil.git"))):
        dest = tmp_path / f"clone-{kind}.qvc"
        proc = run_qvc("clone", url, str(dest))
        assert proc.returncode == 0, proc.stderr
        assert not list(markers.iterdir()), f"clone over {kind} ran {sorted(os.listdir(markers))}"
        with GitCheckpointStore(dest, create=False) as store:
            put(store, "good", 3)
        for args in (["fetch"], ["log", "--all"], ["fsck"]):
            assert_clean_or_one_line(run_qvc("--repo", str(dest), *args), f"{args} over {kind}")
        assert not list(markers.iterdir()), f"over {kind}: {sorted(os.listdir(markers))}"
        assert run_qvc("--repo", str(dest), "push", "origin", "good").returncode == 0
        ran = {m.name for m in markers.iterdir()}
        assert ran and ran <= SERVER_SIDE, f"push over {kind}: {sorted(os.listdir(markers))}"  # the server's own
        print(f"\npush over {kind} ran the server's {sorted(ran)}")
        for m in markers.iterdir():
            m.unlink()
        (bare / "refs" / "heads" / "good").write_text(run_git(bare, "rev-parse", "good~1").stdout)  # for the next


# refused before git runs: git would take them for options
INJECTING_URLS = ["--upload-pack=touch${IFS}{m}/upload-pack:x", "--upload-pack=touch {m}/upload-pack-2",
                  "-oProxyCommand=touch${IFS}{m}/proxy:x", "-c core.sshCommand=touch", "--template={m}/tmpl:x",
                  "a\nb"]
# accepted as URLs (as git does) but never usable: git blocks the host, qvc bans the transport
BLOCKED_URLS = ["ssh://-oProxyCommand=touch${IFS}{m}/ssh-host/x", "ext::sh -c touch% {m}/ext",
                "ext::sh -c touch% {m}/ext-2%", "fd::0"]


def test_urls_and_names_cannot_inject(tmp_path, monkeypatch):
    """Options hidden in URLs and remote names, and the ``ext::``/``fd::`` transports, even
    when the user's own git config and environment allow every protocol. The library sees
    every case; the command line (one line, non-zero exit) a clone of each URL and a few more."""
    (tmp_path / "gitconfig").write_text("[protocol]\n\tallow = always\n")
    monkeypatch.setenv("GIT_ALLOW_PROTOCOL", "ext:fd:file")
    monkeypatch.chdir(tmp_path)  # a URL taken for a path lands here
    markers = tmp_path / "markers"
    markers.mkdir()
    repo = tmp_path / "r.qvc"
    with GitCheckpointStore(repo) as store:
        put(store, "t", 0)
        before = snapshot(store)
    cases = 0
    for template in INJECTING_URLS + BLOCKED_URLS:
        url = template.replace("{m}", str(markers))
        if len(url) % 2 or template == "a\nb":  # the command line for about half of them
            assert_one_line_error(run_qvc("clone", url, str(tmp_path / "c.qvc"), cwd=tmp_path), f"clone {url}")
            cases += 1
        with pytest.raises(QvcError):
            qvc.clone(url, tmp_path / "c.qvc")
        with GitCheckpointStore(repo) as store:
            with pytest.raises(QvcError):
                qvc.push(store, url)
            with pytest.raises(QvcError):
                qvc.fetch(store, url)
            if template in INJECTING_URLS:
                with pytest.raises(QvcError):
                    add_remote(store, "evil", url)
        cases += 4
        assert not (tmp_path / "c.qvc").exists()
    # a URL written into the config by hand (not through qvc) is used after "--" and without ext::
    with GitCheckpointStore(repo) as store:
        add_remote(store, "evil", str(tmp_path / "nowhere.git"))
    for i, template in enumerate(INJECTING_URLS[:-1] + BLOCKED_URLS):
        run_git(repo, "config", "remote.evil.url", template.replace("{m}", str(markers)))
        with GitCheckpointStore(repo) as store:
            for call in (qvc.push, qvc.fetch):
                with pytest.raises(QvcError):
                    call(store, "evil")
                cases += 1
        if i % 4 == 0:
            assert_one_line_error(run_qvc("--repo", str(repo), "push", "evil"), f"push to {template}")
            cases += 1
    with GitCheckpointStore(repo) as store:
        for name in ("-oProxyCommand=x", "--upload-pack=touch", "a b", "../x", "x:y", "a\nb"):
            with pytest.raises(QvcError):
                add_remote(store, name, str(tmp_path))
            cases += 1
    assert_one_line_error(run_qvc("--repo", str(repo), "remote", "add", "--", "-oProxyCommand=x", str(tmp_path)),
                          "remote add -oProxyCommand=x")
    assert not list(markers.iterdir()), sorted(os.listdir(markers))
    assert not list(tmp_path.glob("*upload-pack*")) and not list(tmp_path.glob("*proxy*"))
    with GitCheckpointStore(repo) as store:
        assert snapshot(store) == before
    fsck(repo)
    print(f"\nhostile URLs and names: {cases} attempts")


# -- transfers killed ----------------------------------------------------------------------------

THREADS = 100


def long_kills(request) -> int:
    if not slow_enabled(request.config):
        pytest.skip("long variant: run with -m slow (or QVC_SLOW=1)")
    return int(os.environ.get("QVC_REMOTE_KILLS", "30"))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A repository of THREADS threads (two checkpoints each, 12 KiB of noise per checkpoint, some
    superseded lines and pending writes), pushed to a bare hub served over a path and ``git daemon``."""
    root = tmp_path_factory.mktemp("remote-kills")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GIT_CONFIG_NOSYSTEM", "1")
        mp.setenv("GIT_CONFIG_GLOBAL", os.devnull)
        rng = random.Random(7)
        src = root / "src.qvc"
        with GitCheckpointStore(src, durability="exit", fsync=False) as store:
            for t in range(THREADS):
                for step in range(2):
                    put(store, f"run-{t}", step, noise=rng.randbytes(12288), n=step)
                if t % 10 == 0:
                    fork_checkpoint(store, CheckpointConfig(f"run-{t}", f"run-{t}-0"))  # a superseded line
                    store.put_writes(CheckpointConfig(f"run-{t}"), [("messages", f"w{t}")], task_id="task")
        (root / "srv").mkdir()
        hub = root / "srv" / "hub.git"
        run_git(None, "init", "-q", "--bare", str(hub))
        with GitCheckpointStore(src) as store:
            qvc.push(store, str(hub))
        daemon = GitDaemon(str(root / "srv")).start()
        try:
            yield {"root": root, "src": src, "hub": hub, "daemon": daemon,
                   "urls": {"path": str(hub), "daemon": daemon.url("hub.git")}}
        finally:
            daemon.stop()


def wait_group_gone(pgid: int, timeout: float = 60.0) -> None:
    """Wait until no process of the killed command's group is left (a git it started may finish)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.01)
    raise AssertionError(f"process group {pgid} still alive after {timeout} s")


class Killer:
    """Runs a command and SIGKILLs it after a delay that adapts to how long the command takes:
    kills land before, during and after its transfer. Odd kills take the command's git
    processes down with it; even kills kill the command alone."""

    def __init__(self, seed: int, span: float):
        self.rng = random.Random(seed)
        self.span = span
        self.stats = {"kills": 0, "finished": 0, "killed": 0}

    def run(self, args: list[str]) -> bool:
        proc = subprocess.Popen(qvc_cmd(*args), env=child_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        time.sleep(self.rng.uniform(0.15 * self.span, 1.1 * self.span))
        if self.stats["kills"] % 2:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
        _, err = proc.communicate(timeout=120)
        wait_group_gone(proc.pid)
        finished = proc.returncode == 0
        assert finished or proc.returncode == -signal.SIGKILL, f"{args}: exit {proc.returncode}: {err}"
        self.stats["kills"] += 1
        self.stats["finished" if finished else "killed"] += 1
        self.span *= 0.85 if finished else 1.15
        return finished


def timed(args: list[str]) -> float:
    start = time.monotonic()
    subprocess.run(qvc_cmd(*args), env=child_env(), check=True, capture_output=True, stdin=subprocess.DEVNULL)
    return time.monotonic() - start


def heads(git_dir: Path) -> dict[str, str]:
    return {k: v for k, v in pushable_refs(git_dir).items() if k.startswith("refs/heads/")}


def kill_clones(world, kills: int, seed: int) -> dict:
    work = world["root"] / f"clones-{seed}"
    work.mkdir()
    expected = heads(world["hub"])
    killer = Killer(seed, timed(["clone", world["urls"]["path"], str(work / "first.qvc")]))
    stats = {"absent": 0, "complete": 0, "work_folders_left": 0}
    for k in range(kills):
        kind = ("path", "daemon")[k % 2]
        dest = work / f"c{k}.qvc"
        killer.run(["clone", world["urls"][kind], str(dest)])
        stats["work_folders_left"] += len(list(work.glob(".qvc-clone-*")))
        if not dest.exists():
            stats["absent"] += 1
            continue
        stats["complete"] += 1
        with GitCheckpointStore(dest, create=False) as store:  # there at all: complete
            assert not qvc_fsck(store).problems, f"[kill {k} over {kind}] {qvc_fsck(store).problems}"
        assert heads(dest) == expected, f"[kill {k} over {kind}] clone lacks threads"
    # the next clone sweeps the work folders killed clones left; the last one is complete, checkpoint by checkpoint
    with qvc.clone(world["urls"]["daemon"], work / "last.qvc") as last, \
            GitCheckpointStore(world["src"], readonly=True) as src:
        assert checkpoints(last) == checkpoints(src)
    assert not list(work.glob(".qvc-clone-*"))
    return killer.stats | stats


def test_clone_sweeps_work_folders_of_killed_clones_only(tmp_path):
    """Regression: a killed clone's ``.qvc-clone-*`` folder stayed forever. The next clone into
    the same folder removes it (also one a killed sweep left half removed), never a live one."""
    import fcntl

    src = tmp_path / "src.qvc"
    with GitCheckpointStore(src) as store:
        put(store, "t", 0)
    work = tmp_path / "work"
    (work / ".qvc-clone-dead" / "repo" / "objects").mkdir(parents=True)
    (work / ".qvc-clone-dead" / "owner.lock").write_text("")
    (work / ".qvc-clone-dead" / ".qvc-init-x").mkdir()  # the store's own creation folder
    (work / ".qvc-clone-half").mkdir(parents=True)
    (work / ".qvc-clone-half" / "owner.lock").write_text("")  # a sweep killed after removing repo/
    (work / ".qvc-clone-live" / "repo").mkdir(parents=True)
    with open(work / ".qvc-clone-live" / "owner.lock", "w") as live:
        fcntl.flock(live, fcntl.LOCK_EX)
        qvc.clone(str(src), work / "c.qvc").close()
        assert sorted(p.name for p in work.iterdir()) == [".qvc-clone-live", "c.qvc"]


def kill_fetches(world, kills: int, seed: int) -> dict:
    work = world["root"] / f"fetches-{seed}"
    work.mkdir()
    expected = {f"refs/remotes/origin/{k[len('refs/heads/'):]}": v for k, v in heads(world["hub"]).items()}
    with GitCheckpointStore(work / "timing.qvc") as store:
        add_remote(store, "origin", world["urls"]["path"])
    killer, stats = Killer(seed, timed(["--repo", str(work / "timing.qvc"), "fetch"])), {"partial": 0, "stale_locks": 0}
    for k in range(kills):
        kind = ("path", "daemon")[k % 2]
        local = work / f"f{k}.qvc"
        with GitCheckpointStore(local) as store:
            for step in range(2):
                put(store, "mine", step)
            add_remote(store, "origin", world["urls"][kind])
            before = checkpoints(store)
        killer.run(["--repo", str(local), "fetch"])
        fsck(local)  # every remote-tracking ref points at a complete commit
        with GitCheckpointStore(local) as store:
            assert checkpoints(store) == before, f"[kill {k} over {kind}] a local thread changed"
            tracking = dict(store.repository.refs("refs/remotes/origin/"))
            stats["partial"] += tracking != expected
            for ref, tip in tracking.items():
                assert expected.get(ref) == tip, f"[kill {k}] {ref} is not the remote's"
            # git killed with the command inside its ref transaction leaves that ref's .lock: the
            # next fetch is refused with git's line naming it (qvc deletes no lock it did not make)
            locks = [p for p in (local / "refs").rglob("*.lock")]
            if locks:
                stats["stale_locks"] += 1
                with pytest.raises(RemoteError, match=re.escape(str(locks[0].name))):
                    qvc.fetch(store)
                for lock in locks:  # what the user does, as with git
                    lock.unlink()
            qvc.fetch(store)  # a second fetch completes it
            assert dict(store.repository.refs("refs/remotes/origin/")) == expected
            assert checkpoints(store) == before
    return killer.stats | stats


def kill_pushes(world, kills: int, seed: int) -> dict:
    src = world["src"]
    with GitCheckpointStore(src) as store:
        if not any(r.name == "target" for r in qvc.remotes.remote.remotes(store)):
            add_remote(store, "target", str(world["root"] / "nowhere.git"))
    killer, stats = None, {"partial": 0, "stale_locks": 0}
    for k in range(kills + 1):
        kind = ("path", "daemon")[k % 2]
        name = f"p{seed}-{k}.git"
        bare = world["root"] / "srv" / name
        run_git(None, "init", "-q", "--bare", str(bare))
        run_git(src, "config", "remote.target.url", str(bare) if kind == "path" else world["daemon"].url(name))
        if killer is None:  # the first push, not killed, times the rest
            killer = Killer(seed, timed(["--repo", str(src), "push", "target"]))
            continue
        killer.run(["--repo", str(src), "push", "target"])
        fsck(bare)
        fsck(src)
        local = pushable_refs(src)
        remote = pushable_refs(bare)
        stats["partial"] += remote != local
        for ref, tip in remote.items():  # every ref on the remote is complete (fsck) and one of ours
            assert local.get(ref) == tip, f"[kill {k} over {kind}] remote {ref} is not the local one"
        # A path remote's receive-pack dies with the command's group and may leave a ref's .lock on the
        # server: git then refuses that ref, qvc reports it and pushes everything else.
        locks = [p for p in bare.rglob("*.lock") if p.name != "config.lock"]
        with GitCheckpointStore(src) as store:
            if locks:
                stats["stale_locks"] += 1
                with pytest.raises(PushRejectedError) as refused:
                    qvc.push(store, "target")
                assert {u.ref for u in refused.value.result.rejected} == \
                    {str(p.relative_to(bare))[:-len(".lock")] for p in locks}
                for lock in locks:  # what the server's administrator does
                    lock.unlink()
            qvc.push(store, "target")  # a second push completes it
        assert pushable_refs(bare) == pushable_refs(src), f"[kill {k} over {kind}] remote differs after a push"
    with qvc.clone(str(bare), world["root"] / f"pushed-{seed}.qvc") as copy, \
            GitCheckpointStore(src, readonly=True) as store:
        assert snapshot(copy) == snapshot(store)  # the remote equals the local repository, checkpoint by checkpoint
    return killer.stats | stats


def kill_transfers(world, n: int, seed: int) -> None:
    figures = {}
    for what, loop in (("clone", kill_clones), ("fetch", kill_fetches), ("push", kill_pushes)):
        start = time.monotonic()
        figures[what] = loop(world, n, seed=seed)
        figures[what]["seconds"] = round(time.monotonic() - start, 1)
    print(f"\nremote kills (seed {seed}): {figures}")
    assert all(stats["kills"] == n for stats in figures.values())
    assert sum(stats["killed"] for stats in figures.values()) >= min(3, n), "no kill landed mid-transfer"


def test_kill_clone_fetch_push(world):
    kill_transfers(world, 2, seed=11)  # two of each in the default run; the long variant below, many


@pytest.mark.slow
def test_kill_clone_fetch_push_many(world, request):
    kill_transfers(world, long_kills(request), seed=random.randrange(2**31))


REPLICATING_WRITER = r"""
import os, sys, time
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
store = GitCheckpointStore(sys.argv[1])
i = int(sys.argv[2])
while True:
    thread = f"w-{i % 40}"
    store.put(CheckpointConfig(thread), Checkpoint(id=f"{sys.argv[2]}-{i}", thread_id=thread, step=i,
                                                   state_data={"noise": os.urandom(131072)}), {})
    print(f"ACK {i}", flush=True)
    i += 1
    time.sleep(0.005)  # an agent's pace, not a tight loop: what a push carries stays a few MB
"""


def git_push_running(pid: int) -> bool:
    """Whether process ``pid`` has a ``git push`` child running."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tasks:
        try:
            children = Path(f"/proc/{pid}/task/{tid}/children").read_text().split()
        except OSError:
            continue
        for child in children:
            try:
                if b"push" in Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0"):
                    return True
            except OSError:
                continue
    return False


def kill_replication(tmp_path: Path, daemon: GitDaemon, rounds: int, seed: int) -> None:
    rng = random.Random(seed)
    repo = tmp_path / "r.qvc"
    run_git(None, "init", "-q", "--bare", str(tmp_path / "srv" / "backup.git"))
    with GitCheckpointStore(repo) as store:
        add_remote(store, "backup", daemon.url("backup.git"), replicate=True)
    bare = tmp_path / "srv" / "backup.git"
    mid_push = 0
    for r in range(rounds):
        proc = subprocess.Popen([sys.executable, "-c", REPLICATING_WRITER, str(repo), str(r * 10**6)], env=child_env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + 30
        try:
            while not git_push_running(proc.pid):
                assert proc.poll() is None, proc.stderr.read()
                assert time.monotonic() < deadline, "the replicator never pushed"
                time.sleep(0.001)
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)  # never leave the endless writer behind
            proc.wait()
            raise
        time.sleep(rng.uniform(0, 0.02))
        mid_push += git_push_running(proc.pid)
        (os.killpg if r % 2 else lambda pid, sig: os.kill(pid, sig))(proc.pid, signal.SIGKILL)
        proc.wait()
        wait_group_gone(proc.pid)
        fsck(repo)
        fsck(bare)
        with GitCheckpointStore(repo) as store:  # reopening resumes replication
            deadline = time.monotonic() + 60
            while True:
                status = qvc.remotes.replication.replication_status(store)[0]
                if status.threads_behind == 0 and pushable_refs(bare) == pushable_refs(repo):
                    break
                assert time.monotonic() < deadline, f"replication did not catch up: {status}"
                time.sleep(0.1)
    fsck(bare)
    with qvc.clone(str(bare), tmp_path / "copy.qvc") as copy, GitCheckpointStore(repo, readonly=True) as store:
        assert snapshot(copy) == snapshot(store)
    print(f"\nreplication kills: {rounds}, {mid_push} with git push running at the kill")
    assert mid_push >= 1


def test_kill_while_replicating_then_reopen_catches_up(tmp_path, daemon):
    """A process writing with background replication on is SIGKILLed while its replicator's
    ``git push`` runs; reopening the repository resumes replication until the remote has
    every checkpoint."""
    kill_replication(tmp_path, daemon, 2, seed=5)


@pytest.mark.slow
def test_kill_while_replicating_many(tmp_path, daemon, request):
    kill_replication(tmp_path, daemon, max(2, long_kills(request) // 3), seed=random.randrange(2**31))
