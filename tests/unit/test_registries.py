"""The store's registries for adapters: thread-name prefixes, viewers, thread names, writes keys."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from helpers import child_env

from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
from qvc.errors import InvalidInputError, QvcError
from qvc.plumbing.repository import publish_open
from qvc.store.prefixes import PrefixCollisionError, owner_of, prefixes, register_prefix
from qvc.store.threadnames import RACY_NS, ThreadNames
from qvc.store.writes import writes_commit


def put(store: GitCheckpointStore, thread: str, cid: str, **state) -> str:
    store.put(CheckpointConfig(thread), Checkpoint(id=cid, thread_id=thread, step=0, state_data=state), {})
    return store.head(thread)


def settled(path, names: ThreadNames):
    """The signature once every write is in git's files and they are old enough to be trusted."""
    publish_open(path)
    deadline = time.monotonic() + 30
    while (signature := names.signature()) is None and time.monotonic() < deadline:
        time.sleep(RACY_NS / 1e9)
    assert signature is not None
    return signature


# -- thread-name prefixes ---------------------------------------------------------------------


def test_the_built_in_owners_hold_the_names_they_always_wrote():
    from qvc.runs.ids import THREAD_PREFIX, thread_of

    assert THREAD_PREFIX == "run/" and thread_of("s", "r") == "run/s/r"
    assert owner_of("run/s/r") == "runs" and prefixes()["run/"] == "runs"
    assert owner_of("chat-1") is None  # a name of the user's own (a LangGraph thread id, say)


def test_agno_sessions_are_registered_and_keep_their_names():
    pytest.importorskip("agno")
    from qvc.integrations.agno.index import SESSION_PREFIX, session_thread

    assert SESSION_PREFIX == "agno/session/" and session_thread("s1") == "agno/session/s1"
    assert owner_of("agno/session/s1") == "agno.sessions"


def test_a_prefix_that_collides_with_another_owners_is_refused():
    register_prefix("test.alpha", "zz-alpha/")
    assert register_prefix("test.alpha", "zz-alpha/") == "zz-alpha/"  # again, as a re-import does
    for prefix in ("zz-alpha/", "zz-alpha/inner/", "zz-al", "z"):  # equal, longer, shorter
        with pytest.raises(PrefixCollisionError, match="test.alpha") as caught:
            register_prefix("test.beta", prefix)
        assert isinstance(caught.value, QvcError) and repr(prefix) in str(caught.value)
    assert owner_of("zz-alpha/x") == "test.alpha" and owner_of("zz-al") is None
    assert register_prefix("test.beta", "zz-alphabet/") == "zz-alphabet/"  # neither starts the other
    assert owner_of("zz-alphabet/x") == "test.beta"
    assert register_prefix("test.alpha", "zz-alpha2/") == "zz-alpha2/"  # an owner may hold several
    with pytest.raises(PrefixCollisionError):
        register_prefix("test.gamma", "run/")
    for owner, prefix in (("", "zz-x/"), ("test.x", ""), ("test.x", None)):
        with pytest.raises(InvalidInputError):
            register_prefix(owner, prefix)


# -- viewers ------------------------------------------------------------------------------------


def test_the_langgraph_viewer_is_declared_as_an_entry_point():
    from importlib.metadata import entry_points

    declared = {ep.name: ep.value for ep in entry_points(group="qvc.viewers")}
    assert declared.get("langgraph") == "qvc.integrations.langgraph.viewer:view", (
        "the qvc.viewers entry points are missing: run `pip install -e .` again after changing pyproject.toml")


def test_the_runs_viewer_is_declared_under_its_metadata_source():
    from importlib.metadata import entry_points

    declared = {ep.name: ep.value for ep in entry_points(group="qvc.viewers")}
    assert declared.get("source:run") == "qvc.runs.viewer:view", (
        "the qvc.viewers entry points are missing: run `pip install -e .` again after changing pyproject.toml")


def test_a_run_checkpoint_is_found_by_its_metadata_source_and_shown_as_a_conversation(tmp_path):
    from qvc.runs import Runs
    from qvc.store.viewers import viewer_of

    path = tmp_path / "r.qvc"
    with Runs(path) as runs:
        with runs.start("hello", run_id="r", session_id="s") as rec:
            rec.add_message({"role": "assistant", "content": "hi"})
            rec.complete("hi")
        store = runs.store
        sha = store.head("run/s/r")
        plain = put(store, "t", "c1", x=1)
        assert viewer_of(store, plain) is None
        out = _show(path, f"from qvc.store.viewers import view_state\n"
                          f"state = view_state(store, {sha!r}, store.read({sha!r}).checkpoint.state_data)\n"
                          "out = [sorted(state), [(m['role'], m['content']) for m in state['messages']]]")
    assert out[0] == ["content", "error", "messages", "metrics", "run", "session_state", "status"]
    assert out[1] == [["user", "hello"], ["assistant", "hi"]]


def _show(path, code: str) -> dict:
    """Run ``code`` in a fresh interpreter with ``store`` open at ``path``; it sets ``out``."""
    script = (f"import json, sys\nfrom qvc import GitCheckpointStore\n"
              f"store = GitCheckpointStore({os.fspath(path)!r}, readonly=True)\n{code}\n"
              "print(json.dumps(out, default=repr))\n")
    proc = subprocess.run([sys.executable, "-c", script], env=child_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_showing_a_plain_checkpoint_imports_no_framework(tmp_path):
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        sha = put(store, "t", "c1", x=1)
    out = _show(path, f"from qvc.readers.views import checkpoint_json\n"
                      f"shown = checkpoint_json(store, {sha!r})\n"
                      "out = [shown['state'], sorted(m for m in sys.modules if m.split('.')[0] in "
                      "('langgraph', 'agno') or m.startswith('qvc.integrations'))]")
    assert out == [{"x": 1}, []]


@pytest.fixture(scope="module")
def langgraph_repo(tmp_path_factory):
    pytest.importorskip("langgraph.graph")
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    from qvc.integrations.langgraph import QvcSaver

    class State(TypedDict):
        n: int

    g = StateGraph(State)
    g.add_node("a", lambda s: {"n": s["n"] + 1})
    g.add_edge(START, "a")
    g.add_edge("a", END)
    path = tmp_path_factory.mktemp("lg") / "g.qvc"
    with QvcSaver(path) as saver:
        g.compile(checkpointer=saver).invoke({"n": 41}, {"configurable": {"thread_id": "chat"}})
    with GitCheckpointStore(path) as store:
        return path, store.head("chat")


def test_a_langgraph_checkpoint_is_shown_through_its_viewer(langgraph_repo):
    path, sha = langgraph_repo
    out = _show(path, f"from qvc.store.viewers import view_state\n"
                      f"raw = store.read({sha!r}).checkpoint.state_data\n"
                      f"out = [raw['n'][0], view_state(store, {sha!r}, raw), 'langgraph' in sys.modules]")
    assert out[0] == "msgpack" and out[1] == {"n": 42} and out[2] is True


def test_a_registered_viewer_takes_precedence(langgraph_repo):
    path, sha = langgraph_repo
    out = _show(path, f"from qvc.store.viewers import register_viewer, view_state\n"
                      "register_viewer('langgraph', lambda store, sha, state, plain=False: {'seen': sorted(state)})\n"
                      f"out = [view_state(store, {sha!r}, store.read({sha!r}).checkpoint.state_data),"
                      " 'langgraph' in sys.modules]")
    assert out == [{"seen": ["n"]}, False]


def test_without_the_framework_the_values_are_read_from_their_serialized_form(langgraph_repo):
    path, sha = langgraph_repo
    out = _show(path, "sys.modules['langgraph'] = sys.modules['langchain_core'] = None  # importing them fails\n"
                      f"from qvc.store.viewers import notes, view_state\n"
                      f"raw = store.read({sha!r}).checkpoint.state_data\n"
                      f"out = [raw['n'][0], view_state(store, {sha!r}, raw), notes()]")
    assert out[:2] == ["msgpack", {"n": 42}]
    assert len(out[2]) == 1 and "pip install 'qvc[langgraph]'" in out[2][0]


# -- thread names ---------------------------------------------------------------------------------


def test_thread_names_list_every_thread_and_see_other_writers(tmp_path):
    path = tmp_path / "r.qvc"
    long_id = "x" * 300  # its branch name is hashed: the id is read from its head once
    with GitCheckpointStore(path) as store, GitCheckpointStore(path) as other:
        for thread in ("a", "run/s/r", long_id):
            put(store, thread, f"c-{thread[:5]}", x=1)
        names = ThreadNames(store)
        assert names.threads() == {"a", "run/s/r", long_id}
        before = settled(path, names)
        assert names.signature() == before  # nothing moved
        put(other, "b", "c-b", x=1)  # another store (as another process) creates a branch
        assert names.signature() != before
        assert names.threads() == {"a", "b", "run/s/r", long_id}
        before = settled(path, names)
        put(other, "a", "c-a2", x=2)  # a branch moves
        assert names.signature() != before
        other.delete_thread("b")
        assert names.threads() == {"a", "run/s/r", long_id}


def test_thread_names_see_this_process_writes_before_they_are_published(tmp_path):
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path, durability="async", max_lag=60) as store:
        names = ThreadNames(store)
        put(store, "late", "c1", x=1)
        assert not os.path.exists(path / "refs" / "heads" / "late")  # in git's files later
        assert "late" in names.threads()


# -- writes keys ----------------------------------------------------------------------------------


def test_writes_keys_are_a_commit_sha_or_opaque():
    sha = "0123456789abcdef0123456789abcdef01234567"
    assert writes_commit(sha) == sha
    for key in ("lg/chat/c1", sha.upper(), sha[:39], sha + "0", "", "g" * 40):
        assert writes_commit(key) is None
