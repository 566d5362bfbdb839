"""A writer or publisher of a repository's staging database (qvc.plumbing.staging), for the staging
fault tests: a real process that stages, publishes, is killed or is stopped.

    staging_worker.py put REPO REF N          print "READY", then stage N moves of REF (one blob commit each),
                                               printing "ACK i sha" after each
    staging_worker.py put-and-stop REPO REF   stage one move of REF, print "ACK sha", then SIGSTOP itself
    staging_worker.py publish-killed REPO K   publish, SIGKILLed at its K-th file operation (rename,
                                               write, unlink, fsync)
    staging_worker.py publish-loop REPO       publish again and again (until killed)
"""

from __future__ import annotations

import os
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: helpers

from helpers import staged_commit  # noqa: E402

from qvc.errors import CheckpointConflictError
from qvc.plumbing.staging import Staging


def put(repo: str, ref: str, count: int) -> None:
    staging = Staging(repo)
    print("READY")
    for i in range(count):
        while True:
            try:
                with staging.transaction() as tx:
                    head = tx.ref(ref)
                    new = staged_commit(tx, head, f"{os.getpid()} {i}")
                    tx.move(ref, head, new, f"put {i}")
                break
            except CheckpointConflictError:
                continue
        print(f"ACK {i} {new}")
    staging.close()


def put_and_stop(repo: str, ref: str) -> None:
    staging = Staging(repo)
    with staging.transaction() as tx:
        head = tx.ref(ref)
        new = staged_commit(tx, head, "frozen")
        tx.move(ref, head, new, "put before the stop")
    print(f"ACK {new}")
    os.kill(os.getpid(), signal.SIGSTOP)
    staging.close()


def publish_killed(repo: str, at: int) -> None:
    seen = [0]

    def trap(real):
        def wrapped(*args, **kwargs):
            seen[0] += 1
            if seen[0] == at:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)
        return wrapped

    staging = Staging(repo)
    for name in ("rename", "write", "unlink", "fsync", "fdatasync"):
        setattr(os, name, trap(getattr(os, name)))
    staging.publish()
    print(f"DONE {seen[0]}")


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "put":
        put(args[0], args[1], int(args[2]))
    elif command == "put-and-stop":
        put_and_stop(args[0], args[1])
    elif command == "publish-loop":
        staging = Staging(args[0])
        while True:
            staging.publish()
    elif command == "publish-killed":
        publish_killed(args[0], int(args[1]))
    else:
        sys.exit(f"unknown command {command}")
