"""gc's removals and what it counts: batched deletes (tombstones after everything before them),
aborted incomplete uploads, and the counted backend every request of a run goes through."""

from __future__ import annotations

import copy
import itertools
import threading
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING

from .. import _lifecycle
from .._backends import Forwarding, IncompleteUpload, ObjectInfo, ObjectStore
from .._context import StoreContext
from ._plan import GcReport, OnRemove

if TYPE_CHECKING:
    from concurrent.futures import Future

#: The incomplete uploads S3 lists in one request.
_UPLOADS_PAGE = 1000
#: Delete batches in flight at once; a thread that would send one more sends it itself.
_DELETES_IN_FLIGHT = 8


class Counted(Forwarding):
    """The store's backend, counting the requests sent through it from any thread (a LIST page,
    a GET, each batch of a delete): what ``GcReport.requests`` reports."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.requests = 0
        self._lock = threading.Lock()

    def _request(self, kind: str, key: str, times: int = 1) -> None:
        with self._lock:
            self.requests += times


def counted(ctx: StoreContext) -> tuple[StoreContext, Counted]:
    """The store's context with its backend counted, sharing its pool, caches and clock."""
    ctx.executor()  # made now, so that the copy shares it rather than making its own
    backend = Counted(ctx.backend)
    shared = copy.copy(ctx)
    shared.backend = backend
    return shared, backend


class Deleter:
    """Batches deletes across sessions, from any thread, and sends each batch of 1,000 on the
    pool as it fills; keys queued ``last`` (tombstones) go only after every batch before them
    has been deleted. Reports each removal (and calls ``on_remove``) under ``lock``, which
    guards the whole report."""

    def __init__(self, ctx: StoreContext, report: GcReport, on_remove: OnRemove | None, lock: threading.Lock) -> None:
        self.ctx = ctx
        self.report = report
        self.on_remove = on_remove
        self.lock = lock
        self.batch: list[str] = []
        self.last: list[str] = []
        self.sent: list[Future[int]] = []

    def remove(self, info: ObjectInfo, reason: str, *, last: bool = False) -> None:
        with self.lock:
            report = self.report
            report.objects_removed += 1
            report.bytes_removed += info.size
            report.count(reason)
            if self.on_remove is not None:
                self.on_remove(info.key, info.size, reason)
            if report.dry_run:
                return
            (self.last if last else self.batch).append(info.key)
            if len(self.batch) < 1000:
                return
            batch, self.batch = self.batch, []
            self.sent = [f for f in self.sent if not f.done() or f.exception() is not None]
            if len(self.sent) < _DELETES_IN_FLIGHT:
                self.sent.append(self.ctx.executor().submit(self.ctx.backend.delete_many, batch))
                return
            from concurrent.futures import Future  # here: `import evstore` loads no concurrent.futures

            here: Future[int] = Future()  # enough in flight: this thread sends it, and is paced by it
            self.sent.append(here)
        try:
            here.set_result(self.ctx.backend.delete_many(batch))
        except BaseException as exc:
            here.set_exception(exc)
            raise

    @property
    def tombstones_due(self) -> bool:
        return len(self.last) >= 1000

    def flush_all(self) -> None:
        """Send what is queued, wait for every batch sent, then delete the tombstones queued."""
        with self.lock:
            last, self.last = self.last, []
            if self.batch:
                self.sent.append(self.ctx.executor().submit(self.ctx.backend.delete_many, self.batch))
                self.batch = []
            sent, self.sent = self.sent, []
        for future in sent:
            future.result()
        if last:
            self.ctx.backend.delete_many(last)


def list_uploads(ctx: StoreContext) -> Iterator[IncompleteUpload]:
    """The incomplete uploads under the sessions, the first page of them read (the rest as iterated)."""
    uploads = iter(ctx.backend.list_incomplete_uploads(ctx.layout.sessions))
    return itertools.chain(list(itertools.islice(uploads, _UPLOADS_PAGE)), uploads)


def abort_uploads(
    ctx: StoreContext,
    deleter: Deleter,
    report: GcReport,
    rules: list[_lifecycle.Rule],
    cutoff: datetime,
    now: datetime,
    uploads: Iterable[IncompleteUpload],
) -> None:
    for upload in uploads:
        due = _lifecycle.upload_abort(rules, upload.key, upload.initiated) if rules else None
        if upload.initiated > cutoff and (due is None or due > now):
            continue
        report.uploads_aborted += 1
        report.count("incomplete upload")
        if deleter.on_remove is not None:
            deleter.on_remove(upload.key, 0, "incomplete upload")
        if not report.dry_run:
            ctx.backend.abort_upload(upload.key, upload.upload_id)
