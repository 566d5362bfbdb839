"""Process crashes beyond the store's own writer: the command line and agent runs.

- ``qvc commit DIR`` and ``qvc reset`` subprocesses are SIGKILLed at random instants (before,
  during or after their write). After each kill: ``git fsck --strict`` passes, the store opens,
  the thread's head is where the command left it or where it was (nothing in between), and
  every checkpoint an earlier, finished command created still reads back.
- A process recording an agent run (``RunRecorder``, one checkpoint per tool batch) is
  SIGKILLed after a random number of acknowledged checkpoints: the run, read back by another
  process, holds every message of every acknowledged checkpoint.

``QVC_CLI_KILLS`` scales the slow variant (``-m slow``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import child_env, fsck
from test_crash import slow_enabled

from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
from qvc.runs import Runs

pytestmark = pytest.mark.heavy  # a kill, power-loss or fleet loop: left out of the quick tier


def qvc_cmd(repo: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "qvc", "--repo", str(repo), *args]


def kill_cli_loop(tmp_path: Path, kills: int, seed: int) -> dict:
    rng = random.Random(seed)
    repo = tmp_path / "r.qvc"
    with GitCheckpointStore(repo) as store:
        for i in range(3):
            head = store.get_tuple(CheckpointConfig("t"))
            store.put(CheckpointConfig("t"), Checkpoint(id=f"seed-{i}", thread_id="t", step=i,
                                                        state_data={"n": i, "messages": ["m"] * i}),
                      {"source": "input"})
            assert head is None or head.checkpoint.id == f"seed-{i - 1}"
    t0 = time.monotonic()
    subprocess.run(qvc_cmd(repo, "checkout", "t"), check=True, env=child_env(), capture_output=True)
    span = 1.5 * (time.monotonic() - t0)  # kills land before, during and after the command's write
    acked = {"seed-0", "seed-1", "seed-2"}
    stats = {"kills": 0, "finished": 0, "killed_mid": 0, "killed_after_moving": 0, "commits": 0, "resets": 0}
    for k in range(kills):
        with GitCheckpointStore(repo) as store:
            before = store.head("t")
            parent = store.commit_info(before).parent
        if rng.random() < 0.6 or parent is None:
            work = tmp_path / f"w{k}"
            subprocess.run(qvc_cmd(repo, "checkout", "t", "--to", str(work)), check=True, env=child_env(),
                           capture_output=True)
            (work / f"f{k}.json").write_text(json.dumps({"k": k}))
            args, kind = ("commit", str(work), "-m", f"edit {k}"), "commit"
        else:
            args, kind = ("reset", "t~1"), "reset"
        stats[kind + "s"] += 1
        proc = subprocess.Popen(qvc_cmd(repo, *args), env=child_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        time.sleep(rng.uniform(0.3 * span, span))
        proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
        finished = proc.returncode == 0
        assert finished or proc.returncode == -signal.SIGKILL, f"{args}: exit {proc.returncode}: {err}"
        stats["kills"] += 1
        stats["finished" if finished else "killed_mid"] += 1
        span *= 0.85 if finished else 1.2  # keep the kills around the moment the command writes
        fsck(repo)
        where = f"[kill {k}: {kind}, {'finished' if finished else 'killed'}]"
        with GitCheckpointStore(repo) as store:
            head = store.head("t")
            moved = head != before
            stats["killed_after_moving"] += moved and not finished
            if kind == "reset":
                assert head in ({parent} if finished else {before, parent}), f"{where} head {head}"
            else:
                if moved or finished:
                    info = store.commit_info(head)
                    assert info.parent == before, f"{where} new head's parent is not the old head"
                    tup = store.read(head)
                    assert tup.checkpoint.state_data.get(f"f{k}") == {"k": k}, f"{where} edit missing"
                    acked.add(tup.checkpoint.id)
            for cid in acked:
                assert store.get_tuple(CheckpointConfig("t", cid)) is not None, f"{where} {cid} is gone"
    return stats


def test_kill_cli_commit_and_reset(tmp_path):
    stats = kill_cli_loop(tmp_path, 12, seed=3)
    print(f"\nCLI kills: {stats}")
    assert stats["killed_mid"] >= 1


@pytest.mark.slow
def test_kill_cli_commit_and_reset_many(tmp_path, request):
    if not slow_enabled(request.config):
        pytest.skip("long variant: run with -m slow (or QVC_SLOW=1)")
    stats = kill_cli_loop(tmp_path, int(os.environ.get("QVC_CLI_KILLS", "100")), seed=random.randrange(2**31))
    print(f"\nCLI kills (long): {stats}")


RECORDER = r"""
import sys
from qvc.runs import Message, Runs, ToolCall

repo, run_id = sys.argv[1], sys.argv[2]
runs = Runs(repo)
rec = runs.start("question", system="sys", run_id=run_id, session_id="s", cadence="tool-batch")
i = 0
while True:
    rec.add_message(Message("assistant", tool_calls=[ToolCall(f"c{i}", "tool", {"i": i})]))
    rec.tool_result(f"c{i}", f"result {i}")
    rec.after_tool_batch()
    print(f"ACK {i}", flush=True)
    i += 1
"""


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kill_run_recorder(tmp_path, seed):
    rng = random.Random(seed)
    repo = tmp_path / "r.qvc"
    GitCheckpointStore(repo).close()
    for round_ in range(3):
        run_id = f"run-{round_}"
        proc = subprocess.Popen([sys.executable, "-c", RECORDER, str(repo), run_id], env=child_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        want, acked = rng.randint(0, 12), -1
        while acked < want:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            acked = int(line.split()[1])
        time.sleep(rng.uniform(0, 0.01))
        proc.kill()
        rest = proc.communicate(timeout=60)[0]
        acked = max([acked] + [int(ln.split()[1]) for ln in rest.splitlines() if ln.startswith("ACK")])
        fsck(repo)
        with GitCheckpointStore(repo) as store:
            run = Runs(store).get(run_id)
            results = [m.content for m in run.messages if m.role == "tool"]
            for i in range(acked + 1):
                assert f"result {i}" in results, f"{run_id}: acknowledged tool result {i} is gone ({results})"
