"""The agent the tests give ``qvc serve --agent tests.server_agent:scripted``: the samples' scripted
model and tools, slowed down so that a test sees the run owned while the agent records it."""

from __future__ import annotations

from qvc.runs import RunRecorder
from samples.scripted_agent import RESEARCH_PLAN, ScriptedModel, drive, make_tools


def scripted(rec: RunRecorder) -> None:
    drive(rec, ScriptedModel(RESEARCH_PLAN), make_tools(delay=0.2))
