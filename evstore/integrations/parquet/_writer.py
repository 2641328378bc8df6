"""Where an export's rows wait and how they become part files: a session's ``Spool`` until its
replay has finished, then the day ``Partitions``, each day's rows buffered into row groups of an
open ``Part``; and the limits that bound the memory all of it holds (see the package docstring).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections import OrderedDict
from collections.abc import Iterator
from typing import IO, Any

from ..._views import Event
from ._rows import row
from ._sinks import Sink

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


class Spool:
    """One session's rows until its replay has finished: columns in memory, spilled to a private
    temporary Arrow IPC file a batch at a time, so memory holds at most a batch."""

    def __init__(self, pa: Any, schema: Any) -> None:
        self.pa, self.schema = pa, schema
        self.columns: dict[str, list[Any]] = {name: [] for name in schema.names}
        self.rows = self.bytes = 0
        self.file: IO[bytes] | None = None
        self.writer: Any = None

    def add(self, event: Event, session_id: str, parent: str | None, fork_seq: int | None) -> None:
        values = row(event, session_id, parent, fork_seq)
        for name, value in values.items():
            self.columns[name].append(value)
        self.rows += 1
        self.bytes += len(values["messages"]) + len(values["text"] or "")
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


class Part:
    """One open part file of one day, and the rows waiting for its next row group."""

    def __init__(self, pa: Any, sink: Sink, name: str, schema: Any) -> None:
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


class Partitions:
    """The day partitions of one export: parts open per day (at most ``MAX_OPEN_FILES``), rows
    buffered into row groups, every part committed to the sink once complete."""

    def __init__(self, pa: Any, sink: Sink, schema: Any) -> None:
        self.pa, self.sink, self.schema = pa, sink, schema
        self.open: OrderedDict[str, Part] = OrderedDict()  # by day, least recently used first
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
            part = self.open[day] = Part(self.pa, self.sink, f"day={day}/part-{number:05d}.parquet", self.schema)
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

    def _flush(self, part: Part) -> None:
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
