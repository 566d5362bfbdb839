"""qvc.plumbing.delta: git's delta format, encoded against one base and applied back.

That git itself reads what qvc encodes is checked where the deltas live, in merged packs
(tests/unit/test_pack.py); here every encoded delta must rebuild its target exactly.
"""

from __future__ import annotations

import random

import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from qvc.plumbing import delta


def _roundtrip(base: bytes, target: bytes, limit: int | None = None) -> bytes | None:
    d = delta.Base(base).delta(target, len(target) + 64 if limit is None else limit)
    if d is not None:
        assert delta.apply(base, d) == target
    return d


@pytest.mark.parametrize("size", [1000, 4096, 0x10000, 0x10000 + 7, 300_000])
def test_an_appended_version_costs_about_what_it_adds(size):
    rng = random.Random(size)
    base = rng.randbytes(size)
    for target, most in ((base + rng.randbytes(400), 440), (b"\x01\x02" + base[3:] + rng.randbytes(50), 90),
                         (base[:size // 2] + rng.randbytes(10) + base[size // 2:], 60), (base, 20)):
        d = _roundtrip(base, target)
        assert d is not None and len(d) <= most, (size, len(d or b""))


def test_no_delta_for_unrelated_or_too_short_data():
    rng = random.Random(1)
    base = rng.randbytes(10_000)
    assert _roundtrip(base, rng.randbytes(10_000), 5_000) is None
    assert _roundtrip(base, base[:60]) is None  # too short to be worth it: stored whole
    assert _roundtrip(base, base[:500] + rng.randbytes(9_500)) is None  # only the opening in common
    assert _roundtrip(b"", base) is None
    assert _roundtrip(base, base[:5000] + rng.randbytes(5000), 2_000) is None  # over the limit


def test_apply_rejects_a_delta_for_another_base():
    base = random.Random(2).randbytes(1000)
    d = delta.Base(base).delta(base + b"more", 2000)
    with pytest.raises(ValueError, match="base size"):
        delta.apply(base + b"x", d)
    with pytest.raises(ValueError, match="result size"):
        delta.apply(base, d[:-2])


@settings(max_examples=examples(200), deadline=None)
@given(st.binary(min_size=0, max_size=3000), st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 200),
                                                                st.binary(max_size=100)), max_size=6))
def test_any_edit_of_the_base_rebuilds_exactly(base, edits):
    target = base
    for at, cut, new in edits:
        at = min(at, len(target))
        target = target[:at] + new + target[at + cut:]
    _roundtrip(base, target)
    _roundtrip(target, base)
