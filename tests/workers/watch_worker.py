"""A writer process for tests/test_watch.py and benchmarks/bench_watch.py.

Usage::

    python tests/workers/watch_worker.py PATH

It opens a store on PATH, prints ``READY`` and then runs one JSON command per stdin line,
printing ``OK <json result>`` after each (``ERROR <message>`` and exit status 1 on anything
unexpected). Commands (checkpoint ids are the caller's, so events can be matched exactly):

- ``{"op": "put", "thread": T, "id": ID, "parent": ID | null, "expected_head": SHA}``: one put
  (``expected_head`` only if given: time travel must name the head it supersedes); the result
  is its commit.
- ``{"op": "fork", "thread": T, "id": ID, "from": ID}`` / ``{"op": "reset", "thread": T, "id": ID}``
  / ``{"op": "writes", "id": ID}`` / ``{"op": "delete", "id": ID}`` / ``{"op": "delete_thread", "thread": T}`` /
  ``{"op": "rename", "thread": T, "to": NEW}`` / ``{"op": "checkout", "thread": T}``
- ``{"op": "burst", "threads": [T...], "n": N, "prefix": P}``: N puts on each thread, one Python
  thread per thread, all at once (ids ``P<thread>-<i>``); the result maps each checkpoint id to
  the Unix time right after its ``put`` returned (what the latency benchmark measures from).
- ``{"op": "flush"}``: ``store.flush()`` (every put so far is then in git's files)
- ``{"op": "exit"}``
"""

from __future__ import annotations

import json
import sys
import threading
import time


def main() -> int:
    from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore

    store = GitCheckpointStore(sys.argv[1])

    def put(thread: str, cid: str, parent: str | None = None, step: int = 0, **options: object) -> str:
        cp = Checkpoint(id=cid, thread_id=thread, step=step, parent_id=parent, state_data={"id": cid, "step": step})
        store.put(CheckpointConfig(thread), cp, {"source": "worker", "step": step}, {}, **options)
        return store.head(thread)

    def burst(threads: list[str], n: int, prefix: str) -> dict[str, float]:
        done: dict[str, float] = {}
        start = threading.Barrier(len(threads))

        def write(thread: str) -> None:
            start.wait()
            for i in range(n):
                cid = f"{prefix}{thread}-{i}"
                put(thread, cid, step=i)
                done[cid] = time.time()

        workers = [threading.Thread(target=write, args=(t,)) for t in threads]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return done

    print("READY", flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "exit":
            break
        if op == "put":
            options = {"expected_head": cmd["expected_head"]} if "expected_head" in cmd else {}
            result = put(cmd["thread"], cmd["id"], cmd.get("parent"), cmd.get("step", 0), **options)
        elif op == "fork":
            result = put(cmd["thread"], cmd["id"], cmd["from"])
        elif op == "reset":
            store.reset(cmd["thread"], cmd["id"])
            result = store.head(cmd["thread"])
        elif op == "writes":
            store.put_writes(CheckpointConfig("?", cmd["id"]), [("messages", cmd["id"])], "task")
            result = None
        elif op == "delete":
            store.delete(CheckpointConfig("?", cmd["id"]))
            result = None
        elif op == "delete_thread":
            result = store.delete_thread(cmd["thread"])
        elif op == "rename":
            result = store.rename_thread(cmd["thread"], cmd["to"])
        elif op == "checkout":
            result = store.checkout(cmd["thread"]).commit
        elif op == "burst":
            result = burst(cmd["threads"], cmd["n"], cmd.get("prefix", ""))
        elif op == "flush":
            result = store.flush()
        else:
            print(f"ERROR unknown op {op!r}", flush=True)
            return 1
        print("OK " + json.dumps(result), flush=True)
    store.close()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as exc:  # reported to the test, which fails with the message
        print(f"ERROR {type(exc).__name__}: {exc}", flush=True)
        sys.exit(1)
