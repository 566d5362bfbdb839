"""Dates as ``git log --since/--until`` reads them (:func:`parse_date`), and as it writes them
relative to now (:func:`ago`).

Accepted forms (case-insensitive), each giving a Unix time:

* ``now``, ``today`` (now), ``yesterday`` (24 hours ago), ``midnight`` and ``noon`` (today,
  local time);
* relative: ``N UNIT [N UNIT ...] [ago]`` with UNIT one of second, minute, hour, day, week,
  month (30 days), year (365 days), singular or plural, also written with dots
  (``2.weeks.ago``);
* ``@SECONDS``: a Unix time;
* ISO 8601: ``2026-11-30``, ``2026-11-30 14:05``, ``2026-11-30T14:05:09``, with an optional
  ``Z`` or ``+HH:MM`` / ``+HHMM`` offset (without one, local time, as git reads it); also
  ``2026.11.30`` and ``2026/11/30``;
* RFC 2822, as ``git log`` prints dates by default: ``Tue, 1 Dec 2026 08:52:02 +0000``.

Imports only :mod:`qvc.errors`.
"""

from __future__ import annotations

import re
import time
from datetime import datetime
from email.utils import parsedate_to_datetime

from qvc.errors import InvalidInputError

_UNITS = {"second": 1, "sec": 1, "minute": 60, "min": 60, "hour": 3600, "day": 86400, "week": 7 * 86400,
          "month": 30 * 86400, "year": 365 * 86400}
_RELATIVE = re.compile(r"(\d+)\s*(second|sec|minute|min|hour|day|week|month|year)s?\b")
_OFFSET = re.compile(r"([+-])(\d\d)(\d\d)$")


def parse_date(text: str, now: float | None = None) -> float:
    """The Unix time ``text`` names, in one of the forms above (``now`` defaults to the clock).

    Raises :class:`InvalidInputError` for anything else.
    """
    if not isinstance(text, str) or not text.strip():
        raise InvalidInputError("empty date")
    now = time.time() if now is None else now
    if re.fullmatch(r"\s*@-?\d+(\.\d+)?\s*", text):
        return float(text.strip()[1:])
    word = " ".join(text.strip().lower().replace(".", " ").split()) if not _looks_absolute(text) \
        else text.strip()
    local = datetime.fromtimestamp(now).astimezone()
    if word in ("now", "today"):
        return now
    if word == "yesterday":
        return now - 86400
    if word in ("midnight", "noon"):
        return local.replace(hour=0 if word == "midnight" else 12, minute=0, second=0, microsecond=0).timestamp()
    relative = _relative(word)
    if relative is not None:
        return now - relative
    absolute = _absolute(text.strip())
    if absolute is not None:
        return absolute
    raise InvalidInputError(f"cannot read date {text!r} (try '2 days ago', '2026-11-30 14:05', '@1764000000')")


def _looks_absolute(text: str) -> bool:
    return bool(re.match(r"\s*\d{4}[-./]\d", text)) or "," in text


def _relative(word: str) -> float | None:
    body = word[:-4].rstrip() if word.endswith(" ago") else word
    if not body:
        return None
    total, pos = 0.0, 0
    for m in _RELATIVE.finditer(body):
        if body[pos:m.start()].strip():
            return None
        total += int(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    return total if pos and not body[pos:].strip() else None


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
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
    if when.tzinfo is None:
        when = when.astimezone()  # local time, as git reads a date without a zone
    return when.timestamp()


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
