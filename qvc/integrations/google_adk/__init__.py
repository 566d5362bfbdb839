"""Google ADK: ``QvcSessionService`` (sessions, :mod:`.sessions`) and ``QvcArtifactService``
(versioned files, :mod:`.artifacts`) over a qvc repository; how they are laid out (:mod:`.layout`)
and shown to readers (:mod:`.viewer`).

``Runner(..., session_service=QvcSessionService("runs.qvc"))``: each stored event is a checkpoint
on the session's thread. Needs the ``google-adk`` extra (``pip install "qvc[google-adk]"``).
The names below are imported on first use, so the viewer (which needs no ADK) shows a session
on a machine without ADK installed.
"""

from __future__ import annotations

from typing import Any

__all__ = ["QvcArtifactService", "QvcSessionService"]


def __getattr__(name: str) -> Any:
    if name == "QvcArtifactService":
        from qvc.integrations.google_adk import artifacts

        return artifacts.QvcArtifactService
    if name == "QvcSessionService":
        from qvc.integrations.google_adk import sessions

        return sessions.QvcSessionService
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
