#!/usr/bin/env python
"""Growing-conversation benchmark: LangGraph with QvcSaver vs LangGraph with SqliteSaver.

The workload is LangGraph's own growing-conversation benchmark shape: a ``StateGraph`` whose
``messages`` channel uses the ``add_messages`` reducer; each turn invokes the graph with one
~400-character human message, a ``human`` node returns nothing and an ``ai`` node appends one
~400-character AI message (4 checkpoints per turn: input, two node steps, end). Both savers
run the same turns in one process on the same disk, interleaved turn by turn (the order
alternating), so that disk noise from other processes hits both alike.

Run by hand from the repository root::

    .venv/bin/python benchmarks/bench_langgraph.py                 # 1,000 turns (a few minutes)
    .venv/bin/python benchmarks/bench_langgraph.py --turns 200     # quicker
    .venv/bin/python benchmarks/bench_langgraph.py --templated     # compressible templated text

Reported per saver: bytes on disk after closing (allocated blocks, ``du``-style: the qvc
repository directory; the SQLite database with its ``-wal`` and ``-shm``), median ``invoke``
latency of the first and last 10 turns and their ratio, and the qvc/sqlite ratios next to the
targets of issue 13 (bytes <= 1/40; flat: median of the last 50 turns / turns 20-70 <= 1.3). Text
is random words drawn with a Zipf-like frequency (realistic compressibility) unless ``--templated``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from typing import Annotated, Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402
from measure import allocated  # noqa: E402
from typing_extensions import TypedDict  # noqa: E402

from qvc.integrations.langgraph import QvcSaver  # noqa: E402

WINDOW = 10


class State(TypedDict):
    messages: Annotated[list, add_messages]


class Text:
    """~400-character messages: random words (Zipf-like) or a few fixed sentence templates."""

    def __init__(self, templated: bool, seed: int = 7):
        self.rng = random.Random(seed)
        self.templated = templated
        letters = "abcdefghijklmnopqrstuvwxyz"
        self.words = ["".join(self.rng.choice(letters) for _ in range(self.rng.randint(2, 9))) for _ in range(5000)]
        self.cum_weights = list(itertools.accumulate(1.0 / (i + 1) for i in range(len(self.words))))

    def message(self, i: int, who: str) -> str:
        if self.templated:
            base = (f"{who} turn {i}: we are reviewing item {i % 17} of the plan and the open question "
                    f"about component {i % 5}. The previous answer covered the failure modes; this one "
                    "asks which migration step should come first and what the rollback plan looks like. ")
            return (base * 2)[:400]
        out: list[str] = []
        while sum(len(w) + 1 for w in out) < 400:
            out.extend(self.rng.choices(self.words, cum_weights=self.cum_weights, k=8))
        return " ".join(out)[:400]


def build(checkpointer: Any, text: Text) -> Any:
    def human(state: State) -> dict:
        return {}

    def ai(state: State) -> dict:
        i = len(state["messages"]) // 2
        return {"messages": [AIMessage(content=text.message(i, "ai"), id=f"a{i}")]}

    g = StateGraph(State)
    g.add_node("human", human)
    g.add_node("ai", ai)
    g.add_edge(START, "human")
    g.add_edge("human", "ai")
    g.add_edge("ai", END)
    return g.compile(checkpointer=checkpointer)


def run(savers: dict[str, Any], turns: int, templated: bool) -> tuple[dict[str, list[float]], dict[str, list]]:
    """Run the turns on every saver, interleaved (the order alternates each turn), so that noise
    from other processes on the disk hits every saver alike; return latencies and final states."""
    graphs = {label: build(saver, Text(templated)) for label, saver in savers.items()}
    latencies: dict[str, list[float]] = {label: [] for label in savers}
    human_text = Text(templated, seed=11)
    config = {"configurable": {"thread_id": "bench"}}
    labels = list(savers)
    for i in range(turns):
        msg = HumanMessage(content=human_text.message(i, "human"), id=f"h{i}")
        for label in labels if i % 2 == 0 else labels[::-1]:
            t0 = time.perf_counter()
            graphs[label].invoke({"messages": [msg]}, config)
            latencies[label].append(time.perf_counter() - t0)
        if (i + 1) % 100 == 0:
            print(f"  {i + 1} turns: " + ", ".join(f"{label} {statistics.median(lat[-10:]) * 1000:.1f} ms"
                                                   for label, lat in latencies.items()), flush=True)
    finals = {label: [(m.type, m.id, m.content) for m in g.get_state(config).values["messages"]]
              for label, g in graphs.items()}
    return latencies, finals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--templated", action="store_true", help="compressible templated text")
    parser.add_argument("--dir", default=None, help="parent of the work directory (default: system temp)")
    parser.add_argument("--keep", action="store_true", help="keep the repository and database")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="bench-langgraph-", dir=args.dir)
    repo, db = os.path.join(work, "bench.qvc"), os.path.join(work, "bench.sqlite")
    print(f"{args.turns} turns, {'templated' if args.templated else 'random-word'} text, work dir {work}")
    import sqlite3

    try:
        saver = QvcSaver(repo)  # durability "sync": every put and put_writes is fdatasync'd
        conn = sqlite3.connect(db, check_same_thread=False)
        sync_mode = conn.execute("PRAGMA synchronous").fetchone()[0]
        latencies, finals = run({"qvc": saver, "sqlite": SqliteSaver(conn)}, args.turns, args.templated)
        q_lat, s_lat = latencies["qvc"], latencies["sqlite"]
        q_final, s_final = finals["qvc"], finals["sqlite"]
        journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
        conn.close()
        saver.close()
        q_bytes = allocated(repo)
        s_bytes = allocated(db, db + "-wal", db + "-shm")
        with QvcSaver(repo, create=False) as reopened:  # read back after reopening
            back = build(reopened, Text(args.templated)).get_state({"configurable": {"thread_id": "bench"}})
            q_back = [(m.type, m.id, m.content) for m in back.values["messages"]]
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    assert q_final == s_final == q_back, "the two savers disagree on the final conversation"
    n = min(WINDOW, args.turns // 2)

    def med(xs: list[float]) -> float:
        return statistics.median(xs) * 1000

    rows = []
    for label, lat, size in (("qvc", q_lat, q_bytes), ("sqlite", s_lat, s_bytes)):
        first, last = med(lat[:n]), med(lat[-n:])
        early = lat[19:70] if len(lat) >= 120 else lat[: len(lat) // 2]  # turns 20-70 (fewer turns: first half)
        flat = med(lat[-50:]) / med(early)
        rows.append((label, size, first, last, last / first, med(lat), sum(lat), flat))
    print(f"\nsqlite: journal_mode={journal}, synchronous={sync_mode} (0=OFF, 1=NORMAL, 2=FULL)")
    print(f"{'saver':8s} {'bytes on disk':>15s} {'first10 ms':>11s} {'last10 ms':>10s} {'last/first':>11s}"
          f" {'median ms':>10s} {'total s':>8s}")
    for label, size, first, last, growth, median, total, _ in rows:
        print(f"{label:8s} {size:15,d} {first:11.2f} {last:10.2f} {growth:11.2f} {median:10.2f} {total:8.1f}")
    (_, qb, qf, ql, qg, qm, _, qflat), (_, sb, sf, sl, sg, sm, _, sflat) = rows
    print(f"\nbytes qvc/sqlite         = 1/{sb / qb:.0f}  (target <= 1/40: {'PASS' if qb * 40 <= sb else 'MISS'})")
    print(f"qvc last 50 / turns 20-70 = {qflat:.2f}  (target <= 1.3, flat: {'PASS' if qflat <= 1.3 else 'MISS'})")
    print(f"sqlite last 50 / turns 20-70 = {sflat:.2f}")
    print(f"(info) last10/first10: qvc {qg:.2f}, sqlite {sg:.2f}")
    print(f"last10 latency qvc/sqlite = {ql / sl:.3f};  median latency qvc/sqlite = {qm / sm:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
