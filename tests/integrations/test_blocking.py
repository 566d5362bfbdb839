"""qvc.integrations.blocking.finish: an async adapter's store call is seen through even when
its caller is cancelled, so a cancelled save is either whole and reported or not made."""

from __future__ import annotations

import asyncio
import threading

import pytest

from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
from qvc.integrations.blocking import finish


def test_a_cancelled_caller_learns_of_it_only_after_the_put_returned(tmp_path):
    started, release = threading.Event(), threading.Event()

    with GitCheckpointStore(tmp_path / "r.qvc") as store:
        def put() -> str:
            started.set()
            release.wait(10)  # the caller is cancelled while the put is under way
            return store.put(CheckpointConfig("t"), Checkpoint(id="c0", thread_id="t", step=0, state_data={}),
                             {}).checkpoint_id

        async def main() -> None:
            task = asyncio.ensure_future(finish(put))
            await asyncio.to_thread(started.wait, 10)
            task.cancel()
            await asyncio.sleep(0.05)
            assert not task.done()  # still waiting for the put, not abandoning it
            release.set()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(main())
        assert store.get_tuple(CheckpointConfig("t")).checkpoint.id == "c0"  # whole, and the caller was told


def test_the_outcome_is_returned_or_raised_as_the_call_made_it():
    assert asyncio.run(finish(lambda a, b: a + b, 2, 3)) == 5
    with pytest.raises(ZeroDivisionError):
        asyncio.run(finish(lambda: 1 / 0))
