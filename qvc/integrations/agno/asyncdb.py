"""``AsyncQvcDb``: :class:`~qvc.integrations.agno.db.QvcDb` as an agno ``AsyncBaseDb``.

Each method runs the synchronous one in a worker thread (``asyncio.to_thread``), so a SYNC
checkpoint's flush never blocks the event loop; writes to one database are serialized by
:class:`QvcDb` itself. ``other=`` may be an async agno database (its coroutines are awaited)
or a synchronous one (run in a thread too). The methods agno declares synchronous on
``AsyncBaseDb`` (components, configs, links) stay synchronous: they are ``other``'s own.
Schema-version calls for ``other``'s tables go to ``other``.

Imports the adapter's ``db``.
"""

from __future__ import annotations

import abc
import asyncio
import inspect
import os
from typing import Any, Callable, Dict, Optional

from agno.db.base import AsyncBaseDb

from qvc.integrations.agno.db import ASYNC_TYPE, DELEGATED, QvcDb
from qvc.types import DurabilityMode

#: The methods AsyncQvcDb answers through QvcDb (the async twins of agno's ``AsyncBaseDb``).
OWN = ("get_session", "get_sessions", "upsert_session", "delete_session", "delete_sessions", "rename_session",
       "reassign_session_owner", "upsert_run", "get_run", "get_runs", "delete_run", "delete_runs",
       "cancel_pending_run", "calculate_metrics", "get_metrics")
#: Schema calls: QvcDb's answer for qvc's own tables, ``other``'s for the rest.
SCHEMA = ("table_exists", "get_latest_schema_version", "upsert_schema_version")


def _async(name: str) -> Callable[..., Any]:
    async def method(self: AsyncQvcDb, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(getattr(self.sync, name), *args, **kwargs)

    method.__name__ = name
    method.__qualname__ = f"AsyncQvcDb.{name}"
    method.__doc__ = f"``QvcDb.{name}`` in a worker thread."
    return method


def _schema(name: str) -> Callable[..., Any]:
    async def method(self: AsyncQvcDb, table_name: str, *args: Any, **kwargs: Any) -> Any:
        if self.other is not None and table_name not in (self.session_table_name, self.runs_table_name):
            return await _via_other(self.other, name)(table_name, *args, **kwargs)
        return await asyncio.to_thread(getattr(self.sync, name), table_name, *args, **kwargs)

    method.__name__ = name
    method.__qualname__ = f"AsyncQvcDb.{name}"
    method.__doc__ = f"``QvcDb.{name}`` for qvc's tables (in a worker thread), ``other``'s for the rest."
    return method


class AsyncQvcDb(AsyncBaseDb):
    """An async agno database over the qvc repository at ``path``; arguments as :class:`QvcDb`.

    ``sync`` is the underlying :class:`QvcDb` (use it for the same data from synchronous code); its
    ``id`` (derived from the repository's path) is this database's id unless ``id`` is given.
    """

    def __init__(self, path: str | os.PathLike = "runs.qvc", *,
                 durability: DurabilityMode | str = DurabilityMode.SYNC, other: Optional[Any] = None,
                 id: Optional[str] = None, sync: Optional[QvcDb] = None):
        self.sync = sync if sync is not None else QvcDb(path, durability=durability, other=None, id=id)
        super().__init__(id=id if id is not None else self.sync.id)
        self.path = self.sync.path
        self.other = other
        if other is not None:
            for name, value in vars(AsyncBaseDb).items():
                if not callable(value) or name.startswith("_") or name in OWN or name in SCHEMA or \
                        name in ("to_dict", "from_dict", "close") or not hasattr(other, name):
                    continue
                if inspect.iscoroutinefunction(value):
                    setattr(self, name, _via_other(other, name))
                else:  # agno declares it synchronous: other's own method, called as agno calls it
                    setattr(self, name, getattr(other, name))

    def __repr__(self) -> str:
        return f"AsyncQvcDb({self.path!r})"

    def to_dict(self) -> Dict[str, Any]:
        """agno's serialized form of this database (type ``"qvc-async"``; :meth:`from_dict` rebuilds it)."""
        out = dict(self.sync.to_dict(), type=ASYNC_TYPE, id=self.id)
        out["other"] = self.other.to_dict() if self.other is not None and hasattr(self.other, "to_dict") else None
        return out

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> AsyncQvcDb:
        """The database :meth:`to_dict` described (``other`` rebuilt with agno's ``db_from_dict``)."""
        from agno.db.utils import db_from_dict

        return cls(data["path"], durability=data.get("durability") or DurabilityMode.SYNC, id=data.get("id"),
                   other=db_from_dict(data["other"]) if isinstance(data.get("other"), dict) else None)

    async def close(self) -> None:
        """Close the repository (and ``other``, if it has ``close``)."""
        await asyncio.to_thread(self.sync.close)
        closer = getattr(self.other, "close", None)
        if callable(closer):
            result = closer()
            if inspect.isawaitable(result):
                await result


def _via_other(other: Any, name: str) -> Callable[..., Any]:
    target = getattr(other, name)

    async def method(*args: Any, **kwargs: Any) -> Any:
        if inspect.iscoroutinefunction(target):
            return await target(*args, **kwargs)
        return await asyncio.to_thread(target, *args, **kwargs)

    method.__name__ = name
    return method


def _not_stored(name: str) -> Callable[..., Any]:
    async def method(self: AsyncQvcDb, *args: Any, **kwargs: Any) -> Any:
        if self.other is not None:
            return await _via_other(self.other, name)(*args, **kwargs)
        return getattr(self.sync, name)(*args, **kwargs)  # raises NotStoredError, naming other=

    method.__name__ = name
    method.__qualname__ = f"AsyncQvcDb.{name}"
    method.__doc__ = f"agno's ``{name}``, delegated to ``other=`` (:class:`NotStoredError` without it)."
    return method


for _name in OWN:
    setattr(AsyncQvcDb, _name, _async(_name))
for _name in SCHEMA:
    setattr(AsyncQvcDb, _name, _schema(_name))
for _names in DELEGATED.values():
    for _name in _names:
        setattr(AsyncQvcDb, _name, _not_stored(_name))
abc.update_abstractmethods(AsyncQvcDb)
