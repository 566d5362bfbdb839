#!/usr/bin/env python
"""QvcCheckpointStorage against Microsoft Agent Framework's FileCheckpointStorage (and its in-memory
storage): the same scripted workflow of K tool steps.

Run by hand from the repository root::

    .venv/bin/python benchmarks/bench_agent_framework.py              # K = 1, 16, 64; 3 rounds
    .venv/bin/python benchmarks/bench_agent_framework.py --rounds 1   # a smoke run
    .venv/bin/python benchmarks/bench_agent_framework.py --json out.json

The framework ships two storages: ``FileCheckpointStorage`` (a JSON file per checkpoint, written to a
temporary file and renamed; no fsync) and ``InMemoryCheckpointStorage`` (deep copies in a dict). The
workflow is qvc/integrations/agent_framework/scripted.py: a planner, a worker doing one tool step per
superstep (each result a distinct ``--payload``-byte text kept in the shared state's ``results`` list,
so the state grows with every step, as an agent's conversation does), a writer; K + 3 checkpoints.
Rounds interleave the storages (their order turns each round), each case in a fresh directory under
``--dir`` (default ``benchmarks/out/``, git-ignored). Per case: wall time of ``workflow.run`` divided by
its K + 3 checkpoints (*per step*); the bytes this process passed to ``write()`` from the run's start
until the storage is closed (``/proc/self/io`` ``wchar``); the bytes on disk once closed; then the
reads: ``get_latest`` and ``list_checkpoints``. QvcCheckpointStorage runs with SYNC durability (every
checkpoint fsynced before ``save`` returns; the file storage never fsyncs). Medians over rounds. The
issue's targets (wall time per step at most the file storage's, bytes written at most 1/10 of its at
K = 64) are printed as PASS/MISS.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time

from measure import apparent, proc_io  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

KS = (1, 16, 64)
KINDS = ("file", "memory", "qvc")


def open_storage(kind: str, where: str):
    from agent_framework import FileCheckpointStorage, InMemoryCheckpointStorage

    from qvc.integrations.agent_framework import QvcCheckpointStorage

    if kind == "file":
        return FileCheckpointStorage(os.path.join(where, "checkpoints"))
    if kind == "memory":
        return InMemoryCheckpointStorage()
    return QvcCheckpointStorage(os.path.join(where, "runs.qvc"))


async def case(kind: str, k: int, where: str, payload: int) -> dict:
    """One measured run of ``k`` tool steps on a fresh ``kind`` storage in ``where``."""
    from qvc.integrations.agent_framework.scripted import NAME, Task, build_workflow

    storage = open_storage(kind, where)
    await build_workflow(storage, name="warm-up", payload=payload).run(Task("warm", 1))  # imports, the repository
    workflow = build_workflow(storage, payload=payload)
    io0 = proc_io()
    t0 = time.perf_counter()
    result = await workflow.run(Task(f"{kind}-{k}", k))
    wall = time.perf_counter() - t0
    io1 = proc_io()
    assert len(result.get_outputs()) == 1
    t0 = time.perf_counter()
    latest = await storage.get_latest(workflow_name=NAME)
    get_latest = time.perf_counter() - t0
    t0 = time.perf_counter()
    listed = await storage.list_checkpoints(workflow_name=NAME)
    listing = time.perf_counter() - t0
    assert len(listed) == k + 3 and latest.checkpoint_id == max(listed, key=lambda c: c.timestamp).checkpoint_id
    if kind == "qvc":
        storage.close()
    io2 = proc_io()
    disk = apparent(os.path.join(where, "checkpoints")) if kind == "file" else \
        apparent(os.path.join(where, "runs.qvc")) if kind == "qvc" else 0
    return {"kind": kind, "k": k, "wall_per_step_s": wall / (k + 3), "wall_s": wall,
            "wchar": io2["wchar"] - io0["wchar"] if kind == "qvc" else io1["wchar"] - io0["wchar"],
            "disk": disk, "get_latest_s": get_latest, "list_s": listing}


def kb(n: float) -> str:
    return f"{n / 1e6:.2f} MB" if abs(n) >= 1e6 else f"{n / 1e3:.1f} KB"


def ms(s: float) -> str:
    return f"{s * 1e3:.2f} ms" if s >= 1e-3 else f"{s * 1e6:.0f} us"


async def main_async(args: argparse.Namespace) -> dict:
    base = args.dir or os.path.join(ROOT, "benchmarks", "out")
    os.makedirs(base, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="bench-agent-framework-", dir=base)
    cases = []
    try:
        print(f"FileCheckpointStorage / InMemoryCheckpointStorage against QvcCheckpointStorage (SYNC); "
              f"{args.payload}-byte tool results; {args.rounds} round(s), medians")
        for r in range(args.rounds):
            for k in args.ks:
                order = KINDS[r % 3:] + KINDS[:r % 3]
                for kind in order:
                    where = os.path.join(tmp, f"{kind}-{k}-{r}")
                    os.makedirs(where)
                    cases.append(await case(kind, k, where, args.payload))
                    shutil.rmtree(where, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)

    def med(kind: str, key: str, k: int) -> float:
        return statistics.median(c[key] for c in cases if c["kind"] == kind and c["k"] == k)

    rows = []
    print(f"\n{'K':>3} {'ckpts':>5} | {'wall/step file':>14} {'memory':>9} {'qvc':>9} {'qvc/file':>8} | "
          f"{'write() file':>12} {'qvc':>9} {'qvc/file':>8} | {'disk file':>9} {'qvc':>9} | "
          f"{'latest file':>11} {'qvc':>9} | {'list file':>9} {'qvc':>9}")
    for k in args.ks:
        row = {"k": k, **{f"{kind}_{key}": med(kind, key, k) for kind in KINDS
                          for key in ("wall_per_step_s", "wchar", "disk", "get_latest_s", "list_s")}}
        row["wall_ratio"] = row["qvc_wall_per_step_s"] / row["file_wall_per_step_s"]
        row["wchar_ratio"] = row["qvc_wchar"] / max(row["file_wchar"], 1)
        rows.append(row)
        print(f"{k:>3} {k + 3:>5} | {ms(row['file_wall_per_step_s']):>14} {ms(row['memory_wall_per_step_s']):>9} "
              f"{ms(row['qvc_wall_per_step_s']):>9} {row['wall_ratio']:>8.2f} | {kb(row['file_wchar']):>12} "
              f"{kb(row['qvc_wchar']):>9} {row['wchar_ratio']:>8.2f} | {kb(row['file_disk']):>9} "
              f"{kb(row['qvc_disk']):>9} | {ms(row['file_get_latest_s']):>11} {ms(row['qvc_get_latest_s']):>9} | "
              f"{ms(row['file_list_s']):>9} {ms(row['qvc_list_s']):>9}")
    last = rows[-1]
    print(f"\nK={last['k']} targets against FileCheckpointStorage: wall time per step <= 1.0x: "
          f"{'PASS' if last['wall_ratio'] <= 1.0 else 'MISS'} ({last['wall_ratio']:.2f}); bytes written <= 1/10: "
          f"{'PASS' if last['wchar_ratio'] <= 0.1 else 'MISS'} ({last['wchar_ratio']:.2f})")
    return {"cases": cases, "summary": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ks", type=int, nargs="+", default=list(KS), help="tool steps per run (default 1 16 64)")
    parser.add_argument("--payload", type=int, default=2000, help="bytes of each tool step's result (default 2000)")
    parser.add_argument("--dir", help="parent of the work directory (default benchmarks/out/)")
    parser.add_argument("--keep", action="store_true", help="keep the storages' directories")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    logging.getLogger("agent_framework").setLevel(logging.ERROR)  # its warning about the worker's self-loop
    results = asyncio.run(main_async(args))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
