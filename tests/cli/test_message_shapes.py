"""Tool calls read right in every text view, whatever shape the agent stored them in (issue 32):
the quick start's ``{"tool", "args"}`` (the README's demo showed ``→ None(...)``), OpenAI's chat
format ``{"function": {"name", "arguments": "<JSON>"}}``, Anthropic's ``{"name", "input"}`` and
agno's ``{"tool_name", "tool_args"}``. Each through the real ``qvc`` command line."""

from __future__ import annotations

import sys

import pytest
from helpers import ROOT, qvc

from qvc import CheckpointConfig, GitCheckpointStore

sys.path.insert(0, str(ROOT / "samples"))  # the sample imports its neighbour sample_repo as a script does
from quickstart import calculator, run, search, start  # noqa: E402

#: the views that print messages one a line
VIEWS = (["show", "france"], ["show", "--raw", "france"], ["diff", "france~2", "france"],
         ["log", "-p", "-n", "3", "france"], ["blame", "messages", "france"])


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    """The quick start's run on thread ``france``, written by the sample's own loop."""
    path = tmp_path_factory.mktemp("shapes") / "q.qvc"
    with GitCheckpointStore(path) as store:
        run(store, start(store, "france", "How many people live per km² in France?"),
            {"search": search, "calculator": calculator})
    return path


@pytest.mark.parametrize("view", VIEWS, ids=lambda v: " ".join(v))
def test_the_quickstarts_tool_calls_are_named_in_every_view(quickstart, view):
    out = qvc("--repo", str(quickstart), "--no-pager", *view).stdout
    assert "None(" not in out and "?(" not in out, out
    if view[0] in ("show", "blame"):
        assert '→ search({"query": "population of France"})' in out or '→ search({"query": "populati' in out, out
    assert '→ calculator({"expression": ' in out, out


CALLS = {
    "openai": {"id": "c1", "type": "function",
               "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}},
    "anthropic": {"id": "c1", "type": "tool_use", "name": "weather", "input": {"city": "Oslo"}},
    "agno": {"id": "c1", "tool_name": "weather", "tool_args": {"city": "Oslo"}},
    "shared": {"id": "c1", "name": "weather", "args": {"city": "Oslo"}},
}


@pytest.mark.parametrize("shape", sorted(CALLS))
def test_each_shape_of_tool_call_reads_with_its_name_and_arguments(tmp_path, shape):
    from qvc import Checkpoint

    path = tmp_path / "r.qvc"
    asked = [{"role": "user", "content": "Weather in Oslo?"}]
    called = asked + [{"role": "assistant", "content": "", "tool_calls": [CALLS[shape]]},
                      {"role": "tool", "tool_call_id": "c1", "content": "3°C"}]
    with GitCheckpointStore(path) as store:
        for step, messages in enumerate((asked, called)):
            store.put(CheckpointConfig("t"), Checkpoint(id=f"c{step}", thread_id="t", step=step,
                                                        state_data={"messages": messages}), {"source": "loop"})
    for view in (["show", "t"], ["diff", "t~1", "t"], ["blame", "messages", "t"]):
        out = qvc("--repo", str(path), "--no-pager", *view).stdout
        assert '→ weather({"city": "Oslo"})' in out, (view, out)
