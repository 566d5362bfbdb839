"""``AsyncQvcDb``: :class:`~qvc.integrations.agno.db.QvcDb` as an agno ``AsyncBaseDb``.

Each method runs the synchronous one in a worker thread (``asyncio.to_thread``), so a SYNC
checkpoint's flush never blocks the event loop; writes to one database are serialized by
:class:`QvcDb` itself. ``other=`` may be an async agno database (its coroutines are awaited)
or a synchronous one (run in a thread too).

Imports the adapter's ``db``.
"""

from __future__ import annotations

import abc
import asyncio
import inspect
import os
from typing import Any, Callable, Optional

from agno.db.base import AsyncBaseDb

from qvc.integrations.agno.db import DELEGATED, QvcDb
from qvc.types import DurabilityMode

#: The methods AsyncQvcDb answers through QvcDb (the async twins of agno's ``AsyncBaseDb``).
OWN = ("table_exists", "get_latest_schema_version", "upsert_schema_version", "get_session", "get_sessions",
       "upsert_session", "delete_session", "delete_sessions", "rename_session", "upsert_run", "get_run",
       "get_runs", "delete_run", "delete_runs")


def _async(name: str) -> Callable[..., Any]:
    async def method(self: AsyncQvcDb, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(getattr(self.sync, name), *args, **kwargs)

    method.__name__ = name
    method.__qualname__ = f"AsyncQvcDb.{name}"
    method.__doc__ = f"``QvcDb.{name}`` in a worker thread."
    return method


class AsyncQvcDb(AsyncBaseDb):
    """An async agno database over the qvc repository at ``path``; arguments as :class:`QvcDb`.

    ``sync`` is the underlying :class:`QvcDb` (use it for the same data from synchronous code).
    """

    def __init__(self, path: str | os.PathLike = "runs.qvc", *,
                 durability: DurabilityMode | str = DurabilityMode.SYNC, other: Optional[Any] = None,
                 id: Optional[str] = None, sync: Optional[QvcDb] = None):
        super().__init__(id=id)
        self.sync = sync if sync is not None else QvcDb(path, durability=durability, other=None, id=self.id)
        self.path = self.sync.path
        self.other = other
        if other is not None:
            for name, value in vars(AsyncBaseDb).items():
                if callable(value) and not name.startswith("_") and name not in OWN and \
                        name not in ("to_dict", "from_dict", "close") and hasattr(other, name):
                    setattr(self, name, _via_other(other, name))

    def __repr__(self) -> str:
        return f"AsyncQvcDb({self.path!r})"

    def to_dict(self) -> dict:
        """agno's serialized form of this database (agno's ``db_from_dict`` does not rebuild it)."""
        return dict(self.sync.to_dict(), type="qvc-async")

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
for _names in DELEGATED.values():
    for _name in _names:
        setattr(AsyncQvcDb, _name, _not_stored(_name))
abc.update_abstractmethods(AsyncQvcDb)
