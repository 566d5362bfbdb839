"""The store's blocking calls from an async framework: :func:`finish` runs one in a worker
thread and sees it through. Imports only the standard library; for every adapter."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Optional, TypeVar

_T = TypeVar("_T")


async def finish(fn: Callable[..., _T], *args: Any) -> _T:
    """Run ``fn(*args)`` in a worker thread and wait for its outcome even if the caller is
    cancelled meanwhile (the cancellation is raised after it), so a write is never half-known:
    a caller cancelled mid-put learns of the cancellation only once the put returned or raised."""
    task = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    cancelled: Optional[asyncio.CancelledError] = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
    if cancelled is not None:
        task.exception()  # retrieved: the cancellation is what the caller sees
        raise cancelled
    return task.result()
