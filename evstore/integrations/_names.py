"""Name parts as evstore id characters: the one scheme the adapters share (LangGraph's thread ids
and namespaces, ADK's app, user and session names).

``A-Z a-z 0-9 -`` stay as they are and every other byte becomes ``_`` and two hex digits, so
``.`` never appears in a part and can separate parts. ADK's ids have always spelled the digits
upper-case (``_3A``) and LangGraph's lower-case (``_3a``); stored ids keep their case, so each
adapter names its own. Only the canonical form decodes (a kept byte escaped, the other case,
anything else refused): each text has one id, and each id one text. Pure.
"""

from __future__ import annotations

KEPT = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")
_UPPER = "0123456789ABCDEF"
_LOWER = "0123456789abcdef"


def escape(data: bytes, *, upper: bool) -> str:
    """``data`` as id characters (``upper``: the hex digits upper-case)."""
    digits = _UPPER if upper else _LOWER
    return "".join(chr(byte) if byte in KEPT else "_" + digits[byte >> 4] + digits[byte & 15] for byte in data)


def unescape(part: str, *, upper: bool) -> bytes | None:
    """The bytes ``escape(data, upper=upper)`` made ``part`` from, or None when it made no such part."""
    digits = _UPPER if upper else _LOWER
    data = bytearray()
    i = 0
    while i < len(part):
        char = part[i]
        if char == "_":
            pair = part[i + 1 : i + 3]
            if len(pair) != 2 or any(c not in digits for c in pair):
                return None
            byte = int(pair, 16)
            if byte in KEPT:
                return None  # not canonical: escape keeps it
            data.append(byte)
            i += 3
        elif char.isascii() and ord(char) in KEPT:
            data.append(ord(char))
            i += 1
        else:
            return None
    return bytes(data)
