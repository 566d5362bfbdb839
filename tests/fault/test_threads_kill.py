"""Eight Python threads of one process put on one shared store; the process is SIGKILLed.

What the threads share is what this checks: one staging database whose commits the threads
take turns on (a SYNC commit's WAL flush shared by the commits waiting with it), and the
publisher that writes their objects and refs to git's files without holding up the puts. After
each kill: ``git fsck --strict`` passes, the store opens (and publishes what the killed process
left staged), and every put any thread saw return (``ACK``) is there, in every durability
mode (a kill loses no returned write), each thread's head at its last acknowledged
checkpoint or the one put in flight. The next writer then goes on on the same repository.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.heavy  # a kill loop: left out of the quick tier

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from helpers import child_env, fsck  # noqa: E402

from qvc import CheckpointConfig, GitCheckpointStore  # noqa: E402

WRITER = HERE / "workers" / "threads_writer.py"
THREADS = 8
KILLS = 3


def _run_and_kill(repo: Path, mode: str, rng: random.Random) -> dict[int, list[tuple[int, str]]]:
    """Start the writer, kill it after a random number of acknowledgements; return them by thread."""
    proc = subprocess.Popen([sys.executable, str(WRITER), str(repo), mode, str(THREADS)], env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    acked: dict[int, list[tuple[int, str]]] = {i: [] for i in range(THREADS)}
    want = rng.randint(20, 120)
    seen = 0
    deadline = time.monotonic() + 60
    try:
        assert proc.stdout is not None and proc.stderr is not None
        while seen < want and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            words = line.split()
            if words[0] == "ERR":
                pytest.fail(f"a put raised: {line.strip()}")
            if words[0] == "ACK":
                acked[int(words[1])].append((int(words[2]), words[3]))
                seen += 1
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        # the rest through the same buffered reader (communicate() would skip what it holds)
        out, err = proc.stdout.read(), proc.stderr.read()
    for line in out.splitlines():  # acknowledged before the kill, read after it
        words = line.split()
        if words and words[0] == "ACK" and len(words) == 4:
            acked[int(words[1])].append((int(words[2]), words[3]))
        elif words and words[0] == "ERR":
            pytest.fail(f"a put raised: {line.strip()}")
    assert seen >= want, f"the writer acknowledged {seen} puts in 60 s: {err[-2000:]}"
    return acked


@pytest.mark.parametrize("mode", ["sync", "async", "exit"])
def test_kill_eight_threads_loses_no_acknowledged_put(tmp_path, mode):
    repo = tmp_path / "r.qvc"
    GitCheckpointStore(repo).close()
    rng = random.Random(f"threads-{mode}")
    everything: dict[int, list[tuple[int, str]]] = {i: [] for i in range(THREADS)}
    landed = {i: -1 for i in range(THREADS)}  # each head's n at the last check (a put in flight may have landed)
    for _ in range(KILLS):
        acked = _run_and_kill(repo, mode, rng)
        fsck(repo)
        with GitCheckpointStore(repo) as store:
            for i in range(THREADS):
                everything[i] += acked[i]
                if not everything[i]:
                    continue
                listed = {t.checkpoint.id: t.checkpoint.state_data for t in store.list(CheckpointConfig(f"w{i}"))}
                for k, cid in everything[i]:
                    assert listed.get(cid) == {"n": k, "who": i}, f"{mode}: thread w{i} lost acknowledged put {k}"
                head = store.get_tuple(CheckpointConfig(f"w{i}"))
                # at the last acknowledged put, or the one in flight when the kill came (a round in
                # which this thread had no put acknowledged starts from where the last one landed)
                last = max(everything[i][-1][0], landed[i])
                assert head is not None and head.checkpoint.state_data["n"] in (last, last + 1), (mode, i, last)
                landed[i] = head.checkpoint.state_data["n"]
        fsck(repo)
    assert all(everything[i] for i in range(THREADS)), "some thread never got a put through"
