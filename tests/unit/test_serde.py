"""qvc.codec.serde: exact round trips, field paths in errors, and hostile input."""

from __future__ import annotations

import collections
import datetime as dt
import enum
import math
import os
import subprocess
import sys
import zoneinfo
from pathlib import Path

import msgpack
import pytest
from helpers import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qvc import Checkpoint, CheckpointConfig, CorruptionError, InvalidInputError, SerializationError
from qvc.codec import serde

ROOT = Path(__file__).resolve().parents[2]


def same(a, b) -> bool:
    """Equal in value *and* type, recursively; NaN equals NaN; -0.0 differs from 0.0."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        if len(a) != len(b):
            return False
        bkeys = list(b)
        for k, v in a.items():
            match = [bk for bk in bkeys if same(k, bk)]
            if len(match) != 1 or not same(v, b[match[0]]):
                return False
        return True
    if isinstance(a, (set, frozenset)):
        return len(a) == len(b) and all(any(same(x, y) for y in b) for x in a)
    if isinstance(a, (dt.datetime, dt.time)):
        return (a == b and a.tzinfo == b.tzinfo and a.fold == b.fold
                and (a.utcoffset() if isinstance(a, dt.time) else a.utcoffset()) ==
                (b.utcoffset() if isinstance(b, dt.time) else b.utcoffset()))
    return a == b


def roundtrip(value):
    return serde.loads(serde.dumps(value))


PARIS = zoneinfo.ZoneInfo("Europe/Paris")
IST = dt.timezone(dt.timedelta(hours=5, minutes=30))
NEG = dt.timezone(dt.timedelta(hours=-3, minutes=-15), "odd")

CASES = {
    "str": "héllo\x00wörld \U0001f600",
    "empty_str": "",
    "bytes": b"\x00\xff\x10binary",
    "empty_bytes": b"",
    "int": 42,
    "neg_int": -7,
    "zero": 0,
    "int64_max": 2**63 - 1,
    "int64_min": -(2**63),
    "uint64_max": 2**64 - 1,
    "just_past_uint64": 2**64,
    "just_past_int64_min": -(2**63) - 1,
    "big_pos": 2**100,
    "big_neg": -(2**100),
    "huge": 7**500,
    "float": 3.141592653589793,
    "tiny": 5e-324,
    "nan": float("nan"),
    "inf": float("inf"),
    "neg_inf": float("-inf"),
    "neg_zero": -0.0,
    "pos_zero": 0.0,
    "true": True,
    "false": False,
    "none": None,
    "list": [1, "a", None, 2.5],
    "empty_list": [],
    "tuple": (1, "a", None),
    "empty_tuple": (),
    "nested_tuple_in_list": [1, (2, (3, [4, (5,)])), [(6, 7)]],
    "tuple_with_big_int": (2**100, -(2**100), [2**70]),
    "dict": {"a": 1, "b": [2, 3]},
    "dict_int_keys": {1: "one", -2: "minus two", 2**100: "big"},
    "dict_tuple_keys": {(1, 2): "pair", ("a", (True, None)): "nested"},
    "dict_bytes_keys": {b"k": 1, b"\x00": 2},
    "dict_mixed_keys": {1: "int", "1": "str", b"1": "bytes", 1.5: "float", None: "none", (1,): "tuple",
                        frozenset({1}): "fs"},
    "dict_bool_vs_int_keys": {True: "bool", 2: "int"},
    "set": {1, 2, "three", (4, 5)},
    "empty_set": set(),
    "frozenset": frozenset({1, "a", b"b"}),
    "empty_frozenset": frozenset(),
    "set_of_frozensets": {frozenset({1, 2}), frozenset()},
    "datetime_utc": dt.datetime(2024, 5, 17, 12, 30, 45, 123456, tzinfo=dt.timezone.utc),
    "datetime_fixed_offset": dt.datetime(2024, 5, 17, 12, 30, tzinfo=IST),
    "datetime_negative_named_offset": dt.datetime(1999, 12, 31, 23, 59, 59, tzinfo=NEG),
    "datetime_zoneinfo": dt.datetime(2024, 7, 1, 9, 0, tzinfo=PARIS),
    "datetime_zoneinfo_fold": dt.datetime(2024, 10, 27, 2, 30, fold=1, tzinfo=PARIS),
    "datetime_naive": dt.datetime(2024, 5, 17, 12, 30, 45, 999999),
    "datetime_naive_fold": dt.datetime(2024, 5, 17, 1, 30, fold=1),
    "datetime_min": dt.datetime.min,
    "datetime_max": dt.datetime.max,
    "date": dt.date(2024, 2, 29),
    "time": dt.time(23, 59, 58, 1),
    "time_utc": dt.time(12, 0, tzinfo=dt.timezone.utc),
    "time_fixed_offset": dt.time(8, 15, tzinfo=IST),
    "timedelta": dt.timedelta(days=-3, seconds=5, microseconds=7),
    "timedelta_big": dt.timedelta(days=999999999, hours=23),
    "everything_nested": {
        "when": [dt.datetime(2020, 1, 1, tzinfo=PARIS), dt.date(2020, 1, 2)],
        (1, "k"): {"s": {1, 2}, "fs": frozenset({(1, 2)}), "n": float("nan"), "z": -0.0, "b": 2**100},
    },
}


@pytest.mark.parametrize("name", list(CASES))
def test_exact_round_trip(name):
    value = CASES[name]
    back = roundtrip(value)
    assert same(value, back), (value, back)


def test_same_helper_is_strict():
    # sanity: the comparison used above really distinguishes what it claims to
    assert not same(1, 1.0)
    assert not same(1, True)
    assert not same(0.0, -0.0)
    assert not same([1], (1,))
    assert not same({1}, frozenset({1}))
    assert not same(dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
                    dt.datetime(2024, 1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1))))
    assert not same({1: "a"}, {True: "a"})
    assert same(float("nan"), float("nan"))


def test_specific_types_and_values():
    assert math.isnan(roundtrip(float("nan")))
    assert roundtrip(float("inf")) == math.inf
    assert roundtrip(float("-inf")) == -math.inf
    nz = roundtrip(-0.0)
    assert nz == 0.0 and math.copysign(1.0, nz) == -1.0
    assert roundtrip(2**100) == 2**100 and type(roundtrip(2**100)) is int
    assert roundtrip(-(2**100)) == -(2**100)
    back = roundtrip([(1, 2), [(3,)]])
    assert type(back) is list and type(back[0]) is tuple and type(back[1][0]) is tuple
    d = roundtrip({1: "a", (2, 3): "b", b"c": "d"})
    assert set(d) == {1, (2, 3), b"c"}
    assert type(roundtrip({1})) is set and type(roundtrip(frozenset({1}))) is frozenset


def test_datetimes_keep_their_timezone():
    utc = roundtrip(dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc))
    assert utc.utcoffset() == dt.timedelta(0) and utc.tzinfo == dt.timezone.utc
    fixed = roundtrip(dt.datetime(2024, 1, 1, tzinfo=IST))
    assert fixed.utcoffset() == dt.timedelta(hours=5, minutes=30)
    zoned = roundtrip(dt.datetime(2024, 1, 1, tzinfo=PARIS))
    assert isinstance(zoned.tzinfo, zoneinfo.ZoneInfo) and zoned.tzinfo.key == "Europe/Paris"
    # zoneinfo keeps DST rules: a summer time has a different offset than a winter time
    summer = roundtrip(dt.datetime(2024, 7, 1, tzinfo=PARIS))
    assert summer.utcoffset() == dt.timedelta(hours=2) and zoned.utcoffset() == dt.timedelta(hours=1)
    naive = roundtrip(dt.datetime(2024, 1, 1, 3, 4, 5))
    assert naive.tzinfo is None
    ambiguous = roundtrip(dt.datetime(2024, 10, 27, 2, 30, fold=1, tzinfo=PARIS))
    assert ambiguous.fold == 1 and ambiguous.utcoffset() == dt.timedelta(hours=1)
    assert type(roundtrip(dt.date(2024, 1, 1))) is dt.date  # not a datetime
    t = roundtrip(dt.time(1, 2, 3, 4, tzinfo=IST))
    assert t.tzinfo.utcoffset(None) == dt.timedelta(hours=5, minutes=30)


def test_round_trip_through_the_store(store):
    state = {f"f_{name}": value for name, value in CASES.items()}
    store.put(CheckpointConfig("t1"), Checkpoint(id="c1", thread_id="t1", step=0, state_data=state),
              {"source": "loop", "when": dt.datetime(2024, 1, 1, tzinfo=PARIS), "big": 2**100}, {})
    tup = store.get_tuple(CheckpointConfig("t1"))
    for key, value in state.items():
        assert same(value, tup.checkpoint.state_data[key]), key
    assert set(tup.checkpoint.state_data) == set(state)
    assert same(tup.metadata["when"], dt.datetime(2024, 1, 1, tzinfo=PARIS))
    assert tup.metadata["big"] == 2**100


def test_long_list_of_exotic_values_round_trips_through_the_store(store):
    # long lists are stored as chunk blobs: the values must survive the chunking unchanged
    items = [(i, float("nan") if i % 7 == 0 else -0.0, 2**100 + i, {i}, dt.timedelta(seconds=i)) for i in range(150)]
    store.put(CheckpointConfig("t1"), Checkpoint(id="c1", thread_id="t1", step=0, state_data={"items": items}),
              {}, {})
    back = store.get(CheckpointConfig("t1")).state_data["items"]
    assert same(items, back)


class Foo:
    pass


def test_unserializable_object_names_field_path_via_store_put(store):
    state = {"task": "x", "tools": [{"result": 1}, {"result": 2}, {"result": 3}, {"result": Foo()}]}
    with pytest.raises(SerializationError) as info:
        store.put(CheckpointConfig("t1"), Checkpoint(id="c1", thread_id="t1", step=0, state_data=state), {}, {})
    assert 'state_data["tools"][3]["result"]: object of type Foo is not serializable' in str(info.value)
    assert isinstance(info.value, InvalidInputError)
    assert isinstance(info.value, TypeError)
    # nothing was stored
    assert store.get(CheckpointConfig("t1")) is None
    assert store.threads() == []


def test_unserializable_object_in_long_chunked_list_names_absolute_index(store):
    tools = [{"result": i} for i in range(150)]
    tools[100] = {"result": Foo()}
    with pytest.raises(SerializationError) as info:
        store.put(CheckpointConfig("t1"), Checkpoint(id="c1", thread_id="t1", step=0,
                                                     state_data={"tools": tools}), {}, {})
    assert 'state_data["tools"][100]["result"]: object of type Foo is not serializable' in str(info.value)


def test_unserializable_paths_for_other_containers():
    with pytest.raises(SerializationError, match=r'^value\["a"\]\[1\]: object of type Foo is not serializable'):
        serde.dumps({"a": [0, Foo()]})
    with pytest.raises(SerializationError, match=r"\[2\]: object of type Foo"):
        serde.dumps((0, 1, Foo()))
    with pytest.raises(SerializationError, match=r"object of type object is not serializable"):
        serde.dumps({1: object()}, "root")
    with pytest.raises(SerializationError, match=r"\[2\]"):
        serde.dumps({2: Foo()}, "root")
    with pytest.raises(SerializationError):
        serde.dumps(lambda: None)


class _Str(str):
    pass


class _Color(enum.IntEnum):
    RED = 1


@pytest.mark.parametrize("value", [_Str("a"), _Color.RED, collections.OrderedDict(a=1), 1 + 2j, Foo()],
                         ids=["str_subclass", "int_enum", "ordered_dict", "complex", "object"])
def test_unsupported_types_raise_instead_of_changing_type(value):
    # The contract: the listed types round-trip exactly, "anything else raises
    # SerializationError". A value must never come back silently as another type.
    with pytest.raises(SerializationError, match=r'^state\["k"\]\[0\]: object of type \w+ is not serializable'):
        serde.dumps({"k": [value]}, "state")


def _dumps_ok(value) -> bool:
    try:
        serde.dumps(value)
    except SerializationError:
        return False
    return True


@pytest.mark.parametrize("value", [bytearray(b"x\x00y"), memoryview(b"x\x00y")], ids=["bytearray", "memoryview"])
def test_bytearray_and_memoryview_read_back_as_bytes(value):
    # documented exception: byte strings to msgpack, stored and read back as bytes
    back = roundtrip({"k": [value]})
    assert back == {"k": [b"x\x00y"]} and type(back["k"][0]) is bytes


def _nest(depth: int):
    value = ()
    for _ in range(depth - 1):
        value = (value,)
    return value  # `depth` tuples, each inside the next


def test_extension_nesting_limit_is_a_typed_error_not_a_crash():
    shallow = _nest(serde.MAX_EXT_DEPTH // 2)
    assert same(roundtrip(shallow), shallow)
    # whatever depth dumps accepts, loads must read back (no write-only values)
    deepest = next(d for d in range(serde.MAX_EXT_DEPTH + 5, 0, -1) if _dumps_ok(_nest(d)))
    assert deepest >= serde.MAX_EXT_DEPTH - 1
    assert same(roundtrip(_nest(deepest)), _nest(deepest))
    too_deep = ()
    for _ in range(serde.MAX_EXT_DEPTH + 50):
        too_deep = (too_deep,)
    with pytest.raises(SerializationError):
        serde.dumps(too_deep)


def test_unserializable_metadata_is_typed_error(store):
    with pytest.raises(SerializationError) as info:
        store.put(CheckpointConfig("t1"), Checkpoint(id="c1", thread_id="t1", step=0, state_data={}),
                  {"source": "loop", "obj": Foo()}, {})
    assert "object of type Foo is not serializable" in str(info.value)
    assert "obj" in str(info.value)


# -- hostile bytes ----------------------------------------------------------------------

_EXT_CODES = st.integers(min_value=-128, max_value=127) | st.integers(min_value=0, max_value=10)


def _ext_frame(code: int, data: bytes) -> bytes:
    """A raw msgpack ext 8 frame (any code, negative ones included)."""
    return b"\xc7" + bytes([len(data)]) + code.to_bytes(1, "big", signed=True) + data


_INNER = st.one_of(
    st.binary(max_size=40),
    st.lists(st.one_of(st.text(max_size=12), st.integers(min_value=-(2**63), max_value=2**64 - 1), st.none(),
                       st.booleans(), st.binary(max_size=8)),
             max_size=5).map(lambda v: msgpack.packb(v, use_bin_type=True)),
)
_EXT = st.builds(_ext_frame, _EXT_CODES, _INNER)
_VALID_BYTES = [serde.dumps(v) for v in CASES.values()]
_VALID = st.integers(min_value=0, max_value=len(_VALID_BYTES) - 1).map(lambda i: _VALID_BYTES[i])
_MUTATED = st.builds(lambda data, i, b: data[:i % (len(data) + 1)] + bytes([b]) + data[i % (len(data) + 1) + 1:],
                     _VALID, st.integers(min_value=0, max_value=10_000), st.integers(min_value=0, max_value=255))
_TRUNCATED = st.builds(lambda data, i: data[: i % max(len(data), 1)], _VALID,
                       st.integers(min_value=0, max_value=10_000))
_DEEP = st.integers(min_value=1, max_value=3000).map(lambda n: b"\x91" * n + b"\xc0")


HOSTILE = st.one_of(st.binary(max_size=200), _EXT, _MUTATED, _TRUNCATED, _DEEP)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(HOSTILE)
def test_loads_on_arbitrary_bytes_returns_or_raises_corruption_error(data):
    try:
        serde.loads(data, "fuzz")
    except CorruptionError as exc:
        assert "fuzz" in str(exc)


@pytest.mark.parametrize("data", [
    b"",
    b"\xc1",  # never-used msgpack byte
    b"\x92\x01",  # truncated array
    msgpack.packb(msgpack.ExtType(99, b"x")),  # unknown extension
    msgpack.packb(msgpack.ExtType(8, b"not-an-int")),  # bigint with junk
    msgpack.packb(msgpack.ExtType(8, b"9" * 5000)),  # bigint past Python's digit limit
    msgpack.packb(msgpack.ExtType(4, msgpack.packb(["2024-01-01T00:00:00", 7, None, None]))),  # bad fold
    msgpack.packb(msgpack.ExtType(4, msgpack.packb(["2024-01-01T00:00:00", 0, None, "../../etc/passwd"]))),
    msgpack.packb(msgpack.ExtType(4, msgpack.packb(["2024-01-01T00:00:00", 0, None, "No/Such_Zone"]))),
    msgpack.packb(msgpack.ExtType(4, msgpack.packb(["2024-01-01T00:00:00", 0, 2**62, None]))),  # huge offset
    msgpack.packb(msgpack.ExtType(4, msgpack.packb([1, 2]))),  # wrong arity
    msgpack.packb(msgpack.ExtType(5, b"\xff\xfe")),  # date not ascii
    msgpack.packb(msgpack.ExtType(7, msgpack.packb([10**12, 0, 0]))),  # timedelta overflow
    msgpack.packb(msgpack.ExtType(2, msgpack.packb([[1, 2]]))),  # unhashable set member
    b"\x81\x90\x01",  # map with a list key (unhashable)
    b"\x91" * 100_000 + b"\xc0",  # nested far too deep
])
def test_loads_known_bad_inputs_raise_corruption_error(data):
    with pytest.raises(CorruptionError):
        serde.loads(data, "bad")


_NESTED_SCRIPT = r"""
import sys, msgpack
from qvc.codec import serde
from qvc.errors import CorruptionError
for depth in map(int, sys.argv[1:]):
    data = b"\x90"  # an empty array, wrapped in `depth` tuple extensions
    for _ in range(depth):
        data = msgpack.packb(msgpack.ExtType(serde.EXT_TUPLE, data))
    try:
        serde.loads(data, "nested")
        print(depth, "ok", flush=True)
    except CorruptionError:
        print(depth, "CorruptionError", flush=True)
"""


def test_loads_on_deeply_nested_extension_types_does_not_crash_the_interpreter():
    # Run in a child process: if decoding overflows the C stack, the interpreter dies
    # (SIGSEGV) instead of raising, and that must not take the test session down with it.
    depths = ["10", "100", "150", "200", "300", "1000", "5000"]
    proc = subprocess.run([sys.executable, "-c", _NESTED_SCRIPT, *depths], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)
    survived = proc.stdout.split()
    assert proc.returncode == 0, (
        f"serde.loads crashed the interpreter (exit {proc.returncode}) on nested tuple extensions; "
        f"results before the crash: {proc.stdout!r}")
    for depth in depths:
        assert depth in survived


# -- round trip property ----------------------------------------------------------------

_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-(2**200), max_value=2**200),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=10), st.binary(max_size=10),
    st.datetimes(timezones=st.none() | st.just(dt.timezone.utc) | st.sampled_from([IST, PARIS])),
    st.dates(), st.times(), st.timedeltas(),
)
_HASHABLE = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80), st.text(max_size=5),
              st.binary(max_size=5)),
    lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3),
    max_leaves=6,
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.tuples(inner, inner),
        st.dictionaries(_HASHABLE, inner, max_size=4), st.sets(_HASHABLE, max_size=4),
        st.frozensets(_HASHABLE, max_size=4),
    ),
    max_leaves=12,
)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_VALUES)
def test_round_trip_property(value):
    assert same(value, roundtrip(value))


def test_equal_sets_encode_to_equal_bytes_whatever_their_order():
    """Content addressing: a set's blob must not depend on its iteration order."""
    a = {f"member-{i}" for i in range(50)} | {None, 1, 2.5}
    b = set(sorted(a, key=repr, reverse=True))
    assert a == b
    assert serde.dumps({"s": a}) == serde.dumps({"s": b})
    assert serde.dumps(frozenset(a)) == serde.dumps(frozenset(b))
    big = {2**70, -(2**70), "x"}  # the slow path (ints beyond msgpack's range) too
    assert serde.dumps(big) == serde.dumps(set(reversed(list(big))))
    assert serde.loads(serde.dumps(big), "s") == big
