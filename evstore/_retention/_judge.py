"""Judging gc's sessions once their listings are complete: the few GETs a decision needs (the
manifest, the tombstone, the forks' manifests), sent together, and what the decision removes,
leaves alone or deletes for ``keep``. The decisions' pure parts are ``_plan``'s."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from .. import _lifecycle
from .._backends import ObjectInfo, ObjectMissing, ObjectRefused
from .._codec import MAX_SMALL_OBJECT_BYTES, Manifest, decode_manifest
from .._context import FENCE_HOLD, StoreContext
from .._errors import EvstoreError, SessionNotFoundError
from .._forks import delete
from .._ids import parse_fork_marker
from .._read import first_own_seq, live_forks
from ._deletes import Deleter
from ._plan import UNREADABLE, Listed, Newest, Unreadable, alive_fork, below_base, cannot_decode, tombstone_fence, valid

if TYPE_CHECKING:
    from concurrent.futures import Future

T = TypeVar("T")


def _manifest(ctx: StoreContext, session_id: str) -> Manifest | Unreadable | None:
    try:
        data = ctx.backend.get(ctx.layout.manifest_key(session_id), max_bytes=MAX_SMALL_OBJECT_BYTES).data
        return decode_manifest(data, session_id)
    except ObjectMissing:
        return None
    except EvstoreError:
        return Unreadable()


def _tombstone(ctx: StoreContext, session_id: str) -> bytes | None:
    """The tombstone's bytes (b"" for one too large to read), None if it is gone: one GET."""
    try:
        return ctx.backend.get(ctx.layout.tombstone_key(session_id), max_bytes=MAX_SMALL_OBJECT_BYTES).data
    except ObjectMissing:
        return None
    except ObjectRefused:
        return b""


def _outcome(future: Future[T], request: Callable[[], T]) -> T:
    """The result of a request sent alongside on the store's pool, or, if it has yet to start,
    of the request sent from here instead (a thread never waits for work queued behind it)."""
    return request() if future.cancel() else future.result()


def _objects(ctx: StoreContext, listed: Listed) -> Iterator[ObjectInfo]:
    """Every object of the session, in key order: those held, or (past ``HELD``) a listing again."""
    held = listed.held_objects()
    yield from (ctx.backend.list(listed.prefix) if held is None else held)


class Judge:
    """Decides, of each session whose listing is complete, what gc removes: from the listing
    alone where it can, else from the GETs it sends. Sessions that need GETs wait in
    ``waiting`` for a judge's thread; ``settle`` ranks the live ephemeral ones on the main thread."""

    def __init__(
        self,
        ctx: StoreContext,
        deleter: Deleter,
        *,
        rules: list[_lifecycle.Rule],
        now: datetime,
        cutoff: datetime,
        keep: int | None,
    ) -> None:
        self.ctx = ctx
        self.deleter = deleter
        self.report = deleter.report
        self.lock = deleter.lock
        self.rules = rules
        self.now = now
        self.cutoff = cutoff
        self.keep = keep
        self.waiting: deque[Listed] = deque()
        self.newest = Newest(keep) if keep is not None else None

    def listed(self, listed: Listed) -> None:
        """A session's listing is complete: judge it from the listing, or read what it needs."""
        manifest = listed.manifest
        if manifest is not None and cannot_decode(manifest, listed.sid):
            self._leave(listed.sid, UNREADABLE)
            return
        if manifest is None:
            if listed.held is not None:
                self._judge(listed)  # no request: it removes what the listing holds
                return
        elif listed.nothing_to_collect(manifest, keep=self.keep, cutoff=self.cutoff):
            return  # a live session with nothing to collect: its listing said so
        self.waiting.append(listed)

    def _leave(self, session_id: str, why: str) -> None:
        with self.lock:
            self.report.left_alone[session_id] = why

    def _add_young(self, objects: int) -> None:
        with self.lock:
            self.report.kept_young += objects

    def _removed_session(self) -> None:
        with self.lock:
            self.report.sessions_removed += 1

    def judge_waiting(self) -> list[tuple[datetime, str]]:
        """Judge the sessions waiting, one after another, until none is left (a judge takes the
        next one itself, without a round through the main thread); the live ephemeral ones."""
        live: list[tuple[datetime, str]] = []
        while True:
            try:
                listed = self.waiting.popleft()
            except IndexError:
                return live
            if (found := self._judge(listed)) is not None:
                live.append(found)

    def _judge(self, listed: Listed) -> tuple[datetime, str] | None:
        """Collect one session (on the pool, or inline when it needs no request). Returns the
        manifest's listed LastModified and the id of a live ephemeral session, else None."""
        ctx = self.ctx
        session_id = listed.sid
        if listed.manifest is None:
            self._remove_remnant(listed)
            return None
        # what the decision needs besides the manifest, sent alongside it on the wide pool (its
        # small GETs wait on nothing, and the store's pool runs the listings and the deletes): the
        # tombstone, or the manifests of the forks whose markers are old enough to be removed
        pool = ctx.wide_executor()
        tombstone_data = pool.submit(_tombstone, ctx, session_id) if listed.tombstone is not None else None
        children: dict[str, Future[Manifest | Unreadable | None]] = {}
        if tombstone_data is None:
            for (child, _), info in listed.markers():
                if info.last_modified <= self.cutoff and child not in children and valid(child):
                    children[child] = pool.submit(_manifest, ctx, child)
        try:
            return self._decide(listed, _manifest(ctx, session_id), tombstone_data, children)
        finally:
            unused: list[Future[Any]] = [*children.values(), *([tombstone_data] if tombstone_data is not None else [])]
            for future in unused:
                future.cancel()  # not needed after all (an unreadable manifest): unsent if still queued

    def _decide(
        self,
        listed: Listed,
        manifest: Manifest | Unreadable | None,
        tombstone_data: Future[bytes | None] | None,
        children: dict[str, Future[Manifest | Unreadable | None]],
    ) -> tuple[datetime, str] | None:
        if isinstance(manifest, Unreadable):
            self._leave(listed.sid, UNREADABLE)
            return None
        if manifest is None:
            self._remove_remnant(listed)
            return None
        stored_at = listed.named["manifest"].last_modified
        tombstone = listed.tombstone
        if (
            tombstone is not None
            and tombstone_data is not None
            and self._settled_by_tombstone(listed, manifest, tombstone, tombstone_data)
        ):
            return None
        self._collect_live(listed, manifest, children)
        return (stored_at, listed.sid) if manifest.retention == "ephemeral" else None

    def _settled_by_tombstone(
        self, listed: Listed, manifest: Manifest, tombstone: ObjectInfo, tombstone_data: Future[bytes | None]
    ) -> bool:
        """Whether this incarnation's tombstone decides the session: kept while it fences, else
        removed unless a fork the tombstone records lives. An earlier incarnation's is removed,
        and the session judged as live (False)."""
        session_id = listed.sid
        mine, recorded = tombstone_fence(_outcome(tombstone_data, lambda: _tombstone(self.ctx, session_id)), manifest)
        if not mine:
            self.deleter.remove(tombstone, "an earlier incarnation's tombstone")
            return False
        if tombstone.last_modified > self.now - FENCE_HOLD:
            self._add_young(listed.count)  # fenced: stale writers' leases may still run
            return True
        markers = [marker for marker, _ in listed.markers()]
        # a fork planted after the delete keeps nothing: only those the tombstone records count
        if not markers or not live_forks(self.ctx, manifest.uid, markers, recorded=recorded):
            self._remove_all(listed, "deleted")
        return True

    def _collect_live(
        self, listed: Listed, manifest: Manifest, children: dict[str, Future[Manifest | Unreadable | None]]
    ) -> None:
        """A live session's: an earlier incarnation's events, what the rules expire, dead fork markers."""
        first_seq = listed.first_seq
        if first_seq is not None and first_seq > first_own_seq(manifest):
            # expired piecewise, or a junk object under a live manifest: only the manifest's own
            # expiry (by the rules, below) or a tombstone may remove a session
            self._leave(listed.sid, f"its first events are missing (the first listed is seq {first_seq})")
        if manifest.base and first_seq is not None and first_seq <= manifest.base:
            self._remove_earlier_incarnation(listed, manifest, min(self.cutoff, self.now - FENCE_HOLD))
        # what the rules may expire, and dead fork markers: every object if the rules have any due,
        # else the markers alone
        objects: Iterable[ObjectInfo] = _objects(self.ctx, listed) if self.rules and listed.due else listed.named.values()
        tags = self.ctx.tags_for(manifest.retention)
        for info in objects:
            name = info.key[len(listed.prefix) :]
            if info.last_modified > self.cutoff:
                continue
            when = _lifecycle.expiry(self.rules, info.key, info.last_modified, tags, info.size) if self.rules else None
            if when is not None and when <= self.now:
                self.deleter.remove(info, "lifecycle expiry")
                if name == "manifest":
                    self._removed_session()  # the session is gone with its manifest
            elif (marker := parse_fork_marker(name)) is not None and not self._fork_alive(marker, manifest.uid, children):
                self.deleter.remove(info, "dead fork marker")

    def _remove_remnant(self, listed: Listed) -> None:
        """A session without a manifest: an expired one's remnant, an orphan, or a deleted one's rest."""
        self._remove_all(listed, "expired remnant or orphan" if listed.tombstone is None else "deleted")

    def _remove_all(self, listed: Listed, reason: str) -> None:
        young = 0
        tombstone = None
        tombstone_key = self.ctx.layout.tombstone_key(listed.sid)
        for info in _objects(self.ctx, listed):
            if info.last_modified > self.cutoff:
                young += 1
            elif info.key == tombstone_key:
                tombstone = info
            else:
                self.deleter.remove(info, reason)
        self._add_young(young)
        if tombstone is not None and young == 0:
            self.deleter.remove(tombstone, reason, last=True)
        if young == 0:
            self._removed_session()

    def _remove_earlier_incarnation(self, listed: Listed, manifest: Manifest, before: datetime) -> None:
        """The events, fence and segments a deleted session left below the base of the session
        created over it, once this manifest is older than ``before`` (so the delete is, too)."""
        young = listed.named["manifest"].last_modified > before
        kept = 0
        for info in _objects(self.ctx, listed):
            if below_base(info.key[len(listed.prefix) :], manifest.base):
                if young:
                    kept += 1
                else:
                    self.deleter.remove(info, "earlier incarnation")
        self._add_young(kept)

    def settle(self, live: tuple[datetime, str]) -> None:
        """Rank a live ephemeral session (its manifest's listed LastModified, its id) for ``keep``,
        deleting the oldest beyond the count; one younger than the grace is kept, unranked: the
        grace protects every object younger than it, ``keep`` included."""
        if self.newest is None:
            return
        stored_at, session_id = live
        if stored_at > self.cutoff:
            with self.lock:
                self.report.kept_by_grace += 1
            return
        if (oldest := self.newest.rank(stored_at, session_id)) is not None:
            self._remove_for_keep(oldest)

    def _remove_for_keep(self, session_id: str) -> None:
        """Delete a session beyond the keep count with ``delete`` (a later run removes its objects)."""
        if not self.report.dry_run:
            self.deleter.flush_all()  # an earlier tombstone queued for removal goes before delete writes one
            try:
                delete(self.ctx, session_id)
            except SessionNotFoundError:
                return  # deleted meanwhile
        self.report.sessions_deleted += 1

    def _fork_alive(
        self, marker: tuple[str, str], parent_uid: str, children: dict[str, Future[Manifest | Unreadable | None]]
    ) -> bool:
        child, child_uid = marker
        if not valid(child):
            return False
        sent = children.get(child)
        manifest = _manifest(self.ctx, child) if sent is None else _outcome(sent, lambda: _manifest(self.ctx, child))
        return alive_fork(manifest, child_uid, parent_uid)
