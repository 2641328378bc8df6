"""Commands that write to a session: ``append`` (and the input it reads: a message as text
or JSON, or JSON lines, ``replay --format jsonl``'s among them), ``create``, ``fork``,
``rewind`` and ``delete``. ``import`` is ``_ecosystem``'s.

``register(cli)`` adds them to the command group (``cli/_main.py`` calls it). Imports ``_common`` only.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any

import click
import msgspec

import evstore
from evstore import InvalidInputError, SessionExistsError, SessionExpiredError, SessionNotFoundError

from ._common import CommandError, Context, is_terminal, pass_context, say


def _stdin_is_terminal() -> bool:
    return is_terminal(sys.stdin)


def _read_input(text: str | None, limit: int) -> str:
    if text is not None:
        return text
    if _stdin_is_terminal():  # someone typed `evstore append SESSION` and would wait in silence
        say("evstore: reading the message from standard input: end it with Ctrl-D (or give TEXT)", err=True)
    data = sys.stdin.buffer.read(limit + 1)
    if len(data) > limit:
        raise InvalidInputError(f"input exceeds the limit of {limit} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInputError("input is not valid UTF-8") from None


class Batch(msgspec.Struct):
    """Messages for one event; ``seq``: the event's seq in a replayed session (None for plain lines);
    ``line``: the input's line its first message is on, from 1 as errors name it (its
    ``--idempotency-key`` is ``KEY:N`` with N = line - 1: keys count lines from 0, as they always have)."""

    messages: list[evstore.Message]
    seq: int | None = None
    line: int = 0


class Rewind(msgspec.Struct, frozen=True):
    """A rewind line of ``replay --format jsonl``; ``to_seq`` and ``seq`` are seqs of the replayed session."""

    to_seq: int
    keep: int | None = None
    seq: int | None = None


def input_lines(text: str) -> list[str]:
    """``text``'s lines as a file has them: split at "\\n" only (a "\\r" before it dropped), so line N
    is the file's line N. ``str.splitlines`` would also split at U+2028, U+2029, \\x0c, \\x1c and
    others, which a JSON string may hold raw (``replay --format jsonl`` writes U+2028 as it is)."""
    return [line.removesuffix("\r") for line in text.split("\n")]


def parse_jsonl_entries(lines: Iterable[str]) -> Iterator[Batch | Rewind]:
    """What ``append --jsonl`` writes, in order: a ``Batch`` per event, or a ``Rewind``.

    A plain message line is one event. Lines of ``replay --format jsonl`` keep their
    events: consecutive lines of one seq (of one session) are one atomic event again, and
    a rewind line is a rewind (its ``to_seq`` is a seq of the replayed session).
    """
    batch: Batch | None = None
    batch_key: object = None
    plain = 0  # the line of the first plain message line, if any
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        value = evstore._codec.decode_json_value(line, f"line {number}")
        key: object = None
        if isinstance(value, dict) and "role" not in value and "rewind" in value:
            rewind = value["rewind"]
            to_seq: Any = rewind.get("to_seq") if isinstance(rewind, dict) else None
            keep: Any = rewind.get("keep") if isinstance(rewind, dict) else None
            if not _is_count(to_seq) or not (keep is None or _is_count(keep)):
                raise InvalidInputError(f"line {number}: a rewind line needs an integer to_seq (and keep) of 0 or more")
            if plain:  # its to_seq names a replayed session's seq, which a plain message has none of
                raise InvalidInputError(
                    f"line {number}: a rewind line follows plain message lines (line {plain}), which carry no seq"
                    " for its to_seq to name: rewind with `evstore rewind`"
                )
            if batch is not None:
                yield batch
                batch = None
            yield Rewind(to_seq, keep, value["seq"] if _is_count(value.get("seq")) else None)
            continue
        if isinstance(value, dict) and "message" in value and "role" not in value:
            if _is_count(value.get("seq")):
                key = (value.get("session"), value["seq"])
            value = value["message"]
        try:
            message = evstore._codec.validate_message(value)
        except InvalidInputError as exc:
            raise InvalidInputError(f"line {number}: {exc}") from None
        if batch is not None and (key is None or key != batch_key):
            yield batch
            batch = None
        if key is None and not plain:
            plain = number
        if batch is None:
            batch = Batch([], key[1] if isinstance(key, tuple) else None, number)
        batch.messages.append(message)
        batch_key = key
    if batch is not None:
        yield batch


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@click.command()
@click.argument("session")
@click.argument("text", required=False)
@click.option("--role", type=click.Choice(sorted(evstore._codec.ROLES)), default="user", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="The input is one message object in JSON.")
@click.option(
    "--jsonl", "as_jsonl", is_flag=True, help="One message per line (or replay --format jsonl lines), appended in order."
)
@click.option("--ephemeral", is_flag=True, help="Create the session as ephemeral (expires by lifecycle rules).")
@click.option(
    "--new", "new", is_flag=True, help="Start a new session under SESSION (exit 4 if one lives): also over a deleted one."
)
@click.option("--expect-head", type=click.IntRange(min=0), help="Fail with exit 4 unless the session's head is this seq.")
@click.option(
    "--idempotency-key",
    metavar="KEY",
    help="Append once per KEY: run again with the same KEY (from any process) and it prints the seq it got then.",
)
@pass_context
def append(
    state: Context,
    session: str,
    text: str | None,
    role: str,
    as_json: bool,
    as_jsonl: bool,
    ephemeral: bool,
    new: bool,
    expect_head: int | None,
    idempotency_key: str | None,
) -> None:
    """Append a message to SESSION (created if it never existed); print the seq it got.

    A SESSION that was deleted or has expired is refused (exit 3, 6): --new starts a new
    session under a deleted one's id. The message is TEXT, or standard input when TEXT is
    absent (no input at all is exit 2: an empty message is TEXT ''). With --idempotency-key
    and --jsonl, the event of line N (from 0, the input's line counted; its first line for
    consecutive lines of one replayed seq) is keyed KEY:N.
    """
    if as_json and as_jsonl:
        raise click.UsageError("--json and --jsonl exclude each other")
    if new and expect_head is not None:
        raise click.UsageError("--new and --expect-head exclude each other (--new starts an empty session)")
    if text is not None and as_jsonl:
        raise click.UsageError("--jsonl reads standard input: give no TEXT")
    evstore._ids.validate_session_id(session)
    store = state.store
    raw = _read_input(text, store.max_event_bytes * (64 if as_jsonl else 1))
    entries: list[Batch | Rewind]
    if as_jsonl:
        entries = list(parse_jsonl_entries(input_lines(raw)))
        if not any(isinstance(entry, Batch) for entry in entries):
            raise InvalidInputError("no messages in the input")
    elif as_json:
        entries = [Batch([evstore._codec.decode_message_json(raw)])]
    elif text is None and not raw:  # an empty or closed stdin: a pipeline that produced nothing, not a message
        raise InvalidInputError("no message on standard input (an empty message: give TEXT '')")
    else:
        entries = [Batch([{"role": role, "content": raw.removesuffix("\n") if text is None else raw}])]
    for entry in entries:  # refuse oversized input before anything is written
        if isinstance(entry, Batch):
            evstore._codec.encode_body(evstore._codec.MessagesBody(entry.messages), store.max_event_bytes)
    retention: evstore.Retention = "ephemeral" if ephemeral else "permanent"
    writer = _writer(store, session, retention, new=new, expect_head=expect_head, idempotency_key=idempotency_key)
    if new and writer.head != writer.manifest.base:
        # a retry of an --idempotency-key append (_writer): its first event lands on the empty session or not at all
        expect_head = writer.manifest.base
    if ephemeral and writer.manifest.retention != "ephemeral":
        raise InvalidInputError(
            f"session {session!r} exists and is {writer.manifest.retention}: retention is fixed when a session is"
            f" created; drop --ephemeral, or fork it into an ephemeral copy (evstore fork {session} NEW --ephemeral)"
        )
    if expect_head is not None and writer.head != expect_head and idempotency_key is None:
        raise CommandError(
            f"session {session!r} is at head {writer.head}, not {expect_head} (--expect-head): nothing was appended", 4
        )
    # A replayed session's seqs become this session's: a rewind to seq T of the source is a
    # rewind to where the source's last event at or before T landed (the head before, if none).
    new_seq: dict[int, int] = {}
    base = writer.head
    for i, entry in enumerate(entries):
        expected = expect_head if i == 0 else None
        if isinstance(entry, Rewind):
            mapped = max((seq for seq in new_seq if seq <= entry.to_seq), default=None)
            seq = writer.rewind(base if mapped is None else new_seq[mapped], keep=entry.keep, expected_head=expected)
        else:
            key = None if idempotency_key is None else idempotency_key if not as_jsonl else f"{idempotency_key}:{entry.line - 1}"
            seq = writer.append(entry.messages, expected_head=expected, idempotency_key=key)
        if entry.seq is not None:
            new_seq[entry.seq] = seq
        say(seq)


def _writer(
    store: evstore.Store,
    session: str,
    retention: evstore.Retention,
    *,
    new: bool,
    expect_head: int | None,
    idempotency_key: str | None,
) -> evstore.Session:
    """``append``'s writer: a new session with ``new``; else the live session, or a new one for an id
    never used (never for ``expect_head`` > 0: no session is created just to refuse it). A deleted
    or expired session is refused, with what to do instead: an append never starts a new session
    over one unasked."""
    if new:
        try:
            return store.create(session, retention=retention)
        except SessionExistsError:
            if idempotency_key is None:
                raise
            return store.open(session)  # a retry whose create landed: the key tells whether the append did
    try:
        return store.open(session, create=not expect_head, retention=retention, recreate=False)
    except SessionNotFoundError as error:
        if not error.deleted or error.kept_for_forks:
            raise
        raise CommandError(
            f"{error}: nothing was appended (start the new session with append --new, or evstore create {session})", 3
        ) from None
    except SessionExpiredError as error:
        raise CommandError(
            f"{error}: nothing was appended (once gc has removed them, the id can start a new session)", 6
        ) from None


@click.command()
@click.argument("session")
@click.option("--ephemeral", is_flag=True, help="Create the session as ephemeral (expires by lifecycle rules).")
@pass_context
def create(state: Context, session: str, ephemeral: bool) -> None:
    """Start a new, empty SESSION (exit 4 if one lives); over a deleted one, a new session under its id."""
    writer = state.store.create(session, retention="ephemeral" if ephemeral else "permanent")
    say(f"created {session}: empty, its first event will be seq {writer.head + 1}")


@click.command()
@click.argument("source")
@click.argument("target")
@click.option("--at", type=click.IntRange(min=1), help="Fork seq (default: the source's head).")
@click.option("--ephemeral/--permanent", default=None, help="Retention of the fork (default: the source's).")
@pass_context
def fork(state: Context, source: str, target: str, at: int | None, ephemeral: bool | None) -> None:
    """Fork SOURCE into a new session TARGET that shares its history up to --at."""
    retention: evstore.Retention | None = None if ephemeral is None else ("ephemeral" if ephemeral else "permanent")
    writer = state.store.fork(source, target, at=at, retention=retention)
    parent = writer.manifest.parent
    assert parent is not None
    say(f"forked {source}@{parent.seq} into {target}")


@click.command()
@click.argument("session")
@click.option("--to", "to_seq", type=click.IntRange(min=0), required=True, help="Keep the messages up to this seq.")
@pass_context
def rewind(state: Context, session: str, to_seq: int) -> None:
    """Withdraw SESSION's messages after --to from the context view (the audit view keeps them)."""
    seq = state.store.open(session).rewind(to_seq)
    say(seq)


@click.command()
@click.argument("session")
@pass_context
def delete(state: Context, session: str) -> None:
    """Delete SESSION: reads say so at once, and no append lands after it (a fence at the seq
    after the head). gc removes its objects 10 minutes on, or once no live fork reads them."""
    result = state.store.delete(session)
    if result.kept_for_forks:
        say(
            f"deleted {session} (fenced at seq {result.fenced_at}); its objects are kept for forks: "
            f"{', '.join(result.kept_for_forks)}"
        )
    else:
        say(f"deleted {session} (fenced at seq {result.fenced_at}); gc removes its objects after {result.removable_after}")


def register(group: click.Group) -> None:
    """Add ``append``, ``create``, ``fork``, ``rewind`` and ``delete`` to the ``evstore`` command group."""
    for command in (append, create, fork, rewind, delete):
        group.add_command(command)
