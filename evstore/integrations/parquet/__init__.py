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
``import evstore`` never loads it, nor does importing this package.
"""

from __future__ import annotations

from ._export import DEFAULT_CONCURRENCY as DEFAULT_CONCURRENCY
from ._export import INSTALL_HINT as INSTALL_HINT
from ._export import check_available, export
from ._report import STATUSES, ExportReport, SessionOutcome
from ._rows import SCHEMA_DOC as SCHEMA_DOC
from ._writer import MAX_BUFFERED_BYTES as MAX_BUFFERED_BYTES
from ._writer import MAX_OPEN_FILES as MAX_OPEN_FILES
from ._writer import ROW_GROUP_BYTES as ROW_GROUP_BYTES
from ._writer import ROW_GROUP_ROWS as ROW_GROUP_ROWS
from ._writer import SPOOL_BYTES as SPOOL_BYTES

__all__ = ["STATUSES", "ExportReport", "SessionOutcome", "check_available", "export"]
