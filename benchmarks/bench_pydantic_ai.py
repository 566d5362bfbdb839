#!/usr/bin/env python
"""QvcConversationStore against pydantic-ai's own stores: the same scripted conversation of K tool
steps, its wall time per step, bytes written and bytes on disk.

Run by hand from the repository root::

    .venv/bin/python benchmarks/bench_pydantic_ai.py              # K = 1, 16, 64; 3 rounds
    .venv/bin/python benchmarks/bench_pydantic_ai.py --quick      # 1 round
    .venv/bin/python benchmarks/bench_pydantic_ai.py --json out.json

**The run.** pydantic-ai's real ``Agent`` over a scripted ``FunctionModel`` (no network) and a
real tool whose result is 2,000 bytes of text. A *step* is one turn as an application does it
with a conversation store: ``load`` the conversation, ``agent.run(prompt, conversation=...)``
(one tool call, its result, the answer: 4 new messages) and ``save`` the result. K steps make a
conversation of 4K messages. Stores, each case in a fresh process, rounds interleaved:

* ``qvc``: :class:`~qvc.integrations.pydantic_ai.QvcConversationStore` in SYNC mode (a save is
  on stable storage when it returns);
* ``memory``: pydantic-ai's ``InMemoryConversationStore``, the only ``ConversationStore``
  pydantic-ai 2.68 ships (nothing on disk; its bytes are 0 by construction);
* ``json-file``: pydantic-ai's documented plain path, ``result.all_messages_json()`` written to a
  file after each turn (atomically: a temporary file, fsync, rename) and read back with
  ``ModelMessagesTypeAdapter`` before the next; pydantic-ai ships no file or SQLite store.

Per case: the median wall time of a step (load + run + save), and of its store part alone (load
+ save), in milliseconds; the bytes passed to ``write()`` during the K steps (``/proc/self/io``
wchar: for qvc the journal, packs and refs); the bytes on disk once closed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
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
KINDS = ("qvc", "memory", "json-file")
RESULT_BYTES = 2000


class JsonFileStore:
    """pydantic-ai's plain path: the whole history as ``all_messages_json()`` in one file per conversation."""

    def __init__(self, where: str):
        self.where = where

    def load(self, cid: str):
        from pydantic_ai.messages import ModelMessagesTypeAdapter

        try:
            with open(os.path.join(self.where, cid + ".json"), "rb") as f:
                return ModelMessagesTypeAdapter.validate_json(f.read())
        except FileNotFoundError:
            return []

    def save(self, cid: str, data: bytes) -> None:
        final = os.path.join(self.where, cid + ".json")
        tmp = final + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
        fd = os.open(self.where, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def one_case(kind: str, k: int, where: str) -> dict:
    """K steps of one conversation on a fresh store of ``kind``; measured in this process."""
    from pydantic_ai import Agent
    from pydantic_ai.conversation import Conversation
    from pydantic_ai.conversation_store import InMemoryConversationStore
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.usage import UsageLimits

    from qvc.integrations.pydantic_ai import QvcConversationStore

    rng = random.Random(k)
    texts = ["".join(rng.choice("abcdefghij klmnop") for _ in range(RESULT_BYTES)) for _ in range(k + 1)]

    def scripted(messages, info):
        if any(isinstance(p, ToolReturnPart) for p in messages[-1].parts):
            return ModelResponse(parts=[TextPart("noted")])
        return ModelResponse(parts=[ToolCallPart("lookup", {"n": len(messages)}, tool_call_id=f"c{len(messages)}")])

    agent = Agent(FunctionModel(scripted))

    @agent.tool_plain
    def lookup(n: int) -> str:
        return texts[n % len(texts)]

    limits = UsageLimits(request_limit=None)
    os.makedirs(where, exist_ok=True)
    path = os.path.join(where, "store")
    if kind == "qvc":
        store = QvcConversationStore(path)
    elif kind == "memory":
        store = InMemoryConversationStore()
    else:
        os.makedirs(path)
        store = JsonFileStore(path)

    async def steps() -> tuple[list[float], list[float]]:
        total, stored = [], []
        for i in range(k):
            t0 = time.perf_counter()
            if kind == "json-file":
                history = store.load("c")
                t1 = time.perf_counter()
                result = await agent.run(f"step {i}", message_history=history, usage_limits=limits)
                t2 = time.perf_counter()
                store.save("c", result.all_messages_json())
            else:
                conv = await store.load("c") or Conversation(conversation_id="c")
                t1 = time.perf_counter()
                result = await agent.run(f"step {i}", conversation=conv, usage_limits=limits)
                t2 = time.perf_counter()
                await store.save(result)
            t3 = time.perf_counter()
            total.append(t3 - t0)
            stored.append((t1 - t0) + (t3 - t2))
        return total, stored

    w0 = wchar()
    total, stored = asyncio.run(steps())
    written = wchar() - w0
    if kind == "qvc":
        store.close()
    return {"kind": kind, "k": k, "step_ms": statistics.median(total) * 1e3,
            "store_ms": statistics.median(stored) * 1e3, "written": written,
            "disk": allocated(path) if os.path.isdir(path) else 0}


def child(args: list) -> dict:
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", *args], capture_output=True,
                         text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def kb(n: float) -> str:
    return f"{n / 1024:,.1f} KiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, k, where = args.child
        print(json.dumps(one_case(kind, int(k), where)))
        return
    rounds = 1 if args.quick else args.rounds
    tmp = tempfile.mkdtemp(prefix="bench-pai-")
    results: dict = {}
    try:
        for r in range(rounds):
            for k in KS:
                for kind in KINDS:
                    where = os.path.join(tmp, f"{kind}-{k}-{r}")
                    results.setdefault((kind, k), []).append(child([kind, str(k), where]))
                    shutil.rmtree(where, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def med(kind: str, k: int, key: str) -> float:
        return statistics.median(x[key] for x in results[(kind, k)])

    print(f"pydantic-ai conversation of K steps (load, run one tool call, save), {rounds} round(s), "
          f"median per step")
    print(f"{'K':>3} {'store':<10} {'step ms':>9} {'store ms':>9} {'x memory':>9} {'x json':>7} "
          f"{'written':>12} {'on disk':>12} {'qvc/json bytes':>15}")
    table = []
    for k in KS:
        for kind in KINDS:
            row = {"k": k, "kind": kind, **{key: med(kind, k, key) for key in ("step_ms", "store_ms", "written",
                                                                               "disk")}}
            row["vs_memory"] = row["step_ms"] / med("memory", k, "step_ms")
            row["vs_json"] = row["step_ms"] / med("json-file", k, "step_ms")
            ratio = row["written"] / med("json-file", k, "written") if kind == "qvc" else None
            table.append({**row, "written_vs_json": ratio})
            print(f"{k:>3} {kind:<10} {row['step_ms']:>9.2f} {row['store_ms']:>9.2f} {row['vs_memory']:>8.2f}x "
                  f"{row['vs_json']:>6.2f}x {kb(row['written']):>12} {kb(row['disk']):>12} "
                  f"{'' if ratio is None else f'{ratio:.3f}':>15}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(table, f, indent=2)


if __name__ == "__main__":
    main()
