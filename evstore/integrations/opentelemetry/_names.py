"""The names evstore's telemetry reports under (see the package docstring): the request kinds
and their span attributes, the I/O directions, the duration histogram's buckets, ``error.type``,
and the attributes an operation's span gets when it ends. Pure: nothing here calls OpenTelemetry.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import evstore

#: The OpenTelemetry GenAI semantic conventions' attribute for a conversation: the session id.
CONVERSATION_ID = "gen_ai.conversation.id"
#: The request kinds the backend interface knows, in the order ``OperationBackend`` tallies them.
KINDS = ("PUT", "GET", "HEAD", "LIST", "DELETE")
PUT, GET, HEAD, LIST, DELETE = range(len(KINDS))
_KIND_ATTRIBUTES = tuple(f"evstore.requests.{kind.lower()}" for kind in KINDS)
#: ``network.io.direction`` of the bytes ``Telemetry`` totals: PUT bodies sent, GET bodies received.
DIRECTIONS = ("transmit", "receive")

#: Histogram buckets: store operations take from microseconds (memory) to minutes (gc of a bucket).
DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def error_type(error: BaseException) -> str:
    """``error.type``: the exception's fully qualified class name, by its public name for evstore's."""
    cls = type(error)
    module = cls.__module__
    if module.startswith("evstore.") and getattr(evstore, cls.__name__, None) is cls:
        module = "evstore"
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def finished_attributes(
    outcome: str,
    error: BaseException | None,
    requests: Sequence[int],
    round_trips: int,
    bytes_up: int,
    bytes_down: int,
    extra: dict[str, Any],
) -> dict[str, Any]:
    """The attributes an operation's span ends with: its ``outcome`` (``error``'s, when it
    raised), its tallies and ``extra``. Only what is not zero: each attribute costs the SDK a
    validation (an append sets 6)."""
    attributes = {
        "evstore.outcome": outcome,
        "evstore.requests": sum(requests),
        "evstore.round_trips": round_trips,
        **extra,
    }
    for kind, count in enumerate(requests):
        if count:
            attributes[_KIND_ATTRIBUTES[kind]] = count
    if bytes_up:
        attributes["evstore.bytes.up"] = bytes_up
    if bytes_down:
        attributes["evstore.bytes.down"] = bytes_down
    if error is not None:
        attributes["error.type"] = error_type(error)
    return attributes
