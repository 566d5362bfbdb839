#!/usr/bin/env python
"""QvcSessionStore against the Claude Agent SDK's InMemorySessionStore: the same scripted run of K tool steps.

Run by hand from the repository root::

    .venv/bin/python benchmarks/bench_claude_agent_sdk.py              # K = 1, 16, 64; 3 rounds
    .venv/bin/python benchmarks/bench_claude_agent_sdk.py --rounds 1   # a smoke run
    .venv/bin/python benchmarks/bench_claude_agent_sdk.py --json out.json

The SDK ships one store, ``InMemorySessionStore`` (a dict: nothing durable; the program keeps its
own local JSONL transcript either way), so that is the baseline. Two parts, rounds interleaved
(InMemorySessionStore first in even rounds), each case in a fresh directory under ``--dir``
(default ``benchmarks/out/``, git-ignored):

- **the real loop**: the SDK's ``query()`` runs its bundled program on the scripted model server
  (qvc/integrations/claude_agent_sdk/scripted.py), whose model calls an in-process MCP tool K
  times (each result a distinct 2,000-byte text), then answers; the SDK mirrors the transcript
  into the store (``session_store_flush="batched"``, its default). Per case: wall time of the
  ``query()`` divided by its K + 1 model turns (*per step*); the bytes this process passed to
  ``write()`` (``/proc/self/io`` ``wchar``: the SDK's pipes to the program and the model server's
  replies count for both stores alike), from the query's start until the store is closed; the
  bytes on disk of the repository once closed, beside the program's own local transcript.
- **the store alone**: the appends that mirror makes, replayed (the transcript of the same run,
  in batches of 8 lines, as ``"eager"`` flushes send them), then ``load``: median time per
  append, time of the final ``load``.

QvcSessionStore runs with SYNC durability (every append durable when it returns). Medians over
rounds. The issue's targets (wall time per step at most the baseline's, bytes written at most
1/10) are printed as PASS/MISS, the baseline being a dict in memory.
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
BATCH = 8


def options_for(store, model, where: str, k: int, tag: str):
    """The SDK's options of an offline run whose tool answers ``k`` distinct 2,000-byte texts."""
    from claude_agent_sdk import ClaudeAgentOptions, create_sdk_mcp_server, tool

    from qvc.integrations.claude_agent_sdk.scripted import LOOKUP, model_env

    rng = random.Random(f"{k}-{tag}")
    texts = ["".join(rng.choice("abcdefghij klmnop") for _ in range(RESULT_BYTES)) for _ in range(k + 1)]

    @tool("lookup", "Look up item n.", {"n": int})
    async def lookup(args):
        return {"content": [{"type": "text", "text": f"item {args['n']}: " + texts[args["n"] % len(texts)]}]}

    project = os.path.join(where, "project")
    os.makedirs(project, exist_ok=True)
    return ClaudeAgentOptions(session_store=store, env=model_env(model, os.path.join(where, "config")), cwd=project,
                              mcp_servers={"qvc": create_sdk_mcp_server("qvc", tools=[lookup])},
                              allowed_tools=[LOOKUP], max_turns=k + 5)


def open_store(kind: str, where: str):
    from claude_agent_sdk import InMemorySessionStore

    from qvc.integrations.claude_agent_sdk import QvcSessionStore

    return InMemorySessionStore() if kind == "memory" else QvcSessionStore(os.path.join(where, "runs.qvc"))


async def loop_case(kind: str, k: int, where: str, model) -> dict:
    """One measured real-loop run of ``k`` tool steps on a fresh ``kind`` store in ``where``."""
    from claude_agent_sdk import project_key_for_directory

    from qvc.integrations.claude_agent_sdk.scripted import LOOKUP, ask

    store = open_store(kind, where)
    await ask("Warm up.", options_for(store, model, where, 1, "w"))  # the program's first start, the repository
    prompt = f"Look up {k} items ({kind} {os.path.basename(where)})."
    model.plan(prompt, calls=[(LOOKUP, {"n": n}) for n in range(k)], answer="done")
    io0 = proc_io()
    t0 = time.perf_counter()
    sid, answer = await ask(prompt, options_for(store, model, where, k, "m"))
    wall = time.perf_counter() - t0
    key = {"project_key": project_key_for_directory(os.path.join(where, "project")), "session_id": sid}
    entries = await store.load(key)
    if kind != "memory":
        store.close()
    io1 = proc_io()
    assert answer == "done" and entries, (answer, len(entries or []))
    local = os.path.join(where, "config", "projects", key["project_key"], f"{sid}.jsonl")
    return {"kind": kind, "k": k, "wall_per_step_s": wall / (k + 1), "wall_s": wall, "entries": len(entries),
            "wchar": io1["wchar"] - io0["wchar"], "write_bytes": io1["write_bytes"] - io0["write_bytes"],
            "disk": apparent(os.path.join(where, "runs.qvc")), "local": apparent(local), "transcript": entries}


async def store_case(kind: str, k: int, where: str, transcript: list) -> dict:
    """The appends of a run's transcript replayed in batches, then one ``load``."""
    store = open_store(kind, where)
    key = {"project_key": "bench", "session_id": f"replay-{k}"}
    times = []
    for start in range(0, len(transcript), BATCH):
        t0 = time.perf_counter()
        await store.append(key, transcript[start:start + BATCH])
        times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    loaded = await store.load(key)
    load = time.perf_counter() - t0
    assert loaded == transcript
    if kind != "memory":
        store.close()
    return {"kind": kind, "k": k, "append_s": statistics.median(times), "appends": len(times), "load_s": load}


def kb(n: float) -> str:
    return f"{n / 1e6:.2f} MB" if abs(n) >= 1e6 else f"{n / 1e3:.1f} KB"


def ms(s: float) -> str:
    return f"{s * 1e3:.2f} ms" if s >= 1e-3 else f"{s * 1e6:.0f} us"


async def main_async(args: argparse.Namespace) -> dict:
    from qvc.integrations.claude_agent_sdk.scripted import ScriptedModel

    base = args.dir or os.path.join(ROOT, "benchmarks", "out")
    os.makedirs(base, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="bench-claude-agent-sdk-", dir=base)
    loops, stores = [], []
    try:
        print(f"InMemorySessionStore against QvcSessionStore (SYNC); {args.rounds} round(s), medians")
        with ScriptedModel() as model:
            for r in range(args.rounds):
                for k in args.ks:
                    for kind in (("memory", "qvc") if r % 2 == 0 else ("qvc", "memory")):
                        where = os.path.join(tmp, f"{kind}-{k}-{r}")
                        os.makedirs(where)
                        case = await loop_case(kind, k, where, model)
                        transcript = case.pop("transcript")
                        loops.append(case)
                        stores.append(await store_case(kind, k, os.path.join(where, "replay"), transcript))
                        shutil.rmtree(where, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)

    def med(cases: list, kind: str, key: str, k: int) -> float:
        return statistics.median(c[key] for c in cases if c["kind"] == kind and c["k"] == k)

    rows = []
    print("\nthe real loop (query() on the scripted model, the SDK mirroring into the store)")
    print(f"{'K':>3} {'lines':>5} | {'wall/step memory':>16} {'qvc':>9} {'ratio':>6} | {'write() memory':>14} "
          f"{'qvc':>9} {'ratio':>6} | {'qvc on disk':>11} {'local jsonl':>11}")
    for k in args.ks:
        row = {"k": k, "entries": med(loops, "qvc", "entries", k),
               **{f"{kind}_{key}": med(loops, kind, key, k) for kind in ("memory", "qvc")
                  for key in ("wall_per_step_s", "wchar", "write_bytes", "local")},
               "qvc_disk": med(loops, "qvc", "disk", k)}
        row["wall_ratio"] = row["qvc_wall_per_step_s"] / row["memory_wall_per_step_s"]
        row["wchar_ratio"] = row["qvc_wchar"] / max(row["memory_wchar"], 1)
        for key in ("append_s", "load_s"):
            for kind in ("memory", "qvc"):
                row[f"{kind}_{key}"] = med(stores, kind, key, k)
        rows.append(row)
        print(f"{k:>3} {row['entries']:>5.0f} | {ms(row['memory_wall_per_step_s']):>16} "
              f"{ms(row['qvc_wall_per_step_s']):>9} {row['wall_ratio']:>6.2f} | {kb(row['memory_wchar']):>14} "
              f"{kb(row['qvc_wchar']):>9} {row['wchar_ratio']:>6.2f} | {kb(row['qvc_disk']):>11} "
              f"{kb(row['qvc_local']):>11}")
    print(f"\nthe store alone (the run's transcript appended in batches of {BATCH} lines, then one load)")
    print(f"{'K':>3} {'appends':>7} | {'append memory':>13} {'qvc':>9} {'ratio':>7} | {'load memory':>11} "
          f"{'qvc':>9} {'ratio':>7}")
    for row in rows:
        k = row["k"]
        n = statistics.median(c["appends"] for c in stores if c["k"] == k)
        print(f"{k:>3} {n:>7.0f} | {ms(row['memory_append_s']):>13} {ms(row['qvc_append_s']):>9} "
              f"{row['qvc_append_s'] / row['memory_append_s']:>7.0f} | {ms(row['memory_load_s']):>11} "
              f"{ms(row['qvc_load_s']):>9} {row['qvc_load_s'] / row['memory_load_s']:>7.0f}")
    last = rows[-1]
    print(f"\nK={last['k']} targets against a dict in memory: wall time per step <= 1.0x: "
          f"{'PASS' if last['wall_ratio'] <= 1.0 else 'MISS'} ({last['wall_ratio']:.2f}); bytes written <= 1/10: "
          f"{'PASS' if last['wchar_ratio'] <= 0.1 else 'MISS'} ({last['wchar_ratio']:.2f})")
    return {"loops": loops, "stores": stores, "summary": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ks", type=int, nargs="+", default=list(KS), help="tool steps per run (default 1 16 64)")
    parser.add_argument("--dir", help="parent of the work directory (default benchmarks/out/)")
    parser.add_argument("--keep", action="store_true", help="keep the repositories")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    results = asyncio.run(main_async(args))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
