"""Worker processes for tests/test_concurrency.py.

Usage::

    python tests/fault/workers/concurrency_worker.py writer PATH MODE THREAD N TAG [--hold]
    python tests/fault/workers/concurrency_worker.py reader PATH THREAD STOPFILE
    python tests/fault/workers/concurrency_worker.py writes PATH THREAD CID N TAG
    python tests/fault/workers/concurrency_worker.py deleter PATH THREAD N
    python tests/fault/workers/concurrency_worker.py slowput PATH THREAD CID   (see :func:`slowput`)

Both open the store, print ``READY`` and wait for a line on stdin (so that several workers
start at the same moment). A writer then does N puts on THREAD without ``parent_id`` (each
takes the thread's head as parent) and prints, per put, ``OK <cid>`` or ``CONFLICT <cid>``,
then ``DONE <seconds>`` (with ``--hold`` it then waits for one more stdin line before
closing). A reader loops over ``get_tuple`` and ``list`` of THREAD until
STOPFILE exists, checking every checkpoint it sees with :func:`check`, then prints one JSON
line ``{"reads": ..., "steps": [...], "errors": [...]}``. ``writes`` does N ``put_writes`` on
one checkpoint (see :func:`writes`); ``deleter`` deletes the thread's head N times (see
:func:`deleter`). Anything unexpected is printed as
``ERROR <message>`` (exit status 1).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback


def make_state(tag: str, cid: str, step: int) -> dict:
    """A state whose fields repeat each other, so a torn read is detectable."""
    return {
        "step_copy": step,
        "cid_copy": cid,
        "tag": tag,
        "messages": [f"{tag}:{j}" for j in range(step % 140)],  # crosses the 64-item chunking
        "square": step * step,
        "blob": bytes([step % 256]) * (step % 50),
    }


def check(tup) -> str | None:
    """Why a read checkpoint tuple is not internally consistent (``None`` if it is)."""
    cp = tup.checkpoint
    st = cp.state_data
    try:
        tag = st["tag"]
        if st != make_state(tag, cp.id, cp.step):
            return f"{cp.id}: state does not match step {cp.step}: {sorted(st)}"
        if tup.metadata.get("step") != cp.step or tup.metadata.get("tag") != tag:
            return f"{cp.id}: metadata {tup.metadata} does not match step {cp.step}"
        if tup.config.checkpoint_id != cp.id:
            return f"{cp.id}: config {tup.config} does not match"
    except (KeyError, TypeError) as exc:
        return f"{cp.id}: malformed state ({exc!r}): {st!r}"[:500]
    return None


def writer(path: str, mode: str, thread: str, n: int, tag: str, hold: bool = False) -> int:
    from qvc import Checkpoint, CheckpointConfig, CheckpointConflictError, DurabilityMode, GitCheckpointStore

    if "--small-merges" in sys.argv:  # merge (and delete) small packs every other put
        import qvc.plumbing.packset

        qvc.plumbing.packset.CONSOLIDATE_AT = 2
    store = GitCheckpointStore(path, durability=DurabilityMode(mode))
    print("READY", flush=True)
    sys.stdin.readline()
    t0 = time.monotonic()
    for i in range(n):
        cid = f"{tag}-{i:05d}"
        state = make_state(tag, cid, i)
        try:
            store.put(CheckpointConfig(thread), Checkpoint(id=cid, thread_id=thread, step=i, state_data=state),
                      {"source": "loop", "step": i, "tag": tag})
        except CheckpointConflictError:
            print(f"CONFLICT {cid}", flush=True)
        else:
            print(f"OK {cid}", flush=True)
    print(f"DONE {time.monotonic() - t0:.3f}", flush=True)
    if hold:  # stay open (to be killed) until told to finish
        sys.stdin.readline()
    store.close()
    return 0


def writes(path: str, thread: str, cid: str, n: int, tag: str) -> int:
    """N put_writes calls on one checkpoint, task ``<tag>-<i>``, one (channel, value) each."""
    from qvc import CheckpointConfig, GitCheckpointStore

    store = GitCheckpointStore(path)
    print("READY", flush=True)
    sys.stdin.readline()
    for i in range(n):
        store.put_writes(CheckpointConfig(thread, cid), [("chan", {"tag": tag, "i": i})], f"{tag}-{i:04d}")
        print(f"OK {tag}-{i:04d}", flush=True)
    print("DONE", flush=True)
    store.close()
    return 0


def deleter(path: str, thread: str, n: int) -> int:
    """N times: read THREAD's head and delete that checkpoint by id; print ``DEL`` or ``DELCONFLICT``."""
    from qvc import CheckpointConfig, CheckpointConflictError, GitCheckpointStore

    store = GitCheckpointStore(path)
    print("READY", flush=True)
    sys.stdin.readline()
    done = 0
    while done < n:
        tup = store.get_tuple(CheckpointConfig(thread))
        if tup is None or tup.parent_config is None:  # keep the thread's first checkpoint
            time.sleep(0.002)
            continue
        cid = tup.checkpoint.id
        try:
            store.delete(CheckpointConfig(thread, cid))
        except CheckpointConflictError:
            print(f"DELCONFLICT {cid}", flush=True)
        else:
            print(f"DEL {cid}", flush=True)
        done += 1
        time.sleep(0.003)
    print("DONE", flush=True)
    store.close()
    return 0


def slowput(path: str, thread: str, cid: str) -> int:
    """One put whose publication to git's files is descheduled midway, then held open.

    The put is acknowledged (its staging transaction committed: ``ACK``); this store's own
    publication then stops after it read what is staged and before it writes git's files (the
    scheduler pausing the process there): prints ``MOVED`` and waits for a stdin line, then
    finishes the publication, prints ``PUBLISHED`` and waits for another line (the test
    SIGKILLs it meanwhile). No background publisher runs: it publishes only at ``flush``.
    """
    import qvc.plumbing.pack as pack
    import qvc.plumbing.repository as repository

    repository.PUBLISH_LAG = 3600.0  # this store publishes at its flush only (fault injection on purpose)
    from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore

    store = GitCheckpointStore(path)
    real_write = pack.write

    def paused_write(*args, **kwargs):
        print("MOVED", flush=True)
        sys.stdin.readline()
        return real_write(*args, **kwargs)

    print("READY", flush=True)
    sys.stdin.readline()
    state = make_state("S", cid, 1)
    store.put(CheckpointConfig(thread), Checkpoint(id=cid, thread_id=thread, step=1, state_data=state),
              {"source": "loop", "step": 1, "tag": "S"})
    print(f"ACK {cid}", flush=True)
    pack.write = paused_write
    store.flush()
    print("PUBLISHED", flush=True)
    sys.stdin.readline()
    store.close()
    return 0


def reader(path: str, thread: str, stopfile: str) -> int:
    from qvc import CheckpointConfig, GitCheckpointStore

    store = GitCheckpointStore(path)
    print("READY", flush=True)
    sys.stdin.readline()
    reads, steps, errors = 0, set(), []
    while not os.path.exists(stopfile) and len(errors) < 20:
        try:
            tup = store.get_tuple(CheckpointConfig(thread))
            if tup is not None:
                reads += 1
                steps.add(tup.checkpoint.step)
                if (why := check(tup)) is not None:
                    errors.append("get_tuple: " + why)
            for tup in store.list(CheckpointConfig(thread), limit=3):
                reads += 1
                if (why := check(tup)) is not None:
                    errors.append("list: " + why)
        except Exception as exc:  # noqa: BLE001 - any error is what the test looks for
            errors.append(f"{type(exc).__name__}: {exc}")
    store.close()
    print(json.dumps({"reads": reads, "steps": sorted(steps), "errors": errors}), flush=True)
    return 0


if __name__ == "__main__":
    try:
        cmd, args = sys.argv[1], sys.argv[2:]
        if cmd == "writer":
            sys.exit(writer(args[0], args[1], args[2], int(args[3]), args[4], "--hold" in args))
        if cmd == "deleter":
            sys.exit(deleter(args[0], args[1], int(args[2])))
        if cmd == "slowput":
            sys.exit(slowput(*args))
        if cmd == "writes":
            sys.exit(writes(args[0], args[1], args[2], int(args[3]), args[4]))
        sys.exit(reader(*args))
    except Exception:  # noqa: BLE001
        print("ERROR " + traceback.format_exc().replace("\n", " | "), flush=True)
        sys.exit(1)
