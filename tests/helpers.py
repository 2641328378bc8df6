"""Test helpers: a request-counting wrapper for any backend, and small builders."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from evstore import ObjectStore, StoreUnavailableError
from evstore._backends import Forwarding
from evstore._ids import parse_segment


class CountingStore(Forwarding):
    """Forwards to another backend and counts requests by kind (PUT, GET, HEAD, LIST, DELETE)."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.counts: Counter[str] = Counter()
        self.keys: list[tuple[str, str]] = []

    def _request(self, kind: str, key: str, times: int = 1) -> None:
        for _ in range(times):
            self._note(kind, key)

    def _note(self, kind: str, key: str) -> None:
        self.counts[kind] += 1
        self.keys.append((kind, key))

    def reset(self) -> None:
        self.counts.clear()
        self.keys.clear()

    @property
    def total(self) -> int:
        return sum(self.counts.values())


class NoDeletes(CountingStore):
    """A backend as the writer role of ``infra/iam`` sees it: every DELETE is refused (S3
    answers a DeleteObjects it denies with an error per key)."""

    def delete_many(self, keys: Iterable[str]) -> int:
        self._note("DELETE", next(iter(keys), ""))
        raise StoreUnavailableError("delete refused: access denied (AccessDenied)")


def msg(text: str, role: str = "user", **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": text, **extra}


T0 = datetime(2026, 3, 1, 10, 30, tzinfo=UTC)


class Clock:
    """A store clock that tests move by hand (``Store(clock=...)``, ``MemoryStore(clock=...)``)."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


def segment_sizes(backend: ObjectStore, prefix: str) -> dict[str, set[int]]:
    """The sizes (events) of the segments under a session's ``prefix``, by kind of name ("segments", "young")."""
    sizes: dict[str, set[int]] = {"segments": set(), "young": set()}
    for info in backend.list(prefix):
        name = info.key[len(prefix) :]
        if (segment := parse_segment(name)) is not None:
            sizes[name.split("/")[0]].add(segment[1] - segment[0] + 1)
    return sizes


def python_output(code: str) -> str:
    """What ``python -c code`` prints, stripped, in a fresh interpreter (what it imports is its own)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    return done.stdout.strip()
