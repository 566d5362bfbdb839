"""The staging database's durable part against SqliteSaver, side by side (issue 31, step 2).

One staging transaction as a put will make it: a blob, a tree and a commit staged, one ref moved
by compare-and-swap with its reflog line, committed (SYNC: synchronous=FULL). Against it,
LangGraph's SqliteSaver.put of a checkpoint of the same size (WAL, synchronous=FULL). Rounds
alternate the two; each prints the median of its block and the round's ratio, then the median
of the per-round ratios. Also: 8 Python threads of one Staging against 8 threads of one
SqliteSaver (one connection, as SqliteSaver shares it), in transactions per second; and
publication of what the SYNC rounds staged. It does not measure tree building, reading or the
store's put: those come when the store writes through staging.

    python benchmarks/bench_staging.py [--rounds 5] [--n 300]

Quote the load (printed from /proc/loadavg) with the figures: these machines are shared.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pygit2  # noqa: E402
from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402

from qvc.plumbing.staging import Staging  # noqa: E402

PAYLOAD = os.urandom(96).hex()  # a small state field, as one tool batch adds


def stage_one(staging: Staging, ref: str, i: int) -> None:
    with staging.transaction() as tx:
        head = tx.ref(ref)
        blob = tx.write("blob", f"{PAYLOAD}{i}".encode()).hex()
        tree = tx.write("tree", b"100644 messages\0" + bytes.fromhex(blob)).hex()
        body = f"tree {tree}\n" + (f"parent {head}\n" if head else "")
        body += f"author q <q@q> {i} +0000\ncommitter q <q@q> {i} +0000\n\nstep {i}\n"
        new = tx.write("commit", body.encode()).hex()
        tx.move(ref, head, new, f"put: step {i}")


def sqlite_one(saver: SqliteSaver, thread: str, i: int, parent: list) -> None:
    cp = empty_checkpoint()
    cp["id"] = str(uuid.uuid4())
    cp["channel_values"] = {"messages": f"{PAYLOAD}{i}"}
    conf: dict = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    if parent:
        conf["configurable"]["checkpoint_id"] = parent[0]
    saver.put(conf, cp, {"source": "loop", "step": i}, {})
    parent[:] = [cp["id"]]


def open_saver(path: str) -> SqliteSaver:
    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    conn.execute("PRAGMA synchronous=FULL")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    return saver


def block(fn, n: int) -> float:
    times = []
    for i in range(n):
        t0 = time.perf_counter_ns()
        fn(i)
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1e6


def threaded(fn, threads: int, per_thread: int) -> float:
    """Transactions per second of ``threads`` Python threads doing ``per_thread`` each."""
    start = threading.Barrier(threads + 1)

    def run(t: int) -> None:
        start.wait()
        for i in range(per_thread):
            fn(t, i)

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    start.wait()
    t0 = time.perf_counter()
    for w in workers:
        w.join()
    return threads * per_thread / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=300)
    args = parser.parse_args()
    print(f"load: {open('/proc/loadavg').read().strip()}  cores: {os.cpu_count()}")
    with tempfile.TemporaryDirectory() as tmp:
        repo = os.path.join(tmp, "r.git")
        pygit2.init_repository(repo, bare=True)
        modes = {m: Staging(repo, mode=m) for m in ("sync", "async", "exit")}
        saver = open_saver(os.path.join(tmp, "saver.db"))
        ratios: dict[str, list[float]] = {m: [] for m in modes}
        for r in range(args.rounds):
            parent: list = []
            base = block(lambda i, r=r, parent=parent: sqlite_one(saver, f"s{r}", i, parent), args.n)
            line = f"round {r}: SqliteSaver.put {base:.3f} ms"
            for mode, staging in modes.items():
                median = block(lambda i, s=staging, ref=f"refs/heads/{mode}{r}": stage_one(s, ref, i), args.n)
                ratios[mode].append(median / base)
                line += f" | staging {mode} {median:.3f} ms ({median / base:.2f}x)"
            print(line)
        for mode, values in ratios.items():
            print(f"staging {mode} commit / SqliteSaver.put: median of per-round ratios "
                  f"{statistics.median(values):.2f}x")
        t0 = time.perf_counter()
        done = modes["sync"].publish()
        print(f"publish: {done.objects} objects, {len(done.refs)} refs in {(time.perf_counter() - t0) * 1000:.0f} ms")
        ours = threaded(lambda t, i: stage_one(modes["sync"], f"refs/heads/thread{t}", i), 8, args.n // 4)
        theirs_parents: dict[int, list] = {t: [] for t in range(8)}
        theirs = threaded(lambda t, i: sqlite_one(saver, f"thread{t}", i, theirs_parents[t]), 8, args.n // 4)
        print(f"8 threads: staging sync {ours:.0f} tx/s, SqliteSaver {theirs:.0f} puts/s ({ours / theirs:.2f}x)")
        for staging in modes.values():
            staging.close()


if __name__ == "__main__":
    main()
