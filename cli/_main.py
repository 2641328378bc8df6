"""Commands, options and exit codes. Every expected failure is one line on
standard error and its documented exit code; set ``EVSTORE_DEBUG=1`` to see
the traceback of an unexpected one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any

import click
import msgspec

import evstore
from evstore import (
    EvstoreError,
    IntegrityError,
    InvalidInputError,
    KeyRequiredError,
    Receipt,
    SessionExistsError,
    SessionExpiredError,
    SessionNotFoundError,
)
from evstore._context import FENCE_HOLD

from ._common import (
    STORE_MAKING_COMMANDS,
    CommandError,
    Context,
    Progress,
    counted,
    echo,
    exit_code_for,
    is_terminal,
    json_safe,
    not_empty,
    pass_context,
    say,
    say_json,
)
from ._doctor import register as register_doctor
from ._ecosystem import check_output_path, register
from ._fleet import verify_all
from ._network import network_options, open_options
from ._output import event_lines, info_json, render_text, write_json, write_jsonl
from ._proofs import is_receipt, verify_tree_head
from ._proofs import register as register_proofs


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


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--store",
    "store_url",
    envvar="EVSTORE_STORE",
    metavar="URL",
    callback=not_empty,
    help="s3://bucket[/root], file:///path or memory:// (default: $EVSTORE_STORE, else a local data directory).",
)
@click.option(
    "--endpoint-url",
    envvar="AWS_ENDPOINT_URL",
    metavar="URL",
    callback=not_empty,
    help="S3 endpoint for MinIO, Ceph, moto or any S3-compatible server (default: $AWS_ENDPOINT_URL).",
)
@network_options
@click.version_option(evstore.__version__, prog_name="evstore")
@click.pass_context
def cli(ctx: click.Context, /, store_url: str | None, endpoint_url: str | None, **network: Any) -> None:
    """evstore: conversation sessions as an append-only log on S3-compatible storage.

    Exit codes: 0 success, 1 unexpected failure, 2 usage or invalid input,
    3 session not found, 4 write conflict, 5 integrity failure, 6 session expired.
    """
    state = Context(store_url, endpoint_url, open_options(**network), makes_store=ctx.invoked_subcommand in STORE_MAKING_COMMANDS)
    ctx.obj = state
    ctx.call_on_close(state.close)


session_argument = click.argument("session")


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


@cli.command()
@session_argument
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


@cli.command()
@session_argument
@click.option("--ephemeral", is_flag=True, help="Create the session as ephemeral (expires by lifecycle rules).")
@pass_context
def create(state: Context, session: str, ephemeral: bool) -> None:
    """Start a new, empty SESSION (exit 4 if one lives); over a deleted one, a new session under its id."""
    writer = state.store.create(session, retention="ephemeral" if ephemeral else "permanent")
    say(f"created {session}: empty, its first event will be seq {writer.head + 1}")


@cli.command()
@session_argument
@click.option("--format", "fmt", type=click.Choice(["text", "jsonl", "json"]), default="text", show_default=True)
@click.option(
    "--view",
    type=click.Choice(["audit", "context"]),
    default="audit",
    show_default=True,
    help="audit: every event as written; context: what to send to a model next.",
)
@click.option(
    "--repair",
    type=click.Choice(["error", "drop", "none"]),
    default="error",
    show_default=True,
    help="Context view: answer dangling tool calls with an error result, drop them, or leave them.",
)
@click.option("--from", "start", type=click.IntRange(min=1), default=1, help="First seq (audit view).")
@click.option("--to", "end", type=click.IntRange(min=0), help="Last seq (audit view).")
@pass_context
def replay(state: Context, session: str, fmt: str, view: str, repair: str, start: int, end: int | None) -> None:
    """Print SESSION's messages, streamed in seq order."""
    store = state.store
    if view == "context":
        if start != 1 or end is not None:
            raise click.UsageError("--from and --to apply to the audit view")
        lines: Iterator[dict[str, Any]] = ({"message": m} for m in store.context(session, repair=repair))  # type: ignore[arg-type]
    else:
        lines = event_lines(store.replay(session, start=start, end=end), session)
    if not is_terminal(sys.stdout):  # replaying into a file or pipe: count on a watching terminal
        lines = counted(lines, Progress(unit="messages"))
    if fmt == "jsonl":
        write_jsonl(lines)
    elif fmt == "json":
        write_json(lines)
    else:
        render_text(lines)


@cli.command("list")
@click.option("--prefix", default="", help="Only sessions whose id starts with this.")
@click.option("--limit", type=click.IntRange(min=1), help="At most this many.")
@click.option("--long", "long_", is_flag=True, help="With head, retention and parent (reads each session).")
@click.option("--tree", is_flag=True, help="Show forks under their parents (reads each session).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@pass_context
def list_(state: Context, prefix: str, limit: int | None, long_: bool, tree: bool, as_json: bool) -> None:
    """List the session ids that have objects in the store, in order.

    That includes deleted sessions whose objects gc has yet to remove (after the fence hold,
    or later while forks read them) and expired remnants; --long, --tree and --json mark them.
    A session that cannot be read (its manifest does not decode, or its name is no session
    id) is listed as unreadable, with why, among the rest; then the command exits 5.
    """
    if long_ + tree + as_json > 1:
        raise click.UsageError("--long, --tree and --json are alternatives: give one")
    store = state.store
    ids = store.list_sessions(prefix, limit=limit)
    if not (long_ or tree or as_json):
        for session_id in ids:
            say(session_id)
        return
    infos = []
    gone: dict[str, str] = {}  # id -> why it has objects but no live session
    held: dict[str, tuple[str, ...]] = {}  # id of a deleted session -> the live forks that keep it
    unreadable: dict[str, str] = {}  # id -> why it cannot be read
    for session_id in ids:
        try:
            infos.append(store.info(session_id))
        except SessionNotFoundError as error:
            gone[session_id] = "deleted" if error.deleted else "no manifest"
            if error.kept_for_forks:
                held[session_id] = error.kept_for_forks
        except SessionExpiredError:
            gone[session_id] = "expired"
        except IntegrityError as error:
            unreadable[session_id] = str(error)
        except InvalidInputError:  # a name under sessions/ that no session can have
            unreadable[session_id] = "not a valid session id (an object evstore never wrote)"
    if tree:
        from ._output import render_tree

        render_tree(infos, {**gone, **{sid: f"unreadable: {why}" for sid, why in unreadable.items()}})
    elif as_json:
        for info in infos:
            say_json(info_json(info))
        for session_id, state_ in gone.items():
            line: dict[str, object] = {"session": session_id, "state": state_}
            if session_id in held:
                line["kept_for_forks"] = list(held[session_id])
            say_json(line)
        for session_id, why in unreadable.items():
            say_json({"session": session_id, "state": "unreadable", "error": why})
    else:
        for info in infos:
            parent = f" fork of {info.parent.sid}@{info.parent.seq}" if info.parent else ""
            say(f"{info.session_id}\thead={info.head}\t{info.retention}{parent}")
        for session_id, state_ in gone.items():
            forks = held.get(session_id)
            note = GONE_NOTES[state_] if forks is None else HELD_NOTE.format(forks=", ".join(forks)[:200])
            say(f"{session_id}\t({note})")
        for session_id, why in unreadable.items():
            say(f"{session_id}\t(unreadable: {why})")
    if unreadable:  # everything readable is listed; a script still learns that something is wrong
        named = ", ".join(repr(sid) for sid in list(unreadable)[:5]) + (", ..." if len(unreadable) > 5 else "")
        raise CommandError(f"cannot read {len(unreadable)} of the sessions listed (marked unreadable): {named}", 5)


#: What ``list`` says about an id that has objects but no live session.
HELD_NOTE = "deleted; kept while its forks ({forks}) read it: the id stays taken until they are deleted and gc has removed it"
GONE_NOTES = {
    "deleted": "deleted; gc removes it after the fence hold; the id can be created again",
    "expired": "expired; remnants until gc removes them",
    "no manifest": "no manifest; remnants until gc removes them",
}


@cli.command()
@session_argument
@click.option("--json", "as_json", is_flag=True)
@pass_context
def info(state: Context, session: str, as_json: bool) -> None:
    """Show SESSION's head, creation time, retention, encryption, parent and forks."""
    details = state.store.info(session)
    data = info_json(details)
    if as_json:
        say_json(data)
        return
    for key, value in data.items():
        if value is not None and value != []:
            say(f"{key}: {', '.join(value) if isinstance(value, list) else value}")


@cli.command()
@session_argument
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


@cli.command()
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


@cli.command()
@session_argument
@click.option("--to", "to_seq", type=click.IntRange(min=0), required=True, help="Keep the messages up to this seq.")
@pass_context
def rewind(state: Context, session: str, to_seq: int) -> None:
    """Withdraw SESSION's messages after --to from the context view (the audit view keeps them)."""
    seq = state.store.open(session).rewind(to_seq)
    say(seq)


@cli.command()
@click.argument("session", required=False)
@click.option(
    "--expect",
    metavar="SEQ:HASH|FILE",
    callback=not_empty,
    help="Fail (exit 5) unless the session still extends this receipt, or the tree head in FILE (from tree-head; - reads stdin).",
)
@click.option("--full", is_flag=True, help="With a tree head: check it against every event, not the checkpoint objects.")
@click.option("--json", "as_json", is_flag=True)
@click.option("--receipt", "receipt_only", is_flag=True, help="Print only the receipt, SEQ:HASH (for --expect later).")
@click.option("--all", "every", is_flag=True, help="Verify every session of the store (not SESSION), a line each.")
@click.option("--prefix", default="", help="With --all: only sessions whose id starts with this.")
@click.option(
    "--since",
    callback=not_empty,
    help="With --all: only sessions written to at or after this date (YYYY-MM-DD or RFC 3339).",
)
@click.option("--resume-from", default="", metavar="ID", help="With --all: start after this session id.")
@pass_context
def verify(
    state: Context,
    session: str | None,
    expect: str | None,
    full: bool,
    as_json: bool,
    receipt_only: bool,
    every: bool,
    prefix: str,
    since: str | None,
    resume_from: str,
) -> None:
    """Check SESSION's chain, contiguity and (with a key) every tag; print its receipt.

    The last line of the text output is always ``receipt: SEQ:HASH``; --receipt
    prints exactly ``SEQ:HASH`` and nothing else. With --all, every session is checked, a few
    at a time, one line each in id order, then a summary: exit 5 if any is tampered with,
    else 1 if any could not be read.
    """
    if every:
        if session is not None or expect is not None or receipt_only:
            raise click.UsageError("--all checks every session: give no SESSION, --expect or --receipt")
        from evstore._retention import parse_time

        moment = parse_time(since) if since is not None else None
        verify_all(state, prefix=prefix, since=moment, resume_from=resume_from, as_json=as_json)
        return
    if session is None:
        raise click.UsageError("give SESSION, or --all")
    if prefix or since is not None or resume_from:
        raise click.UsageError("--prefix, --since and --resume-from go with --all")
    if as_json and receipt_only:
        raise click.UsageError("--json and --receipt exclude each other")
    if expect is not None and not is_receipt(expect):
        verify_tree_head(state, session, expect, full=full, as_json=as_json, receipt_only=receipt_only)
        return
    if full:
        raise click.UsageError("--full goes with --expect FILE (a tree head): verify reads every event already")
    expected = Receipt.parse(expect) if expect is not None else None
    result = state.store.verify(session, expect=expected)
    if receipt_only:
        say(str(result.receipt))
        return
    if as_json:
        say_json(
            {
                "session": result.session_id,
                "ok": True,
                "head_seq": result.receipt.seq,
                "head_hash": result.receipt.hash,
                "receipt": str(result.receipt),
                "events": result.events,
                "sealed_checked": result.sealed_checked,
                "sealed_unchecked": result.sealed_unchecked,
                "expected": str(expected) if expected else None,
                "superseded_by_rekey": result.superseded_by_rekey,
            }
        )
        return
    say(
        f"ok: {result.events} events, chain intact"
        + (f", {result.sealed_checked} tags checked" if result.sealed_checked else "")
        + (f", {result.sealed_unchecked} sealed events not checked (no key)" if result.sealed_unchecked else "")
    )
    if expected and result.superseded_by_rekey:
        say(f"receipt {expected} is superseded by a recorded rekey: the log re-sealed that event and extends it")
    elif expected:
        say(f"extends receipt {expected}")
    say(f"receipt: {result.receipt}")


@cli.command()
@session_argument
@click.option("--segment-size", type=click.IntRange(2, 100_000), default=1000, show_default=True)
@pass_context
def compact(state: Context, session: str, segment_size: int) -> None:
    """Pack runs of SESSION's events into segments so replay needs fewer requests."""
    made = state.store.compact(session, segment_size=segment_size)
    if made:
        say(f"{len(made)} segments written ({made[0][0]}-{made[-1][1]})")
        return
    info = state.store.info(session)
    say(
        f"0 segments written: a segment packs a full run of {segment_size} events (--segment-size) that no segment"
        f" holds yet, and {session} has no such run (head {info.head}, {info.segments} segments already)"
    )


@cli.command()
@session_argument
@pass_context
def rekey(state: Context, session: str) -> None:
    """Re-seal SESSION under the active key (encrypts a plaintext session). Receipts issued
    before stay checkable through the rekey record it writes."""
    result = state.store.rekey(session)
    say(
        f"rekeyed {session} under key {result.key_id}: {result.resealed} events re-sealed, "
        f"{result.already_current} already current" + (f"; recorded in {', '.join(result.records)}" if result.records else "")
    )


@cli.command()
@session_argument
@click.option("--include-forks", is_flag=True, help="Shred the session's live forks too (they read its events).")
@pass_context
def shred(state: Context, session: str, include_forks: bool) -> None:
    """Fence SESSION as delete does, then destroy its salt and every object's content: no
    surviving copy of its events can be opened, and no append lands after it."""
    result = state.store.shred(session, include_forks=include_forks)
    salt = "salt destroyed" if result.salt_destroyed else "plaintext session: no salt to destroy"
    forks = f"; forks shredded: {', '.join(result.shredded_forks)}" if result.shredded_forks else ""
    gc = f", gc removes them after {result.removable_after}" if result.removable_after else ""
    say(
        f"shredded {session}: {salt}, {result.objects_removed} objects destroyed{forks}; fenced at seq "
        f"{result.fenced_at} (its slots hold the fence, with the tombstone and the manifest without its salt{gc})"
    )


@cli.command()
@click.option("--dry-run", is_flag=True, help="Print the plan; change nothing.")
@click.option("--grace", default="1d", show_default=True, help="Never touch objects younger than this (90s, 15m, 12h, 1d, 2w).")
@click.option(
    "--apply-lifecycle",
    is_flag=True,
    help="Also expire what the bucket's lifecycle rules would (for stores that never run them).",
)
@click.option(
    "--keep",
    type=click.IntRange(min=0),
    help="Keep only the newest N ephemeral sessions whose ids start with --prefix, of those older than --grace.",
)
@click.option("--prefix", default="", help="Only sessions whose id starts with this.")
@click.option(
    "--now",
    "now_text",
    metavar="TIME",
    callback=not_empty,
    help="Evaluate as of this time (YYYY-MM-DD or RFC 3339); for previews and tests.",
)
@click.option("--json", "as_json", is_flag=True)
@click.option("--verbose", "-v", is_flag=True, help="Print every object removed (always, with --dry-run).")
@pass_context
def gc(
    state: Context,
    dry_run: bool,
    grace: str,
    apply_lifecycle: bool,
    keep: int | None,
    prefix: str,
    now_text: str | None,
    as_json: bool,
    verbose: bool,
) -> None:
    """Remove expired remnants, deleted sessions no fork needs, orphans and stale uploads."""
    from evstore._retention import parse_duration, parse_time

    if keep is not None and not prefix:
        raise click.UsageError("--keep needs --prefix (which sessions the count applies to)")
    progress = Progress(enabled=not as_json)

    def on_remove(key: str, size: int, reason: str) -> None:
        progress.tick()
        if (dry_run or verbose) and not as_json:
            progress.clear()
            say(f"{'would remove' if dry_run else 'removed'} {key} ({size} bytes): {reason}")

    report = state.store.gc(
        dry_run=dry_run,
        grace=parse_duration(grace),
        apply_lifecycle=apply_lifecycle,
        keep=keep,
        prefix=prefix,
        now=parse_time(now_text) if now_text is not None else None,
        on_remove=on_remove,
    )
    progress.clear()
    if as_json:
        say_json(report)
        return
    verb = "would remove" if dry_run else "removed"
    say(
        f"gc: {report.sessions} sessions, {report.objects_scanned} objects scanned; {verb} {report.objects_removed} objects "
        f"({report.bytes_removed} bytes) of {report.sessions_removed} sessions, {report.uploads_aborted} incomplete uploads; "
        f"kept {report.kept_young} objects younger than the grace period or fenced by a delete less than "
        f"{FENCE_HOLD.total_seconds() / 60:.0f} minutes ago; {report.requests} requests"
    )
    for reason, count in sorted(report.reasons.items()):
        say(f"  {reason}: {count}")
    if report.sessions_deleted:
        deleted = "would delete" if dry_run else "deleted"
        say(
            f"gc: {deleted} {report.sessions_deleted} sessions beyond --keep {keep} (the newest of those older than "
            f"--grace {grace} are kept); a gc run after the fence hold removes their objects"
        )
    if report.kept_by_grace:
        say(f"gc: kept {report.kept_by_grace} sessions younger than --grace {grace}, not counted against --keep {keep}")


@cli.group(cls=Group)
def lifecycle() -> None:
    """The bucket's lifecycle rules: ephemeral sessions expire by them."""


@lifecycle.command("apply")
@click.option("--ephemeral-days", type=click.IntRange(1, 36500), default=90, show_default=True)
@pass_context
def lifecycle_apply(state: Context, ephemeral_days: int) -> None:
    """Install the rules (merged with the bucket's own; running it twice changes nothing)."""
    state.makes_store = True  # setting a store up, as creating a session does
    store = state.store
    changed, rules = store.apply_lifecycle(ephemeral_days)
    line = ("installed" if changed else "unchanged") + f": {len(rules)} rules"
    if isinstance(store.backend, evstore.LocalStore | evstore.MemoryStore):
        line = (
            ("saved" if changed else "unchanged") + f": {len(rules)} rules, recorded with the store, but a local store never"
            " runs lifecycle rules: run `evstore gc --apply-lifecycle` (e.g. daily) to expire ephemeral sessions"
        )
    say(line)


@lifecycle.command("show")
@pass_context
def lifecycle_show(state: Context) -> None:
    """Print the bucket's lifecycle rules as JSON."""
    echo(json_safe(msgspec.json.format(msgspec.json.encode(state.store.lifecycle_rules()), indent=2)).decode())


@lifecycle.command("preview")
@click.option("--at", "at_text", required=True, metavar="DATE", help="YYYY-MM-DD or an RFC 3339 time.")
@click.option("--json", "as_json", is_flag=True)
@pass_context
def lifecycle_preview(state: Context, at_text: str, as_json: bool) -> None:
    """List the sessions and objects the installed rules will have expired by --at."""
    from evstore._retention import parse_time

    sessions: dict[str, int] = {}
    items = state.store.preview_lifecycle(parse_time(at_text))
    if as_json:  # one JSON array, [] when nothing is due
        write_json({"session": item.session_id, "key": item.key, "expires": item.expires} for item in items)
        return
    for item in items:
        sessions[item.session_id] = sessions.get(item.session_id, 0) + 1
        say(f"{item.expires.isoformat()}  {item.key}")
    say(f"{sum(sessions.values())} objects of {len(sessions)} sessions expire by {at_text}")


@cli.command()
@click.option(
    "--keyring",
    "keyring_path",
    type=click.Path(dir_okay=False),
    callback=not_empty,
    help="Add the key to this keyring file and make it active.",
)
@click.option("--key-id", callback=not_empty, help="Key id for the keyring (default: derived from the key).")
def keygen(keyring_path: str | None, key_id: str | None) -> None:
    """Print a new master key (base64), or add one to a keyring file and make it active."""
    if keyring_path is None:
        if key_id is not None:
            raise click.UsageError("--key-id needs --keyring")
        say(evstore.generate_key())
        return
    check_output_path(keyring_path)
    try:
        kid = evstore._crypto.add_key_to_file(keyring_path, key_id)
    except OSError as exc:
        raise InvalidInputError(f"cannot write keyring {keyring_path!r}: {exc.strerror or exc}") from None
    say(f"added key {kid} to {keyring_path} and made it active")


def main() -> None:
    _open_closed_streams()
    cli(prog_name="evstore")


def _open_closed_streams() -> None:
    """A standard stream closed when the command starts (``2>&-``, ``>&-``) is None in ``sys``:
    it becomes the null device, so reads find nothing and writes go nowhere (what ``click.echo``
    does with no stream) instead of failing on None."""
    for name, mode in (("stdin", "r"), ("stdout", "w"), ("stderr", "w")):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, mode))  # noqa: SIM115  # open for the life of the process


register(cli)
register_doctor(cli)
register_proofs(cli)
