"""The adapter kit (adapter_kit.py) on agno's ``QvcDb``: agno's own ``Agent`` with qvc's scripted
model (tests/workers/agno_worker.py: tool batches, ``checkpoint="tool-batch"``), a failed run
continued in place by ``continue_from`` (time travel), a ``continue_from`` fork, ``regenerate``,
``fork_session``, ``delete_run`` and ``delete_session``. A run is the thread ``run/<session>/<run>``,
a session ``agno/session/<session>`` (docs/agno.md)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Set

import pytest

pytest.importorskip("agno.agent")

from adapter_kit import AdapterDriver, AdapterKit, Operation  # noqa: E402
from agno.run.base import RunStatus  # noqa: E402

from qvc import CheckpointConfig  # noqa: E402
from qvc.integrations.agno import QvcDb  # noqa: E402
from qvc.runs import Runs  # noqa: E402
from tests.workers.agno_worker import batches, make_agent  # noqa: E402

WRITER = """
import sys, uuid
from qvc.integrations.agno import QvcDb
from tests.workers.agno_worker import batches, make_agent
db = QvcDb(sys.argv[1])
tag, i = uuid.uuid4().hex[:8], 0
while True:
    run_id = f"k-{tag}-{i}"
    out = make_agent(db, batches(1), session_id="killed").run("go", run_id=run_id)
    print(f"ack {run_id} {out.status.value}")
    i += 1
"""


@dataclass
class Handle:
    db: QvcDb
    made: Dict[str, str] = field(default_factory=dict)  # what the script created: label -> id


def _run(session: str, run_id: str, script: List[Any]):
    def op(h: Handle) -> None:
        make_agent(h.db, script, session_id=session).run("go", run_id=run_id)
    return op


def _fail_after_two_batches(h: Handle) -> None:
    """A run whose model fails after two tool batches: an ERROR run keeping its messages."""
    def down(messages):
        raise RuntimeError("provider down")
    out = make_agent(h.db, batches(2)[:2] + [down], session_id="s1").run("go", run_id="e1")
    assert out.status is RunStatus.error


def _continue_in_place(h: Handle) -> None:
    """``continue_from`` in place: time travel, the old tail kept as a superseded line."""
    out = make_agent(h.db, ["recovered"], session_id="s1").continue_run(run_id="e1", session_id="s1",
                                                                         continue_from=3)
    assert out.run_id == "e1" and out.status is RunStatus.completed


def _fork(h: Handle) -> None:
    out = make_agent(h.db, ["forked answer"], session_id="s1").continue_run(
        run_id="r1", session_id="s1", continue_from=3, fork=True)
    assert out.run_id != "r1" and out.status is RunStatus.completed
    h.made["fork"] = out.run_id


def _regenerate(h: Handle) -> None:
    out = make_agent(h.db, ["another answer"], session_id="s1").continue_run(
        run_id="r1", session_id="s1", regenerate=True)
    assert out.regenerated_from == "r1"


def _fork_session(h: Handle) -> None:
    h.made["session"] = make_agent(h.db, [], session_id="s2").fork_session(source_session_id="s2")


class AgnoDriver(AdapterDriver):
    name = "agno"

    def open(self, path: Path) -> Handle:
        return Handle(QvcDb(path))

    def close(self, handle: Handle) -> None:
        handle.db.close()

    def script(self) -> List[Operation]:
        return [
            Operation("s1/r1: a run of two tool batches", _run("s1", "r1", batches(2))),
            Operation("s1/e1: two tool batches, then the model fails", _fail_after_two_batches),
            Operation("s1/e1: continue_from=3 in place (time travel)", _continue_in_place),
            Operation("s1/r1: continue_from=3, fork=True", _fork),
            Operation("s1/r1: regenerate", _regenerate),
            Operation("s2/r2: a run", _run("s2", "r2", batches(1))),
            Operation("fork_session s2", _fork_session),
            Operation("delete_run (the fork of r1)", lambda h: h.db.delete_run(h.made["fork"])),
            Operation("delete_session (the fork of s2)", lambda h: h.db.delete_session(h.made["session"])),
            Operation("s3/r3: a run after the deletes", _run("s3", "r3", batches(1))),
        ]

    def lines(self, handle: Handle) -> Dict[str, List[str]]:
        return {thread: [cid for cid, current in entries if current]
                for thread, entries in self._checkpoints(handle).items()}

    def checkpoints(self, handle: Handle) -> Dict[str, Set[str]]:
        return {thread: {cid for cid, _ in entries} for thread, entries in self._checkpoints(handle).items()}

    def _checkpoints(self, handle: Handle) -> Dict[str, List[tuple]]:
        """Per thread, its checkpoints newest first as (id, on the current line): a run's from its
        timeline (qvc.runs), a session's from the store's line."""
        db, out = handle.db, {}
        rows, _ = db.get_sessions(deserialize=False)
        for row in rows:
            thread = f"agno/session/{row['session_id']}"
            out[thread] = [(t.checkpoint.id, True) for t in db.store.list(CheckpointConfig(thread))]
        runs = Runs(db.store)
        for row in db.get_runs(deserialize=False)[0]:
            entries = runs.timeline(row["run_id"])
            out[runs.thread(row["run_id"])] = [(e.id, e.current) for e in reversed(entries)]
        return out

    def snapshot(self, handle: Handle) -> Any:
        db = handle.db
        rows, _ = db.get_sessions(deserialize=False, sort_by="session_id")
        runs = sorted((r["run_id"], db.get_run(r["run_id"], deserialize=False)) for r in
                      db.get_runs(deserialize=False)[0])
        return rows, runs, [db.get_session(r["session_id"]).to_dict() for r in rows]

    def writer(self, path: Path) -> List[str]:
        return [sys.executable, "-c", WRITER, str(path)]

    def check_acknowledged(self, handle: Handle, tokens: List[str]) -> None:
        for token in tokens:
            run_id, status = token.split()
            assert status == "COMPLETED", token
            run = handle.db.get_run(run_id)
            assert run is not None, f"acknowledged run {run_id} is gone"
            assert run.status is RunStatus.completed and run.content == "final answer", token


class TestAgnoAdapter(AdapterKit):
    driver = AgnoDriver()
