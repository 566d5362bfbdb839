#!/usr/bin/env python
"""QvcSessionService against ADK's SqliteSessionService and InMemorySessionService: the same scripted
run of K tool steps, per step wall time, bytes written and bytes on disk.

Run by hand from the repository root::

    .venv/bin/python benchmarks/bench_google_adk.py              # K = 1, 16, 64; 5 rounds
    .venv/bin/python benchmarks/bench_google_adk.py --rounds 3 --json out.json

ADK's own ``Runner`` and ``LlmAgent`` with qvc's scripted model
(:mod:`qvc.integrations.google_adk.scripted`: K calls of a tool that updates session, ``user:`` and
``app:`` state, then an answer: 2K+2 events, each one ``append_event``) run one invocation on a
session made beforehand, on ``QvcSessionService(path)`` (SYNC: each event on stable storage when
``append_event`` returns), ``SqliteSessionService(db_path)`` (its defaults: a rollback journal,
one connection per call) and ``InMemorySessionService()``. Each case runs in a fresh process,
rounds interleaved. Per case: the wall time of the invocation divided by K (the median over the
rounds), bytes passed to ``write()`` during it (``/proc/self/io`` wchar: the journal, packs and
refs for qvc; the database and its journal for SQLite), and bytes on disk once closed (allocated
blocks of the repository directory or the database files). Targets (issue 26): per step wall time
at most SQLite's (1.0x), bytes written at K = 64 at most 1/10 of SQLite's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from measure import allocated, wchar  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

KS = (1, 16, 64)
KINDS = ("qvc", "sqlite", "memory")


def one_case(kind: str, k: int, where: str) -> dict:
    """One invocation of k tool steps on a fresh service of ``kind``, measured in this process."""
    import asyncio
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from google.adk.sessions.in_memory_session_service import InMemorySessionService
    from google.adk.sessions.sqlite_session_service import SqliteSessionService

    from qvc.integrations.google_adk import QvcSessionService
    from qvc.integrations.google_adk.scripted import ask, make_runner

    async def go() -> dict:
        if kind == "qvc":
            path = os.path.join(where, "adk.qvc")
            service = QvcSessionService(path)
        elif kind == "sqlite":
            path = os.path.join(where, "adk.db")
            service = SqliteSessionService(path)
        else:
            path, service = None, InMemorySessionService()
        runner = make_runner(service, steps=k)
        await service.create_session(app_name="calc", user_id="u", session_id="warm")
        await ask(runner, "u", "warm", "warm up")  # imports, connections, caches
        await service.create_session(app_name="calc", user_id="u", session_id="s")
        before, start = wchar(), time.perf_counter()
        answer = await ask(runner, "u", "s", "add up")
        seconds, written = time.perf_counter() - start, wchar() - before
        assert answer == f"The total is {k * (k + 1) // 2}.", answer
        events = len((await service.get_session(app_name="calc", user_id="u", session_id="s")).events)
        await service.close() if hasattr(service, "close") else None
        size = 0
        if path is not None:
            size = sum(allocated(p) for p in (path, path + "-journal", path + "-wal", path + "-shm")
                       if os.path.exists(p))
        return {"kind": kind, "k": k, "seconds": seconds, "per_step": seconds / k, "written": written,
                "disk": size, "events": events}

    return asyncio.run(go())


def run_case(kind: str, k: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-adk-", dir=os.environ.get("BENCH_DIR")) as where:
        out = subprocess.run([sys.executable, __file__, "--case", kind, str(k), where], capture_output=True,
                             text=True, check=True, cwd=ROOT)
        return json.loads(out.stdout.strip().splitlines()[-1])


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return str(n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ks", default=",".join(map(str, KS)))
    parser.add_argument("--json")
    parser.add_argument("--case", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        kind, k, where = args.case
        print(json.dumps(one_case(kind, int(k), where)))
        return
    ks = [int(x) for x in args.ks.split(",")]
    results: dict = {}
    for r in range(args.rounds):  # rounds interleaved: the machine's drift hits every case alike
        for k in ks:
            for kind in KINDS:
                results.setdefault((kind, k), []).append(run_case(kind, k))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    rows = []
    for k in ks:
        med = {kind: statistics.median(x["per_step"] for x in results[(kind, k)]) for kind in KINDS}
        last = {kind: results[(kind, k)][-1] for kind in KINDS}
        rows.append({"k": k, "events": last["qvc"]["events"],
                     **{f"{kind}_ms_per_step": med[kind] * 1000 for kind in KINDS},
                     "time_ratio_qvc_sqlite": med["qvc"] / med["sqlite"],
                     **{f"{kind}_written": statistics.median(x["written"] for x in results[(kind, k)])
                        for kind in KINDS},
                     **{f"{kind}_disk": last[kind]["disk"] for kind in ("qvc", "sqlite")}})
    print(f"\nGoogle ADK Runner, one invocation of K tool steps ({args.rounds} rounds, median); qvc durability sync\n")
    print("| K | events | ms/step qvc | ms/step sqlite | ms/step in-memory | qvc / sqlite | written qvc "
          "| written sqlite | written qvc / sqlite | on disk qvc | on disk sqlite |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        ratio = row["qvc_written"] / row["sqlite_written"] if row["sqlite_written"] else float("nan")
        cells = [row["k"], row["events"], f"{row['qvc_ms_per_step']:.2f}", f"{row['sqlite_ms_per_step']:.2f}",
                 f"{row['memory_ms_per_step']:.2f}", f"{row['time_ratio_qvc_sqlite']:.2f}x",
                 human(row["qvc_written"]), human(row["sqlite_written"]), f"{ratio:.2f}", human(row["qvc_disk"]),
                 human(row["sqlite_disk"])]
        print("| " + " | ".join(map(str, cells)) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
