"""LangGraph's own conformance suite (``langgraph-checkpoint-conformance``, pinned) against QvcSaver.

The same suite runs against LangGraph's ``AsyncSqliteSaver`` in the same test run as a control:
if the control stops passing its base capabilities, the suite (not qvc) changed.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
import shutil
import tempfile

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")

from langgraph.checkpoint.conformance import checkpointer_test, validate  # noqa: E402
from langgraph.checkpoint.conformance.capabilities import (  # noqa: E402
    ALL_CAPABILITIES,
    BASE_CAPABILITIES,
    EXTENDED_CAPABILITIES,
)
from langgraph.checkpoint.conformance.report import CapabilityReport  # noqa: E402

from qvc.integrations.langgraph import QvcSaver  # noqa: E402

SUITE_VERSION = "0.0.2"
# Tests per capability in conformance 0.0.2 (81 in all): a pass must run them all.
EXPECTED = {"put": 17, "put_writes": 10, "get_tuple": 10, "list": 16, "delete_thread": 5,
            "delete_for_runs": 7, "copy_thread": 8, "prune": 8}


def _summary(report: CapabilityReport) -> str:
    lines = [f"{report.checkpointer_name}: {report.conformance_level()}"]
    for name, r in sorted(report.results.items()):
        lines.append(f"  {name:16s} detected={r.detected} passed={r.tests_passed} failed={r.tests_failed}"
                     + "".join(f"\n    {f}" for f in r.failures))
    return "\n".join(lines)


def test_suite_version_is_pinned() -> None:
    assert importlib.metadata.version("langgraph-checkpoint-conformance") == SUITE_VERSION
    assert {c.value for c in ALL_CAPABILITIES} == set(EXPECTED)


@pytest.mark.parametrize("durability", ["sync", "exit"])
def test_qvc_saver_passes_every_capability(tmp_path, durability) -> None:
    @checkpointer_test(name=f"QvcSaver[{durability}]")
    async def qvc_saver():
        # A fresh repository on disk for every capability suite, as the suite requires.
        path = tempfile.mkdtemp(dir=tmp_path)
        async with QvcSaver(os.path.join(path, "lg.qvc"), durability=durability) as saver:
            yield saver
        shutil.rmtree(path)

    report = asyncio.run(validate(qvc_saver))
    print(_summary(report))
    assert report.passed_all_base(), _summary(report)
    assert report.passed_all(), _summary(report)
    for cap in BASE_CAPABILITIES | EXTENDED_CAPABILITIES:  # every capability detected and fully run
        result = report.results[cap.value]
        assert result.detected and result.passed, _summary(report)
        assert (result.tests_passed, result.tests_failed) == (EXPECTED[cap.value], 0), _summary(report)
    assert report.conformance_level() == "FULL"


def test_async_sqlite_saver_control(tmp_path) -> None:
    """The control: LangGraph's AsyncSqliteSaver passes the base capabilities of the same suite."""
    aio = pytest.importorskip("langgraph.checkpoint.sqlite.aio")

    @checkpointer_test(name="AsyncSqliteSaver")
    async def sqlite_saver():
        path = tempfile.mkdtemp(dir=tmp_path)
        async with aio.AsyncSqliteSaver.from_conn_string(os.path.join(path, "lg.sqlite")) as saver:
            yield saver
        shutil.rmtree(path)

    report = asyncio.run(validate(sqlite_saver))
    print(_summary(report))
    assert report.passed_all_base(), _summary(report)
    for cap in BASE_CAPABILITIES:
        assert report.results[cap.value].tests_passed == EXPECTED[cap.value], _summary(report)
