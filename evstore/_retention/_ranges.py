"""Where gc splits its listing: key ranges and the names about halfway along them (the package
docstring says how gc lists). Pure: ``_gc`` sends the LISTs."""

from __future__ import annotations

import bisect
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._plan import Listed

#: The characters of session ids in key order.
ID_ALPHABET = "".join(sorted("-._0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"))
_PRECISION = 4
#: A range whose listing will most likely end within this many more pages is not split.
_FINISHING_PAGES = 1.5


class Range:
    """The keys after ``after`` and before ``end`` (None: to the end of the listing's prefix),
    listed a page at a time; ``listed``: the session its pages have reached."""

    def __init__(self, after: str, end: str | None) -> None:
        self.origin = after
        self.after = after
        self.end = end
        self.pages = 0
        self.sent = False
        self.listed: Listed | None = None


def _number(name: str, alphabet: str) -> int:
    """The first ``_PRECISION`` characters of ``name`` as a number whose digits are places in
    ``alphabet`` (0: the name has ended; a character outside it counts as the one before it)."""
    value = 0
    for i in range(_PRECISION):
        value = value * (len(alphabet) + 1) + (bisect.bisect_right(alphabet, name[i]) if i < len(name) else 0)
    return value


def _shared(a: str, b: str) -> int:
    """How many characters ``a`` and ``b`` start with in common."""
    common = 0
    while common < min(len(a), len(b)) and a[common] == b[common]:
        common += 1
    return common


def pages_left(origin: str, reached: str, end: str, pages: int, alphabet: str = ID_ALPHABET) -> float:
    """About how many more pages a range that took ``pages`` pages from ``origin`` to
    ``reached`` needs to reach ``end``, were its ids spread evenly. Pure."""
    common = _shared(origin, end)
    start, at, stop = (_number(name[common:], alphabet) for name in (origin, reached, end))
    return pages * (stop - at) / (at - start) if at > start else math.inf


def between(low: str, high: str | None, alphabet: str = ID_ALPHABET) -> str | None:
    """A name about halfway between ``low`` and ``high`` (None: past every name), both
    excluded, spelled in ``alphabet`` (sorted characters of the id alphabet: those the ids seen
    so far use, so the halves hold ids alike) after their common start, so without ``/``
    unless that start has one; None if there is none at this precision. Pure."""
    base = len(alphabet) + 1
    common = _shared(low, high) if high is not None else 0
    top = _number(high[common:], alphabet) if high is not None else base**_PRECISION
    middle = (_number(low[common:], alphabet) + top) // 2
    chars: list[str] = []
    for place in range(_PRECISION - 1, -1, -1):
        digit = middle // base**place % base
        if digit == 0:
            break
        chars.append(alphabet[digit - 1])
    name = low[:common] + "".join(chars)
    if low < name and (high is None or name < high) and "/" not in name:
        return name
    return None


def block_end(start: str) -> str | None:
    """The first id after every id that starts with ``start`` (None: there is none, ``start``
    being empty or all of the id alphabet's last character). Pure."""
    while start:
        place = ID_ALPHABET.find(start[-1])
        if 0 <= place < len(ID_ALPHABET) - 1:
            return start[:-1] + ID_ALPHABET[place + 1]
        start = start[:-1]
    return None


def split_point(origin: str, after: str, end: str | None, pages: int, *, lowest: str, seen: set[str]) -> str | None:
    """Where to split a range that started after ``origin``, has listed ``pages`` pages up to
    ``after`` and ends at ``end`` (None: the last range), all names below the listing's root:
    about halfway from the session its listing is in to its end, spelled in the characters of
    the ids ``seen`` so far (``lowest``: the first of them). None: not worth a LIST more. Pure."""
    low = after
    slash = low.find("/")
    if slash >= 0:
        low = low[: slash + 1]  # the session the listing is in lies wholly before the boundary
    alphabet = "".join(sorted(seen)) if len(seen) > 1 else ID_ALPHABET
    # the last range: toward the end of the block of ids that start as every id listed so far
    # does (ids s0000000...: s0001), or past every name
    high = end if end is not None else block_end(lowest[: _shared(lowest, low)])
    if high is not None:
        if pages_left(origin or lowest, low, high, pages, alphabet) <= _FINISHING_PAGES:
            return None  # a page or two most likely end it (or its block): halves would cost a LIST more
        return between(low, high, alphabet) or (between(low, None, alphabet) if end is None else None)
    return between(low, None, alphabet)
