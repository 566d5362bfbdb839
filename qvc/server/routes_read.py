"""The read routes of ``qvc serve``: the repository, its threads, a thread's line, a checkpoint,
a diff and a search. Each is one library call (:mod:`qvc.readers.status`, :mod:`qvc.readers.views`,
:mod:`qvc.readers.statediff`, :mod:`qvc.readers.search`) over the application's read-only store
(:data:`~qvc.server.deps.Reader`): no lock, nothing written, and the writes of other processes are seen
at the next request.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, Dict, List, Optional

from fastapi import APIRouter, Path, Query

from qvc.errors import CorruptionError
from qvc.readers.dates import parse_date
from qvc.readers.search import search as search_threads
from qvc.readers.statediff import to_json
from qvc.readers.status import status as repository_status
from qvc.readers.views import checkpoint_json, diff_commits, run_of_thread, thread_json, thread_line_json
from qvc.server import models
from qvc.server.deps import Reader, State, revision
from qvc.server.responses import ERRORS
from qvc.store.git_store import GitCheckpointStore
from qvc.version import __version__

log = logging.getLogger("qvc")

router = APIRouter(tags=["read"], responses=ERRORS)


def thread_rows(store: GitCheckpointStore, threads: List[str], current: Optional[str],
                count: bool = True) -> List[Dict[str, Any]]:
    """:func:`~qvc.readers.views.thread_json` of each of ``threads`` (``current`` is the current
    thread's name; ``count=False`` skips counting checkpoints). A damaged thread (see ``qvc
    fsck``) is logged as a warning and left out, so the others are still listed."""
    out = []
    for t in threads:
        try:
            out.append(thread_json(store, t, t == current, count=count))
        except CorruptionError as exc:
            log.warning("qvc: warning: thread %r is damaged, not listed: %s", t, exc)
    return out


@router.get("/api/repository", response_model=models.Repository)
def repository(reader: Reader, state: State) -> Dict[str, Any]:
    """The repository: current thread, counts, recovery, maintenance; and how this server runs."""
    return {**repository_status(reader).to_json(), "version": __version__, "read_only": state.read_only,
            "live": state.live}


@router.get("/api/threads", response_model=models.ThreadPage, response_model_exclude_unset=True)
def threads(reader: Reader,
            status: Optional[str] = Query(None, description="Only threads whose head has this status"),
            prefix: Optional[str] = Query(None, description="Only threads whose name starts with this"),
            offset: int = Query(0, ge=0), limit: int = Query(100, ge=1, le=1000)) -> Dict[str, Any]:
    """Threads, sorted by name, a page at a time (head, step, status, last update, checkpoint count).
    A garbled HEAD marks no thread current (``/api/repository`` says it is damaged)."""
    head = reader.current_or_none()
    current = head.thread if head is not None else None
    names = [t for t in reader.threads() if prefix is None or t.startswith(prefix)]
    if status is not None:
        names = [r["thread"] for r in thread_rows(reader, names, current, count=False) if r.get("status") == status]
    page = thread_rows(reader, names[offset:offset + limit], current)
    for row in page:
        row["run"] = run_of_thread(row["thread"])
    return {"total": len(names), "offset": offset, "limit": limit, "threads": page}


@router.get("/api/threads/{thread:anything}", response_model=models.ThreadLine)
def thread_line(reader: Reader, thread: str = Path(description="The thread id (may contain '/')"),
                limit: int = Query(500, ge=1, le=10000)) -> Dict[str, Any]:
    """One thread's line (newest first), the lines time travel left behind, and its forks."""
    return thread_line_json(reader, thread, limit)


@router.get("/api/checkpoints/{name:anything}", response_model=models.CheckpointView)
def checkpoint(reader: Reader,
               name: str = Path(description="Checkpoint id or prefix, commit or prefix, THREAD, THREAD~N"),
               field: Annotated[Optional[List[str]], Query(description="Only these state fields")] = None
               ) -> Dict[str, Any]:
    """One checkpoint: header, metadata, state and pending writes (`qvc show --json`)."""
    return checkpoint_json(reader, revision(reader, name), field or ())


@router.get("/api/diff", response_model=models.DiffView, response_model_exclude_unset=True)
def diff(reader: Reader, b: str = Query(description="The new checkpoint"),
         a: Optional[str] = Query(None, description="The old checkpoint (default: B's parent)")) -> Dict[str, Any]:
    """What changed from A to B, field by field and item by item (`qvc diff --json`)."""
    new = revision(reader, b)
    old = revision(reader, a) if a is not None else None
    return {"a": old if a is not None else reader.commit_info(new).parent, "b": new,
            "fields": to_json(diff_commits(reader, old, new, plain=True))}


@router.get("/api/search", response_model=models.SearchPage)
def search(reader: Reader,
           q: Optional[str] = Query(None, description="Text a message says (case-insensitive substring)"),
           status: Optional[str] = Query(None, description="Only threads whose head has this status"),
           since: Optional[str] = Query(None, description="Only threads updated at or after this date "
                                                          "('2026-11-30', '2 days ago', '@UNIX', as `qvc log`)"),
           until: Optional[str] = Query(None, description="Only threads updated at or before this date"),
           prefix: Optional[str] = Query(None, description="Only threads whose name starts with this"),
           offset: int = Query(0, ge=0), limit: int = Query(100, ge=1, le=1000)) -> Dict[str, Any]:
    """Threads whose conversations say `q`, by status and date of their last checkpoint, sorted by
    name, each with the messages that matched (`qvc.readers.search.search`)."""
    hits = search_threads(reader, q or None, status=status or None,
                          since=parse_date(since) if since else None, until=parse_date(until) if until else None,
                          prefix=prefix or None)
    return {"total": len(hits), "offset": offset, "limit": limit,
            "threads": [h.to_json() for h in hits[offset:offset + limit]]}
