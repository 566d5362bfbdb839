"""The adapter kit (adapter_kit.py) on LangGraph's ``QvcSaver``: real ``StateGraph`` runs
(tests/workers/langgraph_worker.py: deterministic nodes, an interrupt, a pydantic value), forks
by ``update_state``, ``copy_thread``, ``prune``, ``delete_for_runs`` and ``delete_thread``."""

from __future__ import annotations

import sys
import uuid
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Set

import pytest

pytest.importorskip("langgraph.graph")

from adapter_kit import AdapterDriver, AdapterKit, Operation  # noqa: E402
from langgraph.types import Command  # noqa: E402

from qvc.integrations.langgraph import QvcSaver, thread_name  # noqa: E402
from tests.workers.langgraph_worker import build, human  # noqa: E402

WRITER = """
import sys
from qvc.integrations.langgraph import QvcSaver
from tests.workers.langgraph_worker import build, human
saver = QvcSaver(sys.argv[1])
graph = build("chat", saver)
config = {"configurable": {"thread_id": "killed"}}
i = 0
while True:
    graph.invoke(human(i), config)
    state = graph.get_state(config)
    print(f"ack {state.config['configurable']['checkpoint_id']} {state.values['count']}")
    i += 1
"""


def _config(thread: str, **extra: Any) -> dict:
    return {"configurable": {"thread_id": thread, **extra}}


@dataclass
class Handle:
    saver: QvcSaver
    chat: Any
    ask: Any


def _fork_from_first_turn(h: Handle) -> None:
    """``update_state`` on an earlier checkpoint: a fork inside the thread, off its current line."""
    first = [s for s in h.ask.get_state_history(_config("t1")) if s.next == ("ask",)][-1]
    h.ask.update_state(first.config, {"count": 100})


class LangGraphDriver(AdapterDriver):
    name = "langgraph"

    def open(self, path: Path) -> Handle:
        saver = QvcSaver(path)
        return Handle(saver, build("chat", saver), build("interrupt", saver))

    def close(self, handle: Handle) -> None:
        handle.saver.close()

    def script(self) -> List[Operation]:
        run_id = str(uuid.uuid4())
        return [
            Operation("t1: a turn that stops at an interrupt", lambda h: h.ask.invoke(human(0), _config("t1"))),
            Operation("t1: resume", lambda h: h.ask.invoke(Command(resume="yes"), _config("t1"))),
            Operation("t1: fork by update_state", _fork_from_first_turn),
            Operation("t1: continue on the fork", lambda h: h.ask.invoke(Command(resume="again"), _config("t1"))),
            Operation("copy_thread t1 -> t2", lambda h: h.saver.copy_thread("t1", "t2")),
            Operation("t2: a turn", lambda h: h.ask.invoke(human(1), _config("t2"))),
            Operation("t3: a run", lambda h: h.chat.invoke(human(0), {**_config("t3"), "run_id": run_id})),
            Operation("t3: a second run", lambda h: h.chat.invoke(human(1), _config("t3"))),
            Operation("delete_for_runs (t3's first run)", lambda h: h.saver.delete_for_runs([run_id])),
            Operation("prune t2", lambda h: h.saver.prune(["t2"], strategy="keep_latest")),
            Operation("t4: a turn", lambda h: h.chat.invoke(human(0), _config("t4"))),
            Operation("delete_thread t4", lambda h: h.saver.delete_thread("t4")),
            Operation("t5: a turn that stops at an interrupt", lambda h: h.ask.invoke(human(2), _config("t5"))),
        ]

    def _tuples(self, handle: Handle) -> Dict[str, list]:
        by_thread: Dict[str, list] = defaultdict(list)
        for t in handle.saver.list(None):
            c = t.config["configurable"]
            by_thread[thread_name(c["thread_id"], c.get("checkpoint_ns", ""))].append(t)
        return dict(by_thread)

    def lines(self, handle: Handle) -> Dict[str, List[str]]:
        out = {}
        for thread, tuples in self._tuples(handle).items():
            c = tuples[0].config["configurable"]
            t = handle.saver.get_tuple(_config(c["thread_id"], checkpoint_ns=c.get("checkpoint_ns", "")))
            line = []
            while t is not None:
                line.append(t.config["configurable"]["checkpoint_id"])
                t = handle.saver.get_tuple(t.parent_config) if t.parent_config else None
            out[thread] = line
        return out

    def checkpoints(self, handle: Handle) -> Dict[str, Set[str]]:
        return {thread: {t.config["configurable"]["checkpoint_id"] for t in tuples}
                for thread, tuples in self._tuples(handle).items()}

    def snapshot(self, handle: Handle) -> Any:
        return [(t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes)
                for t in handle.saver.list(None)]

    def writer(self, path: Path) -> List[str]:
        return [sys.executable, "-c", WRITER, str(path)]

    def check_acknowledged(self, handle: Handle, tokens: List[str]) -> None:
        for token in tokens:
            cid, count = token.split()
            t = handle.saver.get_tuple(_config("killed", checkpoint_ns="", checkpoint_id=cid))
            assert t is not None, f"acknowledged checkpoint {cid} is gone"
            assert t.checkpoint["channel_values"]["count"] == int(count), token


class TestLangGraphAdapter(AdapterKit):
    driver = LangGraphDriver()
