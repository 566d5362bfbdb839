#!/usr/bin/env python
"""QvcStorage and QvcSessionManager against Strands' own file stores: the same scripted run of K tool steps.

Run by hand from the repository root::

    .venv/bin/python benchmarks/bench_strands.py              # K = 1, 16, 64; 3 rounds
    .venv/bin/python benchmarks/bench_strands.py --rounds 1   # a smoke run
    .venv/bin/python benchmarks/bench_strands.py --json out.json

Strands' ``Agent`` loop (qvc/integrations/strands/scripted.py: a scripted model calls a tool K
times, each result a distinct 2,000-byte text, then answers; no conversation manager trims it) on
a fresh session, two lines side
by side, rounds interleaved (Strands' store first in even rounds), each case in a fresh directory
under ``--dir`` (default ``benchmarks/out/``, git-ignored):

- **snapshots**: ``SnapshotSessionManager(save_latest_on="message")`` (every message saved as it is
  added: 2K + 2 saves, then the turn's end) on Strands' ``LocalFileStorage`` and on ``QvcStorage``;
- **invocation**: the same with ``save_latest_on="invocation"`` (Strands' default: one save when
  the turn ends);
- **repository**: ``RepositorySessionManager`` (each message appended, the agent synced) as
  Strands' ``FileSessionManager`` and as ``QvcSessionManager``.

Per case: wall time of the agent call divided by its K + 1 model turns (*per step*); the bytes this
process passed to ``write()`` (``/proc/self/io`` ``wchar``) during the call; the bytes on disk
(apparent sizes) of the store once closed; the time a new agent takes to restore the session.
qvc runs with SYNC durability (every save on stable storage when it returns: an fsync each), and
for reference with ASYNC (the log flushed in the background; wall time only); Strands' file stores
write each file through the page cache and never fsync. Kinds rotate each round. Medians over rounds;
the issue's targets (wall time per step at most Strands' store's, bytes written at most 1/10 at
K=64) are printed as PASS/MISS.
"""

from __future__ import annotations

import argparse
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
KINDS = ("files", "qvc", "qvc-async")
LINES = {"snapshots": KINDS, "invocation": KINDS, "repository": KINDS}


def make_tool(k: int, tag: str):
    """A tool answering ``k + 1`` distinct 2,000-byte texts."""
    from strands import tool

    rng = random.Random(f"{k}-{tag}")
    texts = ["".join(rng.choice("abcdefghij klmnop") for _ in range(RESULT_BYTES)) for _ in range(k + 1)]

    @tool
    def lookup(n: int) -> str:
        """Look up item n.

        Args:
            n: The item.
        """
        return f"item {n}: " + texts[n % len(texts)]

    return lookup


def manager_for(line: str, kind: str, where: str):
    """``(session manager, what to close)`` of a case."""
    from strands.session import FileSessionManager, SnapshotSessionManager
    from strands.storage import LocalFileStorage

    from qvc.integrations.strands import QvcSessionManager, QvcStorage

    durability = "async" if kind == "qvc-async" else "sync"
    if line in ("snapshots", "invocation"):
        storage = LocalFileStorage(where) if kind == "files" else QvcStorage(where, durability=durability)
        save = "message" if line == "snapshots" else "invocation"
        return SnapshotSessionManager("bench", storage=storage, save_latest_on=save), storage
    if kind == "files":
        manager = FileSessionManager("bench", storage_dir=where)
    else:
        manager = QvcSessionManager("bench", where, durability=durability)
    return manager, manager


def case(line: str, kind: str, k: int, where: str) -> dict:
    """One measured run of ``k`` tool steps on a fresh ``kind`` store at ``where``."""
    from strands import Agent
    from strands.agent.conversation_manager import NullConversationManager

    from qvc.integrations.strands.scripted import ScriptedModel

    model = ScriptedModel()
    prompt = f"Look up {k} items."
    model.plan(prompt, calls=[("lookup", {"n": n}) for n in range(k)], answer="done")
    lookup = make_tool(k, os.path.basename(where))
    store = os.path.join(where, "store" if kind == "files" else "store.qvc")
    manager, closing = manager_for(line, kind, store)
    agent = Agent(model=model, tools=[lookup], session_manager=manager, agent_id="a1", callback_handler=None,
                  conversation_manager=NullConversationManager())
    io0 = proc_io()
    t0 = time.perf_counter()
    answer = str(agent(prompt)).strip()
    wall = time.perf_counter() - t0
    io1 = proc_io()
    if kind != "files":
        closing.close()
    assert answer == "done" and len(agent.messages) == 2 * k + 2, (answer, len(agent.messages))
    manager, closing = manager_for(line, kind, store)
    t0 = time.perf_counter()
    again = Agent(model=model, tools=[lookup], session_manager=manager, agent_id="a1", callback_handler=None,
                  conversation_manager=NullConversationManager())
    restore = time.perf_counter() - t0
    assert len(again.messages) == 2 * k + 2
    if kind != "files":
        closing.close()
    return {"line": line, "kind": kind, "k": k, "wall_per_step_s": wall / (k + 1), "wall_s": wall,
            "wchar": io1["wchar"] - io0["wchar"], "write_bytes": io1["write_bytes"] - io0["write_bytes"],
            "disk": apparent(store), "restore_s": restore}


def kb(n: float) -> str:
    return f"{n / 1e6:.2f} MB" if abs(n) >= 1e6 else f"{n / 1e3:.1f} KB"


def ms(s: float) -> str:
    return f"{s * 1e3:.2f} ms" if s >= 1e-3 else f"{s * 1e6:.0f} us"


def main_run(args: argparse.Namespace) -> dict:
    base = args.dir or os.path.join(ROOT, "benchmarks", "out")
    os.makedirs(base, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="bench-strands-", dir=base)
    cases = []
    try:
        print(f"Strands' file stores against qvc (SYNC); {args.rounds} round(s), medians; load "
              f"{os.getloadavg()[0]:.2f}")
        case("snapshots", "qvc", 1, os.path.join(tmp, "warm"))  # imports, first repository
        for r in range(args.rounds):
            for line in LINES:
                for k in args.ks:
                    for kind in (LINES[line][r % 3:] + LINES[line][:r % 3]):
                        where = os.path.join(tmp, f"{line}-{kind}-{k}-{r}")  # kinds rotate by round
                        os.makedirs(where)
                        cases.append(case(line, kind, k, where))
                        shutil.rmtree(where, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)

    def med(line: str, kind: str, key: str, k: int) -> float:
        return statistics.median(c[key] for c in cases if c["line"] == line and c["kind"] == kind and c["k"] == k)

    rows = []
    for line in LINES:
        base_name = "FileSessionManager" if line == "repository" else "LocalFileStorage"
        qvc_name = "QvcSessionManager" if line == "repository" else "QvcStorage"
        print(f"\n{line}: {base_name} (files) against {qvc_name} (qvc)")
        print(f"{'K':>3} | {'wall/step files':>15} {'qvc':>9} {'ratio':>6} {'async':>9} {'ratio':>6} | "
              f"{'write() files':>13} {'qvc':>9} {'ratio':>6} | {'disk files':>10} {'qvc':>9} | "
              f"{'restore files':>13} {'qvc':>9}")
        for k in args.ks:
            row = {"line": line, "k": k, **{f"{kind.replace('-', '_')}_{key}": med(line, kind, key, k)
                                             for kind in KINDS for key in ("wall_per_step_s", "wchar", "write_bytes",
                                                                           "disk", "restore_s")}}
            row["wall_ratio"] = row["qvc_wall_per_step_s"] / row["files_wall_per_step_s"]
            row["async_wall_ratio"] = row["qvc_async_wall_per_step_s"] / row["files_wall_per_step_s"]
            row["wchar_ratio"] = row["qvc_wchar"] / max(row["files_wchar"], 1)
            rows.append(row)
            print(f"{k:>3} | {ms(row['files_wall_per_step_s']):>15} {ms(row['qvc_wall_per_step_s']):>9} "
                  f"{row['wall_ratio']:>6.2f} {ms(row['qvc_async_wall_per_step_s']):>9} "
                  f"{row['async_wall_ratio']:>6.2f} | {kb(row['files_wchar']):>13} {kb(row['qvc_wchar']):>9} "
                  f"{row['wchar_ratio']:>6.2f} | {kb(row['files_disk']):>10} {kb(row['qvc_disk']):>9} | "
                  f"{ms(row['files_restore_s']):>13} {ms(row['qvc_restore_s']):>9}")
        last = rows[-1]
        print(f"K={last['k']} targets: wall time per step <= 1.0x: {'PASS' if last['wall_ratio'] <= 1.0 else 'MISS'} "
              f"({last['wall_ratio']:.2f}); bytes written <= 1/10: "
              f"{'PASS' if last['wchar_ratio'] <= 0.1 else 'MISS'} ({last['wchar_ratio']:.2f})")
    print(f"load after: {os.getloadavg()[0]:.2f}")
    return {"cases": cases, "summary": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ks", type=int, nargs="+", default=list(KS), help="tool steps per run (default 1 16 64)")
    parser.add_argument("--dir", help="parent of the work directory (default benchmarks/out/)")
    parser.add_argument("--keep", action="store_true", help="keep the stores")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    results = main_run(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
