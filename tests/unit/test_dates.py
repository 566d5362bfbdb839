"""qvc.readers.dates: the date forms of ``qvc log --since/--until`` (git's)."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest

from qvc.errors import InvalidInputError
from qvc.readers.dates import parse_date

NOW = 1_796_000_000.0  # a fixed clock


@pytest.mark.parametrize("text, ago", [
    ("now", 0), ("today", 0), ("yesterday", 86400), ("1 second ago", 1), ("5 minutes ago", 300),
    ("2 hours ago", 7200), ("3 days ago", 3 * 86400), ("1 week ago", 7 * 86400), ("2 months ago", 60 * 86400),
    ("1 year ago", 365 * 86400), ("2.weeks.ago", 14 * 86400), ("1 day 2 hours ago", 93600), ("3 days", 3 * 86400),
    ("10 Minutes Ago", 600), ("1 hour, 30 minutes ago", None),
])
def test_relative_forms(text, ago):
    if ago is None:
        with pytest.raises(InvalidInputError):
            parse_date(text, NOW)
    else:
        assert parse_date(text, NOW) == NOW - ago


def test_absolute_forms():
    utc = datetime(2026, 11, 30, 14, 5, 9, tzinfo=timezone.utc).timestamp()
    assert parse_date("@1700000000", NOW) == 1_700_000_000
    assert parse_date("2026-11-30T14:05:09Z", NOW) == utc
    assert parse_date("2026-11-30T16:05:09+02:00", NOW) == utc
    assert parse_date("2026-11-30 16:05:09 +0200", NOW) == utc
    assert parse_date("Mon, 30 Nov 2026 14:05:09 +0000", NOW) == utc
    local = time.mktime((2026, 11, 30, 0, 0, 0, 0, 0, -1))  # no zone: local time, as git reads it
    assert parse_date("2026-11-30", NOW) == local == parse_date("2026.11.30", NOW) == parse_date("2026/11/30", NOW)
    assert parse_date("2026-11-30 14:05", NOW) == time.mktime((2026, 11, 30, 14, 5, 0, 0, 0, -1))
    midnight = parse_date("midnight", NOW)
    assert parse_date("noon", NOW) - midnight == 12 * 3600 and midnight <= NOW < midnight + 86400


@pytest.mark.parametrize("bad", ["", "  ", "soon", "ago", "2 fortnights ago", "2026-13-45", "@x", "days ago"])
def test_anything_else_is_invalid_input(bad):
    with pytest.raises(InvalidInputError):
        parse_date(bad, NOW)
