"""LangGraph's pending writes read the same everywhere: ``qvc show`` (text, ``--raw``, ``--json``),
``qvc status`` and ``qvc fsck`` see what the framework itself sees through ``QvcSaver``.

The saver keeps a thread's pending writes in the store's keyed layout (one ref per thread,
``refs/qvc/writes/lg/<thread>/%all``, a subtree per checkpoint id); the readers once knew only the
per-commit refs, so ``show`` said "Pending writes: none" where LangGraph had some, ``status``
counted refs (one for the whole thread, and pydantic-ai's records as well) and ``fsck`` never
decoded them. The repository is written by the real LangGraph loop, offline
(``samples/langgraph_agent.py``: a scripted chat model, LangGraph's ToolNode, a fork); every
reader runs as the real ``qvc`` command in a process of its own.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from helpers import LANGGRAPH, QVC, ROOT, child_env, git_env, qvc, qvc_json, without

pytest.importorskip("langgraph.prebuilt", reason="LangGraph is in the test extra")

from qvc.integrations.langgraph import QvcSaver  # noqa: E402
from qvc.integrations.langgraph.viewer import internal  # noqa: E402

THREAD = "cities"
ALL = f"refs/qvc/writes/lg/{THREAD}/%all"


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """The sample's repository: thread ``cities``, a question, a tool batch, an answer, a fork."""
    where = tmp_path_factory.mktemp("lg")
    path = where / "lg.qvc"
    subprocess.run([sys.executable, str(ROOT / "samples" / "langgraph_agent.py"), "--repo", str(path)], cwd=where,
                   env=child_env(), check=True, capture_output=True, timeout=300)
    return path


@pytest.fixture(scope="module")
def seen(repo) -> dict:
    """What LangGraph sees: checkpoint id -> its pending writes ``(task, channel, value)``."""
    with QvcSaver(repo, create=False) as saver:
        return {t.config["configurable"]["checkpoint_id"]: list(t.pending_writes)
                for t in saver.list({"configurable": {"thread_id": THREAD}})}


def test_the_sample_has_pending_writes_where_langgraph_sees_them(seen):
    assert len(seen) == 8
    assert sum(1 for writes in seen.values() if writes) == 6  # the trial's count


def test_show_lists_every_checkpoints_pending_writes(repo, seen):
    for cid, writes in seen.items():
        raw = qvc_json("--repo", str(repo), "show", "--raw", cid)["pending_writes"]
        assert sorted((w["task"], w["channel"]) for w in raw) == sorted((t, c) for t, c, _ in writes), cid
        shown = qvc_json("--repo", str(repo), "show", cid)["pending_writes"]
        visible = [(t, c, v) for t, c, v in writes if not internal(c)]
        assert [(w["task"], w["channel"]) for w in shown] == [(t, c) for t, c, _ in visible], cid
        for w, (_, _, value) in zip(shown, visible, strict=True):  # decoded: messages in the conversation shape
            assert [(m["role"], m["content"], m["id"]) for m in w["value"]] == [
                ({"ai": "assistant", "tool": "tool", "human": "user"}[m.type], m.content, m.id) for m in value]
        text = qvc("--repo", str(repo), "--no-pager", "show", cid).stdout
        if visible:
            assert f"Pending writes ({len(visible)}):" in text, text
            assert "langchain_core" not in text.split("Pending writes")[1]
        else:
            assert "Pending writes: none" in text
        raw_text = qvc("--repo", str(repo), "--no-pager", "show", "--raw", cid).stdout
        assert (f"Pending writes ({len(writes)}):" if writes else "Pending writes: none") in raw_text


def test_show_decodes_the_writes_without_langgraph_installed(repo, seen, tmp_path):
    cid = next(c for c, writes in seen.items() if any(ch == "messages" for _, ch, _ in writes))
    proc = subprocess.run([*QVC, "--repo", str(repo), "show", "--json", cid], env=without(tmp_path, *LANGGRAPH),
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    data = json.loads(proc.stdout)
    assert data["notes"] and "qvc[langgraph]" in data["notes"][0]
    expected = [(t, c, [m.content for m in v]) for t, c, v in seen[cid] if not internal(c)]
    assert [(w["task"], w["channel"], [m["content"] for m in w["value"]]) for w in data["pending_writes"]] == expected


def test_status_counts_checkpoints_with_pending_writes(repo, seen):
    with_writes = sum(1 for writes in seen.values() if writes)
    assert qvc_json("--repo", str(repo), "status")["pending_writes"] == with_writes
    assert f"{with_writes} checkpoint(s) with pending writes" in qvc("--repo", str(repo), "status").stdout


def test_fsck_decodes_every_set_and_reports_a_damaged_one(repo, seen, tmp_path):
    with_writes = sum(1 for writes in seen.values() if writes)
    out = qvc("--repo", str(repo), "fsck").stdout
    assert f"{with_writes} set(s) of pending writes: ok" in out, out

    # damage one write of one set, as the trial did: a blob that is no msgpack
    bad = tmp_path / "bad.qvc"
    shutil.copytree(repo, bad)
    env = {**git_env(bad), "GIT_INDEX_FILE": str(tmp_path / "index"), "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}

    def git(*args: str, stdin: str | None = None) -> str:
        return subprocess.run(["git", *args], env=env, input=stdin, capture_output=True, text=True,
                              check=True).stdout.strip()

    path = next(p for p in git("ls-tree", "-r", "--name-only", ALL).splitlines()
                if not p.endswith((".order", ".nolegacy")))
    blob = git("hash-object", "-w", "--stdin", stdin="garbage\n")
    git("read-tree", ALL)
    git("update-index", "--cacheinfo", f"100644,{blob},{path}")
    git("update-ref", ALL, git("commit-tree", git("write-tree"), "-p", ALL, "-m", "corrupt"))

    proc = qvc("--repo", str(bad), "fsck", check=5)
    cid = path.split("/")[4]
    assert f"{with_writes - 1} set(s) of pending writes: 1 problem(s)" in proc.stdout, proc.stdout
    assert len(proc.stderr.strip().splitlines()) == 1 and cid in proc.stderr and ALL in proc.stderr, proc.stderr
    report = qvc_json("--repo", str(bad), "fsck", check=5)
    assert not report["ok"] and len(report["problems"]) == 1 and cid in report["problems"][0]
    # showing that checkpoint says what does not decode, in one line, exit 5
    shown = qvc("--repo", str(bad), "show", cid, check=5)
    assert len(shown.stderr.strip().splitlines()) == 1 and "write" in shown.stderr, shown.stderr
