#!/usr/bin/env python
"""A repository that has served a fleet: many one-checkpoint threads plus one long thread (issue 16).

Run by hand from the repository root::

    python benchmarks/bench_fleet.py                      # 20,000 threads + one 3,000-checkpoint thread
    python benchmarks/bench_fleet.py --quick              # 2,000 threads + 300, 3 rounds
    python benchmarks/bench_fleet.py --threads 100000 --long 100000 --rounds 3
    python benchmarks/bench_fleet.py --keep               # keep (and reuse) the built repositories

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


def du(path: str) -> int:
    """Allocated bytes under ``path`` (as du)."""
    total = 0
    if os.path.isfile(path):
        return os.lstat(path).st_blocks * 512
    for dirpath, _, files in os.walk(path):
        for name in files:
            total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
    return total


def disk(repo: str) -> dict[str, int]:
    return {part: du(os.path.join(repo, part)) for part in ("objects", "refs", "packed-refs", "logs", "qvc")
            if os.path.exists(os.path.join(repo, part))}


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

        phases = ["loose refs"] + (["after qvc gc"] if args.gc else [])
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
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
