"""A writer meant to be SIGKILLed while ``qvc gc`` runs (driven by tests/fault/test_kill_gc.py).

Usage::

    python tests/fault/workers/kill_gc_writer.py PATH MODE NAME RUN SEED [--shared]

Opens ``GitCheckpointStore(PATH, durability=MODE)`` (publishing what is staged), prints ``READY`` and
loops forever. Each put's checkpoint id is ``<RUN>-<n>`` and its state
``model_worker.make_state(thread, id, step)``. Plain puts (no ``parent_id``, no
``expected_head``) go to the writer's own thread ``own-<NAME>``, which no other writer touches.
With ``--shared`` about half the puts go to the thread ``shared`` instead, always with
``expected_head`` (the head it just read): most append to it, some travel back in time
(``parent_id`` naming an older checkpoint of the line). A conflict is retried (same id, same
content) with the head re-read, up to 20 times. One line per event, each written whole with
one ``os.write`` (a kill leaves no half line)::

    ACK <thread> <id> plain                   a plain put returned
    ACK shared <id> cas <parent id> <tries>   a put with expected_head returned, on that parent
    ACK shared <id> travel <parent id> <tries>
    CONFLICT shared <id>                      one attempt was refused (nothing stored)
    GAVEUP shared <id>                        every attempt was refused: it must not exist
"""

from __future__ import annotations

import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from model_worker import make_state  # noqa: E402

RETRIES = 20


def say(text: str) -> None:
    data = (text + "\n").encode()
    while data:
        data = data[os.write(1, data):]


def main(argv: list[str]) -> int:
    path, mode, name, run, seed = argv[:5]
    shared = "--shared" in argv
    from qvc import Checkpoint, CheckpointConfig, CheckpointConflictError, DurabilityMode, GitCheckpointStore

    rng = random.Random(int(seed))
    store = GitCheckpointStore(path, durability=DurabilityMode(mode))
    say("READY")
    own = f"own-{name}"
    n = 0
    while True:
        n += 1
        cid = f"{run}-{n:05d}"
        if not shared or rng.random() < 0.5:
            store.put(CheckpointConfig(own), Checkpoint(id=cid, thread_id=own, step=n,
                                                        state_data=make_state(own, cid, n)), {"source": "loop"})
            say(f"ACK {own} {cid} plain")
            continue
        travel = None
        line = [t.checkpoint.id for t in store.list(CheckpointConfig("shared"), limit=6)]
        if len(line) >= 3 and rng.random() < 0.2:
            travel = rng.choice(line[2:])  # an older checkpoint: time travel, asked for with expected_head
        cp = Checkpoint(id=cid, thread_id="shared", step=n, parent_id=travel,
                        state_data=make_state("shared", cid, n))
        for attempt in range(1, RETRIES + 1):
            head = store.head("shared")
            parent = travel or (store.commit_info(head).checkpoint_id if head else "-")
            try:
                store.put(CheckpointConfig("shared"), cp, {"source": "loop"}, expected_head=head)
            except CheckpointConflictError:
                say(f"CONFLICT shared {cid}")
                continue
            say(f"ACK shared {cid} {'travel' if travel else 'cas'} {parent} {attempt}")
            break
        else:
            say(f"GAVEUP shared {cid}")


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BrokenPipeError:
        os._exit(0)
