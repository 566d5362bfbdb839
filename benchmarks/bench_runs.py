#!/usr/bin/env python
"""Run checkpointing: bytes written and put latency against K tool batches (the agno §7 workload).

Run by hand from the repository root::

    .venv/bin/python benchmarks/bench_runs.py                 # K = 1, 2, 4, 8, 16, 32, 64; 5 rounds
    .venv/bin/python benchmarks/bench_runs.py --rounds 2 --json out.json

Workload (``/work/shared/reference/agno-run-checkpointing.md`` §7): a run of K tool batches,
each an assistant message with one tool call plus a tool message whose 2,000-byte result is
also recorded as a tool execution, checkpointed after every batch (``cadence="tool-batch"``),
then a final answer with no tool call: K+1 checkpoints. The session already holds 5 runs of
K=8. The text is random words with a Zipf-like frequency, not templated.

Measured per K (the measured run only; SYNC durability, fsync on):

* logical: bytes of the git objects the run added (blobs, trees, commits, uncompressed),
  the counterpart of agno's "logical" (bytes bound into INSERT/UPDATE statements);
* disk: growth of the repository directory once the store is closed (zlib-compressed packs;
  the journal is gone and the run's small packs are merged);
* syscall: bytes passed to ``write()`` by this process (``/proc/self/io`` ``wchar``) from the
  run's start to its last flush: journal records, packs, refs (not the merge at close);
* final: the final run as JSON (``Run.to_dict()``, every tool output twice, as agno's run_data);
* put latency: wall time of each checkpoint call (``after_tool_batch`` / ``complete``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from measure import wchar  # noqa: E402

from qvc import GitCheckpointStore  # noqa: E402
from qvc.plumbing.maintenance import disk_usage  # noqa: E402
from qvc.runs import Message, Runs, ToolCall  # noqa: E402

KS = (1, 2, 4, 8, 16, 32, 64)
RESULT_BYTES = 2000
# agno's measured figures, from the reference §7 (tool-batch mode, logical and syscall bytes).
AGNO3 = {1: (11.9e3, 91e3), 4: (75.0e3, 260e3), 16: (783e3, 2.21e6), 64: (10.9e6, 25.7e6)}
AGNO2 = {1: (432e3, 1.31e6), 4: (1.13e6, 3.42e6), 16: (4.37e6, 13.2e6), 64: (24.7e6, 74.7e6)}

WORDS = ("the of and to a in is it that for on with as was be at by this had not are but from or have an they "
         "which one you were all there would their we been has when who will more no if out so said what up its "
         "about into than them can only other new some could time these two may then do first any now such like "
         "over even most made after also did many before must through back years where much your way well down "
         "file test error result value call return tool function output input query search data model check").split()


class Text:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.weights = [1.0 / (i + 1) for i in range(len(WORDS))]

    def __call__(self, size: int) -> str:
        out, n = [], 0
        while n < size:
            if self.rng.random() < 0.8:
                w = self.rng.choices(WORDS, self.weights)[0]
            else:
                w = "".join(self.rng.choice("bcdfghklmnprstvz") + self.rng.choice("aeiou") for _ in range(3))
            out.append(w)
            n += len(w) + 1
        return " ".join(out)[:size]


def objects(repo: str) -> dict[str, int]:
    out = subprocess.run(["git", "--git-dir", repo, "cat-file", "--batch-all-objects",
                          "--batch-check=%(objectname) %(objectsize)"], capture_output=True, text=True, check=True)
    return {oid: int(size) for oid, size in (line.split() for line in out.stdout.splitlines())}


def record(runs: Runs, k: int, text: Text, session: str, cadence: str = "tool-batch") -> tuple:
    """One run of ``k`` batches; returns (run, put latencies in seconds, put CPU times in seconds)."""
    lat, cpu = [], []
    rec = runs.start("Research the topic and summarise it.", system="You are a research agent.",
                     session_id=session, cadence=cadence)
    for i in range(k):
        call = ToolCall(f"call_{i}", "search", {"query": text(40)})
        rec.add_message(Message("assistant", tool_calls=[call]))
        rec.tool_result(call, text(RESULT_BYTES))
        t, c = time.perf_counter(), time.thread_time()
        rec.after_tool_batch()
        lat.append(time.perf_counter() - t)
        cpu.append(time.thread_time() - c)
    rec.add_message(Message("assistant", text(300)))
    t, c = time.perf_counter(), time.thread_time()
    run = rec.complete()
    lat.append(time.perf_counter() - t)
    cpu.append(time.thread_time() - c)
    return run, lat, cpu


def measure(workdir: str, k: int, seed: int, cadence: str = "tool-batch") -> dict:
    repo = os.path.join(workdir, f"k{k}-{seed}-{cadence}.qvc")
    text = Text(seed)
    with GitCheckpointStore(repo) as store:
        runs = Runs(store)
        for _ in range(5):  # the session already holds 5 runs of K=8
            record(runs, 8, text, "bench")
    before_objects, before_disk = objects(repo), disk_usage(repo)
    with GitCheckpointStore(repo) as store:
        runs = Runs(store)
        w0 = wchar()
        run, lat, cpu = record(runs, k, text, "bench", cadence)
        store.flush()
        syscall = wchar() - w0
    disk = disk_usage(repo) - before_disk  # after close: journal gone, the run's small packs merged
    after = objects(repo)
    logical = sum(size for oid, size in after.items() if oid not in before_objects)
    final = len(json.dumps(run.to_dict(), default=str).encode())
    shutil.rmtree(repo)
    return {"k": k, "cadence": cadence, "logical": logical, "disk": disk, "syscall": syscall, "final": final,
            "latencies": lat, "cpu": cpu}


def fmt(n: float) -> str:
    for unit, scale in (("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.{1 if n < 100 * scale else 0}f} {unit}" if unit == "KB" else f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="runs per K (latency medians pool them)")
    parser.add_argument("--dir", default=os.path.join(ROOT, "benchmarks", "out"), help="parent of the work directory")
    parser.add_argument("--json", help="write the raw results here")
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="bench-runs-", dir=args.dir)
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout
    print(f"qvc runs benchmark · qvc {head.strip()} · {os.cpu_count()} CPUs · Python {sys.version.split()[0]} · "
          f"{args.rounds} rounds · SYNC · {time.strftime('%Y-%m-%d')}")
    try:
        results = {k: [] for k in KS}
        for seed in range(args.rounds):  # rounds interleave the K values (rotated), so drift hits all alike
            order = KS[seed % len(KS):] + KS[:seed % len(KS)]
            for k in order:
                results[k].append(measure(workdir, k, seed))
        runs_mode = measure(workdir, 64, 0, cadence="runs")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    print()
    print("| K | checkpoints | qvc logical | qvc disk | qvc syscall | final run (JSON) | logical / final "
          "| agno 3.x logical | agno 3.x syscall | agno 2.x logical | put median (CPU) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows = []
    for k, rounds in results.items():
        med = {key: statistics.median(r[key] for r in rounds) for key in ("logical", "disk", "syscall", "final")}
        lat = statistics.median(x for r in rounds for x in r["latencies"])
        cpu = statistics.median(x for r in rounds for x in r["cpu"])
        a3 = AGNO3.get(k)
        a2 = AGNO2.get(k)
        rows.append({"k": k, **med, "put_median_ms": lat * 1e3, "put_cpu_median_ms": cpu * 1e3})
        print(f"| {k} | {k + 1} | {fmt(med['logical'])} | {fmt(med['disk'])} | {fmt(med['syscall'])} "
              f"| {fmt(med['final'])} | {med['logical'] / med['final']:.2f}× "
              f"| {fmt(a3[0]) if a3 else ''} | {fmt(a3[1]) if a3 else ''} | {fmt(a2[0]) if a2 else ''} "
              f"| {lat * 1e3:.2f} ms ({cpu * 1e3:.2f}) |")
    lat1 = statistics.median(x for r in results[1] for x in r["latencies"])
    lat64_all = [x for r in results[64] for x in r["latencies"]]
    lat64 = statistics.median(lat64_all)
    first = statistics.median(x for r in results[64] for x in r["latencies"][:10])
    last = statistics.median(x for r in results[64] for x in r["latencies"][-10:])
    cfirst = statistics.median(x for r in results[64] for x in r["cpu"][:10])
    clast = statistics.median(x for r in results[64] for x in r["cpu"][-10:])
    k64 = rows[-1]
    print()
    print(f"put latency, median: K=1 {lat1 * 1e3:.2f} ms, K=64 {lat64 * 1e3:.2f} ms "
          f"(ratio {lat64 / lat1:.2f}); within K=64: first 10 puts {first * 1e3:.2f} ms, "
          f"last 10 {last * 1e3:.2f} ms (ratio {last / first:.2f}); CPU first 10 {cfirst * 1e3:.2f} ms, "
          f"last 10 {clast * 1e3:.2f} ms (ratio {clast / cfirst:.2f})")
    print(f"K=64: qvc writes {fmt(k64['logical'])} logical for a {fmt(k64['final'])} run "
          f"({k64['logical'] / k64['final']:.2f}× the final run; target ≤ 2×: "
          f"{'met' if k64['logical'] <= 2 * k64['final'] else 'MISS'}); agno 3.x writes 10.9 MB "
          f"({AGNO3[64][0] / k64['logical']:.0f}× qvc), agno 2.x 24.7 MB")
    print(f"K=64 with cadence 'runs' (terminal checkpoint only): {fmt(runs_mode['logical'])} logical, "
          f"so tool-batch costs {k64['logical'] / runs_mode['logical']:.2f}× 'runs' (agno 3.x: 34×)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "raw": {str(k): v for k, v in results.items()}, "runs_mode": runs_mode,
                       "put_median_ms": {"1": lat1 * 1e3, "64": lat64 * 1e3}}, f, indent=1)


if __name__ == "__main__":
    main()
