"""qvc.readers.log's selection and --format, and qvc.store.revisions.parse_range, on a real store."""

from __future__ import annotations

import helpers
import pytest

from qvc import InvalidInputError, UnknownCheckpointError
from qvc.readers.log import PLACEHOLDERS, check_format, format_entry, log
from qvc.store.revisions import Revision, parse_range, parse_revision


def put(store, thread: str, cid: str, step: int, state: dict) -> str:
    """``helpers.put``, returning the new head commit (kept: these tests address commits)."""
    helpers.put(store, thread, cid, step, state, metadata={"source": "loop"})
    return store.head(thread)


@pytest.fixture
def line(store) -> list[str]:
    commits = [put(store, "t", f"c{i}", i, {"n": i // 3, "m": i}) for i in range(7)]
    store.checkout("t")
    return commits


def ids(entries) -> list[str]:
    return [e.checkpoint_id for e in entries]


def test_selection_then_limit_then_reverse(store, line):
    head = line[-1]
    assert ids(log(store, head, fields=["n"])) == ["c6", "c3", "c0"]
    assert ids(log(store, head, fields=["n"], limit=2)) == ["c6", "c3"]  # the limit counts what is selected
    assert ids(log(store, head, fields=["n"], limit=2, reverse=True)) == ["c3", "c6"]
    assert ids(log(store, head, exclude=line[4])) == ["c6", "c5"]
    assert ids(log(store, head, exclude=head)) == []
    assert ids(log(store, head, grep=r"^step [15] ")) == ["c5", "c1"]
    t = store.commit_info(line[2]).time
    assert set(ids(log(store, head, since=t, until=t))) >= {"c2"}  # inclusive
    assert ids(log(store, head, until=t - 10_000)) == []
    assert ids(log(store, None, all=True, exclude=line[5])) == ["c6"]
    with pytest.raises(InvalidInputError, match="bad --grep"):
        list(log(store, head, grep="("))


def test_parse_range(store, line):
    assert parse_range(store, "t~2..t") == (Revision(line[4], "t"), Revision(line[6], "t"))
    assert parse_range(store, "c1..") == (Revision(line[1], None), Revision(line[6], "t"))
    assert parse_range(store, "t") == (None, Revision(line[6], "t"))
    dotted = put(store, "a..b", "d0", 0, {"n": 0})  # a thread id may hold "..": the whole name wins
    assert parse_range(store, "a..b") == (None, Revision(dotted, "a..b"))
    with pytest.raises(InvalidInputError, match="A...B"):
        parse_range(store, "c1...c3")
    with pytest.raises(UnknownCheckpointError):
        parse_range(store, "c1..nowhere")
    with pytest.raises(UnknownCheckpointError):
        parse_range(store, "nowhere")


def test_parse_revision_asks_names_last(store, line):
    asked = []

    def names(text):
        asked.append(text)
        return Revision(line[3], "t") if text == "run@3" else None

    assert parse_revision(store, "run@3~1", names=names) == Revision(line[2], "t")
    assert parse_revision(store, "t", names=names).commit == line[6] and asked == ["run@3"]
    with pytest.raises(UnknownCheckpointError):
        parse_revision(store, "other@1", names=names)


def test_format_placeholders(store, line):
    [e] = log(store, line[3], limit=1)
    text = format_entry(e, check_format("format:%h %H %(id) %(step) %(thread) %(source) %(nchanged) %(changed)"
                                        "%n%s%x21 %% %d %D %(superseded)|%(status)|%ar"),
                        head_thread="t", head_commit=line[6], now=e.time + 120)
    first, second = text.split("\n")
    assert first == f"{line[3][:7]} {line[3]} c3 3 t loop 2 m,n"
    assert second == "step 3 · loop · 2 fields changed! %   ||2 minutes ago"
    [tip] = log(store, line[6], limit=1)
    assert format_entry(tip, "%d|%D", head_thread="t", head_commit=line[6]) == " (HEAD -> t)|HEAD -> t"
    assert format_entry(tip, "%d", head_thread=None, head_commit=line[6]) == " (HEAD, t)"
    for bad in ("%q", "%(nope)", "%", "100%"):
        with pytest.raises(InvalidInputError, match="placeholder"):
            check_format(bad)
    assert all(key.startswith("%") for key in PLACEHOLDERS)


def test_revision_set_and_several_lines(store, line):
    from qvc.readers.log import merge_bases, revision_set
    from qvc.store.fork import fork_thread

    fork_thread(store, line[3], "side")
    side = put(store, "side", "s0", 4, {"n": 9, "m": 3})
    assert merge_bases(store, line[6], side) == [line[3]]
    assert revision_set(store, ["t", "^side"]) == ([line[6]], [side])
    assert revision_set(store, ["side..t"]) == ([line[6]], [side])
    assert revision_set(store, ["t...side"]) == ([line[6], side], [line[3]])
    both = ids(log(store, [line[6], side], exclude=[line[3]]))
    # newest first by commit time (whole seconds: the fork made after c6 may share its second, or not)
    assert {"c6", "s0"} <= set(both[:3]) and {"c4", "c5"} < set(both) and len(both) == 5  # and side's fork
    assert ids(log(store, [side], exclude=[line[6]], order="topo"))[0] == "s0"
    with pytest.raises(InvalidInputError, match="unknown order"):
        list(log(store, [side, line[6]], order="sideways"))


def test_pickaxe_predicate(store, line):
    from qvc.readers.pickaxe import pickaxe

    put(store, "t", "c7", 7, {"n": 2, "m": 7, "note": {"text": "rate limit\nretry"}})
    head = store.head("t")
    assert ids(log(store, head, where=pickaxe(store, string="rate"))) == ["c7"]
    assert ids(log(store, head, where=pickaxe(store, regex="^retry$"))) == ["c7"]
    assert ids(log(store, head, where=pickaxe(store, regex="^7$"))) == ["c7"]  # numbers as shown
    assert ids(log(store, head, where=pickaxe(store, string="text", fields=["m"]))) == []
    with pytest.raises(InvalidInputError):
        pickaxe(store, string="")
    with pytest.raises(InvalidInputError, match="bad -G"):
        pickaxe(store, regex="(")
