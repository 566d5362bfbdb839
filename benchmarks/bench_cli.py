#!/usr/bin/env python
"""Wall time of whole ``qvc`` commands, side by side with ``git``.

Run by hand from the repository root::

    .venv/bin/python benchmarks/bench_cli.py            # small: 4 threads + one 40-checkpoint thread
    .venv/bin/python benchmarks/bench_cli.py --large    # 1,000 threads + one 5,000-checkpoint thread
    .venv/bin/python benchmarks/bench_cli.py --quick    # 200 threads + 1,000 checkpoints
    .venv/bin/python benchmarks/bench_cli.py --baseline ../qvc-before   # before and after, alternating

The small repository measures what every command pays whatever the repository (start-up): the
everyday reading commands (``log -n 20``, ``status``, ``show``) have a target of 60 ms each
there; the large one measures how commands scale (``log -n 20`` under 150 ms).

Each command is a fresh process (as a person runs it), timed with ``perf_counter`` around
``subprocess.run``; commands alternate round by round so load spikes hit them all alike.
Reported: the median wall time per command over the rounds, the median CPU time (user + system,
which load inflates less), and ratios against the floors measured in the same run
(``python -c pass``; ``import click``, the one dependency reading commands load: they never import
pygit2) and against ``git log`` on the same repository. ``qvc --version`` is the command line's own
floor (click and qvc's command group, no repository): each target's line says how far above it
the command took. Bytecode is compiled first and kept (as
a normal install has it), whatever PYTHONDONTWRITEBYTECODE says in the calling shell. The load
average (``/proc/loadavg``) is printed before and after: on a shared machine, compare within one run.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore  # noqa: E402

#: (threads, checkpoints of thread ``big``, rounds) and the targets (median ms per command) of each size.
SIZES = {"small": (4, 40, 21), "quick": (200, 1000, 7), "large": (1000, 5000, 15)}
TARGETS = {"small": {"qvc log -n 20 big": 60.0, "qvc status": 60.0, "qvc show big": 60.0},
           "quick": {"qvc log -n 20 big": 150.0}, "large": {"qvc log -n 20 big": 150.0}}


def build(path: str, threads: int, long_thread: int) -> float:
    """A repository with ``threads`` short threads and one ``long_thread``-checkpoint thread."""
    t0 = time.perf_counter()
    with GitCheckpointStore(path, fsync=False, durability="exit") as store:
        for i in range(long_thread):
            state = {"step": i, "scratchpad": f"thinking about step {i}", "status": "RUNNING",
                     "config": {"model": "m-1"}, "last_tool": {"name": "search", "result": "r" * (i % 200)}}
            store.put(CheckpointConfig("big"), Checkpoint(id=f"big-{i:05d}", thread_id="big", step=i,
                                                          state_data=state), {"source": "loop", "step": i})
        for t in range(threads):
            name = f"run_{t:04d}"
            for s in range(1 + t % 2):
                store.put(CheckpointConfig(name), Checkpoint(id=f"{name}-{s}", thread_id=name, step=s,
                                                             state_data={"x": t, "s": s}), {"source": "loop"})
    return time.perf_counter() - t0


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, or "unknown" where /proc has none."""
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--large", dest="size", action="store_const", const="large",
                      help="1,000 threads + one thread of 5,000 checkpoints (default: a small repository)")
    size.add_argument("--quick", dest="size", action="store_const", const="quick",
                      help="200 threads + one thread of 1,000 checkpoints, fewer rounds")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--dir", default=os.path.join(ROOT, "benchmarks", "out"))
    ap.add_argument("--python", default=sys.executable,
                    help="run qvc and the floors with this interpreter, e.g. that of a venv where qvc is installed "
                         "as users install it (`pip install .`: an editable install adds an import hook to every "
                         "start of Python)")
    ap.add_argument("--baseline", metavar="CHECKOUT",
                    help="another checkout of qvc (say, before a change): its commands run too, as 'before: ...', "
                         "alternating with this checkout's in every round, so load hits both alike")
    args = ap.parse_args()
    size = args.size or "small"
    threads, long_thread, rounds = SIZES[size]
    rounds = args.rounds or rounds

    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if args.python == sys.executable:  # this checkout's qvc
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        compileall.compile_dir(os.path.join(ROOT, "qvc"), quiet=1)
    os.makedirs(args.dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="bench-cli-", dir=args.dir)
    repo = os.path.join(work, "r.qvc")
    try:
        took = build(repo, threads, long_thread)
        print(f"repository: {threads} threads + 1 thread of {long_thread} checkpoints, built in {took:.0f} s")
        py = args.python
        script = shutil.which("qvc", path=os.path.dirname(py))
        qvc = [script] if script else [py, "-m", "qvc"]
        version = subprocess.run([py, "-c", "import sys, qvc; print(sys.version.split()[0], qvc.__file__)"], env=env,
                                 capture_output=True, text=True, check=True, cwd=work).stdout.strip()
        print(f"qvc command: {' '.join(qvc)}; python and qvc: {version}")
        print(f"load average before: {load_average()}")
        commands = {
            "python -c pass": [py, "-c", "pass"],
            "import click": [py, "-c", "import click"],
            "git log -n 20 big": ["git", "--git-dir", repo, "log", "-n", "20", "big"],
            "qvc --version": [*qvc, "--version"],
            "qvc log -n 20 big": [*qvc, "--repo", repo, "log", "-n", "20", "big"],
            "qvc log --oneline -n 20 big": [*qvc, "--repo", repo, "log", "--oneline", "-n", "20", "big"],
            "qvc show big": [*qvc, "--repo", repo, "show", "big"],
            "qvc branch": [*qvc, "--repo", repo, "branch"],
            "qvc status": [*qvc, "--repo", repo, "status"],
        }
        envs = {name: env for name in commands}
        if args.baseline:  # the baseline's package first on the path; its .pyc compiled as this one's
            before = dict(env, PYTHONPATH=os.path.abspath(args.baseline) + os.pathsep + env.get("PYTHONPATH", ""))
            compileall.compile_dir(os.path.join(args.baseline, "qvc"), quiet=1)
            for name in [n for n in commands if n.startswith("qvc ")]:
                commands[f"before: {name}"] = commands[name]
                envs[f"before: {name}"] = before
        results: dict[str, dict[str, list[float]]] = {}
        for phase in ("loose refs", "after qvc gc"):
            if phase == "after qvc gc":
                subprocess.run([*qvc, "--repo", repo, "gc"], env=env, check=True, capture_output=True, cwd=work)
            times: dict[str, list[float]] = {name: [] for name in commands}
            cpu: dict[str, list[float]] = {name: [] for name in commands}
            for name, cmd in commands.items():  # warm-up: page cache, pyc
                subprocess.run(cmd, env=envs[name], check=True, capture_output=True, cwd=work)
            for r in range(rounds):
                order = list(commands.items())
                order = order[r % len(order):] + order[: r % len(order)]
                for name, cmd in order:
                    before = resource.getrusage(resource.RUSAGE_CHILDREN)
                    t0 = time.perf_counter()
                    subprocess.run(cmd, env=envs[name], check=True, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, cwd=work)
                    times[name].append((time.perf_counter() - t0) * 1000)
                    after = resource.getrusage(resource.RUSAGE_CHILDREN)
                    cpu[name].append((after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000)
            results[phase] = times, cpu
        for phase, (times, cpu) in results.items():
            med = {name: statistics.median(v) for name, v in times.items()}
            floor, deps, git = med["python -c pass"], med["import click"], med["git log -n 20 big"]
            print(f"\n== {phase} (median of {rounds} runs, ms) ==")
            print(f"{'command':40} {'median':>8} {'min':>8} {'cpu':>8} {'x python':>9} {'x click':>7} {'x git':>7}")
            for name, v in times.items():
                print(f"{name:40} {med[name]:8.1f} {min(v):8.1f} {statistics.median(cpu[name]):8.1f} "
                      f"{med[name] / floor:9.1f} "
                      f"{med[name] / deps:7.2f} {med[name] / git:7.1f}")
            for name, target in TARGETS[size].items():
                verdict = "PASS" if med[name] <= target else "MISS"
                print(f"target: {name} <= {target:.0f} ms: {med[name]:.0f} ms {verdict} "
                      f"({med[name] - med['qvc --version']:.0f} ms over `qvc --version`)")
        print(f"\nload average after: {load_average()} (shared machine: compare within this run)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
