"""A session's birth: its manifest, created once with ``If-None-Match`` in an empty prefix."""

from __future__ import annotations

import os

from ._backends import ObjectExists, ObjectMissing, PreconditionFailed
from ._codec import (
    FORMAT_VERSION,
    MAX_SMALL_OBJECT_BYTES,
    RETENTIONS,
    ForkRef,
    Manifest,
    Retention,
    b64encode,
    decode_manifest,
    encode_manifest,
    format_ts,
    sha256_hex,
)
from ._context import StoreContext
from ._crypto import new_salt
from ._errors import InvalidInputError, SessionExistsError, SessionExpiredError
from ._ids import parse_seq
from ._read import (
    Loaded,
    find_head,
    first_name,
    first_own_seq,
    held_by_forks,
    is_fence,
    live_forks,
    read_meta,
    recorded_forks,
    salt_key,
    tombstoned,
)


def new_manifest(
    ctx: StoreContext, session_id: str, retention: Retention, parent: ForkRef | None, ancestry: tuple[ForkRef, ...] = ()
) -> Manifest:
    """A fresh manifest: a random uid, the active key id and a new salt when a key is configured."""
    if retention not in RETENTIONS:
        raise InvalidInputError(f"retention must be permanent or ephemeral, not {retention!r:.40}")
    kid = ctx.keyring.active
    if kid is None and ctx.require_encryption:
        raise InvalidInputError("encryption is required but no key is configured (EVSTORE_KEY or EVSTORE_KEYRING)")
    return Manifest(
        FORMAT_VERSION,
        session_id,
        os.urandom(16).hex(),
        format_ts(ctx.clock()),
        retention,
        parent,
        kid,
        b64encode(new_salt()) if kid is not None else None,
        ancestry=ancestry,
    )


def claim(ctx: StoreContext, session_id: str) -> tuple[int, str | None]:
    """Where a new session under ``session_id`` may start: (0, None) in an empty prefix; over a
    deleted session that no fork reads, (its fence's seq, its manifest's ETag): the new
    incarnation's seqs follow the fence, and its manifest replaces the old one only if that is
    still there. Else ``SessionExistsError`` or ``SessionExpiredError``.
    Requests: a LIST for an empty prefix; else GET manifest, LIST, GET tombstone, the head's
    LIST, GET fence."""
    first = first_name(ctx, session_id)
    if first is None:
        return 0, None
    try:
        stored = ctx.backend.get(ctx.layout.manifest_key(session_id), max_bytes=MAX_SMALL_OBJECT_BYTES)
    except ObjectMissing:
        if parse_seq(first) is not None:
            raise SessionExpiredError(session_id, "its manifest is gone but events remain (gc removes them)") from None
        raise SessionExistsError(session_id, "was removed but left objects that gc removes") from None
    manifest = decode_manifest(stored.data, session_id)
    meta = read_meta(ctx, session_id)
    if not tombstoned(ctx, manifest, meta):
        raise SessionExistsError(session_id)
    if meta.forks and (forks := live_forks(ctx, manifest.uid, meta.forks, recorded=recorded_forks(ctx, session_id))):
        raise SessionExistsError(session_id, held_by_forks(forks))
    head = find_head(ctx, Loaded(manifest, sha256_hex(stored.data), meta), require_start=False)  # where its fence is
    if head < first_own_seq(manifest) or not is_fence(ctx, session_id, manifest.uid, head):
        raise SessionExistsError(session_id, "was deleted but not fenced (an interrupted delete): run delete again")
    return head, stored.etag


def require_free(ctx: StoreContext, session_id: str) -> None:
    """A fork may only start in an empty prefix: never over the remnants of an expired or
    deleted session (their events would collide with its seqs)."""
    if claim(ctx, session_id) != (0, None):
        raise SessionExistsError(session_id, "was deleted and its objects remain until gc: create it instead")


def create_manifest(ctx: StoreContext, manifest: Manifest, replaces: str | None = None) -> str:
    """PUT the manifest in a prefix ``claim`` found free (``If-None-Match``: one creator wins);
    return the sha256 of its bytes (the prev of the first own seq).

    ``replaces``: the ETag of a deleted session's manifest that ``claim`` gave, with
    ``manifest.base`` its fence: the PUT replaces it only if it is still that one (one creator
    wins), then its salt object and tombstone go. Its events and fence stay below the base
    until gc removes them (``FENCE_HOLD`` after this manifest)."""
    sid = manifest.sid
    data = encode_manifest(manifest)
    key = ctx.layout.manifest_key(sid)
    if replaces is None:
        try:
            ctx.create_once(key, data, ctx.tags_for(manifest.retention))
        except ObjectExists:
            raise SessionExistsError(sid) from None
        return sha256_hex(data)
    try:
        ctx.backend.replace(key, data, etag=replaces, tags=ctx.tags_for(manifest.retention))
    except PreconditionFailed:
        try:
            ours = ctx.backend.get(key, max_bytes=MAX_SMALL_OBJECT_BYTES).data == data  # a retried PUT that landed
        except ObjectMissing:
            ours = False
        if not ours:
            raise SessionExistsError(sid, "was created again meanwhile") from None
    ctx.backend.delete_many([salt_key(ctx, sid), ctx.layout.tombstone_key(sid)])
    return sha256_hex(data)
