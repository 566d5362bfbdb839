"""Google ADK: ``QvcSessionService`` (sessions, :mod:`.sessions`) and ``QvcArtifactService``
(versioned files, :mod:`.artifacts`) over a qvc repository; how they are laid out (:mod:`.layout`)
and shown to readers (:mod:`.viewer`).

``Runner(..., session_service=QvcSessionService("runs.qvc"))``: each stored event is a checkpoint
on the session's thread. Needs the ``google-adk`` extra (``pip install "qvc[google-adk]"``).
"""

from qvc.integrations.google_adk.artifacts import QvcArtifactService
from qvc.integrations.google_adk.sessions import QvcSessionService

__all__ = ["QvcArtifactService", "QvcSessionService"]
