"""The command's spellings of gc's grace (a duration) and of a moment (gc's now, a preview's
time, an audit's since). Pure."""

from __future__ import annotations

from datetime import datetime, timedelta

from .._codec import parse_ts
from .._errors import InvalidInputError


def parse_duration(text: str) -> timedelta:
    """``90s``, ``15m``, ``12h``, ``1d``, ``2w``, or a number of seconds: from 0 to 3650 days
    (``InvalidInputError`` otherwise, nan and the infinities included)."""
    text = text.strip().lower()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    number, unit = (text[:-1], text[-1]) if text and text[-1] in units else (text, "s")
    try:
        value = float(number)
    except ValueError:
        raise InvalidInputError(f"invalid duration {text[:40]!r}: use e.g. 90s, 15m, 12h, 1d, 2w") from None
    seconds = value * units[unit]  # bounded in seconds, after the unit: 3000000d is too long as well
    if not 0 <= seconds <= 3650 * 86400:  # false for nan, so nan is refused too
        raise InvalidInputError(f"invalid duration {text[:40]!r}: from 0 to 3650 days")
    return timedelta(seconds=seconds)


def parse_time(text: str) -> datetime:
    """``YYYY-MM-DD`` (midnight UTC) or an RFC 3339 time with its zone, of a year from 1970 to
    9000; ``InvalidInputError`` otherwise."""
    try:
        moment = parse_ts(text if "T" in text else text + "T00:00:00Z")
    except (ValueError, OverflowError):
        raise InvalidInputError(f"invalid date {text[:40]!r}: use YYYY-MM-DD or an RFC 3339 time") from None
    if moment.tzinfo is None:
        raise InvalidInputError(f"invalid date {text[:40]!r}: give a time zone (Z)")
    # far enough from datetime's limits (years 1 and 9999) that a grace or a retention period
    # added to it or taken from it never leaves them (OverflowError)
    if not 1970 <= moment.year <= 9000:
        raise InvalidInputError(f"invalid date {text[:40]!r}: give a year from 1970 to 9000")
    return moment
