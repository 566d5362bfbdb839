#!/usr/bin/env python
"""Where a reading command's start-up goes: the interpreter, click, qvc's command group, the
command's own imports and its work, measured inside fresh processes.

Run by hand from the repository root (the same small repository as ``bench_cli.py``)::

    .venv/bin/python benchmarks/startup_breakdown.py                    # log -n 20 big, status, show big
    .venv/bin/python benchmarks/startup_breakdown.py --python VENV/bin/python -- log --oneline -n 5 big

Each round starts one process per command. Inside it, ``perf_counter`` times ``import click``,
``import qvc.cli.app`` (the command group, what ``qvc --version`` loads) and the command run
twice through ``qvc.cli.app.main``: the first run pays for the modules the command loads, the
second only for its work, so their difference is what the command's imports cost. The
interpreter's part is the process's wall time (measured outside) less everything timed inside
it and less the second run; the process leaves as ``qvc``'s console script does after a read
(``os._exit``, no teardown). Also printed: how many modules the command loaded (qvc's own
among them) and the size of their bytecode. Collection is off, as ``qvc``'s console script has
it. Medians, in ms; the load average before and after: compare within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from bench_cli import ROOT, build, load_average

#: run inside each process: argv is the command's arguments after ``--repo REPO``
CHILD = r"""
import gc, os, sys, time
gc.disable()
t0 = time.perf_counter()
import click
t1 = time.perf_counter()
from qvc.cli import app
t2 = time.perf_counter()
before = set(sys.modules)
stdout, sys.stdout = sys.stdout, open(os.devnull, "w")
first = app.main(sys.argv[1:])
t3 = time.perf_counter()
second = app.main(sys.argv[1:])
t4 = time.perf_counter()
sys.stdout = stdout
import json
loaded = [sys.modules[m] for m in sys.modules if m not in before]
caches = [getattr(m, "__cached__", None) for m in loaded]
print(json.dumps({"click": t1 - t0, "group": t2 - t1, "first": t3 - t2, "second": t4 - t3, "codes": [first, second],
                  "modules": len(loaded), "own": sum(m.__name__.split(".")[0] == "qvc" for m in loaded),
                  "bytecode": sum(os.path.getsize(c) for c in caches if c and os.path.exists(c))}))
sys.stdout.flush()
os._exit(0)  # as the console script leaves after a read: no teardown of the modules
"""

PARTS = ("interpreter", "import click", "command group", "command's imports", "command's work", "whole process")


def measure(py: str, env: dict, cwd: str, args: list[str]) -> dict:
    """One fresh process running ``args``: its parts in ms, and what it loaded."""
    t0 = time.perf_counter()
    done = subprocess.run([py, "-c", CHILD, *args], env=env, cwd=cwd, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    got = json.loads(done.stdout)
    if got["codes"] != [0, 0]:
        raise SystemExit(f"`qvc {' '.join(args)}` exited {got['codes']}: {done.stderr.strip()}")
    inside = got["click"] + got["group"] + got["first"]
    ms = {"interpreter": wall - inside - got["second"], "import click": got["click"], "command group": got["group"],
          "command's imports": got["first"] - got["second"], "command's work": got["second"],
          "whole process": wall - got["second"]}
    return {"ms": {k: v * 1000 for k, v in ms.items()}, "modules": got["modules"], "own": got["own"],
            "bytecode": got["bytecode"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--dir", default=os.path.join(ROOT, "benchmarks", "out"))
    ap.add_argument("--python", default=sys.executable, help="the interpreter to run qvc with (as bench_cli.py's)")
    ap.add_argument("command", nargs="*", help="one command's arguments (default: the three with a target)")
    args = ap.parse_args()
    commands = [args.command] if args.command else [["log", "-n", "20", "big"], ["status"], ["show", "big"]]

    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if args.python == sys.executable:
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    os.makedirs(args.dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="startup-", dir=args.dir)
    try:
        repo = os.path.join(work, "r.qvc")
        build(repo, 4, 40)
        subprocess.run([args.python, "-m", "qvc", "--repo", repo, "gc"], env=env, check=True, capture_output=True)
        runs = {" ".join(c): [] for c in commands}
        print(f"load average before: {load_average()}")
        for c in commands:  # warm-up: page cache, bytecode
            measure(args.python, env, work, ["--repo", repo, *c])
        for _ in range(args.rounds):
            for c in commands:
                runs[" ".join(c)].append(measure(args.python, env, work, ["--repo", repo, *c]))
        for name, got in runs.items():
            last = got[-1]
            print(f"\n== qvc {name} (median of {args.rounds} processes, ms) ==")
            for part in PARTS:
                print(f"{part:20} {statistics.median(g['ms'][part] for g in got):7.1f}")
            print(f"the command loaded {last['modules']} modules ({last['own']} of qvc), "
                  f"{last['bytecode'] / 1024:.0f} KiB of bytecode")
        print(f"\nload average after: {load_average()} (shared machine: compare within this run)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
