#!/usr/bin/env python
"""QvcSession against the OpenAI Agents SDK's SQLiteSession: the same scripted run of K tool steps.

Run by hand from the repository root::

    .venv/bin/python benchmarks/bench_openai_agents.py              # K = 1, 16, 64; 5 rounds
    .venv/bin/python benchmarks/bench_openai_agents.py --rounds 1   # a smoke run
    .venv/bin/python benchmarks/bench_openai_agents.py --json out.json

The SDK's own ``Runner.run`` drives an agent whose model (the SDK's ``ScriptedModel``) calls a
function tool K times, one call per turn (each result a distinct 2,000-byte text), then answers:
K + 2 ``add_items`` calls (the question, one per tool step, the answer). Both stores run in this
one process, rounds interleaved (SQLiteSession first in even rounds), each case on a fresh
database in a fresh directory under ``--dir`` (default ``benchmarks/out/``, git-ignored), after a
one-step warm-up run on another session of the same database (imports, tables, the repository):

- ``SQLiteSession(session_id, db_path)``: its defaults (WAL; ``synchronous`` as printed);
- ``QvcSession(session_id, path)``: SYNC durability (every ``add_items`` durable when it returns).

Per case: the wall time of ``Runner.run`` divided by its K + 2 session writes (*per step*); the
bytes passed to ``write()`` (``/proc/self/io`` ``wchar``) and the bytes the kernel sent to storage
for this process (``write_bytes``), from the run's start until the session is closed (so what a
store publishes or checkpoints later is counted); the growth of the database directory over the
same span; and the bytes on disk once closed. Medians over rounds. Targets at K = 64: qvc's wall
time per step at most SQLiteSession's (ratio <= 1.0), its bytes written at most 1/10 of it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
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
RESULT_BYTES = 2000


def agent_for(k: int, tag: str):
    """An agent making ``k`` tool calls (distinct 2,000-byte results), then answering."""
    from agents import Agent, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    rng = random.Random(f"{k}-{tag}")
    texts = ["".join(rng.choice("abcdefghij klmnop") for _ in range(RESULT_BYTES)) for _ in range(k + 1)]

    @function_tool
    def lookup(n: int) -> str:
        """Look up item n."""
        return f"item {n}: " + texts[n % len(texts)]

    script = [[function_call("lookup", json.dumps({"n": i}), call_id=f"call_{tag}_{i}")] for i in range(k)]
    script.append([assistant_message("done", item_id=f"msg_{tag}")])
    return Agent(name="assistant", instructions="Be brief.", model=ScriptedModel(script), tools=[lookup])


async def one_case(kind: str, k: int, where: str) -> dict:
    """One measured run of ``k`` tool steps on a fresh ``kind`` session in ``where``."""
    from agents import Runner, SQLiteSession

    from qvc.integrations.openai_agents import QvcSession
    from qvc.integrations.openai_agents.scripted import RUN_CONFIG

    if kind == "sqlite":
        path = os.path.join(where, "sessions.db")
        warm, session = SQLiteSession("warm", path), SQLiteSession("bench", path)
    else:
        path = os.path.join(where, "runs.qvc")
        warm = QvcSession("warm", path)
        session = QvcSession("bench", store=warm.store)
    await Runner.run(agent_for(1, "w"), "warm up", session=warm, run_config=RUN_CONFIG)
    io0, size0 = proc_io(), apparent(where)
    t0 = time.perf_counter()
    result = await Runner.run(agent_for(k, "m"), "Look up the items.", session=session, run_config=RUN_CONFIG,
                              max_turns=k + 5)
    wall = time.perf_counter() - t0
    items = len(await session.get_items())
    session.close()
    warm.close()
    io1 = proc_io()
    assert result.final_output == "done" and items == 2 * k + 2, (result.final_output, items)
    return {"kind": kind, "k": k, "wall_per_step_s": wall / (k + 2), "wall_s": wall,
            "wchar": io1["wchar"] - io0["wchar"], "write_bytes": io1["write_bytes"] - io0["write_bytes"],
            "growth": apparent(where) - size0, "disk": apparent(where)}


def kb(n: float) -> str:
    return f"{n / 1e6:.2f} MB" if abs(n) >= 1e6 else f"{n / 1e3:.1f} KB"


def sqlite_synchronous(where: str) -> str:
    from agents import SQLiteSession

    s = SQLiteSession("probe", os.path.join(where, "probe.db"))
    try:
        conn = s._get_connection()  # the SDK's own connection, as its writes use it
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        sync = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[conn.execute("PRAGMA synchronous").fetchone()[0]]
    finally:
        s.close()
    return f"journal_mode={mode}, synchronous={sync}"


async def main_async(args: argparse.Namespace) -> dict:
    base = args.dir or os.path.join(ROOT, "benchmarks", "out")
    os.makedirs(base, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="bench-openai-agents-", dir=base)
    cases = []
    try:
        print(f"SQLiteSession: {sqlite_synchronous(tmp)}; QvcSession: SYNC; {args.rounds} round(s), medians")
        for r in range(args.rounds):
            for k in args.ks:
                for kind in (("sqlite", "qvc") if r % 2 == 0 else ("qvc", "sqlite")):
                    where = os.path.join(tmp, f"{kind}-{k}-{r}")
                    os.makedirs(where)
                    cases.append(await one_case(kind, k, where))
                    shutil.rmtree(where, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    rows = []
    print(f"{'K':>3} {'writes':>6} | {'wall/step sqlite':>16} {'qvc':>8} {'ratio':>6} | {'write() sqlite':>14} "
          f"{'qvc':>9} {'ratio':>6} | {'write_bytes sqlite':>18} {'qvc':>9} | {'growth sqlite':>13} {'qvc':>9} | "
          f"{'disk sqlite':>11} {'qvc':>9}")
    for k in args.ks:
        def med(kind: str, key: str, k: int = k) -> float:
            return statistics.median(c[key] for c in cases if c["kind"] == kind and c["k"] == k)
        row = {"k": k, **{f"{kind}_{key}": med(kind, key) for kind in ("sqlite", "qvc")
                          for key in ("wall_per_step_s", "wchar", "write_bytes", "growth", "disk")}}
        row["wall_ratio"] = row["qvc_wall_per_step_s"] / row["sqlite_wall_per_step_s"]
        row["wchar_ratio"] = row["qvc_wchar"] / row["sqlite_wchar"]
        rows.append(row)
        print(f"{k:>3} {k + 2:>6} | {row['sqlite_wall_per_step_s'] * 1e3:>13.2f} ms "
              f"{row['qvc_wall_per_step_s'] * 1e3:>5.2f} ms {row['wall_ratio']:>6.2f} | "
              f"{kb(row['sqlite_wchar']):>14} {kb(row['qvc_wchar']):>9} "
              f"{row['wchar_ratio']:>6.3f} | {kb(row['sqlite_write_bytes']):>18} {kb(row['qvc_write_bytes']):>9} | "
              f"{kb(row['sqlite_growth']):>13} {kb(row['qvc_growth']):>9} | {kb(row['sqlite_disk']):>11} "
              f"{kb(row['qvc_disk']):>9}")
    last = rows[-1]
    print(f"K={last['k']} targets: wall time per step <= SQLiteSession's: "
          f"{'PASS' if last['wall_ratio'] <= 1.0 else 'MISS'} ({last['wall_ratio']:.2f}); bytes written <= 1/10: "
          f"{'PASS' if last['wchar_ratio'] <= 0.1 else 'MISS'} ({last['wchar_ratio']:.3f})")
    return {"cases": cases, "summary": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ks", type=int, nargs="+", default=list(KS), help="tool steps per run (default 1 16 64)")
    parser.add_argument("--dir", help="parent of the work directory (default benchmarks/out/)")
    parser.add_argument("--keep", action="store_true", help="keep the databases")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    results = asyncio.run(main_async(args))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
