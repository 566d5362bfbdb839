"""qvc.readers.dates: the date forms of ``qvc log --since/--until`` (git's)."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest
from helpers import run_git

from qvc.errors import InvalidInputError
from qvc.readers.dates import parse_date

NOW = 1_796_000_000.0  # a fixed clock


@pytest.mark.parametrize("text, ago", [
    ("now", 0), ("today", 0), ("yesterday", 86400), ("1 second ago", 1), ("5 minutes ago", 300),
    ("2 hours ago", 7200), ("3 days ago", 3 * 86400), ("1 week ago", 7 * 86400), ("last week", 7 * 86400),
    ("one week ago", 7 * 86400), ("2.weeks.ago", 14 * 86400), ("1 day 2 hours ago", 93600), ("3 days", 3 * 86400),
    ("10 Minutes Ago", 600), ("1 hour, 30 minutes ago", 5400), ("a week ago", None), ("week ago", None),
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
    clock = time.localtime(NOW)  # a date without a time of day keeps the current one, as in git
    local = time.mktime((2026, 11, 20, clock.tm_hour, clock.tm_min, clock.tm_sec, 0, 0, -1))
    assert parse_date("2026-11-20", NOW) == local == parse_date("2026.11.20", NOW) == parse_date("2026/11/20", NOW)
    assert parse_date("11/20/2026", NOW) == local == parse_date("20.11.2026", NOW) == parse_date("Nov 20", NOW)
    assert parse_date("2026-11-30 14:05", NOW) == time.mktime((2026, 11, 30, 14, 5, 0, 0, 0, -1))
    midnight = parse_date("midnight", NOW)
    assert midnight <= NOW < midnight + 86400
    noon = parse_date("noon", NOW)  # the last noon: today's after 12:00, else yesterday's
    assert noon <= NOW < noon + 86400 and time.localtime(noon).tm_hour == 12


def test_calendar_months_and_years():
    then = time.localtime(parse_date("2 months ago", NOW))
    clock = time.localtime(NOW)
    assert (then.tm_mon - clock.tm_mon) % 12 == 10 and then.tm_mday == clock.tm_mday
    assert time.localtime(parse_date("last year", NOW)).tm_year == clock.tm_year - 1


PHRASES = ["last week", "2 days ago", "yesterday", "2026-11-01", "noon", "midnight", "tea", "last friday",
           "yesterday noon", "3pm", "10am", "one week ago", "last month", "2 months ago", "last year",
           "2026-11-01 10:00", "Dec 1", "1 dec 2026", "now", "11/01/2026", "2.weeks.ago", "2 weeks 3 days ago",
           "10:30", "2026-11-01T10:00:00Z", "never", "1 hour, 30 minutes ago", "2 friday", "30.11.2026",
           "30 November 2026", "Tue, 1 Dec 2026 08:52:02 +0000", "@1700000000", "last sunday noon", "13 months ago"]


@pytest.mark.parametrize("tz", ["UTC", "America/New_York"])
def test_same_time_as_gits_approxidate(tz, monkeypatch):
    """Each phrase gives the time `git rev-parse --since=PHRASE` gives, at the same clock second."""
    monkeypatch.setenv("TZ", tz)
    time.tzset()
    try:
        for phrase in PHRASES:
            for _ in range(3):  # the clock may tick between git and us: try again
                before = int(time.time())
                out = run_git(None, "rev-parse", f"--since={phrase}").stdout.strip()
                if int(time.time()) == before:
                    break
            assert out.startswith("--max-age="), out
            assert parse_date(phrase, before) == int(out.split("=")[1]), phrase
    finally:
        monkeypatch.undo()
        time.tzset()


@pytest.mark.parametrize("bad", ["", "  ", "soon", "ago", "2 fortnights ago", "2026-13-45", "@x", "days ago"])
def test_anything_else_is_invalid_input(bad):
    with pytest.raises(InvalidInputError):
        parse_date(bad, NOW)
