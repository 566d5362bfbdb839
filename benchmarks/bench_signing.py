#!/usr/bin/env python
"""What signing costs: the same store signed and unsigned, side by side, and ``qvc verify``.

Run by hand from the repository root::

    .venv/bin/python benchmarks/bench_signing.py            # full run (about a minute)
    .venv/bin/python benchmarks/bench_signing.py --quick

Sections:

* put: ``GitCheckpointStore.put`` in SYNC and ASYNC, one store signing (an Ed25519 key file) and
  one not, in blocks that alternate round by round (the order rotates); per put, the median wall
  time and the median CPU time of the calling thread (``thread_time_ns``, which load inflates
  less), and the added CPU per commit (target of issue 34: <= 0.3 ms);
* langgraph: one LangGraph checkpoint (``QvcSaver.put`` of a 3-channel checkpoint) signed and not
  (the key given as ``$QVC_SIGNING_KEY``, as a user sets it), alternated the same way;
* verify: ``qvc.readers.verify.verify`` over a repository of 10,000 signed checkpoints (100
  threads of 100), in process and as the ``qvc verify --all`` command (target: <= 2 s), and plain
  git's ``git log --format=%G?`` over 200 of them (git runs ssh-keygen once per commit).

The load average is printed before and after: on a shared machine, compare within one run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore  # noqa: E402
from qvc.readers.verify import verify  # noqa: E402
from qvc.store.signers import Signers  # noqa: E402


def load() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "unknown"


def state(i: int) -> dict:
    return {"messages": [f"message {j} of a growing transcript" for j in range(i % 50)], "step": i,
            "scratchpad": f"thinking about step {i}", "tool": {"name": "search", "result": "r" * (i % 300)}}


def bench_put(work: str, key: str, mode: str, rounds: int, block: int) -> None:
    stores = {"unsigned": GitCheckpointStore(os.path.join(work, f"u-{mode}.qvc"), durability=mode),
              "signed": GitCheckpointStore(os.path.join(work, f"s-{mode}.qvc"), durability=mode, signing_key=key)}
    wall: dict[str, list[int]] = {name: [] for name in stores}
    cpu: dict[str, list[int]] = {name: [] for name in stores}
    ratios, added = [], []
    step = dict.fromkeys(stores, 0)
    try:
        for r in range(rounds):
            names = list(stores)[r % 2:] + list(stores)[: r % 2]
            round_cpu: dict[str, list[int]] = {}
            for name in names:
                store, sink_w, sink_c = stores[name], wall[name], []
                for _ in range(block):
                    i = step[name]
                    step[name] += 1
                    cp = Checkpoint(id=f"c{i:06d}", thread_id="t", step=i, state_data=state(i))
                    t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
                    store.put(CheckpointConfig("t"), cp, {"source": "loop", "step": i})
                    sink_c.append(time.thread_time_ns() - c0)
                    sink_w.append(time.perf_counter_ns() - t0)
                cpu[name] += sink_c
                round_cpu[name] = sink_c
            u, s = statistics.median(round_cpu["unsigned"]), statistics.median(round_cpu["signed"])
            ratios.append(s / u)
            added.append(s - u)
    finally:
        for store in stores.values():
            store.close()
    print(f"\n== put, {mode.upper()} ({rounds} rounds x {block} puts per store) ==")
    for name in stores:
        w, c = statistics.median(wall[name]) / 1e6, statistics.median(cpu[name]) / 1e6
        print(f"  {name:9} wall {w:7.3f} ms   cpu {c:7.3f} ms")
    extra = statistics.median(added) / 1e6
    print(f"  signed / unsigned CPU: {statistics.median(ratios):.2f}x; added CPU per commit {extra:.3f} ms "
          f"(target <= 0.3 ms: {'PASS' if extra <= 0.3 else 'MISS'})")


def bench_langgraph(work: str, key: str, rounds: int, block: int) -> None:
    try:
        from langgraph.checkpoint.base import empty_checkpoint

        from qvc.integrations.langgraph import QvcSaver
    except ImportError:
        print("\n== langgraph: skipped (pip install -e '.[langgraph]') ==")
        return
    savers = {"unsigned": QvcSaver(os.path.join(work, "lg-u.qvc"))}
    os.environ["QVC_SIGNING_KEY"] = key
    try:
        savers["signed"] = QvcSaver(os.path.join(work, "lg-s.qvc"))
    finally:
        del os.environ["QVC_SIGNING_KEY"]
    assert savers["signed"]._store.signer is not None  # noqa: SLF001 (the benchmark checks its own setup)
    cpu: dict[str, list[int]] = {name: [] for name in savers}
    parents = dict.fromkeys(savers)
    added = []
    try:
        for r in range(rounds):
            per_round = {}
            for name in list(savers)[r % 2:] + list(savers)[: r % 2]:
                saver, sink = savers[name], []
                for _ in range(block):
                    cp = empty_checkpoint()
                    n = len(cpu[name]) + len(sink)
                    cp["channel_values"] = {"messages": [f"m{j}" for j in range(n % 40)], "step": n, "plan": "p" * 50}
                    cp["channel_versions"] = {"messages": n, "step": n, "plan": 1}
                    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
                    if parents[name] is not None:
                        config["configurable"]["checkpoint_id"] = parents[name]
                    c0 = time.thread_time_ns()
                    out = saver.put(config, cp, {"source": "loop", "step": n}, cp["channel_versions"])
                    sink.append(time.thread_time_ns() - c0)
                    parents[name] = out["configurable"]["checkpoint_id"]
                cpu[name] += sink
                per_round[name] = statistics.median(sink)
            added.append(per_round["signed"] - per_round["unsigned"])
    finally:
        for saver in savers.values():
            saver.close()
    print(f"\n== langgraph: QvcSaver.put, SYNC ({rounds} rounds x {block} checkpoints per saver) ==")
    for name in savers:
        print(f"  {name:9} cpu {statistics.median(cpu[name]) / 1e6:7.3f} ms")
    extra = statistics.median(added) / 1e6
    print(f"  added CPU per checkpoint {extra:.3f} ms (target <= 0.3 ms: {'PASS' if extra <= 0.3 else 'MISS'})")


def bench_verify(work: str, key: str, threads: int, per_thread: int) -> None:
    repo = os.path.join(work, "verify.qvc")
    t0 = time.perf_counter()
    with GitCheckpointStore(repo, durability="exit", fsync=False, signing_key=key) as store:
        for t in range(threads):
            for i in range(per_thread):
                store.put(CheckpointConfig(f"run-{t:03d}"), Checkpoint(id=f"r{t:03d}-{i:04d}", thread_id=f"run-{t:03d}",
                                                                     step=i, state_data=state(i)), {"source": "loop"})
    built = time.perf_counter() - t0
    Signers(repo).add("bench", open(key + ".pub").read())
    subprocess.run([sys.executable, "-m", "qvc", "--repo", repo, "gc"], check=True, capture_output=True)
    total = threads * per_thread
    print(f"\n== verify: {total:,} signed checkpoints ({threads} threads x {per_thread}), built in {built:.0f} s ==")
    times = []
    for _ in range(3):
        with GitCheckpointStore(repo, readonly=True) as store:
            t0 = time.perf_counter()
            report = verify(store)
            times.append(time.perf_counter() - t0)
        assert report and report.commits == total, report.problems[:3]
    best = statistics.median(times)
    print(f"  verify() in process: median {best:.2f} s of 3 ({report.commits:,} commits, {report.objects:,} objects)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cli = []
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "qvc", "--repo", repo, "verify", "--all"], check=True,
                       capture_output=True, env=env)
        cli.append(time.perf_counter() - t0)
    wall = statistics.median(cli)
    print(f"  qvc verify --all: median {wall:.2f} s of 3 (target <= 2 s: {'PASS' if wall <= 2 else 'MISS'})")
    allowed = os.path.join(repo, "qvc", "allowed_signers")
    t0 = time.perf_counter()
    out = subprocess.run(["git", "--git-dir", repo, "-c", f"gpg.ssh.allowedSignersFile={allowed}", "log", "-n", "200",
                          "--format=%G?", "run-000", "run-001"], check=True, capture_output=True, text=True).stdout
    took = time.perf_counter() - t0
    assert set(out.split()) == {"G"}, out[:200]
    print(f"  plain git log --format=%G? over 200 commits: {took:.2f} s ({took / 200 * 1000:.1f} ms per commit: "
          f"ssh-keygen per commit); at that rate {total:,} commits take {took / 200 * total:.0f} s; "
          f"qvc verify --all is {took / 200 * total / wall:.0f}x faster")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer rounds, 2,000 checkpoints to verify")
    ap.add_argument("--dir", default=os.path.join(ROOT, "benchmarks", "out"))
    args = ap.parse_args()
    rounds, block = (4, 50) if args.quick else (10, 100)
    os.makedirs(args.dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="bench-signing-", dir=args.dir)
    try:
        key = os.path.join(work, "key")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "bench", "-f", key], check=True)
        print(f"python {sys.version.split()[0]}; load average before: {load()}")
        for mode in ("sync", "async"):
            bench_put(work, key, mode, rounds, block)
        bench_langgraph(work, key, rounds, block)
        bench_verify(work, key, *((20, 100) if args.quick else (100, 100)))
        print(f"\nload average after: {load()} (shared machine: compare within this run)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
