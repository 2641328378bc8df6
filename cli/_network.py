"""The global network options (``--connect-timeout``, ``--read-timeout``, ``--max-attempts``,
``--retry-deadline``) and the note printed while a request is retried.

Each option left out falls back to its environment variable (``EVSTORE_CONNECT_TIMEOUT``,
...), then to the library's default: the library reads the environment, so the two ways
of setting a value cannot disagree; the options' bounds are the library's. Imports click, evstore
and ``_common``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from ._common import FiniteFloat, is_terminal, say

F = TypeVar("F", bound=Callable[..., Any])

#: The library's bound for each of them (``evstore._backends._retry``): above 0, at most 3600 s.
_SECONDS = FiniteFloat(min=0, min_open=True, max=3600)
OPTIONS = (
    click.option(
        "--connect-timeout",
        type=_SECONDS,
        metavar="SECONDS",
        help="To open a connection (default: $EVSTORE_CONNECT_TIMEOUT, else 3).",
    ),
    click.option(
        "--read-timeout",
        type=_SECONDS,
        metavar="SECONDS",
        help="For the server to answer (default: $EVSTORE_READ_TIMEOUT, else 6).",
    ),
    click.option(
        "--max-attempts",
        type=click.IntRange(1, 100),
        metavar="N",
        help="Attempts per request, the first included (default: $EVSTORE_MAX_ATTEMPTS, $AWS_MAX_ATTEMPTS, else 3).",
    ),
    click.option(
        "--retry-deadline",
        type=_SECONDS,
        metavar="SECONDS",
        help="No retry starts later than this after a request's first attempt (default: $EVSTORE_RETRY_DEADLINE, else 20).",
    ),
)


def network_options(command: F) -> F:
    """Add the network options to a command (the group: they come before the subcommand)."""
    for option in reversed(OPTIONS):
        command = option(command)
    return command


def note_retry(note: str) -> None:
    say(f"evstore: {note}", err=True)  # the server's error code is shown, never obeyed


def open_options(
    connect_timeout: float | None = None,
    read_timeout: float | None = None,
    max_attempts: int | None = None,
    retry_deadline: float | None = None,
) -> dict[str, Any]:
    """``open_store`` keyword arguments: the options given, and a retry note while a terminal watches stderr."""
    given = {
        "connect_timeout": connect_timeout,
        "read_timeout": read_timeout,
        "max_attempts": max_attempts,
        "retry_deadline": retry_deadline,
    }
    options: dict[str, Any] = {name: value for name, value in given.items() if value is not None}
    if is_terminal(sys.stderr):
        options["on_retry"] = note_retry
    return options
