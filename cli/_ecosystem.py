"""Commands that connect evstore to other tools: ``import``, ``export`` and ``tail``.

``register(cli)`` adds them to the command group (``cli/_main.py`` calls it).
This module imports ``_common`` and ``_output``, never ``_main``.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import UTC, datetime
from typing import IO, Any, BinaryIO

import click
from click.core import ParameterSource

from evstore import Event, InvalidInputError, Message, Store
from evstore._codec import RewindBody
from evstore._crypto import open_regular_file
from evstore._formats import (
    FORMATS,
    batch_messages,
    encode_chatcli,
    parse_chatcli,
    parse_jsonl,
    render_chatcli,
    render_jsonl,
)
from evstore._html import render_html
from evstore._ids import validate_session_id

from ._common import CommandError, Context, FiniteFloat, Progress, exit_code_for, is_terminal, json_safe, say, say_json
from ._output import event_lines, render_text, write_jsonl

#: Largest file ``import`` reads (the events it makes are each within the store's event limit).
MAX_IMPORT_BYTES = 1 << 30


class _NoBar:
    def update(self, steps: int) -> None:
        pass


def _progress(length: int, label: str) -> AbstractContextManager[Any]:
    """A progress bar (``.update(n)``) on standard error when it is a terminal; nothing when piped."""
    if is_terminal(sys.stderr):
        return click.progressbar(length=length, label=label, file=sys.stderr)
    return nullcontext(_NoBar())


@contextmanager
def _spooled(path: str) -> Iterator[BinaryIO]:
    """The input file, or standard input spooled to a temporary file, so it can be read twice;
    larger than ``MAX_IMPORT_BYTES`` is a usage error."""
    if path == "-":
        with tempfile.TemporaryFile() as spool:
            copied = 0
            while chunk := sys.stdin.buffer.read(1 << 20):
                copied += len(chunk)
                if copied > MAX_IMPORT_BYTES:
                    raise click.UsageError(f"{path}: larger than {MAX_IMPORT_BYTES} bytes")
                spool.write(chunk)
            spool.seek(0)
            yield spool
        return
    # a FIFO or device (/dev/zero) is refused at once, never waited on or read without end
    with open_regular_file(path, "input file", MAX_IMPORT_BYTES) as handle:
        yield handle


def _bounded_read(handle: BinaryIO, path: str) -> bytes:
    """The whole input, at most ``MAX_IMPORT_BYTES`` (a regular file may grow while it is read)."""
    data = handle.read(MAX_IMPORT_BYTES + 1)
    if len(data) > MAX_IMPORT_BYTES:
        raise click.UsageError(f"{path}: larger than {MAX_IMPORT_BYTES} bytes")
    return data


def _utf8_lines(handle: BinaryIO, path: str) -> Iterator[str]:
    handle.seek(0)
    read = 0
    for line in handle:
        read += len(line)
        if read > MAX_IMPORT_BYTES:
            raise click.UsageError(f"{path}: larger than {MAX_IMPORT_BYTES} bytes")
        try:
            yield line.decode("utf-8")
        except UnicodeDecodeError:
            raise click.UsageError(f"{path}: not valid UTF-8") from None


def check_output_path(path: str) -> None:
    """``InvalidInputError`` (before any work) when ``path`` cannot be a file to write: its folder is missing."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise InvalidInputError(f"cannot write {path!r}: the folder {folder!r} does not exist (create it first)")
    if os.path.isdir(path):
        raise InvalidInputError(f"cannot write {path!r}: it is a folder; name a file")


def _write_output(path: str, chunks: Iterable[bytes]) -> None:
    """``chunks`` to ``path`` (``_open_output``). A write that fails is exit 2, one line, as for
    ``writing_stdout``; a closed pipe (``| head``) passes, for the command group to end quietly
    with 0, as ``replay`` does."""
    try:
        with _open_output(path) as out:
            for chunk in chunks:
                out.write(chunk)
            out.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        where = "to standard output" if path == "-" else repr(path)
        raise InvalidInputError(f"cannot write {where}: {exc.strerror or exc}") from None


def _open_output(path: str) -> IO[bytes]:
    """Standard output for "-", else ``path`` opened for writing with mode 0600: an export may
    hold decrypted messages, so a new file is private and an existing regular file is made
    private before anything is written to it."""
    if path == "-":
        return click.open_file("-", "wb")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.fchmod(fd, 0o600)
        return os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise


# ---- import -----------------------------------------------------------------


@click.command("import")
@click.argument("session")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--format", "fmt", type=click.Choice(FORMATS), required=True, help="jsonl: a message per line; chatcli: ChatCLI.")
@click.option("--ephemeral", is_flag=True, help="Create the session as ephemeral (expires by lifecycle rules).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@click.pass_obj
def import_(state: Context, session: str, file: str, fmt: str, ephemeral: bool, as_json: bool) -> None:
    """Create SESSION from FILE ('-' for standard input).

    The messages go in as few events as the event size limit allows (one for
    most files; each event is atomic). SESSION must not exist yet (exit 4).
    """
    validate_session_id(session)
    store: Store = state.store
    with _spooled(file) as handle:
        chatcli = parse_chatcli(_bounded_read(handle, file)) if fmt == "chatcli" else None

        def batches() -> Iterator[list[Message]]:
            """JSONL streams: a first pass checks every line and the event sizes, a second writes,
            so memory holds one event's messages, not the file (and bad input writes nothing)."""
            messages = chatcli if chatcli is not None else parse_jsonl(_utf8_lines(handle, file))
            return batch_messages(messages, store.max_event_bytes)

        total = sum(len(batch) for batch in batches())
        if not total:
            raise click.UsageError(f"{file}: no messages to import")
        writer = store.create(session, retention="ephemeral" if ephemeral else "permanent")
        seqs: list[int] = []
        with _progress(total, f"importing {session}") as bar:
            for batch in batches():
                seqs.append(writer.append(batch))
                bar.update(len(batch))
    if as_json:
        say_json({"session": session, "messages": total, "events": len(seqs), "first_seq": seqs[0], "head": seqs[-1]})
    else:
        say(f"imported {total} messages into {session} ({len(seqs)} events, seq {seqs[0]}-{seqs[-1]})")


# ---- export -----------------------------------------------------------------


@click.command("export")
@click.argument("session", metavar="SESSION|DIR")
@click.option(
    "--format",
    "fmt",
    type=click.Choice([*FORMATS, "html", "parquet"]),
    required=True,
    help="jsonl: a message per line; chatcli: ChatCLI; html: one self-contained page for auditors;"
    " parquet (with --all): every session's events, for SQL engines.",
)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, allow_dash=True), default="-", help="File to write (default: stdout)."
)
@click.option("--all", "every", is_flag=True, help="Every session (--format parquet), to DIR or s3://bucket/prefix.")
@click.option("--prefix", default="", help="With --all: only sessions whose id starts with this.")
@click.option("--json", "as_json", is_flag=True, help="With --output or --all: print a summary as one JSON object.")
@click.pass_obj
def export(state: Context, session: str, fmt: str, output: str, every: bool, prefix: str, as_json: bool) -> None:
    """Write SESSION's messages, every one as written (the audit view), to a file or stdout;
    with --all --format parquet, every session's verified events to DIR (a folder or
    s3://bucket/prefix), one row per event, partitioned by day.

    Summaries and the messages they stand for are both kept, as are messages
    a rewind withdrew (a note on stderr says how many rewinds were skipped).
    """
    if every or fmt == "parquet":
        _export_parquet(state, session, fmt=fmt, output=output, every=every, prefix=prefix, as_json=as_json)
        return
    if prefix:
        raise click.UsageError("--prefix narrows --all (export --all --format parquet DIR --prefix P)")
    if as_json and output == "-":
        raise click.UsageError("--json needs --output (stdout carries the export)")
    if output != "-":
        check_output_path(output)
    store: Store = state.store
    if fmt == "html":
        _export_html(store, session, output, as_json)
        return
    head = store.info(session).head
    messages = []
    rewinds = 0
    with _progress(head, f"exporting {session}") as bar:
        for event in store.replay(session):
            if isinstance(event.body, RewindBody):
                rewinds += 1
            messages.extend(event.messages)
            bar.update(1)
    if fmt == "chatcli":
        chunks: Iterator[bytes] = iter([encode_chatcli(render_chatcli(messages))])
    else:
        chunks = render_jsonl(messages)
    if output == "-":  # a terminal perhaps: the same JSON, nothing in it acts on the terminal
        chunks = map(json_safe, chunks)
    _write_output(output, chunks)
    if rewinds:
        say(
            f"evstore: note: {session} has {rewinds} rewinds; the export holds every message as written,"
            " withdrawn ones included (replay --view context shows what a model gets)",
            err=True,
        )
    if as_json:
        say_json({"session": session, "messages": len(messages), "events": head, "rewinds": rewinds, "output": output})


def _export_html(store: Store, session: str, output: str, as_json: bool) -> None:
    """Verify, then render exactly the events the receipt covers (a writer appending
    meanwhile cannot slip unverified events into the page). A session that fails
    verification gets its page too, the verified part and the failure: written, then
    the command fails with the integrity error (exit 5), naming where the page went."""
    audited = store.audit(session)
    verified, failure = audited.verified, audited.failure
    info = store.info(session)
    events = list(store.replay(session, end=verified.receipt.seq))
    generated = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    page = render_html(session, events, verified=verified, info=info, generated=generated, failure=failure).encode()
    _write_output(output, [page])
    if as_json:
        summary: dict[str, object] = {"session": session, "events": len(events), "receipt": str(verified.receipt)}
        if failure is not None:
            summary.update(verified=False, failure={"seq": failure.seq, "reason": failure.detail})
        say_json({**summary, "bytes": len(page), "output": output})
    if failure is not None:
        where = "standard output" if output == "-" else repr(output)
        part = f"the verified part (seq {events[0].seq} to {events[-1].seq})" if events else "no verified events"
        raise CommandError(f"{failure}; the report was written to {where}: {part}, then the failure", exit_code_for(failure))


def _export_parquet(state: Context, destination: str, *, fmt: str, output: str, every: bool, prefix: str, as_json: bool) -> None:
    """``export --all --format parquet DIR``: a thin layer over ``evstore.integrations.parquet.export``.

    Prints a line per session it skipped (``TAMPERED``, ``expired``, ``deleted``, ``LOCKED``,
    ``UNREADABLE``, with the reason; JSON objects with ``--json``), then a summary. Exit 5 when any
    session failed verification, else 1 when any could not be exported (no key for it, the store
    failed), else 0: expired and deleted sessions are reported, not failures, as in verify --all.
    """
    if fmt != "parquet":
        raise click.UsageError("--all writes Parquet: export --all --format parquet DIR")
    if not every:
        raise click.UsageError("--format parquet exports every session: export --all --format parquet DIR|s3://bucket/prefix")
    if output != "-":
        raise click.UsageError("--all writes to DIR, the argument, not to --output")
    from evstore.integrations import parquet

    parquet.check_available()  # before the store is opened: a missing extra is exit 2 at once
    bar = Progress(unit="sessions")

    def show(outcome: parquet.SessionOutcome) -> None:
        bar.tick()
        if outcome.status == "exported":
            return
        bar.clear()
        if as_json:
            say_json(outcome)
        else:
            say(f"{_SKIPPED[outcome.status]:<11} {outcome.session_id}: {outcome.detail}")

    report = parquet.export(state.store, destination, prefix=prefix, endpoint_url=state.endpoint_url, on_session=show)
    bar.clear()
    counts = report.counts
    if as_json:
        say_json({"summary": {**counts, "rows": report.rows, "files": len(report.files), "destination": report.destination}})
    else:
        skipped = ", ".join(f"{counts[status]} {status}" for status in parquet.STATUSES[1:])
        say(
            f"exported {report.rows} events of {counts['exported']} sessions to {report.destination}"
            f" in {len(report.files)} files; skipped {skipped}"
        )
    if counts["tampered"]:
        raise CommandError(f"{counts['tampered']} sessions failed verification (tampered): none of their events were exported", 5)
    unexported = counts["locked"] + counts["unreadable"]
    if unexported:
        raise CommandError(f"{unexported} sessions could not be exported (no key for them, or unreadable)", 1)


_SKIPPED = {
    "tampered": "TAMPERED",
    "expired": "expired",
    "deleted": "deleted",
    "remnant": "remnant",
    "locked": "LOCKED",
    "unreadable": "UNREADABLE",
}


# ---- tail -------------------------------------------------------------------


def follow(
    store: Store,
    session_id: str,
    after: int,
    *,
    after_hash: str | None = None,
    interval: float = 1.0,
    should_stop: Callable[[], bool] = lambda: False,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[Event]:
    """``Store.follow``: events after seq ``after`` as other writers append them."""
    return store.follow(session_id, after=after, after_hash=after_hash, interval=interval, should_stop=should_stop, sleep=sleep)


@click.command("tail")
@click.argument("session")
@click.option("-f", "--follow", "following", is_flag=True, help="Keep printing events as they are appended (Ctrl-C stops).")
@click.option(
    "-n", "--events", "count", type=click.IntRange(min=0), default=10, show_default=True, help="Start with the last N events."
)
@click.option("--from", "start", type=click.IntRange(min=1), help="Start at this seq instead.")
@click.option("--format", "fmt", type=click.Choice(["text", "jsonl"]), default="text", show_default=True)
@click.option("--interval", type=FiniteFloat(min=0.05, max=3600), default=1.0, show_default=True, help="Seconds between polls.")
@click.option("--max-events", type=click.IntRange(min=1), help="Stop after printing this many events.")
@click.option("--timeout", type=FiniteFloat(min=0), help="Stop following after this many seconds.")
@click.pass_obj
def tail(
    state: Context,
    session: str,
    following: bool,
    count: int,
    start: int | None,
    fmt: str,
    interval: float,
    max_events: int | None,
    timeout: float | None,
) -> None:
    """Print SESSION's newest events; with --follow, keep printing them as other processes append.

    Lines are those of replay (--format text or jsonl). Following costs one
    LIST per poll, whatever the session's length. Exits 0 on Ctrl-C,
    --max-events or --timeout; exit 3 if the session is deleted meanwhile.
    """
    given = click.get_current_context().get_parameter_source
    typed = {name for name in ("count", "interval", "timeout") if given(name) is ParameterSource.COMMANDLINE}
    if start is not None and "count" in typed:
        raise click.UsageError("--from and -n/--events are alternatives: give one")
    if not following and (idle := [f"--{name}" for name in ("interval", "timeout") if name in typed]):
        raise click.UsageError(f"{' and '.join(idle)}: only with --follow")
    store: Store = state.store
    head = store.info(session).head
    first = start if start is not None else max(1, head - count + 1)
    printed = 0
    deadline = None if timeout is None else time.monotonic() + timeout

    def show(event: Event) -> None:
        lines = event_lines([event], session)
        if fmt == "jsonl":
            write_jsonl(lines)
        else:
            render_text(lines)

    def done() -> bool:
        return (max_events is not None and printed >= max_events) or (deadline is not None and time.monotonic() >= deadline)

    try:
        last, last_hash = first - 1, None
        if start is not None or count:
            for event in store.replay(session, start=first, end=head):
                show(event)
                printed += 1
                last, last_hash = event.seq, event.hash
                if max_events is not None and printed >= max_events:
                    return
        else:
            last = head
        if not following:
            return
        for event in follow(store, session, last, after_hash=last_hash, interval=interval, should_stop=done):
            show(event)
            printed += 1
    except KeyboardInterrupt:
        return


def register(group: click.Group) -> None:
    """Add ``import``, ``export`` and ``tail`` to the ``evstore`` command group."""
    for command in (import_, export, tail):
        group.add_command(command)
