"""A store process driven one JSON command at a time (by tests/fault/test_model.py and
tests/fault/test_kill_gc.py), meant to be SIGKILLed at any point.

Usage::

    python tests/fault/workers/model_worker.py PATH MODE

It opens ``GitCheckpointStore(PATH, durability=MODE)`` (MODE: sync, async or exit; opening runs
recovery), prints ``{"ready": true, "pid": ..., "recovery": "..."}`` and then reads one JSON
command per line on stdin, performs it and prints one JSON result line::

    {"ok": true, ...}                                   the call returned (acknowledged)
    {"ok": false, "error": "CheckpointConflictError", "message": "..."}

Every result is written with one ``os.write`` of the whole line (well under ``PIPE_BUF``), so
a SIGKILL leaves either the whole line or nothing: a line without its newline is no result.

Commands (``op`` and its fields):

    put           thread, id, step, parent_id (or null), [expected_head: {"id": ID or null}]
                  the state is make_state(thread, id, step); expected_head names the head by
                  checkpoint id, resolved to its commit here (null: a thread with no
                  checkpoints); an id that does not resolve gives the error "UnknownExpectedHead"
    put_writes    thread, id, task, writes: [[channel, value], ...]
    delete        thread, id
    delete_thread thread
    rename        old, new
    reset         thread, id
    gc / purge    store.gc() / store.purge()
    head          thread: {"ok": true, "head": ID or null} (for post-mortems)
    exit          close the store and exit 0 (so does the end of stdin)
"""

from __future__ import annotations

import json
import os
import sys

MESSAGE_LIMIT = 600


def make_state(thread: str, cid: str, step: int) -> dict:
    """The state stored by a put of checkpoint ``cid`` (step ``step``) on ``thread``: a pure
    function, so the test knows what every acknowledged checkpoint must hold. Two of its fields
    are blobs shared with other checkpoints (``fixed`` with all, ``thread`` with its thread's);
    with ``QVC_MODEL_UNIQUE_BLOBS=1`` in the environment no blob is shared."""
    state = {"cid": cid, "step": step, "trail": [step, cid, step % 7]}
    if not os.environ.get("QVC_MODEL_UNIQUE_BLOBS"):
        state.update(thread=thread, fixed={"model": "m-1"})
    return state


def metadata(cid: str, step: int) -> dict:
    return {"source": "model", "step": step, "cid": cid}


def emit(result: dict) -> None:
    data = (json.dumps(result, sort_keys=True) + "\n").encode()
    while data:  # one write for a line this short; the loop only guards a short write
        data = data[os.write(1, data):]


def perform(store, cmd: dict) -> dict:
    from qvc import Checkpoint, CheckpointConfig, UnknownCheckpointError

    op = cmd["op"]
    if op == "put":
        thread, cid, step = cmd["thread"], cmd["id"], cmd["step"]
        kwargs = {}
        if "expected_head" in cmd:
            eid = cmd["expected_head"]["id"]
            try:
                kwargs["expected_head"] = None if eid is None else store.resolve(eid)
            except UnknownCheckpointError as exc:
                return {"ok": False, "error": "UnknownExpectedHead", "message": str(exc)[:MESSAGE_LIMIT]}
        cp = Checkpoint(id=cid, thread_id=thread, step=step, parent_id=cmd.get("parent_id"),
                        state_data=make_state(thread, cid, step))
        out = store.put(CheckpointConfig(thread), cp, metadata(cid, step), **kwargs)
        return {"ok": True, "id": out.checkpoint_id}
    if op == "put_writes":
        store.put_writes(CheckpointConfig(cmd["thread"], cmd["id"]), [tuple(w) for w in cmd["writes"]], cmd["task"])
        return {"ok": True}
    if op == "delete":
        store.delete(CheckpointConfig(cmd["thread"], cmd["id"]))
        return {"ok": True}
    if op == "delete_thread":
        store.delete_thread(cmd["thread"])
        return {"ok": True}
    if op == "rename":
        store.rename_thread(cmd["old"], cmd["new"])
        return {"ok": True}
    if op == "reset":
        store.reset(cmd["thread"], cmd["id"])
        return {"ok": True}
    if op == "gc":
        store.gc()
        return {"ok": True}
    if op == "purge":
        store.purge()
        return {"ok": True}
    if op == "head":
        tup = store.get_tuple(CheckpointConfig(cmd["thread"]))
        return {"ok": True, "head": None if tup is None else tup.checkpoint.id}
    return {"ok": False, "error": "UnknownCommand", "message": op}


def main(argv: list[str]) -> int:
    path, mode = argv[:2]
    from qvc import DurabilityMode, GitCheckpointStore, QvcError

    store = GitCheckpointStore(path, durability=DurabilityMode(mode))
    emit({"ready": True, "pid": os.getpid(), "recovery": store.recovery.summary().replace("\n", " ")[:MESSAGE_LIMIT]})
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        if cmd["op"] == "exit":
            break
        try:
            result = perform(store, cmd)
        except QvcError as exc:
            result = {"ok": False, "error": type(exc).__name__, "message": str(exc)[:MESSAGE_LIMIT]}
        except Exception as exc:  # noqa: BLE001 - reported to the test, which fails on it
            result = {"ok": False, "error": "Unexpected:" + type(exc).__name__, "message": repr(exc)[:MESSAGE_LIMIT]}
        emit(result)
    store.close()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BrokenPipeError:  # the test went away
        os._exit(0)
