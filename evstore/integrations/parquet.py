"""Sessions as Parquet, for SQL engines (DuckDB, Athena, Spark, Trino): ``export(store, destination)``.

What it writes, a contract the tests check:

* One row per event of every session listed under ``prefix`` (``Store.list_sessions``), the
  events ``Store.replay`` yields up to the head ``Store.info`` found: a fork's rows include the
  events it inherits (``stored_in`` names the session whose log holds them), so each session's
  rows are its whole history, and ``fork_parent``/``fork_seq`` tell which of them are inherited.
* Hive-style day partitions, ``day=YYYY-MM-DD/part-NNNNN.parquet``, by the event's UTC time;
  the ``day`` column lives in the path only (what Athena, Spark and Trino expect). The schema
  is ``SCHEMA_DOC``.
* Only verified events: a session's rows go to the partitions only once its replay has
  finished without an error. Until then they wait in a spool (in memory, then a private
  temporary file past ``ROW_GROUP_ROWS`` rows or ``SPOOL_BYTES``), so a session that fails
  verification at any seq leaves no row, and memory stays bounded however long it is.
* Decrypted only with the store's keyring: a session sealed under a key the keyring lacks is
  skipped as ``locked`` (its headers alone are not what the rows promise: content).
* Sessions are read ``DEFAULT_CONCURRENCY`` at a time, each into its own spool; rows go out in
  the listing order, one session's after another's.
* Bounded memory: at most ``MAX_OPEN_FILES`` part files open at once (the least recently used
  is closed, and its day goes on in a new part), rows buffered per day up to a row group
  (``ROW_GROUP_ROWS`` rows or ``ROW_GROUP_BYTES``), and ``MAX_BUFFERED_BYTES`` over all days
  (past it, the largest buffer is written as a row group early).
* The destination is a local directory (created when its parent exists) or
  ``s3://bucket[/prefix]`` (evstore's own S3 URL handling: ``AWS_ENDPOINT_URL``, the network
  settings). It must be empty: rows of an earlier export are never mixed in. A local part is
  written under a hidden name (``.part-NNNNN.parquet.inprogress``, which engines skip) and
  renamed when complete, mode 0600 in directories of mode 0700 (rows hold decrypted
  messages); an S3 part is written to a private temporary file and uploaded when complete,
  so no reader ever sees half a file.

Each session ends in one status (``STATUSES``): ``exported``; ``tampered`` (``IntegrityError``);
``expired``; ``deleted``; ``remnant`` (objects under an id without a manifest); ``locked`` (no
key for its events); ``unreadable`` (the store failed, or an event's time is no RFC 3339 time).
The report counts them and keeps every skipped one.

pyarrow is optional (the ``parquet`` extra) and imported only when an export runs:
``import evstore`` never loads it, nor does importing this module.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import tempfile
from collections import OrderedDict
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Any

import msgspec

from .._codec import MessagesBody, RewindBody, parse_ts
from .._errors import (
    EvstoreError,
    IntegrityError,
    InvalidInputError,
    KeyRequiredError,
    SessionExpiredError,
    SessionNotFoundError,
    StoreUnavailableError,
)
from .._views import Event

if TYPE_CHECKING:
    from .._backends import ObjectStore
    from .._read import SessionInfo
    from .._store import Store

__all__ = ["STATUSES", "ExportReport", "SessionOutcome", "check_available", "export"]

#: A row group (and a spill of a session's spool) holds at most this many rows...
ROW_GROUP_ROWS = 10_000
#: ...or about this many bytes of message JSON and text, whichever comes first.
ROW_GROUP_BYTES = 64 << 20
#: Part files open at once, over all days.
MAX_OPEN_FILES = 32
#: Rows waiting for their row group, over all days, in bytes of message JSON and text.
MAX_BUFFERED_BYTES = 256 << 20
#: A session's spool keeps this many bytes in memory before it spills to its temporary file
#: (the spools of ``2 * DEFAULT_CONCURRENCY`` sessions may wait at once).
SPOOL_BYTES = 8 << 20
#: Sessions read at once by default.
DEFAULT_CONCURRENCY = 8

STATUSES = ("exported", "tampered", "expired", "deleted", "remnant", "locked", "unreadable")

INSTALL_HINT = "pip install 'evstore[parquet]'"

#: The columns, in file order, with their Arrow types (``day`` is the partition, in paths only).
SCHEMA_DOC: tuple[tuple[str, str], ...] = (
    ("session_id", "string: the exported session"),
    ("seq", "int64: the event's seq in that session"),
    ("time", "timestamp[us, UTC]: when the event was written"),
    ("kind", "string: messages or rewind"),
    ("roles", "list<string>: each message's role, in order"),
    ("tool_names", "list<string>: the names of the tool calls its messages make, in order"),
    ("messages", "string: the messages as a JSON array, as written (empty for a rewind)"),
    ("text", "string: the text content of the messages, joined by newlines (null when none)"),
    ("rewind_to_seq", "int64: a rewind's to_seq (null otherwise)"),
    ("rewind_keep", "int64: a rewind's keep (null otherwise, or when it keeps all)"),
    ("hash", "string: SHA-256 (hex) of the event object"),
    ("prev_hash", "string: the prev hash the event object names (checked by the read)"),
    ("key_id", "string: the key id it is sealed under (null: plaintext)"),
    ("write_id", "string: the id of the writer that appended it"),
    ("stored_in", "string: the session whose log holds it (an ancestor's id for inherited events)"),
    ("fork_parent", "string: the session this one was forked from (null: no fork)"),
    ("fork_seq", "int64: the seq it was forked at (null: no fork)"),
)


class SessionOutcome(msgspec.Struct, frozen=True):
    """How one session was exported: ``status`` (one of ``STATUSES``), its rows when exported,
    else the reason it was skipped."""

    session_id: str
    status: str
    detail: str = ""
    events: int = 0


class ExportReport(msgspec.Struct):
    """What an export wrote: ``rows`` in ``files`` (paths or keys, relative to the destination),
    the sessions by status, and each skipped session's outcome, in id order."""

    destination: str
    rows: int = 0
    files: list[str] = msgspec.field(default_factory=list)
    counts: dict[str, int] = msgspec.field(default_factory=lambda: dict.fromkeys(STATUSES, 0))
    skipped: list[SessionOutcome] = msgspec.field(default_factory=list)


def check_available() -> None:
    """``InvalidInputError`` (one line, naming the extra) unless pyarrow can be imported."""
    _pyarrow()


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.compute
        import pyarrow.ipc
        import pyarrow.parquet  # the writer's modules, loaded for it
    except ImportError:
        raise InvalidInputError(f"the Parquet export needs pyarrow, which is not installed: {INSTALL_HINT}") from None
    return pyarrow


def _schema(pa: Any, *, spool: bool = False) -> Any:
    """The file schema (``SCHEMA_DOC``); with ``spool``, and the ``day`` each row belongs in."""
    string, int64 = pa.string(), pa.int64()
    types = {
        "seq": int64,
        "time": pa.timestamp("us", tz="UTC"),
        "roles": pa.list_(string),
        "tool_names": pa.list_(string),
        "rewind_to_seq": int64,
        "rewind_keep": int64,
        "fork_seq": int64,
    }
    fields = [pa.field(name, types.get(name, string), nullable=name not in _REQUIRED) for name, _ in SCHEMA_DOC]
    if spool:
        fields.append(pa.field("day", string, nullable=False))
    return pa.schema(fields)


_REQUIRED = frozenset({"session_id", "seq", "time", "kind", "roles", "tool_names", "messages", "hash", "write_id", "stored_in"})


# ---- rows -----------------------------------------------------------------------


def _text_of(message: dict[str, Any]) -> str | None:
    """A message's text: its content when that is text, else the ``text`` of each part that has one."""
    content = message.get("content")
    if isinstance(content, str):
        return content or None
    if isinstance(content, list):
        parts = [p if isinstance(p, str) else p.get("text") for p in content if isinstance(p, str | dict)]
        texts = [p for p in parts if isinstance(p, str) and p]
        return "\n".join(texts) or None
    return None


def _tool_names(message: dict[str, Any]) -> Iterator[str]:
    """The name of each tool call a message makes: OpenAI's ``function.name``, else ``name``."""
    for call in message.get("tool_calls") or ():
        if not isinstance(call, dict):
            continue
        function = call.get("function")
        name = function.get("name") if isinstance(function, dict) else call.get("name")
        if isinstance(name, str):
            yield name


class _Unreadable(EvstoreError):
    """An event the rows cannot hold as it is (its time is no RFC 3339 time)."""


def _time_of(event: Event) -> datetime:
    try:
        moment = parse_ts(event.ts)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise _Unreadable(f"session {event.session_id!r} seq {event.seq}: time {event.ts[:40]!r} is not an RFC 3339 time")
    return moment.astimezone(UTC)


class _Spool:
    """One session's rows until its replay has finished: columns in memory, spilled to a private
    temporary Arrow IPC file a batch at a time, so memory holds at most a batch."""

    def __init__(self, pa: Any, schema: Any) -> None:
        self.pa, self.schema = pa, schema
        self.columns: dict[str, list[Any]] = {name: [] for name in schema.names}
        self.rows = self.bytes = 0
        self.file: IO[bytes] | None = None
        self.writer: Any = None

    def add(self, event: Event, session_id: str, parent: str | None, fork_seq: int | None) -> None:
        moment = _time_of(event)
        body = event.body
        messages = body.messages if isinstance(body, MessagesBody) else []
        encoded = msgspec.json.encode(messages).decode()
        texts = [t for m in messages if (t := _text_of(m)) is not None]
        text = "\n".join(texts) if texts else None
        rewind = body if isinstance(body, RewindBody) else None
        values = {
            "session_id": session_id,
            "seq": event.seq,
            "time": moment,
            "kind": "rewind" if rewind is not None else "messages",
            "roles": [m.get("role") for m in messages],
            "tool_names": [name for m in messages for name in _tool_names(m)],
            "messages": encoded,
            "text": text,
            "rewind_to_seq": rewind.to_seq if rewind is not None else None,
            "rewind_keep": rewind.keep if rewind is not None else None,
            "hash": event.hash,
            "prev_hash": event.prev or None,
            "key_id": event.key_id,
            "write_id": event.write_id,
            "stored_in": event.session_id,
            "fork_parent": parent,
            "fork_seq": fork_seq,
            "day": moment.strftime("%Y-%m-%d"),
        }
        for name, value in values.items():
            self.columns[name].append(value)
        self.rows += 1
        self.bytes += len(encoded) + len(text or "")
        if self.rows >= ROW_GROUP_ROWS or self.bytes >= SPOOL_BYTES:
            self._spill()

    def _batch(self) -> Any:
        batch = self.pa.RecordBatch.from_pydict(self.columns, schema=self.schema)
        self.columns = {name: [] for name in self.schema.names}
        self.rows = self.bytes = 0
        return batch

    def _spill(self) -> None:
        if self.writer is None:
            self.file = tempfile.TemporaryFile()  # noqa: SIM115  (closed by close())
            self.writer = self.pa.ipc.new_stream(self.file, self.schema)
        self.writer.write_batch(self._batch())

    def batches(self) -> Iterator[Any]:
        """Every row, in the order added, as record batches (read back from the spill first)."""
        if self.writer is not None and self.file is not None:
            self.writer.close()
            self.writer = None
            self.file.seek(0)
            yield from self.pa.ipc.open_stream(self.file)
        if self.rows:
            yield self._batch()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


# ---- destinations ------------------------------------------------------------------


class _Sink:
    """Where complete part files go. ``begin`` gives a local path to write a part to, ``commit``
    makes it visible under its name, ``discard`` drops one that will never be complete."""

    location: str

    def begin(self, name: str) -> str:
        raise NotImplementedError

    def commit(self, name: str, path: str) -> None:
        raise NotImplementedError

    def discard(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def close(self) -> None:
        pass


class _LocalSink(_Sink):
    def __init__(self, directory: str) -> None:
        self.location = self.directory = directory
        parent = os.path.dirname(os.path.abspath(directory))
        if not os.path.isdir(parent):
            raise InvalidInputError(f"cannot export to {directory!r}: the folder {parent!r} does not exist (create it first)")
        if os.path.lexists(directory) and not os.path.isdir(directory):
            raise InvalidInputError(f"cannot export to {directory!r}: it is not a folder")
        if os.path.isdir(directory) and os.listdir(directory):
            raise InvalidInputError(f"cannot export to {directory!r}: it is not empty (name a new folder)")
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise InvalidInputError(f"cannot export to {directory!r}: {exc.strerror or exc}") from None

    def begin(self, name: str) -> str:
        folder, base = os.path.split(os.path.join(self.directory, name))
        os.makedirs(folder, mode=0o700, exist_ok=True)
        return os.path.join(folder, f".{base}.inprogress")

    def commit(self, name: str, path: str) -> None:
        try:
            os.replace(path, os.path.join(self.directory, name))
        except OSError:
            self.discard(path)
            raise


class _S3Sink(_Sink):
    def __init__(self, url: str, endpoint_url: str | None) -> None:
        from .._url import check_credentials, open_backend, redact_url

        self.location = redact_url(url, limit=300)
        backend, root = open_backend(url, endpoint_url=endpoint_url)
        check_credentials(backend)  # none at all: say what to set, before any request
        self.backend: ObjectStore = backend
        self.prefix = f"{root}/" if root else ""
        try:
            if backend.list_page(self.prefix, max_keys=1).objects:
                raise InvalidInputError(f"cannot export to {self.location!r}: it already holds objects (name a new prefix)")
        except BaseException:
            backend.close()
            raise
        self.spool = tempfile.mkdtemp(prefix="evstore-parquet-")  # mode 0700: rows hold decrypted messages

    def begin(self, name: str) -> str:
        return os.path.join(self.spool, name.replace("/", "_"))

    def commit(self, name: str, path: str) -> None:
        key = self.prefix + name
        try:
            self.backend.client.upload_file(path, self.backend.bucket, key)  # type: ignore[attr-defined]
        except Exception as exc:  # boto3's transfer errors share no base class worth naming
            raise StoreUnavailableError(f"cannot upload {key!r} to {self.location}: {str(exc)[:200]}") from None
        finally:
            self.discard(path)

    def close(self) -> None:
        shutil.rmtree(self.spool, ignore_errors=True)
        self.backend.close()


def _sink(destination: str | os.PathLike[str], endpoint_url: str | None) -> _Sink:
    destination = os.fspath(destination)
    if not isinstance(destination, str) or not destination:
        raise InvalidInputError("name the destination: a folder or s3://bucket[/prefix]")
    if destination.lower().startswith("s3://"):
        return _S3Sink(destination, endpoint_url)
    if "://" in destination:
        raise InvalidInputError(f"cannot export to {destination[:100]!r}: name a folder or s3://bucket[/prefix]")
    return _LocalSink(destination)


# ---- partitions ---------------------------------------------------------------------


class _Part:
    """One open part file of one day, and the rows waiting for its next row group."""

    def __init__(self, pa: Any, sink: _Sink, name: str, schema: Any) -> None:
        self.name = name
        self.path = sink.begin(name)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        self.file = os.fdopen(fd, "wb")
        self.writer = pa.parquet.ParquetWriter(self.file, schema, compression="zstd")
        self.pending: list[Any] = []
        self.rows = self.bytes = 0

    def flush(self, pa: Any) -> None:
        if self.pending:
            self.writer.write_table(pa.concat_tables(self.pending), row_group_size=ROW_GROUP_ROWS)
            self.pending, self.rows, self.bytes = [], 0, 0


class _Partitions:
    """The day partitions of one export: parts open per day (at most ``MAX_OPEN_FILES``), rows
    buffered into row groups, every part committed to the sink once complete."""

    def __init__(self, pa: Any, sink: _Sink, schema: Any) -> None:
        self.pa, self.sink, self.schema = pa, sink, schema
        self.open: OrderedDict[str, _Part] = OrderedDict()  # by day, least recently used first
        self.parts: dict[str, int] = {}  # parts started per day
        self.buffered = 0
        self.files: list[str] = []

    def add(self, batch: Any) -> None:
        """A spooled batch (with its ``day`` column) routed to its days."""
        pc = self.pa.compute
        days = batch.column("day")
        for day in pc.unique(days).to_pylist():
            rows = self.pa.Table.from_batches([batch.filter(pc.equal(days, day))]).drop_columns(["day"])
            self._add(day, rows)

    def _add(self, day: str, rows: Any) -> None:
        part = self.open.get(day)
        if part is None:
            if len(self.open) >= MAX_OPEN_FILES:
                self._close(next(iter(self.open)))
            number = self.parts.get(day, 0)
            self.parts[day] = number + 1
            part = self.open[day] = _Part(self.pa, self.sink, f"day={day}/part-{number:05d}.parquet", self.schema)
        self.open.move_to_end(day)
        size = rows.nbytes
        part.pending.append(rows)
        part.rows += rows.num_rows
        part.bytes += size
        self.buffered += size
        if part.rows >= ROW_GROUP_ROWS or part.bytes >= ROW_GROUP_BYTES:
            self._flush(part)
        while self.buffered > MAX_BUFFERED_BYTES:
            self._flush(max(self.open.values(), key=lambda p: p.bytes))

    def _flush(self, part: _Part) -> None:
        self.buffered -= part.bytes
        part.flush(self.pa)

    def _close(self, day: str) -> None:
        part = self.open[day]  # still open until written out: a failure here leaves it to abort()
        self._flush(part)
        part.writer.close()
        part.file.close()
        del self.open[day]
        self.sink.commit(part.name, part.path)  # discards the local file itself when it fails
        self.files.append(part.name)

    def close(self) -> None:
        while self.open:
            self._close(next(iter(self.open)))

    def abort(self) -> None:
        """Drop every part still open: nothing half written becomes visible."""
        for part in self.open.values():
            with contextlib.suppress(Exception):  # the export already failed: its error is what is raised
                part.writer.close()
                part.file.close()
            self.sink.discard(part.path)
        self.open.clear()


# ---- the export ---------------------------------------------------------------------


def _outcome(session_id: str, exc: EvstoreError) -> SessionOutcome:
    if isinstance(exc, IntegrityError):
        return SessionOutcome(session_id, "tampered", str(exc))
    if isinstance(exc, SessionExpiredError):
        return SessionOutcome(session_id, "expired", str(exc))
    if isinstance(exc, SessionNotFoundError):
        return SessionOutcome(session_id, "deleted" if exc.deleted else "remnant", str(exc))
    if isinstance(exc, KeyRequiredError):
        return SessionOutcome(session_id, "locked", str(exc))
    return SessionOutcome(session_id, "unreadable", str(exc))


def _spooled(store: Store, session_id: str, spool: _Spool) -> tuple[SessionOutcome, _Spool]:
    """Replay the session into ``spool`` (up to the head ``info`` finds) and say how it ended;
    never raises an ``EvstoreError``. Runs in the export's pool, one session per call."""
    try:
        info: SessionInfo = store.info(session_id)
        parent = info.parent
        parent_id, fork_seq = (parent.sid, parent.seq) if parent is not None else (None, None)
        count = 0
        for event in store.replay(session_id, end=info.head):
            spool.add(event, session_id, parent_id, fork_seq)
            count += 1
    except EvstoreError as exc:
        return _outcome(session_id, exc), spool
    return SessionOutcome(session_id, "exported", events=count), spool


def export(
    store: Store,
    destination: str | os.PathLike[str],
    *,
    prefix: str = "",
    endpoint_url: str | None = None,
    on_session: Callable[[SessionOutcome], None] | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> ExportReport:
    """Write every verified event of the sessions under ``prefix`` to ``destination`` as Parquet
    (see the module docstring); ``on_session`` sees each session's outcome as it ends, in the
    store's listing order.

    Sessions are read ``concurrency`` at a time (each into its own spool, at most
    ``2 * concurrency`` spools at once); their rows go out in listing order, from this thread.
    Raises ``InvalidInputError`` before any work (pyarrow missing, a destination that is not
    empty or cannot be made, a bad prefix) and ``StoreUnavailableError`` when listing the store
    or uploading a part fails; a session that cannot be exported is skipped and reported, never
    raised. The caller decides what the skipped ones mean (the command: exit 5 for tampered).
    """
    pa = _pyarrow()
    ids = store.list_sessions(prefix)
    first = next(ids, None)  # a bad prefix is refused here, before the destination is made
    sink = _sink(destination, endpoint_url)
    report = ExportReport(sink.location)
    partitions = _Partitions(pa, sink, _schema(pa))
    spool_schema = _schema(pa, spool=True)
    from concurrent.futures import Future, ThreadPoolExecutor  # loaded on first use, as verify_all's

    pool = ThreadPoolExecutor(max(1, concurrency), thread_name_prefix="evstore-parquet")
    pending: list[Future[tuple[SessionOutcome, _Spool]]] = []

    def drain() -> None:
        outcome, spool = pending.pop(0).result()
        try:
            if outcome.status == "exported":  # only now, with every event verified, do its rows go out
                for batch in spool.batches():
                    partitions.add(batch)
                report.rows += outcome.events
            else:
                report.skipped.append(outcome)
        finally:
            spool.close()
        report.counts[outcome.status] += 1
        if on_session is not None:
            on_session(outcome)

    try:
        for session_id in itertools.chain([] if first is None else [first], ids):
            pending.append(pool.submit(_spooled, store, session_id, _Spool(pa, spool_schema)))
            if len(pending) >= 2 * max(1, concurrency):
                drain()
        while pending:
            drain()
        partitions.close()
    except OSError as exc:  # the local disk (a part, a spool's temporary file): full, gone, refused
        partitions.abort()
        raise EvstoreError(f"cannot write the export to {sink.location!r}: {exc.strerror or exc}") from None
    except BaseException:
        partitions.abort()
        raise
    finally:
        for future in pending:
            future.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
        for future in pending:  # spools of sessions read but never drained: their temporary files
            if future.done() and not future.cancelled() and future.exception() is None:
                future.result()[1].close()
        report.files = partitions.files
        sink.close()
    return report
