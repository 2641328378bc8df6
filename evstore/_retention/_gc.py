"""One gc run: ``collect`` lists the sessions in key ranges, splits them as the listing goes,
hands each session whose listing is complete to the ``Judge``, and aborts the incomplete uploads
due; what it removes, and what that costs, is in the package docstring."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from .. import _lifecycle
from .._backends import ListPage, ObjectInfo
from .._context import StoreContext
from .._errors import InvalidInputError
from ._deletes import Deleter, abort_uploads, counted, list_uploads
from ._judge import Judge
from ._plan import GcReport, Listed, OnRemove, due
from ._ranges import ID_ALPHABET, Range, split_point

if TYPE_CHECKING:
    from concurrent.futures import Future


def collect(
    ctx: StoreContext,
    *,
    dry_run: bool,
    grace: timedelta,
    apply_lifecycle: bool,
    keep: int | None,
    prefix: str,
    now: datetime | None,
    on_remove: OnRemove | None,
) -> GcReport:
    """``Store.gc``: its defaults and contract are there; what it costs is in the package docstring."""
    if grace < timedelta(0):
        raise InvalidInputError("grace must not be negative")
    if keep is not None and keep < 0:
        raise InvalidInputError("keep must not be negative")
    if prefix and not all(c.isalnum() or c in "._-" for c in prefix):
        raise InvalidInputError(f"invalid session id prefix {prefix[:80]!r}")
    now = now or ctx.clock()
    report = GcReport(dry_run)
    counted_ctx, backend = counted(ctx)
    try:
        rules = counted_ctx.backend.get_lifecycle() if apply_lifecycle else []
        cutoff = now - grace
        # the incomplete uploads' first page is listed alongside the sessions, not after them
        first_uploads = counted_ctx.executor().submit(list_uploads, counted_ctx)
        deleter = Deleter(counted_ctx, report, on_remove, threading.Lock())
        judge = Judge(counted_ctx, deleter, rules=rules, now=now, cutoff=cutoff, keep=keep)
        try:
            _Run(judge, prefix).run()
        finally:
            first_uploads.exception()  # settled, without raising over the run's own error: no request outlives gc
        abort_uploads(counted_ctx, deleter, report, rules, cutoff, now, first_uploads.result())
        deleter.flush_all()
    finally:
        report.requests = backend.requests
    return report


class _Run:
    """One gc run's listing: its ranges, the LIST pages in flight, and the judges' threads."""

    def __init__(self, judge: Judge, prefix: str) -> None:
        ctx = judge.ctx
        self.ctx = ctx
        self.judge = judge
        self.report = judge.report
        self.deleter = judge.deleter
        self.rules: list[_lifecycle.Rule] = judge.rules
        self.prefix = prefix
        self.classes = [ctx.tags_for("permanent"), ctx.tags_for("ephemeral")]
        self.root = ctx.layout.sessions + prefix
        self.width = ctx.concurrency
        #: Sessions judged at once (128 by default): each has its manifest's GET in flight from its
        #: judge's thread, and its tombstone's (or its forks' manifests') on the wide pool, so a
        #: deleted session's two GETs wait for no other session's. Why 4 x and not 2 x or 8 x:
        #: docs/retention.md (round trips measured by benchmarks/scale.py, section 5).
        self.judges = 4 * ctx.concurrency
        self.ranges: list[Range] = [Range("", None)]
        self.made = 1  # ranges made: one more only per 2,000 objects listed, so LISTs <= 1.5 x objects/1000 + 1
        self.listed_objects = 0
        #: The characters of the ids listed: boundaries are spelled in them.
        self.seen: set[str] = set()
        #: The first id listed: the lowest, as ranges split only after the first range's pages.
        self.lowest = ""
        self.listing: dict[Future[ListPage], Range] = {}
        self.judging: set[Future[list[tuple[datetime, str]]]] = set()

    def run(self) -> None:
        from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

        # judges wait for their requests, so they get threads of their own: they never hold the
        # store's pool, where their second requests, the listings and the deletes run
        judges = ThreadPoolExecutor(self.judges, thread_name_prefix="evstore-gc")
        waiting = self.judge.waiting
        try:
            self._send()
            while self.listing or self.judging or waiting:
                for _ in range(min(len(waiting), self.judges - len(self.judging))):
                    self.judging.add(judges.submit(self.judge.judge_waiting))
                pending: list[Future[Any]] = [*self.listing, *self.judging]
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    if future in self.listing:
                        self._page(self.listing.pop(future), future.result())
                    else:
                        self.judging.discard(future)
                        for live in future.result():
                            self.judge.settle(live)
                if self.deleter.tombstones_due:
                    self.deleter.flush_all()
                self._split()
                self._send()
        finally:
            unsent: list[Future[Any]] = [*self.listing, *self.judging]
            for future in unsent:
                future.cancel()
            judges.shutdown()

    def _send(self) -> None:
        """A LIST for each range that waits for its next page, unless the sessions waiting for
        their GETs are many: then the ranges wait for them (memory stays bounded)."""
        if len(self.judge.waiting) > 2 * self.judges:
            return
        for range_ in self.ranges:
            if not range_.sent and len(self.listing) < self.width:
                range_.sent = True
                future = self.ctx.executor().submit(self.ctx.backend.list_page, self.root, start_after=range_.after)
                self.listing[future] = range_

    def _page(self, range_: Range, page: ListPage) -> None:
        range_.sent = False
        range_.pages += 1
        ended = not page.truncated
        for info in page.objects:
            if range_.end is not None and info.key >= range_.end:
                ended = True  # the rest is the next range's
                break
            self.listed_objects += 1
            self._take(range_, info)
        if ended:
            if range_.listed is not None:
                self.judge.listed(range_.listed)
            self.ranges.remove(range_)
        else:
            range_.after = page.next_start_after

    def _take(self, range_: Range, info: ObjectInfo) -> None:
        session, slash, name = info.key[len(self.root) :].partition("/")
        if not slash:
            return  # directly under the sessions prefix: no session's object
        session_id = self.prefix + session
        listed = range_.listed
        if listed is None or listed.sid != session_id:
            if listed is not None:
                self.judge.listed(listed)
            listed = range_.listed = Listed(session_id, self.ctx.layout.session_prefix(session_id))
            self.report.sessions += 1
            self.seen.update(c for c in session if c in ID_ALPHABET)
            if not self.lowest:
                self.lowest = session
        self.report.objects_scanned += 1
        if self.rules and not listed.due:
            listed.due = due(self.rules, self.classes, info, self.judge.cutoff, self.judge.now)
        listed.add(name, info)
        # a live session's young segments that a higher level covers (the manifest and the
        # tombstone sort before young/, so the listing has told by then whether it lives)
        if (
            listed.coverage.covered(name, info.size)
            and listed.manifest is not None
            and listed.tombstone is None
            and info.last_modified <= self.judge.cutoff
        ):
            self.deleter.remove(info, "segment retired by a higher level")

    def _split(self) -> None:
        """Split ranges while fewer than ``concurrency`` are listed and the objects listed pay
        for one more: at the first name about halfway from where a range's listing is (past
        the session it is in) to its end."""
        while len(self.ranges) < self.width and self.made <= self.listed_objects // 2000:
            for range_ in sorted(self.ranges, key=lambda r: -r.pages):
                at = self._boundary(range_)
                if at is not None:
                    break
            else:
                return
            self.ranges.append(Range(self.root + at, range_.end))
            range_.end = self.root + at
            self.made += 1

    def _name(self, key: str) -> str:
        """``key`` below the listing's root ("" for a range that starts before every key)."""
        return key[len(self.root) :] if key.startswith(self.root) else ""

    def _boundary(self, range_: Range) -> str | None:
        end = self._name(range_.end) if range_.end is not None else None
        origin, after = self._name(range_.origin), self._name(range_.after)
        return split_point(origin, after, end, range_.pages, lowest=self.lowest, seen=self.seen)
