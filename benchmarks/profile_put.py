"""Where a put's time goes: ``cProfile`` of puts on one thread, with the benchmark's state.

    python benchmarks/profile_put.py                   # SYNC, 1,000 puts, top 25 by own time
    python benchmarks/profile_put.py --mode exit --sort cumtime --top 40

The state is bench_store.py's ([1] put: 5 fields, ~4.5 KB). The store lives in a temporary
directory under ``benchmarks/out/`` (not tmpfs: the flush is part of what is measured) and is
removed afterwards. Profiled wall time includes waiting for locks, which is the point: a put
that waits for the publisher shows it under ``Publication.make_readable`` (``qvc.plumbing.publication``).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_store import AgentState  # noqa: E402

from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["sync", "async", "exit"], default="sync")
    parser.add_argument("--puts", type=int, default=1000)
    parser.add_argument("--sort", default="tottime", help="a pstats sort key (tottime, cumtime, ...)")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="profile-", dir=out)
    try:
        store = GitCheckpointStore(os.path.join(work, "r.qvc"), durability=args.mode)
        gen = AgentState(7)
        states = [gen.next()[0] for _ in range(args.puts + 100)]
        config = CheckpointConfig("t")
        for n in range(100):  # warm up: the thread exists, caches and the publisher run
            config = store.put(config, Checkpoint(id=uuid.uuid4().hex, thread_id="t", step=n,
                                                  state_data=states[n]), {"source": "loop", "step": n})
        profile = cProfile.Profile()
        start = time.perf_counter()
        profile.enable()
        for n in range(100, 100 + args.puts):
            config = store.put(config, Checkpoint(id=uuid.uuid4().hex, thread_id="t", step=n,
                                                  state_data=states[n]), {"source": "loop", "step": n})
        profile.disable()
        took = time.perf_counter() - start
        store.close()
        print(f"{args.puts} puts, {args.mode}: {took * 1000 / args.puts:.3f} ms a put under the profiler")
        pstats.Stats(profile).sort_stats(args.sort).print_stats(args.top)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
