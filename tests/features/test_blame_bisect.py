"""``qvc.readers.blame`` and ``qvc.readers.bisect`` on real repositories (the tests of bisect are
real Python callables here; tests/cli/test_blame_bisect_cli.py runs real commands)."""

from __future__ import annotations

import math

import helpers
import pytest

from qvc import InvalidInputError, NotFoundError, QvcError
from qvc.readers.bisect import bisect, bisect_line, verdict
from qvc.readers.blame import blame
from qvc.store.fork import fork_thread


def put(store, thread: str, cid: str, step: int, state: dict) -> str:
    """``helpers.put``, returning the new head commit (kept: these tests address commits)."""
    helpers.put(store, thread, cid, step, state, metadata={"source": "loop"})
    return store.head(thread)


def origins(lines) -> list[tuple]:
    return [(b.path, b.value, b.checkpoint_id) for b in lines]


# -- blame -----------------------------------------------------------------------------------------


def test_blame_list_items_keep_the_checkpoint_that_added_them(store):
    put(store, "t", "a", 0, {"msgs": ["q"]})
    put(store, "t", "b", 1, {"msgs": ["q", "r1"]})
    put(store, "t", "c", 2, {"msgs": ["q", "r1"], "other": 1})  # the field itself unchanged
    put(store, "t", "d", 3, {"msgs": ["sys", "q", "R1", "r2"], "other": 2})  # insert, edit in place, append
    head = put(store, "t", "e", 4, {"msgs": ["sys", "q", "R1", "r2", {"role": "tool", "n": [1]}]})
    assert origins(blame(store, "msgs", head)) == [
        ((0,), "sys", "d"), ((1,), "q", "a"), ((2,), "R1", "d"), ((3,), "r2", "d"),
        ((4,), {"role": "tool", "n": [1]}, "e")]
    assert origins(blame(store, "msgs", store.resolve("b"))) == [((0,), "q", "a"), ((1,), "r1", "b")]
    [line] = blame(store, "msgs", head)[-1:]
    assert (line.step, line.commit) == (4, head)
    data = line.to_json()
    assert set(data) == {"path", "id", "commit", "step", "time", "value"}
    assert data["path"] == [4] and data["value"] == {"role": "tool", "n": [1]} and data["time"].endswith("+00:00")


def test_blame_mapping_keys_and_scalars_have_their_last_change(store):
    put(store, "t", "a", 0, {"cfg": {"model": "x", "t": 1}, "n": 1, "s": "same"})
    put(store, "t", "b", 1, {"cfg": {"model": "x", "t": 2}, "n": 1, "s": "same"})
    put(store, "t", "c", 2, {"cfg": {"model": "x", "t": 2, "new": True}, "n": 2, "s": "same"})
    head = put(store, "t", "d", 3, {"cfg": {"t": 2, "new": True, "model": "y"}, "n": 2, "s": "same"})
    assert origins(blame(store, "cfg", head)) == [(("t",), 2, "b"), (("new",), True, "c"), (("model",), "y", "d")]
    assert origins(blame(store, "n", head)) == [((), 2, "c")]
    assert origins(blame(store, "s", head)) == [((), "same", "a")]


def test_blame_starts_again_when_a_field_comes_back_or_changes_kind(store):
    put(store, "t", "a", 0, {"f": [1, 2]})
    put(store, "t", "b", 1, {"g": 0})  # f removed
    put(store, "t", "c", 2, {"f": [1, 2, 3]})  # back: all of it is c's
    head = put(store, "t", "d", 3, {"f": {"1": 2}})
    assert origins(blame(store, "f", store.resolve("c"))) == [((0,), 1, "c"), ((1,), 2, "c"), ((2,), 3, "c")]
    assert origins(blame(store, "f", head)) == [(("1",), 2, "d")]
    with pytest.raises(NotFoundError, match="no field 'nope'"):
        blame(store, "nope", head)


def test_blame_follows_the_line_into_a_fork_source(store):
    put(store, "main", "a", 0, {"msgs": ["q"]})
    put(store, "main", "b", 1, {"msgs": ["q", "r"]})
    fork_thread(store, store.resolve("b"), "retry")
    head = put(store, "retry", "x", 2, {"msgs": ["q", "r", "retry"]})
    assert [b.checkpoint_id for b in blame(store, "msgs", head)] == ["a", "b", "x"]


# -- bisect ----------------------------------------------------------------------------------------


@pytest.fixture
def line(store) -> list[str]:
    """Thread t: 65 checkpoints, step i has ``n == i``."""
    return [put(store, "t", f"c{i}", i, {"n": i}) for i in range(65)]


def judge(store, first_bad: int, skip: frozenset = frozenset(), calls: list | None = None):
    def test(commit: str) -> int:
        n = store.read(commit).checkpoint.state_data["n"]
        if calls is not None:
            calls.append(n)
        return 125 if n in skip else (1 if n >= first_bad else 0)
    return test


@pytest.mark.parametrize("first_bad", [1, 2, 17, 33, 63, 64])
def test_bisect_finds_the_first_bad_checkpoint_in_about_log2_runs(store, line, first_bad):
    calls: list[int] = []
    found = bisect(store, line[0], line[-1], judge(store, first_bad, calls=calls))
    assert found.first_bad is not None and found.first_bad.checkpoint_id == f"c{first_bad}"
    assert found.first_bad.commit == line[first_bad] and found.first_bad.step == first_bad
    assert len(found.tested) == len(calls) <= math.ceil(math.log2(64))
    assert len(set(calls)) == len(calls) and 0 not in calls and 64 not in calls  # the ends are trusted
    data = found.to_json()
    assert data["first_bad"] == {"id": f"c{first_bad}", "commit": line[first_bad], "step": first_bad}
    assert data["tested"] == len(calls)


def test_bisect_skips_untestable_checkpoints(store, line):
    found = bisect(store, line[0], line[-1], judge(store, 40, skip=frozenset({32, 48, 44})))
    assert found.first_bad.checkpoint_id == "c40"
    assert "skip" in {t.verdict for t in found.tested}
    undecided = bisect(store, line[0], line[-1], judge(store, 40, skip=frozenset(range(38, 41))))
    assert undecided.first_bad is None
    assert [c.checkpoint_id for c in undecided.candidates] == ["c38", "c39", "c40", "c41"]
    assert undecided.to_json()["first_bad"] is None and len(undecided.to_json()["candidates"]) == 4


def test_bisect_exit_statuses_and_bad_ends(store, line):
    assert [verdict(s) for s in (0, 1, 2, 124, 125, 126, 127)] == ["good", "bad", "bad", "bad", "skip", "bad", "bad"]
    for status in (128, 255, -9):
        with pytest.raises(QvcError, match="bisect aborted"):
            verdict(status)
    with pytest.raises(QvcError, match="exited 200"):
        bisect(store, line[0], line[-1], lambda c: 200)
    with pytest.raises(InvalidInputError, match="not on the bad one's line"):
        bisect_line(store, line[5], line[2])
    with pytest.raises(InvalidInputError, match="the same"):
        bisect_line(store, line[5], line[5])
    adjacent = bisect(store, line[3], line[4], lambda c: 0)
    assert adjacent.first_bad.checkpoint_id == "c4" and adjacent.tested == []


def test_blame_a_long_list_stored_in_chunks(store):
    items: list = []
    for i in range(5):  # 0..149, then 150..299, ...: past the 64-item chunks of the format
        items += [{"i": k} for k in range(len(items), len(items) + 150)]
        head = put(store, "t", f"c{i}", i, {"msgs": list(items)})
    assert store.tree_entries(head)["msgs"][0] == 0o40000  # stored as a tree of chunks
    lines = blame(store, "msgs", head)
    assert len(lines) == 750 and [b.checkpoint_id for b in lines[::150]] == ["c0", "c1", "c2", "c3", "c4"]
    assert all(b.value == {"i": n} and b.path == (n,) for n, b in enumerate(lines))
