"""Writers SIGKILLed at random while the real ``qvc gc`` runs back to back.

Three writer processes (``tests/fault/workers/kill_gc_writer.py``): A (SYNC) and B (ASYNC) share
the thread ``shared``, where every put names the head it read (``expected_head``) and some
travel back in time (``parent_id`` naming an older checkpoint), retrying a conflict with the
same id and content; each also puts plainly on a thread of its own, as C (SYNC) does on its
own. Every 0.2-1.2 s one writer, picked at random, is SIGKILLed and started again (its open
publishes what is staged). Meanwhile ``qvc gc`` runs in a loop (``--prune`` every third run), one run in
eight SIGKILLed too.

At the end every writer is killed, the repository is opened (it publishes what is staged), and: every
acknowledged put reads back by id with its state; a plain put is on its own thread's
first-parent line, in the order acknowledged; a put on ``shared`` has the parent it was
acknowledged on and is on the line or on a superseded line (time travel by either writer
supersedes); a put whose every attempt was refused is not stored; ``git fsck --strict`` and
``qvc fsck`` pass; few loose objects are left (a dead writer's staged objects are published as a pack).

The default run lasts ``QVC_KILL_GC_CI_SECONDS`` (6); the long one (``-m slow``)
``QVC_KILL_GC_SECONDS`` (300). ``QVC_KILL_GC_SEED`` fixes the kill schedule's seed.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE / "workers") not in sys.path:
    sys.path.insert(0, str(HERE / "workers"))

import model_worker as mw  # noqa: E402
from helpers import child_env, fsck  # noqa: E402
from test_crash import slow_enabled  # noqa: E402
from test_model import loose_objects, qvc_fsck, wait_for_git  # noqa: E402

from qvc import CheckpointConfig, GitCheckpointStore  # noqa: E402

pytestmark = pytest.mark.heavy  # a kill, power-loss or fleet loop: left out of the quick tier

WRITER = HERE / "workers" / "kill_gc_writer.py"
WRITERS = {"A": ("sync", True), "B": ("async", True), "C": ("sync", False)}  # name: (mode, on shared)
LOOSE_LIMIT = 50


class Writer:
    """One kill_gc_writer.py process; its complete lines are collected by a thread."""

    def __init__(self, path: Path, name: str, run: str, seed: int, logdir: Path):
        mode, shared = WRITERS[name]
        self.name, self.run = name, run
        self.err = open(logdir / f"{run}.err", "wb")
        args = [sys.executable, str(WRITER), os.fspath(path), mode, name, run, str(seed)] + (
            ["--shared"] if shared else [])
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.err, stdin=subprocess.DEVNULL,
                                     env=child_env())
        self.lines: list[str] = []
        self.ready = threading.Event()
        self.pump = threading.Thread(target=self._read, daemon=True)
        self.pump.start()

    def _read(self) -> None:
        for raw in self.proc.stdout:
            if raw.endswith(b"\n"):  # a line cut by the kill acknowledges nothing
                line = raw.decode().rstrip("\n")
                if line == "READY":
                    self.ready.set()
                self.lines.append(line)

    def kill(self) -> list[str]:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.pump.join(30)
        self.err.close()
        return self.lines


def gc_loop(path: Path, stop: threading.Event, rng: random.Random, out: dict) -> None:
    """``qvc gc`` back to back (``--prune`` every third run), one run in eight SIGKILLed."""
    n = 0
    while not stop.is_set():
        args = [sys.executable, "-m", "qvc", "--repo", os.fspath(path), "gc"] + (["--prune"] if n % 3 == 2 else [])
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                env=child_env(), text=True)
        killed = False
        if rng.random() < 1 / 8:
            try:
                proc.wait(rng.uniform(0.05, 1.0))
            except subprocess.TimeoutExpired:
                proc.kill()
                killed = True
        _, err = proc.communicate(timeout=300)
        n += 1
        if killed:
            out["killed"] += 1
            wait_for_git(path)  # a killed gc's git goes on: let it finish
        elif proc.returncode != 0:
            out["errors"].append(f"qvc {' '.join(args[5:])} exited {proc.returncode}: {err[-800:]}")
        else:
            out["runs"] += 1


def kill_loop(tmp_path: Path, seconds: float, seed: int) -> dict:
    rng = random.Random(seed)
    path = tmp_path / "repo.qvc"
    logdir = tmp_path / "logs"
    logdir.mkdir()
    GitCheckpointStore(path).close()
    lines: dict[str, list[str]] = {name: [] for name in WRITERS}
    runs = {name: 0 for name in WRITERS}

    def start(name: str) -> Writer:
        runs[name] += 1
        w = Writer(path, name, f"{name}{runs[name]:04d}", rng.randrange(2**31), logdir)
        return w

    writers = {name: start(name) for name in WRITERS}
    stop = threading.Event()
    gc_out = {"runs": 0, "killed": 0, "errors": []}
    gc_thread = threading.Thread(target=gc_loop, args=(path, stop, random.Random(seed + 1), gc_out), daemon=True)
    gc_thread.start()
    kills = 0
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < seconds:
            time.sleep(rng.uniform(0.2, 1.2))
            name = rng.choice(sorted(WRITERS))
            w = writers[name]
            if w.proc.poll() is not None:
                w.kill()
                raise AssertionError(f"writer {w.run} exited on its own ({w.proc.returncode}):\n"
                                     f"{(logdir / (w.run + '.err')).read_text()[-3000:]}")
            lines[name] += w.kill()
            kills += 1
            writers[name] = start(name)
    finally:
        stop.set()
        gc_thread.join(600)
        for name, w in writers.items():
            lines[name] += w.kill()
        wait_for_git(path)
    took = time.monotonic() - t0
    assert not gc_out["errors"], f"qvc gc failed {len(gc_out['errors'])} time(s); first: {gc_out['errors'][0]}"
    for name in WRITERS:
        bad = [ln for ln in lines[name] if ln.startswith("Traceback") or ln.startswith("ERROR")]
        assert not bad, f"writer {name}: {bad[:3]}"

    for name, out in lines.items():  # for post-mortems
        (logdir / f"{name}.out").write_text("\n".join(out) + "\n")
    loose_before = loose_objects(path)
    print(f"\nkill during gc (seed {seed}): {kills} kills, {gc_out['runs']} gc runs ({gc_out['killed']} killed) in "
          f"{took:.1f} s; {loose_before} loose objects before the final open")
    with GitCheckpointStore(path) as store:
        recovery = store.recovery.summary()
        stats = verify(store, lines, f"final recovery: {recovery}; writers' output in {logdir}/<writer>.out")
    loose = loose_objects(path)
    fsck(path)
    qvc_fsck(path)
    stats.update(kills=kills, gc_runs=gc_out["runs"], gc_killed=gc_out["killed"], seconds=round(took, 1),
                 loose_objects_before_open=loose_before, loose_objects=loose, final_recovery=recovery)
    print(f"\nkill during gc (seed {seed}): {stats}")
    assert loose <= LOOSE_LIMIT, (
        f"{loose} loose objects under objects/??/ after {kills} kills (limit {LOOSE_LIMIT}): a dead writer's "
        f"staged objects were published loose instead of into one pack ({loose_before} before the final open)")
    return stats


def verify(store: GitCheckpointStore, lines: dict[str, list[str]], context: str) -> dict:
    """Check every acknowledged put against the repository; return counts."""
    acked = {"plain": 0, "cas": 0, "travel": 0}
    conflicts = gaveup = 0
    problems: list[str] = []
    shared_ids = {t.checkpoint.id for t in store.list(CheckpointConfig("shared"), superseded=True)}
    shared_line = [t.checkpoint.id for t in store.list(CheckpointConfig("shared"))]
    own_lines = {f"own-{name}": [t.checkpoint.id for t in store.list(CheckpointConfig(f"own-{name}"))][::-1]
                 for name in WRITERS}
    for name, out in lines.items():
        own = f"own-{name}"
        position = -1
        for ln in out:
            parts = ln.split()
            if parts[0] == "CONFLICT":
                conflicts += 1
                continue
            if parts[0] == "GAVEUP":
                gaveup += 1
                if store.get_tuple(CheckpointConfig("shared", parts[2])) is not None:
                    problems.append(f"{parts[2]}: every attempt was refused (CheckpointConflictError, nothing stored), "
                                    f"yet it is stored")
                continue
            if parts[0] != "ACK":
                continue
            thread, cid, kind = parts[1], parts[2], parts[3]
            acked[kind] += 1
            n = int(cid.rsplit("-", 1)[1])
            tup = store.get_tuple(CheckpointConfig(thread, cid))
            if tup is None:
                problems.append(f"acknowledged {kind} put {cid} (writer {name}, thread {thread!r}) is gone: "
                                f"get_tuple by id finds nothing")
                continue
            if tup.checkpoint.state_data != mw.make_state(thread, cid, n) or tup.checkpoint.thread_id != thread:
                problems.append(f"acknowledged put {cid} reads back wrong: thread {tup.checkpoint.thread_id!r}, "
                                f"state {tup.checkpoint.state_data}")
            if kind == "plain":
                line = own_lines[own]
                if cid not in line:
                    problems.append(f"acknowledged plain put {cid} (writer {name}) is not on the line of {own!r} "
                                    f"(it reads by id, off the line: {tup.parent_config})")
                elif line.index(cid) < position:
                    problems.append(f"acknowledged plain put {cid} (writer {name}) is on {own!r} before one "
                                    f"acknowledged earlier")
                else:
                    position = line.index(cid)
                continue
            parent = parts[4]
            got = tup.parent_config.checkpoint_id if tup.parent_config else "-"
            if got != parent:
                problems.append(f"acknowledged {kind} put {cid} (writer {name}, expected_head given) has parent "
                                f"{got}, not {parent} it was acknowledged on")
            if cid not in shared_ids:
                after = out[out.index(ln) + 1: out.index(ln) + 4]
                problems.append(f"acknowledged {kind} put {cid} (writer {name}) is on neither the line of 'shared' "
                                f"nor a superseded line (readable by id; the writer's next lines: {after}; "
                                f"children on the line: {children(store, cid)})")
    assert not problems, f"{len(problems)} problem(s) ({context}):\n  " + "\n  ".join(problems[:40])
    return {"acked": acked, "conflicts": conflicts, "gave_up": gaveup, "shared_line": len(shared_line),
            "shared_with_superseded": len(shared_ids)}


def children(store: GitCheckpointStore, cid: str) -> list[str]:
    """Checkpoints of 'shared' (line and superseded lines) whose parent is ``cid``."""
    return [t.checkpoint.id for t in store.list(CheckpointConfig("shared"), superseded=True)
            if t.parent_config is not None and t.parent_config.checkpoint_id == cid]


def test_kill_writers_during_gc(tmp_path):
    """~6 s of random writer kills under a gc loop: no acknowledged put is lost or moved off its line."""
    seed = int(os.environ.get("QVC_KILL_GC_SEED") or random.randrange(2**31))
    print(f"seed {seed}")
    stats = kill_loop(tmp_path, float(os.environ.get("QVC_KILL_GC_CI_SECONDS", "6")), seed)
    assert stats["kills"] >= 5 and stats["gc_runs"] >= 2, stats  # the kills and gc runs did happen


@pytest.mark.slow
def test_kill_writers_during_gc_long(tmp_path, request):
    """The long loop (``-m slow``): ``QVC_KILL_GC_SECONDS`` (300) of kills under gc."""
    if not (slow_enabled(request.config) or os.environ.get("QVC_KILL_GC_SECONDS")):
        pytest.skip("long variant: run with -m slow (or QVC_SLOW=1, or QVC_KILL_GC_SECONDS=N)")
    seed = int(os.environ.get("QVC_KILL_GC_SEED") or random.randrange(2**31))
    print(f"seed {seed}")
    kill_loop(tmp_path, float(os.environ.get("QVC_KILL_GC_SECONDS", "300")), seed)
