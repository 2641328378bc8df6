"""What every command module shares: exit codes, the one-line error, the store context
and progress on a watching terminal.

Everything the command writes to a terminal passes ``neutral`` (``say``, ``say_json`` and
the error line), so no stored string (a session id, a manifest field, a key name, a message)
can clear the screen, move the cursor or reorder what the eye reads.

Import order in ``cli/``: ``_common`` imports no other module of the package; ``_output``,
``_network``, ``_doctor``, ``_fleet`` and ``_proofs`` import it; ``_ecosystem`` imports ``_common`` and ``_output``;
``_main`` imports them all. There is no circle.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TextIO, TypeVar

import click
import msgspec

import evstore
from evstore import (
    EvstoreError,
    IntegrityError,
    InvalidInputError,
    SessionExpiredError,
    SessionNotFoundError,
    Store,
    WriteConflictError,
)

#: Exit codes by error class; the first match (most specific first) wins.
EXIT_CODES: tuple[tuple[type[EvstoreError], int], ...] = (
    (InvalidInputError, 2),
    (SessionNotFoundError, 3),
    (WriteConflictError, 4),
    (IntegrityError, 5),
    (SessionExpiredError, 6),
    (EvstoreError, 1),
)

T = TypeVar("T")

#: Characters never written to a terminal as they are: C0 and C1 controls, DEL, and the
#: bidirectional overrides and isolates (which reorder what the eye reads).
_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_UNSAFE = re.compile(f"[\x00-\x08\x0a-\x1f\x7f-\x9f{_BIDI}]")
_UNSAFE_KEEPING_NEWLINES = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]")
#: The same characters as they are in UTF-8 JSON: msgspec escapes the C0 controls in strings,
#: not DEL, the C1 controls or the bidi marks (each can only stand inside a string there).
_UNSAFE_JSON = re.compile(
    b"\x7f|\xc2[\x80-\x9f]|\xd8\x9c|\xe2\x80[\x8e\x8f\xaa-\xae]|\xe2\x81[\xa6-\xa9]"
)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def neutral(text: str, *, newlines: bool = False) -> str:
    """``text`` with every terminal control character (escape sequences, carriage returns,
    backspaces, bidi overrides) written as a visible ``\\xNN``/``\\uNNNN`` escape, so stored
    content can never clear the screen, move the cursor or spoof a line. Tabs stay; newlines
    stay only when ``newlines`` (the caller indents the lines that follow)."""
    return (_UNSAFE_KEEPING_NEWLINES if newlines else _UNSAFE).sub(_escape, text)


def json_safe(encoded: bytes) -> bytes:
    """msgspec's JSON with DEL, C1 controls and bidi marks as ``\\uNNNN`` escapes: the same
    JSON value, and nothing in it acts on a terminal it is printed to."""
    return _UNSAFE_JSON.sub(lambda m: b"\\u%04x" % ord(m.group().decode()), encoded)


def say(text: object = "", *, err: bool = False) -> None:
    """One line of output (``click.echo``), every control character in it made visible (``neutral``)."""
    click.echo(neutral(str(text)), err=err)


def say_json(value: object) -> None:
    """``value`` as one line of JSON (``json_safe``)."""
    click.echo(json_safe(msgspec.json.encode(value)).decode())


class CommandError(click.ClickException):
    """An expected failure: ``evstore: <message>`` on stderr, with its exit code. The message
    is one line, whatever it quotes (``neutral``)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code  # type: ignore[misc]  # click declares it on the class

    def format_message(self) -> str:
        return neutral(" ".join(self.message.split()))

    def show(self, file: Any = None) -> None:
        click.echo(f"evstore: {self.format_message()}", err=True)


def exit_code_for(error: EvstoreError) -> int:
    return next(code for kind, code in EXIT_CODES if isinstance(error, kind))


class Context:
    def __init__(self, store_url: str | None, endpoint_url: str | None, network: dict[str, Any] | None = None) -> None:
        self.store_url = store_url
        self.endpoint_url = endpoint_url
        #: ``open_store`` keyword arguments from the global network options (cli/_network.py).
        self.network = dict(network or {})
        self._store: Store | None = None

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = evstore.open_store(self.store_url, endpoint_url=self.endpoint_url, **self.network)
        return self._store

    @property
    def opened(self) -> Store | None:
        """The store if a command opened it (error messages look at its keyring), else None."""
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


pass_context = click.make_pass_decorator(Context)


class StatusLine:
    """One line of status on a terminal, rewritten in place (``show``) and wiped (``clear``).

    Written to ``stream`` only when ``is_terminal`` (never to a pipe or a file); cut to
    ``width`` columns (the terminal's when not given) less one, so it never wraps (a
    carriage return could not take back a wrapped line); redrawn at most every ``interval``
    seconds of ``clock``, except the first ``show`` after a ``clear``, which always draws.
    A caller writing other lines to the same screen clears it first: the next ``show``
    draws it again below them. The text is the caller's own (counts, never stored strings)."""

    #: Back to the line's start, then erase to its end.
    WIPE = "\r\x1b[K"

    def __init__(
        self,
        stream: TextIO,
        is_terminal: bool,
        *,
        width: int | None = None,
        interval: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream
        self.is_terminal = is_terminal
        self.width = width
        self.interval = interval
        self.clock = clock
        self.shown = False
        self._drawn_at = 0.0

    @classmethod
    def on_stderr(cls, enabled: bool = True) -> StatusLine:
        """On standard error, when it is a terminal (and ``enabled``)."""
        return cls(sys.stderr, enabled and sys.stderr.isatty())  # what click.echo(err=True) writes to

    def show(self, text: str) -> None:
        if not self.is_terminal:
            return
        now = self.clock()
        if self.shown and now - self._drawn_at < self.interval:
            return
        width = self.width or _columns(self.stream)
        self.stream.write(self.WIPE + text[: max(0, width - 1)])
        self.stream.flush()
        self.shown, self._drawn_at = True, now

    def clear(self) -> None:
        if self.shown:
            self.stream.write(self.WIPE)
            self.stream.flush()
            self.shown = False


def _columns(stream: TextIO) -> int:
    """The width of the terminal ``stream`` writes to (80 when it does not say)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns or 80
    except (AttributeError, ValueError, OSError):  # no file descriptor, or not a terminal after all
        return shutil.get_terminal_size().columns


class Progress:
    """A counter on stderr while a terminal watches (a ``StatusLine``); nothing when stderr is piped."""

    def __init__(self, enabled: bool = True, unit: str = "objects") -> None:
        self.line = StatusLine.on_stderr(enabled)
        self.unit = unit
        self.count = 0

    def tick(self) -> None:
        self.count += 1
        if self.count % 100 == 0:
            self.line.show(f"{self.count} {self.unit}...")

    def clear(self) -> None:
        self.line.clear()


def counted(items: Iterable[T], progress: Progress) -> Iterator[T]:
    for item in items:
        progress.tick()
        yield item
    progress.clear()
