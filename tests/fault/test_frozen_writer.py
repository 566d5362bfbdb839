"""A writer frozen right after an acknowledged put (SIGSTOP: a debugger, a paused container, a
swapped laptop) must hide nothing and block no one (issue 31): a read of that thread in another
process returns the acknowledged checkpoint, and a put on that thread there extends it, while the
writer stays stopped. A SQLite reader sees every committed transaction whatever its writer does
next; qvc promises the same (README, docs/durability.md).

The writer is frozen at two points: right after the put returned (its write committed to the
staging database, not yet in git's files), and in the middle of publishing it (holding the
publisher's turn and its own lock on the thread's ref, just before the rename). The journal-and-
leases engine failed both (the read returned the older head after waiting for the frozen
writer's lease, the put waited 10 s and conflicted)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from helpers import child_env, fsck, run_git

from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore

WRITER = """
import os, signal, sys
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
if sys.argv[2] == "publishing":  # frozen holding the turn and refs/heads/t.lock, before the rename
    real = os.rename
    def rename(src, dst, *a, **k):
        if str(dst).endswith("refs/heads/t") and str(src).endswith(".lock") and os.rename is rename:
            os.rename = real  # once
            os.kill(os.getpid(), signal.SIGSTOP)
        return real(src, dst, *a, **k)
    os.rename = rename
store = GitCheckpointStore(sys.argv[1])
head = store.get_tuple(CheckpointConfig("t")).checkpoint.id
store.put(CheckpointConfig("t"), Checkpoint(id="acked", thread_id="t", step=1, parent_id=head,
          state_data={"m": "acked"}), {"source": "loop"})
print("ACK", flush=True)
if sys.argv[2] == "acknowledged":
    os.kill(os.getpid(), signal.SIGSTOP)
else:
    store.flush()  # publishes now (the background publisher might too): stops inside
store.close()
"""


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


@pytest.mark.parametrize("frozen", ["acknowledged", "publishing"])
def test_a_frozen_writer_hides_nothing_and_blocks_no_one(tmp_path, frozen):
    repo = tmp_path / "r.qvc"
    with GitCheckpointStore(repo) as store:
        store.put(CheckpointConfig("t"), Checkpoint(id="base", thread_id="t", step=0, state_data={"m": "base"}),
                  {"source": "loop"})
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(repo), frozen], stdout=subprocess.PIPE,
                              text=True, env=child_env())
    try:
        assert writer.stdout.readline().strip() == "ACK"
        deadline = time.monotonic() + 30
        while not _stopped(writer.pid):
            assert time.monotonic() < deadline, "the writer did not stop"
            time.sleep(0.01)
        reader = subprocess.run([sys.executable, "-c",
                                 "import sys\nfrom qvc import CheckpointConfig, GitCheckpointStore\n"
                                 "with GitCheckpointStore(sys.argv[1], readonly=True) as s:\n"
                                 "    print(s.get_tuple(CheckpointConfig('t')).checkpoint.id)\n", str(repo)],
                                capture_output=True, text=True, env=child_env(), timeout=60)
        assert reader.stdout.strip() == "acked", reader.stderr
        with GitCheckpointStore(repo) as store:
            store.put(CheckpointConfig("t"), Checkpoint(id="after", thread_id="t", step=2, parent_id="acked",
                                                        state_data={"m": "after"}), {"source": "loop"},
                      expected_head=store.resolve("acked"))
            assert [t.checkpoint.id for t in store.list(CheckpointConfig("t"))] == ["after", "acked", "base"]
        if frozen == "publishing":
            assert (repo / "refs" / "heads" / "t.lock").exists()  # the frozen publisher's, left as it is
    finally:
        writer.send_signal(signal.SIGCONT)
        writer.wait(60)
    assert writer.returncode == 0
    with GitCheckpointStore(repo) as store:  # the thawed writer finished its publication; git agrees
        assert [t.checkpoint.id for t in store.list(CheckpointConfig("t"))] == ["after", "acked", "base"]
    fsck(repo)
    assert run_git(repo, "rev-parse", "refs/heads/t").stdout.strip() == run_git(repo, "rev-parse", "t").stdout.strip()
