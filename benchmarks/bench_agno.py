#!/usr/bin/env python
"""QvcDb against agno's SqliteDb: a tool-batch run's bytes written, bytes on disk and wall time; and the
indexes (get_run, a page of get_sessions) with many runs.

Run by hand from the repository root::

    .venv/bin/python benchmarks/bench_agno.py                # K = 1, 16, 64; 3 rounds; 10,000 runs
    .venv/bin/python benchmarks/bench_agno.py --quick        # 1 round; 1,000 runs
    .venv/bin/python benchmarks/bench_agno.py --json out.json

**Batches.** agno's own ``Agent`` with ``checkpoint="tool-batch"`` and qvc's ScriptedModel runs
K tool batches (one call each, a 2,000-byte result), then a final answer: K+1 checkpoints, on
``SqliteDb(db_file=...)`` and on ``QvcDb(path)`` (SYNC: each checkpoint is on stable storage
when agno's hook returns; SqliteDb's WAL commits with its defaults). Each case runs in a fresh
process, rounds interleaved. Per case: bytes passed to ``write()`` during ``agent.run``
(``/proc/self/io`` wchar; journal, packs and refs for qvc, WAL and pages for SQLite), bytes
on disk once the database is closed (the repository directory; the db file plus any WAL, shm
or journal left; both include a one-answer warm-up run), and the wall
time of ``agent.run``, also per tool step (wall / K: issue 26's "wall time per step", median
over the rounds, and its ratio to SqliteDb's). Targets at K = 64: qvc writes at most 1/10 of
SqliteDb's bytes, in no more wall time per step. The table is printed twice: aligned, and as
the Markdown table of docs/benchmarks.md.

**Indexes.** N runs (3 messages each) in N/10 sessions are stored through ``QvcDb.upsert_session``
and ``upsert_run`` (EXIT durability: building is not what is measured); then, in a new process
(so every cache starts cold): the first ``get_run`` (which lists the refs once), then the
median of ``get_run`` over random ids and of a page of 20 ``get_sessions`` sorted by
``updated_at`` (without and with runs); and a ``get_run`` right after this process wrote a run
(the write moved a ref, so the index lists the refs once more).
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

from measure import apparent, wchar  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

KS = (1, 16, 64)
RESULT_BYTES = 2000


def one_batch_run(kind: str, k: int, where: str) -> dict:
    """One agent run of k tool batches on a fresh database of ``kind``; measured in this process."""
    from agno.agent import Agent

    from qvc.integrations.agno.scripted import ScriptedModel

    rng = random.Random(k)
    texts = ["".join(rng.choice("abcdefghij klmnop") for _ in range(RESULT_BYTES)) for _ in range(k + 1)]

    def lookup(n: int) -> str:
        """Look up item n (a distinct 2,000-byte result each)."""
        return f"item {n}: " + texts[n % len(texts)]

    if kind == "sqlite":
        from agno.db.sqlite import SqliteDb

        path = os.path.join(where, "agno.db")
        db = SqliteDb(db_file=path)
        files = [path, path + "-wal", path + "-shm", path + "-journal"]
    else:
        from qvc.integrations.agno import QvcDb

        path = os.path.join(where, "runs.qvc")
        db = QvcDb(path)
        files = [path]
    script = [[("lookup", {"n": i + 1})] for i in range(k)] + ["done"]
    agent = Agent(model=ScriptedModel(script=["ok"]), db=db, tools=[lookup], checkpoint="tool-batch",
                  session_id="bench", telemetry=False)
    agent.run("warm up", run_id="warm")  # tables, repository, imports: not what is measured
    agent.model.script = script
    w0, t0, c0 = wchar(), time.perf_counter(), time.process_time()
    out = agent.run("go", run_id="measured")
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    written = wchar() - w0
    final = len(json.dumps(db.get_run("measured").to_dict()))
    db.close()
    return {"kind": kind, "k": k, "status": str(out.status.value), "write_bytes": written,
            "disk_bytes": apparent(*files), "wall_s": wall, "cpu_s": cpu,
            "final_json_bytes": final}


def build_index_repo(path: str, n: int) -> None:
    from agno.run.agent import RunOutput, RunStatus
    from agno.session import AgentSession

    from qvc.integrations.agno import QvcDb

    db = QvcDb(path, durability="exit")
    sessions = max(1, n // 10)
    for s in range(sessions):
        sid = f"session-{s:05d}"
        db.upsert_session(AgentSession(session_id=sid, agent_id=f"agent-{s % 7}", user_id=f"user-{s % 13}",
                                       created_at=1_700_000_000 + s, session_data={"session_name": f"chat {s}"}))
    from agno.models.message import Message

    for i in range(n):
        sid = f"session-{i % sessions:05d}"
        run = RunOutput(run_id=f"run-{i:06d}", session_id=sid, agent_id=f"agent-{i % 7}",
                        status=RunStatus.completed, content=f"answer {i}",
                        messages=[Message(role="user", content=f"question {i}"),
                                  Message(role="assistant", content=f"answer {i}")])
        db.upsert_run(run, sid, run_index=i // sessions)
    db.close()


def measure_index(path: str, n: int, rounds: int = 200) -> dict:
    from qvc.integrations.agno import QvcDb

    db = QvcDb(path)
    rng = random.Random(1)
    t0 = time.perf_counter()
    first = db.get_run("run-000000")
    cold = time.perf_counter() - t0
    assert first is not None
    times = []
    for _ in range(rounds):
        rid = f"run-{rng.randrange(n):06d}"
        t0 = time.perf_counter()
        found = db.get_run(rid)
        times.append(time.perf_counter() - t0)
        assert found is not None and found.run_id == rid
    pages, pages_runs = [], []
    for i in range(max(10, rounds // 10)):
        t0 = time.perf_counter()
        rows, total = db.get_sessions(limit=20, page=1 + i % 5, sort_by="updated_at", deserialize=False,
                                      include_runs=False)
        pages.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        db.get_sessions(limit=20, page=1 + i % 5, sort_by="updated_at", include_runs=True)
        pages_runs.append(time.perf_counter() - t0)
    assert len(rows) == 20 and total == max(1, n // 10)
    after_write = []
    for i in range(5):  # this process writes a run, then reads: the next read lists the refs again
        found = db.get_run(f"run-{i:06d}")
        db.upsert_run(found, found.session_id)
        found.content = f"edited {i}"
        db.upsert_run(found, found.session_id)
        t0 = time.perf_counter()
        db.get_run(f"run-{rng.randrange(n):06d}")
        after_write.append(time.perf_counter() - t0)
    return {"get_run_after_own_write_ms": statistics.median(after_write) * 1e3,
            "runs": n, "sessions": max(1, n // 10), "first_get_run_ms": cold * 1e3,
            "get_run_ms": statistics.median(times) * 1e3, "get_sessions_page_ms": statistics.median(pages) * 1e3,
            "get_sessions_page_with_runs_ms": statistics.median(pages_runs) * 1e3, "name_scans": db.index.scans}


def child(args: list) -> dict:
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"child {' '.join(args)} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def kb(n: float) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e6 else f"{n / 1e3:.1f} KB"


def index_report(tmp: str, n: int) -> dict:
    """Build n runs, measure the index in a new process, print and return the figures."""
    repo = os.path.join(tmp, "index.qvc")
    t0 = time.perf_counter()
    child(["--child", "build", repo, str(n)])
    built = time.perf_counter() - t0
    index = child(["--child", "index", repo, str(n)])
    index["build_s"] = built
    print(f"\nIndexes: {index['runs']:,} runs in {index['sessions']:,} sessions (built in {built:.0f} s)")
    print(f"  first get_run (scans the branch names once): {index['first_get_run_ms']:.1f} ms")
    print(f"  get_run, median of 200 random ids:    {index['get_run_ms']:.2f} ms")
    print(f"  get_sessions page of 20, no runs:     {index['get_sessions_page_ms']:.2f} ms")
    print(f"  get_sessions page of 20, with runs:   {index['get_sessions_page_with_runs_ms']:.2f} ms")
    print(f"  get_run right after this process wrote (no scan: the run is known): "
          f"{index['get_run_after_own_write_ms']:.1f} ms")
    print(f"  scans of the branch names in all: {index['name_scans']}")
    return index


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1 round, 1,000 runs for the indexes")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--runs", type=int, default=None, help="runs for the index measurement (0: skip it)")
    parser.add_argument("--ks", type=int, nargs="+", default=list(KS), help="tool batches per run (default 1 16 64)")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        what = args.child[0]
        if what == "batch":
            print(json.dumps(one_batch_run(args.child[1], int(args.child[2]), args.child[3])))
        elif what == "build":
            build_index_repo(args.child[1], int(args.child[2]))
            print(json.dumps({}))
        else:
            print(json.dumps(measure_index(args.child[1], int(args.child[2]))))
        return
    rounds = args.rounds or (1 if args.quick else 3)
    n = args.runs if args.runs is not None else (1000 if args.quick else 10_000)
    tmp = tempfile.mkdtemp(prefix="qvc-bench-agno-")
    results: dict = {"batches": [], "index": None}
    try:
        ks = args.ks
        for r in range(rounds):
            for k in ks:
                for kind in (("sqlite", "qvc") if r % 2 == 0 else ("qvc", "sqlite")):
                    where = os.path.join(tmp, f"{kind}-{k}-{r}")
                    os.makedirs(where)
                    results["batches"].append(child(["--child", "batch", kind, str(k), where]))
                    shutil.rmtree(where, ignore_errors=True)
        print(f"Tool-batch runs, {rounds} round(s), medians (2,000-byte results; qvc SYNC)")
        print(f"{'K':>3} {'ckpts':>5} | {'SqliteDb write()':>16} {'qvc write()':>12} {'ratio':>6} | "
              f"{'SqliteDb disk':>13} {'qvc disk':>9} | {'SqliteDb wall':>13} {'qvc wall':>9} {'ratio':>6} | final run")
        summary = []
        for k in ks:
            def med(kind: str, key: str, k: int = k) -> float:
                return statistics.median(b[key] for b in results["batches"] if b["kind"] == kind and b["k"] == k)
            row = {"k": k, **{f"{kind}_{key}": med(kind, key) for kind in ("sqlite", "qvc")
                              for key in ("write_bytes", "disk_bytes", "wall_s", "cpu_s", "final_json_bytes")}}
            summary.append(row)
            print(f"{k:>3} {k + 1:>5} | {kb(row['sqlite_write_bytes']):>16} {kb(row['qvc_write_bytes']):>12} "
                  f"{row['qvc_write_bytes'] / row['sqlite_write_bytes']:>6.3f} | {kb(row['sqlite_disk_bytes']):>13} "
                  f"{kb(row['qvc_disk_bytes']):>9} | {row['sqlite_wall_s'] * 1e3:>10.1f} ms "
                  f"{row['qvc_wall_s'] * 1e3:>6.1f} ms {row['qvc_wall_s'] / row['sqlite_wall_s']:>6.2f} | "
                  f"{kb(row['qvc_final_json_bytes'])}")
        results["summary"] = summary
        print("\nPer tool step (wall / K), medians:")
        print("| K | SqliteDb wall/step | QvcDb wall/step | ratio | SqliteDb bytes written | QvcDb bytes written "
              "| ratio | SqliteDb on disk | QvcDb on disk |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for row in summary:
            k = row["k"]
            per = {kind: statistics.median(b["wall_s"] / k for b in results["batches"] if b["kind"] == kind
                                           and b["k"] == k) for kind in ("sqlite", "qvc")}
            row["sqlite_wall_per_step_s"], row["qvc_wall_per_step_s"] = per["sqlite"], per["qvc"]
            print(f"| {k} | {per['sqlite'] * 1e3:.1f} ms | {per['qvc'] * 1e3:.1f} ms | "
                  f"{per['qvc'] / per['sqlite']:.2f}× | {kb(row['sqlite_write_bytes'])} | "
                  f"{kb(row['qvc_write_bytes'])} | "
                  f"{row['qvc_write_bytes'] / row['sqlite_write_bytes']:.3f} | {kb(row['sqlite_disk_bytes'])} | "
                  f"{kb(row['qvc_disk_bytes'])} |")
        last = summary[-1]
        bytes_ok = last["qvc_write_bytes"] <= last["sqlite_write_bytes"] / 10
        wall_ok = last["qvc_wall_s"] <= last["sqlite_wall_s"]
        print(f"K={last['k']} targets: bytes written <= 1/10 of SqliteDb: {'PASS' if bytes_ok else 'MISS'}; "
              f"wall time <= SqliteDb: {'PASS' if wall_ok else 'MISS'} (CPU {last['sqlite_cpu_s'] * 1e3:.0f} ms "
              f"vs {last['qvc_cpu_s'] * 1e3:.0f} ms)")
        if n:
            results["index"] = index_report(tmp, n)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
