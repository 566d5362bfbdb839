#!/usr/bin/env python
"""Pushing many threads, and what replication costs a put.

Run by hand from the repository root::

    .venv/bin/python benchmarks/bench_remotes.py                  # 10,000 threads, 3 rounds
    .venv/bin/python benchmarks/bench_remotes.py --threads 2000 --rounds 2

Measured, medians over the rounds, each side in the same run:

* first push of a repository of N threads (one checkpoint each, a small state) to an empty
  bare repository on a path: ``qvc.push(store, url)`` (``ls-remote``, leased refspecs in chunks of
  500) against plain ``git push --mirror`` of the same repository to another empty bare one;
* incremental push after 10 threads got one more checkpoint each: the same two commands,
  each to its own now up-to-date remote;
* put latency (SYNC, fsync on) of a store that replicates every write to a bare repository
  (on ``/dev/shm`` when there is one) in the background, against the same store without
  replication, in alternating blocks.
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
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import qvc  # noqa: E402
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore  # noqa: E402
from qvc.remotes.remote import add_remote  # noqa: E402


def put(store: GitCheckpointStore, thread: str, step: int) -> None:
    cp = Checkpoint(id=uuid.uuid4().hex, thread_id=thread, step=step,
                    state_data={"messages": [f"message {step}"] * 3, "step": step, "done": False})
    store.put(CheckpointConfig(thread), cp, {"source": "loop", "step": step}, {})


def bare(path: str) -> str:
    subprocess.run(["git", "init", "-q", "--bare", path], check=True)
    return path


def git_mirror(repo: str, dest: str) -> float:
    t = time.perf_counter()
    subprocess.run(["git", f"--git-dir={repo}", "push", "-q", "--mirror", dest], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def qvc_push(store: GitCheckpointStore, dest: str) -> tuple[float, int]:
    t = time.perf_counter()
    result = qvc.push(store, dest)
    return time.perf_counter() - t, len(result.pushed)


def push_round(workdir: str, n: int, r: int) -> dict:
    repo = os.path.join(workdir, f"src-{r}.qvc")
    with GitCheckpointStore(repo, durability="exit", fsync=False) as store:
        for i in range(n):
            put(store, f"thread-{i:05d}", 0)
    out = {}
    with GitCheckpointStore(repo) as store:
        a, b = bare(os.path.join(workdir, f"qvc-{r}.git")), bare(os.path.join(workdir, f"git-{r}.git"))
        if r % 2:  # alternate which side goes first
            out["git_first"] = git_mirror(repo, b)
            out["qvc_first"], pushed = qvc_push(store, a)
        else:
            out["qvc_first"], pushed = qvc_push(store, a)
            out["git_first"] = git_mirror(repo, b)
        assert pushed == n, pushed
        for i in range(0, n, max(1, n // 10))[:10]:
            put(store, f"thread-{i:05d}", 1)
        if r % 2:
            out["git_incr"] = git_mirror(repo, b)
            out["qvc_incr"], pushed = qvc_push(store, a)
        else:
            out["qvc_incr"], pushed = qvc_push(store, a)
            out["git_incr"] = git_mirror(repo, b)
        assert pushed == 10, pushed
    for name in (repo, a, b):
        shutil.rmtree(name)
    return out


def put_latencies(workdir: str, blocks: int, per_block: int, remote_dir: str) -> dict[str, list[float]]:
    plain = os.path.join(workdir, "plain.qvc")
    replicated = os.path.join(workdir, "replicated.qvc")
    GitCheckpointStore(plain).close()
    with GitCheckpointStore(replicated) as store:
        add_remote(store, "backup", bare(os.path.join(remote_dir, "backup.git")), replicate=True)
    lat: dict[str, list[float]] = {"plain": [], "replicated": []}
    stores = {"plain": GitCheckpointStore(plain), "replicated": GitCheckpointStore(replicated)}
    try:
        for block in range(blocks):
            for kind in (("plain", "replicated") if block % 2 else ("replicated", "plain")):
                store = stores[kind]
                for i in range(per_block):
                    t = time.perf_counter()
                    put(store, f"t{i % 10}", block * per_block + i)
                    lat[kind].append(time.perf_counter() - t)
                time.sleep(0.2)  # let the replicator push between blocks, as it would between turns
    finally:
        for store in stores.values():
            store.close()
    return lat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--blocks", type=int, default=10, help="alternating blocks of puts per store")
    parser.add_argument("--per-block", type=int, default=100)
    parser.add_argument("--dir", default=os.path.join(ROOT, "benchmarks", "out"), help="parent of the work directory")
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="bench-remotes-", dir=args.dir)
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout
    git_version = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip()
    print(f"qvc remotes benchmark · qvc {head.strip()} · {git_version} · {os.cpu_count()} CPUs · "
          f"{args.threads} threads · {args.rounds} rounds · {time.strftime('%Y-%m-%d')}")
    try:
        rounds = [push_round(workdir, args.threads, r) for r in range(args.rounds)]
        # The replica lives on another file system when one is at hand (tmpfs): a remote is another
        # machine, and on ext4 every fdatasync of a put also commits the replica's metadata.
        remote_dir = tempfile.mkdtemp(prefix="bench-remotes-", dir="/dev/shm" if os.path.isdir("/dev/shm") else workdir)
        try:
            lat = put_latencies(workdir, args.blocks, args.per_block, remote_dir)
        finally:
            shutil.rmtree(remote_dir, ignore_errors=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    med = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    print()
    print("| push (path remote) | qvc push | git push --mirror | qvc / git |")
    print("| --- | --- | --- | --- |")
    print(f"| first push, {args.threads:,} threads | {med['qvc_first']:.2f} s | {med['git_first']:.2f} s "
          f"| {statistics.median(r['qvc_first'] / r['git_first'] for r in rounds):.2f}× |")
    print(f"| incremental, 10 threads changed | {med['qvc_incr'] * 1e3:.0f} ms | {med['git_incr'] * 1e3:.0f} ms "
          f"| {statistics.median(r['qvc_incr'] / r['git_incr'] for r in rounds):.2f}× |")
    print()
    p, r = sorted(lat["plain"]), sorted(lat["replicated"])

    def q(xs: list[float], f: float) -> float:
        return xs[min(len(xs) - 1, int(f * len(xs)))] * 1e3

    print("| put, SYNC | median | p90 | p99 |")
    print("| --- | --- | --- | --- |")
    print(f"| without replication | {q(p, .5):.2f} ms | {q(p, .9):.2f} ms | {q(p, .99):.2f} ms |")
    where = "tmpfs" if os.path.isdir("/dev/shm") else "same disk"
    print(f"| replicating to a path remote ({where}) | {q(r, .5):.2f} ms | {q(r, .9):.2f} ms | {q(r, .99):.2f} ms |")
    print(f"| ratio | {q(r, .5) / q(p, .5):.2f}× | {q(r, .9) / q(p, .9):.2f}× | {q(r, .99) / q(p, .99):.2f}× |")


if __name__ == "__main__":
    main()
