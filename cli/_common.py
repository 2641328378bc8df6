"""What every command module shares: exit codes, the one-line error, the command group's
class (``Group``: every expected failure, a library error or a usage error, is that one line
with its exit code; set ``EVSTORE_DEBUG=1`` to see the traceback of an unexpected one), the
store context and progress on a watching terminal.

Everything the command writes to a terminal passes ``neutral`` (``say``, ``say_json`` and
the error line), so no stored string (a session id, a manifest field, a key name, a message)
can clear the screen, move the cursor or reorder what the eye reads.

Import order in ``cli/``: ``_common`` imports no other module of the package; ``_output``,
``_network``, ``_doctor``, ``_fleet``, ``_proofs`` and ``_write`` import it; ``_ecosystem``, ``_read``
and ``_retention`` import ``_common`` and ``_output``; ``_audit`` imports ``_common``, ``_ecosystem``,
``_fleet`` and ``_proofs``; ``_main`` imports them all. There is no circle.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import IO, Any, TextIO, TypeVar

import click
import msgspec

import evstore
from evstore import (
    EvstoreError,
    IntegrityError,
    InvalidInputError,
    KeyRequiredError,
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

#: Characters never written to a terminal as they are: C0 and C1 controls, DEL, the
#: bidirectional overrides and isolates (which reorder what the eye reads), and surrogates: the
#: bytes of a file name that are not UTF-8 (a local store's listing, decoded as ``os.fsdecode``
#: does), which no UTF-8 stream or JSON can hold.
_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_SURROGATES = "\ud800-\udfff"
_UNSAFE = re.compile(f"[\x00-\x08\x0a-\x1f\x7f-\x9f{_BIDI}{_SURROGATES}]")
_UNSAFE_KEEPING_NEWLINES = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}{_SURROGATES}]")
_SURROGATE = re.compile(f"[{_SURROGATES}]")
#: The same characters as they are in UTF-8 JSON: msgspec escapes the C0 controls in strings,
#: not DEL, the C1 controls or the bidi marks (each can only stand inside a string there).
_UNSAFE_JSON = re.compile(b"\x7f|\xc2[\x80-\x9f]|\xd8\x9c|\xe2\x80[\x8e\x8f\xaa-\xae]|\xe2\x81[\xa6-\xa9]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8, as os.fsdecode carries it: the byte
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def neutral(text: str, *, newlines: bool = False) -> str:
    """``text`` with every terminal control character (escape sequences, carriage returns,
    backspaces, bidi overrides) written as a visible ``\\xNN``/``\\uNNNN`` escape, so stored
    content can never clear the screen, move the cursor or spoof a line. Tabs stay; newlines
    stay only when ``newlines`` (the caller indents the lines that follow). A byte of a file
    name that is not UTF-8 is written ``\\xNN`` too."""
    return (_UNSAFE_KEEPING_NEWLINES if newlines else _UNSAFE).sub(_escape, text)


def json_safe(encoded: bytes) -> bytes:
    """msgspec's JSON with DEL, C1 controls and bidi marks as ``\\uNNNN`` escapes: the same
    JSON value, and nothing in it acts on a terminal it is printed to."""
    return _UNSAFE_JSON.sub(lambda m: b"\\u%04x" % ord(m.group().decode()), encoded)


_ENCODER = msgspec.json.Encoder()


def json_bytes(value: object, encoder: msgspec.json.Encoder = _ENCODER) -> bytes:
    """``value`` as JSON (``json_safe``). JSON is UTF-8: a string holding a file name's bytes that
    are not (surrogates, as ``os.fsdecode`` carries them) has them as ``\\xNN``, the escapes
    ``neutral`` writes, so the text and the JSON output show such a name alike."""
    try:
        encoded = encoder.encode(value)
    except UnicodeEncodeError:
        encoded = encoder.encode(_escaped_surrogates(msgspec.to_builtins(value)))
    return json_safe(encoded)


def _escaped_surrogates(value: Any) -> Any:
    """``value`` (builtins: ``msgspec.to_builtins``) with every surrogate in its strings escaped (``_escape``)."""
    if isinstance(value, str):
        return _SURROGATE.sub(_escape, value)
    if isinstance(value, dict):
        return {_escaped_surrogates(key): _escaped_surrogates(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_escaped_surrogates(item) for item in value]
    return value


@contextmanager
def writing_stdout() -> Iterator[None]:
    """Around a write to standard output: a write it refuses (a full disk, ``> /dev/full``) is
    ``CommandError`` exit 2, one line, as for an output file that cannot be written. A closed
    pipe (``BrokenPipeError``, ``| head``) passes: the command group ends quietly with 0."""
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as error:
        raise CommandError(f"cannot write to standard output: {error.strerror or error}", 2) from None


def say(text: object = "", *, err: bool = False) -> None:
    """One line of output (``click.echo``), every control character in it made visible (``neutral``)."""
    if err:
        click.echo(neutral(str(text)), err=True)
        return
    echo(neutral(str(text)))


def echo(text: str) -> None:
    """``text`` and a newline on standard output, as it is (``writing_stdout``)."""
    with writing_stdout():
        click.echo(text)


def say_json(value: object) -> None:
    """``value`` as one line of JSON (``json_bytes``)."""
    echo(json_bytes(value).decode())


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


#: The commands that may make a local store: those that create sessions (and ``lifecycle apply``,
#: which sets ``Context.makes_store`` itself: a subcommand is not known here). Any other never makes one
#: where ``--store`` or ``EVSTORE_STORE`` names a directory that does not exist or holds other files
#: (a mistyped ``file:`` path is an error, as a missing bucket is, not an empty listing). The default
#: directory is made by any command.
STORE_MAKING_COMMANDS = frozenset({"append", "create", "import"})


class Context:
    def __init__(
        self,
        store_url: str | None,
        endpoint_url: str | None,
        network: dict[str, Any] | None = None,
        *,
        makes_store: bool = True,
    ) -> None:
        self.store_url = store_url
        self.endpoint_url = endpoint_url
        #: ``open_store`` keyword arguments from the global network options (cli/_network.py).
        self.network = dict(network or {})
        self.makes_store = makes_store
        self._store: Store | None = None

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = evstore.open_store(
                self.store_url, endpoint_url=self.endpoint_url, create_store=self.makes_store, **self.network
            )
        return self._store

    @property
    def opened(self) -> Store | None:
        """The store if a command opened it (error messages look at its keyring), else None."""
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


pass_context = click.make_pass_decorator(Context)


def _explain(error: EvstoreError, state: Context | None) -> str:
    """The error's message, or a better one where the command knows how the keys were configured."""
    store = state.opened if state is not None else None
    if isinstance(error, KeyRequiredError) and store is not None and store.keyring.keys:
        configured = ", ".join(repr(kid) for kid in sorted(store.keyring.keys))
        return (
            f"the configured keys (key ids {configured}) do not open session {error.session_id!r}: it is sealed under key"
            f" id {error.key_id!r}; configure that key (EVSTORE_KEYRING with it, or EVSTORE_KEY with"
            f" EVSTORE_KEY_ID={error.key_id})"
        )
    if isinstance(error, IntegrityError) and "authentication failed under key id" in str(error) and store is not None:
        return (
            f"{error}: the configured key of that id does not open this session (a different key than the one it was"
            " created with), or the object was altered"
        )
    return str(error)


class Group(click.Group):
    """Turns library errors, and usage errors, into one-line messages with their exit codes."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.exceptions.NoArgsIsHelpError:
            raise  # a bare `evstore` keeps showing its help
        except click.UsageError as error:
            raise CommandError(error.format_message(), 2) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except EvstoreError as error:
            raise CommandError(_explain(error, ctx.find_object(Context)), exit_code_for(error)) from None
        except BrokenPipeError:
            # the reader went away (``| head``): stop quietly
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115
            raise SystemExit(0) from None
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as error:
            raise CommandError(error.format_message(), 2) from None
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort, SystemExit):
            raise
        except Exception as error:
            if os.environ.get("EVSTORE_DEBUG"):
                raise
            raise CommandError(f"unexpected failure: {type(error).__name__}: {error}", 1) from None


class FiniteFloat(click.FloatRange):
    """``click.FloatRange`` that refuses nan and the infinities too: nan compares false with
    every bound, so a range alone lets it through (and ``--timeout nan`` would never end)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


def not_empty(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """An option's callback: an empty value given explicitly (``--expect "$UNSET"``) is a usage
    error, not the option left out, which a test ``if value:`` would silently make of it."""
    if value == "":
        name = max(param.opts, key=len)
        raise click.UsageError(f"{name} is empty: give a value, or leave the option out", ctx)
    return value


def is_terminal(stream: IO[Any] | None) -> bool:
    """Whether ``stream`` is a terminal; False for a closed one (None: Python's ``sys.stderr``
    when the command starts with file descriptor 2 closed, ``2>&-``)."""
    try:
        return stream is not None and stream.isatty()
    except ValueError:  # a file object closed meanwhile
        return False


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
        return cls(sys.stderr, enabled and is_terminal(sys.stderr))  # what click.echo(err=True) writes to

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
