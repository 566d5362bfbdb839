#!/usr/bin/env python
"""Latency of ``qvc serve`` answers, against the same library calls in-process and ``qvc`` commands.

Run by hand from the repository root, after ``pip install -e ".[server]"``::

    .venv/bin/python benchmarks/bench_serve.py            # 40 runs of 32 tool batches
    .venv/bin/python benchmarks/bench_serve.py --quick    # 10 runs of 8

A real ``qvc serve`` process on 127.0.0.1 answers each request over a fresh connection (as a
page's fetch without keep-alive would); the library column is the call the endpoint makes, on
a read-only store in this process; the CLI column is the ``qvc ... --json`` command a UI
without the server would run (a fresh process each time). Requests alternate round by round,
so load spikes hit them all alike. Reported: medians, and HTTP / library and CLI / HTTP ratios.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from qvc import GitCheckpointStore  # noqa: E402
from qvc.readers.views import thread_line_json  # noqa: E402
from qvc.runs import Runs  # noqa: E402
from samples.scripted_agent import ScriptedModel, drive, make_tools  # noqa: E402


def build(path: str, runs: int, batches: int) -> None:
    plan = [[("search", {"city": city})] for city in ["Paris", "Tokyo", "Lagos", "Berlin"] * (batches // 4 + 1)]
    with GitCheckpointStore(path, fsync=False, durability="exit") as store:
        r = Runs(store)
        for i in range(runs):
            with r.start("Populations?", system="Be brief.", session_id=f"s{i % 4}", run_id=f"r{i}") as rec:
                drive(rec, ScriptedModel(plan[:batches]), make_tools())


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    runs, batches = (10, 8) if args.quick else (40, 32)
    rounds = args.rounds or (20 if args.quick else 50)
    tmp = tempfile.mkdtemp(prefix="bench-serve-")
    repo = os.path.join(tmp, "runs.qvc")
    proc = None
    try:
        build(repo, runs, batches)
        env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
        qvc = [sys.executable, "-m", "qvc", "--repo", repo, "--no-pager"]
        proc = subprocess.Popen([*qvc, "serve", "--port", "0"], stdout=subprocess.PIPE, text=True, env=env)
        base = re.search(r"(http://\S+?/)", proc.stdout.readline()).group(1)
        store = GitCheckpointStore(repo, create=False, readonly=True)
        lib = Runs(store)
        run, thread, mid = "r0", "run/s0/r0", 2 * (batches // 2) + 1
        cases = [
            ("run timeline", f"api/runs/{run}/checkpoints", lambda: lib.timeline(run), ["timeline", run, "--json"]),
            ("snapshot at a boundary", f"api/runs/{run}/checkpoints/{mid}", lambda: lib.snapshot(run, mid).to_dict(),
             ["show", f"{run}@{mid}", "--json"]),
            ("thread line + forks", f"api/threads/{thread}", lambda: thread_line_json(store, thread),
             ["log", thread, "--json"]),
            ("runs list", "api/runs", lambda: [r.to_dict() for r in lib.list_runs()], ["runs", "--json"]),
        ]
        http: dict = {c[0]: [] for c in cases}
        local: dict = {c[0]: [] for c in cases}
        cli: dict = {c[0]: [] for c in cases}
        for _name, path, call, _ in cases:  # warm caches on both sides
            urllib.request.urlopen(base + path).read()
            call()
        for i in range(rounds):
            for name, path, call, command in cases:
                http[name].append(timed(lambda path=path: urllib.request.urlopen(base + path).read()))
                local[name].append(timed(call))
                if i < 5:
                    cli[name].append(timed(lambda command=command: subprocess.run(
                        [*qvc, *command], capture_output=True, check=True, env=env)))
        store.close()
        print(f"{runs} runs of {batches} tool batches ({batches + 1} checkpoints each); {rounds} rounds "
              f"(CLI: 5); medians in ms")
        print(f"{'request':<24} {'HTTP':>8} {'library':>8} {'HTTP/lib':>9} {'qvc CLI':>8} {'CLI/HTTP':>9}")
        for name, *_ in cases:
            h, lo, c = (statistics.median(x[name]) for x in (http, local, cli))
            print(f"{name:<24} {h:8.1f} {lo:8.1f} {h / lo:8.1f}x {c:8.1f} {c / h:8.1f}x")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
