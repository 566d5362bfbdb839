"""QvcSaver answers as LangGraph's own savers do: metadata kept whole, tuples read back as lists,
and DeltaChannel history read natively but exactly as the base class's generic walk reads it.

Compared side by side with ``InMemorySaver`` and ``SqliteSaver`` on the same inputs, and on real
``StateGraph`` runs with forks (``update_state`` from an older checkpoint) and subgraphs.
"""

import asyncio
import operator
from datetime import datetime, timezone
from typing import Annotated, TypedDict

import pytest

pytest.importorskip("langgraph.graph")

from langgraph.checkpoint.base import BaseCheckpointSaver  # noqa: E402
from langgraph.checkpoint.base.id import uuid6  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402

from qvc.integrations.langgraph import QvcSaver  # noqa: E402

try:
    from langgraph.channels.delta import DeltaChannel
except ImportError:  # langgraph before DeltaChannel
    DeltaChannel = None

METADATA = {
    "source": "loop", "step": 3, "parents": {},
    "writes": {"node": {"messages": ["hello"]}},  # a caller's key named like the one LangGraph once set
    "pair": (1, 2), "nested": {"deep": [(3, (4, "x"))], "t": ()}, "run_id": "r-1",
}


def _checkpoint() -> dict:
    return {"v": 1, "id": str(uuid6(clock_seq=-1)), "ts": datetime.now(timezone.utc).isoformat(),
            "channel_values": {"a": 1}, "channel_versions": {"a": 1}, "versions_seen": {}, "updated_channels": None}


def _cfg(thread: str, cid: str | None = None) -> dict:
    conf = {"thread_id": thread, "checkpoint_ns": ""}
    if cid is not None:
        conf["checkpoint_id"] = cid
    return {"configurable": conf}


@pytest.fixture
def savers(tmp_path):
    with QvcSaver(tmp_path / "r.qvc") as qvc, SqliteSaver.from_conn_string(str(tmp_path / "s.db")) as sqlite:
        yield {"qvc": qvc, "memory": InMemorySaver(), "sqlite": sqlite}


def test_metadata_is_kept_whole_and_tuples_read_back_as_lists(savers):
    got = {}
    for name, saver in savers.items():
        cp = _checkpoint()
        config = saver.put(_cfg("t"), cp, dict(METADATA), {"a": 1})
        got[name] = (saver.get_tuple(config).metadata, next(iter(saver.list(_cfg("t")))).metadata,
                     [t.metadata for t in saver.list(None, filter={"run_id": "r-1"})])
    assert got["memory"] == got["sqlite"], "the reference savers disagree: the test's premise is wrong"
    assert got["qvc"] == got["memory"]
    meta = got["qvc"][0]
    assert meta["writes"] == {"node": {"messages": ["hello"]}}
    assert meta["pair"] == [1, 2] and meta["nested"] == {"deep": [[3, [4, "x"]]], "t": []}


def test_metadata_after_reopening_is_the_same(tmp_path):
    path = tmp_path / "r.qvc"
    with QvcSaver(path) as saver:
        config = saver.put(_cfg("t"), _checkpoint(), dict(METADATA), {"a": 1})
        before = saver.get_tuple(config).metadata
    with QvcSaver(path) as saver:
        assert saver.get_tuple(config).metadata == before


# -- DeltaChannel history -------------------------------------------------------------------


def _extend(state, writes):
    out = list(state or [])
    for w in writes:
        out.extend(w if isinstance(w, list) else [w])
    return out


def _graph(checkpointer, delta: bool):
    # No `from __future__ import annotations` in this module: these annotations use local names.
    log_channel = Annotated[list, DeltaChannel(_extend, snapshot_frequency=3)] if delta else Annotated[
        list, operator.add]

    class State(TypedDict):
        log: log_channel
        total: Annotated[int, operator.add]
        last: str

    class Inner(TypedDict):
        log: log_channel
        last: str

    def inner_node(state: Inner) -> dict:
        return {"log": [f"inner:{len(state['log'])}"], "last": "inner"}

    inner = StateGraph(Inner)
    inner.add_node("inner_node", inner_node)
    inner.add_edge(START, "inner_node")
    inner.add_edge("inner_node", END)

    def a(state: State) -> dict:
        return {"log": [f"a{state['total']}"], "total": 1, "last": "a"}

    def b(state: State) -> dict:
        return {"log": [f"b{state['total']}", "b!"], "total": 2}

    def c(state: State) -> dict:
        return {"log": [f"c{len(state['log'])}"], "total": 3}

    g = StateGraph(State)
    g.add_node("a", a)
    g.add_node("b", b)
    g.add_node("c", c)
    g.add_node("sub", inner.compile())
    g.add_edge(START, "a")
    g.add_edge(START, "b")  # a and b run in one super-step: their writes to log are ordered
    g.add_edge("a", "c")
    g.add_edge("b", "c")
    g.add_edge("c", "sub")
    g.add_edge("sub", END)
    return g.compile(checkpointer=checkpointer)


def _run(saver, delta: bool) -> dict:
    """Three turns on thread t, a fork from an inner checkpoint edited with update_state, one more turn there."""
    graph = _graph(saver, delta)
    config = {"configurable": {"thread_id": "t"}}
    for i in range(3):
        graph.invoke({"log": [f"in{i}"], "total": 0, "last": ""}, config)
    history = list(graph.get_state_history(config))
    older = history[len(history) // 2].config
    forked = graph.update_state(older, {"log": ["edited"], "total": 10}, as_node="c")
    graph.invoke(None, forked)
    graph.invoke({"log": ["after"], "total": 0, "last": ""}, config)
    return config


def _all_configs(saver) -> list[dict]:
    return [t.config for t in saver.list(None)]


@pytest.mark.parametrize("delta", [False, True] if DeltaChannel is not None else [False])
def test_delta_channel_history_is_the_generic_walks_on_real_graphs(tmp_path, delta):
    channels = ["log", "total", "last", "__start__", "branch:to:c", "no-such-channel"]
    with QvcSaver(tmp_path / "r.qvc") as saver:
        config = _run(saver, delta)
        configs = _all_configs(saver)
        assert len(configs) > 20 and len({c["configurable"]["checkpoint_ns"] for c in configs}) > 1
        for cfg in configs + [config, _cfg("t", "no-such-id"), _cfg("no-such-thread")]:
            native = saver.get_delta_channel_history(config=cfg, channels=channels)
            generic = BaseCheckpointSaver.get_delta_channel_history(saver, config=cfg, channels=channels)
            assert native == generic, cfg
        assert saver.get_delta_channel_history(config=config, channels=[]) == {}
        some = [c for c in configs if saver.get_delta_channel_history(config=c, channels=["log"])["log"]["writes"]]
        assert some, "no checkpoint has writes on its path: the comparison above proved nothing"
        for cfg in configs[::5]:
            native = asyncio.run(saver.aget_delta_channel_history(config=cfg, channels=channels))
            generic = asyncio.run(BaseCheckpointSaver.aget_delta_channel_history(saver, config=cfg, channels=channels))
            assert native == generic


@pytest.mark.skipif(DeltaChannel is None, reason="this langgraph has no DeltaChannel")
def test_a_delta_channel_graph_has_the_same_state_history_as_on_the_memory_saver(tmp_path):
    with QvcSaver(tmp_path / "r.qvc") as saver:
        memory = InMemorySaver()
        ours, theirs = _graph(saver, True), _graph(memory, True)
        config = _run(saver, True)
        _run(memory, True)
        got = [(s.values, s.next, s.metadata["step"]) for s in ours.get_state_history(config)]
        want = [(s.values, s.next, s.metadata["step"]) for s in theirs.get_state_history(config)]
        assert got == want and got
