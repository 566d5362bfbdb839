"""A checkpoint writer meant to be SIGKILLed (driven by tests/test_crash.py).

Usage::

    python tests/fault/workers/crash_writer.py PATH MODE RUN_ID SEED [--create-only] [--prefix=P] [--small-merges]

It opens ``GitCheckpointStore(PATH, durability=MODE)`` and loops forever doing random
operations (puts on a few threads, forks, time-travel resets, put_writes, deletes of the
latest checkpoint, now and then a purge). Around every operation it prints one line to stdout, flushed:

    BEGIN <op> <args...>         the operation is about to start (it is "in flight")
    ACK <op> <args...>           the operation returned: its effect is now guaranteed

Lines (space separated; ``-`` stands for "none"):

    BEGIN PUT <thread> <cid> <step>             ACK PUT <thread> <cid> <step> <sha256 of state>
    BEGIN FORK <src_thread> <src_cid> <new>     ACK FORK <src_thread> <src_cid> <new> <new_cid>
    BEGIN RESET <thread> <target_cid> <old>     ACK RESET <thread> <target_cid>
    BEGIN WRITES <thread> <cid> <task> <k>      ACK WRITES <thread> <cid> <task> <k>
    BEGIN DEL <thread> <cid> <head_after>       ACK DEL <thread> <cid> <head_after>
    BEGIN PURGE                                 ACK PURGE

Checkpoint states are a pure function of (thread, checkpoint id, step), see :func:`make_state`,
so the parent can recompute what every acknowledged checkpoint must contain. Pending writes
are a pure function of (checkpoint id, task, index), see :func:`make_writes`.

Also prints ``PRE`` before opening the store and ``OPEN <recovery summary>`` after.
With ``--create-only`` it prints ``PRE``, opens (creating) the store, prints ``OPEN`` and
puts one checkpoint, then exits. ``--prefix=P`` confines it to threads whose names start with
P (so several writers can run at once on disjoint threads); ``--small-merges`` makes the store
merge its small packs after every few puts, so kills also land in the middle of a merge.
"""

from __future__ import annotations

import hashlib
import os
import random
import sys

BASE_THREADS = ("t0", "t1", "t2")
MAX_THREADS = 7


def make_state(thread: str, cid: str, step: int) -> dict:
    """The state written for checkpoint ``cid`` (step ``step``) on ``thread``."""
    h = hashlib.sha256(f"{thread}|{cid}|{step}".encode()).digest()
    n_messages = (step * 7) % 150  # sometimes > 64 items: a chunked list subtree
    return {
        "thread": thread,
        "cid": cid,
        "step_copy": step,
        "messages": [{"i": j, "text": f"{thread}:{j}"} for j in range(n_messages)],
        "counter": int.from_bytes(h[:8], "big"),
        "digest": h,
        "config": {"model": "m-1", "temperature": 0.5},  # unchanged: blob reuse
        "nested": {"a": [step, None, True, 1.25], "b": {"deep": h.hex()[: step % 40]}},
    }


def state_digest(state: dict) -> str:
    import msgpack

    return hashlib.sha256(msgpack.packb(state, use_bin_type=True)).hexdigest()


def make_writes(cid: str, task: str, k: int) -> list[tuple[str, object]]:
    """The (channel, value) pairs written by a WRITES operation."""
    return [(f"ch{j}", {"cid": cid, "task": task, "j": j, "v": [j] * (j + 1)}) for j in range(k)]


def say(*parts: object) -> None:
    print(" ".join(str(p) for p in parts), flush=True)


def main(argv: list[str]) -> int:
    path, mode, run_id, seed = argv[:4]
    create_only = "--create-only" in argv
    # --prefix=P: touch only threads named P... (several writers on disjoint threads)
    prefix = next((a.split("=", 1)[1] for a in argv if a.startswith("--prefix=")), "")
    base_threads = tuple(prefix + t for t in BASE_THREADS)
    from qvc import Checkpoint, CheckpointConfig, DurabilityMode, GitCheckpointStore, fork_checkpoint

    rng = random.Random(int(seed))
    if "--small-merges" in argv:  # merge small packs after every few puts (kills land mid-merge too)
        import qvc.plumbing.packset

        qvc.plumbing.packset.CONSOLIDATE_AT = rng.choice([2, 3, 4])
    # For bisecting a failure: QVC_CRASH_SKIP_OPS=DEL,WRITES,FORK,RESET,PURGE leaves those operations out.
    skip = set(filter(None, os.environ.get("QVC_CRASH_SKIP_OPS", "").upper().split(",")))
    say("PRE")
    store = GitCheckpointStore(path, durability=DurabilityMode(mode))
    say("OPEN", store.recovery.summary().replace("\n", " "))
    n = 0

    def put(thread: str) -> None:
        nonlocal n
        head = store.get_tuple(CheckpointConfig(thread))
        step = 0 if head is None else head.checkpoint.step + 1
        cid = f"{run_id}-{n:05d}"
        n += 1
        state = make_state(thread, cid, step)
        say("BEGIN PUT", thread, cid, step)
        store.put(CheckpointConfig(thread), Checkpoint(id=cid, thread_id=thread, step=step, state_data=state),
                  {"source": "loop", "step": step, "run_id": run_id})
        say("ACK PUT", thread, cid, step, state_digest(state))

    if create_only:
        put("t0")
        store.close()
        return 0

    while True:
        threads = [t for t in store.threads() if t.startswith(prefix)]
        live = [t for t in threads if store.head(t) is not None]
        r = rng.random()
        if r < 0.55 or not live:
            missing = [t for t in base_threads if t not in threads]
            put(rng.choice(missing) if missing and rng.random() < 0.5 else rng.choice(list(base_threads) + live))
        elif r < 0.63:
            if len(threads) >= MAX_THREADS or "FORK" in skip:
                continue
            src = rng.choice(live)
            src_cid = store.get_tuple(CheckpointConfig(src)).checkpoint.id
            new = f"{prefix}f{run_id}-{n:05d}"
            n += 1
            say("BEGIN FORK", src, src_cid, new)
            out = fork_checkpoint(store, CheckpointConfig(src, src_cid), new)
            say("ACK FORK", src, src_cid, new, out.checkpoint_id)
        elif r < 0.72:
            if "RESET" in skip:
                continue
            thread = rng.choice(live)
            line = list(store.list(CheckpointConfig(thread), limit=6))
            old = line[0].checkpoint.id
            candidates = [t.checkpoint.id for t in line[1:] if t.checkpoint.thread_id == thread]
            if not candidates:
                continue
            target = rng.choice(candidates)
            say("BEGIN RESET", thread, target, old)
            store.reset(thread, target)
            say("ACK RESET", thread, target)
        elif r < 0.86:
            if "WRITES" in skip:
                continue
            thread = rng.choice(live)
            cid = store.get_tuple(CheckpointConfig(thread)).checkpoint.id
            task = f"w{run_id}-{n:05d}"
            n += 1
            k = rng.randint(1, 4)
            say("BEGIN WRITES", thread, cid, task, k)
            store.put_writes(CheckpointConfig(thread, cid), make_writes(cid, task, k), task)
            say("ACK WRITES", thread, cid, task, k)
        elif r > 0.985:
            if "PURGE" in skip:
                continue
            say("BEGIN PURGE")
            store.purge()  # git repack + prune under the exclusive lock; a kill may land in git's work
            say("ACK PURGE")
        else:
            if "DEL" in skip:
                continue
            thread = rng.choice(live)
            tup = store.get_tuple(CheckpointConfig(thread))
            after = "-"
            if tup.parent_config is not None:
                parent = store.get_tuple(tup.parent_config)
                if parent is not None and parent.checkpoint.thread_id == thread:
                    after = parent.checkpoint.id
            say("BEGIN DEL", thread, tup.checkpoint.id, after)
            store.delete(CheckpointConfig(thread))
            now = store.get_tuple(CheckpointConfig(thread))
            seen = "-" if now is None else now.checkpoint.id
            if seen != after:
                say("ERROR", f"delete of {tup.checkpoint.id} on {thread}: head is {seen}, expected {after}")
                return 3
            say("ACK DEL", thread, tup.checkpoint.id, after)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BrokenPipeError:  # the parent went away
        os._exit(0)
