"""Retention on a fleet repository (issue 35): bytes before and after `--keep-last 20`, the dry
run's prediction against what the run frees, the policy's time, and put latency in another
process while it runs against the same process putting into an idle repository.

    python benchmarks/bench_retention.py                       # 1,000 threads x 200 checkpoints
    python benchmarks/bench_retention.py --threads 300 --checkpoints 200 --keep-last 20

Every 10th thread has a fork from its checkpoint 100 with 20 checkpoints of its own, every 5th a
time travel back to its checkpoint 150 followed by 20 new ones (a superseded line of 50). Each
checkpoint's state is a growing transcript (one message of about 300 bytes a step) and a step
counter, as a LangGraph or agent-run state grows. Run by hand; prints medians and ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

from qvc import CheckpointConfig, GitCheckpointStore, fork_checkpoint
from qvc.types import Checkpoint

PUTTER = textwrap.dedent("""
    import sys, time
    from qvc import CheckpointConfig, GitCheckpointStore
    from qvc.types import Checkpoint
    store = GitCheckpointStore(sys.argv[1])  # SYNC: each put durable when it returns
    stop = float(sys.argv[2])
    step, parent = 0, None
    while time.time() < stop:
        cid = f"probe-{sys.argv[3]}-{step}"
        t0 = time.perf_counter()
        store.put(CheckpointConfig("probe-" + sys.argv[3]), Checkpoint(id=cid, thread_id="probe-" + sys.argv[3],
                  step=step, parent_id=parent, state_data={"step": step, "note": "x" * 200}), {}, {})
        print(f"{(time.perf_counter() - t0) * 1000:.3f}", flush=True)
        step, parent = step + 1, cid
        time.sleep(0.01)
    store.close()
""")


def put(store, thread, step, parent, transcript):
    cid = f"{thread}-{step}"
    state = {"step": step, "messages": transcript}
    store.put(CheckpointConfig(thread), Checkpoint(id=cid, thread_id=thread, step=step, parent_id=parent,
                                                   state_data=state), {"source": "loop"}, {})
    return cid


def build(path: str, threads: int, checkpoints: int) -> None:
    with GitCheckpointStore(path, durability="exit", fsync=False) as store:
        for t in range(threads):
            thread = f"fleet/{t:05d}"
            transcript, parent = [], None
            for step in range(checkpoints):
                transcript = transcript + [f"turn {step}: " + "lorem ipsum dolor sit amet " * 11]
                parent = put(store, thread, step, parent, transcript)
            if t % 10 == 0:
                fork = f"fork/{t:05d}"
                fork_checkpoint(store, CheckpointConfig(thread, f"{thread}-{checkpoints // 2}"), new_thread_id=fork)
                head = store.get_tuple(CheckpointConfig(fork)).checkpoint.id
                for step in range(20):
                    head = put(store, fork, 1000 + step, head, transcript[: checkpoints // 2] + [f"fork {step}"])
            if t % 5 == 0:
                back = f"{thread}-{min(150, checkpoints - 1)}"
                store.reset(thread, back)
                for step in range(20):
                    back = put(store, thread, 2000 + step, back, transcript + [f"again {step}"])
            if t % 100 == 99:
                print(f"  built {t + 1} threads", flush=True)
        store.gc()


def latencies(path: str, seconds: float, tag: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", PUTTER, path, str(time.time() + seconds), tag],
                            stdout=subprocess.PIPE, text=True)


def summary(samples: list[float]) -> str:
    samples = sorted(samples)
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    return f"median {statistics.median(samples):.2f} ms, p99 {p99:.2f} ms, max {samples[-1]:.2f} ms (n={len(samples)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1000)
    ap.add_argument("--checkpoints", type=int, default=200)
    ap.add_argument("--keep-last", type=int, default=20)
    ap.add_argument("--dir", default=None, help="where to build the repository (default: a temporary directory)")
    args = ap.parse_args()
    root = args.dir or tempfile.mkdtemp(prefix="qvc-retention-")
    path = os.path.join(root, "fleet.qvc")
    print(f"load average at start: {os.getloadavg()}")
    t0 = time.monotonic()
    build(path, args.threads, args.checkpoints)
    print(f"built {args.threads} threads x {args.checkpoints} checkpoints in {time.monotonic() - t0:.0f} s")

    idle = latencies(path, 8, "idle")
    idle_ms = [float(x) for x in idle.communicate()[0].split()]

    with GitCheckpointStore(path) as store:
        # the policy as a fleet sets it once; the probes' threads exempt
        store.set_config("retention.keepLast", str(args.keep_last))
        store.set_config("retention.probe-*.keepLast", "all")
        t0 = time.monotonic()
        dry = store.retain(dry_run=True)
        dry_s = time.monotonic() - t0
        probe = latencies(path, 3600, "busy")
        time.sleep(1.0)
        report = store.retain()
        probe.terminate()
        busy_ms = [float(x) for x in probe.communicate()[0].split()]
    freed = report.bytes_before - report.bytes_after
    error = (dry.predicted - freed) / freed * 100 if freed else float("nan")
    print(f"load average at end: {os.getloadavg()}")
    print()
    print("| figure | value |")
    print("| --- | --- |")
    print(f"| repository | {args.threads} threads x {args.checkpoints} checkpoints, forks and superseded lines |")
    print(f"| history before (objects + reflogs) | {report.bytes_before / 2**20:.1f} MiB |")
    print(f"| history after --keep-last {args.keep_last} | {report.bytes_after / 2**20:.1f} MiB "
          f"({report.bytes_after / report.bytes_before:.1%}) |")
    print(f"| whole repository before / after | {report.total_before / 2**20:.1f} / "
          f"{report.total_after / 2**20:.1f} MiB |")
    print(f"| checkpoints removed | {report.removed} of {len(report.threads)} threads "
          f"({len(report.skipped)} skipped) |")
    print(f"| dry run: predicted / freed | {dry.predicted / 2**20:.1f} / {freed / 2**20:.1f} MiB ({error:+.1f} %) |")
    print(f"| dry run time | {dry_s:.1f} s |")
    print(f"| policy run time (cut, then purge) | {report.seconds:.1f} s |")
    print(f"| put latency, idle repository | {summary(idle_ms)} |")
    print(f"| put latency while the policy runs | {summary(busy_ms)} |")
    print(f"| ratio of medians (busy / idle) | {statistics.median(busy_ms) / statistics.median(idle_ms):.2f}x |")


if __name__ == "__main__":
    main()
