"""qvc.readers.statefiles and qvc.codec.tagged: a state as human-editable JSON files, read back losslessly."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import struct
import tempfile
import zoneinfo
from pathlib import Path

import pytest
from helpers import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qvc.codec import serde
from qvc.codec.tagged import dumps_tagged, from_jsonable, loads_tagged, to_jsonable
from qvc.errors import InvalidInputError, SerializationError
from qvc.readers.statefiles import (
    MANIFEST,
    field_filename,
    field_from_filename,
    read_state,
    write_state,
)

PARIS = zoneinfo.ZoneInfo("Europe/Paris")
IST = dt.timezone(dt.timedelta(hours=5, minutes=30))
NEG_NAN = struct.unpack(">d", struct.pack(">Q", 0xFFF8000000000000))[0]
PAYLOAD_NAN = struct.unpack(">d", struct.pack(">Q", 0x7FF0000000000001))[0]

CASES = {
    "str": "héllo \x00 \n \u2028 😀",
    "empty_str": "",
    "bytes": b"\x00\xffbin",
    "bytearray": bytearray(b"ab"),
    "int": -17,
    "bigint": 2**64,
    "huge_int": -(10**300),
    "float": 0.1,
    "float_int_valued": 1.0,
    "nan": math.nan,
    "neg_nan": NEG_NAN,
    "payload_nan": PAYLOAD_NAN,
    "inf": math.inf,
    "-inf": -math.inf,
    "-0.0": -0.0,
    "0.0": 0.0,
    "tiny": 5e-324,
    "true": True,
    "none": None,
    "list": [1, "a", None, [2, [3]]],
    "tuple": (1, (2, 3), ()),
    "one_tuple": ("x",),
    "dict": {"b": 1, "a": 2, "": 3},
    "dict_nonstr_keys": {1: "int", False: "bool", "s": 2, (1, 2): 3, None: 4, b"k": 5, 1.5: 6, frozenset({1}): 7},
    "dict_dollar_keys": {"$tuple": [1], "$$x": 2, "$": 3, "plain": {"$bytes": "nope"}},
    "set": {1, "a", (1, 2), frozenset({3})},
    "frozenset": frozenset({b"x", 2.5}),
    "empty_set": set(),
    "naive_datetime": dt.datetime(2026, 11, 29, 10, 0, 0, 123456),
    "utc_datetime": dt.datetime(2026, 11, 29, 10, tzinfo=dt.timezone.utc),
    "offset_datetime": dt.datetime(2026, 11, 29, 10, tzinfo=IST),
    "odd_offset_datetime": dt.datetime(2026, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=-3, microseconds=7))),
    "zone_datetime": dt.datetime(2026, 11, 29, 10, tzinfo=PARIS),
    "fold_datetime": dt.datetime(2026, 10, 25, 2, 30, tzinfo=PARIS, fold=1),
    "gap_datetime": dt.datetime(2026, 3, 29, 2, 30, tzinfo=PARIS),
    "lmt_datetime": dt.datetime(1900, 1, 1, tzinfo=PARIS),
    "date": dt.date(1, 1, 1),
    "time": dt.time(23, 59, 59, 999999),
    "time_offset": dt.time(10, tzinfo=IST),
    "time_zone": dt.time(10, tzinfo=PARIS, fold=1),
    "timedelta": dt.timedelta(days=-3, seconds=5, microseconds=7),
    "nested": {"messages": [{"role": "user", "content": "hi", "at": dt.datetime(2026, 1, 1)}],
               "tools": ({"x": {1, 2}},), 7: [math.nan, {b"k": frozenset()}]},
}


def canon(v):
    """A comparable form of ``v`` that is exact in every type, float bit and dict order.

    ``serde.dumps`` bytes would be the simplest exact comparison, but the bytes of a set follow
    its iteration order, which depends on insertion history and (for str, None...) on per-process
    hashes; so sets are compared as sorted members here, and everything else exactly.
    """
    t = type(v)
    if t is bytearray:  # serde stores it as bytes too
        return ("bytes", bytes(v))
    if t is float:
        return ("float", struct.pack(">d", v))
    if t in (list, tuple):
        return (t.__name__, tuple(canon(x) for x in v))
    if t in (set, frozenset):
        return (t.__name__, tuple(sorted((canon(x) for x in v), key=repr)))
    if t is dict:
        return ("dict", tuple((canon(k), canon(x)) for k, x in v.items()))
    if t in (dt.datetime, dt.time):
        tz = v.tzinfo
        zone = getattr(tz, "key", None) or (tz.utcoffset(None if t is dt.time else v) if tz else None)
        return (t.__name__, v.replace(tzinfo=None).isoformat(), v.fold, zone)
    return (t.__name__, v)


def same(a, b) -> bool:
    """Exactly the same value: types, float bits (-0.0, NaN payloads), dict order, time zones."""
    if canon(a) != canon(b):
        return False
    if not _has_set(a):  # without sets, serde bytes are deterministic: compare what the store commits
        assert serde.dumps(a) == serde.dumps(b)
    return True


def _has_set(v) -> bool:
    t = type(v)
    if t in (set, frozenset):
        return True
    if t in (list, tuple):
        return any(_has_set(x) for x in v)
    if t is dict:
        return any(_has_set(k) or _has_set(x) for k, x in v.items())
    return False


def assert_round_trip(state, tmp_path, meta=None):
    target = tmp_path / "state"
    written = write_state(state, target, meta=meta)
    assert len(written) == len(state)
    back, back_meta = read_state(target)
    assert list(back) == list(state)
    assert same(back, state)
    assert same(back_meta, dict(meta or {}))
    return back


# -- round trips ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CASES))
def test_every_type_round_trips(name, tmp_path):
    value = CASES[name]
    back = assert_round_trip({"v": value}, tmp_path)["v"]
    expected_type = bytes if type(value) is bytearray else type(value)
    assert type(back) is expected_type
    text = dumps_tagged(value)
    assert same(loads_tagged(text), value)
    assert same(from_jsonable(to_jsonable(value)), value)
    json.loads(text)  # strict JSON: no NaN/Infinity literals
    assert "NaN" not in text and "Infinity" not in text


def test_all_cases_in_one_state_with_meta(tmp_path):
    meta = {"checkpoint": "abc123", "thread": "t-1", "step": 7, "at": dt.datetime(2026, 1, 1, tzinfo=PARIS),
            "$odd": (1,)}
    assert_round_trip(CASES, tmp_path, meta=meta)


def test_big_ints_are_plain_json(tmp_path):
    write_state({"n": [2**200, -(2**100)]}, tmp_path / "s")
    assert json.loads((tmp_path / "s" / "n.json").read_text()) == [2**200, -(2**100)]


def test_json_is_pretty_readable_and_keeps_dict_order(tmp_path):
    state = {"messages": [{"role": "user", "content": "héllo"}], "z": {"b": 1, "a": 2}}
    write_state(state, tmp_path / "s")
    text = (tmp_path / "s" / "messages.json").read_text(encoding="utf-8")
    assert text == '[\n  {\n    "role": "user",\n    "content": "héllo"\n  }\n]\n'
    assert list(json.loads((tmp_path / "s" / "z.json").read_text())) == ["b", "a"]


@pytest.mark.parametrize("value, expected", [
    (b"hi", {"$bytes": "aGk="}),
    ((1, 2), {"$tuple": [1, 2]}),
    ({"b", "a"}, {"$set": ["a", "b"]}),
    (frozenset({2, 1}), {"$frozenset": [1, 2]}),
    (math.nan, {"$float": "nan"}),
    (NEG_NAN, {"$float": "nan", "bits": "fff8000000000000"}),
    (math.inf, {"$float": "inf"}),
    (-math.inf, {"$float": "-inf"}),
    (-0.0, {"$float": "-0.0"}),
    (dt.datetime(2026, 11, 29, 10, tzinfo=PARIS), {"$datetime": "2026-11-29T10:00:00+01:00", "tz": "Europe/Paris"}),
    (dt.datetime(2026, 11, 29, 10, tzinfo=IST), {"$datetime": "2026-11-29T10:00:00+05:30"}),
    (dt.datetime(2026, 10, 25, 2, 30, tzinfo=PARIS, fold=1),
     {"$datetime": "2026-10-25T02:30:00+01:00", "tz": "Europe/Paris", "fold": 1}),
    (dt.date(2026, 11, 29), {"$date": "2026-11-29"}),
    (dt.time(10, 30), {"$time": "10:30:00"}),
    (dt.time(10, 30, tzinfo=PARIS), {"$time": "10:30:00", "tz": "Europe/Paris"}),
    (dt.timedelta(days=1, seconds=2, microseconds=3), {"$timedelta": {"days": 1, "seconds": 2, "microseconds": 3}}),
    ({1: "a", "b": 2}, {"$dict": [[1, "a"], ["b", 2]]}),
    ({"$tuple": 1, "$$x": 2, "y": 3}, {"$$tuple": 1, "$$$x": 2, "y": 3}),
    ([1, 1.0, True, None, "s"], [1, 1.0, True, None, "s"]),
])
def test_tag_format(value, expected):
    assert to_jsonable(value) == expected
    assert json.dumps(to_jsonable(value)) == json.dumps(expected)  # key order too


# -- unsupported values --------------------------------------------------------------------------


class Foo:
    pass


@pytest.mark.parametrize("value", [Foo(), 1 + 2j, [1, {"a": (Foo(),)}], dt.datetime(2026, 1, 1, tzinfo=dt.tzinfo()),
                                   type("S", (str,), {})("sub"), "\ud800", object()])
def test_unsupported_values_raise_serialization_error_and_write_nothing(value, tmp_path):
    with pytest.raises(SerializationError, match=r"state\['bad'\]"):
        write_state({"ok": 1, "bad": value}, tmp_path / "s")
    assert not (tmp_path / "s").exists() or not os.listdir(tmp_path / "s")


def test_unsupported_value_path_is_named():
    with pytest.raises(SerializationError, match=r"^value\[1\]\['a'\]\[0\]: object of type Foo is not serializable"):
        to_jsonable([0, {"a": (Foo(),)}])


@pytest.mark.parametrize("state", [{1: "x"}, {b"f": 1}, [("a", 1)], "abc"])
def test_bad_state_shapes(state, tmp_path):
    with pytest.raises(InvalidInputError):
        write_state(state, tmp_path / "s")


def test_bad_meta(tmp_path):
    with pytest.raises(InvalidInputError):
        write_state({}, tmp_path / "s", meta=[1])


# -- file names ----------------------------------------------------------------------------------

NASTY_NAMES = ["", ".", "..", "../etc/passwd", "/abs", "/", "a/b", "a\\b", "..\\..\\x", "nul\x00byte", "c:", "C:",
               "x:y", "Messages", "messages", "MESSAGES", "mEssages", "é", "e\u0301", "Ǆ", "ǅ", "ǆ", "ß", "SS", "ss",
               "😀", "%", "%41", "a.json", ".qvc-state", ".qvc-state.json", "con", "CON", "nul", "lpt1", "~x",
               " ", "  ", "tab\t", "new\nline", "x" * 300, "X" * 300, "é" * 300, "$tuple", "$$", "-", "_"]


def test_nasty_field_names_stay_inside_and_never_collide(tmp_path):
    state = {name: i for i, name in enumerate(NASTY_NAMES)}
    target = tmp_path / "s"
    written = write_state(state, target)
    assert len(set(written)) == len(written) == len(NASTY_NAMES)
    assert len({w.casefold() for w in written}) == len(written)  # safe on case-insensitive filesystems
    for name in written:
        assert "/" not in name and "\\" not in name and "\x00" not in name and not name.startswith(".")
        assert name.endswith(".json") and len(name.encode()) <= 255
        assert name.isascii()
        assert (target / name).is_file()
    assert sorted(os.listdir(target)) == sorted([*written, MANIFEST])
    assert sorted(os.listdir(tmp_path)) == ["s"]  # nothing escaped the directory
    back, _ = read_state(target)
    assert same(back, state)


def test_file_name_examples():
    assert field_filename("messages") == "messages.json"
    assert field_filename("Messages") == "%4Dessages.json"
    assert field_filename("") == "%.json"
    assert field_filename("..") == "%2E%2E.json"
    assert field_filename("../etc/passwd") == "%2E%2E%2Fetc%2Fpasswd.json"
    assert field_filename("a b") == "a%20b.json"
    assert field_filename("é") == "%C3%A9.json"
    assert field_filename("con") == "%63on.json"
    long = field_filename("x" * 1000)
    assert long.startswith("x" * 100) and "~" in long and len(long) < 200
    assert field_filename("x" * 1000) != field_filename("x" * 1001)
    assert field_filename("é" * 100) != field_filename("é" * 101)
    assert "%" not in field_filename("é" * 100).split("~")[0][-2:]  # never cut inside an escape


@given(st.text())
@settings(max_examples=examples(300), deadline=None)
def test_file_names_decode_back(name):
    fname = field_filename(name)
    assert fname.isascii() and fname.endswith(".json") and not fname.startswith(".")
    assert "/" not in fname and "\\" not in fname
    if "~" not in fname:
        assert field_from_filename(fname) == name
        assert fname.casefold() == fname.lower()


def test_field_from_filename_is_lenient_for_hand_made_names():
    assert field_from_filename("my notes.json") == "my notes"
    assert field_from_filename("Plan.json") == "Plan"
    assert field_from_filename("%4dessages.json") == "Messages"
    assert field_from_filename("%.json") == ""


@pytest.mark.parametrize("name", ["%zz.json", "%4.json", "a%.json", "%FF.json", "%C3.json", ".hidden.json",
                                  "x.txt", "a/b.json", "x" * 110 + "~0123456789abcdef0123.json"])
def test_field_from_filename_rejects_undecodable(name):
    with pytest.raises(InvalidInputError):
        field_from_filename(name)


def test_non_str_or_invalid_unicode_field_names(tmp_path):
    with pytest.raises(InvalidInputError):
        field_filename(3)
    with pytest.raises(InvalidInputError):
        write_state({"\udcff": 1}, tmp_path / "s")


# -- the directory contract ----------------------------------------------------------------------


def test_refuses_non_empty_directory_not_written_by_qvc(tmp_path):
    (tmp_path / "mine.txt").write_text("precious")
    with pytest.raises(InvalidInputError, match="not empty"):
        write_state({"a": 1}, tmp_path)
    assert os.listdir(tmp_path) == ["mine.txt"]
    assert (tmp_path / "mine.txt").read_text() == "precious"


def test_refuses_a_file_as_directory(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(InvalidInputError):
        write_state({"a": 1}, tmp_path / "f")
    with pytest.raises(InvalidInputError):
        read_state(tmp_path / "f")
    with pytest.raises(InvalidInputError):
        read_state(tmp_path / "missing")


def test_existing_empty_directory_is_fine(tmp_path):
    assert write_state({"a": 1}, tmp_path) == ["a.json"]


def test_rewrite_replaces_the_state_and_keeps_other_files(tmp_path):
    target = tmp_path / "s"
    write_state({"a": 1, "b": 2}, target, meta={"step": 1})
    (target / "notes.txt").write_text("keep me")
    (target / "extra.json").write_text("3")  # a field the user added
    write_state({"b": 20, "c": 30}, target, meta={"step": 2})  # a.json was qvc's: it goes
    assert sorted(os.listdir(target)) == sorted(["b.json", "c.json", MANIFEST, "notes.txt", "extra.json"])
    assert read_state(target) == ({"b": 20, "c": 30, "extra": 3}, {"step": 2})  # the user's field stays
    assert (target / "notes.txt").read_text() == "keep me"


def test_no_temp_files_left_behind(tmp_path):
    write_state(CASES, tmp_path / "s")
    write_state({"x": 1}, tmp_path / "s")
    assert not [n for n in os.listdir(tmp_path / "s") if n.startswith(".qvc-tmp")]


def test_read_without_manifest(tmp_path):
    (tmp_path / "a.json").write_text("1")
    with pytest.raises(InvalidInputError, match="no .qvc-state.json"):
        read_state(tmp_path)


# -- user edits ----------------------------------------------------------------------------------


def test_user_edits_a_value_deletes_a_field_and_adds_fields(tmp_path):
    target = tmp_path / "s"
    state = {"messages": [{"role": "user", "content": "hi"}], "step": 3, "scratch": {"notes": "x"}, "Plan": "p"}
    write_state(state, target, meta={"checkpoint": "c1"})
    data = json.loads((target / "messages.json").read_text())
    data.append({"role": "assistant", "content": "hello", "tags": {"$set": ["b", "a"]}})
    (target / "messages.json").write_text(json.dumps(data, indent=2))
    (target / "scratch.json").unlink()
    (target / "my notes.json").write_text('{"$tuple": [1, 2]}')
    (target / "%4Eew.json").write_text('"N"')
    (target / "ignored.txt").write_text("not a field")
    back, meta = read_state(target)
    assert meta == {"checkpoint": "c1"}
    assert list(back) == ["messages", "step", "Plan", "New", "my notes"]
    assert back["messages"][1] == {"role": "assistant", "content": "hello", "tags": {"a", "b"}}
    assert back["my notes"] == (1, 2) and back["New"] == "N" and back["Plan"] == "p"
    assert "scratch" not in back


def test_added_file_colliding_with_a_manifest_field(tmp_path):
    target = tmp_path / "s"
    write_state({"a": 1}, target)
    manifest = json.loads((target / MANIFEST).read_text())
    manifest["fields"]["a"] = "other.json"
    (target / MANIFEST).write_text(json.dumps(manifest))
    (target / "other.json").write_text("1")
    with pytest.raises(InvalidInputError, match="names field 'a'"):
        read_state(target)


def test_added_file_with_undecodable_name(tmp_path):
    write_state({"a": 1}, tmp_path)
    (tmp_path / "%zz.json").write_text("1")
    with pytest.raises(InvalidInputError, match="%zz.json"):
        read_state(tmp_path)


@pytest.mark.parametrize("text, line, message", [
    ('{\n  "a": 1,\n  "b": \n}\n', 4, "invalid JSON"),
    ("[1, 2", 1, "invalid JSON"),
    ("", 1, "invalid JSON"),
    ('[\n  1,\n  {"$bytes": "!!!"}\n]', 3, "malformed \\$bytes tag: invalid base64"),
    ('[\n\n  {"$float": "one"}]', 3, "malformed \\$float"),
    ('{"a": {\n"$datetime": "2026-13-01T00:00:00"}}', 1, "malformed \\$datetime"),
    ('\n{"$datetime": "2026-11-29T10:00:00+02:00", "tz": "Europe/Paris"}', 2, "does not match"),
    ('{"$datetime": "2026-11-29T10:00:00", "tz": "Not/AZone"}', 1, "unknown time zone"),
    ('{"$datetime": "2026-11-29T10:00:00", "fold": 2}', 1, "fold"),
    ('{"$time": "10:00:00+01:00", "tz": "Europe/Paris"}', 1, "no UTC offset"),
    ('{"$timedelta": {"days": 1.5}}', 1, "malformed \\$timedelta"),
    ('{"$timedelta": {"days": 1000000000}}', 1, "malformed \\$timedelta"),
    ('{"$date": 20261129}', 1, "malformed \\$date"),
    ('{"$tuple": 1}', 1, "expected a list"),
    ('{"$set": [[1]]}', 1, "unhashable"),
    ('{"$frozenset": [{"a": 1}]}', 1, "unhashable"),
    ('{"$dict": [[1, 2, 3]]}', 1, "pairs"),
    ('{"$dict": [[[1], 2]]}', 1, "unhashable key"),
    ('{"$dict": [[1, 2], [1, 3]]}', 1, "duplicate key"),
    ('{"$float": "inf", "bits": "7ff8000000000000"}', 1, "only allowed"),
    ('{"$float": "nan", "bits": "3ff0000000000000"}', 1, "not a NaN"),
    ('{"$bytes": "aGk=", "extra": 1}', 1, "unexpected key"),
    ('{"$tuple": [], "$set": []}', 1, "several tags"),
    ('{"$pickle": "x"}', 1, "unknown tag"),
    ('{"a": 1, "a": 2}', 1, "duplicate key"),
    ('[\n"{\\"}", {"a": "}{"},\n {"$float": "x"}]', 3, "malformed \\$float"),  # braces inside strings
    ('{"a": {},\n"b": [{}, {\n"$set": [[1]]}]}', 2, "unhashable"),  # the line of the object's "{"
    ("[" * 100000, None, "nested too deeply|invalid JSON"),
    ("1" * 5000, None, "invalid JSON"),
])
def test_invalid_files_name_file_and_line(tmp_path, text, line, message):
    write_state({"f": 0}, tmp_path)
    (tmp_path / "f.json").write_text(text)
    with pytest.raises(InvalidInputError, match=message) as info:
        read_state(tmp_path)
    assert os.path.join(str(tmp_path), "f.json") in str(info.value)
    if line is not None:
        assert f"line {line}:" in str(info.value)


def test_tagged_json_uses_the_public_json_api_only():
    """No CPython internals (``json.decoder.JSONObject``, ``json.scanner``): only ``json``'s documented API."""
    import qvc.codec.tagged as tagged

    text = Path(tagged.__file__).read_text()
    assert "json.decoder" not in text and "json.scanner" not in text and "JSONObject" not in text


def test_hand_written_json_is_accepted(tmp_path):
    write_state({"f": 0}, tmp_path)
    (tmp_path / "f.json").write_text('\ufeff{"$$ref": 1, "n": NaN, "i": -Infinity, "d": {"$date": "2026-11-29"},'
                                     ' "z": {"$datetime": "2026-11-29T10:00:00", "tz": "Europe/Paris"}}')
    value = read_state(tmp_path)[0]["f"]
    assert value["$ref"] == 1 and math.isnan(value["n"]) and value["i"] == -math.inf
    assert value["d"] == dt.date(2026, 11, 29)
    assert value["z"] == dt.datetime(2026, 11, 29, 10, tzinfo=PARIS) and value["z"].tzinfo is PARIS


def test_not_utf8(tmp_path):
    write_state({"f": 0}, tmp_path)
    (tmp_path / "f.json").write_bytes(b'"\xff"')
    with pytest.raises(InvalidInputError, match="UTF-8"):
        read_state(tmp_path)


# -- crafted manifests and symlinks --------------------------------------------------------------


@pytest.mark.parametrize("fname", ["../outside.json", "/etc/passwd", "sub/x.json", "..", ".", "", ".qvc-state.json",
                                   "..\\outside.json", "x\x00.json", "x.txt", 3, None, ["a.json"]])
def test_crafted_manifest_entries_are_rejected(tmp_path, fname):
    target = tmp_path / "s"
    target.mkdir()
    (tmp_path / "outside.json").write_text('"SECRET"')
    (target / "sub").mkdir()
    (target / "sub" / "x.json").write_text('"SECRET"')
    manifest = {"format": "qvc-state/1", "meta": {}, "fields": {"f": fname}}
    (target / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(InvalidInputError) as info:
        read_state(target)
    assert "SECRET" not in str(info.value)
    with pytest.raises(InvalidInputError):  # a crafted directory is not "ours" to overwrite either
        write_state({"f": 1}, target)
    assert (tmp_path / "outside.json").read_text() == '"SECRET"'


@pytest.mark.parametrize("manifest", [
    "not json", "[]", '{"format": "other"}', '{"format": "qvc-state/1", "fields": []}',
    '{"format": "qvc-state/1", "fields": {}, "meta": 3}',
    '{"format": "qvc-state/1", "fields": {"a": "x.json", "b": "x.json"}}',
    '{"format": "qvc-state/1", "fields": {"$dict": [[1, "x.json"]]}}',
])
def test_malformed_manifests(tmp_path, manifest):
    (tmp_path / MANIFEST).write_text(manifest)
    with pytest.raises(InvalidInputError):
        read_state(tmp_path)


def test_manifest_may_name_files_freely(tmp_path):
    write_state({"a": 1}, tmp_path)
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    manifest["fields"] = {"renamed field": "a.json"}
    (tmp_path / MANIFEST).write_text(json.dumps(manifest))
    assert read_state(tmp_path)[0] == {"renamed field": 1}


def test_symlinked_field_file_is_not_followed(tmp_path):
    target = tmp_path / "s"
    write_state({"a": 1}, target)
    (tmp_path / "outside.json").write_text('"SECRET"')
    (target / "a.json").unlink()
    os.symlink(tmp_path / "outside.json", target / "a.json")
    with pytest.raises(InvalidInputError, match="symbolic link"):
        read_state(target)
    os.symlink(tmp_path / "outside.json", target / "added.json")
    write_state({"a": 2}, target)  # replaces the link itself, never writes through it
    assert (tmp_path / "outside.json").read_text() == '"SECRET"'
    assert not (target / "a.json").is_symlink()
    assert os.path.islink(target / "added.json")  # not qvc's: left as it is
    write_state({"a": 3, "added": 4}, target)  # a field's file replaces the link, not its target
    assert (tmp_path / "outside.json").read_text() == '"SECRET"'
    assert read_state(target)[0] == {"a": 3, "added": 4}


def test_symlinked_manifest_is_not_followed(tmp_path):
    write_state({"a": 1}, tmp_path / "real")
    target = tmp_path / "s"
    target.mkdir()
    os.symlink(tmp_path / "real" / MANIFEST, target / MANIFEST)
    with pytest.raises(InvalidInputError, match="symbolic link"):
        read_state(target)


def test_non_regular_field_files(tmp_path):
    write_state({"a": 1}, tmp_path)
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(InvalidInputError, match="not a regular file"):
        read_state(tmp_path)
    (tmp_path / "dir.json").rmdir()
    os.mkfifo(tmp_path / "fifo.json")
    with pytest.raises(InvalidInputError, match="not a regular file"):  # and does not block
        read_state(tmp_path)


# -- property: random states round-trip exactly ----------------------------------------------------

_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-(2**200), max_value=2**200),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=10), st.binary(max_size=10),
    st.datetimes(timezones=st.none() | st.just(dt.timezone.utc) | st.sampled_from([IST, PARIS])),
    st.dates(), st.times(timezones=st.none() | st.sampled_from([IST, PARIS])), st.timedeltas(),
)
_HASHABLE = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80), st.text(max_size=5),
              st.binary(max_size=5), st.floats(allow_nan=False), st.dates()),
    lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3),
    max_leaves=6,
)
_KEYS = st.text(max_size=6) | st.sampled_from(["$tuple", "$$x", "$", "$bytes", "tz"])
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.tuples(inner, inner),
        st.dictionaries(_KEYS, inner, max_size=4),
        st.dictionaries(_HASHABLE, inner, max_size=4), st.sets(_HASHABLE, max_size=4),
        st.frozensets(_HASHABLE, max_size=4),
    ),
    max_leaves=12,
)
_STATES = st.dictionaries(st.text(max_size=12) | st.sampled_from(NASTY_NAMES), _VALUES, max_size=5)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_STATES, st.dictionaries(_KEYS, _VALUES, max_size=3))
def test_random_states_round_trip_through_files(state, meta):
    with tempfile.TemporaryDirectory() as tmp:
        target = os.path.join(tmp, "s")
        write_state(state, target, meta=meta)
        back, back_meta = read_state(target)
        assert same(back, state)
        assert same(back_meta, meta)
        write_state(back, target, meta=meta)  # rewriting a managed directory works too
        assert same(read_state(target)[0], state)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_VALUES)
def test_random_values_round_trip_through_json_text(value):
    assert same(loads_tagged(dumps_tagged(value)), value)


# -- local changes and recording a commit --------------------------------------------------------


def test_local_changes_lists_edited_deleted_and_added_field_files(tmp_path):
    from qvc.readers.statefiles import local_changes, untracked_files

    target = tmp_path / "s"
    assert local_changes(target) == []  # missing: nothing of ours to overwrite
    write_state({"a": 1, "b": [1], "c": "x"}, target, meta={"id": "x"})
    assert local_changes(target) == []
    (target / "a.json").write_text("2\n")
    (target / "b.json").unlink()
    (target / "new.json").write_text("true\n")
    (target / "notes.txt").write_text("not a field file")
    assert local_changes(target) == ["a.json", "b.json", "new.json"]
    assert untracked_files(target) == ["new.json"]
    write_state({"a": 1}, target)  # write_state itself still overwrites: the refusal is the caller's
    assert local_changes(target) == ["new.json"]  # never removed: qvc did not write it
    assert read_state(target)[0] == {"a": 1, "new": True}
    write_state({"a": 1, "new": False}, target)  # a field's file of that name replaces it
    assert local_changes(target) == [] and untracked_files(target) == []


def test_record_state_makes_what_was_read_the_new_base(tmp_path):
    from qvc.readers.statefiles import MANIFEST, local_changes, record_state

    target = tmp_path / "s"
    write_state({"a": 1, "b": 2}, target, meta={"id": "old"})
    (target / "a.json").write_text("10\n")
    (target / "b.json").unlink()
    (target / "c.json").write_text('"new"\n')
    files: dict = {}
    state, meta = read_state(target, files=files)
    assert state == {"a": 10, "c": "new"} and meta == {"id": "old"}
    assert sorted(files) == ["a.json", "c.json"] and files["c.json"][0] == "c"
    record_state(target, files, {"id": "new"})
    assert local_changes(target) == []
    assert read_state(target) == ({"a": 10, "c": "new"}, {"id": "new"})
    # a manifest without digests (an older qvc): every field file counts as changed
    manifest = json.loads((target / MANIFEST).read_text())
    del manifest["digests"]
    (target / MANIFEST).write_text(json.dumps(manifest))
    assert local_changes(target) == ["a.json", "c.json"]
