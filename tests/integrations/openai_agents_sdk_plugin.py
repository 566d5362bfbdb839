"""A pytest plugin that runs the OpenAI Agents SDK's own runner tests on ``QvcSession``.

The SDK's runner-level session tests (human in the loop, deferred session writes, resumes,
handoffs, compaction retries) build their session from ``tests.utils.simple_session.SimpleListSession``,
an in-memory list. This plugin replaces that class, before any test module imports it, by a
``QvcSession`` in a repository of its own (``CountingSession`` and ``IdStrippingSession``, its
subclasses there, follow). Run from the SDK's source tree (docs/openai-agents.md says how)::

    PYTHONPATH=/path/to/qvc/tests/integrations:. python -m pytest -q -p openai_agents_sdk_plugin \\
        tests/test_hitl_session_scenario.py tests/deferred_session_writes ...
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import types
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, List, Optional

from qvc.integrations.openai_agents import QvcSession

ROOT = Path(tempfile.mkdtemp(prefix="qvc-sdk-suite-"))


class QvcListSession(QvcSession):
    """``SimpleListSession``'s constructor and attributes over a ``QvcSession``."""

    def __init__(self, session_id: str = "test", history: Optional[List[Any]] = None) -> None:
        super().__init__(session_id, ROOT / f"{uuid.uuid4().hex}.qvc")
        self._ignore_ids_for_matching = False
        if history:  # stored as one add, from a thread of its own (the caller's loop may be running)
            with ThreadPoolExecutor(1) as pool:
                pool.submit(asyncio.run, self.add_items(list(history))).result()

    @property
    def saved_items(self) -> List[Any]:
        return self.items()


def pytest_configure(config: Any) -> None:
    import tests.utils  # the SDK's test package (a namespace package in its source tree)

    path = Path(list(tests.utils.__path__)[0]) / "simple_session.py"
    source = path.read_text()
    start = source.index("class SimpleListSession(")
    end = source.index("\nclass ", start + 1)
    source = source[:start] + "SimpleListSession = QvcListSession\n" + source[end:]
    module = types.ModuleType("tests.utils.simple_session")
    module.__file__ = str(path)
    module.QvcListSession = QvcListSession
    exec(compile(source, str(path), "exec"), module.__dict__)
    sys.modules["tests.utils.simple_session"] = module
    tests.utils.simple_session = module


def pytest_terminal_summary(terminalreporter: Any) -> None:
    made = len(list(ROOT.glob("*.qvc")))
    terminalreporter.write_line(f"qvc: {made} SimpleListSession(s) were QvcSessions, each in a repository of its own")
