#!/usr/bin/env python
"""How long closing a store that created many threads takes (issue 22: under a second at 20,000).

Run by hand from the repository root::

    .venv/bin/python benchmarks/bench_close.py                  # 20,000 threads, 3 rounds
    .venv/bin/python benchmarks/bench_close.py --quick          # 2,000 threads, 3 rounds
    .venv/bin/python benchmarks/bench_close.py --threads 5000 --rounds 5
    .venv/bin/python benchmarks/bench_close.py --fresh              # open + 1 put + close, 20 rounds

Each round opens a fresh ``GitCheckpointStore(durability="async")`` (flushes on: the cost
measured is the one a real program pays), puts one checkpoint on each of ``--threads`` new
threads (untimed), runs an untimed ``os.sync()`` so the close does not pay for the puts' dirty
pages, then times ``close()``. A store that created 256 or more refs packs them on close
(``git pack-refs``), writes the commit-graph and compacts the one-line reflogs into
``qvc/reflogs`` (see ``qvc/plumbing/refpack.py``); those steps are timed apart, and the disk
flushes (``fdatasync``/``fsync`` calls of this process, ``syncfs`` of the store) counted.

``--fresh`` times instead what a short-lived program pays (issue 24: close of a fresh
repository ≤ 5 ms): create a repository, one SYNC put, close, each timed, median of
``--rounds`` (20 unless given), with the flushes of each step counted. ``--dirty MB`` writes
that much to another file of the same file system, unflushed, just before each close: another
program's writes, which a close that flushes the whole file system (``syncfs``) waits for.

Printed: the median over rounds of each figure, and each round's. Medians on a busy machine
vary several-fold: the work is file creations and removals (about seven per thread, most of
them git's), which queue behind every other writer of the disk; compare figures taken together.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore  # noqa: E402
from qvc.plumbing import durability, refpack  # noqa: E402

TARGET_S = 1.0
STEPS = ("pack_refs", "commit_graph", "compact_reflogs")


class Meter:
    """Times the refpack steps and counts flushes while active (wraps the functions)."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(STEPS, 0.0)
        self.flushes = {"fdatasync": 0, "fsync": 0, "syncfs": 0}
        self._saved: list[tuple[object, str, object]] = []

    def _wrap(self, owner: object, name: str, wrapper) -> None:
        self._saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, wrapper(getattr(owner, name)))

    def __enter__(self) -> Meter:
        for step in STEPS:
            def timed(real, step=step):
                def run(*args, **kwargs):
                    t0 = time.perf_counter()
                    try:
                        return real(*args, **kwargs)
                    finally:
                        self.seconds[step] += time.perf_counter() - t0
                return run
            self._wrap(refpack, step, timed)
        for name in ("fdatasync", "fsync"):
            def counted(real, name=name):
                def run(*args):
                    self.flushes[name] += 1
                    return real(*args)
                return run
            self._wrap(os, name, counted)

        def counted_harden(real):
            def run(*args, **kwargs):
                if kwargs.get("fsync", True):
                    self.flushes["syncfs"] += 1
                return real(*args, **kwargs)
            return run
        for owner in (durability, refpack):  # the modules that flush with syncfs on close's path
            self._wrap(owner, "harden", counted_harden)
        return self

    def __exit__(self, *exc: object) -> None:
        for owner, name, real in reversed(self._saved):
            setattr(owner, name, real)


def one_round(workdir: str, threads: int) -> dict[str, float]:
    path = tempfile.mkdtemp(prefix="close-", dir=workdir)
    try:
        store = GitCheckpointStore(os.path.join(path, "repo.qvc"), durability="async")
        for n in range(threads):
            t = f"run-{n:06d}"
            store.put(CheckpointConfig(t), Checkpoint(id=f"{t}-0", thread_id=t, step=0,
                                                      state_data={"n": n, "status": "DONE"}), {"source": "bench"})
        os.sync()
        with Meter() as meter:
            t0 = time.perf_counter()
            store.close()
            took = time.perf_counter() - t0
        return {"close": took, **meter.seconds, **{k: float(v) for k, v in meter.flushes.items()}}
    finally:
        shutil.rmtree(path, ignore_errors=True)


FRESH_TARGET_S = 0.005
CHUNK = os.urandom(1 << 20)


def fresh_round(workdir: str, dirty_mb: int = 0) -> dict[str, float]:
    """Open (create) a repository, put one checkpoint, close: seconds and flushes of each
    (``dirty_mb`` written unflushed to another file before the close)."""
    path = tempfile.mkdtemp(prefix="fresh-", dir=workdir)
    figures: dict[str, float] = {}
    try:
        with Meter() as meter:
            t0 = time.perf_counter()
            store = GitCheckpointStore(os.path.join(path, "repo.qvc"))
            t1 = time.perf_counter()
            opened = dict(meter.flushes)
            store.put(CheckpointConfig("t"), Checkpoint(id="c-0", thread_id="t", step=0, state_data={"n": 0}),
                      {"source": "bench"})
            t2 = time.perf_counter()
            put = dict(meter.flushes)
            other = os.path.join(path, "other-program.bin")
            if dirty_mb:  # a new file (ext4 starts writing a truncated one back at once), removed below
                with open(other, "xb") as f:
                    for _ in range(dirty_mb):
                        f.write(CHUNK)
            t2, figures["put"] = time.perf_counter(), t2 - t1
            store.close()
            t3 = time.perf_counter()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(other)
        figures = {"open": t1 - t0, "put": figures.get("put", t2 - t1), "close": t3 - t2}
        for k, v in meter.flushes.items():
            figures[f"open {k}"] = float(opened[k])
            figures[f"put {k}"] = float(put[k] - opened[k])
            figures[f"close {k}"] = float(v - put[k])
        return figures
    finally:
        shutil.rmtree(path, ignore_errors=True)


def fresh_main(args: argparse.Namespace, workdir: str) -> int:
    rounds = args.rounds or 20
    print(f"open + one put + close of a fresh repository, {rounds} rounds (work dir {workdir})"
          + (f", {args.dirty} MB of another file unflushed before each close" if args.dirty else ""))
    figs = [fresh_round(workdir, args.dirty) for _ in range(rounds)]
    for step in ("open", "put", "close"):
        xs = [f[step] for f in figs]
        flushes = ", ".join(f"{k} {statistics.median(f[f'{step} {k}'] for f in figs):.0f}"
                            for k in ("fdatasync", "fsync", "syncfs"))
        print(f"  {step:5s} median {statistics.median(xs) * 1e3:6.2f} ms (min {min(xs) * 1e3:.2f}, "
              f"max {max(xs) * 1e3:.2f}); flushes: {flushes}")
    med = statistics.median(f["close"] for f in figs)
    print(f"median close: {med * 1e3:.2f} ms  (target <= {FRESH_TARGET_S * 1e3:.0f} ms: "
          f"{'PASS' if med <= FRESH_TARGET_S else 'MISS'})")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=None, help="3 (20 with --fresh)")
    ap.add_argument("--quick", action="store_true", help="2,000 threads")
    ap.add_argument("--fresh", action="store_true", help="open + one put + close of a fresh repository instead")
    ap.add_argument("--dirty", type=int, default=0, metavar="MB",
                    help="with --fresh: MB written unflushed to another file before each close")
    ap.add_argument("--dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "out"),
                    help="parent of the temporary work directory (default benchmarks/out)")
    args = ap.parse_args()
    threads = 2000 if args.quick else args.threads
    os.makedirs(args.dir, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="bench-close-", dir=args.dir)
    if args.fresh:
        try:
            return fresh_main(args, workdir)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    args.rounds = args.rounds or 3
    print(f"closing a store that created {threads:,} threads, {args.rounds} rounds (work dir {workdir})")
    rounds = []
    try:
        for r in range(args.rounds):
            rounds.append(one_round(workdir, threads))
            fig = rounds[-1]
            print(f"  round {r + 1}: close {fig['close']:.2f} s (" + ", ".join(f"{s} {fig[s]:.2f} s" for s in STEPS)
                  + f"); fdatasync {fig['fdatasync']:.0f}, fsync {fig['fsync']:.0f}, syncfs {fig['syncfs']:.0f}",
                  flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    med = {k: statistics.median(f[k] for f in rounds) for k in rounds[0]}
    verdict = "PASS" if med["close"] < TARGET_S else "MISS"
    print(f"median close: {med['close']:.2f} s  (target < {TARGET_S:.0f} s: {verdict})")
    for step in STEPS:
        print(f"  {step:16s} {med[step]:.2f} s")
    print(f"  other            {med['close'] - sum(med[s] for s in STEPS):.2f} s")
    print(f"  flushes: fdatasync {med['fdatasync']:.0f}, fsync {med['fsync']:.0f}, syncfs {med['syncfs']:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
