"""Short checkpoint ids are unique and read back (issue 32): time-ordered ids (LangGraph's uuid6,
pydantic-ai's) share long prefixes, so their first 12 characters repeated on consecutive rows of
``log --oneline``, ``status``, ``branch -v`` and ``blame``, and typing one back was "ambiguous"
(exit 2). Each view prints the shortest prefix (12 characters at least) that names its checkpoint
alone, as git abbreviates SHAs, and ``qvc show`` takes it back. Through the real command line."""

from __future__ import annotations

import uuid

import pytest
from helpers import qvc, qvc_json

from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore

uuid6 = pytest.importorskip("langgraph.checkpoint.base.id", reason="LangGraph is in the test extra").uuid6


def write(path, ids: list[str]) -> None:
    with GitCheckpointStore(path) as store:
        for step, cid in enumerate(ids):
            store.put(CheckpointConfig("t"), Checkpoint(id=cid, thread_id="t", step=step, state_data={"n": step}),
                      {"source": "loop"})
    qvc("--repo", str(path), "checkout", "t")


def shown_ids(path) -> dict[str, str]:
    """The short id each view prints, by view (``log --oneline``: the first row's)."""
    repo = ["--repo", str(path), "--no-pager"]
    return {"log": qvc(*repo, "log", "--oneline").stdout.split("\n")[0].split()[1],
            "status": qvc(*repo, "status").stdout.split("head ", 1)[1].split()[0],
            "branch": qvc(*repo, "branch", "-v").stdout.split()[2],
            "blame": qvc(*repo, "blame", "n").stdout.split()[1]}


def test_time_ordered_ids_print_unique_and_read_back(tmp_path):
    ids = [str(uuid6()) for _ in range(8)]  # made in the same millisecond or two: long shared prefixes
    assert len({i[:12] for i in ids}) < len(ids)  # what the 12-character form printed
    path = tmp_path / "r.qvc"
    write(path, ids)
    rows = qvc("--repo", str(path), "--no-pager", "log", "--oneline").stdout.strip().split("\n")
    printed = [row.split()[1] for row in rows]
    assert len(set(printed)) == len(ids), rows
    assert all(len(p) >= 12 for p in printed)
    for short, full in zip(printed, reversed(ids), strict=True):
        assert full.startswith(short)
        assert qvc_json("--repo", str(path), "show", short)["id"] == full  # typed back: no "ambiguous"
    assert qvc("--repo", str(path), "log", "--format=%(shortid)").stdout.split() == printed
    head = printed[0]
    assert set(shown_ids(path).values()) == {head}  # every view prints the head the same way


def test_an_id_unique_in_12_characters_prints_as_12(tmp_path):
    ids = [uuid.uuid4().hex for _ in range(3)]
    path = tmp_path / "r.qvc"
    write(path, ids)
    assert set(shown_ids(path).values()) == {ids[-1][:12]}
