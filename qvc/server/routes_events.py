"""The live-update route of ``qvc serve``: ``/api/events``, the repository's changes as
server-sent events (:mod:`qvc.server.events` is where they come from).

Each open stream waits for changes in a thread of its own (bounded by
:attr:`ServerState.event_threads <qvc.server.deps.ServerState>`), so open pages never starve
the pool that answers requests; streams end when the client goes or the server stops.
"""

from __future__ import annotations

import json
import threading
from typing import Any, AsyncIterator, Dict, Iterator, Optional

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from qvc.readers.watch import Watcher
from qvc.server import events
from qvc.server.deps import Reader, ServerState, State

#: Seconds without a change after which a stream sends a comment, so proxies keep it open.
KEEP_ALIVE = 15

router = APIRouter()


async def event_stream(request: Request, state: ServerState, watcher: Watcher,
                       source: Iterator[Optional[Dict[str, Any]]], stop: threading.Event) -> AsyncIterator[str]:
    """The text of one event stream: ``ready`` (with ``watcher.hints``), then one ``change``
    event per item of ``source``, until the client disconnects or the server stops; then
    ``stop`` is set and ``watcher`` stopped."""
    try:
        yield f"retry: 2000\nevent: ready\ndata: {json.dumps({'type': 'ready', 'live': watcher.hints})}\n\n"
        quiet = 0
        while not state.stopping.is_set():
            event = await anyio.to_thread.run_sync(next, source, None, limiter=state.event_threads)
            if event is not None:
                quiet = 0
                yield f"event: change\ndata: {json.dumps(event)}\n\n"
            elif await request.is_disconnected():
                break
            else:
                quiet += 1
                if quiet * state.poll_interval >= KEEP_ALIVE:
                    quiet = 0
                    yield ": keep-alive\n\n"
    finally:
        stop.set()
        watcher.stop()


@router.get("/api/events", tags=["read"], response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}},
                             "description": "Server-sent events: `ready` once, then one `change` event per "
                                            "change (data: the JSON of `qvc watch --json`)"}})
async def stream_events(request: Request, state: State, reader: Reader) -> StreamingResponse:
    """Live updates: one server-sent event per change (checkpoints, forks, resets, deletions,
    renames, pending writes, HEAD moves), as :meth:`GitCheckpointStore.watch` reports them."""
    stop = threading.Event()
    watcher = events.watch(reader, state.poll_interval)
    source = events.change_events(watcher, stop, state.poll_interval)
    return StreamingResponse(event_stream(request, state, watcher, source, stop), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
