"""A scripted checkpoint writer run under ``strace`` by tests/fault/test_powerloss.py.

Usage::

    python tests/fault/workers/powerloss_writer.py REPO MODE MARKERS [flush]

It opens ``GitCheckpointStore(REPO, durability=MODE, max_lag=MAX_LAG)`` and runs :data:`SCRIPT`:
puts on new and existing threads, pending writes, a fork, a time-travel reset, deletes. Around
each operation ``k`` it appends ``BEGIN k`` and ``ACK k`` to the file MARKERS with one
``write`` each, so the acknowledgements sit in the system-call trace in order with the
store's own file operations (the staging database's and git's). In EXIT mode it also calls
``flush()`` twice (``FLUSHED`` after each). After every acknowledgement it prints ``VIEW k
<json>`` (the repository as :func:`view` reads it) to stdout, and ``VIEW 0`` before the first
operation. It publishes what is staged last and ends with ``os._exit`` (in ASYNC mode after
waiting for the flusher): the store is never closed, so nothing is flushed at the end.

With ``flush``, in every mode, the first ``flush`` of the script calls ``flush()`` (the
database's log flushed, everything staged published to git's files and flushed), and the store
is closed at the end, both flushing each file the store wrote (never the whole file system);
``FLUSHED`` follows each (everything acknowledged is durable then).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time

MAX_LAG = 0.2

# (operation, arguments); checkpoint ids are explicit, except the fork's (a uuid).
SCRIPT = [
    ("put", "t0", "c01"),
    ("put", "t0", "c02"),
    ("put", "t1", "c03"),
    ("writes", "t0", "w04"),
    ("put", "t0", "c05"),
    ("fork", "t0", "f1"),
    ("put", "t1", "c06"),
    ("flush",),
    ("reset", "t0", "c02"),
    ("put", "t0", "c07"),
    ("writes", "t1", "w08"),
    ("delete", "t1"),
    ("put", "f1", "c09"),
    ("sleep",),
    ("put", "t2", "c10"),
    ("delete_thread", "t2"),
    ("put", "t1", "c11"),
    ("flush",),
    ("put", "t0", "c12"),
    ("put", "t1", "c13"),
]


def make_state(thread: str, cid: str, step: int) -> dict:
    h = hashlib.sha256(f"{thread}|{cid}|{step}".encode()).hexdigest()
    return {"thread": thread, "cid": cid, "messages": [{"i": i, "t": h[i % 64]} for i in range(step * 40)],
            "digest": h, "config": {"model": "m"}}


def make_writes(cid: str, task: str) -> list[tuple[str, object]]:
    return [(f"ch{j}", {"cid": cid, "task": task, "j": j}) for j in range(3)]


def view(store) -> dict:
    """Every thread's line as ``[id, step, state digest, writes]`` entries (fork ids as ``*``)."""
    from qvc import CheckpointConfig

    out = {}
    for thread in sorted(store.threads()):
        line = []
        for tup in store.list(CheckpointConfig(thread)):
            cp = tup.checkpoint
            digest = hashlib.sha256(json.dumps(cp.state_data, sort_keys=True).encode()).hexdigest()[:16]
            writes = sorted([w.task_id, w.channel, json.dumps(w.value, sort_keys=True)]
                            for w in tup.pending_writes or [])
            line.append([cp.id if cp.id.startswith("c") else "*", cp.step, digest, writes])
        if line:
            out[thread] = line
    return out


def main(argv: list[str]) -> int:
    path, mode, markers = argv[:3]
    flushing = argv[3:4] == ["flush"]
    if flushing:  # flush file by file however many there are: what the test checks
        from qvc.plumbing import durability

        durability.FLUSH_EACH = 1 << 30
    from qvc import Checkpoint, CheckpointConfig, DurabilityMode, GitCheckpointStore, fork_checkpoint

    store = GitCheckpointStore(path, durability=DurabilityMode(mode), max_lag=MAX_LAG)
    mark = os.open(markers, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    print("VIEW 0", json.dumps(view(store)), flush=True)
    k = 0
    flushed = False
    for op, *args in SCRIPT:
        if op == "flush" and flushing and not flushed:
            store.flush()
            os.write(mark, b"FLUSHED\n")
            flushed = True
            continue
        if op == "flush":
            if mode == "exit":
                store.flush()
                os.write(mark, b"FLUSHED\n")
            continue
        if op == "sleep":  # let ASYNC's flusher catch up, so crash points see it both ways
            time.sleep(MAX_LAG * 2)
            continue
        k += 1
        os.write(mark, f"BEGIN {k}\n".encode())
        if op == "put":
            thread, cid = args
            head = store.get_tuple(CheckpointConfig(thread))
            step = 0 if head is None else head.checkpoint.step + 1
            store.put(CheckpointConfig(thread), Checkpoint(id=cid, thread_id=thread, step=step,
                                                           state_data=make_state(thread, cid, step)), {"k": k})
        elif op == "writes":
            thread, task = args
            cid = store.get_tuple(CheckpointConfig(thread)).checkpoint.id
            store.put_writes(CheckpointConfig(thread, cid), make_writes(cid, task), task)
        elif op == "fork":
            src, new = args
            fork_checkpoint(store, CheckpointConfig(src), new)
        elif op == "reset":
            store.reset(*args)
        elif op == "delete":
            store.delete(CheckpointConfig(args[0]))
        elif op == "delete_thread":
            store.delete_thread(args[0])
        os.write(mark, f"ACK {k}\n".encode())
        print(f"VIEW {k}", json.dumps(view(store)), flush=True)
    if mode == "async":  # the flusher covers the last acknowledgements too (the window test reads it)
        time.sleep(MAX_LAG * 3)
    if flushing:
        store.close()
        os.write(mark, b"FLUSHED\n")
    else:
        store.repository.publish()  # the publisher's last batch ends inside the trace, not cut by _exit
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
