"""End to end: real ``StateGraph`` runs (deterministic nodes, no LLM) checkpointed by QvcSaver.

LangGraph's ``InMemorySaver`` runs the same graphs as the oracle: checkpoint ids differ between
savers, but the history (values, next nodes, metadata, parent links, interrupts) must not.
Repositories are real, on disk; the durability tests write in a real subprocess and read back
in a new one.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("langgraph.graph")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workers"))

from helpers import child_env, fsck, run_git  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.types import Command  # noqa: E402
from langgraph_worker import Note, build, dump_values, human, run_turns, summarize  # noqa: E402

from qvc import CheckpointConfig, GitCheckpointStore  # noqa: E402
from qvc.integrations.langgraph import QvcSaver, split_thread_name, thread_name  # noqa: E402
from qvc.store.refnames import head_ref  # noqa: E402

WORKER = Path(__file__).resolve().parents[1] / "workers" / "langgraph_worker.py"


def _worker(*args: str) -> str:
    proc = subprocess.run([sys.executable, str(WORKER), *args], env=child_env(), capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"worker {args} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout.strip().splitlines()[-1]


def _config(thread: str, **extra) -> dict:
    return {"configurable": {"thread_id": thread, **extra}}


def test_import_qvc_does_not_import_langgraph() -> None:
    code = "import sys, qvc; assert not any(m.startswith('langgraph') for m in sys.modules), 'langgraph imported'"
    subprocess.run([sys.executable, "-c", code], env=child_env(), check=True, timeout=60)


def test_thread_names_are_reversible() -> None:
    for tid, ns in [("t1", ""), ("a/b", ""), ("a", "b"), ("a%2Fb", "x:y|z:w"), ("%", "ns:1")]:
        assert split_thread_name(thread_name(tid, ns)) == (tid, ns)
    assert thread_name("a/b") != thread_name("a", "b")


def test_multi_step_runs_history_and_git(tmp_path) -> None:
    repo = tmp_path / "chat.qvc"
    with QvcSaver(repo) as saver:
        graph = build("chat", saver)
        final = run_turns(graph, "t1", 3, "sync")
        history = summarize(graph, _config("t1"))
        state = graph.get_state(_config("t1"))
        assert isinstance(state.values["note"], Note) and state.values["note"].n == 5
        assert isinstance(state.values["messages"][0], HumanMessage)
    oracle = build("chat", InMemorySaver())
    assert final == run_turns(oracle, "t1", 3, "sync")
    assert history == summarize(oracle, _config("t1"))
    assert len(history) == 12  # 4 checkpoints per turn: input, user, bot, end of turn
    assert [h["step"] for h in history] == list(range(10, -2, -1))

    # The thread is a plain git branch holding qvc commits: git and qvc's own store read it.
    log = run_git(repo, "log", "--format=%s%n%(trailers:key=Checkpoint-Id,valueonly)", "refs/heads/t1").stdout
    assert log.count("step ") == 12
    ids = [t.config["configurable"]["checkpoint_id"] for t in QvcSaver(repo).list(_config("t1"))]
    assert all(cid in log for cid in ids)
    with GitCheckpointStore(repo, create=False) as store:
        assert store.threads() == ["t1"]
        line = list(store.list(CheckpointConfig("t1")))
        assert [t.checkpoint.id for t in line] == ids
        assert line[0].metadata["source"] == "loop"
    fsck(repo)


def test_replay_from_earlier_checkpoint_stays_in_thread(tmp_path) -> None:
    results = {}
    for label, saver in (("qvc", QvcSaver(tmp_path / "replay.qvc")), ("memory", InMemorySaver())):
        graph = build("chat", saver)
        run_turns(graph, "t", 2, "sync")
        before_bot = next(s for s in graph.get_state_history(_config("t")) if s.next == ("bot",))
        replayed = graph.invoke(None, before_bot.config)
        results[label] = (dump_values(replayed), summarize(graph, _config("t")))
        if label == "qvc":
            history = list(graph.get_state_history(_config("t")))
            ids = [s.config["configurable"]["checkpoint_id"] for s in history]
            assert ids == sorted(ids, reverse=True)  # every checkpoint of the tree, newest first
            assert before_bot.config["configurable"]["checkpoint_id"] in ids  # the old line is kept
            saver.close()
    assert results["qvc"] == results["memory"]
    assert len(results["qvc"][1]) == 8 + 2  # the replay added a fork checkpoint and the bot's


def test_update_state_and_fork(tmp_path) -> None:
    repo = tmp_path / "fork.qvc"
    results = {}
    for label, saver in (("qvc", QvcSaver(repo)), ("memory", InMemorySaver())):
        graph = build("chat", saver)
        run_turns(graph, "t", 2, "sync")
        first_turn_end = [s for s in graph.get_state_history(_config("t")) if s.next == ()][-1]
        forked = graph.update_state(first_turn_end.config, {"count": 100, "messages": [
            AIMessage(content="edited", id="edit-1")]}, as_node="bot")
        graph.invoke(human(9), forked)  # continue from the fork
        state = graph.get_state(_config("t"))
        results[label] = (dump_values(state.values), summarize(graph, _config("t")))
        if label == "qvc":
            assert state.values["count"] == 101
            assert state.parent_config is not None
            saver.close()
    assert results["qvc"] == results["memory"]
    # The fork is a time travel in the store's one model of threads: the head's first parent chain
    # goes through the edited checkpoint, the old head's line is kept as one superseded line, no
    # commit has a second parent, and the lines together hold every checkpoint of the history.
    assert run_git(repo, "rev-list", "--min-parents=2", "--all").stdout.split() == []
    lines = run_git(repo, "for-each-ref", "--format=%(refname)", "refs/qvc/superseded/t/").stdout.split()
    assert len(lines) == 1
    assert run_git(repo, "merge-base", "--is-ancestor", lines[0], "refs/heads/t", check=False).returncode != 0
    assert run_git(repo, "rev-list", "--count", "refs/heads/t", *lines).stdout.strip() == str(len(results["qvc"][1]))
    fsck(repo)


def test_interrupt_and_resume_across_reopen(tmp_path) -> None:
    repo = tmp_path / "interrupt.qvc"
    with QvcSaver(repo) as saver:
        graph = build("interrupt", saver)
        out = graph.invoke(human(0), _config("t"))
        assert out["__interrupt__"][0].value == {"question": "approve turn 1?"}
    with QvcSaver(repo, create=False) as saver:  # resume with a fresh saver on the same repository
        graph = build("interrupt", saver)
        state = graph.get_state(_config("t"))
        assert state.next == ("ask",) and state.interrupts[0].value == {"question": "approve turn 1?"}
        graph.invoke(Command(resume="yes"), _config("t"))
        values = graph.get_state(_config("t")).values
        assert [m.content for m in values["messages"]][-2:] == ["answer: yes", "reply to 2 messages"]
        history = summarize(graph, _config("t"))
    oracle = build("interrupt", InMemorySaver())
    oracle.invoke(human(0), _config("t"))
    oracle.invoke(Command(resume="yes"), _config("t"))
    assert history == summarize(oracle, _config("t"))


def test_async_graph_and_subgraph_namespaces(tmp_path) -> None:
    """ainvoke drives the async methods; an interrupted subgraph has its own namespace (branch)."""
    from langgraph.graph import START, StateGraph
    from langgraph_worker import State, _ask, _bot

    def subgraph():
        g = StateGraph(State)
        g.add_node("ask", _ask)
        g.add_edge(START, "ask")
        return g.compile()

    def parent(checkpointer):
        g = StateGraph(State)
        g.add_node("inner", subgraph())
        g.add_node("bot", _bot)
        g.add_edge(START, "inner")
        g.add_edge("inner", "bot")
        return g.compile(checkpointer=checkpointer)

    async def scenario(saver):
        graph = parent(saver)
        await graph.ainvoke(human(0), _config("t"))
        state = await graph.aget_state(_config("t"), subgraphs=True)
        sub_ns = state.tasks[0].state.config["configurable"]["checkpoint_ns"]
        await graph.ainvoke(Command(resume="ok"), _config("t"))
        final = await graph.aget_state(_config("t"))
        return sub_ns, dump_values(final.values), [s async for s in graph.aget_state_history(_config("t"))]

    async def with_qvc():
        async with QvcSaver(tmp_path / "sub.qvc") as saver:
            sub_ns, values, history = await scenario(saver)
            names = [t.config["configurable"]["checkpoint_ns"]
                     async for t in saver.alist(_config("t", checkpoint_ns=sub_ns))]
            every_ns = {t.config["configurable"]["checkpoint_ns"]
                        async for t in saver.alist({"configurable": {"thread_id": "t"}})}
            return sub_ns, values, len(history), names, every_ns

    sub_ns, values, n_history, names, every_ns = asyncio.run(with_qvc())
    _, oracle_values, oracle_history = asyncio.run(scenario(InMemorySaver()))
    assert sub_ns.startswith("inner:")
    assert values == oracle_values and n_history == len(oracle_history)
    assert every_ns == {"", sub_ns}  # no checkpoint_ns in the config: every namespace of the thread
    assert names and set(names) == {sub_ns}
    heads = run_git(tmp_path / "sub.qvc", "for-each-ref", "--format=%(refname)", "refs/heads/").stdout.split()
    assert sorted(heads) == sorted([head_ref(thread_name("t")), head_ref(thread_name("t", sub_ns))])


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_durability_modes_read_back_in_a_new_process(tmp_path, durability) -> None:
    repo = tmp_path / f"{durability}.qvc"
    final = json.loads(_worker("run", str(repo), "chat", durability, "t", "3"))
    history = json.loads(_worker("history", str(repo), "chat", "t"))
    oracle = build("chat", InMemorySaver())
    assert final == run_turns(oracle, "t", 3, durability)
    assert history == summarize(oracle, _config("t"))
    # "exit" checkpoints only when each invoke ends; the other modes checkpoint every step.
    assert len(history) == (3 if durability == "exit" else 12)
    assert history[0]["values"] == final
    fsck(repo)


def test_interrupt_resume_in_new_processes(tmp_path) -> None:
    repo = tmp_path / "i.qvc"
    final = json.loads(_worker("run", str(repo), "interrupt", "async", "t", "2"))
    history = json.loads(_worker("history", str(repo), "interrupt", "t"))
    oracle = build("interrupt", InMemorySaver())
    assert final == run_turns(oracle, "t", 2, "async", "interrupt")
    assert history == summarize(oracle, _config("t"))
