"""Forks and deletion: fork manifests and their markers, delete, purge, and the rule
that a fork keeps its parent's events alive.

A fork is a manifest naming the parent, the fork seq and the hash of the
parent's event there, plus a marker in the parent's prefix that keeps the
parent's events while the fork lives: O(1) requests whatever the parent's
length. Deleting a session with live forks leaves a tombstone and keeps its
objects until gc finds no fork that needs them.
"""

from __future__ import annotations

import contextlib

import msgspec

from ._backends import ObjectExists
from ._codec import ForkRef, Manifest, Retention, Tombstone, encode_json, encode_manifest, format_ts
from ._context import StoreContext
from ._errors import InvalidInputError, SessionExistsError, SessionNotFoundError, StoreUnavailableError
from ._manifests import new_manifest, require_free
from ._read import MAX_FORK_DEPTH, live_forks, load, read_meta


class DeleteResult(msgspec.Struct, frozen=True):
    session_id: str
    removed: int
    kept_for_forks: list[str]


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
    manifest = new_manifest(ctx, target, retention, ForkRef(source, parent.uid, at, at_hash, depth=depth))
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
        raise SessionNotFoundError(source, "was deleted")
    return manifest


def forks_of(ctx: StoreContext, session_id: str, uid: str) -> list[str]:
    """Forks of the session whose manifests still exist (a deleted fork's too, while it is kept)."""
    return live_forks(ctx, uid, read_meta(ctx, session_id).forks)


def delete(ctx: StoreContext, session_id: str) -> DeleteResult:
    """Delete a session. Its objects stay while a live fork needs them (gc reclaims them later)."""
    manifest = load(ctx, session_id).manifest
    tombstone = Tombstone(session_id, manifest.uid, format_ts(ctx.clock()))
    try:
        ctx.create_once(ctx.layout.tombstone_key(session_id), encode_json(tombstone), ctx.tags_for(manifest.retention))
    except ObjectExists:
        raise SessionNotFoundError(session_id, "was deleted") from None
    live = forks_of(ctx, session_id, manifest.uid)
    if live:
        return DeleteResult(session_id, 0, live)
    return DeleteResult(session_id, purge(ctx, session_id), [])


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
