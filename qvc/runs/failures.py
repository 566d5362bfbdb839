"""Recorded checkpoint failures: writes that failed where the caller may not see it (``qvc status`` lists them).

Frameworks such as agno catch a database exception and only log it, so a checkpoint that could
not be written is easy to miss. An adapter records each such failure here, one JSON line in
``<repo>/qvc/failures.log`` (time, operation, run, session, cause), appended with one
``write`` so concurrent writers never interleave a line. The file is a report, not history:
it is not part of any checkpoint, and ``clear_failures`` empties it.

Imports nothing of qvc.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, List, Optional

FAILURES = os.path.join("qvc", "failures.log")


def failures_path(repo_path: str) -> str:
    """The failure log of the repository at ``repo_path``."""
    return os.path.join(repo_path, FAILURES)


def record_failure(repo_path: str, *, operation: str, cause: str, run_id: Optional[str] = None,
                   session_id: Optional[str] = None) -> Dict[str, Any]:
    """Append one failure to the repository's log and return it. Raises :class:`OSError`."""
    entry = {"time": time.time(), "operation": operation, "run_id": run_id, "session_id": session_id,
             "cause": cause[:2000], "pid": os.getpid()}
    path = failures_path(repo_path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, (json.dumps(entry, default=str) + "\n").encode("utf-8"))
    finally:
        os.close(fd)
    return entry


def recorded_failures(repo_path: str, limit: Optional[int] = None) -> List[Dict[str, Any]]:
    """The recorded failures, oldest first (the last ``limit`` if given); lines that do not parse are skipped."""
    try:
        with open(failures_path(repo_path), encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            out.append(entry)
    return out[-limit:] if limit is not None else out


def clear_failures(repo_path: str) -> int:
    """Empty the failure log; returns how many failures it held."""
    count = len(recorded_failures(repo_path))
    try:
        os.unlink(failures_path(repo_path))
    except FileNotFoundError:
        pass
    return count
