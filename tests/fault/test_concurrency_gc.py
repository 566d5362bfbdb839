"""Concurrency with maintenance: eight workers (processes and Python threads) on one repository
while the real ``qvc gc`` command runs over and over.

Workers: three writer processes (two on the thread ``shared``, one on ``solo``), two reader
processes (``shared`` and ``solo``, checking that every checkpoint they see is whole), and
three Python threads of this process: one more writer on ``shared``, one that puts, forks and
time-travels (``reset``) on its own thread, one that reads every thread. Meanwhile ``qvc gc``
(``--prune`` every third run) runs as a subprocess in a loop.

Afterwards: ``git fsck --strict`` passes; every acknowledged put on ``shared`` is on its
first-parent line and no put that raised a conflict is (so two writers never both got a put
acknowledged on the same parent: no silent fork); every acknowledged checkpoint of the
forking thread and its forks reads back exactly; the readers saw no half checkpoint.
``QVC_GC_ROUNDS`` scales the slow variant (``-m slow``).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE / "workers") not in sys.path:
    sys.path.insert(0, str(HERE / "workers"))

import concurrency_worker as cwk  # noqa: E402
from helpers import child_env, fsck  # noqa: E402
from test_concurrency import check_outcome, collect, go, put, spawn  # noqa: E402
from test_crash import slow_enabled  # noqa: E402

from qvc import CheckpointConfig, CheckpointConflictError, GitCheckpointStore, fork_checkpoint  # noqa: E402

pytestmark = pytest.mark.heavy  # a kill, power-loss or fleet loop: left out of the quick tier


def run_gc_loop(path: Path, stop: threading.Event, out: dict) -> None:
    n = 0
    while not stop.is_set():
        args = [sys.executable, "-m", "qvc", "--repo", str(path), "gc"] + (["--prune"] if n % 3 == 2 else [])
        proc = subprocess.run(args, capture_output=True, text=True, env=child_env(), timeout=120)
        if proc.returncode != 0:
            out.setdefault("errors", []).append(f"qvc gc exited {proc.returncode}: {proc.stderr[-500:]}")
            return
        n += 1
    out["runs"] = n


def workload(tmp_path: Path, n: int, seed: int) -> dict:
    path = tmp_path / "repo.qvc"
    with GitCheckpointStore(path) as store:
        put(store, "shared", "S-seed", 0, "S")
        put(store, "solo", "O-seed", 0, "O")
    stop_readers = tmp_path / "stop"
    procs = [spawn("writer", str(path), "sync", "shared", str(n), "A"),
             spawn("writer", str(path), "async", "shared", str(n), "B"),
             spawn("writer", str(path), "sync", "solo", str(n), "C")]
    readers = [spawn("reader", str(path), t, str(stop_readers)) for t in ("shared", "solo")]
    store = GitCheckpointStore(path)
    rng = random.Random(seed)
    acked: dict[str, list] = {"shared": [], "shared_conflicts": [], "forker": [], "reads": [0], "errors": []}

    def shared_writer():
        for i in range(n):
            cid = f"T-{i:05d}"
            try:
                put(store, "shared", cid, i, "T")
            except CheckpointConflictError:
                acked["shared_conflicts"].append(cid)
            else:
                acked["shared"].append(cid)

    def forker():
        thread, step = "fk", 0
        local = random.Random(rng.random())
        for i in range(n):
            cid = f"F-{i:05d}"
            put(store, thread, cid, step, "F")
            acked["forker"].append((thread, cid))
            step += 1
            r = local.random()
            if r < 0.15:
                new = f"fk-{i}"
                out = fork_checkpoint(store, CheckpointConfig(thread, cid), new)
                acked["forker"].append((new, out.checkpoint_id))
            elif r < 0.3 and i > 2:
                line = [t.checkpoint.id for t in store.list(CheckpointConfig(thread), limit=4)]
                store.reset(thread, line[-1])

    def reader():
        while not done.is_set():
            for thread in store.threads():
                tup = store.get_tuple(CheckpointConfig(thread))
                if tup is not None and tup.checkpoint.id.startswith(("A-", "B-", "C-", "T-", "S-", "O-", "F-")):
                    problem = cwk.check(tup)
                    if problem:
                        acked["errors"].append(problem)
                acked["reads"][0] += 1

    done = threading.Event()
    stop_gc = threading.Event()
    gc_out: dict = {}
    threads = [threading.Thread(target=f) for f in (shared_writer, forker, reader)]
    gc_thread = threading.Thread(target=run_gc_loop, args=(path, stop_gc, gc_out))
    t0 = time.monotonic()
    gc_thread.start()
    go(*procs, *readers)
    for t in threads:
        t.start()
    try:
        outs = [collect(p, 300) for p in procs]
        for t in threads[:2]:
            t.join(300)
    finally:
        done.set()
        stop_gc.set()
        stop_readers.touch()
        threads[2].join(60)
        gc_thread.join(300)
    routs = [collect(p, 60) for p in readers]
    store.close()
    took = time.monotonic() - t0
    assert not gc_out.get("errors"), gc_out["errors"]
    assert not acked["errors"], acked["errors"][:5]
    for rout in routs:
        summary = json.loads(rout[-1])
        assert summary["errors"] == [], summary["errors"][:5]
        acked["reads"][0] += summary["reads"]

    fsck(path)
    ok = {tag: [ln.split()[1] for ln in out if ln.startswith("OK ")] for tag, out in zip("ABC", outs, strict=True)}
    conflicted = [ln.split()[1] for out in outs for ln in out if ln.startswith("CONFLICT ")]
    with GitCheckpointStore(path) as store:
        assert not store.recovery, store.recovery.summary()
        check_outcome(store, "shared", ["S-seed"] + ok["A"] + ok["B"] + acked["shared"],
                      conflicted + acked["shared_conflicts"])
        check_outcome(store, "solo", ["O-seed"] + ok["C"], [])
        for thread, cid in acked["forker"]:
            tup = store.get_tuple(CheckpointConfig(thread, cid))
            assert tup is not None, f"acknowledged checkpoint {cid} of {thread} is gone"
    operations = sum(len(v) for v in ok.values()) + len(conflicted) + len(acked["shared"]) + \
        len(acked["shared_conflicts"]) + len(acked["forker"])
    return {"operations": operations, "reads": acked["reads"][0], "gc_runs": gc_out.get("runs", 0),
            "conflicts": len(conflicted) + len(acked["shared_conflicts"]), "seconds": round(took, 1)}


def test_eight_workers_with_gc_running(tmp_path):
    stats = workload(tmp_path, 200, seed=7)
    print(f"\nconcurrency with gc: {stats}")
    assert stats["gc_runs"] >= 2


@pytest.mark.slow
def test_eight_workers_with_gc_running_long(tmp_path, request):
    if not slow_enabled(request.config):
        pytest.skip("long variant: run with -m slow (or QVC_SLOW=1)")
    for r in range(int(os.environ.get("QVC_GC_ROUNDS", "5"))):
        stats = workload(tmp_path / f"r{r}", 200, seed=r)
        print(f"\nconcurrency with gc, round {r}: {stats}")
