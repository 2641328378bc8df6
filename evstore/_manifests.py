"""A session's birth: its manifest, created once with ``If-None-Match`` in an empty prefix."""

from __future__ import annotations

import os

from ._backends import ObjectExists
from ._codec import FORMAT_VERSION, RETENTIONS, ForkRef, Manifest, Retention, b64encode, encode_manifest, format_ts, sha256_hex
from ._context import StoreContext
from ._crypto import new_salt
from ._errors import InvalidInputError, SessionExistsError, SessionExpiredError
from ._ids import parse_seq
from ._read import first_name, read_manifest


def new_manifest(ctx: StoreContext, session_id: str, retention: Retention, parent: ForkRef | None) -> Manifest:
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
    )


def require_free(ctx: StoreContext, session_id: str) -> None:
    """A new session may only start in an empty prefix: never over the remnants of an
    expired or deleted one (their events would collide with its seqs)."""
    first = first_name(ctx, session_id)
    if first is None:
        return
    if read_manifest(ctx, session_id) is not None:
        raise SessionExistsError(session_id)  # alive, or deleted and kept for its forks
    if parse_seq(first) is not None:
        raise SessionExpiredError(session_id, "its manifest is gone but events remain (gc removes them)")
    raise SessionExistsError(session_id, "was removed but left objects that gc removes")


def create_manifest(ctx: StoreContext, manifest: Manifest) -> str:
    """PUT the manifest if the id is free; return the sha256 of its bytes (the prev of seq 1)."""
    sid = manifest.sid
    require_free(ctx, sid)
    data = encode_manifest(manifest)
    try:
        ctx.create_once(ctx.layout.manifest_key(sid), data, ctx.tags_for(manifest.retention))
    except ObjectExists:
        raise SessionExistsError(sid) from None
    return sha256_hex(data)
