"""A writer whose Python threads put at once on one shared store, until it is killed.

Usage: ``threads_writer.py <repo> <mode> <threads>``. Thread ``i`` puts checkpoints on qvc
thread ``w<i>``, each with state ``{"n": k, "who": i}``; after a put returns it prints
``ACK <i> <k> <checkpoint id>`` (one write, so a kill never leaves half a line). ``READY`` is
printed once the threads run. A put that raises prints ``ERR <i> <message>`` and stops that thread.
"""

from __future__ import annotations

import sys
import threading
import uuid

from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore


def main() -> None:
    path, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = GitCheckpointStore(path, durability=mode)
    out = threading.Lock()

    def work(i: int) -> None:
        name = f"w{i}"
        config = CheckpointConfig(name)
        latest = store.get_tuple(config)
        k = 0 if latest is None else latest.checkpoint.state_data["n"] + 1
        while True:
            cid = uuid.uuid4().hex
            try:
                config = store.put(config, Checkpoint(id=cid, thread_id=name, step=k, state_data={"n": k, "who": i}),
                                   {"source": "loop", "step": k})
            except Exception as exc:  # reported: the test fails on it
                with out:
                    sys.stdout.write(f"ERR {i} {type(exc).__name__}: {exc}\n")
                return
            with out:
                sys.stdout.write(f"ACK {i} {k} {cid}\n")
            k += 1

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    sys.stdout.write("READY\n")
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
