"""Deterministic conversation messages of a given size, shared by the benchmarks and their children."""

from __future__ import annotations

import random
import string
from typing import Any

_ALPHABET = string.ascii_letters + string.digits + "      .,"
_POOL = "".join(random.Random(20240601).choices(_ALPHABET, k=1 << 17))


def text(i: int, size: int = 1024) -> str:
    """``size`` characters of pseudo-random text, different for each ``i``."""
    start = (i * 7919) % (len(_POOL) - size)
    return _POOL[start : start + size]


def message(i: int, size: int = 1024) -> dict[str, Any]:
    """An evstore message: user and assistant turns alternate."""
    return {"role": "user" if i % 2 == 0 else "assistant", "content": text(i, size)}


def strands_message(i: int, size: int = 1024) -> dict[str, Any]:
    """The same message in Strands' (Bedrock Converse) shape."""
    return {"role": "user" if i % 2 == 0 else "assistant", "content": [{"text": text(i, size)}]}
