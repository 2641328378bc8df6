"""What every framework's section shares: the conversation's names, the sizes of the full and quick runs, and
``Harness``, how a framework makes a turn over its adapter and over its native store."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evstore import Store

SID = "chat-1"
APP = "bench"
USER = "user-1"
REPLY = "Here is a short answer from the canned model, about as long as a sentence or two of a real reply."
RTT = 0.015  # seconds of delay per evstore request while a turn is measured


def prompt(i: int) -> str:
    return f"question {i}: what should the agent do next in this conversation?"


# ---- configuration ---------------------------------------------------------


@dataclass(frozen=True)
class Config:
    quick: bool
    lengths: tuple[int, ...]  # evstore events in the session when turns are measured
    turns: int  # turns measured per length (the long-lived object)
    rtt: float


FULL = Config(quick=False, lengths=(10, 300, 1_500), turns=3, rtt=RTT)
QUICK = Config(quick=True, lengths=(10, 300), turns=2, rtt=RTT)


class Harness:
    """One framework: how its adapter and its native store make a turn.

    ``open`` makes the objects of a new process over ``store`` (adapter object, framework
    objects); ``turn`` makes turn ``i`` with them. ``open_native`` and ``native_turn`` likewise
    over the native store in ``directory``. ``evstore_id`` names the evstore session that holds
    the conversation (whose length is measured)."""

    key = ""
    title = ""
    native = ""

    def evstore_id(self) -> str:
        raise NotImplementedError

    def open(self, store: Store) -> Any:
        raise NotImplementedError

    def turn(self, handle: Any, i: int) -> None:
        raise NotImplementedError

    def open_native(self, directory: Path) -> Any:
        raise NotImplementedError

    def native_turn(self, handle: Any, i: int) -> None:
        raise NotImplementedError

    def grow(self, handle: Any, native: Any, i: int) -> None:
        """Add turn ``i`` to both stores while a session is grown to a length (not measured): a whole
        turn, unless a harness writes what a turn writes without its reads (see ``frameworks.py``)."""
        self.turn(handle, i)
        self.native_turn(native, i)

    def grown(self, handle: Any, native: Any) -> None:
        """A stretch of ``grow`` calls is over: whatever it held back is stored."""

    def close(self, handle: Any) -> None:
        """Let go of a process's objects (``open``'s or ``open_native``'s)."""
