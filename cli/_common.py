"""What every command module shares: exit codes, the one-line error, the store context
and progress on a watching terminal.

Import order in ``cli/``: ``_common`` and ``_output`` import no other module of the
package; ``_ecosystem`` imports them; ``_main`` imports all three. There is no circle.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

import click

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


class CommandError(click.ClickException):
    """An expected failure: ``evstore: <message>`` on stderr, with its exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code  # type: ignore[misc]  # click declares it on the class

    def format_message(self) -> str:
        return " ".join(self.message.split())

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


class Progress:
    """A counter on stderr while a terminal watches; nothing when stderr is piped."""

    def __init__(self, enabled: bool = True, unit: str = "objects") -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.unit = unit
        self.count = 0

    def tick(self) -> None:
        self.count += 1
        if self.enabled and self.count % 100 == 0:
            click.echo(f"\r{self.count} {self.unit}...", err=True, nl=False)

    def clear(self) -> None:
        if self.enabled and self.count >= 100:
            click.echo("\r" + " " * 30 + "\r", err=True, nl=False)


def counted(items: Iterable[T], progress: Progress) -> Iterator[T]:
    for item in items:
        progress.tick()
        yield item
    progress.clear()
