"""The export itself: every session under a prefix replayed into its own spool on a pool, its
rows sent to the day partitions once its replay has finished, in the listing order; and the
check that pyarrow, loaded only here and only when an export runs, is installed."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..._errors import EvstoreError, InvalidInputError
from ._report import ExportReport, SessionOutcome, outcome_of
from ._rows import schema
from ._sinks import open_sink
from ._writer import Partitions, Spool

if TYPE_CHECKING:
    from ..._read import SessionInfo
    from ..._store import Store

#: Sessions read at once by default.
DEFAULT_CONCURRENCY = 8

INSTALL_HINT = "pip install 'evstore[parquet]'"


def check_available() -> None:
    """``InvalidInputError`` (one line, naming the extra) unless pyarrow can be imported."""
    load_pyarrow()


def load_pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.compute
        import pyarrow.ipc
        import pyarrow.parquet  # the writer's modules, loaded for it
    except ImportError:
        raise InvalidInputError(f"the Parquet export needs pyarrow, which is not installed: {INSTALL_HINT}") from None
    return pyarrow


def spooled(store: Store, session_id: str, spool: Spool) -> tuple[SessionOutcome, Spool]:
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
        return outcome_of(session_id, exc), spool
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
    (see the package docstring); ``on_session`` sees each session's outcome as it ends, in the
    store's listing order.

    Sessions are read ``concurrency`` at a time (each into its own spool, at most
    ``2 * concurrency`` spools at once); their rows go out in listing order, from this thread.
    Raises ``InvalidInputError`` before any work (pyarrow missing, a destination that is not
    empty or cannot be made, a bad prefix) and ``StoreUnavailableError`` when listing the store
    or uploading a part fails; a session that cannot be exported is skipped and reported, never
    raised. The caller decides what the skipped ones mean (the command: exit 5 for tampered).
    """
    pa = load_pyarrow()
    ids = store.list_sessions(prefix)
    first = next(ids, None)  # a bad prefix is refused here, before the destination is made
    sink = open_sink(destination, endpoint_url)
    report = ExportReport(sink.location)
    partitions = Partitions(pa, sink, schema(pa))
    spool_schema = schema(pa, spool=True)
    from concurrent.futures import Future, ThreadPoolExecutor  # loaded on first use, as verify_all's

    pool = ThreadPoolExecutor(max(1, concurrency), thread_name_prefix="evstore-parquet")
    pending: list[Future[tuple[SessionOutcome, Spool]]] = []

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
            pending.append(pool.submit(spooled, store, session_id, Spool(pa, spool_schema)))
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
