"""A pytest plugin that runs Strands Agents' own session and storage tests on qvc's classes.

Strands' tests build their backend by name in each test module: ``test_snapshot_session_manager.py``
gives ``SnapshotSessionManager`` a ``LocalFileStorage(dir)``, ``test_repository_session_manager.py``
gives ``RepositorySessionManager`` a ``MockedSessionRepository()`` (an in-memory repository of its
test fixtures), ``test_file_session_manager.py`` uses ``FileSessionManager(session_id,
storage_dir=dir)``, ``test_in_memory_storage.py`` and ``search/test_keyword.py`` an
``InMemoryStorage()``. Once the modules are collected, this plugin rebinds those names in them to
qvc's classes, each instance on a repository of its own (one per directory a test names, so two
instances on one directory share it): ``QvcStorage``, ``QvcSessionRepository`` and
``QvcSessionManager``. The tests' fixtures and bodies then run on qvc. Tests that check what only
the class they were written for has (its files on disk, its private helpers) are skipped, each
with its reason (:data:`NOT_APPLICABLE`). Run from Strands' source tree (the PyPI source archive
ships its tests; docs/strands.md says how)::

    PYTHONPATH=/path/to/qvc/tests/integrations:. python -m pytest -q -p strands_sdk_plugin \
        tests/strands/session/test_snapshot_session_manager.py \
        tests/strands/session/test_repository_session_manager.py \
        tests/strands/session/test_file_session_manager.py \
        tests/strands/storage/test_in_memory_storage.py tests/strands/storage/search/test_keyword.py
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import uuid
from pathlib import Path
from typing import Any, Dict, Optional

from qvc.integrations.strands import QvcSessionManager, QvcSessionRepository, QvcStorage

ROOT = Path(tempfile.mkdtemp(prefix="qvc-strands-suite-"))
_made: Dict[str, int] = {}


def _repository(directory: Optional[str] = None) -> str:
    """The repository standing for ``directory`` (``None``: a new one)."""
    name = hashlib.sha256(os.path.abspath(directory).encode()).hexdigest()[:16] if directory else uuid.uuid4().hex
    _made[name] = _made.get(name, 0) + 1
    return str(ROOT / f"{name}.qvc")


class QvcLocalFileStorage(QvcStorage):
    """``LocalFileStorage(base_dir, *, sandbox=None, search_strategy=None)`` over a QvcStorage."""

    def __init__(self, base_dir: str = "./.strands/", *, sandbox: Any = None, search_strategy: Any = None) -> None:
        if sandbox is not None:
            raise NotImplementedError("a QvcStorage does not run in a sandbox")
        super().__init__(_repository(base_dir), search_strategy=search_strategy)
        self.base_dir = base_dir


class QvcInMemoryStorage(QvcStorage):
    """``InMemoryStorage(*, search_strategy=None)`` over a QvcStorage in a new repository."""

    def __init__(self, *, search_strategy: Any = None) -> None:
        super().__init__(_repository(), search_strategy=search_strategy)


class QvcMockedSessionRepository(QvcSessionRepository):
    """``MockedSessionRepository()`` over a QvcSessionRepository in a new repository."""

    def __init__(self) -> None:
        super().__init__(_repository())


class QvcFileSessionManager(QvcSessionManager):
    """``FileSessionManager(session_id, storage_dir=None)`` over a QvcSessionManager."""

    def __init__(self, session_id: str, storage_dir: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__(session_id, _repository(storage_dir), **kwargs)


#: module -> {name in the module: qvc's class}
PATCHES = {
    "test_snapshot_session_manager": {"LocalFileStorage": QvcLocalFileStorage},
    "test_repository_session_manager": {"MockedSessionRepository": QvcMockedSessionRepository},
    "test_file_session_manager": {"FileSessionManager": QvcFileSessionManager},
    "test_in_memory_storage": {"InMemoryStorage": QvcInMemoryStorage},
    "test_keyword": {"InMemoryStorage": QvcInMemoryStorage},
}


#: Tests that check what only the class they were written for has, skipped with the reason.
#: (test module, test name prefix): reason
NOT_APPLICABLE = {
    ("test_file_session_manager", "test__get_"): "FileSessionManager's own path helpers (_get_session_path, ...)",
    **{("test_file_session_manager", name): "checks FileSessionManager's files on disk (its private path helpers)"
       for name in ("test_create_session", "test_delete_session", "test_create_agent", "test_create_message",
                    "test_message_durable_id_persists", "test_corrupted_json_file", "test_create_multi_agent",
                    "test_create_session_multi_agent_directory_structure")},
    ("test_in_memory_storage", "test_clear"): "InMemoryStorage.clear(), not in the Storage protocol",
    ("test_in_memory_storage", "test_namespace_clear_only_clears_prefix"): "InMemoryStorage.clear(), not in the "
                                                                          "Storage protocol",
    ("test_in_memory_storage", "test_namespace_returns_scoped_instance"): "checks Strands' private _NAMESPACED "
                                                                          "marker on the view",
    ("test_snapshot_session_manager", "test_prenamespaced_storage_is_not_double_prefixed"): (
        "needs Strands' private _NAMESPACED marker on namespace() views (docs/strands.md#limits)"),
    ("test_keyword", "test_skips_keys_where_read_returns_none"): "writes into InMemoryStorage's private dict",
    ("test_snapshot_session_manager", "test_save_writes_external_ref_for_durable_storage"): (
        "checks the stash's storage class is named 'LocalFileStorage'"),
}


def pytest_collection_modifyitems(session: Any, config: Any, items: list) -> None:
    import pytest

    for module in {item.module for item in items if getattr(item, "module", None) is not None}:
        for name, cls in PATCHES.get(module.__name__.rsplit(".", 1)[-1], {}).items():
            if hasattr(module, name):
                setattr(module, name, cls)
    for item in items:
        module = getattr(item, "module", None)
        short = module.__name__.rsplit(".", 1)[-1] if module is not None else ""
        for (where, start), reason in NOT_APPLICABLE.items():
            if short == where and item.name.startswith(start):
                item.add_marker(pytest.mark.skip(reason=f"not applicable to qvc: {reason}"))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    terminalreporter.write_line(f"qvc: the tests' backends were qvc's classes, on {len(_made)} repositories "
                                f"in {ROOT}")
