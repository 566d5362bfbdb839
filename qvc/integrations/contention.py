"""What an adapter does when another writer moved the head its compare-and-swap expected:
:func:`pause` before it reads the new head and tries again. Imports only the standard library."""

from __future__ import annotations

import random
import time


def pause(attempt: int) -> None:
    """Sleep a random time that grows with ``attempt`` (0, 1, ...): up to 1 ms, then 2, 4, ... 64 ms.
    Two writers that keep meeting on one head stop meeting in step (the one that waits behind
    the other's commit would otherwise lose every time)."""
    time.sleep(random.uniform(0, 0.001 * 2 ** min(attempt, 6)))
