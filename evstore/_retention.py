"""Retention: installing lifecycle rules, previewing them (their evaluation is the pure
``evstore._lifecycle``), and garbage collection.

gc is session-granular and fork-aware. For each session prefix it removes:

* remnants of expired sessions: no manifest (lifecycle rules delete object by
  object, the manifest, created first, first);
* deleted sessions (tombstone) that no live fork needs, once the tombstone is
  older than ``FENCE_HOLD`` (until then the fence keeps stale writers out:
  see ``_forks``), the tombstone last;
* orphans: objects of a prefix without a manifest (a stale writer's append
  after the session was removed) — the same case as a remnant;
* fork markers whose fork no longer exists;
* incomplete multipart uploads under the store's sessions.

It never touches an object younger than ``grace``, nor any object of a live
session except dead fork markers (and, with ``apply_lifecycle``, what the
bucket's own rules would have expired: the same semantics as S3). Only the
manifest, the tombstone, the rules and the grace decide: a session whose
manifest exists but does not decode, or whose first events are missing, is
left alone and reported (``GcReport.left_alone``), since junk objects anyone
could create must never make gc remove a live session. It streams:
memory holds one LIST page and one delete batch; requests are the LIST pages,
a manifest GET where a decision needs it, and batch deletes of up to 1,000 keys.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from . import _lifecycle
from ._backends import ObjectInfo, ObjectMissing
from ._codec import MAX_SMALL_OBJECT_BYTES, Manifest, decode_manifest, parse_ts
from ._context import FENCE_HOLD, StoreContext
from ._errors import EvstoreError, InvalidInputError, SessionNotFoundError
from ._forks import delete
from ._ids import parse_fork_marker, parse_segment, parse_seq, validate_session_id
from ._read import Meta, first_own_seq, list_sessions, live_forks, read_manifest, recorded_forks, tombstoned

#: gc never touches an object younger than this unless told otherwise.
DEFAULT_GRACE = timedelta(days=1)

#: Called for every object gc removes (or would remove, in a dry run): key, size, reason.
OnRemove = Callable[[str, int, str], None]


@dataclass
class GcReport:
    dry_run: bool
    sessions: int = 0
    objects_scanned: int = 0
    objects_removed: int = 0
    bytes_removed: int = 0
    sessions_removed: int = 0
    uploads_aborted: int = 0
    kept_young: int = 0
    #: Sessions beyond ``keep`` that this run deleted: fenced now, their objects removed by a
    #: gc run once ``FENCE_HOLD`` has passed.
    sessions_deleted: int = 0
    requests: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    #: Sessions gc would not judge, with why: an undecodable manifest, missing first events.
    left_alone: dict[str, str] = field(default_factory=dict)

    def count(self, reason: str, objects: int = 1) -> None:
        self.reasons[reason] = self.reasons.get(reason, 0) + objects


@dataclass(frozen=True)
class ExpiringObject:
    key: str
    session_id: str
    expires: datetime


class _Deleter:
    """Batches deletes across sessions; keys queued ``last`` go only after every earlier batch."""

    def __init__(self, ctx: StoreContext, report: GcReport, on_remove: OnRemove | None) -> None:
        self.ctx = ctx
        self.report = report
        self.on_remove = on_remove
        self.batch: list[str] = []
        self.last: list[str] = []

    def remove(self, info: ObjectInfo, reason: str, *, last: bool = False) -> None:
        report = self.report
        report.objects_removed += 1
        report.bytes_removed += info.size
        report.count(reason)
        if self.on_remove is not None:
            self.on_remove(info.key, info.size, reason)
        if report.dry_run:
            return
        (self.last if last else self.batch).append(info.key)
        if len(self.batch) >= 1000:
            self.flush()
        if len(self.last) >= 1000:
            self.flush_all()

    def flush(self) -> None:
        if self.batch:
            self.report.requests += self.ctx.backend.delete_many(self.batch)
            self.batch = []

    def flush_all(self) -> None:
        self.flush()
        if self.last:
            self.report.requests += self.ctx.backend.delete_many(self.last)
            self.last = []


def _listing(ctx: StoreContext, prefix: str, report: GcReport, start: str = "") -> Iterator[ObjectInfo]:
    while True:
        page = ctx.backend.list_page(prefix, start_after=start)
        report.requests += 1
        report.objects_scanned += len(page.objects)
        yield from page.objects
        if not page.truncated:
            return
        start = page.next_start_after


class _Unreadable:
    """A manifest exists but does not decode (corrupt, or a future format version)."""


def _manifest(ctx: StoreContext, session_id: str, report: GcReport) -> Manifest | _Unreadable | None:
    report.requests += 1
    try:
        data = ctx.backend.get(ctx.layout.manifest_key(session_id), max_bytes=MAX_SMALL_OBJECT_BYTES).data
        return decode_manifest(data, session_id)
    except ObjectMissing:
        return None
    except EvstoreError:
        return _Unreadable()


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
    """``Store.gc``: its defaults and contract are there."""
    if grace < timedelta(0):
        raise InvalidInputError("grace must not be negative")
    if keep is not None and keep < 0:
        raise InvalidInputError("keep must not be negative")
    now = now or ctx.clock()
    report = GcReport(dry_run)
    deleter = _Deleter(ctx, report, on_remove)
    rules = ctx.backend.get_lifecycle() if apply_lifecycle else []
    if apply_lifecycle:
        report.requests += 1
    cutoff = now - grace
    # heap of (when, id): the ``keep`` newest ephemeral sessions, by when the store stored each
    # manifest (its listed LastModified). Not by the manifest's own ``created``: whoever may create a
    # manifest writes that, and a planted one claiming the far future would outlast every real session
    newest: list[tuple[datetime, str]] = []
    for session_id in list_sessions(ctx, prefix):
        report.sessions += 1
        live = _collect_session(ctx, session_id, deleter, report, rules, now, cutoff)
        if keep is not None and live is not None:
            read, stored_at = live
            manifest = read or _manifest(ctx, session_id, report)
            if isinstance(manifest, Manifest) and manifest.retention == "ephemeral":
                heapq.heappush(newest, (stored_at, session_id))
                if len(newest) > keep:
                    _, oldest = heapq.heappop(newest)
                    _remove_for_keep(ctx, oldest, deleter, report)
    report.requests += (report.sessions + 999) // 1000 or 1  # the delimiter LIST pages of list_sessions
    _abort_uploads(ctx, deleter, report, rules, cutoff, now)
    deleter.flush_all()
    return report


def _remove_for_keep(ctx: StoreContext, session_id: str, deleter: _Deleter, report: GcReport) -> None:
    """Delete a session beyond the keep count with ``delete`` (a later run removes its objects)."""
    if not report.dry_run:
        deleter.flush_all()
        try:
            delete(ctx, session_id)
        except SessionNotFoundError:
            return  # deleted meanwhile
    report.sessions_deleted += 1


def _collect_session(
    ctx: StoreContext,
    session_id: str,
    deleter: _Deleter,
    report: GcReport,
    rules: list[_lifecycle.Rule],
    now: datetime,
    cutoff: datetime,
) -> tuple[Manifest | None, datetime] | None:
    """Collect one session. Returns None unless it is live; for a live one its manifest if
    this read it (else None: its first LIST page showed nothing to collect) and the manifest's
    listed LastModified."""
    layout = ctx.layout
    prefix = layout.session_prefix(session_id)
    first_page = ctx.backend.list_page(prefix)
    report.requests += 1
    report.objects_scanned += len(first_page.objects)

    def objects() -> Iterator[ObjectInfo]:
        """Every object of the session: the page already read, then the rest."""
        yield from first_page.objects
        if first_page.truncated:
            yield from _listing(ctx, prefix, report, first_page.next_start_after)

    named = {o.key[len(prefix) :]: o for o in first_page.objects}
    if first_page.truncated:
        named |= {o.key[len(prefix) :]: o for o in ctx.backend.list(prefix, start_after=layout.after_events(session_id))}
        report.requests += 1
    names = set(named)
    first_seq = next((s for o in first_page.objects if (s := parse_seq(o.key[len(prefix) :])) is not None), None)
    # an event older than the manifest is an earlier incarnation's (a create over a deleted id)
    earlier = (
        "manifest" in named and first_seq is not None and first_page.objects[0].last_modified < named["manifest"].last_modified
    )
    needs_manifest = "manifest" in names and (
        bool(rules) or "tombstone" in names or any(n.startswith("forks/") for n in names) or first_seq not in (None, 1) or earlier
    )
    manifest = _manifest(ctx, session_id, report) if needs_manifest else None
    if "manifest" in names and not needs_manifest:
        return None, named["manifest"].last_modified  # a live session with nothing to collect: its first page said so
    if isinstance(manifest, _Unreadable):
        report.left_alone[session_id] = "its manifest does not decode (corrupt, or a newer format)"
        return None
    first_own = first_own_seq(manifest) if manifest is not None else 1

    def remove_all(reason: str) -> None:
        young = 0
        tombstone = None
        for info in objects():
            if info.last_modified > cutoff:
                young += 1
            elif info.key == layout.tombstone_key(session_id):
                tombstone = info
            else:
                deleter.remove(info, reason)
        report.kept_young += young
        if tombstone is not None and young == 0:
            deleter.remove(tombstone, reason, last=True)
        if young == 0:
            report.sessions_removed += 1

    if manifest is None:
        remove_all("expired remnant or orphan" if "tombstone" not in names else "deleted")
        return None
    if "tombstone" in names and not tombstoned(ctx, manifest, Meta(tombstone=True)):
        deleter.remove(named["tombstone"], "an earlier incarnation's tombstone")
        names.discard("tombstone")
    if "tombstone" in names:
        if named["tombstone"].last_modified > now - FENCE_HOLD:
            report.kept_young += len(named)  # fenced: stale writers' leases may still run
        elif not (markers := [m for n in names if (m := parse_fork_marker(n)) is not None]) or not live_forks(
            ctx, manifest.uid, markers, recorded=recorded_forks(ctx, session_id)  # a fork planted after the delete keeps nothing
        ):
            remove_all("deleted")
        return None
    if first_seq is not None and first_seq > first_own:
        # expired piecewise, or a junk object under a live manifest: only the manifest's own
        # expiry (by the rules, below) or a tombstone may remove a session
        report.left_alone[session_id] = f"its first events are missing (the first listed is seq {first_seq})"
    if manifest.base and first_seq is not None and first_seq <= manifest.base:
        _remove_earlier_incarnation(manifest, named, deleter, report, min(cutoff, now - FENCE_HOLD))
    if not rules and not any(n.startswith("forks/") for n in names):
        return manifest, named["manifest"].last_modified  # read only to place the first seq of a fork: nothing to collect
    tags = ctx.tags_for(manifest.retention)
    for info in objects():
        name = info.key[len(prefix) :]
        if info.last_modified > cutoff:
            continue
        when = _lifecycle.expiry(rules, info.key, info.last_modified, tags, info.size) if rules else None
        if when is not None and when <= now:
            deleter.remove(info, "lifecycle expiry")
            if name == "manifest":
                report.sessions_removed += 1  # the session is gone with its manifest
        elif (marker := parse_fork_marker(name)) is not None and not _fork_alive(ctx, marker, manifest.uid, report):
            deleter.remove(info, "dead fork marker")
    return manifest, named["manifest"].last_modified


def _remove_earlier_incarnation(
    manifest: Manifest, named: dict[str, ObjectInfo], deleter: _Deleter, report: GcReport, before: datetime
) -> None:
    """The events, fence and segments a deleted session left below the base of the session
    created over it, once this manifest is older than ``before`` (so the delete is, too)."""
    old = [
        info
        for name, info in named.items()
        if ((seq := parse_seq(name)) is not None and seq <= manifest.base)
        or ((segment := parse_segment(name)) is not None and segment[1] <= manifest.base)
    ]
    if named["manifest"].last_modified > before:
        report.kept_young += len(old)
        return
    for info in old:
        deleter.remove(info, "earlier incarnation")


def _fork_alive(ctx: StoreContext, marker: tuple[str, str], parent_uid: str, report: GcReport) -> bool:
    child, child_uid = marker
    try:
        validate_session_id(child)
    except InvalidInputError:
        return False
    manifest = _manifest(ctx, child, report)
    if isinstance(manifest, _Unreadable):
        return True  # gc does not judge what it cannot read: the marker stays
    return (
        isinstance(manifest, Manifest)
        and manifest.uid == child_uid
        and manifest.parent is not None
        and manifest.parent.uid == parent_uid
    )


def _abort_uploads(
    ctx: StoreContext, deleter: _Deleter, report: GcReport, rules: list[_lifecycle.Rule], cutoff: datetime, now: datetime
) -> None:
    report.requests += 1
    for upload in ctx.backend.list_incomplete_uploads(ctx.layout.sessions):
        due = _lifecycle.upload_abort(rules, upload.key, upload.initiated) if rules else None
        if upload.initiated > cutoff and (due is None or due > now):
            continue
        report.uploads_aborted += 1
        report.count("incomplete upload")
        if deleter.on_remove is not None:
            deleter.on_remove(upload.key, 0, "incomplete upload")
        if not report.dry_run:
            ctx.backend.abort_upload(upload.key, upload.upload_id)
            report.requests += 1


def preview(ctx: StoreContext, at: datetime) -> Iterator[ExpiringObject]:
    """Objects the bucket's lifecycle rules will have expired by ``at`` (the rules as installed).

    Tags are known from each session's retention class (evstore tags every
    object of an ephemeral session), so no per-object tagging request is made.
    """
    rules = ctx.backend.get_lifecycle()
    if not rules:
        return
    for session_id in list_sessions(ctx):
        try:
            found = read_manifest(ctx, session_id)
        except EvstoreError:
            found = None
        retention = found[0].retention if found is not None else None
        prefix = ctx.layout.session_prefix(session_id)
        for info in ctx.backend.list(prefix):
            if retention is None:
                try:
                    tags = ctx.backend.get_tags(info.key)
                except ObjectMissing:
                    continue
            else:
                tags = ctx.tags_for(retention)
            when = _lifecycle.expiry(rules, info.key, info.last_modified, tags, info.size)
            if when is not None and when <= at:
                yield ExpiringObject(info.key, session_id, when)


def apply_lifecycle_rules(ctx: StoreContext, ephemeral_days: int) -> tuple[bool, list[_lifecycle.Rule]]:
    """Install evstore's rules, merged with the bucket's; (changed, resulting rules). Idempotent:
    when the bucket already has them, no write is made."""
    existing = ctx.backend.get_lifecycle()
    merged = _lifecycle.merge_rules(existing, _lifecycle.evstore_rules(ctx.layout.sessions, ephemeral_days))
    if _lifecycle.rules_equal(merged, existing):
        return False, existing
    ctx.backend.put_lifecycle(merged)
    return True, merged


def parse_duration(text: str) -> timedelta:
    """``90s``, ``15m``, ``12h``, ``1d``, ``2w``, or a number of seconds."""
    text = text.strip().lower()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    number, unit = (text[:-1], text[-1]) if text and text[-1] in units else (text, "s")
    try:
        value = float(number)
    except ValueError:
        raise InvalidInputError(f"invalid duration {text[:40]!r}: use e.g. 90s, 15m, 12h, 1d, 2w") from None
    if value < 0 or value > 3650 * 86400:
        raise InvalidInputError(f"invalid duration {text[:40]!r}")
    return timedelta(seconds=value * units[unit])


def parse_time(text: str) -> datetime:
    try:
        moment = parse_ts(text if "T" in text else text + "T00:00:00Z")
    except ValueError:
        raise InvalidInputError(f"invalid date {text[:40]!r}: use YYYY-MM-DD or an RFC 3339 time") from None
    if moment.tzinfo is None:
        raise InvalidInputError(f"invalid date {text[:40]!r}: give a time zone (Z)")
    return moment
