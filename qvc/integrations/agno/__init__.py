"""agno: ``QvcDb``, a qvc repository as an agno database (``agno.db.base.BaseDb``), and ``AsyncQvcDb``.

``Agent(db=QvcDb("runs.qvc"), checkpoint="tool-batch", ...)``: sessions and runs are stored in
the repository, runs as qvc runs (:mod:`qvc.runs`), one checkpoint per ``upsert_run`` holding
what it added. Modules: :mod:`.codec` (agno rows as checkpoint state), :mod:`.index` (finding
runs and sessions), :mod:`.runstore` (runs), :mod:`.sessions` (session rows), :mod:`.db`
(``QvcDb``), :mod:`.asyncdb` (``AsyncQvcDb``), :mod:`.metrics` (agno's daily metrics),
:mod:`.config` (``db_from_dict``), :mod:`.scripted` (a scripted model for offline
runs). Needs the ``agno`` extra (``pip install "qvc[agno]"``).
"""

from qvc.integrations.agno.asyncdb import AsyncQvcDb
from qvc.integrations.agno.config import db_from_dict
from qvc.integrations.agno.db import NotStoredError, QvcDb
from qvc.integrations.agno.runstore import UnknownSessionError

__all__ = ["AsyncQvcDb", "NotStoredError", "QvcDb", "UnknownSessionError", "db_from_dict"]
