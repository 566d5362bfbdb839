"""A pytest plugin that runs Microsoft Agent Framework's own workflow tests on ``QvcCheckpointStorage``.

The framework's tests take their checkpoint storage from ``agent_framework.InMemoryCheckpointStorage``
and ``agent_framework.FileCheckpointStorage`` (its storage conformance suite is parametrized over
both). This plugin replaces both names in the ``agent_framework`` module, before any test module
imports them, by subclasses of ``QvcCheckpointStorage`` with their constructors: each instance is a
repository of its own (the file storage's directory holds it). The framework's own code takes its
storages from its submodules and is left as it is. Run from the framework's source tree
(``python/packages/core``; docs/agent-framework.md says how)::

    PYTHONPATH=/path/to/qvc/tests/integrations python -m pytest -q -p agent_framework_suite_plugin \\
        tests/workflow/test_checkpoint_storage_conformance.py tests/workflow/test_checkpoint.py ...

Tests of what only a file storage has (its files, their JSON, a corrupted file) are not about the
protocol; ``QVC_SUITE_DESELECT`` (comma-separated name parts) leaves them out. The in-memory storage
deep-copies and so keeps any type; a storage that persists checkpoints (the framework's file storage,
qvc's) loads only the types its allow-list names: ``QVC_SUITE_ALLOWED`` (comma-separated
``module:qualname``) gives the in-memory stand-in the test modules' own types.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path
from typing import Any, Iterable, List, Optional

import agent_framework

from qvc.integrations.agent_framework import QvcCheckpointStorage

ROOT = Path(tempfile.mkdtemp(prefix="qvc-maf-suite-"))
_made: List[QvcCheckpointStorage] = []


class QvcInMemoryCheckpointStorage(QvcCheckpointStorage):
    """``InMemoryCheckpointStorage()``: a fresh repository per instance."""

    def __init__(self) -> None:
        allowed = [t for t in os.environ.get("QVC_SUITE_ALLOWED", "").split(",") if t]
        super().__init__(ROOT / f"{uuid.uuid4().hex}.qvc", allowed_checkpoint_types=allowed)
        _made.append(self)


class QvcFileCheckpointStorage(QvcCheckpointStorage):
    """``FileCheckpointStorage(storage_path, allowed_checkpoint_types=...)``: a repository in that directory."""

    def __init__(self, storage_path: Any, *, allowed_checkpoint_types: Optional[Iterable[str]] = None) -> None:
        self.storage_path = Path(storage_path)
        self.storage_path.mkdir(parents=True, exist_ok=True)
        super().__init__(self.storage_path / "checkpoints.qvc", allowed_checkpoint_types=allowed_checkpoint_types)
        _made.append(self)


def pytest_configure(config: Any) -> None:
    agent_framework.InMemoryCheckpointStorage = QvcInMemoryCheckpointStorage
    agent_framework.FileCheckpointStorage = QvcFileCheckpointStorage


def pytest_collection_modifyitems(config: Any, items: list) -> None:
    parts = [p for p in os.environ.get("QVC_SUITE_DESELECT", "").split(",") if p]
    if not parts:
        return
    keep, drop = [], []
    for item in items:
        (drop if any(p in item.nodeid for p in parts) else keep).append(item)
    items[:] = keep
    config.hook.pytest_deselected(items=drop)


def pytest_unconfigure(config: Any) -> None:
    for storage in _made:
        storage.close()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    terminalreporter.write_line(f"qvc: {len(_made)} QvcCheckpointStorage repositories under {ROOT}")
