"""QvcSaver's own contracts beyond the conformance suite: storage layout, writes upserts,
value sharing, fallbacks, rewrites and typed errors. Real repositories on disk."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from helpers import fsck, run_git  # noqa: E402
from langchain_core.messages import HumanMessage  # noqa: E402
from langgraph.checkpoint.base import ERROR, INTERRUPT  # noqa: E402
from langgraph.checkpoint.base.id import uuid6  # noqa: E402

from qvc import CheckpointConflictError, InvalidInputError  # noqa: E402
from qvc.integrations.langgraph import QvcSaver  # noqa: E402
from qvc.store.refnames import head_ref  # noqa: E402


def _cp(values: dict, versions: dict | None = None, **extra) -> dict:
    return {"v": 1, "id": str(uuid6(clock_seq=-1)), "ts": datetime.now(timezone.utc).isoformat(),
            "channel_values": values,
            "channel_versions": versions if versions is not None else dict.fromkeys(values, 1),
            "versions_seen": {}, "updated_channels": None, **extra}


def _cfg(thread: str, cid: str | None = None, ns: str = "") -> dict:
    conf = {"thread_id": thread, "checkpoint_ns": ns}
    if cid is not None:
        conf["checkpoint_id"] = cid
    return {"configurable": conf}


def _messages(n: int, start: int = 0) -> list:
    return [HumanMessage(content=f"message {i} " + "x" * 50, id=f"m{i}") for i in range(start, start + n)]


def test_unchanged_channels_share_blobs_and_long_lists_are_chunked(tmp_path) -> None:
    repo = tmp_path / "r.qvc"
    with QvcSaver(repo) as saver:
        cp1 = _cp({"msgs": _messages(200), "other": {"k": 1}})
        c1 = saver.put(_cfg("t"), cp1, {"step": 0}, {"msgs": 1, "other": 1})
        msgs = saver.get_tuple(c1).checkpoint["channel_values"]["msgs"]
        grown = msgs + _messages(1, 200)
        cp2 = _cp({"msgs": grown, "other": {"k": 1}}, {"msgs": 2, "other": 1})
        c2 = saver.put(_cfg("t", c1["configurable"]["checkpoint_id"]), cp2, {"step": 1}, {"msgs": 2})
        got = saver.get_tuple(c2)
        assert [m.id for m in got.checkpoint["channel_values"]["msgs"]] == [m.id for m in grown]
        assert got.checkpoint["channel_versions"] == {"msgs": 2, "other": 1}
    first, second = (run_git(repo, "ls-tree", "-r", ref).stdout.splitlines()
                     for ref in ("refs/heads/t~1", "refs/heads/t"))
    same = set(first) & set(second)
    assert any(line.endswith("\tother") for line in same)  # not in new_versions: the parent's blob
    assert sum(line.split("\t")[1].startswith("msgs/") for line in same) == 3  # chunks 0-2 of 4 shared
    assert {line.split("\t")[1] for line in second if line.startswith("100644")} >= {"msgs/00000003", ".qvc"}
    with QvcSaver(repo, share_values=False) as fresh:  # another process's view: decoded from disk
        assert [m.content for m in fresh.get_tuple(c2).checkpoint["channel_values"]["msgs"]] == [
            m.content for m in grown]
    fsck(repo)


def test_put_writes_upsert_rules_and_order(tmp_path) -> None:
    with QvcSaver(tmp_path / "w.qvc") as saver:
        config = saver.put(_cfg("t"), _cp({}), {}, {})
        saver.put_writes(config, [("a", 1), ("b", 2)], "task-2", task_path="~p2")
        saver.put_writes(config, [("a", "ignored"), (ERROR, "boom")], "task-2", task_path="~p2")
        saver.put_writes(config, [(ERROR, "boom again"), (INTERRUPT, {"q": 1})], "task-2", task_path="~p2")
        saver.put_writes(config, [("c", 3)], "task-1", task_path="~p1")
        writes = saver.get_tuple(config).pending_writes
    # (task_path, task_id, idx) order; the repeated regular write kept its first value;
    # the special channel's write was replaced.
    assert writes == [("task-1", "c", 3), ("task-2", INTERRUPT, {"q": 1}), ("task-2", ERROR, "boom again"),
                      ("task-2", "a", 1), ("task-2", "b", 2)]


def test_writes_may_come_before_their_checkpoint(tmp_path) -> None:
    """LangGraph's "async" durability can store a checkpoint's writes before its put completes."""
    with QvcSaver(tmp_path / "early.qvc") as saver:
        cp = _cp({"x": 1})
        saver.put_writes(_cfg("t", cp["id"]), [("x", 2)], "task")
        saver.put(_cfg("t"), cp, {}, {"x": 1})
        assert saver.get_tuple(_cfg("t")).pending_writes == [("task", "x", 2)]


def test_reput_same_is_noop_different_replaces(tmp_path) -> None:
    repo = tmp_path / "re.qvc"
    with QvcSaver(repo) as saver:
        cp = _cp({"x": 1})
        c1 = saver.put(_cfg("t"), cp, {"step": 0}, {"x": 1})
        head = saver.store.head("t")
        saver.put(_cfg("t"), cp, {"step": 0}, {"x": 1})
        assert saver.store.head("t") == head
        child = saver.put(c1, _cp({"x": 2}, {"x": 2}), {"step": 1}, {"x": 2})
        saver.put(_cfg("t"), {**cp, "channel_values": {"x": 10}}, {"step": 0}, {"x": 1})
        listed = list(saver.list(_cfg("t")))
        assert [t.checkpoint["id"] for t in listed] == [child["configurable"]["checkpoint_id"], cp["id"]]
        assert listed[1].checkpoint["channel_values"] == {"x": 10}
        assert listed[0].parent_config["configurable"]["checkpoint_id"] == cp["id"]
    fsck(repo)


def test_unusual_values_fall_back_to_the_saver_serde(tmp_path) -> None:
    from langgraph.types import Send

    with QvcSaver(tmp_path / "odd.qvc") as saver:
        # Metadata and extra checkpoint keys qvc's msgpack cannot hold go through the saver's serde.
        meta = {"source": "loop", "step": 3, "when": datetime(2026, 1, 2, tzinfo=timezone.utc), "tag": {1, 2}}
        config = saver.put(_cfg("t"), _cp({"v": b"\x00bytes"}, pending_sends=[Send("node", {"x": 1})]), meta, {"v": 1})
        got = saver.get_tuple(config)
        assert got.metadata == meta
        assert got.checkpoint["channel_values"] == {"v": b"\x00bytes"}
        assert got.checkpoint["pending_sends"] == [Send("node", {"x": 1})]


def test_odd_thread_ids_and_listing_everything(tmp_path) -> None:
    with QvcSaver(tmp_path / "ids.qvc") as saver:
        ids = ["a/b", "a", "%2F", "ünï cödé", "x" * 300]
        for tid in ids:
            saver.put(_cfg(tid), _cp({"tid": tid}), {}, {"tid": 1})
            saver.put(_cfg(tid, ns="child:1"), _cp({"tid": tid + "!"}), {}, {"tid": 1})
        everything = list(saver.list(None))
        assert sorted((t.config["configurable"]["thread_id"], t.config["configurable"]["checkpoint_ns"])
                      for t in everything) == sorted((t, ns) for t in ids for ns in ("", "child:1"))
        ids_desc = [t.checkpoint["id"] for t in everything]
        assert ids_desc == sorted(ids_desc, reverse=True)
        for tid in ids:
            assert saver.get_tuple(_cfg(tid)).checkpoint["channel_values"] == {"tid": tid}
            assert len(list(saver.list({"configurable": {"thread_id": tid}}))) == 2
        saver.delete_thread("a")
        assert {t.config["configurable"]["thread_id"] for t in saver.list(None)} == set(ids) - {"a"}


def test_delete_for_runs_keeps_descendants(tmp_path) -> None:
    repo = tmp_path / "runs.qvc"
    with QvcSaver(repo) as saver:
        c1 = saver.put(_cfg("t"), _cp({"n": 1}), {"run_id": "r1", "step": 0}, {"n": 1})
        c2 = saver.put(c1, _cp({"n": 2}, {"n": 2}), {"run_id": "r2", "step": 1}, {"n": 2})
        c3 = saver.put(c2, _cp({"n": 3}, {"n": 3}), {"run_id": "r3", "step": 2}, {"n": 3})
        saver.put_writes(c2, [("n", 99)], "task")
        saver.delete_for_runs(["r2"])
        assert saver.get_tuple(c2) is None
        assert [t.metadata["run_id"] for t in saver.list(_cfg("t"))] == ["r3", "r1"]
        kept = saver.get_tuple(c3)
        assert kept.checkpoint["channel_values"] == {"n": 3}
        assert kept.parent_config["configurable"]["checkpoint_id"] == c2["configurable"]["checkpoint_id"]
        assert not any("writes/lg/" in r for r in run_git(repo, "for-each-ref", "--format=%(refname)").stdout.split())
    assert run_git(repo, "rev-list", "--count", "refs/heads/t").stdout.strip() == "2"
    fsck(repo)


def test_copy_thread_shares_blobs_and_refuses_existing_target(tmp_path) -> None:
    repo = tmp_path / "copy.qvc"
    with QvcSaver(repo) as saver:
        c1 = saver.put(_cfg("src"), _cp({"big": "y" * 10_000}), {"step": 0}, {"big": 1})
        saver.put(_cfg("dst"), _cp({}), {}, {})
        with pytest.raises(CheckpointConflictError):
            saver.copy_thread("src", "dst")
        saver.copy_thread("src", "dst2")
        copied = saver.get_tuple(_cfg("dst2"))
        assert copied.checkpoint["id"] == c1["configurable"]["checkpoint_id"]
        assert copied.config["configurable"]["thread_id"] == "dst2"
    blobs = [run_git(repo, "rev-parse", f"refs/heads/{t}:big").stdout for t in ("src", "dst2")]
    assert blobs[0] == blobs[1]
    assert "Thread: dst2" in run_git(repo, "log", "-1", "--format=%B", head_ref("dst2")).stdout
    fsck(repo)


def test_prune_then_purge_drops_the_data(tmp_path) -> None:
    repo = tmp_path / "prune.qvc"
    with QvcSaver(repo) as saver:
        c = saver.put(_cfg("t"), _cp({"secret": "old secret value"}), {}, {"secret": 1})
        old_blob = run_git(repo, "rev-parse", "refs/heads/t:secret").stdout.strip()
        saver.put(c, _cp({"secret": "new"}, {"secret": 2}), {}, {"secret": 2})
        saver.prune(["t"], strategy="keep_latest")
        assert [t.checkpoint["channel_values"] for t in saver.list(_cfg("t"))] == [{"secret": "new"}]
        saver.purge()
    assert run_git(repo, "cat-file", "-e", old_blob, check=False).returncode != 0
    fsck(repo)


def test_typed_errors(tmp_path) -> None:
    with QvcSaver(tmp_path / "err.qvc") as saver:
        with pytest.raises(InvalidInputError):
            saver.get_tuple({"no": "configurable"})
        with pytest.raises(InvalidInputError):
            saver.put({"configurable": {}}, _cp({}), {}, {})
        with pytest.raises(InvalidInputError):
            list(saver.list(None, limit=-1))
        with pytest.raises(InvalidInputError):
            saver.prune(["t"], strategy="everything")
        with pytest.raises(InvalidInputError):
            saver.put_writes(_cfg("t"), [("a", 1)], "task")  # no checkpoint_id
        assert saver.get_next_version(None) < saver.get_next_version("00000000000000000000000000000001.5")
