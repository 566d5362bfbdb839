"""The run routes of ``qvc serve``: agent runs (:mod:`qvc.runs`) as the runs list, one run, its
timeline and its point-in-time snapshots. Each is one :class:`~qvc.runs.Runs` call over the
application's read-only store (:data:`~qvc.server.deps.ReadRuns`); none writes.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Optional

from fastapi import APIRouter, Path, Query

from qvc.codec.tagged import to_jsonable
from qvc.errors import InvalidInputError
from qvc.readers.views import run_of_thread
from qvc.runs import RunStatus
from qvc.runs.viewer import shown_run
from qvc.server import models
from qvc.server.deps import ReadRuns
from qvc.server.responses import ERRORS

#: A message index in a snapshot's path (anything else there is a checkpoint id).
INDEX = re.compile(r"^-?\d+$")

router = APIRouter(tags=["runs"], responses=ERRORS)


@router.get("/api/runs", response_model=models.RunPage)
def list_runs(runs: ReadRuns, session: Optional[str] = Query(None, description="Only the runs of this session"),
              status: Optional[str] = Query(None, description="Only runs with this status (COMPLETED...)"),
              offset: int = Query(0, ge=0), limit: int = Query(100, ge=1, le=1000)) -> Dict[str, Any]:
    """Agent runs, oldest first, a page at a time."""
    if status is not None and status not in RunStatus.__members__:
        raise InvalidInputError(f"unknown run status {status!r} (one of {', '.join(RunStatus.__members__)})")
    found = [r for r in runs.list_runs(session) if status is None or r.status.value == status]
    return {"total": len(found), "offset": offset, "limit": limit,
            "runs": [r.to_dict() for r in found[offset:offset + limit]]}


@router.get("/api/runs/{run_id}", response_model=models.RunView)
def get_run(runs: ReadRuns, run_id: str) -> Dict[str, Any]:
    """A run as its latest checkpoint holds it (without the bookkeeping: owner lease, takeovers), and
    whether its owner is alive."""
    return {"thread": runs.thread(run_id), "owner_status": runs.owner_status(run_id).to_dict(),
            "run": to_jsonable(shown_run(runs.get(run_id).to_dict()), "run")}


@router.get("/api/runs/{run_id}/checkpoints", response_model=models.Timeline)
def timeline(runs: ReadRuns, run_id: str,
             superseded: bool = Query(True, description="Include lines a rewind left behind")) -> Dict[str, Any]:
    """A run's timeline: its checkpoints (stable ids) with message boundaries and previews."""
    thread = runs.thread(run_id)
    entries = [to_jsonable(e.to_dict(), "timeline") for e in runs.timeline(run_id, superseded=superseded)]
    return {**run_of_thread(thread), "thread": thread, "checkpoints": entries}


@router.get("/api/runs/{run_id}/checkpoints/{at}", response_model=models.SnapshotView)
def snapshot(runs: ReadRuns, run_id: str,
             at: str = Path(description="A message index (pair-safe; snapped down) or a checkpoint id from the "
                                        "timeline")) -> Dict[str, Any]:
    """The run as it truly was at a message boundary or checkpoint (never writes); its owner lease and
    takeovers are bookkeeping, left out (as `qvc show RUN@N --json`)."""
    where: Any = int(at) if INDEX.match(at) else at
    return to_jsonable(shown_run(runs.snapshot(run_id, where).to_dict()), "snapshot")
