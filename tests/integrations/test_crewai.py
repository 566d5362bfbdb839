"""QvcFlowPersistence and QvcCheckpointProvider (qvc.integrations.crewai): CrewAI's flow persistence
and runtime-checkpoint provider on a qvc repository.

CrewAI's real flows (no model needed), offline: states saved by ``@persist``, a resume from the
repository alone in a new process, pending human feedback, runtime checkpoints with a resume, a
fork and a prune that never loses the head; the command line showing them; CrewAI's own flow
persistence tests run against QvcFlowPersistence (crewai_upstream/); and the adapter kit."""

from __future__ import annotations

import ast
import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

# CrewAI checks PyPI for a newer release and sends telemetry: neither may touch the network here.
for _name, _value in (("CREWAI_DISABLE_VERSION_CHECK", "true"), ("OTEL_SDK_DISABLED", "true"),
                      ("CREWAI_TRACING_ENABLED", "false"), ("CREWAI_DISABLE_TELEMETRY", "true"),
                      ("CREWAI_TESTING", "true")):
    os.environ.setdefault(_name, _value)

pytest.importorskip("crewai")

from adapter_kit import AdapterDriver, AdapterKit, Operation  # noqa: E402
from crewai.flow.async_feedback.types import PendingFeedbackContext  # noqa: E402
from crewai_flows import Steps, persisted  # noqa: E402
from helpers import child_env, fsck, qvc, run_git  # noqa: E402

from qvc import CheckpointConfig, GitCheckpointStore  # noqa: E402
from qvc.errors import InvalidInputError, SerializationError, UnknownCheckpointError  # noqa: E402
from qvc.integrations.crewai import (  # noqa: E402
    QvcCheckpointProvider,
    QvcFlowPersistence,
    branch_of,
    flow_of,
    flow_thread,
)

ROOT = Path(__file__).resolve().parents[2]


#: CrewAI's own race between its checkpoint listener and a running flow (see its use below)
CREWAI_RACE = "dictionary changed size during iteration"
#: how many times a test that meets CrewAI's races runs before its failure counts (again_on_crewai_races)
ATTEMPTS = 5


def again_on_crewai_races(test):
    """Run ``test`` up to five times, each on a fresh directory, while it fails. CrewAI 1.15's
    runtime-checkpoint listener runs on its own thread pool beside the flow: now and then it dies of
    the state changing under it, names no parent, or records a method late (seen in about one run in
    five of the checkpoint tests below, whatever the provider: 4 of 20 runs on this stop's qvc and 4
    of 20 on 728d109's, one attempt each). Three attempts still all failed in one CI run (about 1 in
    125 per test); five leave about 1 in 3,000. Flow persistence has none of this."""

    @functools.wraps(test)
    def run(tmp_path, *args, **kwargs):
        for attempt in range(ATTEMPTS):
            where = tmp_path / f"try{attempt}"
            where.mkdir()
            try:
                return test(where, *args, **kwargs)
            except BaseException as exc:  # pyo3's PanicException among them
                if isinstance(exc, (KeyboardInterrupt, SystemExit)) or attempt == ATTEMPTS - 1:
                    raise

    return run


def line(store: GitCheckpointStore, thread: str) -> list:
    """The thread's checkpoints on its line, oldest first."""
    return list(reversed(list(store.list(CheckpointConfig(thread)))))


# -- import ----------------------------------------------------------------------------------------


def test_import_qvc_does_not_import_crewai():
    """Nor does the viewer: ``qvc show`` reads CrewAI's checkpoints without loading it."""
    code = ("import sys, qvc, qvc.store.viewers, qvc.integrations.crewai, qvc.integrations.crewai.viewer\n"
            "assert not any(m.split('.')[0] in ('crewai', 'pydantic') for m in sys.modules), 'crewai was imported'")
    subprocess.run([sys.executable, "-c", code], env=child_env(), check=True, timeout=60)


# -- flow persistence ------------------------------------------------------------------------------


def test_a_persisted_flow_saves_one_readable_checkpoint_per_step(tmp_path):
    with QvcFlowPersistence(tmp_path / "f.qvc") as p:
        flow = persisted(p)()
        flow.kickoff()
        fid = flow.state["id"]
        assert p.load_state(fid) == {"id": fid, "items": ["a", "b", "c"]}
        assert p.flows() == [fid] and flow_of(p.thread(fid)) == fid
        cps = line(p.store, flow_thread(fid))
        assert [t.metadata["method"] for t in cps] == ["first", "second", "third"]
        assert [t.checkpoint.state_data["items"] for t in cps] == [["a"], ["a", "b"], ["a", "b", "c"]]
        assert all(t.metadata["source"] == "crewai-flow" and t.metadata["op"] == "save" for t in cps)
        assert [t.checkpoint.step for t in cps] == [0, 1, 2]
        assert p.load_state("never") is None
    fsck(tmp_path / "f.qvc")


def test_states_are_stored_as_crewais_sqlite_store_reads_them_and_bad_input_is_refused(tmp_path):
    from datetime import datetime

    from crewai.flow.persistence.sqlite import SQLiteFlowPersistence
    from pydantic import BaseModel

    class Inner(BaseModel):
        x: int = 1

    state = {"id": "s", "when": datetime(2026, 1, 2, 3, 4, 5), "tags": {"b"}, "pair": (1, 2), "m": Inner(),
             "nested": {"deep": [1, {"k": None}]}}
    with QvcFlowPersistence(tmp_path / "f.qvc") as p:
        sq = SQLiteFlowPersistence(str(tmp_path / "f.db"))
        p.save_state("s", "m", state)
        sq.save_state("s", "m", state)
        assert p.load_state("s") == sq.load_state("s")
        with pytest.raises(InvalidInputError):
            p.save_state("", "m", {})
        with pytest.raises(InvalidInputError):
            p.save_state("s", "m", ["not", "a", "state"])
        assert isinstance(SerializationError("x"), Exception)
        got = p.load_state("s")
        got["id"] = "changed"  # a new dict each time
        assert p.load_state("s")["id"] == "s"


@pytest.mark.slow
def test_a_flow_resumes_from_qvc_alone_in_a_new_process(tmp_path):
    path = tmp_path / "f.qvc"
    with QvcFlowPersistence(path) as p:
        flow = persisted(p)()
        flow.kickoff(inputs={"id": "resumable"})
    code = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from crewai_flows import Steps, persisted
from qvc.integrations.crewai import QvcFlowPersistence
p = QvcFlowPersistence(sys.argv[1])
flow = persisted(p)()
flow.kickoff(inputs={{"id": "resumable"}})
print("STATE", flow.state["items"])
p.close()
"""
    out = subprocess.run([sys.executable, "-c", code, str(path)], env=child_env(), capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "STATE ['a', 'b', 'c', 'a', 'b', 'c']" in out.stdout  # the restored state, run once more
    with QvcFlowPersistence(path) as p:
        assert len(line(p.store, flow_thread("resumable"))) == 6


# A flow of STEPS tool steps persisted by QvcFlowPersistence; each save that returned is written to
# stderr in one write (the flow id, the method, the results the saved state holds) before the flow goes
# on. Its stdout has CrewAI's panels, printed from CrewAI's threads too.
KILLED_FLOW = """
import os, sys
sys.path.insert(0, sys.argv[3])
from crewai_flows import tool_loop
from qvc.integrations.crewai import QvcFlowPersistence

class Acknowledging(QvcFlowPersistence):
    def save_state(self, flow_uuid, method_name, state_data):
        n = len(state_data["results"])
        super().save_state(flow_uuid, method_name, state_data)
        os.write(2, f"saved {flow_uuid} {method_name} {n}\\n".encode())

tool_loop(Acknowledging(sys.argv[1]), int(sys.argv[2]), delay=0.002)().kickoff()
"""

RESUMED_FLOW = """
import sys
sys.path.insert(0, sys.argv[4])
from crewai_flows import tool_loop
from qvc.integrations.crewai import QvcFlowPersistence
with QvcFlowPersistence(sys.argv[1]) as p:
    flow = tool_loop(p, int(sys.argv[2]))()
    flow.kickoff(inputs={"id": sys.argv[3]})
    print("RESULTS", len(flow.state["results"]), flow.state["answer"])
"""


@pytest.mark.slow
def test_a_flow_killed_mid_run_resumes_from_qvc_alone_with_every_acknowledged_step(tmp_path):
    """SIGKILL a real flow right after one of its saves returned; a new process resumes it by its
    flow id from the repository alone and finishes; every acknowledged save is on the flow's line."""
    import signal
    import threading

    from crewai_flows import item

    path, steps, kill_at = tmp_path / "f.qvc", 120, 61  # the 61st save: the 31st tool step's
    here = str(Path(__file__).parent)
    panels = open(tmp_path / "child.out", "w")  # a file: a pipe nobody reads could stall the child
    child = subprocess.Popen([sys.executable, "-c", KILLED_FLOW, str(path), str(steps), here], env=child_env(),
                             stdout=panels, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    watchdog = threading.Timer(120, child.kill)
    watchdog.start()
    acks: list = []
    err = ""
    try:
        for out in child.stderr:
            err += out
            ack = re.fullmatch(r"saved (\S+) (\w+) (\d+)\n", out)
            if ack:
                acks.append((ack[1], ack[2], int(ack[3])))
                if len(acks) == kill_at:
                    child.send_signal(signal.SIGKILL)
                    break
        child.wait(timeout=60)
    finally:
        watchdog.cancel()
        child.kill()
        child.wait()
        child.stderr.close()
        panels.close()
    assert child.returncode == -signal.SIGKILL and len(acks) == kill_at, (child.returncode, len(acks), err[-3000:])
    fid = acks[0][0]
    assert {a[0] for a in acks} == {fid} and acks[-1][2] < steps  # one flow, killed mid-run

    out = subprocess.run([sys.executable, "-c", RESUMED_FLOW, str(path), str(steps), fid, here], env=child_env(),
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"RESULTS {steps} {steps} results" in out.stdout
    expected = [item(n) for n in range(steps)]
    with QvcFlowPersistence(path) as p:
        assert p.flows() == [fid]
        cps = line(p.store, flow_thread(fid))
        # every acknowledged save, in order, with the state it saved: the first kill_at of the line
        assert len(cps) >= kill_at
        for (_, method, n), t in zip(acks, cps[:kill_at], strict=True):
            assert (t.metadata["method"], t.checkpoint.state_data["results"]) == (method, expected[:n])
        # then the resumed run went on from the newest saved state to the end, losing and repeating nothing
        counts = [len(t.checkpoint.state_data["results"]) for t in cps]
        assert counts == sorted(counts) and set(counts) >= set(range(1, steps + 1))
        assert p.load_state(fid) == {"id": fid, "results": expected, "answer": f"{steps} results"}
        assert cps[-1].metadata["method"] == "answer"
    fsck(path)


def test_pending_feedback_is_stored_with_its_state_until_cleared(tmp_path):
    ctx = PendingFeedbackContext(flow_id="fb", flow_class="x.Review", method_name="review",
                                 method_output={"draft": "text"}, message="Approve?", emit=["approved", "rejected"])
    with QvcFlowPersistence(tmp_path / "f.qvc") as p:
        p.save_state("fb", "draft", {"id": "fb", "draft": "text"})
        assert p.load_pending_feedback("fb") is None
        p.save_pending_feedback("fb", ctx, {"id": "fb", "draft": "text", "waiting": True})
        state, back = p.load_pending_feedback("fb")
        assert state == {"id": "fb", "draft": "text", "waiting": True}
        assert back.to_dict() == ctx.to_dict()
        p.save_state("fb", "other", {"id": "fb", "draft": "text 2"})  # still pending until cleared
        assert p.load_pending_feedback("fb")[1].method_name == "review"
        p.clear_pending_feedback("fb")
        p.clear_pending_feedback("fb")
        assert p.load_pending_feedback("fb") is None
        ops = [t.metadata["op"] for t in line(p.store, flow_thread("fb"))]
        assert ops == ["save", "pending_feedback", "save"]
        p.delete_flow("fb")
        assert p.load_state("fb") is None and p.flows() == []
    fsck(tmp_path / "f.qvc")


def test_a_persistence_serialized_into_a_checkpoint_is_rebuilt_by_crewai(tmp_path):
    """CrewAI keeps a flow's persistence in its checkpoints as a dict and rebuilds it by class name."""
    from crewai.flow.runtime import _resolve_persistence  # CrewAI's own rebuilding, as a restore runs it

    p = QvcFlowPersistence(tmp_path / "f.qvc")
    try:
        dumped = p.model_dump(mode="json")
        assert dumped == {"persistence_type": "QvcFlowPersistence", "path": str(tmp_path / "f.qvc"),
                          "durability": "sync"}
        back = _resolve_persistence(dumped)
        assert isinstance(back, QvcFlowPersistence) and back.path == p.path
        back.close()
    finally:
        p.close()


# -- runtime checkpoints ---------------------------------------------------------------------------


@again_on_crewai_races
def test_runtime_checkpoints_resume_fork_and_prune_on_qvc(tmp_path):
    path = tmp_path / "c.qvc"
    with QvcCheckpointProvider(path) as prov:
        flow = Steps(checkpoint=prov.config(on_events=["method_execution_finished"]))
        flow.kickoff()
        main = line(prov.store, prov.thread("main"))
        assert len(main) == 3 and prov.branches() == ["main"]
        ids = [t.checkpoint.id for t in main]
        assert all(len(i) == 24 and i[8] == "T" and i[15] == "_" for i in ids)  # CrewAI's own ids, kept
        # CrewAI serializes the state when its checkpoint handler runs (on its thread pool): the last is whole
        assert main[-1].checkpoint.state_data["entities"][0]["checkpoint_state"]["items"] == ["a", "b", "c"]
        # resume the first checkpoint: CrewAI continues its lineage, qvc time travel on the branch
        resumed = Steps()
        resumed.kickoff(from_checkpoint=prov.config(restore_from=ids[0], on_events=["method_execution_finished"]))
        after = line(prov.store, prov.thread("main"))
        assert after[0].checkpoint.id == ids[0] and len(after) >= 2
        # CrewAI names the parent it resumed from, except now and then (its listener runs on its own
        # thread pool): then the provider follows the branch's head, and the line still starts at ids[0]
        assert after[1].metadata["parent_id"] in (ids[0], None)
        assert {t.checkpoint.id for t in prov.store.list(CheckpointConfig(prov.thread("main")), superseded=True)} \
            >= set(ids)
        # fork the head onto a branch of its own: the branch's first commit descends from it
        head = after[-1].checkpoint.id
        forked = prov.restore(Steps, head, branch="experiment", on_events=["method_execution_finished"])
        forked.kickoff()
        exp = line(prov.store, prov.thread("experiment"))
        exp_ids = [t.checkpoint.id for t in exp]
        own = [t for t in exp if t.checkpoint.thread_id == prov.thread("experiment")]
        assert exp_ids[exp_ids.index(own[0].checkpoint.id) - 1] == head and own[-1].metadata["branch"] == "experiment"
        assert prov.branches() == ["experiment", "main"]
        exp_head = prov.store.head(prov.thread("experiment"))
        run_git(path, "merge-base", "--is-ancestor", prov.store.resolve(head), exp_head)
        # the raw state reads back as CrewAI wrote it
        raw = json.loads(prov.from_checkpoint(f"{path}#{head}"))
        assert raw["branch"] == "main" and raw["parent_id"] == after[-2].checkpoint.id
        # prune keeps the newest of the branch and always its head; the fork stays readable
        newest = prov.store.commit_info(prov.store.head(prov.thread("main"))).checkpoint_id
        total = len(line(prov.store, prov.thread("main")))
        assert prov.prune(str(path), 2, branch="main") == total - 2
        kept = [t.checkpoint.id for t in prov.store.list(CheckpointConfig(prov.thread("main")))]
        assert kept[0] == newest and len(kept) == 2
        assert prov.prune(str(path), 0, branch="main") == 1
        assert [t.checkpoint.id for t in line(prov.store, prov.thread("main"))] == [newest]
        assert json.loads(prov.from_checkpoint(head))["branch"] == "main"  # the fork point reads from the fork
        assert json.loads(prov.from_checkpoint("experiment"))["branch"] == "experiment"
        with pytest.raises(InvalidInputError):
            prov.prune(str(path), -1)
        with pytest.raises(InvalidInputError):
            prov.checkpoint("{}", str(tmp_path / "elsewhere"))
        with pytest.raises(SerializationError):
            prov.checkpoint("not json", str(path))
        with pytest.raises(UnknownCheckpointError):
            prov.from_checkpoint("20990101T000000_deadbeef")
    fsck(path)




@again_on_crewai_races
def test_a_checkpointed_flow_resumes_from_qvc_alone_in_a_new_process(tmp_path):
    for attempt in range(3):  # CrewAI's own listener race (below) may kill this run too: a fresh repository then
        path = tmp_path / f"c{attempt}.qvc"
        try:
            with QvcCheckpointProvider(path) as prov:
                Steps(checkpoint=prov.config(on_events=["method_execution_finished"])).kickoff()
                first = line(prov.store, prov.thread("main"))[0].checkpoint.id
            break
        except BaseException as exc:  # pyo3's PanicException is no Exception
            if CREWAI_RACE not in str(exc) or attempt == 2:
                raise
    code = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from crewai_flows import Steps
from qvc.integrations.crewai import QvcCheckpointProvider
with QvcCheckpointProvider(sys.argv[1]) as prov:
    flow = prov.restore(Steps, sys.argv[2], on_events=["method_execution_finished"])
    flow.kickoff()
    print("STATE", flow.state["items"])
"""
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", code, str(path), first], env=child_env(), capture_output=True,
                             text=True, timeout=120, cwd=tmp_path)
        # CrewAI's checkpoint listener dumps the state on its own thread pool while the flow goes on
        # changing it, and now and then dies of that ("dictionary changed size during iteration", in
        # pydantic's serializer) whatever the provider: run the resume again, as a user would
        if out.returncode == 0 or CREWAI_RACE not in out.stderr:
            break
    assert out.returncode == 0, out.stderr[-3000:]
    # what `first` had saved, then the methods it had not completed (CrewAI serializes a state when
    # its checkpoint handler runs, on its own thread pool: a later method's item may be in it already)
    # (CrewAI records a method complete when its checkpoint handler runs, so a method whose item is
    # in `first`'s state may run again: ['a', 'b', 'b', 'c'])
    items = ast.literal_eval(out.stdout.split("STATE ", 1)[1].strip())
    assert items[0] == "a" and items[-1] == "c" and items.count("c") == 1 and "b" in items and len(items) <= 4
    with QvcCheckpointProvider(path) as prov:
        every = list(prov.store.list(CheckpointConfig(prov.thread("main")), superseded=True))
        # the resume's checkpoints continue from `first` where CrewAI names their parent (its listener,
        # on its own thread pool, now and then names none, and how many it writes varies from run to run)
        known = {t.checkpoint.id for t in every}
        parents = {t.metadata["parent_id"] for t in every} - {None}
        assert parents <= known and (first in parents or not parents)


def test_the_command_line_shows_flows_and_checkpoints(tmp_path):
    path = tmp_path / "r.qvc"
    with QvcFlowPersistence(path) as p:
        persisted(p)().kickoff(inputs={"id": "shown"})
    with QvcCheckpointProvider(path) as prov:
        Steps(checkpoint=prov.config(on_events=["method_execution_finished"])).kickoff()
    shown = qvc("--repo", str(path), "show", "crewai/flow/shown").stdout
    assert 'method: "third"' in shown and '"items": ["a", "b", "c"]' in shown
    shown = qvc("--repo", str(path), "show", "crewai/checkpoint/main").stdout
    assert "entities" in shown and "events:" in shown and "event_record" not in shown
    data = json.loads(qvc("--repo", str(path), "show", "--json", "crewai/checkpoint/main").stdout)
    assert "third" in json.dumps(data)
    log = qvc("--repo", str(path), "log", "-p", "crewai/flow/shown").stdout
    assert log.count("checkpoint ") >= 3 and '"b"' in log


# -- the adapter kit -------------------------------------------------------------------------------


class Handle:
    def __init__(self, path: Path) -> None:
        self.persistence = QvcFlowPersistence(path)
        self.provider = QvcCheckpointProvider(store=self.persistence.store)

    def close(self) -> None:
        self.provider.close()
        self.persistence.close()


def _flow(fid: str):
    def op(h: Handle) -> None:
        persisted(h.persistence)().kickoff(inputs={"id": fid})
    return op


def _checkpointed(h: Handle) -> None:
    Steps(checkpoint=h.provider.config(on_events=["method_execution_finished"])).kickoff()


def _fork(h: Handle) -> None:
    h.provider.restore(Steps, "main", branch="kit-fork", on_events=["method_execution_finished"]).kickoff()


class CrewAIDriver(AdapterDriver):
    name = "crewai"

    def open(self, path: Path) -> Handle:
        return Handle(path)

    def close(self, handle: Handle) -> None:
        handle.close()

    def script(self) -> List[Operation]:
        return [
            Operation("flow f1: three persisted steps", _flow("f1")),
            Operation("flow f2: three persisted steps", _flow("f2")),
            Operation("checkpointed run on main", _checkpointed),
            Operation("fork main -> kit-fork, run on it", _fork),
            Operation("flow f2: delete", lambda h: h.persistence.delete_flow("f2")),
            Operation("another run on main, then prune main to 2",
                      lambda h: (_checkpointed(h), h.provider.prune(h.provider.path, 2, branch="main"))),
            Operation("flow f1: resumed, three more steps", _flow("f1")),
        ]

    def lines(self, handle: Handle) -> Dict[str, List[str]]:
        s = handle.persistence.store
        return {t: [x.checkpoint.id for x in s.list(CheckpointConfig(t))] for t in s.threads()
                if flow_of(t) is not None or branch_of(t) is not None}

    def checkpoints(self, handle: Handle) -> Dict[str, set]:
        s = handle.persistence.store
        return {t: {x.checkpoint.id for x in s.list(CheckpointConfig(t), superseded=True)} for t in self.lines(handle)}

    def snapshot(self, handle: Handle) -> Any:
        s = handle.persistence.store
        out: Dict[str, Any] = {}
        for t in self.lines(handle):
            out[t] = [(x.checkpoint.id, x.metadata, x.checkpoint.state_data)
                      for x in s.list(CheckpointConfig(t), superseded=True)]
        out["flows"] = {f: handle.persistence.load_state(f) for f in handle.persistence.flows()}
        out["branches"] = {b: handle.provider.from_checkpoint(b) for b in handle.provider.branches()}
        return out

    def writer(self, path: Path) -> List[str]:
        return [sys.executable, "-c", WRITER, str(path)]

    def check_acknowledged(self, handle: Handle, tokens: List[str]) -> None:
        states = [x.checkpoint.state_data for x in handle.persistence.store.list(
            CheckpointConfig(flow_thread("killed")))]
        done = {s.get("token") for s in states}
        for token in tokens:
            assert token in done, f"acknowledged state {token} is not on the flow's thread"


# A child that saves a flow's states as @persist does, one per step; it prints an ack once saved.
WRITER = """
import sys, uuid
from qvc.integrations.crewai import QvcFlowPersistence
p = QvcFlowPersistence(sys.argv[1])
tag, i = uuid.uuid4().hex[:8], 0
while True:
    t = f"{tag}-{i}"
    p.save_state("killed", f"step_{i}", {"id": "killed", "token": t, "items": list(range(i % 50))})
    print(f"ack {t}")
    i += 1
"""


class TestCrewAIAdapter(AdapterKit):
    driver = CrewAIDriver()


# -- the sample ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_sample_runs(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "samples" / "crewai_flow.py"), "--repo", str(tmp_path / "s.qvc")],
                         env=child_env(), capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "resumed" in out.stdout
