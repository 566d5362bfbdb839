#!/usr/bin/env python
"""A repository that has served a fleet: many one-checkpoint threads plus one long thread (issue 16).

Run by hand from the repository root::

    python benchmarks/bench_fleet.py                      # 20,000 threads + one 3,000-checkpoint thread
    python benchmarks/bench_fleet.py --quick              # 2,000 threads + 300, 3 rounds
    python benchmarks/bench_fleet.py --threads 100000 --long 100000 --rounds 3
    python benchmarks/bench_fleet.py --keep               # keep (and reuse) the built repositories
    python benchmarks/bench_fleet.py --remotes            # + a few runs cloned / fetched against a full clone
    python benchmarks/bench_fleet.py --replicate 1000     # + 8 machines x 1,000 threads pushing to one server

The big repository is built with ASYNC puts (``fsync=False``: the build is not what is measured;
put latency of the first and last 1,000 threads is). A 10-thread repository with the same long
thread shape (``--small``) is built beside it, so each ratio is the cost of scale, not of Python
starting. Every command is a fresh process, commands alternate round by round, medians are
printed (ms) with the ratio big / small and against plain ``git`` on the big repository.
Disk use is printed per part of the repository (allocated bytes, as ``du``) and per thread.
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from measure import allocated  # noqa: E402

from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore  # noqa: E402

# open, read one thread, write one checkpoint, close: what a fresh worker process does
FRESH = """
import sys, uuid
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
with GitCheckpointStore(sys.argv[1]) as store:
    store.get_tuple(CheckpointConfig("big"))
    t = "fresh-" + uuid.uuid4().hex
    store.put(CheckpointConfig(t), Checkpoint(id=uuid.uuid4().hex, thread_id=t, step=0, state_data={"x": 1}), {})
"""


def build(path: str, threads: int, long_thread: int) -> tuple[float, float, float]:
    """Build the repository; return (seconds, median put ms of the first / last 1,000 threads)."""
    t0 = time.perf_counter()
    first: list[float] = []
    last: list[float] = []
    with GitCheckpointStore(path, fsync=False, durability="async") as store:
        for i in range(long_thread):
            state = {"step": i, "scratchpad": f"thinking about step {i}", "status": "RUNNING",
                     "last_tool": {"name": "search", "result": "r" * (i % 200)}}
            store.put(CheckpointConfig("big"), Checkpoint(id=f"big-{i:06d}", thread_id="big", step=i,
                                                          state_data=state), {"source": "loop"})
        window = min(1000, max(1, threads // 4))
        for t in range(threads):
            name = f"run-{t:06d}"
            p0 = time.perf_counter()
            store.put(CheckpointConfig(name), Checkpoint(id=f"{name}-0", thread_id=name, step=0,
                                                         state_data={"x": t, "status": "DONE"}), {"source": "loop"})
            took = (time.perf_counter() - p0) * 1000
            if t < window:
                first.append(took)
            elif t >= threads - window:
                last.append(took)
    med = statistics.median
    return time.perf_counter() - t0, med(first) if first else 0.0, med(last) if last else 0.0


def disk(repo: str) -> dict[str, int]:
    return {part: allocated(os.path.join(repo, part)) for part in ("objects", "refs", "packed-refs", "logs", "qvc")
            if os.path.exists(os.path.join(repo, part))}


MACHINE = r"""
import sys, time
import qvc
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
from qvc.remotes.remote import add_remote
path, url, me, per = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
with GitCheckpointStore(path, durability="async", fsync=False) as store:
    for n in range(per):
        t = f"{me}/run-{n}"
        store.put(CheckpointConfig(t), Checkpoint(id=f"{me}-{n}", thread_id=t, step=0, state_data={"n": n}), {})
    add_remote(store, "hub", url)
    t0 = time.perf_counter()
    result = qvc.push(store, "hub")
    assert not result.rejected, result.rejected
    print(time.perf_counter() - t0)
"""


def git_daemon(base: str, port: int) -> subprocess.Popen:
    proc = subprocess.Popen(["git", "daemon", "--reuseaddr", f"--base-path={base}", "--export-all",
                             "--enable=receive-pack", "--listen=127.0.0.1", f"--port={port}", base],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(0.5)
    return proc


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def remotes(work: str, big: str, qvc: list[str], env: dict) -> None:
    """A few runs of the big repository, cloned and fetched over git daemon, against a full clone."""
    import signal

    base = os.path.dirname(big)
    port = free_port()
    daemon = git_daemon(base, port)
    url = f"git://127.0.0.1:{port}/{os.path.basename(big)}"
    try:
        rows = []
        for label, extra in (("full clone", []), ("clone --thread 'run-00001*' (10 runs)", ["--thread", "run-00001*"])):
            dest = os.path.join(work, f"clone-{len(rows)}.qvc")
            shutil.rmtree(dest, ignore_errors=True)
            t0 = time.perf_counter()
            subprocess.run([*qvc, "clone", "-q", *extra, url, dest], env=env, check=True, capture_output=True)
            rows.append((label, time.perf_counter() - t0, allocated(os.path.join(dest, "objects"))))
        dest = os.path.join(work, "fetch.qvc")
        shutil.rmtree(dest, ignore_errors=True)
        subprocess.run([*qvc, "init", dest], env=env, check=True, capture_output=True)
        subprocess.run([*qvc, "--repo", dest, "remote", "add", "origin", url], env=env, check=True, capture_output=True)
        t0 = time.perf_counter()
        subprocess.run([*qvc, "--repo", dest, "fetch", "-q", "origin", "run-000001", "run-000002", "big"], env=env,
                       check=True, capture_output=True)
        rows.append(("fetch origin run-000001 run-000002 big", time.perf_counter() - t0,
                     allocated(os.path.join(dest, "objects"))))
        print("\n== a few runs from the big repository over git daemon ==")
        for label, took, size in rows:
            print(f"{label:40} {took * 1000:9.0f} ms {size / 2**20:9.2f} MB of objects")
    finally:
        os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait()


def replicate(work: str, per: int, env: dict) -> None:
    """8 processes on 8 repositories pushing to one bare repository over git daemon, against plain
    ``git push`` of the same refs (8 at once) to another."""
    import signal

    srv = os.path.join(work, "srv")
    shutil.rmtree(srv, ignore_errors=True)
    os.makedirs(srv)
    for name in ("hub.git", "plain.git"):
        GitCheckpointStore(os.path.join(srv, name)).close()
    port = free_port()
    daemon = git_daemon(srv, port)
    try:
        t0 = time.perf_counter()
        procs = [subprocess.Popen([sys.executable, "-c", MACHINE, os.path.join(work, f"m{i}.qvc"),
                                   f"git://127.0.0.1:{port}/hub.git", f"m{i}", str(per)], env=env,
                                  stdout=subprocess.PIPE, text=True) for i in range(8)]
        pushes = [float(p.communicate()[0].split()[-1]) for p in procs]
        wall = time.perf_counter() - t0
        t0 = time.perf_counter()
        plain = [subprocess.Popen(["git", "--git-dir", os.path.join(work, f"m{i}.qvc"), "push", "-q",
                                   f"git://127.0.0.1:{port}/plain.git", "refs/heads/*:refs/heads/*"], env=env)
                 for i in range(8)]
        for p in plain:
            assert p.wait() == 0
        git_push = time.perf_counter() - t0
        with GitCheckpointStore(os.path.join(srv, "hub.git"), readonly=True) as hub:
            arrived = len(hub.threads())
        print(f"\n== 8 machines x {per} threads pushing to one server (git daemon) ==")
        print(f"every thread arrived: {arrived} of {8 * per}; qvc push (8 at once, slowest) {max(pushes):.2f} s "
              f"(whole run with the puts {wall:.1f} s); plain git push of the same refs {git_push:.2f} s; "
              f"ratio {max(pushes) / git_push:.2f}")
    finally:
        os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=20000)
    ap.add_argument("--long", type=int, default=3000, help="checkpoints of the long thread")
    ap.add_argument("--small", type=int, default=10, help="threads of the comparison repository")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="2,000 threads + 300 checkpoints, 3 rounds")
    ap.add_argument("--gc", action="store_true", help="also measure after `qvc gc` (packs refs)")
    ap.add_argument("--keep", action="store_true", help="keep the repositories in --dir and reuse them next time")
    ap.add_argument("--dir", default=os.path.join(ROOT, "benchmarks", "out"))
    ap.add_argument("--remotes", action="store_true", help="also clone / fetch a few runs over git daemon")
    ap.add_argument("--replicate", type=int, default=0, metavar="N",
                    help="also 8 processes x N threads pushing to one server")
    ap.add_argument("--skip-commands", action="store_true", help="skip the command timings")
    args = ap.parse_args()
    if args.quick:
        args.threads, args.long, args.rounds = 2000, 300, 3
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    compileall.compile_dir(os.path.join(ROOT, "qvc"), quiet=1)
    os.makedirs(args.dir, exist_ok=True)
    work = (os.path.join(args.dir, f"fleet-{args.threads}-{args.long}") if args.keep
            else tempfile.mkdtemp(prefix="bench-fleet-", dir=args.dir))
    repos = {"big": os.path.join(work, "big.qvc"), "small": os.path.join(work, "small.qvc")}
    py = sys.executable
    script = shutil.which("qvc", path=os.path.dirname(py))
    qvc = [script] if script else [py, "-m", "qvc"]
    try:
        for key, count in (("big", args.threads), ("small", args.small)):
            if os.path.isdir(repos[key]):
                print(f"{key}: reusing {repos[key]}")
                continue
            took, first, last = build(repos[key], count, args.long)
            print(f"{key}: {count} threads + 1 of {args.long} checkpoints built in {took:.1f} s"
                  + (f"; ASYNC put, first / last 1,000 threads: {first:.2f} / {last:.2f} ms "
                     f"({last / first:.2f}x)" if key == "big" and first else ""))
        print(f"machine: {os.cpu_count()} cores; python {sys.version.split()[0]}")

        def commands(repo: str) -> dict[str, list[str]]:
            return {
                "qvc branch": [*qvc, "--repo", repo, "branch"],
                "qvc status": [*qvc, "--repo", repo, "status"],
                "qvc log -n 20 big": [*qvc, "--repo", repo, "log", "-n", "20", "big"],
                "qvc log --all -n 20 --oneline": [*qvc, "--repo", repo, "log", "--all", "-n", "20", "--oneline"],
                "fresh open, get, put, close": [py, "-c", FRESH, repo],
                "git branch": ["git", "--git-dir", repo, "branch"],
                "git log --all -n 20": ["git", "--git-dir", repo, "log", "--all", "-n", "20", "--oneline"],
            }

        phases = [] if args.skip_commands else ["as built"] + (["after qvc gc"] if args.gc else [])
        for phase in phases:
            if phase == "after qvc gc":
                for repo in repos.values():
                    subprocess.run([*qvc, "--repo", repo, "gc"], env=env, check=True, capture_output=True)
            runs = {(key, name): cmd for key, repo in repos.items() for name, cmd in commands(repo).items()}
            times: dict[tuple[str, str], list[float]] = {k: [] for k in runs}
            for cmd in runs.values():  # warm-up: page cache, bytecode
                subprocess.run(cmd, env=env, check=True, capture_output=True)
            for r in range(args.rounds):
                order = list(runs.items())
                order = order[r % len(order):] + order[: r % len(order)]
                for k, cmd in order:
                    t0 = time.perf_counter()
                    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    times[k].append((time.perf_counter() - t0) * 1000)
            med = {k: statistics.median(v) for k, v in times.items()}
            print(f"\n== {phase}: median of {args.rounds} runs, ms ==")
            print(f"{'command':32} {args.threads:>9,} {args.small:>9,} {'ratio':>6}  target")
            for name in commands(""):
                big, small = med[("big", name)], med[("small", name)]
                target = "" if name.startswith("git") else ("PASS" if big <= 2 * small else "MISS")
                print(f"{name:32} {big:9.1f} {small:9.1f} {big / small:6.2f}  {target}")
        usage = disk(repos["big"])
        total = sum(usage.values())
        print(f"\ndisk of the {args.threads:,}-thread repository (allocated bytes):")
        for part, size in usage.items():
            print(f"  {part:12} {size / 2**20:8.1f} MB")
        print(f"  {'total':12} {total / 2**20:8.1f} MB; {total / (args.threads + 1):,.0f} bytes per thread")
        packs = len([n for n in os.listdir(os.path.join(repos['big'], "objects", "pack")) if n.endswith(".pack")])
        print(f"  packs: {packs}")
        if args.remotes:
            remotes(work, repos["big"], qvc, env)
        if args.replicate:
            replicate(work, args.replicate, env)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
