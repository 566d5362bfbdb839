"""The store's worker threads (flusher, publisher, packer) are owned: each is started under a
lock, never once ``close()`` began, and ``close()`` stops and joins every one of them; and a
write racing ``close()`` is either refused or published by it.

Publications from several Python threads at once (puts and ``flush()`` calls, plus the
publisher) race to start the packer once a store has written ``CONSOLIDATE_AT`` small packs;
before the fix two of them could each start one, and ``close()`` stopped only the last.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from helpers import put  # noqa: E402

from qvc import CheckpointConfig, GitCheckpointStore  # noqa: E402
from qvc.errors import StoreClosedError  # noqa: E402
from qvc.plumbing.repository import CONSOLIDATE_AT  # noqa: E402

THREADS = 8
ROUNDS = 12


def qvc_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    """The threads alive now, not in ``before``, whose names say they are qvc's."""
    return [t for t in threading.enumerate() if t not in before and t.name.startswith("qvc-")]


def run_together(targets: list) -> None:
    """Run each callable in its own Python thread, all released at once; re-raise the first failure."""
    start = threading.Barrier(len(targets))
    errors: list[BaseException] = []

    def run(target) -> None:
        try:
            start.wait()
            target()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def publish_from_threads(store: GitCheckpointStore, tag: str, per_thread: int) -> None:
    """THREADS Python threads at once, each putting on its own thread and flushing after every put."""

    def writer(t: int):
        def write() -> None:
            for i in range(per_thread):
                put(store, f"t{t}", f"{tag}-{t}-{i}", i)
                store.flush()  # one publication (one small pack) per put, from every thread

        return write

    run_together([writer(t) for t in range(THREADS)])


def test_no_worker_thread_survives_close(tmp_path):
    """Every round: THREADS Python threads put and flush at once (enough small packs to start
    the packer, the publisher racing them), then close(); afterwards no ``qvc-`` thread of
    the store is alive, and every put reads back."""
    before = set(threading.enumerate())
    per_thread = CONSOLIDATE_AT // THREADS + 3
    survivors = []
    for r in range(ROUNDS):
        path = tmp_path / f"r{r}.qvc"
        store = GitCheckpointStore(path, durability="async", fsync=False)
        publish_from_threads(store, str(r), per_thread)
        store.close()
        alive = qvc_threads(before)
        survivors += [f"round {r}: {t.name}" for t in alive]
        before.update(alive)  # each round reports its own
        with GitCheckpointStore(path, readonly=True) as reader:
            for t in range(THREADS):
                assert reader.get_tuple(CheckpointConfig(f"t{t}")).checkpoint.id == f"{r}-{t}-{per_thread - 1}"
    assert not survivors, f"worker threads alive after close(): {survivors}"


def test_a_write_racing_close_is_published_or_refused(tmp_path):
    """close() from one thread while THREADS others put: each put either raises
    StoreClosedError or returns and is then on its thread in git's files; no worker survives."""
    before = set(threading.enumerate())
    for r in range(ROUNDS):
        path = tmp_path / f"c{r}.qvc"
        store = GitCheckpointStore(path, durability="sync", fsync=False)
        acked: dict[str, str] = {}
        running = threading.Semaphore(0)

        def writer(t: int, store=store, acked=acked, running=running):
            def write() -> None:
                for i in range(10_000):
                    try:
                        put(store, f"t{t}", f"{t}-{i}", i)
                    except StoreClosedError:
                        return
                    acked[f"t{t}"] = f"{t}-{i}"
                    if i == 2:
                        running.release()

            return write

        def closer(store=store, running=running) -> None:
            for _ in range(THREADS):
                running.acquire()  # every writer is well under way
            store.close()

        run_together([writer(t) for t in range(THREADS)] + [closer])
        assert not qvc_threads(before), f"round {r}: worker threads alive after close()"
        with GitCheckpointStore(path, readonly=True) as reader:
            for thread, cid in acked.items():
                assert reader.get_tuple(CheckpointConfig(thread)).checkpoint.id == cid, (
                    f"round {r}: {thread}'s acknowledged put {cid} was lost by close()")
