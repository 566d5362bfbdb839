"""Dates as ``git log --since/--until`` reads them (:func:`parse_date`, git's "approxidate"),
and as it writes them relative to now (:func:`ago`).

Accepted forms (case-insensitive), each giving a Unix time, as git reads them:

* a timestamp: ``@SECONDS``; ISO 8601 with a time (``2026-11-30 14:05``,
  ``2026-11-30T14:05:09``, with an optional ``Z`` or ``+HH:MM`` / ``+HHMM`` offset; without
  one, local time); RFC 2822, as ``git log`` prints dates (``Tue, 1 Dec 2026 08:52:02 +0000``);
* anything else is read word by word, as git's approxidate does, starting from now:
  ``now``; ``yesterday`` (24 hours back); ``noon``, ``midnight``, ``tea`` (the last 12:00,
  00:00, 17:00 not after the time so far: ``noon`` at 10:00 is yesterday's); ``N UNIT``
  (second, minute, hour, day, week: that long back; month, year: calendar months and years
  back), ``N`` in digits, ``one`` to ``ten`` or ``last`` (1); ``last friday`` / ``N friday``
  (weekdays); a date (``2026-11-30``, ``2026/11/30``, ``2026.11.30``, ``11/30/2026``,
  ``30.11.2026``, ``Nov 30``, ``30 November 2026``) or a time (``14:05``, ``3pm``, ``10am``);
  ``ago`` and commas are skipped (``2.weeks.ago``, ``1 hour, 30 minutes ago``). As in git, a
  date without a time of day keeps the current one (``2026-11-01`` at 12:34 is 12:34 that day),
  and ``never`` is the Unix epoch; ``today`` is now.

Where git would silently take a phrase it does not read as now (``a week ago``, ``soon``,
``tomorrow``), or numbers that make no date as whatever they happen to make (``2026-13-45``),
this raises :class:`InvalidInputError`. Imports only :mod:`qvc.errors`.
"""

from __future__ import annotations

import re
import time
from datetime import datetime

from qvc.errors import InvalidInputError
from qvc.lazy import Pattern

_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")
_WEEKDAYS = ("sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday")  # tm_wday order
_NUMBERS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
_UNITS = (("seconds", 1), ("minutes", 60), ("hours", 3600), ("days", 86400), ("weeks", 7 * 86400))
_SKIPPED = frozenset({"ago", "at", "and"})  # words git passes over
_OFFSET = Pattern(r"([+-])(\d\d)(\d\d)$")
_TOKEN = Pattern(r"\d+|[a-z]+|[^\da-z]")


def parse_date(text: str, now: float | None = None) -> float:
    """The Unix time ``text`` names, in one of the forms above (``now`` defaults to the clock).

    Raises :class:`InvalidInputError` for anything else.
    """
    if not isinstance(text, str) or not text.strip():
        raise InvalidInputError("empty date")
    now = time.time() if now is None else now
    if re.fullmatch(r"\s*@-?\d+(\.\d+)?\s*", text):
        return float(text.strip()[1:])
    if ":" in text and (re.match(r"\s*\d{4}[-./]\d", text) or "," in text):
        absolute = _absolute(text.strip())
        if absolute is not None:
            return absolute
    try:
        found = _Approx(now).read(text.lower())
    except (OverflowError, ValueError):  # numbers past what the clock holds (99999 years ago)
        found = None
    if found is None:
        raise InvalidInputError(f"cannot read date {text!r} (try 'last week', '2 days ago', 'yesterday noon', "
                                "'2026-11-30 14:05', '@1764000000')")
    return found


class _Approx:
    """git's ``approxidate_str`` (date.c): fields of a local ``struct tm`` set word by word,
    year, month and day unset (-1) until a word sets them; ``update`` is git's ``update_tm``."""

    def __init__(self, now: float) -> None:
        self.now_ts = int(now)
        self.now = time.localtime(self.now_ts)
        t = self.now
        self.year, self.mon, self.mday = -1, -1, -1  # tm_year (years since 1900), tm_mon (0-11), tm_mday
        self.hour, self.min, self.sec, self.wday = t.tm_hour, t.tm_min, t.tm_sec, (t.tm_wday + 1) % 7
        self.isdst = t.tm_isdst  # kept from the last reading, as git's struct tm keeps it for mktime
        self.number = 0
        self.touched = False
        self.unread = False

    def update(self, sec: int) -> int:
        if self.mday < 0:
            self.mday = self.now.tm_mday
        if self.mon < 0:
            self.mon = self.now.tm_mon - 1
        if self.year < 0:
            self.year = self.now.tm_year - 1900
            if self.mon > self.now.tm_mon - 1:
                self.year -= 1
        n = int(time.mktime((self.year + 1900, self.mon + 1, self.mday, self.hour, self.min, self.sec, 0, 0,
                             self.isdst)))
        n -= sec
        t = time.localtime(n)
        self.year, self.mon, self.mday = t.tm_year - 1900, t.tm_mon - 1, t.tm_mday
        self.hour, self.min, self.sec, self.wday = t.tm_hour, t.tm_min, t.tm_sec, (t.tm_wday + 1) % 7
        self.isdst = t.tm_isdst
        return n

    def read(self, text: str) -> float | None:
        tokens = _TOKEN.findall(text)
        i = 0
        while i < len(tokens):
            token = tokens[i]
            if token.isdigit():
                self.pending()
                i = self.digit(tokens, i)
                self.touched = True
                continue
            if token.isalpha():
                self.alpha(token)
            elif not token.isspace() and token not in ",.-/:+":
                self.unread = True
            i += 1
        self.pending()
        if not self.touched or self.unread:
            return None
        return float(self.update(0))

    def pending(self) -> None:
        number, self.number = self.number, 0
        if not number:
            return
        if self.mday < 0 and number < 32:
            self.mday = number
        elif self.mon < 0 and number < 13:
            self.mon = number - 1
        elif self.year < 0:
            if 1969 < number < 2100:
                self.year = number - 1900
            elif 69 < number < 100:
                self.year = number
            elif number < 38:
                self.year = 100 + number

    def digit(self, tokens: list[str], i: int) -> int:
        """A number at ``tokens[i]``: a time (``14:05[:09]``), a date (``2026-11-30``...), or a
        number for the next word; the index after what it took."""
        number = int(tokens[i])
        sep = tokens[i + 1] if i + 1 < len(tokens) else ""
        if sep in (":", ".", "/", "-") and i + 2 < len(tokens) and tokens[i + 2].isdigit():
            num2, num3, end = int(tokens[i + 2]), -1, i + 3
            if end + 1 < len(tokens) and tokens[end] == sep and tokens[end + 1].isdigit():
                num3, end = int(tokens[end + 1]), end + 2
            if self.multi(number, sep, num2, num3):
                return end
            self.unread = True  # git reads 2026-13-45 as numbers, whatever they make: here an error
        if not (tokens[i].startswith("0") and len(tokens[i]) > 2):  # "Dec 02", never "Dec 0002"
            self.number = number
        return i + 1

    def multi(self, num: int, sep: str, num2: int, num3: int) -> bool:
        if sep == ":":
            num3 = max(num3, 0)
            if num < 25 and 0 <= num2 < 60 and 0 <= num3 <= 60:
                self.hour, self.min, self.sec = num, num2, num3
                return True
            return False
        if num > 70 and (self.set_date(num, num2, num3, False) or self.set_date(num, num3, num2, False)):
            return True
        if sep != "." and self.set_date(num3, num, num2, True):
            return True
        if self.set_date(num3, num2, num, True):
            return True
        return sep == "." and self.set_date(num3, num, num2, True)

    def set_date(self, year: int, month: int, day: int, refuse_future: bool) -> bool:
        if not (0 < month < 13 and 0 < day < 32):
            return False
        if year == -1:
            if not refuse_future:
                return False
            tm_year = time.gmtime(self.now_ts).tm_year - 1900
        elif 1970 <= year < 2100:
            tm_year = year - 1900
        elif 70 < year < 100:
            tm_year = year
        elif year < 38:
            tm_year = year + 100
        else:
            return False
        if refuse_future:  # a date more than ten days ahead is not what was meant
            import calendar  # deferred: start-up speed (only parsing needs it)

            try:
                specified = calendar.timegm((tm_year + 1900, month, day, self.hour, self.min, self.sec))
            except (OverflowError, ValueError):
                return False
            if self.now_ts + 10 * 86400 < specified:
                return False
        self.mon, self.mday = month - 1, day
        if year != -1:
            self.year = tm_year
        return True

    def alpha(self, word: str) -> None:
        for i, name in enumerate(_MONTHS):
            if len(word) >= 3 and name.startswith(word):
                self.mon, self.touched = i, True
                return
        special = {"yesterday": self.yesterday, "noon": lambda: self.at(12), "midnight": lambda: self.at(0),
                   "tea": lambda: self.at(17), "pm": lambda: self.half(12), "am": lambda: self.half(0),
                   "never": self.never, "now": self.right_now,
                   "today": self.right_now}.get(word)
        if special is not None:
            special()
            self.touched = True
            return
        if not self.number:
            if word in _NUMBERS[1:]:
                self.number, self.touched = _NUMBERS.index(word), True
            elif word == "last":
                self.number, self.touched = 1, True
            elif word not in _SKIPPED:
                self.unread = True  # git passes over it (a unit without a number too): here it is an error
            return
        for unit, size in _UNITS:
            if word in (unit, unit[:-1]):
                self.update(size * self.number)
                self.number, self.touched = 0, True
                return
        for i, name in enumerate(_WEEKDAYS):
            if len(word) >= 3 and name.startswith(word):
                n, self.number = self.number - 1, 0
                diff = self.wday - i
                if diff <= 0:
                    n += 1
                self.update((diff + 7 * n) * 86400)
                self.touched = True
                return
        if word in ("month", "months"):
            self.update(0)
            n = self.mon - self.number
            if n < 0:
                n += 12
                self.year -= 1
            self.mon, self.number, self.touched = n, 0, True
            return
        if word in ("year", "years"):
            self.update(0)
            self.year -= self.number
            self.number, self.touched = 0, True
            return
        if word not in _SKIPPED:
            self.unread = True

    def yesterday(self) -> None:
        self.number = 0
        self.update(86400)

    def right_now(self) -> None:
        self.number = 0
        self.update(0)

    def never(self) -> None:
        t = time.localtime(0)
        self.year, self.mon, self.mday = t.tm_year - 1900, t.tm_mon - 1, t.tm_mday
        self.hour, self.min, self.sec, self.isdst = t.tm_hour, t.tm_min, t.tm_sec, t.tm_isdst
        self.number = 0

    def at(self, hour: int) -> None:
        self.pending()
        if self.hour < hour:
            self.update(86400)
        self.hour, self.min, self.sec = hour, 0, 0

    def half(self, offset: int) -> None:
        hour, n = self.hour, self.number
        self.number = 0
        if n:
            hour, self.min, self.sec = n, 0, 0
        self.hour = hour % 12 + offset


def _absolute(text: str) -> float | None:
    iso = re.sub(r"^(\d{4})[./](\d\d?)[./](\d\d?)", lambda m: f"{m[1]}-{int(m[2]):02d}-{int(m[3]):02d}", text)
    iso = iso[:-1] + "+00:00" if iso.endswith(("Z", "z")) else iso
    offset = _OFFSET.search(iso)
    if offset and re.search(r"\d:\d\d(:\d\d)?\s*[+-]\d{4}$", iso):
        iso = iso[:offset.start()].rstrip() + f"{offset[1]}{offset[2]}:{offset[3]}"
    try:
        when = datetime.fromisoformat(iso)
    except ValueError:
        when = None
    if when is None:
        from email.utils import parsedate_to_datetime  # deferred: 8 ms of every CLI start-up otherwise

        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
    if when.tzinfo is None:
        when = when.astimezone()  # local time, as git reads a date without a zone
    return when.timestamp()


def local_date(ts: float) -> str:
    """``2026-12-07 03:06:23 +0000``: a Unix time as a local date to the second, the one text form of
    dates (``qvc log``, ``qvc show``, times in values), as ``git log --date=iso`` writes them."""
    return datetime.fromtimestamp(ts).astimezone().strftime("%Y-%m-%d %H:%M:%S %z")


def ago(ts: float, now: float | None = None) -> str:
    """``3 minutes ago``: ``ts`` relative to ``now`` (default: the current time), as
    ``git log --date=relative`` writes it."""
    delta = int((time.time() if now is None else now) - ts)
    if delta < 0:
        return "in the future"
    for unit, size in (("year", 365 * 86400), ("month", 30 * 86400), ("week", 7 * 86400), ("day", 86400),
                       ("hour", 3600), ("minute", 60), ("second", 1)):
        if delta >= size:
            n = delta // size
            return f"{n} {unit}{'s' if n != 1 else ''} ago"
    return "just now"
