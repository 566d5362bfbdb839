"""What the flow persistence and the checkpoint provider share: JSON-ready values and the repository
they open (imports CrewAI's pydantic only through its callers)."""

from __future__ import annotations

import json
from datetime import date, datetime
from typing import Any, Dict, Optional

from pydantic import BaseModel

from qvc.errors import InvalidInputError, SerializationError, StoreClosedError
from qvc.store.git_store import GitCheckpointStore
from qvc.types import DurabilityMode


class RepositoryOwner:
    """The repository a CrewAI store of qvc's works on, for a pydantic model that declares
    ``path``, ``durability`` and the private ``_store``, ``_own`` and ``_lock``: built from a
    repository path (``Cls("agent.qvc")``) or an open store (``store=``, which it does not close)."""

    def __init__(self, path: Any = None, /, *, store: Optional[GitCheckpointStore] = None, **kwargs: Any) -> None:
        if store is not None:
            kwargs["path"] = store.path
        elif path is not None:
            kwargs["path"] = str(path)
        if isinstance(kwargs.get("durability"), DurabilityMode):
            kwargs["durability"] = kwargs["durability"].value
        super().__init__(**kwargs)
        if store is not None:
            self._store, self._own = store, False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r})"

    @property
    def store(self) -> GitCheckpointStore:
        """The repository (opened on first use)."""
        with self._lock:
            if self._store is None:
                self._store = GitCheckpointStore(self.path, durability=self.durability)
            elif self._store.closed:
                raise StoreClosedError(f"{self!r} is closed")
            return self._store


def json_default(obj: Any) -> Any:
    """What CrewAI's SQLite flow store writes for a value JSON has no type for: a model's dump, a
    set or tuple as a list, a date as ISO 8601, anything else as ``str``."""
    if isinstance(obj, BaseModel):
        try:
            return obj.model_dump(mode="json")
        except Exception:
            return obj.model_dump(mode="python")
    if isinstance(obj, (set, tuple, frozenset)):
        return list(obj)
    if isinstance(obj, (date, datetime)):
        return obj.isoformat()
    return str(obj)


def state_fields(state_data: Any, what: str) -> Dict[str, Any]:
    """A flow state (a dict or a pydantic model) as the plain JSON object CrewAI's own store reads
    back; :class:`InvalidInputError` for anything else."""
    if isinstance(state_data, BaseModel):
        try:
            state = state_data.model_dump(mode="json")
        except Exception:
            state = state_data.model_dump(mode="python")
    elif isinstance(state_data, dict):
        state = state_data
    else:
        kind = type(state_data).__name__
        raise InvalidInputError(f"{what}: state_data must be a dict or a pydantic model, not {kind}")
    try:
        plain = json.loads(json.dumps(state, default=json_default))
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{what}: the state is not JSON: {exc}") from None
    if not all(isinstance(k, str) for k in plain):
        raise InvalidInputError(f"{what}: state keys must be strings")
    return plain
