"""Forks and deletion: fork manifests and their markers, delete, purge, and the rule
that a fork keeps its parent's events alive.

A fork is a manifest naming the parent, the fork seq and the hash of the
parent's event there, plus a marker in the parent's prefix that keeps the
parent's events while the fork lives: O(1) requests whatever the parent's
length.

Deleting a session writes its tombstone, then a fence: the tombstone's bytes at
the seq after the head, so no append can land after the delete (a stale
writer's PUT meets a 412 at the fence or before it). The objects stay, every
seq up to the fence taken, until gc finds the tombstone older than
``FENCE_HOLD`` (longer than any writer's lease: a writer past its lease reads
its manifest again before it acknowledges) and no fork that needs them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

import msgspec

from ._backends import ObjectExists, PreconditionFailed
from ._codec import (
    MAX_SMALL_OBJECT_BYTES,
    ForkRef,
    Manifest,
    Retention,
    Tombstone,
    encode_json,
    encode_manifest,
    fence_of,
    format_ts,
)
from ._context import FENCE_HOLD, StoreContext
from ._errors import InvalidInputError, SessionExistsError, SessionNotFoundError, StoreUnavailableError
from ._manifests import new_manifest, require_free
from ._read import MAX_FORK_DEPTH, Loaded, find_head, fork_points, is_fence, live_forks, load, read_meta, tombstoned

#: How many seqs past the head ``delete`` tries for its fence, each taken by an append racing it.
FENCE_ATTEMPTS = 1000


class DeleteResult(msgspec.Struct, frozen=True):
    session_id: str
    #: The seq of the fence: no append is acknowledged at it or after it.
    fenced_at: int
    #: Forks that read the session's events: gc keeps its objects while they live.
    kept_for_forks: list[str]
    #: When gc may remove the objects (the tombstone's time + ``FENCE_HOLD``), forks aside.
    removable_after: str


def fork_manifest(
    ctx: StoreContext, parent: Manifest, target: str, at: int, at_hash: str, retention: Retention | None
) -> Manifest:
    """Create the fork's marker, then its manifest (the commit point), then check the parent lives:
    LIST target prefix, PUT marker, PUT manifest, HEAD parent tombstone."""
    source = parent.sid
    retention = retention or parent.retention
    grandparent = parent.parent
    depth = 1 if grandparent is None or grandparent.copied else max(grandparent.depth, 1) + 1
    if depth > MAX_FORK_DEPTH:
        raise InvalidInputError(f"forks may nest at most {MAX_FORK_DEPTH} deep: fork {source!r}'s root session instead")
    ancestry = () if grandparent is None or grandparent.copied else (grandparent, *parent.ancestry)
    ref = ForkRef(source, parent.uid, at, at_hash, depth=depth)
    manifest = new_manifest(ctx, target, retention, ref, ancestry)
    require_free(ctx, target)
    layout = ctx.layout
    marker = layout.fork_marker_key(source, target, manifest.uid)
    ctx.create_once(marker, encode_json({"seq": at, "uid": manifest.uid}), ctx.tags_for(retention))
    try:
        ctx.create_once(layout.manifest_key(target), encode_manifest(manifest), ctx.tags_for(retention))
    except ObjectExists:
        # best effort (a writer role may not delete): gc removes a marker whose fork does not exist
        with contextlib.suppress(StoreUnavailableError):
            ctx.backend.delete_many([marker])
        raise SessionExistsError(target) from None
    if ctx.has_object(layout.tombstone_key(source)):
        # a delete of the parent raced us and did not see the marker: back out
        ctx.backend.delete_many([layout.manifest_key(target), marker])
        raise SessionNotFoundError(source, "was deleted", deleted=True)
    return manifest


def forks_of(ctx: StoreContext, session_id: str, uid: str) -> list[str]:
    """Forks of the session whose manifests still exist (a deleted fork's too, while it is kept)."""
    return live_forks(ctx, uid, read_meta(ctx, session_id).forks)


def delete(ctx: StoreContext, session_id: str) -> DeleteResult:
    """Delete a session: every read says so at once, and no append lands after this returns.

    Requests: GET manifest with the LIST of its non-event objects, then ``fence``'s. Nothing is
    removed here: gc removes the objects once ``removable_after`` has passed and no fork reads
    them. Running it again finishes a delete that was interrupted between its tombstone and
    its fence (one GET more); after a complete one it raises ``SessionNotFoundError``.
    """
    fenced = fence(ctx, load(ctx, session_id, deleted_ok=True))
    if fenced is None:
        raise SessionNotFoundError(session_id, "was deleted", deleted=True)
    return fenced


def fence(ctx: StoreContext, loaded: Loaded) -> DeleteResult | None:
    """Mark the session deleted so that no append lands from here on: its tombstone (naming the
    forks alive), the forks made meanwhile added to it, then the tombstone's bytes at the seq
    after the highest seq listed, whatever precedes it (an expired or tampered start included).
    A stale writer's PUT then meets a 412 at the fence or before it, and reads it as the delete
    (``decode_at``); the caller keeps every seq slot up to the fence taken until gc, after
    ``FENCE_HOLD``. None when the session is deleted and fenced already.

    Requests: the head's LIST (``find_head``), a GET per fork marker (the forks the tombstone
    records), PUT tombstone, then ``_record_late_forks`` (GET tombstone, LIST), PUT fence (one
    more per append that races it).
    """
    manifest = loaded.manifest
    session_id = manifest.sid
    head = find_head(ctx, loaded, require_start=False)
    if loaded.meta.tombstone and head >= loaded.first_own and is_fence(ctx, session_id, manifest.uid, head):
        return None
    now = ctx.clock()
    tombstone = encode_json(Tombstone(session_id, manifest.uid, format_ts(now), _alive(ctx, manifest.uid, loaded.meta.forks)))
    tags = ctx.tags_for(manifest.retention)
    key = ctx.layout.tombstone_key(session_id)
    if not loaded.meta.tombstone:
        try:
            ctx.create_once(key, tombstone, tags)
        except ObjectExists:
            if tombstoned(ctx, manifest, msgspec.structs.replace(loaded.meta, tombstone=True)):
                return None
            ctx.backend.delete_many([key])  # an earlier incarnation's, left behind by the create of this one
            ctx.create_once(key, tombstone, tags)
    recorded = _record_late_forks(ctx, session_id, manifest.uid, key, tags)
    seq = head + 1
    for _ in range(FENCE_ATTEMPTS):
        try:
            ctx.create_once(ctx.layout.event_key(session_id, seq), tombstone, tags)
            break
        except ObjectExists:
            seq += 1  # an append landed there first: it is part of what is deleted
    else:
        raise StoreUnavailableError(f"session {session_id!r}: {FENCE_ATTEMPTS} appends raced the delete; run it again")
    forks = forks_of(ctx, session_id, manifest.uid) if recorded is None else sorted(f.rpartition("@")[0] for f in recorded)
    return DeleteResult(session_id, seq, forks, format_ts(now + FENCE_HOLD))


def _alive(ctx: StoreContext, uid: str, markers: list[tuple[str, str]]) -> list[str]:
    """The markers (``child@uid``) of forks alive now: what a tombstone records (a GET each)."""
    return sorted(f"{child}@{child_uid}" for child, child_uid in markers if fork_points(ctx, uid, [(child, child_uid)]))


def _record_late_forks(
    ctx: StoreContext, session_id: str, uid: str, key: str, tags: Mapping[str, str]
) -> list[str] | None:
    """Add to the tombstone the forks made while it was written (GET, LIST, a GET per new
    marker, a conditional replace when there are any); return what it then records, or None
    for a tombstone that records none.

    A fork stores its marker, then its manifest, then backs out if it finds a tombstone. One
    whose marker this LIST misses, or whose manifest is not there yet, finds the tombstone and
    backs out; every other one is listed here and recorded, so no fork alive after the delete
    goes unrecorded. A tombstone from before tombstones recorded forks is left as it is.
    """
    for _ in range(FENCE_ATTEMPTS):
        stored = ctx.backend.get(key, max_bytes=MAX_SMALL_OBJECT_BYTES)
        tombstone = fence_of(stored.data)
        if tombstone is None or tombstone.uid != uid or tombstone.forks is None:
            return None
        markers = [m for m in read_meta(ctx, session_id).forks if f"{m[0]}@{m[1]}" not in tombstone.forks]
        late = _alive(ctx, uid, markers)
        if not late:
            return tombstone.forks
        recorded = sorted({*tombstone.forks, *late})
        try:
            ctx.backend.replace(key, encode_json(msgspec.structs.replace(tombstone, forks=recorded)), etag=stored.etag, tags=tags)
            return recorded
        except PreconditionFailed:
            continue  # another run of this delete recorded first: read it again
    raise StoreUnavailableError(f"session {session_id!r}: forks kept racing the delete; run it again")


def purge(ctx: StoreContext, session_id: str) -> int:
    """Remove every object of the session, the tombstone last; return how many."""
    prefix = ctx.layout.session_prefix(session_id)
    tombstone = ctx.layout.tombstone_key(session_id)
    removed = 0
    batch: list[str] = []
    tombstoned = False
    for info in ctx.backend.list(prefix):
        if info.key == tombstone:
            tombstoned = True
            continue
        batch.append(info.key)
        if len(batch) == 1000:
            ctx.backend.delete_many(batch)
            removed += len(batch)
            batch = []
    ctx.backend.delete_many(batch)
    removed += len(batch)
    if tombstoned:
        ctx.backend.delete_many([tombstone])
        removed += 1
    return removed
