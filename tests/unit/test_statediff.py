"""qvc.readers.statediff: exact, structural, readable diffs of two states."""

from __future__ import annotations

import copy
import datetime as dt
import json
import math
import zoneinfo

import pytest
from helpers import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qvc.codec.tagged import loads_tagged
from qvc.errors import InvalidInputError, SerializationError
from qvc.readers.statediff import (
    ITEMS_LIMIT,
    Change,
    FieldDiff,
    diff_states,
    format_diff,
    format_path,
    format_stat,
    shorten,
    to_json,
)

PARIS = zoneinfo.ZoneInfo("Europe/Paris")
IST = dt.timezone(dt.timedelta(hours=5, minutes=30))


def diff1(old, new):
    """The changes of a single field ``f`` going from ``old`` to ``new``."""
    diffs = diff_states({"f": old}, {"f": new})
    assert len(diffs) <= 1
    return diffs[0].changes if diffs else []


def transcript(n):
    return [{"role": "user" if i % 2 else "assistant", "content": f"message {i}"} for i in range(n)]


# -- equality is exact ---------------------------------------------------------------------------

ALL_VALUES = [
    "s", "", b"s", bytearray(b"s"), 1, 2**100, 1.0, 0.0, -0.0, math.nan, math.inf, True, False, None, [1], (1,),
    {"a": 1}, {1: "a"}, {1}, frozenset({1}), set(), frozenset(), dt.datetime(2026, 1, 1),
    dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc), dt.datetime(2026, 1, 1, 1, tzinfo=PARIS),
    dt.datetime(2026, 1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1))), dt.date(2026, 1, 1), dt.time(1),
    dt.time(1, tzinfo=PARIS), dt.timedelta(1),
]


@pytest.mark.parametrize("value", ALL_VALUES, ids=repr)
def test_equal_values_have_no_diff(value):
    assert diff1(value, copy.deepcopy(value)) == []
    assert diff_states({"f": value, "g": 1}, {"g": 1, "f": copy.deepcopy(value)}) == []


@pytest.mark.parametrize("old, new", [
    (1, 1.0), (1, True), (1.0, True), (0, False), (0.0, -0.0), (0, 0.0), (b"s", "s"), ([1], (1,)),
    ({1}, frozenset({1})), (None, 0), ("", None),
    (dt.datetime(2026, 1, 1, 1, tzinfo=PARIS), dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)),  # same instant
    (dt.datetime(2026, 1, 1, 1, tzinfo=PARIS), dt.datetime(2026, 1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1)))),
    (dt.datetime(2026, 10, 25, 2, 30, tzinfo=PARIS), dt.datetime(2026, 10, 25, 2, 30, tzinfo=PARIS, fold=1)),
    (dt.date(2026, 1, 1), dt.datetime(2026, 1, 1)), (dt.time(1), dt.time(1, tzinfo=dt.timezone.utc)),
    (dt.timedelta(1), dt.timedelta(1, 1)), (2**100, 2**100 + 1),
])
def test_type_or_value_changes_are_one_change(old, new):
    assert diff1(old, new) == [Change((), "change", old, new)]


def test_nan_equals_nan_and_negative_zero_differs():
    assert diff1([math.nan, {"x": math.nan}], [float("nan"), {"x": -math.nan}]) == []
    assert diff1([0.0, 1], [-0.0, 1]) == [Change((0,), "remove", 0.0, None), Change((0,), "add", None, -0.0)]
    assert diff1({"x": 0.0}, {"x": -0.0}) == [Change(("x",), "change", 0.0, -0.0)]


def test_dict_and_set_order_are_not_changes():
    assert diff1({"a": 1, "b": 2}, {"b": 2, "a": 1}) == []
    assert diff1({"x", "y", "z"}, {"z", "y", "x"}) == []


# -- structure -----------------------------------------------------------------------------------


def test_appending_to_a_long_transcript_is_one_add():
    old = transcript(500)
    new = old + [{"role": "user", "content": "hi"}]
    diffs = diff_states({"messages": old}, {"messages": new})
    assert diffs == [FieldDiff("messages", "changed", [Change((500,), "add", None, new[500])])]
    assert format_diff(diffs) == ('~~~ field messages (changed)\n'
                                  '1 message added\n'
                                  '+ messages[500] user: "hi"')
    assert format_stat(diffs) == "messages | 1 + · 1 message added\n1 field changed"


def test_transcripts_with_repeated_messages_still_append_cleanly():
    old = [{"role": "user", "content": "ok"}] * 300
    assert diff1(old, old + [{"role": "user", "content": "ok"}] * 2) == [
        Change((300,), "add", None, old[0]), Change((301,), "add", None, old[0])]


def test_insert_and_remove_in_the_middle_show_only_those_items():
    old = transcript(100)
    new = old[:40] + [{"role": "tool", "content": "inserted"}] + old[40:70] + old[72:]
    assert diff1(old, new) == [Change((40,), "add", None, new[40]),
                               Change((70,), "remove", old[70], None), Change((71,), "remove", old[71], None)]


def test_items_without_an_identity_are_never_paired_by_position():
    old = transcript(10)
    new = copy.deepcopy(old)
    new[3]["content"] = "edited"
    new[7] = "not a dict"
    assert diff1(old, new) == [
        Change((3,), "remove", old[3], None), Change((3,), "add", None, new[3]),
        Change((7,), "remove", old[7], None), Change((7,), "add", None, "not a dict"),
    ]
    assert diff1([0, 1, 2, 9], [0, 5, 6, 7, 9]) == [
        Change((1,), "remove", 1, None), Change((2,), "remove", 2, None),
        Change((1,), "add", None, 5), Change((2,), "add", None, 6), Change((3,), "add", None, 7)]


def test_items_with_an_id_are_matched_by_it_and_compared_inside():
    old = [{"role": "user", "content": f"m{i}", "id": f"m{i}"} for i in range(6)]
    new = copy.deepcopy(old)
    new[3]["content"] = "edited"
    new[3]["extra"] = 1
    assert diff1(old, new) == [Change((3, "content"), "change", "m3", "edited"), Change((3, "extra"), "add", None, 1)]
    moved = [old[0], old[2], old[1]] + old[3:]  # a moved message: removed where it was, added where it is
    changes = diff1(old, moved)
    assert sorted(c.op for c in changes) == ["add", "remove"] and changes[0].old == changes[1].new or \
        changes[0].new == changes[1].old


def test_tool_calls_and_tool_results_are_matched_by_their_ids():
    call = {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "add", "args": {"a": 1}}]}
    result = {"role": "tool", "content": "1", "tool_call_id": "c1"}
    edited_call = copy.deepcopy(call)
    edited_call["tool_calls"][0]["args"] = {"a": 2}
    assert diff1([call], [edited_call]) == [Change((0,), "remove", call, None), Change((0,), "add", None, edited_call)]
    assert diff1([call["tool_calls"][0]], [edited_call["tool_calls"][0]]) == [Change((0, "args", "a"), "change", 1, 2)]
    failed = dict(result, content="boom", error=True)
    assert diff1([call, result], [call, failed]) == [
        Change((1, "content"), "change", "1", "boom"), Change((1, "error"), "add", None, True)]


def test_a_fork_diverging_after_a_shared_prefix_is_removed_and_added_items_not_changed_pairs():
    prefix = [{"role": "system", "content": "be terse"}, {"role": "user", "content": "hi"}]
    a = prefix + [{"role": "assistant", "content": "hello"}, {"role": "user", "content": "bye"}]
    b = prefix + [{"role": "user", "content": "what?"}, {"role": "assistant", "content": "this"},
                  {"role": "tool", "content": "failed", "tool_call_id": "c9", "error": True}]
    diffs = diff_states({"messages": a}, {"messages": b})
    assert [c.op for c in diffs[0].changes] == ["remove", "remove", "add", "add", "add"]
    assert all(len(c.path) == 1 for c in diffs[0].changes)
    assert diffs[0].summary == "3 messages added, 2 messages removed, 1 tool call failed"
    with_ids = [dict(m, id=f"x{i}") for i, m in enumerate(a)]
    forked = with_ids[:2] + [dict(m, id=f"y{i}") for i, m in enumerate(b[2:])]
    diffs = diff_states({"messages": with_ids}, {"messages": forked})
    assert [(c.op, c.path) for c in diffs[0].changes] == [
        ("remove", (2,)), ("remove", (3,)), ("add", (2,)), ("add", (3,)), ("add", (4,))]


def test_the_summary_counts_messages_tool_calls_and_failures():
    user = {"role": "user", "content": "go", "id": "u"}
    calls = {"role": "assistant", "content": "", "id": "a",
             "tool_calls": [{"id": "c1", "name": "f", "args": {}}, {"id": "c2", "name": "g", "args": {}}]}
    ok = {"role": "tool", "content": "1", "tool_call_id": "c1", "id": "t1"}
    bad = {"role": "tool", "content": "no", "tool_call_id": "c2", "id": "t2", "error": True}
    diffs = diff_states({"messages": [user]}, {"messages": [dict(user, content="go!"), calls, ok, bad]})
    assert diffs[0].counts == {"messages_added": 3, "messages_removed": 0, "messages_changed": 1,
                               "tool_calls_made": 2, "tool_calls_failed": 1}
    assert diffs[0].summary == "3 messages added, 1 message changed, 2 tool calls made, 1 tool call failed"
    assert to_json(diffs)[0]["summary"] == diffs[0].summary and to_json(diffs)[0]["counts"] == diffs[0].counts
    assert format_diff(diffs).splitlines()[:3] == [
        "~~~ field messages (changed)", diffs[0].summary, '~ messages[0].content: "go" → "go!"']
    added = diff_states({}, {"messages": [user, calls, bad]})[0]
    assert added.summary == "3 messages added, 2 tool calls made, 1 tool call failed"
    assert format_diff([added]).splitlines()[2:] == [
        '+ messages[0] user: "go"', "+ messages[1] assistant: → f() → g()", '+ messages[2] tool [c2] (failed): "no"']
    assert diff_states({"n": [1]}, {"n": [2]})[0].summary is None and "summary" not in to_json(
        diff_states({"n": [1]}, {"n": [2]}))[0]


def test_tuples_are_diffed_like_lists():
    assert diff1((1, 2, 3), (1, 2, 3, 4)) == [Change((3,), "add", None, 4)]


def test_nested_dict_changes():
    old = {"scratch": {"notes": "old", "plan": {"step": 1, "todo": ["a", "b"]}, "keep": True}}
    new = {"scratch": {"plan": {"step": 2, "todo": ["a", "b", "c"]}, "keep": True, "new": None}}
    assert diff1(old, new) == [
        Change(("scratch", "notes"), "remove", "old", None),
        Change(("scratch", "plan", "step"), "change", 1, 2),
        Change(("scratch", "plan", "todo", 2), "add", None, "c"),
        Change(("scratch", "new"), "add", None, None),
    ]


def test_non_str_dict_keys_match_exactly():
    assert diff1({1: "a"}, {1.0: "a"}) == [Change((1,), "remove", "a", None), Change((1.0,), "add", None, "a")]
    assert diff1({1: "a", (1, 2): "b"}, {True: "a", (1, 2): "c"}) == [
        Change((1,), "remove", "a", None), Change(((1, 2),), "change", "b", "c"), Change((True,), "add", None, "a")]


def test_sets_report_members():
    assert diff1({"a", "b", 1}, {"a", "c", 1.0}) == [
        Change((), "remove", 1, None, member=True), Change((), "remove", "b", None, member=True),
        Change((), "add", None, 1.0, member=True), Change((), "add", None, "c", member=True)]
    assert diff1({"tags": frozenset({(1, 2)})}, {"tags": frozenset({(1, 3)})}) == [
        Change(("tags",), "remove", (1, 2), None, member=True), Change(("tags",), "add", None, (1, 3), member=True)]


def test_added_removed_and_sorted_fields():
    diffs = diff_states({"b": 1, "a": [1], "same": 2}, {"c": {1}, "b": 2, "same": 2})
    assert diffs == [
        FieldDiff("a", "removed", [Change((), "remove", [1], None)]),
        FieldDiff("b", "changed", [Change((), "change", 1, 2)]),
        FieldDiff("c", "added", [Change((), "add", None, {1})]),
    ]


def test_every_type_changing_at_once():
    old = {f"f{i}": v for i, v in enumerate(ALL_VALUES)}
    new = {f"f{i}": v for i, v in enumerate(ALL_VALUES[1:] + ALL_VALUES[:1])}
    diffs = diff_states(old, new)
    assert len(diffs) == len(ALL_VALUES) - 1  # b"s" -> bytearray(b"s") is no change: both are bytes to serde
    data = to_json(diffs)
    text = json.dumps(data, allow_nan=False)
    assert json.loads(text) == data
    for diff, item in zip(diffs, data, strict=True):
        for change, jchange in zip(diff.changes, item["changes"], strict=True):
            if "old" in jchange:
                assert diff1(loads_tagged(json.dumps(jchange["old"])), change.old) == []
            if "new" in jchange:
                assert diff1(loads_tagged(json.dumps(jchange["new"])), change.new) == []
    assert format_diff(diffs) and format_stat(diffs).endswith(f"{len(ALL_VALUES) - 1} fields changed")


# -- errors --------------------------------------------------------------------------------------


class Foo:
    pass


def test_bad_inputs():
    with pytest.raises(InvalidInputError):
        diff_states([], {})
    with pytest.raises(InvalidInputError):
        diff_states({1: 2}, {})
    with pytest.raises(SerializationError, match=r"state\['f'\]\[1\]: object of type Foo"):
        diff_states({"f": [1, Foo()]}, {"f": [1]})
    with pytest.raises(SerializationError, match="Foo"):
        diff_states({}, {"g": {"x": Foo()}})
    with pytest.raises(SerializationError, match="tzinfo"):
        diff_states({}, {"g": dt.datetime(2026, 1, 1, tzinfo=dt.tzinfo())})


# -- JSON ----------------------------------------------------------------------------------------


def test_to_json_shape():
    diffs = diff_states({"m": [1], "s": {1}, "t": {(1, 2): math.nan}, "gone": b"x"},
                        {"m": [1, (2,)], "s": {2}, "t": {(1, 2): -0.0}})
    assert to_json(diffs) == [
        {"field": "gone", "status": "removed", "changes": [{"path": [], "op": "remove", "old": {"$bytes": "eA=="}}]},
        {"field": "m", "status": "changed", "changes": [{"path": [1], "op": "add", "new": {"$tuple": [2]}}]},
        {"field": "s", "status": "changed", "changes": [{"path": [], "op": "remove", "old": 1, "member": True},
                                                         {"path": [], "op": "add", "new": 2, "member": True}]},
        {"field": "t", "status": "changed", "changes": [
            {"path": [{"$tuple": [1, 2]}], "op": "change", "old": {"$float": "nan"}, "new": {"$float": "-0.0"}}]},
    ]


# -- rendering -----------------------------------------------------------------------------------


def test_format_diff_example():
    old = {"messages": transcript(3), "scratch": {"notes": "old", "n": 1}, "current_step": 3, "tags": {"x"},
           "old field": 1}
    new = {"messages": transcript(3) + [{"role": "user", "content": "hi"}], "scratch": {"n": 1.0},
           "current_step": 4, "tags": {"x", "y"}, "tools": ["search"]}
    assert format_diff(diffs := diff_states(old, new)) == "\n".join([
        "~~~ field current_step (changed)",
        "~ current_step: 3 → 4",
        "~~~ field messages (changed)",
        "1 message added",
        '+ messages[3] user: "hi"',
        '--- field "old field" (removed)',
        '- "old field": 1',
        "~~~ field scratch (changed)",
        '- scratch.notes: "old"',
        "~ scratch.n: 1 → 1.0",
        "~~~ field tags (changed)",
        '+ tags (member): "y"',
        "+++ field tools (added)",
        '+ tools: ["search"]',
    ])
    assert format_stat(diffs) == "\n".join([
        "current_step | 1 ~",
        "messages     | 1 + · 1 message added",
        '"old field"  | 1 - (removed)',
        "scratch      | 1 ~ 1 -",
        "tags         | 1 +",
        "tools        | 1 + (added)",
        "6 fields changed",
    ])


def test_format_diff_empty_and_stat_empty():
    assert format_diff([]) == ""
    assert format_stat([]) == "0 fields changed"


def test_color():
    text = format_diff(diff_states({"a": 1, "b": 1}, {"a": 2, "c": 1}), color=True)
    assert "\x1b[33m~ a: 1 → 2\x1b[0m" in text
    assert "\x1b[31m- b: 1\x1b[0m" in text
    assert "\x1b[32m+ c: 1\x1b[0m" in text
    assert "\x1b[1m" in text
    assert "\x1b" not in format_diff(diff_states({"a": 1}, {"a": 2}))


def test_long_values_are_shortened_unless_full():
    long = "x" * 500
    diffs = diff_states({}, {"notes": long, "items": list(range(100))})
    short = format_diff(diffs)
    assert "(500 chars)" in short and long not in short
    assert "… 91 more …" in short and "99]" in short
    assert all(len(line) <= 100 for line in short.splitlines())
    full = format_diff(diffs, full=True)
    assert long in full and str(list(range(100))) in full


def test_long_string_change_shows_the_difference():
    old = "a" * 300 + "OLD" + "z" * 300
    new = "a" * 300 + "NEW" + "z" * 300
    text = format_diff(diff_states({"s": old}, {"s": new}))
    assert "OLD" in text and "NEW" in text and "(603 chars)" in text
    assert all(len(line) <= 100 for line in text.splitlines())


def test_wide_changes_split_over_lines():
    old, new = {"k": "a" * 60}, {"k": "b" * 60}
    assert format_diff(diff_states({"f": old}, {"f": new}), width=100).splitlines() == [
        "~~~ field f (changed)", "~ f.k:", f'    - "{"a" * 60}"', f'    + "{"b" * 60}"']


@pytest.mark.parametrize("value, text", [
    (None, "null"), (True, "true"), (False, "false"), (1, "1"), (1.0, "1.0"), (-0.0, "-0.0"), (math.nan, "nan"),
    (math.inf, "inf"), ("hi", '"hi"'), ("é\n", '"é\\n"'), (b"\x00a", "b'\\x00a'"), ([1, "a"], '[1, "a"]'),
    ((1,), "(1,)"), ((), "()"), ({3, 1, 2}, "{1, 2, 3}"), (set(), "set()"), (frozenset({1}), "frozenset({1})"),
    ({"role": "user", 1: None}, '{"role": "user", 1: null}'), (dt.date(2026, 11, 29), "2026-11-29"),
    (dt.datetime(2026, 11, 29, 10, tzinfo=PARIS), "2026-11-29T10:00:00+01:00[Europe/Paris]"),
    (dt.datetime(2026, 11, 29, 10, tzinfo=IST), "2026-11-29T10:00:00+05:30"),
    (dt.time(10, 30), "10:30:00"), (dt.timedelta(days=1, seconds=3), "timedelta(1 day, 0:00:03)"),
    (Foo, repr(Foo)),
])
def test_shorten_renders_every_type(value, text):
    assert shorten(value) == text


def test_shorten_limits():
    assert shorten("y" * 81).endswith("(81 chars)")
    assert shorten("y" * 80) == '"' + "y" * 80 + '"'
    assert shorten(list(range(ITEMS_LIMIT))) == str(list(range(ITEMS_LIMIT)))
    assert shorten(list(range(ITEMS_LIMIT + 1))) == "[0, 1, 2, 3, 4, 5, 6, 7, … 2 more …, 10]"
    assert shorten(10**200).endswith("(201 digits)")
    nested = {"a": [{"b": ["c" * 200] * 50}] * 50}
    assert len(shorten(nested)) <= 100 and len(shorten(nested, width=40)) <= 40
    assert shorten(nested, full=True).count("c" * 200) == 2500


def test_format_path():
    assert format_path("messages", (500, "content")) == "messages[500].content"
    assert format_path("scratch", ("a key", 1.5, (1, 2), "ok_1")) == 'scratch["a key"][1.5][(1, 2)].ok_1'
    assert format_path("odd field", ()) == '"odd field"'
    assert format_path("a.b", ("1x",)) == '"a.b"["1x"]'


# -- properties ----------------------------------------------------------------------------------

_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=True), st.text(max_size=3),
                    st.binary(max_size=2))
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.tuples(inner, inner),
                            st.dictionaries(st.text(max_size=2) | st.integers(-2, 2), inner, max_size=4),
                            st.sets(st.integers(-3, 3) | st.text(max_size=2), max_size=4)),
    max_leaves=15,
)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_VALUES, max_size=30), st.lists(_VALUES, min_size=1, max_size=5))
def test_appending_is_always_only_adds_at_the_end(prefix, tail):
    assert diff1(prefix, prefix + tail) == [Change((len(prefix) + i,), "add", None, v) for i, v in enumerate(tail)]


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_VALUES, _VALUES)
def test_diff_is_empty_exactly_when_values_are_identical(a, b):
    changes = diff1(a, b)
    assert (changes == []) == (_exact(a) == _exact(b))
    assert diff1(a, copy.deepcopy(a)) == []
    json.dumps(to_json(diff_states({"f": a}, {"f": b})), allow_nan=False)
    format_diff(diff_states({"f": a}, {"f": b}))


def _exact(v):
    t = type(v)
    if t is float:
        return ("float", "nan" if math.isnan(v) else v.hex())
    if t in (list, tuple):
        return (t.__name__, tuple(_exact(x) for x in v))
    if t is set:
        return ("set", frozenset(_exact(x) for x in v))
    if t is dict:
        return ("dict", frozenset((_exact(k), _exact(x)) for k, x in v.items()))
    return (t.__name__, v)
