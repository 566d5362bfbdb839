"""Rebuilding an agno database from its serialized form (``db.to_dict()``), qvc's types included.

agno's own ``agno.db.utils.db_from_dict`` rebuilds only the types it ships (postgres, sqlite and
their async forms, clickhouse) and returns ``None`` for any other. :func:`db_from_dict` rebuilds
:class:`~qvc.integrations.agno.QvcDb` (``"type": "qvc"``) and
:class:`~qvc.integrations.agno.AsyncQvcDb` (``"qvc-async"``) and hands every other type to agno's.
Inside agno (``Agent.from_config`` and its team and workflow twins), a stored config finds a qvc
database through the registry (``Registry(dbs=[db])``), by its ``id``.

Imports the adapter's ``db`` and ``asyncdb``.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from qvc.integrations.agno.asyncdb import AsyncQvcDb
from qvc.integrations.agno.db import ASYNC_TYPE, TYPE, QvcDb


def db_from_dict(data: Dict[str, Any]) -> Optional[Any]:
    """The agno database ``data`` (a ``to_dict()``) describes: a :class:`QvcDb` or :class:`AsyncQvcDb` for
    qvc's types, else what agno's ``db_from_dict`` rebuilds (``None`` for a type it does not know)."""
    kind = data.get("type")
    if kind == TYPE:
        return QvcDb.from_dict(data)
    if kind == ASYNC_TYPE:
        return AsyncQvcDb.from_dict(data)
    from agno.db.utils import db_from_dict as agno_db_from_dict

    return agno_db_from_dict(data)
