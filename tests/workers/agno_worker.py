"""An agno agent on QvcDb with a scripted model, shared by the agno tests, and the crash worker.

Usage: python agno_worker.py REPO RUN_ID MARKER
Runs the agent (async, ``checkpoint="tool-batch"``) on ``AsyncQvcDb(REPO)``; inside the second
tool batch, after the first batch's checkpoint is durable, it writes MARKER and sleeps until
the test SIGKILLs it.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any, List

from agno.agent import Agent

from qvc.integrations.agno import AsyncQvcDb
from qvc.integrations.agno.scripted import ScriptedModel

SESSION = "agno-session"
RESULT_BYTES = 2000


def batches(k: int) -> List[Any]:
    """A script of ``k`` tool batches (one ``lookup`` call each), then a final answer."""
    return [[("lookup", {"n": i + 1})] for i in range(k)] + ["final answer"]


def lookup(n: int) -> str:
    """Look up item n (2,000 bytes of result; blocks in the crash worker's second batch)."""
    marker = os.environ.get("QVC_AGNO_MARKER")
    if marker and n == 2:
        Path(marker).write_text("inside batch 2")
        time.sleep(300)
    return f"item {n}: " + "x" * RESULT_BYTES


def make_agent(db: Any, script: List[Any], session_id: str = SESSION) -> Agent:
    """An agent on ``db`` playing ``script``, checkpointing after every tool batch."""
    return Agent(model=ScriptedModel(script=list(script)), db=db, tools=[lookup], checkpoint="tool-batch",
                 session_id=session_id, telemetry=False)


async def _main(repo: str, run_id: str) -> None:
    db = AsyncQvcDb(repo)
    await make_agent(db, batches(3)).arun("go", run_id=run_id)


if __name__ == "__main__":
    os.environ["QVC_AGNO_MARKER"] = sys.argv[3]
    asyncio.run(_main(sys.argv[1], sys.argv[2]))
